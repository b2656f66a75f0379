# SPDX-License-Identifier: MIT
"""hit.py - what a prefix found in the pool costs a real vLLM engine's
first token, against the same engine's own prefix-cache hit and against
computing it, for `make bench-hit` (bench/run-hit.sh).

usage: hit.py --socket PATH --work DIR [--reps N] [--tokens N]
       hit.py report RAW   (the Markdown table of a run's output, after a
                            JSON line of the goals' figures)

Engines (examples/vllm_engines.py, the model runner of each on core 0),
all started at once and asked in turn, one request at a time, with
PAUSE_S between two engines (vLLM's model runner spins for a second after
its last step, on the core the next engine's runner uses):

  writer   the connector's defaults: computes each new prompt and saves it
  alone    vLLM without kvpool: computes the same prompt (recompute)
  pool     the connector's defaults: its first request of the prompt is
           a pooled hit, its second one the engine's own prefix-cache hit
  instep   async_load_blocks 0: the pooled hit's load inside the step
  offstep  async_load_blocks 1: every load off the step

Per repetition a new prompt of --tokens tokens (the recipe's 2,048 and a
64-token tail, by default), the engines' order rotated. Prints
"ttft case=C rep=R ms=T cached=N" per request.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import vllm_engines as ve  # noqa: E402

PAUSE_S = 1.5
ENGINES = {"writer": {}, "alone": None, "pool": {}, "instep": {"async_load_blocks": 0},
           "offstep": {"async_load_blocks": 1}}
CASES = [("recompute", "vLLM alone computes the prompt"),
         ("recompute-kvpool", "the writer (kvpool's defaults) computes and saves it"),
         ("own", "the engine's own prefix-cache hit (the pool engine, again)"),
         ("pooled", "pooled hit, kvpool's defaults (the load's place measured)"),
         ("pooled-instep", "pooled hit, the load in the step (`async_load_blocks: 0`)"),
         ("pooled-offstep", "pooled hit, the load off the step (`async_load_blocks: 1`)")]


def run(a, out):
    model = ve.make_model_in_venv(os.path.join(a.work, "model"))
    rng = random.Random(7)
    engs = {}
    for name, extra in ENGINES.items():
        engs[name] = ve.Engine(model, os.path.join(a.work, name + ".log"), cpus="0",
                               kvpool_socket=a.socket if extra is not None else None,
                               extra=dict(extra, namespace="bench-hit")
                               if extra is not None else None)
    ve.start(list(engs.values()), timeout=900)
    try:
        for e in engs.values():  # a server has had traffic before
            e.complete(" ".join(ve.words(64, rng)), 1)
            time.sleep(PAUSE_S)
        for r in range(a.reps):
            prompt = " ".join(ve.words(a.tokens, rng))
            ask(out, engs["writer"], prompt, "recompute-kvpool", r)
            time.sleep(0.5)  # its saves end
            later = [("alone", "recompute"), ("pool", "pooled"), ("instep", "pooled-instep"),
                     ("offstep", "pooled-offstep")]
            later = later[r % len(later):] + later[:r % len(later)]
            for name, case in later:
                ask(out, engs[name], prompt, case, r)
                if name == "pool":
                    ask(out, engs[name], prompt, "own", r)
        for name in ("pool", "instep", "offstep"):
            for line in engs[name].log_lines("kvpool ("):
                print("log engine=%s %s" % (name, json.dumps(line)), file=out, flush=True)
    finally:
        for e in engs.values():
            e.stop()


def ask(out, eng, prompt, case, r):
    time.sleep(PAUSE_S)
    got = eng.complete(prompt, 1)
    print("ttft case=%s rep=%d ms=%.2f cached=%d" % (case, r, got.ttft * 1e3,
                                                     got.cached_tokens), file=out, flush=True)


def report(raw):
    ms, cached = {}, {}
    for line in open(raw):
        kind, _, rest = line.partition(" ")
        if kind != "ttft":
            continue
        f = dict(kv.split("=", 1) for kv in rest.split())
        ms.setdefault(f["case"], []).append(float(f["ms"]))
        cached.setdefault(f["case"], []).append(int(f["cached"]))
    med = {c: statistics.median(v) for c, v in ms.items()}
    goal = {}
    if "pooled" in med and "own" in med:
        goal["pooled_over_own"] = med["pooled"] / med["own"]
    if "pooled" in med and "recompute" in med:
        goal["recompute_over_pooled"] = med["recompute"] / med["pooled"]
    rows = ["| case | time to first token: median | min .. max | ÷ own hit | prompt tokens "
            "cached |", "| --- | ---: | ---: | ---: | ---: |"]
    for c, what in CASES:
        if c not in ms:
            continue
        rows.append("| %s | %.1f ms | %.1f .. %.1f ms | %s | %d |" % (
            what, med[c], min(ms[c]), max(ms[c]),
            "%.2fx" % (med[c] / med["own"]) if "own" in med else "-",
            statistics.median(cached[c])))
    return json.dumps(goal) + "\n" + "\n".join(rows) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        sys.stdout.write(report(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=2048 + 64)
    a = ap.parse_args()
    run(a, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
