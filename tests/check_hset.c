/* SPDX-License-Identifier: MIT */
/*
 * check_hset.c - unit tests of the counting set of page handles
 * (client/hset.c), held against a plain array model.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "client/hset.h"
#include "suites.h"

START_TEST(test_hset_counts_add_and_sub)
{
	struct hset s;

	hset_init(&s);
	ck_assert_uint_eq(hset_count(&s, 42), 0);
	ck_assert_int_eq(hset_sub(&s, 42, 1), -ENOENT);
	ck_assert_int_eq(hset_add(&s, 42, 2), 0);
	ck_assert_int_eq(hset_add(&s, 42, 1), 0);
	ck_assert_uint_eq(hset_count(&s, 42), 3);
	ck_assert_uint_eq(s.total, 3);
	ck_assert_uint_eq(s.len, 1);
	ck_assert_int_eq(hset_sub(&s, 42, 4), -ENOENT);	/* unchanged */
	ck_assert_uint_eq(hset_count(&s, 42), 3);
	ck_assert_int_eq(hset_sub(&s, 42, 3), 0);
	ck_assert_uint_eq(hset_count(&s, 42), 0);
	ck_assert_uint_eq(s.len, 0);
	ck_assert_uint_eq(s.total, 0);
	hset_fini(&s);
}
END_TEST

START_TEST(test_hset_matches_a_model_under_random_use)
{
	enum { KEYS = 3000, STEPS = 200000 };
	static uint32_t model[KEYS];
	uint64_t x = 0x9e3779b97f4a7c15ull, total = 0;
	struct hset s;
	int i;

	hset_init(&s);
	for (i = 0; i < STEPS; i++) {
		uint32_t k, n;
		uint64_t key;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		k = (uint32_t)(x % KEYS);
		n = (uint32_t)(x >> 40) % 3 + 1;
		/* structured keys like handles: generation, slab, index */
		key = (uint64_t)(k % 7 + 1) << 32 | (uint64_t)(k / 7) << 20 | k;
		if (x & (1ull << 33)) {
			ck_assert_int_eq(hset_add(&s, key, n), 0);
			model[k] += n;
			total += n;
		} else if (model[k] >= n) {
			ck_assert_int_eq(hset_sub(&s, key, n), 0);
			model[k] -= n;
			total -= n;
		} else {
			ck_assert_int_eq(hset_sub(&s, key, n), -ENOENT);
		}
		ck_assert_uint_eq(hset_count(&s, key), model[k]);
	}
	ck_assert_uint_eq(s.total, total);
	for (i = 0; i < KEYS; i++) {
		uint64_t key = (uint64_t)(i % 7 + 1) << 32 | (uint64_t)(i / 7) << 20 | (uint64_t)i;

		ck_assert_uint_eq(hset_count(&s, key), model[i]);
	}
	hset_fini(&s);
}
END_TEST

START_TEST(test_hset_zero_key_is_never_present)
{
	struct hset s;

	hset_init(&s);
	ck_assert_int_eq(hset_add(&s, 5, 1), 0);
	ck_assert_uint_eq(hset_count(&s, 0), 0);
	ck_assert_int_eq(hset_sub(&s, 0, 1), -ENOENT);
	hset_fini(&s);
}
END_TEST

Suite *hset_suite(void)
{
	Suite *s = suite_create("hset");
	TCase *tc = tcase_create("counting");

	tcase_add_test(tc, test_hset_counts_add_and_sub);
	tcase_add_test(tc, test_hset_matches_a_model_under_random_use);
	tcase_add_test(tc, test_hset_zero_key_is_never_present);
	suite_add_tcase(s, tc);
	return s;
}
