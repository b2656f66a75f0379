#!/bin/sh
# SPDX-License-Identifier: MIT
# run-list.sh - the listing benchmark of `make bench`: what LIST_PAGES and
# LIST_PREFIXES cost the daemon's other clients. Starts kvpoold, runs
# bench/list (8,000 cached pages, 250 idle clients each holding 4 of
# them; one client's STATS round trips with and without 4 processes
# listing everything back to back), and replaces the section between
# <!-- bench:list:begin --> and <!-- bench:list:end --> in BENCHMARKS.md
# (appending it the first time). With --ref DIR it runs the same against
# the kvpoold built in DIR (another revision) too, as a reference.
set -eu

usage() {
	cat <<EOF
Usage: run-list.sh [--builddir DIR] [--output FILE] [--ref DIR] [--rounds N]
Time one client's STATS while others list pages and prefixes, and write
the results into FILE (default ./BENCHMARKS.md).

  --builddir DIR    where daemon/kvpoold and bench/list were built (default .)
  --output FILE     the Markdown file whose list section is replaced
  --ref DIR         also run against DIR/daemon/kvpoold (e.g. a build of an
                    earlier revision), as the reference
  --rounds N        rounds, alternating the daemons (default 3); medians
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# bench_opt NAME VALUE - run-list.sh's own options (see bench/lib.sh).
bench_opt() {
	case $1 in
	--ref) ref=${2:?--ref needs a build directory} ;;
	--rounds) rounds=${2:?--rounds needs a count} ;;
	*) return 1 ;;
	esac
}

ref=
rounds=3
bench_parse_opts "$@"
LIST=$builddir/bench/list
bench_check_built bench-list "$KVPOOLD" "$LIST"
[ -z "$ref" ] || [ -x "$ref/daemon/kvpoold" ] || bench_die "--ref $ref has no daemon/kvpoold"
bench_tmpdir
load=$(bench_load)
list_args="--pages 8000 --idle 250 --leases 4 --listers 4 --samples 300"
daemon_args="--pool-size 256M --slab-size 16M --max-clients 512 --log-level warn"

# one DAEMON TAG - a fresh daemon, one run of bench/list, its line to $tmp/TAG.
one() {
	_this=$KVPOOLD
	KVPOOLD=$1
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" $daemon_args
	KVPOOLD=$_this
	# shellcheck disable=SC2086
	"$LIST" --socket "$sock" $list_args >>"$tmp/$2" || bench_die "bench/list failed"
	tail -n 1 "$tmp/$2" >&2
	bench_stop_daemon "$pidfile"
}

r=1
while [ "$r" -le "$rounds" ]; do
	one "$KVPOOLD" this
	[ -z "$ref" ] || one "$ref/daemon/kvpoold" ref
	r=$((r + 1))
done

# --- the section ------------------------------------------------------------

# med TAG KEY - the median of KEY over the rounds of TAG.
med() {
	bench_median "$tmp/$1" list "$2"
}

# row TAG LABEL - one daemon's line of the table.
row() {
	echo "| $2 | $(med "$1" stats_quiet_p50_us) | $(med "$1" stats_busy_p50_us) |" \
	     "$(med "$1" stats_busy_p99_us) | $(med "$1" busy_over_quiet_p50) |" \
	     "$(med "$1" listing_p50_us) |"
}

{
	echo "## Listings under load (bench/list)"
	echo
	bench_machine "\`make bench\` (bench/run-list.sh)" "$load"
	echo
	echo "One client's STATS round trips (microseconds; medians of $rounds rounds) in a"
	echo "namespace of 8,000 cached 16 KiB pages with 250 idle clients each holding 4,"
	echo "first alone, then while 4 processes ask LIST_PAGES and LIST_PREFIXES of"
	echo "everything back to back. The daemon serves from one thread, so each STATS"
	echo "waits behind the listings in progress: the ratio is what the listings cost"
	echo "the other clients."
	echo
	echo "| daemon | STATS p50 alone | STATS p50 with listers | p99 with listers | ratio of p50s | one listing p50 |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: |"
	row this "this revision"
	[ -z "$ref" ] ||
		row ref "reference: \`$ref\` ($(git -C "$ref" rev-parse --short HEAD 2>/dev/null || echo '?'))"
	echo
	echo "Commands: \`kvpoold $daemon_args\`, then \`bench/list $list_args\`."
} >"$tmp/section.md"
bench_replace_section list "$tmp/section.md" "$output"
