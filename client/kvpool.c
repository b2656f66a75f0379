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

static int connect_or_explain(const struct cli *cli, kvp_client **c)
{
	const char *path = cli->socket_path;
	int rc;

	rc = kvp_connect(path, NULL, NULL, c);
	if (rc < 0) {
		if (!path)
			path = getenv("KVPOOL_SOCKET");
		if (!path || !*path)
			path = KVP_SOCKET_DEFAULT;
		fprintf(stderr,
			"kvpool: cannot connect to kvpoold at %s: %s%s%s\n"
			"Is kvpoold running? Start it, or name its socket with --socket "
			"or KVPOOL_SOCKET.\n", path, kvp_strerror(rc),
			*kvp_last_error() ? ": " : "", kvp_last_error());
	}
	return rc;
}

/* Page counts by state, as STATS reports them for the pool or a namespace. */
struct page_counts {
	uint64_t total, free, private_, shared, cached, spilled, inflight;
};

static uint64_t counts_sum(const struct page_counts *p)
{
	return p->free + p->private_ + p->shared + p->cached + p->spilled + p->inflight;
}

static void print_counts_json(const struct page_counts *p)
{
	printf("{\"total\":%" PRIu64 ",\"free\":%" PRIu64 ",\"private\":%" PRIu64
	       ",\"shared\":%" PRIu64 ",\"cached\":%" PRIu64 ",\"spilled\":%" PRIu64
	       ",\"inflight\":%" PRIu64 "}", p->total, p->free, p->private_,
	       p->shared, p->cached, p->spilled, p->inflight);
}

static void print_counts(const char *label, const struct page_counts *p)
{
	printf("%-13s %" PRIu64 " total: %" PRIu64 " free, %" PRIu64 " private, %"
	       PRIu64 " shared, %" PRIu64 " cached, %" PRIu64 " spilled, %" PRIu64
	       " in flight\n", label, p->total, p->free, p->private_, p->shared,
	       p->cached, p->spilled, p->inflight);
}

static void print_prefix_json(const struct kvp_wire_prefix_stats *p)
{
	printf("{\"acquires\":%" PRIu64 ",\"hits\":%" PRIu64 ",\"misses\":%" PRIu64
	       ",\"hit_tokens\":%" PRIu64 ",\"publishes\":%" PRIu64 ",\"dedups\":%"
	       PRIu64 ",\"cows\":%" PRIu64 ",\"evictions\":%" PRIu64 ",\"pinned\":%"
	       PRIu64 "}", p->acquires, p->hits, p->misses, p->hit_tokens, p->publishes,
	       p->dedups, p->cows, p->evictions, p->pinned);
}

/* print_prefix() - one line of sharing figures, with the hit rate. */
static void print_prefix(const char *label, const struct kvp_wire_prefix_stats *p)
{
	uint64_t asked = p->hits + p->misses;

	printf("%-13s ", label);
	if (asked)
		printf("hit rate %.1f%% (%" PRIu64 " of %" PRIu64 " blocks, %" PRIu64
		       " tokens)", 100.0 * (double)p->hits / (double)asked, p->hits, asked,
		       p->hit_tokens);
	else
		printf("hit rate - (no lookups yet)");
	printf(", %" PRIu64 " published, %" PRIu64 " deduplicated, %" PRIu64
	       " copied, %" PRIu64 " evicted, %" PRIu64 " pinned\n", p->publishes,
	       p->dedups, p->cows, p->evictions, p->pinned);
}

static void print_tier_json(const struct kvp_wire_tier_stats *t)
{
	printf("{\"slots\":%" PRIu64 ",\"used\":%" PRIu64 ",\"spills\":%" PRIu64
	       ",\"restores\":%" PRIu64 ",\"checksum_failures\":%" PRIu64
	       ",\"io_errors\":%" PRIu64 ",\"dropped\":%" PRIu64
	       ",\"restore_us_mean\":%" PRIu64 ",\"restore_us_max\":%" PRIu64
	       ",\"writing\":%" PRIu64 "}", t->slots, t->used, t->spills, t->restores,
	       t->checksum_failures, t->io_errors, t->dropped, t->restore_us_mean,
	       t->restore_us_max, t->writing);
}

/* print_tier() - the NVMe tier in one line, if there is one. */
static void print_tier(const char *label, const struct kvp_wire_tier_stats *t)
{
	if (!t->slots)
		return;
	printf("%-13s %" PRIu64 " of %" PRIu64 " slots used, %" PRIu64 " spilled, %"
	       PRIu64 " restored (mean %" PRIu64 " us, max %" PRIu64 " us), %" PRIu64
	       " checksum failures, %" PRIu64 " I/O errors, %" PRIu64 " dropped, %"
	       PRIu64 " writes in flight\n", label, t->used, t->slots, t->spills,
	       t->restores, t->restore_us_mean, t->restore_us_max, t->checksum_failures,
	       t->io_errors, t->dropped, t->writing);
}

static const char *scheme_name(uint32_t k)
{
	return k == KVP_WIRE_KEYS_FAST ? "fast" : k == KVP_WIRE_KEYS_VLLM_SHA256_CBOR ?
	       "vllm-sha256-cbor" : "?";
}

static const char *dtype_name(uint32_t d)
{
	static const char *const names[] = { "?", "f16", "bf16", "f32", "fp8" };

	return d < 5 ? names[d] : "?";
}

#define MAX_NS 256

static int cmd_status(const struct cli *cli)
{
	static kvp_ns_stats_t ns[MAX_NS];
	struct page_counts pc, nc;
	kvp_stats_t st;
	kvp_client *c;
	uint64_t up;
	int nns, i;
	bool ok;

	if (connect_or_explain(cli, &c) < 0)
		return 1;
	nns = kvp_stats(c, &st, ns, MAX_NS);
	kvp_close(c);
	if (nns < 0) {
		fprintf(stderr, "kvpool: status: %s\n", kvp_strerror(nns));
		return 1;
	}
	if (nns > MAX_NS)
		nns = MAX_NS;
	pc = (struct page_counts){ st.pages_total, st.pages_free, st.pages_private,
				   st.pages_shared, st.pages_cached, st.pages_spilled,
				   st.pages_inflight };
	/* the numbers add up, and the daemon's recount of every page agrees */
	ok = counts_sum(&pc) == pc.total && (st.flags & KVP_STATS_F_CONSERVED);
	up = st.uptime_ms / 1000;

	if (cli->json) {
		printf("{\"version\":\"%s\",\"pid\":%" PRIu32 ",\"backend\":\"%s\","
		       "\"uptime_ms\":%" PRIu64 ",\"clients\":%" PRIu32
		       ",\"max_clients\":%" PRIu32 ",\"connections_total\":%" PRIu64
		       ",\"connections_refused\":%" PRIu64
		       ",\"requests_total\":%" PRIu64 ",\"protocol_errors\":%" PRIu64
		       ",\"allocs\":%" PRIu64 ",\"releases\":%" PRIu64
		       ",\"errors\":{\"nospc\":%" PRIu64 ",\"stale\":%" PRIu64
		       ",\"limit\":%" PRIu64 ",\"inval\":%" PRIu64 ",\"mismatch\":%" PRIu64
		       "},\"pool_bytes\":%" PRIu64 ",\"slab_bytes\":%" PRIu64
		       ",\"slabs\":%" PRIu64 ",\"pages\":",
		       st.version, st.pid, backend_name(st.backend), st.uptime_ms,
		       st.clients, st.max_clients, st.connections_total,
		       st.connections_refused, st.requests_total, st.protocol_errors,
		       st.allocs, st.releases, st.errors_nospc, st.errors_stale,
		       st.errors_limit, st.errors_inval, st.errors_mismatch,
		       st.pool_bytes, st.slab_bytes, st.slabs);
		print_counts_json(&pc);
		printf(",\"prefix\":");
		print_prefix_json(&st.prefix);
		printf(",\"nvme\":");
		print_tier_json(&st.nvme);
		printf(",\"conservation_ok\":%s,\"namespaces\":[", ok ? "true" : "false");
		for (i = 0; i < nns; i++) {
			nc = (struct page_counts){ ns[i].pages_total, ns[i].pages_free,
				ns[i].pages_private, ns[i].pages_shared, ns[i].pages_cached,
				ns[i].pages_spilled, ns[i].pages_inflight };
			printf("%s{\"name\":\"%s\",\"model\":\"%s\",\"layers\":%" PRIu32
			       ",\"kv_heads\":%" PRIu32 ",\"head_dim\":%" PRIu32
			       ",\"block_tokens\":%" PRIu32 ",\"dtype\":\"%s\",\"clients\":%"
			       PRIu32 ",\"slabs\":%" PRIu32 ",\"page_bytes\":%" PRIu64
			       ",\"key_scheme\":\"%s\",\"pinned_quota\":%" PRIu32 ",\"pages\":",
			       i ? "," : "", ns[i].name, ns[i].model,
			       ns[i].layers, ns[i].kv_heads, ns[i].head_dim,
			       ns[i].block_tokens, dtype_name(ns[i].dtype), ns[i].clients,
			       ns[i].slabs, ns[i].page_bytes, scheme_name(ns[i].key_scheme),
			       ns[i].pinned_quota);
			print_counts_json(&nc);
			printf(",\"prefix\":");
			print_prefix_json(&ns[i].prefix);
			printf(",\"nvme\":");
			print_tier_json(&ns[i].nvme);
			printf("}");
		}
		printf("]}\n");
	} else {
		printf("daemon        kvpoold %s, pid %" PRIu32 ", up %" PRIu64 "h%02" PRIu64
		       "m%02" PRIu64 "s\n", st.version, st.pid, up / 3600,
		       up / 60 % 60, up % 60);
		printf("backend       %s, pool %" PRIu64 " MiB in slabs of %" PRIu64
		       " MiB, %" PRIu64 " slabs in use\n", backend_name(st.backend),
		       st.pool_bytes >> 20, st.slab_bytes >> 20, st.slabs);
		printf("clients       %" PRIu32 " of %" PRIu32 " (%" PRIu64
		       " connections since start, %" PRIu64 " refused)\n",
		       st.clients, st.max_clients, st.connections_total,
		       st.connections_refused);
		printf("requests      %" PRIu64 " (%" PRIu64 " pages allocated, %" PRIu64
		       " released; errors: %" PRIu64 " no space, %" PRIu64 " stale, %" PRIu64
		       " limit, %" PRIu64 " invalid, %" PRIu64 " mismatch, %" PRIu64
		       " protocol)\n", st.requests_total, st.allocs, st.releases,
		       st.errors_nospc, st.errors_stale, st.errors_limit, st.errors_inval,
		       st.errors_mismatch, st.protocol_errors);
		print_counts("pages", &pc);
		print_prefix("sharing", &st.prefix);
		print_tier("nvme tier", &st.nvme);
		printf("conservation  %s (free + private + shared + cached + spilled + "
		       "in flight %s total)\n", ok ? "ok" : "VIOLATED", ok ? "=" : "!=");
		for (i = 0; i < nns; i++) {
			char label[80];

			nc = (struct page_counts){ ns[i].pages_total, ns[i].pages_free,
				ns[i].pages_private, ns[i].pages_shared, ns[i].pages_cached,
				ns[i].pages_spilled, ns[i].pages_inflight };
			printf("namespace     %s: %s, %" PRIu32 " layers x %" PRIu32
			       " kv heads x %" PRIu32 " head dim x %" PRIu32 " tokens, %s, "
			       "%" PRIu64 " bytes per page, keys %s, clients %" PRIu32 "\n",
			       ns[i].name, ns[i].model, ns[i].layers, ns[i].kv_heads,
			       ns[i].head_dim, ns[i].block_tokens, dtype_name(ns[i].dtype),
			       ns[i].page_bytes, scheme_name(ns[i].key_scheme), ns[i].clients);
			snprintf(label, sizeof(label), "  pages");
			print_counts(label, &nc);
			print_prefix("  sharing", &ns[i].prefix);
			print_tier("  nvme tier", &ns[i].nvme);
		}
	}
	if (!ok)
		fprintf(stderr, "kvpool: page counts add up to %" PRIu64 " of %" PRIu64
			"%s: a kvpoold bug; please report it with `kvpool --json status`\n",
			counts_sum(&pc), pc.total, (st.flags & KVP_STATS_F_CONSERVED) ? "" :
			", and the daemon's recount of every page disagrees");
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
