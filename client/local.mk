# client/: libkvpool (the library model servers link), the wire codec shared
# with the daemon, and the admin CLI `kvpool`.

# Code of both the daemon and the library, written once: the wire codec,
# the counting set of page handles and the prefix keys (the daemon makes
# each namespace's root key; kvp_key_* are exported by libkvpool).
noinst_LTLIBRARIES += client/libkvpshared.la
client_libkvpshared_la_SOURCES = client/wire.c client/wire.h \
	client/hset.c client/hset.h client/keys.c client/keys.h client/keys_int.h \
	client/keys_sha256.c client/keys_enc.c client/keys_direct.c client/keys_request.c \
	client/size.c client/size.h client/stats_text.c client/stats_text.h \
	client/utf8.c client/utf8.h
client_libkvpshared_la_CFLAGS = $(AM_CFLAGS) $(XXHASH_CFLAGS)
client_libkvpshared_la_LIBADD = $(XXHASH_LIBS)

include_HEADERS += include/kvpool.h include/kvpool_wire.h include/kvpool_kernels.h

lib_LTLIBRARIES += client/libkvpool.la
client_libkvpool_la_SOURCES = client/client.c client/client_int.h client/pages.c \
	client/share.c client/admin.c client/errors.c client/errors.h \
	client/cuda_ipc.h
client_libkvpool_la_CPPFLAGS = $(AM_CPPFLAGS)
if HAVE_CUDA
client_libkvpool_la_SOURCES += client/cuda_ipc.c
client_libkvpool_la_CPPFLAGS += $(CUDA_CPPFLAGS)
else
client_libkvpool_la_SOURCES += client/cuda_ipc_stub.c
endif
client_libkvpool_la_LIBADD = client/libkvpshared.la -lpthread
# -version-info CURRENT:REVISION:AGE. On a release: if the interface is
# unchanged, REVISION++; if it changed, CURRENT++ and REVISION=0; if
# interfaces were only added, AGE++; if any were removed or changed, AGE=0.
# 0.1.0 was 0:0:0 (libkvpool.so.0); 0.2.0 changed interfaces in place
# (kvp_geometry grew, kvp_list_* gained their total argument): 1:0:0,
# libkvpool.so.1, Debian's libkvpool1. tests/check-abi.sh holds the built
# library against abi/libkvpool.abi, this soname's ABI (make abi-baseline
# writes it anew when the soname changes).
client_libkvpool_la_LDFLAGS = $(AM_LDFLAGS) -version-info 1:0:0 \
	-Wl,--version-script=$(top_srcdir)/client/libkvpool.sym
EXTRA_client_libkvpool_la_DEPENDENCIES = client/libkvpool.sym
EXTRA_DIST += client/libkvpool.sym client/kvpool.pc.in
pkgconfig_DATA += client/kvpool.pc
DISTCLEANFILES += client/kvpool.pc

bin_PROGRAMS += client/kvpool
client_kvpool_SOURCES = client/kvpool.c client/cli.h client/cli_util.c \
	client/cli_status.c client/cli_list.c client/cli_admin.c \
	client/cli_plan.c client/cli_metrics.c client/cli_top.c
client_kvpool_LDADD = client/libkvpshared.la client/libkvpool.la
