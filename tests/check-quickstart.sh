#!/bin/sh
# SPDX-License-Identifier: MIT
# check-quickstart.sh - what `contrib/quickstart demo` and `... test` ask
# apt-get for on a machine that has none of their packages: the demo asks
# only for what the demo builds and runs with (no Check, no lintian, no
# debhelper, no valgrind), the tests for those too, and every apt-get waits
# for the dpkg lock instead of failing when another apt holds it.
#
# dpkg-query and apt-get are stand-ins on PATH here (dpkg-query reports
# nothing installed; apt-get writes down its arguments and fails, which
# stops quickstart before it builds): the test looks at what quickstart
# asks for, not at Debian's archive. Runs as any user: a stand-in sudo
# runs its command.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d /tmp/kvpool-qs.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

mkdir "$work/bin"
cat >"$work/bin/dpkg-query" <<'SH'
#!/bin/sh
exit 1
SH
cat >"$work/bin/apt-get" <<'SH'
#!/bin/sh
echo "$*" >>"$APT_LOG"
case " $* " in *" install "*) exit 100 ;; esac
exit 0
SH
cat >"$work/bin/sudo" <<'SH'
#!/bin/sh
exec "$@"
SH
chmod +x "$work/bin/dpkg-query" "$work/bin/apt-get" "$work/bin/sudo"

for mode in demo test; do
	log=$work/$mode.log
	: >"$log"
	if APT_LOG=$log PATH="$work/bin:$PATH" sh "$src/contrib/quickstart" "$mode" \
		>"$work/$mode.out" 2>&1; then
		fail "quickstart $mode went on after apt-get install failed"
	fi
	grep -Eq '(^| )install ' "$log" || { cat "$work/$mode.out"; fail "quickstart $mode never ran apt-get install"; }
	while read -r line; do
		case " $line " in
		*" -o DPkg::Lock::Timeout="[1-9]*) ;;
		*) fail "quickstart $mode: 'apt-get $line' does not wait for the dpkg lock" ;;
		esac
	done <"$log"
	eval "pkgs_$mode=\$(grep -E '(^| )install ' \"\$log\")"
done

# shellcheck disable=SC2154
for p in check lintian debhelper valgrind prometheus redis-server clang abigail-tools; do
	case " $pkgs_demo " in *" $p "*) fail "quickstart demo installs $p, which only the tests need" ;; esac
	case " $pkgs_test " in *" $p "*) ;; *) fail "quickstart test does not install $p" ;; esac
done
for p in gcc make autoconf liburing-dev libzmq3-dev libhiredis-dev python3-venv; do
	case " $pkgs_demo " in *" $p "*) ;; *) fail "quickstart demo does not install $p" ;; esac
done
echo "ok: the demo asks apt-get for $(echo "$pkgs_demo" | wc -w) words, the tests for $(echo "$pkgs_test" | wc -w); each apt-get waits for the lock"
