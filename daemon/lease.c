/* SPDX-License-Identifier: MIT */
/*
 * lease.c - taking and dropping leases: the connection's counting set,
 * the pool's references and the prefix index's candidates move together,
 * so that a page is never freed or evicted while anyone holds it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/lease.h"
#include "daemon/log.h"
#include "daemon/rtier.h"

int lease_add(struct lease_set *set, struct pool *p, uint64_t h)
{
	if (hset_add(&set->h, h, 1) < 0)
		return -ENOMEM;
	if (hset_count(&set->h, h) == 1)
		pool_holder(p, h, set->owner, true);
	return 0;
}

int lease_sub(struct lease_set *set, struct pool *p, uint64_t h)
{
	if (hset_sub(&set->h, h, 1) < 0)
		return -ENOENT;
	if (!hset_count(&set->h, h))
		pool_holder(p, h, set->owner, false);
	return 0;
}

int lease_take(struct lease_set *set, struct pool *p, struct ns *n, uint64_t h)
{
	if (lease_add(set, p, h) < 0)
		return -ENOMEM;
	if (pool_state(p, h) == PAGE_CACHED)
		prefix_leased(n->idx, pool_tag(p, h));
	pool_ref(p, h);
	return 0;
}

void lease_put(struct pool *p, struct ns *n, uint64_t h)
{
	uint32_t tag = pool_tag(p, h);

	if (pool_unref(p, h) == PAGE_CACHED)
		prefix_cached(n->idx, tag);
}

void lease_drop(struct lease_set *set, struct pool *p, struct ns *n, uint64_t h)
{
	if (lease_sub(set, p, h) == 0)
		lease_put(p, n, h);
}

uint64_t lease_drop_all(struct lease_set *set, struct pool *p, struct ns *n)
{
	struct hset *hs = &set->h;
	uint64_t dropped = hs->total;
	size_t i;
	uint32_t k;

	for (i = 0; i < hs->cap; i++) {
		if (!hs->keys[i])
			continue;
		pool_holder(p, hs->keys[i], set->owner, false);
		for (k = 0; k < hs->counts[i]; k++)
			lease_put(p, n, hs->keys[i]);
	}
	hset_fini(hs);
	return dropped;
}

void (*lease_room_hook)(struct ns *n);
void (*lease_save_hook)(struct ns *n);

/*
 * drop_entry() - take e out of the index, and out of wherever its bytes
 * are: a cached pool page is freed, a host tier slot or an NVMe slot
 * given back (one being written is given back when its write ends). An
 * entry that is leased or on its way in cannot go: it stays, and loses
 * its parent link when the parent goes.
 */
static void drop_entry(struct pool *p, struct ns *n, uint32_t e)
{
	uint32_t slot = prefix_slot(n->idx, e);
	uint64_t page = prefix_page(n->idx, e);

	switch (prefix_where(n->idx, e)) {
	case PREFIX_IN_POOL:
		if (pool_state(p, page) != PAGE_CACHED)
			return;
		rtier_left_pool(n, e, pool_page_addr(p, page));
		prefix_leased(n->idx, e);	/* off the candidate list */
		pool_evict(p, page);
		if (prefix_copy(n->idx, e, &slot)) {
			n->slot_entry[slot] = PREFIX_NIL;
			spill_free(n->tier, slot);
		}
		break;
	case PREFIX_HOST:
		hosttier_free(n->host, slot);
		hosttier_dropped(n->host);
		break;
	case PREFIX_SPILLED:
		n->slot_entry[slot] = PREFIX_NIL;
		if (!spill_busy(n->tier, slot))
			spill_free(n->tier, slot);
		spill_dropped(n->tier);
		break;
	default:		/* spilling or restoring */
		return;
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

void lease_drop_subtree(struct pool *p, struct ns *n, uint32_t e)
{
	drop_below(p, n, e, true);
}

/* spilled_done() - a spill write ended; a failed one loses the page, and
 * the blocks below it with it (no block may stay behind a lost parent).
 * A slot whose entry was dropped while it was written is free now.
 * Either way its staging buffer is free: requests waiting for one go on. */
static void spilled_done(void *arg, uint32_t slot, int res)
{
	struct ns *n = arg;
	uint32_t e = n->slot_entry[slot];

	if (res < 0) {
		if (ns_fault_first(n, NS_FAULT_WRITE))
			log_warn("namespace '%s': writing slot %u of %s failed: %s; the page "
				 "and the blocks after it are dropped (further write errors "
				 "are counted in STATS, not logged)", n->name, slot,
				 spill_path(n->tier), strerror(-res));
		n->slot_entry[slot] = PREFIX_NIL;
		if (e != PREFIX_NIL) {
			drop_below(n->pool, n, e, false);
			prefix_remove(n->idx, e);	/* its slot is free already */
		}
	} else if (e == PREFIX_NIL) {
		spill_free(n->tier, slot);
	}
	if (n->saving && lease_save_hook)
		lease_save_hook(n);
	/* last: a waiting DROP_NS may free n */
	if (n->wait_head && lease_room_hook)
		lease_room_hook(n);
}

/* tier_drop() - free a slot: the oldest copy of a block that is in the
 * pool (nothing is lost), else the slot of the tier's oldest leaf that is
 * not being written. -EAGAIN when every leaf is (their writes will end),
 * -ENOSPC when the tier has none. */
static int tier_drop(struct ns *n)
{
	uint32_t e = prefix_copy_oldest(n->idx), slot;
	bool busy = false;

	if (e != PREFIX_NIL && prefix_copy(n->idx, e, &slot)) {
		prefix_copy_clear(n->idx, e);
		n->slot_entry[slot] = PREFIX_NIL;
		spill_free(n->tier, slot);
		return 0;
	}
	for (e = prefix_tier_next_leaf(n->idx, PREFIX_NIL); e;
	     e = prefix_tier_next_leaf(n->idx, e)) {
		slot = prefix_slot(n->idx, e);
		if (spill_busy(n->tier, slot)) {
			busy = true;
			continue;
		}
		n->slot_entry[slot] = PREFIX_NIL;
		prefix_remove(n->idx, e);
		spill_free(n->tier, slot);
		spill_dropped(n->tier);
		return 0;
	}
	return busy ? -EAGAIN : -ENOSPC;
}

/*
 * spill_entry() - write e's bytes at src (its pool page, or its host tier
 * slot when host_src) to the NVMe tier; src is free to reuse as soon as
 * the bytes are in a staging buffer. A full tier makes room by dropping
 * its oldest leaf. Returns 0, or -errno when they could not be spilled:
 * -EAGAIN not now (--spill-rate, or every staging buffer or every leaf of
 * a full tier is busy with a write that will end), -ENOSPC never (a full
 * tier with no leaf to drop).
 */
static int spill_entry(struct ns *n, uint32_t e, const void *src, bool host_src)
{
	struct spill_meta m;
	uint32_t parent = prefix_parent(n->idx, e);
	int slot;

	memset(&m, 0, sizeof(m));
	memcpy(m.key, prefix_key(n->idx, e), KVP_KEY_BYTES);
	if (parent != PREFIX_NIL && !prefix_tokens(n->idx, e))
		memcpy(m.parent, prefix_key(n->idx, parent), KVP_KEY_BYTES);
	m.prio = prefix_prio(n->idx, e);
	m.ntokens = prefix_tokens(n->idx, e);
	m.tokens = prefix_token_ids(n->idx, e);
	if (!spill_idle_buffers(n->tier))
		return -EAGAIN;		/* a write ends: a buffer comes back */
	if (!spill_free_slots(n->tier)) {
		slot = tier_drop(n);
		if (slot < 0)
			return slot;
	}
	slot = spill_write(n->tier, src, host_src, &m, spilled_done, n);
	if (slot < 0)
		return slot;
	prefix_spilling(n->idx, e, (uint32_t)slot);
	prefix_spilled(n->idx, e);
	n->slot_entry[slot] = e;
	return 0;
}

/*
 * host_make_slot() - free a host tier slot: its oldest leaf moves down to
 * the NVMe tier, or is dropped, with whatever it has below it in the NVMe
 * tier, when there is no NVMe tier or it cannot take it. Returns 0,
 * -EAGAIN (the NVMe tier cannot take it now: try later, nothing moved) or
 * -ENOSPC (every page in the host tier is someone's parent or about to be
 * read back).
 */
static int host_make_slot(struct pool *p, struct ns *n)
{
	uint32_t e = prefix_host_victim(n->idx), slot;
	int rc = -ENOSPC;

	if (e == PREFIX_NIL)
		return -ENOSPC;
	slot = prefix_slot(n->idx, e);
	if (n->tier)
		rc = spill_entry(n, e, hosttier_addr(n->host, slot), true);
	if (rc == -EAGAIN)
		return rc;
	if (rc < 0) {
		lease_drop_subtree(p, n, e);	/* e's host slot too */
		return 0;
	}
	hosttier_free(n->host, slot);
	return 0;
}

/*
 * host_take() - copy the victim e's page into the host tier, making a
 * slot when it is full. Returns 0, -EAGAIN (a slot needs a spill write
 * that --spill-rate holds back) or -ENOSPC / -EIO (the page did not go
 * to the host tier).
 */
static int host_take(struct pool *p, struct ns *n, uint32_t e, uint64_t page)
{
	int slot, rc;

	if (!hosttier_free_slots(n->host)) {
		rc = host_make_slot(p, n);
		if (rc < 0)
			return rc;
	}
	slot = hosttier_put(n->host, pool_page_addr(p, page));
	if (slot < 0)
		return slot;
	prefix_hosted(n->idx, e, (uint32_t)slot);
	return 0;
}

/* lease_evict_one() - move one candidate out of the pool: into the host
 * tier, else the NVMe tier, else out of the index with the blocks below
 * it in the tiers. 1 when one went, 0 when there is none, -EAGAIN when the
 * tiers cannot take it now (it stays, cached). */
int lease_evict_one(struct pool *p, struct ns *n)
{
	uint32_t e = prefix_victim(n->idx), slot;
	uint64_t page;
	int rc = -ENOSPC;

	if (e == PREFIX_NIL)
		return 0;
	page = prefix_page(n->idx, e);
	rtier_left_pool(n, e, pool_page_addr(p, page));	/* copied before it returns */
	if (prefix_copy(n->idx, e, &slot)) {
		if (!prefix_host_children(n->idx, e)) {
			/* its slot still holds it: back to that, no write */
			prefix_spilling(n->idx, e, slot);
			prefix_spilled(n->idx, e);
			pool_evict(p, page);
			n->st.evictions++;
			return 1;
		}
		/* a child is in the host tier: the parent goes there too, never
		 * below its child, and the copy's slot is given back */
		prefix_copy_clear(n->idx, e);
		n->slot_entry[slot] = PREFIX_NIL;
		spill_free(n->tier, slot);
	}
	if (n->host)
		rc = host_take(p, n, e, page);
	if (rc == -ENOSPC && n->tier)	/* no host tier, or it cannot take it */
		rc = spill_entry(n, e, pool_page_addr(p, page), false);
	if (rc == -EAGAIN) {	/* not now: keep it */
		prefix_cached(n->idx, e);
		return -EAGAIN;
	}
	n->st.evictions++;
	if (rc < 0) {
		if (n->host && !n->tier)
			hosttier_dropped(n->host);
		lease_drop_subtree(p, n, e);	/* e's page too */
		return 1;
	}
	pool_evict(p, page);
	return 1;
}

int lease_save_one(struct pool *p, struct ns *n)
{
	uint32_t e = prefix_victim(n->idx), slot;
	uint64_t page;
	int rc;

	if (e != PREFIX_NIL) {
		page = prefix_page(n->idx, e);
		if (prefix_copy(n->idx, e, &slot)) {
			prefix_spilling(n->idx, e, slot);
			prefix_spilled(n->idx, e);
		} else {
			rc = spill_entry(n, e, pool_page_addr(p, page), false);
			if (rc < 0) {
				prefix_cached(n->idx, e);
				return rc;
			}
		}
		pool_evict(p, page);
		return 1;
	}
	e = n->host ? prefix_host_victim(n->idx) : PREFIX_NIL;
	if (e == PREFIX_NIL)
		return 0;
	slot = prefix_slot(n->idx, e);
	rc = spill_entry(n, e, hosttier_addr(n->host, slot), true);
	if (rc < 0)
		return rc;
	hosttier_free(n->host, slot);
	return 1;
}

bool lease_room_possible(struct pool *p, struct ns *n, uint64_t want)
{
	uint64_t avail = pool_available(p, n->pool_ns);

	return avail >= want || avail + prefix_evictable(n->idx) >= want;
}

int lease_make_room(struct pool *p, struct ns *n, uint64_t want)
{
	int rc;

	if (!lease_room_possible(p, n, want))
		return -ENOSPC;
	while (pool_available(p, n->pool_ns) < want) {
		rc = lease_evict_one(p, n);
		if (rc <= 0)
			return rc ? rc : -ENOSPC;
	}
	return 0;
}

void lease_evict_ahead(struct pool *p, struct ns *n, uint64_t want)
{
	while (pool_available(p, n->pool_ns) < want && lease_evict_one(p, n) > 0)
		;
}
