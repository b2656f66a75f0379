#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh - run the libFuzzer harnesses for FUZZ_SECONDS each (default 30)
# over the seed corpus in tests/fuzz/corpus, as `make check` does; `make
# fuzz` runs them for 10 minutes each. New inputs go to a temporary
# directory (the tree's corpus is not changed); a crash leaves its input
# as tests/fuzz/HARNESS-crash-* in the build tree, and fails.
#
# Exit status: 0 no crash, 1 a crash or a hang, 77 when the harnesses are
# not built (configure found no clang that links libFuzzer).
set -u
build=${KVPOOL_BUILDDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
src=${KVPOOL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
secs=${FUZZ_SECONDS:-30}

if [ "$secs" = 0 ]; then
	echo "SKIP: FUZZ_SECONDS=0"
	exit 77
fi
for f in fuzz_wire fuzz_session; do
	if [ ! -x "$build/tests/fuzz/$f" ]; then
		echo "SKIP: tests/fuzz/$f is not built: configure found no clang that" \
		     "links -fsanitize=fuzzer (Debian: clang libclang-rt-14-dev)"
		exit 77
	fi
done
work=$(mktemp -d /tmp/kvpool-fuzz.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
fail=0
for f in fuzz_wire fuzz_session; do
	mkdir -p "$work/$f"
	echo "== $f: $secs s from the seeds in tests/fuzz/corpus/$f"
	# libFuzzer's own failure code is 77, which automake reads as a skip
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	"$build/tests/fuzz/$f" -max_total_time="$secs" -timeout=20 \
		-error_exitcode=1 -timeout_exitcode=1 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$build/tests/fuzz/$f-" \
		"$work/$f" "$src/tests/fuzz/corpus/$f" >"$work/$f.log" 2>&1
	rc=$?
	grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|INFO: seed corpus)' \
		"$work/$f.log"
	if [ $rc -ne 0 ]; then
		echo "FAIL: $f (exit $rc); its output ends:"
		tail -n 60 "$work/$f.log"
		fail=1
	else
		echo "PASS: $f, $(ls "$work/$f" | wc -l) new inputs kept in a temporary corpus"
	fi
done
exit $fail
