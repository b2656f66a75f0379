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
#include <syslog.h>

#include "daemon/log.h"

static enum log_level log_max = LOG_LVL_INFO;
static bool log_syslog;

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
	if (log_syslog)
		syslog(level_prio[level], "%s", line);
	else if (journal)
		fprintf(stderr, "<%d>%s\n", level_prio[level], line);
	else
		fprintf(stderr, "kvpoold: %s: %s\n", level_names[level], line);
}
