#!/bin/sh
# check-layers.sh - daemon/'s include graph against the floors of
# docs/architecture.md (tests/layers.py): no module includes one above
# it, every module has a floor, and the only circles are the named ones.
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: no python3 to read daemon/'s include graph with" >&2
	exit 77
fi
exec python3 "${srcdir:-.}/tests/layers.py" "${srcdir:-.}"
