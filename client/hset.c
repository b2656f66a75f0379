/* SPDX-License-Identifier: MIT */
/*
 * hset.c - the counting set of page handles (see hset.h).
 *
 * The table doubles at 3/4 load; deletion shifts later members of the
 * probe run back, so there are no tombstones and lookups stay short.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/hset.h"

#define HSET_MIN_CAP 16

/* Handles are structured (generation, slab, index): mix all bits. */
static size_t slot_of(uint64_t key, size_t cap)
{
	key ^= key >> 30;
	key *= 0xbf58476d1ce4e5b9ull;
	key ^= key >> 27;
	key *= 0x94d049bb133111ebull;
	key ^= key >> 31;
	return (size_t)key & (cap - 1);
}

void hset_init(struct hset *s)
{
	memset(s, 0, sizeof(*s));
}

void hset_fini(struct hset *s)
{
	free(s->keys);
	free(s->counts);
	hset_init(s);
}

static size_t find(const struct hset *s, uint64_t key)
{
	size_t i = slot_of(key, s->cap);

	while (s->keys[i] && s->keys[i] != key)
		i = (i + 1) & (s->cap - 1);
	return i;
}

static int grow(struct hset *s)
{
	size_t cap = s->cap ? s->cap * 2 : HSET_MIN_CAP, i, j;
	uint64_t *keys = calloc(cap, sizeof(*keys));
	uint32_t *counts = calloc(cap, sizeof(*counts));

	if (!keys || !counts) {
		free(keys);
		free(counts);
		return -ENOMEM;
	}
	for (i = 0; i < s->cap; i++) {
		if (!s->keys[i])
			continue;
		j = slot_of(s->keys[i], cap);
		while (keys[j])
			j = (j + 1) & (cap - 1);
		keys[j] = s->keys[i];
		counts[j] = s->counts[i];
	}
	free(s->keys);
	free(s->counts);
	s->keys = keys;
	s->counts = counts;
	s->cap = cap;
	return 0;
}

int hset_add(struct hset *s, uint64_t key, uint32_t n)
{
	size_t i;

	if ((s->len + 1) * 4 > s->cap * 3 && grow(s) < 0)
		return -ENOMEM;
	i = find(s, key);
	if (!s->keys[i]) {
		s->keys[i] = key;
		s->counts[i] = 0;
		s->len++;
	}
	s->counts[i] += n;
	s->total += n;
	return 0;
}

uint32_t hset_count(const struct hset *s, uint64_t key)
{
	size_t i;

	if (!s->cap || !key)
		return 0;
	i = find(s, key);
	return s->keys[i] ? s->counts[i] : 0;
}

int hset_sub(struct hset *s, uint64_t key, uint32_t n)
{
	size_t i, j, home;

	if (!s->cap || !key)
		return -ENOENT;
	i = find(s, key);
	if (!s->keys[i] || s->counts[i] < n)
		return -ENOENT;
	s->counts[i] -= n;
	s->total -= n;
	if (s->counts[i])
		return 0;

	/* Remove, then move back members whose probe run crossed slot i. */
	s->keys[i] = 0;
	s->len--;
	for (j = (i + 1) & (s->cap - 1); s->keys[j]; j = (j + 1) & (s->cap - 1)) {
		home = slot_of(s->keys[j], s->cap);
		/* j may move to i unless its home lies cyclically in (i, j] */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			s->keys[i] = s->keys[j];
			s->counts[i] = s->counts[j];
			s->keys[j] = 0;
			i = j;
		}
	}
	return 0;
}
