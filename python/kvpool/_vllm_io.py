# SPDX-License-Identifier: MIT
"""The vLLM connector's data path (kvpool.vllm): block copies between pool
pages and vLLM's KV tensors, and the worker thread that runs loads and saves
off the engine's step."""
from __future__ import annotations

import collections
import contextlib
import os
import threading
from typing import Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple

import torch

import kvpool
from kvpool import _kvpool
from kvpool._connector import pool_side

__all__ = ["Unsupported", "DTYPES", "Copier", "Mover", "LayerLoader", "cpu_list"]

DTYPES = {torch.float16: kvpool.DType.F16, torch.bfloat16: kvpool.DType.BF16,
          torch.float32: kvpool.DType.F32, torch.uint8: kvpool.DType.FP8}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        DTYPES[getattr(torch, _name)] = kvpool.DType.FP8


def cpu_list(spec) -> Optional[Set[int]]:
    """CPUs as "0,2-3" (or a list of ints) -> {0, 2, 3}; None for none."""
    if spec is None or spec == "":
        return None
    if isinstance(spec, int):
        spec = str(spec)
    elif not isinstance(spec, str):
        spec = ",".join(str(int(c)) for c in spec)
    out: Set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    if not out or min(out) < 0:
        raise ValueError(spec)
    return out


class Unsupported(Exception):
    """The model's KV cache is not one kvpool pages hold (said once, then
    the engine runs without the connector)."""


# --- block copies ---------------------------------------------------------------

class Copier:
    """Copies between pool pages and vLLM's per-layer [block, head, token,
    K|V] views (K and V of one size or not; MLA's [block, token, latent] or
    [block, 1, token, latent], K alone): one C call for many blocks with
    host tensors (threads, the GIL released); torch indexing with device
    tensors, over DMA from the host pool registered once with the CUDA
    driver. kv_split: the attention backend reads each head's [token,
    K|V] as its tokens' K rows, then their V rows (vLLM's CPU_ATTN views
    [block, head, 2 x token, head] and chunks it); the page holds K and V
    as everywhere else (docs/kv-layout.md)."""

    def __init__(self, ident, layers: Sequence[torch.Tensor], threads: int,
                 use_torch: bool = False, kv_split: bool = False) -> None:
        g = ident.geometry
        self.g, self.layers = g, list(layers)
        self.es = kvpool.DType(g.dtype).size
        t0 = self.layers[0]
        want = (g.kv_heads, g.block_tokens, g.head_dim + g.v_dim)
        # MLA's latent cache may come without its head axis (one head)
        self.flat = t0.dim() == 3 and g.kv_heads == 1 and not g.v_dim
        for name, t in zip(ident.layer_names, self.layers):
            if t.dim() != 4 - self.flat or tuple(t.shape[1:]) != want[self.flat:] or \
                    t.stride(-1) != 1 or t.shape[0] != t0.shape[0] or \
                    t.stride() != t0.stride() or DTYPES.get(t.dtype) != g.dtype:
                raise Unsupported("layer %s's KV cache is %s %s strides %s; kvpool copies "
                                  "[blocks, %d, %d, %d] views with K|V innermost"
                                  % (name, t.dtype, tuple(t.shape), t.stride(), *want))
        if kv_split and (self.flat or g.v_dim != g.head_dim):
            raise Unsupported("an attention backend that stores K rows then V rows with "
                              "K of %d and V of %d elements" % (g.head_dim, g.v_dim))
        self.kv_split = kv_split
        self.num_blocks = t0.shape[0]
        self.device = t0.device
        self.threads = max(1, min(16, threads))
        self.use_torch = use_torch or self.device.type != "cpu"
        self._vside = None  # _vllm_side(), computed once (vLLM's tensors stay put)
        self._pside: Tuple = (None, None)  # pool_side() of the view last used
        self.registered: Dict[int, int] = {}  # slab -> its address, 0: not ours
        self.reg_base: Optional[int] = None
        self.slab_pages = 0
        self._stream = None  # the worker thread's CUDA stream

    def side_stream(self):
        """The context the worker thread copies in: with device tensors a
        CUDA stream of its own, so its copies never wait for the forward."""
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return torch.cuda.stream(self._stream)

    def step_done(self):
        """What a copy off the step waits for before it reads the step's KV:
        with device tensors an event after the forward's kernels, else None
        (the forward wrote them before it returned)."""
        if self.device.type != "cuda":
            return None
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.device))
        return ev

    def wait(self, ready) -> None:
        """Order the current stream's next copies after ready (step_done())."""
        if ready is not None:
            torch.cuda.current_stream(self.device).wait_event(ready)

    @property
    def whole(self) -> bool:
        """Loads and saves run as one C call each (load() and save()): the
        daemon's round trips and the copy without the GIL in between (host
        tensors and kvpool's copier)."""
        return not self.use_torch

    def _sides(self, view, to_pool: bool) -> tuple:
        """copy_blocks()'s (dst_layers, dst_strides, src_layers, src_strides,
        heads, tokens, run) of every layer, the pool one side."""
        vl, vs = self._vllm_side()
        pv, stride, pages, _ = view
        key = (pv.address, pages, stride)
        if self._pside[0] != key:
            self._pside = (key, pool_side(self.g, pv.address, pages, stride))
        pl, ps = self._pside[1]
        geo = (self.g.kv_heads, self.g.block_tokens, self.g.head_dim * self.es)
        return (pl, ps, vl, vs) + geo if to_pool else (vl, vs, pl, ps) + geo

    def load(self, client: kvpool.Client, view, keys: List[bytes], parent: Optional[bytes],
             blocks: List[int]) -> Tuple[int, Optional[BaseException]]:
        """Lease keys' pages, copy those found into vLLM's blocks (every
        layer), let them go: one C call, the GIL released once. How many
        leading blocks got their KV, and the release's error if it failed
        (the copies are done then). OSError: nothing leased; ValueError: a
        block outside vLLM's tensors, nothing copied."""
        for b in blocks:
            if not 0 <= b < self.num_blocks:
                raise ValueError("vLLM block %d is not one of the %d blocks" %
                                 (b, self.num_blocks))
        return client.load_blocks(keys, parent, blocks, *self._sides(view, False),
                                  self.threads, self.g.v_dim * self.es)

    def save(self, client: kvpool.Client, view, jobs: List[tuple], priority: int):
        """jobs: (chain, keys, parent, vLLM blocks, token ids); allocate
        their pages, copy the blocks in, publish each job (a job after a
        failed one of its chain is skipped), release: one C call, the GIL
        released once. ([(saved, deduplicated) | its exception | None], the
        release's error or None); OSError (the allocation) or ValueError:
        nothing published."""
        for job in jobs:
            for b in job[3]:
                if not 0 <= b < self.num_blocks:
                    raise ValueError("vLLM block %d is not one of the %d blocks" %
                                     (b, self.num_blocks))
        return client.save_blocks(jobs, *self._sides(view, True), self.threads,
                                  self.g.v_dim * self.es, priority)

    def _vllm_side(self):
        """copy_blocks()'s (layers, strides) of vLLM's tensors, computed
        once (they stay put until a new Copier is made)."""
        if self._vside is None:
            self._vside = self._vllm_layout()
        return self._vside

    def _vllm_layout(self):
        es = self.es
        out = []
        for t in self.layers:
            st = t.untyped_storage()
            out.append((t.data_ptr(), st.data_ptr(), st.data_ptr() + st.nbytes()))
        t = self.layers[0]
        if self.flat:  # [block, token, latent]: one head
            return out, (t.stride(0) * es, self.g.head_dim * es, 0, t.stride(1) * es)
        if self.kv_split:  # a head's tokens' K rows, then their V rows
            D, T = self.g.head_dim, self.g.block_tokens
            return out, (t.stride(0) * es, T * D * es, t.stride(1) * es, D * es)
        return out, (t.stride(0) * es, self.g.head_dim * es, t.stride(1) * es,
                     t.stride(2) * es)

    def copy(self, client: Optional[kvpool.Client], view, to_pool: bool,
             pairs: List[Tuple[int, int]], layer: Optional[int] = None,
             indexed: bool = False, only: Optional[Sequence[int]] = None) -> None:
        """pairs: (vLLM block id, pool page handle), or with indexed the
        page's index in the view (client.page_index(), asked under the
        pool's lock: no daemon call can hold the client then); layer: that
        layer's K and V alone (host tensors); only: these layers' (one KV
        cache group's block ids), else every layer's."""
        if not pairs:
            return
        if only is not None and len(only) == len(self.layers):
            only = None
        for b, _ in pairs:
            if not 0 <= b < self.num_blocks:
                raise ValueError("vLLM block %d is not one of the %d blocks" %
                                 (b, self.num_blocks))
        idx = list(pairs) if indexed else [(b, client.page_index(p)) for b, p in pairs]
        if self.use_torch:
            # a staging tensor of at most 64 blocks at a time: outside what
            # vLLM budgeted on the device
            for i in range(0, len(idx), 64):
                self._copy_torch(client, view, to_pool, idx[i:i + 64], only)
            return
        pv, stride, pages, _ = view  # kvpool.Client.view()
        vl, vs = self._vllm_side()
        pl, ps = pool_side(self.g, pv.address, pages, stride)
        if layer is not None:
            vl, pl = vl[layer:layer + 1], pl[layer:layer + 1]
        elif only is not None:
            vl, pl = [vl[i] for i in only], [pl[i] for i in only]
        mv = torch.tensor(idx if not to_pool else [(i, b) for b, i in idx],
                          dtype=torch.int64).numpy()
        g = self.g
        run, run_v = g.head_dim * self.es, g.v_dim * self.es
        if to_pool:
            _kvpool.copy_blocks(pl, ps, vl, vs, mv, g.kv_heads, g.block_tokens, run,
                                self.threads, run_v)
        else:
            _kvpool.copy_blocks(vl, vs, pl, ps, mv, g.kv_heads, g.block_tokens, run,
                                self.threads, run_v)

    def _pool_tensor(self, client: kvpool.Client, view, indexes) -> torch.Tensor:
        """The pool as one host tensor; with device tensors, the slabs holding
        indexes registered with CUDA first (once each: page-locked, so the
        copies are DMA). The view's holes cannot be registered: slab by slab."""
        pool = client.kv_tensor()  # (pages, layers) + the page's layer shape, host
        if self.device.type != "cuda":
            return pool
        pv, stride, _, per_slab = view
        if self.reg_base != pv.address:
            self.close()  # a new connection maps the pool elsewhere
            self.reg_base = pv.address
            self.slab_pages = int(client.info()["pages_per_slab"])
        for slab in {i // per_slab for i in indexes} - set(self.registered):
            at = pv.address + slab * per_slab * stride
            err = int(torch.cuda.cudart().cudaHostRegister(at, self.slab_pages * stride, 0))
            if err not in (0, 712):  # 712: already registered (another copier's)
                raise Unsupported("cudaHostRegister of pool slab %d (%d bytes) failed: "
                                  "error %d" % (slab, self.slab_pages * stride, err))
            self.registered[slab] = at if err == 0 else 0
        return pool

    def _copy_torch(self, client: kvpool.Client, view, to_pool: bool,
                    idx: List[Tuple[int, int]], only: Optional[Sequence[int]] = None) -> None:
        g = self.g
        pool = self._pool_tensor(client, view, [i for _, i in idx])
        blocks = torch.tensor([b for b, _ in idx], dtype=torch.int64, device=self.device)
        n = len(idx)
        stage = torch.empty((n,) + tuple(pool.shape[1:]), dtype=pool.dtype,
                            device=self.device)
        runs = _runs([i for _, i in idx])
        nb = self.device.type == "cuda"
        H, T, D, V = g.kv_heads, g.block_tokens, g.head_dim, g.v_dim
        if not to_pool:
            for j, i, r in runs:  # pool -> stage: DMA from registered memory
                stage[j:j + r].copy_(pool[i:i + r], non_blocking=nb)
            for l in only if only is not None else range(len(self.layers)):
                t = self.layers[l]
                flat = stage[:, l].reshape(n, -1)  # K's heads x tokens x D, then V's
                cells = flat[:, :H * T * D].reshape(n, H, T, D)
                if self.kv_split:  # [head][K's tokens, then V's]
                    cells = torch.stack([cells, flat[:, H * T * D:].reshape(n, H, T, V)], 2)
                elif V:
                    cells = torch.cat([cells, flat[:, H * T * D:].reshape(n, H, T, V)], -1)
                t.index_copy_(0, blocks, cells.reshape((n,) + tuple(t.shape[1:])).view(t.dtype))
        else:
            for l in only if only is not None else range(len(self.layers)):
                cells = self.layers[l].index_select(0, blocks).view(stage.dtype)
                if self.kv_split:  # [head][K's tokens, then V's]
                    cells = cells.reshape(n, H, 2, T, D)
                    flat = torch.cat([cells[:, :, 0].reshape(n, -1),
                                      cells[:, :, 1].reshape(n, -1)], 1)
                else:
                    cells = cells.reshape(n, H, T, D + V)
                    flat = cells[..., :D].reshape(n, -1)
                    if V:
                        flat = torch.cat([flat, cells[..., D:].reshape(n, -1)], 1)
                stage[:, l].copy_(flat.reshape(stage[:, l].shape))
            for j, i, r in runs:
                if only is None:
                    pool[i:i + r].copy_(stage[j:j + r], non_blocking=nb)
                else:  # the other groups' layers of these pages are theirs to write
                    for l in only:
                        pool[i:i + r, l].copy_(stage[j:j + r, l], non_blocking=nb)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()

    def close(self) -> None:
        """Unregister the slabs this copier registered with CUDA."""
        for at in self.registered.values():
            if at:
                torch.cuda.cudart().cudaHostUnregister(at)
        self.registered = {}
        self.reg_base = None


def _runs(indexes: List[int]) -> List[Tuple[int, int, int]]:
    """(position, first index, length) of each run of consecutive indexes."""
    out: List[Tuple[int, int, int]] = []
    for j, i in enumerate(indexes):
        if out and out[-1][1] + out[-1][2] == i and out[-1][0] + out[-1][2] == j:
            p, f, r = out[-1]
            out[-1] = (p, f, r + 1)
        else:
            out.append((j, i, 1))
    return out


# --- transfers off the step ------------------------------------------------------

class _Rid:
    __slots__ = ("busy", "broken", "finished")

    def __init__(self) -> None:
        self.busy = 0  # save jobs queued or running
        self.broken = False  # a save failed or was skipped: later blocks cannot chain
        self.finished = False  # vLLM finished the request


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
            r = self._rids.setdefault(rid, _Rid())
            if r.broken:
                return "broken"
            if self.queued and self.queued + blocks > self.cap:
                r.broken = True
                return "full"
            r.busy += 1
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
        if self._cpus:
            try:
                os.sched_setaffinity(0, self._cpus)  # this thread only
            except (OSError, ValueError, OverflowError) as e:
                self._log.warning("kvpool: the connector's thread cannot run on CPUs %s (%s); "
                                  "it runs where the model runner does",
                                  sorted(self._cpus), e)
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
