#!/bin/sh
# SPDX-License-Identifier: MIT
# run-python.sh - the Python package's benchmark of `make bench`: starts
# kvpoold, builds the package's extension (python/), and runs, in turns,
# bench/pyref (libkvpool from C: the reference) and bench/python.py (the
# same through `import kvpool`) for a one-page alloc+release round trip
# and an acquire of 256 keys; then the cost of a page view. Replaces the
# section between <!-- bench:python:begin --> and <!-- bench:python:end -->
# of BENCHMARKS.md.
set -eu

usage() {
	cat <<EOF
Usage: run-python.sh [--builddir DIR] [--output FILE] [--python PY] [--rounds N]
Time the kvpool Python package against libkvpool from C, in the same run.

  --builddir DIR   where daemon/kvpoold and bench/pyref were built (default .)
  --output FILE    the Markdown file whose python section is replaced
  --python PY      the interpreter, with NumPy (default .venv/bin/python of
                   the source tree, as contrib/quickstart test makes it)
  --rounds N       turns of C then Python for each figure (default 7: medians)
EOF
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

bench_opt() {
	case $1 in
	--python) py=${2:?--python needs an interpreter} ;;
	--rounds) rounds=${2:?--rounds needs a count} ;;
	*) return 1 ;;
	esac
}

py=$bench_srcdir/.venv/bin/python
rounds=7
bench_parse_opts "$@"
PYREF=$builddir/bench/pyref
bench_check_built bench "$KVPOOLD" "$PYREF"
[ -x "$py" ] || bench_die "$py: no such interpreter (contrib/quickstart test makes .venv; or --python)"
bench_tmpdir
load=$(bench_load)
bench_build_ext "$py"
bench_start_daemon "$sock" "$pidfile" --pool-size 64M --slab-size 4M
export PYTHONPATH="$bench_srcdir/python"

# median FILE PREFIX - the median ns= of FILE's lines that begin with PREFIX.
median() {
	bench_field "$1" "$2" ns | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

out=$tmp/runs
: >"$out"
r=0
while [ $r -lt "$rounds" ]; do
	"$PYREF" "$sock" pair 20000 >>"$out"
	"$py" "$bench_srcdir/bench/python.py" "$sock" pair 20000 >>"$out"
	"$PYREF" "$sock" acquire 2000 >>"$out"
	"$py" "$bench_srcdir/bench/python.py" "$sock" acquire 2000 >>"$out"
	"$py" "$bench_srcdir/bench/python.py" "$sock" view 100000 >>"$out"
	"$py" "$bench_srcdir/bench/python.py" "$sock" array 100000 >>"$out"
	r=$((r + 1))
done
c_pair=$(median "$out" "pyref mode=pair")
p_pair=$(median "$out" "py mode=pair")
c_acq=$(median "$out" "pyref mode=acquire")
p_acq=$(median "$out" "py mode=acquire")
p_view=$(median "$out" "py mode=view")
p_arr=$(median "$out" "py mode=array")
copies=$(grep -c 'copy=yes' "$out" || true)
pair_x=$(bench_calc "$p_pair / $c_pair")
acq_x=$(bench_calc "$p_acq / $c_acq")
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }
pyver=$("$py" -c 'import sys, numpy; print("Python %d.%d.%d, NumPy %s" % (sys.version_info[:3] + (numpy.__version__,)))')

sect=$tmp/section.md
{
	echo "## Python package: the binding's cost (bench/run-python.sh)"
	echo
	bench_machine '`make bench` (bench/run-python.sh)' "$load"
	echo "$pyver; the extension built from python/ in this run."
	echo
	echo "One kvpoold (64 MiB pool, host backend), one client at a time of a"
	echo "2-layer namespace (16 KiB pages). Each figure is the median of $rounds"
	echo "turns; in each turn bench/pyref (C, libkvpool) and bench/python.py (the"
	echo "same loop through \`import kvpool\`) run one after the other, each the"
	echo "mean of its operations after a tenth as many untimed ones."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	echo "| one-page alloc+release from Python ≤ 1.3x C's | ×$pair_x | $(verdict "$p_pair <= 1.3 * $c_pair") |"
	echo "| acquire of 256 keys from Python ≤ 1.3x C's | ×$acq_x | $(verdict "$p_acq <= 1.3 * $c_acq") |"
	echo "| a page view in under 2 µs, no copy | $(bench_calc "$p_view / 1000") µs (memoryview), $(bench_calc "$p_arr / 1000") µs (NumPy); copies: $copies | $(verdict "$p_view < 2000 && $copies == 0") |"
	echo
	echo "| operation | C (libkvpool) | Python (kvpool) | ratio |"
	echo "| --- | ---: | ---: | ---: |"
	echo "| alloc 1 page + release | $(bench_calc "$c_pair / 1000") µs | $(bench_calc "$p_pair / 1000") µs | ×$pair_x |"
	echo "| acquire 256 keys | $(bench_calc "$c_acq / 1000") µs | $(bench_calc "$p_acq / 1000") µs | ×$acq_x |"
	echo "| page(p) + memoryview | | $(bench_calc "$p_view / 1000") µs | |"
	echo "| page_array(p) (NumPy, shaped) | | $(bench_calc "$p_arr / 1000") µs | |"
	echo
	echo "Command: \`make bench\` (or \`sh bench/run-python.sh --builddir . --output BENCHMARKS.md\`)."
} >"$sect"
bench_replace_section python "$sect" "$output"
cat "$sect"
