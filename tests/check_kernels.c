/* SPDX-License-Identifier: MIT */
/*
 * check_kernels.c - unit tests of the kernels' C API on the CPU.
 *
 * Owns kernels_suite(): kvp_copy_pages_ref() against copies computed here
 * byte by byte, its argument checks, and the -ENOTSUP of a build without
 * CUDA. The GPU kernel is held against the reference in cuda_copy_pages.c.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <check.h>

#include "kvpool_kernels.h"
#include "suites.h"

#define SENTINEL	0xa5
#define POOL_BYTES	4096

static unsigned char src_pool[POOL_BYTES];
static unsigned char dst_pool[POOL_BYTES];
static unsigned char want[POOL_BYTES];

/* Source bytes that differ from page to page and from SENTINEL. */
static void fill_pools(void)
{
	size_t i;

	for (i = 0; i < POOL_BYTES; i++)
		src_pool[i] = (unsigned char)(i * 131 + i / 251 + 1);
	memset(dst_pool, SENTINEL, sizeof(dst_pool));
	memset(want, SENTINEL, sizeof(want));
}

/* What the copy must produce, one byte at a time, without memcpy. */
static void expect_copy(unsigned char *w, size_t dst_stride,
			const unsigned char *s, size_t src_stride,
			size_t page_bytes, const struct kvp_copy_pair *pairs,
			size_t n)
{
	size_t i, b;

	for (i = 0; i < n; i++)
		for (b = 0; b < page_bytes; b++)
			w[pairs[i].dst * dst_stride + b] =
				s[pairs[i].src * src_stride + b];
}

/* Fails at the first byte of got that differs from w, naming it. One
 * assertion per call: Check's per-assertion bookkeeping is a syscall. */
static void check_bytes(const unsigned char *got, const unsigned char *w,
			size_t len)
{
	size_t i = 0;

	while (i < len && got[i] == w[i])
		i++;
	ck_assert_msg(i == len, "byte %zu is 0x%02x, want 0x%02x", i,
		      i < len ? got[i] : 0, i < len ? w[i] : 0);
}

START_TEST(test_kernels_copies_listed_pages_only)
{
	const struct kvp_copy_pair pairs[] = {
		{ .src = 3, .dst = 5 }, { .src = 0, .dst = 9 },
		{ .src = 15, .dst = 0 }, { .src = 7, .dst = 7 },
		{ .src = 3, .dst = 15 },
	};
	size_t n = sizeof(pairs) / sizeof(pairs[0]);
	int rc;

	fill_pools();
	expect_copy(want, 64, src_pool, 64, 64, pairs, n);
	rc = kvp_copy_pages_ref(dst_pool, 64, src_pool, 64, 64, pairs, n);
	ck_assert_int_eq(rc, 0);
	check_bytes(dst_pool, want, sizeof(dst_pool));
}
END_TEST

START_TEST(test_kernels_strides_larger_than_page_keep_padding)
{
	const struct kvp_copy_pair pairs[] = {
		{ .src = 1, .dst = 2 }, { .src = 6, .dst = 0 },
		{ .src = 4, .dst = 11 },
	};
	size_t n = sizeof(pairs) / sizeof(pairs[0]);
	unsigned char pad[16];
	size_t i;
	int rc;

	fill_pools();
	expect_copy(want, 56, src_pool, 48, 40, pairs, n);
	rc = kvp_copy_pages_ref(dst_pool, 56, src_pool, 48, 40, pairs, n);
	ck_assert_int_eq(rc, 0);
	check_bytes(dst_pool, want, sizeof(dst_pool));
	/* Said outright: the 16 bytes after each copied page are padding. */
	memset(pad, SENTINEL, sizeof(pad));
	for (i = 0; i < n; i++)
		check_bytes(dst_pool + pairs[i].dst * 56 + 40, pad, sizeof(pad));
}
END_TEST

START_TEST(test_kernels_gathers_into_packed_buffer)
{
	const uint64_t from[] = { 9, 2, 30, 2, 17, 0 };
	struct kvp_copy_pair pairs[6];
	size_t n = sizeof(from) / sizeof(from[0]);
	size_t i;
	int rc;

	fill_pools();
	for (i = 0; i < n; i++) {
		pairs[i].src = from[i];
		pairs[i].dst = i;
	}
	rc = kvp_copy_pages_ref(dst_pool, 100, src_pool, 128, 100, pairs, n);
	ck_assert_int_eq(rc, 0);
	for (i = 0; i < n; i++)
		check_bytes(dst_pool + i * 100, src_pool + from[i] * 128, 100);
	memset(want, SENTINEL, sizeof(want));
	check_bytes(dst_pool + n * 100, want, sizeof(dst_pool) - n * 100);
}
END_TEST

START_TEST(test_kernels_copies_within_one_slab)
{
	const struct kvp_copy_pair pairs[] = {
		{ .src = 0, .dst = 8 }, { .src = 3, .dst = 12 },
		{ .src = 3, .dst = 13 },
	};
	size_t n = sizeof(pairs) / sizeof(pairs[0]);
	int rc;

	fill_pools();
	memcpy(want, src_pool, sizeof(want));
	expect_copy(want, 256, src_pool, 256, 200, pairs, n);
	rc = kvp_copy_pages_ref(src_pool, 256, src_pool, 256, 200, pairs, n);
	ck_assert_int_eq(rc, 0);
	check_bytes(src_pool, want, sizeof(src_pool));
}
END_TEST

START_TEST(test_kernels_zero_pairs_is_noop)
{
	const struct kvp_copy_pair pair = { .src = 1, .dst = 1 };
	int rc;

	fill_pools();
	rc = kvp_copy_pages_ref(dst_pool, 64, src_pool, 64, 64, &pair, 0);
	ck_assert_int_eq(rc, 0);
	rc = kvp_copy_pages_ref(NULL, 64, NULL, 64, 64, NULL, 0);
	ck_assert_int_eq(rc, 0);
	check_bytes(dst_pool, want, sizeof(dst_pool));
}
END_TEST

START_TEST(test_kernels_null_pointer_is_einval)
{
	const struct kvp_copy_pair pair = { .src = 1, .dst = 2 };
	int rc;

	fill_pools();
	rc = kvp_copy_pages_ref(NULL, 64, src_pool, 64, 64, &pair, 1);
	ck_assert_int_eq(rc, -EINVAL);
	rc = kvp_copy_pages_ref(dst_pool, 64, NULL, 64, 64, &pair, 1);
	ck_assert_int_eq(rc, -EINVAL);
	rc = kvp_copy_pages_ref(dst_pool, 64, src_pool, 64, 64, NULL, 1);
	ck_assert_int_eq(rc, -EINVAL);
	check_bytes(dst_pool, want, sizeof(dst_pool));
}
END_TEST

START_TEST(test_kernels_page_larger_than_stride_is_einval)
{
	const struct kvp_copy_pair pair = { .src = 1, .dst = 2 };
	int rc;

	fill_pools();
	rc = kvp_copy_pages_ref(dst_pool, 63, src_pool, 64, 64, &pair, 1);
	ck_assert_int_eq(rc, -EINVAL);
	rc = kvp_copy_pages_ref(dst_pool, 64, src_pool, 63, 64, &pair, 1);
	ck_assert_int_eq(rc, -EINVAL);
	/* The geometry is checked even when the batch is empty. */
	rc = kvp_copy_pages_ref(dst_pool, 64, src_pool, 63, 64, &pair, 0);
	ck_assert_int_eq(rc, -EINVAL);
	check_bytes(dst_pool, want, sizeof(dst_pool));
}
END_TEST

/* Only a build without CUDA has the stub; a CUDA build tests the kernel in
 * tests/cuda_copy_pages.c instead. */
#ifndef KVP_HAVE_CUDA
START_TEST(test_kernels_cuda_without_cuda_is_enotsup)
{
	const struct kvp_copy_pair pair = { .src = 1, .dst = 2 };
	int rc;

	fill_pools();
	rc = kvp_copy_pages_cuda(dst_pool, 64, src_pool, 64, 64, &pair, 1,
				 NULL);
	ck_assert_int_eq(rc, -ENOTSUP);
	check_bytes(dst_pool, want, sizeof(dst_pool));
}
END_TEST
#endif

Suite *kernels_suite(void)
{
	Suite *s = suite_create("kernels");
	TCase *tc;

	tc = tcase_create("copy_pages_ref");
	tcase_add_test(tc, test_kernels_copies_listed_pages_only);
	tcase_add_test(tc, test_kernels_strides_larger_than_page_keep_padding);
	tcase_add_test(tc, test_kernels_gathers_into_packed_buffer);
	tcase_add_test(tc, test_kernels_copies_within_one_slab);
	tcase_add_test(tc, test_kernels_zero_pairs_is_noop);
	suite_add_tcase(s, tc);

	tc = tcase_create("copy_pages_args");
	tcase_add_test(tc, test_kernels_null_pointer_is_einval);
	tcase_add_test(tc, test_kernels_page_larger_than_stride_is_einval);
	suite_add_tcase(s, tc);

#ifndef KVP_HAVE_CUDA
	tc = tcase_create("cuda_stub");
	tcase_add_test(tc, test_kernels_cuda_without_cuda_is_enotsup);
	suite_add_tcase(s, tc);
#endif
	return s;
}
