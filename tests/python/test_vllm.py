# SPDX-License-Identifier: MIT
"""kvpool.vllm.KVPoolConnector inside vLLM's own engine code (installed from
PyPI into the test venv): engines are separate processes
(tests/python/vllm_engine.py), each with vLLM's Scheduler loading the
connector through its connector factory, and a worker side driven the way
vLLM's model runner drives it, on CPU KV tensors, against one real kvpoold.

The engines are forked from one process that imported torch and vLLM once
(engine_zygote.py): each would spend about 10 s of CPU importing them.
"""
import atexit
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

import kvpool
from conftest import HERE, TOP, Daemon, free_port, running, tool
from engine_zygote import Zygote

pytest.importorskip("torch", reason="torch is not installed in this venv")
try:
    import vllm  # noqa: F401
except Exception as e:  # noqa: BLE001 (any import failure is a reason to skip)
    pytest.skip("vLLM cannot be imported here (%s: %s); contrib/quickstart test installs "
                "vllm==0.33.0 into .venv" % (type(e).__name__, e), allow_module_level=True)

SEED = "0"  # PYTHONHASHSEED of the engines, kvpoold's --key-seed
BLOCK = 16
PROMPT = [(i * 7) % 900 + 5 for i in range(200)]  # 12 full blocks and 8 tokens


_zygote = []


def zygote():
    """The engines' fork server, started at the first engine."""
    if not _zygote:
        _zygote.append(Zygote(dict(os.environ, PYTHONHASHSEED=SEED,
                                   PYTHONPATH=os.path.join(TOP, "python"))))
        atexit.register(_zygote[0].close)
    return _zygote[0]


class Engine:
    """One engine process; call(op=...) sends a command, returns the reply."""

    def __init__(self, sock, *args, extra=None, env=None):
        self.dir = tempfile.mkdtemp(prefix="kvpool-vllm-")
        self.err_path = os.path.join(self.dir, "stderr")
        # each engine has its own model directory: the model's name makes them
        # one model, as "model" in kv_connector_extra_config does for users
        cfg = dict({"socket": sock, "retry_seconds": 0.2, "model": "test/tiny-llama"},
                   **(extra or {}))
        argv = ["--model", os.path.join(self.dir, "model"), "--extra", json.dumps(cfg), *args]
        env = dict(dict(os.environ, PYTHONHASHSEED=SEED), **(env or {}),
                   PYTHONPATH=os.path.join(TOP, "python"))
        with open(self.err_path, "w") as err:
            z = zygote()
            if z.takes(env):  # forked: the imports are done
                self.proc = z.spawn(argv, env, err)
            else:  # another hash seed: a process of its own
                self.proc = subprocess.Popen(
                    [sys.executable, os.path.join(HERE, "vllm_engine.py"), *argv],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                    env=env)

    def ready(self):
        line = self.proc.stdout.readline()
        assert line and json.loads(line)["ready"], "engine did not start:\n" + self.stderr()
        return self

    def call(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "engine died:\n" + self.stderr()
        r = json.loads(line)
        assert "error" not in r, r["error"] + self.stderr()
        return r

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def warnings(self, text):
        return sum(1 for line in self.stderr().splitlines() if "kvpool (" in line and
                   text in line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(60)
        subprocess.run(["rm", "-rf", self.dir], check=False)


def engines(sock, n, *args, **kw):
    es = [Engine(sock, *args, **kw) for _ in range(n)]  # start in parallel
    return [e.ready() for e in es]


def leased(d):
    st = d.stats()
    return st["pages_private"] + st["pages_shared"]


@pytest.fixture
def pool():
    with running(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M"]) as d:
        yield d


@pytest.mark.parametrize("extra", [{}, {"async_load_blocks": 0, "layerwise_load": True}],
                         ids=["default", "layerwise"])
def test_a_second_instance_loads_what_the_first_saved_byte_for_byte(pool, extra):
    a, b = engines(pool.sock, 2, extra=extra)
    try:
        ra = a.call(op="run", prompts=[PROMPT], max_tokens=4)
        assert ra["cached"] == [0]
        sa = a.call(op="stats")
        assert sa["worker"]["saved_blocks"] == 12
        assert pool.stats()["pages_cached"] == 12 and leased(pool) == 0

        rb = b.call(op="run", prompts=[PROMPT], max_tokens=4)
        # B computed only the last partial block: 12 blocks came from the pool
        assert rb["cached"] == [12 * BLOCK]
        assert rb["outputs"] == ra["outputs"]
        sb = b.call(op="stats")
        assert sb["scheduler"]["hit_blocks"] == 12 and sb["worker"]["loaded_blocks"] == 12
        assert sb["worker"].get("saved_blocks", 0) == 0  # nothing stored twice
        # vLLM calls each attention layer's hooks only in a step whose load
        # runs layer by layer: no other step pays for them
        assert a.call(op="stats")["worker"]["layer_hook_steps"] == 0
        assert sb["worker"]["layer_hook_steps"] == (1 if extra else 0)
        blocks_a = a.call(op="blocks", rid=ra["rids"][0], n=12)["blocks"]
        blocks_b = b.call(op="blocks", rid=rb["rids"][0], n=12)["blocks"]
        assert blocks_a == blocks_b

        # a longer prompt sharing the prefix: B loads the 12, saves the rest
        longer = PROMPT + [(i * 11) % 900 + 5 for i in range(100)]
        rc = b.call(op="run", prompts=[longer], max_tokens=2)
        assert rc["cached"] == [12 * BLOCK]
        assert b.call(op="stats")["worker"]["saved_blocks"] == 18 - 12
        assert pool.stats()["pages_cached"] == 18 and leased(pool) == 0
    finally:
        a.close()
        b.close()


def ns_geometry(d, prefix="vllm."):
    """The namespace's geometry as `kvpool status --json` reports it."""
    out = subprocess.run([tool("client/kvpool"), "--socket", d.sock, "status", "--json"],
                         capture_output=True, text=True, check=True).stdout
    (n,) = [n for n in json.loads(out)["namespaces"] if n["name"].startswith(prefix)]
    return n


@pytest.mark.parametrize("kind,heads,k,v", [("mla", 1, 24, 0), ("diffkv", 2, 16, 8)])
def test_mla_latents_and_k_v_of_different_sizes_load_byte_for_byte(pool, kind, heads, k, v):
    # vLLM's own KV cache specs and tensors for them (allocate_kv_cache):
    # MLAAttentionSpec (K alone, one head), FullAttentionSpec with head_size_v
    a, b = engines(pool.sock, 2, "--kv-kind", kind)
    try:
        ra = a.call(op="run", prompts=[PROMPT], max_tokens=4)
        assert ra["cached"] == [0] and a.call(op="stats")["worker"]["saved_blocks"] == 12
        n = ns_geometry(pool)
        assert (n["kv_heads"], n["head_dim"], n["head_dim_v"]) == (heads, k, v)
        assert n["page_bytes"] == 2 * heads * (k + v) * BLOCK * 2  # 2 layers of f16
        rb = b.call(op="run", prompts=[PROMPT], max_tokens=4)
        assert rb["cached"] == [12 * BLOCK] and rb["outputs"] == ra["outputs"]
        assert b.call(op="stats")["worker"]["loaded_blocks"] == 12
        blocks_a = a.call(op="blocks", rid=ra["rids"][0], n=12)["blocks"]
        assert blocks_a == b.call(op="blocks", rid=rb["rids"][0], n=12)["blocks"]
        assert len(set(blocks_a)) == 12  # the blocks differ: a copy of one would show
    finally:
        a.close()
        b.close()
    assert leased(pool) == 0


@pytest.mark.parametrize("kind", ["mla", "mla-sharded", "mha"])
@pytest.mark.parametrize("namespace", [None, "dsv2"], ids=["derived", "named"])
def test_tensor_parallel_ranks_share_one_namespace_only_for_mla(pool, kind, namespace):
    # vLLM's config with tensor_parallel_size 2 and its KV cache spec
    # classes: an MLA model's latent is whole on every rank (max_tp_shards
    # 1, as vLLM's MLAAttention declares it), so the ranks (and an engine
    # without tensor parallelism) join one namespace, where what one rank
    # published another acquires; other attention splits its heads, and so
    # may an MLA cache that vLLM does not declare whole: a namespace per rank
    import dataclasses

    import numpy as np
    import vllm_engine
    from kvpool.vllm import identity_of

    model = os.path.join(tempfile.mkdtemp(prefix="kvpool-tp-"), "model")
    vllm_engine.write_model(model)
    extra = {"socket": pool.sock, "model": "test/tiny-llama"}
    if namespace:
        extra["namespace"] = namespace
    vc = vllm_engine.make_config(model, extra, BLOCK, "sha256_cbor", "recompute")
    kvc = vllm_engine.make_kv_cache_config(BLOCK, 64, kind.split("-")[0])
    if kind == "mla-sharded":
        group = kvc.kv_cache_groups[0]
        group.kv_cache_spec = dataclasses.replace(group.kv_cache_spec, max_tp_shards=None)
    alone = identity_of(vc, kvc, 0)
    vc.parallel_config.tensor_parallel_size = 2
    r0, r1 = (identity_of(vc, kvc, rank) for rank in (0, 1))
    subprocess.run(["rm", "-rf", os.path.dirname(model)], check=False)
    if kind == "mla":
        for r in (r0, r1):
            assert (r.namespace, r.geometry.model) == (alone.namespace, alone.geometry.model)
        assert r0.geometry.model.endswith(" mla")
        assert namespace is None or r0.namespace == namespace
    else:
        assert len({alone.namespace, r0.namespace, r1.namespace}) == 3
        assert (r0.geometry.model[-6:], r1.geometry.model[-6:]) == (" tp0/2", " tp1/2")
        assert namespace is None or (r0.namespace, r1.namespace) == ("dsv2.tp0", "dsv2.tp1")
    with kvpool.Client(pool.sock, r0.namespace, r0.geometry) as a, \
            kvpool.Client(pool.sock, r1.namespace, r1.geometry) as b:
        keys = a.block_keys(np.arange(2 * BLOCK, dtype=np.uint32))
        pages = a.alloc(2)
        assert a.publish(pages, keys) == pages
        a.release(pages)
        got = b.acquire(keys)
        assert len(got.pages) == (2 if kind == "mla" else 0)
        b.release(got.pages)
    assert leased(pool) == 0


def test_a_producer_saves_and_never_loads_a_consumer_loads_and_never_saves(pool):
    # vLLM's kv_role: a prefill engine (kv_producer) stores what it
    # computes and never looks the pool up; a decode engine (kv_consumer)
    # loads what the pool has and stores nothing of its own
    p, c, p2 = engines(pool.sock, 1, "--role", "kv_producer") + \
        engines(pool.sock, 1, "--role", "kv_consumer") + \
        engines(pool.sock, 1, "--role", "kv_producer")
    other = [(i * 11) % 900 + 5 for i in range(200)]
    try:
        assert c.call(op="run", prompts=[other], max_tokens=2)["cached"] == [0]
        assert c.call(op="stats")["worker"].get("saved_blocks", 0) == 0
        assert pool.stats()["pages_cached"] == 0
        assert p.call(op="run", prompts=[PROMPT], max_tokens=2)["cached"] == [0]
        sp = p.call(op="stats")
        assert sp["worker"]["saved_blocks"] == 12
        assert sp["scheduler"].get("lookups", 0) == 0
        assert pool.stats()["pages_cached"] == 12
        assert c.call(op="run", prompts=[PROMPT], max_tokens=2)["cached"] == [12 * BLOCK]
        sc = c.call(op="stats")
        assert sc["worker"]["loaded_blocks"] == 12
        assert sc["worker"].get("saved_blocks", 0) == 0
        # another producer computes the prompt the pool holds, and copies
        # none of it again (it asks which blocks the pool has, not for them)
        assert p2.call(op="run", prompts=[PROMPT], max_tokens=2)["cached"] == [0]
        s2 = p2.call(op="stats")
        assert s2["scheduler"].get("lookups", 0) == 0
        assert s2["worker"].get("saved_blocks", 0) == 0 and s2["worker"].get("dedups", 0) == 0
        assert "kv_role kv_producer: saves, never loads" in p.stderr()
        assert "kv_role kv_consumer: loads, never saves" in c.stderr()
    finally:
        for e in (p, c, p2):
            e.close()
    assert leased(pool) == 0 and pool.stats()["pages_cached"] == 12


# what vllm-router sends a prefill engine (--vllm-pd-disaggregation)
ROUTER = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
          "remote_block_ids": None, "remote_host": None, "remote_port": None}


def test_a_decode_engine_loads_what_its_prefill_engine_is_still_saving(pool):
    # disaggregated prefill as vLLM's routers drive it: the prefill
    # engine's answer comes before its saves (held back a second here)
    # end, and the decode engine, given the answer's kv_transfer_params,
    # waits in kvpoold for the blocks rather than compute them
    p = Engine(pool.sock, "--role", "kv_producer", env={"KVPOOL_TEST_SLOW_SAVE": "1"}).ready()
    d = Engine(pool.sock, "--role", "kv_consumer").ready()
    try:
        rp = p.call(op="run", prompts=[PROMPT], max_tokens=1, params=ROUTER, drain=False)
        params = rp["params"][0]
        assert params["do_remote_prefill"] is True and params["kvpool"]["blocks"] == 12
        assert pool.stats()["pages_cached"] == 0  # not saved yet
        rd = d.call(op="run", prompts=[PROMPT], max_tokens=4, params=params)
        assert rd["cached"] == [12 * BLOCK]
        sd = d.call(op="stats")
        assert sd["scheduler"]["pd_loads"] == 1 and sd["worker"]["loaded_blocks"] == 12
        assert sd["worker"].get("load_errors", 0) == 0
        p.call(op="drain")
        assert p.call(op="stats")["scheduler"]["pd_prefills"] == 1
        assert d.call(op="blocks", rid=rd["rids"][0], n=12)["blocks"] == \
            p.call(op="blocks", rid=rp["rids"][0], n=12)["blocks"]
        # params of another namespace, or of another prompt: computed here, said once
        other = dict(params, kvpool=dict(params["kvpool"], namespace="elsewhere"))
        for i in range(2):
            fresh = [(t * 13 + i) % 900 + 5 for t in range(200)]
            assert d.call(op="run", prompts=[fresh], max_tokens=2,
                          params=other)["cached"] == [0]
        assert d.warnings("saved it to namespace 'elsewhere'") == 1
        moved = [t + 1 for t in PROMPT]
        assert d.call(op="run", prompts=[moved], max_tokens=2, params=params)["cached"] == [0]
        assert d.warnings("keys are not this request's") == 1
    finally:
        p.close()
        d.close()
    assert leased(pool) == 0 and pool.stats()["pages_cached"] == 12


def _op_counts(port):
    """kvpoold's requests answered so far, by operation (its /metrics)."""
    import urllib.request
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
    out = {}
    for line in text.decode().splitlines():
        if line.startswith("kvpool_request_seconds_count{"):
            out[line.split('"')[1]] = int(float(line.rsplit(" ", 1)[1]))
    return out


def test_a_decode_engines_load_takes_two_round_trips_to_kvpoold():
    # the worker's wait leases the blocks as they come and the copy reads
    # them there: one ACQUIRE and one RELEASE, beside the scheduler's
    # lookup (before: the worker leased them a second time on its main
    # connection, 3 ACQUIREs and 3 RELEASEs a P/D load)
    port = free_port()
    with running(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M",
                  "--metrics-listen", "127.0.0.1:%d" % port]) as d:
        p = Engine(d.sock, "--role", "kv_producer", env={"KVPOOL_TEST_SLOW_SAVE": "1"}).ready()
        dec = Engine(d.sock, "--role", "kv_consumer").ready()
        try:
            params = p.call(op="run", prompts=[PROMPT], max_tokens=1, params=ROUTER,
                            drain=False)["params"][0]
            before = _op_counts(port)  # each scrape has the loop render it anew
            rd = dec.call(op="run", prompts=[PROMPT], max_tokens=4, params=params)
            assert rd["cached"] == [12 * BLOCK]
            assert dec.call(op="stats")["scheduler"]["pd_loads"] == 1
            end = time.monotonic() + 10
            while True:  # until the scrape shows the last RELEASE
                after = _op_counts(port)
                ops = {k: after.get(k, 0) - before.get(k, 0) for k in ("ACQUIRE", "RELEASE")}
                if ops["RELEASE"] >= 2 or time.monotonic() > end:
                    break
                time.sleep(0.05)
            # the RELEASEs: the decode engine's two, and the prefill
            # engine's save's (of its fresh pages, once published)
            assert ops["ACQUIRE"] == 2 and ops["RELEASE"] <= 3, (ops, before, after)
            p.call(op="drain")
        finally:
            p.close()
            dec.close()


def _mutations(good):
    """Hypothesis' strategy of the kv_transfer_params a request body may
    carry: any JSON object (vLLM's API server refuses a body whose params
    are no object), a real handoff with any of its fields (vLLM's or
    kvpool's) set to any JSON value or removed, and fields added."""
    from hypothesis import strategies as st
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers(min_value=-2 ** 80, max_value=2 ** 80) |
        st.floats() | st.text(max_size=80) | st.sampled_from([good["kvpool"]["last_key"],
                                                               good["kvpool"]["namespace"]]),
        lambda inner: st.lists(inner, max_size=4) |
        st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
    kp_fields = st.sampled_from(sorted(good["kvpool"]) + ["ticket", "extra"])
    top_fields = st.sampled_from(sorted(good) + ["extra"])

    def set_kp(field, value):
        return dict(good, kvpool=dict(good["kvpool"], **{field: value}))

    def drop_kp(field):
        return dict(good, kvpool={k: v for k, v in good["kvpool"].items() if k != field})

    return st.one_of(
        st.dictionaries(st.text(max_size=20) | st.sampled_from(sorted(good)), json_values,
                        max_size=6),
        st.builds(set_kp, kp_fields, json_values),
        st.builds(drop_kp, kp_fields),
        st.builds(lambda f, v: dict(good, **{f: v}), top_fields, json_values),
        st.builds(set_kp, st.sampled_from(["blocks", "tokens"]),
                  st.integers(-2 ** 70, 2 ** 70) | st.floats() |
                  st.sampled_from([0, 1, 11, 12, 13, 2 ** 63, 12.0, float("inf"),
                                   float("-inf"), float("nan"), 1e308, True])))


def test_any_kv_transfer_params_leave_vllms_scheduler_serving_and_nothing_leased(pool):
    # a property of the params a request body may carry, through vLLM's own
    # Scheduler and the connector: every request is answered with its
    # tokens, no hook raises, and no page stays leased
    hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed")
    p = Engine(pool.sock, "--role", "kv_producer").ready()
    d = Engine(pool.sock, "--role", "kv_consumer", extra={"pd_wait_seconds": 0.5}).ready()
    try:
        good = p.call(op="run", prompts=[PROMPT], max_tokens=1, params=ROUTER)["params"][0]
        assert good["kvpool"]["blocks"] == 12

        @hypothesis.settings(max_examples=150, deadline=None, database=None,
                             suppress_health_check=list(hypothesis.HealthCheck))
        @hypothesis.given(_mutations(good))
        def serves(params):
            r = d.call(op="run", prompts=[PROMPT], max_tokens=2, params=params)
            # answered with its tokens, or refused by vLLM's own check
            assert "refused" in r or len(r["outputs"][0]) == 2, params
            assert d.call(op="leases")["scheduler"] == 0, params

        serves()
        sd = d.call(op="stats")
        assert sd["scheduler"].get("hook_errors", 0) == 0
        assert sd["worker"].get("hook_errors", 0) == 0
        assert sd["scheduler"].get("pd_refused", 0) > 0
        assert "Traceback" not in d.stderr()
    finally:
        p.close()
        d.close()
    assert leased(pool) == 0 and pool.stats()["pages_cached"] == 12


HOOKS = ["SchedulerSide.get_num_new_matched_tokens", "SchedulerSide.update_state_after_alloc",
         "SchedulerSide.build_connector_meta", "SchedulerSide.update_connector_output",
         "SchedulerSide.request_finished", "WorkerSide.start_load_kv",
         "WorkerSide.wait_for_save", "WorkerSide.get_finished",
         # inside get_num_new_matched_tokens, once the pool's pages are
         # leased (that hook's failure, said already)
         "SchedulerSide._off_step"]


def test_a_connector_hook_that_raises_leaves_the_engine_serving_the_same_tokens(pool):
    # each hook in turn fails on every call (a bug, or input no check
    # foresaw) while B serves prompts A saved: vLLM's loop never sees the
    # exception, every request is answered with A's tokens and A's K/V in
    # its blocks (what could not be loaded is computed, never left as it
    # was), each hook's failure is said once and counted, and no page leaks
    a, b = engines(pool.sock, 2)
    try:
        for i, hook in enumerate(HOOKS):
            prompt = [(t * 7 + i * 131) % 900 + 5 for t in range(200)]
            ref = a.call(op="run", prompts=[prompt], max_tokens=4)
            was = b.call(op="stats")
            b.call(op="raise", hooks=[hook])
            # one token: the request finishes on its first output (a P/D
            # prefill's shape, where vLLM reads request_finished()'s params)
            b.call(op="run", prompts=[prompt[:100]], max_tokens=1)
            rb = b.call(op="run", prompts=[prompt], max_tokens=4)
            b.call(op="raise", hooks=[])
            assert rb["outputs"] == ref["outputs"], hook
            assert b.call(op="blocks", rid=rb["rids"][0], n=12)["blocks"] == \
                a.call(op="blocks", rid=ref["rids"][0], n=12)["blocks"], hook
            side = "scheduler" if hook.startswith("Scheduler") else "worker"
            assert b.call(op="stats")[side].get("hook_errors", 0) > \
                was[side].get("hook_errors", 0), hook
            assert b.call(op="leases")["scheduler"] == 0, hook
            pool.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                          "B's leases after %s raised" % hook, 10)
            said = [line for line in b.stderr().splitlines() if "failed (RuntimeError" in line]
            if not hook.endswith("_off_step"):  # each hook's first failure, once
                assert len(said) == i + 1 and hook.split(".")[1] in said[-1], said
        # working hooks again: B loads what A saves
        prompt = [(t * 3) % 900 + 5 for t in range(200)]
        ref = a.call(op="run", prompts=[prompt], max_tokens=4)
        rb = b.call(op="run", prompts=[prompt], max_tokens=4)
        assert rb["outputs"] == ref["outputs"] and rb["cached"] == [12 * BLOCK]
    finally:
        a.close()
        b.close()
    assert leased(pool) == 0


def test_a_decode_engine_holds_at_most_pd_max_waits_waiting_handoffs(pool):
    # three handoffs whose saves are held back 3 s, one decode engine that
    # lets one request wait: the first waits and loads all its blocks, the
    # two others are computed at once (counted) instead of holding the
    # engine's blocks in the queue behind it
    p = Engine(pool.sock, "--role", "kv_producer", env={"KVPOOL_TEST_SLOW_SAVE": "3"}).ready()
    d = Engine(pool.sock, "--role", "kv_consumer", extra={"pd_max_waits": 1}).ready()
    try:
        prompts = [[(t * 7 + i * 31) % 900 + 5 for t in range(200)] for i in range(3)]
        params = [p.call(op="run", prompts=[q], max_tokens=1, params=ROUTER,
                         drain=False)["params"][0] for q in prompts]
        assert [x["kvpool"]["blocks"] for x in params] == [12] * 3
        r = d.call(op="run", prompts=prompts, max_tokens=2, params_each=params)
        assert r["cached"] == [12 * BLOCK, 0, 0], r["cached"]
        assert [len(o) for o in r["outputs"]] == [2] * 3
        sd = d.call(op="stats")
        assert sd["scheduler"]["pd_loads"] == 1 and sd["scheduler"]["pd_busy"] == 2
        assert d.warnings("(pd_max_waits)") == 1
        p.call(op="drain")
    finally:
        p.close()
        d.close()
    assert leased(pool) == 0


def _prompt(i):
    return [(t * 17 + i * 53) % 900 + 5 for t in range(200)]


def test_forged_handoffs_are_computed_at_once_and_a_real_one_still_loads(pool):
    # issue 61, item 2: the namespace follows from public settings and a
    # block hash from the prompt, so well-formed params for the attacker's
    # own prompts passed every check, and each made the decode engine
    # wait pd_wait_seconds holding its blocks (a real handoff behind six
    # such took 11.8 s, not 0.07 s). The ticket is the difference: params
    # a prefill engine on another kvpoold made (every field right, the
    # ticket signed by that daemon's key), or carrying this pool's ticket
    # of another prompt, are computed at once; the real handoff among them
    # loads its blocks
    p = Engine(pool.sock, "--role", "kv_producer", env={"KVPOOL_TEST_SLOW_SAVE": "1"}).ready()
    d = Engine(pool.sock, "--role", "kv_consumer", extra={"pd_wait_seconds": 10}).ready()
    with running(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M"]) as other:
        pa = Engine(other.sock, "--role", "kv_producer").ready()
        try:
            forged = [pa.call(op="run", prompts=[_prompt(i)], max_tokens=1,
                              params=ROUTER)["params"][0] for i in range(6)]
        finally:
            pa.close()
    try:
        good = p.call(op="run", prompts=[PROMPT], max_tokens=1, params=ROUTER,
                      drain=False)["params"][0]
        assert all(f["kvpool"]["namespace"] == good["kvpool"]["namespace"] and
                   f["kvpool"]["blocks"] == 12 for f in forged)
        t = good["kvpool"]["ticket"]
        for f, ticket in ((forged[4], t), (forged[5], t[:-1] + "%x" % (int(t[-1], 16) ^ 1))):
            f["kvpool"]["ticket"] = ticket
        t0 = time.monotonic()
        r = d.call(op="run", prompts=[_prompt(i) for i in range(6)] + [PROMPT], max_tokens=2,
                   params_each=forged + [good])
        took = time.monotonic() - t0
        assert r["cached"] == [0] * 6 + [12 * BLOCK], r["cached"]
        assert [len(o) for o in r["outputs"]] == [2] * 7
        assert took < 8, took  # no request waited its 10 s
        sd = d.call(op="stats")
        assert sd["scheduler"]["pd_tickets_refused"] == 6
        assert sd["scheduler"]["pd_loads"] == 1 and sd["worker"]["loaded_blocks"] == 12
        assert d.warnings("handoff ticket was refused") == 1
        p.call(op="drain")
    finally:
        p.close()
        d.close()
    assert leased(pool) == 0


def test_a_prefill_engine_that_cannot_save_ends_the_decode_engines_wait_at_once():
    # issue 61, item 3: a pool too small for the prompt (16 pages, 24
    # blocks): the prefill engine skipped its save (all or none) and the
    # decode engine still waited all of pd_wait_seconds, every long
    # request 10 s instead of its compute time. The prefill engine now
    # saves the leading blocks that fit and abandons the first one it
    # cannot; the decode engine loads those and its wait for the rest
    # ends at once
    long = [(t * 29) % 900 + 5 for t in range(24 * BLOCK + 5)]
    with running(["--key-seed", SEED, "--pool-size", "64K", "--slab-size", "64K"]) as small:
        p = Engine(small.sock, "--role", "kv_producer").ready()
        d = Engine(small.sock, "--role", "kv_consumer", extra={"pd_wait_seconds": 10}).ready()
        try:
            rp = p.call(op="run", prompts=[long], max_tokens=1, params=ROUTER)
            params = rp["params"][0]
            assert params["kvpool"]["blocks"] == 24
            sp = p.call(op="stats")
            assert sp["worker"]["saved_blocks"] == 16 and sp["worker"]["save_skipped"] == 8
            assert sp["worker"]["pd_abandoned"] == 1
            t0 = time.monotonic()
            rd = d.call(op="run", prompts=[long], max_tokens=4, params=params)
            took = time.monotonic() - t0
            assert rd["cached"] == [16 * BLOCK] and len(rd["outputs"][0]) == 4
            assert took < 5, took
            sd = d.call(op="stats")
            assert sd["scheduler"]["pd_loads"] == 1 and sd["worker"]["loaded_blocks"] == 16
            assert sd["worker"]["load_errors"] == 8
            # what it loaded is what the prefill engine computed
            assert d.call(op="blocks", rid=rd["rids"][0], n=16)["blocks"] == \
                p.call(op="blocks", rid=rp["rids"][0], n=16)["blocks"]
        finally:
            p.close()
            d.close()
        assert leased(small) == 0


def test_a_prefill_engine_whose_save_raises_ends_the_decode_engines_wait_at_once(pool):
    # a hybrid model's saves go through the connector's thread (the
    # Mover): one that raised anything but OSError (a copy that cannot
    # run, a bug) was skipped without abandoning its blocks, and the
    # decode engine waited all of pd_wait_seconds
    p = Engine(pool.sock, "--role", "kv_producer", "--kv-kind", "swa").ready()
    d = Engine(pool.sock, "--role", "kv_consumer", "--kv-kind", "swa",
               extra={"pd_wait_seconds": 20}).ready()
    try:
        p.call(op="raise", hooks=["WorkerSide._save_now"])
        params = p.call(op="run", prompts=[PROMPT], max_tokens=1, params=ROUTER)["params"][0]
        assert p.call(op="stats")["worker"]["pd_abandoned"] >= 1
        t0 = time.monotonic()
        rd = d.call(op="run", prompts=[PROMPT], max_tokens=4, params=params)
        assert time.monotonic() - t0 < 10
        assert len(rd["outputs"][0]) == 4
    finally:
        p.close()
        d.close()
    assert leased(pool) == 0


def test_a_prompt_of_whole_blocks_goes_from_prefill_to_decode_engine_too(pool):
    # 12 blocks and not a token more: the prefill engine saves all 12, the
    # decode engine loads 11 (vLLM computes at least the last token) after
    # checking the 12th's key, where the prefill engine's last key is
    whole = PROMPT[:12 * BLOCK]
    p = Engine(pool.sock, "--role", "kv_producer", env={"KVPOOL_TEST_SLOW_SAVE": "1"}).ready()
    d = Engine(pool.sock, "--role", "kv_consumer").ready()
    try:
        params = p.call(op="run", prompts=[whole], max_tokens=1, params=ROUTER,
                        drain=False)["params"][0]
        assert params["kvpool"]["blocks"] == 12
        rd = d.call(op="run", prompts=[whole], max_tokens=4, params=params)
        assert rd["cached"] == [11 * BLOCK]
        sd = d.call(op="stats")
        assert sd["scheduler"]["pd_loads"] == 1 and sd["worker"]["loaded_blocks"] == 11
        assert d.warnings("keys are not this request's") == 0
        p.call(op="drain")
    finally:
        p.close()
        d.close()
    assert leased(pool) == 0 and pool.stats()["pages_cached"] == 12


def test_a_prefill_engine_killed_before_its_saves_leaves_the_decode_computing_at_once(pool):
    # issue 61, item 3: the decode engine waited pd_wait_seconds for blocks
    # that never came. The prefill engine's connection ends with it, and
    # kvpoold abandons the handoffs it had tickets for and did not publish:
    # the decode engine's wait, which names its handoff, ends at once, and
    # it computes the blocks; nothing is leaked
    p = Engine(pool.sock, "--role", "kv_producer", env={"KVPOOL_TEST_SLOW_SAVE": "30"}).ready()
    d = Engine(pool.sock, "--role", "kv_consumer", extra={"pd_wait_seconds": 20}).ready()
    try:
        params = p.call(op="run", prompts=[PROMPT], max_tokens=1, params=ROUTER,
                        drain=False)["params"][0]
        p.proc.kill()
        p.proc.wait()
        t0 = time.monotonic()
        rd = d.call(op="run", prompts=[PROMPT], max_tokens=4, params=params)
        assert time.monotonic() - t0 < 10
        assert len(rd["outputs"][0]) == 4
        with open(pool.log) as f:
            assert "hung up before it published the last block of 1 handoff" in f.read()
        sd = d.call(op="stats")
        assert sd["scheduler"]["pd_loads"] == 1 and sd["worker"]["load_errors"] == 12
        assert sd["worker"].get("loaded_blocks", 0) == 0
    finally:
        p.close()
        d.close()
    assert leased(pool) == 0 and pool.stats()["pages_cached"] == 0


def test_a_daemon_restarted_between_prefill_and_decode_leaves_the_decode_computing():
    # the pool lost what the prefill engine saved, and the new kvpoold
    # takes no ticket of the old one's: the decode engine computes at once
    # (no wait), says so once, and shares again afterwards
    keep = tempfile.mkdtemp(prefix="kvpool-vllm-sock-")
    args = ["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M"]
    d = Daemon(args, sock=os.path.join(keep, "kvpool.sock"))
    p = Engine(d.sock, "--role", "kv_producer").ready()
    dec = Engine(d.sock, "--role", "kv_consumer", extra={"pd_wait_seconds": 1}).ready()
    try:
        params = p.call(op="run", prompts=[PROMPT], max_tokens=1, params=ROUTER)["params"][0]
        assert d.stats()["pages_cached"] == 12
        sock, old = d.sock, d
        had = old.connections()
        old.stop()
        d = Daemon(args, sock=sock)
        old.discard()
        d.wait_reconnected(had)
        rd = dec.call(op="run", prompts=[PROMPT], max_tokens=4, params=params)
        assert rd["cached"] == [0] and len(rd["outputs"][0]) == 4
        sd = dec.call(op="stats")
        assert sd["scheduler"]["pd_tickets_refused"] == 1
        assert sd["scheduler"].get("pd_loads", 0) == 0
        assert sd["worker"].get("loaded_blocks", 0) == 0
        assert dec.warnings("handoff ticket was refused") == 1
        # the next prompt goes through the pool again
        other = [(i * 3) % 900 + 5 for i in range(200)]
        params = p.call(op="run", prompts=[other], max_tokens=1, params=ROUTER)["params"][0]
        rd = dec.call(op="run", prompts=[other], max_tokens=4, params=params)
        assert rd["cached"] == [12 * BLOCK]
        assert dec.call(op="stats")["worker"]["loaded_blocks"] == 12
        assert leased(d) == 0
        d.stop()
    finally:
        p.close()
        dec.close()
        d.discard()
        subprocess.run(["rm", "-rf", keep], check=False)


def test_instances_of_another_model_share_nothing(pool):
    a, b = engines(pool.sock, 2, extra={"model": "some/other-model"})
    b.close()
    b = Engine(pool.sock).ready()
    try:
        a.call(op="run", prompts=[PROMPT], max_tokens=2)
        assert b.call(op="run", prompts=[PROMPT], max_tokens=2)["cached"] == [0]
        names = {n["name"] for n in pool.stats()["namespaces"]}
        assert len(names) == 2, names
    finally:
        a.close()
        b.close()


def test_an_instance_with_another_hash_seed_is_refused_saying_so_and_serves(pool):
    a = Engine(pool.sock).ready()
    b = Engine(pool.sock, env={"PYTHONHASHSEED": "1"}).ready()
    try:
        ra = a.call(op="run", prompts=[PROMPT], max_tokens=2)
        # B's block hashes start from another root: kvpoold refuses it at
        # connect instead of letting it miss forever, and B says what to change
        rb = b.call(op="run", prompts=[PROMPT], max_tokens=2)
        assert rb["cached"] == [0] and len(rb["outputs"][0]) == 2
        rb = b.call(op="run", prompts=[PROMPT], max_tokens=2)
        assert b.warnings("refused this instance") == 2, b.stderr()  # scheduler, worker
        assert b.warnings("PYTHONHASHSEED=1: run kvpoold with --key-seed 1") == 2
        assert b.call(op="stats")["worker"].get("saved_blocks", 0) == 0
        assert pool.stats()["pages_cached"] == 12 and leased(pool) == 0
        assert a.call(op="stats")["worker"]["saved_blocks"] == 12
        assert ra["cached"] == [0]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("background", [False, True], ids=["in-step", "off-step"])
def test_a_request_aborted_before_its_load_leaves_no_lease(pool, background):
    a = Engine(pool.sock).ready()
    # 12 blocks: loaded off the step from async_load_blocks 8
    b = Engine(pool.sock, extra={"async_load_blocks": 8 if background else 0}).ready()
    try:
        a.call(op="run", prompts=[PROMPT], max_tokens=2)
        rid = b.call(op="add", tokens=PROMPT, max_tokens=4)["rid"]
        # the lookup leased the prefix's 12 pages for the load
        assert b.call(op="schedule")["loads"] == 1
        assert b.call(op="leases")["scheduler"] == 12
        assert leased(pool) == 12
        # a request whose blocks a load off the step writes stays in vLLM
        # (its blocks held) until the workers report the load
        assert b.call(op="abort", rid=rid)["left"] == (1 if background else 0)
        assert b.call(op="leases")["scheduler"] == 0
        b.call(op="finish_step")  # the step vLLM had launched still runs
        b.call(op="drain")
        assert b.call(op="left")["left"] == 0
        assert leased(pool) == 0
        assert pool.stats()["pages_cached"] == 12
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("background", [False, True], ids=["in-step", "off-step"])
def test_a_worker_killed_mid_load_leaves_no_lease(pool, background):
    a = Engine(pool.sock).ready()
    b = Engine(pool.sock, "--worker-process", env={"KVPOOL_TEST_HANG_LOAD": "1"},
               extra={"async_load_blocks": 8 if background else 0}).ready()
    try:
        a.call(op="run", prompts=[PROMPT], max_tokens=2)
        r = b.call(op="run", prompts=[PROMPT], max_tokens=2)
        assert "hung" in r  # the worker holds its load's leases and never returns
        clients = {c["pid"]: c for c in kvpool.Client(pool.sock).list_clients()}
        assert clients[r["hung"]]["leases"] == 12
        assert leased(pool) == 12  # the same pages, leased by scheduler and worker
        b.call(op="kill_worker")
        pool.wait_for(lambda st: r["hung"] not in
                      {c["pid"] for c in kvpool.Client(pool.sock).list_clients()},
                      "the killed worker's disconnect")
        assert b.call(op="leases")["scheduler"] == 12
        b.call(op="abort", rid=r["rids"][0])
        assert leased(pool) == 0 and pool.stats()["pages_cached"] == 12
    finally:
        a.close()
        b.close()


@pytest.mark.skipif(os.environ.get("KVPOOL_IO") == "sync",
                    reason="the connector's own ordering, whatever the daemon's I/O: it runs "
                    "in the suite's first pass")
def test_saves_off_the_step_read_their_blocks_before_vllm_reuses_them(pool):
    # 24 blocks (and vLLM's null block), saves two seconds late
    a = Engine(pool.sock, "--blocks", "25", env={"KVPOOL_TEST_SLOW_SAVE": "2"}).ready()
    p1, p2, p3, p4 = ([(i * k) % 900 + 5 + k for i in range(n)]
                      for k, n in ((7, 180), (5, 180), (3, 180), (11, 360)))
    b = c = None
    try:
        # a preempted request: two prompts of 11 full blocks and a partial
        # one fill the blocks, and the first one's decode takes the second's
        r = a.call(op="run", prompts=[p1, p2], max_tokens=40)
        assert r["preempted"][1] >= 1, r["preempted"]
        # a finished request: the next prompt needs the blocks it had
        a.call(op="run", prompts=[p3], max_tokens=1)
        a.call(op="run", prompts=[p4], max_tokens=1)
        assert leased(pool) == 0
        # what the pool holds is what an engine computing alone holds
        b = Engine(pool.sock).ready()
        c = Engine(pool.sock, extra={"model": "test/another"}).ready()  # shares nothing
        for p in (p2, p3):
            rb = b.call(op="run", prompts=[p], max_tokens=2)
            rc = c.call(op="run", prompts=[p], max_tokens=2)
            assert rb["cached"] == [11 * BLOCK] and rc["cached"] == [0]
            assert b.call(op="blocks", rid=rb["rids"][0], n=11)["blocks"] == \
                c.call(op="blocks", rid=rc["rids"][0], n=11)["blocks"]
            assert rb["outputs"] == rc["outputs"]
    finally:
        for e in (a, b, c):
            if e is not None:
                e.close()


def test_a_hybrid_model_saves_its_sliding_window_blocks_before_vllm_reuses_them(pool):
    # vLLM's hybrid allocator: layer 0 attends to a window of 32 tokens and
    # is a KV cache group of its own (layer 1 attends to all). At the step
    # after a prefill vLLM frees the window's blocks behind it, and the next
    # prompt would take them; saves run two seconds late, so the connector
    # pins them until its save has read them. 128 blocks (and the null one).
    a = Engine(pool.sock, "--kv-kind", "swa", "--blocks", "129",
               extra={"save_queue_blocks": 256}, env={"KVPOOL_TEST_SLOW_SAVE": "2"}).ready()
    p1 = [(i * 7) % 900 + 5 for i in range(30 * BLOCK + 8)]
    p2 = [(i * 5) % 900 + 9 for i in range(41 * BLOCK + 8)]  # 42 blocks in each group
    es = [a]
    try:
        assert a.call(op="left")["free_blocks"] == 128
        a.call(op="add", tokens=p1, max_tokens=8)
        a.call(op="step")  # p1's prefill: 31 blocks in each group, saved late
        a.call(op="add", tokens=p2, max_tokens=2)
        # p1's window moves on: 28 of layer 0's blocks are vLLM's again but
        # pinned, and p2 waits for them rather than write into them
        assert a.call(op="step")["scheduled"] == ["r1"]
        assert a.call(op="left")["free_blocks"] == 66
        a.call(op="drain")
        left = a.call(op="left")
        assert left["left"] == 0 and left["free_blocks"] == 128, left  # no pin kept
        assert leased(pool) == 0
        s = a.call(op="stats")["worker"]
        assert s["saved_blocks"] >= 30 + 41 and not s.get("save_skipped"), s
        # what the pool holds is what an engine computing alone holds: an
        # engine with one group of both layers (the hybrid allocator off)
        # loads every layer of p1's 30 blocks; a hybrid one its 20 first,
        # layer 0 its window alone (the last two); engines of another model
        # compute them
        q = p1[:20 * BLOCK] + [(i * 3) % 900 + 7 for i in range(5 * BLOCK + 8)]
        for kind, prompt, n, window in (("mha", p1, 30, 0), ("swa", q, 20, 18)):
            b = Engine(pool.sock, "--kv-kind", kind).ready()
            c = Engine(pool.sock, "--kv-kind", kind, extra={"model": "test/alone-" + kind}).ready()
            es += [b, c]
            rb = b.call(op="run", prompts=[prompt], max_tokens=2)
            rc = c.call(op="run", prompts=[prompt], max_tokens=2)
            assert rb["cached"] == [n * BLOCK] and rc["cached"] == [0]
            for layer, first in ((0, window), (1, 0)):
                got = b.call(op="blocks", rid=rb["rids"][0], n=n, layers=[layer])["blocks"]
                want = c.call(op="blocks", rid=rc["rids"][0], n=n, layers=[layer])["blocks"]
                assert got[first:] == want[first:], "%s: layer %d differs" % (kind, layer)
            assert b.call(op="stats")["worker"]["loaded_blocks"] == n
    finally:
        for e in es:
            e.close()


def test_a_hybrid_model_whose_load_fails_computes_the_request_whole():
    # vLLM takes a hybrid model's failed loads per request (block ids name
    # no KV cache group; it raises on invalid_block_ids): kvpoold stops
    # between the lookup and the load, and the request is computed whole
    d = Daemon(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M"])
    a, b = engines(d.sock, 2, "--kv-kind", "swa")
    c = None
    try:
        a.call(op="run", prompts=[PROMPT], max_tokens=2)
        rid = b.call(op="add", tokens=PROMPT, max_tokens=4)["rid"]
        assert b.call(op="schedule")["loads"] == 1  # off the step, as every hybrid load
        d.stop()
        b.call(op="finish_step")
        b.call(op="drain")
        assert b.call(op="left")["left"] == 0
        assert b.call(op="stats")["worker"]["load_errors"] == 12
        # its scheduler, its worker: the call that failed, or the watcher
        assert b.warnings("went away") + b.warnings("closed the connection") == 2, b.stderr()
        c = Engine(d.sock, "--kv-kind", "swa").ready()  # no daemon: computes alone
        rc = c.call(op="run", prompts=[PROMPT], max_tokens=4)
        assert rc["cached"] == [0]
        for layer, first in ((0, 10), (1, 0)):
            got = b.call(op="blocks", rid=rid, n=12, layers=[layer])["blocks"]
            want = c.call(op="blocks", rid=rc["rids"][0], n=12, layers=[layer])["blocks"]
            assert got[first:] == want[first:], "layer %d differs" % layer
    finally:
        for e in (a, b, c):
            if e is not None:
                e.close()
        d.discard()


@pytest.mark.parametrize("kind", ["mha", "swa"])
def test_a_request_whose_load_failed_is_computed_not_sent_to_fail_again(pool, kind):
    # vLLM asks again for a request whose load off the step failed (from
    # the first failed block; a hybrid model's from its first): the pool
    # still has the blocks, but this engine cannot load them, so the
    # request is computed, not sent to fail once more, again and again
    a = Engine(pool.sock, "--kv-kind", kind).ready()
    b = Engine(pool.sock, "--kv-kind", kind, env={"KVPOOL_TEST_FAIL_LOADS": "1"}).ready()
    try:
        a.call(op="run", prompts=[PROMPT], max_tokens=2)
        r = b.call(op="run", prompts=[PROMPT], max_tokens=4)
        assert len(r["outputs"][0]) == 4
        s = b.call(op="stats")
        assert s["scheduler"]["lookups"] == 1, s
        assert s["worker"]["load_errors"] == 12 and not s["worker"].get("loaded_blocks"), s
        assert b.warnings("load") >= 1, b.stderr()
        assert leased(pool) == 0
    finally:
        a.close()
        b.close()


def test_a_full_save_queue_skips_and_counts_and_says_so_once(pool):
    # room for one prompt's 12 blocks in the queue; saves two seconds late
    a = Engine(pool.sock, extra={"save_queue_blocks": 12},
               env={"KVPOOL_TEST_SLOW_SAVE": "2"}).ready()
    other = [(i * 3) % 900 + 11 for i in range(200)]
    try:
        r = a.call(op="run", prompts=[PROMPT, other], max_tokens=2)
        assert [len(o) for o in r["outputs"]] == [2, 2]
        s = a.call(op="stats")["worker"]
        assert s["saved_blocks"] == 12 and s["save_skipped"] == 12, s
        assert a.warnings("the save queue is full") == 1, a.stderr()
        assert pool.stats()["pages_cached"] == 12 and leased(pool) == 0
        # the queue drained: the skipped prompt is saved when it comes again
        # (its blocks after the first are saved only with their parent)
        a.call(op="run", prompts=[other + [7]], max_tokens=2)
        assert pool.stats()["pages_cached"] == 24
    finally:
        a.close()


def test_requests_of_one_prefix_queue_its_saves_once(pool):
    # two prompts of one 12-block prefix, computed in one step; saves two
    # seconds late and room for 13 blocks in the queue: the second request
    # queued the 12 blocks again behind the first's, found the queue full
    # and skipped its own 13th (its blocks a load could have taken)
    a = Engine(pool.sock, extra={"save_queue_blocks": 13},
               env={"KVPOOL_TEST_SLOW_SAVE": "2"}).ready()
    other = PROMPT[:12 * BLOCK] + [901 + i for i in range(20)]  # block 12 its own
    try:
        r = a.call(op="run", prompts=[PROMPT, other], max_tokens=2)
        assert [len(o) for o in r["outputs"]] == [2, 2]
        s = a.call(op="stats")
        assert s["worker"]["saved_blocks"] == 13 and s["worker"].get("save_skipped", 0) == 0, s
        assert s["scheduler"].get("save_coalesced") == 12, s
        assert a.warnings("the save queue is full") == 0, a.stderr()
        assert pool.stats()["pages_cached"] == 13 and leased(pool) == 0
        # a later request of the prefix saves nothing: it is in the pool
        b = Engine(pool.sock).ready()
        try:
            rb = b.call(op="run", prompts=[other], max_tokens=2)
            assert rb["cached"] == [13 * BLOCK], rb
            assert b.call(op="stats")["worker"].get("saved_blocks", 0) == 0
        finally:
            b.close()
    finally:
        a.close()


def test_vllm_counts_the_pools_hits_by_where_kvpoold_had_them(tmp_path):
    # vLLM's per-source hit metrics (vllm:prompt_tokens_cached_by_source):
    # host for the pool, disk for its NVMe tier; before, all of kvpool's
    # hits were "external_unspecified"
    spill = tmp_path / "spill"
    spill.mkdir()
    with running(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M",
                  "--spill-dir", str(spill), "--spill-size", "4M"]) as d:
        a, b, c = engines(d.sock, 3)
        try:
            other = [(i * 11) % 900 + 3 for i in range(200)]
            a.call(op="run", prompts=[PROMPT, other], max_tokens=2)
            assert d.stats()["pages_cached"] == 24
            rb = b.call(op="run", prompts=[PROMPT + [901]], max_tokens=2)
            assert rb["cached"] == [12 * BLOCK]
            assert b.call(op="hit_sources") == {"host": 12 * BLOCK}
            with kvpool.Client(d.sock) as admin:  # the pool's pages out, to NVMe
                admin.evict()
            d.wait_for(lambda st: st["pages_cached"] == 0 and st["pages_spilled"] >= 12,
                       "the evictions to the NVMe tier")
            rc = c.call(op="run", prompts=[other + [902]], max_tokens=2)
            assert rc["cached"] == [12 * BLOCK]
            assert c.call(op="hit_sources") == {"disk": 12 * BLOCK}
        finally:
            for e in (a, b, c):
                e.close()


def test_a_request_limits_its_own_load_and_save_as_vllms_offloading_connector_reads_them(pool):
    # kv_transfer_params max_load_tokens / max_offload_tokens (vLLM's
    # offloading connector's names): a request body's, so anything else
    # than a whole number of 0 or more is ignored, and said once
    a, b = engines(pool.sock, 2)
    try:
        qs = [[(j * (13 + 2 * i)) % 900 + 3 for j in range(200)] for i in range(3)]
        ra = a.call(op="run", prompts=[PROMPT] + qs, max_tokens=2,
                    params_each=[{"max_offload_tokens": 5 * BLOCK + 3}, None, None, None])
        assert ra["cached"] == [0, 0, 0, 0]
        assert a.call(op="stats")["worker"]["saved_blocks"] == 5 + 3 * 12  # PROMPT's first 5
        assert pool.stats()["pages_cached"] == 41
        cases = [({"max_load_tokens": 0}, 0), ({"max_load_tokens": 4 * BLOCK + 7}, 4 * BLOCK),
                 ({"max_load_tokens": 2 ** 62}, 12 * BLOCK)]
        for q, (params, want) in zip(qs, cases):
            rb = b.call(op="run", prompts=[q + [901]], max_tokens=2, params=params)
            assert rb.get("cached") == [want], (params, rb)
        for bad in ("12", -1, True, 1.5, [1], {"x": 1}):
            rb = b.call(op="run", prompts=[PROMPT + [903]], max_tokens=2,
                        params={"max_load_tokens": bad, "max_offload_tokens": bad})
            assert len(rb["outputs"][0]) == 2
        assert b.warnings("\"max_load_tokens\" is") == 1, b.stderr()
        assert b.warnings("\"max_offload_tokens\" is") == 1, b.stderr()
        assert leased(pool) == 0
    finally:
        a.close()
        b.close()


def test_a_worker_killed_during_a_save_off_the_step_leaves_no_lease(pool):
    a = Engine(pool.sock, "--worker-process", env={"KVPOOL_TEST_HANG_SAVE": "1"}).ready()
    b = None
    try:
        r = a.call(op="run", prompts=[PROMPT], max_tokens=2)
        assert "hung" in r, r  # the saver copied 12 fresh pages and never publishes
        clients = {c["pid"]: c for c in kvpool.Client(pool.sock).list_clients()}
        assert clients[r["hung"]]["leases"] == 12
        a.call(op="kill_worker")
        pool.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                      "the killed worker's pages to be freed")
        assert pool.stats()["pages_cached"] == 0  # nothing half-saved is served
        b = Engine(pool.sock).ready()
        rb = b.call(op="run", prompts=[PROMPT], max_tokens=2)
        assert rb["cached"] == [0] and b.call(op="stats")["worker"]["saved_blocks"] == 12
    finally:
        a.close()
        if b is not None:
            b.close()


def test_a_full_pool_leaves_the_engine_serving():
    # 16 pages of 4 KiB: a 62-block prompt cannot be stored
    with running(["--key-seed", SEED, "--pool-size", "64K", "--slab-size", "64K"]) as d:
        a = Engine(d.sock).ready()
        try:
            long = [(i * 13) % 900 + 5 for i in range(1000)]
            for n in range(3):
                r = a.call(op="run", prompts=[long[:1000 - n]], max_tokens=2)
                assert len(r["outputs"][0]) == 2
            s = a.call(op="stats")["worker"]
            assert s["save_skipped"] >= 62 and s.get("saved_blocks", 0) < 62
            assert a.warnings("no room") == 1, a.stderr()
            # short prompts still fit, and are saved
            a.call(op="run", prompts=[PROMPT], max_tokens=2)
            assert a.call(op="stats")["worker"].get("saved_blocks", 0) >= 12
        finally:
            a.close()


@pytest.mark.parametrize("async_save", [True, False])
def test_blocks_after_a_failed_save_are_skipped_and_counted(async_save):
    # 16 pages of 4 KiB; a prompt prefilled in two chunks of the engine's
    # 1024 tokens: the first chunk's 64 blocks find room for 16 (saved by
    # the saving thread, async_save; none in the step, whose saves are all
    # or none), the second's 15 would, but cannot chain to a parent the
    # pool lacks. What is not saved is counted.
    with running(["--key-seed", SEED, "--pool-size", "64K", "--slab-size", "64K"]) as d:
        a = Engine(d.sock, extra={"async_save": async_save}).ready()
        try:
            r = a.call(op="run", prompts=[[(i * 13) % 900 + 5 for i in range(1264)]],
                       max_tokens=2)
            assert len(r["outputs"][0]) == 2
            s = a.call(op="stats")["worker"]
            saved = 16 if async_save else 0
            assert s["save_skipped"] == 79 - saved and s.get("saved_blocks", 0) == saved, s
            assert d.stats()["pages_cached"] == saved and leased(d) == 0
        finally:
            a.close()


def test_a_stopped_daemon_leaves_the_engine_serving_until_it_returns():
    keep = tempfile.mkdtemp(prefix="kvpool-vllm-sock-")
    d = Daemon(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M"],
               sock=os.path.join(keep, "kvpool.sock"))
    a = Engine(d.sock).ready()
    try:
        base = a.call(op="run", prompts=[PROMPT], max_tokens=4)
        d.stop()
        other = [(i * 3) % 900 + 5 for i in range(100)]
        for p in (PROMPT, other, PROMPT):
            r = a.call(op="run", prompts=[p], max_tokens=4)
            assert len(r["outputs"][0]) == 4
        assert r["outputs"] == base["outputs"]  # served without the cache, same answer
        gone = sum(a.warnings(w) for w in ("went away", "cannot use", "closed the connection"))
        assert 1 <= gone <= 2, a.stderr()
        # it comes back on the same socket: the connector uses it again
        sock, old = d.sock, d
        d = Daemon(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M"], sock=sock)
        old.discard()
        time.sleep(0.3)
        a.call(op="run", prompts=[other], max_tokens=2)
        assert d.stats()["pages_cached"] == 6
        assert "connected to kvpoold" in a.stderr()
        d.stop()
    finally:
        a.close()
        d.discard()
        subprocess.run(["rm", "-rf", keep], check=False)


@pytest.mark.parametrize("heads,k,v,flat,split", [
    (2, 16, 16, False, False), (2, 16, 8, False, False), (1, 24, 0, False, False),
    (1, 24, 0, True, False), (2, 16, 16, False, True)])
def test_the_torch_copy_path_moves_the_bytes_the_c_one_does(pool, heads, k, v, flat, split):
    # the path device tensors take (over the host pool registered with
    # CUDA), run here on CPU tensors against copy_blocks: K and V alike, V
    # smaller than K, MLA's latents alone (with a head axis or without), and
    # vLLM CPU_ATTN's blocks (each head's tokens' K rows, then their V rows)
    import torch
    from kvpool.vllm import Identity
    from kvpool.vllm.copier import Copier
    g = kvpool.Geometry(layers=2, kv_heads=heads, head_dim=k, block_tokens=16,
                        dtype=kvpool.DType.F16, model="test/copier%d-%d" % (k, v),
                        head_dim_v=v if v else kvpool.K_ONLY)
    ns = "copier%d-%d" % (k, v)
    ident = Identity(ns, g, kvpool.Scheme.VLLM_SHA256, SEED, ("l0", "l1"), "sha256")
    raw = torch.empty(2, 8, heads, 16, k + v, dtype=torch.float16)
    raw.view(torch.int16).random_()
    shaped = (lambda t: t[:, 0]) if flat else (lambda t: t)
    kv = [shaped(raw[0]), shaped(raw[1])]
    back_raw = torch.zeros_like(raw)
    back = [shaped(back_raw[0]), shaped(back_raw[1])]
    with kvpool.Client(pool.sock, ns, g, key_scheme=kvpool.Scheme.VLLM_SHA256,
                       key_seed=SEED) as c:
        view = c.view()
        pages = c.alloc(4)
        pairs = list(zip([5, 0, 7, 2], pages))
        by_c = Copier(ident, kv, 2, kv_split=split)
        by_torch = Copier(ident, kv, 1, use_torch=True, kv_split=split)
        assert by_torch.use_torch and not by_c.use_torch
        by_c.copy(c, view, True, pairs)
        want = [c.page_tensor(p).clone() for p in pages]
        for p in pages:
            c.page_tensor(p).zero_()
        by_torch.copy(c, view, True, pairs)
        for p, w in zip(pages, want):
            assert torch.equal(c.page_tensor(p).view(torch.int16), w.view(torch.int16))
        for b, p in pairs:  # the page is block b of every layer: K's heads, then V's
            page = c.page_tensor(p).view(torch.int16).reshape(2, -1)
            for l in range(2):
                cells = raw[l, b].view(torch.int16)
                if split:
                    cells = cells.reshape(heads, 2, 16, k)
                    kv_l = torch.cat([cells[:, 0].reshape(-1), cells[:, 1].reshape(-1)])
                else:
                    kv_l = torch.cat([cells[..., :k].reshape(-1), cells[..., k:].reshape(-1)])
                assert torch.equal(page[l], kv_l)
        # one KV cache group's layers alone (vLLM's hybrid allocator): the
        # other layers of the pages are left as they are
        for by in (by_c, by_torch):
            for p in pages:
                c.page_tensor(p).zero_()
            by.copy(c, view, True, pairs, only=[1])
            for p, w in zip(pages, want):
                page = c.page_tensor(p).view(torch.int16).reshape(2, -1)
                assert not page[0].any()
                assert torch.equal(page[1], w.view(torch.int16).reshape(2, -1)[1])
            for p, w in zip(pages, want):
                c.page_tensor(p).copy_(w)
        Copier(ident, back, 1, use_torch=True, kv_split=split).copy(c, view, False, pairs)
        for b, _ in pairs:
            assert torch.equal(back_raw[:, b].view(torch.int16), raw[:, b].view(torch.int16))
        back_raw.zero_()
        by_c_back = Copier(ident, back, 2, kv_split=split)
        by_c_back.copy(c, view, False, pairs)
        for b, _ in pairs:
            assert torch.equal(back_raw[:, b].view(torch.int16), raw[:, b].view(torch.int16))
        with pytest.raises(ValueError, match="block 8"):
            by_c.copy(c, view, False, [(8, pages[0])])
        c.release(pages)
        del view, page


def test_kvpool_events_for_an_engine_are_the_events_vllm_sends(tmp_path):
    """A router that reads vLLM's KV events reads kvpool's alike: for the
    blocks an engine saves, kvpoold's BlockStored events carry the block
    hashes, parents and token ids that the engine's own scheduler publishes
    for the same blocks (vLLM's publisher, its replay socket too)."""
    from test_events import Sub, dealer_replay, events_of
    kvp, vev = "ipc://%s/kvpool-events" % tmp_path, "ipc://%s/vllm-events" % tmp_path
    with running(["--key-seed", SEED, "--pool-size", "16M", "--slab-size", "1M",
                  "--kv-events", kvp, "--kv-events-replay", kvp + "-replay"]) as d:
        (a,) = engines(d.sock, 1, "--kv-events", vev)
        try:
            theirs = Sub(vev, vev + "-replay")
            ours = Sub(kvp, kvp + "-replay")
            r = a.call(op="run", prompts=[PROMPT], max_tokens=4)
            assert r["cached"] == [0]
            n = d.wait_for(lambda st: st["events"]["queued_bytes"] == 0,
                           "kvpool's events sent")["events"]["batches"]
            mine = events_of(ours.collect(n - 1))
            # vLLM publishes a batch per step that has events: ask its replay
            got = dealer_replay(theirs.ctx, vev + "-replay", 0)
            theirs_evs = [e for _, _, p in got for e in __import__("msgpack").unpackb(p)[1]]
            ours.close()
            theirs.close()
        finally:
            a.close()
    stored = [e for e in theirs_evs if e["type"] == "BlockStored"]
    assert stored and all(e["medium"] == "GPU" for e in stored)
    v_hashes = [h for e in stored for h in e["block_hashes"]][:12]
    v_tokens = [t for e in stored for t in e["token_ids"]][:12 * BLOCK]
    assert stored[0]["parent_block_hash"] is None
    (kind, medium, hashes, parent, tokens), = mine
    assert (kind, medium, parent) == ("stored", "CPU", None)
    assert hashes == v_hashes and tokens == v_tokens == PROMPT[:12 * BLOCK]


def test_the_settings_docs_vllm_md_lists_are_the_ones_the_connector_checks():
    from kvpool.vllm.settings import SETTINGS, check_settings, settings_table
    with open(os.path.join(TOP, "docs", "vllm.md")) as f:
        assert settings_table() in f.read(), "docs/vllm.md's table differs from SETTINGS"
    got = check_settings({"retry_seconds": 1, "priority": 2,
                          "async_save": "false", "copy_cpus": "1,3-4"})
    assert got["retry_seconds"] == 1.0 and got["priority"] == 2
    assert got["async_save"] is False and got["async_load_blocks"] is None  # measured
    assert set(got) == {s.name for s in SETTINGS}
    for bad, says in (({"priorty": 2}, 'unknown key "priorty" (did you mean "priority"?)'),
                      ({"priority": 3}, '"priority": 3 is not a whole number from 0 to 2'),
                      ({"priority": True}, '"priority": True is not a whole number'),
                      ({"copy_threads": 1.5}, '"copy_threads": 1.5 is not a whole number'),
                      ({"retry_seconds": "5"}, '"retry_seconds": \'5\' is not a number'),
                      ({"async_save": "maybe"}, '"async_save": \'maybe\' is not true or false'),
                      ({"copy_cpus": "2-1"}, '"copy_cpus": \'2-1\' is not a CPU list'),
                      ({"socket": ""}, '"socket": \'\' is not a non-empty string'),
                      ({"save_queue_blocks": 0}, '"save_queue_blocks": 0 is not a whole')):
        with pytest.raises(ValueError) as e:
            check_settings(bad)
        assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_settings_mistake_is_found_before_the_model_loads():
    """A typo in kv_connector_extra_config stopped the engine only once the
    model had loaded (a crash loop that loads it each time, on
    Kubernetes). Where vLLM gives the connector its settings first, while
    it makes its config (requires_piecewise_for_cudagraph(), on GPUs with
    full CUDA graphs), they are checked there; elsewhere
    `python -m kvpool.vllm check-config` checks a config without an
    engine, the shipped manifests' among them."""
    import subprocess
    import yaml
    from kvpool.vllm import KVPoolConnector
    with pytest.raises(ValueError, match='did you mean "priority"'):
        KVPoolConnector.requires_piecewise_for_cudagraph({"priorty": 1})
    assert KVPoolConnector.requires_piecewise_for_cudagraph({}) is False
    # layer-by-layer loads run between the layers: not in a full graph
    assert KVPoolConnector.requires_piecewise_for_cudagraph({"layerwise_load": True}) is True

    def check(cfg):
        return subprocess.run([sys.executable, "-m", "kvpool.vllm", "check-config", cfg],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONPATH=os.path.join(TOP, "python")))
    kdir = os.path.join(TOP, "contrib", "kubernetes")
    shipped = []
    for name in ("vllm.yaml", "vllm-pd.yaml"):
        with open(os.path.join(kdir, name)) as f:
            for d in yaml.safe_load_all(f):
                for c in (d or {}).get("spec", {}).get("template", {}).get(
                        "spec", {}).get("containers", []):
                    if "--kv-transfer-config" in c.get("args", []):
                        shipped.append(c["args"][c["args"].index("--kv-transfer-config") + 1])
    assert len(shipped) == 3
    for cfg in shipped:
        r = check(cfg)
        assert r.returncode == 0 and "priority = 1" in r.stdout, r.stdout + r.stderr
    bad = json.loads(shipped[0])
    bad["kv_connector_extra_config"]["priorty"] = 2
    r = check(json.dumps(bad))
    assert r.returncode == 1 and 'did you mean "priority"' in r.stderr, r.stderr
    r = check('{"pd_wait_seconds": -1}')  # the extra config alone
    assert r.returncode == 1 and '"pd_wait_seconds": -1' in r.stderr, r.stderr
    r = check('{"kv_connector": "KVPoolConnector", "kv_connector_module_path": "kvpool.vllm", '
              '"kv_role": "kv_both"}')
    assert r.returncode == 0 and "kv_load_failure_policy" in r.stderr, r.stderr
    r = check("{'single': 'quotes'}")
    assert r.returncode == 1 and "not JSON" in r.stderr, r.stderr
