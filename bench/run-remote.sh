#!/bin/sh
# SPDX-License-Identifier: MIT
# run-remote.sh - restores from the remote tier against redis-benchmark on
# the same cluster: a 3-master Redis Cluster on loopback
# (tests/redis-cluster.sh), kvpoold A publishing prompts of 128 blocks of
# 64 KiB with --remote-write through, kvpoold B (empty pool) acquiring
# them, every page fetched from Redis; then redis-benchmark GETs of values
# of the same size (page + 128-byte header) with the same pipelining (one
# ACQUIRE of 128 blocks over 3 masters: 3 connections, 43 deep). Rounds
# alternate; medians. Last, the policy: B with --remote-prefill-rate
# measures a cluster slowed by CLIENT PAUSE (300 ms on every master), and
# must then skip it: no GET reaches Redis. Replaces the section between
# <!-- bench:remote:begin --> and <!-- bench:remote:end --> of
# BENCHMARKS.md.
set -eu

usage() {
	cat <<EOF2
Usage: run-remote.sh [--builddir DIR] [--output FILE] [--rounds N] [--prompts N]
Time restores from Redis Cluster through kvpoold against redis-benchmark GETs.

  --builddir DIR   where daemon/kvpoold and bench/remote were built (default .)
  --output FILE    the Markdown file whose remote section is replaced
  --rounds N       rounds of each, alternating (default 5: medians)
  --prompts N      prompts of 128 blocks per round (default 20)
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--rounds) rounds=${2:?--rounds needs a count} ;;
	--prompts) prompts=${2:?--prompts needs a count} ;;
	*) return 1 ;;
	esac
}

rounds=5
prompts=20
chain=128
layers=8		# 8 KiB a layer: 64 KiB pages
bench_parse_opts "$@"
bench_check_built bench-remote "$KVPOOLD" "$builddir/bench/remote" "$builddir/bench/seal"
command -v redis-benchmark >/dev/null ||
	bench_die "redis-benchmark not found (Debian: apt-get install redis-tools)"
bench_tmpdir
port=$((16000 + $$ % 500 * 3))
cl="$bench_srcdir/tests/redis-cluster.sh"
sh "$cl" start "$tmp/redis" "$port" 3 0 >/dev/null 2>&1 ||
	{ mkdir -p "$tmp/redis"; sh "$cl" start "$tmp/redis" "$port" 3 0; }
trap 'sh "$cl" stop "$tmp/redis"; bench_cleanup' EXIT INT TERM
url="redis-cluster://127.0.0.1:$port"
(umask 077; head -c 32 /dev/urandom >"$tmp/remote.key")	# both daemons': they share
page=$((layers * 8192))
value=$((page + 128))
pages=$((prompts * chain))
depth=$(((chain + 2) / 3))

dbsize() {	# keys in the cluster's masters
	_n=0
	for _p in $port $((port + 1)) $((port + 2)); do
		_n=$((_n + $(redis-cli -p "$_p" dbsize)))
	done
	echo $_n
}

median() {	# median of the numbers on stdin
	sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
		else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

load=$(bench_load)
ours=
theirs=
r=0
while [ $r -lt "$rounds" ]; do
	redis-cli --cluster call "127.0.0.1:$port" flushall >/dev/null 2>&1
	bench_start_daemon "$tmp/a.sock" "$tmp/a.pid" --pool-size 1G --slab-size 64M \
		--remote "$url" --remote-key-file "$tmp/remote.key" --remote-write through
	"$builddir/bench/remote" --publish "$tmp/a.sock" --prompts "$prompts" \
		--chain "$chain" --layers "$layers"
	bench_stop_daemon "$tmp/a.pid"	# its writes end first
	# a pool of 1,024 pages: most fetches land in pages that held others
	# before (evicted, not sent back: Redis has them), as in a pool that
	# has run a while, rather than in memory touched for the first time
	bench_start_daemon "$tmp/b.sock" "$tmp/b.pid" --pool-size 64M --slab-size 16M \
		--remote "$url" --remote-key-file "$tmp/remote.key" --remote-fetch-max "$chain"
	"$builddir/bench/remote" --acquire "$tmp/b.sock" --prompts "$prompts" \
		--chain "$chain" --layers "$layers" >"$tmp/ours" ||
		bench_die "bench/remote --acquire failed"
	bench_stop_daemon "$tmp/b.pid"
	ours="$ours $(bench_field "$tmp/ours" remote pages_per_s)"
	# the same values and pipelining through redis-benchmark
	# 8 SETs a key, at random: all but 0.03 % of the keys hold a value,
	# so that the GETs return values, not nils
	ours_keys=$(dbsize)
	redis-benchmark --cluster -h 127.0.0.1 -p "$port" -t set -d "$value" -r "$pages" \
		-n $((pages * 8)) -c 3 -P "$depth" -q >/dev/null 2>&1
	[ $(($(dbsize) - ours_keys)) -ge $((pages * 99 / 100)) ] ||
		bench_die "redis-benchmark stored $(($(dbsize) - ours_keys)) of $pages keys"
	redis-benchmark --cluster -h 127.0.0.1 -p "$port" -t get -d "$value" -r "$pages" \
		-n "$pages" -c 3 -P "$depth" --csv 2>/dev/null >"$tmp/theirs"
	theirs="$theirs $(awk -F'"' '/^"GET"/ { print int($4) }' "$tmp/theirs")"
	r=$((r + 1))
done
ours_m=$(echo "$ours" | tr ' ' '\n' | grep . | median)
theirs_m=$(echo "$theirs" | tr ' ' '\n' | grep . | median)
ratio=$(bench_calc "$ours_m / $theirs_m")

# the policy: B measures a cluster that answers 300 ms late (CLIENT PAUSE
# on every master); recomputing 16 blocks at 100,000 tokens/s takes
# 2.6 ms, so B must not ask it again: no GET reaches Redis
gets() {	# GETs the masters answered so far
	_n=0
	for _p in $port $((port + 1)) $((port + 2)); do
		_n=$((_n + $(redis-cli -p "$_p" info stats | tr -d '\r' |
			awk -F: '/^keyspace_(hits|misses):/ { n += $2 } END { print n + 0 }')))
	done
	echo $_n
}
bench_start_daemon "$tmp/a.sock" "$tmp/a.pid" --pool-size 1G --slab-size 64M \
	--remote "$url" --remote-key-file "$tmp/remote.key" --remote-write through
"$builddir/bench/remote" --publish "$tmp/a.sock" --prompts 2 --chain 16 --layers "$layers"
bench_stop_daemon "$tmp/a.pid"
bench_start_daemon "$tmp/b.sock" "$tmp/b.pid" --pool-size 1G --slab-size 64M \
	--remote "$url" --remote-key-file "$tmp/remote.key" --remote-prefill-rate 100000
for p in $port $((port + 1)) $((port + 2)); do
	redis-cli -p "$p" client pause 300 ALL >/dev/null
done
"$builddir/bench/remote" --acquire "$tmp/b.sock" --prompts 1 --chain 16 \
	--layers "$layers" >"$tmp/first" || true
before=$(gets)
"$builddir/bench/remote" --acquire "$tmp/b.sock" --prompts 2 --chain 16 \
	--layers "$layers" --skip-check >"$tmp/skip" || true
after=$(gets)
bench_stop_daemon "$tmp/b.pid"
"$builddir/bench/seal" --page "$page" >"$tmp/seal" || bench_die "bench/seal failed"
seal_w=$(bench_field "$tmp/seal" seal seal_pages_per_s)
seal_r=$(bench_field "$tmp/seal" seal open_pages_per_s)
seal_c=$(bench_field "$tmp/seal" seal copy_pages_per_s)
first=$(bench_field "$tmp/first" remote secs)
skip_hits=$(bench_field "$tmp/skip" remote hits)
skipped=no
[ "$after" -eq "$before" ] && [ "${skip_hits:-1}" -eq 0 ] && skipped=yes

cat >"$tmp/section" <<EOF2
### Remote tier: restores from Redis Cluster (\`make bench-remote\`)

$(bench_machine '`make bench-remote` (bench/run-remote.sh)' "$load")
A 3-master Redis Cluster $(redis-server --version | awk '{ print $3 }' | tr -d 'v=') on
loopback. kvpoold A publishes $prompts prompts of $chain blocks of $page bytes
with \`--remote-write through\`; kvpoold B, an empty pool on the same
cluster, ACQUIREs them, so that every block is fetched from Redis (one
pipelined GET per block, read straight into a pool page and opened there:
decrypted and authenticated)
before the reply; each ACQUIRE's pages are checked by the client off the
clock. The reference is
\`redis-benchmark --cluster -t get -d $value -c 3 -P $depth\` (the same value
size; an ACQUIRE of $chain blocks puts about $depth GETs on each of the 3
masters) against the same cluster in the same rounds; it uses the same
hiredis reader. Both share the machine's CPUs with the three Redis
servers. Medians of $rounds rounds.

| | pages/s | MiB/s |
|---|---:|---:|
| kvpoold B, ACQUIRE from Redis | $ours_m | $(bench_calc "$ours_m * $page / 1048576" %.0f) |
| redis-benchmark GET | $theirs_m | $(bench_calc "$theirs_m * $value / 1048576" %.0f) |
| ratio | $ratio | |

Sealing (\`--remote-key-file\`, XChaCha20-Poly1305; \`bench/seal --page $page\`,
one core, medians of 5, the same run): $seal_r pages/s opened, $seal_w sealed,
against $seal_c copied (memcpy). At the restore rate above, opening the pages
takes $(bench_calc "100 * $ours_m / $seal_r" %.0f) % of one core; sealing a page costs
$(bench_calc "$seal_c / $seal_w" %.0f) copies of it.

Policy: with every master answering 300 ms late (\`CLIENT PAUSE 300
ALL\`), B's first ACQUIRE of 16 blocks took ${first:-?} s and measured it.
With \`--remote-prefill-rate 100000\` (16 blocks recomputed in 2.6 ms),
the next ACQUIRE of a chain that only Redis has was answered with 0 hits
at once, and no GET reached Redis ($before GETs before it, $after after):
skipped: $skipped.

Rounds (pages/s): kvpoold$ours; redis-benchmark$theirs.
EOF2
bench_replace_section remote "$tmp/section" "$output"
echo "remote: ${ours_m} pages/s against redis-benchmark ${theirs_m} GET/s: ${ratio}x; sealed pages opened at ${seal_r}/s a core; slow tier skipped: $skipped"
