# SPDX-License-Identifier: MIT
"""The Python package on the CUDA backend (tests/gpu/device-check.sh runs
it on a GPU machine; elsewhere it skips, saying why): a page written on
the device through DLPack by one process is read back, in place, through
__cuda_array_interface__ by another; host pages beside the GPU pool, as
the engine connectors ask them, have a view."""
import os
import subprocess
import sys

import pytest

import kvpool
from conftest import GEO, running

torch = pytest.importorskip("torch", reason="torch is not installed")


@pytest.fixture
def gpu_daemon():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device answers torch.cuda.is_available()")
    try:
        with running(["--backend", "cuda"]) as d:
            yield d
    except RuntimeError as e:
        if "did not become ready" not in str(e):
            raise
        pytest.skip("kvpoold --backend cuda did not start: %s" % e)


def test_device_pages_in_place_across_processes(gpu_daemon):
    with kvpool.Client(gpu_daemon.sock, "py", GEO) as c:
        assert c.info()["backend"] == kvpool._kvpool.BACKEND_CUDA
        (p,) = c.alloc(1)
        t = torch.from_dlpack(c.page_dlpack(p))
        assert t.is_cuda and t.data_ptr() == c.page_address(p)
        assert tuple(t.shape) == GEO.page_shape and t.dtype == torch.float16
        t.copy_(torch.arange(t.numel(), device="cuda").reshape(t.shape).half())
        torch.cuda.synchronize()
        (key,) = c.block_keys(list(range(16)))
        c.publish([p], [key])
        del t
        code = ("import sys, torch, kvpool\n"
                "from conftest import GEO\n"
                "c = kvpool.Client(sys.argv[1], 'py', GEO)\n"
                "got = c.acquire(c.block_keys(list(range(16))))\n"
                "t = torch.as_tensor(c.page_cuda(got.pages[0]), device='cuda')\n"
                "want = torch.arange(t.numel(), device='cuda').reshape(t.shape).half()\n"
                "print('same' if torch.equal(t, want) else 'differs')\n")
        r = subprocess.run([sys.executable, "-c", code, gpu_daemon.sock], capture_output=True,
                           text=True, timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)),
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        assert r.stdout.strip() == "same", r.stdout + r.stderr
        c.release([p])


def test_host_pages_beside_the_gpu_pool_have_a_view(gpu_daemon):
    """What the engine connectors ask on a GPU machine: kvpoold's cuda
    backend serves a namespace of host pages (--host-pool-size, default as
    large as --pool-size) with a view, beside one of GPU pages; asking host
    pages in the GPU namespace is refused naming the memory."""
    st = gpu_daemon.stats()
    assert st["backend"] == kvpool._kvpool.BACKEND_CUDA and st["host_pool_bytes"] == 8 << 20
    with kvpool.Client(gpu_daemon.sock, "host", GEO, memory=kvpool.Memory.HOST) as h, \
            kvpool.Client(gpu_daemon.sock, "gpu", GEO) as g:
        assert h.info()["backend"] == kvpool._kvpool.BACKEND_HOST
        assert g.info()["backend"] == kvpool._kvpool.BACKEND_CUDA
        (p,) = h.alloc(1)
        h.kv_array()[h.page_index(p)] = 7.0
        assert float(h.page_array(p).max()) == 7.0
        h.release([p])
        with pytest.raises(kvpool.Mismatch, match="holds GPU pages"):
            kvpool.Client(gpu_daemon.sock, "gpu", GEO, memory=kvpool.Memory.HOST)
    st = gpu_daemon.stats()
    assert st["host_slabs"] == 1 and sorted(n["backend"] for n in st["namespaces"]) == [
        kvpool._kvpool.BACKEND_HOST, kvpool._kvpool.BACKEND_CUDA]


def test_the_vllm_connector_copies_between_device_blocks_and_the_host_pool():
    """KVPoolConnector's copies with vLLM KV tensors on the GPU: the host pool
    registered once with CUDA, pages DMAed in runs, permuted on the device."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device answers torch.cuda.is_available()")
    try:
        from kvpool.vllm import Identity
        from kvpool.vllm.copier import Copier
    except Exception as e:  # noqa: BLE001 (any import failure is a reason to skip)
        pytest.skip("kvpool.vllm cannot be imported (vLLM: %s)" % e)
    g = kvpool.Geometry(layers=2, kv_heads=2, head_dim=64, block_tokens=16,
                        dtype=kvpool.DType.F16, model="test/gpu-copier")
    ident = Identity("gpu-copier", g, kvpool.Scheme.VLLM_SHA256, "0", ("l0", "l1"), "sha256")
    raw = torch.randn(2, 8, 2, 16, 128, device="cuda").half()
    back_raw = torch.zeros_like(raw)
    with running() as d, kvpool.Client(d.sock, "gpu-copier", g) as c:
        view = c.view()
        pages = c.alloc(3)
        pairs = list(zip([6, 1, 3], pages))
        cp = Copier(ident, [raw[0], raw[1]], 1)
        assert cp.use_torch
        cp.copy(c, view, True, pairs)
        for b, p in pairs:
            page = c.page_tensor(p)
            for l in range(2):
                cell = raw[l, b].unflatten(-1, (2, 64)).permute(2, 0, 1, 3).cpu()
                assert torch.equal(page[l], cell)
        Copier(ident, [back_raw[0], back_raw[1]], 1).copy(c, view, False, pairs)
        for b, _ in pairs:
            assert torch.equal(back_raw[:, b], raw[:, b])
        cp.close()
        c.release(pages)
        del view, page
