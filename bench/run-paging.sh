#!/bin/sh
# SPDX-License-Identifier: MIT
# run-paging.sh - the serving-throughput benchmark of `make bench`: for each
# arrival rate and each memory policy (paged with sharing, contiguous
# reservation) starts a fresh kvpoold on a socket in a temporary
# directory, runs bench/serve, stops the daemon; then finds the highest
# rate each policy sustains under a latency bound and replaces the section
# between <!-- bench:serve:begin --> and <!-- bench:serve:end --> in
# BENCHMARKS.md (appending it the first time).
set -eu

usage() {
	cat <<EOF
Usage: run-paging.sh [--builddir DIR] [--output FILE] [--requests N] [--bound S]
Sweep the request rate of simulated model servers whose KV pages come from
kvpoold, paged with prefix sharing and reserved contiguously, and write the
results into FILE (default ./BENCHMARKS.md).

  --builddir DIR    where daemon/kvpoold and bench/serve were built (default .)
  --output FILE     the Markdown file whose serve section is replaced
  --requests N      requests per client process and run (default 300)
  --bound S         p90 normalized latency bound, s/token (default 0.1)
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# bench_opt NAME VALUE - run-paging.sh's own options (see bench/lib.sh).
bench_opt() {
	case $1 in
	--requests) requests=${2:?--requests needs a count} ;;
	--bound) bound=${2:?--bound needs seconds per token} ;;
	*) return 1 ;;
	esac
}

requests=300
bound=0.1
bench_parse_opts "$@"
SERVE=$builddir/bench/serve
bench_check_built bench-paging "$KVPOOLD" "$SERVE"
bench_tmpdir

# --- measure --------------------------------------------------------------

pool=32M
slab=1M
rates="1 2 2.5 3 4 6 8 10 12 16"
kvpoold_cmd="kvpoold --socket \$SOCK --pid-file \$TMP/kvpoold.pid --pool-size $pool --slab-size $slab --log-level warn"
serve_cmd="bench/serve --socket \$SOCK --clients 4 --requests $requests --policy P --rate R"
load=$(bench_load)
start=$(date +%s.%N)
for policy in paged reserve; do
	for rate in $rates; do
		bench_start_daemon "$sock" "$pidfile" --pool-size $pool --slab-size $slab --log-level warn
		"$SERVE" --socket "$sock" --clients 4 --requests "$requests" --policy $policy \
			--rate "$rate" >"$tmp/run.txt" ||
			bench_die "bench/serve failed: $serve_cmd (P=$policy R=$rate)"
		bench_stop_daemon "$pidfile"
		grep '^serve-workload ' "$tmp/run.txt" >"$tmp/workload.txt"
		grep '^serve ' "$tmp/run.txt" | tee -a "$tmp/serve.txt" >&2
	done
done
wall=$(bench_calc "$(date +%s.%N) - $start" %.1f)

# --- the section ------------------------------------------------------------

w() { bench_field "$tmp/workload.txt" serve-workload "$1"; }
r() { bench_field "$tmp/serve.txt" "serve policy=$1 rate=$(bench_calc "$2" %.3f)" "$3"; }

# sustained POLICY - the highest rate of the sweep whose p90 normalized
# latency is within the bound (0 when none is).
sustained() {
	_best=0
	for _r in $rates; do
		if awk "BEGIN { exit !($(r "$1" "$_r" norm_p90) <= $bound) }"; then
			_best=$_r
		fi
	done
	echo $_best
}

sa=$(sustained paged)
sb=$(sustained reserve)
ratio=$(awk "BEGIN { if ($sb > 0) printf \"%.2f\", $sa / $sb; else print \"n/a\" }")
met=$(awk "BEGIN { r = $sb > 0 ? $sa / $sb : 0; print (r >= 2 && r <= 4) ? \"met\" : (r > 4 ? \"exceeded\" : \"not met\") }")

row() {
	echo "| $2 | $1 | $(r "$1" "$2" req_per_s) | $(r "$1" "$2" tok_per_s) | $(r "$1" "$2" norm_mean) | $(r "$1" "$2" norm_p90) | $(r "$1" "$2" mean_batch) | $(r "$1" "$2" preempts) | $(r "$1" "$2" hit_tokens) | $(r "$1" "$2" computed) |"
}

section=$tmp/section.md
{
	echo "## Serving throughput: paging + sharing against contiguous reservation (bench/serve)"
	echo
	bench_machine "bench/run-paging.sh (\`make bench\` or \`make bench-paging\`)" "$load"
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	echo "| 2 to 4 times the throughput of contiguous reservation at the same latency (highest swept rate with p90 normalized latency ≤ $bound s/token) | paged + sharing $sa req/s, reservation $sb req/s | **$met** (×$ratio) |"
	echo
	echo "**Workload.** $(w clients) client processes, each a model server with its own"
	echo "kvpool connection and iteration-level batching; requests arrive to each as a"
	echo "Poisson process at a quarter of the swept total rate, $(w requests) per process and run"
	echo "($(($(w clients) * $(w requests))) in all). A request is one of $(w prompts) system prompts (lengths"
	echo "drawn once, uniform in 256..1024 tokens; picked by Zipf, exponent $(w zipf)), a user"
	echo "part and an output, both log-normal (means $(w user_mean) and $(w out_mean) tokens, σ $(w sigma)"
	echo "of the log; the user part clipped to half the room left under max_len $(w max_len),"
	echo "the output to the rest). Every draw comes from seed $(w seed), so both policies"
	echo "and every rate serve the same requests (only the arrival times scale)."
	echo
	echo "**Time is simulated, memory is real.** No model runs: an engine step costs"
	echo "t0 + t1 × (tokens computed in the step) = $(w t0_ms) ms + $(w t1_ms) ms × (uncached prompt"
	echo "tokens of the sequences admitted in the step, at most $(w max_prefill), + one per decoding"
	echo "sequence) of simulated time (roughly a 13B model on one A100: the weights"
	echo "read once per step, compute per token; attention's cost in the context"
	echo "length is left out). The processes take turns through semaphores so that"
	echo "the one with the lowest simulated clock runs next, so they contend for the"
	echo "one pool in simulated-time order; every page is a real lease from kvpoold"
	echo "(pool $pool in $slab slabs of 16 KiB pages = 2048 pages of $(w block_tokens) tokens, a fresh"
	echo "daemon per run). Paged: pages as sequences grow (one kvp_alloc() a step"
	echo "for all sequences that cross a block), kvp_acquire() of the cached"
	echo "system-prompt blocks (hits are not computed), kvp_publish() of the ones"
	echo "computed, kvp_release() at the end; when kvp_alloc() fails the last admitted"
	echo "sequence is preempted and recomputed later (vLLM's recompute). Reservation:"
	echo "admission needs one kvp_alloc() of max_len = $(w max_len) tokens (128 pages), so the pool"
	echo "holds 16 sequences at most; no sharing. Both admit first come, first served."
	echo "Normalized latency is a request's end-to-end latency ÷ its output tokens"
	echo "(the vLLM paper's metric); throughput is requests (output tokens) ÷ the"
	echo "simulated time until the last one finished, so it includes the drain."
	echo
	echo "| rate req/s | policy | done req/s | output tok/s | norm. latency mean s/tok | p90 s/tok | mean batch / process | preemptions | prompt tokens from cache | tokens computed |"
	echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for rate in $rates; do
		row paged "$rate"
		row reserve "$rate"
	done
	echo
	echo "The whole sweep ($(echo $rates | wc -w) rates × 2 policies) took $wall s of wall time. The"
	echo "sustained rate is only as fine as the sweep. Left out: attention's cost"
	echo "in the context length, real compute, chunked prefill, swapping instead of"
	echo "recompute, publishing of user-part blocks (only system-prompt blocks are"
	echo "shared); a published block becomes visible to the other processes when its"
	echo "step starts, not when it ends."
	echo
	echo "Commands (\$TMP is a temporary directory, \$SOCK a socket in it; a fresh"
	echo "daemon for each P in paged, reserve and R in $rates):"
	echo
	echo '```'
	echo "$kvpoold_cmd"
	echo "$serve_cmd"
	echo '```'
} >"$section"

# the plot: completed requests/s and p90 normalized latency against the rate
for rate in $rates; do
	echo "$rate $(r paged "$rate" req_per_s) $(r reserve "$rate" req_per_s)" \
		"$(r paged "$rate" norm_p90) $(r reserve "$rate" norm_p90)"
done >"$tmp/serve.dat"
cat >"$tmp/serve.gp" <<GP
set title "Throughput against the request rate (bench/serve)"
set xlabel "requests arriving per second"
set ylabel "requests completed per second"
set y2label "p90 normalized latency, s/token"
set logscale y2
set ytics nomirror
set y2tics
set key top left
set grid
plot data using 1:2 with linespoints title "kvpool: paging + sharing", \
     data using 1:3 with linespoints title "contiguous reservation", \
     data using 1:4 axes x1y2 with lines dashtype 2 title "p90 latency, paging", \
     data using 1:5 axes x1y2 with lines dashtype 3 title "p90 latency, reservation", \
     $bound axes x1y2 with lines dashtype 4 title "latency bound"
GP
{ echo; bench_plot serve "$tmp/serve.dat" "$tmp/serve.gp"; echo; } >>"$section"
bench_replace_section serve "$section" "$output"
