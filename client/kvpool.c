/* SPDX-License-Identifier: MIT */
/*
 * kvpool.c - the admin CLI: shows and steers a running kvpoold, and plans
 * KV-cache capacity without one.
 *
 * This file parses the options every command shares and hands the rest
 * to the command, one per cli_<group>.c. Every command prints for people
 * by default and JSON with --json; exit codes are in cli.h and kvpool(1).
 */
#include <stdio.h>
#include <string.h>

#include "client/cli.h"

static const struct command {
	const char *name;
	cli_cmd_fn *fn;
	const char *args, *what;
} commands[] = {
	{ "status", cmd_status, "", "daemon, pool, pages by state, the conservation check" },
	{ "clients", cmd_clients, "", "connections: id, pid, uid, name, namespace, leases" },
	{ "namespaces", cmd_namespaces, "", "geometry, page size, pages by state, hit rate,\n"
	  "      pinned quota, key scheme, tier" },
	{ "pages", cmd_pages, " [--ns N] [--state S] [--client C] [--limit K]",
	  "one line per page" },
	{ "prefixes", cmd_prefixes, " [--top K] [--ns N]", "the most hit prefix blocks" },
	{ "evict", cmd_evict, " [--ns N] [--max K]", "admin: push cached pages out of the pool" },
	{ "disconnect", cmd_disconnect, " CLIENT", "admin: close a client's connection" },
	{ "drop", cmd_drop, " [--force] NAMESPACE", "admin: forget an unused namespace" },
	{ "metrics", cmd_metrics, "", "Prometheus text exposition of every counter" },
	{ "top", cmd_top, " [--count N]", "live view, every second until q or Ctrl-C" },
	{ "plan", cmd_plan, " --model M | --list ...", "KV-cache capacity planner (no daemon)" },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	size_t i;

	fprintf(f,
		"Usage: kvpool [--socket PATH] [--json] [--bytes] COMMAND [ARGS]\n"
		"Show and steer a running kvpoold; plan KV-cache capacity.\n"
		"\n"
		"Commands:\n");
	for (i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %s%s\n      %s\n", commands[i].name, commands[i].args,
			commands[i].what);
	fprintf(f,
		"\n"
		"Options (before or after the command):\n"
		"  -s, --socket=PATH  the daemon's socket (default: $KVPOOL_SOCKET, else\n"
		"                     " KVP_SOCKET_DEFAULT ")\n"
		"  -j, --json         machine-readable output\n"
		"      --bytes        exact byte counts instead of KiB, MiB, GiB\n"
		"  -h, --help         show this help (or a command's: kvpool COMMAND --help)\n"
		"  -V, --version      show the version and exit\n"
		"\n"
		"Exit status: 0 success, 1 the daemon could not be reached or refused,\n"
		"2 bad usage, 3 the pool's page counts do not add up. See kvpool(1).\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_LONGOPTS,
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli cli = { 0 };
	const char *cmd;
	size_t i;
	int c;

	while ((c = getopt_long(argc, argv, "+" CLI_COMMON_SHORTOPTS "V", longopts,
				NULL)) != -1) {
		if (c == 'V') {
			printf("kvpool %s (libkvpool %s)\n", PACKAGE_VERSION, kvp_version());
			return CLI_OK;
		}
		switch (cli_common_opt(&cli, c, optarg)) {
		case 1:
			usage(stdout);
			return CLI_OK;
		case -1:
			usage(stderr);
			return CLI_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "kvpool: no command given\n");
		usage(stderr);
		return CLI_USAGE;
	}
	cmd = argv[optind];
	for (i = 0; i < NCOMMANDS; i++)
		if (strcmp(cmd, commands[i].name) == 0)
			return commands[i].fn(&cli, argc - optind, argv + optind);
	fprintf(stderr, "kvpool: unknown command '%s' (kvpool --help lists them)\n", cmd);
	return CLI_USAGE;
}
