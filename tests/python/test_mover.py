# SPDX-License-Identifier: MIT
"""kvpool.vllm.mover.Mover, the vLLM connector's thread that runs loads and
saves off the engine's step: the order and the bookkeeping the connector's
promises to vLLM rest on (tests/python/test_vllm.py runs it inside vLLM)."""
import logging
import threading
from dataclasses import dataclass, field
from typing import List

import pytest

pytest.importorskip("torch", reason="torch is not installed in this venv")
from kvpool.vllm.mover import Mover  # noqa: E402


@dataclass
class Job:
    req_id: str
    block_ids: List[int] = field(default_factory=lambda: [1, 2])


class Recorder:
    """The connector's side: what ran, what failed, what was skipped; a gate
    holds a save until the test opens it."""

    def __init__(self, fail=()):
        self.saved, self.skipped, self.fail = [], 0, set(fail)
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def load(self, job):
        return [] if job.req_id != "bad" else list(job.block_ids)

    def save(self, jobs):
        self.started.set()
        self.gate.wait(10)
        self.saved += [j.req_id for j in jobs]
        return [j.req_id for j in jobs if j.req_id in self.fail]

    def skip(self, n):
        self.skipped += n


def mover(rec, cap=100, batch=2, cpus=None):
    return Mover(rec.load, rec.save, rec.skip, logging.getLogger("test"), cap,
                 save_batch=batch, cpus=cpus)


def test_a_failed_save_skips_the_requests_saves_already_queued():
    rec = Recorder(fail={"a"})
    rec.gate.clear()
    m = mover(rec, batch=2)
    assert m.save("x", Job("x"), 2) == "queued"  # runs first, held at the gate
    assert rec.started.wait(10)
    for _ in range(3):
        assert m.save("a", Job("a"), 2) == "queued"  # one batch each
    rec.gate.set()
    m.finish({"x", "a"})
    m.drain()
    # the first of a's saves failed: its two later ones were not run
    assert rec.saved == ["x", "a"] and rec.skipped == 4
    assert not m.busy("a") and m.queued == 0
    m.close()


def test_a_full_queue_refuses_and_marks_the_request():
    rec = Recorder()
    rec.gate.clear()
    m = mover(rec, cap=5, batch=2)
    assert m.save("x", Job("x"), 2) == "queued"  # being copied: it counts
    assert rec.started.wait(10)
    assert m.save("a", Job("a"), 3) == "queued"
    assert m.save("b", Job("b"), 1) == "full"  # 2 + 3 + 1 > 5
    assert m.save("b", Job("b"), 1) == "broken"  # b's later blocks would have no parent
    rec.gate.set()
    m.drain()
    assert m.save("c", Job("c"), 9) == "queued"  # more than cap, alone: taken
    m.drain()
    assert rec.saved == ["x", "a", "c"] and m.queued == 0
    m.close()


def test_a_preempted_requests_queued_saves_are_dropped_and_its_running_one_waited_for():
    rec = Recorder()
    rec.gate.clear()
    m = mover(rec, batch=2)
    assert m.save("p", Job("p"), 2) == "queued"  # running, held at the gate
    assert rec.started.wait(10)
    assert m.save("p", Job("p"), 2) == "queued"  # queued behind it
    assert m.save("q", Job("q"), 2) == "queued"
    done = []
    t = threading.Thread(target=lambda: done.append(m.preempted({"p"})))
    t.start()
    t.join(0.3)
    assert t.is_alive()  # p's running save reads its blocks: vLLM must wait
    rec.gate.set()
    t.join(10)
    assert done == [2]  # the queued one never ran
    m.drain()
    assert rec.saved == ["p", "q"] and not m.busy("p")
    m.close()


def test_the_thread_runs_loads_before_saves_and_survives_a_cpu_set_it_cannot_have():
    rec = Recorder()
    rec.gate.clear()
    m = mover(rec, cpus={10 ** 6})  # no such CPU: said, then it runs where it was started
    assert m.save("s", Job("s"), 2) == "queued"
    assert rec.started.wait(10)
    m.save("s2", Job("s2"), 2)
    m.load(Job("ok"))
    m.load(Job("bad", [7, 8]))
    rec.gate.set()
    m.drain()
    got = {j.req_id: failed for j, failed in m.loaded()}
    assert got == {"ok": [], "bad": [7, 8]}
    assert rec.saved == ["s", "s2"]
    m.close()


def test_a_preempted_request_saves_again_once_resumed():
    # its save that had not started is dropped, one that failed is forgotten:
    # the scheduler sends the resumed request's blocks again from its first
    rec = Recorder(fail={"b"})
    rec.gate.clear()
    m = mover(rec, batch=2)
    assert m.save("x", Job("x"), 2) == "queued"  # runs first, held at the gate
    assert rec.started.wait(10)
    assert m.save("a", Job("a"), 2) == "queued"
    rec.gate.set()
    assert m.preempted({"a"}) in (0, 2)  # dropped, unless it began already
    assert m.save("b", Job("b"), 2) == "queued"
    m.drain()
    assert m.save("b", Job("b"), 2) == "broken"  # its first save failed
    assert m.preempted({"b"}) == 0
    assert m.save("a", Job("a"), 2) == "queued" and m.save("b", Job("b"), 2) == "queued"
    m.drain()
    assert rec.saved.count("b") == 2
    m.finish({"x", "a", "b"})
    m.close()


class Layers:
    """A copier of three layers for LayerLoader; fails at layer fail_at."""

    def __init__(self, fail_at=None):
        self.layers, self.copied, self.fail_at = [0, 0, 0], [], fail_at

    def copy(self, client, view, to_pool, pairs, layer=None, indexed=False):
        assert indexed and not to_pool
        if layer == self.fail_at:
            raise ValueError("copy_blocks: block 9 is outside the destination's memory")
        self.copied.append(layer)


def test_layers_load_in_order_and_a_failure_or_a_bad_cpu_list_never_hangs():
    from kvpool.vllm.mover import LayerLoader
    ok = Layers()
    ld = LayerLoader(ok)
    ld.start("view", [(1, 0)])
    ld.wait(2)
    assert ok.copied == [0, 1, 2] and ld.finish() is None
    bad = Layers(fail_at=1)
    # a CPU number os.sched_setaffinity() cannot take: the thread runs anyway
    ld2 = LayerLoader(bad, cpus={1 << 40})
    ld2.start("view", [(1, 0)])
    ld2.wait(2)  # the forward goes on; the step's end reports the failure
    assert isinstance(ld2.finish(), ValueError) and bad.copied == [0]
    ld2.start("view", [(1, 0)])  # the next step's load runs again
    assert isinstance(ld2.finish(), ValueError)
    ld.close()
    ld2.close()
