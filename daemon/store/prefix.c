/* SPDX-License-Identifier: MIT */
/*
 * prefix.c - the prefix index of one namespace (see prefix.h).
 *
 * Entries live in one growing array and are named by their index, so
 * links stay valid when it grows. Full-block entries hang off a hash
 * table by key; partial entries off a second table by parent key. Keys
 * come from clients, who could choose them to collide in any fixed
 * function of their bytes (before, their first 8 bytes picked the
 * bucket, and 60,000 keys with the same first bytes made every lookup
 * walk all of them): the bucket is the SipHash of the whole key under a
 * random key of each index, which no client knows.
 * Candidates for eviction sit on one doubly linked list per priority
 * class, least recently released at the head. Every operation is O(1)
 * except lookups of partial pages (a short list under one parent) and
 * eviction, which skips candidates that still have children.
 *
 * Past 800 lines on purpose: the hash tables, the LRU lists, the tree
 * links and the media of an entry are one data structure over one entry
 * array, whose invariants every operation keeps together.
 */
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "daemon/store/prefix.h"
#include "daemon/store/siphash.h"

struct entry {
	uint8_t key[KVP_KEY_BYTES];	/* full: its key; partial: parent key */
	uint64_t page;			/* in the pool (or restoring): its page */
	uint32_t slot;			/* spilling or spilled: its slot */
	uint32_t parent;		/* entry of the parent block, or NIL */
	uint32_t children;		/* entries whose parent is this one */
	uint32_t pool_children;		/* of them in the pool or on the way in */
	uint32_t host_children;		/* of them in the host tier */
	uint32_t hnext;			/* hash chain; free list when unused */
	uint32_t prev, next;		/* candidate list of its class */
	uint32_t copy;			/* in the pool: 1 + the NVMe slot that
					 * holds a copy of it, or 0 */
	uint32_t cprev, cnext;		/* the list of entries with a copy */
	uint32_t *tokens;		/* partial: its token ids, owned */
	struct block_rec *rec;		/* full, with a sink: what events name */
	uint64_t hits;			/* ACQUIREs that served it */
	uint64_t stamp_ms;		/* last published, acquired or released */
	uint32_t ntokens;		/* partial: how many; 0 for a full block */
	uint8_t prio;			/* class, < PREFIX_CLASSES */
	uint8_t cached;			/* on a candidate list */
	uint8_t used;
	uint8_t where;			/* enum prefix_where */
	uint8_t media;			/* full: PREFIX_M_* its bytes are in */
	uint8_t remote;			/* the remote tier has it (sent or fetched) */
	uint8_t orphan;			/* its parent left while it could not: found
					 * by no lookup, on no list; it leaves when
					 * its lease or read ends (prefix_orphan()) */
};

/* What the events of a full block carry besides its key: the key it was
 * published after, and its token ids when the publisher sent them. */
struct block_rec {
	uint8_t parent[KVP_KEY_BYTES];
	uint32_t nids;
	uint32_t ids[];
};

struct lru {
	uint32_t head, tail;
};

struct prefix {
	struct entry *e;		/* [cap]; e[0] is never used */
	uint32_t cap;
	uint32_t count;
	uint32_t pinned;
	uint32_t free_head;		/* unused entries, through hnext */
	uint32_t *full;			/* [nbuckets] heads, by key */
	uint32_t *part;			/* [nbuckets] heads, by parent key */
	uint32_t nbuckets;		/* a power of two */
	uint8_t seed[SIPHASH_KEY_BYTES];	/* the buckets' secret key */
	struct lru lru[PREFIX_CLASSES];
	struct lru tier;		/* spilled entries, oldest first */
	struct lru host;		/* entries in the host tier, oldest first */
	struct lru copies;		/* in the pool with an NVMe copy, oldest first */
	uint32_t spilled;		/* entries hosted, spilling or spilled */
	prefix_sink_fn sink;		/* media changes go here, or NULL */
	void *sink_arg;
};

void prefix_set_sink(struct prefix *x, prefix_sink_fn fn, void *arg)
{
	x->sink = fn;
	x->sink_arg = arg;
}

/* media_to() - a full block's bytes are in media m now: the sink hears
 * what it left (first) and what it came to. O(1). */
static void media_to(struct prefix *x, uint32_t e, unsigned m)
{
	struct entry *en = &x->e[e];
	unsigned old = en->media;

	if (en->ntokens || old == m)
		return;
	en->media = (uint8_t)m;
	if (x->sink)
		x->sink(x->sink_arg, x, e, old & ~m, m & ~old);
}

/* set_media() - media_to() for a move between local media: the remote
 * tier's copy is not moved by it. */
static void set_media(struct prefix *x, uint32_t e, unsigned m)
{
	media_to(x, e, m | (x->e[e].media & PREFIX_M_REMOTE));
}

void prefix_remote_stored(struct prefix *x, uint32_t e)
{
	x->e[e].remote = 1;
	media_to(x, e, x->e[e].media | PREFIX_M_REMOTE);
}

void prefix_remote_forget(struct prefix *x)
{
	uint32_t e;

	for (e = prefix_next(x, PREFIX_NIL); e != PREFIX_NIL; e = prefix_next(x, e)) {
		x->e[e].remote = 0;
		media_to(x, e, x->e[e].media & ~PREFIX_M_REMOTE);
	}
}

unsigned prefix_media(const struct prefix *x, uint32_t e)
{
	return x->e[e].media;
}

bool prefix_remote(const struct prefix *x, uint32_t e)
{
	return x->e[e].remote;
}

void prefix_set_remote(struct prefix *x, uint32_t e)
{
	x->e[e].remote = 1;
}

const uint8_t *prefix_parent_key(const struct prefix *x, uint32_t e)
{
	return x->e[e].rec ? x->e[e].rec->parent : NULL;
}

const uint32_t *prefix_block_ids(const struct prefix *x, uint32_t e, uint32_t *n)
{
	const struct block_rec *r = x->e[e].rec;

	*n = r ? r->nids : 0;
	return r && r->nids ? r->ids : NULL;
}

static void copy_unlink(struct prefix *x, uint32_t e);
static uint32_t insert(struct prefix *x, const uint8_t key[KVP_KEY_BYTES],
		       const uint8_t parent_key[KVP_KEY_BYTES], uint32_t parent,
		       uint64_t page, unsigned prio, const uint32_t *tokens,
		       uint32_t ntokens, uint32_t nids);

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t bucket(const struct prefix *x, const uint8_t key[KVP_KEY_BYTES])
{
	return (uint32_t)siphash24(x->seed, key, KVP_KEY_BYTES) & (x->nbuckets - 1);
}

struct prefix *prefix_new(void)
{
	struct prefix *x = calloc(1, sizeof(*x));
	uint32_t i;

	if (!x)
		return NULL;
	(void)siphash_key(x->seed);	/* weaker, not fixed, without a random source */
	x->nbuckets = 64;
	x->full = calloc(x->nbuckets, sizeof(*x->full));
	x->part = calloc(x->nbuckets, sizeof(*x->part));
	x->cap = 64;
	x->e = calloc(x->cap, sizeof(*x->e));
	if (!x->full || !x->part || !x->e) {
		prefix_free(x);
		return NULL;
	}
	for (i = x->cap - 1; i >= 1; i--) {
		x->e[i].hnext = x->free_head;
		x->free_head = i;
	}
	return x;
}

void prefix_free(struct prefix *x)
{
	uint32_t i;

	if (!x)
		return;
	for (i = 1; x->e && i < x->cap; i++) {
		free(x->e[i].tokens);
		free(x->e[i].rec);
	}
	free(x->e);
	free(x->full);
	free(x->part);
	free(x);
}

/* rehash() - double the buckets when entries outnumber them. O(count). */
static int rehash(struct prefix *x)
{
	uint32_t n = x->nbuckets * 2, i, b;
	uint32_t *full = calloc(n, sizeof(*full)), *part = calloc(n, sizeof(*part));

	if (!full || !part) {
		free(full);
		free(part);
		return -1;
	}
	free(x->full);
	free(x->part);
	x->full = full;
	x->part = part;
	x->nbuckets = n;
	for (i = 1; i < x->cap; i++) {
		struct entry *en = &x->e[i];
		uint32_t *heads = en->ntokens ? x->part : x->full;

		if (!en->used)
			continue;
		b = bucket(x, en->key);
		en->hnext = heads[b];
		heads[b] = i;
	}
	return 0;
}

/* new_entry() - an unused entry number, growing the array. */
static uint32_t new_entry(struct prefix *x)
{
	struct entry *e;
	uint32_t i, cap;

	if (!x->free_head) {
		if (x->cap >= UINT32_MAX / 2)
			return PREFIX_NIL;
		cap = x->cap * 2;
		e = realloc(x->e, cap * sizeof(*e));
		if (!e)
			return PREFIX_NIL;
		memset(e + x->cap, 0, (cap - x->cap) * sizeof(*e));
		for (i = cap - 1; i >= x->cap; i--) {
			e[i].hnext = x->free_head;
			x->free_head = i;
		}
		x->e = e;
		x->cap = cap;
	}
	i = x->free_head;
	x->free_head = x->e[i].hnext;
	return i;
}

uint32_t prefix_find(const struct prefix *x, const uint8_t key[KVP_KEY_BYTES])
{
	uint32_t i;

	for (i = x->full[bucket(x, key)]; i; i = x->e[i].hnext)
		if (memcmp(x->e[i].key, key, KVP_KEY_BYTES) == 0)
			return i;
	return PREFIX_NIL;
}

uint32_t prefix_find_partial(const struct prefix *x, const uint8_t parent[KVP_KEY_BYTES],
			     const uint32_t *tail, uint32_t ntail)
{
	uint32_t i, best = PREFIX_NIL, best_n = 0;

	for (i = x->part[bucket(x, parent)]; i; i = x->e[i].hnext) {
		const struct entry *en = &x->e[i];

		if (en->ntokens <= best_n || en->ntokens > ntail ||
		    memcmp(en->key, parent, KVP_KEY_BYTES) != 0 ||
		    memcmp(en->tokens, tail, en->ntokens * sizeof(*tail)) != 0)
			continue;
		best = i;
		best_n = en->ntokens;
	}
	return best;
}

uint32_t prefix_find_partial_exact(const struct prefix *x,
				   const uint8_t parent[KVP_KEY_BYTES],
				   const uint32_t *tokens, uint32_t ntokens)
{
	uint32_t i;

	for (i = x->part[bucket(x, parent)]; i; i = x->e[i].hnext) {
		const struct entry *en = &x->e[i];

		if (en->ntokens == ntokens && memcmp(en->key, parent, KVP_KEY_BYTES) == 0 &&
		    memcmp(en->tokens, tokens, ntokens * sizeof(*tokens)) == 0)
			return i;
	}
	return PREFIX_NIL;
}

/* new_rec() - a full block's record for its events, or NULL without
 * memory. */
static struct block_rec *new_rec(const uint8_t parent_key[KVP_KEY_BYTES],
				 const uint32_t *ids, uint32_t nids)
{
	struct block_rec *r = malloc(sizeof(*r) + (size_t)nids * sizeof(r->ids[0]));

	if (!r)
		return NULL;
	if (parent_key)
		memcpy(r->parent, parent_key, KVP_KEY_BYTES);
	else
		memset(r->parent, 0, KVP_KEY_BYTES);
	r->nids = ids ? nids : 0;
	if (r->nids)
		memcpy(r->ids, ids, (size_t)nids * sizeof(r->ids[0]));
	return r;
}

uint32_t prefix_insert(struct prefix *x, const uint8_t key[KVP_KEY_BYTES],
		       const uint8_t parent_key[KVP_KEY_BYTES], uint32_t parent,
		       uint64_t page, unsigned prio, const uint32_t *tokens,
		       uint32_t ntokens)
{
	if (ntokens)
		return insert(x, NULL, parent_key, parent, page, prio, tokens, ntokens, 0);
	return insert(x, key, parent_key, parent, page, prio, NULL, 0, 0);
}

uint32_t prefix_insert_block(struct prefix *x, const uint8_t key[KVP_KEY_BYTES],
			     const uint8_t parent_key[KVP_KEY_BYTES], uint32_t parent,
			     uint64_t page, unsigned prio, const uint32_t *ids,
			     uint32_t nids)
{
	return insert(x, key, parent_key, parent, page, prio, ids, 0, ids ? nids : 0);
}

/* insert() - prefix_insert() of a partial page (ntokens > 0) or of a full
 * block with nids token ids (ids kept only with a sink). */
static uint32_t insert(struct prefix *x, const uint8_t key[KVP_KEY_BYTES],
		       const uint8_t parent_key[KVP_KEY_BYTES], uint32_t parent,
		       uint64_t page, unsigned prio, const uint32_t *tokens,
		       uint32_t ntokens, uint32_t nids)
{
	struct block_rec *rec = NULL;
	uint32_t *copy = NULL, i, b;
	struct entry *en;

	if (x->count + 1 > x->nbuckets && rehash(x) < 0)
		return PREFIX_NIL;
	if (ntokens) {
		copy = malloc(ntokens * sizeof(*copy));
		if (!copy)
			return PREFIX_NIL;
		memcpy(copy, tokens, ntokens * sizeof(*copy));
	} else if (x->sink) {
		rec = new_rec(parent_key, tokens, nids);
		if (!rec)
			return PREFIX_NIL;
	}
	i = new_entry(x);
	if (i == PREFIX_NIL) {
		free(copy);
		free(rec);
		return PREFIX_NIL;
	}
	en = &x->e[i];
	memset(en, 0, sizeof(*en));
	memcpy(en->key, ntokens ? parent_key : key, KVP_KEY_BYTES);
	en->page = page;
	en->parent = parent;
	en->tokens = copy;
	en->rec = rec;
	en->ntokens = ntokens;
	en->prio = (uint8_t)(prio < PREFIX_CLASSES ? prio : PREFIX_CLASSES - 1);
	en->used = 1;
	en->stamp_ms = now_ms();
	b = bucket(x, en->key);
	if (ntokens) {
		en->hnext = x->part[b];
		x->part[b] = i;
	} else {
		en->hnext = x->full[b];
		x->full[b] = i;
	}
	if (parent) {
		x->e[parent].children++;
		x->e[parent].pool_children++;
	}
	x->count++;
	if (en->prio == PREFIX_PINNED)
		x->pinned++;
	if (page)
		set_media(x, i, PREFIX_M_POOL);
	return i;
}

uint64_t prefix_page(const struct prefix *x, uint32_t e)
{
	return x->e[e].page;
}

uint32_t prefix_tokens(const struct prefix *x, uint32_t e)
{
	return x->e[e].ntokens;
}

unsigned prefix_prio(const struct prefix *x, uint32_t e)
{
	return x->e[e].prio;
}

/* list_add() / list_del() - e at the tail of l, or out of the list it is
 * on (the pool candidates of its class, or the tier list). O(1). */
static void list_add(struct prefix *x, struct lru *l, uint32_t e)
{
	struct entry *en = &x->e[e];

	en->cached = 1;
	en->next = PREFIX_NIL;
	en->prev = l->tail;
	if (l->tail)
		x->e[l->tail].next = e;
	else
		l->head = e;
	l->tail = e;
}

static struct lru *list_of(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];

	if (en->where == PREFIX_HOST)
		return &x->host;
	return en->where == PREFIX_SPILLED ? &x->tier : &x->lru[en->prio];
}

static void list_del(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];
	struct lru *l = list_of(x, e);

	if (!en->cached)
		return;
	if (en->prev)
		x->e[en->prev].next = en->next;
	else
		l->head = en->next;
	if (en->next)
		x->e[en->next].prev = en->prev;
	else
		l->tail = en->prev;
	en->cached = 0;
	en->prev = en->next = PREFIX_NIL;
}

void prefix_cached(struct prefix *x, uint32_t e)
{
	if (!x->e[e].cached && !x->e[e].orphan && x->e[e].where == PREFIX_IN_POOL) {
		list_add(x, &x->lru[x->e[e].prio], e);
		x->e[e].stamp_ms = now_ms();
	}
}

void prefix_leased(struct prefix *x, uint32_t e)
{
	if (x->e[e].where == PREFIX_IN_POOL)
		list_del(x, e);
}

/* unhash() - take e off its hash chain. O(chain). */
static void unhash(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];
	uint32_t *link = &(en->ntokens ? x->part : x->full)[bucket(x, en->key)];

	while (*link && *link != e)
		link = &x->e[*link].hnext;
	if (*link)
		*link = en->hnext;
}

/* orphan() - e lost its parent and stays a while: unfindable, off the
 * candidate lists, gone from every medium for the events. */
static void orphan(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];

	if (en->orphan)
		return;
	en->orphan = 1;
	unhash(x, e);
	list_del(x, e);
	media_to(x, e, 0);
}

bool prefix_orphan(const struct prefix *x, uint32_t e)
{
	return x->e[e].orphan;
}

void prefix_remove(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];
	uint32_t i;

	prefix_copy_clear(x, e);
	media_to(x, e, 0);	/* out of the index: gone from every medium */
	/* Rare: children the caller could not drop first (leased, or being
	 * read back) are orphans now, O(entries): no lookup finds them (a
	 * block behind a lost parent is never served) and they go when they
	 * can (tier.c). */
	for (i = 1; en->children && i < x->cap; i++) {
		if (x->e[i].used && x->e[i].parent == e) {
			x->e[i].parent = PREFIX_NIL;
			en->children--;
			orphan(x, i);
		}
	}
	list_del(x, e);
	unhash(x, e);
	if (en->where == PREFIX_SPILLING || en->where == PREFIX_SPILLED ||
	    en->where == PREFIX_HOST)
		x->spilled--;
	if (en->parent) {
		x->e[en->parent].children--;
		if (en->where == PREFIX_IN_POOL || en->where == PREFIX_RESTORING)
			x->e[en->parent].pool_children--;
		if (en->where == PREFIX_HOST)
			x->e[en->parent].host_children--;
	}
	if (en->prio == PREFIX_PINNED)
		x->pinned--;
	free(en->tokens);
	free(en->rec);
	memset(en, 0, sizeof(*en));
	en->hnext = x->free_head;
	x->free_head = e;
	x->count--;
}

uint32_t prefix_victim(struct prefix *x)
{
	unsigned c;
	uint32_t e;

	for (c = 0; c < PREFIX_CLASSES; c++) {
		for (e = x->lru[c].head; e; e = x->e[e].next) {
			if (x->e[e].pool_children)
				continue;	/* a parent waits for its leaves */
			list_del(x, e);
			return e;
		}
	}
	return PREFIX_NIL;
}

uint32_t prefix_evict(struct prefix *x, uint64_t *page)
{
	uint32_t e = prefix_victim(x);

	if (e != PREFIX_NIL) {
		*page = x->e[e].page;
		prefix_remove(x, e);
	}
	return e;
}

/* leave_upper() - e leaves the pool or the host tier: its parent counts
 * one child less there. */
static void leave_upper(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];

	if (!en->parent)
		return;
	if (en->where == PREFIX_HOST)
		x->e[en->parent].host_children--;
	else if (en->where == PREFIX_IN_POOL || en->where == PREFIX_RESTORING)
		x->e[en->parent].pool_children--;
}

void prefix_spilling(struct prefix *x, uint32_t e, uint32_t slot)
{
	struct entry *en = &x->e[e];

	copy_unlink(x, e);	/* its slot is the copy, or another */
	list_del(x, e);
	leave_upper(x, e);
	if (en->where != PREFIX_HOST)
		x->spilled++;
	en->where = PREFIX_SPILLING;
	en->page = 0;
	en->slot = slot;
	set_media(x, e, PREFIX_M_NVME);
}

void prefix_hosted(struct prefix *x, uint32_t e, uint32_t slot)
{
	struct entry *en = &x->e[e];

	list_del(x, e);
	leave_upper(x, e);
	if (en->parent)
		x->e[en->parent].host_children++;
	en->where = PREFIX_HOST;
	en->page = 0;
	en->slot = slot;
	x->spilled++;
	list_add(x, &x->host, e);
	set_media(x, e, PREFIX_M_HOST);
}

uint32_t prefix_children(const struct prefix *x, uint32_t e)
{
	return x->e[e].children;
}

uint32_t prefix_host_children(const struct prefix *x, uint32_t e)
{
	return x->e[e].host_children;
}

uint32_t prefix_host_victim(struct prefix *x)
{
	uint32_t e;

	for (e = x->host.head; e; e = x->e[e].next)
		if (!x->e[e].pool_children && !x->e[e].host_children)
			return e;
	return PREFIX_NIL;
}

void prefix_hold(struct prefix *x, uint32_t e)
{
	if (x->e[e].where == PREFIX_HOST || x->e[e].where == PREFIX_SPILLED)
		list_del(x, e);
}

void prefix_unhold(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];

	if (!en->cached && (en->where == PREFIX_HOST || en->where == PREFIX_SPILLED))
		list_add(x, list_of(x, e), e);
}

void prefix_spilled(struct prefix *x, uint32_t e)
{
	x->e[e].where = PREFIX_SPILLED;
	list_add(x, &x->tier, e);
}

void prefix_restoring(struct prefix *x, uint32_t e, uint64_t page)
{
	struct entry *en = &x->e[e];

	list_del(x, e);
	if (en->parent) {
		if (en->where == PREFIX_HOST)
			x->e[en->parent].host_children--;
		x->e[en->parent].pool_children++;
	}
	en->where = PREFIX_RESTORING;
	en->page = page;
	x->spilled--;
}

void prefix_restored(struct prefix *x, uint32_t e)
{
	x->e[e].where = PREFIX_IN_POOL;
	/* read from the host tier: its slot goes; from the NVMe tier: the
	 * caller keeps the slot as the block's copy */
	set_media(x, e, PREFIX_M_POOL | (x->e[e].media & PREFIX_M_NVME));
}

void prefix_copy_set(struct prefix *x, uint32_t e, uint32_t slot)
{
	struct entry *en = &x->e[e];

	copy_unlink(x, e);
	en->copy = slot + 1;
	en->cnext = PREFIX_NIL;
	en->cprev = x->copies.tail;
	if (x->copies.tail)
		x->e[x->copies.tail].cnext = e;
	else
		x->copies.head = e;
	x->copies.tail = e;
	set_media(x, e, en->media | PREFIX_M_NVME);
}

void prefix_copy_clear(struct prefix *x, uint32_t e)
{
	if (!x->e[e].copy)
		return;
	copy_unlink(x, e);
	set_media(x, e, x->e[e].media & ~PREFIX_M_NVME);
}

/* copy_unlink() - forget e's copy without telling the sink (the caller
 * does, or the slot goes on holding e). */
static void copy_unlink(struct prefix *x, uint32_t e)
{
	struct entry *en = &x->e[e];

	if (!en->copy)
		return;
	if (en->cprev)
		x->e[en->cprev].cnext = en->cnext;
	else
		x->copies.head = en->cnext;
	if (en->cnext)
		x->e[en->cnext].cprev = en->cprev;
	else
		x->copies.tail = en->cprev;
	en->copy = 0;
	en->cprev = en->cnext = PREFIX_NIL;
}

bool prefix_copy(const struct prefix *x, uint32_t e, uint32_t *slot)
{
	if (!x->e[e].copy)
		return false;
	*slot = x->e[e].copy - 1;
	return true;
}

uint32_t prefix_copy_oldest(const struct prefix *x)
{
	return x->copies.head;
}

uint32_t prefix_tier_next_leaf(const struct prefix *x, uint32_t e)
{
	for (e = e ? x->e[e].next : x->tier.head; e; e = x->e[e].next)
		if (!x->e[e].children)
			return e;
	return PREFIX_NIL;
}

uint32_t prefix_tier_victim(struct prefix *x)
{
	return prefix_tier_next_leaf(x, PREFIX_NIL);
}

/*
 * prefix_subtree() - see prefix.h. Each entry's distance below e, or
 * that it is not below e, is found once: walking up from an entry stops
 * at e, at the root, or at an entry already known, and the walk is then
 * written back along the same path. A damaged cycle of parents is cut
 * at the entry count.
 */
#define SUB_UNKNOWN 0u
#define SUB_OUT UINT32_MAX
uint32_t prefix_subtree(const struct prefix *x, uint32_t e, uint32_t **out)
{
	uint32_t *dist = calloc(x->cap, sizeof(*dist)), *list, *bucket;
	uint32_t i, a, d, steps, n = 0, most = 0;

	*out = NULL;
	if (!dist)
		return 0;
	dist[e] = 1;	/* distance + 1, so that 0 stays "unknown" */
	for (i = 1; i < x->cap; i++) {
		if (!x->e[i].used || dist[i] != SUB_UNKNOWN)
			continue;
		for (a = i, steps = 0; a && dist[a] == SUB_UNKNOWN && steps <= x->count;
		     a = x->e[a].parent)
			steps++;
		d = !a || steps > x->count || dist[a] == SUB_OUT ? SUB_OUT : dist[a] + steps;
		for (a = i; steps--; a = x->e[a].parent)
			dist[a] = d == SUB_OUT ? SUB_OUT : d--;
	}
	for (i = 1; i < x->cap; i++) {
		if (x->e[i].used && dist[i] != SUB_UNKNOWN && dist[i] != SUB_OUT) {
			n++;
			most = dist[i] > most ? dist[i] : most;
		}
	}
	/* deepest first: a counting sort by distance */
	list = malloc(n * sizeof(*list));
	bucket = calloc((size_t)most + 2, sizeof(*bucket));
	if (!list || !bucket) {
		free(list);
		free(bucket);
		free(dist);
		return 0;
	}
	for (i = 1; i < x->cap; i++)
		if (x->e[i].used && dist[i] != SUB_UNKNOWN && dist[i] != SUB_OUT)
			bucket[most - dist[i] + 1]++;
	for (d = 1; d <= most + 1; d++)
		bucket[d] += bucket[d - 1];
	for (i = 1; i < x->cap; i++)
		if (x->e[i].used && dist[i] != SUB_UNKNOWN && dist[i] != SUB_OUT)
			list[bucket[most - dist[i]]++] = i;
	free(bucket);
	free(dist);
	*out = list;
	return n;
}

bool prefix_used(const struct prefix *x, uint32_t e)
{
	return e && e < x->cap && x->e[e].used;
}

unsigned prefix_where(const struct prefix *x, uint32_t e)
{
	return x->e[e].where;
}

uint32_t prefix_slot(const struct prefix *x, uint32_t e)
{
	return x->e[e].slot;
}

const uint8_t *prefix_key(const struct prefix *x, uint32_t e)
{
	return x->e[e].key;
}

const uint32_t *prefix_token_ids(const struct prefix *x, uint32_t e)
{
	return x->e[e].tokens;
}

uint32_t prefix_parent(const struct prefix *x, uint32_t e)
{
	return x->e[e].parent;
}

void prefix_set_parent(struct prefix *x, uint32_t e, uint32_t parent)
{
	struct entry *en = &x->e[e];

	if (en->parent || !parent || parent == e)
		return;
	en->parent = parent;
	x->e[parent].children++;
	if (en->where == PREFIX_IN_POOL || en->where == PREFIX_RESTORING)
		x->e[parent].pool_children++;
	if (en->where == PREFIX_HOST)
		x->e[parent].host_children++;
}

uint32_t prefix_evictable(const struct prefix *x)
{
	uint8_t *kept = calloc(x->cap, 1);
	uint32_t e, a, n = 0;

	for (e = 1; e < x->cap; e++) {
		const struct entry *en = &x->e[e];
		bool in_pool = en->used && (en->where == PREFIX_IN_POOL ||
					    en->where == PREFIX_RESTORING);

		if (kept && in_pool && (!en->cached || en->where == PREFIX_RESTORING))
			for (a = e; a && !kept[a]; a = x->e[a].parent)
				kept[a] = 1;	/* it and its ancestors stay */
	}
	for (e = 1; e < x->cap; e++)
		n += x->e[e].used && x->e[e].where == PREFIX_IN_POOL && x->e[e].cached &&
		     (!kept || !kept[e]);
	free(kept);
	return n;
}

uint32_t prefix_spilled_count(const struct prefix *x)
{
	return x->spilled;
}

uint32_t prefix_count(const struct prefix *x)
{
	return x->count;
}

uint32_t prefix_pinned(const struct prefix *x)
{
	return x->pinned;
}

void prefix_touch(struct prefix *x, uint32_t e, bool hit)
{
	x->e[e].stamp_ms = now_ms();
	x->e[e].hits += hit;
}

uint64_t prefix_now_ms(void)
{
	return now_ms();
}

uint64_t prefix_age_ms(const struct prefix *x, uint32_t e, uint64_t now)
{
	return now > x->e[e].stamp_ms ? now - x->e[e].stamp_ms : 0;
}

uint64_t prefix_hits(const struct prefix *x, uint32_t e)
{
	return x->e[e].hits;
}


uint32_t prefix_depth(const struct prefix *x, uint32_t e)
{
	uint32_t d = 0;

	for (; e && d < x->count + 1; e = x->e[e].parent)
		d++;
	return d;
}

uint32_t prefix_longest_chain(const struct prefix *x)
{
	uint32_t b, e, n, most = 0;

	for (b = 0; b < x->nbuckets; b++) {
		for (n = 0, e = x->full[b]; e; e = x->e[e].hnext)
			n++;
		most = n > most ? n : most;
		for (n = 0, e = x->part[b]; e; e = x->e[e].hnext)
			n++;
		most = n > most ? n : most;
	}
	return most;
}

uint32_t prefix_entries(const struct prefix *x)
{
	return x->cap;
}

/*
 * prefix_depths() - each entry's depth, computed once: from an entry up
 * to the first one already known (or the root), then back down the same
 * path filling in. Every entry is walked over a bounded number of times
 * (a damaged cycle of parents is cut at the entry count).
 */
void prefix_depths(const struct prefix *x, uint32_t *depth)
{
	uint32_t e, a, d, steps;

	memset(depth, 0, x->cap * sizeof(*depth));
	for (e = 1; e < x->cap; e++) {
		if (!x->e[e].used || depth[e])
			continue;
		/* up: how far to a known depth or the root */
		for (a = e, steps = 0; a && !depth[a] && steps <= x->count; a = x->e[a].parent)
			steps++;
		d = (a && steps <= x->count ? depth[a] : 0) + steps;
		/* down the same path: the depths of e and its ancestors */
		for (a = e; steps--; a = x->e[a].parent)
			depth[a] = d--;
	}
}

uint32_t prefix_next(const struct prefix *x, uint32_t e)
{
	for (e++; e < x->cap; e++)
		if (x->e[e].used)
			return e;
	return PREFIX_NIL;
}
