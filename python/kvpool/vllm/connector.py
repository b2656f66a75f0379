# SPDX-License-Identifier: MIT
"""KVPoolConnector, the class vLLM loads by module path for both of its
roles: it checks the settings, derives the instance's identity and opens
the Pool, then hands each of vLLM's calls to its scheduler side
(kvpool.vllm.scheduler) or its worker side (kvpool.vllm.worker); its
counters reach vLLM's metrics (kvpool.vllm.stats)."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

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
try:  # where an external hit came from (vLLM's per-source hit metrics)
    from vllm.v1.metrics.cache_hit_source import CacheHitSource
except ImportError:  # an older vLLM: no such metrics
    CacheHitSource = None
from vllm.logger import init_logger

from kvpool._connector import Pool
from kvpool.vllm.copier import Unsupported
from kvpool.vllm.identity import extra_of, identity_of, seed_hint
from kvpool.vllm.scheduler import SchedulerSide
from kvpool.vllm.settings import check_settings
from kvpool.vllm.stats import KVPoolPromMetrics, KVPoolStats
from kvpool.vllm.worker import WorkerSide

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

__all__ = ["KVPoolConnector"]


def _hook(fallback: Any = None) -> Callable:
    """A connector hook that no exception leaves: vLLM's scheduler and
    model runner call the hooks in their own loops, where an exception
    kills the engine (and a request body reaches some of them). One that
    fails is logged once per hook (with its traceback), counted
    (hook_errors), and answered by fallback(side, *args) when fallback is
    callable (what computes the request, without the pool), else by
    fallback itself."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def guarded(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - nothing may reach vLLM's loop
                return self._hook_failed(fn.__name__, e, fallback, args)
        return guarded
    return wrap


class KVPoolConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM's V1 KV connector over kvpoold (kvpool.vllm's docstring)."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig") -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        # a typo or a wrong value stops the engine here, naming the key
        settings = check_settings(extra_of(vllm_config))
        scheduler = role == KVConnectorRole.SCHEDULER
        rank = 0
        if not scheduler:
            try:
                from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
                rank = get_tensor_model_parallel_rank()
            except (AssertionError, RuntimeError, ImportError, AttributeError):
                rank = 0
        pool: Optional[Pool] = None
        # vLLM's hybrid allocator gives each attention kind a KV cache group
        # of its own, with blocks of its own
        hybrid = len(kv_cache_config.kv_cache_groups) > 1
        try:
            ident = identity_of(vllm_config, kv_cache_config, rank)
        except Unsupported as e:
            logger.warning("kvpool: %s; this instance runs without the kvpool connector", e)
            ident = None
        else:
            name = "scheduler" if scheduler else "worker %d" % rank
            # the scheduler's ACQUIRE is the lookup kvpoold counts; the
            # workers' lease what it found (LOAD), counted no more
            pool = Pool(logger, name, settings["socket"], ident.namespace, ident.geometry,
                        ident.scheme, ident.seed, settings["retry_seconds"],
                        seed_hint(ident.seed), lookups=scheduler,
                        name="vllm scheduler" if scheduler else "vllm worker %d" % rank,
                        timeout=settings["timeout_seconds"])
            if scheduler:
                logger.info("kvpool: namespace '%s', pages of %d layers%s", ident.namespace,
                            ident.geometry.layers, "" if not hybrid else
                            "; %d KV cache groups (vLLM's hybrid allocator): %s"
                            % (len(ident.groups), ", ".join(
                                "%s of layers %s" % (type(g.kv_cache_spec).__name__,
                                                     ",".join(map(str, places)))
                                for g, places in zip(kv_cache_config.kv_cache_groups,
                                                     ident.groups))))
                # connect now, not on the first request's lookup (which
                # would wait for it); a daemon that is not there is said
                # once, and tried again every retry_seconds
                with pool.lock:
                    pool.client()
        self._reported: Dict[str, int] = {}  # counters as get_kv_connector_stats() last gave them
        self._reported_state: Optional[str] = None  # this side's state, as last given
        self._seen: Tuple[Any, int] = (None, -1)  # (pool, its changes) at the last call
        self._side = "scheduler" if scheduler else "worker %d" % rank
        self._hooks_failed: Set[str] = set()  # hooks whose exception was said (_hook())
        self._sched: Optional[SchedulerSide] = None
        self._worker: Optional[WorkerSide] = None
        if scheduler:
            # the workers whose metadata vLLM sums (aggregate()) for the
            # scheduler: all of them, but under torchrun each engine has one
            par = vllm_config.parallel_config
            workers = 1 if getattr(par, "distributed_executor_backend", None) == \
                "external_launcher" else max(1, int(getattr(par, "world_size", 1)))
            kv = vllm_config.kv_transfer_config
            role_name = getattr(kv, "kv_role", None) or "kv_both"
            loads = role_name != "kv_producer"
            saves = role_name != "kv_consumer"
            if ident is not None and role_name != "kv_both":
                logger.info("kvpool: kv_role %s: %s", role_name,
                            "saves, never loads" if saves else "loads, never saves")
            self._sched = SchedulerSide(self, pool, ident, settings,
                                        vllm_config.cache_config.block_size, hybrid, workers,
                                        loads=loads, saves=saves)
        else:
            self._worker = WorkerSide(self, pool, ident, settings, hybrid, logger)

    def _hook_failed(self, hook: str, e: Exception, fallback: Any, args: tuple) -> Any:
        """_hook()'s answer to hook's exception e: said once per hook,
        counted, and the fallback's value (a fallback that fails too
        answers None, said the same way)."""
        pool = self._pool
        if pool is not None:
            pool.count("hook_errors")
        if hook not in self._hooks_failed:
            self._hooks_failed.add(hook)
            logger.error("kvpool (%s): %s failed (%s: %s), the engine goes on: the "
                         "requests it touched are computed without the pool; said once "
                         "per hook, counted in vllm:kvpool_hook_errors_total", self._side,
                         hook, type(e).__name__, str(e)[:200], exc_info=e)
        if not callable(fallback):
            return fallback
        side = self._sched if self._sched is not None else self._worker
        if side is None:
            return None
        try:
            return fallback(side, *args)
        except Exception as e2:  # noqa: BLE001
            if hook + " fallback" not in self._hooks_failed:
                self._hooks_failed.add(hook + " fallback")
                logger.error("kvpool (%s): %s's fallback failed too (%s: %s)", self._side,
                             hook, type(e2).__name__, str(e2)[:200], exc_info=e2)
            return None

    @property
    def _pool(self) -> Optional[Pool]:
        """This side's Pool (None: it runs without the cache)."""
        side = self._sched if self._sched is not None else self._worker
        return side._pool if side is not None else None

    # -- counters (tests, logs, vLLM's metrics) --

    def stats(self) -> Dict[str, int]:
        """This side's counters: lookups, hit_blocks, loaded_blocks,
        load_errors, saved_blocks, save_skipped, dedups, loads_in_step,
        loads_off_step."""
        return self._pool.snapshot() if self._pool else {}

    @_hook(None)
    def get_kv_connector_stats(self) -> Optional[KVPoolStats]:
        """What the counters gained since the last call, for vLLM's loggers
        and its /metrics (both sides: vLLM asks its scheduler and workers,
        every step: a step that counted nothing costs one comparison)."""
        pool = self._pool
        seen = (pool, pool.changes if pool is not None else 0)
        state = "unsupported" if pool is None else pool.state
        if seen == self._seen and (state is None or state == self._reported_state):
            return None
        self._seen = seen
        now = self.stats()
        delta: Dict[str, Any] = {k: v - self._reported.get(k, 0) for k, v in now.items()
                                 if v != self._reported.get(k, 0)}
        if pool is not None:
            delta.update(pool.take_samples())  # vllm:kvpool_*_seconds
        if state is not None and state != self._reported_state:
            delta["states"] = {self._side: state}  # vllm:kvpool_connected, _sides
            self._reported_state = state
        if not delta:
            return None
        self._reported = now
        return KVPoolStats(data=delta)

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        """vLLM asks this while it makes its config (VllmConfig, in the API
        server, before any model loads) where CUDA graphs are full (GPUs):
        the settings are checked here first, so that a mistake stops `vllm
        serve` at once, not after the model has loaded. layerwise_load's
        copies run between the layers, which a full CUDA graph's replay
        would skip: vLLM then uses PIECEWISE graphs."""
        return bool(check_settings(extra_config)["layerwise_load"])

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

    # -- scheduler side (kvpool.vllm.scheduler) --

    @_hook(None)
    def on_new_request(self, request: "Request") -> None:
        self._sched.on_new_request(request)

    @_hook(lambda side, request, *_: side.compute(request))
    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        return self._sched.get_num_new_matched_tokens(request, num_computed_tokens)

    @_hook(lambda side, request, n, *_: {CacheHitSource.EXTERNAL_UNSPECIFIED: n} if n else {})
    def get_external_cache_hit_sources(self, request: "Request",
                                       num_external_tokens: int) -> Dict[Any, int]:
        """Where the tokens kvpool loads for request were (vLLM's
        vllm:prompt_tokens_cached_by_source): host (the pool, or its host
        tier), disk (its NVMe tier), p2p (its remote tier: another
        machine's)."""
        if num_external_tokens <= 0:
            return {}
        return {CacheHitSource(k): v for k, v in
                self._sched.hit_sources(request, num_external_tokens).items()}

    @_hook(lambda side, request, blocks, n, *_: side.fail_load(request, blocks, n))
    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        self._sched.update_state_after_alloc(request, blocks, num_external_tokens)

    @_hook(lambda side, out: side.meta_of_failures(out))
    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        return self._sched.build_connector_meta(scheduler_output)

    @_hook(lambda side, out: side.end_transfers(out))
    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        self._sched.update_connector_output(connector_output)

    @_hook(False)
    def has_pending_block_frees(self) -> bool:
        return self._sched.has_pending_block_frees()

    @_hook(False)
    def has_pending_push_work(self) -> bool:
        return self._sched.has_pending_push_work()

    @_hook(lambda side, request, *_: (side.finish(request)[0], None))
    def request_finished(self, request: "Request",
                         block_ids: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        return self._sched.request_finished(request, block_ids)

    @_hook(lambda side, request, *_: (side.finish(request)[0], None))
    def request_finished_all_groups(self, request: "Request",
                                    block_ids: Tuple[List[int], ...]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        return self._sched.request_finished_all_groups(request, block_ids)

    # -- worker side (kvpool.vllm.worker) --

    @_hook(lambda side, *_: side.without_pool())
    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]) -> None:
        self._worker.register_kv_caches(kv_caches)

    @_hook(None)
    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        self._worker.handle_preemptions(kv_connector_metadata)

    @_hook(None)
    def unregister_kv_caches(self) -> None:
        self._worker.unregister_kv_caches()

    @_hook(lambda side, *_: side.fail_loads())
    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        self._worker.start_load_kv(forward_context)

    @_hook(False)
    def has_connector_metadata(self) -> bool:
        """vLLM asks this before each attention layer of the forward, and
        calls the layer's hooks (wait_for_layer_load, save_kv_layer) only
        when it is true: so true only in a step whose load runs layer by
        layer. Every other step's layers skip two calls each."""
        w = self._worker
        return w is not None and w.loads_by_layer() and self.metadata_bound()

    def metadata_bound(self) -> bool:
        """Whether vLLM bound this step's metadata (the base class's
        has_connector_metadata())."""
        return super().has_connector_metadata()

    @_hook(None)
    def wait_for_layer_load(self, layer_name: str) -> None:
        self._worker.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        return  # all layers of a block are saved together, after the forward

    @_hook(lambda side: side.skip_saves())
    def wait_for_save(self) -> None:
        self._worker.wait_for_save()

    @_hook(lambda side, *_: side.loads_answered())
    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        return self._worker.get_finished(finished_req_ids)

    @_hook(lambda side, *_: side.no_results())
    def get_transfer_results(self, finished_req_ids: Set[str]) -> Any:
        return self._worker.get_transfer_results(finished_req_ids)

    @_hook(lambda side: side.take_load_errors())
    def get_block_ids_with_load_errors(self) -> Set[int]:
        return self._worker.get_block_ids_with_load_errors()

    @_hook(None)
    def build_connector_worker_meta(self) -> Optional[KVConnectorWorkerMetadata]:
        return self._worker.build_connector_worker_meta()

    @_hook(None)
    def shutdown(self) -> None:
        side = self._sched if self._sched is not None else self._worker
        if side is not None:
            side.shutdown()
