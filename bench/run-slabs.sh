#!/bin/sh
# SPDX-License-Identifier: MIT
# run-slabs.sh - the slab benchmark of `make bench`: what --prefault (the
# default) costs when the pool's slabs are made, against --no-prefault.
# Starts kvpoold (host backend, 1 GiB pool in 64 MiB slabs) each way,
# alternating, runs bench/slabs against it (lease every page, write every
# page twice, plain memfds beside it as the reference), and replaces the
# section between <!-- bench:slabs:begin --> and <!-- bench:slabs:end -->
# in BENCHMARKS.md.
set -eu

usage() {
	cat <<EOF
Usage: run-slabs.sh [--builddir DIR] [--output FILE] [--rounds N]
Time making a 1 GiB host pool's slabs with and without --prefault, and
write the results into FILE (default ./BENCHMARKS.md).

  --builddir DIR    where daemon/kvpoold and bench/slabs were built (default .)
  --output FILE     the Markdown file whose slabs section is replaced
  --rounds N        rounds of each (default 5); medians
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# bench_opt NAME VALUE - run-slabs.sh's own options (see bench/lib.sh).
bench_opt() {
	case $1 in
	--rounds) rounds=${2:?--rounds needs a count} ;;
	*) return 1 ;;
	esac
}

rounds=5
bench_parse_opts "$@"
SLABS=$builddir/bench/slabs
bench_check_built bench-slabs "$KVPOOLD" "$SLABS"
bench_tmpdir
load=$(bench_load)
daemon_args="--backend host --pool-size 1G --slab-size 64M --free-watermark 0 --log-level warn"

# one TAG ARG... - a fresh daemon with ARGs, one run of bench/slabs, its
# line to $tmp/TAG.
one() {
	_tag=$1
	shift
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" $daemon_args "$@"
	"$SLABS" --socket "$sock" >>"$tmp/$_tag" || bench_die "bench/slabs failed"
	tail -n 1 "$tmp/$_tag" >&2
	bench_stop_daemon "$pidfile"
}

# grow TAG ARG... - a fresh daemon with ARGs, one run of bench/slabs
# --grow (a client's STATS while another grows the pool 8 pages at a
# time), its line to $tmp/TAG.
grow() {
	_tag=$1
	shift
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" $daemon_args "$@"
	"$SLABS" --socket "$sock" --grow 8 >>"$tmp/$_tag" || bench_die "bench/slabs --grow failed"
	tail -n 1 "$tmp/$_tag" >&2
	bench_stop_daemon "$pidfile"
}

r=1
while [ "$r" -le "$rounds" ]; do
	one prefault
	one lazy --no-prefault
	grow ahead
	grow onloop --no-slab-ahead
	r=$((r + 1))
done

# med TAG KEY - the median of KEY over the rounds of TAG, in ms.
med() {
	bench_calc "$(bench_median "$tmp/$1" slabs "$2") * 1000" %.0f
}

# row TAG LABEL - one way's line of the table.
row() {
	echo "| $2 | $(med "$1" alloc_s) | $(med "$1" touch1_s) | $(med "$1" first_total_s) |" \
	     "$(med "$1" touch2_s) | $(med "$1" plain_fallocate_s) | $(med "$1" plain_write_s) |" \
	     "$(bench_calc "$(med "$1" alloc_s) / $(med "$1" plain_fallocate_s)" %.2f) |"
}

# gmed TAG KEY - the median of KEY over the --grow rounds of TAG.
gmed() {
	bench_calc "$(bench_median "$tmp/$1" grow "$2")" %.0f
}

# growrow TAG LABEL - one daemon's line of the --grow table.
growrow() {
	echo "| $2 | $(gmed "$1" slabs) | $(gmed "$1" stats_quiet_p50_us) |" \
	     "$(gmed "$1" stats_quiet_p99_us) | $(gmed "$1" stats_quiet_max_us) |" \
	     "$(gmed "$1" stats_grow_p50_us) | $(gmed "$1" stats_grow_p99_us) |" \
	     "$(gmed "$1" stats_grow_max_us) | $(gmed "$1" grow_over_5ms) |" \
	     "$(bench_calc "$(gmed "$1" stats_grow_p99_us) / $(gmed "$1" stats_quiet_p99_us)" %.2f) |"
}

{
	echo "## Making the pool's slabs: --prefault against --no-prefault (bench/slabs)"
	echo
	bench_machine "\`make bench\` (bench/run-slabs.sh)" "$load"
	echo
	echo "Host backend, a 1 GiB pool in 16 slabs of 64 MiB, 2 MiB pages. One client"
	echo "leases all 512 pages in one kvp_alloc() (the daemon makes every slab), then"
	echo "writes every page, twice. With --prefault (the default since it keeps the"
	echo "OOM killer away from the clients) the daemon takes each slab's memory with"
	echo "fallocate() when it makes it; with --no-prefault the first write of each page"
	echo "takes it. Milliseconds, medians of $rounds rounds. The references, in the same"
	echo "process: 16 plain memfds of 64 MiB with fallocate(), and mapped and written"
	echo "once. The last column is the lease over plain fallocate()."
	echo
	echo "Prefault moves the cost of the memory from the clients' first writes into the"
	echo "daemon (lease + first write: $(med prefault first_total_s) ms against $(med lazy first_total_s) ms). A slab made on the"
	echo "daemon's loop holds the other clients: with --prefault about"
	echo "$(bench_calc "$(med prefault alloc_s) / 16" %.0f) ms per 64 MiB slab. Here one request asks for all 16 slabs at"
	echo "once, so --slab-ahead (below) has one slab ready and makes the others on the"
	echo "spot."
	echo
	echo "| daemon | lease all (slabs made) | first write | lease + first write | second write | plain fallocate | plain write | lease ÷ plain fallocate |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	row prefault "--prefault (default)"
	row lazy "--no-prefault"
	echo
	echo "Commands: \`kvpoold $daemon_args [--no-prefault]\`, then \`bench/slabs\`."
	echo
	echo "### What growing the pool costs the other clients"
	echo
	echo "One client times STATS round trips alone, then while a second one grows the"
	echo "same pool as an engine does: 8 pages (16 MiB) at a time, each batch written"
	echo "once before the next, until all 16 slabs are made (with --prefault). With"
	echo "--slab-ahead (the default) a worker thread makes the pool's next slab before"
	echo "it is needed; with --no-slab-ahead the daemon makes each slab on its loop"
	echo "when the pool needs it, and every other client waits. Microseconds, medians of"
	echo "$rounds rounds."
	echo
	echo "| daemon | slabs made | alone p50 | alone p99 | alone max | growing p50 | growing p99 | growing max | round trips over 5 ms | p99 growing ÷ alone |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	growrow ahead "--slab-ahead (default)"
	growrow onloop "--no-slab-ahead"
	echo
	echo "The round trips over 5 ms tell the two apart: made on the loop, each slab the"
	echo "pool grows by holds every client for as long as it takes to make (one long"
	echo "round trip per slab); made ahead, it is ready when the pool grows. The few"
	echo "long ones left, and the percentiles' noise, are this machine's 2 cores shared"
	echo "by the growing client, the timing client, the loop and the worker: a round"
	echo "trip also waits for a core. A request that needs more slabs at once than the"
	echo "one made ahead still has the others made on the spot."
	echo
	echo "Commands: \`kvpoold $daemon_args [--no-slab-ahead]\`, then \`bench/slabs --grow 8\`."
} >"$tmp/section.md"
bench_replace_section slabs "$tmp/section.md" "$output"
