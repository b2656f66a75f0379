# SPDX-License-Identifier: MIT
"""kvpool as vLLM's KV connector: one kvpoold is the shared KV tier of every
vLLM instance on the machine (docs/vllm.md).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KVPoolConnector",
        "kv_connector_module_path": "kvpool.vllm", "kv_role": "kv_both"}'

Keys are vLLM's own block hashes (request.block_hashes), whatever
--prefix-caching-hash-algo is. The scheduler side leases the pages of a
request's longest cached prefix with one ACQUIRE and holds them until the
workers have copied them (they report it in their per-step metadata) or the
request ends; the worker side copies pool pages into the allocated vLLM
blocks before the forward, and full computed blocks into fresh pool pages
after it, published under their hashes (a block some other instance
published first is dropped, not stored twice). Loads and saves are
synchronous within the step, one batched copy each.

kv_connector_extra_config keys: "socket" (kvpoold's socket; default
$KVPOOL_SOCKET, else /run/kvpool/kvpool.sock), "namespace" (default: one
derived from the identity below), "model" (the model name in the identity;
default vLLM's model), "retry_seconds" (how often to try a daemon that is
gone, default 5), "copy_threads" (host copies; default torch's thread
count), "priority" (0..2, default 1).

The namespace's identity (the geometry's model string) is vLLM, the model,
the KV dtype, the hash algorithm, the block size and the tensor-parallel
rank: instances that differ in any of them never share pages. A full pool,
a dead daemon or a refused identity never stops the engine: lookups miss,
saves are skipped and counted, and each condition is logged once.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)
from vllm.logger import init_logger

import kvpool
from kvpool import _kvpool
from kvpool._connector import Pool, pool_side

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

logger = init_logger("vllm.kvpool")  # under vllm: its format, VLLM_LOGGING_LEVEL

__all__ = ["KVPoolConnector", "KVPoolMetadata", "KVPoolWorkerMetadata", "Identity",
           "identity_of", "key_seed_of"]

_DTYPES = {torch.float16: kvpool.DType.F16, torch.bfloat16: kvpool.DType.BF16,
           torch.float32: kvpool.DType.F32, torch.uint8: kvpool.DType.FP8}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = kvpool.DType.FP8


class Unsupported(Exception):
    """The model's KV cache is not one kvpool pages hold (said once, then
    the engine runs without the connector)."""


# --- identity ----------------------------------------------------------------

@dataclass(frozen=True)
class Identity:
    """What a namespace holds, derived from vLLM's config and KV cache spec."""
    namespace: str
    geometry: kvpool.Geometry
    scheme: kvpool.Scheme
    seed: str
    layer_names: Tuple[str, ...]  # in the page's layer order
    algo: str


def _layer_index(name: str) -> int:
    m = re.findall(r"\.(\d+)\.", "." + name + ".")
    return int(m[0]) if m else -1


def identity_of(vllm_config: "VllmConfig", kv_cache_config: "KVCacheConfig",
                tp_rank: int = 0) -> Identity:
    """The namespace, geometry and key scheme vLLM's config asks for, or
    Unsupported saying why."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise Unsupported("the model has %d KV cache groups (hybrid attention); kvpool "
                          "pages hold one full-attention group" % len(groups))
    spec = groups[0].kv_cache_spec
    if not isinstance(spec, FullAttentionSpec) or "MLA" in type(spec).__name__:
        raise Unsupported("KV cache spec %s is not full attention with K and V"
                          % type(spec).__name__)
    head_v = getattr(spec, "head_size_v", spec.head_size)
    if head_v != spec.head_size:
        raise Unsupported("K head size %d differs from V head size %d"
                          % (spec.head_size, head_v))
    if spec.dtype not in _DTYPES:
        raise Unsupported("KV dtype %s has no kvpool dtype" % spec.dtype)
    algo = vllm_config.cache_config.prefix_caching_hash_algo
    try:
        scheme = kvpool.scheme_of_vllm(algo)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    if algo.startswith("xxhash") and os.environ.get("PYTHONHASHSEED") is None:
        raise Unsupported("--prefix-caching-hash-algo %s without PYTHONHASHSEED draws a "
                          "random root hash in every process, so no other instance can "
                          "ever share its blocks: set PYTHONHASHSEED to one value on "
                          "every instance" % algo)
    names = tuple(sorted(groups[0].layer_names, key=lambda n: (_layer_index(n), n)))
    model = str(extra.get("model") or vllm_config.model_config.model)
    tp = vllm_config.parallel_config.tensor_parallel_size
    dtype = _DTYPES[spec.dtype]
    ident = "vllm %s %s %s b%d tp%d/%d" % (model, str(spec.dtype).replace("torch.", ""),
                                             algo, spec.block_size, tp_rank, tp)
    if len(ident) > 127:
        ident = "vllm sha256:%s" % hashlib.sha256(ident.encode()).hexdigest()[:40]
    ns = extra.get("namespace")
    if ns is None:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(model.rstrip("/")))[:40]
        ns = "vllm.%s.%s" % (base, hashlib.sha256(ident.encode()).hexdigest()[:12])
    elif tp > 1:
        ns = "%s.tp%d" % (ns, tp_rank)
    g = kvpool.Geometry(layers=len(names), kv_heads=spec.num_kv_heads,
                        head_dim=spec.head_size, block_tokens=spec.block_size,
                        dtype=dtype, model=ident)
    return Identity(ns, g, scheme, key_seed_of(algo), names, algo)


def key_seed_of(algo: str) -> str:
    """The seed vLLM derives its root block hash (NONE_HASH) from, for
    hash algorithm algo, in this process: the one init_none_hash() took if
    it ran here, else the one it will take, from the same inputs by the same
    function (PYTHONHASHSEED when set, else vLLM's fixed default for the
    SHA-256 algorithms). vLLM builds the scheduler, and so this connector,
    before its engine core calls init_none_hash(), and its workers never
    call it: get_none_hash_seed() alone would name the default seed there
    whatever PYTHONHASHSEED says. An xxhash algorithm without PYTHONHASHSEED
    (a random seed per process) is refused before this is asked."""
    from vllm.v1.core import kv_cache_utils as kcu
    resolved = getattr(kcu, "_NONE_HASH_SEED", None)
    if resolved is not None:
        return str(resolved)
    resolve = getattr(kcu, "resolve_none_hash_seed", None)
    if resolve is not None:
        from vllm.utils.hashing import get_hash_fn_by_name
        return str(resolve(get_hash_fn_by_name(algo)))
    seed = os.environ.get("PYTHONHASHSEED")
    return seed if seed is not None else getattr(kcu, "DEFAULT_NONE_HASH_SEED",
                                                 "vllm-none-hash")


def _seed_hint(seed: str) -> str:
    """What to change when kvpoold refuses this instance's key seed."""
    env = os.environ.get("PYTHONHASHSEED")
    if env is not None:
        return ("this instance derives its block hashes from PYTHONHASHSEED=%s: run "
                "kvpoold with --key-seed %s, or give every instance kvpoold's seed"
                % (env, env))
    return ("PYTHONHASHSEED is unset, so this instance derives its block hashes from "
            "vLLM's default seed '%s': set PYTHONHASHSEED to kvpoold's --key-seed" % seed)


def _extra(vllm_config: "VllmConfig") -> Dict[str, Any]:
    return dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})


# --- metadata -----------------------------------------------------------------

@dataclass
class _Transfer:
    req_id: str
    keys: List[bytes]  # one per block
    parent: Optional[bytes]  # the key of the block before keys[0], None at the root
    block_ids: List[int]  # the vLLM blocks, one per key
    tokens: Optional[List[int]] = None  # saves: the blocks' token ids (KV events)


@dataclass
class KVPoolMetadata(KVConnectorMetadata):
    """One step's work for the workers: blocks to load before the forward
    and to save after it."""
    loads: List[_Transfer] = field(default_factory=list)
    saves: List[_Transfer] = field(default_factory=list)
    finished: Set[str] = field(default_factory=set)


@dataclass
class KVPoolWorkerMetadata(KVConnectorWorkerMetadata):
    """What the workers report to the scheduler after a step: the requests
    whose loads are done (the scheduler's leases can go)."""
    loaded: Set[str] = field(default_factory=set)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        if isinstance(other, KVPoolWorkerMetadata):
            return KVPoolWorkerMetadata(self.loaded | other.loaded)
        return self


@dataclass
class _Lease:
    pages: List[int]  # blocks 0 .. hit of the request, leased
    keys: List[bytes]
    start: int  # the first block to load (vLLM computed the ones before)
    block_ids: Optional[List[int]] = None  # where they go, once vLLM allocated them
    sent: bool = False


# --- block copies ---------------------------------------------------------------

class _Copier:
    """Copies between pool pages and vLLM's per-layer [block, head, token,
    K|V] views: one C call for many blocks with host tensors (threads, the
    GIL released); torch indexing with device tensors, over DMA from the
    host pool registered once with the CUDA driver."""

    def __init__(self, ident: Identity, layers: Sequence[torch.Tensor], threads: int,
                 use_torch: bool = False) -> None:
        g = ident.geometry
        self.g, self.layers = g, list(layers)
        self.es = kvpool.DType(g.dtype).size
        t0 = self.layers[0]
        want = (g.kv_heads, g.block_tokens, 2 * g.head_dim)
        for name, t in zip(ident.layer_names, self.layers):
            if t.dim() != 4 or tuple(t.shape[1:]) != want or t.stride(3) != 1 or \
                    t.shape[0] != t0.shape[0] or t.stride() != t0.stride() or \
                    _DTYPES.get(t.dtype) != g.dtype:
                raise Unsupported("layer %s's KV cache is %s %s strides %s; kvpool copies "
                                  "[blocks, %d, %d, %d] views with K|V innermost"
                                  % (name, t.dtype, tuple(t.shape), t.stride(), *want))
        self.num_blocks = t0.shape[0]
        self.device = t0.device
        self.threads = max(1, min(16, threads))
        self.use_torch = use_torch or self.device.type != "cpu"
        self.registered: Dict[int, int] = {}  # slab -> its address, 0: not ours
        self.reg_base: Optional[int] = None
        self.slab_pages = 0

    def _vllm_side(self):
        es = self.es
        out = []
        for t in self.layers:
            st = t.untyped_storage()
            out.append((t.data_ptr(), st.data_ptr(), st.data_ptr() + st.nbytes()))
        t = self.layers[0]
        return out, (t.stride(0) * es, self.g.head_dim * es, t.stride(1) * es,
                     t.stride(2) * es)

    def copy(self, client: kvpool.Client, view, to_pool: bool,
             pairs: List[Tuple[int, int]]) -> None:
        """pairs: (vLLM block id, pool page handle)."""
        if not pairs:
            return
        for b, _ in pairs:
            if not 0 <= b < self.num_blocks:
                raise ValueError("vLLM block %d is not one of the %d blocks" %
                                 (b, self.num_blocks))
        idx = [(b, client.page_index(p)) for b, p in pairs]
        if self.use_torch:
            self._copy_torch(client, view, to_pool, idx)
            return
        pv, stride, pages, _ = view  # kvpool.Client.view()
        vl, vs = self._vllm_side()
        pl, ps = pool_side(self.g, pv.address, pages, stride)
        mv = torch.tensor(idx if not to_pool else [(i, b) for b, i in idx],
                          dtype=torch.int64).numpy()
        g = self.g
        if to_pool:
            _kvpool.copy_blocks(pl, ps, vl, vs, mv, g.kv_heads, g.block_tokens,
                                g.head_dim * self.es, self.threads)
        else:
            _kvpool.copy_blocks(vl, vs, pl, ps, mv, g.kv_heads, g.block_tokens,
                                g.head_dim * self.es, self.threads)

    def _pool_tensor(self, client: kvpool.Client, view, indexes) -> torch.Tensor:
        """The pool as one host tensor; with device tensors, the slabs holding
        indexes registered with CUDA first (once each: page-locked, so the
        copies are DMA). The view's holes cannot be registered: slab by slab."""
        pool = client.kv_tensor()  # (pages, layers, 2, heads, tokens, head_dim), host
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
                    idx: List[Tuple[int, int]]) -> None:
        g = self.g
        pool = self._pool_tensor(client, view, [i for _, i in idx])
        blocks = torch.tensor([b for b, _ in idx], dtype=torch.int64, device=self.device)
        n = len(idx)
        stage = torch.empty((n,) + tuple(pool.shape[1:]), dtype=pool.dtype,
                            device=self.device)
        runs = _runs([i for _, i in idx])
        nb = self.device.type == "cuda"
        if not to_pool:
            for j, i, r in runs:  # pool -> stage: DMA from registered memory
                stage[j:j + r].copy_(pool[i:i + r], non_blocking=nb)
            for l, t in enumerate(self.layers):
                src = stage[:, l].permute(0, 2, 3, 1, 4).reshape(
                    n, g.kv_heads, g.block_tokens, 2 * g.head_dim)
                t.index_copy_(0, blocks, src.view(t.dtype))
        else:
            for l, t in enumerate(self.layers):
                src = t.index_select(0, blocks).view(stage.dtype).reshape(
                    n, g.kv_heads, g.block_tokens, 2, g.head_dim)
                stage[:, l].copy_(src.permute(0, 3, 1, 2, 4))
            for j, i, r in runs:
                pool[i:i + r].copy_(stage[j:j + r], non_blocking=nb)
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


# --- the connector --------------------------------------------------------------

class KVPoolConnector(KVConnectorBase_V1):
    """vLLM's V1 KV connector over kvpoold (see the module's docstring)."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig") -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = _extra(vllm_config)
        self._block = vllm_config.cache_config.block_size
        self._socket = extra.get("socket")
        self._retry = float(extra.get("retry_seconds", 5.0))
        self._prio = int(extra.get("priority", kvpool.PRIO_NORMAL))
        self._threads = int(extra.get("copy_threads", 0)) or torch.get_num_threads()
        self._copy_torch = bool(extra.get("copy_with_torch", False))
        rank = 0
        if role == KVConnectorRole.WORKER:
            try:
                from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
                rank = get_tensor_model_parallel_rank()
            except (AssertionError, RuntimeError, ImportError, AttributeError):
                rank = 0
        self._pool: Optional[Pool] = None
        try:
            self._ident = identity_of(vllm_config, kv_cache_config, rank)
        except Unsupported as e:
            logger.warning("kvpool: %s; this instance runs without the kvpool connector", e)
            self._ident = None
        else:
            name = "scheduler" if role == KVConnectorRole.SCHEDULER else "worker %d" % rank
            self._pool = Pool(logger, name, self._socket, self._ident.namespace,
                              self._ident.geometry, self._ident.scheme, self._ident.seed,
                              self._retry, _seed_hint(self._ident.seed))
            if role == KVConnectorRole.SCHEDULER:
                # connect now, not on the first request's lookup (which
                # would wait for it); a daemon that is not there is said
                # once, and tried again every retry_seconds
                with self._pool.lock:
                    self._pool.client()
        # scheduler side
        self._requests: Dict[str, "Request"] = {}
        self._leases: Dict[str, _Lease] = {}
        self._saved: Dict[str, int] = {}  # blocks known to be in the pool, or sent to save
        # worker side
        self._copier: Optional[_Copier] = None
        self._loaded: Set[str] = set()
        self._load_errors: Set[int] = set()
        self._broken: Set[str] = set()  # requests whose earlier save failed

    # -- counters (tests, logs) --

    def stats(self) -> Dict[str, int]:
        """This side's counters: lookups, hit_blocks, loaded_blocks,
        load_errors, saved_blocks, save_skipped, dedups."""
        return dict(self._pool.counters) if self._pool else {}

    # ============================ scheduler side ============================

    def on_new_request(self, request: "Request") -> None:
        self._requests[request.request_id] = request

    def _release(self, req_id: str) -> None:
        lease = self._leases.pop(req_id, None)
        if lease is None or not lease.pages or self._pool is None:
            return
        c = self._pool.client()
        if c is None:
            return  # the daemon is gone: it dropped the leases with the connection
        try:
            c.release(lease.pages)
        except OSError as e:
            self._pool.failed("release", e)

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        rid = request.request_id
        self._requests.setdefault(rid, request)
        self._release(rid)  # asked again (not scheduled last time): look again
        if self._pool is None:
            return 0, False
        hashes = request.block_hashes
        # leave vLLM at least one token to compute
        n = min(len(hashes), (request.num_tokens - 1) // self._block)
        start = num_computed_tokens // self._block
        if n <= start:
            self._saved.setdefault(rid, 0)
            return 0, False
        with self._pool.lock:
            c = self._pool.client()
            if c is None:
                self._saved.setdefault(rid, 0)
                return 0, False
            keys = [bytes(h) for h in hashes[:n]]
            try:
                pages, _ = c.acquire(keys)
            except OSError as e:
                self._pool.failed("lookup", e)
                self._saved.setdefault(rid, 0)
                return 0, False
        self._pool.count("lookups")
        hit = len(pages)
        self._pool.count("hit_blocks", hit)
        self._saved[rid] = max(self._saved.get(rid, 0), hit)
        if hit <= start:  # nothing past vLLM's own hit: no lease to hold
            if pages:
                with self._pool.lock:
                    try:
                        c.release(pages)
                    except OSError as e:
                        self._pool.failed("release", e)
            return 0, False
        self._leases[rid] = _Lease(pages, keys[:hit], start)
        return (hit - start) * self._block, False

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        rid = request.request_id
        lease = self._leases.get(rid)
        if lease is None or lease.sent:
            return
        if num_external_tokens <= 0:
            self._release(rid)
            return
        n = num_external_tokens // self._block
        if lease.start + n < len(lease.keys):
            # vLLM takes fewer blocks than offered: the rest are saved no more
            # than they were
            lease.keys = lease.keys[:lease.start + n]
        lease.block_ids = list(blocks.get_block_ids()[0][lease.start:lease.start + n])

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = KVPoolMetadata(finished=set(scheduler_output.finished_req_ids))
        for rid, lease in self._leases.items():
            ids = lease.block_ids
            if lease.sent or ids is None:
                continue
            lease.sent = True
            keys = lease.keys[lease.start:lease.start + len(ids)]
            parent = lease.keys[lease.start - 1] if lease.start else None
            meta.loads.append(_Transfer(rid, keys, parent, ids))
        if self._pool is None:
            return meta
        mgr = self._kv_cache_manager
        cached = scheduler_output.scheduled_cached_reqs
        scheduled = [(r.req_id, r.num_computed_tokens) for r in
                     scheduler_output.scheduled_new_reqs]
        scheduled += list(zip(cached.req_ids, cached.num_computed_tokens))
        for rid, computed in scheduled:
            req = self._requests.get(rid)
            if req is None or mgr is None:
                continue
            done = computed + scheduler_output.num_scheduled_tokens.get(rid, 0)
            full = min(done // self._block, len(req.block_hashes))
            first = self._saved.get(rid, 0)
            if full <= first:
                continue
            ids = mgr.get_block_ids(rid)[0]
            if len(ids) < full:
                continue
            keys = [bytes(h) for h in req.block_hashes[first:full]]
            parent = bytes(req.block_hashes[first - 1]) if first else None
            tokens = list(req.all_token_ids[first * self._block:full * self._block])
            meta.saves.append(_Transfer(rid, keys, parent, list(ids[first:full]), tokens))
            self._saved[rid] = full
        return meta

    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        wm = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(wm, KVPoolWorkerMetadata):
            for rid in wm.loaded:
                self._release(rid)

    def request_finished(self, request: "Request",
                         block_ids: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        rid = request.request_id
        self._release(rid)
        self._requests.pop(rid, None)
        self._saved.pop(rid, None)
        return False, None

    def shutdown(self) -> None:
        if self._copier is not None:
            self._copier.close()
        if self._pool is not None:
            self._pool.drop()

    # ============================= worker side =============================

    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]) -> None:
        if self._ident is None:
            return
        try:
            layers = [kv_caches[n] for n in self._ident.layer_names]
            self._copier = _Copier(self._ident, layers, self._threads, self._copy_torch)
        except (KeyError, Unsupported) as e:
            logger.warning("kvpool: %s; this instance runs without the kvpool connector", e)
            self._pool, self._copier = None, None
            return
        with self._pool.lock:  # connect and map the view now, not in the first load
            self._pool.client_view()

    def _client_and_view(self):
        if self._pool is None or self._copier is None:
            return None, None
        return self._pool.client_view()

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        if not isinstance(meta, KVPoolMetadata) or not meta.loads:
            return
        for t in meta.loads:
            self._loaded.add(t.req_id)
        pool = self._pool
        if pool is None:
            for t in meta.loads:
                self._load_errors.update(t.block_ids)
            return
        with pool.lock:
            c, view = self._client_and_view()
            held: List[int] = []
            pairs: List[Tuple[int, int]] = []
            for t in meta.loads:
                got: List[int] = []
                if c is not None:
                    try:
                        got, _ = c.acquire(t.keys, parent=t.parent)
                    except OSError as e:
                        pool.failed("load", e)
                        c = None
                held += got
                pairs += zip(t.block_ids, got)
                if len(got) < len(t.keys):
                    # evicted or gone since the lookup: vLLM recomputes these
                    self._load_errors.update(t.block_ids[len(got):])
                    pool.count("load_errors", len(t.keys) - len(got))
            if c is not None and pairs:
                try:
                    self._copier.copy(c, view, False, pairs)
                    pool.count("loaded_blocks", len(pairs))
                except (OSError, ValueError) as e:
                    pool.failed("load", e)
                    self._load_errors.update(b for b, _ in pairs)
            if c is not None and held:
                try:
                    c.release(held)
                except OSError as e:
                    pool.failed("release", e)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads finish in start_load_kv, before the forward

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        return  # all layers of a block are saved together in wait_for_save

    def wait_for_save(self) -> None:
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        if not isinstance(meta, KVPoolMetadata):
            return
        self._broken -= meta.finished
        pool = self._pool
        saves = [t for t in meta.saves if t.req_id not in self._broken]
        if not saves or pool is None:
            return
        total = sum(len(t.keys) for t in saves)
        with pool.lock:
            c, view = self._client_and_view()
            if c is None:
                pool.count("save_skipped", total)
                return
            try:
                fresh = c.alloc(total)
            except OSError as e:
                pool.failed("save", e)
                pool.count("save_skipped", total)
                self._broken.update(t.req_id for t in saves)
                return
            pool.clear("full", "the pool has room again; saving")
            pairs: List[Tuple[int, int]] = []
            j = 0
            for t in saves:
                pairs += zip(t.block_ids, fresh[j:j + len(t.keys)])
                j += len(t.keys)
            release = list(fresh)
            try:
                self._copier.copy(c, view, True, pairs)
                j = 0
                for t in saves:
                    pages = fresh[j:j + len(t.keys)]
                    j += len(t.keys)
                    try:
                        canon = c.publish(pages, t.keys, parent=t.parent, priority=self._prio,
                                          tokens=t.tokens)
                    except OSError as e:
                        if isinstance(e, (kvpool.DaemonGone, kvpool.NotConnected)):
                            raise
                        pool.failed("publish", e)
                        pool.count("save_skipped", len(pages))
                        self._broken.add(t.req_id)
                        continue
                    dups = [q for p, q in zip(pages, canon) if q != p]
                    release += dups
                    pool.count("saved_blocks", len(pages) - len(dups))
                    pool.count("dedups", len(dups))
                c.release(release)
            except (OSError, ValueError) as e:
                pool.failed("save", e)
                pool.count("save_skipped", total)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def build_connector_worker_meta(self) -> Optional[KVConnectorWorkerMetadata]:
        if not self._loaded:
            return None
        loaded, self._loaded = self._loaded, set()
        return KVPoolWorkerMetadata(loaded)
