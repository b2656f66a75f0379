/* SPDX-License-Identifier: MIT */
/*
 * systemd.c - socket activation and the notify protocol through
 * libsystemd's sd-daemon (see systemd.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/log.h"
#include "daemon/serve/systemd.h"

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

static int nfds;	/* sockets systemd passed, from SD_LISTEN_FDS_START */

bool systemd_built(void)
{
	return true;
}

int systemd_take_fds(void)
{
	int n = sd_listen_fds(1);

	if (n < 0) {
		log_warn("the sockets systemd passed (LISTEN_FDS) are unusable: %s; "
			 "binding the socket as usual", strerror(-n));
		n = 0;
	}
	nfds = n;
	return n;
}

int systemd_listen_fd(const char *path, char *err, size_t errlen)
{
	int i, fd;

	if (nfds == 0)
		return -ENOENT;
	for (i = 0; i < nfds; i++) {
		fd = SD_LISTEN_FDS_START + i;
		if (sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, path, 0) > 0)
			return fd;
	}
	snprintf(err, errlen, "systemd passed %d socket%s (LISTEN_FDS), none a listening "
		 "SOCK_SEQPACKET socket at %s: the socket unit needs "
		 "ListenSequentialPacket=%s, the path kvpoold's --socket names", nfds,
		 nfds == 1 ? "" : "s", path, path);
	return -EINVAL;
}

void systemd_notify(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (!getenv("NOTIFY_SOCKET"))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (sd_notify(0, msg) < 0)
		log_debug("sd_notify(%s) failed", msg);
}

uint64_t systemd_watchdog_ms(void)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0)
		return 0;
	return usec / 1000 ? usec / 1000 : 1;
}

#else /* !HAVE_LIBSYSTEMD */

bool systemd_built(void)
{
	return false;
}

int systemd_take_fds(void)
{
	if (getenv("LISTEN_FDS"))
		log_warn("systemd passed sockets (LISTEN_FDS), but this kvpoold was built "
			 "without libsystemd (configure --with-systemd and libsystemd-dev): "
			 "binding the socket itself");
	if (getenv("NOTIFY_SOCKET"))
		log_warn("systemd waits for readiness (NOTIFY_SOCKET), but this kvpoold was "
			 "built without libsystemd: use Type=simple, or rebuild it with "
			 "libsystemd-dev");
	return 0;
}

int systemd_listen_fd(const char *path, char *err, size_t errlen)
{
	(void)path;
	(void)err;
	(void)errlen;
	return -ENOENT;
}

void systemd_notify(const char *fmt, ...)
{
	(void)fmt;
}

uint64_t systemd_watchdog_ms(void)
{
	return 0;
}

#endif
