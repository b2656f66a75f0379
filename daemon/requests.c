/* SPDX-License-Identifier: MIT */
/*
 * requests.c - what kvpoold does for each request: HELLO, STATS,
 * MAP_SLAB, ALLOC, RELEASE; and the leases a connection holds.
 *
 * Every handler checks its payload completely before it changes
 * anything, and a request that fails changes nothing: ALLOC is all or
 * none, RELEASE too. Leases are counted per connection in an hset and as
 * references in the pool; requests_conn_gone() returns them all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/conn.h"
#include "daemon/log.h"

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
		rc = ns_join(&s->nst, s->pool, &h, &n, err, sizeof(err));
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
		log_info("client %llu (%s, pid %d, uid %u) joined namespace '%s'",
			 (unsigned long long)c->id, c->name, (int)c->cred.pid,
			 (unsigned)c->cred.uid, n->name);
	}
	conn_reply(c, req, KVP_S_OK, &rep, sizeof(rep), -1);
}

/* need_ns() - true when c joined a namespace; else replies STATE. */
static bool need_ns(struct conn *c, const struct kvp_wire_hdr *req)
{
	if (c->ns)
		return true;
	conn_error(c, req, KVP_S_STATE, "%s needs a namespace: send HELLO with one first",
		   wire_op_str(req->op));
	return false;
}

static void fill_counts(const struct pool_counts *pc, uint64_t *total, uint64_t *free_,
			uint64_t *private_)
{
	*total = pc->total;
	*free_ = pc->by_state[PAGE_FREE];
	*private_ = pc->by_state[PAGE_PRIVATE];
}

static void handle_stats(struct conn *c, const struct kvp_wire_hdr *req)
{
	struct server *s = c->srv;
	struct kvp_wire_stats st;
	struct pool_counts pc;
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
	if (pool_audit(s->pool) && pc.total == pc.by_state[PAGE_FREE] +
	    pc.by_state[PAGE_PRIVATE])
		st.flags |= KVP_STATS_F_CONSERVED;
	else
		log_error("conservation check failed: the page counts do not add up "
			  "(a kvpoold bug; please report it with `kvpool --json status`)");
	fill_counts(&pc, &st.pages_total, &st.pages_free, &st.pages_private);
	memcpy(buf, &st, sizeof(st));

	for (i = 0; i < s->nst.count; i++) {
		const struct ns *n = s->nst.ns[i];
		struct kvp_wire_ns_stats r;

		memset(&r, 0, sizeof(r));
		memcpy(r.name, n->name, sizeof(r.name));
		memcpy(r.model, n->model, sizeof(r.model));
		r.id = n->id;
		r.layers = n->layers;
		r.kv_heads = n->kv_heads;
		r.head_dim = n->head_dim;
		r.block_tokens = n->block_tokens;
		r.dtype = n->dtype;
		r.clients = n->clients;
		r.page_bytes = n->page_bytes;
		r.page_stride = pool_ns_page_stride(s->pool, n->pool_ns);
		pool_counts(s->pool, n->pool_ns, &pc);
		r.slabs = (uint32_t)pc.slabs;
		fill_counts(&pc, &r.pages_total, &r.pages_free, &r.pages_private);
		memcpy(buf + wire_stats_size(i), &r, sizeof(r));
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

static void handle_alloc(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_pages pl;
	char err[KVP_WIRE_ERRMSG_MAX];
	uint64_t *handles;
	struct pool_counts pc;
	size_t i;
	int rc;

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
	if (c->leases.total + pl.n > s->opt->max_leases) {
		conn_error(c, req, KVP_S_LIMIT, "ALLOC of %u pages: this client holds %llu, "
			   "max-leases is %llu; release pages first", pl.n,
			   (unsigned long long)c->leases.total,
			   (unsigned long long)s->opt->max_leases);
		return;
	}
	handles = malloc(wire_pages_size(pl.n));
	if (!handles) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", pl.n);
		return;
	}
	memcpy(handles, &pl, sizeof(pl));	/* the reply starts with the count */
	rc = pool_alloc(s->pool, c->ns->pool_ns, pl.n, handles + 1, err, sizeof(err));
	if (rc == -ENOSPC) {
		pool_counts(s->pool, c->ns->pool_ns, &pc);
		conn_error(c, req, KVP_S_NOSPC, "namespace '%s': %u pages wanted, %llu free "
			   "and the pool (%llu bytes) has no room for more slabs; release "
			   "pages or raise --pool-size", c->ns->name, pl.n,
			   (unsigned long long)pc.by_state[PAGE_FREE],
			   (unsigned long long)pool_bytes(s->pool));
		goto out;
	}
	if (rc < 0) {
		log_error("namespace '%s': allocating %u pages: %s", c->ns->name, pl.n, err);
		conn_error(c, req, KVP_S_INTERNAL, "%s", err);
		goto out;
	}
	for (i = 0; i < pl.n; i++) {
		if (hset_add(&c->leases, handles[1 + i], 1) < 0) {
			while (i--)
				hset_sub(&c->leases, handles[1 + i], 1);
			for (i = 0; i < pl.n; i++)
				pool_unref(s->pool, handles[1 + i]);
			conn_error(c, req, KVP_S_INTERNAL, "out of memory recording leases");
			goto out;
		}
	}
	s->n.allocs += pl.n;
	conn_reply(c, req, KVP_S_OK, handles, wire_pages_size(pl.n), -1);
out:
	free(handles);
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
	for (i = 0; i < n; i++)
		pool_unref(s->pool, wire_handle_at(handles, i));
	s->n.releases += n;
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
	default:
		conn_error(c, req, KVP_S_OP, "unknown operation %u", req->op);
		break;
	}
}

void requests_conn_gone(struct conn *c)
{
	struct pool *p = c->srv->pool;
	uint64_t dropped = c->leases.total;
	size_t i;
	uint32_t k;

	for (i = 0; i < c->leases.cap; i++)
		for (k = 0; c->leases.keys && c->leases.keys[i] && k < c->leases.counts[i]; k++)
			pool_unref(p, c->leases.keys[i]);
	hset_fini(&c->leases);
	if (c->ns) {
		c->ns->clients--;
		if (dropped)
			log_info("client %llu (%s, pid %d) left namespace '%s'; its %llu "
				 "leases were dropped", (unsigned long long)c->id, c->name,
				 (int)c->cred.pid, c->ns->name, (unsigned long long)dropped);
		c->ns = NULL;
	}
}
