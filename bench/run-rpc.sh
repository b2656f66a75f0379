#!/bin/sh
# SPDX-License-Identifier: MIT
# run-rpc.sh - the RPC benchmark of `make bench`: starts kvpoold and, as the
# reference, redis-server on Unix sockets in a temporary directory, runs
# bench/rpc at 1, 2 and 8 clients with batches of 1 and 64 pages and
# redis-benchmark's PING at the same concurrencies, stops both, and
# replaces the section between <!-- bench:rpc:begin --> and
# <!-- bench:rpc:end --> in BENCHMARKS.md (appending it the first time).
#
# redis-server and redis-benchmark come from the Debian packages
# redis-server and redis-tools; they are installed with apt-get when
# missing. Without them our figures are still measured and written, and
# the section says the reference is missing.
set -eu

usage() {
	cat <<EOF
Usage: run-rpc.sh [--builddir DIR] [--output FILE] [--iters N] [--redis-scale F]
Benchmark kvp_alloc()/kvp_release() round trips against redis PING and
write the results into FILE (default ./BENCHMARKS.md).

  --builddir DIR      where daemon/kvpoold, client/kvpool and bench/rpc were built (default .)
  --output FILE       the Markdown file whose rpc section is replaced
  --iters N           timed alloc+release cycles per client process (default 20000)
  --redis-scale F     multiply redis-benchmark's -n (100000, 200000 and 500000
                      requests at 1, 2 and 8 clients) by F (default 1)
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# bench_opt NAME VALUE - run-rpc.sh's own options (see bench/lib.sh).
bench_opt() {
	case $1 in
	--iters) iters=${2:?--iters needs a count} ;;
	--redis-scale) redis_scale=${2:?--redis-scale needs a number} ;;
	*) return 1 ;;
	esac
}

iters=20000
redis_scale=1
bench_parse_opts "$@"
RPC=$builddir/bench/rpc
bench_check_built bench "$KVPOOLD" "$RPC"
bench_tmpdir
rsock=$tmp/redis.sock
redis_pid=

# stop_redis() - SIGTERM redis-server, our child, and reap it.
stop_redis() {
	[ -n "$redis_pid" ] || return 0
	kill -TERM "$redis_pid" 2>/dev/null || true
	wait "$redis_pid" 2>/dev/null || true
	redis_pid=
}

# bench_on_exit - redis-server is our child: stop it at exit.
bench_on_exit() {
	stop_redis
}

# field FILE KEY - the value of KEY=value in bench/rpc's one-line output.
field() {
	bench_field "$1" rpc "$2"
}

# --- kvpool --------------------------------------------------------------

kvpoold_cmd="kvpoold --socket \$SOCK --pid-file \$TMP/kvpoold.pid --pool-size 1G --slab-size 64M --log-level warn"
load=$(bench_load)
bench_start_daemon "$sock" "$pidfile" --pool-size 1G --slab-size 64M --log-level warn

for batch in 1 64; do
	# 16 KiB pages for the batches: 8 x 64 pages of 2 MiB would be the
	# whole 1 GiB pool.
	geom=large
	[ "$batch" -eq 1 ] || geom=small
	for clients in 1 2 8; do
		cmd="bench/rpc --socket $sock --clients $clients --batch $batch --iters $iters --geometry $geom"
		echo "  $cmd" >&2
		"$RPC" --socket "$sock" --clients "$clients" --batch "$batch" \
			--iters "$iters" --geometry "$geom" >"$tmp/rpc-$clients-$batch.txt" ||
			bench_die "bench/rpc failed: $cmd"
		cat "$tmp/rpc-$clients-$batch.txt" >&2
	done
done
# The same with one client and the daemon on one CPU: a round trip then
# costs two context switches instead of two wake-ups across CPUs, which
# on a VM can cost more than the work itself. redis gets the same below.
pinned=no
if command -v taskset >/dev/null && taskset -pc 0 "$(cat "$pidfile")" >/dev/null 2>&1; then
	pinned=yes
	for batch in 1 64; do
		geom=large
		[ "$batch" -eq 1 ] || geom=small
		cmd="taskset -c 0 bench/rpc --socket $sock --clients 1 --batch $batch --iters $iters --geometry $geom"
		echo "  $cmd" >&2
		taskset -c 0 "$RPC" --socket "$sock" --clients 1 --batch "$batch" \
			--iters "$iters" --geometry "$geom" >"$tmp/pin-$batch.txt" ||
			bench_die "bench/rpc failed: $cmd"
		cat "$tmp/pin-$batch.txt" >&2
	done
fi
bench_stop_daemon "$pidfile"
rpc_cmd_large="bench/rpc --socket \$SOCK --clients C --batch 1 --iters $iters --geometry large"
rpc_cmd_small="bench/rpc --socket \$SOCK --clients C --batch 64 --iters $iters --geometry small"

# --- redis reference -------------------------------------------------------

# ensure_redis() - have redis-server and redis-benchmark, installing the
# Debian packages when missing. Returns 1 with the reason in $redis_why.
redis_why=
ensure_redis() {
	if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null &&
	   command -v redis-cli >/dev/null; then
		return 0
	fi
	bench_apt_install "redis-server/redis-benchmark are not installed" \
		redis-server redis-tools && return 0
	redis_why=$bench_why
	return 1
}

# redis_ping C N - redis-benchmark's CSV line of PING_INLINE at C clients,
# N requests: "PING_INLINE",rps,avg,min,p50,p95,p99,max (ms).
redis_ping() {
	redis-benchmark -s "$rsock" -t ping_inline -c "$1" -n "$2" --csv |
		grep '^"PING_INLINE"' | tr -d '"'
}

have_redis=no
redis_version=
if ensure_redis; then
	redis-server --port 0 --unixsocket "$rsock" --save '' --appendonly no \
		--daemonize no >"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	i=0
	until redis-cli -s "$rsock" ping >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -ge 50 ] || ! kill -0 "$redis_pid" 2>/dev/null; then
			tail -n 5 "$tmp/redis.log" >&2
			redis_why="redis-server did not answer on $rsock"
			break
		fi
		sleep 0.1
	done
	if [ -z "$redis_why" ]; then
		have_redis=yes
		redis_version=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')
		# -n for about 5 s each on a 2-CPU VM (21k, 40k and 120k PING/s);
		# a short probe to size them misled: its first burst runs faster.
		for cn in 1:100000 2:200000 8:500000; do
			clients=${cn%:*}
			n=$(bench_calc "int(${cn#*:} * $redis_scale)" %d)
			echo "  redis-benchmark -s \$RSOCK -t ping_inline -c $clients -n $n --csv" >&2
			redis_ping "$clients" "$n" >"$tmp/redis-$clients.csv"
			echo "$clients $n" >>"$tmp/redis-n.txt"
			cat "$tmp/redis-$clients.csv" >&2
		done
		if [ $pinned = yes ] && taskset -pc 0 "$redis_pid" >/dev/null 2>&1; then
			n=$(bench_calc "int(250000 * $redis_scale)" %d)
			echo "  taskset -c 0 redis-benchmark -s \$RSOCK -t ping_inline -c 1 -n $n --csv" >&2
			taskset -c 0 redis-benchmark -s "$rsock" -t ping_inline -c 1 -n "$n" \
				--csv | grep '^"PING_INLINE"' | tr -d '"' >"$tmp/redis-pin.csv"
			echo "pin $n" >>"$tmp/redis-n.txt"
			cat "$tmp/redis-pin.csv" >&2
		fi
	fi
	stop_redis
fi

# redis_col C COL - a column of the reference at C clients; COL 2 is
# requests/s, 5/6/7 are p50/p95/p99 in ms (printed here in µs).
redis_col() {
	v=$(cut -d, -f"$2" "$tmp/redis-$1.csv")
	if [ "$2" -eq 2 ]; then echo "$v"; else bench_calc "$v * 1000" %.1f; fi
}

# --- the Markdown section ----------------------------------------------------

r() { field "$tmp/rpc-$1-$2.txt" "$3"; }
k() { bench_calc "$1 / 1000" %.1fk; }
# rate N - N per second as 12.3k or 4.56M.
rate() {
	if [ "$(bench_calc "$1 >= 1e6" %d)" -eq 1 ]; then bench_calc "$1 / 1e6" %.2fM; else k "$1"; fi
}

section_head() {
	echo "## RPC round trips: kvp_alloc() and kvp_release() (bench/rpc)"
	echo
	bench_machine "\`make bench\` (bench/run-rpc.sh)" "$load"
	if [ $have_redis = yes ]; then
		echo "Reference: redis $redis_version, \`redis-benchmark -t ping_inline\` over a Unix"
		echo "socket, measured in the same run."
	else
		echo "**Reference missing:** $redis_why. Only kvpool's figures are below."
	fi
	echo
	echo "Each kvpool client is its own process with its own connection; all start"
	echo "together after $((iters / 10 > 100 ? iters / 10 : 100)) untimed warm-up cycles and each times $iters"
	echo "alloc+release cycles, every call on its own (CLOCK_MONOTONIC). Latencies"
	echo "are p50/p99 in µs over all calls of all clients; rates are all clients"
	echo "together over the common wall time; pages/s counts pages leased and"
	echo "returned. redis-benchmark's latency is also one request's round trip"
	echo "(its resolution is 1 µs); its N clients are N connections of one process."
	echo "Ratios are kvpool ÷ redis: for latency ≤ 1.00 means kvpool is at least as"
	echo "fast, for rates ≥ 1.00 does."
	echo
}

section_goals() {
	a1=$(r 1 1 alloc_p50_us)
	r1=$(r 1 1 release_p50_us)
	best=0
	bestc=1
	for c in 1 2 8; do
		p=$(r "$c" 64 pages_per_s)
		if [ "$(bench_calc "$p > $best" %d)" -eq 1 ]; then best=$p; bestc=$c; fi
	done
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	if [ $have_redis = yes ]; then
		ping=$(redis_col 1 5)
		worst=$(bench_calc "($a1 > $r1 ? $a1 : $r1) / $ping" %.2f)
		met=$(bench_calc "($a1 <= $ping && $r1 <= $ping)" %d)
		[ "$met" -eq 1 ] && met="**met** (×$worst)" || met="**not met** (×$worst)"
		pin=
		if [ -s "$tmp/redis-pin.csv" ]; then
			pin="; on one CPU: alloc $(field "$tmp/pin-1.txt" alloc_p50_us) µs, PING $(redis_pin 5) µs"
		fi
		echo "| one-page round trip at least as fast as redis PING over its Unix socket (1 client, p50) | alloc $a1 µs, release $r1 µs; PING $ping µs$pin | $met |"
	else
		echo "| one-page round trip at least as fast as redis PING over its Unix socket (1 client, p50) | alloc $a1 µs, release $r1 µs; PING not measured | unknown |"
	fi
	pct=$(bench_calc "100 * $best / 5000000" %.0f)
	met=$(bench_calc "$best >= 5000000" %d)
	[ "$met" -eq 1 ] && met="**met** ($pct %)" || met="**not met** ($pct % of the goal)"
	echo "| 64-page batches at 5M pages/s or more (best of 1, 2, 8 clients) | $(bench_calc "$best / 1e6" %.2f)M pages/s at $bestc clients | $met |"
	echo
}

# section_table BATCH - the table of bench/rpc --batch BATCH at 1, 2 and 8
# clients beside redis PING at as many connections.
section_table() {
	b=$1
	if [ "$b" -eq 1 ]; then
		echo "### One page a call (2 MiB pages: 32 layers, 8 KV heads, head_dim 128, 16 tokens, f16)"
		echo
		echo "| clients | alloc p50 / p99 µs | release p50 / p99 µs | pair p50 / p99 µs | kvpool calls/s | PING p50 / p99 µs | PING req/s | alloc p50 ÷ PING p50 | calls/s ÷ PING req/s |"
	else
		echo "### 64 pages a call (16 KiB pages: 2 layers, 2 KV heads, head_dim 64, 16 tokens, f16)"
		echo
		echo "| clients | alloc p50 / p99 µs | release p50 / p99 µs | pair p50 / p99 µs | kvpool calls/s | pages/s | PING p50 / p99 µs | alloc p50 ÷ PING p50 | pages/s ÷ 5M goal |"
	fi
	echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for c in 1 2 8; do
		row="| $c | $(r $c "$b" alloc_p50_us) / $(r $c "$b" alloc_p99_us)"
		row="$row | $(r $c "$b" release_p50_us) / $(r $c "$b" release_p99_us)"
		row="$row | $(r $c "$b" pair_p50_us) / $(r $c "$b" pair_p99_us)"
		row="$row | $(k "$(r $c "$b" calls_per_s)")"
		[ "$b" -eq 1 ] || row="$row | $(rate "$(r $c "$b" pages_per_s)")"
		if [ $have_redis = yes ]; then
			pp=$(redis_col $c 5)
			row="$row | $pp / $(redis_col $c 7)"
			[ "$b" -eq 64 ] || row="$row | $(k "$(redis_col $c 2)")"
			row="$row | $(bench_calc "$(r $c "$b" alloc_p50_us) / $pp" %.2f)"
			[ "$b" -eq 64 ] ||
				row="$row | $(bench_calc "$(r $c "$b" calls_per_s) / $(redis_col $c 2)" %.2f)"
		else
			row="$row | – | –"
			[ "$b" -eq 64 ] || row="$row | – | –"
		fi
		[ "$b" -eq 1 ] || row="$row | $(bench_calc "$(r $c "$b" pages_per_s) / 5e6" %.2f)"
		echo "$row |"
	done
	echo
}

# redis_pin COL - a column of the pinned reference, as redis_col.
redis_pin() {
	v=$(cut -d, -f"$1" "$tmp/redis-pin.csv")
	if [ "$1" -eq 2 ]; then echo "$v"; else bench_calc "$v * 1000" %.1f; fi
}

# section_pinned - one client and the server on CPU 0, kvpool and redis.
section_pinned() {
	[ $pinned = yes ] || return 0
	echo "### One client, client and server on one CPU (\`taskset -c 0\`)"
	echo
	echo "Left to the scheduler, the client and the server run on different CPUs"
	echo "and every round trip pays two cross-CPU wake-ups; on a VM these can cost"
	echo "more than the work. On one CPU a round trip is two context switches."
	echo
	echo "| pages a call | alloc p50 / p99 µs | release p50 / p99 µs | kvpool calls/s | pages/s | PING p50 / p99 µs | PING req/s | alloc p50 ÷ PING p50 |"
	echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for b in 1 64; do
		f=$tmp/pin-$b.txt
		row="| $b | $(field "$f" alloc_p50_us) / $(field "$f" alloc_p99_us)"
		row="$row | $(field "$f" release_p50_us) / $(field "$f" release_p99_us)"
		row="$row | $(k "$(field "$f" calls_per_s)") | $(rate "$(field "$f" pages_per_s)")"
		if [ -s "$tmp/redis-pin.csv" ]; then
			row="$row | $(redis_pin 5) / $(redis_pin 7) | $(k "$(redis_pin 2)")"
			row="$row | $(bench_calc "$(field "$f" alloc_p50_us) / $(redis_pin 5)" %.2f)"
		else
			row="$row | – | – | –"
		fi
		echo "$row |"
	done
	echo
}

section_commands() {
	echo "Commands (\$TMP is a temporary directory, \$SOCK and \$RSOCK sockets in it):"
	echo
	echo '```'
	echo "$kvpoold_cmd"
	echo "$rpc_cmd_large     # C = 1, 2, 8"
	echo "$rpc_cmd_small     # C = 1, 2, 8"
	if [ $pinned = yes ]; then
		echo "taskset -pc 0 \$(cat \$TMP/kvpoold.pid)"
		echo "taskset -c 0 bench/rpc --socket \$SOCK --clients 1 --batch B --iters $iters --geometry G"
	fi
	if [ $have_redis = yes ]; then
		echo "redis-server --port 0 --unixsocket \$RSOCK --save '' --appendonly no --daemonize no"
		while read -r c n; do
			if [ "$c" = pin ]; then
				echo "taskset -pc 0 \$REDIS_PID"
				echo "taskset -c 0 redis-benchmark -s \$RSOCK -t ping_inline -c 1 -n $n --csv"
			else
				echo "redis-benchmark -s \$RSOCK -t ping_inline -c $c -n $n --csv"
			fi
		done <"$tmp/redis-n.txt"
	fi
	echo '```'
}

section=$tmp/section.md
{
	section_head
	section_goals
	section_table 1
	section_table 64
	section_pinned
	section_commands
} >"$section"

# --- BENCHMARKS.md: replace our section, keep everything else --------------

# A file made here gets the whole preamble (bench_replace_section would
# give it only the title).
if [ ! -f "$output" ]; then
	cat >"$output" <<'EOF'
# kvpool benchmarks

Run them with `make bench` in a configured tree (`make all` and
`make check` never do); each benchmark replaces its own section below,
between `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->`.

The machines these figures come from are shared and noisy, so we report
medians and percentiles over many calls rather than means, and compare
against a reference program measured on the same machine in the same run:
the ratio to the reference says more than the absolute figure.
EOF
fi
bench_replace_section rpc "$section" "$output"
