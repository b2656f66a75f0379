#!/bin/sh
# SPDX-License-Identifier: MIT
# run-nschurn.sh - the namespace-churn benchmark of `make bench`: what
# making and dropping namespaces with 1 GiB tier files costs the daemon's
# other clients. Starts kvpoold with a spill directory on disk, runs
# bench/nschurn (one client's STATS round trips alone, then while another
# process makes and drops 4 namespaces), and replaces the section between
# <!-- bench:nschurn:begin --> and <!-- bench:nschurn:end --> in
# BENCHMARKS.md. With --ref DIR it runs the same against the kvpoold built
# in DIR (another revision) too, as a reference.
set -eu

usage() {
	cat <<EOF
Usage: run-nschurn.sh [--builddir DIR] [--output FILE] [--ref DIR] [--rounds N] [--dir DIR]
Time one client's STATS while another makes and drops namespaces with
1 GiB tier files, and write the results into FILE (default ./BENCHMARKS.md).

  --builddir DIR    where daemon/kvpoold and bench/nschurn were built (default .)
  --output FILE     the Markdown file whose nschurn section is replaced
  --ref DIR         also run against DIR/daemon/kvpoold (e.g. a build of an
                    earlier revision), as the reference
  --rounds N        rounds, alternating the daemons (default 3); medians
  --dir DIR         where the tier files go: a disk, not tmpfs (default /var/tmp)
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# bench_opt NAME VALUE - run-nschurn.sh's own options (see bench/lib.sh).
bench_opt() {
	case $1 in
	--ref) ref=${2:?--ref needs a build directory} ;;
	--rounds) rounds=${2:?--rounds needs a count} ;;
	--dir) base=${2:?--dir needs a directory} ;;
	*) return 1 ;;
	esac
}

ref=
rounds=3
base=/var/tmp
bench_parse_opts "$@"
CHURN=$builddir/bench/nschurn
bench_check_built bench-nschurn "$KVPOOLD" "$CHURN"
[ -z "$ref" ] || [ -x "$ref/daemon/kvpoold" ] || bench_die "--ref $ref has no daemon/kvpoold"
bench_tmpdir
spill=$(mktemp -d "$base/kvpool-nschurn.XXXXXX")
bench_on_exit() {
	rm -rf "$spill"
}
load=$(bench_load)
churn_args="--cycles 4 --samples 3000"
daemon_args="--pool-size 64M --slab-size 16M --spill-size 1G --log-level warn"

# one DAEMON TAG - a fresh daemon, one run of bench/nschurn, its line to $tmp/TAG.
one() {
	_this=$KVPOOLD
	KVPOOLD=$1
	rm -rf "$spill/tiers"
	mkdir -m 0700 "$spill/tiers"
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" $daemon_args --spill-dir "$spill/tiers"
	KVPOOLD=$_this
	# shellcheck disable=SC2086
	"$CHURN" --socket "$sock" $churn_args >>"$tmp/$2" || bench_die "bench/nschurn failed"
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
	bench_median "$tmp/$1" nschurn "$2"
}

# ms TAG KEY - med in milliseconds, from microseconds.
ms() {
	bench_calc "$(med "$1" "$2") / 1000" %.3f
}

# row TAG LABEL - one daemon's line of the table.
row() {
	echo "| $2 | $(ms "$1" stats_quiet_p50_us) / $(ms "$1" stats_quiet_p99_us) |" \
	     "$(ms "$1" stats_churn_p50_us) / $(ms "$1" stats_churn_p99_us) |" \
	     "$(ms "$1" stats_churn_max_us) | $(med "$1" churn_over_quiet_p99) |" \
	     "$(med "$1" create_p50_ms) | $(med "$1" drop_p50_ms) |"
}

{
	echo "## Namespaces made and dropped under load (bench/nschurn)"
	echo
	bench_machine "\`make bench\` (bench/run-nschurn.sh)" "$load"
	echo
	echo "One client's STATS round trips (milliseconds; medians of $rounds rounds), first"
	echo "alone, then while another process makes 4 namespaces and drops each again."
	echo "Every namespace gets a 1 GiB tier file in the spill directory (under $base):"
	echo "preallocated, its 15,420 slot headers (64 KiB pages) wiped, and removed again"
	echo "on the drop."
	echo "The goal: p99 under 10 ms while that goes on (the file work runs on worker"
	echo "threads; the HELLO that makes a namespace and the DROP_NS wait for it, nobody"
	echo "else does). The ratio is p99 with churn over p99 alone."
	echo
	echo "| daemon | STATS p50 / p99 alone | p50 / p99 with churn | max with churn | p99 ratio | make (HELLO) p50 ms | drop p50 ms |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
	row this "this revision"
	[ -z "$ref" ] ||
		row ref "reference: \`$ref\` ($(git -C "$ref" rev-parse --short HEAD 2>/dev/null || echo '?'))"
	echo
	echo "Commands: \`kvpoold $daemon_args --spill-dir DIR\`, then \`bench/nschurn $churn_args\`."
} >"$tmp/section.md"
bench_replace_section nschurn "$tmp/section.md" "$output"
