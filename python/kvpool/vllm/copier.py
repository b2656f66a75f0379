# SPDX-License-Identifier: MIT
"""The vLLM connector's data path: block copies between pool pages and
vLLM's KV tensors (the Copier), and what a worker needs to know of them
(the dtypes kvpool pages hold, a CPU list, what is Unsupported)."""
from __future__ import annotations

import contextlib
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

import kvpool
from kvpool import _kvpool
from kvpool._connector import pool_side

__all__ = ["Unsupported", "DTYPES", "Copier", "cpu_list"]

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

    def check_blocks(self, blocks: Sequence[int]) -> None:
        """ValueError unless every vLLM block id is one of vLLM's blocks."""
        for b in blocks:
            if not 0 <= b < self.num_blocks:
                raise ValueError("vLLM block %d is not one of the %d blocks" %
                                 (b, self.num_blocks))

    def save_args(self, view) -> tuple:
        """Client.save_blocks()'s (and a Saver's submit()'s) arguments after
        the jobs and before the priority, the pool side through view."""
        return self._sides(view, True) + (self.threads, self.g.v_dim * self.es)

    def save(self, client: kvpool.Client, view, jobs: List[tuple], priority: int):
        """jobs: (chain, keys, parent, vLLM blocks, token ids); allocate
        their pages, copy the blocks in, publish each job (a job after a
        failed one of its chain is skipped), release: one C call, the GIL
        released once. ([(saved, deduplicated) | its exception | None], the
        release's error or None); OSError (the allocation) or ValueError:
        nothing published."""
        for job in jobs:
            self.check_blocks(job[3])
        return client.save_blocks(jobs, *self.save_args(view), priority)

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
