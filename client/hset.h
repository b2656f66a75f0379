/* SPDX-License-Identifier: MIT */
/*
 * hset.h - a counting set of page handles: handle -> count, O(1) on
 * average for add, get and remove. The daemon keeps one per connection
 * (its leases), the library one per client (the pages it holds).
 *
 * Open addressing with linear probing and backward-shift deletion; key 0
 * marks an empty slot (0 is never a page handle). Not thread-safe.
 */
#ifndef KVP_HSET_H
#define KVP_HSET_H

#include <stddef.h>
#include <stdint.h>

struct hset {
	uint64_t *keys;		/* [cap]; 0 = empty */
	uint32_t *counts;	/* [cap] */
	size_t cap;		/* a power of two, or 0 */
	size_t len;		/* distinct keys */
	uint64_t total;		/* sum of all counts */
};

/* hset_init() - an empty set; allocates nothing until the first add. */
void hset_init(struct hset *s);

/* hset_fini() - free the set's memory; s is empty afterwards. */
void hset_fini(struct hset *s);

/* hset_add() - count(key) += n (n >= 1, key != 0). Returns 0 or -ENOMEM
 * (the set is unchanged then). */
int hset_add(struct hset *s, uint64_t key, uint32_t n);

/* hset_count() - count(key), 0 when absent. */
uint32_t hset_count(const struct hset *s, uint64_t key);

/* hset_sub() - count(key) -= n, removing the key at 0. Returns 0, or
 * -ENOENT when count(key) < n (the set is unchanged then). */
int hset_sub(struct hset *s, uint64_t key, uint32_t n);

/* Iterate: for (i = 0; i < s->cap; i++) if (s->keys[i]) ... */

#endif /* KVP_HSET_H */
