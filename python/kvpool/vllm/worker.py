# SPDX-License-Identifier: MIT
"""The vLLM connector's worker side: copies pool pages into the vLLM
blocks the scheduler allocated (in the step, before the forward, or off it
on the Mover's thread while the request waits) and the step's new full
blocks into fresh pages after the forward, published under their keys (a
block another instance published first is dropped, not stored twice). A
load or a save of a model with one KV cache group is one C call (lease,
copy, release) that lets the GIL go once; what failed is reported to vLLM,
which recomputes it."""
from __future__ import annotations

import errno
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)
try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
except ImportError:  # an older vLLM: get_finished() alone
    KVConnectorTransferResults = None

import kvpool
from kvpool._connector import Pool
from kvpool.vllm.copier import Copier, Unsupported, cpu_list
from kvpool.vllm.identity import Identity
from kvpool.vllm.metadata import KVPoolMetadata, KVPoolWorkerMetadata, Transfer
from kvpool.vllm.mover import LayerLoader, Mover, Saver

if TYPE_CHECKING:
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata

__all__ = ["WorkerSide", "EMPTY_STEP_WAIT_S"]

# A step that computes nothing waits at most this long for the loads off
# the step, so that it reports them (the scheduler runs their requests in
# the next step) rather than leaving them to later empty steps to poll.
EMPTY_STEP_WAIT_S = 0.01


class WorkerSide:
    """KVPoolConnector's methods for vLLM's model runner (the connector
    delegates to them). conn is the connector: vLLM hands it each step's
    metadata."""

    def __init__(self, conn, pool: Optional[Pool], ident: Optional[Identity],
                 settings: Dict[str, Any], hybrid: bool, log) -> None:
        self._conn = conn
        self._pool = pool
        self._ident = ident
        self._hybrid = hybrid
        self._log = log
        self._prio = settings["priority"]
        self._threads = settings["copy_threads"] or torch.get_num_threads()
        self._copy_torch = settings["copy_with_torch"]
        self._async_save = settings["async_save"]
        self._layerwise = settings["layerwise_load"]
        self._save_queue = settings["save_queue_blocks"]
        self._copy_cpus = cpu_list(settings["copy_cpus"])
        self._copier: Optional[Copier] = None
        self._mover: Optional[Mover] = None
        self._saver: Optional[Saver] = None  # saves without the GIL (one C call each)
        self._layers: Optional[LayerLoader] = None  # layerwise_load
        self._by_layer: Optional[tuple] = None  # the layer-by-layer load of this step
        self._loaded: Set[str] = set()
        self._taken: Set[str] = set()  # requests whose load this step's start_load_kv took
        self._load_errors: Set[int] = set()
        self._recving: Set[str] = set()  # background loads answered in this step
        self._held: Set[str] = set()  # requests whose blocks vLLM keeps for their saves
        self._broken: Set[str] = set()  # requests whose earlier save failed (in the step)
        self._failed: Set[str] = set()  # hybrid models: background loads that failed
        self._failed_any: Set[str] = set()  # requests some of whose load failed
        self._ended: Dict[int, int] = {}  # pinned saves ended, for the scheduler
        self._layer_at: Dict[str, int] = {}  # a layer's place in the page, by vLLM's name
        self._cost_lock = threading.Lock()
        self._cost = (0.0, 0)  # loads' seconds and blocks since the last report
        self._waits: Optional[Pool] = None  # the connection loads wait for keys on

    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]) -> None:
        if self._ident is None:
            return
        try:
            layers = [kv_caches[n] for n in self._ident.layer_names]
            backend = self._backend()
            # vLLM's CPU_ATTN reads a block's head as its tokens' K rows,
            # then their V rows, not K|V per token
            split = backend == "CPU_ATTN"
            self._copier = Copier(self._ident, layers, self._threads, self._copy_torch,
                                  kv_split=split)
        except (KeyError, Unsupported) as e:
            self._log.warning("kvpool: %s; this instance runs without the kvpool connector", e)
            self._pool, self._copier = None, None
            return
        self._log.info("kvpool: the model runner's KV blocks (%s backend): [block, head, %s]",
                    backend or "an unnamed", "K rows then V rows" if split else "token, K|V")
        cap = int(self._save_queue or max(64, self._copier.num_blocks // 4))
        self._mover = Mover(self._load_off_step, self._save_off_step,
                            lambda n: self._pool.count("save_skipped", n), self._log, cap,
                            cpus=self._copy_cpus)
        if self._async_save and self._copier.whole and not self._hybrid:
            self._saver = Saver(self._pool, self._copier, self._prio, self._log, cap,
                                cpus=self._copy_cpus)
        self._layer_at = {n: i for i, n in enumerate(self._ident.layer_names)}
        # a hybrid model's loads all run off the step: none to overlap
        if self._layerwise and not self._copier.use_torch and not self._hybrid:
            self._layers = LayerLoader(self._copier, cpus=self._copy_cpus)
        with self._pool.lock:  # connect and map the view now, not in the first load
            self._pool.client_view()

    def _backend(self) -> Optional[str]:
        """The attention backend of the model's layers (vLLM's name for it),
        None when vLLM does not say; Unsupported when the layers differ."""
        ctx = self._conn._vllm_config.compilation_config.static_forward_context
        names = set()
        for n in self._ident.layer_names:
            backend = getattr(ctx.get(n), "attn_backend", None)
            names.add(backend.get_name() if backend is not None else None)
        if len(names) > 1:
            raise Unsupported("the model's attention layers run backends %s, which may lay "
                              "out their KV blocks differently" % sorted(map(str, names)))
        return names.pop()

    def _meta(self) -> Optional[KVPoolMetadata]:
        if not self._conn.metadata_bound():
            return None
        meta = self._conn._get_connector_metadata()
        return meta if isinstance(meta, KVPoolMetadata) else None

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        """vLLM frees the preempted requests' blocks in this step: their
        saves must have read them first."""
        meta = kv_connector_metadata
        if isinstance(meta, KVPoolMetadata):
            self._broken -= meta.preempted  # its blocks are sent again from the first
        if isinstance(meta, KVPoolMetadata) and meta.preempted and self._mover is not None:
            # their saves not started are dropped (counted); the one running ends
            dropped = self._mover.preempted(meta.preempted)
            if self._saver is not None:
                dropped += self._saver.preempted(meta.preempted)
            if dropped and self._pool is not None:
                self._pool.count("save_skipped", dropped)

    def unregister_kv_caches(self) -> None:
        """vLLM is about to sleep (its KV memory goes): no copy may run."""
        if self._mover is not None:
            self._mover.drain()
        if self._saver is not None:
            self._saver.drain()

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        self._taken = set()
        meta = self._meta()
        if meta is None or not meta.loads:
            return
        now: List[Transfer] = []
        for t in meta.loads:
            if t.fail:
                self._fail_load(t)
            elif t.background and self._mover is not None:
                self._mover.load(t)  # the Mover answers it
            else:
                now.append(t)
                continue
            self._taken.add(t.req_id)
        if now:
            self._finish_by_layer()
            if self._layers is not None:
                self._load_by_layer(now)
            elif self._hybrid:  # vLLM takes a hybrid model's failed loads per request
                for t in now:
                    self._load_failed(t, self._load([t]))
            else:
                self._load_errors.update(self._load(now))
            for t in now:
                self._taken.add(t.req_id)  # answered (were the load to raise: failed)
                self._loaded.add(t.req_id)
                if t.background:  # no thread to run it: answered in this step
                    self._recving.add(t.req_id)

    def _fail_load(self, t: Transfer) -> None:
        """t answered as failed, nothing copied: vLLM computes its blocks."""
        self._load_failed(t, list(t.block_ids))
        self._loaded.add(t.req_id)
        if t.background:
            self._recving.add(t.req_id)
        if self._pool is not None:
            self._pool.count("load_errors", len(t.block_ids))

    # -- what a hook that failed falls back to (KVPoolConnector's _hook())

    def fail_loads(self) -> None:
        """start_load_kv() that failed: the step's loads it had not taken
        are answered as failed (vLLM computes them), none left waiting."""
        meta = self._meta()
        for t in meta.loads if meta is not None else ():
            if t.req_id not in self._taken:
                self._taken.add(t.req_id)
                self._fail_load(t)

    def skip_saves(self) -> None:
        """wait_for_save() that failed: the step's holds are kept (their
        requests' blocks go back once no save of theirs runs), and its saves
        that no thread took are skipped, counted, and their pins let go."""
        meta = self._meta()
        if meta is None:
            return
        self._held |= meta.hold
        mover, saver = self._mover, self._saver
        for t in meta.saves:
            if not (mover is not None and mover.busy(t.req_id) or
                    saver is not None and saver.busy(t.req_id)):
                if self._pool is not None:
                    self._pool.count("save_skipped", len(t.keys))
                    self._abandon([t])
                self._saves_ended([t])
        if mover is not None:
            mover.finish(meta.finished)
        if saver is not None:
            saver.finish(meta.finished)

    def _abandon(self, saves: Sequence[Transfer]) -> None:
        """These saves will not reach the pool: the first block of each
        that a decode engine may wait for (a disaggregated prefill's) is
        abandoned in kvpoold (get_finished() sends them), so that the
        decode engine computes at once rather than wait pd_wait_seconds."""
        if self._pool is not None:
            self._pool.abandon([t.keys[0] for t in saves if t.keys and t.handoff])

    def without_pool(self) -> None:
        """register_kv_caches() that failed: this worker runs without the
        pool (every load it is sent fails, and is computed)."""
        self._pool, self._copier = None, None

    def no_results(self) -> Any:
        """get_transfer_results() that failed: the loads answered so far
        and the saves ended (none left waiting)."""
        sending, recving = self.loads_answered()
        failed, self._failed = self._failed, set()
        return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                          finished_recving=set(recving or ()) | failed,
                                          failed_recving=failed)

    def loads_answered(self) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """get_finished() that failed: the loads answered so far, and the
        saves ended."""
        recving, self._recving = self._recving, set()
        return self._sends_done() or None, recving or None

    def take_load_errors(self) -> Set[int]:
        """The blocks whose loads failed since the last call."""
        errors, self._load_errors = self._load_errors, set()
        return errors

    def _load_failed(self, t: Transfer, failed: List[int]) -> None:
        """What vLLM is told of blocks of t's load that did not get their
        KV: their ids (it recomputes from the first), or with more than one
        KV cache group the request (it recomputes the whole of it: block
        ids do not name a group)."""
        if not failed:
            return
        self._failed_any.add(t.req_id)
        if t.groups is not None:
            self._failed.add(t.req_id)
        else:
            self._load_errors.update(failed)

    def _group_pairs(self, t: Transfer, pages: List[int]) -> List[List[Tuple[int, int]]]:
        """(vLLM block, page) of each KV cache group, for t's first pages."""
        if t.groups is None:
            return [list(zip(t.block_ids, pages))]
        return [[(b, p) for b, p in zip(ids, pages) if b >= 0] for ids in t.groups]

    def _copy(self, c, view, to_pool: bool, pairs: List[List[Tuple[int, int]]]) -> None:
        """Copy each KV cache group's pairs, that group's layers alone."""
        groups = self._ident.groups if len(pairs) > 1 else (None,)
        for only, gp in zip(groups, pairs):
            self._copier.copy(c, view, to_pool, gp, only=only)

    def _load_off_step(self, t: Transfer) -> List[int]:
        held = self._await_keys(t) if t.wait else []
        if t.wait and self._pool is not None:
            if len(held) < len(t.keys):
                self._pool.count("pd_late")
                self._pool.warn("pd-late", "%d of a request's %d blocks did not reach the "
                                "pool within pd_wait_seconds (%gs) of its prefill engine's "
                                "answer (its saves were skipped or failed and it said so, "
                                "or they were slow, or it stopped): computed here",
                                len(t.keys) - len(held), len(t.keys), t.wait)
            else:
                self._pool.clear("pd-late", "a prefill engine's blocks came in time again")
        try:
            with self._copier.side_stream():
                # the wait leased what came: copied from there, not leased
                # a second time (2 round trips for the load, not 4). A
                # device copier keeps the main connection's mapping of the
                # pool registered with CUDA: it leases on that one
                if held and self._copier.device.type == "cpu":
                    return self._load_held(t, held)
                return self._load([t])
        finally:
            if held:
                self._let_go(held)

    def _load_held(self, t: Transfer, held: List[int]) -> List[int]:
        """A load that waited: the copy of held (its first blocks' pages,
        leased by its wait on the waits connection) into its vLLM blocks;
        the blocks that did not get theirs. Counted as _load() counts."""
        pool, w = self._pool, self._waits
        if pool is None or self._copier is None or w is None:
            return list(t.block_ids)
        t0 = time.monotonic()
        err: Optional[BaseException] = None
        gone = False
        try:
            # the copier is used under the pool's lock, as every copy is
            # (the pool's lock before the waits connection's, always)
            with pool.lock, w.lock:
                c, view = w.client_view()
                gone = c is None  # the wait's connection (its leases with it)
                try:
                    if not gone:
                        self._copy(c, view, False, self._group_pairs(t, held))
                except (OSError, ValueError) as e:
                    err = e
            if gone:
                pool.count("load_errors", len(t.keys))
                return list(t.block_ids)
            if err is not None:
                w.failed("load", err)
                pool.count("load_errors", len(t.keys))
                return list(t.block_ids)
            pool.count("loaded_blocks", len(held))
            if len(held) < len(t.keys):
                pool.count("load_errors", len(t.keys) - len(held))
            return list(t.block_ids[len(held):])
        finally:
            dt = time.monotonic() - t0
            pool.observe("load_seconds", dt)
            with self._cost_lock:
                self._cost = (self._cost[0] + dt, self._cost[1] + len(t.keys))

    def _await_keys(self, t: Transfer) -> List[int]:
        """A load whose keys a prefill engine is still saving: until
        kvpoold holds them all, or t.wait seconds (an ACQUIRE WAIT on a
        connection of its own, so that no load or save of the engine's
        steps waits behind it). The pages found stay leased there until
        the load has copied them (_let_go())."""
        if self._waits is None:
            p = self._pool
            # no time limit on this connection: its acquires wait for the
            # blocks and fetch them from the remote tier with no cut-off,
            # off the step (a stopped daemon holds the loads off the step
            # then, never the engine's steps)
            self._waits = Pool(self._log, p.role + " waits", p.socket, p.namespace,
                               p.geometry, p.scheme, p.seed, p.retry, p.hint, lookups=False,
                               name=((p.name or "vllm worker") + " waits")[:31])
        w = self._waits
        with w.lock:
            c = w.client()
            if c is None:
                return []
            try:
                # the wait is for the handoff (kvpoold ends it should the
                # prefill engine abandon the handoff or die); with a remote
                # tier, the blocks may come from another machine's prefill
                # engine: fetching them always beats computing them here
                return list(c.acquire(t.keys, parent=t.parent, wait=t.wait,
                                      handoff=t.handoff_key, prefill_rate=1).pages)
            except OSError as e:
                w.failed("wait", e)  # the load goes on with what the pool holds
                return []

    def _let_go(self, pages: List[int]) -> None:
        w = self._waits
        with w.lock:
            c = w.client()
            if c is None:
                return  # the daemon is gone: the leases went with the connection
            try:
                c.release(pages)
            except OSError as e:
                w.failed("release", e)

    def _load(self, loads: List[Transfer]) -> List[int]:
        """Copy the loads' pages into their vLLM blocks; the blocks that did
        not get theirs (evicted or gone since the lookup: vLLM recomputes).
        Its duration, lease to release, goes to vllm:kvpool_load_seconds."""
        pool = self._pool
        if pool is None or self._copier is None:
            return [b for t in loads for b in t.block_ids]
        t0 = time.monotonic()
        try:
            if self._copier.whole and all(t.groups is None for t in loads):
                return self._load_whole(loads)
            return self._load_now(loads)
        finally:
            dt = time.monotonic() - t0
            pool.observe("load_seconds", dt)
            with self._cost_lock:
                self._cost = (self._cost[0] + dt,
                              self._cost[1] + sum(len(t.keys) for t in loads))

    def _load_whole(self, loads: List[Transfer]) -> List[int]:
        """_load_now() of a model with one KV cache group, each load one C
        call (lease, copy, release) that lets the GIL go once."""
        pool = self._pool
        failed: List[int] = []
        with pool.lock:
            c, view = pool.client_view()
            for t in loads:
                got = 0
                if c is not None:
                    try:  # the scheduler's lookup was counted: a LOAD (Pool(lookups=False))
                        got, err = self._copier.load(c, view, t.keys, t.parent, t.block_ids)
                    except (OSError, ValueError) as e:
                        pool.failed("load", e)
                        if isinstance(e, OSError):
                            c = None
                    else:
                        if err is not None:
                            pool.failed("release", err)
                        pool.count("loaded_blocks", got)
                if got < len(t.keys):
                    failed += t.block_ids[got:]
                    pool.count("load_errors", len(t.keys) - got)
        return failed

    def _load_now(self, loads: List[Transfer]) -> List[int]:
        pool = self._pool
        with pool.lock:
            c, view, pairs, held, failed = self._acquire(loads)
            err = None
            if c is not None and held:
                try:
                    self._copy(c, view, False, pairs)
                except (OSError, ValueError) as e:
                    err = e
            return self._loaded_now(c, pairs, held, failed, err)

    def _acquire(self, loads: List[Transfer]):
        """Lease the loads' pages (pool.lock held): the connection and view,
        each KV cache group's (vLLM block, page) pairs to copy, the pages
        held, and the blocks whose pages are not there (evicted or gone
        since the lookup)."""
        pool = self._pool
        c, view = pool.client_view()
        failed: List[int] = []
        held: List[int] = []
        pairs: List[List[Tuple[int, int]]] = []
        for t in loads:
            got: List[int] = []
            if c is not None:
                try:  # the scheduler's lookup was counted: a LOAD (Pool(lookups=False))
                    got, _ = c.acquire(t.keys, parent=t.parent)
                except OSError as e:
                    pool.failed("load", e)
                    c = None
            held += got
            for g, gp in enumerate(self._group_pairs(t, got)):
                if g < len(pairs):
                    pairs[g] += gp
                else:
                    pairs.append(gp)
            if len(got) < len(t.keys):
                failed += t.block_ids[len(got):]
                pool.count("load_errors", len(t.keys) - len(got))
        return c, view, pairs, held, failed

    def _loaded_now(self, c, pairs, held, failed, err) -> List[int]:
        """After the copy (pool.lock held): count it, let the pages go; the
        blocks that failed."""
        pool = self._pool
        if c is not None and held:
            if err is None:
                pool.count("loaded_blocks", len(held))
            else:
                pool.failed("load", err)
                failed = failed + [b for gp in pairs for b, _ in gp]
                pool.count("load_errors", len(held))
        if c is not None and held:
            try:
                c.release(held)
            except OSError as e:
                pool.failed("release", e)
        return failed

    def _load_by_layer(self, loads: List[Transfer]) -> None:
        """layerwise_load: lease now, copy layer by layer beside the
        forward (wait_for_layer_load), finish in wait_for_save."""
        pool = self._pool
        if pool is None or self._copier is None:
            self._load_errors.update(b for t in loads for b in t.block_ids)
            return
        with pool.lock:
            c, view, pairs, held, failed = self._acquire(loads)
            if c is None or not held:
                self._load_errors.update(self._loaded_now(c, pairs, held, failed, None))
                return
            try:
                indexed = [(b, c.page_index(p)) for b, p in pairs[0]]
            except OSError as e:
                self._load_errors.update(self._loaded_now(c, pairs, held, failed, e))
                return
        self._by_layer = (c, pairs, held, failed)
        self._layers.start(view, indexed)

    def _finish_by_layer(self) -> None:
        """Until the layer-by-layer load is done; its pages go."""
        if self._by_layer is None:
            return
        c, pairs, held, failed = self._by_layer
        self._by_layer = None
        err = self._layers.finish()
        with self._pool.lock:
            if err is None and not self._pool.uses(c):
                # the connection went during the forward (a save's call
                # timed out, or the daemon went): the pages copied may have
                # been another client's by then
                err = kvpool.DaemonGone(errno.EPIPE, "the connection to kvpoold went while "
                                        "a load copied layer by layer; its blocks are "
                                        "computed")
            self._load_errors.update(self._loaded_now(c, pairs, held, failed, err))

    def loads_by_layer(self) -> bool:
        """A layer-by-layer load runs in this step (start_load_kv began
        it): the forward's attention layers each wait for their own."""
        return self._by_layer is not None

    def wait_for_layer_load(self, layer_name: str) -> None:
        """layerwise_load: until this layer's blocks are loaded (other
        loads end in start_load_kv, or off the step)."""
        if self._by_layer is not None:
            i = self._layer_at.get(layer_name)
            if i is not None:
                self._layers.wait(i)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        return  # all layers of a block are saved together, after the forward

    def wait_for_save(self) -> None:
        """Hand this step's new full blocks to the saver thread (or, with
        async_save off, save them now). A full queue skips and counts."""
        self._finish_by_layer()
        meta = self._meta()
        if meta is None:
            return
        self._held |= meta.hold
        pool, mover = self._pool, self._mover
        if pool is None or mover is None or not self._async_save:
            self._broken -= meta.finished
            saves = [t for t in meta.saves if t.req_id not in self._broken]
            if pool is not None and self._copier is not None:
                # a request whose earlier blocks are not in the pool cannot
                # chain its later ones: skipped, and counted as the thread does
                broken = [t for t in meta.saves if t.req_id in self._broken]
                pool.count("save_skipped", sum(len(t.keys) for t in broken))
                self._abandon(broken)
                if saves:
                    self._broken |= set(self._save(saves))
            self._saves_ended(meta.saves)
            return
        ready = self._copier.step_done()  # the forward's writes, for a device copy
        saver = self._saver
        for t in meta.saves:
            if saver is not None:
                r = saver.save(t.req_id, t, len(t.keys))
            else:
                r = mover.save(t.req_id, (t, ready), len(t.keys))
            if r != "queued":
                pool.count("save_skipped", len(t.keys))
                self._abandon([t])
                self._saves_ended([t])
            q = saver or mover
            if r == "full":
                pool.warn("queue", "the save queue is full (%d blocks wait to be saved); "
                          "new blocks are skipped and counted until it drains "
                          "(save_queue_blocks)", q.queued)
            elif r == "queued" and q.queued * 2 <= q.cap:
                pool.clear("queue", "the save queue has room again")
        mover.finish(meta.finished)
        if saver is not None:
            saver.flush()
            saver.finish(meta.finished)

    def _saves_ended(self, saves: Sequence[Transfer]) -> None:
        """Tell the scheduler these saves ended (their keys are in flight
        no more, and the blocks it pinned for them can go)."""
        for t in saves:
            if t.job:
                self._ended[t.job] = 1

    def _save_off_step(self, jobs: List[Tuple[Transfer, Any]]) -> List[str]:
        with self._copier.side_stream():
            for _, ready in jobs:
                self._copier.wait(ready)
            return self._save([t for t, _ in jobs])

    def _save(self, saves: List[Transfer]) -> List[str]:
        """Copy the saves' blocks into fresh pages and publish them under
        their keys (a page some other instance published first is let go);
        the requests whose save failed (their later blocks cannot chain).
        Its duration goes to vllm:kvpool_save_seconds."""
        t0 = time.monotonic()
        try:
            if self._copier.whole and all(t.groups is None for t in saves):
                return self._save_whole(saves)
            return self._save_now(saves)
        except BaseException:
            # whatever failed (the caller says it), a decode engine does
            # not wait for these blocks (abandoning one twice is harmless)
            self._abandon(saves)
            raise
        finally:
            if saves:
                self._pool.observe("save_seconds", time.monotonic() - t0)

    def _save_whole(self, saves: List[Transfer]) -> List[str]:
        """_save_now() of a model with one KV cache group: one C call
        (alloc, copy, publish each request's blocks, release) that lets
        the GIL go once."""
        pool = self._pool
        total = sum(len(t.keys) for t in saves)
        chains: Dict[str, int] = {}
        jobs = [(chains.setdefault(t.req_id, len(chains)), t.keys, t.parent, t.block_ids,
                 t.tokens) for t in saves]
        failed: List[str] = []
        with pool.lock:
            c, view = pool.client_view()
            if c is None:
                pool.count("save_skipped", total)
                return [t.req_id for t in saves]
            try:
                results, err = self._copier.save(c, view, jobs, self._prio)
            except (OSError, ValueError) as e:
                pool.failed("save", e)
                pool.count("save_skipped", total)
                self._abandon(saves)
                return [t.req_id for t in saves]
            pool.clear("full", "the pool has room again; saving")
            for t, r in zip(saves, results):
                if isinstance(r, tuple):
                    pool.count("saved_blocks", r[0])
                    pool.count("dedups", r[1])
                    continue
                pool.count("save_skipped", len(t.keys))
                if t.req_id not in failed:
                    failed.append(t.req_id)
                    self._abandon([t])
                if r is not None:  # its publish failed (None: an earlier one of its request)
                    pool.failed("publish", r)
            if err is not None:
                pool.failed("release", err)
        return failed

    def _save_now(self, saves: List[Transfer]) -> List[str]:
        pool = self._pool
        total = sum(len(t.keys) for t in saves)
        failed: List[str] = []
        with pool.lock:
            c, view = pool.client_view()
            if c is None:
                pool.count("save_skipped", total)
                return [t.req_id for t in saves]
            try:
                fresh = c.alloc(total)
            except OSError as e:
                pool.failed("save", e)
                pool.count("save_skipped", total)
                self._abandon(saves)
                return [t.req_id for t in saves]
            pool.clear("full", "the pool has room again; saving")
            pairs: List[List[Tuple[int, int]]] = []
            j = 0
            for t in saves:
                for g, gp in enumerate(self._group_pairs(t, fresh[j:j + len(t.keys)])):
                    if g < len(pairs):
                        pairs[g] += gp
                    else:
                        pairs.append(gp)
                j += len(t.keys)
            release = list(fresh)
            try:
                self._copy(c, view, True, pairs)
                j = 0
                for t in saves:
                    pages = fresh[j:j + len(t.keys)]
                    j += len(t.keys)
                    if t.req_id in failed:  # its parent is not in the pool
                        pool.count("save_skipped", len(pages))
                        continue
                    try:
                        canon = c.publish(pages, t.keys, parent=t.parent, priority=self._prio,
                                          tokens=t.tokens)
                    except OSError as e:
                        if isinstance(e, (kvpool.DaemonGone, kvpool.NotConnected)):
                            raise
                        pool.failed("publish", e)
                        pool.count("save_skipped", len(pages))
                        failed.append(t.req_id)
                        self._abandon([t])
                        continue
                    dups = [q for p, q in zip(pages, canon) if q != p]
                    release += dups
                    pool.count("saved_blocks", len(pages) - len(dups))
                    pool.count("dedups", len(dups))
                c.release(release)
            except (OSError, ValueError) as e:
                pool.failed("save", e)
                pool.count("save_skipped", total)
                self._abandon(saves)
                return [t.req_id for t in saves]
        return failed

    def get_finished(self, finished_req_ids: Set[str]
                     ) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """The background loads done (their requests may run) and the
        finished requests whose blocks vLLM kept until their saves ended."""
        self._finish_by_layer()  # vLLM may ask before wait_for_save (speculative decoding)
        meta = self._meta()
        if meta is not None and meta.empty and self._mover is not None:
            # nothing else to compute: the loads off the step are reported
            # in this step, not polled by the next ones
            self._mover.wait_loads(EMPTY_STEP_WAIT_S)
        if self._mover is not None:
            # kept in self._recving until returned: were a later step here
            # to raise, the hook's fallback (no_results()) answers them
            for t, failed in self._mover.loaded():
                self._recving.add(t.req_id)
                self._loaded.add(t.req_id)
                self._load_failed(t, failed)
            self._saves_ended([t for t, _ in self._mover.ended()])
        if self._saver is not None:
            self._saves_ended(self._saver.ended())
        if self._pool is not None:
            self._pool.flush_abandoned()
        sending = self._sends_done()
        recving, self._recving = self._recving, set()
        return sending or None, recving or None

    def _sends_done(self) -> Set[str]:
        """The finished requests vLLM kept for their saves whose saves all
        ended: their blocks go back now."""
        sending = {r for r in self._held if not (self._mover is not None and self._mover.busy(r)
                                                  or self._saver is not None and
                                                  self._saver.busy(r))}
        self._held -= sending
        return sending

    def get_transfer_results(self, finished_req_ids: Set[str]):
        """get_finished(), and the background loads that failed (with more
        than one KV cache group: vLLM recomputes those requests whole)."""
        sending, recving = self.get_finished(finished_req_ids)
        failed, self._failed = self._failed, set()
        return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                          finished_recving=set(recving or ()) | failed,
                                          failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        self._finish_by_layer()
        return self.take_load_errors()

    def build_connector_worker_meta(self) -> Optional[KVConnectorWorkerMetadata]:
        with self._cost_lock:
            cost, self._cost = self._cost, (0.0, 0)
        if not self._loaded and not self._ended and not self._failed_any and not cost[1]:
            return None
        loaded, self._loaded = self._loaded, set()
        ended, self._ended = self._ended, {}
        failed, self._failed_any = self._failed_any, set()
        return KVPoolWorkerMetadata(loaded, ended, failed, cost[0], cost[1])

    def shutdown(self) -> None:
        self._finish_by_layer()
        if self._layers is not None:
            self._layers.close()
            self._layers = None
        if self._mover is not None:
            dropped = self._mover.close()
            if dropped and self._pool is not None:
                self._pool.count("save_skipped", dropped)
            self._mover = None
        if self._saver is not None:
            dropped = self._saver.close()
            if dropped and self._pool is not None:
                self._pool.count("save_skipped", dropped)
            self._saver = None
        if self._copier is not None:
            self._copier.close()
        if self._waits is not None:
            self._waits.close()
        if self._pool is not None:
            self._pool.close()
