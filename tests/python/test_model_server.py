# SPDX-License-Identifier: MIT
"""examples/model_server.py, the demo's model in PyTorch, against the C
model server (examples/kvpool-model-server) on one kvpoold: the same
answers, and the same K/V bytes, so that their pages are shared."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kvpool
from conftest import TOP, running, tool

pytest.importorskip("torch", reason="torch is not installed in this venv")
sys.path.insert(0, os.path.join(TOP, "examples"))
import model_server  # noqa: E402

SYSTEM = ("System: a shared instruction of some length, so that it spans a few "
          "pages of sixteen tokens each. ")
PROMPTS = [SYSTEM + "User: first? Assistant:", SYSTEM + "User: second one? Assistant:"]


def run(cmd, sock, prompts, *extra):
    r = subprocess.run(cmd + ["--socket", sock, "--max-tokens", "8", "--json", *extra],
                       input="\n".join(prompts).encode(), capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


C = [tool("examples/kvpool-model-server")]
PY = [sys.executable, os.path.join(TOP, "examples", "model_server.py")]


def answers(out):
    return [r["generated"] for r in out["results"]]


def test_the_python_server_answers_as_the_c_one(daemon):
    ref = run(C, daemon.sock, PROMPTS, "--no-cache")
    mine = run(PY, daemon.sock, PROMPTS, "--no-cache")
    assert answers(mine) == answers(ref)
    assert mine["cached_tokens"] == 0 and mine["computed_tokens"] == ref["computed_tokens"]


def test_c_and_python_servers_share_pages_byte_for_byte(daemon):
    ref = answers(run(C, daemon.sock, PROMPTS, "--no-cache"))
    # C computes and publishes; Python finds the shared prefix and the
    # first prompt whole, and answers the same
    assert answers(run(C, daemon.sock, PROMPTS[:1])) == ref[:1]
    py = run(PY, daemon.sock, PROMPTS)
    assert answers(py) == ref
    assert py["results"][0]["cached_tokens"] == len(PROMPTS[0])
    assert py["results"][1]["cached_tokens"] >= len(SYSTEM) // 16 * 16
    # and the other way round: C reuses what Python published
    again = run(C, daemon.sock, PROMPTS)
    assert answers(again) == ref
    assert again["results"][1]["cached_tokens"] == len(PROMPTS[1])
    # the pages Python published hold the bytes C computes: a private run
    # of the C server over a fresh namespace gives the same K/V
    toks = list(PROMPTS[1].encode())
    with kvpool.Client(daemon.sock, model_server.NAMESPACE, model_server.GEOMETRY) as c:
        got = c.acquire(c.block_keys(toks))
        shared = [c.page_array(p).copy() for p in got.pages]
        c.release(got.pages)
    assert len(shared) == len(toks) // 16
    with running() as other:
        run(C, other.sock, PROMPTS[1:])
        with kvpool.Client(other.sock, model_server.NAMESPACE, model_server.GEOMETRY) as c:
            got = c.acquire(c.block_keys(toks))
            for a, p in zip(shared, got.pages):
                assert np.array_equal(a.view(np.uint32), c.page_array(p).view(np.uint32))
            c.release(got.pages)


def test_the_weights_are_the_c_models():
    """model.c's xorshift64* stream: the first values by the plain
    recurrence, against the lane-split one."""
    s, want = model_server.WEIGHT_SEED, []
    for _ in range(5000):
        s = model_server._step(s)
        want.append(s * 0x2545F4914F6CDD1D & model_server.M64)
    got = model_server.xorshift_stream(model_server.WEIGHT_SEED, 5000, lanes=7)
    assert [int(v) for v in got] == want
