#!/bin/sh
# SPDX-License-Identifier: MIT
# run-spill.sh - the NVMe-tier benchmark of `make bench`: for each of
# --rounds rounds, starts kvpoold with a spill directory on disk, runs
# bench/spill (spill throughput, restore throughput and latency), stops
# it, and measures the references in the same directory with the same
# block (the tier's slot size): fio with io_uring and O_DIRECT,
# sequential write then read, and bench/spill --mode pio (pwrite/pread,
# queue depth 1). Then one run without client pacing, to count the pages
# the daemon drops. Replaces the section between <!-- bench:spill:begin -->
# and <!-- bench:spill:end --> of BENCHMARKS.md (appending it the first
# time). Every file it writes is deleted at the end.
#
# fio comes from the Debian package fio, installed with apt-get when
# missing; without it the section says the reference is missing.
set -eu

usage() {
	cat <<EOF
Usage: run-spill.sh [--builddir DIR] [--output FILE] [--dir DIR] [--rounds N]
Measure kvpoold's NVMe tier against fio and a pwrite/pread loop on the same
disk, and write the results into FILE (default ./BENCHMARKS.md).

  --builddir DIR    where daemon/kvpoold and bench/spill were built (default .)
  --output FILE     the Markdown file whose spill section is replaced
  --dir DIR         where the spill files go: a disk, not tmpfs (default /var/tmp)
  --rounds N        rounds of kvpool + references; medians are reported (default 5)
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# bench_opt NAME VALUE - run-spill.sh's own options (see bench/lib.sh).
bench_opt() {
	case $1 in
	--dir) base=${2:?--dir needs a directory} ;;
	--rounds) rounds=${2:?--rounds needs a count} ;;
	*) return 1 ;;
	esac
}

base=/var/tmp
rounds=5
bench_parse_opts "$@"
SPILL=$builddir/bench/spill
bench_check_built bench-spill "$KVPOOLD" "$SPILL"
[ -d "$base" ] || bench_die "--dir $base is not a directory"
fstype=$(df --output=fstype "$base" | tail -n 1 | tr -d ' ')
case $fstype in
tmpfs|ramfs|devtmpfs|overlay)
	bench_die "$base is on $fstype: the spill files must be on a disk; give --dir DIR on one" ;;
esac

bench_tmpdir
work=$(mktemp -d "$base/kvpool-spill.XXXXXX")

# bench_on_exit - the spill files go with their directory at exit.
bench_on_exit() {
	rm -rf ${work:+"$work"}
}

# median - the median of the numbers on stdin, one a line.
median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "–";
		else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# pctl P - the P-th percentile (nearest rank) of the numbers on stdin.
pctl() {
	sort -g | awk -v p="$1" '{ v[NR] = $1 } END { r = int((NR * p + 99) / 100);
		if (r < 1) r = 1; print v[r] }'
}

# --- fio -------------------------------------------------------------------

# ensure_fio() - have fio, installing the Debian package when missing.
# Returns 1 with the reason in $fio_why.
fio_why=
ensure_fio() {
	command -v fio >/dev/null && return 0
	bench_apt_install "fio is not installed" fio && return 0
	fio_why=$bench_why
	return 1
}
have_fio=no
if ensure_fio; then
	have_fio=yes
	fio_version=$(fio --version)
fi

# fio_mbs RW SIZE [OPTION]... - MB/s (10^6) of one sequential fio job on
# $work/fio.dat. Terse v3: field 7 is the read bandwidth, 48 the write
# one, in KiB/s.
fio_mbs() {
	rw=$1 size=$2
	shift 2
	fio --name=spill-ref --filename="$work/fio.dat" --ioengine=io_uring --fixedbufs \
		--direct=1 --rw="$rw" --bs="$slot" --iodepth="$qd" --size="$size" "$@" \
		--output-format=terse --terse-version=3 >"$tmp/fio.txt" 2>"$tmp/fio.err" ||
		{ cat "$tmp/fio.err" >&2; bench_die "fio --rw=$1 failed in $work"; }
	awk -F';' -v rw="$rw" '{ printf "%.1f", (rw == "read" ? $7 : $48) * 1024 / 1e6 }' \
		"$tmp/fio.txt"
}

# --- measure --------------------------------------------------------------

pool=256M
slab=4M
spill_size=2G
extra=512		# pages beyond the pool: 1024 spilled in all
chain=32
qd=$chain		# fio's queue depth: the reads of one kvp_acquire()
max_writing=64
fio_wbatch="--iodepth=$max_writing --iodepth_batch_submit=$chain --iodepth_batch_complete_min=$chain"
fio_rbatch="--iodepth_batch_submit=$chain --iodepth_batch_complete_min=$chain"
fio_bytes=192M
fio_bytes_n=201326592
pio_bytes=67108864
kvpoold_args="--slab-size $slab --free-watermark 0 --spill-size $spill_size --log-level warn"
spill_args="--extra-pages $extra --chain $chain --max-writing $max_writing"
load=$(bench_load)

# start_kvpoold POOL - a fresh daemon with an empty spill directory.
start_kvpoold() {
	rm -rf "$work/spill"
	mkdir "$work/spill"
	# shellcheck disable=SC2086
	bench_start_daemon "$sock" "$pidfile" --spill-dir "$work/spill" \
		$kvpoold_args --pool-size "$1"
}

started=$(date +%s)
r=1
while [ $r -le "$rounds" ]; do
	f=$tmp/round$r.txt
	start_kvpoold $pool
	echo "  round $r: bench/spill $spill_args" >&2
	# shellcheck disable=SC2086
	"$SPILL" --socket "$sock" --spill-dir "$work/spill" $spill_args >"$f" ||
		bench_die "bench/spill failed in round $r (see above)"
	bench_stop_daemon "$pidfile"
	rm -rf "$work/spill"
	slot=$(bench_field "$f" spill-setup slot_bytes)
	if [ $have_fio = yes ]; then
		echo "fio write_mbs=$(fio_mbs write $fio_bytes) read_mbs=$(fio_mbs read $fio_bytes)" >>"$f"
		rm -f "$work/fio.dat"
		# kvpool's own shape: writes 32 at a time, 32..64 in flight;
		# reads 32 at a time, all of them done before the next 32
		# shellcheck disable=SC2086 # the batch options are several words
		echo "fio-batch write_mbs=$(fio_mbs write $fio_bytes $fio_wbatch) read_mbs=$(fio_mbs read $fio_bytes $fio_rbatch)" >>"$f"
		rm -f "$work/fio.dat"
	fi
	"$SPILL" --mode pio --pio-file "$work/pio.dat" --pio-bytes $pio_bytes --block "$slot" >>"$f" ||
		bench_die "bench/spill --mode pio failed in $work"
	grep -v '^spill-restore-lat' "$f" >&2
	r=$((r + 1))
done

# The same client without pacing: what the daemon does with an eviction
# burst the disk cannot absorb at once.
burst=$tmp/burst.txt
start_kvpoold $pool
echo "  unpaced: bench/spill --extra-pages 512 --max-writing 0 --restore-chains 16" >&2
"$SPILL" --socket "$sock" --spill-dir "$work/spill" --extra-pages 512 --chain $chain \
	--max-writing 0 --restore-chains 16 >"$burst" || bench_die "bench/spill (unpaced) failed"
grep -v '^spill-restore-lat' "$burst" >&2
bench_stop_daemon "$pidfile"
elapsed=$(($(date +%s) - started))

# --- the section ------------------------------------------------------------

# all PREFIX KEY - KEY of every round, one a line.
all() {
	r=1
	while [ $r -le "$rounds" ]; do
		bench_field "$tmp/round$r.txt" "$1" "$2"
		r=$((r + 1))
	done
}
med() { all "$1" "$2" | median; }
# ratios PREFIX KEY PREFIX2 KEY2 - per round KEY / KEY2, one a line.
ratios() {
	r=1
	while [ $r -le "$rounds" ]; do
		a=$(bench_field "$tmp/round$r.txt" "$1" "$2")
		b=$(bench_field "$tmp/round$r.txt" "$3" "$4")
		[ -n "$b" ] && bench_calc "$a / $b" %.3f && echo
		r=$((r + 1))
	done
}
f1=$tmp/round1.txt
s1() { bench_field "$f1" spill-setup "$1"; }
page=$(s1 page_bytes)
slot=$(s1 slot_bytes)
pool_pages=$(s1 pool_pages)
published=$(s1 published)
all spill-restore-lat ms | tr ',' '\n' >"$tmp/lat.txt"
nlat=$(wc -l <"$tmp/lat.txt")

w_kv=$(med spill-write mbs)
r_kv=$(med spill-restore mbs)
w_pio=$(med spill-pio write_mbs)
r_pio=$(med spill-pio read_mbs)
if [ $have_fio = yes ]; then
	w_fio=$(med fio write_mbs)
	r_fio=$(med fio read_mbs)
	w_ratio=$(ratios spill-write mbs fio write_mbs | median)
	r_ratio=$(ratios spill-restore mbs fio read_mbs | median)
	verdict() { awk -v x="$1" 'BEGIN { print (x >= 0.9) ? "**met**" : "**not met**" }'; }
	wb_fio=$(med fio-batch write_mbs)
	rb_fio=$(med fio-batch read_mbs)
	wb_ratio=$(ratios spill-write mbs fio-batch write_mbs | median)
	rb_ratio=$(ratios spill-restore mbs fio-batch read_mbs | median)
	span() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f–%.2f", lo, hi }'; }
	w_span=$(ratios spill-write mbs fio write_mbs | span)
	r_span=$(ratios spill-restore mbs fio read_mbs | span)
	w_verdict=$(verdict "$w_ratio")
	r_verdict=$(verdict "$r_ratio")
else
	w_fio="missing"; r_fio="missing"; w_ratio="–"; r_ratio="–"
	wb_fio="missing"; rb_fio="missing"; wb_ratio="–"; rb_ratio="–"
	w_verdict="not measured: $fio_why"; r_verdict=$w_verdict
fi

src=$(df --output=source "$base" | tail -n 1 | tr -d ' ')
blk=$(basename "$(readlink -f "$src")")
dev="$src"
if [ -e "/sys/class/block/$blk" ]; then
	parent=$blk
	[ -e "/sys/class/block/$blk/partition" ] &&
		parent=$(basename "$(readlink -f "/sys/class/block/$blk/..")")
	size=$(bench_calc "$(cat "/sys/class/block/$parent/size") * 512 / 2^30" %.0f)
	model=$(tr -s ' ' 2>/dev/null <"/sys/class/block/$parent/device/model" || true)
	vendor=$(tr -s ' ' 2>/dev/null <"/sys/class/block/$parent/device/vendor" || true)
	driver=$(basename "$(readlink -f "/sys/class/block/$parent/device/driver" 2>/dev/null)" 2>/dev/null || true)
	sched=$(sed 's/.*\[\(.*\)\].*/\1/' "/sys/class/block/$parent/queue/scheduler" 2>/dev/null || echo "?")
	rot=$(cat "/sys/class/block/$parent/queue/rotational" 2>/dev/null || echo "?")
	dev="$src ($parent: ${vendor:+vendor $vendor, }${model:-no model string}, driver ${driver:-?}, ${size} GiB, scheduler $sched, rotational $rot as sysfs says)"
fi
mib() { bench_calc "$1 / 1048576" %.0f; }
fio_w=0
[ $have_fio = yes ] && fio_w=$fio_bytes_n
writes_gib=$(bench_calc "($rounds * ($published * $slot + 2 * $fio_w + $pio_bytes) + $(bench_field "$burst" spill-write pages) * $slot) / 2^30" %.1f)

section_head() {
	echo "## NVMe tier: spill and restore throughput, restore latency (bench/spill)"
	echo
	bench_machine "bench/run-spill.sh (\`make bench\` or \`make bench-spill\`)" "$load"
	echo "Spill directory: a fresh directory under $base, file system $fstype on $dev."
	echo "$rounds rounds, ${elapsed} s in all, about $writes_gib GiB written to the disk; every file is deleted after."
	echo
	echo "**Pages** of $page bytes (8 layers × 8 KV heads × head_dim 128 × 16 tokens × 2 (K, V) × f16),"
	echo "so a tier slot is $slot bytes (4 KiB slot header + the page, rounded to the"
	echo "direct-I/O alignment, $(s1 align) bytes here). Throughputs are MB/s (10⁶ bytes) of page data; the"
	echo "disk moved $(bench_calc "$slot / $page" %.4f)× that. The pool is $pool in $slab slabs = $pool_pages pages,"
	echo "\`--free-watermark 0\`, \`--spill-size $spill_size\` ($(s1 tier_slots) slots). Each round starts a fresh kvpoold."
	echo
	echo "**What bench/spill does.** A chain is $chain blocks (512 tokens, $(mib $((chain * page))) MiB) with keys of"
	echo "their own. *Fill* (untimed): publish chains until the pool holds $pool_pages cached pages,"
	echo "writing every byte of each page once (as a model would; else the daemon's first"
	echo "copy out of a page would fault in and clear memfd memory, and that would be"
	echo "timed). *Spill* (timed): publish $extra more pages a chain at a time"
	echo "(kvp_alloc of $chain pages, which evicts $chain cached pages to the tier; a 32-byte"
	echo "stamp per page; kvp_publish; kvp_release), then lease the pool's $pool_pages pages as"
	echo "private pages $chain at a time, which evicts the rest, and poll STATS until"
	echo "\`st.nvme.writing\` is 0; the time runs from just before the first evicting"
	echo "kvp_alloc to that moment, and the bytes are the daemon's own \`spills\` count. The"
	echo "client paces itself: before each call it polls STATS and waits while more than"
	echo "$max_writing − $chain writes are in flight (the daemon also holds back an allocation"
	echo "when its staging buffers run out; see the unpaced run below). *Restore* (timed): with the pool empty, kvp_acquire()"
	echo "the $((pool_pages / chain)) oldest chains, one call a chain, holding every page (so the pool, which"
	echo "holds them all, evicts nothing and nothing is written meanwhile), then check"
	echo "each page's stamp. Restore throughput is the daemon's \`restores\` × page bytes"
	echo "over the wall time of those calls: it includes the round trips between them,"
	echo "when no read is in flight."
	echo
	echo "**References**, in the same directory right after each round's kvpool run, with"
	echo "the slot size as block: \`fio --ioengine=io_uring --fixedbufs --direct=1\`, sequential"
	echo "\`--rw=write\` then \`--rw=read\` of the same $fio_bytes file at \`--iodepth=$qd\` (the reads of"
	echo "one kvp_acquire; the daemon's writes ran at $chain..$max_writing in flight, mean"
	echo "$(med spill-write depth_mean) when sampled), and both again batched as kvpool submits (below);"
	echo "${fio_version:-fio missing: $fio_why}. And bench/spill --mode pio:"
	echo "pwrite() then pread() of $(mib $pio_bytes) MiB from one aligned buffer, O_DIRECT,"
	echo "queue depth 1, into a fallocated file like the daemon's."
	echo
}

# section_table - one row per round, then the medians, then the goals.
section_table() {
	echo "| round | kvpool spill | fio write | fio write, batched | pwrite QD1 | spill ÷ fio | kvpool restore | fio read | fio read, batched | pread QD1 | restore ÷ fio |"
	echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	r=1
	while [ $r -le "$rounds" ]; do
		g=$tmp/round$r.txt
		wk=$(bench_field "$g" spill-write mbs)
		rk=$(bench_field "$g" spill-restore mbs)
		wf=$(bench_field "$g" fio write_mbs)
		rf=$(bench_field "$g" fio read_mbs)
		wr="–"; rr="–"
		[ -n "$wf" ] && wr=$(bench_calc "$wk / $wf" %.2f) && rr=$(bench_calc "$rk / $rf" %.2f)
		echo "| $r | $wk | ${wf:-–} | $(bench_field "$g" fio-batch write_mbs) | $(bench_field "$g" spill-pio write_mbs) | $wr | $rk | ${rf:-–} | $(bench_field "$g" fio-batch read_mbs) | $(bench_field "$g" spill-pio read_mbs) | $rr |"
		r=$((r + 1))
	done
	echo "| **median** | **$w_kv** | **$w_fio** | $wb_fio | $w_pio | **$w_ratio** | **$r_kv** | **$r_fio** | $rb_fio | $r_pio | **$r_ratio** |"
	echo
	echo "MB/s of page data (fio and pwrite/pread: of their blocks). A ratio's median is"
	echo "the median of the rounds' ratios: the disk of this VM changes speed by tens of"
	echo "percent from one minute to the next (compare the rounds), so only measurements"
	echo "taken side by side are compared."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	echo "| spill at ≥ 90 % of fio's sequential write bandwidth | ×$w_ratio ($w_kv vs $w_fio MB/s; rounds ×$w_span) | $w_verdict |"
	echo "| restore at ≥ 90 % of fio's sequential read bandwidth | ×$r_ratio ($r_kv vs $r_fio MB/s; rounds ×$r_span) | $r_verdict |"
	echo
	echo "The verdicts are the medians'; where the rounds' ratios straddle 0.90 the"
	echo "verdict is within this disk's noise, and another run can give the other one."
	echo
	echo "Against fio in kvpool's own shape (\"batched\": writes submitted $chain at a time"
	echo "with up to $max_writing in flight, \`$fio_wbatch\`; reads $chain at a time, all"
	echo "completed before the next $chain, \`$fio_rbatch\`) the ratios are"
	echo "×$wb_ratio for spill and ×$rb_ratio for restore (medians of the rounds)."
	echo
}

section_detail() {
	echo "### Restore latency and where the time goes"
	echo
	echo "| | median of the rounds (but the first row) |"
	echo "| --- | ---: |"
	echo "| kvp_acquire() of a spilled $chain-block chain, p50 / p99 / max ms (all $nlat calls of all rounds) | $(pctl 50 <"$tmp/lat.txt") / $(pctl 99 <"$tmp/lat.txt") / $(pctl 100 <"$tmp/lat.txt") |"
	echo "| daemon's restore_us_mean / restore_us_max (one slot: read issued → checked and copied) | $(med spill-restore restore_us_mean) / $(med spill-restore restore_us_max) µs |"
	echo "| restored pages / hits / bad stamps / checksum failures | $(med spill-restore pages) / $(med spill-restore hits) / $(med spill-restore bad) / $(med spill-restore checksum_failures) |"
	echo "| restore: time inside kvp_acquire ÷ wall time | $(bench_calc "$(med spill-restore acquire_sum_s) / $(med spill-restore wall_s)" %.2f) |"
	echo "| spilled pages / dropped / I/O errors | $(med spill-write pages) / $(med spill-write dropped) / $(med spill-write io_errors) |"
	echo "| spill: client's calls ÷ drain after the last call, s | $(med spill-write client_s) / $(med spill-write drain_s) |"
	echo "| writes in flight while pacing, mean / max | $(med spill-write depth_mean) / $(med spill-write depth_max) |"
	echo "| daemon CPU (all its threads) during spill / restore, cores | $(med spill-write daemon_cpu) / $(med spill-restore daemon_cpu) |"
	echo "| client CPU during spill / restore, cores | $(med spill-write client_cpu) / $(med spill-restore client_cpu) |"
	echo "| memcpy of a page / XXH3-64 of a page on this CPU, µs | $(med spill-cpu copy_us) / $(med spill-cpu xxh3_us) |"
	echo
	cu=$(med spill-cpu copy_us)
	xu=$(med spill-cpu xxh3_us)
	echo "The daemon's loop thread copies each page into a staging buffer and hashes it"
	echo "before queueing its write (and hashes and copies it after each read): at the"
	echo "median spill rate that is $(bench_calc "$w_kv * 1e6 / $page * ($cu + $xu) / 1e6 * 100" %.0f) % of one CPU, at the restore rate"
	echo "$(bench_calc "$r_kv * 1e6 / $page * ($cu + $xu) / 1e6 * 100" %.0f) %, and the daemon as a whole uses well under one CPU: neither the"
	echo "copy nor the checksum bounds the tier here. (A perf profile of the daemon"
	echo "while spilling, taken when this benchmark was written: context switches,"
	echo "\`iowrite16\` — the virtio doorbell, a VM exit — the memcpy, XXH3 and the STATS"
	echo "recounts of the pacing polls, in that order.) While spilling, $chain to $max_writing writes are"
	echo "queued at all times, so the copy and hash of the next chain overlap the"
	echo "disk's work. In manual runs when this benchmark was written, some sessions"
	echo "gave spill ÷ fio of 0.82–0.88 throughout: the same with \`--max-writing\` 32, 64"
	echo "and 127, and fio over a file with 4 KiB written at every slot start (the"
	echo "daemon's wiped slot headers) was as fast as over a fresh one, so neither the"
	echo "queue depth, nor drops, nor the file's layout explained that gap; what did is"
	echo "still open. A restore is one kvp_acquire() at a time: $chain reads go out"
	echo "together, the reply waits for the last of them, and the next chain's reads"
	echo "start after the client's next round trip, so the queue drains to 0 between"
	echo "chains where fio keeps $qd in flight; the time inside kvp_acquire ÷ wall time"
	echo "above shows the round trips between the calls cost next to nothing."
	echo
}

section_burst() {
	b() { bench_field "$burst" "$1" "$2"; }
	bp=$(b spill-setup published)
	bpool=$(b spill-setup pool_pages)
	echo "### Without pacing: back-pressure"
	echo
	echo "The same client on a fresh daemon with the same $pool pool ($bpool pages), publishing $((bp - bpool))"
	echo "pages beyond it and flushing as fast as it can (\`--max-writing 0\`): of"
	echo "$(b spill-write evictions) evicted pages $(b spill-write pages) were written and **$(b spill-write dropped) dropped**"
	echo "(\`st.nvme.dropped\`: \"no slot, no buffer\"), at $(b spill-write mbs) MB/s. The daemon has"
	echo "$(bench_calc "64 * 1048576 / $slot" %d) staging buffers (64 MiB); an allocation that would spill more pages than"
	echo "it has buffers free while writes are in flight spills what it can and waits"
	echo "for the next write to complete, so an eviction burst is slowed down, not"
	echo "lost. Acquiring $(b spill-restore chains) of the oldest chains back afterwards found $(b spill-restore hits) of their"
	echo "$(b spill-restore blocks) blocks ($(b spill-restore short) chains short)."
	echo
}

section_commands() {
	echo "Commands, per round (\$DIR a fresh directory under $base, \$TMP a temporary"
	echo "directory, \$SOCK a socket in it, \$SLOT = $slot):"
	echo
	echo '```'
	echo "kvpoold --socket \$SOCK --pid-file \$TMP/kvpoold.pid --spill-dir \$DIR/spill --pool-size $pool $kvpoold_args"
	echo "bench/spill --socket \$SOCK --spill-dir \$DIR/spill $spill_args"
	echo "fio --name=spill-ref --filename=\$DIR/fio.dat --ioengine=io_uring --fixedbufs --direct=1 --rw=write --bs=\$SLOT --iodepth=$qd --size=$fio_bytes"
	echo "fio --name=spill-ref --filename=\$DIR/fio.dat --ioengine=io_uring --fixedbufs --direct=1 --rw=read --bs=\$SLOT --iodepth=$qd --size=$fio_bytes"
	echo "fio --name=spill-ref --filename=\$DIR/fio.dat --ioengine=io_uring --fixedbufs --direct=1 --rw=write --bs=\$SLOT --size=$fio_bytes $fio_wbatch"
	echo "fio --name=spill-ref --filename=\$DIR/fio.dat --ioengine=io_uring --fixedbufs --direct=1 --rw=read --bs=\$SLOT --iodepth=$qd --size=$fio_bytes $fio_rbatch"
	echo "bench/spill --mode pio --pio-file \$DIR/pio.dat --pio-bytes $pio_bytes --block \$SLOT"
	echo "# once, unpaced, on a fresh daemon:"
	echo "bench/spill --socket \$SOCK --spill-dir \$DIR/spill --extra-pages 512 --chain $chain --max-writing 0 --restore-chains 16"
	echo '```'
}

section=$tmp/section.md
{
	section_head
	section_table
	section_detail
	section_burst
	section_commands
} >"$section"

bench_replace_section spill "$section" "$output"
