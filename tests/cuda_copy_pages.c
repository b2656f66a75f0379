/* SPDX-License-Identifier: MIT */
/*
 * cuda_copy_pages.c - kvp_copy_pages_cuda() held against the C reference.
 *
 * A stand-alone test program for a CUDA build: random pools (fixed seed)
 * are copied on the GPU and on the host with kvp_copy_pages_ref(), and the
 * two destination pools must match byte for byte. Exits 0 when every test
 * passes, 1 when one fails, and 77 (skip) when no CUDA device answers.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <cuda_runtime_api.h>

#include "kvpool_kernels.h"
#include "tests/cuda_run.h"


/* One batch shape. Offsets misalign the base pointers on purpose. */
struct geometry {
	const char *what;
	size_t page_bytes;
	size_t src_stride, dst_stride;
	size_t src_off, dst_off;
	size_t src_pages, dst_pages;
	size_t n;
};

static const struct geometry geometries[] = {
	{ "16-byte units, packed", 4096, 4096, 4096, 0, 0, 128, 128, 64 },
	{ "16-byte units, padded", 4096, 8192, 4112, 0, 0, 128, 128, 64 },
	{ "8-byte units", 1000, 1000, 1000, 0, 0, 256, 256, 200 },
	{ "4-byte units", 1004, 1004, 1012, 0, 0, 256, 256, 200 },
	{ "2-byte units", 998, 1002, 1010, 0, 0, 256, 256, 200 },
	{ "bytes, odd strides", 1000, 1003, 1003, 0, 0, 256, 256, 200 },
	{ "bytes, odd base", 4096, 4096, 4096, 1, 3, 128, 128, 64 },
	{ "big pages, chunked", 300000, 300032, 300000, 0, 0, 16, 16, 12 },
	{ "100000 pairs, aligned", 256, 256, 256, 0, 0, 131072, 131072, 100000 },
	{ "100000 pairs, bytes", 100, 103, 101, 0, 0, 131072, 131072, 100000 },
};

static cudaStream_t stream;

/* xorshift64*: the same bytes on every libc, from a fixed seed. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

static void rng_fill(unsigned char *buf, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (unsigned char)(rng_next() >> 56);
}

/*
 * random_pairs() - n pairs with random sources and n distinct random
 * destinations (a partial Fisher-Yates shuffle of the destination pages).
 * Returns a malloc'd array the caller frees.
 */
static struct kvp_copy_pair *random_pairs(size_t n, size_t src_pages,
					  size_t dst_pages)
{
	struct kvp_copy_pair *pairs = malloc(n * sizeof(*pairs));
	uint64_t *perm = malloc(dst_pages * sizeof(*perm));
	size_t i;

	ck_assert_ptr_nonnull(pairs);
	ck_assert_ptr_nonnull(perm);
	ck_assert_uint_le(n, dst_pages);
	for (i = 0; i < dst_pages; i++)
		perm[i] = i;
	for (i = 0; i < n; i++) {
		size_t j = i + (size_t)(rng_next() % (dst_pages - i));
		uint64_t t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
		pairs[i].src = rng_next() % src_pages;
		pairs[i].dst = perm[i];
	}
	free(perm);
	return pairs;
}

/* Fails at the first byte where the GPU and the reference differ. */
static void check_same(const unsigned char *gpu, const unsigned char *ref,
		       size_t len, const char *what)
{
	size_t i;

	if (memcmp(gpu, ref, len) == 0)
		return;
	for (i = 0; gpu[i] == ref[i]; i++)
		;
	ck_abort_msg("%s: byte %zu is 0x%02x on the GPU, 0x%02x in the reference",
		     what, i, gpu[i], ref[i]);
}

static void stream_setup(void)
{
	CUDA_OK(cudaStreamCreate(&stream));
}

static void stream_teardown(void)
{
	cudaStreamDestroy(stream);
}

START_TEST(test_cuda_copy_pages_matches_ref)
{
	const struct geometry *g = &geometries[_i];
	size_t src_bytes = g->src_off + g->src_pages * g->src_stride;
	size_t dst_bytes = g->dst_off + g->dst_pages * g->dst_stride;
	unsigned char *h_src = malloc(src_bytes);
	unsigned char *h_dst = malloc(dst_bytes);
	unsigned char *h_got = malloc(dst_bytes);
	unsigned char *d_src, *d_dst;
	struct kvp_copy_pair *pairs, *d_pairs;
	int rc;

	ck_assert(h_src && h_dst && h_got);
	rng_state = 0x6b76706f6f6c0000ULL + (uint64_t)_i;
	rng_fill(h_src, src_bytes);
	rng_fill(h_dst, dst_bytes);
	pairs = random_pairs(g->n, g->src_pages, g->dst_pages);

	CUDA_OK(cudaMalloc((void **)&d_src, src_bytes));
	CUDA_OK(cudaMalloc((void **)&d_dst, dst_bytes));
	CUDA_OK(cudaMalloc((void **)&d_pairs, g->n * sizeof(*pairs)));
	CUDA_OK(cudaMemcpy(d_src, h_src, src_bytes, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(d_dst, h_dst, dst_bytes, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(d_pairs, pairs, g->n * sizeof(*pairs),
			   cudaMemcpyHostToDevice));

	rc = kvp_copy_pages_cuda(d_dst + g->dst_off, g->dst_stride,
				 d_src + g->src_off, g->src_stride,
				 g->page_bytes, d_pairs, g->n, stream);
	ck_assert_msg(rc == 0, "%s: kvp_copy_pages_cuda returned %d",
		      g->what, rc);
	CUDA_OK(cudaStreamSynchronize(stream));
	CUDA_OK(cudaMemcpy(h_got, d_dst, dst_bytes, cudaMemcpyDeviceToHost));

	rc = kvp_copy_pages_ref(h_dst + g->dst_off, g->dst_stride,
				h_src + g->src_off, g->src_stride,
				g->page_bytes, pairs, g->n);
	ck_assert_int_eq(rc, 0);
	check_same(h_got, h_dst, dst_bytes, g->what);

	cudaFree(d_pairs);
	cudaFree(d_dst);
	cudaFree(d_src);
	free(pairs);
	free(h_got);
	free(h_dst);
	free(h_src);
}
END_TEST

/* Copy-on-write: sources in the first half of one slab, destinations in
 * the second half. */
START_TEST(test_cuda_copy_pages_within_one_slab)
{
	const size_t pages = 512, stride = 2048, page_bytes = 2000, n = 200;
	size_t bytes = pages * stride, i;
	unsigned char *h_slab = malloc(bytes), *h_got = malloc(bytes);
	unsigned char *d_slab;
	struct kvp_copy_pair *pairs, *d_pairs;
	int rc;

	ck_assert(h_slab && h_got);
	rng_state = 0x636f770000000000ULL;
	rng_fill(h_slab, bytes);
	pairs = random_pairs(n, pages / 2, pages / 2);
	for (i = 0; i < n; i++)
		pairs[i].dst += pages / 2;

	CUDA_OK(cudaMalloc((void **)&d_slab, bytes));
	CUDA_OK(cudaMalloc((void **)&d_pairs, n * sizeof(*pairs)));
	CUDA_OK(cudaMemcpy(d_slab, h_slab, bytes, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(d_pairs, pairs, n * sizeof(*pairs),
			   cudaMemcpyHostToDevice));
	rc = kvp_copy_pages_cuda(d_slab, stride, d_slab, stride, page_bytes,
				 d_pairs, n, stream);
	ck_assert_int_eq(rc, 0);
	CUDA_OK(cudaStreamSynchronize(stream));
	CUDA_OK(cudaMemcpy(h_got, d_slab, bytes, cudaMemcpyDeviceToHost));

	rc = kvp_copy_pages_ref(h_slab, stride, h_slab, stride, page_bytes,
				pairs, n);
	ck_assert_int_eq(rc, 0);
	check_same(h_got, h_slab, bytes, "one slab");

	cudaFree(d_pairs);
	cudaFree(d_slab);
	free(pairs);
	free(h_got);
	free(h_slab);
}
END_TEST

/*
 * The argument checks: each call must fail (or, for n == 0, succeed)
 * before touching the destination, which a fill pattern shows.
 */
START_TEST(test_cuda_copy_pages_checks_arguments)
{
	const size_t bytes = 16 * 256;
	const struct kvp_copy_pair pair = { .src = 1, .dst = 2 };
	unsigned char *h_got = malloc(bytes), *want = malloc(bytes);
	unsigned char *d_src, *d_dst;
	struct kvp_copy_pair *d_pairs;

	ck_assert(h_got && want);
	memset(want, 0x5a, bytes);
	CUDA_OK(cudaMalloc((void **)&d_src, bytes));
	CUDA_OK(cudaMalloc((void **)&d_dst, bytes));
	CUDA_OK(cudaMalloc((void **)&d_pairs, sizeof(pair)));
	CUDA_OK(cudaMemset(d_src, 0x11, bytes));
	CUDA_OK(cudaMemset(d_dst, 0x5a, bytes));
	CUDA_OK(cudaMemcpy(d_pairs, &pair, sizeof(pair),
			   cudaMemcpyHostToDevice));

	ck_assert_int_eq(kvp_copy_pages_cuda(d_dst, 256, d_src, 256, 256,
					     d_pairs, 0, stream), 0);
	ck_assert_int_eq(kvp_copy_pages_cuda(NULL, 256, NULL, 256, 256,
					     NULL, 0, stream), 0);
	ck_assert_int_eq(kvp_copy_pages_cuda(NULL, 256, d_src, 256, 256,
					     d_pairs, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_copy_pages_cuda(d_dst, 256, NULL, 256, 256,
					     d_pairs, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_copy_pages_cuda(d_dst, 256, d_src, 256, 256,
					     NULL, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_copy_pages_cuda(d_dst, 255, d_src, 256, 256,
					     d_pairs, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_copy_pages_cuda(d_dst, 256, d_src, 255, 256,
					     d_pairs, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_copy_pages_cuda(d_dst, 256, d_src, 255, 256,
					     d_pairs, 0, stream), -EINVAL);
	CUDA_OK(cudaStreamSynchronize(stream));
	CUDA_OK(cudaGetLastError());
	CUDA_OK(cudaMemcpy(h_got, d_dst, bytes, cudaMemcpyDeviceToHost));
	check_same(h_got, want, bytes, "after rejected calls");

	cudaFree(d_pairs);
	cudaFree(d_dst);
	cudaFree(d_src);
	free(want);
	free(h_got);
}
END_TEST

static Suite *cuda_copy_pages_suite(void)
{
	Suite *s = suite_create("cuda_copy_pages");
	TCase *tc = tcase_create("copy_pages_cuda");
	int ngeo = (int)(sizeof(geometries) / sizeof(geometries[0]));

	tcase_add_checked_fixture(tc, stream_setup, stream_teardown);
	tcase_add_loop_test(tc, test_cuda_copy_pages_matches_ref, 0, ngeo);
	tcase_add_test(tc, test_cuda_copy_pages_within_one_slab);
	tcase_add_test(tc, test_cuda_copy_pages_checks_arguments);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return cuda_run_suite(cuda_copy_pages_suite);
}
