/* SPDX-License-Identifier: MIT */
/*
 * cli_list.c - the listing commands of `kvpool`: clients (the
 * connections), pages (filtered by namespace, state or holder) and
 * prefixes (the most used indexed blocks). Each is one LIST_* request
 * plus a STATS for the namespace names and the daemon's clock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "client/cli.h"

/* Most page records one `kvpool pages` asks for unless --limit says. */
#define PAGES_DEFAULT_LIMIT 4096u
/* Prefix records `kvpool prefixes` shows unless --top says. */
#define PREFIXES_DEFAULT_TOP 20u

/* session() - connect and take STATS (for names and uptime). Returns the
 * number of namespaces (*ns malloc'd, the caller frees it) or -1 with the
 * error explained on stderr (the client closed). */
static int session(const struct cli *cli, const char *what, kvp_client **c,
		   kvp_stats_t *st, kvp_ns_stats_t **ns)
{
	int n;

	if (cli_connect(cli, c) < 0)
		return -1;
	n = cli_stats(*c, st, ns);
	if (n < 0) {
		cli_fail(what, n);
		kvp_close(*c);
		return -1;
	}
	return n;
}

/* --- clients ---------------------------------------------------------------- */

/* rights_str() - "read,write,admin" and the like; admin* for an admin of
 * the whole daemon; "-" for none (an inspection session). */
static const char *rights_str(uint32_t rights)
{
	static char buf[32];

	snprintf(buf, sizeof(buf), "%s%s%s%s",
		 rights & KVP_RIGHT_READ ? ",read" : "",
		 rights & KVP_RIGHT_WRITE ? ",write" : "",
		 rights & KVP_RIGHT_ADMIN_ALL ? ",admin*" :
		 rights & KVP_RIGHT_ADMIN ? ",admin" : "", "");
	return buf[0] ? buf + 1 : "-";
}

static void clients_json(const kvp_stats_t *st, const struct kvp_wire_client *r,
			 int n, int total)
{
	int i;

	printf("{\"total\":%d,\"clients\":[", total);
	for (i = 0; i < n; i++) {
		printf("%s{\"id\":%" PRIu64 ",\"pid\":%" PRIu32 ",\"uid\":%" PRIu32
		       ",\"gid\":%" PRIu32 ",\"admin\":%s,\"rights\":\"%s\",\"name\":",
		       i ? "," : "", r[i].id, r[i].pid, r[i].uid, r[i].gid,
		       r[i].rights & KVP_RIGHT_ADMIN_ALL ? "true" : "false",
		       rights_str(r[i].rights));
		cli_json_str(stdout, r[i].name);
		printf(",\"namespace\":");
		cli_json_str(stdout, r[i].ns);
		printf(",\"leases\":%" PRIu64 ",\"connected_ms\":%" PRIu64
		       ",\"connected_for_ms\":%" PRIu64 "}", r[i].leases, r[i].connected_ms,
		       st->uptime_ms > r[i].connected_ms ? st->uptime_ms - r[i].connected_ms : 0);
	}
	printf("]}\n");
}

static void clients_table(const kvp_stats_t *st, const struct kvp_wire_client *r, int n)
{
	struct table *t = table_new(8, "rrrllrll");
	char a[CLI_FMT_MAX];
	int i;

	if (!t)
		return;
	table_add(t, "ID");
	table_add(t, "PID");
	table_add(t, "UID");
	table_add(t, "NAME");
	table_add(t, "NAMESPACE");
	table_add(t, "LEASES");
	table_add(t, "RIGHTS");
	table_add(t, "CONNECTED");
	for (i = 0; i < n; i++) {
		uint64_t age = st->uptime_ms > r[i].connected_ms ?
			       st->uptime_ms - r[i].connected_ms : 0;

		table_add(t, "%" PRIu64, r[i].id);
		table_add(t, "%" PRIu32, r[i].pid);
		table_add(t, "%" PRIu32, r[i].uid);
		table_add(t, "%s", r[i].name[0] ? r[i].name : "-");
		table_add(t, "%s", r[i].ns[0] ? r[i].ns : "(inspection)");
		table_add(t, "%" PRIu64, r[i].leases);
		table_add(t, "%s", rights_str(r[i].rights));
		table_add(t, "%s ago", cli_fmt_ms(a, age));
	}
	table_print(t, stdout);
	table_free(t);
}

int cmd_clients(struct cli *cli, int argc, char **argv)
{
	struct kvp_wire_client *r = NULL;
	kvp_ns_stats_t *ns = NULL;
	kvp_stats_t st;
	kvp_client *c;
	int n, total, rc;
	uint32_t all = 0;

	rc = cli_no_args(cli, argc, argv, "Usage: kvpool [OPTIONS] clients\n"
			 "One row per connection: id, pid, uid, name, namespace, pages\n"
			 "leased, its rights (read, write, admin of its namespace; admin*:\n"
			 "of the whole daemon), time since it connected. See kvpool(1).\n");
	if (rc >= 0)
		return rc;
	if (session(cli, "clients", &c, &st, &ns) < 0)
		return CLI_ERR;
	free(ns);
	/* room for every connection the daemon serves, and this one */
	r = calloc((size_t)st.max_clients + 1, sizeof(*r));
	n = r ? kvp_list_clients(c, r, (size_t)st.max_clients + 1, &all) : -ENOMEM;
	kvp_close(c);
	if (n < 0) {
		free(r);
		return cli_fail("clients", n);
	}
	total = (int)all;
	if (cli->json)
		clients_json(&st, r, n, total);
	else
		clients_table(&st, r, n);
	free(r);
	return CLI_OK;
}

/* --- pages -------------------------------------------------------------------- */

static void pages_json(const kvp_ns_stats_t *ns, int nns, const struct kvp_wire_page *r,
		       int n, int total)
{
	char k[CLI_FMT_MAX];
	bool indexed;
	int i;

	printf("{\"total\":%d,\"pages\":[", total);
	for (i = 0; i < n; i++) {
		indexed = r[i].tokens != 0;
		printf("%s{\"handle\":%" PRIu64 ",\"namespace\":", i ? "," : "", r[i].handle);
		cli_json_str(stdout, cli_ns_name(ns, nns, r[i].ns_id));
		printf(",\"state\":\"%s\",\"tier\":\"%s\",\"refs\":%" PRIu32 ",\"holders\":%"
		       PRIu32 ",\"holder\":%" PRIu64, cli_state_name(r[i].state),
		       cli_tier_name(r[i].state), r[i].refs, r[i].holders, r[i].holder);
		if (indexed)
			printf(",\"prio\":%" PRIu32 ",\"tokens\":%" PRIu32 ",\"key\":\"%s\","
			       "\"age_ms\":%" PRIu64 "}", r[i].prio, r[i].tokens,
			       cli_fmt_key(k, r[i].key), r[i].age_ms);
		else
			printf(",\"prio\":null,\"tokens\":null,\"key\":null,\"age_ms\":null}");
	}
	printf("]}\n");
}

static void pages_table(const kvp_ns_stats_t *ns, int nns, const struct kvp_wire_page *r,
			int n)
{
	static const char *const prio[] = { "low", "normal", "high", "pinned" };
	struct table *t = table_new(11, "rllllrrrrlr");
	char a[CLI_FMT_MAX];
	bool indexed;
	int i;

	if (!t)
		return;
	table_add(t, "HANDLE");
	table_add(t, "NAMESPACE");
	table_add(t, "STATE");
	table_add(t, "TIER");
	table_add(t, "PRIO");
	table_add(t, "TOKENS");
	table_add(t, "REFS");
	table_add(t, "HOLDERS");
	table_add(t, "HOLDER");
	table_add(t, "KEY");
	table_add(t, "AGE");
	for (i = 0; i < n; i++) {
		indexed = r[i].tokens != 0;
		if (r[i].handle)
			table_add(t, "%#" PRIx64, r[i].handle);
		else
			table_add(t, "-");
		table_add(t, "%s", cli_ns_name(ns, nns, r[i].ns_id));
		table_add(t, "%s", cli_state_name(r[i].state));
		table_add(t, "%s", cli_tier_name(r[i].state));
		table_add(t, "%s", !indexed ? "-" : r[i].prio < 4 ? prio[r[i].prio] : "?");
		if (indexed)
			table_add(t, "%" PRIu32, r[i].tokens);
		else
			table_add(t, "-");
		table_add(t, "%" PRIu32, r[i].refs);
		table_add(t, "%" PRIu32, r[i].holders);
		if (r[i].holder)
			table_add(t, "%" PRIu64, r[i].holder);
		else
			table_add(t, "-");
		table_add(t, "%s", indexed ? cli_fmt_key(a, r[i].key) : "-");
		table_add(t, "%s", indexed ? cli_fmt_ms(a, r[i].age_ms) : "-");
	}
	table_print(t, stdout);
	table_free(t);
}

static const char pages_help[] =
	"Usage: kvpool [OPTIONS] pages [--ns NAME] [--state STATE] [--client ID]\n"
	"                              [--limit K]\n"
	"One row per page: handle, namespace, state, tier, priority and tokens\n"
	"(published pages), leases, clients holding it, the first of them, the\n"
	"key's first 8 bytes and the time since it was last used.\n"
	"  -n, --ns=NAME       only this namespace\n"
	"  -S, --state=STATE   private, shared, cached, inflight, host or spilled\n"
	"  -c, --client=ID     only pages this client holds (kvpool clients)\n"
	"  -l, --limit=K       at most K rows (default 4096)\n";

int cmd_pages(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_LONGOPTS,
		{ "ns", required_argument, NULL, 'n' },
		{ "state", required_argument, NULL, 'S' },
		{ "client", required_argument, NULL, 'c' },
		{ "limit", required_argument, NULL, 'l' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp_wire_list_pages f = { .limit = PAGES_DEFAULT_LIMIT };
	struct kvp_wire_page *r;
	kvp_ns_stats_t *ns;
	kvp_stats_t st;
	kvp_client *c;
	uint64_t v;
	int o, nns, total, n;
	uint32_t all = 0;

	optind = 0;
	while ((o = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS "n:S:c:l:", longopts,
				NULL)) != -1) {
		switch (o) {
		case 'n':
			if (strlen(optarg) >= sizeof(f.ns))
				return cli_usage_error(argv[0], "--ns: '%s' is longer than %u "
						       "bytes", optarg, KVP_NAME_MAX - 1);
			strcpy(f.ns, optarg);
			break;
		case 'S':
			f.state = cli_state_parse(optarg);
			if (!f.state)
				return cli_usage_error(argv[0], "--state: '%s' is not private, "
						       "shared, cached, inflight, host or spilled", optarg);
			break;
		case 'c':
			if (!cli_parse_u64(optarg, &f.client) || !f.client)
				return cli_usage_error(argv[0], "--client: '%s' is not a client "
						       "id (kvpool clients lists them)", optarg);
			break;
		case 'l':
			if (!cli_parse_u64(optarg, &v) || v == 0 || v > UINT32_MAX)
				return cli_usage_error(argv[0], "--limit: '%s' is not a count of "
						       "1 or more", optarg);
			f.limit = (uint32_t)v;
			break;
		default:
			switch (cli_common_opt(cli, o, optarg)) {
			case 1:
				fputs(pages_help, stdout);
				return CLI_OK;
			case -1:
				return cli_usage_error(argv[0], "bad option");
			}
		}
	}
	if (optind < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind]);

	nns = session(cli, "pages", &c, &st, &ns);
	if (nns < 0)
		return CLI_ERR;
	r = calloc(f.limit, sizeof(*r));
	n = r ? kvp_list_pages(c, &f, r, f.limit, &all) : -ENOMEM;
	kvp_close(c);
	if (n < 0) {
		free(r);
		free(ns);
		return cli_fail("pages", n);
	}
	total = (int)all;	/* the daemon sends as many as fit one message */
	if (cli->json) {
		pages_json(ns, nns, r, n, total);
	} else {
		pages_table(ns, nns, r, n);
		if (total > n)
			printf("(%d of %d pages shown; --limit raises the count)\n", n, total);
		else if (total == 0)
			printf("(no pages match)\n");
	}
	free(r);
	free(ns);
	return CLI_OK;
}

/* --- prefixes ----------------------------------------------------------------- */

static void prefixes_out(const struct cli *cli, const kvp_ns_stats_t *ns, int nns,
			 const struct kvp_wire_prefix *r, int n, int total)
{
	struct table *t;
	char k[CLI_FMT_MAX], b[CLI_FMT_MAX];
	int i;

	if (cli->json) {
		printf("{\"total\":%d,\"prefixes\":[", total);
		for (i = 0; i < n; i++) {
			printf("%s{\"key\":\"%s\",\"namespace\":", i ? "," : "",
			       cli_fmt_key(k, r[i].key));
			cli_json_str(stdout, cli_ns_name(ns, nns, r[i].ns_id));
			printf(",\"depth\":%" PRIu32 ",\"state\":\"%s\",\"tier\":\"%s\","
			       "\"refs\":%" PRIu32 ",\"hits\":%" PRIu64 ",\"bytes\":%" PRIu64 "}",
			       r[i].depth, cli_state_name(r[i].state), cli_tier_name(r[i].state),
			       r[i].refs, r[i].hits, r[i].bytes);
		}
		printf("]}\n");
		return;
	}
	t = table_new(8, "llrllrrr");
	if (!t)
		return;
	table_add(t, "KEY");
	table_add(t, "NAMESPACE");
	table_add(t, "DEPTH");
	table_add(t, "STATE");
	table_add(t, "TIER");
	table_add(t, "REFS");
	table_add(t, "HITS");
	table_add(t, "BYTES");
	for (i = 0; i < n; i++) {
		table_add(t, "%s", cli_fmt_key(k, r[i].key));
		table_add(t, "%s", cli_ns_name(ns, nns, r[i].ns_id));
		table_add(t, "%" PRIu32, r[i].depth);
		table_add(t, "%s", cli_state_name(r[i].state));
		table_add(t, "%s", cli_tier_name(r[i].state));
		table_add(t, "%" PRIu32, r[i].refs);
		table_add(t, "%" PRIu64, r[i].hits);
		table_add(t, "%s", cli_fmt_size(cli, b, r[i].bytes));
	}
	table_print(t, stdout);
	table_free(t);
	if (total > n)
		printf("(top %d of %d indexed blocks; --top raises the count)\n", n, total);
	else if (total == 0)
		printf("(no indexed blocks)\n");
}

static const char prefixes_help[] =
	"Usage: kvpool [OPTIONS] prefixes [--top K] [--ns NAME]\n"
	"The indexed blocks that served the most hits: key (first 8 bytes),\n"
	"namespace, depth (blocks from the root), state, tier, leases, hits and\n"
	"the bytes of K/V the prefix up to it holds (depth x page size).\n"
	"  -t, --top=K     the K most hit (default 20)\n"
	"  -n, --ns=NAME   only this namespace\n";

int cmd_prefixes(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_LONGOPTS,
		{ "ns", required_argument, NULL, 'n' },
		{ "top", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp_wire_prefix *r;
	const char *only = NULL;
	uint64_t top = PREFIXES_DEFAULT_TOP;
	kvp_ns_stats_t *ns;
	kvp_stats_t st;
	kvp_client *c;
	int o, nns, n;
	uint32_t all = 0;

	optind = 0;
	while ((o = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS "n:t:", longopts,
				NULL)) != -1) {
		switch (o) {
		case 'n':
			only = optarg;
			break;
		case 't':
			if (!cli_parse_u64(optarg, &top) || top == 0 || top > 4096)
				return cli_usage_error(argv[0], "--top: '%s' is not a count "
						       "from 1 to 4096", optarg);
			break;
		default:
			switch (cli_common_opt(cli, o, optarg)) {
			case 1:
				fputs(prefixes_help, stdout);
				return CLI_OK;
			case -1:
				return cli_usage_error(argv[0], "bad option");
			}
		}
	}
	if (optind < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind]);

	nns = session(cli, "prefixes", &c, &st, &ns);
	if (nns < 0)
		return CLI_ERR;
	r = calloc(top, sizeof(*r));
	n = r ? kvp_list_prefixes(c, only, top, r, top, &all) : -ENOMEM;
	kvp_close(c);
	if (n >= 0)
		prefixes_out(cli, ns, nns, r, n, (int)all);
	free(r);
	free(ns);
	return n < 0 ? cli_fail("prefixes", n) : CLI_OK;
}
