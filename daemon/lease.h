/* SPDX-License-Identifier: MIT */
/*
 * lease.h - the leases of one connection: the pages it holds, how many
 * times each, kept in step with the pool's references and, for
 * published pages, with the prefix index's eviction candidates.
 */
#ifndef KVP_LEASE_H
#define KVP_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "client/hset.h"
#include "daemon/ns.h"
#include "daemon/pool.h"

/* The leases of one connection: page handle -> how many, and whose they
 * are (the client's id, which the pool keeps per page so that listings
 * name a page's holders without asking every connection). */
struct lease_set {
	struct hset h;
	uint64_t owner;
};

/* lease_set_init() - an empty set of client owner's. */
static inline void lease_set_init(struct lease_set *set, uint64_t owner)
{
	hset_init(&set->h);
	set->owner = owner;
}

/* lease_holds() - how many leases set holds on page h. */
static inline uint32_t lease_holds(const struct lease_set *set, uint64_t h)
{
	return hset_count(&set->h, h);
}

/* lease_count() - the leases of set, repeats included. */
static inline uint64_t lease_count(const struct lease_set *set)
{
	return set->h.total;
}

/*
 * lease_add() / lease_sub() - count one lease more or less of set on the
 * valid page h, without touching its pool reference (the caller moves
 * it); the pool's holders of h follow. lease_add() returns 0 or -ENOMEM,
 * lease_sub() 0 or -ENOENT (set holds none); either changes nothing then.
 */
int lease_add(struct lease_set *set, struct pool *p, uint64_t h);
int lease_sub(struct lease_set *set, struct pool *p, uint64_t h);

/*
 * lease_take() - one more lease on the valid page h for set: a pool
 * reference (a CACHED page becomes SHARED and stops being an eviction
 * candidate of n's index). Returns 0 or -ENOMEM (nothing changed).
 */
int lease_take(struct lease_set *set, struct pool *p, struct ns *n, uint64_t h);

/*
 * lease_drop() - drop one lease of set on h, which it holds. A page left
 * without leases is freed (PRIVATE) or becomes a candidate for eviction
 * (published).
 */
void lease_drop(struct lease_set *set, struct pool *p, struct ns *n, uint64_t h);

/* lease_put() - the pool's side of dropping a lease that was already
 * taken out of the connection's set: one reference less; a published
 * page left without any becomes the most recently released candidate. */
void lease_put(struct pool *p, struct ns *n, uint64_t h);

/* lease_drop_all() - drop every lease of set and empty it. Returns how
 * many leases there were. */
uint64_t lease_drop_all(struct lease_set *set, struct pool *p, struct ns *n);

/*
 * lease_make_room() - evict cached pages of n, leaves and low priorities
 * first, until the pool can hand out want pages of n: to n's host tier
 * when it has one (its oldest leaf moves down to the NVMe tier, or is
 * dropped, when it is full), else to n's NVMe tier when it has one (the
 * tier's oldest leaf makes way when it is full), else out of the index.
 * All or nothing: when the free pages and all that eviction could free
 * do not reach want, nothing is evicted (a request that cannot be met
 * changes nothing). Returns 0 when the pool can hand them out, -ENOSPC
 * when it cannot (nothing evicted), -EAGAIN when the tiers cannot take
 * the evictions now (some may have gone down; a write in flight or
 * --spill-rate will let the rest).
 */
int lease_make_room(struct pool *p, struct ns *n, uint64_t want);

/* lease_room_possible() - free and evictable pages of n reach want (what
 * lease_make_room() decides first). O(entries) when the free ones do not. */
bool lease_room_possible(struct pool *p, struct ns *n, uint64_t want);

/* lease_evict_ahead() - evict towards want pages available, as far as
 * the cache allows (the free-page watermark: best effort). */
void lease_evict_ahead(struct pool *p, struct ns *n, uint64_t want);

/* lease_room_hook - called when a tier write of n completed and its
 * staging buffer is free again (requests that wait for one retry);
 * lease_save_hook - the same while n is saving (a stop goes on). */
extern void (*lease_room_hook)(struct ns *n);
extern void (*lease_save_hook)(struct ns *n);

/*
 * lease_save_one() - for a clean stop: move one page of n down to its
 * NVMe tier, a cached pool page (leaves first; one with a copy goes back
 * to it without a write), else a host tier page. 1 when one went (or is
 * being written), 0 when none is left, -EAGAIN when the tier cannot take
 * it now (a write in flight will let it), -ENOSPC when it cannot at all.
 */
int lease_save_one(struct pool *p, struct ns *n);

/* lease_evict_one() - move one cached page of n out of the pool (to a
 * tier, or out of the index with the blocks below it in the tiers): 1,
 * or 0 when n has none, -EAGAIN when the tiers cannot take it now (a
 * write in flight, or --spill-rate, will let them). */
int lease_evict_one(struct pool *p, struct ns *n);

/* lease_drop_subtree() - take e and every block below it out of the
 * index and their tiers, leaves first: what goes when e cannot be kept,
 * so that no block is left behind a lost parent. */
void lease_drop_subtree(struct pool *p, struct ns *n, uint32_t e);

#endif /* KVP_LEASE_H */
