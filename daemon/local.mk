# daemon/: kvpoold, the daemon that owns the page pool. Its modules form a
# convenience library so that unit tests link the same code.

noinst_LTLIBRARIES += daemon/libkvpoold.la
daemon_libkvpoold_la_SOURCES = \
	daemon/log.c daemon/log.h \
	daemon/options.c daemon/options.h daemon/access.c daemon/access.h \
	daemon/loop.c daemon/loop.h \
	daemon/server.c daemon/server.h daemon/conn.h \
	daemon/requests.c daemon/requests.h daemon/share.c daemon/admin.c \
	daemon/lease.c daemon/lease.h \
	daemon/ns.c daemon/ns.h \
	daemon/prefix.c daemon/prefix.h \
	daemon/pool.c daemon/pool.h \
	daemon/backend.h daemon/backend_host.c \
	daemon/spill.c daemon/spill.h \
	daemon/hosttier.c daemon/hosttier.h
daemon_libkvpoold_la_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS) $(XXHASH_CFLAGS)
daemon_libkvpoold_la_LIBADD = client/libkvpshared.la $(URING_LIBS) $(XXHASH_LIBS)
daemon_libkvpoold_la_CPPFLAGS = $(AM_CPPFLAGS)
if HAVE_CUDA
daemon_libkvpoold_la_SOURCES += daemon/backend_cuda.c
daemon_libkvpoold_la_CPPFLAGS += $(CUDA_CPPFLAGS)
daemon_libkvpoold_la_LIBADD += $(CUDA_LIBS)
else
daemon_libkvpoold_la_SOURCES += daemon/backend_cuda_stub.c
endif

sbin_PROGRAMS += daemon/kvpoold
daemon_kvpoold_SOURCES = daemon/kvpoold.c
daemon_kvpoold_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS)
daemon_kvpoold_LDADD = daemon/libkvpoold.la
