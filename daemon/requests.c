/* SPDX-License-Identifier: MIT */
/*
 * requests.c - what kvpoold does for each request: HELLO, STATS,
 * MAP_SLAB, ALLOC, RELEASE, ACQUIRE, PUBLISH, PUBLISH_PARTIAL, COW and
 * RETAIN.
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
#include <unistd.h>

#include "client/wire.h"
#include "daemon/conn.h"
#include "daemon/lease.h"
#include "daemon/log.h"

/* --- helpers --------------------------------------------------------------- */

/* need_ns() - true when c joined a namespace; else replies STATE. */
static bool need_ns(struct conn *c, const struct kvp_wire_hdr *req)
{
	if (c->ns)
		return true;
	conn_error(c, req, KVP_S_STATE, "%s needs a namespace: send HELLO with one first",
		   wire_op_str(req->op));
	return false;
}

/* room_for_leases() - true when c may take n more leases; else LIMIT. */
static bool room_for_leases(struct conn *c, const struct kvp_wire_hdr *req, uint64_t n)
{
	uint64_t max = c->srv->opt->max_leases;

	if (c->leases.total + n <= max)
		return true;
	conn_error(c, req, KVP_S_LIMIT, "%s of %llu pages: this client holds %llu, "
		   "max-leases is %llu; release pages first", wire_op_str(req->op),
		   (unsigned long long)n, (unsigned long long)c->leases.total,
		   (unsigned long long)max);
	return false;
}

/*
 * held_list() - check that every handle of a list is a page of c's
 * namespace that c holds. Returns true, or replies STALE naming the first
 * one that is not and returns false.
 */
static bool held_list(struct conn *c, const struct kvp_wire_hdr *req,
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
 * alloc_pages() - n PRIVATE pages of c's namespace into out, evicting
 * cached pages when the pool has no other room, and leased to c. Replies
 * NOSPC or INTERNAL itself and returns false when it cannot; returns false
 * with c->deferred set when the request waits for the tier (it is served
 * again from the start).
 */
/* rate_done() - the --spill-rate timer: the tier may write again. */
static void rate_done(struct loop_op *op, int res)
{
	struct ns *n = (struct ns *)((char *)op - offsetof(struct ns, rate_op));

	(void)res;
	n->rate_armed = false;
	if (n->wait_head)
		requests_retry(n);
}

/*
 * tier_wait() - back-pressure: true when making room for n pages would
 * spill more pages than the tier can take now: staging buffers free while
 * writes are in flight, and what --spill-rate allows. Then it spills what
 * it can and queues c's request, served again from the start when a
 * write completes or the rate allows more, instead of dropping cached
 * pages it could keep.
 */
static bool tier_wait(struct conn *c, const struct kvp_wire_hdr *req, uint32_t n)
{
	struct server *s = c->srv;
	struct ns *ns = c->ns;
	struct spill_stats ss;
	struct pool_counts pc;
	uint64_t avail = pool_available(s->pool, ns->pool_ns), need, now, ms;

	if (!ns->tier || avail >= n)
		return false;
	need = n - avail;
	spill_get_stats(ns->tier, &ss);
	pool_counts(s->pool, ns->pool_ns, &pc);
	if (!pc.by_state[PAGE_CACHED] || !spill_free_slots(ns->tier))
		return false;	/* nothing to spill, or nowhere: evict as usual */
	now = spill_idle_buffers(ns->tier);
	ms = spill_rate_wait_ms(ns->tier, (uint32_t)(need < UINT32_MAX ? need : UINT32_MAX));
	if ((now >= need || !ss.writing) && !ms)
		return false;
	/* what can go now goes; the rest waits */
	lease_make_room(s->pool, ns, avail + (now < need ? now : need));
	if (pool_available(s->pool, ns->pool_ns) >= n)
		return false;
	if (ms && !ns->rate_armed) {
		ns->rate_op.done = rate_done;
		if (loop_timeout(s->loop, &ns->rate_op, &ns->rate_ts, ms) == 0)
			ns->rate_armed = true;
	}
	if (!ns->rate_armed && !ss.writing && !spill_get_writing(ns->tier))
		return false;	/* nothing would wake it: evict as usual */
	c->wait_req = *req;
	c->wait_next = NULL;
	if (ns->wait_tail)
		ns->wait_tail->wait_next = c;
	else
		ns->wait_head = c;
	ns->wait_tail = c;
	c->deferred = true;
	conn_hold(c);
	return true;
}

void requests_retry(struct ns *n)
{
	struct conn *c = n->wait_head, *next;

	n->wait_head = n->wait_tail = NULL;
	for (; c; c = next) {
		next = c->wait_next;
		c->deferred = false;
		if (!conn_closing(c)) {
			requests_handle(c, &c->wait_req, c->rbuf + KVP_WIRE_HDR_SIZE);
			if (!c->deferred)
				conn_resume(c);
		}
		conn_put(c);	/* the hold of the wait; a new wait took its own */
	}
}

static bool alloc_pages(struct conn *c, const struct kvp_wire_hdr *req, uint32_t n,
			uint64_t *out)
{
	struct server *s = c->srv;
	struct ns *ns = c->ns;
	char err[KVP_WIRE_ERRMSG_MAX];
	struct pool_counts pc;
	uint64_t target;
	uint32_t i;
	int rc;

	if (tier_wait(c, req, n))
		return false;	/* served again when the tier has room */
	if (!lease_make_room(s->pool, ns, n)) {
		pool_counts(s->pool, ns->pool_ns, &pc);
		conn_error(c, req, KVP_S_NOSPC, "namespace '%s': %u pages wanted, %llu can "
			   "be had; of its %llu pages %llu are private and %llu shared "
			   "(leased by its %u clients), none cached; release pages or "
			   "raise --pool-size", ns->name, n,
			   (unsigned long long)pool_available(s->pool, ns->pool_ns),
			   (unsigned long long)pc.total,
			   (unsigned long long)pc.by_state[PAGE_PRIVATE],
			   (unsigned long long)pc.by_state[PAGE_SHARED], ns->clients);
		return false;
	}
	rc = pool_alloc(s->pool, ns->pool_ns, n, out, err, sizeof(err));
	if (rc < 0) {
		log_error("namespace '%s': allocating %u pages: %s", ns->name, n, err);
		conn_error(c, req, rc == -ENOSPC ? KVP_S_NOSPC : KVP_S_INTERNAL, "%s", err);
		return false;
	}
	for (i = 0; i < n; i++) {
		if (hset_add(&c->leases, out[i], 1) < 0) {
			while (i--)
				hset_sub(&c->leases, out[i], 1);
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
		lease_make_room(s->pool, ns, target * s->opt->free_watermark_high_pct / 100);
	return true;
}

/* --- HELLO, STATS, MAP_SLAB -------------------------------------------------- */

static void handle_hello(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_hello_reply rep;
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
			   "within its field, or a reserved field is not 0");
		return;
	}
	if (h.ns[0]) {
		rc = ns_join(&s->nst, s->pool, &s->keys, &h, &n, err, sizeof(err));
		if (rc < 0) {
			conn_error(c, req, (uint32_t)-rc, "%s", err);
			return;
		}
		n->clients++;
	}
	c->hello_done = true;
	c->ns = n;
	memcpy(c->name, h.client_name, sizeof(c->name));

	memset(&rep, 0, sizeof(rep));
	rep.client_id = c->id;
	rep.backend = s->be->ops->kind;
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

static void tier_record(const struct ns *n, struct kvp_wire_tier_stats *t)
{
	struct spill_stats ss;

	memset(t, 0, sizeof(*t));
	if (!n->tier)
		return;
	spill_get_stats(n->tier, &ss);
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

static void ns_record(struct server *s, struct ns *n, struct kvp_wire_ns_stats *r)
{
	struct pool_counts pc;

	memset(r, 0, sizeof(*r));
	memcpy(r->name, n->name, sizeof(r->name));
	memcpy(r->model, n->model, sizeof(r->model));
	r->id = n->id;
	r->layers = n->layers;
	r->kv_heads = n->kv_heads;
	r->head_dim = n->head_dim;
	r->block_tokens = n->block_tokens;
	r->dtype = n->dtype;
	r->clients = n->clients;
	r->page_bytes = n->page_bytes;
	r->page_stride = pool_ns_page_stride(s->pool, n->pool_ns);
	r->key_scheme = n->key_scheme;
	r->pinned_quota = (uint32_t)n->pinned_quota;
	pool_counts(s->pool, n->pool_ns, &pc);
	r->slabs = (uint32_t)pc.slabs;
	fill_counts(&pc, prefix_spilled_count(n->idx), &r->pages_total, &r->pages_free,
		    &r->pages_private, &r->pages_shared, &r->pages_cached,
		    &r->pages_spilled, &r->pages_inflight);
	tier_record(n, &r->nvme);
	r->prefix = n->st;
	r->prefix.pinned = prefix_pinned(n->idx);
}

static void handle_stats(struct conn *c, const struct kvp_wire_hdr *req)
{
	struct server *s = c->srv;
	struct kvp_wire_stats st;
	struct pool_counts pc;
	uint64_t spilled;
	uint8_t *buf;
	size_t len;
	uint32_t i;

	if (req->len != 0) {
		conn_error(c, req, KVP_S_INVAL, "STATS takes no payload, got %u bytes",
			   req->len);
		return;
	}
	len = wire_stats_size(s->nst.count);
	buf = calloc(1, len);
	if (!buf) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for a %zu-byte STATS reply", len);
		return;
	}
	memset(&st, 0, sizeof(st));
	snprintf(st.version, sizeof(st.version), "%s", PACKAGE_VERSION);
	st.pid = (uint32_t)getpid();
	st.backend = s->be->ops->kind;
	st.uptime_ms = server_now_ms() - s->start_ms;
	st.clients = s->nconns;
	st.max_clients = (uint32_t)s->opt->max_clients;
	st.namespaces = s->nst.count;
	st.pool_bytes = pool_bytes(s->pool);
	st.slab_bytes = pool_slab_bytes(s->pool);
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
		add_tier_stats(&st.nvme, &r.nvme);
		memcpy(buf + wire_stats_size(i), &r, sizeof(r));
	}
	memcpy(buf, &st, sizeof(st));
	conn_reply(c, req, KVP_S_OK, buf, len, -1);
	free(buf);
}

static void handle_map_slab(struct conn *c, const struct kvp_wire_hdr *req,
			    const uint8_t *payload)
{
	struct kvp_wire_map_slab m;
	struct kvp_wire_map_slab_reply rep;
	const struct backend_slab *bs;
	int owner = -1;

	if (wire_fixed_decode(payload, req->len, &m, sizeof(m)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "MAP_SLAB payload is not 8 bytes");
		return;
	}
	if (!need_ns(c, req))
		return;
	bs = pool_slab(c->srv->pool, m.slab, &owner);
	if (!bs || owner != c->ns->pool_ns) {
		conn_error(c, req, KVP_S_NOENT, "slab %u is not a slab of namespace '%s'",
			   m.slab, c->ns->name);
		return;
	}
	memset(&rep, 0, sizeof(rep));
	rep.slab = m.slab;
	rep.pages = pool_ns_pages_per_slab(c->srv->pool, c->ns->pool_ns);
	rep.bytes = bs->bytes;
	memcpy(rep.ipc_handle, bs->handle, sizeof(rep.ipc_handle));
	conn_reply(c, req, KVP_S_OK, &rep, sizeof(rep), bs->fd);
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
	if (!need_ns(c, req))
		return;
	if (pl.n > wire_max_pages(s->opt->max_msg_size)) {
		conn_error(c, req, KVP_S_INVAL, "ALLOC of %u pages exceeds the batch limit %u "
			   "(max-msg-size %llu); split the request", pl.n,
			   wire_max_pages(s->opt->max_msg_size),
			   (unsigned long long)s->opt->max_msg_size);
		return;
	}
	if (!room_for_leases(c, req, pl.n))
		return;
	reply = malloc(wire_pages_size(pl.n));
	if (!reply) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", pl.n);
		return;
	}
	memcpy(reply, &pl, sizeof(pl));	/* the reply starts with the count */
	if (alloc_pages(c, req, pl.n, reply + 1)) {
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
	if (!need_ns(c, req))
		return;
	/* All or none: take the leases off one by one, put them back on the
	 * first handle this connection does not hold. */
	for (i = 0; i < n; i++) {
		h = wire_handle_at(handles, i);
		if (pool_lookup(s->pool, c->ns->pool_ns, h) < 0 ||
		    hset_sub(&c->leases, h, 1) < 0) {
			while (i--)
				hset_add(&c->leases, wire_handle_at(handles, i), 1);
			conn_error(c, req, KVP_S_STALE, "page handle %#llx (entry %u) is not "
				   "leased by this client: stale, forged or already released; "
				   "nothing was released", (unsigned long long)h, i);
			return;
		}
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
	if (!need_ns(c, req) || !held_list(c, req, handles, n) ||
	    !room_for_leases(c, req, n))
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
	if (!need_ns(c, req) || !held_list(c, req, handles, n) ||
	    !room_for_leases(c, req, n))
		return;
	reply = malloc(wire_pages_size(n));
	if (!reply) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", n);
		return;
	}
	memcpy(reply, &(struct kvp_wire_pages){ .n = n }, sizeof(struct kvp_wire_pages));
	if (!alloc_pages(c, req, n, reply + 1))
		goto out;
	for (i = 0; i < n; i++) {
		rc = s->be->ops->page_copy(s->be, pool_page_addr(s->pool, reply[1 + i]),
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

/* --- ACQUIRE, PUBLISH, PUBLISH_PARTIAL ----------------------------------------- */

/*
 * A deferred ACQUIRE: some of its blocks are being read back from the
 * tier. The reply goes out when the last read completes; the connection
 * is held until then, even if its client dies meanwhile.
 */
struct pending {
	struct conn *c;
	struct ns *n;
	struct kvp_wire_hdr req;
	uint32_t nkeys;
	uint32_t planned;		/* blocks found in the index */
	uint32_t hits;			/* lowest failed restore, else planned */
	uint32_t outstanding;		/* reads in flight */
	uint64_t partial_page;		/* leased already, or 0 */
	uint32_t partial_tokens;
	uint64_t *pages;		/* [planned] */
	uint8_t *restored;		/* [planned]: read from the tier */
	uint32_t *slot_index;		/* [tier slots]: which block a slot fills */
};

/* acquire_reply() - answer an ACQUIRE with hits pages (leased) and the
 * partial page, count it, and free what the answer no longer needs. */
static void acquire_reply(struct conn *c, struct ns *n, const struct kvp_wire_hdr *req,
			  uint32_t nkeys, const uint64_t *pages, uint32_t hits,
			  uint64_t partial_page, uint32_t partial_tokens)
{
	struct kvp_wire_acquire_reply *rep;
	size_t len = sizeof(*rep) + (size_t)hits * sizeof(uint64_t);

	rep = calloc(1, len);
	if (!rep) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", hits);
		return;
	}
	rep->hits = hits;
	rep->partial_page = partial_page;
	rep->partial_tokens = partial_tokens;
	memcpy(rep + 1, pages, (size_t)hits * sizeof(uint64_t));
	n->st.acquires++;
	n->st.hits += hits + (partial_page != 0);
	n->st.misses += nkeys - hits;
	n->st.hit_tokens += (uint64_t)hits * n->block_tokens + partial_tokens;
	conn_reply(c, req, KVP_S_OK, rep, len, -1);
	free(rep);
}

/* pending_finish() - the last read is in: lease what came back in order,
 * let go of what came after a failure, answer, resume the connection. */
static void pending_finish(struct pending *pd)
{
	struct conn *c = pd->c;
	struct pool *p = c->srv->pool;
	struct ns *n = pd->n;
	bool gone = conn_closing(c);
	uint32_t i;

	for (i = 0; i < pd->planned; i++) {
		if (!pd->pages[i])
			continue;	/* its restore failed */
		if (pd->restored[i] && (gone || i >= pd->hits)) {
			lease_put(p, n, pd->pages[i]);	/* back in the pool, cached */
		} else if (pd->restored[i]) {
			if (hset_add(&c->leases, pd->pages[i], 1) < 0) {
				lease_put(p, n, pd->pages[i]);
				if (i < pd->hits)
					pd->hits = i;
			}
		} else if (!gone && i >= pd->hits) {
			lease_drop(&c->leases, p, n, pd->pages[i]);
		}
	}
	if (!gone && pd->partial_page && pd->hits < pd->planned) {
		lease_drop(&c->leases, p, n, pd->partial_page);
		pd->partial_page = 0;
		pd->partial_tokens = 0;
	}
	if (!gone) {
		acquire_reply(c, n, &pd->req, pd->nkeys, pd->pages, pd->hits,
			      pd->partial_page, pd->partial_tokens);
		conn_resume(c);
	}
	free(pd->pages);
	free(pd->restored);
	free(pd->slot_index);
	free(pd);
	conn_put(c);
}

/* restore_done() - one block is back from the tier, or failed. */
static void restore_done(void *arg, uint32_t slot, int res)
{
	struct pending *pd = arg;
	struct pool *p = pd->c->srv->pool;
	struct ns *n = pd->n;
	uint32_t i = pd->slot_index[slot];
	uint32_t e = n->slot_entry[slot];

	n->slot_entry[slot] = PREFIX_NIL;
	spill_free(n->tier, slot);
	if (res == 0) {
		pool_restored(p, pd->pages[i]);
		prefix_restored(n->idx, e);
	} else {
		if (ns_fault_first(n, res == -EBADMSG ? NS_FAULT_CHECKSUM : NS_FAULT_READ))
			log_warn("namespace '%s': slot %u of %s: %s; a miss, the slot is "
				 "freed (further ones are counted in STATS, not logged)",
				 n->name, slot, spill_path(n->tier),
				 res == -EBADMSG ? "its checksum or header does not match"
						 : strerror(-res));
		prefix_remove(n->idx, e);
		pool_unref(p, pd->pages[i]);	/* INFLIGHT: free again */
		pd->pages[i] = 0;
		if (i < pd->hits)
			pd->hits = i;
	}
	if (--pd->outstanding == 0)
		pending_finish(pd);
}

/*
 * find_partial() - the partial page after block hits of an ACQUIRE: under
 * keys[hits - 1] (parent when hits is 0), matched against the request's
 * tokens of block hits; only one that is in the pool. PREFIX_NIL when the
 * tokens stop before it.
 */
static uint32_t find_partial(struct ns *n, const struct kvp_wire_acquire *a,
			     const uint8_t *keys, const void *raw, uint32_t hits,
			     uint32_t *tail)
{
	uint64_t start = (uint64_t)hits * n->block_tokens;
	uint32_t i, len, e;

	if (a->ntokens <= start)
		return PREFIX_NIL;
	len = a->ntokens - (uint32_t)start;
	if (len > n->block_tokens - 1)
		len = n->block_tokens - 1;
	for (i = 0; i < len; i++)
		tail[i] = wire_u32_at(raw, (size_t)start + i);
	e = prefix_find_partial(n->idx, hits ? keys + (size_t)(hits - 1) * KVP_KEY_BYTES
					     : a->parent, tail, len);
	return e != PREFIX_NIL && prefix_where(n->idx, e) == PREFIX_IN_POOL ? e : PREFIX_NIL;
}

/*
 * plan_hits() - how many leading keys can be served: in the pool, or in
 * the tier and readable now (not being written, a staging buffer free).
 * *restores counts the second kind.
 */
static uint32_t plan_hits(struct ns *n, const uint8_t *keys, uint32_t nkeys,
			  uint32_t *restores)
{
	uint32_t i, e, bufs = n->tier ? spill_idle_buffers(n->tier) : 0;

	*restores = 0;
	for (i = 0; i < nkeys; i++) {
		e = prefix_find(n->idx, keys + (size_t)i * KVP_KEY_BYTES);
		if (e == PREFIX_NIL)
			break;
		if (prefix_where(n->idx, e) == PREFIX_IN_POOL)
			continue;
		if (prefix_where(n->idx, e) != PREFIX_SPILLED ||
		    spill_busy(n->tier, prefix_slot(n->idx, e)) || *restores >= bufs)
			break;
		(*restores)++;
	}
	return i;
}

/*
 * start_restores() - lease the blocks in the pool, and start reading the
 * others back into fresh INFLIGHT pages. Returns the pending request, or
 * NULL when nothing needs reading (all leased; *hits may have shrunk if
 * the pool had no room for the reads).
 */
static struct pending *start_restores(struct conn *c, const uint8_t *keys,
				      uint64_t *pages, uint32_t *hits, uint32_t restores,
				      int *err)
{
	struct pool *p = c->srv->pool;
	struct ns *n = c->ns;
	struct spill_stats ts;
	struct pending *pd = NULL;
	uint64_t *fresh = NULL;
	uint32_t i, e, r = 0, slot;
	char msg[256];

	*err = 0;
	for (i = 0; i < *hits; i++) {	/* first the pool's: then no eviction takes them */
		e = prefix_find(n->idx, keys + (size_t)i * KVP_KEY_BYTES);
		prefix_touch(n->idx, e, true);
		pages[i] = 0;
		if (prefix_where(n->idx, e) != PREFIX_IN_POOL)
			continue;
		pages[i] = prefix_page(n->idx, e);
		if (lease_take(&c->leases, p, n, pages[i]) < 0)
			goto out_nomem;
	}
	if (!restores)
		return NULL;
	spill_get_stats(n->tier, &ts);
	pd = calloc(1, sizeof(*pd));
	fresh = calloc(restores, sizeof(*fresh));
	if (!pd || !fresh)
		goto out_nomem;
	pd->c = c;
	pd->n = n;
	pd->pages = pages;
	pd->restored = calloc(*hits, 1);
	pd->slot_index = calloc(ts.slots, sizeof(*pd->slot_index));
	if (!pd->restored || !pd->slot_index)
		goto out_nomem;
	if (!lease_make_room(p, n, restores) ||
	    pool_alloc(p, n->pool_ns, restores, fresh, msg, sizeof(msg)) < 0) {
		/* no room to read into: serve the prefix that is in the pool */
		for (i = 0; i < *hits && pages[i]; i++)
			;
		while (*hits > i)
			if (pages[--*hits])
				lease_drop(&c->leases, p, n, pages[*hits]);
		free(pd->restored);
		free(pd->slot_index);
		free(pd);
		free(fresh);
		return NULL;
	}
	pd->planned = pd->hits = *hits;
	for (i = 0; i < *hits; i++) {
		if (pages[i])
			continue;
		e = prefix_find(n->idx, keys + (size_t)i * KVP_KEY_BYTES);
		slot = prefix_slot(n->idx, e);
		pages[i] = fresh[r++];
		pool_inflight(p, pages[i]);
		pool_set_tag(p, pages[i], e);
		prefix_restoring(n->idx, e, pages[i]);
		pd->restored[i] = 1;
		pd->slot_index[slot] = i;
		pd->outstanding++;
		if (spill_read(n->tier, slot, prefix_key(n->idx, e),
			       pool_page_addr(p, pages[i]), restore_done, pd) < 0) {
			/* the ring is full: this block is lost, a miss */
			pd->outstanding--;
			n->slot_entry[slot] = PREFIX_NIL;
			spill_free(n->tier, slot);
			prefix_remove(n->idx, e);
			pool_unref(p, pages[i]);
			pages[i] = 0;
			pd->restored[i] = 0;
			if (i < pd->hits)
				pd->hits = i;
		}
	}
	free(fresh);
	return pd;

out_nomem:
	*err = -ENOMEM;
	while (i--)
		if (pages[i])
			lease_drop(&c->leases, p, n, pages[i]);
	if (pd) {
		free(pd->restored);
		free(pd->slot_index);
	}
	free(pd);
	free(fresh);
	return NULL;
}

static void handle_acquire(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload)
{
	struct kvp_wire_acquire a;
	struct pending *pd;
	const uint8_t *keys;
	const void *raw;
	uint32_t *tail, hits, planned, restores, pe;
	uint64_t *pages, partial_page = 0;
	struct ns *n;
	int err;

	if (wire_acquire_decode(payload, req->len, &a, &keys, &raw) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "ACQUIRE key or token count disagrees "
			   "with the payload");
		return;
	}
	if (!need_ns(c, req))
		return;
	n = c->ns;
	if ((uint64_t)a.ntokens >= ((uint64_t)a.nkeys + 1) * n->block_tokens) {
		conn_error(c, req, KVP_S_INVAL, "ACQUIRE of %u keys with %u tokens: the "
			   "tokens run from the first key's block to before the end of "
			   "the block after the last (%u tokens per block)", a.nkeys,
			   a.ntokens, n->block_tokens);
		return;
	}
	/* Find first, lease after: a refusal must change nothing. */
	hits = plan_hits(n, keys, a.nkeys, &restores);
	tail = malloc(n->block_tokens * sizeof(*tail));
	pages = calloc(hits + 1, sizeof(*pages));
	if (!tail || !pages) {
		free(tail);
		free(pages);
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", hits);
		return;
	}
	pe = find_partial(n, &a, keys, raw, hits, tail);
	free(tail);
	if (!room_for_leases(c, req, hits + (pe != PREFIX_NIL)))
		goto out;
	/* reads need free pages: wait for the tier rather than serve less */
	if (restores && tier_wait(c, req, restores))
		goto out;
	if (pe != PREFIX_NIL) {
		prefix_touch(n->idx, pe, true);
		partial_page = prefix_page(n->idx, pe);
		if (lease_take(&c->leases, c->srv->pool, n, partial_page) < 0) {
			conn_error(c, req, KVP_S_INTERNAL, "out of memory recording leases");
			goto out;
		}
	}
	planned = hits;
	pd = start_restores(c, keys, pages, &hits, restores, &err);
	if (err) {
		if (partial_page)
			lease_drop(&c->leases, c->srv->pool, n, partial_page);
		conn_error(c, req, KVP_S_INTERNAL, "out of memory recording leases");
		goto out;
	}
	if (pd) {	/* the reply waits for the reads */
		pd->req = *req;
		pd->nkeys = a.nkeys;
		pd->partial_page = partial_page;
		pd->partial_tokens = partial_page ? prefix_tokens(n->idx, pe) : 0;
		c->deferred = true;
		conn_hold(c);
		if (pd->outstanding == 0)	/* every read failed at once */
			pending_finish(pd);
		return;
	}
	if (partial_page && hits < planned) {
		lease_drop(&c->leases, c->srv->pool, n, partial_page);
		partial_page = 0;
	}
	acquire_reply(c, n, req, a.nkeys, pages, hits, partial_page,
		      partial_page ? prefix_tokens(n->idx, pe) : 0);
out:
	free(pages);
}

/*
 * publishable() - true when h is a PRIVATE page of c's namespace that
 * only c holds; else replies INVAL (or STALE) naming entry i.
 */
static bool publishable(struct conn *c, const struct kvp_wire_hdr *req, uint64_t h,
			uint32_t i)
{
	struct pool *p = c->srv->pool;

	if (pool_lookup(p, c->ns->pool_ns, h) < 0 || !lease_holds(&c->leases, h)) {
		conn_error(c, req, KVP_S_STALE, "page handle %#llx (entry %u) is not leased "
			   "by this client; nothing was published", (unsigned long long)h, i);
		return false;
	}
	if (pool_state(p, h) != PAGE_PRIVATE || pool_refs(p, h) != 1) {
		conn_error(c, req, KVP_S_INVAL, "page %#llx (entry %u) is already published "
			   "or held by others: only a private page held once can be "
			   "published; nothing was published", (unsigned long long)h, i);
		return false;
	}
	return true;
}

/*
 * publish_one() - index page under key (or, with ntokens, as a partial
 * page under parent_key) unless the key is indexed already: then c gets
 * a lease on the page that is. Returns the canonical page and sets *e to
 * its entry; 0 when memory ran out.
 */
static uint64_t publish_one(struct conn *c, const uint8_t *key, const uint8_t *parent_key,
			    uint32_t parent, uint64_t page, unsigned prio,
			    const uint32_t *tokens, uint32_t ntokens, uint32_t *e)
{
	struct pool *p = c->srv->pool;
	struct ns *n = c->ns;

	*e = ntokens ? prefix_find_partial_exact(n->idx, parent_key, tokens, ntokens)
		     : prefix_find(n->idx, key);
	if (*e != PREFIX_NIL && prefix_where(n->idx, *e) == PREFIX_SPILLED &&
	    !spill_busy(n->tier, prefix_slot(n->idx, *e))) {
		/* the key's bytes are in the tier: this page takes its place */
		uint32_t slot = prefix_slot(n->idx, *e);

		n->slot_entry[slot] = PREFIX_NIL;
		spill_free(n->tier, slot);
		prefix_restoring(n->idx, *e, page);
		prefix_restored(n->idx, *e);
		pool_publish(p, page);
		pool_set_tag(p, page, *e);
		n->st.publishes++;
		return page;
	}
	if (*e != PREFIX_NIL && prefix_where(n->idx, *e) != PREFIX_IN_POOL)
		return page;	/* on its way in or out: leave this page private */
	if (*e != PREFIX_NIL) {
		uint64_t canon = prefix_page(n->idx, *e);

		if (lease_take(&c->leases, p, n, canon) < 0)
			return 0;
		n->st.dedups++;
		return canon;
	}
	*e = prefix_insert(n->idx, key, parent_key, parent, page, prio, tokens, ntokens);
	if (*e == PREFIX_NIL)
		return 0;
	pool_publish(p, page);
	pool_set_tag(p, page, *e);
	n->st.publishes++;
	return page;
}

static void handle_publish(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload)
{
	struct kvp_wire_publish_ent ent;
	struct kvp_wire_publish pb;
	const void *ents;
	struct hset seen;
	uint64_t *reply, fresh = 0;
	uint32_t i, e, parent;
	const uint8_t *parent_key;
	struct ns *n;

	if (wire_publish_decode(payload, req->len, &pb, &ents) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "PUBLISH entry count disagrees with the payload");
		return;
	}
	if (!need_ns(c, req))
		return;
	n = c->ns;
	if (pb.prio > KVP_PRIO_PINNED) {
		conn_error(c, req, KVP_S_INVAL, "PUBLISH priority %u is not 0..%u",
			   pb.prio, KVP_PRIO_PINNED);
		return;
	}
	/* Check everything first: pages, repeats, the dedup hits' leases,
	 * the pinned quota. */
	hset_init(&seen);
	for (i = 0; i < pb.n; i++) {
		wire_publish_ent_at(ents, i, &ent);
		if (!publishable(c, req, ent.page, i))
			goto out_seen;
		if (hset_count(&seen, ent.page)) {
			conn_error(c, req, KVP_S_INVAL, "page %#llx appears twice (entry %u); "
				   "nothing was published", (unsigned long long)ent.page, i);
			goto out_seen;
		}
		if (hset_add(&seen, ent.page, 1) < 0) {
			conn_error(c, req, KVP_S_INTERNAL, "out of memory");
			goto out_seen;
		}
		fresh += prefix_find(n->idx, ent.key) == PREFIX_NIL;
	}
	if (!room_for_leases(c, req, pb.n - fresh))
		goto out_seen;
	if (pb.prio == KVP_PRIO_PINNED && prefix_pinned(n->idx) + fresh > n->pinned_quota) {
		conn_error(c, req, KVP_S_LIMIT, "namespace '%s': pinning %llu more pages "
			   "would pass its pinned quota of %llu (%u pinned); publish "
			   "with a lower priority or raise --pinned-quota", n->name,
			   (unsigned long long)fresh, (unsigned long long)n->pinned_quota,
			   prefix_pinned(n->idx));
		goto out_seen;
	}
	reply = malloc(wire_pages_size(pb.n));
	if (!reply) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", pb.n);
		goto out_seen;
	}
	memcpy(reply, &(struct kvp_wire_pages){ .n = pb.n }, sizeof(struct kvp_wire_pages));
	parent = prefix_find(n->idx, pb.parent);
	parent_key = pb.parent;
	for (i = 0; i < pb.n; i++) {
		const uint8_t *key = (const uint8_t *)ents + (size_t)i * sizeof(ent) +
				     offsetof(struct kvp_wire_publish_ent, key);

		wire_publish_ent_at(ents, i, &ent);
		reply[1 + i] = publish_one(c, ent.key, parent_key, parent, ent.page,
					   pb.prio, NULL, 0, &e);
		if (!reply[1 + i]) {
			log_error("namespace '%s': out of memory publishing entry %u of %u",
				  n->name, i, pb.n);
			conn_error(c, req, KVP_S_INTERNAL, "out of memory after publishing %u "
				   "of %u pages; the first %u are published", i, pb.n, i);
			goto out_reply;
		}
		parent = e;
		parent_key = key;
	}
	conn_reply(c, req, KVP_S_OK, reply, wire_pages_size(pb.n), -1);
out_reply:
	free(reply);
out_seen:
	hset_fini(&seen);
}

static void handle_publish_partial(struct conn *c, const struct kvp_wire_hdr *req,
				   const uint8_t *payload)
{
	struct kvp_wire_publish_partial pp;
	struct kvp_wire_pages one = { .n = 1 };
	uint64_t reply[2], canon;
	const void *raw;
	uint32_t *tokens, i, e;
	struct ns *n;

	if (wire_partial_decode(payload, req->len, &pp, &raw) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "PUBLISH_PARTIAL token count disagrees "
			   "with the payload");
		return;
	}
	if (!need_ns(c, req))
		return;
	n = c->ns;
	if (pp.ntokens == 0 || pp.ntokens >= n->block_tokens || pp.prio > KVP_PRIO_PINNED) {
		conn_error(c, req, KVP_S_INVAL, "PUBLISH_PARTIAL of %u tokens at priority %u: "
			   "a partial page holds 1..%u tokens, priorities are 0..%u",
			   pp.ntokens, pp.prio, n->block_tokens - 1, KVP_PRIO_PINNED);
		return;
	}
	if (!publishable(c, req, pp.page, 0))
		return;
	tokens = malloc(pp.ntokens * sizeof(*tokens));
	if (!tokens) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u tokens", pp.ntokens);
		return;
	}
	for (i = 0; i < pp.ntokens; i++)
		tokens[i] = wire_u32_at(raw, i);
	e = prefix_find_partial_exact(n->idx, pp.parent, tokens, pp.ntokens);
	if (e != PREFIX_NIL && !room_for_leases(c, req, 1))
		goto out;
	if (e == PREFIX_NIL && pp.prio == KVP_PRIO_PINNED &&
	    prefix_pinned(n->idx) + 1 > n->pinned_quota) {
		conn_error(c, req, KVP_S_LIMIT, "namespace '%s': its pinned quota of %llu "
			   "pages is used up; publish with a lower priority or raise "
			   "--pinned-quota", n->name, (unsigned long long)n->pinned_quota);
		goto out;
	}
	canon = publish_one(c, NULL, pp.parent, prefix_find(n->idx, pp.parent), pp.page,
			    pp.prio, tokens, pp.ntokens, &e);
	if (!canon) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory publishing a partial page");
		goto out;
	}
	memcpy(reply, &one, sizeof(one));
	reply[1] = canon;
	conn_reply(c, req, KVP_S_OK, reply, sizeof(reply), -1);
out:
	free(tokens);
}

/* --- inspection and admin ------------------------------------------------ */

/* need_admin() - true for an admin connection; else replies PERM. */
static bool need_admin(struct conn *c, const struct kvp_wire_hdr *req)
{
	if (c->admin)
		return true;
	conn_error(c, req, KVP_S_PERM, "%s needs admin rights: run it as root, as the "
		   "daemon's user (uid %u), or as a member of kvpoold's --admin-group",
		   wire_op_str(req->op), (unsigned)geteuid());
	return false;
}

/* records_fit() - how many records of size bytes fit a reply. */
static size_t records_fit(const struct server *s, size_t size)
{
	return (s->opt->max_msg_size - KVP_WIRE_HDR_SIZE - sizeof(struct kvp_wire_count)) / size;
}

/* name_field() - a NUL-terminated name from a fixed field, or NULL when it
 * is not terminated (INVAL replied). */
static const char *name_field(struct conn *c, const struct kvp_wire_hdr *req,
			      const char *field, size_t size)
{
	if (memchr(field, '\0', size))
		return field;
	conn_error(c, req, KVP_S_INVAL, "%s: the namespace name is not NUL-terminated",
		   wire_op_str(req->op));
	return NULL;
}

/* ns_arg() - the namespace a request names, NULL for all ("" given);
 * *bad when it names one that does not exist (NOENT replied). */
static struct ns *ns_arg(struct conn *c, const struct kvp_wire_hdr *req,
			 const char *name, bool *bad)
{
	struct ns *n;

	*bad = false;
	if (!name[0])
		return NULL;
	n = ns_by_name(&c->srv->nst, name);
	if (!n) {
		conn_error(c, req, KVP_S_NOENT, "no namespace '%s' (kvpool namespaces lists "
			   "them)", name);
		*bad = true;
	}
	return n;
}

static void handle_list_clients(struct conn *c, const struct kvp_wire_hdr *req)
{
	struct server *s = c->srv;
	struct kvp_wire_count cnt = { 0 };
	struct kvp_wire_client *r;
	size_t max = records_fit(s, sizeof(*r));
	uint8_t *buf;
	struct conn *o;

	if (req->len) {
		conn_error(c, req, KVP_S_INVAL, "LIST_CLIENTS takes no payload");
		return;
	}
	buf = calloc(1, sizeof(cnt) + max * sizeof(*r));
	if (!buf) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory");
		return;
	}
	r = (struct kvp_wire_client *)(buf + sizeof(cnt));
	for (o = s->conns; o; o = o->next) {
		if (o->refused)
			continue;
		cnt.total++;
		if (cnt.count >= max)
			continue;
		r[cnt.count].id = o->id;
		r[cnt.count].pid = (uint32_t)o->cred.pid;
		r[cnt.count].uid = (uint32_t)o->cred.uid;
		r[cnt.count].gid = (uint32_t)o->cred.gid;
		r[cnt.count].admin = o->admin;
		r[cnt.count].leases = o->leases.total;
		r[cnt.count].connected_ms = o->connected_ms;
		memcpy(r[cnt.count].name, o->name, sizeof(r->name));
		if (o->ns)
			memcpy(r[cnt.count].ns, o->ns->name, sizeof(r->ns));
		cnt.count++;
	}
	memcpy(buf, &cnt, sizeof(cnt));
	conn_reply(c, req, KVP_S_OK, buf, sizeof(cnt) + cnt.count * sizeof(*r), -1);
	free(buf);
}

/* wire_state() - the KVP_PAGE_* of a pool page. */
static uint32_t wire_state(int state)
{
	switch (state) {
	case PAGE_PRIVATE:
		return KVP_PAGE_PRIVATE;
	case PAGE_SHARED:
		return KVP_PAGE_SHARED;
	case PAGE_CACHED:
		return KVP_PAGE_CACHED;
	case PAGE_INFLIGHT:
		return KVP_PAGE_INFLIGHT;
	}
	return 0;
}

/* page_record() - describe page h (0: spilled entry e) of n. */
static void page_record(struct server *s, struct ns *n, uint64_t h, uint32_t e,
			struct kvp_wire_page *r)
{
	struct conn *o;
	int st = h ? pool_state(s->pool, h) : -1;

	memset(r, 0, sizeof(*r));
	r->handle = h;
	r->ns_id = n->id;
	r->state = h ? wire_state(st) : KVP_PAGE_SPILLED;
	r->refs = h ? pool_refs(s->pool, h) : 0;
	for (o = s->conns; h && o; o = o->next) {
		if (o->ns != n || !hset_count(&o->leases, h))
			continue;
		if (!r->holders++)
			r->holder = o->id;
	}
	if (h && (st == PAGE_SHARED || st == PAGE_CACHED || st == PAGE_INFLIGHT))
		e = pool_tag(s->pool, h);
	if (e != PREFIX_NIL) {
		r->prio = prefix_prio(n->idx, e);
		r->tokens = prefix_tokens(n->idx, e) ? prefix_tokens(n->idx, e) : n->block_tokens;
		r->age_ms = prefix_age_ms(n->idx, e);
		memcpy(r->key, prefix_key(n->idx, e), sizeof(r->key));
	}
}

static void handle_list_pages(struct conn *c, const struct kvp_wire_hdr *req,
			      const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_count cnt = { 0 };
	struct kvp_wire_list_pages f;
	struct kvp_wire_page *r, rec;
	struct conn *holder = NULL, *o;
	size_t max = records_fit(s, sizeof(*r));
	uint64_t cursor, h;
	struct ns *only;
	uint32_t i, e;
	uint8_t *buf;
	bool bad;

	if (wire_fixed_decode(payload, req->len, &f, sizeof(f)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "LIST_PAGES payload is not 80 bytes");
		return;
	}
	if (!name_field(c, req, f.ns, sizeof(f.ns)))
		return;
	only = ns_arg(c, req, f.ns, &bad);
	if (bad)
		return;
	if (f.state > KVP_PAGE_SPILLED) {
		conn_error(c, req, KVP_S_INVAL, "LIST_PAGES: state %u is not 0..%u", f.state,
			   KVP_PAGE_SPILLED);
		return;
	}
	for (o = s->conns; f.client && o; o = o->next)
		if (o->id == f.client && !o->refused)
			holder = o;
	if (f.client && !holder) {
		conn_error(c, req, KVP_S_NOENT, "no client %llu (kvpool clients lists them)",
			   (unsigned long long)f.client);
		return;
	}
	if (f.limit && f.limit < max)
		max = f.limit;
	buf = calloc(1, sizeof(cnt) + max * sizeof(*r));
	if (!buf) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory");
		return;
	}
	r = (struct kvp_wire_page *)(buf + sizeof(cnt));
	for (i = 0; i < s->nst.count; i++) {
		struct ns *n = s->nst.ns[i];

		if (only && n != only)
			continue;
		for (cursor = 0; pool_next(s->pool, n->pool_ns, &cursor, &h);) {
			if (holder && !hset_count(&holder->leases, h))
				continue;
			page_record(s, n, h, PREFIX_NIL, &rec);
			if (f.state && rec.state != f.state)
				continue;
			cnt.total++;
			if (cnt.count < max)
				r[cnt.count++] = rec;
		}
		if (holder || (f.state && f.state != KVP_PAGE_SPILLED))
			continue;
		for (e = prefix_next(n->idx, PREFIX_NIL); e; e = prefix_next(n->idx, e)) {
			if (prefix_where(n->idx, e) != PREFIX_SPILLED)
				continue;
			page_record(s, n, 0, e, &rec);
			cnt.total++;
			if (cnt.count < max)
				r[cnt.count++] = rec;
		}
	}
	memcpy(buf, &cnt, sizeof(cnt));
	conn_reply(c, req, KVP_S_OK, buf, sizeof(cnt) + cnt.count * sizeof(*r), -1);
	free(buf);
}

static void handle_list_prefixes(struct conn *c, const struct kvp_wire_hdr *req,
				 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_count cnt = { 0 };
	struct kvp_wire_list_prefixes lp;
	struct kvp_wire_prefix *r;
	size_t max = records_fit(s, sizeof(*r));
	struct ns *only;
	uint32_t i, e, k;
	uint8_t *buf;
	bool bad;

	if (wire_fixed_decode(payload, req->len, &lp, sizeof(lp)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "LIST_PREFIXES payload is not 72 bytes");
		return;
	}
	if (!name_field(c, req, lp.ns, sizeof(lp.ns)))
		return;
	only = ns_arg(c, req, lp.ns, &bad);
	if (bad)
		return;
	if (lp.top && lp.top < max)
		max = lp.top;
	buf = calloc(1, sizeof(cnt) + (max + 1) * sizeof(*r));
	if (!buf) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory");
		return;
	}
	r = (struct kvp_wire_prefix *)(buf + sizeof(cnt));
	/* the top max by hits: insertion into a sorted array, O(entries x max) */
	for (i = 0; i < s->nst.count; i++) {
		struct ns *n = s->nst.ns[i];

		if (only && n != only)
			continue;
		for (e = prefix_next(n->idx, PREFIX_NIL); e; e = prefix_next(n->idx, e)) {
			struct kvp_wire_prefix rec = { 0 };
			unsigned where = prefix_where(n->idx, e);

			cnt.total++;
			memcpy(rec.key, prefix_key(n->idx, e), sizeof(rec.key));
			rec.ns_id = n->id;
			rec.depth = prefix_depth(n->idx, e);
			rec.hits = prefix_hits(n->idx, e);
			rec.bytes = (uint64_t)rec.depth * n->page_bytes;
			rec.state = where == PREFIX_SPILLED ? KVP_PAGE_SPILLED :
				    wire_state(pool_state(s->pool, prefix_page(n->idx, e)));
			rec.refs = where == PREFIX_IN_POOL ?
				   pool_refs(s->pool, prefix_page(n->idx, e)) : 0;
			for (k = cnt.count; k > 0 && r[k - 1].hits < rec.hits; k--)
				if (k < max)
					r[k] = r[k - 1];
			if (k < max) {
				r[k] = rec;
				if (cnt.count < max)
					cnt.count++;
			}
		}
	}
	memcpy(buf, &cnt, sizeof(cnt));
	conn_reply(c, req, KVP_S_OK, buf, sizeof(cnt) + cnt.count * sizeof(*r), -1);
	free(buf);
}

static void handle_evict(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_count cnt = { 0 };
	struct kvp_wire_evict ev;
	struct ns *only;
	uint64_t done = 0;
	uint32_t i;
	bool bad;

	if (wire_fixed_decode(payload, req->len, &ev, sizeof(ev)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "EVICT payload is not 72 bytes");
		return;
	}
	if (!need_admin(c, req) || !name_field(c, req, ev.ns, sizeof(ev.ns)))
		return;
	only = ns_arg(c, req, ev.ns, &bad);
	if (bad)
		return;
	for (i = 0; i < s->nst.count; i++) {
		struct ns *n = s->nst.ns[i];

		if (only && n != only)
			continue;
		while ((!ev.max || done < ev.max) && lease_evict_one(s->pool, n))
			done++;
	}
	cnt.count = 0;	/* no records follow: total is the count evicted */
	cnt.total = (uint32_t)(done > INT32_MAX ? INT32_MAX : done);
	log_info("client %llu evicted %llu cached pages%s%s", (unsigned long long)c->id,
		 (unsigned long long)done, only ? " of namespace " : "",
		 only ? only->name : "");
	conn_reply(c, req, KVP_S_OK, &cnt, sizeof(cnt), -1);
}

static void handle_disconnect(struct conn *c, const struct kvp_wire_hdr *req,
			      const uint8_t *payload)
{
	struct kvp_wire_disconnect d;
	struct conn *o;

	if (wire_fixed_decode(payload, req->len, &d, sizeof(d)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "DISCONNECT payload is not 8 bytes");
		return;
	}
	if (!need_admin(c, req))
		return;
	for (o = c->srv->conns; o; o = o->next)
		if (o->id == d.client && !o->refused)
			break;
	if (!o) {
		conn_error(c, req, KVP_S_NOENT, "no client %llu (kvpool clients lists them)",
			   (unsigned long long)d.client);
		return;
	}
	if (o == c) {	/* answer first, then go */
		c->close_after_send = true;
		conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
		return;
	}
	conn_kick(o);
	conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
}

static void handle_drop_ns(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload)
{
	struct kvp_wire_drop_ns d;
	char err[KVP_WIRE_ERRMSG_MAX];
	struct ns *n;
	bool bad;

	if (wire_fixed_decode(payload, req->len, &d, sizeof(d)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "DROP_NS payload is not 64 bytes");
		return;
	}
	if (!need_admin(c, req) || !name_field(c, req, d.ns, sizeof(d.ns)))
		return;
	if (!d.ns[0]) {
		conn_error(c, req, KVP_S_INVAL, "DROP_NS needs a namespace name");
		return;
	}
	n = ns_arg(c, req, d.ns, &bad);
	if (bad)
		return;
	if (ns_drop(&c->srv->nst, c->srv->pool, n, err, sizeof(err)) < 0) {
		conn_error(c, req, KVP_S_STATE, "%s", err);
		return;
	}
	conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
}

void requests_handle(struct conn *c, const struct kvp_wire_hdr *req,
		     const uint8_t *payload)
{
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
		handle_acquire(c, req, payload);
		break;
	case KVP_OP_PUBLISH:
		handle_publish(c, req, payload);
		break;
	case KVP_OP_PUBLISH_PARTIAL:
		handle_publish_partial(c, req, payload);
		break;
	case KVP_OP_COW:
		handle_cow(c, req, payload);
		break;
	case KVP_OP_RETAIN:
		handle_retain(c, req, payload);
		break;
	case KVP_OP_LIST_CLIENTS:
		handle_list_clients(c, req);
		break;
	case KVP_OP_LIST_PAGES:
		handle_list_pages(c, req, payload);
		break;
	case KVP_OP_LIST_PREFIXES:
		handle_list_prefixes(c, req, payload);
		break;
	case KVP_OP_EVICT:
		handle_evict(c, req, payload);
		break;
	case KVP_OP_DISCONNECT:
		handle_disconnect(c, req, payload);
		break;
	case KVP_OP_DROP_NS:
		handle_drop_ns(c, req, payload);
		break;
	default:
		conn_error(c, req, KVP_S_OP, "unknown operation %u", req->op);
		break;
	}
}

void requests_conn_gone(struct conn *c)
{
	uint64_t dropped;

	if (!c->ns) {
		hset_fini(&c->leases);
		return;
	}
	dropped = lease_drop_all(&c->leases, c->srv->pool, c->ns);
	c->ns->clients--;
	if (dropped)
		log_info("client %llu (%s, pid %d) left namespace '%s'; its %llu "
			 "leases were dropped", (unsigned long long)c->id, c->name,
			 (int)c->cred.pid, c->ns->name, (unsigned long long)dropped);
	c->ns = NULL;
}
