/* SPDX-License-Identifier: MIT */
/*
 * cli_admin.c - the commands of `kvpool` that change the daemon's state:
 * evict (cached pages out of the pool), disconnect (a client) and drop (a
 * namespace). The daemon allows them to root, its own user and its
 * --admin-group; anyone else gets its refusal, word for word.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "client/cli.h"

/* one_arg() - parse the common options and exactly one operand, which
 * *arg gets. Returns -1 to go on, else the exit code. */
static int one_arg(struct cli *cli, int argc, char **argv, const char *what,
		   const char *help, const char **arg)
{
	int rc = cli_common_args(cli, argc, argv, help);

	if (rc >= 0)
		return rc;
	if (optind >= argc)
		return cli_usage_error(argv[0], "which %s?", what);
	if (optind + 1 < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind + 1]);
	*arg = argv[optind];
	return -1;
}

static const char evict_help[] =
	"Usage: kvpool [OPTIONS] evict [--ns NAME] [--max K]\n"
	"Push cached pages (published, no lease) out of the pool, coldest first,\n"
	"to the NVMe tier where there is one. Needs admin rights.\n"
	"  -n, --ns=NAME   only this namespace (default: all)\n"
	"  -m, --max=K     at most K pages (default: every cached page)\n";

int cmd_evict(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_LONGOPTS,
		{ "ns", required_argument, NULL, 'n' },
		{ "max", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	const char *ns = NULL;
	uint64_t max = 0;
	kvp_client *c;
	int o, rc;

	optind = 0;
	while ((o = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS "n:m:", longopts,
				NULL)) != -1) {
		switch (o) {
		case 'n':
			ns = optarg;
			break;
		case 'm':
			if (!cli_parse_u64(optarg, &max) || max == 0)
				return cli_usage_error(argv[0], "--max: '%s' is not a count of "
						       "1 or more", optarg);
			break;
		default:
			switch (cli_common_opt(cli, o, optarg)) {
			case 1:
				fputs(evict_help, stdout);
				return CLI_OK;
			case -1:
				return cli_usage_error(argv[0], "bad option");
			}
		}
	}
	if (optind < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind]);
	if (cli_connect(cli, &c) < 0)
		return CLI_ERR;
	rc = kvp_evict(c, ns, max);
	kvp_close(c);
	if (rc < 0)
		return cli_fail("evict", rc);
	if (cli->json) {
		printf("{\"evicted\":%d,\"namespace\":", rc);
		if (ns)
			cli_json_str(stdout, ns);
		else
			printf("null");
		printf("}\n");
	} else {
		printf("evicted %d cached page%s%s%s\n", rc, rc == 1 ? "" : "s",
		       ns ? " of namespace " : "", ns ? ns : "");
	}
	return CLI_OK;
}

int cmd_disconnect(struct cli *cli, int argc, char **argv)
{
	const char *arg = NULL;
	kvp_client *c;
	uint64_t id;
	int rc;

	rc = one_arg(cli, argc, argv, "client (kvpool clients lists their ids)",
		     "Usage: kvpool [OPTIONS] disconnect CLIENT\n"
		     "Close the connection of client id CLIENT (kvpool clients lists\n"
		     "them); the daemon drops every lease it held. Needs admin rights.\n",
		     &arg);
	if (rc >= 0)
		return rc;
	if (!cli_parse_u64(arg, &id) || id == 0)
		return cli_usage_error(argv[0], "'%s' is not a client id (kvpool clients "
				       "lists them)", arg);
	if (cli_connect(cli, &c) < 0)
		return CLI_ERR;
	rc = kvp_disconnect(c, id);
	kvp_close(c);
	if (rc < 0) {
		char what[48];

		snprintf(what, sizeof(what), "disconnect %" PRIu64, id);
		return cli_fail(what, rc);
	}
	if (cli->json)
		printf("{\"disconnected\":%" PRIu64 "}\n", id);
	else
		printf("disconnected client %" PRIu64 "\n", id);
	return CLI_OK;
}

static const char drop_help[] =
	"Usage: kvpool [OPTIONS] drop [--force] NAMESPACE\n"
	"Forget a namespace that no client uses: its pages, slabs and tier file.\n"
	"A namespace with clients is refused (kvpool clients lists them). Needs\n"
	"admin rights.\n"
	"  -f, --force     drop it even so: its clients are disconnected, each told\n"
	"                  that its namespace was dropped\n";

int cmd_drop(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_LONGOPTS,
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	const char *ns = NULL;
	bool force = false;
	kvp_client *c;
	int o, rc;

	optind = 0;
	while ((o = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS "f", longopts, NULL)) != -1) {
		if (o == 'f') {
			force = true;
			continue;
		}
		switch (cli_common_opt(cli, o, optarg)) {
		case 1:
			fputs(drop_help, stdout);
			return CLI_OK;
		case -1:
			return cli_usage_error(argv[0], "bad option");
		}
	}
	if (optind >= argc)
		return cli_usage_error(argv[0], "which namespace (kvpool namespaces lists them)?");
	if (optind + 1 < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind + 1]);
	ns = argv[optind];
	if (cli_connect(cli, &c) < 0)
		return CLI_ERR;
	rc = force ? kvp_drop_namespace(c, ns) : kvp_drop_unused_namespace(c, ns);
	kvp_close(c);
	if (rc < 0) {
		char what[96];

		snprintf(what, sizeof(what), "drop %.80s", ns);
		return cli_fail(what, rc);
	}
	if (cli->json) {
		printf("{\"dropped\":");
		cli_json_str(stdout, ns);
		printf("}\n");
	} else {
		printf("dropped namespace %s\n", ns);
	}
	return CLI_OK;
}
