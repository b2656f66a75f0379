/* SPDX-License-Identifier: MIT */
/*
 * cli_status.c - `kvpool status` (the daemon, its pool and the
 * conservation check) and `kvpool namespaces` (one row per namespace).
 * Both read one STATS reply.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "client/cli.h"

/* Page counts by state, as STATS reports them for the pool or a namespace. */
struct page_counts {
	uint64_t total, free, private_, shared, cached, spilled, inflight;
};

#define COUNTS_OF(s) ((struct page_counts){ (s).pages_total, (s).pages_free, \
	(s).pages_private, (s).pages_shared, (s).pages_cached, (s).pages_spilled, \
	(s).pages_inflight })

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

/* print_tier() - a tier in one line, if there is one (the host tier has
 * no checksums and nothing in flight). */
static void print_tier(const char *label, const struct kvp_wire_tier_stats *t, bool host)
{
	if (!t->slots)
		return;
	printf("%-13s %" PRIu64 " of %" PRIu64 " slots used, %" PRIu64 " spilled, %"
	       PRIu64 " restored (mean %" PRIu64 " us, max %" PRIu64 " us), ", label,
	       t->used, t->slots, t->spills, t->restores, t->restore_us_mean,
	       t->restore_us_max);
	if (host)
		printf("%" PRIu64 " copy errors, %" PRIu64 " dropped\n", t->io_errors,
		       t->dropped);
	else
		printf("%" PRIu64 " checksum failures, %" PRIu64 " I/O errors, %" PRIu64
		       " dropped, %" PRIu64 " writes in flight\n", t->checksum_failures,
		       t->io_errors, t->dropped, t->writing);
}

static void print_ns_remote_json(const struct kvp_wire_ns_remote_stats *r)
{
	printf("{\"fetches\":%" PRIu64 ",\"restored\":%" PRIu64 ",\"sent\":%" PRIu64
	       ",\"skipped_slow\":%" PRIu64 "}", r->fetches, r->restored, r->sent,
	       r->skipped_slow);
}

static void print_remote_json(const struct kvp_wire_remote_stats *r)
{
	printf("{\"enabled\":%s,\"up\":%s,\"nodes\":%" PRIu64 ",\"nodes_up\":%" PRIu64
	       ",\"slots\":%" PRIu64 ",\"gets\":%" PRIu64 ",\"hits\":%" PRIu64
	       ",\"misses\":%" PRIu64 ",\"corrupt\":%" PRIu64 ",\"forged\":%" PRIu64
	       ",\"errors\":%" PRIu64
	       ",\"skipped\":%" PRIu64 ",\"puts\":%" PRIu64 ",\"put_errors\":%" PRIu64
	       ",\"put_skipped\":%" PRIu64 ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%"
	       PRIu64 ",\"redirects\":%" PRIu64 ",\"map_loads\":%" PRIu64
	       ",\"connects\":%" PRIu64 ",\"disconnects\":%" PRIu64 ",\"inflight\":%"
	       PRIu64 ",\"latency_us\":%" PRIu64 ",\"bandwidth\":%" PRIu64
	       ",\"fetches\":%" PRIu64 ",\"restored\":%" PRIu64 ",\"sent\":%" PRIu64
	       ",\"skipped_slow\":%" PRIu64 "}", r->enabled ? "true" : "false",
	       r->up ? "true" : "false", r->nodes, r->nodes_up, r->slots, r->gets, r->hits,
	       r->misses, r->corrupt, r->forged, r->errors, r->skipped, r->puts, r->put_errors,
	       r->put_skipped, r->bytes_in, r->bytes_out, r->redirects, r->map_loads,
	       r->connects, r->disconnects, r->inflight, r->latency_us, r->bandwidth,
	       r->fetches, r->restored, r->sent, r->skipped_slow);
}

/* print_remote() - the remote tier in two lines, if there is one. */
static void print_remote(const struct kvp_wire_remote_stats *r)
{
	if (!r->enabled)
		return;
	printf("remote tier   %s, %" PRIu64 " of %" PRIu64 " masters connected, %" PRIu64
	       " slots; round trip %" PRIu64 " us, %.1f MB/s per node; %" PRIu64
	       " in flight\n", r->up ? "serving" : "UNREACHABLE", r->nodes_up, r->nodes,
	       r->slots, r->latency_us, (double)r->bandwidth / 1e6, r->inflight);
	printf("              %" PRIu64 " fetches: %" PRIu64 " GETs, %" PRIu64 " hits, %"
	       PRIu64 " misses, %" PRIu64 " corrupt (%" PRIu64 " forged), %" PRIu64
	       " errors, %" PRIu64
	       " not sent, %" PRIu64 " blocks restored, %" PRIu64 " skipped as slower; "
	       "%" PRIu64 " pages sent (%" PRIu64 " failed, %" PRIu64 " not sent); %" PRIu64
	       " redirects\n", r->fetches, r->gets, r->hits, r->misses, r->corrupt,
	       r->forged, r->errors, r->skipped, r->restored, r->skipped_slow, r->puts, r->put_errors,
	       r->put_skipped, r->redirects);
}

/* print_ns_json() - one namespace record as a JSON object. */
static void print_ns_json(const kvp_ns_stats_t *n)
{
	struct page_counts nc = COUNTS_OF(*n);
	uint64_t asked = n->prefix.hits + n->prefix.misses;

	printf("{\"name\":");
	cli_json_str(stdout, n->name);
	printf(",\"model\":");
	cli_json_str(stdout, n->model);
	printf(",\"id\":%" PRIu32 ",\"layers\":%" PRIu32 ",\"kv_heads\":%" PRIu32
	       ",\"head_dim\":%" PRIu32 ",\"head_dim_v\":%" PRIu32 ",\"block_tokens\":%" PRIu32
	       ",\"dtype\":\"%s\",\"clients\":%" PRIu32 ",\"slabs\":%" PRIu32 ",\"page_bytes\":%"
	       PRIu64 ",\"page_stride\":%" PRIu64 ",\"key_scheme\":\"%s\",\"pinned_quota\":%"
	       PRIu32 ",\"backend\":\"%s\",\"state\":\"%s\",\"hit_rate\":", n->id,
	       n->layers, n->kv_heads, n->head_dim, stats_v_dim(n), n->block_tokens,
	       stats_dtype_name(n->dtype),
	       n->clients, n->slabs, n->page_bytes, n->page_stride,
	       stats_scheme_name(n->key_scheme), n->pinned_quota, stats_backend_name(n->backend),
	       n->state == KVP_WIRE_NS_PREPARING ? "preparing" : "ready");
	if (asked)
		printf("%.4f", (double)n->prefix.hits / (double)asked);
	else
		printf("null");
	printf(",\"pages\":");
	print_counts_json(&nc);
	printf(",\"prefix\":");
	print_prefix_json(&n->prefix);
	printf(",\"nvme\":");
	print_tier_json(&n->nvme);
	printf(",\"host\":");
	print_tier_json(&n->host);
	printf(",\"remote\":");
	print_ns_remote_json(&n->remote);
	printf("}");
}

static void status_json(const kvp_stats_t *st, const kvp_ns_stats_t *ns, int nns,
			bool ok)
{
	struct page_counts pc = COUNTS_OF(*st);
	int i;

	printf("{\"version\":");
	cli_json_str(stdout, st->version);
	printf(",\"pid\":%" PRIu32 ",\"backend\":\"%s\","
	       "\"uptime_ms\":%" PRIu64 ",\"clients\":%" PRIu32
	       ",\"max_clients\":%" PRIu32 ",\"connections_total\":%" PRIu64
	       ",\"connections_refused\":%" PRIu64 ",\"closed_output\":%" PRIu64
	       ",\"closed_idle\":%" PRIu64 ",\"requests_denied\":%" PRIu64
	       ",\"requests_total\":%" PRIu64 ",\"protocol_errors\":%" PRIu64
	       ",\"allocs\":%" PRIu64 ",\"releases\":%" PRIu64
	       ",\"errors\":{\"nospc\":%" PRIu64 ",\"stale\":%" PRIu64
	       ",\"limit\":%" PRIu64 ",\"inval\":%" PRIu64 ",\"mismatch\":%" PRIu64
	       "},\"pool_bytes\":%" PRIu64 ",\"slab_bytes\":%" PRIu64
	       ",\"slabs\":%" PRIu64 ",\"max_slabs\":%" PRIu64 ",\"host_pool_bytes\":%"
	       PRIu64 ",\"host_slabs\":%" PRIu64 ",\"pages\":",
	       st->pid, stats_backend_name(st->backend), st->uptime_ms,
	       cli_others(st), st->max_clients, st->connections_total,
	       st->connections_refused, st->closed_output, st->closed_idle,
	       st->requests_denied, st->requests_total, st->protocol_errors, st->allocs, st->releases, st->errors_nospc, st->errors_stale,
	       st->errors_limit, st->errors_inval, st->errors_mismatch,
	       st->pool_bytes, st->slab_bytes, st->slabs, st->max_slabs,
	       st->host_pool_bytes, st->host_slabs);
	print_counts_json(&pc);
	printf(",\"prefix\":");
	print_prefix_json(&st->prefix);
	printf(",\"nvme\":");
	print_tier_json(&st->nvme);
	printf(",\"host\":");
	print_tier_json(&st->host);
	printf(",\"events\":{\"enabled\":%s,\"batches\":%" PRIu64 ",\"events\":%" PRIu64
	       ",\"dropped_batches\":%" PRIu64 ",\"dropped_events\":%" PRIu64
	       ",\"queued_bytes\":%" PRIu64 ",\"replays\":%" PRIu64 ",\"replayed\":%" PRIu64
	       "}", st->events.enabled ? "true" : "false", st->events.batches,
	       st->events.events, st->events.dropped_batches, st->events.dropped_events,
	       st->events.queued_bytes, st->events.replays, st->events.replayed);
	printf(",\"remote\":");
	print_remote_json(&st->remote);
	printf(",\"conservation_ok\":%s,\"namespaces\":[", ok ? "true" : "false");
	for (i = 0; i < nns; i++) {
		if (i)
			printf(",");
		print_ns_json(&ns[i]);
	}
	printf("]}\n");
}

static void status_text(const struct cli *cli, const kvp_stats_t *st,
			const kvp_ns_stats_t *ns, int nns, bool ok)
{
	struct page_counts pc = COUNTS_OF(*st), nc;
	char a[CLI_FMT_MAX], b[CLI_FMT_MAX], dims[32];
	uint64_t up = st->uptime_ms / 1000;
	int i;

	printf("daemon        kvpoold %s, pid %" PRIu32 ", up %" PRIu64 "h%02" PRIu64
	       "m%02" PRIu64 "s\n", st->version, st->pid, up / 3600, up / 60 % 60, up % 60);
	printf("backend       %s, pool %s in slabs of %s, %" PRIu64 " %s in use\n",
	       stats_backend_name(st->backend), cli_fmt_size(cli, a, st->pool_bytes),
	       cli_fmt_size(cli, b, st->slab_bytes), st->slabs,
	       st->slabs == 1 ? "slab" : "slabs");
	if (st->host_pool_bytes)
		printf("host pages    %s for namespaces that ask for them, %" PRIu64 " %s in use\n",
		       cli_fmt_size(cli, a, st->host_pool_bytes), st->host_slabs,
		       st->host_slabs == 1 ? "slab" : "slabs");
	printf("clients       %" PRIu32 " of %" PRIu32 ", not counting this one (%" PRIu64
	       " %s since start, %" PRIu64 " refused, %" PRIu64
	       " disconnected with replies unread, %" PRIu64 " idle)\n",
	       cli_others(st), st->max_clients, st->connections_total,
	       st->connections_total == 1 ? "connection" : "connections",
	       st->connections_refused, st->closed_output, st->closed_idle);
	printf("requests      %" PRIu64 " (%" PRIu64 " pages allocated, %" PRIu64
	       " released; errors: %" PRIu64 " no space, %" PRIu64 " stale, %" PRIu64
	       " limit, %" PRIu64 " invalid, %" PRIu64 " mismatch, %" PRIu64
	       " protocol, %" PRIu64 " denied)\n", st->requests_total, st->allocs,
	       st->releases, st->errors_nospc, st->errors_stale, st->errors_limit,
	       st->errors_inval, st->errors_mismatch, st->protocol_errors,
	       st->requests_denied);
	print_counts("pages", &pc);
	print_prefix("sharing", &st->prefix);
	print_tier("host tier", &st->host, true);
	print_tier("nvme tier", &st->nvme, false);
	if (st->events.enabled)
		printf("kv events     %" PRIu64 " batches (%" PRIu64 " events) sent, %" PRIu64
		       " dropped (%" PRIu64 " events), %" PRIu64 " bytes queued, %" PRIu64
		       " replays\n", st->events.batches, st->events.events,
		       st->events.dropped_batches, st->events.dropped_events,
		       st->events.queued_bytes, st->events.replays);
	print_remote(&st->remote);
	printf("conservation  %s (free + private + shared + cached + spilled + "
	       "in flight %s total)\n", ok ? "ok" : "VIOLATED", ok ? "=" : "!=");
	for (i = 0; i < nns; i++) {
		nc = COUNTS_OF(ns[i]);
		printf("namespace     %s: %s, %" PRIu32 " layers x %" PRIu32
		       " kv heads x %s head dim x %" PRIu32 " tokens, %s, "
		       "%s per page, keys %s, clients %" PRIu32 "%s%s\n",
		       ns[i].name, ns[i].model, ns[i].layers, ns[i].kv_heads,
		       stats_head_dims(&ns[i], dims, sizeof(dims)), ns[i].block_tokens,
		       stats_dtype_name(ns[i].dtype),
		       cli_fmt_size(cli, a, ns[i].page_bytes),
		       stats_scheme_name(ns[i].key_scheme), ns[i].clients,
		       ns[i].backend != st->backend ? ", host pages" : "",
		       ns[i].state == KVP_WIRE_NS_PREPARING ? ", preparing (its tier file is "
		       "being made; clients wait)" : "");
		print_counts("  pages", &nc);
		print_prefix("  sharing", &ns[i].prefix);
		print_tier("  host tier", &ns[i].host, true);
		print_tier("  nvme tier", &ns[i].nvme, false);
		if (st->remote.enabled)
			printf("  remote tier %" PRIu64 " fetches, %" PRIu64 " blocks restored, %"
			       PRIu64 " skipped as slower, %" PRIu64 " pages sent\n",
			       ns[i].remote.fetches, ns[i].remote.restored,
			       ns[i].remote.skipped_slow, ns[i].remote.sent);
	}
}

int cmd_status(struct cli *cli, int argc, char **argv)
{
	kvp_ns_stats_t *ns;
	struct page_counts pc;
	kvp_stats_t st;
	int nns, rc;
	bool ok;

	rc = cli_no_args(cli, argc, argv, "Usage: kvpool [OPTIONS] status\n"
		     "The daemon, its pool, pages by state, the conservation check and\n"
		     "each namespace. See kvpool(1).\n");
	if (rc >= 0)
		return rc;
	nns = cli_snapshot(cli, "status", &st, &ns);
	if (nns < 0)
		return CLI_ERR;
	pc = COUNTS_OF(st);
	/* the numbers add up, and the daemon's recount of every page agrees */
	ok = stats_conserved(&st);
	if (cli->json)
		status_json(&st, ns, nns, ok);
	else
		status_text(cli, &st, ns, nns, ok);
	free(ns);
	if (!ok)
		fprintf(stderr, "kvpool: page counts add up to %" PRIu64 " of %" PRIu64
			"%s: a kvpoold bug; please report it with `kvpool --json status`\n",
			counts_sum(&pc), pc.total, (st.flags & KVP_STATS_F_CONSERVED) ? "" :
			", and the daemon's recount of every page disagrees");
	return ok ? CLI_OK : CLI_CONSERVATION;
}

static void namespaces_table(const struct cli *cli, const kvp_ns_stats_t *ns, int nns)
{
	struct table *t = table_new(16, "llllrrrrrrrrrlll");
	char a[CLI_FMT_MAX], dims[32];
	int i;

	if (!t)
		return;
	table_add(t, "NAME");
	table_add(t, "MODEL");
	table_add(t, "GEOMETRY");
	table_add(t, "PAGE");
	table_add(t, "PAGES");
	table_add(t, "FREE");
	table_add(t, "PRIVATE");
	table_add(t, "SHARED");
	table_add(t, "CACHED");
	table_add(t, "INFLIGHT");
	table_add(t, "SPILLED");
	table_add(t, "HIT%%");
	table_add(t, "PINNED");
	table_add(t, "KEYS");
	table_add(t, "TIER");
	table_add(t, "CLIENTS");
	for (i = 0; i < nns; i++) {
		const kvp_ns_stats_t *n = &ns[i];

		table_add(t, "%s", n->name);
		table_add(t, "%s", n->model);
		/* layers x kv heads x head dim, tokens per page, element type */
		table_add(t, "%" PRIu32 "x%" PRIu32 "x%s/%" PRIu32 "t %s", n->layers,
			  n->kv_heads, stats_head_dims(n, dims, sizeof(dims)), n->block_tokens,
			  stats_dtype_name(n->dtype));
		table_add(t, "%s", cli_fmt_size(cli, a, n->page_bytes));
		table_add(t, "%" PRIu64, n->pages_total);
		table_add(t, "%" PRIu64, n->pages_free);
		table_add(t, "%" PRIu64, n->pages_private);
		table_add(t, "%" PRIu64, n->pages_shared);
		table_add(t, "%" PRIu64, n->pages_cached);
		table_add(t, "%" PRIu64, n->pages_inflight);
		table_add(t, "%" PRIu64, n->pages_spilled);
		table_add(t, "%s", cli_fmt_rate(a, n->prefix.hits,
						 n->prefix.hits + n->prefix.misses));
		table_add(t, "%" PRIu64 "/%" PRIu32, n->prefix.pinned, n->pinned_quota);
		table_add(t, "%s", stats_scheme_name(n->key_scheme));
		if (n->state == KVP_WIRE_NS_PREPARING)
			table_add(t, "preparing");
		else if (n->host.slots && n->nvme.slots)
			table_add(t, "host %" PRIu64 "/%" PRIu64 " nvme %" PRIu64 "/%" PRIu64,
				  n->host.used, n->host.slots, n->nvme.used, n->nvme.slots);
		else if (n->host.slots)
			table_add(t, "host %" PRIu64 "/%" PRIu64, n->host.used, n->host.slots);
		else if (n->nvme.slots)
			table_add(t, "nvme %" PRIu64 "/%" PRIu64, n->nvme.used, n->nvme.slots);
		else
			table_add(t, "-");
		table_add(t, "%" PRIu32, n->clients);
	}
	table_print(t, stdout);
	table_free(t);
}

int cmd_namespaces(struct cli *cli, int argc, char **argv)
{
	kvp_ns_stats_t *ns;
	kvp_stats_t st;
	int nns, rc, i;

	rc = cli_no_args(cli, argc, argv, "Usage: kvpool [OPTIONS] namespaces\n"
		     "One row per namespace: geometry (layers x kv heads x head dim /\n"
		     "tokens per page, dtype), page size, pages by state, hit rate,\n"
		     "pinned pages of the pinned quota (--pinned-quota %% of the pages the\n"
		     "whole pool could give the namespace, not of the PAGES its slabs\n"
		     "hold now), key scheme, tier slots used of its slots, clients.\n"
		     "See kvpool(1).\n");
	if (rc >= 0)
		return rc;
	nns = cli_snapshot(cli, "namespaces", &st, &ns);
	if (nns < 0)
		return CLI_ERR;
	if (cli->json) {
		printf("{\"namespaces\":[");
		for (i = 0; i < nns; i++) {
			if (i)
				printf(",");
			print_ns_json(&ns[i]);
		}
		printf("]}\n");
	} else if (nns == 0) {
		printf("no namespaces (a client's first kvp_connect() creates one)\n");
	} else {
		namespaces_table(cli, ns, nns);
	}
	free(ns);
	return CLI_OK;
}
