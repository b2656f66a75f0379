# SPDX-License-Identifier: MIT
"""bench/connectors.py - the vLLM connector's side of bench/run-connectors.sh:
kvpool.vllm.KVPoolConnector's worker and scheduler paths with vLLM 0.33's
own config, KV cache allocation and request block hashes, on the CPU.

    connectors.py SOCKET MODEL_DIR RUNS

Geometry of Llama-3.1-8B (32 layers, 8 KV heads, head size 128, bf16,
16-token blocks: 2 MiB a block). Each run, in turn:
  ref   a plain torch copy (Tensor.copy_, torch's threads) of 256 blocks' bytes
  load  start_load_kv() of 256 blocks: ACQUIRE, the copy into vLLM's blocks, release
  save  wait_for_save() of 256 new blocks: alloc, the copy, PUBLISH, release
(with async_save and async_load_blocks off: the copies in the step), then the
same with the connector's defaults, the copies on its thread:
  load-step, load-off  start_load_kv() of a background load: the time in the
                       step, and until get_finished() reports it done
  save-step, save-off  wait_for_save(): the time in the step, and until
                       get_finished() reports the request's saves done
and then LOOKUPS x get_num_new_matched_tokens() for a 4,096-token prompt
whose blocks are all in the pool, after a tenth as many untimed (its
release by request_finished() not timed). Prints "conn mode=MODE ns=NS" lines (one per run; lookup: one per
call) for the shell to take medians of.
"""
import json
import os
import sys
import time

import torch

from vllm import SamplingParams
from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                         SchedulerConfig, VllmConfig)
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.attention.backends.utils import _layout_from_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec,
                                        KVCacheTensor)
from vllm.v1.request import Request
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.worker.utils import allocate_kv_cache

from kvpool.vllm import KVPoolConnector, KVPoolMetadata
from kvpool.vllm.metadata import Transfer

LAYERS, KV_HEADS, HEAD, BLOCK, N = 32, 8, 128, 16, 256
NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]
LOOKUPS = 200


def model_dir(path):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": 4096, "intermediate_size": 14336,
                   "num_attention_heads": 32, "num_key_value_heads": KV_HEADS,
                   "num_hidden_layers": LAYERS, "head_dim": HEAD, "vocab_size": 128256,
                   "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
                   "torch_dtype": "bfloat16"}, f)
    return path


def request(rid, tokens, hash_fn):
    sp = SamplingParams(max_tokens=1)
    sp.update_from_generation_config({}, 2)
    return Request(request_id=rid, prompt_token_ids=tokens, sampling_params=sp,
                   pooling_params=None, mm_features=None,
                   block_hasher=get_request_block_hasher(BLOCK, hash_fn))


def main():
    sock, path, runs = sys.argv[1], model_dir(sys.argv[2]), int(sys.argv[3])
    mc = ModelConfig(model=path, dtype="bfloat16", seed=0, skip_tokenizer_init=True)
    cc = CacheConfig(block_size=BLOCK, cache_dtype="auto", enable_prefix_caching=True)
    cc.kv_cache_layout = "LBNHC"
    kt = KVTransferConfig(kv_connector="KVPoolConnector", kv_connector_module_path="kvpool.vllm",
                          kv_role="kv_both", kv_load_failure_policy="recompute",
                          kv_connector_extra_config={"socket": sock, "model": "bench/llama-8b",
                                                     "async_save": False, "async_load_blocks": 0})
    vc = VllmConfig(model_config=mc, cache_config=cc, kv_transfer_config=kt,
                    scheduler_config=SchedulerConfig(max_model_len=8192,
                                                     is_encoder_decoder=False),
                    device_config=DeviceConfig("cpu"))
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                             dtype=torch.bfloat16)
    nb = N + 8
    page = spec.page_size_bytes
    kvc = KVCacheConfig(num_blocks=nb, kv_cache_groups=[KVCacheGroupSpec(NAMES, spec)],
                        kv_cache_tensors=[KVCacheTensor(size=page * nb * LAYERS, layers=NAMES,
                                                        layer_stride=page * nb,
                                                        block_stride=page)])
    kv = allocate_kv_cache(kvc, torch.device("cpu"), _layout_from_name("LBNHC"))
    for t in kv.values():
        t.view(torch.int16).random_()
    worker = KVPoolConnector(vc, KVConnectorRole.WORKER, kvc)
    worker.register_kv_caches(kv)
    # the connector's defaults: loads and saves on its thread, off the step
    kt.kv_connector_extra_config = {"socket": sock, "model": "bench/llama-8b"}
    off = KVPoolConnector(vc, KVConnectorRole.WORKER, kvc)
    off.register_kv_caches(kv)
    sched = KVPoolConnector(vc, KVConnectorRole.SCHEDULER, kvc)
    hash_fn = get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    ids = list(range(4, 4 + N))
    nbytes = N * LAYERS * page
    src = torch.empty(nbytes, dtype=torch.uint8).random_()
    dst = torch.empty_like(src)

    salt = os.getpid()  # keys no earlier run stored

    def keys_of(run):
        toks = [(salt * 104729 + run * 7919 + i * 31) % 128000 + 1
                for i in range(N * BLOCK + 1)]
        return request("r%d" % run, toks, hash_fn)

    def timed(fn):
        t0 = time.perf_counter_ns()
        fn()
        return time.perf_counter_ns() - t0

    def save(req):
        keys = [bytes(h) for h in req.block_hashes[:N]]
        worker.bind_connector_metadata(KVPoolMetadata(saves=[Transfer(req.request_id, keys,
                                                                       None, ids)]))
        ns = timed(worker.wait_for_save)
        worker.clear_connector_metadata()
        return ns

    def load(req):
        keys = [bytes(h) for h in req.block_hashes[:N]]
        worker.bind_connector_metadata(KVPoolMetadata(loads=[Transfer(req.request_id, keys,
                                                                       None, ids)]))
        ns = timed(lambda: worker.start_load_kv(None))
        worker.clear_connector_metadata()
        assert not worker.get_block_ids_with_load_errors()
        return ns

    def off_step(meta, submit):
        """(ns in the step, ns until get_finished() reported it)"""
        off.bind_connector_metadata(meta)
        t0 = time.perf_counter_ns()
        submit()
        step = time.perf_counter_ns() - t0
        while True:
            sending, recving = off.get_finished(set())
            if sending or recving:
                break
            time.sleep(0.0002)
        total = time.perf_counter_ns() - t0
        assert not off.get_block_ids_with_load_errors()
        off.clear_connector_metadata()
        return step, total

    def save_off(req):
        keys = [bytes(h) for h in req.block_hashes[:N]]
        step, total = off_step(KVPoolMetadata(saves=[Transfer(req.request_id, keys, None, ids)],
                                              hold={req.request_id}), off.wait_for_save)
        off.bind_connector_metadata(KVPoolMetadata(finished={req.request_id}))
        off.wait_for_save()  # vLLM's next step: the request is finished
        off.clear_connector_metadata()
        return step, total

    def load_off(req):
        keys = [bytes(h) for h in req.block_hashes[:N]]
        return off_step(KVPoolMetadata(loads=[Transfer(req.request_id, keys, None, ids,
                                                        background=True)]),
                        lambda: off.start_load_kv(None))

    stored = keys_of(0)
    save(stored)
    for run in range(1, runs + 1):
        print("conn mode=ref ns=%d" % timed(lambda: dst.copy_(src)))
        print("conn mode=load ns=%d" % load(stored))
        print("conn mode=save ns=%d" % save(keys_of(run)))
        step, total = load_off(stored)
        print("conn mode=load-step ns=%d\nconn mode=load-off ns=%d" % (step, total))
        step, total = save_off(keys_of(runs + run))
        print("conn mode=save-step ns=%d\nconn mode=save-off ns=%d" % (step, total))
        sys.stdout.flush()
    s = worker.stats()
    assert s.get("loaded_blocks") == N * runs and s.get("saved_blocks") == N * (runs + 1), s
    s = off.stats()
    assert s.get("loaded_blocks") == N * runs and s.get("saved_blocks") == N * runs, s
    prompt = request("lookup", list(stored.prompt_token_ids[:4096]), hash_fn)
    for i in range(-(LOOKUPS // 10), LOOKUPS):  # a tenth untimed first
        t0 = time.perf_counter_ns()
        tokens, _ = sched.get_num_new_matched_tokens(prompt, 0)
        ns = time.perf_counter_ns() - t0
        assert tokens == (4096 - 1) // BLOCK * BLOCK, tokens
        sched.request_finished(prompt, [])
        if i >= 0:
            print("conn mode=lookup ns=%d" % ns)
    print("conn threads=%d bytes=%d torch=%s vllm=%s" % (torch.get_num_threads(), nbytes,
                                                         torch.__version__,
                                                         __import__("vllm").__version__))


if __name__ == "__main__":
    main()
