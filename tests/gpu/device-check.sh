#!/bin/sh
# SPDX-License-Identifier: MIT
# device-check.sh - the GPU checks of the KV kernels, on a machine with an
# NVIDIA GPU and nothing to install from.
#
# usage: tests/gpu/device-check.sh [BUILDDIR]     (default: the tree root)
#
# It builds nothing. It runs what a CUDA build (./configure && make check,
# here or on a machine like it) left in BUILDDIR:
#   tests/cuda_copy_pages    kvp_copy_pages_cuda() against the C reference
#   tests/cuda_attention     attention and write_kv against the C
#                            references and cuBLAS, contexts up to 32k
#   tests/cuda_pool          kvpoold --backend cuda: pages written on the
#                            device by one process, read back through
#                            CUDA IPC by another after passing through
#                            the pinned host tier and the NVMe tier
#   tests/gpu/kernel_bench   bandwidth of decode and copy_pages as a
#                            fraction of cudaMemcpy, a Markdown table
#   tests/python/test_gpu.py the Python package on the cuda backend (DLPack
#                            and __cuda_array_interface__ across processes),
#                            when the machine's python3 (or $KVPOOL_PYTHON)
#                            has torch, pytest and the built extension in
#                            python/kvpool (carry it); else it says so
#   examples/demo.sh         the README demo on the GPU: kvpoold's cuda
#                            backend, four model servers opening its slabs
#                            with CUDA IPC and running the model on the GPU
#                            (cuBLAS and the kernels), every answer checked
#                            against --no-cache
# A build carried to another path works: the programs are run directly,
# with client/.libs (libkvpool) and the CUDA library directories on
# LD_LIBRARY_PATH. The machine needs an NVIDIA driver and the CUDA runtime
# and cuBLAS libraries of the toolkit the build used (CUDA 13 here). If
# the tree was configured on that machine, `make check` runs the tests
# too. Meant to take a minute or two on an H100/H200 (not yet timed on
# one); the programs are capped at 45 s, 90 s, 45 s, 60 s and 90 s, so
# the whole stops within 6 minutes whatever happens (a cap hit is a
# failure).
#
# Exit status: 0 when every test passed, 1 when one failed, 77 when no GPU
# answered (every program skipped).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root}
cd "$build" || exit 1

LD_LIBRARY_PATH="$build/client/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib; do
	[ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
export LD_LIBRARY_PATH

# The real executable of a program: libtool keeps it in .libs/ when it
# wrote a wrapper script in its place.
real() {
	dir=$(dirname "$1")
	base=$(basename "$1")
	for c in "$dir/.libs/$base" "$dir/.libs/lt-$base" "$1"; do
		if [ -f "$c" ] && head -c 4 "$c" | grep -q ELF; then
			echo "$c"
			return 0
		fi
	done
	return 1
}

# run PROGRAM SECONDS
run() {
	t=$1
	prog=$(real "$t") || { echo "MISSING: $t (build with ./configure && make check first)"; return 1; }
	echo "== $t"
	timeout "$2" "$prog"
}

command -v nvidia-smi >/dev/null 2>&1 &&
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

fail=0
skip=0
total=0
KVPOOLD=$build/$(real daemon/kvpoold 2>/dev/null || echo daemon/kvpoold)
export KVPOOLD
for t in tests/cuda_copy_pages:45 tests/cuda_attention:90 tests/cuda_pool:45; do
	limit=${t#*:}
	t=${t%:*}
	total=$((total + 1))
	run "$t" "$limit"
	rc=$?
	case $rc in
	0) echo "PASS: $t" ;;
	77) echo "SKIP: $t"; skip=$((skip + 1)) ;;
	*) echo "FAIL: $t (exit $rc)"; fail=$((fail + 1)) ;;
	esac
done

run tests/gpu/kernel_bench 60
rc=$?
case $rc in
0|77) ;;
*) echo "FAIL: tests/gpu/kernel_bench (exit $rc)"; fail=$((fail + 1)) ;;
esac

# The Python step: pytest of tests/python/test_gpu.py, capped at 120 s.
py=${KVPOOL_PYTHON:-python3}
if PYTHONPATH="$root/python" "$py" -c 'import kvpool._kvpool, torch, pytest' 2>/dev/null; then
	echo "== tests/python/test_gpu.py"
	out=$(cd "$root/tests/python" && KVPOOL_BUILDDIR=$build PYTHONPATH="$root/python" \
		timeout 120 "$py" -m pytest -q -rs -p no:cacheprovider test_gpu.py 2>&1)
	rc=$?
	echo "$out"
	if [ $rc -ne 0 ]; then
		echo "FAIL: tests/python/test_gpu.py (exit $rc)"
		fail=$((fail + 1))
	elif echo "$out" | grep -q " passed"; then
		echo "PASS: tests/python/test_gpu.py"
	else
		echo "SKIP: tests/python/test_gpu.py (see the reason above)"
	fi
else
	echo "SKIP: tests/python/test_gpu.py: $py lacks torch, pytest or the built extension" \
	     "(python/kvpool/_kvpool*.so: build it with python/setup.py build_ext --inplace)"
fi

# demo_gpu - examples/demo.sh over the real executables (symlinked into a
# tree of the layout it expects); it must have run on the GPU.
demo_gpu() {
	d=$(mktemp -d /tmp/kvpool-gpudemo.XXXXXX) || return 1
	mkdir -p "$d/daemon" "$d/client" "$d/examples"
	for p in daemon/kvpoold client/kvpool examples/kvpool-model-server; do
		r=$(real "$p") || { echo "MISSING: $p"; rm -rf "$d"; return 1; }
		ln -s "$build/$r" "$d/$p"
	done
	echo "== examples/demo.sh (GPU)"
	timeout 90 sh "$root/examples/demo.sh" "$d" >"$d/out" 2>&1
	rc=$?
	cat "$d/out"
	if [ $rc -eq 0 ] && ! grep -q ", GPU)" "$d/out"; then
		echo "the model servers did not run on the GPU (kvpoold took the host backend?)"
		rc=1
	fi
	rm -rf "$d"
	return $rc
}
if [ $skip -eq $total ]; then
	echo "SKIP: examples/demo.sh on the GPU (no GPU answered)"
elif demo_gpu; then
	echo "PASS: examples/demo.sh on the GPU"
else
	echo "FAIL: examples/demo.sh on the GPU"
	fail=$((fail + 1))
fi

[ $fail -gt 0 ] && exit 1
[ $skip -eq $total ] && exit 77
exit 0
