# SPDX-License-Identifier: MIT
"""The vLLM connector's counters in vLLM's own metrics: KVPoolStats travels
from the workers and the scheduler to vLLM's loggers (the "KV Transfer
metrics" log line), and KVPoolPromMetrics adds them to `vllm serve`'s
/metrics as vllm:kvpool_* counters, and as gauges of whether each side of
the connector (the scheduler, each worker) uses kvpoold now and, when it
does not, why (docs/vllm.md)."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Set

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

__all__ = ["COUNTERS", "HISTOGRAMS", "STATES", "KVPoolStats", "KVPoolPromMetrics"]

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
    "save_coalesced": "KV blocks a request did not queue for saving because another "
                      "request's save in flight carried them (saved once).",
    "loads_in_step": "Requests whose pooled blocks the kvpool connector loaded inside the "
                     "engine's step (before its forward).",
    "loads_off_step": "Requests whose pooled blocks the kvpool connector loaded off the "
                      "engine's step (the request waited, the others went on).",
    "pd_prefills": "Requests a prefill engine computed for a decode engine (kv_transfer_"
                   "params do_remote_decode) whose saved blocks it named in its answer.",
    "pd_loads": "Requests of a decode engine whose load waited for blocks a prefill "
                "engine was still saving.",
    "pd_late": "Requests of a decode engine whose wait for its prefill engine's blocks "
               "ended with blocks lacking, at pd_wait_seconds or when the prefill engine "
               "abandoned them (computed there).",
    "pd_busy": "Requests of a decode engine that found pd_max_waits requests waiting for "
               "their prefill engines' blocks: served with what the pool held.",
    "pd_refused": "Requests of a decode engine whose kv_transfer_params kvpool refused "
                  "(malformed, or naming another namespace or other blocks): computed "
                  "there.",
    "pd_tickets_refused": "Requests of a decode engine whose handoff ticket kvpoold "
                          "refused (forged, another prompt's or daemon's, expired): "
                          "computed there at once.",
    "pd_abandoned": "Saves a prefill engine skipped or failed whose first block it told "
                    "kvpoold it will not save: a decode engine waiting for it computes "
                    "at once.",
    "hook_errors": "Exceptions a kvpool connector hook caught instead of letting them "
                   "reach vLLM (the requests they touched were computed; the engine's "
                   "log has the first of each hook).",
}


# duration -> its help text and buckets (seconds): a load or a save of a
# step's blocks takes from well under a millisecond (a few blocks of a small
# model) to seconds (thousands of blocks of a 70B model)
HISTOGRAMS = {
    "load_seconds": ("Loads of the kvpool connector: the time from leasing a step's pages "
                     "to releasing them, copied into vLLM's KV cache (a worker's).",
                     (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                      2.5, 5.0)),
    "save_seconds": ("Saves of the kvpool connector: the time to copy a batch of blocks "
                     "into fresh pages and publish them (a worker's).",
                     (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                      2.5, 5.0)),
}

# a side's state -> what it means (vllm:kvpool_sides{state=...})
STATES = {
    "connected": "uses kvpoold",
    "daemon_gone": "no kvpoold answers at the socket, or it went away: tried again every "
                   "retry_seconds",
    "refused": "kvpoold's namespace refused this engine's identity (hash seed, geometry): "
               "see the engine's log",
    "dropped": "an admin dropped the namespace (kvpool drop --force): made again at the "
               "next try",
    "unsupported": "the model's KV cache is not one kvpool pages hold: see the engine's log",
}


# how long a scrape's view of kvpoold's connections is reused, and how long
# the look waits for kvpoold's answer
LIVE_EVERY_S = 1.0
LIVE_TIMEOUT_S = 0.5


def _descendants(pid: int) -> Set[int]:
    """pid's children, theirs, and so on (/proc). O(processes)."""
    kids: Dict[int, list] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out: Set[int] = set()
    todo = [pid]
    while todo:
        for k in kids.get(todo.pop(), ()):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


class _Live:
    """The connections kvpoold lists now (LIST_CLIENTS, which any client
    may ask) of this API server's engine processes, by name ("vllm
    scheduler", "vllm worker 0"): what a scrape of /metrics shows, so that
    vllm:kvpool_connected follows each side's connection while the engine
    is idle too (vLLM reports the sides' states only after a step). None
    when kvpoold does not answer. Asked at most once a second."""

    def __init__(self, socket: Optional[str]) -> None:
        self.socket = socket
        self._lock = threading.Lock()
        self._at = -LIVE_EVERY_S
        self._names: Optional[Set[str]] = None

    def names(self) -> Optional[Set[str]]:
        with self._lock:
            now = time.monotonic()
            if now - self._at < LIVE_EVERY_S:
                return self._names
            self._at = now
            try:
                import kvpool
                with kvpool.Client(self.socket, timeout=LIVE_TIMEOUT_S) as c:
                    clients = c.list_clients()
            except (OSError, ValueError):
                self._names = None
            else:
                mine = _descendants(os.getpid())
                self._names = {c["name"] for c in clients if c["pid"] in mine}
            return self._names


def _live_state(side: str, reported: str, live: Optional[Set[str]]) -> str:
    """A side's state at a scrape: what it reported, unless kvpoold's
    listing says otherwise (gone, or its connection is back)."""
    if reported not in ("connected", "daemon_gone"):
        return reported  # refused, dropped, unsupported: kvpoold's list says nothing of it
    if live is None:
        return "daemon_gone"
    return "connected" if "vllm " + side in live else "daemon_gone"


@dataclass
class KVPoolStats(KVConnectorStats):
    """Counts since the last report, by COUNTERS name (sums across workers),
    and under "states" the state of each side whose state changed since
    its last report ({side: state})."""

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> "KVPoolStats":
        for k, v in (other.data or {}).items():
            if k == "states":
                self.data["states"] = dict(self.data.get("states") or {}, **v)
            elif k in HISTOGRAMS:
                self.data[k] = list(self.data.get(k) or []) + list(v)
            else:
                self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> Dict[str, int]:
        return {k: self.data.get(k, 0) for k in COUNTERS if self.data.get(k)}

    def is_empty(self) -> bool:
        return not any(self.data.values())


class KVPoolPromMetrics(KVConnectorPromMetrics):
    """vllm:kvpool_<counter>_total, one child per engine;
    vllm:kvpool_connected (1 when every side of the connector that has
    tried uses kvpoold, else 0) and vllm:kvpool_sides{state=...} (how many
    sides are in each of STATES)."""

    def __init__(self, vllm_config: Any, metric_types: Any, labelnames: Any,
                 per_engine_labelvalues: Dict[int, list]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self.counters = {}
        for name, doc in COUNTERS.items():
            c = self._counter_cls(name="vllm:kvpool_" + name, documentation=doc,
                                  labelnames=labelnames)
            self.counters[name] = {i: c.labels(*v) for i, v in per_engine_labelvalues.items()}
        g = self._gauge_cls(name="vllm:kvpool_connected", documentation=(
            "1 when the kvpool connector's scheduler and workers use kvpoold, 0 when one "
            "serves without the shared KV cache (vllm:kvpool_sides says why)."),
            labelnames=labelnames, multiprocess_mode="mostrecent")
        self.connected = {i: g.labels(*v) for i, v in per_engine_labelvalues.items()}
        s = self._gauge_cls(name="vllm:kvpool_sides", documentation=(
            "Sides of the kvpool connector (the scheduler, each worker) in each state: "
            + "; ".join("%s: %s" % kv for kv in STATES.items()) + "."),
            labelnames=list(labelnames) + ["state"], multiprocess_mode="mostrecent")
        self.sides = {i: {st: s.labels(*v, st) for st in STATES}
                      for i, v in per_engine_labelvalues.items()}
        self.where: Dict[int, Dict[str, str]] = {}  # engine -> side -> state
        # at a scrape, the states as kvpoold's connections say (where the
        # gauges take a function: prometheus_client's, one process)
        extra = dict(getattr(getattr(vllm_config, "kv_transfer_config", None),
                             "kv_connector_extra_config", None) or {})
        self.live = _Live(extra.get("socket"))
        for i in per_engine_labelvalues:
            self._scraped(self.connected[i], lambda i=i: int(bool(self.where.get(i)) and all(
                st == "connected" for st in self._states(i))))
            for st, child in self.sides[i].items():
                self._scraped(child, lambda i=i, st=st: sum(1 for s in self._states(i)
                                                            if s == st))
        self.histograms = {}
        for name, (doc, buckets) in HISTOGRAMS.items():
            h = self._histogram_cls(name="vllm:kvpool_" + name, documentation=doc,
                                    buckets=list(buckets), labelnames=labelnames)
            self.histograms[name] = {i: h.labels(*v) for i, v in per_engine_labelvalues.items()}

    @staticmethod
    def _scraped(child: Any, fn: Callable[[], int]) -> None:
        """child's value, computed at each scrape by fn where the gauge
        can (else what observe() sets)."""
        try:
            child.set_function(fn)
        except (AttributeError, ValueError, TypeError):  # Ray's, or multiprocess
            pass

    def _states(self, engine_idx: int) -> list:
        where = self.where.get(engine_idx) or {}
        live = self.live.names() if where else None
        return [_live_state(side, st, live) for side, st in where.items()]

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0) -> None:
        data = getattr(transfer_stats_data, "data", transfer_stats_data) or {}
        for name, v in data.items():
            per = self.counters.get(name)
            if per is not None and v and engine_idx in per:
                per[engine_idx].inc(v)
            hist = self.histograms.get(name)
            if hist is not None and engine_idx in hist:
                for seconds in v or ():
                    hist[engine_idx].observe(seconds)
        states = data.get("states")
        if states and engine_idx in self.connected:
            where = self.where.setdefault(engine_idx, {})
            where.update(states)
            for st, child in self.sides[engine_idx].items():
                child.set(sum(1 for w in where.values() if w == st))
            self.connected[engine_idx].set(int(all(w == "connected" for w in where.values())))
