#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh - the Python package's tests (pytest, tests/python/), as `make
# check` runs them: builds kvpool._kvpool in python/ against the build
# tree's libkvpool (warnings are errors), then runs pytest against the
# build tree's kvpoold: every test file but those of real vLLM engines
# (test_engines.py, test_pd.py, test_machines.py), or the files given as
# arguments (tests/python/engines.sh gives those, so that make runs them
# beside the rest).
#
# The interpreter is $KVPOOL_PYTHON, else .venv/bin/python in the source
# tree (contrib/quickstart test makes it, with pytest, numpy and
# setuptools from PyPI). Exit status: pytest's, or 77 (skip) when there is
# no interpreter with pytest, numpy and setuptools, saying so. In the
# suite's KVPOOL_IO=sync pass, only the files that test the daemon through
# the package (SYNC_FILES): the engines' connectors ran in the first pass,
# and the loop under them is the daemon's.
set -u
src=${KVPOOL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${KVPOOL_BUILDDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
py=${KVPOOL_PYTHON:-$src/.venv/bin/python}
case $py in
/*) ;;
*/*) py=$(cd "$(dirname "$py")" 2>/dev/null && pwd)/$(basename "$py") ;;
*) py=$(command -v "$py" || echo "$py") ;;
esac

if grep -q -- '--enable-sanitizers' "$build/config.log" 2>/dev/null; then
	echo "SKIP: a sanitizer build: a libkvpool built with ASan cannot load into a plain" \
	     "python3; the Python tests run against the unsanitized build"
	exit 77
fi
if [ ! -x "$py" ]; then
	echo "SKIP: no Python for the package's tests: $py does not exist (contrib/quickstart" \
	     "test makes it; or set KVPOOL_PYTHON to an interpreter with pytest and numpy)"
	exit 77
fi
if ! "$py" -c 'import pytest, numpy, setuptools' 2>/dev/null; then
	echo "SKIP: $py lacks pytest, numpy or setuptools ($py -m pip install pytest numpy" \
	     "setuptools)"
	exit 77
fi
work=$(mktemp -d /tmp/kvpool-pybuild.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
# build out of the source tree's python/ when it is not writable (distcheck);
# one build at a time: engines.sh runs this beside the other run
mkdir -p "$build/tests/python"
(flock 9 && cd "$src/python" && KVPOOL_WERROR=1 "$py" setup.py -q build_ext \
	--build-temp "$work" --inplace) 9>"$build/tests/python/.build.lock" >"$work/build.log" 2>&1 || {
	cat "$work/build.log"
	echo "FAIL: building kvpool._kvpool"
	exit 1
}
cd "$src/tests/python" || exit 1
SYNC_FILES="test_client.py test_wait.py test_events.py test_metrics.py test_xlang.py"
if [ $# -eq 0 ] && [ "${KVPOOL_IO:-}" = sync ]; then
	# shellcheck disable=SC2086
	set -- $SYNC_FILES
fi
[ $# -gt 0 ] || set -- --ignore=test_engines.py --ignore=test_pd.py --ignore=test_machines.py \
	--ignore=test_wheel.py --ignore=test_image.py --ignore=test_upgrade.py .
KVPOOL_BUILDDIR=$build PYTHONDONTWRITEBYTECODE=1 exec "$py" -m pytest -q -p no:cacheprovider --durations=15 \
	-o console_output_style=classic "$@"
