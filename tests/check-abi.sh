#!/bin/sh
# SPDX-License-Identifier: MIT
# check-abi.sh - libkvpool's ABI as built against abi/libkvpool.abi, the ABI
# of its soname as released (abidiff, Debian's abigail-tools): an
# incompatible change fails, naming what changed and what to do; an
# addition passes and is shown (the release then takes AGE+1 in
# client/local.mk's -version-info). Exit 77 (skip) without abidiff, or in a
# sanitizer build (the plain build's check is the one that counts).
src=${KVPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${KVPOOL_BUILDDIR:-$src}
base=$src/abi/libkvpool.abi
if ! command -v abidiff >/dev/null 2>&1; then
	echo "SKIP: no abidiff (Debian's abigail-tools; contrib/quickstart test installs it)"
	exit 77
fi
if grep -q -- '--enable-sanitizers' "$build/config.log" 2>/dev/null; then
	echo "SKIP: a sanitizer build: the ABI is checked on the plain build"
	exit 77
fi
lib=
for f in "$build"/client/.libs/libkvpool.so.*.*.*; do
	[ -f "$f" ] && lib=$f
done
if [ -z "$lib" ]; then
	echo "FAIL: no libkvpool.so.X.Y.Z in $build/client/.libs: build it first (make)"
	exit 1
fi
have=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
want=$(sed -n "1s/.*soname='\\([^']*\\)'.*/\\1/p" "$base")
if [ "$have" != "$want" ]; then
	echo "FAIL: libkvpool's soname is $have, the ABI baseline's ($base) $want: after a"
	echo "      deliberate soname bump, write this soname's baseline: make abi-baseline"
	exit 1
fi
out=$(abidiff --headers-dir2 "$src/include" "$base" "$lib" 2>&1)
rc=$?
echo "$out"
if [ $((rc & 8)) -ne 0 ]; then
	echo "FAIL: an incompatible change to libkvpool's ABI ($have; above): undo it, or make it"
	echo "      a new soname: -version-info CURRENT+1:0:0 in client/local.mk, Debian's"
	echo "      libkvpoolN renamed, then make abi-baseline"
	exit 1
fi
if [ $((rc & 3)) -ne 0 ]; then
	echo "FAIL: abidiff could not compare $base with $lib (exit $rc)"
	exit 1
fi
# abidiff sets bit 4 for any change; a changed type under a function
# (a struct's layout) breaks callers as surely as a removal: only
# additions pass
changed=$(echo "$out" | sed -n 's/^\(Functions\|Variables\) changes summary: \([0-9]*\) Removed, \([0-9]*\) Changed.*/\2 \3/p' |
	awk '{ n += $1 + $2 } END { print n + 0 }')
if [ $((rc & 4)) -ne 0 ] && [ "$changed" -ne 0 ]; then
	echo "FAIL: libkvpool's ABI changed ($have; above: $changed functions or variables"
	echo "      removed or changed): undo it, or make it a new soname: -version-info"
	echo "      CURRENT+1:0:0 in client/local.mk, Debian's libkvpoolN renamed, then"
	echo "      make abi-baseline"
	exit 1
fi
if [ $((rc & 4)) -ne 0 ]; then
	echo "PASS: compatible additions only ($have): at the release, AGE+1 in client/local.mk"
	exit 0
fi
echo "PASS: libkvpool's ABI is $base's ($have)"
