# SPDX-License-Identifier: MIT
"""The vLLM connector's counters in vLLM's own metrics: KVPoolStats travels
from the workers and the scheduler to vLLM's loggers (the "KV Transfer
metrics" log line), and KVPoolPromMetrics adds them to `vllm serve`'s
/metrics as vllm:kvpool_* counters (docs/vllm.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

__all__ = ["COUNTERS", "KVPoolStats", "KVPoolPromMetrics"]

# counter -> its help text; the names are those of KVPoolConnector.stats()
COUNTERS = {
    "lookups": "Prefix lookups the kvpool connector made in kvpoold.",
    "hit_blocks": "KV blocks of the lookups found in kvpoold's pool.",
    "loaded_blocks": "KV blocks copied from the kvpool pool into vLLM's KV cache.",
    "load_errors": "KV blocks the kvpool connector failed to load (vLLM recomputed them).",
    "saved_blocks": "KV blocks the kvpool connector stored in the pool.",
    "save_skipped": "KV blocks not stored: the pool, the daemon or the save queue "
                    "had no room, or the daemon was gone.",
    "dedups": "KV blocks another engine, or for an MLA model another rank, had "
              "stored first (not stored twice).",
}


@dataclass
class KVPoolStats(KVConnectorStats):
    """Counts since the last report, by COUNTERS name (sums across workers)."""

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> "KVPoolStats":
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> Dict[str, int]:
        return {k: self.data.get(k, 0) for k in COUNTERS if self.data.get(k)}

    def is_empty(self) -> bool:
        return not any(self.data.values())


class KVPoolPromMetrics(KVConnectorPromMetrics):
    """vllm:kvpool_<counter>_total, one child per engine."""

    def __init__(self, vllm_config: Any, metric_types: Any, labelnames: Any,
                 per_engine_labelvalues: Dict[int, list]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self.counters = {}
        for name, doc in COUNTERS.items():
            c = self._counter_cls(name="vllm:kvpool_" + name, documentation=doc,
                                  labelnames=labelnames)
            self.counters[name] = {i: c.labels(*v) for i, v in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0) -> None:
        data = getattr(transfer_stats_data, "data", transfer_stats_data) or {}
        for name, v in data.items():
            per = self.counters.get(name)
            if per is not None and v and engine_idx in per:
                per[engine_idx].inc(v)
