/* SPDX-License-Identifier: MIT */
/*
 * cli_util.c - what the commands of `kvpool` share: the connection and
 * its explained errors, option and size parsing, names of wire values,
 * human units, aligned tables and JSON strings.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/cli.h"

/* --- options ---------------------------------------------------------------- */

int cli_common_opt(struct cli *cli, int c, const char *arg)
{
	switch (c) {
	case 's':
		cli->socket_path = arg;
		return 0;
	case 'j':
		cli->json = true;
		return 0;
	case 'B':
		cli->bytes = true;
		return 0;
	case 'h':
		return 1;
	}
	return -1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvpool: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'kvpool %s --help'.\n", cmd);
	return CLI_USAGE;
}

int cli_common_args(struct cli *cli, int argc, char **argv, const char *help)
{
	static const struct option longopts[] = { CLI_COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	int c;

	optind = 0;
	while ((c = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS, longopts, NULL)) != -1) {
		switch (cli_common_opt(cli, c, optarg)) {
		case 1:
			fputs(help, stdout);
			return CLI_OK;
		case -1:
			return cli_usage_error(argv[0], "bad option");
		}
	}
	return -1;
}

int cli_no_args(struct cli *cli, int argc, char **argv, const char *help)
{
	int rc = cli_common_args(cli, argc, argv, help);

	if (rc >= 0)
		return rc;
	if (optind < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind]);
	return -1;
}

bool cli_parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end;
}

/* --- the daemon --------------------------------------------------------------- */

const char *cli_socket_path(const struct cli *cli)
{
	const char *p = cli->socket_path;

	if (!p)
		p = getenv("KVPOOL_SOCKET");
	return p && *p ? p : KVP_SOCKET_DEFAULT;
}

int cli_connect(const struct cli *cli, kvp_client **c)
{
	const char *path = cli_socket_path(cli), *why;
	int rc;

	rc = kvp_connect(cli->socket_path, NULL, NULL, c);
	if (rc == 0)
		return 0;
	why = kvp_last_error();
	switch (rc) {
	case -EPROTONOSUPPORT:
		fprintf(stderr, "kvpool: protocol version mismatch: kvpoold at %s speaks "
			"none of the protocol versions of this kvpool %s (%u, and %u: the "
			"previous release's)%s%s. Use the kvpool that came with the running "
			"kvpoold, or restart kvpoold from this release or the one before "
			"it.\n", path, PACKAGE_VERSION, KVP_WIRE_VERSION, KVP_WIRE_VERSION_MIN,
			*why ? "; it says: " : "", why);
		break;
	default:
		/* the library's diagnosis: which path, what is wrong, what to do */
		fprintf(stderr, "kvpool: %s\n", *why ? why : kvp_strerror(rc));
	}
	return rc;
}

int cli_fail(const char *what, int rc)
{
	const char *why = kvp_last_error();

	/* the daemon's own words say what and what to do; else the errno's */
	if (rc == -EACCES)
		fprintf(stderr, "kvpool: %s: refused by kvpoold: %s\n", what,
			*why ? why : "not allowed for this user (needs admin rights)");
	else if (rc == -EPIPE)
		fprintf(stderr, "kvpool: %s: kvpoold closed the connection (did it exit? "
			"see its log)\n", what);
	else
		fprintf(stderr, "kvpool: %s: %s\n", what, *why ? why : kvp_strerror(rc));
	return CLI_ERR;
}

int cli_stats(kvp_client *c, kvp_stats_t *st, kvp_ns_stats_t **ns)
{
	size_t max = 16;
	kvp_ns_stats_t *a = NULL, *b;
	int n;

	for (;;) {
		b = realloc(a, max * sizeof(*a));
		if (!b) {
			free(a);
			return -ENOMEM;
		}
		a = b;
		n = kvp_stats(c, st, a, max);
		if (n < 0 || (size_t)n <= max)
			break;
		max = (size_t)n;	/* more namespaces than room: ask again */
	}
	if (n <= 0) {
		free(a);
		a = NULL;
	}
	*ns = a;
	return n;
}

int cli_snapshot(const struct cli *cli, const char *what, kvp_stats_t *st,
		 kvp_ns_stats_t **ns)
{
	kvp_client *c;
	int n;

	if (cli_connect(cli, &c) < 0)
		return -1;
	n = cli_stats(c, st, ns);
	kvp_close(c);
	if (n < 0) {
		cli_fail(what, n);
		return -1;
	}
	return n;
}

const char *cli_ns_name(const kvp_ns_stats_t *ns, int n, uint32_t id)
{
	int i;

	for (i = 0; i < n; i++)
		if (ns[i].id == id)
			return ns[i].name;
	return "?";
}

/* --- names ---------------------------------------------------------------------- */




static const char *const state_names[] = {
	[KVP_PAGE_PRIVATE] = "private", [KVP_PAGE_SHARED] = "shared",
	[KVP_PAGE_CACHED] = "cached", [KVP_PAGE_INFLIGHT] = "inflight",
	[KVP_PAGE_SPILLED] = "spilled", [KVP_PAGE_HOST] = "host",
};

const char *cli_state_name(uint32_t s)
{
	return s >= 1 && s <= KVP_PAGE_HOST ? state_names[s] : "?";
}

const char *cli_tier_name(uint32_t s)
{
	return s == KVP_PAGE_SPILLED ? "nvme" : s == KVP_PAGE_HOST ? "host" : "pool";
}

uint32_t cli_state_parse(const char *name)
{
	uint32_t s;

	for (s = 1; s <= KVP_PAGE_HOST; s++)
		if (strcmp(name, state_names[s]) == 0)
			return s;
	return 0;
}

/* --- units ------------------------------------------------------------------------ */

/* fmt_scaled() - v / unit^k for the largest k with a value >= 1, with two
 * decimals below 10, one below 1000, none above; zeros dropped. */
static char *fmt_scaled(char buf[CLI_FMT_MAX], uint64_t v, double unit,
			const char *const *names)
{
	double x = (double)v;
	char *p;
	int k = 0;

	while (x >= unit && names[k + 1]) {
		x /= unit;
		k++;
	}
	if (k == 0) {
		snprintf(buf, CLI_FMT_MAX, "%" PRIu64 " %s", v, names[0]);
		return buf;
	}
	snprintf(buf, CLI_FMT_MAX, "%.*f", x < 9.995 ? 2 : x < 999.95 ? 1 : 0, x);
	p = buf + strlen(buf);
	if (strchr(buf, '.')) {
		while (p[-1] == '0')
			*--p = '\0';
		if (p[-1] == '.')
			*--p = '\0';
	}
	snprintf(p, (size_t)(CLI_FMT_MAX - (p - buf)), " %s", names[k]);
	return buf;
}

char *cli_fmt_iec(char buf[CLI_FMT_MAX], uint64_t v)
{
	static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", NULL };

	return fmt_scaled(buf, v, 1024.0, names);
}

char *cli_fmt_si(char buf[CLI_FMT_MAX], uint64_t v)
{
	static const char *const names[] = { "B", "kB", "MB", "GB", "TB", "PB", NULL };

	return fmt_scaled(buf, v, 1000.0, names);
}

char *cli_fmt_size(const struct cli *cli, char buf[CLI_FMT_MAX], uint64_t v)
{
	if (cli->bytes) {
		snprintf(buf, CLI_FMT_MAX, "%" PRIu64 " B", v);
		return buf;
	}
	return cli_fmt_iec(buf, v);
}

char *cli_fmt_grouped(char buf[CLI_FMT_MAX], uint64_t v)
{
	char digits[24];
	size_t n, i, o = 0;

	n = (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, v);
	for (i = 0; i < n; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = '\0';
	return buf;
}

char *cli_fmt_ms(char buf[CLI_FMT_MAX], uint64_t ms)
{
	uint64_t s = ms / 1000;

	if (ms < 1000)
		snprintf(buf, CLI_FMT_MAX, "%" PRIu64 "ms", ms);
	else if (s < 60)
		snprintf(buf, CLI_FMT_MAX, "%.1fs", (double)ms / 1000.0);
	else if (s < 3600)
		snprintf(buf, CLI_FMT_MAX, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, CLI_FMT_MAX, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
	else
		snprintf(buf, CLI_FMT_MAX, "%" PRIu64 "d%02" PRIu64 "h", s / 86400,
			 s / 3600 % 24);
	return buf;
}

char *cli_fmt_key(char buf[CLI_FMT_MAX], const uint8_t key[8])
{
	int i;

	for (i = 0; i < 8; i++)
		snprintf(buf + 2 * i, 3, "%02x", key[i]);
	return buf;
}

char *cli_fmt_rate(char buf[CLI_FMT_MAX], uint64_t part, uint64_t whole)
{
	if (!whole)
		snprintf(buf, CLI_FMT_MAX, "-");
	else
		snprintf(buf, CLI_FMT_MAX, "%.1f%%", 100.0 * (double)part / (double)whole);
	return buf;
}

void cli_json_str(FILE *f, const char *s)
{
	const unsigned char *p;

	fputc('"', f);
	for (p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* --- tables ------------------------------------------------------------------------ */

#define TABLE_MAX_COLS 24

struct table {
	size_t ncols, ncells, cap;
	char align[TABLE_MAX_COLS];
	char **cells;
};

struct table *table_new(size_t ncols, const char *align)
{
	struct table *t;

	if (ncols == 0 || ncols >= sizeof(t->align) || strlen(align) != ncols)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->ncols = ncols;
	memcpy(t->align, align, ncols);
	return t;
}

int table_add(struct table *t, const char *fmt, ...)
{
	va_list ap;
	char **c, *s;
	int rc;

	if (t->ncells == t->cap) {
		c = realloc(t->cells, (t->cap ? t->cap * 2 : 64) * sizeof(*c));
		if (!c)
			return -ENOMEM;
		t->cells = c;
		t->cap = t->cap ? t->cap * 2 : 64;
	}
	va_start(ap, fmt);
	rc = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (rc < 0)
		return -ENOMEM;
	t->cells[t->ncells++] = s;
	return 0;
}

void table_print(const struct table *t, FILE *f)
{
	size_t w[TABLE_MAX_COLS] = { 0 }, i, col, len;

	for (i = 0; i < t->ncells; i++) {
		len = strlen(t->cells[i]);
		if (len > w[i % t->ncols])
			w[i % t->ncols] = len;
	}
	for (i = 0; i < t->ncells; i++) {
		col = i % t->ncols;
		if (col == t->ncols - 1 && t->align[col] == 'l')
			fputs(t->cells[i], f);	/* no trailing blanks */
		else
			fprintf(f, t->align[col] == 'r' ? "%*s" : "%-*s", (int)w[col],
				t->cells[i]);
		fputs(col == t->ncols - 1 || i == t->ncells - 1 ? "\n" : "  ", f);
	}
}

void table_free(struct table *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->ncells; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

