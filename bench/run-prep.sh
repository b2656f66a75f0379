#!/bin/sh
# SPDX-License-Identifier: MIT
# run-prep.sh - the tier-file fairness benchmark of `make bench`: how long
# root's new namespace waits for its tier file while another user has 16
# new ones queued. Starts kvpoold (as root, its socket open to nobody) with
# 128 MiB tier files in a spill directory on disk, runs bench/prep (root's
# HELLO alone, then behind nobody's 16), and replaces the section between
# <!-- bench:prep:begin --> and <!-- bench:prep:end --> in BENCHMARKS.md.
# With --ref DIR it runs the same against the kvpoold built in DIR (another
# revision) too. Needs root and the user nobody.
set -eu

usage() {
	cat <<EOF2
Usage: run-prep.sh [--builddir DIR] [--output FILE] [--ref DIR] [--rounds N] [--dir DIR]
Time root's new namespace alone and behind another user's 16 queued ones.

  --builddir DIR    where daemon/kvpoold and bench/prep were built (default .)
  --output FILE     the Markdown file whose prep section is replaced
  --ref DIR         also run against DIR/daemon/kvpoold (e.g. a build of an
                    earlier revision), as the reference
  --rounds N        rounds, alternating the daemons (default 3); medians
  --dir DIR         where the tier files go: a disk, not tmpfs (default /var/tmp)
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

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
PREP=$builddir/bench/prep
bench_check_built bench-prep "$KVPOOLD" "$PREP"
[ -z "$ref" ] || [ -x "$ref/daemon/kvpoold" ] || bench_die "--ref $ref has no daemon/kvpoold"
[ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1 || bench_die "needs root and the user nobody"
bench_tmpdir
chmod 0711 "$tmp"	# nobody reaches the socket (group nogroup)
spill=$(mktemp -d "$base/kvpool-prep.XXXXXX")
bench_on_exit() {
	rm -rf "$spill"
}
load=$(bench_load)
daemon_args="--pool-size 64M --slab-size 16M --spill-size 128M --socket-group nogroup --log-level warn"

# one DAEMON TAG - a fresh daemon, one run of bench/prep, its line to $tmp/TAG.
one() {
	_this=$KVPOOLD
	KVPOOLD=$1
	rm -rf "$spill/tiers"
	mkdir -m 0700 "$spill/tiers"
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" $daemon_args --spill-dir "$spill/tiers"
	KVPOOLD=$_this
	"$PREP" --socket "$sock" --queued 16 >>"$tmp/$2" || bench_die "bench/prep failed"
	tail -n 1 "$tmp/$2" >&2
	bench_stop_daemon "$pidfile"
}

r=1
while [ "$r" -le "$rounds" ]; do
	one "$KVPOOLD" this
	[ -z "$ref" ] || one "$ref/daemon/kvpoold" ref
	r=$((r + 1))
done

med() {
	bench_median "$tmp/$1" prep "$2"
}

row() {
	echo "| $2 | $(med "$1" alone_ms) | $(med "$1" queued_ms) | $(med "$1" queued_over_alone) |" \
	     "$(med "$1" ready_before) of 16 |"
}

{
	echo "## A new namespace behind another user's tier files (bench/prep)"
	echo
	bench_machine "\`make bench\` (bench/run-prep.sh)" "$load"
	echo
	echo "Root's HELLO into a new namespace, until its 128 MiB tier file is prepared"
	echo "(preallocated, the slot headers of its 16 KiB pages wiped): alone, its own"
	echo "time, then right after nobody asked for 16 new namespaces (the per-uid"
	echo "default). Milliseconds, medians of $rounds rounds. With one queue for every"
	echo "user's preparations (4 worker threads), root's waited behind most or all of"
	echo "nobody's; with a queue per user served in turn and at most 2 of one user"
	echo "at once, it waits for none, and shares the disk with 2."
	echo
	echo "| daemon | alone | behind 16 of nobody's | ratio | nobody's ready first |"
	echo "| --- | ---: | ---: | ---: | ---: |"
	row this "this revision"
	[ -z "$ref" ] ||
		row ref "reference: \`$ref\` ($(git -C "$ref" rev-parse --short HEAD 2>/dev/null || echo '?'))"
	echo
	echo "Commands: \`kvpoold $daemon_args --spill-dir DIR\`, then, as root,"
	echo "\`bench/prep --queued 16\`."
} >"$tmp/section.md"
bench_replace_section prep "$tmp/section.md" "$output"
