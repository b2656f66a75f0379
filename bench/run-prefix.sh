#!/bin/sh
# SPDX-License-Identifier: MIT
# run-prefix.sh - the prefix-sharing benchmark of `make bench`: starts
# kvpoold on a socket in a temporary directory, runs bench/prefix (the run
# with sharing, the same requests without, the ACQUIRE latency), the
# latency again with client and daemon on one CPU, stops the daemon, and
# replaces the section between <!-- bench:prefix:begin --> and
# <!-- bench:prefix:end --> in BENCHMARKS.md (appending it the first time).
set -eu

usage() {
	cat <<EOF
Usage: run-prefix.sh [--builddir DIR] [--output FILE] [--requests N] [--lat-iters N]
Measure prefix sharing (hit rate, peak pages with and without sharing,
ACQUIRE latency) and write the results into FILE (default ./BENCHMARKS.md).

  --builddir DIR    where daemon/kvpoold and bench/prefix were built (default .)
  --output FILE     the Markdown file whose prefix section is replaced
  --requests N      requests per client process (default 500)
  --lat-iters N     timed ACQUIREs per chain length (default 5000)
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# bench_opt NAME VALUE - run-prefix.sh's own options (see bench/lib.sh).
bench_opt() {
	case $1 in
	--requests) requests=${2:?--requests needs a count} ;;
	--lat-iters) lat_iters=${2:?--lat-iters needs a count} ;;
	*) return 1 ;;
	esac
}

requests=500
lat_iters=5000
bench_parse_opts "$@"
PREFIX=$builddir/bench/prefix
bench_check_built bench "$KVPOOLD" "$PREFIX"
bench_tmpdir

# --- measure --------------------------------------------------------------

pool=1G
slab=16M
kvpoold_cmd="kvpoold --socket \$SOCK --pid-file \$TMP/kvpoold.pid --pool-size $pool --slab-size $slab --log-level warn"
prefix_cmd="bench/prefix --socket \$SOCK --clients 4 --requests $requests --prompts 8 --window 8 --lat-iters $lat_iters"
load=$(bench_load)
bench_start_daemon "$sock" "$pidfile" --pool-size $pool --slab-size $slab --log-level warn

echo "  $prefix_cmd" >&2
"$PREFIX" --socket "$sock" --clients 4 --requests "$requests" --prompts 8 --window 8 \
	--lat-iters "$lat_iters" >"$tmp/prefix.txt" || bench_die "bench/prefix failed: $prefix_cmd"
cat "$tmp/prefix.txt" >&2
# The latency once more with the client and every daemon thread on CPU 0:
# a round trip is then two context switches instead of two cross-CPU
# wake-ups, which on a VM can cost more than the work (see bench/rpc).
pinned=no
if command -v taskset >/dev/null && taskset -apc 0 "$(cat "$pidfile")" >/dev/null 2>&1; then
	pinned=yes
	echo "  taskset -c 0 bench/prefix --mode latency" >&2
	taskset -c 0 "$PREFIX" --socket "$sock" --mode latency --lat-iters "$lat_iters" \
		>"$tmp/pin.txt" || bench_die "bench/prefix --mode latency failed on CPU 0"
	cat "$tmp/pin.txt" >&2
fi
bench_stop_daemon "$pidfile"

# --- the section ------------------------------------------------------------

f=$tmp/prefix.txt
w() { bench_field "$f" prefix-workload "$1"; }
s() { bench_field "$f" "prefix mode=share" "$1"; }
n() { bench_field "$f" "prefix mode=no-share" "$1"; }
lat() { bench_field "$1" "prefix-acquire blocks=$2" "$3"; }
pp() { echo "$1 / $2"; }

ncpu=$(nproc)
page_bytes=$(w page_bytes)
pool_pages=$(bench_calc "1024 * 1024 * 1024 / $page_bytes" %d)

section_head() {
	echo "## Prefix sharing: hit rate, pages in use and ACQUIRE latency (bench/prefix)"
	echo
	bench_machine "bench/run-prefix.sh (\`make bench\` or \`make bench-prefix\`)" "$load"
	echo
	echo "**Workload.** $(w clients) client processes (one connection each, started together)"
	echo "× $(w requests) requests over $(w prompts) system prompts. System prompt lengths were drawn"
	echo "once, uniform in $(w prompt_min)..$(w prompt_max) tokens: $(w prompt_lens | sed 's/,/, /g')."
	echo "Each request picks one by Zipf with exponent $(w zipf) (P(i) ∝ 1/i^s; the first"
	echo "$(bench_calc "100 / (1 + 1/2 + 1/3 + 1/4 + 1/5 + 1/6 + 1/7 + 1/8)" %.1f) %, the last $(bench_calc "100 / 8 / (1 + 1/2 + 1/3 + 1/4 + 1/5 + 1/6 + 1/7 + 1/8)" %.1f) % at s = 1 and 8 prompts; requests per prompt"
	echo "in this run: $(w picks | sed 's/,/, /g')) and appends a user"
	echo "suffix of random token ids whose length is log-normal, mean $(w suffix_mean) tokens,"
	echo "σ $(w suffix_sigma) of its log, clipped to 1..8192. Token ids are uniform below 152064;"
	echo "every draw comes from seed $(w seed), so both runs serve the same requests. Mean"
	echo "request: $(w mean_tokens) tokens ($(w mean_suffix) of suffix), $(w mean_blocks) full blocks. Pages of $page_bytes"
	echo "bytes (2 layers, 2 KV heads, head_dim 64, $(w block_tokens) tokens, f16), keys"
	echo "$(w key_scheme) (the daemon's default); pool $pool in $slab slabs = $pool_pages pages."
	echo
	echo "**Per request**, with sharing: kvp_block_keys() over the whole prompt,"
	echo "kvp_acquire() of the cached prefix, one kvp_alloc() of the missing full"
	echo "blocks plus a page for the partial last block, a memset of each new page"
	echo "(the stand-in for prefill), kvp_publish() of the new full blocks at"
	echo "normal priority (a block another process published meanwhile comes back"
	echo "as a different canonical page: the own copy is released). Without"
	echo "sharing: one kvp_alloc() of every page, the memset; no keys, no ACQUIRE"
	echo "or PUBLISH. Either way a request's pages are held while the process"
	echo "starts the next $(($(w window) - 1)) requests (a window of $(w window) in flight standing for decode;"
	echo "decode allocates nothing here), then released with one kvp_release()."
	echo "The partial last page is private in both runs and never published."
	echo
	echo "**Pages in use** are the daemon's private + shared pages of the run's"
	echo "namespace, sampled by the parent through an inspection session"
	echo "(kvp_stats()) every $(w poll_us) µs while the clients run ($(s samples) and $(n samples) samples;"
	echo "a sample recounts every page, so they are not free). Cached pages"
	echo "(published, no lease, evictable) are not in use and are shown apart."
	echo "\"Pages held if unshared\" is exact, kept by the clients in shared memory:"
	echo "the most pages their requests in flight would hold without sharing."
	echo
}

section_runs() {
	sp=$(s peak_pages)
	np=$(n peak_pages)
	echo "| | with sharing | without sharing |"
	echo "| --- | ---: | ---: |"
	echo "| full blocks requested | $(s blocks) | $(n blocks) |"
	echo "| blocks served from the cache (hit rate) | $(s hits) (**$(bench_calc "100 * $(s hit_rate)" %.1f) %**) | 0 |"
	echo "| ceiling: prompt blocks after each prompt's first use | $(s ceiling) ($(bench_calc "100 * $(s ceiling_rate)" %.1f) %) | – |"
	echo "| tokens served from the cache | $(s hit_tokens) of $(s tokens) | 0 of $(n tokens) |"
	echo "| pages from kvp_alloc() (partial tails included) | $(s allocated) | $(n allocated) |"
	echo "| pages published / duplicates released | $(s published) / $(s dups) | – |"
	echo "| **peak pages in use** (private + shared, sampled) | **$sp** ($(s peak_private) + $(s peak_shared)) | **$np** ($(n peak_private) + $(n peak_shared)) |"
	echo "| peak pages held if unshared (exact) | $(s demand_peak) | $(n demand_peak) |"
	echo "| peak in use, MiB | $(bench_calc "$sp * $page_bytes / 1048576" %.1f) | $(bench_calc "$np * $page_bytes / 1048576" %.1f) |"
	echo "| cached pages at the end (evictable) | $(s end_cached) ($(bench_calc "100 * $(s end_cached) / $pool_pages" %.0f) % of the pool) | $(n end_cached) |"
	echo "| setup of a request p50 / p99 µs | $(pp "$(s req_p50_us)" "$(s req_p99_us)") | $(pp "$(n req_p50_us)" "$(n req_p99_us)") |"
	echo "| … of which kvp_block_keys() | $(pp "$(s keys_p50_us)" "$(s keys_p99_us)") | – |"
	echo "| … of which kvpool calls | $(pp "$(s calls_p50_us)" "$(s calls_p99_us)") | $(pp "$(n calls_p50_us)" "$(n calls_p99_us)") |"
	echo "| … of which the memset of new pages | $(pp "$(s fill_p50_us)" "$(s fill_p99_us)") | $(pp "$(n fill_p50_us)" "$(n fill_p99_us)") |"
	echo "| wall time of the run, s | $(s wall_s) | $(n wall_s) |"
	echo
	echo "The hits reach the workload's ceiling but for the blocks that two processes"
	echo "computed at once (the duplicates): a user suffix is random, so nothing"
	echo "after a system prompt's last full block can hit, and the block that holds"
	echo "the prompt's end and the suffix's start is new every time."
	echo
	echo "Peak pages in use without sharing ÷ with sharing: **×$(bench_calc "$np / $sp" %.2f)** (the"
	echo "same ratio inside the run with sharing, pages held if unshared ÷ in use:"
	echo "×$(bench_calc "$(s demand_peak) / $sp" %.2f)). The daemon's own prefix counters over the run with sharing:"
	echo "acquires $(s d_acquires), hits $(s d_hits), misses $(s d_misses), hit_tokens $(s d_hit_tokens),"
	echo "publishes $(s d_publishes), dedups $(s d_dedups), evictions $(s d_evictions)."
	echo
	echo "The percentiles of a phase are over all requests on their own, so the"
	echo "phases' p50s need not add up to the setup's. The memset's time includes"
	echo "the first-touch faults of pool memory: with sharing every published page"
	echo "stays cached, so kvp_alloc() keeps handing out pages never touched before"
	echo "(until the pool fills and eviction starts), while without sharing the"
	echo "same few thousand pages go round. With $(w clients) processes, the daemon and the"
	echo "sampler on $ncpu CPUs, the p99s are mostly waits for a CPU."
	echo
}

# lat_row FILE BLOCKS WHERE - one row of the latency table.
lat_row() {
	row="| $2 | $3 | $(pp "$(lat "$1" "$2" acquire_p50_us)" "$(lat "$1" "$2" acquire_p99_us)")"
	row="$row | $(pp "$(lat "$1" "$2" release_p50_us)" "$(lat "$1" "$2" release_p99_us)")"
	row="$row | $(pp "$(lat "$1" "$2" pair_p50_us)" "$(lat "$1" "$2" pair_p99_us)")"
	row="$row | $(pp "$(lat "$1" "$2" alloc_p50_us)" "$(lat "$1" "$2" alloc_p99_us)")"
	row="$row | $(pp "$(lat "$1" "$2" free_p50_us)" "$(lat "$1" "$2" free_p99_us)") |"
	echo "$row"
}

section_latency() {
	echo "### ACQUIRE of a fully cached chain"
	echo
	echo "One client publishes a chain of 256 blocks (random tokens) and releases"
	echo "it, so its pages are cached with no lease; then, $lat_iters times each after"
	echo "$((lat_iters / 10)) untimed, it times kvp_acquire() of the first 32 keys (or of all 256),"
	echo "every key a hit, and kvp_release() of the pages it got. Beside them,"
	echo "kvp_alloc() and kvp_release() of as many fresh pages, timed the same way."
	echo "Latencies in µs, p50 / p99."
	echo
	echo "| blocks | CPUs | kvp_acquire() | kvp_release() | acquire + release | kvp_alloc() of as many | kvp_release() of those |"
	echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
	lat_row "$f" 32 "left to the scheduler"
	lat_row "$f" 256 "left to the scheduler"
	if [ $pinned = yes ]; then
		lat_row "$tmp/pin.txt" 32 "client and daemon on CPU 0"
		lat_row "$tmp/pin.txt" 256 "client and daemon on CPU 0"
	fi
	echo
	echo "Computing the keys is the client's own work and is measured by bench/keys"
	echo "(\"Prefix keys: kvp_key_chain() throughput\" above) for both schemes; here"
	echo "it is the kvp_block_keys() row of the table before this one."
	echo
}

section_commands() {
	echo "Commands (\$TMP is a temporary directory, \$SOCK a socket in it):"
	echo
	echo '```'
	echo "$kvpoold_cmd"
	echo "$prefix_cmd"
	if [ $pinned = yes ]; then
		echo "taskset -apc 0 \$(cat \$TMP/kvpoold.pid)"
		echo "taskset -c 0 bench/prefix --socket \$SOCK --mode latency --lat-iters $lat_iters"
	fi
	echo '```'
}

section=$tmp/section.md
{
	section_head
	section_runs
	section_latency
	section_commands
} >"$section"

bench_replace_section prefix "$section" "$output"
