# SPDX-License-Identifier: MIT
"""One SGLang side for the HiCache backend tests, in its own process: SGLang's
own host KV pool (MHATokenToKVPoolHost over an MHATokenToKVPool, on the
CPU) and kvpool.sglang.KVPoolStorage made by SGLang's StorageBackendFactory
from a "dynamic" backend config, as --hicache-storage-backend dynamic does.

usage: sglang_side.py SOCKET STEP...   STEP: LAYOUT:OP:SEED:NPAGES, OP one of
set, get, set_generic, get_generic; each step has a host pool of its own.
Prints one JSON line: a list of what the backend answered at each step."""
import json
import sys

import torch

from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.storage import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_hash_str

LAYERS, HEADS, DIM, PAGE = 3, 2, 32, 16


def host_pool(layout):
    dev = MHATokenToKVPool(4096, PAGE, torch.bfloat16, HEADS, DIM, LAYERS, "cpu", False,
                           start_layer=0, end_layer=LAYERS)
    return MHATokenToKVPoolHost(dev.get_device_pool_infos()[0].buffer_info, 2, 0, PAGE, layout,
                                pin_memory=False, device_capacity_tokens=dev.size,
                                start_layer=dev.start_layer, end_layer=dev.end_layer,
                                write_back_staging=dev.hicache_write_back_staging)


def page_values(seed, i):
    """Page i's K/V as (layers, 2, heads, page, dim): what both sides expect."""
    g = torch.Generator().manual_seed(seed * 1000 + i)
    return torch.randn(LAYERS, 2, HEADS, PAGE, DIM, generator=g).to(torch.bfloat16)


def logical(host, idx):
    """The host pool's page starting at token index idx, as (layers, 2, heads,
    page, dim), read through SGLang's own get_data_page()."""
    d = host.get_data_page(idx, flat=False)
    if host.layout == "layer_first":  # (2, layers, page, heads, dim)
        return d.permute(1, 0, 3, 2, 4)
    if host.layout == "page_first":  # (2, page, layers, heads, dim)
        return d.permute(2, 0, 3, 1, 4)
    if host.layout == "page_first_direct":  # (2, 1, layers, page, heads, dim)
        return d[:, 0].permute(1, 0, 3, 2, 4)
    return d[:, 0].permute(3, 0, 1, 2, 4)  # page_head: (2, 1, heads, page, layers, dim)


def step(sock, layout, op, seed, n):
    host = host_pool(layout)
    cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                               attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                               is_page_first_layout=layout != "layer_first",
                               model_name="test/tiny-llama",
                               extra_config={"backend_name": "kvpool",
                                             "module_path": "kvpool.sglang",
                                             "class_name": "KVPoolStorage", "interface_v1": 1,
                                             "socket": sock, "retry_seconds": 0.1})
    st = StorageBackendFactory.create_backend("dynamic", cfg, host)
    st.register_mem_pool_host(host)
    tokens = [(seed * 31 + i * 7) % 30000 for i in range(n * PAGE)]
    keys = get_hash_str(tokens, None, page_size=PAGE)
    idx = host.alloc(n * PAGE)
    pages = [int(idx[i * PAGE]) for i in range(n)]
    out = {"keys": len(keys), "exists": st.batch_exists(keys)}
    if op == "set":
        for i, p in enumerate(pages):
            logical(host, p).copy_(page_values(seed, i))
        out["set"] = st.batch_set_v1(keys, idx)
    elif op == "set_generic":
        vals = []
        for i, p in enumerate(pages):
            logical(host, p).copy_(page_values(seed, i))
            vals.append(host.get_data_page(p, flat=True))
        out["set"] = st.batch_set(keys, vals)
    elif op == "get":
        out["get"] = st.batch_get_v1(keys, idx)
        out["equal"] = [bool(torch.equal(logical(host, p), page_values(seed, i)))
                        for i, p in enumerate(pages)]
    elif op == "get_generic":
        dst = [host.get_dummy_flat_data_page() for _ in keys]
        got = st.batch_get(keys, dst)
        out["get"] = [g is not None for g in got]
        for i, p in enumerate(pages):
            if got[i] is not None:
                host.set_from_flat_data_page(p, got[i])
        out["equal"] = [bool(torch.equal(logical(host, p), page_values(seed, i)))
                        for i, p in enumerate(pages)]
    out["exists_after"] = st.batch_exists(keys)
    out["stats"] = st.get_stats()
    st.close()
    return out


def main():
    sock = sys.argv[1]
    out = []
    for s in sys.argv[2:]:
        layout, op, seed, n = s.split(":")
        out.append(step(sock, layout, op, int(seed), int(n)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
