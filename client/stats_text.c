/* SPDX-License-Identifier: MIT */
/*
 * stats_text.c - STATS for people and for Prometheus, shared by `kvpool`
 * and kvpoold (whose --metrics-listen serves the same text): the names
 * of backends, dtypes and key schemes, the conservation check, and the
 * text exposition format (version 0.0.4).
 *
 * Daemon-wide figures are kvpool_<name>; a namespace's are
 * kvpool_namespace_<name>{namespace="..."}, so that summing the latter
 * never counts the former twice. Pages carry state="..." and
 * tier="pool", "host" or "nvme" (spilled); the tiers' figures come once
 * with tier="host" and once with tier="nvme".
 * The families are described by tables of field offsets below: adding a
 * STATS field is one line.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "client/stats_text.h"
#include "client/utf8.h"

bool stats_conserved(const kvp_stats_t *st)
{
	return st->pages_free + st->pages_private + st->pages_shared + st->pages_cached +
	       st->pages_spilled + st->pages_inflight == st->pages_total &&
	       (st->flags & KVP_STATS_F_CONSERVED);
}

const char *stats_backend_name(uint32_t b)
{
	return b == KVP_BACKEND_HOST ? "host" : b == KVP_BACKEND_CUDA ? "cuda" : "none";
}

const char *stats_dtype_name(uint32_t d)
{
	static const char *const names[] = { "?", "f16", "bf16", "f32", "fp8" };

	return d < 5 ? names[d] : "?";
}

uint32_t stats_v_dim(const kvp_ns_stats_t *n)
{
	return n->head_dim_v == 0 ? n->head_dim : n->head_dim_v == KVP_K_ONLY ? 0 : n->head_dim_v;
}

const char *stats_head_dims(const kvp_ns_stats_t *n, char *buf, size_t len)
{
	uint32_t v = stats_v_dim(n);

	if (v == n->head_dim)
		snprintf(buf, len, "%" PRIu32, n->head_dim);
	else if (!v)
		snprintf(buf, len, "%" PRIu32 " (K only)", n->head_dim);
	else
		snprintf(buf, len, "%" PRIu32 "/%" PRIu32, n->head_dim, v);
	return buf;
}

const char *stats_scheme_name(uint32_t k)
{
	static const char *const names[] = {
		"?", "vllm-sha256-cbor", "vllm-xxhash-cbor", "vllm-sha256", "vllm-xxhash",
	};

	return k <= KVP_WIRE_KEYS_MAX ? names[k] : "?";
}

/* One metric family read from a field of a STATS struct. */
struct family {
	const char *name;	/* after kvpool_ or kvpool_namespace_ */
	const char *type;	/* "counter" or "gauge" */
	const char *help;
	size_t off;		/* of a uint64_t or uint32_t field */
	unsigned width;		/* 8 or 4 bytes */
	double scale;		/* 0: the integer as is; else value x scale */
	bool tier;		/* of the nvme record; the host one follows it */
};

#define U64(s, f) offsetof(s, f), 8
#define U32(s, f) offsetof(s, f), 4
#define ST struct kvp_wire_stats
#define NS struct kvp_wire_ns_stats

/* The prefix-sharing and tier figures, where both structs hold them. */
#define PREFIX_FAMILIES(S) \
	{ "prefix_acquires_total", "counter", "ACQUIRE requests that look up (not the LOADs " \
	  "of what was looked up, nor PROBEs).", \
	  U64(S, prefix.acquires), 0, false }, \
	{ "prefix_hit_blocks_total", "counter", "Blocks found in the cache (full and partial).", \
	  U64(S, prefix.hits), 0, false }, \
	{ "prefix_miss_blocks_total", "counter", "Keys asked for and not found.", \
	  U64(S, prefix.misses), 0, false }, \
	{ "prefix_hit_tokens_total", "counter", "Tokens served from the cache.", \
	  U64(S, prefix.hit_tokens), 0, false }, \
	{ "prefix_publishes_total", "counter", "Pages indexed under a key.", \
	  U64(S, prefix.publishes), 0, false }, \
	{ "prefix_dedups_total", "counter", "Published keys that were already indexed.", \
	  U64(S, prefix.dedups), 0, false }, \
	{ "prefix_cows_total", "counter", "Pages copied on write.", \
	  U64(S, prefix.cows), 0, false }, \
	{ "prefix_evictions_total", "counter", "Cached pages freed for new ones.", \
	  U64(S, prefix.evictions), 0, false }, \
	{ "prefix_pinned_pages", "gauge", "Indexed pages in the pinned class.", \
	  U64(S, prefix.pinned), 0, false }, \
	{ "tier_slots", "gauge", "Capacity of the tier in pages (0: no tier).", \
	  U64(S, nvme.slots), 0, true }, \
	{ "tier_slots_used", "gauge", "Tier slots holding a page or being written.", \
	  U64(S, nvme.used), 0, true }, \
	{ "tier_spills_total", "counter", "Pages written to the tier.", \
	  U64(S, nvme.spills), 0, true }, \
	{ "tier_restores_total", "counter", "Pages read back from the tier and checked.", \
	  U64(S, nvme.restores), 0, true }, \
	{ "tier_checksum_failures_total", "counter", \
	  "Tier reads that failed their check (served as misses).", \
	  U64(S, nvme.checksum_failures), 0, true }, \
	{ "tier_io_errors_total", "counter", "Tier writes or reads that failed.", \
	  U64(S, nvme.io_errors), 0, true }, \
	{ "tier_dropped_total", "counter", \
	  "Evicted pages not spilled for want of a slot or buffer.", \
	  U64(S, nvme.dropped), 0, true }, \
	{ "tier_restore_mean_seconds", "gauge", "Mean latency of a restore.", \
	  U64(S, nvme.restore_us_mean), 1e-6, true }, \
	{ "tier_restore_max_seconds", "gauge", "Longest restore.", \
	  U64(S, nvme.restore_us_max), 1e-6, true }, \
	{ "tier_writes_in_flight", "gauge", "Tier writes in flight now.", \
	  U64(S, nvme.writing), 0, true }

/* The remote tier's figures (--remote): the daemon's connections, then
 * the namespaces' work summed (each namespace's in NS_REMOTE_FAMILIES). */
#define R(f) U64(ST, remote.f)
#define REMOTE_FAMILIES \
	{ "remote_enabled", "gauge", "1 when the daemon has a remote tier (--remote).", \
	  R(enabled), 0, false }, \
	{ "remote_up", "gauge", "1 while the remote tier serves: a master connected, slots mapped.", \
	  R(up), 0, false }, \
	{ "remote_nodes", "gauge", "Masters in the remote tier's slot map.", R(nodes), 0, false }, \
	{ "remote_nodes_up", "gauge", "Masters of the remote tier connected now.", \
	  R(nodes_up), 0, false }, \
	{ "remote_slots", "gauge", "Cluster slots with a known master (16384 when whole).", \
	  R(slots), 0, false }, \
	{ "remote_gets_total", "counter", "GETs sent to the remote tier.", R(gets), 0, false }, \
	{ "remote_hits_total", "counter", "Pages the remote tier gave back that passed their checks.", \
	  R(hits), 0, false }, \
	{ "remote_misses_total", "counter", "GETs of keys the remote tier did not have.", \
	  R(misses), 0, false }, \
	{ "remote_corrupt_total", "counter", \
	  "Remote values that failed their checks (served as misses).", \
	  R(corrupt), 0, false }, \
	{ "remote_forged_total", "counter", \
	  "Of those, values whose seal did not open: forged, another key, or damaged.", \
	  R(forged), 0, false }, \
	{ "remote_errors_total", "counter", \
	  "GETs lost to a dead node, a timeout or an error reply (misses).", R(errors), 0, false }, \
	{ "remote_skipped_total", "counter", \
	  "GETs not sent: node down, --remote-max-inflight or --remote-rate (misses).", \
	  R(skipped), 0, false }, \
	{ "remote_puts_total", "counter", "Pages sent to the remote tier, each once however often its SET went.", R(puts), 0, false }, \
	{ "remote_put_errors_total", "counter", "Pages sent and never taken (given up).", R(put_errors), 0, false }, \
	{ "remote_put_skipped_total", "counter", "SETs not sent: node down or a cap.", \
	  R(put_skipped), 0, false }, \
	{ "remote_received_bytes_total", "counter", "Bytes of values received.", \
	  R(bytes_in), 0, false }, \
	{ "remote_sent_bytes_total", "counter", "Bytes of values sent.", R(bytes_out), 0, false }, \
	{ "remote_redirects_total", "counter", "MOVED and ASK replies followed.", \
	  R(redirects), 0, false }, \
	{ "remote_map_loads_total", "counter", "Slot maps read (CLUSTER SLOTS).", \
	  R(map_loads), 0, false }, \
	{ "remote_connects_total", "counter", "Connections to remote nodes started.", \
	  R(connects), 0, false }, \
	{ "remote_disconnects_total", "counter", "Connections to remote nodes lost.", \
	  R(disconnects), 0, false }, \
	{ "remote_requests_in_flight", "gauge", "Remote requests sent and not answered.", \
	  R(inflight), 0, false }, \
	{ "remote_latency_seconds", "gauge", "Measured round trip of a GET to an idle node.", \
	  R(latency_us), 1e-6, false }, \
	{ "remote_bandwidth_bytes_per_second", "gauge", "Measured bytes/s a busy node delivers.", \
	  R(bandwidth), 0, false }, \
	REMOTE_WORK_FAMILIES(ST)

/* What the remote tier did for the namespaces: both structs hold it. */
#define REMOTE_WORK_FAMILIES(S) \
	{ "remote_fetches_total", "counter", "ACQUIREs that asked the remote tier.", \
	  U64(S, remote.fetches), 0, false }, \
	{ "remote_restored_blocks_total", "counter", \
	  "Blocks the remote tier gave back, indexed in the pool.", \
	  U64(S, remote.restored), 0, false }, \
	{ "remote_sent_pages_total", "counter", "Pages sent to the remote tier.", \
	  U64(S, remote.sent), 0, false }, \
	{ "remote_skipped_slow_total", "counter", \
	  "ACQUIREs that did not ask the remote tier: recomputing or the client's cut-off is faster.", \
	  U64(S, remote.skipped_slow), 0, false }

static const struct family daemon_families[] = {
	{ "uptime_seconds", "gauge", "Time since kvpoold started.",
	  U64(ST, uptime_ms), 1e-3, false },
	{ "clients", "gauge", "Client connections served now.", U32(ST, clients), 0, false },
	{ "clients_max", "gauge", "Most client connections at once (--max-clients).",
	  U32(ST, max_clients), 0, false },
	{ "pool_budget_bytes", "gauge", "Most memory for pages (--pool-size).",
	  U64(ST, pool_bytes), 0, false },
	{ "slab_size_bytes", "gauge", "Memory per slab (--slab-size).",
	  U64(ST, slab_bytes), 0, false },
	{ "slabs", "gauge", "Slabs allocated now.", U64(ST, slabs), 0, false },
	{ "connections_total", "counter", "Connections accepted and served.",
	  U64(ST, connections_total), 0, false },
	{ "connections_refused_total", "counter", "Connections turned away at --max-clients.",
	  U64(ST, connections_refused), 0, false },
	{ "connections_closed_output_total", "counter",
	  "Clients disconnected for leaving more than --max-output of replies unread.",
	  U64(ST, closed_output), 0, false },
	{ "connections_closed_idle_total", "counter",
	  "Clients disconnected after --idle-timeout without a request.",
	  U64(ST, closed_idle), 0, false },
	{ "requests_denied_total", "counter", "Requests refused by the access rules.",
	  U64(ST, requests_denied), 0, false },
	{ "requests_total", "counter", "Requests handled.", U64(ST, requests_total), 0, false },
	{ "events_enabled", "gauge", "1 when KV events are published (--kv-events).",
	  U64(ST, events.enabled), 0, false },
	{ "events_batches_total", "counter", "KV event batches sent on the PUB socket.",
	  U64(ST, events.batches), 0, false },
	{ "events_total", "counter", "KV events in the batches sent.",
	  U64(ST, events.events), 0, false },
	{ "events_dropped_batches_total", "counter",
	  "KV event batches dropped because the queue was full.",
	  U64(ST, events.dropped_batches), 0, false },
	{ "events_dropped_total", "counter", "KV events in the dropped batches.",
	  U64(ST, events.dropped_events), 0, false },
	{ "events_queued_bytes", "gauge", "KV event batches waiting for the socket.",
	  U64(ST, events.queued_bytes), 0, false },
	{ "events_replays_total", "counter", "Replay requests answered.",
	  U64(ST, events.replays), 0, false },
	{ "events_replayed_batches_total", "counter", "Batches sent again by replays.",
	  U64(ST, events.replayed), 0, false },
	REMOTE_FAMILIES,
	{ "protocol_errors_total", "counter", "Malformed messages (connection closed).",
	  U64(ST, protocol_errors), 0, false },
	{ "page_allocations_total", "counter", "Pages allocated.", U64(ST, allocs), 0, false },
	{ "lease_releases_total", "counter", "Leases released.", U64(ST, releases), 0, false },
	{ "pages_capacity", "gauge",
	  "Pages accounted for: the pool's pages and those spilled to a tier.",
	  U64(ST, pages_total), 0, false },
	PREFIX_FAMILIES(ST),
};

static const struct family ns_families[] = {
	{ "clients", "gauge", "Clients joined to the namespace.", U32(NS, clients), 0, false },
	{ "slabs", "gauge", "Slabs of the namespace.", U32(NS, slabs), 0, false },
	{ "page_bytes", "gauge", "Bytes of K/V in one page.", U64(NS, page_bytes), 0, false },
	{ "pages_capacity", "gauge",
	  "Pages accounted for: the namespace's pool pages and those spilled to a tier.",
	  U64(NS, pages_total), 0, false },
	{ "pinned_quota_pages", "gauge", "Most pages in the pinned class (--pinned-quota).",
	  U32(NS, pinned_quota), 0, false },
	PREFIX_FAMILIES(NS),
	REMOTE_WORK_FAMILIES(NS),
};

/* Pages by state: the field and its tier. */
struct state_field {
	const char *state, *tier;
	size_t st_off, ns_off;
};

static const struct state_field states[] = {
	{ "free", "pool", offsetof(ST, pages_free), offsetof(NS, pages_free) },
	{ "private", "pool", offsetof(ST, pages_private), offsetof(NS, pages_private) },
	{ "shared", "pool", offsetof(ST, pages_shared), offsetof(NS, pages_shared) },
	{ "cached", "pool", offsetof(ST, pages_cached), offsetof(NS, pages_cached) },
	{ "inflight", "pool", offsetof(ST, pages_inflight), offsetof(NS, pages_inflight) },
	{ "spilled", "nvme", offsetof(ST, pages_spilled), offsetof(NS, pages_spilled) },
};
/* (pages_spilled counts both tiers: the "nvme" line is that less host.used,
 * and a "host" line follows with host.used.) */

/* label(out, ) - a label value, escaped as the exposition format wants:
 * a byte that is not UTF-8, or a control character, is written as U+FFFD,
 * so that no value (a namespace read back from an old tier file) makes
 * the whole page invalid. */
static void label(FILE *out, const char *s)
{
	size_t n = strlen(s), len;

	while (n) {
		len = utf8_char(s, n);
		if (len == 1 && (*s == '\\' || *s == '"'))
			fprintf(out, "\\%c", *s);
		else if (len == 1 && *s == '\n')
			fprintf(out, "\\n");
		else if (!len || utf8_control(s, len))
			fputs("\xef\xbf\xbd", out);
		else
			fwrite(s, 1, len, out);
		len = len ? len : 1;
		s += len;
		n -= len;
	}
}

static void head(FILE *out, const char *prefix, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s%s %s\n# TYPE %s%s %s\n", prefix, name, help, prefix, name, type);
}

/* The host tier's record right after the NVMe tier's, in both structs. */
#define HOST_DELTA sizeof(struct kvp_wire_tier_stats)
_Static_assert(offsetof(ST, host) == offsetof(ST, nvme) + HOST_DELTA, "host follows nvme");
_Static_assert(offsetof(NS, host) == offsetof(NS, nvme) + HOST_DELTA, "host follows nvme");

static const char *const tiers[] = { "nvme", "host" };

/* value() - a family's field of the struct at base (for a tier family,
 * of tier t: 0 nvme, 1 host). */
static void value(FILE *out, const void *base, const struct family *f, int t)
{
	size_t off = f->off + (t ? HOST_DELTA : 0);
	uint64_t v;
	uint32_t w;

	if (f->width == 4) {
		memcpy(&w, (const char *)base + off, sizeof(w));
		v = w;
	} else {
		memcpy(&v, (const char *)base + off, sizeof(v));
	}
	if (f->scale)
		fprintf(out, " %.6f\n", (double)v * f->scale);
	else
		fprintf(out, " %" PRIu64 "\n", v);
}

static uint64_t field64(const void *base, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)base + off, sizeof(v));
	return v;
}

/* page_count() - a page count by state; the spilled one without the
 * host tier's pages (they have a line of their own). */
static uint64_t page_count(const void *base, size_t off, size_t spilled_off,
			   uint64_t host_used)
{
	uint64_t v = field64(base, off);

	return off == spilled_off && v >= host_used ? v - host_used : v;
}

static void daemon_metrics(FILE *out, const kvp_stats_t *st, bool ok)
{
	static const char *const kinds[] = { "nospc", "stale", "limit", "inval", "mismatch" };
	const uint64_t errs[] = { st->errors_nospc, st->errors_stale, st->errors_limit,
				  st->errors_inval, st->errors_mismatch };
	size_t i;
	int t;

	head(out, "kvpool_", "info", "gauge", "The daemon's version and backend (always 1).");
	fprintf(out, "kvpool_info{version=\"");
	label(out, st->version);
	fprintf(out, "\",backend=\"%s\",pid=\"%" PRIu32 "\"} 1\n", stats_backend_name(st->backend),
	       st->pid);
	for (i = 0; i < sizeof(daemon_families) / sizeof(daemon_families[0]); i++) {
		const struct family *f = &daemon_families[i];

		head(out, "kvpool_", f->name, f->type, f->help);
		for (t = 0; t < (f->tier ? 2 : 1); t++) {
			if (f->tier)
				fprintf(out, "kvpool_%s{tier=\"%s\"}", f->name, tiers[t]);
			else
				fprintf(out, "kvpool_%s", f->name);
			value(out, st, f, t);
		}
	}
	head(out, "kvpool_", "request_errors_total", "counter",
	     "Requests refused, by kind (inval counts INVAL, STATE, NOENT and PERM).");
	for (i = 0; i < 5; i++)
		fprintf(out, "kvpool_request_errors_total{kind=\"%s\"} %" PRIu64 "\n", kinds[i],
		       errs[i]);
	head(out, "kvpool_", "pages", "gauge", "Pages by state and tier.");
	for (i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		fprintf(out, "kvpool_pages{state=\"%s\",tier=\"%s\"} %" PRIu64 "\n", states[i].state,
		       states[i].tier, page_count(st, states[i].st_off,
						  offsetof(ST, pages_spilled), st->host.used));
	fprintf(out, "kvpool_pages{state=\"spilled\",tier=\"host\"} %" PRIu64 "\n", st->host.used);
	head(out, "kvpool_", "conservation_ok", "gauge",
	     "1 when the page counts add up and the daemon's recount agrees.");
	fprintf(out, "kvpool_conservation_ok %d\n", ok ? 1 : 0);
}

static void ns_metrics(FILE *out, const kvp_ns_stats_t *ns, int nns)
{
	size_t i;
	int k, t;

	if (nns == 0)
		return;
	head(out, "kvpool_namespace_", "info", "gauge",
	     "A namespace's model, geometry and key scheme (always 1).");
	for (k = 0; k < nns; k++) {
		fprintf(out, "kvpool_namespace_info{namespace=\"");
		label(out, ns[k].name);
		fprintf(out, "\",model=\"");
		label(out, ns[k].model);
		fprintf(out, "\",layers=\"%" PRIu32 "\",kv_heads=\"%" PRIu32 "\",head_dim=\"%" PRIu32
		       "\",head_dim_v=\"%" PRIu32 "\",block_tokens=\"%" PRIu32 "\",dtype=\"%s\","
		       "key_scheme=\"%s\"} 1\n", ns[k].layers, ns[k].kv_heads, ns[k].head_dim,
		       stats_v_dim(&ns[k]), ns[k].block_tokens, stats_dtype_name(ns[k].dtype),
		       stats_scheme_name(ns[k].key_scheme));
	}
	for (i = 0; i < sizeof(ns_families) / sizeof(ns_families[0]); i++) {
		const struct family *f = &ns_families[i];

		head(out, "kvpool_namespace_", f->name, f->type, f->help);
		for (k = 0; k < nns; k++) {
			for (t = 0; t < (f->tier ? 2 : 1); t++) {
				fprintf(out, "kvpool_namespace_%s{namespace=\"", f->name);
				label(out, ns[k].name);
				if (f->tier)
					fprintf(out, "\",tier=\"%s", tiers[t]);
				fprintf(out, "\"}");
				value(out, &ns[k], f, t);
			}
		}
	}
	head(out, "kvpool_namespace_", "pages", "gauge", "A namespace's pages by state and tier.");
	for (i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		for (k = 0; k < nns; k++) {
			fprintf(out, "kvpool_namespace_pages{namespace=\"");
			label(out, ns[k].name);
			fprintf(out, "\",state=\"%s\",tier=\"%s\"} %" PRIu64 "\n", states[i].state,
			       states[i].tier, page_count(&ns[k], states[i].ns_off,
							  offsetof(NS, pages_spilled),
							  ns[k].host.used));
		}
	}
	for (k = 0; k < nns; k++) {
		fprintf(out, "kvpool_namespace_pages{namespace=\"");
		label(out, ns[k].name);
		fprintf(out, "\",state=\"spilled\",tier=\"host\"} %" PRIu64 "\n", ns[k].host.used);
	}
}

void stats_metrics(FILE *out, const kvp_stats_t *st, const kvp_ns_stats_t *ns, int nns)
{
	daemon_metrics(out, st, stats_conserved(st));
	ns_metrics(out, ns, nns);
}
