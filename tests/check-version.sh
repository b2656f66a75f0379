#!/bin/sh
# SPDX-License-Identifier: MIT
# check-version.sh - every place that names the release says VERSION's:
# the build (configure's PACKAGE_VERSION, kvpoold --version), the man
# pages' headers, the top of debian/changelog and of CHANGELOG.md.
src=${KVPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${KVPOOL_BUILDDIR:-$src}
v=$(cat "$src/VERSION")
rc=0
bad() { echo "FAIL: $1 says $2, VERSION $v: $3"; rc=1; }
got=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"/\1/p' "$build/config.h")
[ "$got" = "$v" ] || bad config.h "$got" "run autoreconf -fi and ./configure again"
got=$("${KVPOOLD:-$build/daemon/kvpoold}" --version | sed -n '1s/^kvpoold (kvpool) //p')
[ "$got" = "$v" ] || bad "kvpoold --version" "$got" "rebuild it (make)"
for m in kvpoold.8 kvpool.1 libkvpool.3; do
	got=$(sed -n 's/^\.TH .*"kvpool \([^"]*\)".*/\1/p' "$src/docs/$m")
	[ "$got" = "$v" ] || bad "docs/$m" "$got" "its .TH line names the release"
done
got=$(sed -n '1s/^kvpool (\([^)-]*\).*/\1/p' "$src/debian/changelog")
[ "$got" = "$v" ] || bad debian/changelog "$got" "add the release's entry on top (dch -v $v)"
got=$(sed -n 's/^## \([0-9][^ ]*\) .*/\1/p' "$src/CHANGELOG.md" | head -n 1)
[ "$got" = "$v" ] || bad CHANGELOG.md "$got" "its first '## VERSION (date)' is the release's"
[ $rc -ne 0 ] || echo "PASS: every part says $v"
exit $rc
