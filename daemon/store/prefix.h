/* SPDX-License-Identifier: MIT */
/*
 * prefix.h - one namespace's prefix index: content key -> published page,
 * partial pages under their parent key, and the eviction order of the
 * pages nobody leases.
 *
 * Entries are numbered (1, 2, ...; 0 is PREFIX_NIL). Each records its
 * key, its page handle, the entry of its parent block when the parent is
 * indexed, how many indexed entries name it as their parent, and its
 * priority class. A partial entry (fewer than block_tokens tokens) is
 * found by its parent key and its token ids, not by a key of its own.
 *
 * Eviction order: lowest priority class first; within a class least
 * recently released first; never an entry that still has indexed
 * children (leaves go before their parents, so no cached block is left
 * behind an evicted parent). Only entries marked cached (no lease) are
 * candidates. The index never touches the pool: the caller moves pages.
 */
#ifndef KVP_PREFIX_H
#define KVP_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"

#define PREFIX_NIL 0u

/* Where an entry's bytes are. */
enum prefix_where {
	PREFIX_IN_POOL = 0,	/* in its page (leased, or a candidate) */
	PREFIX_SPILLING = 1,	/* being written to its slot; no page */
	PREFIX_SPILLED = 2,	/* in its slot only */
	PREFIX_RESTORING = 3,	/* being read back into its page */
	PREFIX_HOST = 4,	/* in its host tier slot only */
};
/* Media a full block's bytes are in (a partial entry has none): the pool's
 * page, the host tier, the NVMe tier (a block in the pool may have a copy
 * there too). */
#define PREFIX_M_POOL	0x1u
#define PREFIX_M_HOST	0x2u
#define PREFIX_M_NVME	0x4u
#define PREFIX_M_REMOTE	0x8u	/* the remote tier has it (kept by local moves) */

#define PREFIX_CLASSES 4u	/* priority classes 0 (evicted first) .. 3 (pinned) */
#define PREFIX_PINNED 3u

struct prefix;

/* prefix_new() - an empty index, or NULL without memory. */
struct prefix *prefix_new(void);

/* prefix_free() - free the index (the pages are the caller's). */
void prefix_free(struct prefix *x);

/*
 * The sink: fn(arg, x, e, gone, came) runs whenever full block e's media
 * change (gone: PREFIX_M_* it left; came: those it is in now), while e is
 * still indexed with its key, before the change returns; it must not
 * change x. Set before the first insert (KV events); NULL: none. With a
 * sink, every full block keeps the key it was published after and its
 * token ids (prefix_insert_block()).
 */
typedef void (*prefix_sink_fn)(void *arg, const struct prefix *x, uint32_t e,
			       unsigned gone, unsigned came);
void prefix_set_sink(struct prefix *x, prefix_sink_fn fn, void *arg);

/* prefix_media() - the PREFIX_M_* a full block's bytes are in now. */
unsigned prefix_media(const struct prefix *x, uint32_t e);

/* prefix_remote() / prefix_set_remote() - the remote tier has e's bytes:
 * this daemon sent them or fetched them (Redis may have evicted them
 * since); such a block is not sent again when it leaves the pool. */
bool prefix_remote(const struct prefix *x, uint32_t e);
void prefix_set_remote(struct prefix *x, uint32_t e);

/* prefix_remote_stored() - the remote tier confirmed that it holds full
 * block e (a SET answered, or a GET served it): PREFIX_M_REMOTE joins
 * its media, which moves between local tiers keep until e leaves the
 * index. */
void prefix_remote_stored(struct prefix *x, uint32_t e);

/* prefix_remote_forget() - the remote tier holds none of x's blocks (the
 * namespace's identity there changed): every block is unmarked, and
 * leaves PREFIX_M_REMOTE. O(entries). */
void prefix_remote_forget(struct prefix *x);

/* prefix_parent_key() - with a sink, the key full block e was published
 * after (the namespace's root for a first block); NULL without one.
 * prefix_block_ids() - its token ids (*n of them) when its publisher sent
 * them, else NULL. */
const uint8_t *prefix_parent_key(const struct prefix *x, uint32_t e);
const uint32_t *prefix_block_ids(const struct prefix *x, uint32_t e, uint32_t *n);

/* prefix_find() - the entry of a full-block key, or PREFIX_NIL. O(1). */
uint32_t prefix_find(const struct prefix *x, const uint8_t key[KVP_KEY_BYTES]);

/*
 * prefix_find_partial() - the partial entry under parent whose token ids
 * are the longest prefix of tail[0..ntail), or PREFIX_NIL. O(partials
 * under parent x their length).
 */
uint32_t prefix_find_partial(const struct prefix *x, const uint8_t parent[KVP_KEY_BYTES],
			     const uint32_t *tail, uint32_t ntail);

/* prefix_find_partial_exact() - the partial entry under parent with
 * exactly tokens[0..ntokens), or PREFIX_NIL. */
uint32_t prefix_find_partial_exact(const struct prefix *x,
				   const uint8_t parent[KVP_KEY_BYTES],
				   const uint32_t *tokens, uint32_t ntokens);

/*
 * prefix_insert() - index page under key (a full block: ntokens 0) or as
 * a partial page of ntokens tokens (copied) under parent_key. parent is
 * the parent's entry (PREFIX_NIL when not indexed); it gains a child. The
 * new entry is leased (not an eviction candidate). Returns the entry
 * number, or PREFIX_NIL without memory.
 */
uint32_t prefix_insert(struct prefix *x, const uint8_t key[KVP_KEY_BYTES],
		       const uint8_t parent_key[KVP_KEY_BYTES], uint32_t parent,
		       uint64_t page, unsigned prio, const uint32_t *tokens,
		       uint32_t ntokens);

/* prefix_insert_block() - prefix_insert() of a full block whose token ids
 * are ids[0..nids) (NULL: not known), which a sink's index keeps. */
uint32_t prefix_insert_block(struct prefix *x, const uint8_t key[KVP_KEY_BYTES],
			     const uint8_t parent_key[KVP_KEY_BYTES], uint32_t parent,
			     uint64_t page, unsigned prio, const uint32_t *ids,
			     uint32_t nids);

/* prefix_page() / prefix_tokens() / prefix_prio() - an entry's page, its
 * token count (0 for a full block) and priority class. */
uint64_t prefix_page(const struct prefix *x, uint32_t e);
uint32_t prefix_tokens(const struct prefix *x, uint32_t e);
unsigned prefix_prio(const struct prefix *x, uint32_t e);

/* prefix_cached() - e has no lease any more: it becomes the most recently
 * released candidate of its class. O(1). */
void prefix_cached(struct prefix *x, uint32_t e);

/* prefix_leased() - e is leased again: no longer a candidate. O(1). */
void prefix_leased(struct prefix *x, uint32_t e);

/*
 * prefix_victim() - the next candidate to leave the pool, taken off the
 * candidate lists but still indexed; PREFIX_NIL when there is none.
 * Candidates with children in the pool are skipped: O(skipped).
 */
uint32_t prefix_victim(struct prefix *x);

/* prefix_evict() - prefix_victim(), then remove it from the index; its
 * page handle via *page. */
uint32_t prefix_evict(struct prefix *x, uint64_t *page);

/* The tier moves: e left its page for slot (spilling), its slot holds it
 * (spilled: the newest of the tier's list), it is read back into page
 * (restoring), it is in the pool again (restored: leased, no candidate). */
void prefix_spilling(struct prefix *x, uint32_t e, uint32_t slot);
void prefix_spilled(struct prefix *x, uint32_t e);
void prefix_restoring(struct prefix *x, uint32_t e, uint64_t page);
void prefix_restored(struct prefix *x, uint32_t e);

/* prefix_tier_victim() - the oldest spilled entry without children (it
 * stays indexed; the caller frees its slot and removes it).
 * prefix_tier_next_leaf() - the next such entry after e, for a caller
 * that must pass over some (PREFIX_NIL: from the oldest). */
uint32_t prefix_tier_victim(struct prefix *x);
uint32_t prefix_tier_next_leaf(const struct prefix *x, uint32_t e);

/*
 * prefix_subtree() - e and every indexed entry below it, deepest first
 * (each after all of its descendants, e last), into a new array *out that
 * the caller frees. Returns how many, or 0 without memory. O(entries).
 */
uint32_t prefix_subtree(const struct prefix *x, uint32_t e, uint32_t **out);

/*
 * The NVMe copy of an entry in the pool: a block read back from its slot
 * keeps the slot while it is in the pool (published pages never change),
 * so that evicting it again costs no write, and a full tier can give the
 * slot back first, losing nothing. prefix_copy_set() records slot as e's
 * copy, prefix_copy_clear() forgets it (the caller frees the slot; also
 * done, without freeing, by prefix_spilling() and prefix_remove()),
 * prefix_copy() says whether e has one, prefix_copy_oldest() the entry
 * with the oldest copy (PREFIX_NIL: none).
 */
void prefix_copy_set(struct prefix *x, uint32_t e, uint32_t slot);
void prefix_copy_clear(struct prefix *x, uint32_t e);
bool prefix_copy(const struct prefix *x, uint32_t e, uint32_t *slot);
uint32_t prefix_copy_oldest(const struct prefix *x);

/* prefix_hosted() - e left its page for slot of the host tier (the
 * newest of that tier's list). prefix_spilling() moves it on down to the
 * NVMe tier, prefix_restoring() back into the pool. */
void prefix_hosted(struct prefix *x, uint32_t e, uint32_t slot);

/* prefix_children() - indexed entries that name e as their parent. */
uint32_t prefix_children(const struct prefix *x, uint32_t e);

/* prefix_host_children() - entries below e that are in the host tier. */
uint32_t prefix_host_children(const struct prefix *x, uint32_t e);

/* prefix_host_victim() - the oldest entry of the host tier with no child
 * in the pool or the host tier (it stays indexed and listed). */
uint32_t prefix_host_victim(struct prefix *x);

/* prefix_hold() / prefix_unhold() - keep a spilled or hosted e off its
 * tier's list while a request is about to read it back, so that making
 * room for the read does not move or drop it; then put it back (as the
 * newest). */
void prefix_hold(struct prefix *x, uint32_t e);
void prefix_unhold(struct prefix *x, uint32_t e);

/* prefix_used() - e names an indexed entry (not one removed since). */
bool prefix_used(const struct prefix *x, uint32_t e);

/* An entry's location, slot, key (full block: its own; partial: its
 * parent's), token ids (partial), parent entry. */
unsigned prefix_where(const struct prefix *x, uint32_t e);
uint32_t prefix_slot(const struct prefix *x, uint32_t e);
const uint8_t *prefix_key(const struct prefix *x, uint32_t e);
const uint32_t *prefix_token_ids(const struct prefix *x, uint32_t e);
uint32_t prefix_parent(const struct prefix *x, uint32_t e);

/* prefix_set_parent() - link e, indexed without a parent, to parent
 * (warm restart: slots come in any order). */
void prefix_set_parent(struct prefix *x, uint32_t e, uint32_t parent);

/* prefix_touch() - e was used now (hit: an ACQUIRE served it); its age
 * and hits for LIST_PAGES and LIST_PREFIXES. */
void prefix_touch(struct prefix *x, uint32_t e, bool hit);
uint64_t prefix_hits(const struct prefix *x, uint32_t e);
/* prefix_age_ms() - ms since e was last used, at now (prefix_now_ms(),
 * read once for a whole listing). */
uint64_t prefix_now_ms(void);
uint64_t prefix_age_ms(const struct prefix *x, uint32_t e, uint64_t now);

/* prefix_depth() - blocks from the root to e, e included (a chain whose
 * first blocks are not indexed counts from the first that is). O(depth). */
uint32_t prefix_depth(const struct prefix *x, uint32_t e);

/* prefix_longest_chain() - the most entries in one hash bucket: for tests
 * (whatever keys clients choose, it stays small). O(buckets + entries). */
uint32_t prefix_longest_chain(const struct prefix *x);

/* prefix_depths() - prefix_depth() of every entry at once into
 * depth[0..prefix_entries()), the caller's array: O(entries) in all,
 * however deep the chains. */
uint32_t prefix_entries(const struct prefix *x);
void prefix_depths(const struct prefix *x, uint32_t *depth);

/* prefix_next() - iterate the entries: the one after e (PREFIX_NIL to
 * start), PREFIX_NIL at the end. O(entries) in all. */
uint32_t prefix_next(const struct prefix *x, uint32_t e);

/* prefix_spilled_count() - entries out of the pool: in the host tier,
 * spilling or spilled. */
uint32_t prefix_spilled_count(const struct prefix *x);

/* prefix_remove() - drop e from the index at once (its page went away
 * another way). Children it still has lose their parent link and are
 * orphans (prefix_orphan()): O(entries) then, O(1) otherwise. */
void prefix_remove(struct prefix *x, uint32_t e);

/* prefix_orphan() - e's parent left the index while e could not (it was
 * leased, or on its way back from a tier): no lookup finds e, and it must
 * leave too as soon as it can (tier_drop_subtree() when its lease ends; an
 * ACQUIRE that reads it back serves it to nobody). */
bool prefix_orphan(const struct prefix *x, uint32_t e);

/*
 * prefix_evictable() - the entries in the pool that eviction could take
 * out of it, one after another: the unleased ones none of whose
 * descendants in the pool is leased or being restored (eviction takes
 * leaves first, so such a descendant keeps every ancestor in). O(entries);
 * without memory for its scratch, every unleased entry in the pool.
 */
uint32_t prefix_evictable(const struct prefix *x);

/* prefix_count() - entries indexed; prefix_pinned() - of them in the
 * pinned class. */
uint32_t prefix_count(const struct prefix *x);
uint32_t prefix_pinned(const struct prefix *x);

#endif /* KVP_PREFIX_H */
