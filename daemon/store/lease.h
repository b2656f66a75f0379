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
#include "daemon/store/namespace.h"
#include "daemon/store/pool.h"

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

#endif /* KVP_LEASE_H */
