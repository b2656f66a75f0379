# SPDX-License-Identifier: MIT
"""kvpool as vLLM's KV connector: one kvpoold is the shared KV tier of every
vLLM instance on the machine (docs/vllm.md).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KVPoolConnector",
        "kv_connector_module_path": "kvpool.vllm", "kv_role": "kv_both"}'

Keys are vLLM's own block hashes (request.block_hashes), whatever
--prefix-caching-hash-algo is. The scheduler side leases the pages of a
request's longest cached prefix with one ACQUIRE and holds them until the
workers have copied them (they report it in their per-step metadata) or the
request ends. The worker side copies pool pages into the allocated vLLM
blocks and full computed blocks into fresh pool pages, published under
their hashes (a block some other instance published first is dropped, not
stored twice), both off the engine's step where vLLM allows it:

- A load longer than the step can absorb (_off_step(): its predicted time
  from the workers' measured seconds per block against a tenth of the
  engine's recent step, or 50 ms in an engine with no other request; or
  async_load_blocks blocks or more when set) runs on the worker's thread:
  the request waits in vLLM's WAITING_FOR_REMOTE_KVS, the other requests
  go on, and get_finished() lets it run once its blocks are in (a step
  with nothing else to compute waits for it). A shorter load is copied
  before the forward, in the step. A load or save is one C call (lease,
  copy, release) that lets the GIL go once.
- New full blocks are handed to the same thread after the forward (at most
  save_queue_blocks wait; past that they are skipped and counted, never
  waited for). vLLM keeps a finished request's blocks until its saves have
  read them (request_finished() returns True, get_finished() reports it),
  and a preempted request's saves have ended, or were dropped if they had
  not started, before vLLM reuses its blocks (handle_preemptions()).

A model with sliding-window and full-attention layers keeps vLLM's
hybrid allocator (SupportsHMA): a page holds a block of every layer,
whichever KV cache group vLLM put it in; its loads all run off the step;
the blocks of each save are pinned in vLLM's block pool until every
worker's save of them ended (vLLM frees a sliding window's blocks behind
it at its next step).

The counters (stats()) reach vLLM's own metrics: the "KV Transfer metrics"
log line and vllm:kvpool_*_total on `vllm serve`'s /metrics.

kv_connector_extra_config's keys are settings.SETTINGS (docs/vllm.md
lists them): an unknown key, a wrong type or a value out of range stops
the engine at start, naming the key.

The namespace's identity (the geometry's model string) is vLLM, the model,
the KV dtype, the hash algorithm, the block size and the tensor-parallel
rank ("mla" for an MLA model, whose latent every rank holds whole, as
vLLM's KV cache spec says):
instances that differ in any of them never share pages. A full pool,
a dead daemon or a refused identity never stops the engine: lookups miss,
saves are skipped and counted, and each condition is logged once.

One module a job:

    connector.py  KVPoolConnector: the settings, the identity, the Pool;
                  hands each of vLLM's calls to its side
    scheduler.py  the scheduler side: lookups, leases, what to save
    worker.py     the worker side: loads and saves, in the step or off it
    metadata.py   what the two sides tell each other every step
    copier.py     block copies between pool pages and vLLM's KV tensors
    mover.py      the threads that run transfers off the step
    identity.py   the namespace, geometry and key scheme of an instance
    settings.py   kv_connector_extra_config's keys, checked at start
    stats.py      the counters and histograms in vLLM's metrics
    __main__.py   `python -m kvpool.vllm check-config`: a config checked
                  without an engine

The names below are imported when first used (vLLM's factory asks this
module for KVPoolConnector): `python -m kvpool.vllm check-config` needs
neither vLLM nor torch, and answers in a fraction of a second.
"""
import importlib
from typing import Any

__all__ = ["KVPoolConnector", "KVPoolMetadata", "KVPoolWorkerMetadata", "Identity",
           "identity_of", "key_seed_of"]
_WHERE = {"KVPoolConnector": "connector", "KVPoolMetadata": "metadata",
          "KVPoolWorkerMetadata": "metadata", "Identity": "identity",
          "identity_of": "identity", "key_seed_of": "identity"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError("module 'kvpool.vllm' has no attribute %r" % name)
    value = getattr(importlib.import_module("kvpool.vllm." + _WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(list(globals()) + __all__)
