#!/bin/sh
# SPDX-License-Identifier: MIT
# check-deb.sh - `make check-deb`: build the Debian packages of debian/
# from this tree's distribution (make distdir) with dpkg-buildpackage -b,
# unpack them into a temporary root (dpkg -x), and use what they hold:
# the installed kvpoold and kvpool serve and answer, a program built
# against libkvpool-dev's headers, pkg-config file and library talks to
# that kvpoold, the units, the sysusers entry and the config are where
# systemd and dpkg look for them. lintian must report no error.
# Exits 77 (skip) without dpkg-buildpackage and debhelper, saying so.
#
# usage: tests/check-deb.sh BUILDDIR
set -eu

build=$(cd "${1:-.}" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
for p in dpkg-buildpackage dh dpkg-architecture; do
	command -v "$p" >/dev/null 2>&1 || {
		echo "SKIP: $p is missing: apt-get install debhelper dpkg-dev (contrib/quickstart" \
		     "test does)"
		exit 77
	}
done
work=$(mktemp -d /tmp/kvpool-deb.XXXXXX)
[ -z "${KVPOOL_KEEP_DEB:-}" ] || echo "keeping $work"
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	[ -n "${KVPOOL_KEEP_DEB:-}" ] || rm -rf "$work"
}
trap cleanup EXIT INT TERM

version=$(sed -n 's/^PACKAGE_VERSION = //p' "$build/Makefile")
src=$work/kvpool-$version
echo "== make distdir, then dpkg-buildpackage -us -uc -b in $src"
make -s -C "$build" distdir distdir="$src" >/dev/null
(cd "$src" && DEB_BUILD_OPTIONS="parallel=$(nproc)" dpkg-buildpackage -us -uc -b) \
	>"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; fail "dpkg-buildpackage"; }
ls "$work"/*.deb >/dev/null 2>&1 || fail "no .deb made"
for pkg in kvpool libkvpool1 libkvpool-dev python3-kvpool; do
	ls "$work/${pkg}_${version}_"*.deb >/dev/null 2>&1 || fail "no package $pkg"
done

root=$work/root
for deb in "$work"/*.deb; do
	case $deb in *dbgsym*) continue ;; esac
	dpkg -x "$deb" "$root"
	echo "   $(basename "$deb"): $(dpkg-deb -c "$deb" | wc -l) entries"
done
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for f in usr/sbin/kvpoold usr/bin/kvpool etc/kvpool/kvpoold.conf \
	usr/share/man/man8/kvpoold.8.gz usr/share/man/man1/kvpool.1.gz \
	usr/share/man/man3/libkvpool.3.gz usr/include/kvpool.h "usr/lib/$ma/libkvpool.so.1" \
	"usr/lib/$ma/libkvpool.so" "usr/lib/$ma/pkgconfig/kvpool.pc" \
	usr/lib/sysusers.d/kvpool.conf usr/share/kvpool/systemd/network.conf; do
	[ -e "$root/$f" ] || fail "the packages hold no /$f"
done
# kvpoold.conf may hold secrets: 0640 in the package, group kvpool once
# the postinst ran
dpkg-deb -c "$work/kvpool_${version}_"*.deb | grep '^-rw-r----- .* \./etc/kvpool/kvpoold.conf$' >/dev/null ||
	fail "/etc/kvpool/kvpoold.conf is not 0640 in the package"
dpkg-deb -I "$work/kvpool_${version}_"*.deb postinst 2>/dev/null |
	grep 'chown root:kvpool /etc/kvpool/kvpoold.conf' >/dev/null ||
	fail "the postinst does not give kvpoold.conf to group kvpool"
units=$(find "$root" -name kvpoold.socket -o -name kvpoold.service | wc -l)
[ "$units" -eq 2 ] || fail "the units are not in the package (found $units)"
grep -q '^ExecStart=/usr/sbin/kvpoold ' "$(find "$root" -name kvpoold.service)" ||
	fail "kvpoold.service does not start /usr/sbin/kvpoold"
dpkg-deb -I "$work/kvpool_${version}_"*.deb conffiles 2>/dev/null |
	grep -q '^/etc/kvpool/kvpoold.conf$' || fail "/etc/kvpool/kvpoold.conf is not a conffile"

echo "== the unpacked kvpoold and kvpool"
export LD_LIBRARY_PATH="$root/usr/lib/$ma"
"$root/usr/sbin/kvpoold" --version | grep -q "kvpoold (kvpool) $version" ||
	fail "kvpoold --version"
"$root/usr/sbin/kvpoold" --version | grep -q 'built with libsystemd' ||
	fail "the packaged kvpoold has no libsystemd"
sock=$work/kvpool.sock
"$root/usr/sbin/kvpoold" --foreground --socket "$sock" --pool-size 16M --slab-size 1M \
	--config "$root/etc/kvpool/kvpoold.conf" 2>"$work/kvpoold.log" &
pid=$!
i=0
while ! "$root/usr/bin/kvpool" --socket "$sock" status >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 200 ] || { cat "$work/kvpoold.log"; fail "the packaged kvpoold did not serve"; }
	sleep 0.05
done
ldd "$root/usr/bin/kvpool" | grep -q "$root/usr/lib/$ma/libkvpool.so.1" ||
	fail "kvpool does not use the packaged libkvpool"

echo "== a program built against libkvpool-dev"
cat >"$work/client.c" <<'EOF'
#include <stdio.h>
#include <kvpool.h>

int main(int argc, char **argv)
{
	kvp_geometry g = { .layers = 2, .kv_heads = 2, .head_dim = 64,
			   .block_tokens = 16, .dtype = KVP_DTYPE_F16, .model = "deb" };
	kvp_client *c;
	kvp_page p[4];
	int rc;

	(void)argc;
	rc = kvp_connect(argv[1], "deb", &g, &c);
	if (rc < 0 || kvp_alloc(c, 4, p) < 0 || kvp_release(c, p, 4) < 0) {
		fprintf(stderr, "%s (%s)\n", kvp_strerror(rc), kvp_last_error());
		return 1;
	}
	kvp_close(c);
	puts(kvp_version());
	return 0;
}
EOF
pc=$(sed "s|^prefix=/usr|prefix=$root/usr|" "$root/usr/lib/$ma/pkgconfig/kvpool.pc")
mkdir -p "$work/pc"
echo "$pc" >"$work/pc/kvpool.pc"
flags=$(PKG_CONFIG_PATH=$work/pc pkg-config --cflags --libs kvpool) ||
	fail "pkg-config kvpool"
# shellcheck disable=SC2086
cc -o "$work/client" "$work/client.c" $flags || fail "building against libkvpool-dev"
out=$("$work/client" "$sock") || fail "the program against the packaged library"
[ "$out" = "$version" ] || fail "kvp_version() is '$out', not $version"
"$root/usr/bin/kvpool" --socket "$sock" status | grep -q 'pages' || fail "kvpool status"
echo "== the Python package"
py=$(PYTHONPATH=$root/usr/lib/python3/dist-packages /usr/bin/python3 -c '
import sys, kvpool
g = kvpool.Geometry(layers=2, kv_heads=2, head_dim=64, block_tokens=16,
                    dtype=kvpool.DType.F16, model="deb")
with kvpool.Client(sys.argv[1], "deb", g) as c:
    c.release(c.alloc(2))
print(kvpool.__file__, kvpool._kvpool.library_version())
' "$sock") || fail "import kvpool from python3-kvpool"
case $py in
"$root"/usr/lib/python3/dist-packages/kvpool/__init__.py\ "$version") ;;
*) fail "python3-kvpool: $py" ;;
esac
# every module of the source tree's package is in it (kvpool.vllm imports
# them all when vLLM loads the connector)
pyfiles() { (cd "$1" && find kvpool -name '*.py' -o -name '*.pyi' -o -name py.typed | sort); }
pyfiles "$(dirname "$0")/../python" >"$work/py-src.txt"
pyfiles "$root/usr/lib/python3/dist-packages" >"$work/py-deb.txt"
missing=$(comm -23 "$work/py-src.txt" "$work/py-deb.txt" | tr '\n' ' ')
[ -z "$missing" ] || fail "python3-kvpool lacks $missing(debian/rules; make dist: tests/local.mk)"
kill "$pid"
wait "$pid" || fail "kvpoold exited with $?"
pid=

if command -v lintian >/dev/null 2>&1; then
	echo "== lintian"
	lintian --tag-display-limit 0 "$work"/*.changes >"$work/lintian.txt" 2>&1 || true
	sed 's/^/   /' "$work/lintian.txt"
	if grep -q '^E: ' "$work/lintian.txt"; then
		fail "lintian reports errors"
	fi
else
	echo "   (no lintian: apt-get install lintian to check the packages)"
fi
echo "PASS: the Debian packages build, unpack and serve"
