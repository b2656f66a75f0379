/* SPDX-License-Identifier: MIT */
/*
 * log.h - kvpoold's log: one line per event, to stderr, with a level.
 * Under systemd (JOURNAL_STREAM set) each line carries a <N> priority
 * prefix that journald understands; a detached daemon logs to syslog.
 */
#ifndef KVP_LOG_H
#define KVP_LOG_H

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

/* log_level_parse() - "error", "warn", "info" or "debug" into *level;
 * returns 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *level);

/* log_level_name() - the name of a level, as log_level_parse() takes it. */
const char *log_level_name(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif /* KVP_LOG_H */
