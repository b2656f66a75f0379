# daemon/: kvpoold, the daemon that owns the page pool. Its modules form a
# convenience library so that unit tests link the same code.

# The modules' sources (the fuzz harness of tests/local.mk builds them
# too, with clang); the backend of the build comes on top.
KVPOOLD_SRCS = daemon/log.c daemon/options.c daemon/access.c daemon/loop.c \
	daemon/loop_sync.c daemon/loop_work.c \
	daemon/server.c daemon/sockfile.c daemon/requests.c daemon/share.c daemon/admin.c \
	daemon/lease.c daemon/ns.c daemon/prefix.c daemon/siphash.c daemon/pool.c \
	daemon/backend_host.c daemon/spill.c daemon/hosttier.c daemon/save.c \
	daemon/tier.c daemon/tier_host.c daemon/tier_nvme.c \
	daemon/meminfo.c daemon/events.c daemon/events_pub.c
noinst_HEADERS += daemon/log.h daemon/options.h daemon/access.h daemon/loop.h \
	daemon/loop_sync.h \
	daemon/server.h daemon/sockfile.h daemon/conn.h daemon/requests.h daemon/lease.h daemon/ns.h \
	daemon/prefix.h daemon/siphash.h daemon/pool.h daemon/backend.h daemon/spill.h \
	daemon/hosttier.h daemon/meminfo.h daemon/events.h daemon/events_int.h daemon/tier.h

noinst_LTLIBRARIES += daemon/libkvpoold.la
daemon_libkvpoold_la_SOURCES = $(KVPOOLD_SRCS)
daemon_libkvpoold_la_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS) $(XXHASH_CFLAGS) $(EVENTS_CFLAGS)
daemon_libkvpoold_la_LIBADD = client/libkvpshared.la $(URING_LIBS) $(XXHASH_LIBS) \
	$(EVENTS_LIBS) -lpthread
daemon_libkvpoold_la_CPPFLAGS = $(AM_CPPFLAGS)
if HAVE_CUDA
daemon_libkvpoold_la_SOURCES += daemon/backend_cuda.c
daemon_libkvpoold_la_CPPFLAGS += $(CUDA_CPPFLAGS)
daemon_libkvpoold_la_LIBADD += $(CUDA_LIBS)
else
daemon_libkvpoold_la_SOURCES += daemon/backend_cuda_stub.c
endif
# The remote tier's client (hiredis) and its sealed values (rvalue.c,
# libsodium); without them, remote_stub.c refuses --remote. rtier.c (what
# goes there and comes back) and rpage.c (its names) are in every build.
noinst_HEADERS += daemon/rcluster.h daemon/rpage.h daemon/rloop.h daemon/remote.h \
	daemon/rtier.h daemon/rvalue.h
daemon_libkvpoold_la_SOURCES += daemon/rpage.c daemon/rtier.c
if HAVE_REMOTE
daemon_libkvpoold_la_SOURCES += daemon/rcluster.c daemon/rloop.c daemon/remote.c \
	daemon/rvalue.c
daemon_libkvpoold_la_CFLAGS += $(HIREDIS_CFLAGS) $(LIBCRYPTO_CFLAGS)
daemon_libkvpoold_la_LIBADD += $(HIREDIS_LIBS) $(LIBCRYPTO_LIBS)
else
daemon_libkvpoold_la_SOURCES += daemon/remote_stub.c
endif

# systemd.c (libsystemd) and metrics.c (libmicrohttpd) are the program's
# alone: the library, the unit tests and the fuzzers need neither.
sbin_PROGRAMS += daemon/kvpoold
daemon_kvpoold_SOURCES = daemon/kvpoold.c daemon/systemd.c daemon/systemd.h \
	daemon/metrics.c daemon/metrics.h
daemon_kvpoold_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS) $(SYSTEMD_CFLAGS) $(MHD_CFLAGS)
daemon_kvpoold_LDADD = daemon/libkvpoold.la $(SYSTEMD_LIBS) $(MHD_LIBS) -lpthread
