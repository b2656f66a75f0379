# SPDX-License-Identifier: MIT
"""kvpool.sglang.KVPoolStorage as SGLang's HiCache storage backend: made by
SGLang's own StorageBackendFactory ("dynamic") over SGLang's own host KV
pool on the CPU (tests/python/sglang_side.py), one process storing and
others reading, against a real kvpoold.

SGLang 0.5.23 is installed without its dependencies (contrib/quickstart):
pip cannot install it beside vLLM 0.33.0 (compressed-tensors 0.18.0
against 0.17.0, torch 2.14.1 against 2.14.0). Its storage and host pool
modules run on vLLM's torch; see docs/sglang.md."""
import json
import os
import subprocess
import sys

import pytest

from conftest import HERE, TOP, running

pytest.importorskip("torch", reason="torch is not installed in this venv")
try:
    import sglang.srt.mem_cache.hicache_storage  # noqa: F401
except Exception as e:  # noqa: BLE001 (any import failure is a reason to skip)
    pytest.skip("SGLang's HiCache modules cannot be imported here (%s: %s); "
                "contrib/quickstart test installs sglang==0.5.23" % (type(e).__name__, e),
                allow_module_level=True)


def side(sock, *steps):
    """One SGLang process running steps ("layout:op:seed:pages"); .result()
    waits for its answers, one per step."""
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"),
               TORCH_EXTENSIONS_DIR=os.path.join(TOP, ".venv", "torch-extensions"))
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "sglang_side.py"), sock, *steps],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    class Side:
        def result(self):
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            return json.loads(out.strip().splitlines()[-1])
    return Side()


@pytest.fixture
def pool():
    with running(["--pool-size", "16M", "--slab-size", "1M"]) as d:
        yield d


def test_pages_stored_by_one_process_are_read_by_others_in_any_layout(pool):
    [w] = side(pool.sock, "layer_first:set:1:6").result()
    assert w["exists"] == 0 and w["set"] == [True] * 6 and w["exists_after"] == 6
    assert w["stats"]["saved_pages"] == 6
    st = pool.stats()
    assert st["pages_cached"] == 6
    assert [n["name"].startswith("sglang.tiny-llama.") for n in st["namespaces"]] == [True]
    # another process reads them into host pools of every other layout SGLang
    # has (the same values), then stores them again: nothing new is stored
    *reads, again = side(pool.sock, "page_first:get:1:6", "page_first_direct:get:1:6",
                         "page_head:get:1:6", "page_first:set:1:6").result()
    for r in reads:
        assert r["exists"] == 6 and r["get"] == [True] * 6 and r["equal"] == [True] * 6
    assert again["set"] == [True] * 6 and again["stats"].get("saved_pages", 0) == 0
    assert pool.stats()["pages_cached"] == 6


def test_the_generic_get_and_set_path_is_byte_exact(pool):
    [w] = side(pool.sock, "page_first:set_generic:2:4").result()
    assert w["set"] is True and w["exists_after"] == 4
    generic, zero_copy = side(pool.sock, "page_head:get_generic:2:4",
                              "layer_first:get:2:4").result()
    assert generic["get"] == [True] * 4 and generic["equal"] == [True] * 4
    assert zero_copy["equal"] == [True] * 4


def test_a_missing_daemon_and_a_full_pool_are_misses_not_errors(tmp_path):
    [r] = side(str(tmp_path / "none.sock"), "layer_first:get:3:4").result()
    assert r["exists"] == 0 and r["get"] == [False] * 4 and r["exists_after"] == 0
    # 16 pages of 12 KiB: 24 pages cannot be stored, 8 can
    with running(["--pool-size", "192K", "--slab-size", "192K"]) as d:
        full, fits = side(d.sock, "layer_first:set:4:24", "layer_first:set:5:8").result()
        assert full["set"] == [False] * 24 and full["stats"]["save_skipped"] == 24
        assert fits["set"] == [True] * 8 and fits["exists_after"] == 8
        assert d.stats()["pages_cached"] == 8
