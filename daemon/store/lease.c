/* SPDX-License-Identifier: MIT */
/*
 * lease.c - taking and dropping leases: the connection's counting set,
 * the pool's references and the prefix index's candidates move together,
 * so that a page is never freed or evicted while anyone holds it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/store/lease.h"
#include "daemon/store/prefix.h"

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

	if (pool_unref(p, h) != PAGE_CACHED)
		return;
	if (prefix_orphan(n->idx, tag))	/* its parent is gone: it goes too */
		n->drop_subtree(p, n, tag);
	else
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
