#!/bin/sh
# SPDX-License-Identifier: MIT
# run-waits.sh - what parked waits cost everyone else, for `make
# bench-waits`: a fresh kvpoold (root, --max-clients past the waits, the
# descriptors for them) per run of bench/waits, with no ACQUIRE waiting and
# with 10,000 waiting in the namespace published into; publishes per
# second and another client's round trips, medians of the rounds. With
# --ref DIR the same runs against the kvpoold built in DIR (another
# revision), in the same rounds. Replaces the section between
# <!-- bench:waits:begin --> and <!-- bench:waits:end --> in BENCHMARKS.md.
set -eu

usage() {
	cat <<EOF2
Usage: run-waits.sh [--builddir DIR] [--output FILE] [--ref DIR] [--rounds N]
                    [--waits N] [--seconds S]
Publishes per second and another client's round trips with and without
N ACQUIREs waiting for keys.

  --builddir DIR    where daemon/kvpoold and bench/waits were built (default .)
  --output FILE     the Markdown file whose waits section is replaced
  --ref DIR         also run against DIR/daemon/kvpoold (an earlier revision)
  --rounds N        rounds, each daemon with and without the waits (default 3)
  --waits N         ACQUIREs waiting (default 10000)
  --seconds S       publishing time of a run (default 5)
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--ref) ref=${2:?--ref needs a build directory} ;;
	--rounds) rounds=${2:?--rounds needs a count} ;;
	--waits) waits=${2:?--waits needs a count} ;;
	--seconds) seconds=${2:?--seconds needs a number} ;;
	*) return 1 ;;
	esac
}

ref=
rounds=3
waits=10000
seconds=5
bench_parse_opts "$@"
WAITS=$builddir/bench/waits
bench_check_built bench-waits "$KVPOOLD" "$WAITS"
[ -z "$ref" ] || [ -x "$ref/daemon/kvpoold" ] || bench_die "--ref $ref has no daemon/kvpoold"
bench_tmpdir
load=$(bench_load)
# every waiting ACQUIRE is a connection: descriptors for them, both sides
ulimit -n $((waits + 1024)) 2>/dev/null ||
	bench_die "cannot raise the descriptor limit to $((waits + 1024)) (run as root)"
daemon_args="--pool-size 256M --slab-size 16M --max-clients $((waits + 64)) --log-level warn"

# one DAEMON TAG N - a fresh daemon, one run of bench/waits with N waits,
# its line to $tmp/TAG-N.
one() {
	_this=$KVPOOLD
	KVPOOLD=$1
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" $daemon_args
	KVPOOLD=$_this
	"$WAITS" --socket "$sock" --waits "$3" --seconds "$seconds" >>"$tmp/$2-$3" ||
		bench_die "bench/waits failed"
	tail -n 1 "$tmp/$2-$3" >&2
	bench_stop_daemon "$pidfile"
}

r=1
while [ "$r" -le "$rounds" ]; do
	for n in 0 "$waits"; do
		one "$KVPOOLD" this "$n"
		[ -z "$ref" ] || one "$ref/daemon/kvpoold" ref "$n"
	done
	r=$((r + 1))
done

med() {
	bench_median "$tmp/$1" waits "$2"
}

# row TAG NAME - the daemon's line of the table.
row() {
	p0=$(med "$1-0" publishes_per_s)
	pn=$(med "$1-$waits" publishes_per_s)
	echo "| $2 | $p0 | $pn | $(bench_calc "$pn / $p0") |" \
	     "$(med "$1-0" other_p99_us) / $(med "$1-0" other_max_ms) |" \
	     "$(med "$1-$waits" other_p99_us) / $(med "$1-$waits" other_max_ms) |"
}

{
	echo "## ACQUIREs that wait for keys, and everyone else (bench/waits)"
	echo
	bench_machine "\`make bench-waits\` (bench/run-waits.sh)" "$load"
	echo
	echo "A decode engine's load waits in kvpoold for the blocks its prefill engine"
	echo "is saving (ACQUIRE with WAIT). Here $waits such ACQUIREs wait, each on a"
	echo "connection of its own, for a chain of 64 keys of which the pool holds all"
	echo "but the last; meanwhile one client publishes fresh one-block pages into the"
	echo "same namespace for $seconds s (alloc, publish, release: three round trips a"
	echo "page), and another client in another namespace asks the daemon in a loop."
	echo "Publishes per second, and the other client's round trips (p99 in µs /"
	echo "worst in ms), medians of $rounds rounds, each run on a fresh daemon, the"
	echo "runs with and without the waits alternating. Goals: publishes with the"
	echo "waits at least 0.9x of without; the other client's worst round trip under"
	echo "10 ms."
	echo
	echo "| daemon | publishes/s, no wait | with $waits waiting | ratio | other client, no wait | with the waits |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: |"
	row this "this revision"
	[ -z "$ref" ] ||
		row ref "reference: the build of $(git -C "$ref" rev-parse --short HEAD 2>/dev/null || echo "--ref's tree")"
	echo
	echo "Commands: \`ulimit -n $((waits + 1024))\`, \`kvpoold $daemon_args\`, then"
	echo "\`bench/waits --waits N --seconds $seconds\` for N = 0 and $waits."
} >"$tmp/section.md"
bench_replace_section waits "$tmp/section.md" "$output"
