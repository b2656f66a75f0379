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

And a router that routes by the machines' pools: vllm-router's kv_aware
policy, reading each machine's kvpoold's event stream for it
(--kv-events-router), sends a prompt to the machine whose pool holds its
prefix.
"""
import os
import random
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import TOP, Daemon
from test_pd import NEW, PROMPT, blocks_of, kvpool_metric, metric, transferred

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


def served(e, least=0.0):
    """The requests engine e finished (vLLM's /metrics), once at least
    least."""
    return metric(e, "vllm:request_success_total", least)


def test_a_kv_aware_router_sends_a_prompt_to_the_machine_whose_pool_holds_its_prefix(model):
    # vllm-router's kv_aware policy reads one vLLM event stream per
    # engine: each machine's kvpoold gives it one of its namespace
    # (--kv-events-router: topic "", a sequence of its own), and the
    # engines render (tokenize) for the router (--enable-scale-out). A
    # prompt one machine's engine computed, and its pool holds, is sent
    # there whoever asks
    keep = tempfile.mkdtemp(prefix="kvpool-machines-")
    started, daemons = [], []
    with machines.Machines(["a", "b"]) as m:
        try:
            engines = {}
            for cpu, name in enumerate(("a", "b")):
                ip = m.ip(name)
                d = Daemon(["--key-seed", "0", "--pool-size", "64M", "--slab-size", "4M",
                            "--kv-events-router",
                            "llama tcp://%s:5557,tcp://%s:5558" % (ip, ip)],
                           wrap=m.wrap(name, []))
                daemons.append(d)
                engines[name] = ve.Engine(model, os.path.join(keep, name + ".log"),
                                          kvpool_socket=d.sock, cpus=str(cpu), host=ip,
                                          netns=m.ns[name], args=["--enable-scale-out"],
                                          extra={"namespace": "llama"})
            started = list(engines.values())
            ve.start(started)
            args = ["--kv-event-model", engines["a"].model,
                    "--kv-event-block-size", str(ve.BLOCK)]
            for name, e in engines.items():
                args += ["--kv-event-source", "%s=tcp://%s:5557" % (e.url(), m.ip(name)),
                         "--kv-event-replay-source",
                         "%s=tcp://%s:5558" % (e.url(), m.ip(name))]
            router = ve.Router([], [], os.path.join(keep, "router.log"), policy="kv_aware",
                               workers=started, args=args)
            started.append(router)
            ve.start([router], timeout=120)
            rng = random.Random(7)
            for (name, e), d in zip(engines.items(), daemons):
                # the prefix computed on one machine, directly, and saved
                # to its pool (off the engine's step: after the answer);
                # kvpoold's events of it sent, and a second for the router
                # to take them in
                prefix = ve.words(PROMPT, rng)
                cached = d.stats()["pages_cached"]
                r = e.complete(" ".join(prefix), 1)
                d.wait_for(lambda st: st["pages_cached"] >= cached + blocks_of(r) and
                           st["events"]["queued_bytes"] == 0, "%s's saves and events" % name,
                           30)
                time.sleep(1)
                was = {n: served(x) for n, x in engines.items()}
                for i in range(4):
                    tail = ve.words(64, rng)
                    # no return_token_ids: vllm-router 0.1.17's kv_aware
                    # credits no prefix to a request with a field it does
                    # not know
                    router.complete(" ".join(prefix + tail), 2, token_ids=False)
                now = {n: served(x, was[n] + 4 if n == name else 0)
                       for n, x in engines.items()}
                for n in engines:
                    assert now[n] - was[n] == (4 if n == name else 0), \
                        "prompts of %s's prefix served: %s, before: %s" % (name, now, was)
            for e in started:
                e.stop()
            for d in daemons:
                d.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                           "the engines' leases going", 30)
                d.stop()
        finally:
            for e in started:
                e.kill()
            for d in daemons:
                d.discard()
            subprocess.run(["rm", "-rf", keep], check=False)
