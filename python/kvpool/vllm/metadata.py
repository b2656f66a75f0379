# SPDX-License-Identifier: MIT
"""What the connector's two sides tell each other every step: the
scheduler's KVPoolMetadata (the loads and saves of the step, the requests
finished, preempted or held) to the workers, and the workers'
KVPoolWorkerMetadata (loads done, saves ended, failures, the loads'
measured cost) back, summed over the workers by vLLM."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)

__all__ = ["Transfer", "KVPoolMetadata", "KVPoolWorkerMetadata"]


@dataclass
class Transfer:
    req_id: str
    keys: List[bytes]  # one per block
    parent: Optional[bytes]  # the key of the block before keys[0], None at the root
    block_ids: List[int]  # the vLLM blocks, one per key (the first KV cache group's)
    tokens: Optional[List[int]] = None  # saves: the blocks' token ids (KV events)
    background: bool = False  # loads: off the step, the request waits for it
    # more than one KV cache group: each group's blocks, one per key (-1: a
    # load's block before a sliding window, which vLLM does not keep)
    groups: Optional[List[List[int]]] = None
    # saves: its number, which the workers report when it ended (the
    # scheduler's saves in flight, a hybrid model's pinned blocks)
    job: int = 0
    # loads: seconds to wait for keys not in the pool yet (a prefill
    # engine is saving them: disaggregated prefill); 0: none
    wait: float = 0.0
    # loads: the scheduler's own bookkeeping of it failed (a hook's
    # fallback): the workers copy nothing and report its blocks failed,
    # so that vLLM computes them
    fail: bool = False
    # saves: its request is a disaggregated prefill's (do_remote_decode): a
    # decode engine may wait for its blocks, so what does not reach the
    # pool is abandoned in kvpoold (HANDOFF ABANDON), and the wait ends
    handoff: bool = False
    # loads that wait: the last key of the handoff they wait for (its
    # ticket's): kvpoold ends the wait when the prefill engine abandons
    # the handoff or hangs up before saving it
    handoff_key: Optional[bytes] = None


@dataclass
class KVPoolMetadata(KVConnectorMetadata):
    """One step's work for the workers: blocks to load (before the forward,
    or off the step for the requests that wait for them) and to save after
    it; the requests vLLM finished, those it preempted (their blocks are
    freed now), and those whose blocks it keeps until their saves end."""
    loads: List[Transfer] = field(default_factory=list)
    saves: List[Transfer] = field(default_factory=list)
    finished: Set[str] = field(default_factory=set)
    preempted: Set[str] = field(default_factory=set)
    hold: Set[str] = field(default_factory=set)
    empty: bool = False  # the step computes nothing: its end may wait for loads


@dataclass
class KVPoolWorkerMetadata(KVConnectorWorkerMetadata):
    """What the workers report to the scheduler after a step: the requests
    whose loads are done (the scheduler's leases can go), and the saves
    that ended (how many workers say so)."""
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

