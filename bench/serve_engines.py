# SPDX-License-Identifier: MIT
"""serve_engines.py - two vLLM engines on one machine behind vllm-router's
round robin, driven by vLLM's own benchmark client (`vllm bench serve`,
its prefix_repetition dataset), for `make bench-serve`
(bench/run-serve-engines.sh).

usage: serve_engines.py --socket PATH --work DIR [--reps N] [--configs A,B,..]
       serve_engines.py report RAW   (Markdown tables of a run's output,
                                      after a JSON line of the goals' figures)

Three configurations, each two `vllm serve` engines (model runners on
cores 0 and 1) behind one vllm-router (--policy round_robin):

  small   vLLM's prefix caching alone, each engine's KV cache too small
          for the working set (SMALL_KV)
  kvpool  the same engines with kvpool's connector, one pool for both
  big     vLLM alone, each engine given KV memory enough for every prefix
          (BIG_KV): what sharing the pool's memory should come near

The model is a Llama with random weights several times the test model's
size (MODEL_SHAPE), so that computing a prompt dominates as with real
models. Each repetition starts the three configurations in turn, in a
rotated order, and runs the same workload (a new seed each repetition)
through each; prints one JSON line per run: the client's results (request
throughput, time to first token), and the engines' prompt tokens computed
and cached (their /metrics), and kvpool's save counters.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import vllm_engines as ve  # noqa: E402

# hidden 512 (4 heads of 128, 2 KV heads), 4 layers: about 4x the test
# model's compute a token; its KV 4 KiB a token, 128 KiB a 32-token block
MODEL_SHAPE = {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2}
KV_PER_TOKEN = 4 * 2 * 2 * 128 * 2
# the workload: PREFIXES shared prefixes of PREFIX tokens, each request one
# of them and a SUFFIX of its own, OUTPUT tokens generated; CONCURRENCY
# requests at once over both engines
PREFIXES, PREFIX, SUFFIX, OUTPUT = 8, 1024, 128, 32
REQUESTS, CONCURRENCY = 96, 8
# KV memory of each engine: SMALL holds the running requests and about
# one prefix more; BIG every prefix and the running requests
SMALL_KV = "24M"
MAX_LEN = 2048  # vLLM wants a request of its longest in any KV cache (8 MiB)
BIG_KV = "64M"
CONFIGS = {"small": ("vLLM prefix caching alone, small KV caches", SMALL_KV, False),
           "kvpool": ("kvpool, the same small KV caches", SMALL_KV, True),
           "big": ("vLLM alone, KV memory for every prefix", BIG_KV, False)}


def metric_sum(e, name, label=None):
    """The sum of an engine's /metrics series name (with label, a
    'key="value"' it must carry)."""
    total = 0.0
    for line in e.metrics().splitlines():
        if line.startswith(name + "{") and (label is None or label in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def counters(engines):
    return {"prompt": sum(metric_sum(e, "vllm:prompt_tokens_total") for e in engines),
            "computed": sum(metric_sum(e, "vllm:prompt_tokens_by_source_total",
                                       'source="local_compute"') for e in engines),
            "cached": sum(metric_sum(e, "vllm:prompt_tokens_cached_total") for e in engines),
            "preempted": sum(metric_sum(e, "vllm:num_preemptions_total") for e in engines),
            "saved": sum(metric_sum(e, "vllm:kvpool_saved_blocks_total") for e in engines),
            "skipped": sum(metric_sum(e, "vllm:kvpool_save_skipped_total") for e in engines),
            "coalesced": sum(metric_sum(e, "vllm:kvpool_save_coalesced_total")
                             for e in engines)}


def start(a, name, model):
    _, kv, pooled = CONFIGS[name]
    es = [ve.Engine(model, os.path.join(a.work, "%s%d.log" % (name, i)), cpus=str(i),
                    kvpool_socket=a.socket if pooled else None,
                    extra={"namespace": "bench-serve"} if pooled else None,
                    args=["--kv-cache-memory-bytes", kv, "--max-model-len", str(MAX_LEN)])
          for i in range(2)]
    ve.start(es, 900)
    try:
        r = ve.start([ve.Router([], [], os.path.join(a.work, name + "-router.log"),
                                workers=es)], 120)[0]
    except BaseException:
        for e in es:
            e.kill()
        raise
    return es, r


def bench(a, model, router, seed, tag):
    """vllm bench serve through router: its result JSON."""
    out = os.path.join(a.work, "result-%s.json" % tag)
    cmd = [os.path.join(ve.VENV, "bin", "vllm"), "bench", "serve", "--backend", "vllm",
           "--base-url", router.url(), "--endpoint", "/v1/completions",
           "--model", router.model, "--tokenizer", model,
           "--dataset-name", "prefix_repetition",
           "--prefix-repetition-num-prefixes", str(PREFIXES),
           "--prefix-repetition-prefix-len", str(PREFIX),
           "--prefix-repetition-suffix-len", str(SUFFIX),
           "--prefix-repetition-output-len", str(OUTPUT),
           "--num-prompts", str(REQUESTS), "--max-concurrency", str(CONCURRENCY),
           "--request-rate", "inf", "--ignore-eos", "--seed", str(seed),
           "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,90",
           "--disable-tqdm", "--save-result", "--result-dir", a.work,
           "--result-filename", os.path.basename(out)]
    with open(os.path.join(a.work, "client-%s.log" % tag), "w") as log:
        r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                           env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    if r.returncode != 0:
        with open(os.path.join(a.work, "client-%s.log" % tag)) as f:
            raise RuntimeError("vllm bench serve failed:\n" + f.read()[-4000:])
    with open(out) as f:
        return json.load(f)


def run(a):
    shape = dict(MODEL_SHAPE)
    model = ve.make_model_in_venv(os.path.join(a.work, "model"), seed=11, **shape)
    names = a.configs.split(",")
    for rep in range(a.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            engines, router = start(a, name, model)
            try:
                # a server has had traffic before: one request each
                rng = random.Random(rep)
                for e in engines:
                    e.complete(" ".join(ve.words(32, rng)), 1)
                before = counters(engines)
                t0 = time.monotonic()
                res = bench(a, model, router, 1000 + rep, "%s-%d" % (name, rep))
                wall = time.monotonic() - t0
                time.sleep(2)  # the API servers count what their engine cores reported
                after = counters(engines)
            finally:
                router.stop()
                for e in engines:
                    e.stop()
            print(json.dumps({
                "config": name, "rep": rep, "wall_s": wall,
                "completed": res.get("completed"), "failed": res.get("failed", 0),
                "request_throughput": res.get("request_throughput"),
                "median_ttft_ms": res.get("median_ttft_ms"),
                "p90_ttft_ms": res.get("p90_ttft_ms"),
                "median_e2el_ms": res.get("median_e2el_ms"),
                "total_input_tokens": res.get("total_input_tokens"),
                **{k: after[k] - before[k] for k in after}}), flush=True)


def med(rows, key):
    v = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(v) if v else None


def report(raw):
    runs = {}
    with open(raw) as f:
        for line in f:
            if line.startswith("{"):
                r = json.loads(line)
                runs.setdefault(r["config"], []).append(r)
    m = {c: {k: med(rs, k) for k in rs[0]} for c, rs in runs.items() if rs}
    goals = {}
    if "kvpool" in m and "big" in m:
        goals["kvpool_over_big"] = m["kvpool"]["request_throughput"] / m["big"]["request_throughput"]
    if "kvpool" in m and "small" in m:
        goals["kvpool_over_small"] = (m["kvpool"]["request_throughput"] /
                                      m["small"]["request_throughput"])
    print(json.dumps(goals))
    print("| configuration | requests/s | median TTFT | p90 TTFT | median latency | prompt "
          "tokens computed | cached | preemptions | runs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in CONFIGS:
        if c not in m:
            continue
        x = m[c]
        share = x["computed"] / x["prompt"] if x.get("prompt") else 0
        print("| %s | %.2f | %.0f ms | %.0f ms | %.0f ms | %d (%.0f %%) | %d | %d | %d |"
              % (CONFIGS[c][0], x["request_throughput"], x["median_ttft_ms"], x["p90_ttft_ms"],
                 x["median_e2el_ms"], x["computed"], 100 * share, x["cached"],
                 x["preempted"], len(runs[c])))
    if "kvpool" in m:
        x = m["kvpool"]
        print()
        print("kvpool's saves, median of the runs: %d blocks saved, %d skipped, %d not queued "
              "twice (`save_coalesced`)." % (x["saved"], x["skipped"], x["coalesced"]))
    print()
    print("Each run's figures (requests/s):")
    print()
    print("| configuration | " + " | ".join("run %d" % (i + 1) for i in
                                          range(max(len(v) for v in runs.values()))) + " |")
    print("| --- |" + " ---: |" * max(len(v) for v in runs.values()))
    for c in CONFIGS:
        if c in runs:
            print("| %s | %s |" % (c, " | ".join("%.2f" % r["request_throughput"]
                                                for r in sorted(runs[c], key=lambda r: r["rep"]))))


def main():
    if sys.argv[1:2] == ["report"]:
        report(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    run(ap.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
