# SPDX-License-Identifier: MIT
"""The vLLM connector's threads beside the engine's: the Mover runs a
worker's loads (and the saves the Saver does not) off the engine's step,
the Saver its saves on a thread that never takes the GIL, the LayerLoader
a load in the step layer by layer beside the forward (layerwise_load)."""
from __future__ import annotations

import collections
import os
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple

import kvpool
from kvpool import _kvpool
from kvpool.vllm.copier import Copier

__all__ = ["Mover", "Saver", "LayerLoader"]


def _pin(cpus: Optional[Set[int]], log, who: str) -> None:
    """Bind the calling thread to cpus (said once if it cannot be)."""
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)  # this thread only
        except (OSError, ValueError, OverflowError) as e:
            log.warning("kvpool: %s cannot run on CPUs %s (%s); it runs where the model "
                        "runner does", who, sorted(cpus), e)


class _Rid:
    __slots__ = ("busy", "broken", "finished", "chain")

    def __init__(self, chain: int = 0) -> None:
        self.busy = 0  # save jobs queued or running
        self.broken = False  # a save failed or was skipped: later blocks cannot chain
        self.finished = False  # vLLM finished the request
        self.chain = chain  # the Saver's name for it

    def admit(self, queued: int, blocks: int, cap: int) -> str:
        """May a save of blocks more queue behind queued ones (at most cap,
        or one save of more alone)? "queued" (counted busy), "broken" (an
        earlier save failed or was skipped), or "full" (broken from now)."""
        if self.broken:
            return "broken"
        if queued and queued + blocks > cap:
            self.broken = True
            return "full"
        self.busy += 1
        return "queued"


class LayerLoader:
    """Loads in the step, layer by layer (layerwise_load): a thread of its
    own copies one layer's blocks after another while the forward runs,
    and the forward's attention of a layer waits for that layer only."""

    def __init__(self, copier: Copier, cpus: Optional[Set[int]] = None) -> None:
        self.copier, self.cpus = copier, cpus
        self._cond = threading.Condition()
        self._job: Optional[tuple] = None
        self._done = -1  # the layers of the current job copied: 0 .. _done
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def start(self, view, pairs: List[Tuple[int, int]]) -> None:
        """Begin copying pairs (vLLM block, page index in view) into
        vLLM's blocks."""
        with self._cond:
            if self._thread is not None and not self._thread.is_alive():
                self._thread = None  # a thread that died is replaced
            self._job, self._done, self._error = (view, pairs), -1, None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kvpool-layers",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, layer: int) -> None:
        """Until layer is copied (or the copy failed)."""
        with self._cond:
            self._cond.wait_for(lambda: self._job is None or self._done >= layer or
                                self._error is not None)

    def finish(self) -> Optional[BaseException]:
        """Until every layer is copied: the copy's error, if one failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._job is None)
            err, self._error = self._error, None
            return err

    def _run(self) -> None:
        if self.cpus:
            try:
                os.sched_setaffinity(0, self.cpus)
            except (OSError, ValueError, OverflowError):
                pass  # where the model runner runs
        layers = len(self.copier.layers)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._job is not None or self._closed)
                if self._closed:
                    return
                view, pairs = self._job
            try:
                for l in range(layers):
                    self.copier.copy(None, view, False, pairs, layer=l, indexed=True)
                    with self._cond:
                        self._done = l
                        self._cond.notify_all()
            except BaseException as e:  # noqa: BLE001 (reported by finish())
                with self._cond:
                    self._error = e
            finally:
                view = pairs = None  # the job's view is not kept alive here
                with self._cond:
                    self._job = None
                    self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._job is None)
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(10)


class Mover:
    """A worker's transfers off the engine's thread: one thread runs the
    queued loads first (a request waits for each) and then the queued saves,
    up to save_batch blocks at a time (the pool's lock is let go between
    batches, so a load in the step waits for one batch at most).
    load_fn(job) returns the vLLM blocks that did not get their KV;
    save_fn(jobs) the request ids whose save failed; skip_fn(blocks) counts
    blocks not saved. Saves of a request run in the order they were queued,
    and after one fails or is skipped the request's later ones are skipped
    (the pool would hold blocks whose parent it lacks). At most cap blocks
    wait to be saved (or one save of more, alone): past that, save()
    refuses and the engine goes on. ended() gives the save jobs that left
    the queue since it was last asked, saved or not."""

    def __init__(self, load_fn: Callable[[object], List[int]],
                 save_fn: Callable[[list], Sequence[str]], skip_fn: Callable[[int], None],
                 log, cap: int, save_batch: int = 32, cpus: Optional[Set[int]] = None) -> None:
        self._load_fn, self._save_fn, self._skip_fn, self._log = load_fn, save_fn, skip_fn, log
        self._cpus = cpus  # where the thread runs (None: where it was started)
        self.cap, self._batch = max(1, cap), max(1, save_batch)
        self._cond = threading.Condition()
        self._loads: Deque = collections.deque()
        self._saves: Deque[Tuple[str, object, int]] = collections.deque()
        self.queued = 0  # blocks waiting to be saved
        self._rids: Dict[str, _Rid] = {}
        self._loaded: List[Tuple[object, List[int]]] = []
        self._ended: List[object] = []
        self._thread: Optional[threading.Thread] = None
        self._stop = False
        self._running = False  # a load is out of the queue and not done

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvpool-mover", daemon=True)
            self._thread.start()

    def load(self, job) -> None:
        with self._cond:
            self._loads.append(job)
            self._start()
            self._cond.notify_all()

    def save(self, rid: str, job, blocks: int) -> str:
        """Queue a save of rid's next blocks: "queued", or "broken" (an
        earlier one of rid failed or was skipped), or "full"."""
        with self._cond:
            got = self._rids.setdefault(rid, _Rid()).admit(self.queued, blocks, self.cap)
            if got != "queued":
                return got
            self.queued += blocks
            self._saves.append((rid, job, blocks))
            self._start()
            self._cond.notify_all()
            return "queued"

    def busy(self, rid: str) -> bool:
        with self._cond:
            r = self._rids.get(rid)
            return r is not None and r.busy > 0

    def finish(self, rids) -> None:
        """vLLM finished these requests: forget them once their saves end."""
        with self._cond:
            for rid in rids:
                r = self._rids.get(rid)
                if r is not None:
                    r.finished = True
                    if not r.busy:
                        del self._rids[rid]

    def preempted(self, rids) -> int:
        """vLLM reuses these requests' blocks now: their saves that have not
        started are dropped (how many blocks), and this waits for the batch
        that is running, if it holds some of them. Then they are forgotten,
        a failed save too: the scheduler sends a resumed request's blocks
        again from its first (those in the pool are deduplicated)."""
        rids = set(rids)
        dropped = 0
        with self._cond:
            keep: Deque[Tuple[str, object, int]] = collections.deque()
            for rid, job, k in self._saves:
                if rid in rids:
                    dropped += k
                    self.queued -= k
                    self._ended.append(job)
                    r = self._rids[rid]
                    r.busy -= 1
                    r.broken = True
                else:
                    keep.append((rid, job, k))
            self._saves = keep
            self._cond.wait_for(lambda: not any(
                self._rids.get(r) is not None and self._rids[r].busy for r in rids))
            for rid in rids:
                self._rids.pop(rid, None)
        return dropped

    def wait_loads(self, timeout: float) -> None:
        """Until no load is queued or running, or timeout seconds."""
        with self._cond:
            self._cond.wait_for(lambda: not self._loads and not self._running, timeout)

    def drain(self) -> None:
        """Until nothing is queued or running."""
        with self._cond:
            self._cond.wait_for(lambda: not self._loads and not self._saves and
                                not any(r.busy for r in self._rids.values()) and
                                not self._running)

    def loaded(self) -> List[Tuple[object, List[int]]]:
        """The loads done since the last call: (job, vLLM blocks that failed)."""
        with self._cond:
            out, self._loaded = self._loaded, []
            return out

    def ended(self) -> List[object]:
        """The save jobs that ended since the last call (saved, failed,
        skipped or dropped)."""
        with self._cond:
            out, self._ended = self._ended, []
            return out

    def _take(self):
        with self._cond:
            self._cond.wait_for(lambda: self._loads or self._saves or self._stop)
            if self._loads:
                self._running = True
                return "load", self._loads.popleft()
            if not self._saves:
                return None, None
            jobs, n, skipped = [], 0, 0
            while self._saves and (not jobs or n + self._saves[0][2] <= self._batch):
                rid, job, k = self._saves.popleft()
                r = self._rids[rid]
                if r.broken:  # an earlier save of it failed: its parent is not stored
                    skipped += k
                    self.queued -= k
                    self._ended.append(job)
                    self._done(rid, r)
                    continue
                jobs.append((rid, job, k))
                n += k
            if skipped:
                self._skip_fn(skipped)
                self._cond.notify_all()
            return "save", jobs

    def _done(self, rid: str, r: _Rid) -> None:
        r.busy -= 1
        if r.finished and not r.busy:
            del self._rids[rid]

    def _run(self) -> None:
        _pin(self._cpus, self._log, "the connector's thread")
        while True:
            kind, work = self._take()
            if kind is None:
                return
            if kind == "load":
                try:
                    failed = list(self._load_fn(work))
                except Exception:  # noqa: BLE001 (the request must still be answered)
                    self._log.exception("kvpool: a load failed")
                    failed = list(work.block_ids)
                with self._cond:
                    self._loaded.append((work, failed))
                    self._running = False
                    self._cond.notify_all()
                continue
            if not work:
                continue
            try:
                bad = set(self._save_fn([job for _, job, _ in work]))
            except Exception:  # noqa: BLE001 (the blocks must still be let go)
                self._log.exception("kvpool: a save failed")
                bad = {rid for rid, _, _ in work}
            with self._cond:
                for rid, job, k in work:
                    self._ended.append(job)
                    self.queued -= k
                    r = self._rids[rid]
                    r.broken = r.broken or rid in bad
                    self._done(rid, r)
                self._cond.notify_all()

    def close(self) -> int:
        """Stop the thread after the loads queued (their requests wait);
        the saves still queued are dropped: how many blocks."""
        with self._cond:
            dropped = self.queued
            self._saves.clear()
            self.queued = 0
            self._stop = True
            self._cond.notify_all()
            t = self._thread
        if t is not None:
            t.join()
        return dropped


PARTIAL = 4  # Saver.reap()'s status of a job whose leading blocks alone fit


class Saver:
    """A worker's saves off the engine's step on a thread that never takes
    the GIL (kvpool._kvpool.Saver, python/src/saver.c): with host tensors
    and one KV cache group, where a save is one C call. A thread that had
    to take the GIL back after each save waited seconds for it while the
    model runner decoded many streams (the model runner lets it go and
    takes it again at each torch call, and CPython's waiter asks for it
    only after 5 ms without one), and the queue filled.

    The bookkeeping is the Mover's, on the model runner's thread: save()
    queues a request's next blocks (a request's saves run in order; after
    one fails or is skipped its later ones are skipped), flush() hands the
    step's saves to the thread in one call, ended() gives the transfers
    whose saves ended (saved, failed, skipped or dropped) and counts them
    in the pool's counters. At most cap blocks wait (or one save of more,
    alone): past that, save() refuses and the engine goes on. The thread
    takes the pool's lock around each batch of up to save_batch blocks;
    flush() does not wait for it (it takes the lock only when the pool's
    connection changed), and preempted(), drain() and close(), which wait
    for the thread, are never called with that lock held."""

    delay = 0.0  # seconds each batch waits before it runs: a slow pool (tests)

    def __init__(self, pool, copier: Copier, priority: int, log, cap: int,
                 save_batch: int = 32, cpus: Optional[Set[int]] = None) -> None:
        self._pool, self._copier, self._prio, self._log = pool, copier, priority, log
        self._cpus = cpus
        self.cap = max(1, cap)
        self._c = _kvpool.Saver(pool.lock, max(1, save_batch))
        self._c.delay = self.delay
        self._rids: Dict[str, _Rid] = {}
        self._chains = 0
        self._ids = 0
        self._jobs: Dict[int, Tuple[str, object, int]] = {}  # submitted: (rid, transfer, blocks)
        self._on: Dict[int, object] = {}  # a submitted job's client
        self._target: Tuple[Optional[object], tuple] = (None, ())  # a client, its save_args()
        self._pending: List[Tuple[int, str, object]] = []  # queued, not yet submitted
        self._ended: List[object] = []
        self.queued = 0  # blocks waiting to be saved
        self._thread: Optional[threading.Thread] = None

    def save(self, rid: str, t, blocks: int) -> str:
        """Queue a save of rid's next blocks (a Transfer): "queued", or
        "broken" (an earlier one of rid failed or was skipped), or "full"."""
        r = self._rids.get(rid)
        if r is None:
            self._chains += 1
            r = self._rids[rid] = _Rid(self._chains)
        got = r.admit(self.queued, blocks, self.cap)
        if got != "queued":
            return got
        self.queued += blocks
        self._ids += 1
        self._jobs[self._ids] = (rid, t, blocks)
        self._pending.append((self._ids, rid, t))
        return "queued"

    def flush(self) -> None:
        """Hand the saves queued since the last call to the thread. Without
        a connection (or with one the copy refuses) they are skipped and
        their requests' later saves with them."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        c = None
        try:
            c, args = self._connection()
            if c is not None:
                for _, _, t in pending:
                    self._copier.check_blocks(t.block_ids)
                self._submit(c, [(i, self._rids[rid].chain, t.keys, t.parent, t.block_ids,
                                  t.tokens) for i, rid, t in pending], args + (self._prio,))
                for i, _, _ in pending:
                    self._on[i] = c
                return
        except Exception as e:  # noqa: BLE001 (the engine goes on; these saves are skipped)
            self._failed([("save", e, c)])
        for i, _, _ in pending:
            self._end(i, False)

    def _connection(self) -> Tuple[Optional[object], tuple]:
        """The client the saves go through and its save_args(): the last
        flush's while the pool still uses that connection, read without
        the pool's lock (the thread may hold it for a batch; a client
        closed meanwhile fails its jobs as gone), else the pool's now,
        under the lock (a reconnect: rare)."""
        c, args = self._target
        if c is not None and self._pool.uses(c):
            return c, args
        with self._pool.lock:
            c, view = self._pool.client_view()
            self._target = (c, self._copier.save_args(view)) if c is not None else (None, ())
        return self._target

    def _submit(self, c, jobs: List[tuple], args: tuple) -> None:
        """Hand jobs to the thread (started on first use)."""
        self._c.submit(c, jobs, *args)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvpool-saver", daemon=True)
            try:
                self._thread.start()
            except RuntimeError as e:  # no thread: the queued saves go, and later ones too
                self._log.warning("kvpool: the connector's saving thread cannot start (%s); "
                                  "saves are skipped and counted", e)
                for i in self._c.stop():
                    self._end(i, False)

    def _run(self) -> None:
        _pin(self._cpus, self._log, "the connector's saving thread")
        self._c.run()

    def _end(self, i: int, ok: bool, kept: int = 0) -> None:
        """Job i ended: ok, or not, its first kept blocks saved (a partial
        save: the pool had room for those)."""
        rid, t, k = self._jobs.pop(i)
        self._on.pop(i, None)
        if not ok:
            self._pool.count("save_skipped", k - kept)
            # a decode engine waiting for the first block not saved goes on
            if t.handoff:
                self._pool.abandon(t.keys[kept:kept + 1])
        self._ended.append(t)
        self.queued -= k
        r = self._rids.get(rid)
        if r is None:
            return
        r.broken = r.broken or not ok
        r.busy -= 1
        if r.finished and not r.busy:
            self._forget(rid)

    def _drop(self, ids) -> int:
        """These jobs never ran: ended (the caller counts them as skipped);
        how many blocks."""
        blocks = 0
        for i in ids:
            blocks += self._jobs[i][2]
            self._end(i, True)
        return blocks

    def _forget(self, rid: str) -> None:
        r = self._rids.pop(rid, None)
        if r is not None:
            self._c.forget([r.chain])

    def _reap(self) -> None:
        """Count what the thread did since the last call."""
        jobs, batches = self._c.reap()
        if not jobs and not batches:
            return
        pool = self._pool
        failures = []
        for seconds, err, first in batches:
            pool.observe("save_seconds", seconds)
            if err is not None:
                failures.append(("release", err, self._on.get(first)))
        saved = False
        for i, status, n, dups, what, err in jobs:
            if status in (0, PARTIAL):  # all its blocks, or the leading ones that fit
                pool.count("saved_blocks", n)
                pool.count("dedups", dups)
                saved = saved or status == 0
            if err is not None:
                failures.append(("publish" if what == "publish" else "save", err,
                                 self._on.get(i)))
            if i in self._jobs:
                self._end(i, status == 0, n + dups)
        if saved:
            pool.clear("full", "the pool has room again; saving")
        if failures:
            self._failed(failures)

    def _failed(self, failures: List[tuple]) -> None:
        """pool.failed() of each (what, error, the client it failed on) but
        a lost connection's that the pool no longer uses: reaped late, it
        would drop the connection made since (the watcher reconnects)."""
        pool = self._pool
        with pool.lock:  # a lost daemon's client is closed under it
            for what, err, c in failures:
                if not isinstance(err, (kvpool.DaemonGone, kvpool.NotConnected,
                                        ConnectionError)) or pool.uses(c):
                    pool.failed(what, err)

    def busy(self, rid: str) -> bool:
        r = self._rids.get(rid)
        return r is not None and r.busy > 0

    def finish(self, rids) -> None:
        """vLLM finished these requests: forget them once their saves end."""
        for rid in rids:
            r = self._rids.get(rid)
            if r is not None:
                r.finished = True
                if not r.busy:
                    self._forget(rid)

    def preempted(self, rids) -> int:
        """vLLM reuses these requests' blocks now: their saves that have not
        started are dropped (how many blocks), and this waits for the batch
        that is running, if it holds some of them. Then they are forgotten."""
        rids = set(rids)
        dropped = self._drop([i for i, rid, _ in self._pending if rid in rids])
        self._pending = [p for p in self._pending if p[1] not in rids]
        chains = [self._rids[r].chain for r in rids if r in self._rids]
        if chains:
            dropped += self._drop(self._c.drop(chains))
        self._reap()
        for rid in rids:
            self._rids.pop(rid, None)
        return dropped

    def drain(self) -> None:
        """Until every save queued has ended."""
        self.flush()
        while not self._c.wait_idle(1e6) and self._thread is not None and \
                self._thread.is_alive():
            time.sleep(0.001)  # the thread started and is not in its loop yet
        self._reap()

    def ended(self) -> List[object]:
        """The transfers whose saves ended since the last call (saved,
        failed, skipped or dropped)."""
        self._reap()
        out, self._ended = self._ended, []
        return out

    def close(self) -> int:
        """Stop the thread after its batch; the saves still queued are
        dropped: how many blocks."""
        dropped = self._drop([i for i, _, _ in self._pending])
        self._pending = []
        dropped += self._drop(self._c.stop())
        if self._thread is not None:
            self._thread.join()
        self._reap()
        return dropped
