# daemon/: kvpoold, the daemon that owns the page pool. Its modules form a
# convenience library so that unit tests link the same code.

# The modules' sources (the fuzz harness of tests/local.mk builds them
# too, with clang); the backend of the build comes on top.
# By wing (docs/architecture.md): the top, loop/, store/, tiers/,
# serve/, requests/, observe/.
KVPOOLD_SRCS = daemon/log.c daemon/options.c daemon/meminfo.c daemon/compose.c \
	daemon/loop/loop.c daemon/loop/loop_sync.c daemon/loop/loop_work.c \
	daemon/store/pool.c daemon/store/lease.c daemon/store/prefix.c \
	daemon/store/siphash.c daemon/store/backend_host.c \
	daemon/tiers/tier.c daemon/tiers/tier_host.c daemon/tiers/tier_nvme.c \
	daemon/tiers/hosttier.c daemon/tiers/spill.c daemon/tiers/save.c \
	daemon/serve/server.c daemon/serve/conn.c daemon/serve/sockfile.c \
	daemon/requests/requests.c daemon/requests/share.c daemon/requests/admin.c \
	daemon/requests/wait.c daemon/requests/ns.c daemon/requests/access.c \
	daemon/requests/handoff.c \
	daemon/observe/events.c daemon/observe/events_pub.c daemon/observe/topic.c \
	daemon/observe/hist.c
noinst_HEADERS += daemon/log.h daemon/options.h daemon/meminfo.h daemon/compose.h \
	daemon/loop/loop.h daemon/loop/loop_sync.h \
	daemon/store/pool.h daemon/store/namespace.h daemon/store/lease.h daemon/store/prefix.h \
	daemon/store/siphash.h daemon/store/backend.h \
	daemon/tiers/tier.h daemon/tiers/hosttier.h daemon/tiers/spill.h daemon/tiers/save.h \
	daemon/serve/server.h daemon/serve/sockfile.h daemon/serve/conn.h \
	daemon/requests/requests.h daemon/requests/wait.h daemon/requests/ns.h \
	daemon/requests/access.h \
	daemon/observe/events.h daemon/observe/events_int.h daemon/observe/topic.h \
	daemon/observe/hist.h

noinst_LTLIBRARIES += daemon/libkvpoold.la
daemon_libkvpoold_la_SOURCES = $(KVPOOLD_SRCS)
daemon_libkvpoold_la_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS) $(XXHASH_CFLAGS) $(EVENTS_CFLAGS)
daemon_libkvpoold_la_LIBADD = client/libkvpshared.la $(URING_LIBS) $(XXHASH_LIBS) \
	$(EVENTS_LIBS) -lpthread
daemon_libkvpoold_la_CPPFLAGS = $(AM_CPPFLAGS)
if HAVE_CUDA
daemon_libkvpoold_la_SOURCES += daemon/store/backend_cuda.c
daemon_libkvpoold_la_CPPFLAGS += $(CUDA_CPPFLAGS)
daemon_libkvpoold_la_LIBADD += $(CUDA_LIBS)
else
daemon_libkvpoold_la_SOURCES += daemon/store/backend_cuda_stub.c
endif
# The remote tier's client (hiredis) and its sealed values (rvalue.c,
# libsodium); without them, remote_stub.c refuses --remote. tier_remote.c (what
# goes there and comes back) and rpage.c (its names) are in every build.
noinst_HEADERS += daemon/remote/rcluster.h daemon/remote/rpage.h daemon/remote/rloop.h \
	daemon/remote/remote.h daemon/remote/remote_int.h daemon/remote/rvalue.h daemon/tiers/tier_remote.h
daemon_libkvpoold_la_SOURCES += daemon/remote/rpage.c daemon/tiers/tier_remote.c
if HAVE_REMOTE
daemon_libkvpoold_la_SOURCES += daemon/remote/rcluster.c daemon/remote/rloop.c \
	daemon/remote/remote.c daemon/remote/rnode.c daemon/remote/rmap.c daemon/remote/rvalue.c
daemon_libkvpoold_la_CFLAGS += $(HIREDIS_CFLAGS) $(LIBCRYPTO_CFLAGS)
daemon_libkvpoold_la_LIBADD += $(HIREDIS_LIBS) $(LIBCRYPTO_LIBS)
else
daemon_libkvpoold_la_SOURCES += daemon/remote/remote_stub.c
endif

# systemd.c (libsystemd) and metrics.c (libmicrohttpd) are the program's
# alone: the library, the unit tests and the fuzzers need neither.
sbin_PROGRAMS += daemon/kvpoold
daemon_kvpoold_SOURCES = daemon/kvpoold.c daemon/serve/systemd.c daemon/serve/systemd.h \
	daemon/observe/metrics.c daemon/observe/metrics.h
daemon_kvpoold_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS) $(SYSTEMD_CFLAGS) $(MHD_CFLAGS)
daemon_kvpoold_LDADD = daemon/libkvpoold.la $(SYSTEMD_LIBS) $(MHD_LIBS) -lpthread
