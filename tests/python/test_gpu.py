# SPDX-License-Identifier: MIT
"""The Python package on the CUDA backend (tests/gpu/device-check.sh runs
it on a GPU machine; elsewhere it skips, saying why): a page written on
the device through DLPack by one process is read back, in place, through
__cuda_array_interface__ by another."""
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
