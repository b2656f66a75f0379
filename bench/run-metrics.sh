#!/bin/sh
# SPDX-License-Identifier: MIT
# run-metrics.sh - what scraping costs clients: kvpoold with
# --metrics-listen, bench/rpc (2 clients, alloc+release of one page) run in
# turns with no scraper and with one scraping /metrics every 100 ms (curl
# in a loop, 10 times a second), medians of the round-trip rate. Replaces
# the section between <!-- bench:metrics:begin --> and
# <!-- bench:metrics:end --> of BENCHMARKS.md.
set -eu

usage() {
	cat <<EOF2
Usage: run-metrics.sh [--builddir DIR] [--output FILE] [--rounds N] [--iters N]
Time bench/rpc's round trips with and without a Prometheus scrape every 100 ms.

  --builddir DIR   where daemon/kvpoold and bench/rpc were built (default .)
  --output FILE    the Markdown file whose metrics section is replaced
  --rounds N       turns of each, in alternating order (default 16: medians)
  --iters N        alloc+release cycles per client and run (default 50000)
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--rounds) rounds=${2:?--rounds needs a count} ;;
	--iters) iters=${2:?--iters needs a count} ;;
	*) return 1 ;;
	esac
}

rounds=16
iters=50000
bench_parse_opts "$@"
RPC=$builddir/bench/rpc
bench_check_built bench "$KVPOOLD" "$RPC"
command -v curl >/dev/null || bench_die "curl is missing (apt-get install curl)"
bench_tmpdir
load=$(bench_load)
port=$(awk 'BEGIN { srand(); print 20000 + int(rand() * 20000) }')
bench_start_daemon "$sock" "$pidfile" --pool-size 1G --slab-size 64M --log-level warn \
	--metrics-listen "127.0.0.1:$port"
url="http://127.0.0.1:$port/metrics"
curl -sf "$url" >"$tmp/first.txt" || bench_die "no metrics at $url"

scraper() {
	n=0
	while :; do
		curl -sf -o /dev/null "$url" && n=$((n + 1))
		echo "$n" >"$tmp/scrapes"
		sleep 0.1
	done
}

out=$tmp/runs
: >"$out"
# one run of bench/rpc, tagged scrape=yes or no
run() {
	"$RPC" --socket "$sock" --clients 2 --batch 1 --iters "$iters" --geometry large |
		sed "s/^rpc /rpc scrape=$1 /" >>"$out"
}
scraped() {
	scraper &
	spid=$!
	run yes
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
}
# in turns, the order swapped every round (a run after another runs warmer)
r=0
while [ $r -lt "$rounds" ]; do
	if [ $((r % 2)) -eq 0 ]; then
		run no
		scraped
	else
		scraped
		run no
	fi
	r=$((r + 1))
done
scrapes=$(cat "$tmp/scrapes" 2>/dev/null || echo 0)

median() {
	bench_field "$out" "rpc scrape=$1" "$2" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
no=$(median no pairs_per_s)
yes=$(median yes pairs_per_s)
p50no=$(median no pair_p50_us)
p50yes=$(median yes pair_p50_us)
p99no=$(median no pair_p99_us)
p99yes=$(median yes pair_p99_us)
cost=$(bench_calc "(1 - $yes / $no) * 100" %.1f)
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }

sect=$tmp/section.md
{
	echo "## Prometheus scrapes: what they cost clients (bench/run-metrics.sh)"
	echo
	bench_machine '`make bench` (bench/run-metrics.sh)' "$load"
	echo
	echo "One kvpoold with \`--metrics-listen\`; bench/rpc, 2 clients doing alloc +"
	echo "release of one 2 MiB page, $iters cycles each, run $rounds times with no scraper"
	echo "and $rounds times with curl fetching /metrics every 100 ms ($(wc -c <"$tmp/first.txt")"
	echo "bytes a scrape; the last such run had $scrapes), in turns, the order swapped every"
	echo "round. Medians. A negative cost means the runs with the scraper were the"
	echo "faster ones: the scrapes cost less than what else moves the figures here"
	echo "(a process waking ten times a second also keeps idle CPUs awake)."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	echo "| a scrape every 100 ms costs clients under 5 % of their round-trip rate | $cost % | $(verdict "$cost < 5") |"
	echo
	echo "| | pairs/s | pair p50 | pair p99 |"
	echo "| --- | ---: | ---: | ---: |"
	echo "| no scraper | $no | $p50no µs | $p99no µs |"
	echo "| a scrape every 100 ms | $yes | $p50yes µs | $p99yes µs |"
	echo
	echo "Command: \`make bench\` (or \`make bench-metrics\`, or \`sh bench/run-metrics.sh --builddir . --output BENCHMARKS.md\`)."
} >"$sect"
bench_replace_section metrics "$sect" "$output"
cat "$sect"
