/* SPDX-License-Identifier: MIT */
/*
 * sockfile.c - the files kvpoold keeps beside its socket: the socket
 * itself (mode 0660, its group), its directory (made 0750 when missing),
 * the lock that tells a live daemon from a stale socket, and the pid file.
 * They may sit in a directory others can write, so none is followed
 * through a link or taken over from another owner.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/serve/sockfile.h"

/*
 * sockfile_own() - open (or create, mode) a file of the daemon's own
 * at path without following a link, and check that it is one: a plain
 * file of the daemon's user with one name; its mode is set to mode. For
 * the lock and pid files, which may sit in a directory others can write.
 * Returns the fd or -errno with the reason in err.
 */
int sockfile_own(const char *path, const char *what, mode_t mode, char *err,
		 size_t errlen)
{
	struct stat st = { 0 };
	int fd, rc;

	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
	if (fd < 0) {
		rc = -errno;
		if (rc == -ELOOP)
			snprintf(err, errlen, "the %s %s is a symbolic link: kvpoold never "
				 "follows one there; remove it, and keep the file in a "
				 "directory only kvpoold's user can write", what, path);
		else
			snprintf(err, errlen, "cannot open the %s %s: %s%s", what, path,
				 strerror(-rc), rc == -ENOENT ? " (create its directory, e.g. "
				 "with systemd's RuntimeDirectory=kvpool, or choose another "
				 "path)" : "");
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    st.st_nlink != 1) {
		snprintf(err, errlen, "the %s %s is not a file of kvpoold's (uid %u, mode "
			 "%04o, %u links; it makes plain files of uid %u): it is left alone; "
			 "remove it, and keep the file in a directory only kvpoold's user "
			 "can write", what, path, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777), (unsigned)st.st_nlink,
			 (unsigned)geteuid());
		close(fd);
		return -EPERM;
	}
	if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot make the %s %s mode %04o: %s", what, path,
			 (unsigned)mode, strerror(-rc));
		close(fd);
		return rc;
	}
	return fd;
}

int sockfile_lock(const char *lock, const char *what, char *pid, size_t pidlen, char *err,
		  size_t errlen)
{
	char mine[32];
	ssize_t n;
	int fd, rc;

	fd = sockfile_own(lock, what, 0600, err, errlen);
	if (fd < 0)
		return fd;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		n = pread(fd, pid, pidlen - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		if (!pid[0])
			snprintf(pid, pidlen, "?");
		if (rc != -EWOULDBLOCK)
			snprintf(err, errlen, "cannot lock %s: %s", lock, strerror(-rc));
		close(fd);
		return rc;
	}
	n = snprintf(mine, sizeof(mine), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, mine, (size_t)n, 0) != n)
		log_warn("cannot write the pid into %s: %s", lock, strerror(errno));
	return fd;
}

/*
 * lock_socket() - take PATH.lock, which a running daemon holds for its
 * whole life. A lock, unlike a probe of the socket, tells a live daemon
 * from a dead one at once: the kernel drops it when its owner exits. The
 * file is mode 0600: a client that could open it could take a shared
 * lock and make every later start believe a daemon is running.
 * Returns the lock's fd or -errno with the reason in err.
 */
static int lock_socket(const char *path, char *err, size_t errlen)
{
	char lock[sizeof(((struct sockaddr_un *)0)->sun_path) + 8], pid[32];
	int fd;

	snprintf(lock, sizeof(lock), "%s.lock", path);
	fd = sockfile_lock(lock, "lock file", pid, sizeof(pid), err, errlen);
	if (fd != -EWOULDBLOCK)
		return fd;
	snprintf(err, errlen, "another kvpoold (pid %s) is listening on %s; stop it first "
		 "or choose another --socket", pid, path);
	return -EADDRINUSE;
}

int sockfile_busy(const char *path, char *err, size_t errlen)
{
	char lock[sizeof(((struct sockaddr_un *)0)->sun_path) + 8], pid[32];
	ssize_t n;
	int fd, rc = 0;

	snprintf(lock, sizeof(lock), "%s.lock", path);
	fd = open(lock, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;	/* none, or not ours: sockfile_open() says */
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		snprintf(err, errlen, "another kvpoold (pid %s) is listening on %s; stop it "
			 "first or choose another --socket", pid[0] ? pid : "?", path);
		rc = -EADDRINUSE;
	}
	close(fd);	/* a shared lock taken goes with it */
	return rc;
}

/*
 * bind_socket() - bind and listen on path; the caller holds its lock, so
 * a socket file already there is stale and replaced. Returns the
 * listening fd or -errno with the reason in err.
 */
static int bind_socket(const char *path, unsigned backlog, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, rc;

	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket; "
				 "remove it or choose another --socket", path);
			return -EEXIST;
		}
		log_info("replacing the stale socket %s", path);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "socket(AF_UNIX, SOCK_SEQPACKET): %s", strerror(-rc));
		return rc;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(-rc));
		close(fd);
		return rc;
	}
	if (listen(fd, (int)backlog) < 0) {
		rc = -errno;
		snprintf(err, errlen, "listen on %s: %s", path, strerror(-rc));
		close(fd);
		unlink(path);
		return rc;
	}
	return fd;
}

/*
 * socket_access() - resolve the socket's group (-1: keep the daemon's)
 * and create the socket's directory, 0750, if it is missing. Returns 0
 * or -errno with err filled.
 */
static int socket_access(const char *path, const char *group, gid_t *gid, char *err,
			 size_t errlen)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct group *gr;
	struct stat st;
	int rc;

	*gid = (gid_t)-1;
	if (group[0]) {
		gr = getgrnam(group);
		if (!gr) {
			snprintf(err, errlen, "socket-group '%s' is not a group on this "
				 "system (see getent group)", group);
			return -EINVAL;
		}
		*gid = gr->gr_gid;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	dirname(dir);
	if (stat(dir, &st) == 0)
		return 0;
	/* chmod: the umask (077) would take the group's x away */
	if (mkdir(dir, 0750) < 0 || chmod(dir, 0750) < 0 ||
	    (*gid != (gid_t)-1 && chown(dir, (uid_t)-1, *gid) < 0)) {
		rc = -errno;
		snprintf(err, errlen, "cannot create the socket directory %s: %s "
			 "(create it, e.g. with systemd's RuntimeDirectory=kvpool, or "
			 "choose another --socket)", dir, strerror(-rc));
		return rc;
	}
	log_info("created the socket directory %s (mode 0750)", dir);
	return 0;
}


int sockfile_open(const char *path, const char *group, int *lock_fd, int *listen_fd,
		  char *err, size_t errlen)
{
	gid_t gid;
	int fd, lfd, rc;

	rc = socket_access(path, group, &gid, err, errlen);
	if (rc < 0)
		return rc;
	lfd = lock_socket(path, err, errlen);
	if (lfd < 0)
		return lfd;
	fd = bind_socket(path, 128, err, errlen);
	if (fd < 0) {
		rc = fd;
		goto out_unlock;
	}
	/* 0660: the owner and the socket's group may connect, no one else. */
	if (chmod(path, 0660) < 0 || (gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) < 0)) {
		rc = -errno;
		snprintf(err, errlen, "cannot set the mode or group of %s: %s", path,
			 strerror(-rc));
		close(fd);
		unlink(path);
		goto out_unlock;
	}
	*lock_fd = lfd;
	*listen_fd = fd;
	return 0;

out_unlock:
	close(lfd);
	return rc;
}

int sockfile_adopt(const char *path, int *lock_fd, char *err, size_t errlen)
{
	int lfd = lock_socket(path, err, errlen);

	if (lfd < 0)
		return lfd;
	*lock_fd = lfd;
	return 0;
}
