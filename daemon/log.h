/* SPDX-License-Identifier: MIT */
/*
 * log.h - kvpoold's log: one line per event, to stderr, with a level.
 * Under systemd (JOURNAL_STREAM set) each line carries a <N> priority
 * prefix that journald understands; a detached daemon logs to syslog;
 * with --log-file, lines go to that file (time-stamped) instead.
 */
#ifndef KVP_LOG_H
#define KVP_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

enum log_level {
	LOG_LVL_ERROR = 0,
	LOG_LVL_WARN = 1,
	LOG_LVL_INFO = 2,
	LOG_LVL_DEBUG = 3,
};

/* log_set_level() - lines above level are dropped. Default: info. */
void log_set_level(enum log_level level);

/* log_use_syslog() - send lines to syslog (facility daemon) from now on,
 * for a daemon that detached from its terminal. */
void log_use_syslog(void);

/* log_open_file() - append lines to path from now on (made 0640, never
 * through a link). 0, or -errno with err saying why. */
int log_open_file(const char *path, char *err, size_t errlen);

/* log_reopen() - open the log file again (SIGHUP, after logrotate moved
 * it); a failure is logged to the old one. */
void log_reopen(void);

/* log_to_file() - lines go to a --log-file. */
bool log_to_file(void);

/* log_syslog_reachable() - 0 when syslog's socket takes a connection,
 * else -errno with why naming it. */
int log_syslog_reachable(char *why, size_t len);

/* log_level_parse() - "error", "warn", "info" or "debug" into *level;
 * returns 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *level);

/* log_level_name() - the name of a level, as log_level_parse() takes it. */
const char *log_level_name(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* log_every() - a line that may flood (one per refused connection, bad
 * reply, lost write) is due: none was said within every_s seconds, by
 * *last (the monotonic ns of the last one, 0 for never; updated when
 * due). The caller keeps *last, and serializes calls to it. */
bool log_every(uint64_t *last, unsigned every_s);

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif /* KVP_LOG_H */
