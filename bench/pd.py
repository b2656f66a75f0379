# SPDX-License-Identifier: MIT
"""pd.py - what prefill/decode disaggregation through kvpool does for the
decoding streams and what its handoff costs, in real vLLM engines, for
`make bench-pd` (bench/run-pd.sh).

usage: pd.py --socket PATH --kvpoold EXE --work DIR [--config NAME]...
             [--length N]... [--reps N] [--no-net] [--no-local]
             [--peers-site DIR]
       pd.py report RAW   (the Markdown tables of a run's output: a JSON
                           line of the goals' figures, then them)

kvpool's three configurations on this machine's two cores, started one
after the other (each waits until the one before answers) and then all
kept, so that the repetitions interleave (the order rotated each time,
PAUSE_S between two: vLLM's model runner spins for a second after its
last step):

  alone  one `vllm serve` without a connector, its model runner on core 0,
         asked directly
  both   two `vllm serve` with the connector (kv_both) on one kvpoold,
         their model runners on cores 0 and 1, behind vllm-router in its
         plain mode (round robin): each engine prefills and decodes
  pd     a prefill engine (kv_producer, core 0) and a decode engine
         (kv_consumer, core 1) on that kvpoold, behind vllm-router
         --vllm-pd-disaggregation: the prompt's blocks go through the pool

Then, in a second phase once those are stopped (an engine takes about
2 GB, its API server, engine core and model runner together: the eleven
of both phases would not fit beside each other in this machine's 24 GB),
vLLM's own P/D connectors that run here (bench/pd_peers.py), started and
kept the same way, each a prefill engine on core 0 and a decode engine on
core 1 behind vllm-router --vllm-pd-disaggregation:

  nixl            NixlConnector (NIXL from --peers-site,
                  bench/pd-peers-site.sh) as vLLM ships it: its worker
                  moves the prefill engine's forward pass to core 1
  nixl-keep-bind  the same, each forward pass kept on its own core
  example         ExampleConnector: files in a folder both engines share

The connectors that cannot run here (pd_peers.FAILS: mooncake, p2p-nccl,
lmcache) are "failed" lines with their engines' errors, as is a
configuration whose engines do not start.

Per repetition and long-prompt length (2,048 and 8,000 tokens: the
engines' --max-model-len is 8,192), on each configuration: 8 streams of
64-token prompts decode (greedy, ignore_eos, streamed through the front:
the router, or the engine alone); once each has its first token, a long
prompt of new random words is sent through the same front. Every gap
between two tokens of a decoding stream within WINDOW_S[length] of the
long request's send is kept (the same span for every configuration, longer
than the long prefill in the slowest; a chunk of k tokens, or events read
less than MERGE_S apart, counts as k gaps of its wait over k), with the
long request's time to first token. The
streams are cut at the window's end (the connection closed: vLLM aborts
them) and the engines left idle before the next.

The handoff, on pd, per repetition and length: the prefill engine asked
directly for one token with kv_transfer_params {"do_remote_decode": true}
(as the router asks it); once kvpoold holds the blocks, the decode
engine's time to first token for the request with the params the answer
carried (it loads the blocks from the pool: "load"), then the same prompt
again without params (vLLM's own prefix cache: "hit"), each after
PAUSE_S of quiet. The same for each peer: the prefill engine asked with
those params, the decode engine with the params its answer carried
(NixlConnector's: where to read the blocks; ExampleConnector's answer
carries none, its decode engine finds the files by the prompt's tokens),
no wait for the blocks (NixlConnector's prefill engine holds them until
they are read; ExampleConnector's are written before the engine answers).
What the load took from the transfer is the decode engine's
vllm:prompt_tokens_by_source_total{source="external_kv_transfer"} across
it; then both engines are asked the prompt for 2 tokens with their
logprobs (their own prefix caches: on the decode engine, the blocks it
loaded), which must agree with each other and with the load's tokens.

Across machines (examples/machines.py: network namespaces, each link
shaped by tc tbf to 10 and then 1 Gbit/s, no latency added: this kernel
has no netem), the handoff again: the prefill engine on machine a, the
decode engine on b, each machine with its own kvpoold on one Redis Cluster
on a third (a's writing through); the load waits until a's kvpoold has put
the blocks to Redis, and b's fetches them during the decode engine's
ACQUIRE. The restore rate: the bytes b's kvpoold received over (load -
hit), and the daemon's own measured bandwidth.

Prints "phase n=N configs=C,..." as each phase starts,
"ttft config=C len=L rep=R ms=T [loaded=N of=M] [xfer=X prompt=P same=S
lp=D]" (on pd: the blocks its decode engine loaded in the repetition, of
those it could; on every P/D configuration: the decode engine's prompt
tokens from the transfer, of all its prompt tokens in the repetition, and
whether the long prompt's answer and the decode engine's own for it
matched the prefill engine's, D the largest logprob difference),
"gap config=C len=L rep=R ms=G",
"window config=C len=L rep=R s=W short=N idle_s=S" (N streams that ended
before the window did; S the wait for the engines to be idle after),
"handoff where=W config=C len=L rep=R prefill_ms= load_ms= hit_ms= blocks=
xfer= prompt= same= lp= hit_cached= [loaded= load_errors=] bytes_in=
bandwidth=", "metrics config=C engine=E ..." (the counters at the end),
"log config=C engine=E LINE" (kvpool's connector's lines, the warnings and
errors the engines logged once they served) and "failed config=C
error=..." for a configuration that could not start or run (its traceback
on stderr).
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import vllm_engines as ve  # noqa: E402
import machines  # noqa: E402
import pd_peers  # noqa: E402 (bench/, this script's folder)
from engines import error_of  # noqa: E402

DECODERS, DECODE_PROMPT = 8, 64
LENGTHS = (2048, 8000)
# the decoders' gaps are taken over this long from the long request's send,
# the same for every configuration: longer than the long request's time to
# first token in the slowest (vLLM alone with 8 decoding)
WINDOW_S = {2048: 1.0, 8000: 5.0}
PAUSE_S = 1.5
# a decoding stream's first token comes within this (a 64-token prompt: well
# under a second here, tens of seconds on a loaded machine), or the
# repetition fails
FIRST_TOKEN_S = 120
# a stream's events read less than this apart count as one chunk of their
# tokens (see stream())
MERGE_S = 0.001
CONFIGS = ("alone", "both", "pd")
# vLLM's own P/D connectors that run here (bench/pd_peers.py), in a second
# phase; PD: the configurations of a prefill and a decode engine
PEERS = ("nixl", "nixl-keep-bind", "example")
PD = ("pd",) + PEERS
ALL = CONFIGS + PEERS + tuple(pd_peers.FAILS)
LABELS = {"alone": "1 engine alone",
          "both": "2 engines each prefilling and decoding (kv_both, the router's plain mode)",
          "pd": "1 prefill + 1 decode engine through kvpool (P/D)",
          "nixl": "P/D through vLLM's NixlConnector, as shipped (both forward passes on core 1)",
          "nixl-keep-bind": "P/D through vLLM's NixlConnector, each forward pass on its core",
          "example": "P/D through vLLM's ExampleConnector (files)",
          "mooncake": "P/D through vLLM's MooncakeConnector",
          "p2p-nccl": "P/D through vLLM's P2pNcclConnector",
          "lmcache": "P/D through LMCache (LMCacheConnectorV1, enable_pd)"}
# the decode engine's prompt tokens that came from a KV transfer (any
# connector's), and all its prompt tokens
XFER = ("prompt_tokens_by_source_total", 'source="external_kv_transfer"')
PROMPT = ("prompt_tokens_total", None)
# a logprob the decode engine computes on loaded blocks may differ from the
# prefill engine's on its own by bf16 rounding (1/128 at 4 to 8)
LP_TOLERANCE = 0.02
NETS = (10, 1)  # Gbit/s of the shaped links
# vLLM refuses a prompt of more than 5 characters a token of its
# --max-model-len (8,192: 40,960 characters), before tokenizing it: the
# prompts are words of the model's first SHORT_WORDS ("w0".."w999", 4.9
# characters a token with the space), so that 8,000 of them pass
SHORT_WORDS = 1000
# what vllm-router sends a prefill engine (tests/python/test_pd.py)
ROUTER = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
          "remote_block_ids": None, "remote_host": None, "remote_port": None}


class Config:
    """The engines of one configuration and the front a client asks; a P/D
    configuration's engines are its prefill and decode engine."""

    def __init__(self, name, engines, front):
        self.name, self.engines, self.front = name, engines, front
        self.pd = name in PD

    def stop(self):
        for e in ([self.front] if self.front not in self.engines else []) + self.engines:
            e.stop()


def start_engines(engines, timeout=900):
    """ve.start(), raising with the first error the engines' logs name
    (bench/engines.py's error_of) when one does not start."""
    try:
        ve.start(engines, timeout)
    except Exception as ex:  # noqa: BLE001 (re-raised with the root cause)
        traceback.print_exception(type(ex), ex, ex.__traceback__, file=sys.stderr)
        raise RuntimeError(error_of("".join(e.log() for e in engines) + "\n" + str(ex))) \
            from None


def start_pd(name, model, work, pk, dk):
    """A prefill engine (Engine kwargs pk) and a decode engine (dk) behind
    vllm-router --vllm-pd-disaggregation."""
    p = ve.Engine(model, os.path.join(work, name + "-prefill.log"), **pk)
    d = ve.Engine(model, os.path.join(work, name + "-decode.log"), **dk)
    start_engines([p, d])
    try:
        r = ve.start([ve.Router([p], [d], os.path.join(work, name + "-router.log"))], 120)[0]
    except BaseException:
        p.kill()
        d.kill()
        raise
    return Config(name, [p, d], r)


def start_config(name, a, model):
    """A configuration's engines, started and answering; raises (having
    killed them) when one does not start."""
    work = a.work
    if name == "alone":
        e = ve.Engine(model, os.path.join(work, "alone.log"), cpus="0")
        start_engines([e])
        return Config(name, [e], e)
    if name == "both":
        es = [ve.Engine(model, os.path.join(work, "both%d.log" % i), kvpool_socket=a.socket,
                        cpus=str(i)) for i in range(2)]
        start_engines(es)
        try:
            r = ve.start([ve.Router([], [], os.path.join(work, "both-router.log"),
                                    workers=es)], 120)[0]
        except BaseException:
            for e in es:
                e.kill()
            raise
        return Config(name, es, r)
    if name == "pd":
        return start_pd(name, model, work,
                        dict(kvpool_socket=a.socket, cpus="0", role="kv_producer"),
                        dict(kvpool_socket=a.socket, cpus="1", role="kv_consumer"))
    if name.startswith("nixl") and not a.peers_site:
        raise RuntimeError("NIXL is not installed here (--peers-site: bench/pd-peers-site.sh "
                           "installs it)")
    pk, dk = pd_peers.peer_engines(model, work, a.peers_site)[name]
    return start_pd(name, model, work, pk, dk)


def words(n, rng):
    """A prompt of n random short words, one token each."""
    return " ".join("w%d" % rng.randrange(SHORT_WORDS) for _ in range(n))


def failed(out, name, ex):
    if isinstance(ex, BaseException):
        traceback.print_exception(type(ex), ex, ex.__traceback__, file=sys.stderr)
    why = str(ex) or repr(ex)
    if len(why) > 400:  # what failed, and the end of what it said
        why = why[:150] + " ... " + why[-250:]
    print("failed config=%s error=%s" % (name, json.dumps(why)), file=out, flush=True)


# --- talking to the engines -------------------------------------------------------

def stream(front, prompt, max_tokens, times, deadline, on_first, conns):
    """A greedy streamed completion through front, read until it ends or
    until deadline[0] (a time.monotonic(), set by another thread) has
    passed: then the connection is closed, which makes vLLM abort the
    request. times gets (time, tokens) of each chunk with tokens; conns its
    connection (another thread may shut it down: the read then ends)."""
    req = {"model": front.model, "prompt": prompt, "max_tokens": max_tokens,
           "temperature": 0, "ignore_eos": True, "stream": True, "return_token_ids": True}
    c = http.client.HTTPConnection(front.host, front.port, timeout=600)
    conns.append(c)
    try:
        c.request("POST", "/v1/completions", json.dumps(req),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError("POST /v1/completions: %d %s" % (r.status, r.read()[:500]))
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            now = time.monotonic()
            for ch in json.loads(line[6:]).get("choices") or []:
                got = ch.get("token_ids") or []
                if not got:
                    continue
                if not times:
                    on_first()
                if times and now - times[-1][0] < MERGE_S:
                    # events read back to back (the server or this reader
                    # fell behind): one chunk, its tokens sharing its gap
                    times[-1] = (now, times[-1][1] + len(got))
                else:
                    times.append((now, len(got)))
            if deadline[0] is not None and now > deadline[0]:
                break
    finally:
        c.close()


def metric(eng, name, label=None):
    """The sum of vLLM's metric vllm:<name> over its children (/metrics),
    those with label (e.g. 'source="external_kv_transfer"') only if given."""
    c = http.client.HTTPConnection(eng.host, eng.port, timeout=60)
    try:  # not eng.metrics(): its 5 s are too short for a loaded machine
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    v = 0.0
    for line in text.splitlines():
        if (line.startswith("vllm:%s{" % name) or line.startswith("vllm:%s " % name)) and \
                (label is None or label in line):
            v += float(line.rsplit(" ", 1)[1])
    return v


def wait_idle(engines, timeout=120.0):
    """Until no engine runs or queues a request (the streams cut at the
    window's end aborted); the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if all(metric(e, "num_requests_running") + metric(e, "num_requests_waiting") == 0
               for e in engines):
            return time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError("engines still busy %d s after the streams were cut" % timeout)


def counter(eng, name, label=None, least=None, timeout=10.0):
    """metric(eng, name, label), once at least least (the API server
    counts what the engine core reports after a step), else the last seen."""
    end = time.monotonic() + timeout
    while True:
        v = metric(eng, name, label)
        if least is None or v >= least or time.monotonic() > end:
            return v
        time.sleep(0.1)


def kvpool_counter(eng, name, least=None, timeout=10.0):
    """vllm:kvpool_<name>_total (counter())."""
    return counter(eng, "kvpool_%s_total" % name, None, least, timeout)


def answer(eng, prompt, n=2):
    """eng's own greedy answer of n tokens to prompt (not streamed, no
    kv_transfer_params): its tokens and their logprobs."""
    status, body = eng.post("/v1/completions", {
        "model": eng.model, "prompt": prompt, "max_tokens": n, "temperature": 0,
        "ignore_eos": True, "logprobs": 1, "return_token_ids": True})
    if status != 200:
        raise RuntimeError("POST /v1/completions: %d %s" % (status, body[:300]))
    ch = json.loads(body)["choices"][0]
    return ch["token_ids"], ch["logprobs"]["token_logprobs"]


def check(p, d, prompt, tokens):
    """Whether the decode engine d computes on the blocks it loaded for
    prompt what the prefill engine p computes on its own: both asked for 2
    tokens (each hits its own prefix cache), their tokens and the ones the
    decode engine answered with (tokens, through the router or asked
    directly) the same, their logprobs within LP_TOLERANCE. Returns (1 or
    0, the largest logprob difference)."""
    pt, plp = answer(p, prompt)
    dt, dlp = answer(d, prompt)
    lp = max(abs(x - y) for x, y in zip(plp, dlp))
    return int(pt == dt and list(tokens) == dt[:len(tokens)] and len(tokens) > 0 and
               lp <= LP_TOLERANCE), lp


def pool_stats(sock):
    import kvpool
    with kvpool.Client(sock) as c:
        return c.stats()


def wait_pool(sock, cond, what, timeout=30.0):
    end = time.monotonic() + timeout
    while True:
        st = pool_stats(sock)
        if cond(st):
            return st
        if time.monotonic() > end:
            raise RuntimeError("%s did not happen in %d s" % (what, timeout))
        time.sleep(0.01)


# --- the decoders' gaps while a long prompt arrives ----------------------------------

def with_decoders(cfg, rng, length):
    """DECODERS streams through cfg's front, then a long prompt of length
    new words: its answer, the prompt, the streams' gaps within the
    window from its send, how many streams ended before the window did,
    and the wait for the engines to be idle after."""
    window = WINDOW_S[length]
    times = [[] for _ in range(DECODERS)]
    deadline = [None]
    started = threading.Barrier(DECODERS + 1, timeout=FIRST_TOKEN_S)
    errors, conns = [], []
    # enough tokens to outlast the window at 1 ms a token (they take 4 or
    # more here), beside the time the streams take to start
    max_tokens = min(int((window + 2.0) * 1000), 8192 - DECODE_PROMPT - 8)

    def decode(i):
        try:
            stream(cfg.front, words(DECODE_PROMPT, rng), max_tokens, times[i],
                   deadline, started.wait, conns)
        except Exception as ex:  # noqa: BLE001 (reported below)
            errors.append(ex)
            started.abort()
    ts = [threading.Thread(target=decode, args=(i,)) for i in range(DECODERS)]
    for t in ts:
        t.start()
    try:
        started.wait()
    except threading.BrokenBarrierError:
        waiting, why = sum(1 for tt in times if not tt), errors[:1]
        for c in conns:  # the streams still waiting end now, not at their timeout
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except (AttributeError, OSError):
                pass
        for t in ts:
            t.join()
        if why:
            raise RuntimeError("a decoding stream failed: %s" % why[0]) from None
        raise RuntimeError("%d of the %d decoding streams had no first token in %d s"
                           % (waiting, DECODERS, FIRST_TOKEN_S)) from None
    time.sleep(0.1)  # into the decode
    long_prompt = words(length, rng)
    t0 = time.monotonic()
    t1 = t0 + window
    deadline[0] = t1
    got = cfg.front.complete(long_prompt, 2)
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError("a decoding stream failed: %s" % errors[0])
    idle = wait_idle(cfg.engines)
    gaps = []
    short = 0
    for tt in times:
        # a chunk of k tokens after a gap g: k tokens, each g / k after the
        # last (the stream's pace, whatever the server's chunking)
        for (a, _), (b, k) in zip(tt, tt[1:]):
            if b >= t0 and a <= t1:
                gaps += [(b - a) / k] * k
        if not tt or tt[-1][0] < t1:
            short += 1
    return got, long_prompt, gaps, short, idle


def gaps_rep(cfg, r, length, rng, out):
    """One repetition on cfg. On pd, with the blocks its decode engine
    loaded against those it could (vLLM leaves the last token of each
    prompt to compute): fewer, and it computed the rest itself. On every
    P/D configuration, with its decode engine's prompt tokens from the
    transfer against all of them, and check() on the long prompt."""
    d = cfg.engines[1] if cfg.pd else None
    if cfg.name == "pd":
        could = (length - 1) // ve.BLOCK + DECODERS * ((DECODE_PROMPT - 1) // ve.BLOCK)
        was = kvpool_counter(d, "loaded_blocks")
    if d is not None:
        xfer0, prompt0 = metric(d, *XFER), metric(d, *PROMPT)
    got, long_prompt, gaps, short, idle = with_decoders(cfg, rng, length)
    loaded = ""
    if cfg.name == "pd":
        loaded = " loaded=%d of=%d" % (
            kvpool_counter(d, "loaded_blocks", was + could, timeout=3) - was, could)
    if d is not None:
        prompt = counter(d, *PROMPT, least=prompt0 + DECODERS * DECODE_PROMPT + length,
                         timeout=3) - prompt0
        same, lp = check(cfg.engines[0], d, long_prompt, got.tokens)
        loaded += " xfer=%d prompt=%d same=%d lp=%.4f" % (metric(d, *XFER) - xfer0, prompt,
                                                           same, lp)
    print("ttft config=%s len=%d rep=%d ms=%.2f%s" % (cfg.name, length, r, got.ttft * 1e3,
                                                       loaded), file=out)
    print("window config=%s len=%d rep=%d s=%.2f short=%d idle_s=%.2f"
          % (cfg.name, length, r, WINDOW_S[length], short, idle), file=out)
    for g in gaps:
        print("gap config=%s len=%d rep=%d ms=%.3f" % (cfg.name, length, r, g * 1e3),
              file=out)
    out.flush()


# --- the handoff: the decode engine's load against its own prefix-cache hit ---------

def handoff(p, d, prompt, saved, fetched=None, kvpool=True):
    """The prefill engine p's one token with do_remote_decode, then the
    decode engine d's time to first token with the params of p's answer
    (the load) and without them (its own prefix-cache hit), then check().
    saved(blocks): waits until the decode side may find the blocks;
    fetched(): the decode machine's kvpoold's remote stats, or None on one
    machine; kvpool: the engines run kvpool's connector (its counters)."""
    t0 = time.monotonic()
    status, body = p.post("/v1/completions", {
        "model": p.model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
        "kv_transfer_params": ROUTER})
    prefill = time.monotonic() - t0
    if status != 200:
        raise RuntimeError("the prefill engine answered %d: %s" % (status, body[:300]))
    params = json.loads(body).get("kv_transfer_params")
    if kvpool:
        blocks = params["kvpool"]["blocks"]
    elif params and params.get("remote_block_ids"):  # NixlConnector's: one list a group
        blocks = len(params["remote_block_ids"][0])
    else:  # ExampleConnector's answer carries none: the prompt's full blocks
        blocks = (len(prompt.split()) - 1) // ve.BLOCK
    saved(blocks)
    if kvpool:
        loaded0 = kvpool_counter(d, "loaded_blocks")
        errors0 = kvpool_counter(d, "load_errors")
    xfer0 = metric(d, *XFER)
    time.sleep(PAUSE_S)
    before = fetched() if fetched else None
    load = d.complete(prompt, 2, kv_transfer_params=params)
    after = fetched() if fetched else None
    xfer = counter(d, *XFER, least=xfer0 + 1, timeout=3) - xfer0
    time.sleep(PAUSE_S)
    hit = d.complete(prompt, 2)
    same, lp = check(p, d, prompt, load.tokens)
    res = dict(prefill_ms=prefill * 1e3, load_ms=load.ttft * 1e3, hit_ms=hit.ttft * 1e3,
               blocks=blocks, xfer=int(xfer), prompt=load.prompt_tokens, same=same, lp=lp,
               hit_cached=hit.cached_tokens)
    if kvpool:
        res.update(loaded=int(kvpool_counter(d, "loaded_blocks", loaded0 + blocks) - loaded0),
                   load_errors=int(kvpool_counter(d, "load_errors") - errors0))
    res.update(bytes_in=0, bandwidth=0)
    if before is not None:
        res.update(bytes_in=after["bytes_in"] - before["bytes_in"],
                   bandwidth=after["bandwidth"])
    return res


def print_handoff(out, where, config, length, r, res):
    print("handoff where=%s config=%s len=%d rep=%d %s" % (where, config, length, r, " ".join(
        "%s=%s" % (k, ("%.4f" % v) if isinstance(v, float) else v) for k, v in res.items())),
        file=out, flush=True)


def local_handoff(cfg, a, length, r, rng, out):
    """One handoff on a P/D configuration of this machine. The blocks: in
    the pool (pd: waited for, the connector saves after the answer); in
    the prefill engine's KV cache until read (NixlConnector); in files
    written before the answer (ExampleConnector: waited for all the same,
    a folder more in its store)."""
    p, d = cfg.engines
    if cfg.name == "pd":
        cached = pool_stats(a.socket)["pages_cached"]

        def saved(n):
            wait_pool(a.socket, lambda st: st["pages_cached"] >= cached + n,
                      "the prefill engine's %d blocks in the pool" % n)
    elif cfg.name == "example":
        store = os.path.join(a.work, "example-kv")
        folders = len(os.listdir(store))

        def saved(n):
            end = time.monotonic() + 30
            while len(os.listdir(store)) <= folders:
                if time.monotonic() > end:
                    raise RuntimeError("no new folder in %s 30 s after the prefill engine's "
                                       "answer" % store)
                time.sleep(0.01)
    else:
        def saved(n):
            pass
    res = handoff(p, d, words(length, rng), saved, kvpool=cfg.name == "pd")
    print_handoff(out, "local", cfg.name, length, r, res)


# --- runs ---------------------------------------------------------------------------

def log_key(line):
    """A log line without its process id and time (vLLM's, NIXL's and
    UCX's prefixes) and request ids, to count repeats by."""
    line = re.sub(r"\bcmpl-\S+", "cmpl-...", line)  # request ids
    m = re.match(r"^\((\w+) pid=\d+\) (\w+) [\d-]+ [\d:]+ (.*)$", line)
    if m:
        return "(%s) %s %s" % m.groups()
    return re.sub(r"^(\d{4}-\d\d-\d\d [\d:,.]+ |\[[\d.]+\] \[[^]]*\]\s+)", "", line)


def served_lines(e):
    """The warnings and errors e logged once it served (log_key()s)."""
    served, lines = False, []
    for line in e.log().splitlines():
        served = served or "Application startup complete" in line
        if served and re.search(r"\bWARN(ING)?\b|\bERROR\b", line):
            lines.append(log_key(line))
    return lines


def with_log(ex, engines):
    """ex's text, and the first warning or error the engines logged once
    they served (the transfer's trouble, if any, as their logs say it)."""
    traceback.print_exception(type(ex), ex, ex.__traceback__, file=sys.stderr)
    said = []
    for e in engines:
        lines = served_lines(e)
        said += ([x for x in lines if " ERROR " in x or "ERROR" in x.split()[:3]] or lines)[:1]
    return "%s%s" % (ex, "; the engines' logs: " + " / ".join(said) if said else "")


def print_logs(out, name, engines):
    """Each engine's lines of kvpool's connector, its errors and tracebacks,
    and the warnings it logged once it served (those of its start-up are
    about this machine, not the transfer), each once with how many times."""
    for i, e in enumerate(engines):
        seen, served = {}, False
        for line in e.log().splitlines():
            served = served or "Application startup complete" in line
            if "kvpool (" in line or " ERROR " in line or "Traceback" in line or \
                    (served and re.search(r"\bWARN(ING)?\b", line)):
                k = log_key(line)
                seen[k] = seen.get(k, 0) + 1
        for k, n in seen.items():
            print("log config=%s engine=%d %s" % (name, i, json.dumps(
                k[-400:] + (" (%d times)" % n if n > 1 else ""))), file=out, flush=True)


def print_counters(out, name, engines):
    """Each engine's counters: kvpool's connector's (vllm:kvpool_*_total),
    and on a P/D configuration the prompt tokens vLLM counted from a
    transfer (external_kv_transfer) and in all."""
    for i, e in enumerate(engines):
        m = []
        if name in ("both", "pd"):
            m += ["%s=%d" % (c, kvpool_counter(e, c)) for c in (
                "loaded_blocks", "saved_blocks", "load_errors", "pd_loads", "pd_prefills")]
        if name in PD:
            m += ["external_kv_transfer=%d" % metric(e, *XFER),
                  "prompt_tokens=%d" % metric(e, *PROMPT)]
        print("metrics config=%s engine=%d %s" % (name, i, " ".join(m)), file=out, flush=True)


def warm(cfg, rng):
    """Every engine has had traffic before, long prompts too (the first
    prefill of a length builds its kernels); a P/D configuration's through
    its router (a decode engine's first load also makes NixlConnector's
    handshake)."""
    if cfg.pd:
        for n in (DECODE_PROMPT,) + LENGTHS:
            cfg.front.complete(words(n, rng), 2)
        time.sleep(PAUSE_S)
        return
    for e in cfg.engines:
        for n in (DECODE_PROMPT,) + LENGTHS:
            e.complete(words(n, rng), 1)
        time.sleep(PAUSE_S)


def run_local(a, names, model, rng, out):
    """One phase: the configurations names started one after the other,
    kept, their repetitions interleaved, then each P/D configuration's
    handoffs."""
    print("phase n=%d configs=%s" % (a.phase, ",".join(names)), file=out, flush=True)
    a.phase += 1
    cfgs = {}
    for name in names:
        try:
            cfgs[name] = start_config(name, a, model)
            warm(cfgs[name], rng)
        except Exception as ex:  # noqa: BLE001 (the row says why)
            failed(out, name, ex)
            if name in cfgs:
                cfgs.pop(name).stop()
    try:
        for r in range(a.reps):
            for length in a.length or LENGTHS:
                order = list(cfgs)
                if not order:
                    break
                for name in order[r % len(order):] + order[:r % len(order)]:
                    try:
                        gaps_rep(cfgs[name], r, length, rng, out)
                    except Exception as ex:  # noqa: BLE001
                        failed(out, name, with_log(ex, cfgs[name].engines))
                        cfgs.pop(name).stop()
                    time.sleep(PAUSE_S)
            for name in [n for n in cfgs if n in PD]:
                for length in a.length or LENGTHS:
                    try:
                        local_handoff(cfgs[name], a, length, r, rng, out)
                    except Exception as ex:  # noqa: BLE001
                        failed(out, "handoff-" + name, with_log(ex, cfgs[name].engines))
        for name, cfg in cfgs.items():
            print_logs(out, name, cfg.engines)
            if name != "alone":
                print_counters(out, name, cfg.engines)
    finally:
        for cfg in cfgs.values():
            cfg.stop()


def start_remote_daemon(a, m, name, url, key, through):
    """kvpoold on machine name (detached, returns once it listens) with
    the remote tier on url: its socket."""
    sock = os.path.join(a.work, "kvpool-%s.sock" % name)
    log = os.path.join(a.work, "kvpoold-%s.log" % name)
    if "://" not in url:
        url = "redis-cluster://" + url
    argv = [a.kvpoold, "--socket", sock, "--pid-file", os.path.join(a.work, name + ".pid"),
            "--log-file", log, "--key-seed", "0", "--pool-size", "512M", "--slab-size", "64M",
            "--remote", url, "--remote-key-file", key] + \
        (["--remote-write", "through"] if through else [])
    r = subprocess.run(m.wrap(name, argv), capture_output=True, text=True)
    if r.returncode != 0:
        said = r.stderr
        if os.path.exists(log):
            with open(log) as f:
                said += f.read()
        raise RuntimeError("kvpoold on machine %s did not start: %s" % (name, said[-500:]))
    return sock


def stop_daemon(a, name):
    pidfile = os.path.join(a.work, name + ".pid")
    try:
        pid = int(open(pidfile).read())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, 15)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
    except ProcessLookupError:
        pass


def run_net(a, model, gbit, rng, out):
    """The handoff from machine a to machine b, their links at gbit."""
    name = "net-%g" % gbit
    why = machines.missing()
    if why:
        failed(out, name, why)
        return
    key = os.path.join(a.work, "remote.key")
    if not os.path.exists(key):
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(32))
    with machines.Machines(["a", "b"], gbit=gbit) as m:
        engines = []
        try:
            try:
                url = m.redis_cluster()
                sa = start_remote_daemon(a, m, "a", url, key, True)
                sb = start_remote_daemon(a, m, "b", url, key, False)
                p = ve.Engine(model, os.path.join(a.work, name + "-prefill.log"),
                              kvpool_socket=sa, cpus="0", role="kv_producer",
                              host=m.ip("a"), netns=m.ns["a"])
                d = ve.Engine(model, os.path.join(a.work, name + "-decode.log"),
                              kvpool_socket=sb, cpus="1", role="kv_consumer",
                              host=m.ip("b"), netns=m.ns["b"])
                engines = [p, d]
                ve.start(engines, 900)
                for e in engines:  # traffic before, long prompts too
                    for n in (DECODE_PROMPT,) + LENGTHS:
                        e.complete(words(n, rng), 1)
                time.sleep(PAUSE_S)
            except Exception as ex:  # noqa: BLE001 (the row says why)
                failed(out, name, ex)
                return
            for r in range(a.reps):
                for length in a.length or LENGTHS:
                    net_handoff(p, d, sa, sb, "%ggbit" % gbit, length, r, rng, out)
            print_logs(out, name, engines)
            print_counters(out, name, engines)
        finally:
            for e in engines:
                e.stop()
            for n in ("a", "b"):
                stop_daemon(a, n)


def net_handoff(p, d, sa, sb, where, length, r, rng, out):
    """One handoff from p (its kvpoold at sa) to d (at sb) through Redis."""
    puts = pool_stats(sa)["remote"]["puts"]

    def saved(n):
        wait_pool(sa, lambda st: st["remote"]["puts"] >= puts + n,
                  "machine a's %d blocks put to Redis" % n)
    try:
        res = handoff(p, d, words(length, rng), saved,
                      lambda: pool_stats(sb)["remote"])
        print_handoff(out, where, "pd", length, r, res)
    except Exception as ex:  # noqa: BLE001 (the table says why)
        failed(out, "handoff-" + where, ex)


# --- the report ---------------------------------------------------------------------

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else None


def spread(v, fmt="%.1f"):
    """median (min .. max) of v."""
    return (fmt + " (" + fmt + " .. " + fmt + ")") % (statistics.median(v), min(v), max(v))


def parse(raw):
    d = {"ttft": {}, "gap": {}, "rep": {}, "window": {}, "handoff": {}, "failed": {},
         "loaded": {}, "xfer": {}, "same": {}, "phases": [], "logs": [], "metrics": []}
    for line in open(raw):
        kind, _, rest = line.rstrip("\n").partition(" ")
        if kind == "failed":
            c, why = rest.split(" error=", 1)
            d["failed"][c.split("=", 1)[1]] = json.loads(why)
            continue
        if kind == "log":
            d["logs"].append(rest)
            continue
        if kind == "metrics":
            d["metrics"].append(rest)
            continue
        if kind not in ("ttft", "gap", "window", "handoff", "phase"):
            continue
        f = dict(kv.split("=", 1) for kv in rest.split())
        if kind == "phase":
            d["phases"].append(f["configs"].split(","))
            continue
        if kind == "handoff":
            d["handoff"].setdefault((f["where"], f.get("config", "pd"), int(f["len"])), []).append(
                {k: float(v) for k, v in f.items() if k not in ("where", "config", "len")})
            continue
        key = (f["config"], int(f["len"]))
        if kind == "ttft":
            d["ttft"].setdefault(key, []).append(float(f["ms"]))
            if "loaded" in f:
                d["loaded"].setdefault(key, []).append((int(f["loaded"]), int(f["of"])))
            if "xfer" in f:
                d["xfer"].setdefault(key, []).append((int(f["xfer"]), int(f["prompt"])))
                d["same"].setdefault(key, []).append((int(f["same"]), float(f["lp"])))
        elif kind == "gap":
            d["gap"].setdefault(key, []).append(float(f["ms"]))
            d["rep"].setdefault(key + (f["rep"],), []).append(float(f["ms"]))
        else:
            d["window"].setdefault(key, []).append((float(f["s"]), int(f["short"])))
    return d


def cell(text):
    """text in a table's cell: no column breaks, no code spans."""
    return text.replace("|", "/").replace("`", "'")


def same_cell(rows):
    """'k / n (logprobs within D)' of check()'s (same, lp) pairs."""
    if not rows:
        return "-"
    return "%d / %d (logprobs within %.4f)" % (sum(s for s, _ in rows), len(rows),
                                              max(lp for _, lp in rows))


def gap_table(d, goal):
    out = ["| long prompt | configuration | its time to first token: median (min .. max) | "
           "decoders' inter-token gap: p50 | p90 | p99 | max | the longest gap per "
           "repetition: median (min .. max) | gaps counted | the decode engine's prompt "
           "tokens from the transfer of all it got (kvpool: blocks loaded of those it "
           "could), all repetitions | the long prompt's answers = the prefill engine's own |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for length in sorted({k[1] for k in d["gap"]}):
        for c in ALL:
            g, t = d["gap"].get((c, length)), d["ttft"].get((c, length))
            if not g or not t:
                continue
            reps = [v for k, v in d["rep"].items() if k[:2] == (c, length)]
            maxes = [max(v) for v in reps]
            win = d["window"].get((c, length), [])
            note = ""
            if any(s for _, s in win):
                note = " (%d streams ended inside the window)" % sum(s for _, s in win)
            if win and max(t) > win[0][0] * 1e3:
                note += " (a first token after the window's end)"
            for p, n in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
                goal["%s_%s_%d" % (n, c, length)] = pct(g, p)
            goal["max_%s_%d" % (c, length)] = max(g)
            if win:
                goal["window_%d" % length] = win[0][0]
            goal["ttft_%s_%d" % (c, length)] = statistics.median(t)
            ld = []
            x = d["xfer"].get((c, length))
            if x:
                ld.append("%s / %s tokens" % (format(sum(a for a, _ in x), ","),
                                              format(sum(b for _, b in x), ",")))
            x = d["loaded"].get((c, length))
            if x:
                ld.append("%d / %d blocks" % (sum(a for a, _ in x), sum(b for _, b in x)))
            out.append("| %s | %s | %s ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %s ms | "
                       "%d%s | %s | %s |" % (
                           format(length, ","), LABELS[c], spread(t, "%.0f"), pct(g, 0.5),
                           pct(g, 0.9), pct(g, 0.99), max(g), spread(maxes), len(g), note,
                           "; ".join(ld) or "-", same_cell(d["same"].get((c, length)))))
    for c in ALL:
        if c in d["failed"]:
            out.append("| - | %s | failed (the error below) | | | | | | | | |" % LABELS[c])
    return out


SHORT = {"pd": "kvpool", "nixl": "NixlConnector, as shipped",
         "nixl-keep-bind": "NixlConnector, keep-bind", "example": "ExampleConnector"}


def handoff_table(d, goal):
    out = ["| where | connector | prompt | prefill engine's answer | decode engine's first "
           "token, loading the blocks: median (min .. max) | the same prompt again, its own "
           "prefix-cache hit | load ÷ hit: median of the repetitions (min .. max) | the "
           "load's prompt tokens from the transfer / the prompt's | kvpool: blocks loaded / "
           "the prompt's (load errors) | answers = the prefill engine's own |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    net = ["| link | prompt | bytes fetched from Redis per load | load - hit | restore "
           "rate: bytes ÷ (load - hit) | the daemon's measured bandwidth | ÷ the link's "
           "rate (bytes ÷ (load - hit)) |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    order = {"local": 0, "10gbit": 1, "1gbit": 2}
    for (where, c, length), rows in sorted(
            d["handoff"].items(), key=lambda kv: (order.get(kv[0][0], 3), PD.index(kv[0][1])
                                                  if kv[0][1] in PD else 9, kv[0][2])):
        load = [r["load_ms"] for r in rows]
        hit = [r["hit_ms"] for r in rows]
        ratio = [r["load_ms"] / r["hit_ms"] for r in rows]
        goal[("ratio_%s_%d" % (where, length)) if c == "pd" else
             ("ratio_%s_%s_%d" % (where, c, length))] = statistics.median(ratio)
        label = "one machine" if where == "local" else \
            "machine a to b through Redis, %s Gbit/s links" % where[:-4]
        kv = "-"
        if "loaded" in rows[0]:
            kv = "%d / %d (%d)" % (min(r["loaded"] for r in rows), max(r["blocks"] for r in rows),
                                   max(r["load_errors"] for r in rows))
        xfer = "-"
        if "xfer" in rows[0]:
            xfer = "%s / %s" % (format(int(min(r["xfer"] for r in rows)), ","),
                                format(int(max(r["prompt"] for r in rows)), ","))
        same = same_cell([(r["same"], r["lp"]) for r in rows if "same" in r])
        out.append("| %s | %s | %s | %s ms | %s ms | %s ms | %sx | %s | %s | %s |" % (
            label, SHORT.get(c, c), format(length, ","),
            spread([r["prefill_ms"] for r in rows], "%.0f"), spread(load), spread(hit),
            spread(ratio, "%.2f"), xfer, kv, same))
        if where == "local":
            continue
        gbit = float(where[:-4])
        nbytes = statistics.median([r["bytes_in"] for r in rows])
        extra = [r["load_ms"] - r["hit_ms"] for r in rows]
        rate = [r["bytes_in"] * 8 / ((r["load_ms"] - r["hit_ms"]) / 1e3) / 1e9
                for r in rows if r["load_ms"] > r["hit_ms"]]
        bw = [r["bandwidth"] * 8 / 1e9 for r in rows]
        if rate:
            goal["rate_%s_%d" % (where, length)] = statistics.median(rate)
        net.append("| %g Gbit/s | %s | %.1f MB | %s ms | %s | %s Gbit/s | %s |" % (
            gbit, format(length, ","), nbytes / 1e6, spread(extra),
            spread(rate, "%.2f") + " Gbit/s" if rate else "- (load not slower than hit)",
            spread(bw, "%.2f"),
            "%.2fx" % (statistics.median(rate) / gbit) if rate else "-"))
    fails = [("one machine", c, d["failed"].get("handoff-" + c)) for c in PD] + \
        [(w, "pd", d["failed"].get(c) or d["failed"].get("handoff-" + w))
         for w, c in (("10gbit", "net-10"), ("1gbit", "net-1"))]
    for where, c, why in fails:
        if why:
            out.append("| %s | %s | - | failed: %s | | | | | | |" % (
                where, SHORT.get(c, c), cell(why[:120])))
    return out + ([""] + net if len(net) > 2 else [])


def report(raw):
    d = parse(raw)
    goal = {}
    out = []
    if len(d["phases"]) > 1:
        out.append("In %d phases, each started once the engines of the one before were "
                   "stopped: %s." % (len(d["phases"]), "; ".join(
                       "%d. %s" % (i + 1, ", ".join(p)) for i, p in enumerate(d["phases"]))))
        out.append("")
    out += gap_table(d, goal)
    out.append("")
    out += handoff_table(d, goal)
    if d["failed"]:
        out.append("")
        out.append("| configuration | could not start or run on this machine: the error |")
        out.append("| --- | --- |")
        for c, why in d["failed"].items():
            out.append("| %s | `%s` |" % (LABELS.get(c, c), why.replace("`", "'").replace(
                "|", "\\|")))
    if d["metrics"]:
        out.append("")
        out.append("The engines' counters at the end (engine 0 the prefill engine of a P/D "
                   "configuration): kvpool's connector's vllm:kvpool_*_total, and vLLM's "
                   "prompt tokens from a KV transfer (vllm:prompt_tokens_by_source_total"
                   "{source=\"external_kv_transfer\"}) and in all:")
        out.append("")
        for m in d["metrics"]:
            out.append("- " + m)
    errs = [line for line in d["logs"] if re.search(r"\bWARN(ING)?\b|\bERROR\b|Traceback",
                                                    line)]
    if errs:
        out.append("")
        out.append("The engines' logs said (errors, and warnings once they served; each "
                   "line once, first 20):")
        out.append("")
        for line in errs[:20]:
            out.append("- `%s`" % line.replace("`", "'"))
    return json.dumps(goal) + "\n" + "\n".join(out) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        sys.stdout.write(report(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="the local configurations' kvpoold")
    ap.add_argument("--kvpoold", required=True, help="the daemon to start on the machines")
    ap.add_argument("--work", required=True)
    ap.add_argument("--config", action="append", default=[], choices=ALL,
                    help="only these configurations (default: all of them)")
    ap.add_argument("--length", action="append", type=int, default=[], choices=LENGTHS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-net", action="store_true", help="skip the shaped network")
    ap.add_argument("--no-local", action="store_true", help="only the shaped network")
    ap.add_argument("--peers-site", help="NIXL 1.5.1 installed there (bench/pd-peers-site.sh)")
    a = ap.parse_args()
    a.kvpoold = os.path.abspath(a.kvpoold)
    # stopped (run-pd.sh's trap, a timeout): the engines are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    model = ve.make_model_in_venv(os.path.join(a.work, "model"))
    rng = random.Random(42)
    if not a.no_local:
        names = a.config or ALL
        for name, why in pd_peers.FAILS.items():
            if name in names:
                failed(sys.stdout, name, why)
        # kvpool's configurations, then the peers' once those are stopped
        a.phase = 1
        for phase in (CONFIGS, PEERS):
            if any(n in names for n in phase):
                run_local(a, [n for n in phase if n in names], model, rng, sys.stdout)
    if not a.no_net:
        for gbit in NETS:
            run_net(a, model, gbit, rng, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
