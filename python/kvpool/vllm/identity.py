# SPDX-License-Identifier: MIT
"""What a vLLM instance's blocks are, to kvpool: the namespace, the page
geometry, the key scheme and the key seed vLLM's config and KV cache spec
ask for (identity_of()), or Unsupported saying why. Instances that differ
in anything that changes a block's bytes or its key never share pages."""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Tuple

import kvpool
from kvpool.vllm.copier import DTYPES, Unsupported

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

__all__ = ["Identity", "identity_of", "key_seed_of", "seed_hint", "extra_of"]


@dataclass(frozen=True)
class Identity:
    """What a namespace holds, derived from vLLM's config and KV cache spec."""
    namespace: str
    geometry: kvpool.Geometry
    scheme: kvpool.Scheme
    seed: str
    layer_names: Tuple[str, ...]  # in the page's layer order
    algo: str
    # each KV cache group's layers (vLLM's hybrid allocator: a group of its
    # own per attention kind), as places in the page, in the group's order
    groups: Tuple[Tuple[int, ...], ...] = ()
    group_names: Tuple[Tuple[str, ...], ...] = ()


_ATTENTION = {"FullAttentionSpec": False, "MLAAttentionSpec": True,
              "SlidingWindowSpec": False, "SlidingWindowMLASpec": True}


def _layer_index(name: str) -> int:
    m = re.findall(r"\.(\d+)\.", "." + name + ".")
    return int(m[0]) if m else -1


def _cell_of(spec) -> Tuple[bool, int, int]:
    """A KV cache spec's (MLA, K's head size, V's: kvpool.K_ONLY for MLA),
    or Unsupported when its blocks are not attention K/V kvpool pages hold."""
    kind = type(spec).__name__
    if kind not in _ATTENTION:
        raise Unsupported("KV cache spec %s is not attention K/V (full or sliding-window "
                          "attention, or MLA's latent K): kvpool pages hold those alone"
                          % kind)
    mla = _ATTENTION[kind]
    head_v = kvpool.K_ONLY if mla else getattr(spec, "head_size_v", None) or spec.head_size
    return mla, spec.head_size, head_v


def identity_of(vllm_config: "VllmConfig", kv_cache_config: "KVCacheConfig",
                tp_rank: int = 0) -> Identity:
    """The namespace, geometry and key scheme vLLM's config asks for, or
    Unsupported saying why. A page holds a block of every layer, in layer
    order, whatever group vLLM's hybrid allocator puts the layer in: the
    same page with the allocator on or off."""
    extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
    groups = kv_cache_config.kv_cache_groups
    spec = groups[0].kv_cache_spec
    mla, head_k, head_v = _cell_of(spec)
    for g in groups[1:]:
        other = g.kv_cache_spec
        if _cell_of(other) != (mla, head_k, head_v) or \
                (other.block_size, other.num_kv_heads, other.dtype) != \
                (spec.block_size, spec.num_kv_heads, spec.dtype):
            raise Unsupported("the model's KV cache groups differ in their blocks (%s: %d "
                              "tokens of %d heads x %d of %s; %s: %d tokens of %d heads x "
                              "%d of %s); a kvpool page holds blocks of one shape"
                              % (type(spec).__name__, spec.block_size, spec.num_kv_heads,
                                 spec.head_size, spec.dtype, type(other).__name__,
                                 other.block_size, other.num_kv_heads, other.head_size,
                                 other.dtype))
    if spec.dtype not in DTYPES:
        raise Unsupported("KV dtype %s has no kvpool dtype" % spec.dtype)
    cell = head_k + (0 if mla else head_v)
    dense = spec.block_size * spec.num_kv_heads * cell * kvpool.DType(DTYPES[spec.dtype]).size
    for g in groups:
        if g.kv_cache_spec.page_size_bytes != dense:
            raise Unsupported("a KV block of this model is %d bytes, not the %d of %d "
                              "tokens x %d heads x %d elements of %s (a padded or quantized "
                              "layout, e.g. --kv-cache-dtype %s)"
                              % (g.kv_cache_spec.page_size_bytes, dense, spec.block_size,
                                 spec.num_kv_heads, cell, spec.dtype,
                                 getattr(g.kv_cache_spec, "cache_dtype_str", None)))
    algo = vllm_config.cache_config.prefix_caching_hash_algo
    try:
        scheme = kvpool.scheme_of_vllm(algo)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    if algo.startswith("xxhash") and os.environ.get("PYTHONHASHSEED") is None:
        raise Unsupported("--prefix-caching-hash-algo %s without PYTHONHASHSEED draws a "
                          "random root hash in every process, so no other instance can "
                          "ever share its blocks: set PYTHONHASHSEED to one value on "
                          "every instance" % algo)
    order = lambda n: (_layer_index(n), n)  # noqa: E731
    names = tuple(sorted((n for g in groups for n in g.layer_names), key=order))
    if len(set(names)) != len(names):
        raise Unsupported("a layer is in more than one KV cache group")
    place = {n: i for i, n in enumerate(names)}
    model = str(extra.get("model") or vllm_config.model_config.model)
    tp = vllm_config.parallel_config.tensor_parallel_size
    pp = getattr(vllm_config.parallel_config, "pipeline_parallel_size", 1)
    if pp > 1:
        raise Unsupported("pipeline parallelism (%d stages): each stage holds other layers, "
                          "and kvpool's namespaces are per tensor-parallel rank (or "
                          "shared by the ranks) only" % pp)
    for kind in ("prefill", "decode"):
        cp = getattr(vllm_config.parallel_config, kind + "_context_parallel_size", 1) or 1
        if cp > 1:
            raise Unsupported("%s context parallelism (%d ranks): each rank holds a share of "
                              "a block's tokens, and kvpool's namespaces are per tensor-"
                              "parallel rank (or shared by the ranks) only" % (kind, cp))
    dtype = DTYPES[spec.dtype]
    # MLA's latent is whole on every tensor-parallel rank (vLLM replicates
    # it and says so: max_tp_shards 1), whatever the number of ranks: they
    # all share one namespace, where what one rank saves the others find
    # (their saves of the same blocks are deduplicated); other attention
    # splits its heads across the ranks, so each rank has a namespace of
    # its own, as has a cache vLLM does not declare whole on every rank
    whole = mla and all(getattr(g.kv_cache_spec, "max_tp_shards", None) == 1 for g in groups)
    split = "mla" if whole else "tp%d/%d" % (tp_rank, tp)
    ident = "vllm %s %s %s b%d %s" % (model, str(spec.dtype).replace("torch.", ""),
                                        algo, spec.block_size, split)
    if len(ident) > 127:
        ident = "vllm sha256:%s" % hashlib.sha256(ident.encode()).hexdigest()[:40]
    ns = extra.get("namespace")
    if ns is None:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(model.rstrip("/")))[:40]
        ns = "vllm.%s.%s" % (base, hashlib.sha256(ident.encode()).hexdigest()[:12])
    elif tp > 1 and not whole:
        ns = "%s.tp%d" % (ns, tp_rank)
    g = kvpool.Geometry(layers=len(names), kv_heads=spec.num_kv_heads,
                        head_dim=head_k, block_tokens=spec.block_size,
                        dtype=dtype, model=ident,
                        head_dim_v=0 if head_v == head_k else head_v)
    members = tuple(tuple(sorted(grp.layer_names, key=order)) for grp in groups)
    return Identity(ns, g, scheme, key_seed_of(algo), names, algo,
                    tuple(tuple(place[n] for n in m) for m in members), members)


def key_seed_of(algo: str) -> str:
    """The seed vLLM derives its root block hash (NONE_HASH) from, for
    hash algorithm algo, in this process: the one init_none_hash() took if
    it ran here, else the one it will take, from the same inputs by the same
    function (PYTHONHASHSEED when set, else vLLM's fixed default for the
    SHA-256 algorithms). vLLM builds the scheduler, and so this connector,
    before its engine core calls init_none_hash(), and its workers never
    call it: get_none_hash_seed() alone would name the default seed there
    whatever PYTHONHASHSEED says. An xxhash algorithm without PYTHONHASHSEED
    (a random seed per process) is refused before this is asked."""
    from vllm.v1.core import kv_cache_utils as kcu
    resolved = getattr(kcu, "_NONE_HASH_SEED", None)
    if resolved is not None:
        return str(resolved)
    resolve = getattr(kcu, "resolve_none_hash_seed", None)
    if resolve is not None:
        from vllm.utils.hashing import get_hash_fn_by_name
        return str(resolve(get_hash_fn_by_name(algo)))
    seed = os.environ.get("PYTHONHASHSEED")
    return seed if seed is not None else getattr(kcu, "DEFAULT_NONE_HASH_SEED",
                                                 "vllm-none-hash")


def seed_hint(seed: str) -> str:
    """What to change when kvpoold refuses this instance's key seed."""
    env = os.environ.get("PYTHONHASHSEED")
    if env is not None:
        return ("this instance derives its block hashes from PYTHONHASHSEED=%s: run "
                "kvpoold with --key-seed %s, or give every instance kvpoold's seed"
                % (env, env))
    return ("PYTHONHASHSEED is unset, so this instance derives its block hashes from "
            "vLLM's default seed '%s': set PYTHONHASHSEED to kvpoold's --key-seed" % seed)


def extra_of(vllm_config: "VllmConfig") -> Dict[str, Any]:
    return dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})

