# SPDX-License-Identifier: MIT
"""stall.py - what the vLLM connector's loads and saves cost the engine's
step, in real vLLM engines, for `make bench-stall` (bench/run-stall.sh).

usage: stall.py --socket PATH --work DIR [--config NAME]... [--scenario S]...
                [--reps N] [--before TREE]
       stall.py report RAW   (the Markdown tables of a run's output: a JSON
                              line of the goals' figures, then them)

One `vllm serve` (examples/vllm_engines.py) per configuration, all started
together and asked in turn (the repetitions interleaved, the order rotated
each time, PAUSE_S between two engines: vLLM's model runner spins for a
second after its last step, on the core the next one's runner uses): alone
(vLLM without a connector), sync (kvpool's connector with async_load_blocks
0 and async_save false: every load and save inside the engine's step, as
before they ran off it), sync-layers (the same with layerwise_load: the
load's copies layer by layer beside the forward, each attention layer
waiting for its own), async (the connector's defaults: its thread on the
model runner's core 0), async-cpu1 (copy_cpus "1": its thread on the
core of vLLM's engine core and API server), consumer (kv_role
kv_consumer: the connector in every step, loading, never saving) and
decodebench (vLLM's own DecodeBenchConnector with startup_fill: vLLM's
connector calls in every step around a connector that copies nothing;
it claims every prompt as cached, so it means something in the decode
scenario only); without --config, all but consumer and decodebench. Per
repetition, the scenarios picked, the first three
while 8 streams of short prompts decode:

  load   a request of a 2,048-token prefix the pool holds and vLLM's own
         prefix cache does not (the engine computed and saved it, then its
         prefix cache was reset), and a 64-token tail. alone computes it.
  save   a request of 2,112 tokens no one has seen: computed, and saved.
  mixed  16 requests, 8 at a time, half a pooled 2,048-token prefix and a
         tail, half unrelated prompts of the same length, after a reset of
         vLLM's prefix cache: their wall time.
  decode 8 streams of 64-token prompts decoding 600 tokens each and
         nothing else (not in the default set): their wall time and
         median gap, what the connector costs every step.

--scenario picks scenarios (default load, save and mixed): a run of save alone
takes more repetitions in the same time. --before TREE adds the
configuration async-before: the connector's defaults from the kvpool
package of another source tree (TREE/python, its extension built there),
interleaved with the others, so that a change is measured against the
code before it in the same rounds.

Prints "ttft config=C scenario=S rep=R ms=T" (the long request's time to
first token), "itl config=C scenario=S rep=R ms=G" (each gap between two
tokens of a decoding stream within WINDOW_S of the long request's send: the
same span for every configuration, longer than the request and its save; a
chunk of k tokens counts as k gaps of its wait over k),
"mixed config=C rep=R seconds=S tokens=N", "decode config=C rep=R
seconds=S p50=G" (the decode scenario's wall time and median gap in ms),
and "failed config=C error=..." for a configuration that could not start.
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import vllm_engines as ve  # noqa: E402

DECODERS, DECODE_TOKENS = 8, 160
# the decoders' gaps are taken over this long from the long request's send,
# the same for every configuration (a window that ended with the request
# would count more ordinary gaps for a slower one and dilute its stall)
WINDOW_S = 0.5
PREFIX, TAIL = 2048, 64
CONFIGS = {"alone": None, "sync": {"async_load_blocks": 0, "async_save": False},
           "sync-layers": {"async_load_blocks": 0, "async_save": False,
                           "layerwise_load": True},
           "async": {}, "async-cpu1": {"copy_cpus": "1"}, "consumer": {},
           "decodebench": None}
# vLLM's connector machinery around a connector that copies nothing (the
# decode scenario only: it fills every prompt's KV with a constant)
# the configurations of a run without --config (make bench-stall)
DEFAULT_CONFIGS = ("alone", "sync", "sync-layers", "async", "async-cpu1")
DECODEBENCH = {"kv_connector": "DecodeBenchConnector", "kv_role": "kv_both",
               "kv_connector_extra_config": {"startup_fill": True}}
LABELS = {"alone": "vLLM alone", "sync": "kvpool, in the step",
          "sync-layers": "kvpool, in the step, layer by layer",
          "async": "kvpool, off the step (default)",
          "async-cpu1": "kvpool, off the step, its thread on core 1",
          "consumer": "kvpool, loads only (kv_consumer: nothing saved)",
          "decodebench": "vLLM's DecodeBenchConnector (copies nothing)",
          "async-before": "kvpool, off the step (default), the build before"}


def reset_prefix_cache(eng):
    """vLLM's own prefix cache emptied (the dev-mode endpoint): the next
    requests find nothing in the engine, what the pool has they load."""
    for _ in range(100):
        c = http.client.HTTPConnection("127.0.0.1", eng.port, timeout=30)
        try:
            c.request("POST", "/reset_prefix_cache")
            r = c.getresponse()
            body = r.read()
        finally:
            c.close()
        if r.status == 200 and json.loads(body).get("success"):
            return
        time.sleep(0.1)  # blocks still held (saves in flight): again
    raise RuntimeError("POST /reset_prefix_cache kept failing: %r" % body[:200])


def with_decoders(eng, rng, long_prompt):
    """The long request sent while DECODERS streams decode: its time to
    first token, and the decoders' inter-token gaps around it."""
    times = [[] for _ in range(DECODERS)]
    started = threading.Barrier(DECODERS + 1)

    def decode(i):
        fired = []

        def first():
            if not fired:
                fired.append(1)
                started.wait()
        eng.complete(" ".join(ve.words(64, rng)), DECODE_TOKENS, on_first_token=first,
                     times=times[i])
    ts = [threading.Thread(target=decode, args=(i,)) for i in range(DECODERS)]
    for t in ts:
        t.start()
    started.wait()
    time.sleep(0.1)  # into the decode
    t0 = time.monotonic()
    got = eng.complete(long_prompt, 2)
    t1 = t0 + max(WINDOW_S, got.seconds + 0.05)
    for t in ts:
        t.join()
    gaps = []
    for tt in times:
        # a chunk of k tokens after a gap g: k tokens, each g / k after the
        # last (the stream's pace, whatever the server's chunking)
        for (a, _), (b, k) in zip(tt, tt[1:]):
            if b >= t0 and a <= t1:
                gaps += [(b - a) / k] * k
    return got, gaps


PAUSE_S = 1.5
SCENARIOS = ("load", "save", "mixed", "decode")
DEFAULT_SCENARIOS = ("load", "save", "mixed")
STEADY_TOKENS = 600


def run_configs(names, a, model, rng, out):
    engs = {}
    for name in names:
        extra = None
        env = {"VLLM_SERVER_DEV_MODE": "1"}
        if name == "async-before":  # the same configuration, another tree's package
            extra = dict(CONFIGS["async"], namespace="bench-stall-" + name)
            env["PYTHONPATH"] = os.path.join(os.path.abspath(a.before), "python")
        elif CONFIGS[name] is not None:  # a namespace each: the same prompts find nothing
            extra = dict(CONFIGS[name], namespace="bench-stall-" + name)
        engs[name] = ve.Engine(model, os.path.join(a.work, name + ".log"), cpus="0",
                               kvpool_socket=a.socket if extra is not None else None,
                               extra=extra, env=env,
                               role="kv_consumer" if name == "consumer" else "kv_both",
                               args=(["--kv-transfer-config", json.dumps(DECODEBENCH)]
                                     if name == "decodebench" else []))
    for name, eng in list(engs.items()):
        try:
            eng.wait_ready(900)
        except Exception as ex:  # noqa: BLE001 (the row says why)
            print("failed config=%s error=%s" % (name, json.dumps(str(ex)[-300:])),
                  flush=True)
            del engs[name]
    try:
        for eng in engs.values():
            # a server has had traffic before, long prompts too (the first
            # prefill of a length builds its kernels)
            eng.complete(" ".join(ve.words(64, rng)), 1)
            eng.complete(" ".join(ve.words(PREFIX + TAIL, rng)), 1)
            time.sleep(PAUSE_S)
        order = list(engs)
        for r in range(a.reps):
            for name in order[r % len(order):] + order[:r % len(order)]:
                run_rep(engs[name], name, r, rng, out, a.scenario or DEFAULT_SCENARIOS)
                time.sleep(PAUSE_S)
        for name, eng in engs.items():
            for line in eng.log_lines("kvpool ("):
                print("log config=%s %s" % (name, json.dumps(line)), file=out, flush=True)
    finally:
        for eng in engs.values():
            eng.stop()


def run_rep(eng, name, r, rng, out, scenarios=DEFAULT_SCENARIOS):
    """One repetition of the scenarios on one engine."""
    if "decode" in scenarios:
        times = [[] for _ in range(DECODERS)]
        ts = [threading.Thread(target=eng.complete, args=(" ".join(ve.words(64, rng)),
                                                           STEADY_TOKENS),
                               kwargs={"times": times[i]}) for i in range(DECODERS)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        seconds = time.monotonic() - t0
        gaps = [(b - a) / k for tt in times for (a, _), (b, k) in zip(tt, tt[1:])
                for _ in range(k)]
        print("decode config=%s rep=%d seconds=%.3f p50=%.3f" %
              (name, r, seconds, statistics.median(gaps) * 1e3), file=out, flush=True)
    if "load" in scenarios:
        prefix = ve.words(PREFIX, rng)
        eng.complete(" ".join(prefix + ve.words(TAIL, rng)), 1)  # computed, saved
        time.sleep(0.5)
        reset_prefix_cache(eng)
        got, gaps = with_decoders(eng, rng, " ".join(prefix + ve.words(TAIL, rng)))
        emit(out, name, "load", r, got, gaps)
    if "save" in scenarios:
        got, gaps = with_decoders(eng, rng, " ".join(ve.words(PREFIX + TAIL, rng)))
        emit(out, name, "save", r, got, gaps)
    if "mixed" not in scenarios:
        return
    # mixed: pooled prefixes and unrelated prompts
    shared = [ve.words(PREFIX, rng) for _ in range(2)]
    for p in shared:
        eng.complete(" ".join(p + ve.words(TAIL, rng)), 1)
    time.sleep(0.5)
    reset_prefix_cache(eng)
    prompts = [" ".join((shared[i % 2] if i % 2 == 0 else ve.words(PREFIX, rng)) +
                        ve.words(TAIL, rng)) for i in range(16)]
    t0 = time.monotonic()
    done = []
    lock = threading.Lock()

    def worker(ps):
        for p in ps:
            c = eng.complete(p, 8)
            with lock:
                done.append(c.prompt_tokens + len(c.tokens))
    ts = [threading.Thread(target=worker, args=(prompts[i::8],)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("mixed config=%s rep=%d seconds=%.3f tokens=%d" %
          (name, r, time.monotonic() - t0, sum(done)), file=out, flush=True)


def emit(out, name, scenario, r, got, gaps):
    print("ttft config=%s scenario=%s rep=%d ms=%.2f cached=%d" %
          (name, scenario, r, got.ttft * 1e3, got.cached_tokens), file=out, flush=True)
    for g in gaps:
        print("itl config=%s scenario=%s rep=%d ms=%.3f" % (name, scenario, r, g * 1e3),
              file=out)
    out.flush()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else None


def median_interval(v, rounds=4000):
    """A 95 % bootstrap interval of v's median (a fixed seed: the same
    raw output gives the same interval)."""
    rng = random.Random(0)
    m = sorted(statistics.median(rng.choices(v, k=len(v))) for _ in range(rounds))
    return m[int(0.025 * rounds)], m[int(0.975 * rounds) - 1]


def report(raw):
    ttft, itl, mixed, cached, failed, order, per = {}, {}, {}, {}, {}, [], {}
    steady = {}  # config -> [(rep, seconds, p50 gap)] of the decode scenario
    for line in open(raw):
        kind, _, rest = line.partition(" ")
        if kind == "failed":
            c, why = rest.split(" error=", 1)
            failed[c.split("=", 1)[1]] = json.loads(why)
            continue
        if kind not in ("ttft", "itl", "mixed", "decode"):
            continue
        f = dict(kv.split("=", 1) for kv in rest.split())
        c = f["config"]
        if c not in order:
            order.append(c)
        if kind == "ttft":
            ttft.setdefault((c, f["scenario"]), []).append(float(f["ms"]))
            cached.setdefault((c, f["scenario"]), []).append(int(f["cached"]))
        elif kind == "itl":
            itl.setdefault((c, f["scenario"]), []).append(float(f["ms"]))
            per.setdefault((c, f["scenario"], f["rep"]), []).append(float(f["ms"]))
        elif kind == "decode":
            steady.setdefault(c, []).append((f["rep"], float(f["seconds"]), float(f["p50"])))
        else:
            mixed.setdefault(c, []).append(int(f["tokens"]) / float(f["seconds"]))
    out = []
    goal = {}
    intervals = []
    if itl:
        out.append("| scenario | configuration | long request's time to first token "
                   "(prompt tokens cached) | decoders' inter-token gap: mean | p50 | p90 | "
                   "p99 | max | mean ÷ vLLM alone's in the same repetition: median "
                   "(min .. max) | p90 ÷ vLLM alone's: median (min .. max) |")
        out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for sc in ("load", "save"):
        for c in order:
            g = itl.get((c, sc))
            t = ttft.get((c, sc))
            if not g or not t:
                continue
            # each repetition against vLLM alone's of the same repetition
            reps = sorted({r for (cc, ss, r) in per if cc == c and ss == sc} &
                          {r for (cc, ss, r) in per if cc == "alone" and ss == sc})
            means = [statistics.mean(per[c, sc, r]) / statistics.mean(per["alone", sc, r])
                     for r in reps]
            p90s = [pct(per[c, sc, r], 0.9) / pct(per["alone", sc, r], 0.9) for r in reps]

            def spread(v):
                return "%.3fx (%.3f .. %.3f)" % (statistics.median(v), min(v), max(v)) \
                    if v else "-"
            if sc == "save" and means and c != "alone":
                goal["save_" + c] = statistics.median(means)
                goal["save_p90_" + c] = statistics.median(p90s)
                intervals.append((c, median_interval(means)))
            out.append("| %s | %s | %.0f ms (%d) | %.1f ms | %.1f ms | %.1f ms | %.1f ms | "
                       "%.1f ms | %s | %s |"
                       % (sc, LABELS.get(c, c), statistics.median(t),
                          statistics.median(cached[c, sc]), statistics.mean(g), pct(g, 0.5),
                          pct(g, 0.9), pct(g, 0.99), max(g), spread(means), spread(p90s)))
    if intervals:
        out.append("")
        out.append("How sure the save scenario's median ratio is (95 % bootstrap interval "
                   "over its repetitions): " + "; ".join(
                       "%s %.3fx .. %.3fx" % (LABELS.get(c, c), lo, hi)
                       for c, (lo, hi) in intervals) + ".")
    for c in ("sync", "sync-layers", "async", "async-before"):
        if ttft.get((c, "load")):
            goal["ttft_" + c] = statistics.median(ttft[c, "load"])
    if mixed:
        out.append("")
        out.append("Mixed workload (16 requests, 8 at a time, half of them a pooled prefix; "
                   "prompt and generated tokens per second, median of the repetitions):")
        out.append("")
        out.append("| configuration | tokens/s | ÷ vLLM alone |")
        out.append("| --- | ---: | ---: |")
    for c in order:
        if c in mixed:
            m = statistics.median(mixed[c])
            ref = statistics.median(mixed["alone"]) if "alone" in mixed else None
            if ref and c != "alone":
                goal["mixed_" + c] = m / ref
            out.append("| %s | %.0f | %s |" % (LABELS.get(c, c), m,
                                              "%.2fx" % (m / ref) if ref else "-"))
    if steady:
        out.append("")
        out.append("Decoding alone (8 streams of %d tokens and nothing else; each "
                   "repetition's wall time against vLLM alone's of the same round):"
                   % STEADY_TOKENS)
        out.append("")
        out.append("| configuration | wall time: median | ÷ vLLM alone's: median (min .. max) "
                   "| 95 % interval of that median | median gap (median of the repetitions) |")
        out.append("| --- | ---: | ---: | ---: | ---: |")
        ref = {r: sec for r, sec, _ in steady.get("alone", [])}
        for c in order:
            if c not in steady:
                continue
            ratios = [sec / ref[r] for r, sec, _ in steady[c] if r in ref]
            if ratios and c != "alone":
                goal["decode_" + c] = statistics.median(ratios)
            lo, hi = median_interval(ratios) if ratios else (0, 0)
            out.append("| %s | %.3f s | %s | %s | %.2f ms |" % (
                LABELS.get(c, c), statistics.median(sec for _, sec, _ in steady[c]),
                "%.3fx (%.3f .. %.3f)" % (statistics.median(ratios), min(ratios), max(ratios))
                if ratios else "-", "%.3fx .. %.3fx" % (lo, hi) if ratios else "-",
                statistics.median(p for _, _, p in steady[c])))
    for c, why in failed.items():
        out.append("")
        out.append("%s could not run: `%s`" % (LABELS.get(c, c), why))
    return json.dumps(goal) + "\n" + "\n".join(out) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        sys.stdout.write(report(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--config", action="append", default=[],
                    choices=list(CONFIGS) + ["async-before"])
    ap.add_argument("--scenario", action="append", default=[], choices=SCENARIOS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--before", metavar="TREE",
                    help="add async-before: the connector of TREE/python (built there)")
    a = ap.parse_args()
    if a.before:
        if not os.path.isdir(os.path.join(a.before, "python", "kvpool")):
            ap.error("--before %s: no python/kvpool there" % a.before)
        if "async-before" not in a.config:
            a.config = (a.config or list(DEFAULT_CONFIGS)) + ["async-before"]
    elif "async-before" in a.config:
        ap.error("--config async-before needs --before TREE")
    model = ve.make_model_in_venv(os.path.join(a.work, "model"))
    run_configs(a.config or list(DEFAULT_CONFIGS), a, model, random.Random(42), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
