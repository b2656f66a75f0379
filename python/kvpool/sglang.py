# SPDX-License-Identifier: MIT
"""kvpool as SGLang's HiCache storage backend (its L3): one kvpoold shared by
every SGLang instance on the machine (docs/sglang.md).

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "kvpool",
            "module_path": "kvpool.sglang", "class_name": "KVPoolStorage",
            "interface_v1": 1}'

Keys are SGLang's page hashes (hex SHA-256 strings, stored as their 32
bytes). With "interface_v1" SGLang calls batch_get_v1/batch_set_v1, which
copy between pool pages and the host pool's pages in one call for the
whole batch (no staging tensor); get/set/batch_get/batch_set serve the
generic path. Pages are stored in kvpool's layout (layers, 2, kv_heads,
page_size, head_dim) whatever the host pool's --hicache-mem-layout is.

Extra config keys besides SGLang's: "socket" (default $KVPOOL_SOCKET, else
/run/kvpool/kvpool.sock), "namespace" (default: derived from the identity
below), "model" (default SGLang's model name), "retry_seconds" (default 5),
"copy_threads" (default torch's thread count), "priority" (0..2).

The namespace's identity is SGLang, the model, the KV dtype, the page size
and the tensor/pipeline-parallel rank, so SGLang pages never mix with
vLLM's or another model's. A full pool or a dead daemon never stops
SGLang: lookups miss, saves fail (SGLang keeps the pages in its host tier)
and each condition is logged once.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
from typing import Any, List, Optional, Sequence, Tuple

import torch

from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
)

import kvpool
from kvpool import _kvpool
from kvpool._connector import Pool, key_bytes, pool_side

logger = logging.getLogger(__name__)

__all__ = ["KVPoolStorage"]

_DTYPES = {torch.float16: kvpool.DType.F16, torch.bfloat16: kvpool.DType.BF16,
           torch.float32: kvpool.DType.F32, torch.uint8: kvpool.DType.FP8}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = kvpool.DType.FP8

# Each host layout's kv_buffer dimensions, by name (pool_host/mha.py's
# init_kv_buffer): "page" dims index pages, "token" ones tokens of all pages.
_LAYOUTS = {
    "layer_first": ("kv", "layer", "token", "head", "dim"),
    "page_first": ("kv", "token", "layer", "head", "dim"),
    "page_first_direct": ("kv", "page", "layer", "token", "head", "dim"),
    "page_head": ("kv", "page", "head", "token", "layer", "dim"),
}


class KVPoolStorage(HiCacheStorage):
    """SGLang's HiCacheStorage over kvpoold (see the module's docstring)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None) -> None:
        self.config = storage_config
        extra = dict(storage_config.extra_config or {})
        self.extra = extra
        self.socket = extra.get("socket")
        self.retry = float(extra.get("retry_seconds", 5.0))
        self.timeout = float(extra.get("timeout_seconds", 5.0))
        if not 0.0 <= self.timeout <= 3600.0:
            raise ValueError("kvpool: extra config \"timeout_seconds\": %r is not 0 (no "
                             "limit) to 3600 seconds; fix or remove it" % (self.timeout,))
        self.prio = int(extra.get("priority", kvpool.PRIO_NORMAL))
        self.threads = max(1, min(16, int(extra.get("copy_threads", 0)) or
                                  torch.get_num_threads()))
        self.pool: Optional[Pool] = None
        self.mem_pool_host = None

    # -- setup ------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host) -> None:
        super().register_mem_pool_host(mem_pool_host)
        h, cfg = mem_pool_host, self.config
        if cfg.is_mla_model:
            raise ValueError("kvpool.sglang: MLA models' latent KV is not a K/V page; use "
                             "another HiCache backend for them")
        layout = getattr(h, "layout", None)
        buf = getattr(h, "kv_buffer", None)
        if layout not in _LAYOUTS or buf is None or buf.dim() != len(_LAYOUTS[layout]):
            raise ValueError("kvpool.sglang: host pool %s with layout %r is not one kvpool "
                             "copies (%s)" % (type(h).__name__, layout,
                                              ", ".join(sorted(_LAYOUTS))))
        if getattr(h, "v_head_dim", h.head_dim) != h.head_dim or h.dtype not in _DTYPES:
            raise ValueError("kvpool.sglang: K/V head sizes %d/%d or dtype %s not supported"
                             % (h.head_dim, getattr(h, "v_head_dim", h.head_dim), h.dtype))
        model = str(self.extra.get("model") or cfg.model_name or "model")
        ident = "sglang %s %s p%d tp%d/%d pp%d/%d" % (
            model, str(h.dtype).replace("torch.", ""), h.page_size, cfg.tp_rank, cfg.tp_size,
            cfg.pp_rank, cfg.pp_size)
        if len(ident) > 127:
            ident = "sglang sha256:%s" % hashlib.sha256(ident.encode()).hexdigest()[:40]
        ns = self.extra.get("namespace")
        if ns is None:
            base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(model.rstrip("/")))[:40]
            ns = "sglang.%s.%s" % (base, hashlib.sha256(ident.encode()).hexdigest()[:12])
        elif cfg.tp_size > 1 or cfg.pp_size > 1:
            ns = "%s.tp%d.pp%d" % (ns, cfg.tp_rank, cfg.pp_rank)
        self.geometry = kvpool.Geometry(layers=h.layer_num, kv_heads=h.head_num,
                                        head_dim=h.head_dim, block_tokens=h.page_size,
                                        dtype=_DTYPES[h.dtype], model=ident)
        self.layout = layout
        self.pool = Pool(logger, "sglang tp%d" % cfg.tp_rank, self.socket, ns, self.geometry,
                         retry=self.retry, name="sglang tp%d" % cfg.tp_rank,
                         timeout=self.timeout)

    # -- the host pool's side of copy_blocks ------------------------------------

    def _host_side(self):
        h = self.mem_pool_host
        buf = h.kv_buffer
        dims = _LAYOUTS[self.layout]
        es = buf.element_size()
        st = {d: buf.stride(i) * es for i, d in enumerate(dims)}
        block = st["page"] if "page" in st else st["token"] * h.page_size
        storage = buf.untyped_storage()
        lo = storage.data_ptr()
        hi = lo + storage.nbytes()
        layers = [(buf.data_ptr() + l * st["layer"], lo, hi) for l in range(h.layer_num)]
        return layers, (block, st["kv"], st["head"], st["token"])

    def _client(self):
        return self.pool.client_view() if self.pool is not None else (None, None)

    def _copy(self, c, view, to_pool: bool, pairs: List[Tuple[int, int]]) -> None:
        """pairs: (host pool page index, kvpool page handle)."""
        g = self.geometry
        pv, stride, pages, _ = view
        pl, ps = pool_side(g, pv.address, pages, stride)
        hl, hs = self._host_side()
        n_host = self.mem_pool_host.size // self.mem_pool_host.page_size
        rows = []
        for hp, page in pairs:
            if not 0 <= hp < n_host:
                raise ValueError("host page %d is not one of the %d" % (hp, n_host))
            i = c.page_index(page)
            rows.append((i, hp) if to_pool else (hp, i))
        arr = torch.tensor(rows, dtype=torch.int64).numpy()
        run = g.head_dim * kvpool.DType(g.dtype).size
        if to_pool:
            _kvpool.copy_blocks(pl, ps, hl, hs, arr, g.kv_heads, g.block_tokens, run,
                                self.threads)
        else:
            _kvpool.copy_blocks(hl, hs, pl, ps, arr, g.kv_heads, g.block_tokens, run,
                                self.threads)

    def _host_pages(self, host_indices: torch.Tensor, n: int) -> List[int]:
        p = self.mem_pool_host.page_size
        idx = host_indices.tolist()
        if len(idx) < n * p:
            raise ValueError("%d host indices for %d pages of %d" % (len(idx), n, p))
        return [idx[i * p] // p for i in range(n)]

    @staticmethod
    def _parent(extra_info: Optional[HiCacheStorageExtraInfo]) -> Optional[bytes]:
        if extra_info is not None and extra_info.prefix_keys:
            return key_bytes(extra_info.prefix_keys[-1])
        return None

    # -- lookups --------------------------------------------------------------

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        if not keys or self.pool is None:
            return 0
        with self.pool.lock:
            c, _ = self._client()
            if c is None:
                return 0
            try:
                hit = self.pool.looked_up(c, [key_bytes(k) for k in keys])
            except OSError as e:
                self.pool.failed("exists", e)
                return 0
        self.pool.count("lookups")
        self.pool.count("hit_pages", hit)
        return hit

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- zero-copy batches (interface_v1) -----------------------------------------

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        n = len(keys)
        if not n or self.pool is None:
            return [False] * n
        with self.pool.lock:
            c, view = self._client()
            if c is None:
                return [False] * n
            try:
                pages = self.pool.load(c, [key_bytes(k) for k in keys])
            except OSError as e:
                self.pool.failed("get", e)
                return [False] * n
            try:
                self._copy(c, view, False, list(zip(self._host_pages(host_indices, n), pages)))
                got = len(pages)
            except (OSError, ValueError) as e:
                self.pool.failed("get", e)
                got = 0
            try:
                if pages:
                    c.release(pages)
            except OSError as e:
                self.pool.failed("release", e)
        self.pool.count("loaded_pages", got)
        return [True] * got + [False] * (n - got)

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        n = len(keys)
        if not n or self.pool is None:
            return [False] * n
        kb = [key_bytes(k) for k in keys]
        with self.pool.lock:
            c, view = self._client()
            if c is None:
                self.pool.count("save_skipped", n)
                return [False] * n
            try:
                k = self.pool.stored(c, kb)  # stored by any instance: not again
                if k == n:
                    self.pool.count("dedups", n)
                    return [True] * n
                fresh = c.alloc(n - k)
            except OSError as e:
                self.pool.failed("set", e)
                self.pool.count("save_skipped", n)
                return [False] * n
            self.pool.clear("full", "the pool has room again; saving")
            ok = [True] * k + [False] * (n - k)
            try:
                hp = self._host_pages(host_indices, n)[k:]
                self._copy(c, view, True, list(zip(hp, fresh)))
                parent = kb[k - 1] if k else self._parent(extra_info)
                canon = c.publish(fresh, kb[k:], parent=parent, priority=self.prio)
                dups = [q for p, q in zip(fresh, canon) if q != p]
                c.release(fresh + dups)
                ok = [True] * n
                self.pool.count("saved_pages", len(fresh) - len(dups))
                self.pool.count("dedups", k + len(dups))
            except (OSError, ValueError) as e:
                self.pool.failed("set", e)
                self.pool.count("save_skipped", n - k)
                try:
                    c.release(fresh)
                except OSError:
                    pass
        return ok

    # -- the generic path: flat pages in the host pool's layout ---------------------

    def _canonical(self, flat: torch.Tensor) -> torch.Tensor:
        """A flat page of the host layout (get_data_page()) viewed as kvpool's
        (layers, 2, kv_heads, page_size, head_dim)."""
        h = self.mem_pool_host
        L, H, P, D = h.layer_num, h.head_num, h.page_size, h.head_dim
        if self.layout == "layer_first":
            return flat.view(2, L, P, H, D).permute(1, 0, 3, 2, 4)
        if self.layout == "page_first":
            return flat.view(2, P, L, H, D).permute(2, 0, 3, 1, 4)
        if self.layout == "page_first_direct":
            return flat.view(2, L, P, H, D).permute(1, 0, 3, 2, 4)
        return flat.view(2, H, P, L, D).permute(3, 0, 1, 2, 4)  # page_head

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        r = self.batch_get([key], [target_location])
        return r[0] if isinstance(r, list) else None

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Optional[torch.Tensor]]:
        n = len(keys)
        out: List[Optional[torch.Tensor]] = [None] * n
        if not n or self.pool is None or target_locations is None:
            return out
        with self.pool.lock:
            c, _ = self._client()
            if c is None:
                return out
            try:
                pages = self.pool.load(c, [key_bytes(k) for k in keys])
                for i, p in enumerate(pages):
                    dst = target_locations[i]
                    self._canonical(dst).copy_(c.page_tensor(p).view(dst.dtype))
                    out[i] = dst
                if pages:
                    c.release(pages)
            except (OSError, RuntimeError, ValueError) as e:
                self.pool.failed("get", e)
                return [None] * n
        self.pool.count("loaded_pages", sum(o is not None for o in out))
        return out

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        n = len(keys)
        if not n or self.pool is None or values is None:
            return False
        kb = [key_bytes(k) for k in keys]
        with self.pool.lock:
            c, _ = self._client()
            if c is None:
                self.pool.count("save_skipped", n)
                return False
            fresh: Sequence[int] = []
            try:
                k = self.pool.stored(c, kb)
                if k == n:
                    return True
                fresh = c.alloc(n - k)
                for p, v in zip(fresh, values[k:]):
                    t = c.page_tensor(p)
                    t.copy_(self._canonical(v.contiguous().view(-1)).view(t.dtype))
                canon = c.publish(fresh, kb[k:], parent=kb[k - 1] if k else None,
                                  priority=self.prio)
                c.release(list(fresh) + [q for p, q in zip(fresh, canon) if q != p])
            except (OSError, RuntimeError, ValueError) as e:
                self.pool.failed("set", e)
                self.pool.count("save_skipped", n)
                try:
                    if fresh:
                        c.release(list(fresh))
                except OSError:
                    pass
                return False
        self.pool.count("saved_pages", n - k)
        return True

    def clear(self) -> None:
        """SGLang's "clear the storage" leaves the pool as it is: other
        instances share the namespace (`kvpool drop NAME` forgets it once unused)."""
        return

    def get_stats(self):
        return self.pool.snapshot() if self.pool else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
