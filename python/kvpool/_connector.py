# SPDX-License-Identifier: MIT
"""What the engine connectors (kvpool.vllm, kvpool.sglang) share: a
connection that survives the daemon going and coming back without ever
raising into the engine, and the pool side of kvpool._kvpool.copy_blocks()."""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

import kvpool

__all__ = ["Pool", "pool_side", "key_bytes"]


class Pool:
    """A kvpool Client made on first use and again after the daemon comes
    back. Every failure is logged once per condition (again only after it
    cleared), and while the daemon is gone calls fail fast: no connect is
    tried within retry seconds of the last one. lock serializes the users
    of one connection (the engines call from several threads)."""

    def __init__(self, log: logging.Logger, role: str, socket: Optional[str],
                 namespace: str, geometry: kvpool.Geometry, scheme: int = 0,
                 seed: Optional[str] = None, retry: float = 5.0, hint: str = "") -> None:
        self.log, self.role, self.socket = log, role, socket
        self.hint = hint  # what to change when the daemon refuses the identity
        self.namespace, self.geometry, self.scheme, self.seed = namespace, geometry, scheme, seed
        self.retry = retry
        self._client: Optional[kvpool.Client] = None
        self._view: Optional[tuple] = None  # _client.view(), made on first use
        self._pid = os.getpid()
        self._next = 0.0
        self._warned: Set[str] = set()
        self.lock = threading.RLock()
        self.counters: Dict[str, int] = {}
        self._counting = threading.Lock()  # engines count from several threads

    def count(self, what: str, n: int = 1) -> None:
        with self._counting:
            self.counters[what] = self.counters.get(what, 0) + n

    def snapshot(self) -> Dict[str, int]:
        """The counters now (a copy)."""
        with self._counting:
            return dict(self.counters)

    def warn(self, cond: str, msg: str, *args: Any) -> None:
        if cond not in self._warned:
            self._warned.add(cond)
            self.log.warning("kvpool (%s): " + msg, self.role, *args)

    def clear(self, cond: str, msg: str, *args: Any) -> None:
        if cond in self._warned:
            self._warned.discard(cond)
            self.log.info("kvpool (%s): " + msg, self.role, *args)

    def client(self) -> Optional[kvpool.Client]:
        """The connected client, or None (said once) when there is none now."""
        if self._pid != os.getpid():  # a fork: the parent's socket is not ours
            self._client, self._view, self._pid, self._next = None, None, os.getpid(), 0.0
        c = self._client
        if c is not None and not c.closed:
            return c
        if time.monotonic() < self._next:
            return None
        try:
            # host pages whatever kvpoold's backend: the connectors copy
            # through the namespace's view (a GPU engine by DMA from it)
            c = kvpool.Client(self.socket, self.namespace, self.geometry,
                              key_scheme=self.scheme, key_seed=self.seed,
                              memory=kvpool.Memory.HOST)
        except kvpool.Mismatch as e:
            self._next = time.monotonic() + max(self.retry, 60.0)
            self.warn("mismatch", "namespace '%s' refused this instance: %s%s; serving "
                      "without the shared KV cache", self.namespace, e,
                      "; " + self.hint if self.hint else "")
            return None
        except OSError as e:
            self._next = time.monotonic() + self.retry
            self.warn("gone", "cannot use kvpoold at %s (%s); serving without the shared "
                      "KV cache, trying again every %gs",
                      self.socket or os.environ.get("KVPOOL_SOCKET", "the default socket"),
                      e, self.retry)
            return None
        self._client = c
        self.clear("gone", "connected to kvpoold, namespace '%s'", self.namespace)
        return c

    def client_view(self) -> Tuple[Optional[kvpool.Client], Optional[tuple]]:
        """The client and its namespace's view (Client.view()), or (None, None)."""
        c = self.client()
        if c is None:
            return None, None
        if self._view is None:
            try:
                self._view = c.view()
            except OSError as e:
                self.failed("view", e)
                return None, None
        return c, self._view

    def stored(self, c: kvpool.Client, keys: List[bytes]) -> int:
        """How many leading keys are stored (their leases dropped at once)."""
        have, _ = c.acquire(keys)
        if have:
            c.release(have)
        return len(have)

    def failed(self, what: str, e: BaseException) -> None:
        """A call on the client failed: a lost daemon drops the client."""
        if isinstance(e, (kvpool.DaemonGone, kvpool.NotConnected, ConnectionError)):
            self.drop()
            self._next = time.monotonic() + self.retry
            self.warn("gone", "kvpoold went away during %s (%s); serving without the "
                      "shared KV cache, trying again every %gs", what, e, self.retry)
        elif isinstance(e, (kvpool.NoSpace, kvpool.Limit)):
            self.warn("full", "%s: the pool has no room (%s); saves are skipped and "
                      "counted until it has", what, e)
        else:
            self.warn("error:" + what, "%s failed: %s", what, e)

    def drop(self) -> None:
        """Close the connection (its leases go with it)."""
        c, self._client, self._view = self._client, None, None  # the view first
        if c is not None and self._pid == os.getpid():
            try:
                c.close()
            except (OSError, BufferError):
                pass


def pool_side(g: kvpool.Geometry, base: int, pages: int,
              stride: int) -> Tuple[List[Tuple[int, int, int]], Tuple[int, int, int, int]]:
    """copy_blocks()'s description of pool pages in the namespace's view
    (Client.view()): (base, lo, hi) per layer and the (page, kv, head,
    token, V's head, V's token) byte strides of the page layout (per layer
    K's kv_heads x block_tokens x head_dim, then V's), docs/kv-layout.md."""
    es = kvpool.DType(g.dtype).size
    tok, tok_v = g.head_dim * es, g.v_dim * es
    head, head_v = g.block_tokens * tok, g.block_tokens * tok_v
    kv = g.kv_heads * head
    layer = kv + g.kv_heads * head_v
    hi = base + pages * stride
    return ([(base + l * layer, base, hi) for l in range(g.layers)],
            (stride, kv, head, tok, head_v, tok_v))


def key_bytes(key: Any) -> bytes:
    """An engine's block key as kvpool's 32 bytes: a hex SHA-256 digest (SGLang's
    page hashes) as its bytes, bytes of 32 (or 16, XXH3) as they are, anything
    else by its SHA-256."""
    if isinstance(key, (bytes, bytearray, memoryview)):
        b = bytes(key)
        if len(b) in (16, 32):
            return b
    elif isinstance(key, str) and len(key) == 64:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
        b = key.encode()
    else:
        b = str(key).encode()
    return hashlib.sha256(b).digest()
