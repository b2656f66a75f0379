/* SPDX-License-Identifier: MIT */
/*
 * lease.c - taking and dropping leases: the connection's counting set,
 * the pool's references and the prefix index's candidates move together,
 * so that a page is never freed or evicted while anyone holds it.
 */
#include <errno.h>
#include <string.h>

#include "daemon/lease.h"
#include "daemon/log.h"

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

/* spilled_done() - a spill write ended; a failed one loses the page.
 * Either way its staging buffer is free: requests waiting for one go on. */
static void spilled_done(void *arg, uint32_t slot, int res)
{
	struct ns *n = arg;
	uint32_t e = n->slot_entry[slot];

	if (res < 0) {
		if (ns_fault_first(n, NS_FAULT_WRITE))
			log_warn("namespace '%s': writing slot %u of %s failed: %s; the page "
				 "is dropped (further write errors are counted in STATS, not "
				 "logged)", n->name, slot, spill_path(n->tier), strerror(-res));
		n->slot_entry[slot] = PREFIX_NIL;
		if (e != PREFIX_NIL)
			prefix_remove(n->idx, e);
	}
	/* last: a waiting DROP_NS may free n */
	if (n->wait_head && lease_room_hook)
		lease_room_hook(n);
}

/* tier_drop() - free the tier's oldest leaf slot for a new page. */
static bool tier_drop(struct ns *n)
{
	uint32_t e = prefix_tier_victim(n->idx), slot;

	if (e == PREFIX_NIL)
		return false;
	slot = prefix_slot(n->idx, e);
	if (spill_busy(n->tier, slot))
		return false;
	n->slot_entry[slot] = PREFIX_NIL;
	prefix_remove(n->idx, e);
	spill_free(n->tier, slot);
	return true;
}

/*
 * spill_entry() - write e's bytes at src (its pool page, or its host tier
 * slot when host_src) to the NVMe tier; src is free to reuse as soon as
 * the bytes are in a staging buffer. Returns 0, or -errno when they could
 * not be spilled (-EAGAIN: --spill-rate says not now).
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
	if (!spill_free_slots(n->tier))
		tier_drop(n);
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
 * the NVMe tier, or is dropped when there is none or the write cannot be
 * made. Returns 0, -EAGAIN (--spill-rate: try later, nothing moved) or
 * -ENOSPC (every page in the host tier is someone's parent or about to be
 * read back).
 */
static int host_make_slot(struct ns *n)
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
		prefix_remove(n->idx, e);
		hosttier_dropped(n->host);
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
		rc = host_make_slot(n);
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
 * tier, else the NVMe tier, else out of the index. False when there is
 * none, or when --spill-rate holds it back. */
bool lease_evict_one(struct pool *p, struct ns *n)
{
	uint32_t e = prefix_victim(n->idx);
	uint64_t page;
	int rc = -ENOSPC;

	if (e == PREFIX_NIL)
		return false;
	page = prefix_page(n->idx, e);
	if (n->host)
		rc = host_take(p, n, e, page);
	if (rc == -ENOSPC && n->tier)	/* no host tier, or it cannot take it */
		rc = spill_entry(n, e, pool_page_addr(p, page), false);
	if (rc == -EAGAIN) {	/* --spill-rate: not now, keep it */
		prefix_cached(n->idx, e);
		return false;
	}
	if (rc < 0) {
		if (n->host && !n->tier)
			hosttier_dropped(n->host);
		prefix_remove(n->idx, e);
	}
	pool_evict(p, page);
	n->st.evictions++;
	return true;
}

bool lease_room_possible(struct pool *p, struct ns *n, uint64_t want)
{
	uint64_t avail = pool_available(p, n->pool_ns);

	return avail >= want || avail + prefix_evictable(n->idx) >= want;
}

bool lease_make_room(struct pool *p, struct ns *n, uint64_t want)
{
	if (!lease_room_possible(p, n, want))
		return false;
	while (pool_available(p, n->pool_ns) < want)
		if (!lease_evict_one(p, n))
			return false;	/* --spill-rate holds the rest back */
	return true;
}

void lease_evict_ahead(struct pool *p, struct ns *n, uint64_t want)
{
	while (pool_available(p, n->pool_ns) < want && lease_evict_one(p, n))
		;
}
