/* SPDX-License-Identifier: MIT */
/*
 * check_prefix.c - unit tests of the prefix index (daemon/store/prefix.c):
 * lookups, partial pages, eviction order by priority, recency and
 * leaves first; and of the pool's page states for published pages.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "daemon/store/backend.h"
#include "daemon/store/pool.h"
#include "daemon/store/prefix.h"
#include "daemon/store/siphash.h"
#include "suites.h"

/* key() - a distinct 32-byte key for each number. */
static const uint8_t *key(uint32_t i)
{
	static uint8_t k[8][KVP_KEY_BYTES];
	static unsigned next;
	uint8_t *b = k[next++ % 8];
	uint64_t x = i * 0x9e3779b97f4a7c15ull + 1;

	for (unsigned j = 0; j < KVP_KEY_BYTES; j += 8) {
		x ^= x >> 31;
		x *= 0xbf58476d1ce4e5b9ull;
		memcpy(b + j, &x, 8);
	}
	return b;
}

/* chain() - index a chain of n full blocks 1..n, block i at page 100 + i,
 * and return the entry of the last one. */
static uint32_t chain(struct prefix *x, uint32_t first, uint32_t n, unsigned prio)
{
	uint32_t i, parent = PREFIX_NIL;

	for (i = first; i < first + n; i++) {
		parent = prefix_insert(x, key(i), NULL, parent, 100 + i, prio, NULL, 0);
		ck_assert_uint_ne(parent, PREFIX_NIL);
	}
	return parent;
}

START_TEST(test_prefix_finds_what_was_inserted)
{
	struct prefix *x = prefix_new();
	uint32_t e;

	ck_assert_ptr_nonnull(x);
	ck_assert_uint_eq(prefix_find(x, key(1)), PREFIX_NIL);
	e = prefix_insert(x, key(1), NULL, PREFIX_NIL, 77, 1, NULL, 0);
	ck_assert_uint_eq(prefix_find(x, key(1)), e);
	ck_assert_uint_eq(prefix_page(x, e), 77);
	ck_assert_uint_eq(prefix_tokens(x, e), 0);
	ck_assert_uint_eq(prefix_find(x, key(2)), PREFIX_NIL);
	ck_assert_uint_eq(prefix_count(x), 1);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_grows_past_many_entries)
{
	struct prefix *x = prefix_new();
	uint32_t i;

	for (i = 0; i < 20000; i++)
		ck_assert_uint_ne(prefix_insert(x, key(i), NULL, PREFIX_NIL, i + 1, 1,
						NULL, 0), PREFIX_NIL);
	for (i = 0; i < 20000; i++)
		ck_assert_uint_eq(prefix_page(x, prefix_find(x, key(i))), i + 1);
	ck_assert_uint_eq(prefix_count(x), 20000);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_partial_matches_the_longest_token_prefix)
{
	const uint32_t a[] = { 5, 6, 7 }, b[] = { 5, 6, 7, 8, 9 }, other[] = { 5, 9 };
	const uint32_t tail[] = { 5, 6, 7, 8, 9, 10 }, short_tail[] = { 5, 6, 7, 8 };
	struct prefix *x = prefix_new();
	uint8_t parent[KVP_KEY_BYTES];
	uint32_t ea, eb;

	memcpy(parent, key(1), sizeof(parent));
	ea = prefix_insert(x, NULL, parent, PREFIX_NIL, 10, 1, a, 3);
	eb = prefix_insert(x, NULL, parent, PREFIX_NIL, 11, 1, b, 5);
	prefix_insert(x, NULL, parent, PREFIX_NIL, 12, 1, other, 2);
	prefix_insert(x, NULL, key(2), PREFIX_NIL, 13, 1, b, 5);	/* another parent */

	ck_assert_uint_eq(prefix_find_partial(x, parent, tail, 6), eb);
	ck_assert_uint_eq(prefix_tokens(x, eb), 5);
	ck_assert_uint_eq(prefix_find_partial(x, parent, short_tail, 4), ea);
	ck_assert_uint_eq(prefix_find_partial(x, parent, tail, 2), PREFIX_NIL);
	ck_assert_uint_eq(prefix_find_partial(x, key(3), tail, 6), PREFIX_NIL);
	ck_assert_uint_eq(prefix_find_partial_exact(x, parent, a, 3), ea);
	ck_assert_uint_eq(prefix_find_partial_exact(x, parent, a, 2), PREFIX_NIL);
	/* partial pages are not full-block keys */
	ck_assert_uint_eq(prefix_find(x, parent), PREFIX_NIL);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_evicts_least_recently_released_first)
{
	struct prefix *x = prefix_new();
	uint32_t e[3], i;
	uint64_t page;

	for (i = 0; i < 3; i++)
		e[i] = prefix_insert(x, key(i), NULL, PREFIX_NIL, 50 + i, 1, NULL, 0);
	ck_assert_uint_eq(prefix_evict(x, &page), PREFIX_NIL);	/* all leased */
	prefix_cached(x, e[2]);
	prefix_cached(x, e[0]);
	prefix_cached(x, e[1]);
	prefix_leased(x, e[0]);		/* acquired again: not a candidate */
	prefix_cached(x, e[0]);		/* released again: the most recent */
	ck_assert_uint_eq(prefix_evict(x, &page), e[2]);
	ck_assert_uint_eq(page, 52);
	ck_assert_uint_eq(prefix_evict(x, &page), e[1]);
	ck_assert_uint_eq(prefix_evict(x, &page), e[0]);
	ck_assert_uint_eq(prefix_evict(x, &page), PREFIX_NIL);
	ck_assert_uint_eq(prefix_find(x, key(2)), PREFIX_NIL);
	ck_assert_uint_eq(prefix_count(x), 0);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_evicts_low_priority_before_recency)
{
	struct prefix *x = prefix_new();
	uint32_t pinned, high, low;
	uint64_t page;

	pinned = prefix_insert(x, key(1), NULL, PREFIX_NIL, 1, PREFIX_PINNED, NULL, 0);
	low = prefix_insert(x, key(2), NULL, PREFIX_NIL, 2, 0, NULL, 0);
	high = prefix_insert(x, key(3), NULL, PREFIX_NIL, 3, 2, NULL, 0);
	ck_assert_uint_eq(prefix_pinned(x), 1);
	prefix_cached(x, pinned);	/* released first, oldest */
	prefix_cached(x, high);
	prefix_cached(x, low);		/* released last, newest */
	ck_assert_uint_eq(prefix_evict(x, &page), low);
	ck_assert_uint_eq(prefix_evict(x, &page), high);
	ck_assert_uint_eq(prefix_evict(x, &page), pinned);
	ck_assert_uint_eq(prefix_pinned(x), 0);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_evicts_leaves_before_their_parents)
{
	struct prefix *x = prefix_new();
	const uint32_t t[] = { 1, 2 };
	uint32_t i, last, e[4], part;
	uint64_t page;

	/* chain 0 -> 1 -> 2 -> 3 and a partial page after 3 */
	last = chain(x, 0, 4, 1);
	for (i = 0; i < 4; i++)
		e[i] = prefix_find(x, key(i));
	ck_assert_uint_eq(e[3], last);
	part = prefix_insert(x, NULL, key(3), last, 99, 1, t, 2);
	/* released in chain order: the root block is the oldest candidate */
	for (i = 0; i < 4; i++)
		prefix_cached(x, e[i]);
	prefix_cached(x, part);
	ck_assert_uint_eq(prefix_evict(x, &page), part);
	ck_assert_uint_eq(prefix_evict(x, &page), e[3]);
	ck_assert_uint_eq(prefix_evict(x, &page), e[2]);
	ck_assert_uint_eq(prefix_evict(x, &page), e[1]);
	ck_assert_uint_eq(prefix_evict(x, &page), e[0]);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_leased_child_keeps_its_parent)
{
	struct prefix *x = prefix_new();
	uint32_t parent, child;
	uint64_t page;

	parent = prefix_insert(x, key(1), NULL, PREFIX_NIL, 1, 1, NULL, 0);
	child = prefix_insert(x, key(2), NULL, parent, 2, 1, NULL, 0);
	prefix_cached(x, parent);	/* the child is still leased */
	ck_assert_uint_eq(prefix_evict(x, &page), PREFIX_NIL);
	prefix_cached(x, child);
	ck_assert_uint_eq(prefix_evict(x, &page), child);
	ck_assert_uint_eq(prefix_evict(x, &page), parent);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_evictable_counts_what_eviction_could_take)
{
	struct prefix *x = prefix_new();
	uint32_t i, e[5], other;

	chain(x, 0, 5, 1);		/* 0 -> 1 -> 2 -> 3 -> 4 */
	for (i = 0; i < 5; i++)
		e[i] = prefix_find(x, key(i));
	other = prefix_insert(x, key(10), NULL, PREFIX_NIL, 10, 1, NULL, 0);
	ck_assert_uint_eq(prefix_evictable(x), 0);	/* all leased */
	for (i = 0; i < 5; i++)
		prefix_cached(x, e[i]);
	prefix_cached(x, other);
	ck_assert_uint_eq(prefix_evictable(x), 6);
	/* a leased block in the middle keeps itself and its parents in */
	prefix_leased(x, e[2]);
	ck_assert_uint_eq(prefix_evictable(x), 3);	/* 3, 4 and the other */
	prefix_restoring(x, other, 77);			/* on its way in: stays */
	ck_assert_uint_eq(prefix_evictable(x), 2);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_host_tier_moves_leaves_first_and_skips_held_entries)
{
	struct prefix *x = prefix_new();
	uint32_t i, e[3], v;

	/* chain 0 -> 1 -> 2, evicted from the pool leaf first into host
	 * slots 10, 11, 12 */
	chain(x, 0, 3, 1);
	for (i = 0; i < 3; i++) {
		e[i] = prefix_find(x, key(i));
		prefix_cached(x, e[i]);
	}
	for (i = 0; i < 3; i++) {
		v = prefix_victim(x);
		ck_assert_uint_eq(v, e[2 - i]);
		prefix_hosted(x, v, 10 + i);
		ck_assert_uint_eq(prefix_where(x, v), PREFIX_HOST);
	}
	ck_assert_uint_eq(prefix_spilled_count(x), 3);
	/* the host tier's victim is its leaf, not its oldest parent */
	ck_assert_uint_eq(prefix_host_victim(x), e[2]);
	/* held for a restore, the leaf is no victim, and its parents still
	 * have a child in the host tier */
	prefix_hold(x, e[2]);
	ck_assert_uint_eq(prefix_host_victim(x), PREFIX_NIL);
	prefix_unhold(x, e[2]);
	/* the leaf moves down to NVMe slot 7: now its parent may follow */
	prefix_spilling(x, e[2], 7);
	prefix_spilled(x, e[2]);
	ck_assert_uint_eq(prefix_host_victim(x), e[1]);
	ck_assert_uint_eq(prefix_spilled_count(x), 3);
	ck_assert_uint_eq(prefix_tier_victim(x), e[2]);
	/* the root comes back to the pool: e[1] still has a child below */
	prefix_restoring(x, e[0], 500);
	prefix_restored(x, e[0]);
	ck_assert_uint_eq(prefix_spilled_count(x), 2);
	ck_assert_uint_eq(prefix_host_victim(x), e[1]);
	prefix_remove(x, e[1]);
	ck_assert_uint_eq(prefix_host_victim(x), PREFIX_NIL);
	ck_assert_uint_eq(prefix_spilled_count(x), 1);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_entries_are_reused_after_removal)
{
	struct prefix *x = prefix_new();
	uint32_t e;
	uint64_t page;
	int round;

	for (round = 0; round < 1000; round++) {
		e = prefix_insert(x, key((uint32_t)round), NULL, PREFIX_NIL, 5, 1, NULL, 0);
		ck_assert_uint_ne(e, PREFIX_NIL);
		prefix_cached(x, e);
		ck_assert_uint_eq(prefix_evict(x, &page), e);
	}
	ck_assert_uint_eq(prefix_count(x), 0);
	prefix_free(x);
}
END_TEST

/* --- the pool's states of published pages ------------------------------- */

START_TEST(test_prefix_depths_of_all_entries_at_once_match_each_one)
{
	struct prefix *x = prefix_new();
	uint32_t *depth, e, mid;

	ck_assert_ptr_nonnull(x);
	chain(x, 1, 3000, 1);			/* one deep chain */
	chain(x, 5000, 5, 1);			/* a short one */
	mid = prefix_find(x, key(1500));	/* cut the deep one in two */
	prefix_remove(x, mid);
	prefix_insert(x, key(9000), NULL, prefix_find(x, key(2000)), 1, 1, NULL, 0);
	depth = calloc(prefix_entries(x), sizeof(*depth));
	ck_assert_ptr_nonnull(depth);
	prefix_depths(x, depth);
	for (e = prefix_next(x, PREFIX_NIL); e; e = prefix_next(x, e))
		ck_assert_uint_eq(depth[e], prefix_depth(x, e));
	ck_assert_uint_eq(depth[prefix_find(x, key(3000))], 1500);
	ck_assert_uint_eq(depth[prefix_find(x, key(1499))], 1499);
	ck_assert_uint_eq(depth[prefix_find(x, key(9000))], 501);
	free(depth);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_keys_chosen_to_collide_spread_over_the_buckets)
{
	struct prefix *x = prefix_new();
	uint8_t k[KVP_KEY_BYTES];
	uint32_t i, tok = 1;

	ck_assert_ptr_nonnull(x);
	/* keys alike but for bytes 8..11: one bucket, by their first bytes */
	memset(k, 0xaa, sizeof(k));
	for (i = 0; i < 20000; i++) {
		memcpy(k + 8, &i, sizeof(i));
		ck_assert_uint_ne(prefix_insert(x, k, NULL, PREFIX_NIL, i + 1, 1, NULL, 0),
				  PREFIX_NIL);
		/* and a partial page under each, alike the same way */
		ck_assert_uint_ne(prefix_insert(x, NULL, k, PREFIX_NIL, i + 1, 1, &tok, 1),
				  PREFIX_NIL);
	}
	ck_assert_uint_eq(prefix_count(x), 40000);
	ck_assert_msg(prefix_longest_chain(x) < 32, "a bucket holds %u entries",
		      prefix_longest_chain(x));
	memcpy(k + 8, &(uint32_t){ 12345 }, sizeof(uint32_t));
	ck_assert_uint_eq(prefix_page(x, prefix_find(x, k)), 12346);
	ck_assert_uint_eq(prefix_page(x, prefix_find_partial(x, k, &tok, 1)), 12346);
	prefix_free(x);
}
END_TEST

START_TEST(test_prefix_siphash_matches_the_reference_vectors)
{
	static const struct {
		size_t n;
		uint64_t h;
	} v[] = {	/* key 00..0f, message 00..n-1 (the paper's vectors) */
		{ 0, 0x726fdb47dd0e0e31ull }, { 8, 0x93f5f5799a932462ull },
		{ 15, 0xa129ca6149be45e5ull }, { 32, 0x7127512f72f27cceull },
	};
	uint8_t key[SIPHASH_KEY_BYTES], msg[32];
	uint8_t a[SIPHASH_KEY_BYTES], b[SIPHASH_KEY_BYTES];
	size_t i;

	for (i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)i;
	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)i;
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		ck_assert_uint_eq(siphash24(key, msg, v[i].n), v[i].h);
	ck_assert_int_eq(siphash_key(a), 0);
	ck_assert_int_eq(siphash_key(b), 0);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
}
END_TEST

START_TEST(test_prefix_pool_states_of_a_published_page)
{
	struct backend be;
	struct pool *p;
	struct pool_counts pc;
	char err[256];
	uint64_t h, h2;
	int ns;

	ck_assert_int_eq(backend_host_init(&be, err, sizeof(err)), 0);
	ck_assert_int_eq(pool_init(&p, &be, 1 << 20, 1 << 20), 0);
	ns = pool_ns_add(p, 4096);
	ck_assert_int_eq(pool_alloc(p, ns, 1, &h, err, sizeof(err)), 0);
	pool_ref(p, h);
	ck_assert_int_eq(pool_publish(p, h), -EINVAL);	/* held twice */
	pool_unref(p, h);
	ck_assert_int_eq(pool_publish(p, h), 0);
	ck_assert_int_eq(pool_state(p, h), PAGE_SHARED);
	ck_assert_int_eq(pool_publish(p, h), -EINVAL);	/* already published */
	pool_set_tag(p, h, 42);
	ck_assert_int_eq(pool_unref(p, h), PAGE_CACHED);	/* kept, not freed */
	ck_assert_int_eq(pool_lookup(p, ns, h), 0);
	ck_assert_uint_eq(pool_tag(p, h), 42);
	pool_ref(p, h);					/* acquired again */
	ck_assert_int_eq(pool_state(p, h), PAGE_SHARED);
	ck_assert_int_eq(pool_evict(p, h), -EINVAL);	/* leased: never evicted */
	ck_assert_int_eq(pool_unref(p, h), PAGE_CACHED);
	ck_assert(pool_audit(p));
	pool_counts(p, ns, &pc);
	ck_assert_uint_eq(pc.by_state[PAGE_CACHED], 1);
	ck_assert_int_eq(pool_evict(p, h), 0);
	ck_assert_int_eq(pool_lookup(p, ns, h), -ESTALE);	/* stale after eviction */
	ck_assert_int_eq(pool_alloc(p, ns, 1, &h2, err, sizeof(err)), 0);
	ck_assert_uint_ne(h2, h);
	ck_assert(pool_audit(p));
	pool_free(p);
	be.ops->fini(&be);
}
END_TEST

/* A sink that writes down what it hears: "+P" (came to the pool), "-H"
 * (left the host tier), ... per change, entry by entry. */
struct heard {
	char log[512];
	const uint8_t *parent;	/* the parent key the last store named */
	uint32_t nids;
};

static void hear(void *arg, const struct prefix *x, uint32_t e, unsigned gone, unsigned came)
{
	static const char name[] = "PHN";
	struct heard *h = arg;
	size_t len = strlen(h->log);
	unsigned m;

	for (m = 0; m < 3; m++)
		if (gone & (1u << m))
			len += (size_t)snprintf(h->log + len, sizeof(h->log) - len, "%u-%c ", e,
						name[m]);
	for (m = 0; m < 3; m++)
		if (came & (1u << m))
			len += (size_t)snprintf(h->log + len, sizeof(h->log) - len, "%u+%c ", e,
						name[m]);
	h->parent = prefix_parent_key(x, e);
	(void)prefix_block_ids(x, e, &h->nids);
}

START_TEST(test_prefix_sink_hears_every_tier_move_once)
{
	struct prefix *x = prefix_new();
	struct heard h = { .log = "" };
	uint8_t root[KVP_KEY_BYTES] = { 7 }, k1[KVP_KEY_BYTES];
	uint32_t ids[4] = { 1, 2, 3, 4 }, a, b, p, slot;

	prefix_set_sink(x, hear, &h);
	memcpy(k1, key(1), KVP_KEY_BYTES);
	a = prefix_insert_block(x, k1, root, PREFIX_NIL, 101, 1, ids, 4);
	ck_assert_ptr_nonnull(h.parent);
	ck_assert_int_eq(memcmp(h.parent, root, KVP_KEY_BYTES), 0);
	ck_assert_uint_eq(h.nids, 4);
	b = prefix_insert_block(x, key(2), k1, a, 102, 1, NULL, 0);
	ck_assert_uint_eq(h.nids, 0);
	ck_assert_int_eq(memcmp(h.parent, k1, KVP_KEY_BYTES), 0);
	/* a partial page is no block: the sink hears nothing of it */
	p = prefix_insert(x, NULL, key(2), b, 103, 1, ids, 3);
	prefix_cached(x, p);
	prefix_remove(x, p);
	/* b: pool -> host -> NVMe -> back into the pool with its NVMe copy */
	prefix_hosted(x, b, 0);
	prefix_spilling(x, b, 5);
	prefix_spilled(x, b);
	prefix_restoring(x, b, 104);
	prefix_restored(x, b);
	prefix_copy_set(x, b, 5);
	ck_assert_uint_eq(prefix_media(x, b), PREFIX_M_POOL | PREFIX_M_NVME);
	/* evicted again onto its copy: no write, only the pool leaves */
	ck_assert(prefix_copy(x, b, &slot) && slot == 5);
	prefix_spilling(x, b, slot);
	prefix_spilled(x, b);
	/* a: pool -> host -> pool; then dropped */
	prefix_hosted(x, a, 1);
	prefix_restoring(x, a, 105);
	prefix_restored(x, a);
	prefix_remove(x, b);
	prefix_remove(x, a);
	ck_assert_str_eq(h.log, "1+P 2+P "
			 "2-P 2+H 2-H 2+N 2+P "		/* restore keeps the copy */
			 "2-P "				/* back to its copy */
			 "1-P 1+H 1-H 1+P "
			 "2-N 1-P ");
	prefix_free(x);
}
END_TEST

Suite *prefix_suite(void)
{
	Suite *s = suite_create("prefix");
	TCase *tc = tcase_create("index");

	tcase_add_test(tc, test_prefix_finds_what_was_inserted);
	tcase_add_test(tc, test_prefix_grows_past_many_entries);
	tcase_add_test(tc, test_prefix_partial_matches_the_longest_token_prefix);
	tcase_add_test(tc, test_prefix_entries_are_reused_after_removal);
	tcase_add_test(tc, test_prefix_depths_of_all_entries_at_once_match_each_one);
	tcase_add_test(tc, test_prefix_keys_chosen_to_collide_spread_over_the_buckets);
	tcase_add_test(tc, test_prefix_siphash_matches_the_reference_vectors);
	suite_add_tcase(s, tc);

	tc = tcase_create("eviction order");
	tcase_add_test(tc, test_prefix_evicts_least_recently_released_first);
	tcase_add_test(tc, test_prefix_evicts_low_priority_before_recency);
	tcase_add_test(tc, test_prefix_evicts_leaves_before_their_parents);
	tcase_add_test(tc, test_prefix_leased_child_keeps_its_parent);
	tcase_add_test(tc, test_prefix_evictable_counts_what_eviction_could_take);
	tcase_add_test(tc, test_prefix_host_tier_moves_leaves_first_and_skips_held_entries);
	suite_add_tcase(s, tc);

	tc = tcase_create("tier moves");
	tcase_add_test(tc, test_prefix_sink_hears_every_tier_move_once);
	suite_add_tcase(s, tc);

	tc = tcase_create("pool states");
	tcase_add_test(tc, test_prefix_pool_states_of_a_published_page);
	suite_add_tcase(s, tc);
	return s;
}
