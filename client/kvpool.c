/* SPDX-License-Identifier: MIT */
/*
 * kvpool.c - the admin CLI: shows and steers a running kvpoold.
 *
 * Talks to the daemon through libkvpool over the daemon's socket. Every
 * command prints for people by default and JSON with --json.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"

struct cli {
	const char *socket_path;	/* NULL: $KVPOOL_SOCKET or the default */
	bool json;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvpool [--socket PATH] [--json] COMMAND\n"
		"Show and steer a running kvpoold.\n"
		"\n"
		"Commands:\n"
		"  status          daemon, backend, clients, pages by state and the\n"
		"                  conservation check\n"
		"\n"
		"Options:\n"
		"  -s, --socket=PATH  the daemon's socket (default: $KVPOOL_SOCKET, else\n"
		"                     " KVP_SOCKET_DEFAULT ")\n"
		"  -j, --json         machine-readable output\n"
		"  -h, --help         show this help and exit\n"
		"  -V, --version      show the version and exit\n"
		"\n"
		"Exit status: 0 success, 1 the daemon could not be reached or refused,\n"
		"2 bad usage, 3 the pool's page counts do not add up. See kvpool(1).\n");
}

static const char *backend_name(uint32_t b)
{
	switch (b) {
	case KVP_BACKEND_HOST:
		return "host";
	case KVP_BACKEND_CUDA:
		return "cuda";
	}
	return "none";
}

static int connect_or_explain(const struct cli *cli, struct kvp_client **c)
{
	const char *path = cli->socket_path;
	int rc;

	rc = kvp_connect(path, c);
	if (rc < 0) {
		if (!path)
			path = getenv("KVPOOL_SOCKET");
		if (!path || !*path)
			path = KVP_SOCKET_DEFAULT;
		fprintf(stderr,
			"kvpool: cannot connect to kvpoold at %s: %s\n"
			"Is kvpoold running? Start it, or name its socket with --socket "
			"or KVPOOL_SOCKET.\n", path, kvp_strerror(rc));
	}
	return rc;
}

static int cmd_status(const struct cli *cli)
{
	struct kvp_wire_stats st;
	struct kvp_client *c;
	uint64_t sum, up;
	bool ok;
	int rc;

	if (connect_or_explain(cli, &c) < 0)
		return 1;
	rc = kvp_stats(c, &st);
	kvp_close(c);
	if (rc < 0) {
		fprintf(stderr, "kvpool: status: %s\n", kvp_strerror(rc));
		return 1;
	}
	sum = st.pages_free + st.pages_leased + st.pages_cached +
	      st.pages_spilled + st.pages_inflight;
	ok = sum == st.pages_total;
	up = st.uptime_ms / 1000;

	if (cli->json) {
		printf("{\"version\":\"%s\",\"pid\":%" PRIu32 ",\"backend\":\"%s\","
		       "\"uptime_ms\":%" PRIu64 ",\"clients\":%" PRIu32
		       ",\"max_clients\":%" PRIu32 ",\"connections_total\":%" PRIu64
		       ",\"connections_refused\":%" PRIu64
		       ",\"requests_total\":%" PRIu64 ",\"protocol_errors\":%" PRIu64
		       ",\"page_size\":%" PRIu64 ",\"pages\":{\"total\":%" PRIu64
		       ",\"free\":%" PRIu64 ",\"leased\":%" PRIu64 ",\"cached\":%" PRIu64
		       ",\"spilled\":%" PRIu64 ",\"inflight\":%" PRIu64 "},"
		       "\"conservation_ok\":%s}\n",
		       st.version, st.pid, backend_name(st.backend), st.uptime_ms,
		       st.clients, st.max_clients, st.connections_total,
		       st.connections_refused, st.requests_total, st.protocol_errors,
		       st.page_size, st.pages_total, st.pages_free, st.pages_leased,
		       st.pages_cached, st.pages_spilled, st.pages_inflight,
		       ok ? "true" : "false");
	} else {
		printf("daemon        kvpoold %s, pid %" PRIu32 ", up %" PRIu64 "h%02" PRIu64
		       "m%02" PRIu64 "s\n", st.version, st.pid, up / 3600,
		       up / 60 % 60, up % 60);
		printf("backend       %s%s\n", backend_name(st.backend),
		       st.backend == KVP_BACKEND_NONE ? " (no page pool configured)" : "");
		printf("clients       %" PRIu32 " of %" PRIu32 " (%" PRIu64
		       " connections since start, %" PRIu64 " refused)\n",
		       st.clients, st.max_clients, st.connections_total,
		       st.connections_refused);
		printf("requests      %" PRIu64 " (%" PRIu64 " protocol errors)\n",
		       st.requests_total, st.protocol_errors);
		printf("pages         %" PRIu64 " total: %" PRIu64 " free, %" PRIu64
		       " leased, %" PRIu64 " cached, %" PRIu64 " spilled, %" PRIu64
		       " in flight\n", st.pages_total, st.pages_free, st.pages_leased,
		       st.pages_cached, st.pages_spilled, st.pages_inflight);
		printf("conservation  %s (free + leased + cached + spilled + in flight "
		       "%s total)\n", ok ? "ok" : "VIOLATED", ok ? "=" : "!=");
	}
	if (!ok)
		fprintf(stderr, "kvpool: page counts add up to %" PRIu64 ", not %" PRIu64
			": a kvpoold bug; please report it with `kvpool --json status`\n",
			sum, st.pages_total);
	return ok ? 0 : 3;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli cli = { 0 };
	const char *cmd;
	int c;

	while ((c = getopt_long(argc, argv, "+s:jhV", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			cli.socket_path = optarg;
			break;
		case 'j':
			cli.json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvpool %s (libkvpool %s)\n", PACKAGE_VERSION, kvp_version());
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "kvpool: no command given\n");
		usage(stderr);
		return 2;
	}
	cmd = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, "kvpool: %s: unexpected argument '%s'\n", cmd, argv[optind]);
		return 2;
	}
	if (strcmp(cmd, "status") == 0)
		return cmd_status(&cli);
	fprintf(stderr, "kvpool: unknown command '%s' (kvpool --help lists them)\n", cmd);
	return 2;
}
