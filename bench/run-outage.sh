#!/bin/sh
# SPDX-License-Identifier: MIT
# run-outage.sh - what an outage of every Redis master costs kvpoold's
# memory: one Redis server, then a 3-master Redis Cluster, on loopback
# (tests/redis-cluster.sh), kvpoold with --remote-write through and a
# small --remote-backlog (8M), one prompt published while Redis is up (the
# reference point), then every master stopped with SIGSTOP (they still
# accept connections) and three backlogs' worth of pages published. kvpoold's private memory
# (RssAnon) 10 s later, less the reference point, against the bound.
# With --ref DIR the kvpoold built in DIR too. Replaces the section
# between <!-- bench:outage:begin --> and <!-- bench:outage:end --> of
# BENCHMARKS.md.
set -eu

usage() {
	cat <<EOF2
Usage: run-outage.sh [--builddir DIR] [--output FILE] [--ref DIR] [--rounds N]
Measure kvpoold's memory while every Redis master is stopped.

  --builddir DIR   where daemon/kvpoold and bench/remote were built (default .)
  --output FILE    the Markdown file whose outage section is replaced
  --ref DIR        also run against DIR/daemon/kvpoold, as the reference
  --rounds N       rounds, alternating the daemons (default 3); medians
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

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
bench_check_built bench-outage "$KVPOOLD" "$builddir/bench/remote"
[ -z "$ref" ] || [ -x "$ref/daemon/kvpoold" ] || bench_die "--ref $ref has no daemon/kvpoold"
bench_tmpdir
port=$((17500 + $$ % 500 * 3))
cl="$bench_srcdir/tests/redis-cluster.sh"
trap 'sh "$cl" stop "$tmp/redis" 2>/dev/null; bench_cleanup' EXIT INT TERM
(umask 077; head -c 32 /dev/urandom >"$tmp/remote.key")
load=$(bench_load)
backlog=8M
daemon_args="--pool-size 256M --slab-size 16M --remote-write through --remote-backlog $backlog --remote-timeout 300 --log-level warn"

rss_anon() {	# the daemon's private memory, KiB
	awk '/^RssAnon:/ { print $2 }' "/proc/$(cat "$pidfile")/status"
}

masters() {	# masters SIG - send SIG to every master
	for _p in "$tmp"/redis/*/pid; do
		kill -"$1" "$(cat "$_p")"
	done
}

# one DAEMON TAG TOPO - a fresh server (single) or cluster and daemon, one
# outage, its line to $tmp/TAG-TOPO.
one() {
	rm -rf "$tmp/redis"
	mkdir -p "$tmp/redis"
	if [ "$3" = single ]; then
		sh "$cl" single "$tmp/redis" "$port" >/dev/null
		_url="redis://127.0.0.1:$port"
	else
		sh "$cl" start "$tmp/redis" "$port" 3 0 >/dev/null
		_url="redis-cluster://127.0.0.1:$port"
	fi
	_this=$KVPOOLD
	KVPOOLD=$1
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" $daemon_args \
		--remote "$_url" --remote-key-file "$tmp/remote.key"
	KVPOOLD=$_this
	"$builddir/bench/remote" --publish "$sock" --prompts 1 --chain 64 --layers 8
	sleep 1
	_before=$(rss_anon)
	masters STOP
	# 6 prompts of 64 pages of 64 KiB: 24 MiB, three backlogs
	"$builddir/bench/remote" --publish "$sock" --first 1 --prompts 6 --chain 64 --layers 8
	sleep 10
	_after=$(rss_anon)
	masters CONT
	bench_stop_daemon "$pidfile"
	sh "$cl" stop "$tmp/redis"
	echo "outage grew_kib=$((_after - _before)) over_backlog=$(bench_calc "($_after - $_before) / 8192")" |
		tee -a "$tmp/$2-$3" >&2
}

r=1
while [ "$r" -le "$rounds" ]; do
	for topo in single cluster; do
		one "$KVPOOLD" this $topo
		[ -z "$ref" ] || one "$ref/daemon/kvpoold" ref $topo
	done
	r=$((r + 1))
done

med() {
	bench_median "$tmp/$1" outage "$2"
}

row() {	# row TAG LABEL
	for _t in single cluster; do
		echo "| $2 | $_t | $(bench_calc "$(med "$1-$_t" grew_kib) / 1024" %.1f) |" \
		     "$(med "$1-$_t" over_backlog) |"
	done
}

{
	echo "## An outage of every Redis master, with a small backlog (bench/run-outage.sh)"
	echo
	bench_machine "\`make bench-outage\` (bench/run-outage.sh)" "$load"
	echo
	echo "kvpoold with \`--remote-backlog $backlog\` and write-through on one Redis server"
	echo "(\`redis://\`) and on a 3-master Redis Cluster: one prompt published while it"
	echo "is up, then every master stopped"
	echo "with SIGSTOP (a stopped server still accepts connections) and 24 MiB of"
	echo "pages published (64 KiB each: three backlogs). What kvpoold's private"
	echo "memory (RssAnon) gained 10 s later, in MiB, and that over the bound; medians"
	echo "of $rounds rounds. The bound counts the SETs held and what hiredis holds of"
	echo "them in its output buffers, and a connection takes more only while its"
	echo "buffer is under 1 MiB; a node is sent nothing until it answered a PING."
	echo
	echo "| daemon | Redis | memory gained (MiB) | over --remote-backlog |"
	echo "| --- | --- | ---: | ---: |"
	row this "this revision"
	[ -z "$ref" ] ||
		row ref "reference: \`$ref\` ($(git -C "$ref" rev-parse --short HEAD 2>/dev/null || echo '?'))"
	echo
	echo "Commands: \`kvpoold $daemon_args --remote URL --remote-key-file KEY\`;"
	echo "\`bench/remote --publish SOCK --prompts 1 --chain 64 --layers 8\`, SIGSTOP to every"
	echo "master, then \`bench/remote --publish SOCK --first 1 --prompts 6 --chain 64 --layers 8\`."
} >"$tmp/section.md"
bench_replace_section outage "$tmp/section.md" "$output"
