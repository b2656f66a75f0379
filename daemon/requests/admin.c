/* SPDX-License-Identifier: MIT */
/*
 * admin.c - inspection and administration requests: LIST_CLIENTS,
 * LIST_PAGES, LIST_PREFIXES, and for admins (root, the daemon's user,
 * --admin-group, or an --access rule's admin of the namespace) EVICT,
 * DISCONNECT and DROP_NS.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/requests/ns.h"
#include "daemon/requests/requests.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/conn.h"
#include "daemon/store/lease.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/tier.h"

_Static_assert(ACCESS_READ == KVP_RIGHT_READ && ACCESS_WRITE == KVP_RIGHT_WRITE &&
	       ACCESS_ADMIN == KVP_RIGHT_ADMIN, "the wire's rights are the rules'");

/*
 * need_admin() - true when c may administer namespace ns (NULL: every
 * namespace, which takes an admin of the daemon: root, its user or the
 * --admin-group); else replies PERM.
 */
static bool need_admin(struct conn *c, const struct kvp_wire_hdr *req, const char *ns)
{
	const struct server *s = c->srv;

	if (c->admin || (ns && (access_rights(s->rules, s->nrules, ns, &c->peer) &
				ACCESS_ADMIN)))
		return true;
	if (ns)
		conn_error(c, req, KVP_S_PERM, "%s of namespace '%s' needs admin rights "
			   "there: run it as root, as the daemon's user (uid %u), as a "
			   "member of kvpoold's --admin-group, or as someone an --access "
			   "rule gives admin on '%s'", wire_op_str(req->op), ns,
			   (unsigned)geteuid(), ns);
	else
		conn_error(c, req, KVP_S_PERM, "%s of every namespace needs admin rights: "
			   "run it as root, as the daemon's user (uid %u), or as a member "
			   "of kvpoold's --admin-group (or name one namespace you "
			   "administer)", wire_op_str(req->op), (unsigned)geteuid());
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

/*
 * may_see() - c may list the pages and keys of n: it has a right there
 * (with no --access rules everyone may read everywhere), or is an admin
 * of the daemon. Keys and pages are what a namespace holds; their
 * counts and its name are in STATS for anyone.
 */
static bool may_see(const struct conn *c, const struct ns *n)
{
	const struct server *s = c->srv;

	return c->admin || access_rights(s->rules, s->nrules, n->name, &c->peer) != 0;
}

/* visible() - the namespace named by a listing, or NULL for all: false
 * (replied) when it does not exist or c may not see it. */
static bool visible(struct conn *c, const struct kvp_wire_hdr *req, const char *name,
		    struct ns **only)
{
	bool bad;

	*only = ns_arg(c, req, name, &bad);
	if (bad)
		return false;
	if (*only && !may_see(c, *only)) {
		conn_error(c, req, KVP_S_PERM, "%s of namespace '%s' needs a right there "
			   "(read, write or admin); uid %u (gid %u) has none: ask the "
			   "daemon's admin for an --access rule (kvpoold(8), ACCESS)",
			   wire_op_str(req->op), name, (unsigned)c->peer.uid,
			   (unsigned)c->peer.gid);
		return false;
	}
	return true;
}

void admin_list_clients(struct conn *c, const struct kvp_wire_hdr *req)
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
		r[cnt.count].rights = (o->ns ? o->rights & ACCESS_ALL : 0) |
				      (o->admin ? KVP_RIGHT_ADMIN_ALL : 0);
		r[cnt.count].leases = lease_count(&o->leases);
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

/* page_record() - describe page h (0: entry e in a tier) of n at time
 * now. O(1): the pool knows a page's holders. */
static void page_record(struct server *s, struct ns *n, uint64_t h, uint32_t e,
			uint64_t now, struct kvp_wire_page *r)
{
	int st = h ? pool_state(s->pool, h) : -1;

	memset(r, 0, sizeof(*r));
	r->handle = h;
	r->ns_id = n->id;
	r->state = h ? wire_state(st) : prefix_where(n->idx, e) == PREFIX_HOST ?
					KVP_PAGE_HOST : KVP_PAGE_SPILLED;
	r->refs = h ? pool_refs(s->pool, h) : 0;
	r->holders = h ? pool_holders(s->pool, h, &r->holder) : 0;
	if (h && (st == PAGE_SHARED || st == PAGE_CACHED || st == PAGE_INFLIGHT))
		e = pool_tag(s->pool, h);
	if (e != PREFIX_NIL) {
		r->prio = prefix_prio(n->idx, e);
		r->tokens = prefix_tokens(n->idx, e) ? prefix_tokens(n->idx, e) : n->block_tokens;
		r->age_ms = prefix_age_ms(n->idx, e, now);
		memcpy(r->key, prefix_key(n->idx, e), sizeof(r->key));
	}
}

void admin_list_pages(struct conn *c, const struct kvp_wire_hdr *req,
			      const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_count cnt = { 0 };
	struct kvp_wire_list_pages f;
	struct kvp_wire_page *r, rec;
	struct conn *holder = NULL, *o;
	size_t max = records_fit(s, sizeof(*r));
	uint64_t cursor, h, now = prefix_now_ms();
	struct ns *only;
	uint32_t i, e;
	uint8_t *buf;

	if (wire_fixed_decode(payload, req->len, &f, sizeof(f)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "LIST_PAGES payload is not 80 bytes");
		return;
	}
	if (!name_field(c, req, f.ns, sizeof(f.ns)) || !visible(c, req, f.ns, &only))
		return;
	if (f.state > KVP_PAGE_HOST) {
		conn_error(c, req, KVP_S_INVAL, "LIST_PAGES: state %u is not 0..%u", f.state,
			   KVP_PAGE_HOST);
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

		if ((only && n != only) || !may_see(c, n))
			continue;
		for (cursor = 0; pool_next(s->pool, n->pool_ns, &cursor, &h);) {
			if (holder && !lease_holds(&holder->leases, h))
				continue;
			page_record(s, n, h, PREFIX_NIL, now, &rec);
			if (f.state && rec.state != f.state)
				continue;
			cnt.total++;
			if (cnt.count < max)
				r[cnt.count++] = rec;
		}
		if (holder || (f.state && f.state < KVP_PAGE_SPILLED))
			continue;
		for (e = prefix_next(n->idx, PREFIX_NIL); e; e = prefix_next(n->idx, e)) {
			if ((prefix_where(n->idx, e) != PREFIX_SPILLED &&
			     prefix_where(n->idx, e) != PREFIX_HOST) || prefix_orphan(n->idx, e))
				continue;
			page_record(s, n, 0, e, now, &rec);
			if (f.state && rec.state != f.state)
				continue;
			cnt.total++;
			if (cnt.count < max)
				r[cnt.count++] = rec;
		}
	}
	memcpy(buf, &cnt, sizeof(cnt));
	conn_reply(c, req, KVP_S_OK, buf, sizeof(cnt) + cnt.count * sizeof(*r), -1);
	free(buf);
}

/* A LIST_PREFIXES candidate: its record and the order it was met in,
 * which breaks ties between equal hits (the first met ranks first). */
struct top_ent {
	struct kvp_wire_prefix rec;
	uint64_t seq;
};

/* The best candidates so far: ent[] holds them, heap[] their numbers
 * with the worst at the root, so that sifting moves 4 bytes, not 48. */
struct top {
	struct top_ent *ent;
	uint32_t *heap;
	size_t n, max;
};

/* top_worse() - a ranks below b: fewer hits, or as many and met later. */
static bool top_worse(const struct top *t, uint32_t a, uint32_t b)
{
	const struct top_ent *x = &t->ent[a], *y = &t->ent[b];

	return x->rec.hits < y->rec.hits || (x->rec.hits == y->rec.hits && x->seq > y->seq);
}

/* top_sift() - restore the heap below slot i. */
static void top_sift(struct top *t, size_t i)
{
	uint32_t v;
	size_t k;

	for (;;) {
		k = 2 * i + 1;
		if (k >= t->n)
			return;
		if (k + 1 < t->n && top_worse(t, t->heap[k + 1], t->heap[k]))
			k++;
		if (!top_worse(t, t->heap[k], t->heap[i]))
			return;
		v = t->heap[i];
		t->heap[i] = t->heap[k];
		t->heap[k] = v;
		i = k;
	}
}

/* top_offer() - keep *e if it is among the max best offered so far. */
static void top_offer(struct top *t, const struct top_ent *e)
{
	size_t i;
	uint32_t slot;

	if (t->n < t->max) {
		slot = (uint32_t)t->n;
		t->ent[slot] = *e;
		for (i = t->n++; i > 0 && top_worse(t, slot, t->heap[(i - 1) / 2]);
		     i = (i - 1) / 2)
			t->heap[i] = t->heap[(i - 1) / 2];
		t->heap[i] = slot;
		return;
	}
	if (!t->max || e->rec.hits < t->ent[t->heap[0]].rec.hits ||
	    (e->rec.hits == t->ent[t->heap[0]].rec.hits && e->seq > t->ent[t->heap[0]].seq))
		return;	/* worse than the worst kept */
	t->ent[t->heap[0]] = *e;
	top_sift(t, 0);
}

/* prefix_record() - entry e of n as a LIST_PREFIXES record. */
static void prefix_record(struct server *s, struct ns *n, uint32_t e,
			  struct kvp_wire_prefix *rec)
{
	unsigned where = prefix_where(n->idx, e);

	memset(rec, 0, sizeof(*rec));
	memcpy(rec->key, prefix_key(n->idx, e), sizeof(rec->key));
	rec->ns_id = n->id;
	rec->hits = prefix_hits(n->idx, e);
	rec->state = where == PREFIX_SPILLED ? KVP_PAGE_SPILLED :
		     where == PREFIX_HOST ? KVP_PAGE_HOST :
		     wire_state(pool_state(s->pool, prefix_page(n->idx, e)));
	rec->refs = where == PREFIX_IN_POOL ? pool_refs(s->pool, prefix_page(n->idx, e)) : 0;
}

/*
 * admin_list_prefixes() - the top blocks by hits. O(entries x log top)
 * with a heap of the best so far, and the depths of a namespace's
 * entries in one O(entries) pass: what it costs follows what it scans,
 * however the keys or chains were chosen.
 */
void admin_list_prefixes(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_count cnt = { 0 };
	struct kvp_wire_list_prefixes lp;
	struct top top = { 0 };
	struct kvp_wire_prefix *r;
	size_t max = records_fit(s, sizeof(*r));
	uint64_t seq = 0;
	uint32_t *depth = NULL, i, e;
	struct ns *only;
	uint8_t *buf = NULL;

	if (wire_fixed_decode(payload, req->len, &lp, sizeof(lp)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "LIST_PREFIXES payload is not 72 bytes");
		return;
	}
	if (!name_field(c, req, lp.ns, sizeof(lp.ns)) || !visible(c, req, lp.ns, &only))
		return;
	if (lp.top && lp.top < max)
		max = lp.top;
	top.max = max;
	top.ent = malloc((max ? max : 1) * sizeof(*top.ent));
	top.heap = malloc((max ? max : 1) * sizeof(*top.heap));
	buf = calloc(1, sizeof(cnt) + max * sizeof(*r));
	if (!top.ent || !top.heap || !buf)
		goto out_nomem;
	for (i = 0; i < s->nst.count; i++) {
		struct ns *n = s->nst.ns[i];

		if ((only && n != only) || !may_see(c, n))
			continue;
		free(depth);
		depth = malloc(prefix_entries(n->idx) * sizeof(*depth));
		if (!depth)
			goto out_nomem;
		prefix_depths(n->idx, depth);
		for (e = prefix_next(n->idx, PREFIX_NIL); e; e = prefix_next(n->idx, e)) {
			struct top_ent t = { .seq = seq++ };

			if (prefix_orphan(n->idx, e))	/* out of the index, leaving */
				continue;
			cnt.total++;
			prefix_record(s, n, e, &t.rec);
			t.rec.depth = depth[e];
			t.rec.bytes = (uint64_t)t.rec.depth * n->page_bytes;
			top_offer(&top, &t);
		}
	}
	/* best first: take the worst off the heap into the last free place */
	r = (struct kvp_wire_prefix *)(buf + sizeof(cnt));
	for (cnt.count = (uint32_t)top.n; top.n > 0;) {
		r[top.n - 1] = top.ent[top.heap[0]].rec;
		top.heap[0] = top.heap[--top.n];
		top_sift(&top, 0);
	}
	memcpy(buf, &cnt, sizeof(cnt));
	conn_reply(c, req, KVP_S_OK, buf, sizeof(cnt) + cnt.count * sizeof(*r), -1);
	goto out;

out_nomem:
	conn_error(c, req, KVP_S_INTERNAL, "out of memory");
out:
	free(depth);
	free(top.ent);
	free(top.heap);
	free(buf);
}

void admin_evict(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload)
{
	struct server *s = c->srv;
	struct kvp_wire_count cnt = { 0 };
	struct kvp_wire_evict ev;
	struct ns *only;
	uint32_t i;
	bool bad;
	int rc;

	if (wire_fixed_decode(payload, req->len, &ev, sizeof(ev)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "EVICT payload is not 72 bytes");
		return;
	}
	if (!name_field(c, req, ev.ns, sizeof(ev.ns)) ||
	    !need_admin(c, req, ev.ns[0] ? ev.ns : NULL))
		return;
	only = ns_arg(c, req, ev.ns, &bad);
	if (bad)
		return;
	/* c->evicted counts across the waits below: a request that waited
	 * for its tier runs again from here */
	for (i = 0; i < s->nst.count; i++) {
		struct ns *n = s->nst.ns[i];

		if (only && n != only)
			continue;
		while (!ev.max || c->evicted < ev.max) {
			rc = tier_evict_one(s->pool, n);
			if (rc > 0) {
				c->evicted++;
				continue;
			}
			/* the tier cannot take more now (a write in flight,
			 * --spill-rate): wait for it, as an ALLOC would */
			if (rc == -EAGAIN && wait_tier_room(c, req, n))
				return;
			break;
		}
	}
	cnt.count = 0;	/* no records follow: total is the count evicted */
	cnt.total = (uint32_t)(c->evicted > INT32_MAX ? INT32_MAX : c->evicted);
	log_info("client %llu evicted %llu cached pages%s%s", (unsigned long long)c->id,
		 (unsigned long long)c->evicted, only ? " of namespace " : "",
		 only ? only->name : "");
	c->evicted = 0;
	conn_reply(c, req, KVP_S_OK, &cnt, sizeof(cnt), -1);
}

void admin_disconnect(struct conn *c, const struct kvp_wire_hdr *req,
			      const uint8_t *payload)
{
	struct kvp_wire_disconnect d;
	struct conn *o;

	if (wire_fixed_decode(payload, req->len, &d, sizeof(d)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "DISCONNECT payload is not 8 bytes");
		return;
	}
	for (o = c->srv->conns; o; o = o->next)
		if (o->id == d.client && !o->refused)
			break;
	/* an admin of the client's namespace may; asking about a client
	 * that does not exist takes as much as asking about any */
	if (!need_admin(c, req, o && o->ns ? o->ns->name : NULL))
		return;
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
	conn_kick(o, "an admin (uid %u, pid %d) disconnected this client (kvpool disconnect)",
		  (unsigned)c->cred.uid, (int)c->cred.pid);
	conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
}

void admin_drop_ns(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload)
{
	struct kvp_wire_drop_ns d;
	char err[KVP_WIRE_ERRMSG_MAX];
	struct conn *o, *next;
	struct ns *n, *gone;
	unsigned users = 0;
	bool bad;

	if (wire_fixed_decode(payload, req->len, &d, sizeof(d)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "DROP_NS payload is not 72 bytes");
		return;
	}
	if ((d.flags & ~KVP_WIRE_DROP_FORCE) || d.reserved) {
		conn_error(c, req, KVP_S_INVAL, "DROP_NS flags 0x%x (reserved %u): the flag this "
			   "daemon knows is FORCE (0x%x), and reserved is 0", d.flags, d.reserved,
			   KVP_WIRE_DROP_FORCE);
		return;
	}
	if (!name_field(c, req, d.ns, sizeof(d.ns)) ||
	    !need_admin(c, req, d.ns[0] ? d.ns : NULL))
		return;
	if (!d.ns[0]) {
		conn_error(c, req, KVP_S_INVAL, "DROP_NS needs a namespace name");
		return;
	}
	n = ns_gone_by_name(&c->srv->nst, d.ns);
	if (n) {	/* dropped already: answered when its tier file is gone */
		wait_defer_on(c, req, n);
		return;
	}
	n = ns_arg(c, req, d.ns, &bad);
	if (bad)
		return;
	if (c->ns == n) {
		conn_error(c, req, KVP_S_STATE, "this connection is a client of namespace "
			   "'%s'; drop it from another one (kvpool drop %s)", n->name, n->name);
		return;
	}
	for (o = c->srv->conns; o; o = o->next)
		users += o->ns == n && !conn_closing(o);
	if (users && !(d.flags & KVP_WIRE_DROP_FORCE)) {
		conn_error(c, req, KVP_S_BUSY, "namespace '%s' has %u client%s (kvpool clients "
			   "lists them): dropping it would take their cache away; stop them "
			   "first, or kvpool drop --force %s disconnects them", n->name, users,
			   users == 1 ? "" : "s", n->name);
		return;
	}
	/* Its clients go first (their leases with them), told why; the drop
	 * waits for the last of them, and for the tier's writes, on n's
	 * queue. New clients are refused meanwhile (wait_drop_ahead()). */
	for (o = c->srv->conns; o; o = next) {
		next = o->next;
		if (o->ns == n && !conn_closing(o))
			conn_kick(o, "namespace '%s' was dropped by an admin (uid %u, pid %d: "
				  "kvpool drop --force); its pages are gone", n->name,
				  (unsigned)c->cred.uid, (int)c->cred.pid);
	}
	if (ns_drop(&c->srv->nst, c->srv->pool, &c->srv->keys, n, &gone, err,
		    sizeof(err)) < 0) {
		if (ns_busy(n))
			wait_defer_on(c, req, n);	/* what it waits for wakes it */
		else
			conn_error(c, req, KVP_S_STATE, "%s", err);
		return;
	}
	if (gone)	/* the reply waits for the tier file's removal */
		wait_defer_on(c, req, gone);
	else
		conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
}
