# SPDX-License-Identifier: MIT
"""Client.save_blocks() and Client.load_blocks(), the vLLM connector's
whole save and load in one call each (the GIL let go once), against a
real kvpoold: blocks saved from vLLM-shaped tensors come back bit for bit
into others, a block another client stored first is deduplicated, a job
whose publish fails skips its chain's later jobs and leaks no page, and a
load that cannot be copied leaves no lease."""
import time

import pytest

import kvpool
from kvpool._connector import pool_side

torch = pytest.importorskip("torch", reason="torch is not installed in this venv")

# 2 layers, 2 KV heads of 8, 4-token blocks, fp16: vLLM's [block, head,
# token, K|V] per layer
GEO = kvpool.Geometry(layers=2, kv_heads=2, head_dim=8, block_tokens=4,
                      dtype=kvpool.DType.F16, model="transfer-test")
BLOCKS = 16
ES = 2


def engine_kv(fill=True):
    raw = torch.zeros(GEO.layers, BLOCKS, GEO.kv_heads, GEO.block_tokens, 2 * GEO.head_dim,
                      dtype=torch.float16)
    if fill:
        raw.view(torch.int16).random_()
    return [raw[l] for l in range(GEO.layers)]


def sides(c, kv, to_pool):
    """save_blocks()/load_blocks()'s layout arguments for the pool of c and kv."""
    vl = []
    for t in kv:
        st = t.untyped_storage()
        vl.append((t.data_ptr(), st.data_ptr(), st.data_ptr() + st.nbytes()))
    t = kv[0]
    vs = (t.stride(0) * ES, GEO.head_dim * ES, t.stride(1) * ES, t.stride(2) * ES)
    pv, stride, pages, _ = c.view()
    pl, ps = pool_side(GEO, pv.address, pages, stride)
    geo = (GEO.kv_heads, GEO.block_tokens, GEO.head_dim * ES)
    return (pl, ps, vl, vs) + geo if to_pool else (vl, vs, pl, ps) + geo


def keys(tag, n):
    return [bytes([tag, i]) * 16 for i in range(n)]


def held(daemon):
    st = daemon.stats()
    return st["pages_private"] + st["pages_shared"]


def bits(t):
    return t.contiguous().view(torch.int16)


def test_blocks_saved_in_one_call_load_back_bit_for_bit(daemon):
    src, dst = engine_kv(), engine_kv(fill=False)
    a, b = keys(1, 3), keys(2, 2)
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        jobs = [(0, a, None, [3, 7, 1], None), (1, b, None, [9, 2], None),
                (0, keys(3, 1), a[-1], [5], None)]  # request 0's next block chains on a
        res, err = c.save_blocks(jobs, *sides(c, src, True))
        assert err is None and res == [(3, 0), (2, 0), (1, 0)]
        assert held(daemon) == 0 and daemon.stats()["pages_cached"] == 6
        got, err = c.load_blocks(a + keys(3, 1), None, [0, 4, 6, 8], *sides(c, dst, False))
        assert (got, err) == (4, None)
        for here, there in ((0, 3), (4, 7), (6, 1), (8, 5)):
            for l in range(GEO.layers):
                assert torch.equal(bits(dst[l][here]), bits(src[l][there])), (here, l)
        untouched = [i for i in range(BLOCKS) if i not in (0, 4, 6, 8)]
        assert all(not dst[l][untouched].any() for l in range(GEO.layers))
        # the second chain from its parent; a prefix the pool lacks finds nothing
        assert c.load_blocks(b, None, [10, 11], *sides(c, dst, False)) == (2, None)
        assert c.load_blocks(keys(4, 2), None, [12, 13], *sides(c, dst, False)) == (0, None)
        assert held(daemon) == 0


def test_a_block_another_client_stored_is_deduplicated_not_stored_twice(daemon):
    src = engine_kv()
    a = keys(1, 4)
    with kvpool.Client(daemon.sock, "ns", GEO) as c, kvpool.Client(daemon.sock, "ns", GEO) as d:
        assert c.save_blocks([(0, a[:2], None, [0, 1], None)], *sides(c, src, True))[0] == \
            [(2, 0)]
        assert d.save_blocks([(0, a, None, [0, 1, 2, 3], None)], *sides(d, src, True))[0] == \
            [(2, 2)]
    assert held(daemon) == 0 and daemon.stats()["pages_cached"] == 4


def test_a_failed_publish_skips_its_requests_later_blocks_and_keeps_no_page(daemon):
    src = engine_kv()
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        jobs = [(0, keys(1, 2), None, [0, 1], None), (0, keys(2, 1), keys(1, 2)[-1], [2], None),
                (1, keys(3, 1), None, [3], None)]
        # a priority the daemon refuses: every publish fails, the chain's
        # second job is not even tried
        res, err = c.save_blocks(jobs, *sides(c, src, True), priority=9)
        assert err is None
        assert isinstance(res[0], kvpool.InvalidArgument) and "publish" in str(res[0])
        assert res[1] is None and isinstance(res[2], kvpool.InvalidArgument)
        st = daemon.stats()
        assert held(daemon) == 0 and st["pages_cached"] == 0
        assert st["pages_free"] == st["pages_total"] > 0


def test_a_load_into_a_block_outside_the_engines_tensors_copies_nothing(daemon):
    src, dst = engine_kv(), engine_kv(fill=False)
    a = keys(1, 2)
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        c.save_blocks([(0, a, None, [0, 1], None)], *sides(c, src, True))
        with pytest.raises(ValueError, match="outside"):
            c.load_blocks(a, None, [0, BLOCKS], *sides(c, dst, False))
        assert not any(t.any() for t in dst)
        with pytest.raises(ValueError, match="2 of them for 1 keys"):
            c.load_blocks(a[:1], None, [0, 1], *sides(c, dst, False))
        with pytest.raises(ValueError, match="token ids"):
            c.save_blocks([(0, keys(5, 1), None, [2], [1, 2])], *sides(c, src, True))
        assert held(daemon) == 0 and daemon.stats()["pages_cached"] == 2


# --- kvpool._kvpool.Saver: saves on a thread that never takes the GIL ---------------

class Saving:
    """A Saver on its own thread over c, the pool's lock a kvpool Lock."""

    def __init__(self, c, batch=32):
        import threading
        from kvpool import _kvpool
        self.c, self.lock = c, _kvpool.Lock()
        self.s = _kvpool.Saver(self.lock, batch)
        self.thread = threading.Thread(target=self.s.run, daemon=True)
        self.thread.start()

    def submit(self, jobs, kv, **kw):
        self.s.submit(self.c, jobs, *sides(self.c, kv, True), **kw)

    def results(self, timeout=10):
        assert self.s.wait_idle(timeout)
        jobs, batches = self.s.reap()
        return {j[0]: j[1:] for j in jobs}, batches

    def close(self):
        dropped = self.s.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()
        return dropped


def test_the_saver_saves_while_another_thread_holds_the_gil(daemon):
    """The model runner's thread holds the GIL, and Python would not hand
    it over for 100 s: the saves still end, bit for bit (a Python thread
    calling save_blocks() could not even start). Before, the connector's
    saving thread took the GIL back after each save, and waited seconds
    for it while the model runner decoded."""
    import sys
    import time
    src, dst = engine_kv(), engine_kv(fill=False)
    a = keys(1, 3)
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        s = Saving(c)
        old = sys.getswitchinterval()
        sys.setswitchinterval(100.0)
        try:
            s.submit([(1, 7, a, None, [3, 7, 1], None), (2, 8, keys(2, 2), None, [9, 2], None)],
                     src)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.0:  # Python, never letting the GIL go
                pass
            jobs, batches = s.s.reap()  # no GIL hand-over before this
        finally:
            sys.setswitchinterval(old)
        assert sorted(j[:4] for j in jobs) == [(1, 0, 3, 0), (2, 0, 2, 0)]
        assert len(batches) == 1 and batches[0][1] is None and batches[0][0] < 1.0
        assert c.load_blocks(a, None, [0, 4, 6], *sides(c, dst, False)) == (3, None)
        for here, there in ((0, 3), (4, 7), (6, 1)):
            for l in range(GEO.layers):
                assert torch.equal(bits(dst[l][here]), bits(src[l][there]))
        assert s.close() == []
    assert held(daemon) == 0 and daemon.stats()["pages_cached"] == 5


def test_the_saver_keeps_a_chains_order_and_skips_after_a_failure(daemon):
    """A chain's jobs run in order; after one fails its later ones are
    skipped, in the same batch or a later one, until the chain is
    forgotten; a duplicate counts as one; no page is kept."""
    src = engine_kv()
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        s = Saving(c, batch=2)
        s.submit([(1, 1, keys(1, 1), None, [0], None)], src)
        s.submit([(2, 1, keys(1, 2), None, [0, 1], None)], src)  # the first again
        r, batches = s.results()
        assert r == {1: (0, 1, 0, None, None), 2: (0, 1, 1, None, None)}
        assert len(batches) == 2
        # the daemon refuses priority 9: chain 2's first job fails, its second
        # is skipped, and chain 3 (same batch) fails on its own
        s.submit([(3, 2, keys(2, 1), None, [2], None), (4, 2, keys(3, 1), keys(2, 1)[0], [3],
                                                          None),
                  (5, 3, keys(4, 1), None, [4], None)], src, priority=9)
        s.submit([(6, 2, keys(5, 1), None, [5], None)], src)  # later, still chain 2
        r, _ = s.results()
        assert r[3][0] == 2 and r[3][3] == "publish" and isinstance(r[3][4],
                                                                     kvpool.InvalidArgument)
        assert r[4] == (1, 0, 0, None, None) and r[5][0] == 2 and r[6][0] == 1
        s.s.forget([2])  # a new request under the old name saves again
        s.submit([(7, 2, keys(5, 1), None, [5], None)], src)
        assert s.results()[0] == {7: (0, 1, 0, None, None)}
        s.close()
    st = daemon.stats()
    assert held(daemon) == 0 and st["pages_cached"] == 3


def test_the_saver_saves_the_leading_blocks_that_fit_a_pool_with_room_for_fewer():
    """A batch of more blocks than the pool has room for (saves were all
    or none: a decode engine waiting for them got nothing): the jobs that
    fit are saved, the one across the line saves its leading blocks and
    says NoSpace (status 4, its saved count), the ones past it fail for
    room, its chain's later job is skipped; the pool holds exactly those
    blocks, bit for bit, and no page is kept."""
    from conftest import running
    src, dst = engine_kv(), engine_kv(fill=False)
    with running(["--pool-size", "64K", "--slab-size", "64K"]) as d:
        with kvpool.Client(d.sock, "ns", GEO) as c:
            # 64 KiB of pages of 512 bytes (2 x 2 layers x 2 heads x 4 tokens
            # x 8 x f16): room for 128
            a, b, e = keys(1, 100), keys(2, 100), keys(3, 10)
            ids = [i % BLOCKS for i in range(100)]
            s = Saving(c, batch=1024)
            s.submit([(1, 1, a, None, ids, None), (2, 2, b, None, ids, None),
                      (3, 3, e, None, ids[:10], None)], src)
            r, _ = s.results()
            assert r[1] == (0, 100, 0, None, None)
            assert r[2][:3] == (4, 28, 0) and r[2][3] == "alloc"
            assert isinstance(r[2][4], kvpool.NoSpace)
            assert r[3][0] == 2 and isinstance(r[3][4], kvpool.NoSpace)
            s.submit([(4, 2, keys(4, 1), b[27], [0], None)], src)  # later, chain 2
            assert s.results()[0][4][0] == 1
            s.close()
            assert c.contains(a) == 100 and c.contains(b) == 28 and c.contains(e) == 0
            loaded, err = c.load_blocks(b[:28], None, ids[:28], *sides(c, dst, False))
            assert loaded == 28 and err is None
            for l in range(GEO.layers):
                assert torch.equal(bits(dst[l]), bits(src[l]))
        assert held(d) == 0 and d.stats()["pages_cached"] == 128


def test_the_saver_waits_for_the_pools_lock_and_drop_waits_for_the_batch(daemon):
    """A batch runs only while no other thread holds the pool's lock; drop()
    takes a chain's queued jobs off and waits for the batch that runs."""
    import threading
    import time
    src = engine_kv()
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        s = Saving(c, batch=1)
        with s.lock:
            s.submit([(1, 1, keys(1, 1), None, [0], None), (2, 1, keys(2, 1), keys(1, 1)[0],
                                                              [1], None),
                      (3, 2, keys(3, 1), None, [2], None)], src)
            assert not s.s.wait_idle(0.3)
            assert s.s.reap() == ([], [])
            assert daemon.stats()["pages_cached"] == 0
            got = []
            t = threading.Thread(target=lambda: got.append(s.s.drop([1])))
            t.start()
            time.sleep(0.3)
            assert t.is_alive()  # job 1 runs: the lock holds it, and drop waits
        t.join(10)
        assert got == [[2]]
        r, _ = s.results()
        assert set(r) == {1, 3} and r[1][0] == 0 and r[3][0] == 0
        s.close()
    assert held(daemon) == 0 and daemon.stats()["pages_cached"] == 2


def test_the_saver_drops_what_is_queued_at_stop_and_reports_a_closed_client(daemon):
    src = engine_kv()
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        s = Saving(c)
        with s.lock:
            s.submit([(1, 1, keys(1, 1), None, [0], None)], src)
            c.close()  # under the lock, as the connector closes one
        r, _ = s.results()
        assert r == {1: (3, 0, 0, None, None)}
        with pytest.raises(kvpool.NotConnected):
            s.submit([(2, 1, keys(1, 1), None, [0], None)], src)
        assert s.close() == []
    with kvpool.Client(daemon.sock, "ns", GEO) as c:
        from kvpool import _kvpool
        s = _kvpool.Saver(_kvpool.Lock())  # no thread: everything stays queued
        s.submit(c, [(1, 1, keys(1, 1), None, [0], None), (2, 2, keys(2, 1), None, [1], None)],
                 *sides(c, src, True))
        assert s.wait_idle(0.1) is False
        assert sorted(s.stop()) == [1, 2]
        with pytest.raises(ValueError, match="token ids"):
            s.submit(c, [(3, 1, keys(1, 1), None, [0], [1, 2])], *sides(c, src, True))
        with pytest.raises(RuntimeError, match="stopped"):
            s.run()
    assert held(daemon) == 0 and daemon.stats()["pages_cached"] == 0


def connector_saver(daemon, kv):
    """kvpool.vllm.mover.Saver over a connector's Pool of daemon, saving kv
    (what the vLLM worker makes, with a stand-in for the Copier's layout)."""
    import logging
    import types
    from kvpool._connector import Pool
    from kvpool.vllm.mover import Saver
    pool = Pool(logging.getLogger("test"), "worker", daemon.sock, "ns", GEO)
    with pool.lock:
        pool.client_view()
    copier = types.SimpleNamespace(check_blocks=lambda blocks: None,
                                   save_args=lambda view: sides(pool.client(), kv, True) +
                                   (1, -1))
    return pool, Saver(pool, copier, kvpool.PRIO_NORMAL, logging.getLogger("test"), 100)


def transfer(tag, blocks, parent=None):
    import types
    return types.SimpleNamespace(keys=keys(tag, len(blocks)), parent=parent, block_ids=blocks,
                                 tokens=None)


def test_a_step_hands_its_saves_over_without_waiting_for_the_batch_that_runs(daemon):
    """The model runner's flush() does not wait for the pool's lock, which
    the saving thread holds for a whole batch (and for ever if kvpoold
    hangs mid-batch); before, every step with a save waited for it."""
    import threading
    import time
    pool, s = connector_saver(daemon, engine_kv())
    try:
        assert s.save("r1", transfer(1, [0, 1]), 2) == "queued"
        s.flush()
        s.drain()
        assert s.ended()[0].block_ids == [0, 1]
        taken, go = threading.Event(), threading.Event()

        def batch():  # a batch that takes long, as the thread's would
            with pool.lock:
                taken.set()
                go.wait(10)
        t = threading.Thread(target=batch)
        t.start()
        taken.wait(10)
        assert s.save("r2", transfer(2, [2]), 1) == "queued"
        t0 = time.monotonic()
        s.flush()
        took = time.monotonic() - t0
        go.set()
        t.join()
        assert took < 1.0, "flush() waited %.1f s for the pool's lock" % took
        s.drain()
        assert [x.block_ids for x in s.ended()] == [[2]] and not s.busy("r2")
        assert pool.snapshot() == {"saved_blocks": 3, "dedups": 0}
    finally:
        assert s.close() == 0
        pool.close()
    assert held(daemon) == 0 and daemon.stats()["pages_cached"] == 3


def test_a_lost_connections_failure_reaped_late_leaves_the_new_connection_alone(daemon):
    """A save that failed on a connection the daemon dropped is reaped at
    the next step, after the watcher connected again: the new connection
    stays (before, its DaemonGone closed it and saves paused retry
    seconds)."""
    pool, s = connector_saver(daemon, engine_kv())
    try:
        old = pool.client()
        with pool.lock:
            pool.drop()  # the daemon went away
        end = time.monotonic() + 10
        while True:  # the watcher connects again, in the background
            with pool.lock:
                new, _ = pool.client_view()
            if new is not None:
                break
            assert time.monotonic() < end, "the watcher did not connect again"
            time.sleep(0.02)
        assert new is not old and pool.uses(new)
        s._failed([("save", kvpool.DaemonGone("kvpoold closed the connection"), old)])
        assert pool.uses(new) and pool.state == "connected"
        s._failed([("save", kvpool.DaemonGone("kvpoold closed the connection"), new)])
        assert not pool.uses(new) and pool.state == "daemon_gone"
    finally:
        s.close()
        pool.close()


def test_a_refused_identity_names_the_hash_seed_only_when_the_seed_differs(daemon, caplog):
    """The connectors' word on a refusal: the seed's hint (set
    PYTHONHASHSEED to kvpoold's --key-seed) came with every refusal, a
    geometry's too, and sent its reader to the wrong setting."""
    import dataclasses
    import logging
    from kvpool._connector import Pool
    hint = "PYTHONHASHSEED=7: run kvpoold with --key-seed 7"
    with kvpool.Client(daemon.sock, "ns", GEO):  # the namespace, of GEO
        other = dataclasses.replace(GEO, head_dim=128)
        for geo, seed, says in ((other, None, False), (GEO, "7", True)):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="test"):
                pool = Pool(logging.getLogger("test"), "worker", daemon.sock, "ns", geo,
                            seed=seed, hint=hint)
                with pool.lock:
                    assert pool.client() is None
                assert pool.state == "refused"
            said = " ".join(r.getMessage() for r in caplog.records)
            assert "refused this instance" in said
            assert (hint in said) == says, said
            pool.close()
