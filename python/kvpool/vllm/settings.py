# SPDX-License-Identifier: MIT
"""The vLLM connector's settings (kv_connector_extra_config): one table,
which the connector checks at start and docs/vllm.md lists (a test holds
the page to the table). An unknown key, a value of the wrong type or out
of its range stops the engine at start with one line that names the key
and what it takes: a typo never runs silently with a default."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

__all__ = ["Setting", "SETTINGS", "check_settings", "settings_table"]


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # "str", "int", "float", "bool", "cpus"
    default: Any  # None: computed at start (shown is what the page says)
    shown: str  # the default as docs/vllm.md says it
    what: str
    lo: Optional[float] = None
    hi: Optional[float] = None


SETTINGS: Tuple[Setting, ...] = (
    Setting("socket", "str", None, "`$KVPOOL_SOCKET`, else `/run/kvpool/kvpool.sock`",
            "kvpoold's socket"),
    Setting("namespace", "str", None, "`vllm.<model>.<hash of the identity>`",
            "the namespace to use (with TP > 1, `.tp<rank>` is appended, except for MLA "
            "models, whose ranks share one namespace)"),
    Setting("model", "str", None, "vLLM's `--model`",
            "the model's name in the identity: set it when instances load one model from "
            "different paths"),
    Setting("retry_seconds", "float", 5.0, "5",
            "how often to try a daemon that is gone", 0.01, 3600),
    Setting("timeout_seconds", "float", 5.0, "5",
            "how long a call waits for kvpoold's answer (a decode engine's wait for its "
            "prefill engine's blocks comes on top) before the connector drops the "
            "connection and serves without the cache until it is back: a stopped or "
            "hung daemon costs the engine that long once (0: no limit)", 0, 3600),
    Setting("copy_threads", "int", 0, "torch's thread count",
            "threads of the host copies (0: torch's thread count)", 0, 1024),
    Setting("copy_with_torch", "bool", False, "false",
            "copy blocks with torch's indexing instead of kvpool's C copier (for "
            "comparisons)"),
    Setting("priority", "int", 1, "1",
            "eviction priority of saved pages (0 low .. 2 high)", 0, 2),
    Setting("async_load_blocks", "int", None, "measured",
            "loads of this many blocks or more run off the engine's step (0: every load "
            "in the step); unset, a load runs in the step when the workers' measured copy "
            "time for its blocks is at most `load_step_share` of the engine's recent "
            "step (50 ms when no other request runs), else off it", 0, 1 << 31),
    Setting("load_step_share", "float", 0.1, "0.1",
            "with `async_load_blocks` unset and other requests running, the share of the "
            "engine's recent step a load may take inside it (0: such loads always run off "
            "the step)", 0, 1),
    Setting("async_save", "bool", True, "true",
            "saves run off the engine's step (false: in it, after the forward)"),
    Setting("layerwise_load", "bool", False, "false",
            "loads in the step copy layer by layer on a "
            "thread beside the forward, each attention layer waiting for its own layer "
            "only (host tensors; BENCHMARKS.md has the measurement)"),
    Setting("save_queue_blocks", "int", None, "a quarter of vLLM's blocks, at least 64",
            "blocks that may wait to be saved; past that new ones are skipped and "
            "counted", 1, 1 << 31),
    Setting("pd_wait_seconds", "float", 10.0, "10",
            "disaggregated prefill, on a decode engine: how long a request's load waits "
            "for the blocks its prefill engine is still saving (then what is not there "
            "is computed here)", 0.001, 600),
    Setting("pd_max_waits", "int", 32, "32",
            "disaggregated prefill, on a decode engine: requests whose load may wait for "
            "their prefill engine's blocks at once; past it a request loads what the pool "
            "holds and computes the rest, counted in `pd_busy`", 1, 1 << 16),
    Setting("copy_cpus", "cpus", None, "the model runner's",
            "the CPUs of the connector's threads (loads and saves off the step), such as "
            "`\"1\"` or `\"8-15\"` (on a CPU engine, a core the model runner does not use)"),
)

_BY_NAME = {s.name: s for s in SETTINGS}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _bad(s: Setting, v: Any, takes: str) -> ValueError:
    return ValueError("kvpool: kv_connector_extra_config \"%s\": %r is not %s; fix or "
                      "remove it (docs/vllm.md lists the settings)" % (s.name, v, takes))


def _cpus(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v >= 0
    if not isinstance(v, str) or not v.strip():
        return False
    for part in v.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and (not hi.isdigit() or int(hi) < int(lo))):
            return False
    return True


def _value(s: Setting, v: Any) -> Any:
    rng = "" if s.lo is None else " from %g to %g" % (s.lo, s.hi)
    if s.kind == "str":
        if not isinstance(v, str) or not v:
            raise _bad(s, v, "a non-empty string")
        return v
    if s.kind == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in _TRUE + _FALSE:
            return v.strip().lower() in _TRUE
        raise _bad(s, v, "true or false")
    if s.kind == "cpus":
        if not _cpus(v):
            raise _bad(s, v, "a CPU list such as \"1\" or \"8-15,20\"")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or \
            (s.kind == "int" and isinstance(v, float) and not v.is_integer()):
        raise _bad(s, v, ("a whole number" if s.kind == "int" else "a number") + rng)
    v = int(v) if s.kind == "int" else float(v)
    if s.lo is not None and not s.lo <= v <= s.hi:
        raise _bad(s, v, ("a whole number" if s.kind == "int" else "a number") + rng)
    return v


def check_settings(extra: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Every setting's value (the default where absent), or ValueError with
    one line naming the first bad key and what it takes."""
    extra = dict(extra or {})
    for k in extra:
        if k not in _BY_NAME:
            near = difflib.get_close_matches(str(k), list(_BY_NAME), n=1)
            raise ValueError("kvpool: kv_connector_extra_config has an unknown key \"%s\"%s; "
                             "the keys are %s" % (k, " (did you mean \"%s\"?)" % near[0]
                                                  if near else "",
                                                  ", ".join(s.name for s in SETTINGS)))
    return {s.name: s.default if extra.get(s.name) is None else _value(s, extra[s.name])
            for s in SETTINGS}


def settings_table() -> str:
    """docs/vllm.md's table of the settings, as the page has it."""
    rows = ["| key | default | what |", "| --- | --- | --- |"]
    rows += ["| `%s` | %s | %s |" % (s.name, s.shown, s.what) for s in SETTINGS]
    return "\n".join(rows) + "\n"
