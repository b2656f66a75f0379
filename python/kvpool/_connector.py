# SPDX-License-Identifier: MIT
"""What the engine connectors (kvpool.vllm, kvpool.sglang) share: a
connection that survives the daemon going and coming back without ever
raising into the engine, and the pool side of kvpool._kvpool.copy_blocks()."""
from __future__ import annotations

import hashlib
import logging
import os
import select
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

import kvpool
from kvpool import _kvpool

__all__ = ["Pool", "pool_side", "key_bytes"]


class Pool:
    """A kvpool Client made on first use and again after the daemon comes
    back. Every failure is logged once per condition (again only after it
    cleared), and while the daemon is gone calls fail fast: no connect is
    tried within retry seconds of the last one. lock serializes the users
    of one connection (the engines call from several threads)."""

    def __init__(self, log: logging.Logger, role: str, socket: Optional[str],
                 namespace: str, geometry: kvpool.Geometry, scheme: int = 0,
                 seed: Optional[str] = None, retry: float = 5.0, hint: str = "",
                 lookups: bool = True, name: Optional[str] = None,
                 timeout: float = 0.0) -> None:
        self.log, self.role, self.socket = log, role, socket
        self.name = name[:31] if name else None  # the client's name at HELLO
        # False: this side's acquires lease what another side of the engine
        # looked up (vLLM's workers): kvpoold counts them as no lookup
        self.lookups = lookups
        self.hint = hint  # what to change when the daemon refuses the identity
        self.namespace, self.geometry, self.scheme, self.seed = namespace, geometry, scheme, seed
        self.retry = retry
        # seconds a call waits for kvpoold's answer (0: no limit): a daemon
        # that is stopped or hung costs a call that long, then the
        # connection (kvpool.Client(timeout=))
        self.timeout = timeout
        self._client: Optional[kvpool.Client] = None
        self._view: Optional[tuple] = None  # _client.view(), made on first use
        self._pid = os.getpid()
        self._next = 0.0
        self._warned: Set[str] = set()
        # a recursive lock the Saver's thread (python/src/saver.c) takes too
        self.lock = _kvpool.Lock()
        self._watcher: Optional[threading.Thread] = None
        self._watcher_pid = 0
        self._closed = False
        # where this side stands: "connected", "daemon_gone", "refused" (the
        # namespace refused its identity), "dropped" (an admin dropped the
        # namespace); None until it first tried
        self.state: Optional[str] = None
        self.counters: Dict[str, int] = {}
        self.samples: Dict[str, List[float]] = {}  # observe()
        self.changes = 0  # count() and observe() calls: a reader sees whether any came
        self._counting = threading.Lock()  # engines count from several threads
        self._abandoned: List[bytes] = []  # abandon()'s keys, for flush_abandoned()

    def count(self, what: str, n: int = 1) -> None:
        with self._counting:
            self.counters[what] = self.counters.get(what, 0) + n
            self.changes += 1

    def observe(self, what: str, seconds: float) -> None:
        """A duration for a histogram (vLLM's /metrics), kept until
        take_samples(); at most 4,096 of one kind wait (the rest dropped)."""
        with self._counting:
            v = self.samples.setdefault(what, [])
            if len(v) < 4096:
                v.append(seconds)
            self.changes += 1

    def abandon(self, keys: List[bytes]) -> None:
        """The blocks under keys will not be saved (a save skipped or
        failed): kept for flush_abandoned(), at most 4,096 (a decode
        engine waiting for one past them waits its wait, as before)."""
        with self._counting:
            self._abandoned.extend(keys[:4096 - len(self._abandoned)])

    def flush_abandoned(self) -> None:
        """Tell kvpoold the blocks abandon() was given (Client.handoff_
        abandon(), under lock): a decode engine waiting for one of them
        computes at once rather than wait for it. Counted in pd_abandoned."""
        with self._counting:
            keys, self._abandoned = self._abandoned, []
        if not keys:
            return
        sent = 0
        with self.lock:
            c = self.client()
            if c is None:
                return  # the daemon is gone: no one waits in it
            for k in keys:
                try:
                    c.handoff_abandon(k)
                    sent += 1
                except (kvpool.DaemonGone, kvpool.NotConnected, ConnectionError) as e:
                    self.failed("abandon", e)
                    break
                except OSError as e:  # this one (said once); the others still go
                    self.failed("abandon", e)
        self.count("pd_abandoned", sent)

    def take_samples(self) -> Dict[str, List[float]]:
        """The durations observed since the last call."""
        with self._counting:
            out, self.samples = self.samples, {}
            return out

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
        """The connected client, or None (said once) when there is none now.
        Connects itself only on its first call in a process (and after a
        refusal): after it, this process's watcher connects again, without
        the lock, so that no user of the lock waits for a HELLO that a
        stopped daemon, or a socket systemd holds for one restarting, does
        not answer."""
        if self._pid != os.getpid():  # a fork: the parent's socket is not ours
            self._client, self._view, self._pid, self._next = None, None, os.getpid(), 0.0
        c = self._client
        if c is not None and not c.closed:
            return c
        if time.monotonic() < self._next or self._watched():
            return None
        c = self._connect()
        if c is not None:
            self._install(c)
        self._watch()
        return c

    def _watched(self) -> bool:
        """This process's watcher runs (it connects again)."""
        w = self._watcher
        return w is not None and w.is_alive() and self._watcher_pid == os.getpid()

    def _connect(self) -> Optional[kvpool.Client]:
        """A new connection, or None, said once (lock held or not)."""
        try:
            # host pages whatever kvpoold's backend: the connectors copy
            # through the namespace's view (a GPU engine by DMA from it)
            c = kvpool.Client(self.socket, self.namespace, self.geometry,
                              key_scheme=self.scheme, key_seed=self.seed,
                              memory=kvpool.Memory.HOST, name=self.name,
                              timeout=self.timeout)
        except kvpool.Mismatch as e:
            self.state = "refused"
            self._next = time.monotonic() + max(self.retry, 60.0)
            # the hint is the seed's: said only when the seed is what differs
            # (a geometry, model or scheme that differs says so itself)
            hint = self.hint if self.hint and "key_seed" in str(e) else ""
            self.warn("mismatch", "namespace '%s' refused this instance: %s%s; serving "
                      "without the shared KV cache", self.namespace, e,
                      "; " + hint if hint else "")
            return None
        except OSError as e:
            self.state = "daemon_gone"
            self._next = time.monotonic() + self.retry
            self.warn("gone", "cannot use kvpoold at %s (%s); serving without the shared "
                      "KV cache, trying again every %gs",
                      self.socket or os.environ.get("KVPOOL_SOCKET", "the default socket"),
                      e, self.retry)
            return None
        if not self.lookups:
            c.set_lookups_counted(False)
        return c

    def _install(self, c: kvpool.Client) -> None:
        """c is the connection from now on (lock held)."""
        self._client = c
        self.state = "connected"
        self.clear("gone", "connected to kvpoold, namespace '%s'", self.namespace)
        if c.protocol < kvpool.PROTOCOL:
            self._old_daemon(c.protocol)
        else:
            self.clear("old-daemon", "kvpoold speaks protocol version %d now: handoffs "
                       "are on again", c.protocol)

    def _old_daemon(self, version: int) -> None:
        """Said once: kvpoold is of the previous release (a rolling upgrade
        under way), so what came later is off until it is upgraded."""
        self.warn("old-daemon", "kvpoold speaks protocol version %d, the previous release's "
                  "(this kvpool speaks %d): pages are shared as before, but P/D handoffs "
                  "are off until kvpoold is upgraded (a decode engine computes such "
                  "requests itself), and so are the sources of hits (vLLM counts them "
                  "as external_unspecified; docs/deploy.md, \"Upgrades\")", version,
                  kvpool.PROTOCOL)

    def _watch(self) -> None:
        """Start this process's watcher of the connection (lock held): a
        daemon that goes away is noticed at once, from the socket's
        hang-up, not at the next request, and connected to again in the
        background, so that the first request after a restart finds it."""
        if self._watched() or self.state == "refused":
            return
        self._watcher_pid = os.getpid()
        self._watcher = threading.Thread(target=self._watching, name="kvpool-watch",
                                         daemon=True)
        self._watcher.start()

    def _watching(self) -> None:
        pid = os.getpid()
        wait = 0.1
        while not self._closed and os.getpid() == pid:
            c = self._client
            if c is None or c.closed:
                # gone: try again soon (0.1 s, doubling to retry seconds),
                # without the lock
                time.sleep(wait)
                wait = min(wait * 2, max(self.retry, 0.1))
                if self._closed or self.state == "refused":
                    return
                made = self._connect() if self._client is None else None
                if made is None:
                    if self.state == "refused":
                        return  # client() tries again, retry seconds (60 at least) on
                    continue
                with self.lock:
                    if self._closed or self._client is not None or \
                            self._pid != os.getpid():
                        try:
                            made.close()
                        except (OSError, BufferError):
                            pass
                    else:
                        self._next = 0.0
                        self._install(made)
                continue
            wait = 0.1
            try:
                fd = c.fileno()
                p = select.poll()
                p.register(fd, select.POLLRDHUP)
                hung = p.poll(1000)
            except (OSError, ValueError):
                hung = [(0, select.POLLHUP)]
            if not hung:
                continue
            with self.lock:
                if self._client is c:  # not replaced meanwhile
                    try:  # a call on a closed connection fails at once, saying why
                        c.stats()
                        why = None
                    except OSError as e:
                        why = e
                    self.drop()
                    # kvpoold's notice says why it closed the connection
                    self.state = "dropped" if "was dropped by an admin" in str(why) \
                        else "daemon_gone"
                    self._said_gone(why)

    def close(self) -> None:
        """Stop watching and close the connection (the engine shuts down)."""
        self._closed = True
        with self.lock:
            self.drop()

    def uses(self, c) -> bool:
        """c is this pool's connection now, and open (read without the lock:
        it may close at any time after)."""
        return c is not None and self._client is c and not c.closed

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
        """How many leading keys the pool (or a local tier) holds: leases
        nothing and counts no lookup (a save asks it, not to copy again)."""
        return c.contains(keys)

    def looked_up(self, c: kvpool.Client, keys: List[bytes]) -> int:
        """How many leading keys are stored, as a lookup kvpoold counts
        (their leases dropped at once)."""
        have, _ = c.acquire(keys)
        if have:
            c.release(have)
        return len(have)

    def load(self, c: kvpool.Client, keys: List[bytes],
             parent: Optional[bytes] = None) -> List[int]:
        """Lease the pages of keys an earlier lookup found: kvpoold does not
        count the acquire again (lock held)."""
        c.set_lookups_counted(False)
        try:
            pages, _ = c.acquire(keys, parent=parent)
        finally:
            c.set_lookups_counted(self.lookups)
        return pages

    def _said_gone(self, e: Optional[BaseException], what: str = "") -> None:
        """The connection is gone: why, once (the loss of a call that
        timed out says so, with the setting that sets the limit)."""
        if e is not None and "did not answer" in str(e):
            self.warn("gone", "%s (the connector's timeout_seconds: %gs); serving without "
                      "the shared KV cache, connecting again in the background", e,
                      self.timeout)
        elif what:
            self.warn("gone", "kvpoold went away during %s (%s); serving without the "
                      "shared KV cache, connecting again in the background", what, e)
        else:
            self.warn("gone", "kvpoold closed the connection%s; serving without the shared "
                      "KV cache, connecting again in the background",
                      " (%s)" % e if e is not None else "")

    def failed(self, what: str, e: BaseException) -> None:
        """A call on the client failed: a lost daemon drops the client."""
        if isinstance(e, (kvpool.DaemonGone, kvpool.NotConnected, ConnectionError)):
            self.drop()
            # kvpoold's notice says why it closed the connection
            self.state = "dropped" if "was dropped by an admin" in str(e) else "daemon_gone"
            self._next = time.monotonic() + self.retry
            self._said_gone(e, what)
        elif isinstance(e, kvpool.ProtocolNotSupported) and self._client is not None:
            self._old_daemon(self._client.protocol)
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
