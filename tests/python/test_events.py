# SPDX-License-Identifier: MIT
"""KV events (kvpoold --kv-events): a real kvpoold publishes, a subscriber
with pyzmq and msgpack reads exactly the events a scripted sequence must
give (publish, dedup, partial tail, eviction to the host tier and to the
NVMe tier, restore, drop, drop of a namespace), sequence numbers one by
one, replay from N; vLLM's own event classes (0.33's maps, 0.23's arrays)
decode the batches."""
import importlib.util
import os
import time

import pytest

zmq = pytest.importorskip("zmq", reason="pyzmq is missing (contrib/quickstart test "
                          "installs vLLM, which brings it)")
msgpack = pytest.importorskip("msgpack", reason="msgpack is missing (.venv/bin/pip "
                              "install msgpack; contrib/quickstart test does)")

import kvpool  # noqa: E402
from conftest import GEO, TOP, free_port, running  # noqa: E402

PAGE = 2 * GEO.layers * GEO.kv_heads * GEO.head_dim * GEO.block_tokens * 2
BT = GEO.block_tokens
END = (-1).to_bytes(8, "big", signed=True)


def vhash(key):
    """A block hash as vLLM's events send it by default: the digest's last
    8 bytes as a big-endian integer (sha256: all 32 bytes are the digest)."""
    return int.from_bytes(key[-8:], "big")


class Sub:
    """A subscriber that misses nothing: it reads the PUB socket and fills a
    gap (the subscription's first moments, ZeroMQ's slow joiner) from the
    replay socket, as a router does."""

    def __init__(self, pub, replay):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(pub)
        self.replay_ep = replay
        self.batches = {}     # seq -> (topic, payload)
        self.live = set()     # seqs that came on the PUB socket

    def collect(self, upto, seconds=10):
        """Batches 0..upto, by sequence number, as (topic, payload)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not all(s in self.batches for s in range(upto + 1)):
            if self.sub.poll(100):
                topic, seq, payload = self.sub.recv_multipart()
                s = int.from_bytes(seq, "big")
                self.batches[s] = (topic, payload)
                self.live.add(s)
            elif self.replay_ep:
                for s, topic, payload in dealer_replay(self.ctx, self.replay_ep, 0):
                    self.batches.setdefault(s, (topic, payload))
        missing = [s for s in range(upto + 1) if s not in self.batches]
        assert not missing, "batches %s never came" % missing
        return [self.batches[s] for s in range(upto + 1)]

    def drain(self, quiet=1.0):
        """What the PUB socket still brings, until it has been quiet for
        quiet seconds (the publisher is gone: no replay)."""
        while self.sub.poll(int(quiet * 1000)):
            topic, seq, payload = self.sub.recv_multipart()
            self.batches[int.from_bytes(seq, "big")] = (topic, payload)

    def close(self):
        self.sub.close(0)
        self.ctx.term()


def dealer_replay(ctx, endpoint, start):
    """vLLM's replay protocol from a DEALER: [b"", start (8 bytes)] out,
    [b"", topic, seq, payload] per batch back, then [b"", b"", -1, b""]."""
    d = ctx.socket(zmq.DEALER)
    d.connect(endpoint)
    try:
        d.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            assert d.poll(10000), "no replay answer from %s" % endpoint
            frames = d.recv_multipart()
            assert len(frames) == 4 and frames[0] == b"", frames
            _, topic, seq, payload = frames
            if seq == END:
                assert topic == b"" and payload == b""
                return out
            out.append((int.from_bytes(seq, "big"), topic, payload))
    finally:
        d.close(0)


def decode(payload):
    """A batch as plain data: (ts, [event dicts or arrays], dp_rank)."""
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    assert isinstance(batch, list) and len(batch) == 3, batch
    return batch


def events_of(batches):
    """The events of batches in order, each as a tuple that says it all:
    ("stored", medium, hashes, parent, tokens) / ("removed", medium, hashes)
    / ("cleared",)."""
    out = []
    for topic, payload in batches:
        ts, evs, rank = decode(payload)
        assert rank is None and abs(ts - time.time()) < 60
        for e in evs:
            assert isinstance(e, dict), e
            if e["type"] == "BlockStored":
                assert e["block_size"] == BT and e["lora_id"] is None and e["lora_name"] is None
                out.append(("stored", e["medium"], e["block_hashes"], e["parent_block_hash"],
                            e["token_ids"]))
            elif e["type"] == "BlockRemoved":
                out.append(("removed", e["medium"], e["block_hashes"]))
            else:
                assert e == {"type": "AllBlocksCleared"}, e
                out.append(("cleared",))
    return out


def per_block(evs):
    """events_of()'s events one block each: how many blocks one event
    carries is the batching's business (a chain stored within a window is
    one event)."""
    out = []
    for e in evs:
        if e[0] == "stored":
            n = len(e[2])
            per = len(e[4]) // n if e[4] else 0
            parent = e[3]
            for i, x in enumerate(e[2]):
                out.append(("stored", e[1], x, parent, e[4][i * per:(i + 1) * per]))
                parent = x
        elif e[0] == "removed":
            out += [("removed", e[1], x) for x in e[2]]
        else:
            out.append(e)
    return out


def endpoints(d):
    return "ipc://%s/events" % d, "ipc://%s/replay" % d


def start(tmp_path, *extra):
    pub, rep = endpoints(tmp_path)
    return running(["--kv-events", pub, "--kv-events-replay", rep, *extra]), pub, rep


def batches_now(d):
    return d.stats()["events"]["batches"]


def wait_batches(d, n):
    return d.wait_for(lambda st: st["events"]["batches"] >= n, "%d event batches" % n)


def publish_chain(c, toks):
    """Publish the full blocks of toks, with their token ids, and release
    them (cached); their keys."""
    keys = c.block_keys(toks)
    pages = c.alloc(len(keys))
    c.publish(pages, keys, tokens=toks)
    c.release(pages)
    return keys


def settled(d):
    """Batches sent once everything done so far went out (a batch is
    queued in the loop turn of the request that made it, and counted in
    queued_bytes until the publisher sent it)."""
    st = d.wait_for(lambda st: st["events"]["queued_bytes"] == 0, "the queue empty")
    return st["events"]["batches"]


def run_tiers_script(d, sub, ns="ev"):
    """Publish, dedup, partial, evict, restore on d; the block hashes, the
    tokens and the batches the subscriber got."""
    with kvpool.Client(d.sock, ns, GEO) as a, kvpool.Client(d.sock, ns, GEO) as b:
        toks = list(range(1000, 1000 + 3 * BT))
        keys = a.block_keys(toks)
        pages = a.alloc(3)
        a.publish(pages, keys, tokens=toks)
        wait_batches(d, 1)
        # dedup: B publishes the same blocks and gets A's pages: no event
        bp = b.alloc(3)
        canon = b.publish(bp, keys, tokens=toks)
        assert canon == pages
        b.release(bp + canon)
        # a partial tail: no event (vLLM sends none until a block is full)
        tail = a.alloc(1)
        a.publish_partial(tail[0], list(range(5)), parent=keys[2])
        a.release(pages + tail)
        assert a.stats()["events"]["batches"] == 1
        # all four cached pages out: the three blocks into the host tier
        # (two slots), the oldest of it on to the NVMe tier
        assert a.evict(max=4) == 4
        wait_batches(d, 2)
        # back into the pool: from the host tier (its slots go) and from
        # the NVMe tier (its slot stays as the block's copy)
        got, _ = a.acquire(keys)
        assert len(got) == 3
        a.release(got)
        n = settled(d)
    return keys, toks, sub.collect(n - 1)


def tiered(tmp_path, *extra):
    spill = tmp_path / "spill"
    spill.mkdir()
    return start(tmp_path, "--host-tier-size", str(2 * PAGE), "--spill-dir", str(spill),
                 "--spill-size", "1M", *extra)


def test_events_tiers_exact(tmp_path):
    """Publish, dedup, partial, evict to host then NVMe, restore: exactly
    vLLM's events, tier by tier, sequence numbers one by one, replay."""
    ctx, pub, rep = tiered(tmp_path)
    with ctx as d:
        sub = Sub(pub, rep)
        keys, toks, batches = run_tiers_script(d, sub)
        h = [vhash(k) for k in keys]
        t = [toks[i * BT:(i + 1) * BT] for i in range(3)]
        evs = events_of(batches)
        # publish: one event for the chain, as vLLM sends a request's
        assert evs[0] == ("stored", "CPU", h, None, toks)
        assert per_block(evs[1:]) == [
            # evict: leaves first; a block leaves the pool for the host tier
            ("removed", "CPU", h[2]), ("stored", "CPU", h[2], h[1], t[2]),
            ("removed", "CPU", h[1]), ("stored", "CPU", h[1], h[0], t[1]),
            # the host tier is full: its oldest block goes down to NVMe
            ("removed", "CPU", h[2]), ("stored", "STORAGE", h[2], h[1], t[2]),
            ("removed", "CPU", h[0]), ("stored", "CPU", h[0], None, t[0]),
            # restore: from the host tier into the pool ...
            ("removed", "CPU", h[0]), ("stored", "CPU", h[0], None, t[0]),
            ("removed", "CPU", h[1]), ("stored", "CPU", h[1], h[0], t[1]),
            # ... and from NVMe, whose copy stays (no removal)
            ("stored", "CPU", h[2], h[1], t[2]),
        ]
        n = len(batches)
        assert {tp for tp, _ in batches} == {b"kv@%s|ev@test/python" % os.uname()[1].encode()}
        assert sub.live, "no batch came on the PUB socket"
        # replay from N: exactly the batches from N on, byte for byte
        for k in range(n + 1):
            got = dealer_replay(sub.ctx, rep, k)
            assert [s for s, _, _ in got] == list(range(k, n))
            assert [(tp, p) for _, tp, p in got] == batches[k:]
        assert d.stats()["events"]["replays"] >= 4
        sub.close()


def test_events_drop_and_clear(tmp_path):
    """Without tiers an eviction drops blocks: BlockRemoved. Dropping a
    namespace: AllBlocksCleared on its topic, or BlockRemoved of its
    blocks when another namespace shares the topic (the admin's rule gives
    both vLLM's kv@HOST@MODEL)."""
    ctx, pub, rep = start(tmp_path, "--kv-events-ns-topic", "one,two kv@{host}@{model}")
    with ctx as d:
        sub = Sub(pub, rep)
        toks = list(range(7, 7 + 2 * BT))
        for ns in ("one", "two"):
            with kvpool.Client(d.sock, ns, GEO) as c:
                keys = publish_chain(c, toks)
        h = [vhash(k) for k in keys]
        with kvpool.Client(d.sock) as admin:
            assert admin.evict(namespace="two", max=1) == 1
            admin.drop_namespace("one")
            admin.drop_namespace("two")
        evs = events_of(sub.collect(settled(d) - 1))
        sub.close()
    assert evs == [
        ("stored", "CPU", h, None, toks),           # one
        ("stored", "CPU", h, None, toks),           # two: the same topic
        ("removed", "CPU", [h[1]]),                 # two: evicted, no tier
        ("removed", "CPU", [h[0], h[1]]),           # one dropped: two shares it
        ("cleared",),                               # two dropped: the last
    ]


def test_events_vllm_decodes_both_encodings(tmp_path):
    """vLLM 0.33's own classes decode the map encoding; vLLM 0.23's (the
    array encoding) decode --kv-events-format array."""
    msgspec = pytest.importorskip("msgspec", reason="vLLM is not installed")
    try:
        from vllm.distributed import kv_events as new
    except ImportError as e:
        pytest.skip("vLLM does not import here: %s" % e)
    old_path = os.path.join(TOP, ".venv", "vllm-0.23.0-kv_events.py")
    if not os.path.exists(old_path):
        pytest.skip("%s is missing (contrib/quickstart test fetches it)" % old_path)
    spec = importlib.util.spec_from_file_location("vllm_0_23_kv_events", old_path)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    assert "array_like=True" in open(old_path).read().split("class BlockStored")[0]

    for fmt, mod in (("map", new), ("array", old)):
        sub_dir = tmp_path / fmt
        sub_dir.mkdir()
        ctx, pub, rep = tiered(sub_dir, "--kv-events-format", fmt)
        with ctx as d:
            sub = Sub(pub, rep)
            keys, toks, batches = run_tiers_script(d, sub)
            sub.close()
        dec = msgspec.msgpack.Decoder(type=mod.KVEventBatch)
        evs = [e for _, p in batches for e in dec.decode(p).events]
        blocks = {}
        for e in evs:
            blocks[type(e).__name__] = blocks.get(type(e).__name__, 0) + len(
                getattr(e, "block_hashes", []))
        assert blocks == {"BlockStored": 10, "BlockRemoved": 6}, evs
        first = evs[0]
        assert isinstance(first, mod.BlockStored)
        assert first.block_hashes == [vhash(k) for k in keys]
        assert first.token_ids == toks and first.block_size == BT
        assert first.parent_block_hash is None and first.medium == "CPU"
        assert {e.medium for e in evs} == {"CPU", "STORAGE"}
        if fmt == "array":
            raw = decode(batches[0][1])[1][0]
            assert isinstance(raw, list) and raw[0] == "BlockStored", raw
            # and the map classes cannot read it: the option matters
            with pytest.raises(msgspec.ValidationError):
                msgspec.msgpack.Decoder(type=new.KVEventBatch).decode(batches[0][1])


@pytest.mark.parametrize("scheme,digest", [(kvpool.Scheme.VLLM_SHA256, 32),
                                           (kvpool.Scheme.VLLM_XXHASH_CBOR, 16)])
def test_events_hashes_as_vllm_sends_them(tmp_path, scheme, digest):
    """int: the digest's last 8 bytes (sha256: 32 bytes, xxhash: 16);
    bytes: the digest itself."""
    for how in ("int", "bytes"):
        sub_dir = tmp_path / how
        sub_dir.mkdir()
        ctx, pub, rep = start(sub_dir, "--kv-events-hashes", how)
        with ctx as d:
            sub = Sub(pub, rep)
            with kvpool.Client(d.sock, "h", GEO, key_scheme=scheme) as c:
                keys = publish_chain(c, list(range(2 * BT)))
            wait_batches(d, 1)
            ev = decode(sub.collect(0)[0][1])[1][0]
            sub.close()
        want = [k[:digest] for k in keys]
        if how == "int":
            want = [int.from_bytes(w[-8:], "big") for w in want]
        assert ev["block_hashes"] == want


def test_events_topic_template(tmp_path):
    """{host}, {model} (a connector's engine word skipped) and {ns}."""
    ctx, pub, rep = start(tmp_path, "--kv-events-topic", "kvpool@{host}@{model}@{ns}|")
    geo = kvpool.Geometry(GEO.layers, GEO.kv_heads, GEO.head_dim, GEO.block_tokens, GEO.dtype,
                          "vllm org/Model-8B float16 sha256 b16 tp0/1")
    with ctx as d:
        sub = Sub(pub, rep)
        with kvpool.Client(d.sock, "vllm.Model-8B.abc", geo) as c:
            pages = c.alloc(1)
            c.publish(pages, c.block_keys(list(range(BT))))
            c.release(pages)
        wait_batches(d, 1)
        topic, payload = sub.collect(0)[0]
        sub.close()
    assert topic == ("kvpool@%s@org/Model-8B@vllm.Model-8B.abc|" % os.uname()[1]).encode()
    # published without token ids: the event says so with an empty list
    assert decode(payload)[1][0]["token_ids"] == []


def test_events_full_queue_drops_never_blocks(tmp_path):
    """A queue too small for a batch: batches are dropped and counted, the
    sequence numbers they had are skipped, clients go on."""
    ctx, pub, rep = start(tmp_path, "--kv-events-queue", "1")
    with ctx as d:
        with kvpool.Client(d.sock, "q", GEO) as c:
            for i in range(20):
                pages = c.alloc(1)
                c.publish(pages, c.block_keys(list(range(i, i + BT))))
                c.release(pages)
            st = c.stats()["events"]
        assert st["dropped_batches"] >= 1 and st["dropped_events"] >= st["dropped_batches"]
        assert st["batches"] == 0 and st["queued_bytes"] == 0
        assert d.read_log().count("kv events: the queue of 1 bytes is full") == 1


def test_events_stop_and_warm_restart(tmp_path):
    """A stop clears the topic (the pool is gone); a warm restart tells the
    blocks its NVMe tier brought back."""
    spill = tmp_path / "spill"
    spill.mkdir()
    pub, rep = endpoints(tmp_path)
    args = ["--kv-events", pub, "--kv-events-replay", rep, "--spill-dir", str(spill),
            "--spill-size", "1M"]
    with running(args) as d:
        sub = Sub(pub, rep)
        toks = list(range(2 * BT))
        with kvpool.Client(d.sock, "w", GEO) as c:
            keys = publish_chain(c, toks)
        wait_batches(d, 1)
        sub.collect(0)
    # the stop's save wrote both blocks to NVMe, then the topic was cleared
    sub.drain()
    assert sorted(sub.batches) == list(range(len(sub.batches)))
    evs = events_of([sub.batches[s] for s in sorted(sub.batches)])
    sub.close()
    h = [vhash(k) for k in keys]
    assert evs[0] == ("stored", "CPU", h, None, toks)
    assert evs[-1] == ("cleared",)
    with running(args) as d:
        sub = Sub(pub, rep)
        evs = events_of(sub.collect(0))
        sub.close()
    assert sorted(x for e in evs for x in e[2]) == sorted(h)
    assert {e[:2] for e in evs} == {("stored", "STORAGE")}


def test_events_refused_endpoint(tmp_path):
    """A bad or busy endpoint stops the start, naming it."""
    import socket
    import subprocess
    from conftest import tool
    from conftest import bind_free
    busy = socket.socket()
    port = bind_free(busy)
    busy.listen(1)
    for ep in ("tcp://127.0.0.1:%d" % port, "nonsense://x"):
        r = subprocess.run([tool("daemon/kvpoold"), "--foreground", "--socket",
                            str(tmp_path / "s.sock"), "--kv-events", ep],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "--kv-events %s: cannot bind" % ep in r.stderr, r.stderr
    busy.close()



def test_events_remote_medium(tmp_path):
    """The remote tier (--remote) is a medium of its own: a block is
    announced in REMOTE once Redis answered its SET, or once it came back
    from there; a block that leaves the index leaves every medium."""
    import shutil
    import subprocess
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is missing (Debian: apt-get install redis-server)")
    script = os.path.join(TOP, "tests", "redis-cluster.sh")
    port = free_port()
    subprocess.run(["sh", script, "single", str(tmp_path / "redis"), str(port)], check=True)
    url = "redis://127.0.0.1:%d" % port
    key = tmp_path / "remote.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    try:
        ctx, pub, rep = start(tmp_path, "--remote", url, "--remote-key-file", str(key),
                              "--remote-write", "through")
        with ctx as d:
            sub = Sub(pub, rep)
            with kvpool.Client(d.sock, "ev", GEO) as a:
                toks = list(range(500, 500 + 3 * BT))
                keys = publish_chain(a, toks)
                d.wait_for(lambda st: st["remote"]["puts"] == 3 and
                           st["remote"]["inflight"] == 0, "3 pages in Redis")
                assert a.evict("ev") == 3     # no local tier below: dropped
                # another client of the same machine: fetched back from Redis
                got, _ = a.acquire(keys, tokens=toks)
                assert len(got) == 3
                a.release(got)
            st = d.stats()
            assert st["remote"]["restored"] == 3 and st["remote"]["corrupt"] == 0
            n = settled(d)
            h = [vhash(k) for k in keys]
            t = [toks[i * BT:(i + 1) * BT] for i in range(3)]
            evs = per_block(events_of(sub.collect(n - 1)))
            stored = [("stored", "CPU", h[i], h[i - 1] if i else None, t[i]) for i in range(3)]
            remote = [("stored", "REMOTE", h[i], h[i - 1] if i else None, t[i])
                      for i in range(3)]
            assert evs[:3] == stored
            assert sorted(evs[3:6]) == sorted(remote)   # as the SETs were answered
            # evicted leaves first: each leaves the pool and the index
            assert evs[6:12] == [("removed", m, h[i]) for i in (2, 1, 0)
                                 for m in ("CPU", "REMOTE")]
            # fetched: in the pool again, and known to be in Redis
            assert sorted(evs[12:]) == sorted(stored + remote)
            sub.close()
    finally:
        subprocess.run(["sh", script, "stop", str(tmp_path / "redis")])
