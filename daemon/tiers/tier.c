/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the walk down the tiers (see tier.h): where a page that leaves
 * the pool goes, what a full tier gives up for it, what is dropped with
 * what is below it. The tiers themselves are tables of operations.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/store/prefix.h"
#include "daemon/tiers/tier.h"

void (*tier_room_hook)(struct ns *n);
void (*tier_save_hook)(struct ns *n);

unsigned tiers_of(const struct ns *n, const struct tier_ops *t[TIERS_MAX])
{
	unsigned k = 0;

	if (n->host)
		t[k++] = &tier_host_ops;
	if (n->tier)
		t[k++] = &tier_nvme_ops;
	if (n->remote)
		t[k++] = &tier_remote_ops;
	return k;
}

void tier_ns_gone(struct ns *n)
{
	static const struct tier_ops *const all[] = {
		&tier_host_ops, &tier_nvme_ops, &tier_remote_ops,
	};
	unsigned k;

	for (k = 0; k < sizeof(all) / sizeof(all[0]); k++)
		if (all[k]->ns_gone)
			all[k]->ns_gone(n);
}

const struct tier_ops *tier_of_entry(const struct ns *n, uint32_t e)
{
	const struct tier_ops *t[TIERS_MAX];
	unsigned k, nt = tiers_of(n, t);

	for (k = 0; k < nt; k++)
		if (!t[k]->copy && t[k]->in_tier(n, e))
			return t[k];
	return NULL;
}

/*
 * drop_entry() - take e out of the index, and out of wherever its bytes
 * are: a cached pool page is freed (the copy tiers get it first, and a
 * tier's copy of it is given back), a tier's slot is given back by that
 * tier. An entry that is leased, or on its way into or out of a tier,
 * cannot go: it stays, and loses its parent link when the parent goes.
 */
static void drop_entry(struct pool *p, struct ns *n, uint32_t e)
{
	const struct tier_ops *t[TIERS_MAX];
	unsigned k, nt = tiers_of(n, t);
	uint64_t page;

	if (prefix_where(n->idx, e) == PREFIX_IN_POOL) {
		page = prefix_page(n->idx, e);
		if (pool_state(p, page) != PAGE_CACHED)
			return;
		for (k = 0; k < nt; k++)
			if (t[k]->left_pool)
				t[k]->left_pool(n, e, pool_page_addr(p, page));
		prefix_leased(n->idx, e);	/* off the candidate list */
		pool_evict(p, page);
		for (k = 0; k < nt; k++)
			if (t[k]->forget_copy)
				t[k]->forget_copy(n, e);
	} else {
		const struct tier_ops *in = tier_of_entry(n, e);

		if (!in || !in->drop(n, e))
			return;		/* on its way in or out */
	}
	prefix_remove(n->idx, e);
}

/* drop_below() - drop every entry below e, deepest first (each a leaf
 * when it goes, so O(1) each); with_e: e too, last. Finding them is
 * O(entries), so a leaf (what eviction takes) skips it. */
static void drop_below(struct pool *p, struct ns *n, uint32_t e, bool with_e)
{
	uint32_t *all, cnt, i;

	if (!prefix_children(n->idx, e)) {
		if (with_e)
			drop_entry(p, n, e);
		return;
	}
	cnt = prefix_subtree(n->idx, e, &all);
	for (i = 0; i + 1 < cnt; i++)	/* the last one is e */
		drop_entry(p, n, all[i]);
	free(all);
	if (with_e)
		drop_entry(p, n, e);
}

void tier_drop_subtree(struct pool *p, struct ns *n, uint32_t e)
{
	drop_below(p, n, e, true);
}

void tier_lose_below(struct ns *n, uint32_t e)
{
	drop_below(n->pool, n, e, false);
	prefix_remove(n->idx, e);
}

static int place(struct ns *n, const struct tier_ops *const *t, unsigned nt, unsigned k,
		 uint32_t e, const void *src, bool host_src);

/*
 * make_slot() - free a slot of tier t[k]: one that loses nothing first,
 * else its oldest leaf moves one tier down (when its bytes can be read
 * now and a tier below takes it), or is dropped with whatever is below
 * it. 0, -EAGAIN (the tier below cannot take it now, or every leaf is
 * being written: nothing moved) or -ENOSPC (no leaf to give up).
 */
static int make_slot(struct ns *n, const struct tier_ops *const *t, unsigned nt, unsigned k)
{
	const void *src;
	bool busy = false;
	uint32_t v, slot;
	int rc = -ENOSPC;

	if (t[k]->reclaim && t[k]->reclaim(n) == 0)
		return 0;
	v = t[k]->victim(n, &busy);
	if (v == PREFIX_NIL)
		return busy ? -EAGAIN : -ENOSPC;
	slot = prefix_slot(n->idx, v);
	src = t[k]->bytes(n, v);
	if (src)
		rc = place(n, t, nt, k + 1, v, src, true);
	if (rc == -EAGAIN)
		return rc;
	if (rc < 0)
		tier_drop_subtree(n->pool, n, v);	/* its slot too */
	else
		t[k]->moved(n, v, slot);
	return 0;
}

/*
 * place() - e's bytes at src (a pool page, or host memory when host_src)
 * into the first local tier from t[k] on that takes them, making a slot
 * where one is full. 0, -EAGAIN (not now: nothing was placed), -ENOSPC
 * (no tier took them) or another -errno from the tier that refused.
 */
static int place(struct ns *n, const struct tier_ops *const *t, unsigned nt, unsigned k,
		 uint32_t e, const void *src, bool host_src)
{
	int rc = -ENOSPC;

	for (; k < nt && rc == -ENOSPC; k++) {
		if (t[k]->copy)
			continue;
		if (t[k]->ready && !t[k]->ready(n))
			return -EAGAIN;		/* a write ends: a buffer comes back */
		if (!t[k]->free_slots(n)) {
			rc = make_slot(n, t, nt, k);
			if (rc == -EAGAIN)
				return rc;
			if (rc < 0)
				continue;
		}
		rc = t[k]->take(n, e, src, host_src);
	}
	return rc;
}

int tier_evict_one(struct pool *p, struct ns *n)
{
	const struct tier_ops *t[TIERS_MAX];
	unsigned k, nt = tiers_of(n, t);
	uint32_t e = prefix_victim(n->idx);
	uint64_t page;
	void *src;
	int rc;

	if (e == PREFIX_NIL)
		return 0;
	page = prefix_page(n->idx, e);
	src = pool_page_addr(p, page);
	for (k = 0; k < nt; k++)	/* copied before it returns */
		if (t[k]->left_pool)
			t[k]->left_pool(n, e, src);
	for (k = 0; k < nt; k++) {
		if (t[k]->reuse && t[k]->reuse(n, e, false) > 0) {
			pool_evict(p, page);
			n->st.evictions++;
			return 1;
		}
	}
	rc = place(n, t, nt, 0, e, src, false);
	if (rc == -EAGAIN) {	/* not now: keep it */
		prefix_cached(n->idx, e);
		return -EAGAIN;
	}
	n->st.evictions++;
	if (rc < 0) {
		for (k = nt; k-- > 0;)	/* the last local tier did not take it */
			if (!t[k]->copy) {
				if (t[k]->not_taken)
					t[k]->not_taken(n);
				break;
			}
		tier_drop_subtree(p, n, e);	/* e's page too */
		return 1;
	}
	pool_evict(p, page);
	return 1;
}

int tier_save_one(struct pool *p, struct ns *n)
{
	const struct tier_ops *t[TIERS_MAX];
	unsigned k, nt = tiers_of(n, t);
	uint32_t e = prefix_victim(n->idx);
	const void *src;
	uint64_t page;
	uint32_t slot;
	unsigned j;
	bool busy;
	int rc;

	for (k = 0; k < nt && !t[k]->persistent; k++)
		;
	if (k == nt) {
		if (e != PREFIX_NIL)
			prefix_cached(n->idx, e);
		return -ENOSPC;
	}
	if (e != PREFIX_NIL) {
		page = prefix_page(n->idx, e);
		/* a stop moves the host tier down after: children above are fine */
		if (!t[k]->reuse(n, e, true)) {
			rc = place(n, t, k + 1, k, e, pool_page_addr(p, page), false);
			if (rc < 0) {
				prefix_cached(n->idx, e);
				return rc;
			}
		}
		pool_evict(p, page);
		return 1;
	}
	/* then the tiers above it, leaves first */
	for (j = 0; j < k; j++) {
		e = t[j]->victim(n, &busy);
		src = e == PREFIX_NIL ? NULL : t[j]->bytes(n, e);
		if (!src)
			continue;
		slot = prefix_slot(n->idx, e);
		rc = place(n, t, k + 1, k, e, src, true);
		if (rc < 0)
			return rc;
		t[j]->moved(n, e, slot);
		return 1;
	}
	return 0;
}

/* writer() - n's first local tier whose writes end later, or NULL; the
 * free slots of the tiers above it into *free. */
static const struct tier_ops *writer(const struct ns *n, uint64_t *free)
{
	const struct tier_ops *t[TIERS_MAX];
	unsigned k, nt = tiers_of(n, t);

	*free = 0;
	for (k = 0; k < nt; k++) {
		if (t[k]->copy)
			continue;
		if (t[k]->write_budget)
			return t[k];
		*free += t[k]->free_slots(n);
	}
	return NULL;
}

bool tier_writes(const struct ns *n)
{
	uint64_t free;

	return writer(n, &free) != NULL;
}

bool tier_writing(const struct ns *n)
{
	uint64_t free;
	const struct tier_ops *w = writer(n, &free);

	return w && w->writing(n);
}

uint64_t tier_write_wait_ms(const struct ns *n, uint32_t pages)
{
	uint64_t free;
	const struct tier_ops *w = writer(n, &free);

	return w ? w->write_wait_ms(n, pages) : 0;
}

bool tier_must_wait(struct pool *p, struct ns *n, uint64_t need, uint64_t *now,
		    uint64_t *ms)
{
	struct pool_counts pc;
	const struct tier_ops *w;
	uint64_t free, can;

	w = writer(n, &free);
	if (!w || free >= need)
		return false;	/* nothing to write, or the tiers above take them all */
	need -= free;
	pool_counts(p, n->pool_ns, &pc);
	if (!pc.by_state[PAGE_CACHED])
		return false;	/* nothing to evict: the caller goes on as usual */
	can = w->write_budget(n);
	*ms = w->write_wait_ms(n, (uint32_t)(need < UINT32_MAX ? need : UINT32_MAX));
	if ((can >= need || !w->writing(n)) && !*ms)
		return false;
	*now = free + (can < need ? can : need);
	return true;
}

bool tier_room_possible(struct pool *p, struct ns *n, uint64_t want)
{
	uint64_t avail = pool_available(p, n->pool_ns);

	return avail >= want || avail + prefix_evictable(n->idx) >= want;
}

int tier_make_room(struct pool *p, struct ns *n, uint64_t want)
{
	int rc;

	if (!tier_room_possible(p, n, want))
		return -ENOSPC;
	while (pool_available(p, n->pool_ns) < want) {
		rc = tier_evict_one(p, n);
		if (rc <= 0)
			return rc ? rc : -ENOSPC;
	}
	return 0;
}

void tier_evict_ahead(struct pool *p, struct ns *n, uint64_t want)
{
	while (pool_available(p, n->pool_ns) < want && tier_evict_one(p, n) > 0)
		;
}
