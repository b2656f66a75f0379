# SPDX-License-Identifier: MIT
"""The vLLM connector's scheduler side: for each request, how much of its
prefix the pool holds (one ACQUIRE, its pages leased until the workers have
copied them or the request ends), which of its full blocks the workers
save (never one the pool already holds), and the metadata of each step
(kvpool.vllm.metadata) that tells the workers. A load runs in the step or
off it (_off_step()) by its measured cost; a hybrid model's saved blocks
are pinned in vLLM's block pool until every worker's save of them ended."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata

import kvpool
from kvpool._connector import Pool
from kvpool.vllm.identity import Identity
from kvpool.vllm.metadata import KVPoolMetadata, KVPoolWorkerMetadata, Transfer
from kvpool.vllm.pd import BadParams, decode_params, prefill_params, wants_decode

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

__all__ = ["SchedulerSide", "IDLE_LOAD_S", "GUESS_BYTES_PER_S"]

# Where a load runs when async_load_blocks is not set: in the step when its
# predicted time (the workers' measured seconds per block, times its
# blocks) is at most what the step absorbs, load_step_share of the
# engine's recent busy step or, with no other request in the engine,
# IDLE_LOAD_S; off the step otherwise. Before any load is measured a block
# is taken to copy at GUESS_BYTES_PER_S.
IDLE_LOAD_S = 0.05
GUESS_BYTES_PER_S = 2e9

# How long a prefill engine's handoff ticket holds: the decode engine's
# wait (pd_wait_seconds) plus the request's way there (the router, the
# decode engine's queue), TICKET_WAITS times the wait and at least
# TICKET_MIN_S, at most kvpoold's 600 s.
TICKET_WAITS = 3
TICKET_MIN_S = 30.0

# A save sent to the workers is in flight until every worker says it
# ended (saved, skipped or failed); a request does not queue the blocks
# of another's save in flight again. One the workers never answer (a
# step whose metadata never reached them) stops counting after
# FLIGHT_MAX_S.
FLIGHT_MAX_S = 120.0
FLIGHT_SWEEP = 1024

# the protocol version whose ACQUIRE says where each block came from
SOURCES_SINCE = 9
# vLLM's CacheHitSource of each: the pool and its host tier are host
# memory, the NVMe tier disk, the remote tier another machine's
HIT_SOURCE = {"pool": "host", "host": "host", "nvme": "disk", "remote": "p2p"}


@dataclass
class _Lease:
    pages: List[int]  # blocks 0 .. hit of the request, leased
    keys: List[bytes]
    start: int  # the first block to load (vLLM computed the ones before)
    block_ids: Optional[List[int]] = None  # where they go, once vLLM allocated them
    groups: Optional[List[List[int]]] = None  # every KV cache group's (hybrid models)
    sent: bool = False
    background: bool = False  # the request waits in WAITING_FOR_REMOTE_KVS
    wait: float = 0.0  # seconds its load waits for keys a prefill engine saves
    handoff: Optional[bytes] = None  # the last key of the handoff it waits for
    fail: bool = False  # sent as a failed load (a hook's fallback: vLLM computes it)
    sources: Optional[List[str]] = None  # where kvpoold had each page (Acquired.sources)


class SchedulerSide:
    """KVPoolConnector's methods for vLLM's scheduler (the connector
    delegates to them). conn is the connector: vLLM binds its KV cache
    manager there."""

    def __init__(self, conn, pool: Optional[Pool], ident: Optional[Identity],
                 settings: Dict[str, Any], block: int, hybrid: bool, workers: int,
                 loads: bool = True, saves: bool = True) -> None:
        self._conn = conn
        # vLLM's kv_role: kv_producer saves and never loads, kv_consumer
        # loads and never saves, kv_both does both
        self._loads, self._saves = loads, saves
        self._pool = pool
        self._ident = ident
        self._block = block
        self._hybrid = hybrid
        self._workers = workers
        self._async_load = settings["async_load_blocks"]
        self._step_share = settings["load_step_share"]
        self._pd_wait = settings["pd_wait_seconds"]
        self._pd_max = settings["pd_max_waits"]
        self._pd_waits: Set[str] = set()  # requests whose load waits for a prefill engine
        # each P/D request's handoff as its params and ticket were judged
        # (its blocks, its wait), once: vLLM asks again while it waits
        self._pd_known: Dict[str, Tuple[int, float, Optional[bytes]]] = {}
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
        # saves in flight (FLIGHT_MAX_S): each job's keys and when it was
        # sent, and each key's latest job
        self._flight: Dict[int, Tuple[List[bytes], float, str]] = {}
        self._flying: Dict[bytes, int] = {}
        self._step_at: Optional[float] = None  # when the last step was scheduled
        self._step_busy = False  # it computed tokens
        self._step_s: Optional[float] = None  # a busy step's duration (moving average)
        self._block_s: Optional[float] = None  # a block's load time, as the workers measure
        # requests a worker failed to load: vLLM asks for them again, and
        # they are computed rather than sent to fail again
        self._no_load: Set[str] = set()

    def on_new_request(self, request: "Request") -> None:
        self._requests[request.request_id] = request

    def _release(self, req_id: str) -> None:
        self._pd_waits.discard(req_id)  # no load of it waits now
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

    # -- what a hook that failed falls back to (KVPoolConnector's _hook()):
    # the request computed without the pool, none of vLLM's state stuck

    def compute(self, request: "Request") -> Tuple[int, bool]:
        """get_num_new_matched_tokens() that failed: nothing to load (its
        lease let go), and none of it tried again."""
        self._no_load.add(request.request_id)
        self._release(request.request_id)
        return 0, False

    def fail_load(self, request: "Request", blocks: "KVCacheBlocks",
                  num_external_tokens: int) -> None:
        """update_state_after_alloc() that failed: vLLM counts the offered
        tokens as there, so their load goes to the workers as failed (they
        report its blocks, which vLLM computes), never dropped."""
        rid = request.request_id
        lease = self._leases.get(rid)
        self._no_load.add(rid)
        if lease is None or lease.sent:
            return
        span = slice(lease.start, lease.start + max(0, num_external_tokens) // self._block)
        ids = blocks.get_block_ids()
        lease.fail = True
        lease.block_ids = list(ids[0][span])
        if self._hybrid:
            lease.groups = [list(g[span]) for g in ids]

    def meta_of_failures(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        """build_connector_meta() that failed: the step's finished and
        preempted requests, no save, and every load not sent yet sent as
        failed."""
        meta = KVPoolMetadata(finished=set(scheduler_output.finished_req_ids),
                              preempted=set(getattr(scheduler_output, "preempted_req_ids",
                                                    None) or ()),
                              hold=self._hold)
        self._hold = set()
        for rid, lease in self._leases.items():
            if lease.sent or lease.block_ids is None:
                continue
            lease.sent = True
            meta.loads.append(Transfer(rid, [], None, lease.block_ids,
                                       background=lease.background, groups=lease.groups,
                                       fail=True))
            if lease.background:
                self._loading.add(rid)
        return meta

    def end_transfers(self, connector_output: "KVConnectorOutput") -> None:
        """What vLLM's report of the workers' transfers must update, even
        when update_connector_output() failed: the loads and saves ended."""
        self._no_load |= set(getattr(connector_output, "failed_recving", None) or ())
        # vLLM passes these on once every worker reported them
        self._loading -= set(connector_output.finished_recving or ())
        self._pd_waits -= set(connector_output.finished_recving or ())
        self._holding -= set(connector_output.finished_sending or ())

    def finish(self, request: "Request") -> Tuple[bool, Optional[int]]:
        """request_finished()'s bookkeeping: whether vLLM keeps the
        request's blocks for its saves, and how many blocks were saved."""
        rid = request.request_id
        self._release(rid)
        self._requests.pop(rid, None)
        self._pd_known.pop(rid, None)
        saved = self._saved.pop(rid, None)
        self._no_load.discard(rid)
        # every worker's load, not only the first one's (tensor parallelism)
        hold = rid in self._saving and rid not in self._loading
        self._saving.discard(rid)
        if hold:
            self._hold.add(rid)
            self._holding.add(rid)
        return hold, saved

    def _limit(self, request: "Request", name: str) -> Optional[int]:
        """A request's own limit in its kv_transfer_params (as vLLM's
        offloading connector reads them): max_load_tokens, the most tokens
        loaded past vLLM's own hit; max_offload_tokens, the most of its
        tokens saved. None: no limit, or a value that is no whole number of
        0 or more (a request body's: ignored, and said once)."""
        params = getattr(request, "kv_transfer_params", None)
        raw = params.get(name) if isinstance(params, dict) else None
        if raw is None:
            return None
        if type(raw) is int and raw >= 0:
            return raw
        if self._pool is not None:
            self._pool.warn("limit-" + name, "a request's kv_transfer_params \"%s\" is %.60r, "
                            "not a whole number of 0 or more: ignored", name, raw)
        return None

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        rid = request.request_id
        self._requests.setdefault(rid, request)
        self._release(rid)  # asked again (not scheduled last time): look again
        if self._pool is None:
            return 0, False
        hashes = request.block_hashes
        cap = self._limit(request, "max_load_tokens")
        if rid in self._no_load or not self._loads or cap == 0:
            # computed, and saved past what the pool holds
            if self._saves:
                self._saved[rid] = max(self._saved.get(rid, 0), self._pool_holds(hashes, 0))
            return 0, False
        # leave vLLM at least one token to compute; load at most the
        # request's own max_load_tokens past vLLM's hit
        n = min(len(hashes), (request.num_tokens - 1) // self._block)
        start = num_computed_tokens // self._block
        if cap is not None:
            n = min(n, (num_computed_tokens + cap) // self._block)
        # a decode engine's request whose prompt a prefill engine computed
        # and is saving (disaggregated prefill): its blocks are waited for
        wanted, pd_wait, handoff = self._pd_blocks(request, n)
        if n <= start:
            # vLLM has it all: what the pool holds too is not copied again
            if self._saves:
                self._saved[rid] = max(self._saved.get(rid, 0), self._pool_holds(hashes, 0))
            return 0, False
        with self._pool.lock:
            c = self._pool.client()
            if c is None:
                self._saved.setdefault(rid, 0)
                return 0, False
            keys = [bytes(h) for h in hashes[:n]]
            try:
                got = c.acquire(keys, sources=True if c.protocol >= SOURCES_SINCE else None)
                pages, sources = got.pages, got.sources
            except OSError as e:
                self._pool.failed("lookup", e)
                self._saved.setdefault(rid, 0)
                return 0, False
        hit = len(pages)
        # held from here on: were this hook to fail below, its fallback
        # (compute()) lets them go
        self._leases[rid] = _Lease(pages, keys[:hit], start, sources=sources)
        self._pool.count("lookups")
        self._pool.count("hit_blocks", hit)
        if wanted > max(hit, start) and len(self._pd_waits) >= self._pd_max:
            # as many wait already: this one takes what the pool holds
            self._pool.count("pd_busy")
            self._pool.warn("pd-busy", "%d requests wait for their prefill engines' blocks "
                            "(pd_max_waits): more are served with what the pool holds and "
                            "computed", self._pd_max)
            wanted = 0
        if wanted > max(hit, start):
            # the prefill engine's saves have not all come: the load off the
            # step waits for the rest in kvpoold (ACQUIRE WAIT), the request
            # in WAITING_FOR_REMOTE_KVS, the others go on
            self._pd_waits.add(rid)
            self._pool.count("pd_loads")
            self._pool.count("loads_off_step")
            self._saved[rid] = max(self._saved.get(rid, 0), wanted)
            self._leases[rid] = _Lease(pages, keys[:wanted], start, background=True,
                                       wait=pd_wait, handoff=handoff, sources=sources)
            return (wanted - start) * self._block, True
        # the block left to vLLM to compute may be in the pool too
        have = hit if hit < n or not self._saves else self._pool_holds(hashes, n)
        self._saved[rid] = max(self._saved.get(rid, 0), have)
        if hit <= start:  # nothing past vLLM's own hit: no lease to hold
            del self._leases[rid]
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
        self._leases[rid] = _Lease(pages, keys[:hit], start, background=background,
                                   sources=sources)
        return (hit - start) * self._block, background

    def hit_sources(self, request: "Request", tokens: int) -> Dict[str, int]:
        """get_external_cache_hit_sources(): the request's tokens to load
        from the pool, by vLLM's CacheHitSource of where kvpoold had each
        block when it was looked up (HIT_SOURCE); a block it did not say
        (one a P/D load waits for, saved by a prefill engine since) was
        in the pool: host."""
        lease = self._leases.get(request.request_id)
        if lease is None or lease.sources is None:
            # a lookup that did not ask (a kvpoold of 0.2.0): not known
            return {"external_unspecified": tokens}
        srcs = lease.sources
        i = lease.start
        out: Dict[str, int] = {}
        while tokens > 0:
            kind = HIT_SOURCE.get(srcs[i] if i < len(srcs) else "pool", "host")
            take = min(self._block, tokens)
            out[kind] = out.get(kind, 0) + take
            tokens -= take
            i += 1
        return out

    def _pd_blocks(self, request: "Request", n: int) -> Tuple[int, float, Optional[bytes]]:
        """How many of the request's first n blocks a prefill engine says
        it saved to this pool (its kv_transfer_params, which the router
        passed on from the prefill engine's response: request_finished()'s
        on that engine), and how long a load may wait for them: the lesser
        of pd_wait_seconds and what the handoff's ticket holds, and the
        handoff's last key (kvpoold ends the wait should its prefill engine
        abandon the handoff or die first). (0, 0, None):
        none; params that kvpool.vllm.pd refuses (malformed, or naming
        another namespace or other blocks: counted in pd_refused), or
        whose ticket kvpoold refuses (forged, another prompt's or
        daemon's, expired: pd_tickets_refused): such a request is computed
        here at once, and each kind of refusal is said once. Judged once a
        request (one CHECK), its answer kept until it finishes."""
        rid = request.request_id
        known = self._pd_known.get(rid)
        if known is None:
            known = self._pd_known[rid] = self._pd_judge(request)
        return min(known[0], n), known[1], known[2]

    def _pd_judge(self, request: "Request") -> Tuple[int, float, Optional[bytes]]:
        """_pd_blocks() of a request not judged yet: its handoff's blocks
        (all of them), its wait, its last key."""
        try:
            pd = decode_params(getattr(request, "kv_transfer_params", None),
                               self._ident.namespace, request.block_hashes, self._block)
        except BadParams as e:
            self._pool.count("pd_refused")
            self._pool.warn(e.cond, "%s: such requests are computed here", e)
            return 0, 0.0, None
        if pd is None:
            return 0, 0.0, None
        # only a ticket kvpoold issued to a writer of this namespace makes
        # the request wait: a request body cannot
        with self._pool.lock:
            c = self._pool.client()
            if c is None:
                return 0, 0.0, None
            try:
                left, _ = c.handoff_check(pd.ticket, pd.last_key)
            except kvpool.Stale as e:
                self._pool.count("pd_tickets_refused")
                self._pool.warn("pd-ticket-refused", "a request's handoff ticket was "
                                "refused (%s): such requests are computed here", e)
                return 0, 0.0, None
            except OSError as e:
                self._pool.failed("handoff", e)
                return 0, 0.0, None
        # the prefill engine's last block is this request's (checked where
        # it is), even when this engine loads one block less (a prompt of
        # whole blocks: vLLM computes at least its last token)
        return pd.blocks, min(self._pd_wait, left), pd.last_key

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
                              hold=set(self._hold))
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
            # resumed, its blocks are sent again from the first, and no
            # request waits for them to be in flight
            self._saved.pop(rid, None)
            # (a scan of the saves in flight, a preemption's: rare)
            for job in [j for j, f in self._flight.items() if f[2] == rid]:
                self._landed(job)
        sent = []
        for rid, lease in self._leases.items():
            ids = lease.block_ids
            if lease.sent or ids is None:
                continue
            keys = lease.keys[lease.start:lease.start + len(ids)]
            parent = lease.keys[lease.start - 1] if lease.start else None
            meta.loads.append(Transfer(rid, keys, parent, ids, background=lease.background,
                                       groups=lease.groups, wait=lease.wait,
                                       fail=lease.fail, handoff_key=lease.handoff))
            sent.append(lease)
        # what the workers are told is theirs now (were this hook to fail
        # before here, its fallback would send it)
        self._hold = set()
        for lease in sent:
            lease.sent = True
        self._loading |= {t.req_id for t in meta.loads if t.background}
        if self._pool is None or not self._saves:
            return meta
        mgr = self._conn._kv_cache_manager
        cached = scheduler_output.scheduled_cached_reqs
        scheduled = [(r.req_id, r.num_computed_tokens) for r in
                     scheduler_output.scheduled_new_reqs]
        scheduled += list(zip(cached.req_ids, cached.num_computed_tokens))
        for rid, computed in scheduled:
            req = self._requests.get(rid)
            if req is None or mgr is None:
                continue
            try:
                self._save_of(meta, mgr, rid, req,
                              computed + scheduler_output.num_scheduled_tokens.get(rid, 0))
            except Exception as e:  # noqa: BLE001 - its saves skipped, the others go on
                self._pool.count("hook_errors")
                self._pool.warn("save-meta", "the saves of a request could not be made "
                                "ready (%s: %s): skipped", type(e).__name__, str(e)[:200])
        return meta

    def _save_of(self, meta: KVPoolMetadata, mgr: Any, rid: str, req: "Request",
                 done: int) -> None:
        """The save of request rid's full blocks past those the pool holds
        or was sent, into meta, after its done tokens; nothing changes
        before the save is made (a hybrid model's pins are the last step)."""
        full = min(done // self._block, len(req.block_hashes))
        cap = self._limit(req, "max_offload_tokens")
        if cap is not None:
            full = min(full, cap // self._block)
        first = self._saved.get(rid, 0)
        if full <= first:
            return
        # the leading blocks another request's save in flight carries are
        # not queued twice (requests of one prefix, computed at once or
        # served from vLLM's own cache while the first save runs); its
        # workers save them first, so that the rest chains on them. Should
        # that save not reach the pool (a full queue or pool, a failure),
        # the next request of the prefix finds the pool's chain ending
        # there and saves from there on. A prefill engine's handoff saves
        # its own: a decode engine waits for them, and their failure ends
        # its wait
        handoff = wants_decode(getattr(req, "kv_transfer_params", None))
        skip = first
        while not handoff and skip < full and self._in_flight(bytes(req.block_hashes[skip])):
            skip += 1
        if skip > first:
            self._pool.count("save_coalesced", skip - first)
            self._saved[rid] = first = skip
            if full <= first:
                return
        if self._hybrid:
            rows = [blks[first:full] for blks in mgr.get_blocks(rid).blocks]
            if any(len(r) < full - first for r in rows):
                return
            t = self._pinned_save(rid, req, first, full, rows)
        else:
            ids = mgr.get_block_ids(rid)[0]
            if len(ids) < full:
                return
            t = self._transfer(rid, req, first, full, list(ids[first:full]))
        self._saved[rid] = full
        if t is not None:
            if not t.job:
                self._jobs += 1
                t.job = self._jobs
            self._fly(t)
            meta.saves.append(t)
            self._saving.add(rid)

    def _in_flight(self, key: bytes) -> bool:
        """Whether a save in flight carries key."""
        job = self._flying.get(key)
        if job is None:
            return False
        sent = self._flight.get(job)
        if sent is not None and time.monotonic() - sent[1] < FLIGHT_MAX_S:
            return True
        self._landed(job)  # the workers never answered it
        return False

    def _fly(self, t: Transfer) -> None:
        """Save t is in flight from now on. Every FLIGHT_SWEEP jobs, those
        that outlived FLIGHT_MAX_S (some worker never answered) go, with
        their acknowledgements."""
        now = time.monotonic()
        self._flight[t.job] = (t.keys, now, t.req_id)
        for k in t.keys:
            self._flying[k] = t.job
        if t.job % FLIGHT_SWEEP == 0:
            for job in [j for j, f in self._flight.items() if now - f[1] >= FLIGHT_MAX_S]:
                self._landed(job)
            for job in [j for j in self._acks if j not in self._flight and j not in self._pins]:
                del self._acks[job]

    def _landed(self, job: int) -> None:
        """Save job ended on every worker (or was given up on)."""
        sent = self._flight.pop(job, None)
        if sent is None:
            return
        for k in sent[0]:
            if self._flying.get(k) == job:
                del self._flying[k]

    def _transfer(self, rid: str, req: "Request", first: int, full: int,
                  ids: List[int]) -> Transfer:
        keys = [bytes(h) for h in req.block_hashes[first:full]]
        parent = bytes(req.block_hashes[first - 1]) if first else None
        tokens = list(req.all_token_ids[first * self._block:full * self._block])
        return Transfer(rid, keys, parent, ids, tokens,
                        handoff=wants_decode(getattr(req, "kv_transfer_params", None)))

    def _pinned_save(self, rid: str, req: "Request", first: int, full: int,
                     rows: list) -> Optional[Transfer]:
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
        t = self._transfer(rid, req, first, full, [b.block_id for b in rows[0]])
        t.groups = [[b.block_id for b in r] for r in rows]
        pinned = [b for r in rows for b in r]
        self._conn._kv_cache_manager.block_pool.touch(pinned)
        self._jobs += 1
        self._pins[self._jobs] = pinned
        t.job = self._jobs
        return t

    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        wm = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(wm, KVPoolWorkerMetadata):
            for rid in wm.loaded:  # one worker's copy is done: the pages are leased there
                self._release(rid)
            for job, n in wm.ended.items():  # once every worker's save ended: in the
                # pool or given up, and its pinned blocks (a hybrid model's) free
                self._acks[job] = self._acks.get(job, 0) + n
                if self._acks[job] >= self._workers:
                    del self._acks[job]
                    self._landed(job)
                    pinned = self._pins.pop(job, None)
                    if pinned is not None:  # the last block evicted first, as vLLM frees
                        self._conn._kv_cache_manager.block_pool.free_blocks(reversed(pinned))
            self._no_load |= wm.failed
            if wm.load_blocks:
                per = wm.load_seconds / wm.load_blocks
                self._block_s = per if self._block_s is None else 0.7 * self._block_s + 0.3 * per
        self.end_transfers(connector_output)

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
        # the answer first: finish() is what the hook falls back to
        params = self._pd_params(request, self._saved.get(request.request_id))
        hold, _ = self.finish(request)
        return hold, params

    def _pd_params(self, request: "Request", saved: Optional[int]) -> Optional[Dict[str, Any]]:
        """A prefill engine's answer to a request with do_remote_decode
        (disaggregated prefill, as vLLM's routers send it): the
        kv_transfer_params that let a decode engine on this pool find the
        prompt's blocks, which are saved or being saved (their saves were
        sent before the request finished). None for any other request."""
        if not wants_decode(getattr(request, "kv_transfer_params", None)) or \
                self._pool is None or not self._saves:
            return None
        hashes = request.block_hashes
        blocks = min(len(hashes), request.num_prompt_tokens // self._block, saved or 0)
        if blocks <= 0:
            return None
        last = bytes(hashes[blocks - 1])
        ttl = min(600.0, max(TICKET_MIN_S, TICKET_WAITS * self._pd_wait))
        with self._pool.lock:
            c = self._pool.client()
            if c is None:
                return None  # no handoff without the pool: the decode engine computes
            try:
                ticket = c.handoff_issue(last, blocks, ttl)
            except OSError as e:
                self._pool.failed("handoff", e)
                return None
        self._pool.count("pd_prefills")
        return prefill_params(self._ident.namespace, blocks, self._block, last, ticket)

    def request_finished_all_groups(self, request: "Request", block_ids: Tuple[List[int], ...]
                                    ) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """request_finished() of a hybrid model: vLLM keeps every group's
        blocks, or none."""
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.close()
