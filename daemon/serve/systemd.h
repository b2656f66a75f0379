/* SPDX-License-Identifier: MIT */
/*
 * systemd.h - kvpoold as a systemd service, through libsystemd
 * (sd-daemon): the listening socket systemd hands over (socket
 * activation, kvpoold.socket) and the notify protocol of Type=notify
 * units (READY=1, STATUS=, WATCHDOG=1, STOPPING=1). Built without
 * libsystemd (configure --without-systemd, or no libsystemd-dev), every
 * call is a no-op and systemd_take_fds() says so when systemd passed
 * sockets anyway.
 */
#ifndef KVP_SYSTEMD_H
#define KVP_SYSTEMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* systemd_built() - whether kvpoold was built with libsystemd. */
bool systemd_built(void);

/*
 * systemd_take_fds() - take the sockets systemd passed to this process
 * (LISTEN_FDS, LISTEN_PID; the variables are then unset, so that no
 * child inherits them). Call it once, first thing, before any fork.
 * Returns how many there are (0: none, bind the socket as usual).
 */
int systemd_take_fds(void);

/*
 * systemd_listen_fd() - the socket systemd passed for path: a listening
 * AF_UNIX SOCK_SEQPACKET socket bound there. Returns the fd, -ENOENT when
 * systemd passed none, or -EINVAL with err saying what was passed and
 * what the socket unit must say instead.
 */
int systemd_listen_fd(const char *path, char *err, size_t errlen);

/* systemd_notify() - send one notify message ("READY=1", "STATUS=...")
 * when systemd asked for them (NOTIFY_SOCKET); else nothing. */
void systemd_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* systemd_watchdog_ms() - the watchdog interval systemd expects WATCHDOG=1
 * within (WatchdogSec=, for this process), in milliseconds; 0 when none. */
uint64_t systemd_watchdog_ms(void);

#endif /* KVP_SYSTEMD_H */
