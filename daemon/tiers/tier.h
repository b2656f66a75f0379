/* SPDX-License-Identifier: MIT */
/*
 * tier.h - the tiers below the pool behind one interface, and the one walk
 * that moves pages down them: pool -> host -> NVMe -> remote.
 *
 * tiers/ (docs/architecture.md): the walk, the host and NVMe tiers, the
 * remote tier as a tier, the save on stop. It knows no connection and no
 * request: one that waits on a tier is resumed through the continuation
 * it gave.
 *
 * A tier is a table of operations (struct tier_ops) over one namespace's
 * store of that kind, as daemon/store/backend.h is for memory: tier_host.c (host
 * memory), tier_nvme.c (the NVMe file), tier_remote.c (Redis Cluster). A local
 * tier holds entries of the prefix index in its slots; a copy tier (the
 * remote one) holds no entry, only copies of the pages that left the pool.
 *
 * tier.c is the only code that decides where a page that leaves the pool
 * goes, what a full tier gives up to take it, and what is dropped, so the
 * invariants are kept in one place:
 *   - leaves first: a full tier gives up its oldest leaf (the index's
 *     victims have no child in the pool or a tier above), which moves one
 *     tier down, or is dropped;
 *   - no holes: a block that is dropped takes every block below it, in
 *     every tier, deepest first, so no block is left behind a lost parent;
 *   - a block never goes below its children: it goes back to a copy in a
 *     lower tier only when no child of it is above that tier;
 *   - nothing is reused under I/O: a tier copies the bytes before take()
 *     returns, and a slot being written is not given up;
 *   - a request that cannot be met changes nothing (tier_make_room()
 *     decides first).
 * Reads back into the pool go through the same tables (readable(),
 * read()), for the ACQUIREs that hit an entry in a local tier (share.c);
 * the remote tier, which holds no entry, is asked by key for what the
 * index no longer has (tier_remote.c).
 */
#ifndef KVP_TIER_H
#define KVP_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/store/namespace.h"
#include "daemon/store/pool.h"

/*
 * A read back into the pool (tier_ops.read()), embedded in the caller's
 * state, which stays valid until done() is called. done(r, res): res 0,
 * the page holds the bytes; -errno, they are lost (the tier let go of its
 * slot): a miss.
 */
struct tier_read {
	void (*done)(struct tier_read *r, int res);
	struct ns *n;
	uint32_t e;
};

struct tier_ops {
	const char *name;		/* "host", "nvme", "remote" */
	bool copy;			/* holds copies, no entry of the index */
	bool async;			/* read() answers later, through done() */
	bool persistent;		/* outlives the daemon: a stop saves there */

	/* in_tier() - a local tier: e is in it now (in a slot, or being
	 * written there). */
	bool (*in_tier)(const struct ns *n, uint32_t e);

	/* left_pool() - a copy tier: full block e leaves the pool (evicted or
	 * dropped); page holds its bytes until this returns. */
	void (*left_pool)(struct ns *n, uint32_t e, const void *page);

	/* reuse() - e, leaving the pool, still has a slot of this tier (it
	 * was read back from there): 1 when it went back to that slot with no
	 * write; 0 when it goes on down the walk (a slot it had is given back
	 * when the tier would hold it below a child: unless above_ok, when
	 * the children above come down next, as in a stop). May be NULL. */
	int (*reuse)(struct ns *n, uint32_t e, bool above_ok);

	/* ready() - the tier can take a page now (a staging buffer is free);
	 * false: -EAGAIN before any room is made. May be NULL (always). */
	bool (*ready)(const struct ns *n);

	/* free_slots() - slots that take() can fill now. */
	uint32_t (*free_slots)(const struct ns *n);

	/* take() - copy e's bytes at src (a pool page, or host memory when
	 * host_src) into a free slot and record e there in the index.
	 * 0, -EAGAIN (not now: a rate cap), or another -errno (not taken). */
	int (*take)(struct ns *n, uint32_t e, const void *src, bool host_src);

	/* reclaim() - free a slot that loses nothing (a copy of a block the
	 * pool has): 0, or -ENOSPC when there is none. May be NULL. */
	int (*reclaim)(struct ns *n);

	/* victim() - the entry the tier gives up for a slot: its oldest leaf
	 * that can go now; PREFIX_NIL with *busy set when every leaf is being
	 * written (its write will end), without when it has none. */
	uint32_t (*victim)(struct ns *n, bool *busy);

	/* bytes() - e's bytes in the tier, readable now, or NULL (on disk):
	 * what a move one tier down copies from. */
	const void *(*bytes)(const struct ns *n, uint32_t e);

	/* moved() - e's bytes went one tier down from slot (the one it had
	 * here: the index names its new one now), which is free again. */
	void (*moved)(struct ns *n, uint32_t e, uint32_t slot);

	/* drop() - let go of e's bytes in the tier (e leaves the index next):
	 * true, or false when it cannot go now (on its way in or out). */
	bool (*drop)(struct ns *n, uint32_t e);

	/* ns_gone() - n is being freed: what the tier still does for it
	 * (writes in flight) forgets it. Called for every kind of tier,
	 * whether n uses it now or not. May be NULL. */
	void (*ns_gone)(struct ns *n);

	/* not_taken() - count a page that left the pool and no tier took.
	 * May be NULL. */
	void (*not_taken)(struct ns *n);

	/* forget_copy() - e is leaving the index from the pool: a slot of
	 * this tier that still holds a copy of it is given back. May be NULL. */
	void (*forget_copy)(struct ns *n, uint32_t e);

	/* readable() - e's bytes can be read back now: 1; 0 not (on its way
	 * in or out); -EBUSY its write is in flight (wait for it). */
	int (*readable)(const struct ns *n, uint32_t e);

	/* read_budget() - reads the tier can start at once (UINT32_MAX: no
	 * limit; the NVMe tier: its free staging buffers). */
	uint32_t (*read_budget)(const struct ns *n);

	/* read() - copy e's bytes (e is restoring: prefix_restoring()) into
	 * page. 0: they are there now; 1: r->done() follows, from the loop;
	 * -errno: they are lost (the tier let go of its slot): a miss. The
	 * tier's slot afterwards is its own business (the host tier frees it,
	 * the NVMe tier keeps it as the block's copy). */
	int (*read)(struct ns *n, uint32_t e, void *page, struct tier_read *r);

	/* For a tier whose take() starts a write that ends later (NVMe;
	 * NULL for one that takes a page at once): write_budget() - writes
	 * it can start now (free staging buffers); write_wait_ms() - how long
	 * a rate cap asks to wait before it writes pages more (0: not);
	 * writing() - writes are in flight (one ending wakes the waiters). */
	uint32_t (*write_budget)(const struct ns *n);
	uint64_t (*write_wait_ms)(const struct ns *n, uint32_t pages);
	bool (*writing)(const struct ns *n);

	/* publish_over() - a client published e's block again, into page,
	 * while e is in this tier: page takes its place in the pool, and the
	 * tier gives its slot back or keeps it as a copy. false when it
	 * cannot now (being written): page stays the client's. */
	bool (*publish_over)(struct ns *n, uint32_t e, uint64_t page);
};

extern const struct tier_ops tier_host_ops, tier_nvme_ops, tier_remote_ops;

/* TIERS_MAX - host, NVMe, remote. */
#define TIERS_MAX 3u

/* tier_ns_gone() - n is being freed: every kind of tier forgets it. */
void tier_ns_gone(struct ns *n);

/* tiers_of() - n's tiers, top down, into t[]; how many. */
unsigned tiers_of(const struct ns *n, const struct tier_ops *t[TIERS_MAX]);

/* tier_of_entry() - the local tier e is in, or NULL (the pool, or on its
 * way back into it). */
const struct tier_ops *tier_of_entry(const struct ns *n, uint32_t e);

/*
 * tier_make_room() - evict cached pages of n, leaves and low priorities
 * first, until the pool can hand out want pages of n, each down the walk.
 * All or nothing: when the free pages and all that eviction could free
 * do not reach want, nothing is evicted (a request that cannot be met
 * changes nothing). Returns 0 when the pool can hand them out, -ENOSPC
 * when it cannot (nothing evicted), -EAGAIN when the tiers cannot take
 * the evictions now (some may have gone down; a write in flight or
 * --spill-rate will let the rest).
 */
int tier_make_room(struct pool *p, struct ns *n, uint64_t want);

/* tier_room_possible() - free and evictable pages of n reach want (what
 * tier_make_room() decides first). O(entries) when the free ones do not. */
bool tier_room_possible(struct pool *p, struct ns *n, uint64_t want);

/* tier_evict_ahead() - evict towards want pages available, as far as
 * the cache allows (the free-page watermark: best effort). */
void tier_evict_ahead(struct pool *p, struct ns *n, uint64_t want);

/* tier_evict_one() - move one cached page of n out of the pool: the copy
 * tiers get it, then the first local tier that takes it (a full one gives
 * up its oldest leaf, one tier down), else it leaves the index with the
 * blocks below it. 1, or 0 when n has none, -EAGAIN when the tiers cannot
 * take it now (a write in flight, or --spill-rate, will let them). */
int tier_evict_one(struct pool *p, struct ns *n);

/*
 * tier_save_one() - for a clean stop: move one page of n down to its
 * persistent tier (NVMe), a cached pool page (leaves first; one with a
 * copy goes back to it without a write), else a page of a tier above it. 1 when one went (or is
 * being written), 0 when none is left, -EAGAIN when the tier cannot take
 * it now (a write in flight will let it), -ENOSPC when it cannot at all.
 */
int tier_save_one(struct pool *p, struct ns *n);

/* tier_drop_subtree() - take e and every block below it out of the index
 * and their tiers, leaves first: what goes when e cannot be kept, so that
 * no block is left behind a lost parent. */
void tier_drop_subtree(struct pool *p, struct ns *n, uint32_t e);

/* tier_lose_below() - a tier lost e's bytes (a failed write): the blocks
 * below it go, then e leaves the index (its slot is free already). */
void tier_lose_below(struct ns *n, uint32_t e);

/* tier_writes() - n has a tier whose writes end later (requests may
 * wait for them). tier_writing() - such writes are in flight now.
 * tier_write_wait_ms() - what its rate cap asks to wait for pages more
 * (0 without one). */
bool tier_writes(const struct ns *n);
bool tier_writing(const struct ns *n);
uint64_t tier_write_wait_ms(const struct ns *n, uint32_t pages);

/*
 * tier_must_wait() - back-pressure: making room for need more pages in
 * n's pool would take more writes than the writing tier can start now,
 * or its rate cap says wait. Then true, with *now the pages the tiers can
 * take at once (free slots above it, and the writes it can start) and
 * *ms the cap's wait; the caller evicts that many and waits for the rest
 * rather than drop cached pages it could keep. False when the tiers take
 * them all now, or there is nothing to write (no such tier, or no cached
 * page to evict).
 */
bool tier_must_wait(struct pool *p, struct ns *n, uint64_t need, uint64_t *now,
		    uint64_t *ms);

/* tier_room_hook - called when a tier write of n completed and its
 * staging buffer is free again (requests that wait for one retry);
 * tier_save_hook - the same while n is saving (a stop goes on). */
extern void (*tier_room_hook)(struct ns *n);
extern void (*tier_save_hook)(struct ns *n);

#endif /* KVP_TIER_H */
