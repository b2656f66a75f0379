# SPDX-License-Identifier: MIT
"""Disaggregated prefill's params, the one part of a request body the
connector reads: what a prefill engine answers (prefill_params()), and
what a decode engine accepts (decode_params()). Anyone who can send the
engine HTTP requests chooses kv_transfer_params, so they are parsed
strictly here, before any other code sees them: each field's type (a
JSON number that is not an int, a bool for an int, a string of the
wrong form are refused), its range against the request's own blocks,
and no field that kvpool does not write. A refusal is a BadParams
whose text says which field and why, in a line of bounded length
(a megabyte string is never logged)."""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

__all__ = ["PDParams", "BadParams", "decode_params", "prefill_params", "wants_decode"]

# the fields kvpool's own params carry ("kvpool": {...}), and no others
FIELDS = ("namespace", "blocks", "tokens", "last_key", "ticket")
NAME_MAX = 63  # kvpoold's namespace names (KVP_NAME_MAX with its NUL)
KEY_HEX_MAX = 128  # a block hash in hex: vLLM's are 32 bytes (sha256), 8 or 16 (xxhash)
TICKET_HEX = 64  # kvpoold's handoff ticket (kvp_ticket: 32 bytes) in hex
_HEX = frozenset(string.hexdigits.lower())


class BadParams(ValueError):
    """A request's kv_transfer_params that kvpool does not take: the text
    says which field and why; cond is the kind of refusal (the connector
    says each kind once): "pd-params" (malformed), "pd-ns" (another
    namespace), "pd-key" (well formed, for another prompt or hash seed)."""

    def __init__(self, msg: str, cond: str = "pd-params") -> None:
        super().__init__(msg)
        self.cond = cond


@dataclass(frozen=True)
class PDParams:
    """A decode engine's request's handoff, as parsed: its first blocks
    blocks are saved (or being saved) to this engine's namespace, the last
    of them under key last_key, says ticket (kvpoold's, 32 bytes), which
    kvpoold still has to check (Client.handoff_check()) before anything
    waits for the blocks."""
    blocks: int
    last_key: bytes
    ticket: bytes


def _shown(v: Any) -> str:
    """v for a log line: its type and at most 40 characters of it."""
    r = repr(v)
    return "%s %s" % (type(v).__name__, r if len(r) <= 40 else r[:37] + "...")


def _flag(params: Dict[str, Any], name: str) -> bool:
    """A bool field of vLLM's envelope: absent or null is false."""
    v = params.get(name)
    if v is None or v is False:
        return False
    if v is True:
        return True
    raise BadParams("kv_transfer_params \"%s\" is %s, not true or false" % (name, _shown(v)))


def wants_decode(params: Any) -> bool:
    """Whether a request asks this engine to prefill for another one
    (do_remote_decode: the router's first half of a P/D request); False
    for anything else, malformed params included (they are not answered
    with a handoff)."""
    try:
        return isinstance(params, dict) and _flag(params, "do_remote_decode")
    except BadParams:
        return False


def _int(kp: Dict[str, Any], name: str, lo: int, hi: int) -> int:
    v = kp[name]
    if type(v) is not int:  # not a bool, a float (1e400 is inf), a string
        raise BadParams("kv_transfer_params kvpool \"%s\" is %s, not a whole number"
                        % (name, _shown(v)))
    if not lo <= v <= hi:
        raise BadParams("kv_transfer_params kvpool \"%s\" is %s, outside %d..%d (this "
                        "request's blocks)" % (name, _shown(v), lo, hi))
    return v


def decode_params(params: Any, namespace: str, hashes: Sequence[Any],
                  block: int) -> Optional[PDParams]:
    """The handoff a decode engine's request carries, checked against this
    engine's namespace and the request's own block hashes (hashes) and
    block size: None when there is none (no params, no do_remote_prefill,
    or another connector's params: no "kvpool" field), BadParams when the
    params are not exactly what a kvpool prefill engine of this namespace
    writes for this prompt."""
    if params is None:
        return None
    if not isinstance(params, dict):
        raise BadParams("kv_transfer_params is %s, not an object" % _shown(params))
    if not _flag(params, "do_remote_prefill"):
        return None
    kp = params.get("kvpool")
    if kp is None:
        return None  # another connector's params
    if not isinstance(kp, dict):
        raise BadParams("kv_transfer_params \"kvpool\" is %s, not an object" % _shown(kp))
    extra = [k for k in kp if k not in FIELDS]
    if extra:
        raise BadParams("kv_transfer_params kvpool has a field kvpool does not write: %s"
                        % _shown(extra[0]))
    missing = [k for k in FIELDS if k not in kp]
    if missing == ["ticket"]:
        raise BadParams("kv_transfer_params kvpool lacks \"ticket\" (a prefill engine of "
                        "kvpool's previous release sends none: upgrade it; only a ticket makes "
                        "a decode engine wait)", "pd-no-ticket")
    if missing:
        raise BadParams("kv_transfer_params kvpool lacks \"%s\"" % missing[0])
    ns = kp["namespace"]
    if not isinstance(ns, str) or not 0 < len(ns) <= NAME_MAX:
        raise BadParams("kv_transfer_params kvpool \"namespace\" is %s, not a namespace "
                        "name (1 to %d characters)" % (_shown(ns), NAME_MAX))
    if ns != namespace:
        raise BadParams("a request's prefill engine saved it to namespace '%s', this engine "
                        "uses '%s' (another model, dtype, block size or hash seed)"
                        % (ns, namespace), "pd-ns")
    if not hashes:
        raise BadParams("kv_transfer_params kvpool names blocks, and this request has no "
                        "full block")
    blocks = _int(kp, "blocks", 1, len(hashes))
    _int(kp, "tokens", blocks * block, blocks * block)
    last = kp["last_key"]
    if not isinstance(last, str) or not 0 < len(last) <= KEY_HEX_MAX or len(last) % 2 or \
            not _HEX.issuperset(last):
        raise BadParams("kv_transfer_params kvpool \"last_key\" is %s, not a block hash in "
                        "lower-case hex" % _shown(last))
    key = bytes.fromhex(last)
    if bytes(hashes[blocks - 1]) != key:
        raise BadParams("a request's prefill engine saved blocks whose keys are not this "
                        "request's (\"last_key\" is not the hash of its block %d: another "
                        "prompt, or another hash seed)" % (blocks - 1), "pd-key")
    ticket = kp["ticket"]
    if not isinstance(ticket, str) or len(ticket) != TICKET_HEX or \
            not _HEX.issuperset(ticket):
        raise BadParams("kv_transfer_params kvpool \"ticket\" is %s, not kvpoold's ticket "
                        "(%d lower-case hex digits)" % (_shown(ticket), TICKET_HEX))
    raw = bytes.fromhex(ticket)
    if int.from_bytes(raw[8:12], "little") != blocks:
        raise BadParams("kv_transfer_params kvpool \"ticket\" is for %d blocks, the params "
                        "say %d" % (int.from_bytes(raw[8:12], "little"), blocks))
    return PDParams(blocks, key, raw)


def prefill_params(namespace: str, blocks: int, block: int, last_key: bytes,
                   ticket: bytes) -> Dict[str, Any]:
    """A prefill engine's answer to a request with do_remote_decode: vLLM's
    names (those its routers pass on and its NIXL connector sends), and
    kvpool's own, which decode_params() takes back, with the ticket
    kvpoold issued for the handoff (Client.handoff_issue())."""
    return {"do_remote_prefill": True, "do_remote_decode": False,
            "remote_engine_id": None, "remote_block_ids": None, "remote_host": None,
            "remote_port": None,
            "kvpool": {"namespace": namespace, "blocks": blocks, "tokens": blocks * block,
                       "last_key": bytes(last_key).hex(), "ticket": bytes(ticket).hex()}}
