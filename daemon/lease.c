/* SPDX-License-Identifier: MIT */
/*
 * lease.c - taking and dropping leases: the connection's counting set,
 * the pool's references and the prefix index's candidates move together,
 * so that a page is never freed or evicted while anyone holds it.
 */
#include <errno.h>

#include "daemon/lease.h"

int lease_take(struct hset *set, struct pool *p, struct ns *n, uint64_t h)
{
	if (hset_add(set, h, 1) < 0)
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

void lease_drop(struct hset *set, struct pool *p, struct ns *n, uint64_t h)
{
	if (hset_sub(set, h, 1) == 0)
		lease_put(p, n, h);
}

uint64_t lease_drop_all(struct hset *set, struct pool *p, struct ns *n)
{
	uint64_t dropped = set->total;
	size_t i;
	uint32_t k;

	for (i = 0; i < set->cap; i++)
		for (k = 0; set->keys[i] && k < set->counts[i]; k++)
			lease_put(p, n, set->keys[i]);
	hset_fini(set);
	return dropped;
}

bool lease_make_room(struct pool *p, struct ns *n, uint64_t want)
{
	uint64_t page;

	while (pool_available(p, n->pool_ns) < want) {
		if (prefix_evict(n->idx, &page) == PREFIX_NIL)
			return false;
		pool_evict(p, page);
		n->st.evictions++;
	}
	return true;
}
