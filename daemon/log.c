/* SPDX-License-Identifier: MIT */
/*
 * log.c - formatting and filtering of kvpoold's log lines.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"

bool log_every(uint64_t *last, unsigned every_s)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (*last && now - *last < (uint64_t)every_s * 1000000000u)
		return false;
	*last = now;
	return true;
}

static enum log_level log_max = LOG_LVL_INFO;
static bool log_syslog;
static int log_fd = -1;			/* --log-file */
static char log_path[4096];

static const char *const level_names[] = {
	[LOG_LVL_ERROR] = "error",
	[LOG_LVL_WARN] = "warn",
	[LOG_LVL_INFO] = "info",
	[LOG_LVL_DEBUG] = "debug",
};

/* syslog priorities of the levels, for journald's <N> prefix */
static const int level_prio[] = { 3, 4, 6, 7 };

void log_use_syslog(void)
{
	openlog("kvpoold", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	log_syslog = true;
}

int log_open_file(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);

	if (fd < 0) {
		int rc = -errno;

		snprintf(err, errlen, "--log-file %s: %s", path, strerror(-rc));
		return rc;
	}
	if (log_fd >= 0)
		close(log_fd);
	log_fd = fd;
	snprintf(log_path, sizeof(log_path), "%s", path);
	return 0;
}

void log_reopen(void)
{
	char err[4200];

	if (log_fd >= 0 && log_open_file(log_path, err, sizeof(err)) < 0)
		log_error("SIGHUP: %s; the log goes on in the old file", err);
}

bool log_to_file(void)
{
	return log_fd >= 0;
}

int log_syslog_reachable(char *why, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc = 0;

	strcpy(sa.sun_path, _PATH_LOG);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		snprintf(why, len, "%s: %s", _PATH_LOG, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

void log_set_level(enum log_level level)
{
	log_max = level;
}

int log_level_parse(const char *s, enum log_level *level)
{
	unsigned i;

	for (i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*level = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *log_level_name(enum log_level level)
{
	return level_names[level];
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static int journal = -1;
	char line[1024];
	va_list ap;

	if (level > log_max)
		return;
	if (journal < 0)
		journal = getenv("JOURNAL_STREAM") != NULL;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (log_fd >= 0) {
		char stamp[32], out[1100];
		struct timespec ts;
		struct tm tm;
		int n;

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
		n = snprintf(out, sizeof(out), "%s.%03ld kvpoold[%d]: %s: %s\n", stamp,
			     ts.tv_nsec / 1000000, (int)getpid(), level_names[level], line);
		if (n > (int)sizeof(out) - 1)
			n = (int)sizeof(out) - 1;
		(void)!write(log_fd, out, (size_t)n);	/* O_APPEND: one line each */
	} else if (log_syslog)
		syslog(level_prio[level], "%s", line);
	else if (journal)
		fprintf(stderr, "<%d>%s\n", level_prio[level], line);
	else
		fprintf(stderr, "kvpoold: %s: %s\n", level_names[level], line);
}
