# SPDX-License-Identifier: MIT
"""kvpool: a client of kvpoold, the machine-wide KV-cache page service.

A Client joins a namespace (one model's KV geometry), leases pages,
shares prefixes by their block keys (byte-compatible with vLLM's
prefix-caching hashes) and sees each page's bytes in place: as a
memoryview, a NumPy array or a torch tensor shaped
(layers, 2, kv_heads, block_tokens, head_dim), never copied.

    import kvpool
    g = kvpool.Geometry(layers=32, kv_heads=8, head_dim=128, block_tokens=16,
                        dtype=kvpool.DType.BF16, model="meta-llama/Llama-3.1-8B")
    with kvpool.Client(namespace="llama", geometry=g) as c:
        keys = c.block_keys(prompt_token_ids)
        hit = c.acquire(keys)
        ...

Every call that waits on the daemon releases the GIL; one Client may be
used from several threads. Errors are kvpool.Error (an OSError: errno
and the daemon's explanation) or one of its subclasses.
"""
from __future__ import annotations

import enum
import errno
import functools
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _kvpool
from ._kvpool import (DaemonGone, Error, InvalidArgument, Limit, Mismatch, NoSpace,
                      NotConnected, NotFound, PageView, PermissionDenied,
                      ProtocolNotSupported, Stale, library_version)

__all__ = [
    "Client", "Geometry", "DType", "Scheme", "Memory", "Backend", "Acquired", "PageView", "CudaPage", "DLPage",
    "key_root",
    "key_chain", "scheme_of_vllm", "library_version", "Error", "NoSpace", "Stale",
    "PermissionDenied", "Mismatch", "Limit", "NotConnected", "DaemonGone",
    "InvalidArgument", "NotFound", "PRIO_LOW", "PRIO_NORMAL", "PRIO_HIGH", "PRIO_PINNED",
    "REMOTE_NEVER", "K_ONLY", "PROTOCOL", "ProtocolNotSupported",
]
__version__ = _kvpool.__version__  # the release's (VERSION), as the wheel's metadata
#: The protocol version this package speaks with kvpoold. It speaks the
#: previous release's too, with a kvpoold of that release: Client.protocol.
PROTOCOL = _kvpool.PROTOCOL

PRIO_LOW, PRIO_NORMAL, PRIO_HIGH, PRIO_PINNED = 0, 1, 2, 3
#: Client.set_remote_policy(max_us=REMOTE_NEVER): never ask the remote tier.
REMOTE_NEVER = _kvpool.REMOTE_NEVER
#: Geometry(head_dim_v=K_ONLY): pages hold K alone (MLA's latent vectors).
K_ONLY = _kvpool.K_ONLY

Key = Union[bytes, bytearray, memoryview]
Tokens = Any  # a sequence of ints, array('I') or a uint32 NumPy array


class DType(enum.IntEnum):
    """A namespace's element type (kvpool.h enum kvp_dtype)."""
    F16 = 1
    BF16 = 2
    F32 = 3
    FP8 = 4

    @property
    def size(self) -> int:
        return {1: 2, 2: 2, 3: 4, 4: 1}[int(self)]


class Scheme(enum.IntEnum):
    """Block key schemes: vLLM's four --prefix-caching-hash-algo values."""
    DEFAULT = 0  # the namespace's, or kvpoold's --key-scheme
    VLLM_SHA256_CBOR = _kvpool.KEYS_VLLM_SHA256_CBOR
    VLLM_XXHASH_CBOR = _kvpool.KEYS_VLLM_XXHASH_CBOR
    FAST = _kvpool.KEYS_VLLM_XXHASH_CBOR
    VLLM_SHA256 = _kvpool.KEYS_VLLM_SHA256
    VLLM_XXHASH = _kvpool.KEYS_VLLM_XXHASH


class Memory(enum.IntEnum):
    """Where a namespace's pages live (Client(memory=...))."""
    DEFAULT = _kvpool.MEMORY_DEFAULT  # kvpoold's backend: GPU memory with cuda
    HOST = _kvpool.MEMORY_HOST  # host memory whatever the backend: view(), DMA


class Backend(enum.IntEnum):
    """Where a namespace's pages live (info()["backend"])."""
    HOST = _kvpool.BACKEND_HOST  # shared host memory (memfd)
    CUDA = _kvpool.BACKEND_CUDA  # GPU memory


_VLLM_ALGOS = {"sha256": Scheme.VLLM_SHA256, "sha256_cbor": Scheme.VLLM_SHA256_CBOR,
               "xxhash": Scheme.VLLM_XXHASH, "xxhash_cbor": Scheme.VLLM_XXHASH_CBOR}


def scheme_of_vllm(algo: str) -> Scheme:
    """The scheme of a vLLM --prefix-caching-hash-algo value ("sha256", ...)."""
    try:
        return _VLLM_ALGOS[algo]
    except KeyError:
        raise ValueError("vLLM hash algorithm %r is not one of %s" %
                         (algo, ", ".join(sorted(_VLLM_ALGOS)))) from None


@dataclass(frozen=True)
class Geometry:
    """One model's KV layout: what a namespace holds. A page is
    (layers, 2, kv_heads, block_tokens, head_dim) elements of dtype, K then V
    for every layer (docs/kv-layout.md).

    head_dim_v: V's head size. 0 (the default): the same as head_dim.
    K_ONLY: no V, the page is (layers, 1, kv_heads, block_tokens, head_dim)
    (MLA: one latent vector per token, kv_heads 1). Another size: each
    layer holds K's kv_heads x block_tokens x head_dim elements, then V's
    kv_heads x block_tokens x head_dim_v, and page_shape is (layers,
    kv_heads x block_tokens x (head_dim + head_dim_v)), a layer's elements
    in a row."""
    layers: int
    kv_heads: int
    head_dim: int
    block_tokens: int
    dtype: DType
    model: str
    head_dim_v: int = 0

    @property
    def v_dim(self) -> int:
        """V's head size in the pages: head_dim, 0 (K only) or its own."""
        v = self.head_dim_v
        return self.head_dim if v == 0 else 0 if v == K_ONLY else v

    @property
    def page_shape(self) -> Tuple[int, ...]:
        v = self.v_dim
        if v == self.head_dim or v == 0:
            return (self.layers, 2 if v else 1, self.kv_heads, self.block_tokens,
                    self.head_dim)
        return (self.layers, self.kv_heads * self.block_tokens * (self.head_dim + v))

    @property
    def page_bytes(self) -> int:
        return self.layers * self.kv_heads * self.block_tokens * \
            (self.head_dim + self.v_dim) * DType(self.dtype).size


class _Leased(NamedTuple):
    pages: List[int]
    partial: Optional[Tuple[int, int]]


#: Where acquire(sources=True) says each leased block came from.
SOURCES = ("pool", "host", "nvme", "remote")


class Acquired(_Leased):
    """What acquire() leased: the pages of the cached prefix's full blocks,
    and the partly filled page after them as (page, tokens) or None. With
    acquire(sources=True), .sources says where each of the pages came
    from: "pool" (it was there), "host" or "nvme" (kvpoold read it back
    from that tier), "remote" (fetched from the remote tier, another
    machine's); else None."""
    sources: Optional[List[str]] = None


class Client(_kvpool.Client):
    """A connection to kvpoold, joined to a namespace (or, with namespace
    None, an inspection session for stats). Closing it (close(), the end
    of a with block, or garbage collection) drops every lease at once.

    socket: the daemon's socket (None: $KVPOOL_SOCKET, else
    /run/kvpool/kvpool.sock). key_seed: the seed this process derives keys
    from itself (an engine computing vLLM's hashes: its PYTHONHASHSEED, or
    "vllm-none-hash"): the connect fails with Mismatch unless kvpoold's is
    the same. readonly: page views are read-only (a reader's slabs are
    mapped read-only by the daemon's access rules anyway). memory: where the
    namespace's pages live when this client creates it (Memory.HOST: host
    memory even beside kvpoold's cuda backend, for view() and DMA copies);
    joining a namespace of GPU pages with Memory.HOST fails with Mismatch.
    info()["backend"] says which memory the namespace has. name: what
    `kvpool clients` and kvpoold's log call this client (at most 31 bytes;
    default the program's name). timeout: seconds the connect and each
    call wait at most for kvpoold's answer (an acquire: plus its
    set_acquire_wait() wait), so that a stopped or hung daemon cannot hold
    the caller; a call that waits longer raises DaemonGone (errno
    ETIMEDOUT) and closes the connection, whose leases the daemon drops.
    0 (the default): no limit.

    When the daemon goes away (it exits, is killed, or disconnects this
    client), every call raises DaemonGone and the client's leases are gone
    (the daemon dropped them). reconnect() connects again, with the same
    arguments, to the daemon now on the socket (a restarted one): a new
    session, in which page handles of the old one are stale. With
    reconnect=True the client does that itself: the call that finds the
    daemon gone still raises DaemonGone (what it held is lost, and the
    caller must know), the next calls connect again, at most once every
    retry seconds and raising DaemonGone at once in between, and the loss
    and the return are each logged once (logger "kvpool"), as the engine
    connectors do.
    """

    def __init__(self, socket: Optional[str] = None, namespace: Optional[str] = None,
                 geometry: Optional[Geometry] = None, *, key_scheme: int = 0,
                 key_seed: Optional[str] = None, readonly: bool = False,
                 memory: int = Memory.DEFAULT, reconnect: bool = False,
                 retry: float = 1.0, name: Optional[str] = None,
                 timeout: float = 0.0) -> None:
        if namespace is not None and geometry is None:
            raise TypeError("Client(namespace=%r) needs geometry=kvpool.Geometry(...)"
                            % namespace)
        self.geometry = geometry
        self._auto, self._retry, self._next, self._lost = bool(reconnect), retry, 0.0, False
        self._relock = threading.Lock()
        if geometry is None:
            self._conn: Tuple[tuple, Dict[str, Any]] = ((socket, None), {
                "readonly": readonly, "name": name, "timeout": float(timeout)})
        else:
            self._conn = ((socket, namespace), dict(
                layers=geometry.layers, kv_heads=geometry.kv_heads,
                head_dim=geometry.head_dim, block_tokens=geometry.block_tokens,
                head_dim_v=int(geometry.head_dim_v),
                dtype=int(geometry.dtype), model=geometry.model, key_scheme=int(key_scheme),
                key_seed=key_seed, readonly=readonly, memory=int(memory), name=name,
                timeout=float(timeout)))
        super().__init__(*self._conn[0], **self._conn[1])

    def reconnect(self) -> None:
        """Close this session (its leases go, if the daemon still had them)
        and connect again with the same arguments. Page handles of the old
        session are stale in the new one. Raises DaemonGone when no daemon
        answers, BufferError while page views of the old session are alive
        (their memory would go under them)."""
        if not self.closed:
            self.close()
        for cached in ("_np", "_gpu"):
            self.__dict__.pop(cached, None)
        super().__init__(*self._conn[0], **self._conn[1])

    def _revive(self) -> None:
        """reconnect=True, before a call: a session lost earlier is made
        again (at most every retry seconds), else DaemonGone at once."""
        with self._relock:
            if not self._lost:
                return
            now = time.monotonic()
            if now < self._next:
                raise DaemonGone(errno.EPIPE, "kvpoold is gone; this client connects "
                                 "again in %.1f s" % (self._next - now))
            self._next = now + self._retry
            try:
                self.reconnect()
            except (OSError, BufferError) as e:
                raise DaemonGone(errno.EPIPE, "kvpoold is gone, and connecting again "
                                 "failed: %s" % e) from None
            self._lost = False
            _log.info("kvpool: connected to kvpoold again (%s); a new session: "
                      "handles from before are stale", self._where())

    def _gone(self, e: BaseException) -> None:
        """reconnect=True: a call found the daemon gone."""
        with self._relock:
            if self._lost:
                return
            self._lost = True
            self._next = 0.0  # the next call tries at once
            _log.warning("kvpool: kvpoold at %s went away (%s): this client's leases "
                         "are gone; it connects again on its next call", self._where(), e)

    def _where(self) -> str:
        return self._conn[0][0] or os.environ.get("KVPOOL_SOCKET") or \
            "/run/kvpool/kvpool.sock"

    def __enter__(self) -> "Client":
        return super().__enter__()

    def info(self) -> Dict[str, Any]:
        """The session's facts, as the daemon gave them at connect:
        backend (a Backend) and key_scheme (a Scheme) by name; both still
        compare equal to their numbers."""
        i = super().info()
        i["backend"] = Backend(i["backend"])
        i["key_scheme"] = Scheme(i["key_scheme"])
        return i

    def acquire(self, keys: Union[Key, Sequence[Key]], tokens: Optional[Tokens] = None,
                parent: Optional[Key] = None, **options: Any) -> Acquired:
        """Lease the longest cached prefix of keys. With tokens (the token ids
        from the first key's block on), also the partial page after it whose
        tokens they continue. The caller releases what it got.

        Keyword options apply to this call alone (None or absent: the
        client's, as set_acquire_wait(), set_lookups_counted() and
        set_remote_policy() set them): wait (seconds to wait for keys
        another client is still saving), handoff (with wait: the last key
        of the handoff the wait is for, handoff_issue()'s; the wait ends
        at once when its prefill engine abandons it or hangs up first),
        load (True: the keys were looked up already, not counted as
        lookups), prefill_rate and remote_max_us (the remote tier's
        policy), sources (True: Acquired.sources says where each page
        came from)."""
        got = super().acquire(keys, tokens, parent, **options)
        a = Acquired(got[0], got[1])
        if len(got) > 2:
            a.sources = [SOURCES[b] if b < len(SOURCES) else "pool" for b in got[2]]
        return a

    def page_view(self, page: int) -> memoryview:
        """The page's bytes in place, as a memoryview (no copy)."""
        return memoryview(self.page(page))

    def page_array(self, page: int):
        """The page as a NumPy array of the geometry's page_shape ((layers,
        2, kv_heads, block_tokens, head_dim) where K and V are alike), in
        place. NumPy has no bfloat16 or fp8: those pages come as uint16 and
        uint8 arrays of the same shape."""
        try:
            make, shape, dt = self._np
        except AttributeError:
            import numpy as np
            g = self._need_geometry()
            self._np = make, shape, dt = np.ndarray, g.page_shape, _numpy_dtype(g.dtype)
        return make(shape, dt, self.page(page))

    def page_tensor(self, page: int):
        """The page as a torch tensor of the geometry's page_shape ((layers,
        2, kv_heads, block_tokens, head_dim) where K and V are alike) in the
        namespace's dtype, in place (CPU: the host backend)."""
        import torch
        g = self._need_geometry()
        return torch.frombuffer(self.page(page), dtype=_torch_dtype(g.dtype)).view(g.page_shape)

    def kv_array(self):
        """Every page of the namespace as one NumPy array indexed by page
        number: (pages,) + the geometry's page_shape, in place. Index it with page_index(handle). Only the pages this
        client holds may be touched: the others are holes (unmapped, or
        another client's), so never read the whole array (no print, no
        sum)."""
        import numpy as np
        g = self._need_geometry()
        buf, stride, pages, _ = self.view()
        dtype = _numpy_dtype(g.dtype)
        inner = tuple(n * dtype.itemsize for n in _compact_strides(g.page_shape))
        return np.ndarray((pages,) + g.page_shape, dtype, buf, strides=(stride,) + inner)

    def kv_tensor(self):
        """kv_array() as a torch tensor in the namespace's dtype (CPU),
        (pages,) + the geometry's page_shape; its layer
        slices [:, l] are strided views, no copy. The same care: touch only
        the pages this client holds."""
        import torch
        g = self._need_geometry()
        buf, stride, pages, _ = self.view()
        flat = torch.frombuffer(buf, dtype=_torch_dtype(g.dtype))
        return flat.as_strided((pages,) + g.page_shape,
                               (stride // DType(g.dtype).size,) + _compact_strides(g.page_shape))

    def page_dlpack(self, page: int, device_id: int = 0) -> DLPage:
        """The page as a DLPack producer, of the geometry's page_shape
        ((layers, 2, kv_heads, block_tokens, head_dim) where K and V are alike): on the CPU with the host backend, on CUDA device
        device_id with the CUDA backend. torch.from_dlpack(c.page_dlpack(p))
        is the page in place, in the namespace's dtype (bfloat16 included)."""
        g = self._need_geometry()
        if self._on_gpu():
            return DLPage(self, self.page_address(page), g.page_shape,
                          _compact_strides(g.page_shape), g, (_DL_CUDA, device_id))
        pv = self.page(page)
        return DLPage(pv, pv.address, g.page_shape, _compact_strides(g.page_shape), g,
                      (_DL_CPU, 0), memoryview(pv).readonly)

    def page_cuda(self, page: int) -> "CudaPage":
        """With the CUDA backend: the page on the GPU, for
        torch.as_tensor(..., device="cuda") or CuPy through
        __cuda_array_interface__ (version 3), in place."""
        g = self._need_geometry()
        if not self._on_gpu():
            raise NotImplementedError("page_cuda(): the pool is host memory; use "
                                      "page_array() or page_tensor()")
        return CudaPage(self, page, self.page_address(page), g)

    def _on_gpu(self) -> bool:
        try:
            return self._gpu
        except AttributeError:
            self._gpu = self.info()["backend"] == _kvpool.BACKEND_CUDA
            return self._gpu

    def _need_geometry(self) -> Geometry:
        if self.geometry is None:
            raise NotConnected("an inspection session has no pages")
        return self.geometry


_log = logging.getLogger("kvpool")


def _session_call(name: str) -> Callable[..., Any]:
    """Client.name with reconnect=True's handling around it."""
    call = getattr(Client, name)

    @functools.wraps(call)
    def wrapped(self: Client, *args: Any, **kw: Any) -> Any:
        if not self._auto:
            return call(self, *args, **kw)
        self._revive()
        try:
            return call(self, *args, **kw)
        except DaemonGone as e:
            self._gone(e)
            raise
    return wrapped


# the calls that talk to the daemon, or use the session's mappings
for _name in ("alloc", "release", "retain", "cow", "acquire", "publish", "publish_partial",
              "block_keys", "info", "stats", "set_remote_policy", "evict", "list_clients",
              "list_pages", "list_prefixes", "disconnect", "drop_namespace", "page", "view",
              "page_index", "page_address", "page_at", "load_blocks", "save_blocks"):
    setattr(Client, _name, _session_call(_name))
del _name

_TYPESTR = {DType.F16: "<f2", DType.BF16: "<V2", DType.F32: "<f4", DType.FP8: "|u1"}
# DLPack type codes and bits: float 2, bfloat 4, uint 1
_DLTYPE = {DType.F16: (2, 16), DType.BF16: (4, 16), DType.F32: (2, 32), DType.FP8: (1, 8)}
_DL_CPU, _DL_CUDA = 1, 2


def _compact_strides(shape):
    """The element strides of a C-contiguous array of shape."""
    strides = [1]
    for n in reversed(shape[1:]):
        strides.insert(0, strides[0] * n)
    return tuple(strides)


def _numpy_dtype(dtype):
    """NumPy's type for a DType: NumPy has no bfloat16 or fp8, so those are
    uint16 and uint8."""
    import numpy as np
    return np.dtype({DType.F16: np.float16, DType.BF16: np.uint16, DType.F32: np.float32,
                     DType.FP8: np.uint8}[DType(dtype)])


def _torch_dtype(dtype):
    import torch
    return {DType.F16: torch.float16, DType.BF16: torch.bfloat16, DType.F32: torch.float32,
            DType.FP8: getattr(torch, "float8_e4m3fn", torch.uint8)}[DType(dtype)]


class DLPage:
    """A page (or the whole view) for DLPack consumers: torch.from_dlpack(),
    numpy.from_dlpack(), CuPy. In place; the tensor keeps the mapping
    alive through owner."""

    def __init__(self, owner, address: int, shape, strides, g: Geometry, device,
                 readonly: bool = False) -> None:
        self._args = (owner, address, tuple(shape), tuple(strides)) + \
            _DLTYPE[DType(g.dtype)] + device
        self._readonly = readonly

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("kvpool pages are shared in place: no copy")
        versioned = max_version is not None and max_version[0] >= 1
        return _kvpool.dlpack(*self._args, versioned, self._readonly)

    def __dlpack_device__(self):
        return self._args[6:8]


class CudaPage:
    """A device page: __cuda_array_interface__ over the pointer the CUDA
    IPC mapping gives. It keeps its Client (and the mapping) alive."""

    def __init__(self, client: Client, page: int, ptr: int, g: Geometry) -> None:
        self.client, self.page, self.ptr = client, page, ptr
        self.__cuda_array_interface__ = {
            "shape": g.page_shape, "typestr": _TYPESTR[DType(g.dtype)],
            "data": (ptr, False), "version": 3, "strides": None}


def key_root(scheme: int, seed: str) -> bytes:
    """The root key of a scheme for a seed: vLLM's NONE_HASH for
    PYTHONHASHSEED=seed (16 bytes for the XXH3 schemes, as vLLM's)."""
    return _kvpool.key_root(int(scheme), seed)


def key_chain(scheme: int, parent: Key, tokens: Tokens, block_tokens: int) -> List[bytes]:
    """The keys of the full blocks of tokens chained from parent, as vLLM's
    hash_block_tokens() computes them without extra keys."""
    return _kvpool.key_chain(int(scheme), parent, tokens, int(block_tokens))
