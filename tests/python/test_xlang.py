# SPDX-License-Identifier: MIT
"""Python and C clients of one kvpoold share pages byte for byte."""
import subprocess

import numpy as np

from conftest import tool
from test_client import fill, holds

NB = 6


def tokens():
    """harness_tokens(t, n, n, 0): the shared prompt of the C tests."""
    return ((np.arange(NB * 16, dtype=np.uint64) * 7 + 3) % 50000).astype(np.uint32)


def xlang(sock, mode):
    return subprocess.run([tool("tests/python/kvpool-xlang"), sock, mode, str(NB)],
                          capture_output=True, text=True, timeout=60)


def test_python_publishes_c_acquires(client, daemon):
    keys = client.block_keys(tokens())
    pages = client.alloc(NB)
    for p, k in zip(pages, keys):
        fill(client.page_array(p), k)
    client.publish(pages, keys)
    client.release(pages)
    r = xlang(daemon.sock, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "hits %d" % NB


def test_c_publishes_python_acquires(client, daemon):
    r = xlang(daemon.sock, "publish")
    assert r.returncode == 0, r.stdout + r.stderr
    keys = client.block_keys(tokens())
    got = client.acquire(keys)
    assert len(got.pages) == NB
    for p, k in zip(got.pages, keys):
        assert holds(client.page_array(p), k)
    client.release(got.pages)
