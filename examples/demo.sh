#!/bin/sh
# SPDX-License-Identifier: MIT
# demo.sh - the README demo: four model-server processes share one kvpoold.
#
# usage: examples/demo.sh [BUILDDIR]   (contrib/quickstart demo runs it)
#
# Starts kvpoold on a temporary socket, runs 4 model servers at once on
# conversations that share a long system prompt, then their second turns
# (turn 1 + its answer + a follow-up), prints each process's summary and
# kvpool status, checks every answer against a run with --no-cache (which
# computes everything privately), and stops the daemon.
set -eu

build=${1:-$(cd "$(dirname "$0")/.." && pwd)}
kvpoold=$build/daemon/kvpoold
kvpool=$build/client/kvpool
server=$build/examples/kvpool-model-server
for p in "$kvpoold" "$kvpool" "$server"; do
	[ -x "$p" ] || { echo "demo: $p is not built (run make)" >&2; exit 1; }
done

say() { printf '\n== %s\n' "$*"; }

dir=$(mktemp -d /tmp/kvpool-demo.XXXXXX)
sock=$dir/kvpool.sock
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

say "starting kvpoold (host backend unless a GPU answers) on $sock"
"$kvpoold" --foreground --socket "$sock" --pool-size 256M --slab-size 16M --log-level warn &
pid=$!
tries=0
until "$kvpool" --socket "$sock" status >/dev/null 2>&1; do
	kill -0 "$pid" 2>/dev/null || { echo "demo: kvpoold exited during start-up" >&2; exit 1; }
	tries=$((tries + 1))
	[ $tries -lt 100 ] || { echo "demo: kvpoold did not answer within 10 s" >&2; exit 1; }
	sleep 0.1
done

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
		"$server" --socket "$sock" --requests "$dir/turn$1.$p.txt" --max-tokens 24 \
			--batch 2 >"$dir/out$1.$p" 2>&1 &
		eval "spid$p=$!"
	done
	for p in 1 2 3 4; do
		eval "wait \$spid$p" || { cat "$dir/out$1.$p"; echo "demo: model server $p failed" >&2; exit 1; }
		printf -- '-- process %s\n' "$p"
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
same=0 total=0
for t in 1 2; do
	for p in 1 2 3 4; do
		"$server" --socket "$sock" --requests "$dir/turn$t.$p.txt" --max-tokens 24 \
			--batch 1 --no-cache >"$dir/ref$t.$p" 2>&1
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

say "stopping kvpoold (SIGTERM)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] || { echo "demo: kvpoold exited with status $rc" >&2; exit 1; }
say "done: the daemon stopped cleanly"
