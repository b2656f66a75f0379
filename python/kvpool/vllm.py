# SPDX-License-Identifier: MIT
"""kvpool as vLLM's KV connector: one kvpoold is the shared KV tier of every
vLLM instance on the machine (docs/vllm.md).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KVPoolConnector",
        "kv_connector_module_path": "kvpool.vllm", "kv_role": "kv_both"}'

Keys are vLLM's own block hashes (request.block_hashes), whatever
--prefix-caching-hash-algo is. The scheduler side leases the pages of a
request's longest cached prefix with one ACQUIRE and holds them until the
workers have copied them (they report it in their per-step metadata) or the
request ends. The worker side copies pool pages into the allocated vLLM
blocks and full computed blocks into fresh pool pages, published under
their hashes (a block some other instance published first is dropped, not
stored twice), both off the engine's step where vLLM allows it:

- A load longer than the step can absorb (_off_step(): its predicted time
  from the workers' measured seconds per block against a tenth of the
  engine's recent step, or 50 ms in an engine with no other request; or
  async_load_blocks blocks or more when set) runs on the worker's thread:
  the request waits in vLLM's WAITING_FOR_REMOTE_KVS, the other requests
  go on, and get_finished() lets it run once its blocks are in (a step
  with nothing else to compute waits for it). A shorter load is copied
  before the forward, in the step. A load or save is one C call (lease,
  copy, release) that lets the GIL go once.
- New full blocks are handed to the same thread after the forward (at most
  save_queue_blocks wait; past that they are skipped and counted, never
  waited for). vLLM keeps a finished request's blocks until its saves have
  read them (request_finished() returns True, get_finished() reports it),
  and a preempted request's saves have ended, or were dropped if they had
  not started, before vLLM reuses its blocks (handle_preemptions()).

A model with sliding-window and full-attention layers keeps vLLM's
hybrid allocator (SupportsHMA): a page holds a block of every layer,
whichever KV cache group vLLM put it in; its loads all run off the step;
the blocks of each save are pinned in vLLM's block pool until every
worker's save of them ended (vLLM frees a sliding window's blocks behind
it at its next step).

The counters (stats()) reach vLLM's own metrics: the "KV Transfer metrics"
log line and vllm:kvpool_*_total on `vllm serve`'s /metrics.

kv_connector_extra_config's keys are _vllm_settings.SETTINGS (docs/vllm.md
lists them): an unknown key, a wrong type or a value out of range stops
the engine at start, naming the key.

The namespace's identity (the geometry's model string) is vLLM, the model,
the KV dtype, the hash algorithm, the block size and the tensor-parallel
rank ("mla" for an MLA model, whose latent every rank holds whole, as
vLLM's KV cache spec says):
instances that differ in any of them never share pages. A full pool,
a dead daemon or a refused identity never stops the engine: lookups miss,
saves are skipped and counted, and each condition is logged once.

Past 800 lines on purpose: vLLM loads one class by module path for both
roles, and the scheduler's and the workers' halves of KVPoolConnector
speak through the metadata they exchange every step; the copies, the
background mover and the stats are _vllm_io.py's and _vllm_stats.py's.
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)
try:  # vLLM's hybrid memory allocator (a KV cache group per attention kind)
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
except ImportError:  # an older vLLM: one group
    class SupportsHMA:  # type: ignore[no-redef]
        pass
try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
except ImportError:  # an older vLLM: get_finished() alone
    KVConnectorTransferResults = None
from vllm.logger import init_logger

import kvpool
from kvpool._connector import Pool
from kvpool._vllm_io import DTYPES, Copier, LayerLoader, Mover, Unsupported, cpu_list
from kvpool._vllm_settings import check_settings
from kvpool._vllm_stats import KVPoolPromMetrics, KVPoolStats

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

# Where a load runs when async_load_blocks is not set: in the step when its
# predicted time (the workers' measured seconds per block, times its
# blocks) is at most what the step absorbs, load_step_share of the
# engine's recent busy step or, with no other request in the engine,
# IDLE_LOAD_S; off the step otherwise. Before any load is measured a block
# is taken to copy at GUESS_BYTES_PER_S.
IDLE_LOAD_S = 0.05
GUESS_BYTES_PER_S = 2e9
# A step that computes nothing waits at most this long for the loads off
# the step, so that it reports them (the scheduler runs their requests in
# the next step) rather than leaving them to later empty steps to poll.
EMPTY_STEP_WAIT_S = 0.01

__all__ = ["KVPoolConnector", "KVPoolMetadata", "KVPoolWorkerMetadata", "Identity",
           "identity_of", "key_seed_of"]

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
    # each KV cache group's layers (vLLM's hybrid allocator: a group of its
    # own per attention kind), as places in the page, in the group's order
    groups: Tuple[Tuple[int, ...], ...] = ()
    group_names: Tuple[Tuple[str, ...], ...] = ()


_ATTENTION = {"FullAttentionSpec": False, "MLAAttentionSpec": True,
              "SlidingWindowSpec": False, "SlidingWindowMLASpec": True}


def _layer_index(name: str) -> int:
    m = re.findall(r"\.(\d+)\.", "." + name + ".")
    return int(m[0]) if m else -1


def _cell_of(spec) -> Tuple[bool, int, int]:
    """A KV cache spec's (MLA, K's head size, V's: kvpool.K_ONLY for MLA),
    or Unsupported when its blocks are not attention K/V kvpool pages hold."""
    kind = type(spec).__name__
    if kind not in _ATTENTION:
        raise Unsupported("KV cache spec %s is not attention K/V (full or sliding-window "
                          "attention, or MLA's latent K): kvpool pages hold those alone"
                          % kind)
    mla = _ATTENTION[kind]
    head_v = kvpool.K_ONLY if mla else getattr(spec, "head_size_v", None) or spec.head_size
    return mla, spec.head_size, head_v


def identity_of(vllm_config: "VllmConfig", kv_cache_config: "KVCacheConfig",
                tp_rank: int = 0) -> Identity:
    """The namespace, geometry and key scheme vLLM's config asks for, or
    Unsupported saying why. A page holds a block of every layer, in layer
    order, whatever group vLLM's hybrid allocator puts the layer in: the
    same page with the allocator on or off."""
    extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
    groups = kv_cache_config.kv_cache_groups
    spec = groups[0].kv_cache_spec
    mla, head_k, head_v = _cell_of(spec)
    for g in groups[1:]:
        other = g.kv_cache_spec
        if _cell_of(other) != (mla, head_k, head_v) or \
                (other.block_size, other.num_kv_heads, other.dtype) != \
                (spec.block_size, spec.num_kv_heads, spec.dtype):
            raise Unsupported("the model's KV cache groups differ in their blocks (%s: %d "
                              "tokens of %d heads x %d of %s; %s: %d tokens of %d heads x "
                              "%d of %s); a kvpool page holds blocks of one shape"
                              % (type(spec).__name__, spec.block_size, spec.num_kv_heads,
                                 spec.head_size, spec.dtype, type(other).__name__,
                                 other.block_size, other.num_kv_heads, other.head_size,
                                 other.dtype))
    if spec.dtype not in DTYPES:
        raise Unsupported("KV dtype %s has no kvpool dtype" % spec.dtype)
    cell = head_k + (0 if mla else head_v)
    dense = spec.block_size * spec.num_kv_heads * cell * kvpool.DType(DTYPES[spec.dtype]).size
    for g in groups:
        if g.kv_cache_spec.page_size_bytes != dense:
            raise Unsupported("a KV block of this model is %d bytes, not the %d of %d "
                              "tokens x %d heads x %d elements of %s (a padded or quantized "
                              "layout, e.g. --kv-cache-dtype %s)"
                              % (g.kv_cache_spec.page_size_bytes, dense, spec.block_size,
                                 spec.num_kv_heads, cell, spec.dtype,
                                 getattr(g.kv_cache_spec, "cache_dtype_str", None)))
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
    order = lambda n: (_layer_index(n), n)  # noqa: E731
    names = tuple(sorted((n for g in groups for n in g.layer_names), key=order))
    if len(set(names)) != len(names):
        raise Unsupported("a layer is in more than one KV cache group")
    place = {n: i for i, n in enumerate(names)}
    model = str(extra.get("model") or vllm_config.model_config.model)
    tp = vllm_config.parallel_config.tensor_parallel_size
    pp = getattr(vllm_config.parallel_config, "pipeline_parallel_size", 1)
    if pp > 1:
        raise Unsupported("pipeline parallelism (%d stages): each stage holds other layers, "
                          "and kvpool's namespaces are per tensor-parallel rank (or "
                          "shared by the ranks) only" % pp)
    for kind in ("prefill", "decode"):
        cp = getattr(vllm_config.parallel_config, kind + "_context_parallel_size", 1) or 1
        if cp > 1:
            raise Unsupported("%s context parallelism (%d ranks): each rank holds a share of "
                              "a block's tokens, and kvpool's namespaces are per tensor-"
                              "parallel rank (or shared by the ranks) only" % (kind, cp))
    dtype = DTYPES[spec.dtype]
    # MLA's latent is whole on every tensor-parallel rank (vLLM replicates
    # it and says so: max_tp_shards 1), whatever the number of ranks: they
    # all share one namespace, where what one rank saves the others find
    # (their saves of the same blocks are deduplicated); other attention
    # splits its heads across the ranks, so each rank has a namespace of
    # its own, as has a cache vLLM does not declare whole on every rank
    whole = mla and all(getattr(g.kv_cache_spec, "max_tp_shards", None) == 1 for g in groups)
    split = "mla" if whole else "tp%d/%d" % (tp_rank, tp)
    ident = "vllm %s %s %s b%d %s" % (model, str(spec.dtype).replace("torch.", ""),
                                        algo, spec.block_size, split)
    if len(ident) > 127:
        ident = "vllm sha256:%s" % hashlib.sha256(ident.encode()).hexdigest()[:40]
    ns = extra.get("namespace")
    if ns is None:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(model.rstrip("/")))[:40]
        ns = "vllm.%s.%s" % (base, hashlib.sha256(ident.encode()).hexdigest()[:12])
    elif tp > 1 and not whole:
        ns = "%s.tp%d" % (ns, tp_rank)
    g = kvpool.Geometry(layers=len(names), kv_heads=spec.num_kv_heads,
                        head_dim=head_k, block_tokens=spec.block_size,
                        dtype=dtype, model=ident,
                        head_dim_v=0 if head_v == head_k else head_v)
    members = tuple(tuple(sorted(grp.layer_names, key=order)) for grp in groups)
    return Identity(ns, g, scheme, key_seed_of(algo), names, algo,
                    tuple(tuple(place[n] for n in m) for m in members), members)


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
    block_ids: List[int]  # the vLLM blocks, one per key (the first KV cache group's)
    tokens: Optional[List[int]] = None  # saves: the blocks' token ids (KV events)
    background: bool = False  # loads: off the step, the request waits for it
    # more than one KV cache group: each group's blocks, one per key (-1: a
    # load's block before a sliding window, which vLLM does not keep)
    groups: Optional[List[List[int]]] = None
    job: int = 0  # such a save: what the scheduler pinned its blocks under


@dataclass
class KVPoolMetadata(KVConnectorMetadata):
    """One step's work for the workers: blocks to load (before the forward,
    or off the step for the requests that wait for them) and to save after
    it; the requests vLLM finished, those it preempted (their blocks are
    freed now), and those whose blocks it keeps until their saves end."""
    loads: List[_Transfer] = field(default_factory=list)
    saves: List[_Transfer] = field(default_factory=list)
    finished: Set[str] = field(default_factory=set)
    preempted: Set[str] = field(default_factory=set)
    hold: Set[str] = field(default_factory=set)
    empty: bool = False  # the step computes nothing: its end may wait for loads


@dataclass
class KVPoolWorkerMetadata(KVConnectorWorkerMetadata):
    """What the workers report to the scheduler after a step: the requests
    whose loads are done (the scheduler's leases can go), and the saves
    whose blocks the scheduler pinned that ended (how many workers say so)."""
    loaded: Set[str] = field(default_factory=set)
    ended: Dict[int, int] = field(default_factory=dict)
    failed: Set[str] = field(default_factory=set)  # requests some of whose load failed
    # the loads' measured cost: seconds over blocks (the in-step choice)
    load_seconds: float = 0.0
    load_blocks: int = 0

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        if isinstance(other, KVPoolWorkerMetadata):
            ended = dict(self.ended)
            for job, n in other.ended.items():
                ended[job] = ended.get(job, 0) + n
            return KVPoolWorkerMetadata(self.loaded | other.loaded, ended,
                                        self.failed | other.failed,
                                        self.load_seconds + other.load_seconds,
                                        self.load_blocks + other.load_blocks)
        return self


@dataclass
class _Lease:
    pages: List[int]  # blocks 0 .. hit of the request, leased
    keys: List[bytes]
    start: int  # the first block to load (vLLM computed the ones before)
    block_ids: Optional[List[int]] = None  # where they go, once vLLM allocated them
    groups: Optional[List[List[int]]] = None  # every KV cache group's (hybrid models)
    sent: bool = False
    background: bool = False  # the request waits in WAITING_FOR_REMOTE_KVS


# --- the connector --------------------------------------------------------------

class KVPoolConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM's V1 KV connector over kvpoold (see the module's docstring)."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig") -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        # a typo or a wrong value stops the engine here, naming the key
        extra = check_settings(_extra(vllm_config))
        self._block = vllm_config.cache_config.block_size
        self._socket = extra["socket"]
        self._retry = extra["retry_seconds"]
        self._prio = extra["priority"]
        self._threads = extra["copy_threads"] or torch.get_num_threads()
        self._copy_torch = extra["copy_with_torch"]
        self._async_load = extra["async_load_blocks"]
        self._step_share = extra["load_step_share"]
        self._async_save = extra["async_save"]
        self._layerwise = extra["layerwise_load"]
        self._save_queue = extra["save_queue_blocks"]
        self._copy_cpus = cpu_list(extra["copy_cpus"])
        rank = 0
        if role == KVConnectorRole.WORKER:
            try:
                from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
                rank = get_tensor_model_parallel_rank()
            except (AssertionError, RuntimeError, ImportError, AttributeError):
                rank = 0
        self._pool: Optional[Pool] = None
        # vLLM's hybrid allocator gives each attention kind a KV cache group
        # of its own, with blocks of its own
        self._hybrid = len(kv_cache_config.kv_cache_groups) > 1
        # the workers whose metadata vLLM sums (aggregate()) for the
        # scheduler: all of them, but under torchrun each engine has one
        par = vllm_config.parallel_config
        self._workers = 1 if getattr(par, "distributed_executor_backend", None) == \
            "external_launcher" else max(1, int(getattr(par, "world_size", 1)))
        try:
            self._ident = identity_of(vllm_config, kv_cache_config, rank)
        except Unsupported as e:
            logger.warning("kvpool: %s; this instance runs without the kvpool connector", e)
            self._ident = None
        else:
            name = "scheduler" if role == KVConnectorRole.SCHEDULER else "worker %d" % rank
            # the scheduler's ACQUIRE is the lookup kvpoold counts; the
            # workers' lease what it found (LOAD), counted no more
            self._pool = Pool(logger, name, self._socket, self._ident.namespace,
                              self._ident.geometry, self._ident.scheme, self._ident.seed,
                              self._retry, _seed_hint(self._ident.seed),
                              lookups=role == KVConnectorRole.SCHEDULER,
                              name=("vllm scheduler" if role == KVConnectorRole.SCHEDULER
                                    else "vllm worker %d" % rank))
            if role == KVConnectorRole.SCHEDULER:
                i = self._ident
                logger.info("kvpool: namespace '%s', pages of %d layers%s", i.namespace,
                            i.geometry.layers, "" if not self._hybrid else
                            "; %d KV cache groups (vLLM's hybrid allocator): %s"
                            % (len(i.groups), ", ".join(
                                "%s of layers %s" % (type(g.kv_cache_spec).__name__,
                                                     ",".join(map(str, places)))
                                for g, places in zip(kv_cache_config.kv_cache_groups,
                                                     i.groups))))
                # connect now, not on the first request's lookup (which
                # would wait for it); a daemon that is not there is said
                # once, and tried again every retry_seconds
                with self._pool.lock:
                    self._pool.client()
        self._reported: Dict[str, int] = {}  # counters as get_kv_connector_stats() last gave them
        self._reported_state: Optional[str] = None  # this side's state, as last given
        self._side = "scheduler" if role == KVConnectorRole.SCHEDULER else "worker %d" % rank
        # scheduler side
        self._requests: Dict[str, "Request"] = {}
        self._leases: Dict[str, _Lease] = {}
        self._saved: Dict[str, int] = {}  # blocks known to be in the pool, or sent to save
        self._saving: Set[str] = set()  # requests some save was sent for
        self._hold: Set[str] = set()  # held, to be told to the workers in the next step
        self._holding: Set[str] = set()  # held until every worker reports finished_sending
        self._loading: Set[str] = set()  # background loads not yet in finished_recving
        # hybrid models: blocks of saves sent, held from vLLM's frees until
        # every worker's save of them ended (a sliding window's go early)
        self._pins: Dict[int, list] = {}
        self._acks: Dict[int, int] = {}
        self._jobs = 0
        self._step_at: Optional[float] = None  # when the last step was scheduled
        self._step_busy = False  # it computed tokens
        self._step_s: Optional[float] = None  # a busy step's duration (moving average)
        self._block_s: Optional[float] = None  # a block's load time, as the workers measure
        # requests a worker failed to load: vLLM asks for them again, and
        # they are computed rather than sent to fail again
        self._no_load: Set[str] = set()
        # worker side
        self._copier: Optional[Copier] = None
        self._mover: Optional[Mover] = None
        self._layers: Optional[LayerLoader] = None  # layerwise_load
        self._by_layer: Optional[tuple] = None  # the layer-by-layer load of this step
        self._loaded: Set[str] = set()
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

    # -- counters (tests, logs, vLLM's metrics) --

    def stats(self) -> Dict[str, int]:
        """This side's counters: lookups, hit_blocks, loaded_blocks,
        load_errors, saved_blocks, save_skipped, dedups, loads_in_step,
        loads_off_step."""
        return self._pool.snapshot() if self._pool else {}

    def get_kv_connector_stats(self) -> Optional[KVPoolStats]:
        """What the counters gained since the last call, for vLLM's loggers
        and its /metrics (both sides: vLLM asks its scheduler and workers)."""
        now = self.stats()
        delta: Dict[str, Any] = {k: v - self._reported.get(k, 0) for k, v in now.items()
                                 if v != self._reported.get(k, 0)}
        if self._pool is not None:
            delta.update(self._pool.take_samples())  # vllm:kvpool_*_seconds
        state = "unsupported" if self._pool is None else self._pool.state
        if state is not None and state != self._reported_state:
            delta["states"] = {self._side: state}  # vllm:kvpool_connected, _sides
            self._reported_state = state
        if not delta:
            return None
        self._reported = now
        return KVPoolStats(data=delta)

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None
                                 ) -> Optional[KVPoolStats]:
        return KVPoolStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: "VllmConfig", metric_types: Any, labelnames: Any,
                           per_engine_labelvalues: Dict[int, list]) -> KVPoolPromMetrics:
        return KVPoolPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a load that fails is recomputed, not an error

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
        if rid in self._no_load:  # computed, and saved past what the pool holds
            self._saved[rid] = self._pool_holds(hashes, 0)
            return 0, False
        # leave vLLM at least one token to compute
        n = min(len(hashes), (request.num_tokens - 1) // self._block)
        start = num_computed_tokens // self._block
        if n <= start:
            # vLLM has it all: what the pool holds too is not copied again
            self._saved[rid] = max(self._saved.get(rid, 0), self._pool_holds(hashes, 0))
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
        # the block left to vLLM to compute may be in the pool too
        have = hit if hit < n else self._pool_holds(hashes, n)
        self._saved[rid] = max(self._saved.get(rid, 0), have)
        if hit <= start:  # nothing past vLLM's own hit: no lease to hold
            if pages:
                with self._pool.lock:
                    try:
                        c.release(pages)
                    except OSError as e:
                        self._pool.failed("release", e)
            return 0, False
        # a long load runs off the step: the request waits for it, the
        # others go on
        background = self._off_step(hit - start, rid)
        self._pool.count("loads_off_step" if background else "loads_in_step")
        self._leases[rid] = _Lease(pages, keys[:hit], start, background=background)
        return (hit - start) * self._block, background

    def _off_step(self, blocks: int, rid: str) -> bool:
        """Whether a load of blocks runs off the step (its request waits in
        WAITING_FOR_REMOTE_KVS, the others go on) rather than in it."""
        if self._hybrid:  # vLLM takes a hybrid model's failed loads per request alone
            return True
        if self._async_load is not None:
            return 0 < self._async_load <= blocks
        per = self._block_s
        if per is None:
            per = self._ident.geometry.page_bytes / GUESS_BYTES_PER_S
        others = len(self._requests) - (rid in self._requests)
        absorb = IDLE_LOAD_S if others <= 0 else self._step_share * (self._step_s or 0.0)
        return blocks * per > absorb

    def _pool_holds(self, hashes: Sequence[Any], first: int) -> int:
        """How many leading blocks of a request the pool holds, knowing
        that it holds the first ones: its saves start past them. An
        ACQUIRE PROBE: nothing leased or counted. first on failure."""
        if len(hashes) <= first:
            return first
        with self._pool.lock:
            c = self._pool.client()
            if c is None:
                return first
            try:
                return first + c.contains([bytes(h) for h in hashes[first:]],
                                          parent=bytes(hashes[first - 1]) if first else None)
            except OSError as e:
                self._pool.failed("lookup", e)
                return first

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
        span = slice(lease.start, lease.start + n)
        if not self._hybrid:
            lease.block_ids = list(blocks.get_block_ids()[0][span])
            return
        # a sliding window's group holds null blocks before the window
        lease.groups = [[-1 if b.is_null else b.block_id for b in blks[span]]
                        for blks in blocks.blocks]
        lease.block_ids = lease.groups[0]

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = KVPoolMetadata(finished=set(scheduler_output.finished_req_ids),
                              preempted=set(getattr(scheduler_output, "preempted_req_ids",
                                                    None) or ()),
                              hold=self._hold)
        self._hold = set()
        # the engine's busy steps, for the in-step choice (_off_step())
        now = time.monotonic()
        if self._step_at is not None and self._step_busy and now - self._step_at < 1.0:
            d = now - self._step_at
            self._step_s = d if self._step_s is None else 0.8 * self._step_s + 0.2 * d
        self._step_busy = scheduler_output.total_num_scheduled_tokens > 0
        self._step_at = now
        meta.empty = not self._step_busy
        for rid in meta.preempted:
            # its saves not started were dropped (handle_preemptions): once
            # resumed, its blocks are sent again from the first
            self._saved.pop(rid, None)
        for rid, lease in self._leases.items():
            ids = lease.block_ids
            if lease.sent or ids is None:
                continue
            lease.sent = True
            keys = lease.keys[lease.start:lease.start + len(ids)]
            parent = lease.keys[lease.start - 1] if lease.start else None
            meta.loads.append(_Transfer(rid, keys, parent, ids, background=lease.background,
                                        groups=lease.groups))
            if lease.background:
                self._loading.add(rid)
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
            if self._hybrid:
                rows = [blks[first:full] for blks in mgr.get_blocks(rid).blocks]
                if any(len(r) < full - first for r in rows):
                    continue
                t = self._pinned_save(rid, req, first, full, rows)
            else:
                ids = mgr.get_block_ids(rid)[0]
                if len(ids) < full:
                    continue
                t = self._transfer(rid, req, first, full, list(ids[first:full]))
            self._saved[rid] = full
            if t is not None:
                meta.saves.append(t)
                self._saving.add(rid)
        return meta

    def _transfer(self, rid: str, req: "Request", first: int, full: int,
                  ids: List[int]) -> _Transfer:
        keys = [bytes(h) for h in req.block_hashes[first:full]]
        parent = bytes(req.block_hashes[first - 1]) if first else None
        tokens = list(req.all_token_ids[first * self._block:full * self._block])
        return _Transfer(rid, keys, parent, ids, tokens)

    def _pinned_save(self, rid: str, req: "Request", first: int, full: int,
                     rows: list) -> Optional[_Transfer]:
        """A hybrid model's save of blocks first..full: every group's blocks
        of them, pinned (vLLM frees a sliding window's blocks behind it at
        its next step, before the save may have read them) until every
        worker says the save ended. A block some group does not hold (vLLM
        gave this request a null block there, a prefix it had cached) is
        not saved by this request; its later blocks chain on its key."""
        holes = [i for i in range(full - first) if any(r[i].is_null for r in rows)]
        if holes:
            skip = holes[-1] + 1
            self._pool.count("save_skipped", skip)
            first += skip
            rows = [r[skip:] for r in rows]
            if first >= full:
                return None
        pinned = [b for r in rows for b in r]
        self._kv_cache_manager.block_pool.touch(pinned)
        self._jobs += 1
        self._pins[self._jobs] = pinned
        t = self._transfer(rid, req, first, full, [b.block_id for b in rows[0]])
        t.groups = [[b.block_id for b in r] for r in rows]
        t.job = self._jobs
        return t

    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        wm = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(wm, KVPoolWorkerMetadata):
            for rid in wm.loaded:  # one worker's copy is done: the pages are leased there
                self._release(rid)
            for job, n in wm.ended.items():  # pinned blocks, once every worker's save ended
                self._acks[job] = self._acks.get(job, 0) + n
                if self._acks[job] >= self._workers:
                    del self._acks[job]
                    pinned = self._pins.pop(job, None)
                    if pinned is not None:  # the last block evicted first, as vLLM frees
                        self._kv_cache_manager.block_pool.free_blocks(reversed(pinned))
            self._no_load |= wm.failed
            if wm.load_blocks:
                per = wm.load_seconds / wm.load_blocks
                self._block_s = per if self._block_s is None else 0.7 * self._block_s + 0.3 * per
        self._no_load |= set(getattr(connector_output, "failed_recving", None) or ())
        # vLLM passes these on once every worker reported them
        self._loading -= set(connector_output.finished_recving or ())
        self._holding -= set(connector_output.finished_sending or ())

    def has_pending_block_frees(self) -> bool:
        """Finished requests' blocks, and a hybrid model's blocks pinned
        for their saves (those vLLM itself let go), come back once the saves
        end: vLLM waits for them rather than preempt a request."""
        return bool(self._holding) or any(b.ref_cnt == 1 for pinned in self._pins.values()
                                          for b in pinned)

    def has_pending_push_work(self) -> bool:
        """Pinned blocks: vLLM steps until every worker's saves of them
        ended (a reset of its prefix cache needs every block back)."""
        return bool(self._pins)

    def request_finished(self, request: "Request",
                         block_ids: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """True (vLLM keeps the request's blocks until every worker reports
        it in finished_sending) when saves were sent for it, unless a
        background load still writes its blocks on some worker: vLLM then
        frees them when that load is reported, and no save of it can be
        running (its earlier ones ended or were dropped when it was
        preempted)."""
        rid = request.request_id
        self._release(rid)
        self._requests.pop(rid, None)
        self._saved.pop(rid, None)
        self._no_load.discard(rid)
        # every worker's load, not only the first one's (tensor parallelism)
        hold = rid in self._saving and rid not in self._loading
        self._saving.discard(rid)
        if hold:
            self._hold.add(rid)
            self._holding.add(rid)
        return hold, None

    def request_finished_all_groups(self, request: "Request", block_ids: Tuple[List[int], ...]
                                    ) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """request_finished() of a hybrid model: vLLM keeps every group's
        blocks, or none."""
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

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
        if self._copier is not None:
            self._copier.close()
        if self._pool is not None:
            self._pool.close()

    # ============================= worker side =============================

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
            logger.warning("kvpool: %s; this instance runs without the kvpool connector", e)
            self._pool, self._copier = None, None
            return
        logger.info("kvpool: the model runner's KV blocks (%s backend): [block, head, %s]",
                    backend or "an unnamed", "K rows then V rows" if split else "token, K|V")
        cap = int(self._save_queue or max(64, self._copier.num_blocks // 4))
        self._mover = Mover(self._load_off_step, self._save_off_step,
                            lambda n: self._pool.count("save_skipped", n), logger, cap,
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
        ctx = self._vllm_config.compilation_config.static_forward_context
        names = set()
        for n in self._ident.layer_names:
            backend = getattr(ctx.get(n), "attn_backend", None)
            names.add(backend.get_name() if backend is not None else None)
        if len(names) > 1:
            raise Unsupported("the model's attention layers run backends %s, which may lay "
                              "out their KV blocks differently" % sorted(map(str, names)))
        return names.pop()

    def _meta(self) -> Optional[KVPoolMetadata]:
        if not self.has_connector_metadata():
            return None
        meta = self._get_connector_metadata()
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
            if dropped and self._pool is not None:
                self._pool.count("save_skipped", dropped)

    def unregister_kv_caches(self) -> None:
        """vLLM is about to sleep (its KV memory goes): no copy may run."""
        if self._mover is not None:
            self._mover.drain()

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._meta()
        if meta is None or not meta.loads:
            return
        now: List[_Transfer] = []
        for t in meta.loads:
            if t.background and self._mover is not None:
                self._mover.load(t)
            else:
                now.append(t)
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
                self._loaded.add(t.req_id)
                if t.background:  # no thread to run it: answered in this step
                    self._recving.add(t.req_id)

    def _load_failed(self, t: _Transfer, failed: List[int]) -> None:
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

    def _group_pairs(self, t: _Transfer, pages: List[int]) -> List[List[Tuple[int, int]]]:
        """(vLLM block, page) of each KV cache group, for t's first pages."""
        if t.groups is None:
            return [list(zip(t.block_ids, pages))]
        return [[(b, p) for b, p in zip(ids, pages) if b >= 0] for ids in t.groups]

    def _copy(self, c, view, to_pool: bool, pairs: List[List[Tuple[int, int]]]) -> None:
        """Copy each KV cache group's pairs, that group's layers alone."""
        groups = self._ident.groups if len(pairs) > 1 else (None,)
        for only, gp in zip(groups, pairs):
            self._copier.copy(c, view, to_pool, gp, only=only)

    def _load_off_step(self, t: _Transfer) -> List[int]:
        with self._copier.side_stream():
            return self._load([t])

    def _load(self, loads: List[_Transfer]) -> List[int]:
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

    def _load_whole(self, loads: List[_Transfer]) -> List[int]:
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

    def _load_now(self, loads: List[_Transfer]) -> List[int]:
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

    def _acquire(self, loads: List[_Transfer]):
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

    def _load_by_layer(self, loads: List[_Transfer]) -> None:
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
            self._load_errors.update(self._loaded_now(c, pairs, held, failed, err))

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
                pool.count("save_skipped", sum(len(t.keys) for t in meta.saves
                                               if t.req_id in self._broken))
                if saves:
                    self._broken |= set(self._save(saves))
            self._saves_ended(meta.saves)
            return
        ready = self._copier.step_done()  # the forward's writes, for a device copy
        for t in meta.saves:
            r = mover.save(t.req_id, (t, ready), len(t.keys))
            if r != "queued":
                pool.count("save_skipped", len(t.keys))
                self._saves_ended([t])
            if r == "full":
                pool.warn("queue", "the save queue is full (%d blocks wait to be saved); "
                          "new blocks are skipped and counted until it drains "
                          "(save_queue_blocks)", mover.queued)
            elif r == "queued" and mover.queued * 2 <= mover.cap:
                pool.clear("queue", "the save queue has room again")
        mover.finish(meta.finished)

    def _saves_ended(self, saves: Sequence[_Transfer]) -> None:
        """Tell the scheduler these saves ended (the blocks it pinned for
        them can go)."""
        for t in saves:
            if t.job:
                self._ended[t.job] = 1

    def _save_off_step(self, jobs: List[Tuple[_Transfer, Any]]) -> List[str]:
        with self._copier.side_stream():
            for _, ready in jobs:
                self._copier.wait(ready)
            return self._save([t for t, _ in jobs])

    def _save(self, saves: List[_Transfer]) -> List[str]:
        """Copy the saves' blocks into fresh pages and publish them under
        their keys (a page some other instance published first is let go);
        the requests whose save failed (their later blocks cannot chain).
        Its duration goes to vllm:kvpool_save_seconds."""
        t0 = time.monotonic()
        try:
            if self._copier.whole and all(t.groups is None for t in saves):
                return self._save_whole(saves)
            return self._save_now(saves)
        finally:
            if saves:
                self._pool.observe("save_seconds", time.monotonic() - t0)

    def _save_whole(self, saves: List[_Transfer]) -> List[str]:
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
                if r is not None:  # its publish failed (None: an earlier one of its request)
                    pool.failed("publish", r)
            if err is not None:
                pool.failed("release", err)
        return failed

    def _save_now(self, saves: List[_Transfer]) -> List[str]:
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
                        continue
                    dups = [q for p, q in zip(pages, canon) if q != p]
                    release += dups
                    pool.count("saved_blocks", len(pages) - len(dups))
                    pool.count("dedups", len(dups))
                c.release(release)
            except (OSError, ValueError) as e:
                pool.failed("save", e)
                pool.count("save_skipped", total)
                return [t.req_id for t in saves]
        return failed

    def get_finished(self, finished_req_ids: Set[str]
                     ) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """The background loads done (their requests may run) and the
        finished requests whose blocks vLLM kept until their saves ended."""
        self._finish_by_layer()  # vLLM may ask before wait_for_save (speculative decoding)
        recving, self._recving = self._recving, set()
        meta = self._meta()
        if meta is not None and meta.empty and self._mover is not None:
            # nothing else to compute: the loads off the step are reported
            # in this step, not polled by the next ones
            self._mover.wait_loads(EMPTY_STEP_WAIT_S)
        if self._mover is not None:
            for t, failed in self._mover.loaded():
                recving.add(t.req_id)
                self._loaded.add(t.req_id)
                self._load_failed(t, failed)
            self._saves_ended([t for t, _ in self._mover.ended()])
        sending = {r for r in self._held if self._mover is None or not self._mover.busy(r)}
        self._held -= sending
        return sending or None, recving or None

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
        errors, self._load_errors = self._load_errors, set()
        return errors

    def build_connector_worker_meta(self) -> Optional[KVConnectorWorkerMetadata]:
        with self._cost_lock:
            cost, self._cost = self._cost, (0.0, 0)
        if not self._loaded and not self._ended and not self._failed_any and not cost[1]:
            return None
        loaded, self._loaded = self._loaded, set()
        ended, self._ended = self._ended, {}
        failed, self._failed_any = self._failed_any, set()
        return KVPoolWorkerMetadata(loaded, ended, failed, cost[0], cost[1])
