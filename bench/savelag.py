# SPDX-License-Identifier: MIT
"""savelag.py - how long the vLLM connector's saves take, and how many
blocks they keep, while many streams decode long outputs, in real vLLM
engines.

usage: savelag.py --socket PATH --work DIR [--before TREE] [--reps N]
                  [--streams N] [--tokens N]

One `vllm serve` (examples/vllm_engines.py, the model runner on core 0)
with the connector's defaults, and with --before TREE a second one whose
connector is TREE/python's (its extension built there); both started
together and asked in turn, --reps times each. A repetition: --streams
requests of 64-token prompts no one has seen, each decoding --tokens
tokens at once, so the model runner never idles while their full blocks
(one every 32 tokens a stream) are saved. From the engine's /metrics
before and after: vllm:kvpool_save_seconds (a batch's copy and publish,
the histogram's buckets), the blocks saved and skipped, and the decode
rate. Prints one JSON line a repetition, then a Markdown table.
"""
import argparse
import json
import os
import random
import re
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import vllm_engines as ve  # noqa: E402

PAUSE_S = 1.5  # vLLM's model runner spins a second after its last step
LINE = re.compile(r'^(vllm:kvpool_(?:save_seconds_bucket|save_seconds_sum|save_seconds_count|'
                  r'saved_blocks_total|save_skipped_total))\{([^}]*)\} ([0-9.e+-]+)$')


def scrape(eng):
    """The connector's save figures of eng's /metrics: name (with le for a
    bucket) -> value."""
    out = {}
    for line in eng.metrics().splitlines():
        m = LINE.match(line)
        if not m:
            continue
        le = re.search(r'le="([^"]+)"', m.group(2))
        out[m.group(1) + ("@" + le.group(1) if le else "")] = float(m.group(3))
    return out


def quantile(buckets, q):
    """The upper bound of the bucket holding quantile q of the counts in
    buckets ({le: cumulative count})."""
    total = buckets.get("+Inf", 0)
    if not total:
        return None
    for le, n in sorted(((float(k), v) for k, v in buckets.items()), key=lambda kv: kv[0]):
        if n >= q * total:
            return le
    return float("inf")


def one(eng, name, r, a, rng):
    before = scrape(eng)
    t0 = time.monotonic()
    prompts = [" ".join(ve.words(64, rng)) for _ in range(a.streams)]
    ts = [threading.Thread(target=eng.complete, args=(p, a.tokens)) for p in prompts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    time.sleep(2.0)  # the last saves end, and their figures reach /metrics
    after = scrape(eng)
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    buckets = {k.split("@", 1)[1]: v for k, v in d.items()
               if k.startswith("vllm:kvpool_save_seconds_bucket@")}
    n = d.get("vllm:kvpool_save_seconds_count", 0)
    row = {"config": name, "rep": r, "saves": int(n),
           "save_s_sum": round(d.get("vllm:kvpool_save_seconds_sum", 0.0), 4),
           "save_s_p50": quantile(buckets, 0.5), "save_s_p99": quantile(buckets, 0.99),
           "save_s_max": quantile(buckets, 1.0),
           "saves_over_50ms": int(n - buckets.get("0.05", 0)),
           "saved_blocks": int(d.get("vllm:kvpool_saved_blocks_total", 0)),
           "skipped_blocks": int(d.get("vllm:kvpool_save_skipped_total", 0)),
           "tokens_per_s": round(a.streams * a.tokens / wall, 1)}
    print(json.dumps(row), flush=True)
    return row


def table(rows):
    out = ["| configuration | saves | their seconds, all (median of reps) | p50 | p99 | "
           "longest (bucket) | saves over 50 ms | blocks saved | skipped | decode tokens/s |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in dict.fromkeys(r["config"] for r in rows):
        rs = [r for r in rows if r["config"] == name]

        def med(k):
            return statistics.median(r[k] for r in rs)

        def span(k, f="%g"):
            return (f + " (" + f + " .. " + f + ")") % (med(k), min(r[k] for r in rs),
                                                       max(r[k] for r in rs))
        out.append("| %s | %s | %s | ≤ %g s | ≤ %g s | ≤ %g s | %s | %s | %s | %s |"
                   % (name, span("saves", "%d"), span("save_s_sum", "%.3f"),
                      med("save_s_p50"), med("save_s_p99"), max(r["save_s_max"] for r in rs),
                      span("saves_over_50ms", "%d"), span("saved_blocks", "%d"),
                      span("skipped_blocks", "%d"), span("tokens_per_s", "%.0f")))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--before", metavar="TREE")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=5000)
    a = ap.parse_args()
    model = ve.make_model_in_venv(os.path.join(a.work, "model"))
    configs = {"this build": None}
    if a.before:
        if not os.path.isdir(os.path.join(a.before, "python", "kvpool")):
            ap.error("--before %s: no python/kvpool there" % a.before)
        configs["the build before"] = os.path.join(os.path.abspath(a.before), "python")
    engs = {}
    try:
        for i, (name, path) in enumerate(configs.items()):
            env = {"PYTHONPATH": path} if path else None
            engs[name] = ve.Engine(model, os.path.join(a.work, "savelag-%d.log" % i), cpus="0",
                                   kvpool_socket=a.socket, env=env,
                                   extra={"namespace": "savelag-%d" % i})
        rng = random.Random(7)
        for eng in engs.values():
            eng.wait_ready(900)
            eng.complete(" ".join(ve.words(64, rng)), 40)  # its kernels built
            time.sleep(PAUSE_S)
        rows, order = [], list(engs)
        for r in range(a.reps):
            for name in order[r % len(order):] + order[:r % len(order)]:
                rows.append(one(engs[name], name, r, a, rng))
                time.sleep(PAUSE_S)
    finally:
        for eng in engs.values():
            eng.stop()
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
