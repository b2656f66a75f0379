# SPDX-License-Identifier: MIT
"""The Python package against a real kvpoold: pages, sharing, views
without copies, errors, threads, fork, garbage collection."""
import contextlib
import errno
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvpool
from conftest import GEO, TOP, Daemon, tool

GOLDEN = os.path.join(TOP, "tests", "golden", "keys_vllm_algos.txt")


def fill(arr, key):
    """harness_fill()'s bytes for key: word i = key[0:8] ^ (i * golden ratio)."""
    w = arr.reshape(-1).view(np.uint64)
    x = np.uint64(int.from_bytes(key[:8], "little"))
    w[:] = x ^ (np.arange(w.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))


def holds(arr, key):
    w = np.ascontiguousarray(arr).reshape(-1).view(np.uint64)
    x = np.uint64(int.from_bytes(key[:8], "little"))
    return bool(np.array_equal(w, x ^ (np.arange(w.size, dtype=np.uint64) *
                                        np.uint64(0x9E3779B97F4A7C15))))


def test_info_and_geometry(client):
    info = client.info()
    assert info["page_bytes"] == GEO.page_bytes == 16384
    assert info["block_tokens"] == 16
    assert info["key_scheme"] == kvpool.Scheme.VLLM_SHA256  # vLLM's default
    assert info["root"] == kvpool.key_root(kvpool.Scheme.VLLM_SHA256,
                                           os.environ.get("PYTHONHASHSEED", "vllm-none-hash"))


def test_page_views_are_the_mapping_itself(client):
    (p,) = client.alloc(1)
    view = client.page(p)
    a = client.page_array(p)
    assert a.shape == GEO.page_shape and a.dtype == np.float16
    assert a.ctypes.data == view.address  # no copy
    b = client.page_array(p)
    a[1, 0, 1, 3, 5] = 2.5  # layer 1, K, head 1, token 3, d 5
    assert b[1, 0, 1, 3, 5] == 2.5
    m = client.page_view(p)
    assert m.nbytes == GEO.page_bytes and not m.readonly
    # the element sits where docs/kv-layout.md puts it
    idx = (((1 * 2 + 0) * 2 + 1) * 16 + 3) * 64 + 5
    assert np.frombuffer(m, dtype=np.float16)[idx] == 2.5
    del a, b, m
    client.release([p])


def test_publish_acquire_dedup_and_partial(client, daemon):
    toks = np.arange(40, dtype=np.uint32)  # two blocks and 8 tokens
    keys = client.block_keys(toks)
    assert len(keys) == 2 and all(len(k) == 32 for k in keys)
    pages = client.alloc(3)
    for p, k in zip(pages, keys):
        fill(client.page_array(p), k)
    assert client.publish(pages[:2], keys) == pages[:2]
    assert client.publish_partial(pages[2], toks[32:], parent=keys[1]) == pages[2]
    client.release(pages)
    got = client.acquire(keys, toks)
    assert len(got.pages) == 2
    assert got.partial is not None and got.partial[1] == 8
    for p, k in zip(got.pages, keys):
        assert holds(client.page_array(p), k)
    # a second copy of the same keys is stored once
    mine = client.alloc(2)
    assert client.publish(mine, keys) == got.pages
    client.release(mine + got.pages + [got.partial[0]] + got.pages)
    st = daemon.stats()
    assert st["pages_cached"] == 3 and st["pages_private"] == 0


def test_remote_policy_and_counters_without_a_remote_tier(client, daemon):
    """set_remote_policy() rides on acquire(); without --remote it changes
    nothing, and stats() says there is no remote tier."""
    keys = client.block_keys(np.arange(16, dtype=np.uint32))
    pages = client.alloc(1)
    client.publish(pages, keys)
    client.release(pages)
    for rate, cut in ((0, kvpool.REMOTE_NEVER), (1000, 0), (0, 0)):
        assert client.set_remote_policy(prefill_rate=rate, max_us=cut) is None
        got = client.acquire(keys)
        assert len(got.pages) == 1
        client.release(got.pages)
    with pytest.raises(ValueError, match="prefill_rate -1"):
        client.set_remote_policy(prefill_rate=-1)
    with pytest.raises(ValueError, match="max_us 4294967296"):
        client.set_remote_policy(max_us=2 ** 32)
    r = daemon.stats()["remote"]
    assert r["enabled"] == 0 and r["gets"] == 0 and r["skipped_slow"] == 0


def test_host_pages_asked_for_are_what_the_host_backend_gives(daemon):
    """memory=Memory.HOST (the connectors ask it) on a host daemon: the
    namespace's pages are host memory, viewed in place; a memory kvpoold
    does not know is refused, saying which values it takes."""
    with kvpool.Client(daemon.sock, "engine", GEO, memory=kvpool.Memory.HOST) as c:
        assert c.info()["backend"] == kvpool._kvpool.BACKEND_HOST
        (p,) = c.alloc(1)
        c.kv_array()[c.page_index(p)] = 2.0
        assert np.all(c.page_array(p) == 2.0)
        c.release([p])
        with kvpool.Client(daemon.sock, "engine", GEO) as d:  # asking nothing joins it
            assert d.info()["backend"] == kvpool._kvpool.BACKEND_HOST
    st = daemon.stats()
    assert [n["backend"] for n in st["namespaces"]] == [kvpool._kvpool.BACKEND_HOST]
    assert st["host_pool_bytes"] == 0 and st["max_slabs"] == 8  # 8M in 1M slabs
    with pytest.raises(kvpool.InvalidArgument, match="memory 7 is not 0 .* or 1"):
        kvpool.Client(daemon.sock, "other", GEO, memory=7)


def test_acquire_says_where_each_block_came_from(tmp_path):
    # the host tier holds two pages, the NVMe tier the rest
    page = 2 * GEO.layers * GEO.kv_heads * GEO.head_dim * GEO.block_tokens * 2
    spill = tmp_path / "spill"
    spill.mkdir()
    d = Daemon(["--host-tier-size", str(2 * page), "--spill-dir", str(spill),
                "--spill-size", "1M"])
    try:
        with kvpool.Client(d.sock, "src", GEO) as a:
            toks = list(range(1000, 1000 + 4 * GEO.block_tokens))
            keys = a.block_keys(toks)
            pages = a.alloc(4)
            a.publish(pages, keys)
            a.release(pages)
            got = a.acquire(keys, sources=True)
            assert got.sources == ["pool"] * 4
            one = a.acquire(keys[:1])
            assert one.sources is None  # not asked
            a.release(got.pages + one.pages)
            # out of the pool: the two leaves' parents into the host tier,
            # the oldest of the host tier's on to NVMe (docs/tiers)
            assert a.evict(max=4) == 4
            d.wait_for(lambda st: st["pages_cached"] == 0, "the evictions")
            got = a.acquire(keys, sources=True)
            assert len(got.pages) == 4
            assert sorted(got.sources) == ["host", "host", "nvme", "nvme"], got.sources
            pages, partial = got  # still the two-tuple it always was
            a.release(pages)
            assert a.acquire(keys, sources=True).sources == ["pool"] * 4  # back in the pool
            # a probe has nothing to name the sources of; an older
            # kvpoold has no sources: ProtocolNotSupported (test_upgrade)
        d.stop()
    finally:
        d.discard()


def test_cow_and_retain(client):
    (p,) = client.alloc(1)
    client.page_array(p)[:] = 1.0
    (q,) = client.cow([p])
    assert q != p and np.all(client.page_array(q) == 1.0)
    client.page_array(q)[:] = 3.0
    assert np.all(client.page_array(p) == 1.0)
    client.retain([p])
    client.release([p, p, q])
    with pytest.raises(kvpool.Stale):
        client.release([p])


def test_keys_match_vllms_vectors():
    """Every plain chain of the golden file (vLLM 0.33.0's own hashes),
    through the binding, token ids given as a NumPy array."""
    algos = {"sha256": kvpool.Scheme.VLLM_SHA256, "sha256_cbor": kvpool.Scheme.VLLM_SHA256_CBOR,
             "xxhash": kvpool.Scheme.VLLM_XXHASH, "xxhash_cbor": kvpool.Scheme.VLLM_XXHASH_CBOR}
    n = 0
    with open(GOLDEN) as f:
        for line in f:
            fields = line.split()
            if fields[0] == "vroot":
                seed = "" if fields[2] == "-" else bytes.fromhex(fields[2]).decode()
                assert kvpool.key_root(algos[fields[1]], seed).hex() == fields[3]
            if fields[0] != "vchain" or fields[5] != "-":
                continue
            scheme = algos[fields[1]]
            root = kvpool.key_root(scheme, bytes.fromhex(fields[2]).decode())
            toks = np.array([int(t) for t in fields[4].split(",")], dtype=np.uint32)
            keys = kvpool.key_chain(scheme, root, toks, int(fields[3]))
            assert [k.hex() for k in keys] == fields[6].split(":")
            n += 1
    assert n >= 24
    assert kvpool.scheme_of_vllm("xxhash_cbor") == kvpool.Scheme.FAST


def test_bad_input_is_refused_and_changes_nothing(client, daemon):
    before = daemon.stats()
    with pytest.raises(kvpool.Stale) as e:
        client.release([0x12345678])
    assert e.value.errno == 116 and "0x12345678" in str(e.value)
    with pytest.raises(kvpool.Stale):
        client.page(0x12345678)
    with pytest.raises(TypeError, match="uint32"):
        client.block_keys(np.zeros(32, dtype=np.float32))
    with pytest.raises(ValueError, match="token id 1"):
        client.block_keys([1, -5])
    with pytest.raises(ValueError, match="32 bytes"):
        client.acquire([b"short"])
    with pytest.raises(kvpool.InvalidArgument):
        client.alloc(-1)
    with pytest.raises(kvpool.NoSpace) as e:
        client.alloc(10 ** 6)
    assert "pages" in str(e.value)
    after = daemon.stats()
    for k in ("pages_private", "pages_shared", "pages_cached", "pages_free"):
        assert after[k] == before[k], k
    # another geometry in the same namespace
    other = kvpool.Geometry(3, 2, 64, 16, kvpool.DType.F16, "test/python")
    with pytest.raises(kvpool.Mismatch, match="layers"):
        kvpool.Client(daemon.sock, "py", other)


def test_no_daemon_says_where_it_looked(tmp_path):
    path = str(tmp_path / "nothing.sock")
    with pytest.raises(kvpool.DaemonGone) as e:
        kvpool.Client(path, "py", GEO)
    assert path in str(e.value)


def test_info_names_the_backend_and_the_key_scheme(client):
    i = client.info()
    assert i["backend"] is kvpool.Backend.HOST and i["backend"].name == "HOST"
    assert i["backend"] == kvpool._kvpool.BACKEND_HOST  # still the number
    assert isinstance(i["key_scheme"], kvpool.Scheme)
    assert i["key_scheme"].name == "VLLM_SHA256"  # kvpoold's default, as vLLM's


def _killed(d):
    """SIGKILL daemon d: its clients find it gone."""
    d.proc.kill()
    d.proc.wait()


@contextlib.contextmanager
def _lives():
    """A daemon, then its restarts on the same socket (lives.append(
    Daemon(sock=...))): the last is stopped cleanly (and checked) when the
    block succeeds, every one is discarded."""
    lives = [Daemon()]
    try:
        yield lives
        lives[-1].stop()
    finally:
        for d in lives:
            d.discard()


def test_reconnect_after_the_daemon_restarts():
    with _lives() as lives:
        c = kvpool.Client(lives[0].sock, "py", GEO)
        c.alloc(1)
        _killed(lives[0])
        with pytest.raises(kvpool.DaemonGone):
            c.stats()
        with pytest.raises(kvpool.DaemonGone):  # nobody there yet
            c.reconnect()
        lives.append(Daemon(sock=lives[0].sock))  # a restart on the same socket
        c.reconnect()
        (p,) = c.alloc(1)
        assert lives[1].stats()["pages_private"] == 1  # the lost session's page is not
        c.release([p])
        c.close()


def test_auto_reconnect_warns_once_and_comes_back(caplog):
    caplog.set_level("INFO", logger="kvpool")
    with _lives() as lives:
        c = kvpool.Client(lives[0].sock, "py", GEO, reconnect=True, retry=0)
        c.alloc(1)
        _killed(lives[0])
        for _ in range(3):  # the loss, then failed connects: all DaemonGone
            with pytest.raises(kvpool.DaemonGone):
                c.alloc(1)
        went = [r for r in caplog.records if "went away" in r.getMessage()]
        assert len(went) == 1 and went[0].levelname == "WARNING", caplog.text
        assert "leases are gone" in went[0].getMessage()
        lives.append(Daemon(sock=lives[0].sock))
        (p,) = c.alloc(1)  # connected again by itself
        back = [r for r in caplog.records if "connected to kvpoold again" in r.getMessage()]
        assert len(back) == 1, caplog.text
        assert lives[1].stats()["pages_private"] == 1
        c.release([p])
        c.close()


def test_without_reconnect_a_lost_daemon_stays_lost():
    with _lives() as lives:
        c = kvpool.Client(lives[0].sock, "py", GEO)
        _killed(lives[0])
        lives.append(Daemon(sock=lives[0].sock))
        for _ in range(2):  # as documented: until reconnect()
            with pytest.raises(kvpool.DaemonGone):
                c.alloc(1)
        c.close()


def test_a_stopped_daemon_times_a_call_out_and_the_client_connects_again(daemon):
    c = kvpool.Client(daemon.sock, "py", GEO, timeout=0.3)
    c.alloc(2)
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(kvpool.DaemonGone) as e:
            c.alloc(1)
        took = time.monotonic() - t0
        with pytest.raises(kvpool.DaemonGone) as again:  # at once, saying so again
            c.stats()
        t0 = time.monotonic()
        with pytest.raises(kvpool.DaemonGone) as late:  # a connect too
            kvpool.Client(daemon.sock, "py", GEO, timeout=0.3)
        connecting = time.monotonic() - t0
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert 0.29 <= took < 3, took
    assert e.value.errno == errno.ETIMEDOUT
    assert "kvpoold did not answer ALLOC within 300 ms" in str(e.value)
    assert "did not answer ALLOC" in str(again.value)
    assert 0.29 <= connecting < 3, connecting
    assert late.value.errno == errno.ETIMEDOUT
    assert "did not answer HELLO within 300 ms" in str(late.value)
    daemon.wait_for(lambda st: st["pages_private"] == 0, "the closed connection's leases going")
    c.reconnect()  # the limit holds in the new session too
    assert len(c.alloc(1)) == 1
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(kvpool.DaemonGone):
            c.stats()
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    c.close()
    with pytest.raises(ValueError):
        kvpool.Client(daemon.sock, "py", GEO, timeout=-1)


def test_closed_client_and_live_views(daemon):
    c = kvpool.Client(daemon.sock, "py", GEO)
    (p,) = c.alloc(1)
    a = c.page_array(p)
    with pytest.raises(BufferError, match="1 page view"):
        c.close()
    assert not c.closed
    del a
    c.close()
    assert c.closed
    with pytest.raises(kvpool.NotConnected):
        c.alloc(1)
    c.close()  # twice is fine
    daemon.wait_for(lambda st: st["pages_private"] == 0, "the closed client's leases going")


def test_garbage_collection_closes_the_connection(daemon):
    c = kvpool.Client(daemon.sock, "py", GEO)
    c.alloc(5)
    assert daemon.stats()["pages_private"] == 5
    del c
    gc.collect()
    daemon.wait_for(lambda st: st["pages_private"] == 0 and
                    st["namespaces"][0]["clients"] == 0, "the collected client's disconnect")


def test_threads_share_one_client(client, daemon):
    errors = []

    def work():
        try:
            for _ in range(200):
                client.release(client.alloc(3))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert daemon.stats()["pages_private"] == 0


def test_a_client_is_refused_after_fork(client):
    pid = os.fork()
    if pid == 0:
        try:
            client.alloc(1)
            os._exit(1)
        except RuntimeError as e:
            os._exit(0 if "fork" in str(e) else 2)
        except BaseException:  # noqa: BLE001
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    client.release(client.alloc(1))  # the parent's still works


def test_sigkill_loses_the_leases_at_once(daemon):
    code = ("import sys, time, kvpool\n"
            "from conftest import GEO\n"
            "c = kvpool.Client(sys.argv[1], 'py', GEO)\n"
            "c.alloc(7)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen([sys.executable, "-c", code, daemon.sock], stdout=subprocess.PIPE,
                         env=env, cwd=os.path.dirname(os.path.abspath(__file__)))
    assert p.stdout.readline().strip() == b"ready"
    assert daemon.stats()["pages_private"] == 7
    p.kill()
    p.wait()
    daemon.wait_for(lambda st: st["pages_private"] == 0, "the killed client's leases going",
                    seconds=2)


def test_readonly_views(daemon):
    with kvpool.Client(daemon.sock, "py", GEO, readonly=True) as c:
        (p,) = c.alloc(1)
        assert c.page_view(p).readonly
        assert not c.page_array(p).flags.writeable
        c.release([p])


def test_an_array_keeps_its_pages_mapping_alive(daemon):
    c = kvpool.Client(daemon.sock, "py", GEO)
    (p,) = c.alloc(1)
    a = c.page_array(p)
    del c
    gc.collect()
    a[:] = 7.0  # the mapping is still there: the array holds its Client
    assert float(a[0, 0, 0, 0, 0]) == 7.0
    assert daemon.stats()["pages_private"] == 1
    del a
    gc.collect()
    daemon.wait_for(lambda st: st["pages_private"] == 0, "the last view's client closing")


def test_the_view_is_one_array_indexed_by_page_number(client):
    pages = client.alloc(100)  # two slabs of 64
    kv = client.kv_array()
    assert kv.shape[1:] == GEO.page_shape and kv.shape[0] >= 128
    for i, p in enumerate(pages):
        idx = client.page_index(p)
        assert client.page_at(idx) == p
        assert kv[idx].ctypes.data == client.page(p).address  # no copy
        kv[idx, 1, 0] = i  # layer 1's K of page i, through the whole view
        assert np.all(client.page_array(p)[1, 0] == i)
    last = client.page_index(pages[-1])
    del kv
    client.release(pages)
    assert client.page_at(last) is None
    with pytest.raises(kvpool.Stale):
        client.page_index(pages[0])


def test_dlpack_gives_the_page_in_place(client):
    (p,) = client.alloc(1)
    a = np.from_dlpack(client.page_dlpack(p))
    assert a.shape == GEO.page_shape and a.dtype == np.float16
    assert a.ctypes.data == client.page(p).address
    a[0, 1, 0, 2] = 4.0
    assert np.all(client.page_array(p)[0, 1, 0, 2] == 4.0)
    with pytest.raises(BufferError):
        client.close()  # the DLPack tensor holds the page's view
    del a
    client.release([p])


def test_torch_views_are_in_place(client):
    torch = pytest.importorskip("torch", reason="torch is not installed in this venv")
    pages = client.alloc(3)
    t = client.page_tensor(pages[0])
    assert tuple(t.shape) == GEO.page_shape and t.dtype == torch.float16
    assert t.data_ptr() == client.page(pages[0]).address
    d = torch.from_dlpack(client.page_dlpack(pages[1]))
    assert d.data_ptr() == client.page(pages[1]).address
    kv = client.kv_tensor()
    i = client.page_index(pages[2])
    layer1 = kv[:, 1]  # one layer of every page: a strided view
    assert layer1.data_ptr() == kv.data_ptr() + GEO.page_bytes // GEO.layers
    layer1[i] = 5.0
    assert np.all(client.page_array(pages[2])[1] == 5.0)
    assert kv[i].data_ptr() == client.page(pages[2]).address
    del t, d, kv, layer1
    client.release(pages)


def test_the_listings_and_admin_calls(client, daemon):
    pages = client.alloc(2)
    toks = list(range(16))
    (key,) = client.block_keys(toks)
    (canon,) = client.publish(pages[:1], [key])
    with kvpool.Client(daemon.sock) as admin:  # the daemon's own user: an admin
        me = [r for r in admin.list_clients() if r["namespace"] == "py"]
        assert len(me) == 1 and me[0]["leases"] == 2 and me[0]["pid"] == os.getpid()
        mine = admin.list_pages(namespace="py", client=me[0]["id"])
        assert sorted(p["handle"] for p in mine) == sorted(pages)
        top = admin.list_prefixes(namespace="py")
        assert len(top) == 1 and top[0]["key"] == key[:8] and top[0]["depth"] == 1
        with pytest.raises(kvpool.NotFound, match="no client 999"):
            admin.disconnect(999)
        admin.disconnect(me[0]["id"])
    daemon.wait_for(lambda st: st["pages_private"] == 0 and st["pages_shared"] == 0,
                    "the disconnected client's leases going")
    with pytest.raises(kvpool.DaemonGone):
        client.alloc(1)


def test_kvpoold_says_the_libraries_it_runs_with():
    """`kvpoold --version --verbose`: each library kvpoold is linked with
    and its version as the library reports it now (an OS update shows
    here without a rebuild)."""
    import re
    import subprocess
    r = subprocess.run([tool("daemon/kvpoold"), "--version", "--verbose"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("kvpoold (kvpool) "), r.stdout + r.stderr
    libs = r.stdout.split("libraries, as they report themselves now:\n", 1)[1]
    assert re.search(r"^  xxHash \d+\.\d+\.\d+$", libs, re.M), libs
    for built, line in (("libmicrohttpd", r"^  libmicrohttpd \d+\.\d+\.\d+"),
                        ("libzmq", r"^  libzmq \d+\.\d+\.\d+$"),
                        ("hiredis", r"^  libsodium \d+\.\d+\.\d+$")):
        if "built with %s" % built in r.stdout:
            assert re.search(line, libs, re.M), (line, libs)
    r = subprocess.run([tool("daemon/kvpoold"), "--version"], capture_output=True, text=True,
                       timeout=60)
    assert "libraries" not in r.stdout  # without --verbose: as before
