# SPDX-License-Identifier: MIT
"""ACQUIREs that wait for keys another client is still saving
(Client.set_acquire_wait(), ACQUIRE's WAIT flag), against a real kvpoold:
a decode engine's load waits in the daemon for its prefill engine's saves,
woken by their PUBLISH, answered at its deadline with what is there, and
let go at once when its client dies. Every bound on time here is far from
what the test waits for (a 30 s wait that must end on a publish), so a
slow machine does not fail it."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvpool
from conftest import GEO, Daemon

HERE = os.path.dirname(os.path.abspath(__file__))


def keys_of(c, n, first=0):
    return c.block_keys(np.arange(first, first + n * GEO.block_tokens, dtype=np.uint32))


def publish(c, keys, parent=None):
    pages = c.alloc(len(keys))
    c.publish(pages, keys, parent=parent)
    c.release(pages)


def in_thread(fn):
    """Run fn() on a thread: a getter of (its result, its seconds)."""
    out = {}

    def run():
        t0 = time.monotonic()
        try:
            out["r"] = fn()
        except BaseException as e:  # noqa: BLE001 (re-raised by the getter)
            out["e"] = e
        out["s"] = time.monotonic() - t0
    t = threading.Thread(target=run)
    t.start()

    def get(timeout=60):
        t.join(timeout)
        assert not t.is_alive(), "the acquire did not return in %d s" % timeout
        if "e" in out:
            raise out["e"]
        return out["r"], out["s"]
    return get


def leased(daemon):
    st = daemon.stats()
    return st["pages_private"] + st["pages_shared"]


def test_a_wait_resumes_past_keys_published_out_of_order(daemon):
    # the wait lacks keys[0]: the last two come first (it is not woken),
    # then the first two (woken by keys[0], it finds the rest and is
    # answered with all four, not at its deadline)
    with kvpool.Client(daemon.sock, "py", GEO) as w, \
            kvpool.Client(daemon.sock, "py", GEO) as p:
        keys = keys_of(p, 4)
        w.set_acquire_wait(30)
        get = in_thread(lambda: w.acquire(keys))
        time.sleep(0.3)
        publish(p, keys[2:], parent=keys[1])
        time.sleep(0.3)
        publish(p, keys[:2])
        got, secs = get()
        assert len(got.pages) == 4 and 0.5 <= secs < 15, secs
        w.release(got.pages)
    assert leased(daemon) == 0


def test_a_wait_ends_when_another_client_publishes_the_keys(daemon):
    with kvpool.Client(daemon.sock, "py", GEO) as w, \
            kvpool.Client(daemon.sock, "py", GEO) as p:
        keys = keys_of(p, 4)
        w.set_acquire_wait(30)
        get = in_thread(lambda: w.acquire(keys))
        time.sleep(0.3)
        publish(p, keys[:2])  # half of them: the wait goes on
        time.sleep(0.3)
        publish(p, keys[2:], parent=keys[1])
        got, secs = get()
        assert len(got.pages) == 4 and 0.5 <= secs < 15, secs
        w.release(got.pages)
        # with every key held, a wait is no wait
        got, secs = in_thread(lambda: w.acquire(keys))()
        assert len(got.pages) == 4 and secs < 15
        w.release(got.pages)
    assert leased(daemon) == 0


def test_a_wait_ends_at_its_deadline_with_the_prefix_held(daemon):
    with kvpool.Client(daemon.sock, "py", GEO) as w:
        keys = keys_of(w, 3)
        publish(w, keys[:1])
        w.set_acquire_wait(0.5)
        got, secs = in_thread(lambda: w.acquire(keys))()
        assert len(got.pages) == 1 and 0.45 <= secs < 15, secs
        w.release(got.pages)
        w.set_acquire_wait(0)  # no wait: a miss at once
        got, secs = in_thread(lambda: w.acquire(keys))()
        assert len(got.pages) == 1
        w.release(got.pages)
    st = daemon.stats()
    assert leased(daemon) == 0 and st["acquires"] == 2


def test_one_publish_wakes_every_waiter_and_others_are_served_meanwhile(daemon):
    with kvpool.Client(daemon.sock, "py", GEO) as a, \
            kvpool.Client(daemon.sock, "py", GEO) as b, \
            kvpool.Client(daemon.sock, "py", GEO) as p:
        keys = keys_of(p, 2)
        for c in (a, b):
            c.set_acquire_wait(30)
        gets = [in_thread(lambda c=c: c.acquire(keys)) for c in (a, b)]
        time.sleep(0.3)
        # the daemon serves other requests while two wait
        t0 = time.monotonic()
        p.release(p.alloc(3))
        other = keys_of(p, 2, first=1000)
        publish(p, other)  # keys of no waiter: both wait on
        assert time.monotonic() - t0 < 5
        time.sleep(0.2)
        assert leased(daemon) == 0  # waiting leases nothing
        publish(p, keys)
        for c, get in zip((a, b), gets):
            got, secs = get()
            assert len(got.pages) == 2 and secs < 15
            c.release(got.pages)
    assert leased(daemon) == 0


def test_a_waiting_client_killed_loses_its_leases_at_once(daemon):
    code = ("import sys, numpy as np, kvpool\n"
            "from conftest import GEO\n"
            "c = kvpool.Client(sys.argv[1], 'py', GEO)\n"
            "held = c.alloc(3)\n"
            "c.set_acquire_wait(120)\n"
            "print('ready', flush=True)\n"
            "c.acquire(c.block_keys(np.arange(32, dtype=np.uint32)))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", code, daemon.sock],
                            stdout=subprocess.PIPE, env=env, cwd=HERE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.5)  # into its wait
        assert daemon.stats()["pages_private"] == 3
    finally:
        proc.kill()
        proc.wait()
    daemon.wait_for(lambda st: st["pages_private"] == 0,
                    "the killed waiter's leases going (its wait had 120 s left)", seconds=5)
    assert "hung up while its ACQUIRE waited for keys" in daemon.read_log()


def test_a_daemon_stopped_while_a_client_waits_stops_at_once():
    # within seconds, not after the wait's 120, and cleanly
    d = Daemon()
    try:
        with kvpool.Client(d.sock, "py", GEO) as w:
            w.set_acquire_wait(120)
            get = in_thread(lambda: w.acquire(keys_of(w, 2)))
            time.sleep(0.3)
            d.proc.terminate()
            with pytest.raises(kvpool.DaemonGone):
                get()
        assert d.proc.wait(20) == 0, d.read_log()
    finally:
        d.discard()


def test_a_wait_out_of_range_is_refused_and_changes_nothing(daemon):
    with kvpool.Client(daemon.sock, "py", GEO) as c:
        for bad in (-1, 600.5, float("nan")):
            with pytest.raises(ValueError, match="0 to 600 seconds"):
                c.set_acquire_wait(bad)
        keys = keys_of(c, 2)
        got, secs = in_thread(lambda: c.acquire(keys))()  # still no wait
        assert got.pages == [] and secs < 15


def test_a_wait_for_a_handoff_ends_when_its_prefill_client_closes_first(daemon):
    # a wait that names its handoff (acquire(wait=, handoff=): the ticket's
    # key) ends as soon as the client that was issued the ticket closes
    # with the handoff's last block unpublished; the client's own options
    # (set_acquire_wait()) are not touched by a call's
    with kvpool.Client(daemon.sock, "py", GEO) as w:
        keys = keys_of(w, 4)
        p = kvpool.Client(daemon.sock, "py", GEO)
        p.handoff_issue(keys[-1], 4, 60)
        publish(p, keys[:1])
        get = in_thread(lambda: w.acquire(keys, wait=30, handoff=keys[-1], load=True))
        time.sleep(0.3)
        p.close()
        got, secs = get()
        assert len(got.pages) == 1 and secs < 15, secs
        w.release(got.pages)
        # the client's default is still no wait, and a call's options are
        # checked before anything is sent
        got, secs = in_thread(lambda: w.acquire(keys))()
        assert len(got.pages) == 1 and secs < 15
        w.release(got.pages)
        with pytest.raises(ValueError, match="give wait=SECONDS"):
            w.acquire(keys, handoff=keys[-1])
        with pytest.raises(ValueError, match="0 to 600 seconds"):
            w.acquire(keys, wait=601)
    assert leased(daemon) == 0
