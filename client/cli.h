/* SPDX-License-Identifier: MIT */
/*
 * cli.h - the admin CLI `kvpool`: its options, the commands (one
 * cli_<group>.c each) and the helpers they share (cli_util.c): the
 * connection with its explained errors, option parsing, units, aligned
 * tables and JSON strings.
 */
#ifndef KVPOOL_CLI_H
#define KVPOOL_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client/stats_text.h"
#include "kvpool.h"

/* Exit codes, as kvpool(1) documents them. */
enum {
	CLI_OK = 0,
	CLI_ERR = 1,		/* the daemon could not be reached or refused */
	CLI_USAGE = 2,		/* bad command line */
	CLI_CONSERVATION = 3,	/* status: the page counts do not add up */
};

/* Options every command takes, before or after its name. */
struct cli {
	const char *socket_path;	/* NULL: $KVPOOL_SOCKET or the default */
	bool json;			/* machine-readable output */
	bool bytes;			/* exact byte counts, not human units */
};

/* Long options of struct cli, for each command's getopt_long() table. */
#define CLI_COMMON_LONGOPTS \
	{ "socket", required_argument, NULL, 's' }, \
	{ "json", no_argument, NULL, 'j' }, \
	{ "bytes", no_argument, NULL, 'B' }, \
	{ "help", no_argument, NULL, 'h' }
#define CLI_COMMON_SHORTOPTS "s:jh"

/* A command: argv[0] is its name, the rest its own arguments. Returns the
 * process's exit code. */
typedef int cli_cmd_fn(struct cli *cli, int argc, char **argv);

cli_cmd_fn cmd_status, cmd_namespaces, cmd_clients, cmd_pages, cmd_prefixes,
	cmd_evict, cmd_disconnect, cmd_drop, cmd_plan, cmd_metrics, cmd_top;

/* --- cli_util.c: options -------------------------------------------------- */

/*
 * cli_common_opt() - handle option c (a CLI_COMMON_LONGOPTS one) of
 * command cmd. Returns -1 when c is not one of them or is '?' (the caller
 * prints usage and exits 2), 1 for --help (the caller prints its usage
 * and exits 0), else 0.
 */
int cli_common_opt(struct cli *cli, int c, const char *arg);

/* cli_usage_error() - "kvpool: CMD: MESSAGE" and a pointer to --help on
 * stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* cli_common_args() - parse the options of a command that takes only the
 * common ones; help is its --help text. Operands are left from optind.
 * Returns -1 to go on, else the exit code to return. */
int cli_common_args(struct cli *cli, int argc, char **argv, const char *help);

/* cli_no_args() - cli_common_args() for a command without operands. */
int cli_no_args(struct cli *cli, int argc, char **argv, const char *help);

/* cli_parse_u64() - a whole decimal number; false when s is not one. */
bool cli_parse_u64(const char *s, uint64_t *out);


/* --- cli_util.c: the daemon ------------------------------------------------ */

/*
 * cli_connect() - an inspection session on the daemon, or an explained
 * error on stderr (no daemon, permission, protocol version). Returns 0 or
 * -errno; free the client with kvp_close().
 */
int cli_connect(const struct cli *cli, kvp_client **c);

/* cli_socket_path() - the socket cli_connect() uses; static or argv storage. */
const char *cli_socket_path(const struct cli *cli);

/* cli_fail() - "kvpool: WHAT: <the daemon's words>" (or kvp_strerror()'s
 * when it gave none) on stderr for rc (a negative errno); returns CLI_ERR. */
int cli_fail(const char *what, int rc);

/*
 * cli_stats() - STATS with every namespace record: *ns is malloc'd (the
 * caller frees it, NULL when there are none). Returns the number of
 * namespaces or -errno.
 */
int cli_stats(kvp_client *c, kvp_stats_t *st, kvp_ns_stats_t **ns);

/*
 * cli_snapshot() - connect, cli_stats(), close: for the commands that
 * show one snapshot. Returns the number of namespaces, or -1 after
 * explaining on stderr why command what got none (exit with CLI_ERR).
 */
int cli_snapshot(const struct cli *cli, const char *what, kvp_stats_t *st,
		 kvp_ns_stats_t **ns);


/* cli_ns_name() - the name of namespace id among ns[0..n), "?" if gone. */
const char *cli_ns_name(const kvp_ns_stats_t *ns, int n, uint32_t id);

/* --- cli_util.c: names and units ------------------------------------------- */

/* (the names of backends, dtypes and key schemes: stats_text.h) */
const char *cli_state_name(uint32_t state);	/* KVP_PAGE_* */
const char *cli_tier_name(uint32_t state);	/* "pool", or "nvme" when spilled */
/* cli_state_parse() - a KVP_PAGE_* from its name, 0 if none. */
uint32_t cli_state_parse(const char *name);

/* Room for any string the fmt_ helpers write. */
#define CLI_FMT_MAX 48

/* cli_fmt_iec() - "1.25 GiB", "16 KiB", "512 B": binary units, at most
 * three significant digits, trailing zeros dropped. */
char *cli_fmt_iec(char buf[CLI_FMT_MAX], uint64_t v);

/* cli_fmt_si() - "1.34 GB", "343.6 GB": decimal units (GB = 10^9). */
char *cli_fmt_si(char buf[CLI_FMT_MAX], uint64_t v);

/* cli_others() - the daemon's clients, not counting kvpool's own
 * connection, which asked. */
static inline uint32_t cli_others(const kvp_stats_t *st)
{
	return st->clients ? st->clients - 1 : 0;
}

/* cli_fmt_size() - cli_fmt_iec(), or the exact "N B" with --bytes. */
char *cli_fmt_size(const struct cli *cli, char buf[CLI_FMT_MAX], uint64_t v);

/* cli_fmt_grouped() - "1,342,177,280". */
char *cli_fmt_grouped(char buf[CLI_FMT_MAX], uint64_t v);

/* cli_fmt_ms() - a duration: "850ms", "12.3s", "4m05s", "3h07m", "2d04h". */
char *cli_fmt_ms(char buf[CLI_FMT_MAX], uint64_t ms);

/* cli_fmt_key() - the first 8 bytes of a key in hex (16 characters). */
char *cli_fmt_key(char buf[CLI_FMT_MAX], const uint8_t key[8]);

/* cli_fmt_rate() - "87.5%" of part in whole, "-" when whole is 0. */
char *cli_fmt_rate(char buf[CLI_FMT_MAX], uint64_t part, uint64_t whole);

/* cli_json_str() - s as a JSON string literal (quotes and escapes). */
void cli_json_str(FILE *f, const char *s);

/* --- cli_util.c: aligned tables ----------------------------------------------
 *
 * Rows of cells collected first, printed once with each column as wide as
 * its widest cell: numbers (columns flagged right) align right. Memory:
 * O(cells); the table owns every cell and frees them in table_free().
 */
struct table;

/* table_new() - a table of ncols (at most 23) columns; align is a string
 * of ncols 'l' or 'r' (alignment). Returns NULL on ENOMEM or a bad ncols. */
struct table *table_new(size_t ncols, const char *align);
/* table_add() - append a cell to the current row (a new row starts every
 * ncols cells). The text is copied. Returns 0 or -ENOMEM. */
int table_add(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void table_print(const struct table *t, FILE *f);
void table_free(struct table *t);

#endif /* KVPOOL_CLI_H */
