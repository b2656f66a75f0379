/* SPDX-License-Identifier: MIT */
/*
 * requests.c - what kvpoold does for each request: the dispatch, and
 * HELLO, STATS, MAP_SLAB, ALLOC, RELEASE, COW and RETAIN with the helpers
 * every handler uses; sharing is in share.c, inspection and admin in
 * admin.c.
 *
 * Every handler checks its whole payload, and every page it names,
 * before it changes anything, so a request that fails changes nothing:
 * batches are all or none. Leases move through lease.c, which keeps the
 * connection's set, the pool's references and the prefix index in step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/observe/events.h"
#include "daemon/remote/remote.h"
#include "daemon/requests/ns.h"
#include "daemon/requests/requests.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/conn.h"
#include "daemon/store/lease.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/hosttier.h"
#include "daemon/tiers/spill.h"
#include "daemon/tiers/tier.h"

/* --- helpers --------------------------------------------------------------- */

/* requests_need_ns() - true when c joined a namespace; else replies STATE. */
bool requests_need_ns(struct conn *c, const struct kvp_wire_hdr *req)
{
	if (c->ns)
		return true;
	conn_error(c, req, KVP_S_STATE, "%s needs a namespace: send HELLO with one first",
		   wire_op_str(req->op));
	return false;
}

/* requests_room_for_leases() - true when c may take n more leases; else LIMIT. */
bool requests_room_for_leases(struct conn *c, const struct kvp_wire_hdr *req, uint64_t n)
{
	uint64_t max = c->srv->opt->max_leases;

	if (lease_count(&c->leases) + n <= max)
		return true;
	conn_error(c, req, KVP_S_LIMIT, "%s of %llu pages: this client holds %llu, "
		   "max-leases is %llu; release pages first", wire_op_str(req->op),
		   (unsigned long long)n, (unsigned long long)lease_count(&c->leases),
		   (unsigned long long)max);
	return false;
}

/*
 * requests_held_list() - check that every handle of a list is a page of c's
 * namespace that c holds. Returns true, or replies STALE naming the first
 * one that is not and returns false.
 */
bool requests_held_list(struct conn *c, const struct kvp_wire_hdr *req,
		      const void *handles, uint32_t n)
{
	uint32_t i;
	uint64_t h;

	for (i = 0; i < n; i++) {
		h = wire_handle_at(handles, i);
		if (pool_lookup(c->srv->pool, c->ns->pool_ns, h) == 0 &&
		    lease_holds(&c->leases, h))
			continue;
		conn_error(c, req, KVP_S_STALE, "page handle %#llx (entry %u) is not "
			   "leased by this client: stale, forged or released; nothing "
			   "was done", (unsigned long long)h, i);
		return false;
	}
	return true;
}

/*
 * requests_alloc_pages() - n PRIVATE pages of c's namespace into out, evicting
 * cached pages when the pool has no other room, and leased to c. Replies
 * NOSPC or INTERNAL itself and returns false when it cannot; returns false
 * with c->deferred set when the request waits for the tier (it is served
 * again from the start).
 */
bool requests_alloc_pages(struct conn *c, const struct kvp_wire_hdr *req, uint32_t n,
			uint64_t *out)
{
	struct server *s = c->srv;
	struct ns *ns = c->ns;
	char err[KVP_WIRE_ERRMSG_MAX];
	struct pool_counts pc;
	uint64_t target;
	uint32_t i;
	int rc;

	if (wait_tier(c, req, n))
		return false;	/* served again when the tier has room */
	rc = tier_make_room(s->pool, ns, n);
	if (rc == -EAGAIN) {
		/* the tiers cannot take the evictions yet: wait for them */
		if (wait_tier_room(c, req, ns))
			return false;
		conn_error(c, req, KVP_S_NOSPC, "namespace '%s': %u pages wanted; the "
			   "tiers cannot take the cached pages that would make room now: "
			   "try again in a moment", ns->name, n);
		return false;
	}
	if (rc < 0) {
		pool_counts(s->pool, ns->pool_ns, &pc);
		/* an engine's save skipped: said once a minute a namespace */
		if (log_every(&ns->nospc_said_ns, 60))
			log_warn("namespace '%s': refused %u pages to client %llu (%s, pid %d): "
				 "%llu private and %llu shared pages are leased, %u of %llu cached "
				 "could be evicted; its saves are skipped until there is room "
				 "(said once a minute; kvpool_request_errors_total{kind=\"nospc\"} "
				 "counts them)", ns->name, n, (unsigned long long)c->id, c->name,
				 (int)c->cred.pid, (unsigned long long)pc.by_state[PAGE_PRIVATE],
				 (unsigned long long)pc.by_state[PAGE_SHARED],
				 prefix_evictable(ns->idx),
				 (unsigned long long)pc.by_state[PAGE_CACHED]);
		conn_error(c, req, KVP_S_NOSPC, "namespace '%s': %u pages wanted, %llu can "
			   "be had; of its %llu pages %llu are private and %llu shared "
			   "(leased by its %u clients), %llu cached, of which %u could be "
			   "evicted (the rest are parents of leased pages): nothing was "
			   "evicted; release pages or raise --pool-size", ns->name, n,
			   (unsigned long long)pool_available(s->pool, ns->pool_ns),
			   (unsigned long long)pc.total,
			   (unsigned long long)pc.by_state[PAGE_PRIVATE],
			   (unsigned long long)pc.by_state[PAGE_SHARED], ns->clients,
			   (unsigned long long)pc.by_state[PAGE_CACHED], prefix_evictable(ns->idx));
		return false;
	}
	rc = pool_alloc(s->pool, ns->pool_ns, n, out, err, sizeof(err));
	if (rc < 0) {
		log_error("namespace '%s': allocating %u pages: %s", ns->name, n, err);
		conn_error(c, req, rc == -ENOSPC ? KVP_S_NOSPC : KVP_S_INTERNAL, "%s", err);
		return false;
	}
	for (i = 0; i < n; i++) {
		if (lease_add(&c->leases, s->pool, out[i]) < 0) {
			while (i--)
				lease_sub(&c->leases, s->pool, out[i]);
			for (i = 0; i < n; i++)
				pool_unref(s->pool, out[i]);
			conn_error(c, req, KVP_S_INTERNAL, "out of memory recording leases");
			return false;
		}
	}
	/* Below the low watermark, evict ahead to the high one, so that the
	 * next requests find free pages (and spill writes get going). */
	target = pool_ns_capacity(s->pool, ns->pool_ns);
	if (pool_available(s->pool, ns->pool_ns) < target * s->opt->free_watermark_pct / 100)
		tier_evict_ahead(s->pool, ns, target * s->opt->free_watermark_high_pct / 100);
	return true;
}

/* --- HELLO, STATS, MAP_SLAB -------------------------------------------------- */

#define REFUSALS_PER_MIN 10u

/*
 * say_refused() - log a refused HELLO (err: what the client is told) once
 * per cause: an engine that tries again every few seconds with a seed or
 * geometry the namespace refuses is said once, not at every try (before,
 * only a counter of /metrics moved). At most REFUSALS_PER_MIN new causes
 * a minute, so that no client floods the log with values of its choice.
 */
static void say_refused(struct server *s, const struct conn *c, const char *name,
			const char *err)
{
	uint64_t h = 1469598103934665603ull, now;
	struct timespec ts;
	const char *p;
	unsigned i;

	for (p = err; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	h |= 1;	/* 0 is an empty slot */
	for (i = 0; i < sizeof(s->refusals_said) / sizeof(s->refusals_said[0]); i++)
		if (s->refusals_said[i] == h)
			return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (now - s->refusals_min_ns >= 60000000000ull) {
		s->refusals_min_ns = now;
		s->refusals_in_min = 0;
	}
	if (s->refusals_in_min >= REFUSALS_PER_MIN)
		return;
	s->refusals_in_min++;
	s->refusals_said[s->refusals_next++ % (sizeof(s->refusals_said) /
					       sizeof(s->refusals_said[0]))] = h;
	log_warn("refused the HELLO of pid %d (uid %u, '%.31s'): %s (said once per cause)",
		 (int)c->cred.pid, (unsigned)c->cred.uid, name[0] ? name : "-", err);
}

static void handle_hello(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_hello_reply rep;
	struct ns_joiner joiner;
	struct kvp_wire_hello h;
	char err[KVP_WIRE_ERRMSG_MAX];
	struct ns *n = NULL;
	int rc;

	if (c->hello_done) {
		conn_error(c, req, KVP_S_STATE, "HELLO was already sent on this connection");
		return;
	}
	rc = wire_hello_decode(payload, req->len, &h);
	if (rc == -KVP_S_PROTO) {
		conn_fatal(c, req, KVP_S_PROTO, "HELLO payload is not 256 bytes");
		return;
	}
	if (rc < 0) {
		conn_error(c, req, KVP_S_INVAL, "HELLO: a name is not NUL-terminated "
			   "within its field");
		return;
	}
	if (h.ns[0]) {
		unsigned rights = access_rights(s->rules, s->nrules, h.ns, &c->peer);

		if (!(rights & (ACCESS_READ | ACCESS_WRITE))) {
			conn_error(c, req, KVP_S_PERM, "uid %u (gid %u) may not use namespace "
				   "'%.63s': no --access rule gives it read or write there; "
				   "ask the daemon's admin (kvpoold(8), ACCESS)",
				   (unsigned)c->peer.uid, (unsigned)c->peer.gid, h.ns);
			return;
		}
		n = ns_gone_by_name(&s->nst, h.ns);
		if (n) {	/* dropped: its tier file is being removed */
			wait_defer_on(c, req, n);
			return;
		}
		n = ns_by_name(&s->nst, h.ns);
		if (n && wait_drop_ahead(n)) {
			conn_error(c, req, KVP_S_STATE, "namespace '%s' is being dropped by an "
				   "admin; connect again once it is gone", n->name);
			return;
		}
		joiner.uid = c->cred.uid;
		joiner.may_create = (rights & (ACCESS_WRITE | ACCESS_ADMIN)) != 0;
		joiner.unlimited = c->cred.uid == 0 || c->cred.uid == geteuid();
		rc = ns_join(&s->nst, s->pool, &s->keys, &h, &joiner, &n, err, sizeof(err));
		if (rc == -KVP_S_PERM && !joiner.may_create) {
			conn_error(c, req, KVP_S_PERM, "%s; uid %u (gid %u) has %s there: let "
				   "a writer create it first, or ask the daemon's admin for an "
				   "--access rule (kvpoold(8), ACCESS)", err,
				   (unsigned)c->peer.uid, (unsigned)c->peer.gid,
				   access_rights_str(rights));
			return;
		}
		if (rc < 0) {
			say_refused(s, c, h.client_name, err);
			conn_error(c, req, (uint32_t)-rc, "%s", err);
			return;
		}
		if (n->state == NS_PREPARING) {	/* served again when it is ready */
			wait_defer_on(c, req, n);
			return;
		}
		n->clients++;
		c->rights = rights;
	}
	c->hello_done = true;
	c->ns = n;
	memcpy(c->name, h.client_name, sizeof(c->name));

	memset(&rep, 0, sizeof(rep));
	rep.client_id = c->id;
	rep.backend = n ? n->be->ops->kind : s->be->ops->kind;
	rep.slab_bytes = pool_slab_bytes(s->pool);
	rep.max_batch = wire_max_pages(s->opt->max_msg_size);
	rep.max_leases = s->opt->max_leases;
	rep.max_msg = s->opt->max_msg_size;
	if (n) {
		rep.ns_id = n->id;
		rep.page_bytes = n->page_bytes;
		rep.page_stride = pool_ns_page_stride(s->pool, n->pool_ns);
		rep.pages_per_slab = pool_ns_pages_per_slab(s->pool, n->pool_ns);
		rep.key_scheme = n->key_scheme;
		rep.block_tokens = n->block_tokens;
		memcpy(rep.root_key, n->root, sizeof(rep.root_key));
		log_info("client %llu (%s, pid %d, uid %u) joined namespace '%s'",
			 (unsigned long long)c->id, c->name, (int)c->cred.pid,
			 (unsigned)c->cred.uid, n->name);
	}
	conn_reply(c, req, KVP_S_OK, &rep, sizeof(rep), -1);
}

/* fill_counts() - page counts of a STATS record: the pool's by state,
 * plus the pages spilled to the tier (which count in the total). */
static void fill_counts(const struct pool_counts *pc, uint64_t spilled, uint64_t *total,
			uint64_t *free_, uint64_t *private_, uint64_t *shared,
			uint64_t *cached, uint64_t *spilled_out, uint64_t *inflight)
{
	*total = pc->total + spilled;
	*free_ = pc->by_state[PAGE_FREE];
	*private_ = pc->by_state[PAGE_PRIVATE];
	*shared = pc->by_state[PAGE_SHARED];
	*cached = pc->by_state[PAGE_CACHED];
	*spilled_out = spilled;
	*inflight = pc->by_state[PAGE_INFLIGHT];
}

/* tier_record() - a tier's counters (st NULL: no such tier). */
static void tier_record(const struct spill_stats *st, struct kvp_wire_tier_stats *t)
{
	const struct spill_stats ss = st ? *st : (struct spill_stats){ 0 };

	memset(t, 0, sizeof(*t));
	t->slots = ss.slots;
	t->used = ss.used;
	t->spills = ss.spills;
	t->restores = ss.restores;
	t->checksum_failures = ss.checksum_failures;
	t->io_errors = ss.io_errors;
	t->dropped = ss.dropped;
	t->restore_us_mean = ss.restores ? ss.restore_ns_total / ss.restores / 1000 : 0;
	t->restore_us_max = ss.restore_ns_max / 1000;
	t->writing = ss.writing;
}

static void add_tier_stats(struct kvp_wire_tier_stats *sum,
			   const struct kvp_wire_tier_stats *a)
{
	uint64_t restores = sum->restores + a->restores;

	if (restores)
		sum->restore_us_mean = (sum->restore_us_mean * sum->restores +
					a->restore_us_mean * a->restores) / restores;
	sum->slots += a->slots;
	sum->used += a->used;
	sum->spills += a->spills;
	sum->restores = restores;
	sum->checksum_failures += a->checksum_failures;
	sum->io_errors += a->io_errors;
	sum->dropped += a->dropped;
	sum->writing += a->writing;
	if (a->restore_us_max > sum->restore_us_max)
		sum->restore_us_max = a->restore_us_max;
}

static void add_prefix_stats(struct kvp_wire_prefix_stats *sum,
			     const struct kvp_wire_prefix_stats *a)
{
	sum->acquires += a->acquires;
	sum->hits += a->hits;
	sum->misses += a->misses;
	sum->hit_tokens += a->hit_tokens;
	sum->publishes += a->publishes;
	sum->dedups += a->dedups;
	sum->cows += a->cows;
	sum->evictions += a->evictions;
	sum->pinned += a->pinned;
}

/* remote_record() - the remote tier's connection counters (the
 * namespaces' shares are summed in by the caller). */
static void remote_record(const struct remote *rt, struct kvp_wire_remote_stats *w)
{
	struct remote_stats st;

	memset(w, 0, sizeof(*w));
	if (!rt)
		return;
	remote_get_stats(rt, &st);
	w->enabled = 1;
	w->up = remote_serving(rt);
	w->nodes = st.nodes;
	w->nodes_up = st.nodes_up;
	w->slots = st.slots;
	w->gets = st.gets;
	w->hits = st.hits;
	w->misses = st.misses;
	w->corrupt = st.corrupt;
	w->forged = st.forged;
	w->errors = st.errors;
	w->skipped = st.skipped;
	w->puts = st.puts;
	w->put_errors = st.put_errors;
	w->put_skipped = st.put_skipped;
	w->bytes_in = st.bytes_in;
	w->bytes_out = st.bytes_out;
	w->redirects = st.redirects;
	w->map_loads = st.map_loads;
	w->connects = st.connects;
	w->disconnects = st.disconnects;
	w->inflight = st.inflight;
	w->latency_us = st.latency_ns / 1000;
	w->bandwidth = st.bandwidth;
}

static void ns_record(struct server *s, struct ns *n, struct kvp_wire_ns_stats *r)
{
	struct spill_stats ts;
	struct pool_counts pc;

	memset(r, 0, sizeof(*r));
	memcpy(r->name, n->name, sizeof(r->name));
	memcpy(r->model, n->model, sizeof(r->model));
	r->id = n->id;
	r->layers = n->layers;
	r->kv_heads = n->kv_heads;
	r->head_dim = n->head_dim;
	r->head_dim_v = n->head_dim_v;
	r->block_tokens = n->block_tokens;
	r->dtype = n->dtype;
	r->clients = n->clients;
	r->state = n->state == NS_PREPARING ? KVP_WIRE_NS_PREPARING : KVP_WIRE_NS_READY;
	r->page_bytes = n->page_bytes;
	r->page_stride = pool_ns_page_stride(s->pool, n->pool_ns);
	r->key_scheme = n->key_scheme;
	r->pinned_quota = (uint32_t)n->pinned_quota;
	pool_counts(s->pool, n->pool_ns, &pc);
	r->slabs = (uint32_t)pc.slabs;
	fill_counts(&pc, prefix_spilled_count(n->idx), &r->pages_total, &r->pages_free,
		    &r->pages_private, &r->pages_shared, &r->pages_cached,
		    &r->pages_spilled, &r->pages_inflight);
	if (n->host)
		hosttier_get_stats(n->host, &ts);
	tier_record(n->host ? &ts : NULL, &r->host);
	if (n->tier)
		spill_get_stats(n->tier, &ts);
	tier_record(n->tier ? &ts : NULL, &r->nvme);
	r->prefix = n->st;
	r->prefix.pinned = prefix_pinned(n->idx);
	r->remote = n->remote_st;
	r->backend = n->be->ops->kind;
}

uint8_t *requests_stats(struct server *s, size_t *lenp)
{
	struct kvp_wire_stats st;
	struct pool_counts pc;
	uint64_t spilled;
	uint8_t *buf;
	size_t len;
	uint32_t i;

	len = wire_stats_size(s->nst.count);
	buf = calloc(1, len);
	if (!buf)
		return NULL;
	memset(&st, 0, sizeof(st));
	snprintf(st.version, sizeof(st.version), "%s", PACKAGE_VERSION);
	st.pid = (uint32_t)getpid();
	st.backend = s->be->ops->kind;
	st.uptime_ms = loop_now_ms() - s->start_ms;
	st.clients = s->nconns;
	st.max_clients = (uint32_t)s->opt->max_clients;
	st.namespaces = s->nst.count;
	st.pool_bytes = pool_bytes(s->pool);
	st.slab_bytes = pool_slab_bytes(s->pool);
	st.max_slabs = pool_slabs_max(s->pool);
	if (s->keys.host_memory > 0) {
		st.host_pool_bytes = pool_mem_bytes(s->pool, (uint32_t)s->keys.host_memory);
		st.host_slabs = pool_mem_slabs(s->pool, (uint32_t)s->keys.host_memory);
	}
	st.connections_total = s->n.connections_total;
	st.connections_refused = s->n.connections_refused;
	st.requests_total = s->n.requests_total;
	st.protocol_errors = s->n.protocol_errors;
	st.allocs = s->n.allocs;
	st.releases = s->n.releases;
	st.errors_nospc = s->n.errors_by_status[KVP_S_NOSPC];
	st.errors_stale = s->n.errors_by_status[KVP_S_STALE];
	st.errors_limit = s->n.errors_by_status[KVP_S_LIMIT];
	st.errors_inval = s->n.errors_by_status[KVP_S_INVAL] +
			  s->n.errors_by_status[KVP_S_STATE] +
			  s->n.errors_by_status[KVP_S_NOENT] +
			  s->n.errors_by_status[KVP_S_PERM];
	st.errors_mismatch = s->n.errors_by_status[KVP_S_MISMATCH];
	st.closed_output = s->n.closed_output;
	st.closed_idle = s->n.closed_idle;
	st.requests_denied = s->n.errors_by_status[KVP_S_PERM];
	events_stats(s->events, &st.events);
	remote_record(s->remote, &st.remote);
	pool_counts(s->pool, -1, &pc);
	st.slabs = pc.slabs;
	for (i = 0, spilled = 0; i < s->nst.count; i++)
		spilled += prefix_spilled_count(s->nst.ns[i]->idx);
	fill_counts(&pc, spilled, &st.pages_total, &st.pages_free, &st.pages_private,
		    &st.pages_shared, &st.pages_cached, &st.pages_spilled,
		    &st.pages_inflight);
	if (pool_audit(s->pool) && pc.total == pc.by_state[PAGE_FREE] +
	    pc.by_state[PAGE_PRIVATE] + pc.by_state[PAGE_SHARED] +
	    pc.by_state[PAGE_CACHED] + pc.by_state[PAGE_INFLIGHT])
		st.flags |= KVP_STATS_F_CONSERVED;
	else
		log_error("conservation check failed: the page counts do not add up "
			  "(a kvpoold bug; please report it with `kvpool --json status`)");

	for (i = 0; i < s->nst.count; i++) {
		struct kvp_wire_ns_stats r;

		ns_record(s, s->nst.ns[i], &r);
		add_prefix_stats(&st.prefix, &r.prefix);
		add_tier_stats(&st.host, &r.host);
		add_tier_stats(&st.nvme, &r.nvme);
		st.remote.fetches += r.remote.fetches;
		st.remote.restored += r.remote.restored;
		st.remote.sent += r.remote.sent;
		st.remote.skipped_slow += r.remote.skipped_slow;
		memcpy(buf + wire_stats_size(i), &r, sizeof(r));
	}
	memcpy(buf, &st, sizeof(st));
	*lenp = len;
	return buf;
}

static void handle_stats(struct conn *c, const struct kvp_wire_hdr *req)
{
	uint8_t *buf;
	size_t len;

	if (req->len != 0) {
		conn_error(c, req, KVP_S_INVAL, "STATS takes no payload, got %u bytes",
			   req->len);
		return;
	}
	buf = requests_stats(c->srv, &len);
	if (!buf) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for a %zu-byte STATS reply",
			   wire_stats_size(c->srv->nst.count));
		return;
	}
	conn_reply(c, req, KVP_S_OK, buf, len, -1);
	free(buf);
}

static void handle_map_slab(struct conn *c, const struct kvp_wire_hdr *req,
			    const uint8_t *payload)
{
	struct kvp_wire_map_slab m;
	struct kvp_wire_map_slab_reply rep;
	const struct backend_slab *bs;
	int owner = -1, fd;

	if (wire_fixed_decode(payload, req->len, &m, sizeof(m)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "MAP_SLAB payload is not 8 bytes");
		return;
	}
	if (!requests_need_ns(c, req))
		return;
	if (!(c->rights & (ACCESS_READ | ACCESS_WRITE))) {	/* never, by SIGHUP */
		conn_error(c, req, KVP_S_PERM, "MAP_SLAB: uid %u may no longer use "
			   "namespace '%s'", (unsigned)c->peer.uid, c->ns->name);
		return;
	}
	bs = pool_slab(c->srv->pool, m.slab, &owner);
	if (!bs || owner != c->ns->pool_ns) {
		conn_error(c, req, KVP_S_NOENT, "slab %u is not a slab of namespace '%s'",
			   m.slab, c->ns->name);
		return;
	}
	/* a client that may not write gets a read-only fd: it cannot map
	 * the slab writable (a CUDA IPC handle cannot be limited so) */
	fd = (c->rights & ACCESS_WRITE) ? bs->fd : bs->ro_fd;
	if (bs->fd >= 0 && fd < 0) {
		conn_error(c, req, KVP_S_INTERNAL, "slab %u: no read-only descriptor to "
			   "give a client with read rights only (is /proc mounted for "
			   "kvpoold?)", m.slab);
		return;
	}
	memset(&rep, 0, sizeof(rep));
	rep.slab = m.slab;
	rep.pages = pool_ns_pages_per_slab(c->srv->pool, c->ns->pool_ns);
	rep.bytes = bs->bytes;
	memcpy(rep.ipc_handle, bs->handle, sizeof(rep.ipc_handle));
	conn_reply(c, req, KVP_S_OK, &rep, sizeof(rep), fd);
}

/* --- ALLOC, RELEASE, RETAIN, COW ---------------------------------------------- */

static void handle_alloc(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_pages pl;
	uint64_t *reply;

	if (wire_fixed_decode(payload, req->len, &pl, sizeof(pl)) < 0 || pl.reserved) {
		conn_fatal(c, req, KVP_S_PROTO, "ALLOC payload is not 8 bytes with reserved 0");
		return;
	}
	if (!requests_need_ns(c, req))
		return;
	if (pl.n > wire_max_pages(s->opt->max_msg_size)) {
		conn_error(c, req, KVP_S_INVAL, "ALLOC of %u pages exceeds the batch limit %u "
			   "(max-msg-size %llu); split the request", pl.n,
			   wire_max_pages(s->opt->max_msg_size),
			   (unsigned long long)s->opt->max_msg_size);
		return;
	}
	if (!requests_room_for_leases(c, req, pl.n))
		return;
	reply = malloc(wire_pages_size(pl.n));
	if (!reply) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", pl.n);
		return;
	}
	memcpy(reply, &pl, sizeof(pl));	/* the reply starts with the count */
	if (requests_alloc_pages(c, req, pl.n, reply + 1)) {
		s->n.allocs += pl.n;
		conn_reply(c, req, KVP_S_OK, reply, wire_pages_size(pl.n), -1);
	}
	free(reply);
}

static void handle_release(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload)
{
	struct server *s = c->srv;
	const void *handles;
	uint32_t n, i;
	uint64_t h;

	if (wire_pages_decode(payload, req->len, &n, &handles) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "RELEASE page count disagrees with the payload");
		return;
	}
	if (!requests_need_ns(c, req))
		return;
	/* All or none: take the leases off one by one, put them back on the
	 * first handle this connection does not hold. */
	for (i = 0; i < n; i++) {
		h = wire_handle_at(handles, i);
		if (pool_lookup(s->pool, c->ns->pool_ns, h) == 0 &&
		    lease_sub(&c->leases, s->pool, h) == 0)
			continue;
		conn_error(c, req, KVP_S_STALE, "page handle %#llx (entry %u) is not "
			   "leased by this client: stale, forged or already released; "
			   "nothing was released", (unsigned long long)h, i);
		while (i--)	/* each takes back the slot it left: no failure */
			lease_add(&c->leases, s->pool, wire_handle_at(handles, i));
		return;
	}
	/* Last block first: a chain's tail becomes the older candidate, so
	 * it is evicted before the blocks it extends. */
	for (i = n; i-- > 0;)
		lease_put(s->pool, c->ns, wire_handle_at(handles, i));
	s->n.releases += n;
	conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
}

static void handle_retain(struct conn *c, const struct kvp_wire_hdr *req,
			  const uint8_t *payload)
{
	struct server *s = c->srv;
	const void *handles;
	uint32_t n, i;

	if (wire_pages_decode(payload, req->len, &n, &handles) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "RETAIN page count disagrees with the payload");
		return;
	}
	if (!requests_need_ns(c, req) || !requests_held_list(c, req, handles, n) ||
	    !requests_room_for_leases(c, req, n))
		return;
	for (i = 0; i < n; i++) {
		if (lease_take(&c->leases, s->pool, c->ns, wire_handle_at(handles, i)) < 0) {
			while (i--)
				lease_drop(&c->leases, s->pool, c->ns, wire_handle_at(handles, i));
			conn_error(c, req, KVP_S_INTERNAL, "out of memory recording leases");
			return;
		}
	}
	s->n.retains += n;
	conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
}

static void handle_cow(struct conn *c, const struct kvp_wire_hdr *req,
		       const uint8_t *payload)
{
	struct server *s = c->srv;
	const void *handles;
	uint64_t *reply;
	uint32_t n, i;
	int rc;

	if (wire_pages_decode(payload, req->len, &n, &handles) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "COW page count disagrees with the payload");
		return;
	}
	if (!requests_need_ns(c, req) || !requests_held_list(c, req, handles, n) ||
	    !requests_room_for_leases(c, req, n))
		return;
	reply = malloc(wire_pages_size(n));
	if (!reply) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", n);
		return;
	}
	memcpy(reply, &(struct kvp_wire_pages){ .n = n }, sizeof(struct kvp_wire_pages));
	if (!requests_alloc_pages(c, req, n, reply + 1))
		goto out;
	for (i = 0; i < n; i++) {
		struct backend *be = c->ns->be;

		rc = be->ops->page_copy(be, pool_page_addr(s->pool, reply[1 + i]),
					pool_page_addr(s->pool, wire_handle_at(handles, i)),
					(size_t)c->ns->page_bytes);
		if (rc < 0) {
			for (i = 0; i < n; i++)
				lease_drop(&c->leases, s->pool, c->ns, reply[1 + i]);
			log_error("namespace '%s': copying a page: %s", c->ns->name,
				  strerror(-rc));
			conn_error(c, req, KVP_S_INTERNAL, "copying a page failed: %s",
				   strerror(-rc));
			goto out;
		}
	}
	c->ns->st.cows += n;
	s->n.allocs += n;
	conn_reply(c, req, KVP_S_OK, reply, wire_pages_size(n), -1);
out:
	free(reply);
}

/* op_right() - the right a request needs in the client's namespace. */
static unsigned op_right(uint16_t op)
{
	switch (op) {
	case KVP_OP_ACQUIRE:
	case KVP_OP_RETAIN:
		return ACCESS_READ;
	case KVP_OP_ALLOC:
	case KVP_OP_COW:
	case KVP_OP_PUBLISH:
	case KVP_OP_PUBLISH_PARTIAL:
		return ACCESS_WRITE;
	}
	return 0;
}

/* allowed() - c may send req (checked once it has a namespace: without
 * one the handler says so); else PERM, counted as denied. */
static bool allowed(struct conn *c, const struct kvp_wire_hdr *req)
{
	unsigned need = op_right(req->op);

	if (!need || !c->ns || (c->rights & need))
		return true;
	conn_error(c, req, KVP_S_PERM, "%s needs %s rights in namespace '%s'; uid %u "
		   "(gid %u) has %s there: ask the daemon's admin for an --access rule "
		   "(kvpoold(8), ACCESS)", wire_op_str(req->op), access_rights_str(need),
		   c->ns->name, (unsigned)c->peer.uid, (unsigned)c->peer.gid,
		   access_rights_str(c->rights));
	return false;
}

void requests_handle(struct conn *c, const struct kvp_wire_hdr *req,
		     const uint8_t *payload)
{
	if (wire_op_since(req->op) > c->proto) {
		/* as the daemon of the client's version answered */
		conn_error(c, req, KVP_S_OP, "unknown operation %u: %s is protocol version "
			   "%u's, and this connection speaks %u", req->op, wire_op_str(req->op),
			   wire_op_since(req->op), (unsigned)c->proto);
		return;
	}
	if (!allowed(c, req))
		return;
	switch (req->op) {
	case KVP_OP_HELLO:
		handle_hello(c, req, payload);
		break;
	case KVP_OP_STATS:
		handle_stats(c, req);
		break;
	case KVP_OP_MAP_SLAB:
		handle_map_slab(c, req, payload);
		break;
	case KVP_OP_ALLOC:
		handle_alloc(c, req, payload);
		break;
	case KVP_OP_RELEASE:
		handle_release(c, req, payload);
		break;
	case KVP_OP_ACQUIRE:
		share_acquire(c, req, payload);
		break;
	case KVP_OP_PUBLISH:
		share_publish(c, req, payload);
		break;
	case KVP_OP_PUBLISH_PARTIAL:
		share_publish_partial(c, req, payload);
		break;
	case KVP_OP_COW:
		handle_cow(c, req, payload);
		break;
	case KVP_OP_RETAIN:
		handle_retain(c, req, payload);
		break;
	case KVP_OP_LIST_CLIENTS:
		admin_list_clients(c, req);
		break;
	case KVP_OP_LIST_PAGES:
		admin_list_pages(c, req, payload);
		break;
	case KVP_OP_LIST_PREFIXES:
		admin_list_prefixes(c, req, payload);
		break;
	case KVP_OP_EVICT:
		admin_evict(c, req, payload);
		break;
	case KVP_OP_DISCONNECT:
		admin_disconnect(c, req, payload);
		break;
	case KVP_OP_DROP_NS:
		admin_drop_ns(c, req, payload);
		break;
	case KVP_OP_HANDOFF:
		handoff_handle(c, req, payload);
		break;
	default:
		conn_error(c, req, KVP_S_OP, "unknown operation %u", req->op);
		break;
	}
}

void requests_conn_gone(struct conn *c)
{
	struct ns *n = c->ns;
	uint64_t dropped;

	if (!n) {
		hset_fini(&c->leases.h);	/* no namespace, no lease */
		return;
	}
	handoff_conn_gone(c);
	dropped = lease_drop_all(&c->leases, c->srv->pool, n);
	n->clients--;
	if (dropped)
		log_info("client %llu (%s, pid %d) left namespace '%s'; its %llu "
			 "leases were dropped", (unsigned long long)c->id, c->name,
			 (int)c->cred.pid, n->name, (unsigned long long)dropped);
	c->ns = NULL;
	/* the last client gone: a DROP_NS that waited for it goes on (only
	 * drops can wait on a namespace without clients) */
	if (!n->clients && n->wait_head)
		wait_retry(n);
}
