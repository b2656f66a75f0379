#!/bin/sh
# SPDX-License-Identifier: MIT
# run-connectors.sh - the engine connectors' benchmark of `make bench`:
# starts kvpoold (a 1.5 GiB pool), builds the package's extension, and runs
# bench/connectors.py: kvpool.vllm.KVPoolConnector's load (start_load_kv)
# and save (wait_for_save) of 256 Llama-3.1-8B blocks (512 MiB) between
# vLLM's KV tensors and pool pages, each against a plain torch copy of the
# same bytes in the same run, and the scheduler's lookup
# (get_num_new_matched_tokens) of a 4,096-token prompt. Replaces the
# section between <!-- bench:connectors:begin --> and
# <!-- bench:connectors:end --> of BENCHMARKS.md.
set -eu

usage() {
	cat <<EOF2
Usage: run-connectors.sh [--builddir DIR] [--output FILE] [--python PY] [--runs N]
Time the vLLM connector's copies against torch's, in the same run.

  --builddir DIR   where daemon/kvpoold was built (default .)
  --output FILE    the Markdown file whose connectors section is replaced
  --python PY      an interpreter with torch and vLLM 0.33 (default .venv/bin/python
                   of the source tree, as contrib/quickstart test makes it)
  --runs N         turns of torch copy, load and save (default 11: medians)
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--python) py=${2:?--python needs an interpreter} ;;
	--runs) runs=${2:?--runs needs a count} ;;
	*) return 1 ;;
	esac
}

py=$bench_srcdir/.venv/bin/python
runs=11
bench_parse_opts "$@"
bench_check_built bench "$KVPOOLD"
[ -x "$py" ] || bench_die "$py: no such interpreter (contrib/quickstart test makes .venv; or --python)"
"$py" -c 'import vllm' 2>/dev/null || bench_die "$py cannot import vllm (pip install vllm==0.33.0)"
bench_tmpdir
load=$(bench_load)
bench_build_ext "$py"
bench_start_daemon "$sock" "$pidfile" --pool-size 1536M --slab-size 64M
out=$tmp/runs
PYTHONPATH="$bench_srcdir/python" "$py" "$bench_srcdir/bench/connectors.py" "$sock" \
	"$tmp/model" "$runs" >"$out" 2>"$tmp/err" || { tail -n 20 "$tmp/err" >&2; bench_die "bench/connectors.py failed"; }

# median MODE - the median ns of the lines of mode MODE.
median() {
	bench_field "$out" "conn mode=$1" ns | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
p90() {
	bench_field "$out" "conn mode=$1" ns | sort -n | awk '{ v[NR] = $1 } END { print v[int(NR * 0.9 + 0.5)] }'
}
ref=$(median ref)
ld=$(median load)
sv=$(median save)
lk=$(median lookup)
lds=$(median load-step)
ldo=$(median load-off)
svs=$(median save-step)
svo=$(median save-off)
lk90=$(p90 lookup)
nlk=$(bench_field "$out" "conn mode=lookup" ns | wc -l)
threads=$(bench_field "$out" conn threads)
bytes=$(bench_field "$out" conn bytes)
vers="torch $(bench_field "$out" conn torch), vLLM $(bench_field "$out" conn vllm)"
gbs() { bench_calc "$bytes / $1" %.1f; }
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }

sect=$tmp/section.md
{
	echo "## Engine connectors: vLLM load, save and lookup (bench/run-connectors.sh)"
	echo
	bench_machine '`make bench` (bench/run-connectors.sh)' "$load"
	echo "$vers; the extension built from python/ in this run."
	echo
	echo "kvpool.vllm.KVPoolConnector with vLLM's own config, KV cache allocation"
	echo "(allocate_kv_cache, layout LBNHC) and request block hashes, on the CPU:"
	echo "the geometry of Llama-3.1-8B (32 layers, 8 KV heads, head size 128,"
	echo "bf16, 16-token blocks: 2 MiB a block), 256 blocks = 512 MiB. Each of"
	echo "$runs runs times, in turn, a plain torch copy of that many bytes"
	echo "(\`dst.copy_(src)\`, torch's $threads threads), the worker's load of 256"
	echo "blocks (start_load_kv: ACQUIRE, the copy into vLLM's blocks, release) and"
	echo "its save of 256 new ones (wait_for_save: alloc, the copy, PUBLISH,"
	echo "release); medians. The copies are kvpool._kvpool.copy_blocks on $threads"
	echo "threads, with streaming stores for copies this large. Then $nlk lookups"
	echo "(get_num_new_matched_tokens) of a 4,096-token prompt whose 255 blocks are"
	echo "all in the pool: one ACQUIRE of vLLM's hashes, leases held (released by"
	echo "request_finished, not timed)."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	echo "| load of 256 blocks ≥ 0.9x a torch copy of the bytes | ×$(bench_calc "$ref / $ld") | $(verdict "$ref / $ld >= 0.9") |"
	echo "| save of 256 blocks ≥ 0.9x a torch copy of the bytes | ×$(bench_calc "$ref / $sv") | $(verdict "$ref / $sv >= 0.9") |"
	echo "| lookup of a 4,096-token prompt < 1 ms p50 | $(bench_calc "$lk / 1000" %.0f) µs | $(verdict "$lk < 1000000") |"
	echo
	echo "| operation | median | GB/s | ÷ torch copy's time |"
	echo "| --- | ---: | ---: | ---: |"
	echo "| torch copy_ of 512 MiB | $(bench_calc "$ref / 1e6" %.1f) ms | $(gbs "$ref") | 1.00 |"
	echo "| load: start_load_kv, 256 blocks | $(bench_calc "$ld / 1e6" %.1f) ms | $(gbs "$ld") | $(bench_calc "$ld / $ref") |"
	echo "| save: wait_for_save, 256 blocks | $(bench_calc "$sv / 1e6" %.1f) ms | $(gbs "$sv") | $(bench_calc "$sv / $ref") |"
	echo "| lookup: get_num_new_matched_tokens, 4,096 tokens | $(bench_calc "$lk / 1000" %.0f) µs (p90 $(bench_calc "$lk90 / 1000" %.0f) µs) | | |"
	echo
	echo "The same load and save with the connector's defaults, the copies on its"
	echo "thread (async_load_blocks 8, async_save): the time the engine's step spends"
	echo "in start_load_kv or wait_for_save, and the time until get_finished() reports"
	echo "the transfer done (what a request waiting for the load, or vLLM holding the"
	echo "saved blocks, waits):"
	echo
	echo "| operation | in the step | until done | in the step, before (above) ÷ now |"
	echo "| --- | ---: | ---: | ---: |"
	echo "| load of 256 blocks, off the step | $(bench_calc "$lds / 1000" %.0f) µs | $(bench_calc "$ldo / 1e6" %.1f) ms | $(bench_calc "$ld / $lds" %.0f)x |"
	echo "| save of 256 blocks, off the step | $(bench_calc "$svs / 1000" %.0f) µs | $(bench_calc "$svo / 1e6" %.1f) ms | $(bench_calc "$sv / $svs" %.0f)x |"
	echo
	echo "Command: \`make bench\` (or \`make bench-connectors\`, or \`sh bench/run-connectors.sh --builddir . --output BENCHMARKS.md\`)."
} >"$sect"
bench_replace_section connectors "$sect" "$output"
cat "$sect"
