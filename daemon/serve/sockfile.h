/* SPDX-License-Identifier: MIT */
/*
 * sockfile.h - the socket file of kvpoold, its directory and lock, and
 * the daemon's own files beside it (the pid file).
 */
#ifndef KVP_SOCKFILE_H
#define KVP_SOCKFILE_H

#include <stddef.h>
#include <sys/types.h>

/*
 * sockfile_open() - take the lock PATH.lock (held for the daemon's life:
 * a second daemon on the same path is refused, a socket left by a dead
 * one is replaced), then bind and listen on path, mode 0660 with group
 * (""; the daemon's) so that only its group may connect; a missing
 * directory is made 0750 with that group. Returns 0 with both fds, or
 * -errno with the reason and what to do in err (errlen bytes).
 */
int sockfile_open(const char *path, const char *group, int *lock_fd, int *listen_fd,
		  char *err, size_t errlen);

/* sockfile_adopt() - take the lock PATH.lock as sockfile_open() does, for
 * a socket bound at path by someone else (systemd's socket activation:
 * its mode and group are the socket unit's). Returns 0 with the lock's
 * fd, or -errno with the reason in err. */
int sockfile_adopt(const char *path, int *lock_fd, char *err, size_t errlen);

/* sockfile_busy() - -EADDRINUSE (err says which pid) when a daemon holds
 * path's lock now, else 0; takes nothing. For an early, cheap refusal
 * before the backend is probed; sockfile_open() decides. */
int sockfile_busy(const char *path, char *err, size_t errlen);

/*
 * sockfile_own() - open or create (mode) a file of the daemon's own at
 * path, never through a link, and only if it is a plain file of the
 * daemon's user with one name; its mode is made mode. what names it in
 * messages ("pid file"). Returns the fd, or -errno with err saying what
 * to do.
 */
int sockfile_own(const char *path, const char *what, mode_t mode, char *err,
		 size_t errlen);

/*
 * sockfile_lock() - take an exclusive lock on the file lock (made with
 * sockfile_own(), what naming it), held until the fd is closed: the
 * kernel drops it when the daemon exits, however it exits. The daemon's
 * pid goes into the file. Returns the fd; -EWOULDBLOCK when another
 * process holds it, with its pid (as the file says, else "?") in pid
 * (pidlen bytes); or another -errno with the reason in err.
 */
int sockfile_lock(const char *lock, const char *what, char *pid, size_t pidlen, char *err,
		  size_t errlen);

#endif /* KVP_SOCKFILE_H */
