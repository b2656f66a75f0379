# SPDX-License-Identifier: MIT
"""engines.py - real vLLM engines sharing prefixes, for `make bench-engines`
(bench/run-engines.sh): the time to the first token and the prompt
throughput of engine processes 1, 2 and 3 of one configuration, each a
fresh `vllm serve` (examples/vllm_engines.py), over prompts of several
lengths that share several fractions with the engines before them.

usage: engines.py --socket PATH --work DIR [--config NAME]... [--lengths L,...]
                  [--shares S,...] [--reps N] [--engines N] [--eager]
       engines.py report RAW   (the Markdown tables of a run's output: a
                                JSON line of the goals' figures, then them)

Configurations: alone (vLLM with its own prefix caching, nothing shared
between processes: what recomputing costs a fresh process; its engine 1
then also serves engine 2's prompts, a hit in vLLM's own prefix cache with
nothing to transfer: what sharing can at best give), kvpool (the
connector, kvpoold at --socket), lmcache-server (vLLM's
--kv-offloading-backend lmcache: LMCache's multi-process mode, one
`lmcache server` the engines share), lmcache (LMCache's vLLM connector
with a local CPU and disk backend; both from LMCache 0.5.6 in
--lmcache-site, bench/lmcache-site.sh), offload and offload-simple (vLLM's
own KV offloading, --kv-offloading-size, and with
VLLM_USE_SIMPLE_KV_OFFLOAD=1). A configuration whose engines do not start
is a row with the exact error, not a failure of the run.

Prints one line per request: "engine config=C engine=E len=L share=S
rep=R ttft_ms=T cached=N", then "failed config=C error=..." for each
configuration that could not run.
"""
import argparse
import glob
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import vllm_engines as ve  # noqa: E402

NEW_TOKENS = 8


def config_engine(name, model, log, cpus, a):
    """The Engine of configuration name, or raise with why it cannot be."""
    if name == "alone":
        return ve.Engine(model, log, cpus=cpus, args=a.engine_args)
    if name == "kvpool":
        return ve.Engine(model, log, cpus=cpus, args=a.engine_args, kvpool_socket=a.socket)
    if name in ("lmcache", "lmcache-server"):
        if not a.lmcache_site:
            raise RuntimeError("LMCache is not installed here (--lmcache-site)")
        env = {"PYTHONPATH": os.pathsep.join([os.path.join(ve.SRC, "python"), a.lmcache_site]),
               "LMCACHE_DISABLE_BANNER": "1", "LMCACHE_TRACK_USAGE": "false"}
        if name == "lmcache-server":  # vLLM's --kv-offloading-backend lmcache
            env["LMCACHE_MP_TRANSFER_MODE"] = "lmcache_driven"
            return ve.Engine(model, log, cpus=cpus, env=env, args=a.engine_args + [
                "--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache"])
        cfg = os.path.join(a.work, "lmcache.yaml")
        with open(cfg, "w") as f:
            f.write("chunk_size: 256\nlocal_cpu: true\nmax_local_cpu_size: 2\n"
                    "local_disk: \"file://%s/lmcache-disk/\"\nmax_local_disk_size: 4\n"
                    % a.work)
        env["LMCACHE_CONFIG_FILE"] = cfg
        kt = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
        return ve.Engine(model, log, cpus=cpus, env=env,
                         args=a.engine_args + ["--kv-transfer-config", json.dumps(kt)])
    if name in ("offload", "offload-simple"):
        return ve.Engine(model, log, cpus=cpus, args=a.engine_args +
                         ["--kv-offloading-size", "1", "--kv-offloading-backend", "native"],
                         env={"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"} if name != "offload" else None)
    raise ValueError("unknown configuration " + name)


class LMCacheServer:
    """`lmcache server` (LMCache's multi-process mode) for the lmcache-server
    configuration: its engines reach it on localhost:5555."""

    def __init__(self, a):
        env = dict(os.environ, PYTHONPATH=a.lmcache_site, LMCACHE_DISABLE_BANNER="1",
                   LMCACHE_TRACK_USAGE="false")
        self.log = os.path.join(a.work, "lmcache-server.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [os.path.join(a.lmcache_site, "bin", "lmcache"), "server", "--l1-size-gb", "1",
                 "--eviction-policy", "LRU"], stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("lmcache server exited:\n" + open(self.log).read()[-4000:])
            try:
                socket.create_connection(("127.0.0.1", 5555), 1).close()
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("lmcache server did not listen on 5555 in 120 s")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for f in glob.glob("/dev/shm/lmcache_kv_*"):  # its engines' shared memory
            try:
                os.unlink(f)
            except OSError:
                pass


def error_of(text):
    """Why an engine failed: the first exception its log names (the root
    cause, before vLLM's "Engine core initialization failed"), else the
    failure's own last line."""
    for line in text.splitlines():
        m = re.search(r"\b(\w*(?:Error|Exception)): (.*)$", line)
        if m and "WARNING" not in line and "initialization failed" not in m.group(2):
            return "%s: %s" % (m.group(1), m.group(2).strip())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text


LABELS = {"own-cache": "vLLM's own prefix cache, engine 1 again (the reference)",
          "alone": "vLLM alone", "kvpool": "kvpool", "lmcache-server": "LMCache server",
          "lmcache": "LMCache connector (CPU, disk)",
          "offload": "vLLM offloading", "offload-simple": "vLLM simple offloading"}


def median(v):
    v = sorted(v)
    return v[(len(v) - 1) // 2] if v else None


def report(raw: str) -> str:
    """The Markdown tables of a run's lines (what main() printed)."""
    ttft, cached, failed, order = {}, {}, {}, []
    for line in open(raw):
        kind, _, rest = line.partition(" ")
        f = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
        if kind == "failed":
            c, why = rest.split(" error=", 1)
            failed[c.split("=", 1)[1]] = json.loads(why)
            order.append(c.split("=", 1)[1])
        elif kind == "started":
            order.append(f["config"])
        elif kind == "engine":
            k = (f["config"], int(f["engine"]), int(f["len"]), float(f["share"]))
            ttft.setdefault(k, []).append(float(f["ttft_ms"]))
            cached.setdefault(k, []).append(int(f["cached"]))
    cases = sorted({(k[2], k[3]) for k in ttft})
    engines = sorted({k[1] for k in ttft})
    ran = [c for c in order if c not in failed]
    m = {k: median(v) for k, v in ttft.items()}
    out = []

    def cell(c, e, n, sh):
        t = m.get((c, e, n, sh))
        if t is None:
            return "-"
        return "%.0f ms (%s cached)" % (t, median(cached[c, e, n, sh]))

    ref = "alone"
    cols = [(c, e) for c in ran for e in engines if e > 1]
    if any(k[0] == "own-cache" for k in ttft):
        cols.insert(0, ("own-cache", 2))
    out.append("| prompt | shared | " + " | ".join(
        LABELS[c] if c == "own-cache" else "%s, engine %d" % (LABELS.get(c, c), e)
        for c, e in cols) + " | kvpool's engine 2 ÷ vLLM alone's |")
    out.append("| ---: | ---: | " + " | ".join("---:" for _ in cols) + " | ---: |")
    for n, sh in cases:
        x = ""
        if m.get(("kvpool", 2, n, sh)) and m.get((ref, 2, n, sh)):
            x = "%.1fx lower" % (m[ref, 2, n, sh] / m["kvpool", 2, n, sh])
        out.append("| %d | %d%% | " % (n, round(sh * 100)) + " | ".join(
            cell(c, e, n, sh) for c, e in cols) + " | %s |" % x)
    out.append("")
    out.append("Prompt throughput (prompt tokens ÷ time to first token) of engine 2, "
               "tokens/s:")
    out.append("")
    out.append("| prompt | shared | " + " | ".join(LABELS.get(c, c) for c in ran) + " |")
    out.append("| ---: | ---: | " + " | ".join("---:" for c in ran) + " |")
    for n, sh in cases:
        out.append("| %d | %d%% | " % (n, round(sh * 100)) + " | ".join(
            "%.0f" % (n / m[c, 2, n, sh] * 1e3) if m.get((c, 2, n, sh)) else "-"
            for c in ran) + " |")
    out.append("")
    out.append("Engine 1 (computes every prompt; with kvpool it also saves them), time to "
               "the first token:")
    out.append("")
    out.append("| prompt | shared | " + " | ".join(LABELS.get(c, c) for c in ran) +
               " | kvpool's cost |")
    out.append("| ---: | ---: | " + " | ".join("---:" for c in ran) + " | ---: |")
    costs = []
    for n, sh in cases:
        cost = ""
        if m.get(("kvpool", 1, n, sh)) and m.get((ref, 1, n, sh)):
            costs.append(m["kvpool", 1, n, sh] / m[ref, 1, n, sh] - 1)
            cost = "%+.1f%%" % (costs[-1] * 100)
        out.append("| %d | %d%% | " % (n, round(sh * 100)) + " | ".join(
            "%.0f ms" % m[c, 1, n, sh] if m.get((c, 1, n, sh)) else "-" for c in ran) +
            " | %s |" % cost)
    if failed:
        out.append("")
        out.append("| configuration | could not run on this machine: the engine's error |")
        out.append("| --- | --- |")
        for c, why in failed.items():
            out.append("| %s | `%s` |" % (LABELS.get(c, c), why.replace("|", "\\|")))
    goal = {}
    k2 = (2048, 0.9)
    if m.get(("kvpool", 2) + k2) and m.get((ref, 2) + k2):
        goal["speedup"] = m[(ref, 2) + k2] / m[("kvpool", 2) + k2]
        if m.get(("own-cache", 2) + k2):
            goal["floor"] = m[(ref, 2) + k2] / m[("own-cache", 2) + k2]
    if costs:
        goal["cost"] = statistics.median(costs)
    return json.dumps(goal) + "\n" + "\n".join(out) + "\n"


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        sys.stdout.write(report(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--lengths", default="1024,2048,4096")
    ap.add_argument("--shares", default="0.5,0.9")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engines", type=int, default=3)
    ap.add_argument("--lmcache-site")
    ap.add_argument("--eager", action="store_true", help="engines with --enforce-eager")
    a = ap.parse_args()
    a.engine_args = []
    configs = a.config or ["alone", "kvpool", "lmcache-server", "lmcache", "offload",
                           "offload-simple"]
    lengths = [int(x) for x in a.lengths.split(",")]
    shares = [float(x) for x in a.shares.split(",")]
    model = ve.make_model_in_venv(os.path.join(a.work, "model"))
    if not a.eager:
        ve.COMMON_ARGS[:] = [x for x in ve.COMMON_ARGS if x != "--enforce-eager"]
    # the same prompts for every configuration: per repetition and case a
    # shared prefix, and per engine its own tail
    rng = random.Random(42)
    cases = [(n, s) for n in lengths for s in shares]
    prompts = {}
    for r in range(a.reps):
        for n, s in cases:
            shared = ve.words(int(n * s), rng)
            for e in range(a.engines):
                prompts[r, n, s, e] = " ".join(shared + ve.words(n - len(shared), rng))
    warm = " ".join(ve.words(64, random.Random(7)))
    for c in configs:
        t0 = time.monotonic()
        engines, server = [], None
        try:
            if c == "lmcache-server":
                server = LMCacheServer(a)
            engines = [config_engine(c, model, os.path.join(a.work, "%s-%d.log" % (c, e)),
                                     "0", a) for e in range(a.engines)]
            ve.start(engines, timeout=600)
        except Exception as ex:  # noqa: BLE001 (the row says why)
            why = "".join(e.log() for e in engines) + "\n" + str(ex)
            print("failed config=%s error=%s" % (c, json.dumps(error_of(why))), flush=True)
            if server is not None:
                server.stop()
            continue
        print("started config=%s seconds=%.0f" % (c, time.monotonic() - t0), flush=True)
        try:
            for e, eng in enumerate(engines):
                time.sleep(3)  # the engine before may still be saving (LMCache saves after)
                eng.complete(warm, 1)  # a server has had traffic before
                for r in range(a.reps):
                    for n, s in cases:
                        got = eng.complete(prompts[r, n, s, e], NEW_TOKENS)
                        print("engine config=%s engine=%d len=%d share=%.2f rep=%d "
                              "ttft_ms=%.2f cached=%d tokens=%d" %
                              (c, e + 1, n, s, r, got.ttft * 1e3, got.cached_tokens,
                               len(got.tokens)), flush=True)
            if c == "alone":
                # engine 1 again, with engine 2's prompts: vLLM's own prefix
                # cache in one process, no transfer at all (the reference)
                for r in range(a.reps):
                    for n, s in cases:
                        got = engines[0].complete(prompts[r, n, s, 1], NEW_TOKENS)
                        print("engine config=own-cache engine=2 len=%d share=%.2f rep=%d "
                              "ttft_ms=%.2f cached=%d tokens=%d" %
                              (n, s, r, got.ttft * 1e3, got.cached_tokens,
                               len(got.tokens)), flush=True)
            for e, eng in enumerate(engines):
                for line in eng.log_lines("kvpool ("):
                    print("log config=%s engine=%d %s" % (c, e + 1, json.dumps(line)))
            for e, eng in enumerate(engines):
                for line in eng.log_lines("LMCache ERROR")[:3]:
                    print("log config=%s engine=%d %s" % (c, e + 1, json.dumps(line)))
        finally:
            for eng in engines:
                eng.stop()
            if server is not None:
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
