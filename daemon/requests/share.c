/* SPDX-License-Identifier: MIT */
/*
 * share.c - the requests of prefix sharing: ACQUIRE (with restores from
 * the host tier, copied at once, and from the NVMe tier, answered when
 * the reads are done), PUBLISH and
 * PUBLISH_PARTIAL. Like every handler, each checks its whole payload and
 * every page before it changes anything.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/requests/requests.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/conn.h"
#include "daemon/store/lease.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/tier.h"
#include "daemon/tiers/tier_remote.h"

/*
 * A deferred ACQUIRE: some of its blocks are being read back from the
 * tier. The reply goes out when the last read completes; the connection
 * is held until then, even if its client dies meanwhile. Its entries are
 * the full blocks found, then the partial page when there is one.
 */
struct pending {
	struct conn *c;
	struct ns *n;
	struct kvp_wire_hdr req;
	uint32_t nkeys;
	uint32_t planned;		/* entries: full blocks, then the partial */
	uint32_t nfull;			/* of them full blocks */
	uint32_t hits;			/* lowest failed restore, else planned */
	uint32_t outstanding;		/* reads in flight */
	uint32_t partial_tokens;	/* of the partial page, when planned > nfull */
	bool counted;			/* a lookup, not a LOAD (KVP_WIRE_ACQ_LOAD) */
	uint8_t *src;			/* [planned] KVP_SRC_*, with SOURCES; else NULL */
	uint64_t *pages;		/* [planned] */
	uint8_t *restored;		/* [planned]: read from the tier */
	struct pread {			/* [planned]: the reads in flight */
		struct tier_read r;
		struct pending *pd;
		uint32_t i;
		uint64_t t0;		/* started (/metrics' restore histogram) */
	} *reads;
};

/* What an ACQUIRE can be served now: reads back from the tiers, within
 * what each can start at once. */
struct plan {
	const struct tier_ops *t[TIERS_MAX];
	uint32_t budget[TIERS_MAX];	/* reads each may still start */
	unsigned nt;
	uint32_t reads;			/* planned, in all */
	uint32_t async;			/* of them answered later */
};

/* acquire_reply() - answer an ACQUIRE with the pages of its first got
 * entries (leased): its full blocks, then the partial page when got goes
 * past them; count it. */
static void acquire_reply(struct conn *c, struct ns *n, const struct kvp_wire_hdr *req,
			  uint32_t nkeys, const uint64_t *pages, uint32_t got, uint32_t nfull,
			  uint32_t partial_tokens, bool counted, const uint8_t *src)
{
	struct kvp_wire_acquire_reply *rep;
	uint32_t hits = got < nfull ? got : nfull;
	size_t handles = sizeof(*rep) + (size_t)hits * sizeof(uint64_t);
	size_t len = handles + (src ? ((size_t)hits + 7) / 8 * 8 : 0);

	rep = calloc(1, len);
	if (!rep) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u handles", hits);
		return;
	}
	rep->hits = hits;
	if (got > nfull) {
		rep->partial_page = pages[nfull];
		rep->partial_tokens = partial_tokens;
	}
	memcpy(rep + 1, pages, (size_t)hits * sizeof(uint64_t));
	if (src)	/* each block's source, then zeros (calloc) */
		memcpy((uint8_t *)rep + handles, src, hits);
	if (counted) {	/* not a LOAD of what the engine looked up already */
		n->st.acquires++;
		n->st.hits += hits + (got > nfull);
		n->st.misses += nkeys - hits;
		n->st.hit_tokens += (uint64_t)hits * n->block_tokens + rep->partial_tokens;
	}
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
			if (lease_add(&c->leases, p, pd->pages[i]) < 0) {
				lease_put(p, n, pd->pages[i]);
				if (i < pd->hits)
					pd->hits = i;
			}
		} else if (!gone && i >= pd->hits) {
			lease_drop(&c->leases, p, n, pd->pages[i]);
		}
	}
	if (!gone) {
		acquire_reply(c, n, &pd->req, pd->nkeys, pd->pages, pd->hits, pd->nfull,
			      pd->partial_tokens, pd->counted, pd->src);
		conn_resume(c);
	}
	free(pd->src);
	free(pd->pages);
	free(pd->restored);
	free(pd->reads);
	free(pd);
	conn_put(c);
}

/* restore_done() - one entry is back from its tier, or lost (a miss:
 * the entries after it are let go of). */
static void restore_done(struct tier_read *r, int res)
{
	struct pread *rd = (struct pread *)((char *)r - offsetof(struct pread, r));
	struct pending *pd = rd->pd;
	struct pool *p = pd->c->srv->pool;
	uint32_t i = rd->i;

	if (res == 0) {
		hist_add(&pd->c->srv->n.restores, hist_now_ns() - rd->t0);
		pool_restored(p, pd->pages[i]);
		prefix_restored(pd->n->idx, r->e);
		/* a block before it was lost meanwhile: it is served to nobody,
		 * and leaves when pending_finish() lets go of its page */
		if (prefix_orphan(pd->n->idx, r->e) && i < pd->hits)
			pd->hits = i;
	} else {
		tier_lose_below(pd->n, r->e);	/* nothing below a lost block stays */
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
 * tokens of block hits; in the pool or in a tier. PREFIX_NIL when the
 * tokens stop before it or none matches.
 */
static uint32_t find_partial(struct ns *n, const struct kvp_wire_acquire *a,
			     const uint8_t *keys, const void *raw, uint32_t hits,
			     uint32_t *tail)
{
	uint64_t start = (uint64_t)hits * n->block_tokens;
	uint32_t i, len;

	if (a->ntokens <= start)
		return PREFIX_NIL;
	len = a->ntokens - (uint32_t)start;
	if (len > n->block_tokens - 1)
		len = n->block_tokens - 1;
	for (i = 0; i < len; i++)
		tail[i] = wire_u32_at(raw, (size_t)start + i);
	return prefix_find_partial(n->idx, hits ? keys + (size_t)(hits - 1) * KVP_KEY_BYTES
						: a->parent, tail, len);
}

/* plan_init() - n's tiers, each with the reads it can start at once. */
static void plan_init(struct ns *n, struct plan *pl)
{
	unsigned k;

	pl->nt = tiers_of(n, pl->t);
	for (k = 0; k < pl->nt; k++)
		pl->budget[k] = pl->t[k]->copy ? 0 : pl->t[k]->read_budget(n);
	pl->reads = pl->async = 0;
}

/*
 * plan_entry() - whether entry e can be served now: in the pool, or in a
 * tier that can read it back now (within its budget), which *pl counts.
 * *writing is set when e's write to its tier is in flight.
 */
static bool plan_entry(struct ns *n, uint32_t e, struct plan *pl, bool *writing)
{
	const struct tier_ops *t;
	unsigned k;
	int rc;

	if (prefix_where(n->idx, e) == PREFIX_IN_POOL)
		return true;
	t = tier_of_entry(n, e);
	if (!t)
		return false;	/* on its way back already */
	rc = t->readable(n, e);
	if (rc == -EBUSY)
		*writing = true;
	if (rc <= 0)
		return false;
	for (k = 0; k < pl->nt && pl->t[k] != t; k++)
		;
	if (k == pl->nt || !pl->budget[k])
		return false;
	pl->budget[k]--;
	pl->reads++;
	pl->async += t->async;
	return true;
}

/*
 * plan_hits() - how many leading keys can be served (see plan_entry()),
 * their entries into ents[]. *writing is set when the plan stops at a
 * block whose spill write is still in flight.
 */
static uint32_t plan_hits(struct ns *n, const uint8_t *keys, uint32_t nkeys, uint32_t *ents,
			  struct plan *pl, bool *writing)
{
	uint32_t i, e;

	plan_init(n, pl);
	*writing = false;
	for (i = 0; i < nkeys; i++) {
		e = prefix_find(n->idx, keys + (size_t)i * KVP_KEY_BYTES);
		if (e == PREFIX_NIL || !plan_entry(n, e, pl, writing))
			break;
		ents[i] = e;
	}
	return i;
}

/*
 * sources() - where each of the planned full blocks ents[0..hits) comes
 * from (KVP_SRC_*): the pool, or the tier it is read back from; a block
 * in the pool from remote_from on came back from the remote tier for this
 * request (UINT32_MAX: none did; a WAIT that asked the tier counts the
 * blocks published here while it waited as the tier's too).
 */
static void sources(struct ns *n, const uint32_t *ents, uint32_t hits, uint32_t remote_from,
		    uint8_t *src)
{
	const struct tier_ops *t;
	uint32_t i;

	for (i = 0; i < hits; i++) {
		if (prefix_where(n->idx, ents[i]) == PREFIX_IN_POOL) {
			src[i] = i >= remote_from ? KVP_SRC_REMOTE : KVP_SRC_POOL;
			continue;
		}
		t = tier_of_entry(n, ents[i]);
		src[i] = t && !strcmp(t->name, "nvme") ? KVP_SRC_NVME :
			 t && !strcmp(t->name, "host") ? KVP_SRC_HOST : KVP_SRC_POOL;
	}
}

/*
 * restore_one() - read entry i (e, in tier t) back into the fresh page:
 * leased to c at once when the tier copies it now, or when pd's reads end
 * (pd: needed for a tier that answers later). Returns false when the
 * block is lost (gone from the index: a miss) or the lease could not be
 * recorded (the page stays in the pool, cached).
 */
static bool restore_one(struct conn *c, struct pending *pd, const struct tier_ops *t,
			uint32_t i, uint32_t e, uint64_t page)
{
	struct pool *p = c->srv->pool;
	struct ns *n = c->ns;
	struct pread now, *rd = pd ? &pd->reads[i] : &now;
	int rc;

	pool_inflight(p, page);
	pool_set_tag(p, page, e);
	prefix_restoring(n->idx, e, page);
	rd->r = (struct tier_read){ restore_done, n, e };
	rd->pd = pd;
	rd->i = i;
	rd->t0 = hist_now_ns();
	rc = t->read(n, e, pool_page_addr(p, page), &rd->r);
	if (rc > 0) {		/* restore_done() follows */
		pd->restored[i] = 1;
		pd->outstanding++;
		return true;
	}
	if (rc < 0) {
		tier_lose_below(n, e);	/* nothing below a lost block stays */
		pool_unref(p, page);	/* INFLIGHT: free again */
		return false;
	}
	hist_add(&c->srv->n.restores, hist_now_ns() - rd->t0);	/* copied at once */
	pool_restored(p, page);
	prefix_restored(n->idx, e);
	if (lease_add(&c->leases, p, page) < 0) {
		lease_put(p, n, page);
		return false;
	}
	return true;
}

/* hold_tiers() - hold (or, !on, release) the entries of ents[0..n) that
 * the pool does not have (pages[i] 0). */
static void hold_tiers(struct ns *n, const uint32_t *ents, const uint64_t *pages,
		       uint32_t cnt, bool on)
{
	uint32_t i;

	for (i = 0; i < cnt; i++) {
		if (pages[i])
			continue;
		if (on)
			prefix_hold(n->idx, ents[i]);
		else
			prefix_unhold(n->idx, ents[i]);
	}
}

/*
 * pin_plan() - lease c the planned entries ents[0..got) that are in the
 * pool (their pages into pages[], 0 for the others) and hold the others
 * in their tiers. From here until unpin_plan() or start_restores(), no
 * eviction takes or moves one: not the back-pressure that frees pages
 * ahead of the reads, not the making of room for them. Returns 0, or
 * -ENOMEM with nothing pinned.
 */
static int pin_plan(struct conn *c, const uint32_t *ents, uint64_t *pages, uint32_t got)
{
	struct pool *p = c->srv->pool;
	struct ns *n = c->ns;
	uint32_t i;

	for (i = 0; i < got; i++) {
		pages[i] = 0;
		if (prefix_where(n->idx, ents[i]) != PREFIX_IN_POOL)
			continue;
		pages[i] = prefix_page(n->idx, ents[i]);
		if (lease_take(&c->leases, p, n, pages[i]) < 0) {
			while (i--)
				if (pages[i])
					lease_drop(&c->leases, p, n, pages[i]);
			return -ENOMEM;
		}
	}
	hold_tiers(n, ents, pages, got, true);
	return 0;
}

/* unpin_plan() - undo pin_plan(): the request waits and is planned again. */
static void unpin_plan(struct conn *c, const uint32_t *ents, uint64_t *pages, uint32_t got)
{
	struct ns *n = c->ns;
	uint32_t i;

	hold_tiers(n, ents, pages, got, false);
	for (i = got; i-- > 0;)
		if (pages[i]) {
			lease_drop(&c->leases, c->srv->pool, n, pages[i]);
			pages[i] = 0;
		}
}

/*
 * start_restores() - for the pinned plan ents[0..*got) (see pin_plan()),
 * read each entry that is in a tier back into a fresh INFLIGHT page
 * (pl: how many, and how many answer later). Returns the pending request, or NULL
 * when nothing needs reading (all leased; *got may have shrunk if the
 * pool had no room for the restores or a copy failed). *err is -ENOMEM,
 * or -EAGAIN when making room waits for the tiers: then the plan is
 * unpinned and nothing is leased, for the request to wait and be served
 * again.
 */
static struct pending *start_restores(struct conn *c, const uint32_t *ents, uint64_t *pages,
				      uint32_t *got, const struct plan *pl, int *err)
{
	struct pool *p = c->srv->pool;
	struct ns *n = c->ns;
	struct pending *pd = NULL;
	uint64_t *fresh = NULL;
	uint32_t i, r = 0, nfresh = pl->reads, cut;
	char msg[256];
	int rc;

	*err = 0;
	if (!nfresh)
		goto out_touch;
	fresh = calloc(nfresh, sizeof(*fresh));
	if (!fresh)
		goto out_nomem;
	if (pl->async) {
		pd = calloc(1, sizeof(*pd));
		if (!pd)
			goto out_nomem;
		pd->c = c;
		pd->n = n;
		pd->pages = pages;
		pd->restored = calloc(*got, 1);
		pd->reads = calloc(*got, sizeof(*pd->reads));
		if (!pd->restored || !pd->reads)
			goto out_nomem;
	}
	/* the held entries stay where they are while room is made */
	rc = tier_make_room(p, n, nfresh);
	if (rc == -EAGAIN) {
		/* the tiers take the evictions later: let go of everything */
		unpin_plan(c, ents, pages, *got);
		*err = -EAGAIN;
		goto out_free;
	}
	if (rc < 0 || pool_alloc(p, n->pool_ns, nfresh, fresh, msg, sizeof(msg)) < 0) {
		/* no room to restore into: serve the prefix that is in the pool */
		hold_tiers(n, ents, pages, *got, false);
		for (i = 0; i < *got && pages[i]; i++)
			;
		while (*got > i)
			if (pages[--*got])
				lease_drop(&c->leases, p, n, pages[*got]);
		goto out_touch;
	}
	for (i = 0; i < *got; i++)
		prefix_touch(n->idx, ents[i], true);
	cut = *got;
	for (i = 0; i < *got; i++) {
		const struct tier_ops *t;
		bool ok = false;

		if (pages[i])
			continue;
		t = tier_of_entry(n, ents[i]);
		if (t && r < nfresh && (pd || !t->async))
			ok = restore_one(c, pd, t, i, ents[i], fresh[r++]);
		else	/* a key named twice (restoring already), or no page left */
			prefix_unhold(n->idx, ents[i]);
		if (ok)
			pages[i] = fresh[r - 1];
		else if (i < cut)
			cut = i;
	}
	while (r < nfresh)
		pool_unref(p, fresh[r++]);	/* PRIVATE, unused: free again */
	free(fresh);
	if (pd) {
		pd->planned = *got;
		pd->hits = cut;
		return pd;
	}
	/* all copied already: let go of what comes after a failure */
	for (i = cut; i < *got; i++)
		if (pages[i])
			lease_drop(&c->leases, p, n, pages[i]);
	*got = cut;
	return NULL;

out_nomem:
	*err = -ENOMEM;
	unpin_plan(c, ents, pages, *got);
	goto out_free;
out_touch:
	for (i = 0; i < *got; i++)
		prefix_touch(n->idx, ents[i], true);
out_free:
	if (pd) {
		free(pd->restored);
		free(pd->reads);
	}
	free(pd);
	free(fresh);
	return NULL;
}

/*
 * probe_reply() - a PROBE: how many leading keys this daemon holds, in the
 * pool or a local tier, whatever their state; nothing leased, counted,
 * touched or fetched.
 */
static void probe_reply(struct conn *c, struct ns *n, const struct kvp_wire_hdr *req,
			const struct kvp_wire_acquire *a, const uint8_t *keys)
{
	struct kvp_wire_acquire_reply rep = { 0 };

	if (a->ntokens) {
		conn_error(c, req, KVP_S_INVAL, "ACQUIRE PROBE with %u tokens: a probe "
			   "looks for full blocks alone; send no tokens", a->ntokens);
		return;
	}
	while (rep.hits < a->nkeys &&
	       prefix_find(n->idx, keys + (size_t)rep.hits * KVP_KEY_BYTES) != PREFIX_NIL)
		rep.hits++;
	conn_reply(c, req, KVP_S_OK, &rep, sizeof(rep), -1);
}

/*
 * share_acquire() - the longest cached prefix of the keys, then the
 * partial page after it that the request's tokens continue into,
 * wherever each is (pool, host tier, NVMe tier): one entry list for
 * both, so a partial page comes back from a tier as a block does.
 */
void share_acquire(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload)
{
	struct kvp_wire_acquire a;
	struct pending *pd;
	struct plan pl;
	const uint8_t *keys, *handoff;
	const void *raw;
	uint32_t *tail, *ents, hits, got, pe, tokens = 0;
	uint64_t *pages;
	uint8_t *src = NULL;
	struct ns *n;
	bool writing, wait = false;
	int err;

	if (wire_acquire_decode(c->proto, payload, req->len, &a, &keys, &raw, &handoff) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "ACQUIRE key or token count (or its "
			   "HANDOFF flag's key) disagrees with the payload");
		return;
	}
	if (!requests_need_ns(c, req))
		return;
	n = c->ns;
	if (a.flags & ~wire_acq_flags(c->proto)) {
		if (a.flags & ~KVP_WIRE_ACQ_ALL)
			conn_error(c, req, KVP_S_INVAL, "ACQUIRE flags 0x%x: the flags this "
				   "daemon knows are LOAD (0x%x), PROBE (0x%x), WAIT (0x%x), "
				   "HANDOFF (0x%x) and SOURCES (0x%x); is the client newer than "
				   "kvpoold?", a.flags, KVP_WIRE_ACQ_LOAD, KVP_WIRE_ACQ_PROBE,
				   KVP_WIRE_ACQ_WAIT, KVP_WIRE_ACQ_HANDOFF, KVP_WIRE_ACQ_SOURCES);
		else
			conn_error(c, req, KVP_S_INVAL, "ACQUIRE flags 0x%x: HANDOFF (0x%x) "
				   "and SOURCES (0x%x) are protocol version 9's, and this "
				   "connection speaks %u", a.flags, KVP_WIRE_ACQ_HANDOFF,
				   KVP_WIRE_ACQ_SOURCES, (unsigned)c->proto);
		return;
	}
	if ((a.flags & KVP_WIRE_ACQ_PROBE) && (a.flags & KVP_WIRE_ACQ_SOURCES)) {
		conn_error(c, req, KVP_S_INVAL, "ACQUIRE with PROBE (0x%x) and SOURCES (0x%x): "
			   "a probe leases nothing to name the sources of",
			   KVP_WIRE_ACQ_PROBE, KVP_WIRE_ACQ_SOURCES);
		return;
	}
	if ((a.flags & KVP_WIRE_ACQ_WAIT) ?
	    !a.wait_ms || a.wait_ms > KVP_WIRE_WAIT_MAX_MS || (a.flags & KVP_WIRE_ACQ_PROBE) :
	    a.wait_ms != 0 || (a.flags & KVP_WIRE_ACQ_HANDOFF)) {
		conn_error(c, req, KVP_S_INVAL, "ACQUIRE with flags 0x%x and wait_ms %u: a "
			   "WAIT (0x%x) waits 1 to %u ms and is no PROBE; without WAIT, "
			   "wait_ms is 0 and there is no HANDOFF (0x%x)", a.flags, a.wait_ms,
			   KVP_WIRE_ACQ_WAIT, KVP_WIRE_WAIT_MAX_MS, KVP_WIRE_ACQ_HANDOFF);
		return;
	}
	if (a.flags & KVP_WIRE_ACQ_PROBE) {
		probe_reply(c, n, req, &a, keys);
		return;
	}
	if ((uint64_t)a.ntokens >= ((uint64_t)a.nkeys + 1) * n->block_tokens) {
		conn_error(c, req, KVP_S_INVAL, "ACQUIRE of %u keys with %u tokens: the "
			   "tokens run from the first key's block to before the end of "
			   "the block after the last (%u tokens per block)", a.nkeys,
			   a.ntokens, n->block_tokens);
		return;
	}
	ents = malloc(((size_t)a.nkeys + 1) * sizeof(*ents));
	tail = malloc(n->block_tokens * sizeof(*tail));
	pages = calloc((size_t)a.nkeys + 1, sizeof(*pages));
	if (!ents || !tail || !pages) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u keys", a.nkeys);
		goto out;
	}
	/* Find first, lease after: a refusal must change nothing. */
	hits = plan_hits(n, keys, a.nkeys, ents, &pl, &writing);
	got = hits;
	pe = writing ? PREFIX_NIL : find_partial(n, &a, keys, raw, hits, tail);
	if (pe != PREFIX_NIL) {
		if (plan_entry(n, pe, &pl, &wait)) {
			ents[got++] = pe;
			tokens = prefix_tokens(n->idx, pe);
		}
	}
	if (writing || wait) {
		/* a block of the chain is on its way to the tier: wait for the
		 * write (which wakes the queue) rather than answer a miss */
		wait_defer(c, req);
		goto out;
	}
	/* the rest of the chain is nowhere here: the remote tier may have it
	 * (then the request is served again once it is back in the pool) */
	if (hits < a.nkeys && prefix_find(n->idx, keys + (size_t)hits * KVP_KEY_BYTES) ==
	    PREFIX_NIL && wait_remote(c, req, &a, keys, hits, handoff))
		goto out;
	/* a WAIT: the keys not held yet are being saved by another client */
	if (hits < a.nkeys && wait_keys(c, req, &a, keys, hits, handoff))
		goto out;
	if ((a.flags & KVP_WIRE_ACQ_SOURCES) && hits) {
		src = malloc(hits);
		if (!src) {
			conn_error(c, req, KVP_S_INTERNAL, "out of memory for %u sources", hits);
			goto out;
		}
		sources(n, ents, hits, c->remote_from, src);
	}
	c->remote_tried = false;
	if (!requests_room_for_leases(c, req, got))
		goto out;
	if (pin_plan(c, ents, pages, got) < 0) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory recording leases");
		goto out;
	}
	/* reads need free pages: wait for the tier rather than serve less */
	if (pl.reads && wait_tier(c, req, pl.reads)) {
		unpin_plan(c, ents, pages, got);
		goto out;
	}
	pd = start_restores(c, ents, pages, &got, &pl, &err);
	if (err == -EAGAIN) {
		/* the tiers cannot take what would make room yet: wait */
		if (wait_tier_room(c, req, n))
			goto out;
		got = 0;	/* nothing would wake it: a miss */
		err = 0;
	}
	if (err) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory recording leases");
		goto out;
	}
	if (pd) {	/* the reply waits for the reads; pd owns pages now */
		pd->req = *req;
		pd->nkeys = a.nkeys;
		pd->nfull = hits;
		pd->counted = !(a.flags & KVP_WIRE_ACQ_LOAD);
		pd->partial_tokens = tokens;
		pd->src = src;
		src = NULL;
		c->deferred = true;
		conn_hold(c);
		pages = NULL;
		if (pd->outstanding == 0)	/* every read failed at once */
			pending_finish(pd);
		goto out;
	}
	acquire_reply(c, n, req, a.nkeys, pages, got, hits, tokens,
		      !(a.flags & KVP_WIRE_ACQ_LOAD),
		      (a.flags & KVP_WIRE_ACQ_SOURCES) ? (src ? src : (const uint8_t *)"") : NULL);
out:
	free(src);
	free(ents);
	free(tail);
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
 * page under parent_key; ids: a full block's token ids, or NULL, for its
 * KV events) unless the key is indexed already: then c gets
 * a lease on the page that is. Returns the canonical page and sets *e to
 * its entry; 0 when memory ran out.
 */
static uint64_t publish_one(struct conn *c, const uint8_t *key, const uint8_t *parent_key,
			    uint32_t parent, uint64_t page, unsigned prio,
			    const uint32_t *tokens, uint32_t ntokens, const uint32_t *ids,
			    uint32_t *e)
{
	struct pool *p = c->srv->pool;
	struct ns *n = c->ns;
	const struct tier_ops *t;

	*e = ntokens ? prefix_find_partial_exact(n->idx, parent_key, tokens, ntokens)
		     : prefix_find(n->idx, key);
	if (*e != PREFIX_NIL && (t = tier_of_entry(n, *e)) != NULL &&
	    t->publish_over(n, *e, page)) {
		/* the key's bytes were in a tier: this page takes their place */
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
	*e = ntokens ? prefix_insert(n->idx, key, parent_key, parent, page, prio, tokens, ntokens)
		     : prefix_insert_block(n->idx, key, parent_key, parent, page, prio, ids,
					   n->block_tokens);
	if (*e == PREFIX_NIL)
		return 0;
	pool_publish(p, page);
	pool_set_tag(p, page, *e);
	tier_remote_published(n, *e, pool_page_addr(p, page));
	n->st.publishes++;
	return page;
}

void share_publish(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload)
{
	struct kvp_wire_publish_ent ent;
	struct kvp_wire_publish pb;
	const void *ents, *raw;
	uint32_t *ids = NULL;
	size_t nids;
	struct hset seen;
	uint64_t *reply, fresh = 0;
	uint32_t i, e, parent;
	const uint8_t *parent_key;
	struct ns *n;

	if (wire_publish_decode(payload, req->len, &pb, &ents, &raw, &nids) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "PUBLISH entry count disagrees with the payload");
		return;
	}
	if (!requests_need_ns(c, req))
		return;
	n = c->ns;
	if (pb.prio > KVP_PRIO_PINNED) {
		conn_error(c, req, KVP_S_INVAL, "PUBLISH priority %u is not 0..%u",
			   pb.prio, KVP_PRIO_PINNED);
		return;
	}
	if (nids && nids != (uint64_t)pb.n * n->block_tokens) {
		conn_error(c, req, KVP_S_INVAL, "PUBLISH of %u blocks carries %zu token ids: "
			   "send %u per block (%llu), or none; nothing was published", pb.n,
			   nids, n->block_tokens,
			   (unsigned long long)pb.n * n->block_tokens);
		return;
	}
	if (nids && n->events) {	/* kept for the KV events only */
		ids = malloc(nids * sizeof(*ids));
		if (!ids) {
			conn_error(c, req, KVP_S_INTERNAL, "out of memory for %zu token ids",
				   nids);
			return;
		}
		for (i = 0; i < nids; i++)
			ids[i] = wire_u32_at(raw, i);
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
	if (!requests_room_for_leases(c, req, pb.n - fresh))
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
					   pb.prio, NULL, 0,
					   ids ? ids + (size_t)i * n->block_tokens : NULL, &e);
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
	/* ACQUIREs may wait for these keys: O(1) a key where none does */
	for (i = 0; fresh && i < pb.n; i++)
		wait_published(n, c->srv, (const uint8_t *)ents + (size_t)i * sizeof(ent) +
					  offsetof(struct kvp_wire_publish_ent, key));
out_reply:
	free(reply);
out_seen:
	hset_fini(&seen);
	free(ids);
}

void share_publish_partial(struct conn *c, const struct kvp_wire_hdr *req,
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
	if (!requests_need_ns(c, req))
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
	if (e != PREFIX_NIL && !requests_room_for_leases(c, req, 1))
		goto out;
	if (e == PREFIX_NIL && pp.prio == KVP_PRIO_PINNED &&
	    prefix_pinned(n->idx) + 1 > n->pinned_quota) {
		conn_error(c, req, KVP_S_LIMIT, "namespace '%s': its pinned quota of %llu "
			   "pages is used up; publish with a lower priority or raise "
			   "--pinned-quota", n->name, (unsigned long long)n->pinned_quota);
		goto out;
	}
	canon = publish_one(c, NULL, pp.parent, prefix_find(n->idx, pp.parent), pp.page,
			    pp.prio, tokens, pp.ntokens, NULL, &e);
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
