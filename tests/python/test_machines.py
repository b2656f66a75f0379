# SPDX-License-Identifier: MIT
"""Disaggregated prefill and decode across machines: a prefill `vllm
serve` (kv_producer) on machine a and a decode one (kv_consumer) on
machine b, each machine with its own kvpoold, the two pools sharing one
Redis Cluster on a third machine, vllm-router in front. The machines are
network namespaces on this one (examples/machines.py), each linked at
1 Gbit/s (tc tbf; no latency is added: this kernel has no netem), so the
pages really cross a network: a's kvpoold writes the prefill engine's
blocks through to Redis, b's fetches them while the decode engine's
ACQUIRE waits for them.

What a user depends on: the router's answers are the tokens of one engine
alone; the decode engine computed none of the prompts; nothing leaks in
either pool.
"""
import os
import random
import subprocess
import sys
import tempfile

import pytest

from conftest import TOP, Daemon
from test_pd import NEW, PROMPT, blocks_of, kvpool_metric, transferred

sys.path.insert(0, os.path.join(TOP, "examples"))
import machines  # noqa: E402
import vllm_engines as ve  # noqa: E402

why = ve.engine_missing() or ve.router_missing() or machines.missing()
if why:
    pytest.skip("no engines, router or machines here: " + why, allow_module_level=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    yield ve.make_model_in_venv(str(tmp_path_factory.mktemp("machines") / "tiny-llama"))


def test_prefill_on_one_machine_and_decode_on_another_through_redis(model):
    keep = tempfile.mkdtemp(prefix="kvpool-machines-")
    key = os.path.join(keep, "remote.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(os.urandom(32))
    started = []
    with machines.Machines(["a", "b"], gbit=1) as m:
        url = m.redis_cluster()
        args = ["--key-seed", "0", "--pool-size", "64M", "--slab-size", "4M",
                "--remote", url, "--remote-key-file", key]
        da = Daemon(args + ["--remote-write", "through"], wrap=m.wrap("a", []))
        db = Daemon(args, wrap=m.wrap("b", []))
        try:
            alone = ve.Engine(model, os.path.join(keep, "alone.log"), cpus="0")
            p = ve.Engine(model, os.path.join(keep, "prefill.log"), kvpool_socket=da.sock,
                          cpus="0", role="kv_producer", host=m.ip("a"), netns=m.ns["a"])
            dec = ve.Engine(model, os.path.join(keep, "decode.log"), kvpool_socket=db.sock,
                            cpus="1", role="kv_consumer", host=m.ip("b"), netns=m.ns["b"])
            started = [alone, p, dec]
            ve.start(started)
            router = ve.Router([p], [dec], os.path.join(keep, "router.log"))
            started.append(router)
            ve.start([router], timeout=120)
            blocks = 0
            for i in range(3):
                prompt = " ".join(ve.words(PROMPT, random.Random(100 + i)))
                ref = alone.complete(prompt, NEW)
                got = router.complete(prompt, NEW)
                assert got.tokens == ref.tokens and len(got.tokens) == NEW, (got, ref)
                blocks += blocks_of(ref)
            assert kvpool_metric(dec, "loaded_blocks", blocks) == blocks
            assert kvpool_metric(dec, "load_errors") == 0
            assert transferred(dec, blocks * ve.BLOCK) == blocks * ve.BLOCK
            # b's pool got them from Redis, sent there by a's
            assert da.stats()["remote"]["puts"] >= blocks
            assert db.stats()["remote"]["restored"] >= blocks
            for e in started:
                e.stop()
            for d in (da, db):
                d.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                           "the engines' leases going", 30)
                d.stop()
        finally:
            for e in started:
                e.kill()
            da.discard()
            db.discard()
            subprocess.run(["rm", "-rf", keep], check=False)
