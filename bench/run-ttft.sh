#!/bin/sh
# SPDX-License-Identifier: MIT
# run-ttft.sh - what sharing buys in real compute: the example model server
# (examples/kvpool-model-server, a small transformer on the CPU) serves
# prompts whose first part another process already published, with the
# pool and computed privately (--no-cache, the reference measured in the
# same run), over prompt lengths and shared fractions. Per configuration,
# three times (medians reported): a fresh kvpoold; process A publishes
# the shared prefixes; process B serves the prompts with the pool;
# process C serves the same prompts with --no-cache. Replaces the section between <!-- bench:ttft:begin -->
# and <!-- bench:ttft:end --> of BENCHMARKS.md (appending it the first
# time).
set -eu

usage() {
	cat <<EOF
Usage: run-ttft.sh [--builddir DIR] [--output FILE] [--lengths "L..."]
                   [--shares "PCT..."] [--requests N]
Time to first token and prefill throughput of a second model-server
process that finds part of its prompts in the pool, against the same
prompts computed privately, and write them into FILE (default
./BENCHMARKS.md).

  --builddir DIR     where daemon/kvpoold and examples/ were built (default .)
  --output FILE      the Markdown file whose ttft section is replaced
  --lengths "L..."   prompt lengths in tokens (default "256 1024 2048")
  --shares "PCT..."  the part of each prompt already in the pool, in %
                     (default "0 50 90")
  --requests N       prompts per configuration (default 3)
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--lengths) lengths=${2:?--lengths needs token counts} ;;
	--shares) shares=${2:?--shares needs percentages} ;;
	--requests) requests=${2:?--requests needs a count} ;;
	*) return 1 ;;
	esac
}

lengths="256 1024 2048"
shares="0 50 90"
requests=3
bench_parse_opts "$@"
SERVER=$builddir/examples/kvpool-model-server
bench_check_built all "$KVPOOLD" "$SERVER"
bench_tmpdir

# text LEN SEED - LEN bytes of letters and spaces from SEED (one token a
# byte: the model server's tokenizer)
text() {
	awk -v n="$1" -v seed="$2" 'BEGIN {
		srand(seed); s = ""
		while (length(s) < n) {
			c = int(rand() * 27)
			s = s (c == 26 ? " " : sprintf("%c", 97 + c))
		}
		printf "%s", substr(s, 1, n) }'
}

# median COLUMN FILE - the median of a column of numbers
median() {
	sort -g -k"$1","$1" "$2" | awk -v c="$1" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'
}

# json FILE KEY - a number of the model server's --json summary
json() {
	sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1" | head -n 1
}

kvpoold_cmd="kvpoold --socket \$SOCK --pid-file \$TMP/kvpoold.pid --pool-size 512M --slab-size 16M --log-level warn --log-file \$TMP/kvpoold.log"
server_cmd="kvpool-model-server --socket \$SOCK --requests FILE --max-tokens 1 --batch 1 --json --quiet [--no-cache]"
load=$(bench_load)
t_start=$(date +%s)
: >"$tmp/results"
for len in $lengths; do
	for share in $shares; do
		shared=$((len * share / 100))
		prefix=$(text "$shared" "$len$share")
		: >"$tmp/prefix.txt"
		: >"$tmp/prompts.txt"
		i=0
		while [ $i -lt "$requests" ]; do
			[ "$shared" -gt 0 ] && printf '%s\n' "$prefix" >>"$tmp/prefix.txt"
			printf '%s%s\n' "$prefix" "$(text $((len - shared)) "$len$share$i")" \
				>>"$tmp/prompts.txt"
			i=$((i + 1))
		done
		: >"$tmp/reps"
		for r in 1 2 3; do
			bench_start_daemon "$sock" "$pidfile" --pool-size 512M --slab-size 16M \
				--log-level warn --log-file "$tmp/kvpoold.log"
			if [ "$shared" -gt 0 ]; then
				"$SERVER" --socket "$sock" --requests "$tmp/prefix.txt" \
					--max-tokens 1 --batch 1 --json --quiet >"$tmp/a.json"
			fi
			# B and C in turn, in either order, so that neither always
			# runs on a warmer machine
			if [ $((r % 2)) -eq 1 ]; then
				"$SERVER" --socket "$sock" --requests "$tmp/prompts.txt" \
					--max-tokens 1 --batch 1 --json --quiet >"$tmp/b.json"
			fi
			"$SERVER" --socket "$sock" --requests "$tmp/prompts.txt" --max-tokens 1 \
				--batch 1 --json --quiet --no-cache >"$tmp/c.json"
			if [ $((r % 2)) -eq 0 ]; then
				"$SERVER" --socket "$sock" --requests "$tmp/prompts.txt" \
					--max-tokens 1 --batch 1 --json --quiet >"$tmp/b.json"
			fi
			bench_stop_daemon "$pidfile"
			# one request at a time: its prefill is its time to first token
			echo "$(json "$tmp/b.json" prefill_s) $(json "$tmp/c.json" prefill_s)" \
				"$(json "$tmp/b.json" cached_tokens) $(json "$tmp/b.json" prompt_tokens)" \
				>>"$tmp/reps"
		done
		echo "$len $share $(median 1 "$tmp/reps") $(median 2 "$tmp/reps")" \
			"$(median 3 "$tmp/reps") $(median 4 "$tmp/reps")" >>"$tmp/results"
		echo "$bench_prog: $len tokens, $share % shared: done" >&2
	done
done
wall=$(($(date +%s) - t_start))

# --- the section ------------------------------------------------------------------

section=$tmp/section.md
{
	echo "## Time to first token with the pool, in real compute (bench/run-ttft.sh)"
	echo
	bench_machine "bench/run-ttft.sh" "$load"
	echo
	echo "The example model server (a 4-layer transformer on the CPU with the"
	echo "kernels' C references, the demo's model) serves $requests prompts per row, one at a"
	echo "time, generating one token: a request's prefill is its time to first"
	echo "token. Process A first publishes the shared part (the first SHARED % of"
	echo "every prompt, the same for all); process B then serves the prompts with"
	echo "the pool; process C serves the same prompts with --no-cache, computing"
	echo "everything privately (the reference, same run, same daemon). Each row"
	echo "ran three times, each with a fresh daemon, B before C and after it in"
	echo "turn; the table has the medians. Times are per request: a run's prefill"
	echo "time over its prompts."
	echo
	echo "| prompt tokens | shared | tokens from the pool (all prompts) | TTFT with the pool | TTFT computed privately | speed-up | prompt tokens/s with the pool | privately |"
	echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	while read -r len share b c cached prompt; do
		echo "| $len | $share % | $cached of $prompt | $(bench_calc "$b / $requests * 1000" %.1f) ms" \
			"| $(bench_calc "$c / $requests * 1000" %.1f) ms | **$(bench_calc "$c / $b" %.1f)x**" \
			"| $(bench_calc "$prompt / $b" %.0f) | $(bench_calc "$prompt / $c" %.0f) |"
	done <"$tmp/results"
	echo
	echo "With nothing shared the two take the same time within the machine's noise"
	echo "(the pool adds an ACQUIRE that misses and a PUBLISH). The speed-up grows"
	echo "with the shared part but stays below 1 / (1 - shared): the tokens left to"
	echo "compute are the last ones, which attend over the longest context and cost"
	echo "more than the prompt's average token, the more so the longer the prompt."
	echo "The whole run took $wall s. Left out: batching of several requests (the demo"
	echo "shows four processes at once), GPUs, and models of a realistic size, where a"
	echo "token's prefill costs far more than the pool's round trips."
	echo
	echo "Commands (\$TMP is a temporary directory, \$SOCK a socket in it; a fresh"
	echo "daemon for each row):"
	echo
	echo '```'
	echo "$kvpoold_cmd"
	echo "$server_cmd"
	echo '```'
} >"$section"
bench_replace_section ttft "$section" "$output"
