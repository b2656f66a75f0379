/* SPDX-License-Identifier: MIT */
/*
 * check_kernels.c - unit tests of the kernels' C API on the CPU.
 *
 * Owns kernels_suite(): kvp_copy_pages_ref() against copies computed here
 * byte by byte, the fp16/bf16 conversions, kvp_paged_attention_decode_ref()
 * against a naive attention in double precision over pages scattered in
 * two slabs, kvp_write_kv_ref() placement, the argument checks, and the
 * -ENOTSUP of a build without CUDA. The GPU kernels are held against the
 * references in cuda_copy_pages.c and cuda_attention.c.
 *
 * Past 800 lines on purpose: one suite for kernels/, whose references
 * share the naive double-precision checks written here.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "kvpool_kernels.h"
#include "kernels/kv_dtype.h"
#include "tests/kv_elem.h"
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

/* --- fp16 and bf16 conversions ------------------------------------------ */

START_TEST(test_kernels_half_round_trips_every_value)
{
	uint32_t x, bad_h = 0, bad_b = 0;

	for (x = 0; x < 0x10000; x++) {
		uint16_t h = (uint16_t)x;
		int h_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
		int b_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);

		if (!h_nan && kv_f32_to_f16(kv_f16_to_f32(h)) != h)
			bad_h++;
		if (!b_nan && kv_f32_to_bf16(kv_bf16_to_f32(h)) != h)
			bad_b++;
		if (h_nan && !isnan(kv_f16_to_f32(h)))
			bad_h++;
		if (b_nan && !isnan(kv_bf16_to_f32(h)))
			bad_b++;
	}
	ck_assert_uint_eq(bad_h, 0);
	ck_assert_uint_eq(bad_b, 0);
	ck_assert(kv_f16_to_f32(0x3c00) == 1.0f);
	ck_assert(kv_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
	ck_assert(kv_f16_to_f32(0x8400) == -ldexpf(1.0f, -14));
	ck_assert(kv_bf16_to_f32(0x3f80) == 1.0f);
}
END_TEST

START_TEST(test_kernels_half_stores_round_to_nearest_even)
{
	/* fp16: ulp of 1 is 2^-10 */
	ck_assert_uint_eq(kv_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);
	ck_assert_uint_eq(kv_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
	ck_assert_uint_eq(kv_f32_to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)),
			  0x3c01);
	ck_assert_uint_eq(kv_f32_to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(kv_f32_to_f16(65519.0f), 0x7bff);
	ck_assert_uint_eq(kv_f32_to_f16(65520.0f), 0x7c00);
	ck_assert_uint_eq(kv_f32_to_f16(-INFINITY), 0xfc00);
	ck_assert_uint_eq(kv_f32_to_f16(-0.0f), 0x8000);
	ck_assert_uint_eq(kv_f32_to_f16(ldexpf(1, -24)), 0x0001);
	ck_assert_uint_eq(kv_f32_to_f16(ldexpf(1, -25)), 0x0000);
	ck_assert_uint_eq(kv_f32_to_f16(1.5f * ldexpf(1, -25)), 0x0001);
	ck_assert_uint_eq(kv_f32_to_f16(3 * ldexpf(1, -25)), 0x0002);
	ck_assert_uint_eq(kv_f32_to_f16(ldexpf(1, -14) - ldexpf(1, -26)),
			  0x0400);
	ck_assert(isnan(kv_f16_to_f32(kv_f32_to_f16(NAN))));
	/* bf16: ulp of 1 is 2^-7 */
	ck_assert_uint_eq(kv_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);
	ck_assert_uint_eq(kv_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);
	ck_assert_uint_eq(kv_f32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)),
			  0x3f81);
	ck_assert_uint_eq(kv_f32_to_bf16(3.4e38f), 0x7f80);
	ck_assert(isnan(kv_bf16_to_f32(kv_f32_to_bf16(NAN))));
}
END_TEST

/* --- KV pages in host memory -------------------------------------------- */

static uint64_t kv_rng;

static uint64_t kv_next(void)
{
	kv_rng ^= kv_rng >> 12;
	kv_rng ^= kv_rng << 25;
	kv_rng ^= kv_rng >> 27;
	return kv_rng * 0x2545f4914f6cdd1dULL;
}

/* Uniform in [-1, 1). */
static float kv_uniform(void)
{
	return (float)((double)(kv_next() >> 11) * 0x1.0p-52 - 1.0);
}

static size_t dtype_bytes(uint32_t dtype)
{
	return dtype == KVP_DTYPE_F32 ? 4 : 2;
}

/* Element index of (layer, kv, head, token, d) in a page, from strides. */
static size_t elem_at(const struct kvp_kv_layout *l, uint32_t layer,
		      uint32_t kv, uint32_t head, uint32_t token, uint32_t d)
{
	return layer * l->layer_stride + kv * l->kv_stride +
	       head * l->head_stride + token * l->token_stride + d;
}

/*
 * Two "slabs" (separate allocations) of pages; page addresses of both in
 * a shuffled order, so that a sequence's blocks alternate between slabs
 * and run backwards as often as forwards.
 */
struct kv_slabs {
	unsigned char *slab[2];
	size_t pages_per_slab, page_bytes;
	uint64_t *order;	/* [2 x pages_per_slab] page addresses */
};

static void slabs_init(struct kv_slabs *k, const struct kvp_kv_layout *l,
		       uint32_t dtype, size_t pages)
{
	size_t i, n;

	k->pages_per_slab = (pages + 1) / 2;
	k->page_bytes = l->page_elems * dtype_bytes(dtype);
	n = 2 * k->pages_per_slab;
	k->order = malloc(n * sizeof(*k->order));
	ck_assert_ptr_nonnull(k->order);
	for (i = 0; i < 2; i++) {
		k->slab[i] = aligned_alloc(64, k->pages_per_slab * k->page_bytes);
		ck_assert_ptr_nonnull(k->slab[i]);
	}
	for (i = 0; i < n; i++)
		k->order[i] = (uint64_t)(uintptr_t)(k->slab[i % 2] +
						    (i / 2) * k->page_bytes);
	for (i = n - 1; i > 0; i--) {
		size_t j = (size_t)(kv_next() % (i + 1));
		uint64_t t = k->order[i];

		k->order[i] = k->order[j];
		k->order[j] = t;
	}
}

static void slabs_free(struct kv_slabs *k)
{
	free(k->slab[0]);
	free(k->slab[1]);
	free(k->order);
}

/* Every element of every page NaN: a read outside what the shape allows
 * turns the output into NaN. */
static void slabs_poison(struct kv_slabs *k, const struct kvp_kv_layout *l,
			 uint32_t dtype)
{
	size_t s, e;

	for (s = 0; s < 2; s++)
		for (e = 0; e < k->pages_per_slab * l->page_elems; e++)
			elem_set(k->slab[s], e, dtype, NAN);
}

/* --- Paged attention against a naive attention in double ---------------- */

struct attn_case {
	uint32_t dtype, kv_heads, group, head_dim, block_tokens;
	int vllm_layout;	/* [layer][kv][token][head][d] instead */
	double tol;		/* of |error| / max |row| */
	uint32_t ctx[4];	/* context lengths of the 4 sequences */
};

static const struct attn_case attn_cases[] = {
	{ KVP_DTYPE_F32, 2, 1, 64, 8, 0, 1e-5, { 1, 7, 29, 300 } },
	{ KVP_DTYPE_F32, 2, 4, 128, 16, 0, 1e-5, { 17, 1, 250, 33 } },
	{ KVP_DTYPE_F32, 1, 8, 256, 128, 0, 1e-5, { 129, 300, 1, 127 } },
	{ KVP_DTYPE_F32, 2, 12, 64, 16, 0, 1e-5, { 1, 45, 500, 3 } },
	{ KVP_DTYPE_F32, 3, 4, 128, 8, 1, 1e-5, { 5, 77, 1, 130 } },
	{ KVP_DTYPE_F16, 2, 1, 128, 128, 0, 2e-3, { 1, 300, 131, 9 } },
	{ KVP_DTYPE_F16, 2, 4, 256, 8, 0, 2e-3, { 301, 1, 13, 70 } },
	{ KVP_DTYPE_F16, 1, 8, 64, 16, 1, 2e-3, { 1, 19, 200, 511 } },
	{ KVP_DTYPE_BF16, 2, 1, 256, 16, 0, 1e-2, { 33, 1, 15, 199 } },
	{ KVP_DTYPE_BF16, 2, 4, 64, 128, 0, 1e-2, { 1, 129, 400, 255 } },
	{ KVP_DTYPE_BF16, 1, 8, 128, 8, 0, 1e-2, { 2, 1, 99, 260 } },
};

#define ATTN_BATCH	4
#define ATTN_LAYERS	3
#define ATTN_LAYER	1

static struct kvp_kv_layout case_layout(const struct attn_case *c)
{
	struct kvp_kv_layout l = kvp_kv_layout_default(ATTN_LAYERS,
			c->kv_heads, c->head_dim, c->block_tokens);

	if (c->vllm_layout) {
		l.head_stride = c->head_dim;
		l.token_stride = (uint64_t)c->kv_heads * c->head_dim;
	}
	return l;
}

/* The attention of one (sequence, head) in double, two passes. */
static void naive_attention(const struct kvp_attention_shape *s,
			    const void *q, const uint64_t *table, uint32_t ctx,
			    uint32_t b, uint32_t h, double *out)
{
	const struct kvp_kv_layout *l = &s->layout;
	uint32_t d = l->head_dim, bt = l->block_tokens;
	uint32_t kvh = h / (s->q_heads / l->kv_heads), t, i;
	double *logit = malloc((ctx + 1) * sizeof(double));
	double mx = -INFINITY, sum = 0;

	ck_assert_ptr_nonnull(logit);
	for (i = 0; i < d; i++)
		out[i] = 0;
	for (t = 0; t < ctx; t++) {
		const void *page = (const void *)(uintptr_t)table[t / bt];
		double dot = 0;

		for (i = 0; i < d; i++)
			dot += elem_get(q, ((size_t)b * s->q_heads + h) * d + i,
					s->dtype) *
			       elem_get(page, elem_at(l, s->layer, 0, kvh,
						      t % bt, i), s->dtype);
		logit[t] = dot * s->scale;
		if (logit[t] > mx)
			mx = logit[t];
	}
	for (t = 0; t < ctx; t++) {
		const void *page = (const void *)(uintptr_t)table[t / bt];
		double p = exp(logit[t] - mx);

		sum += p;
		for (i = 0; i < d; i++)
			out[i] += p * elem_get(page, elem_at(l, s->layer, 1,
							 kvh, t % bt, i),
					       s->dtype);
	}
	for (i = 0; i < d && ctx; i++)
		out[i] /= sum;
	free(logit);
}

/* Random K/V for the valid tokens of the shape's layer, the rest stays
 * NaN; block tables from the shuffled pages, 0 past each context. */
static uint64_t *attn_fill(const struct kvp_attention_shape *s,
			   struct kv_slabs *k, const uint32_t *ctx)
{
	const struct kvp_kv_layout *l = &s->layout;
	uint64_t *tables = calloc((size_t)s->batch * s->max_blocks,
				  sizeof(*tables));
	size_t next = 0;
	uint32_t b, t, kv, h, i;

	ck_assert_ptr_nonnull(tables);
	for (b = 0; b < s->batch; b++) {
		for (t = 0; t < ctx[b]; t++) {
			void *page;

			if (t % l->block_tokens == 0)
				tables[(size_t)b * s->max_blocks +
				       t / l->block_tokens] = k->order[next++];
			page = (void *)(uintptr_t)tables[(size_t)b * s->max_blocks +
							t / l->block_tokens];
			for (kv = 0; kv < 2; kv++)
				for (h = 0; h < l->kv_heads; h++)
					for (i = 0; i < l->head_dim; i++)
						elem_set(page, elem_at(l, s->layer,
							kv, h, t % l->block_tokens,
							i), s->dtype, kv_uniform());
		}
	}
	return tables;
}

START_TEST(test_kernels_attention_ref_matches_naive)
{
	const struct attn_case *c = &attn_cases[_i];
	struct kvp_attention_shape s = { 0 };
	struct kv_slabs k;
	uint32_t b, h, i, maxctx = 0, pages = 0;
	size_t rows, esize = dtype_bytes(c->dtype);
	unsigned char *q, *out;
	uint64_t *tables;
	double expect[256], worst = 0;
	int rc;

	kv_rng = 0x6174746e00000000ULL + (uint64_t)_i;
	s.layout = case_layout(c);
	s.dtype = c->dtype;
	s.layer = ATTN_LAYER;
	s.batch = ATTN_BATCH;
	s.q_heads = c->kv_heads * c->group;
	s.scale = 2.0f / sqrtf((float)c->head_dim);	/* sharper than usual */
	for (b = 0; b < ATTN_BATCH; b++) {
		if (c->ctx[b] > maxctx)
			maxctx = c->ctx[b];
		pages += (c->ctx[b] + c->block_tokens - 1) / c->block_tokens;
	}
	s.max_context = maxctx;
	s.max_blocks = (maxctx + c->block_tokens - 1) / c->block_tokens + 2;

	slabs_init(&k, &s.layout, c->dtype, pages + 3);
	slabs_poison(&k, &s.layout, c->dtype);
	tables = attn_fill(&s, &k, c->ctx);
	rows = (size_t)s.batch * s.q_heads;
	q = malloc(rows * c->head_dim * esize);
	out = malloc(rows * c->head_dim * esize);
	ck_assert(q && out);
	for (i = 0; i < rows * c->head_dim; i++)
		elem_set(q, i, c->dtype, kv_uniform());
	memset(out, 0xff, rows * c->head_dim * esize);	/* NaN in every dtype */

	rc = kvp_paged_attention_decode_ref(&s, out, q, tables, c->ctx);
	ck_assert_int_eq(rc, 0);

	for (b = 0; b < s.batch; b++) {
		for (h = 0; h < s.q_heads; h++) {
			size_t r = ((size_t)b * s.q_heads + h) * c->head_dim;
			double big = 0, err = 0;

			naive_attention(&s, q, tables + (size_t)b * s.max_blocks,
					c->ctx[b], b, h, expect);
			for (i = 0; i < c->head_dim; i++)
				big = fmax(big, fabs(expect[i]));
			for (i = 0; i < c->head_dim; i++) {
				double got = elem_get(out, r + i, c->dtype);

				ck_assert_msg(!isnan(got),
					      "case %d: NaN at b %u h %u d %u",
					      _i, b, h, i);
				err = fmax(err, fabs(got - expect[i]) / big);
			}
			worst = fmax(worst, err);
		}
	}
	ck_assert_msg(worst < c->tol,
		      "case %d: relative error %g, tolerance %g", _i, worst,
		      c->tol);
	free(out);
	free(q);
	free(tables);
	slabs_free(&k);
}
END_TEST

/* A sequence with no context gets zeros, the others their attention. */
START_TEST(test_kernels_attention_ref_empty_context_is_zero)
{
	struct kvp_attention_shape s = { 0 };
	const uint32_t ctx[2] = { 0, 3 };
	struct kv_slabs k;
	float q[2][64], out[2][64];
	uint64_t *tables;
	uint32_t i;
	int rc;

	kv_rng = 0x7a65726f;
	s.layout = kvp_kv_layout_default(1, 1, 64, 8);
	s.dtype = KVP_DTYPE_F32;
	s.batch = 2;
	s.q_heads = 1;
	s.max_blocks = 1;
	s.max_context = 3;
	s.scale = 0.125f;
	slabs_init(&k, &s.layout, s.dtype, 2);
	slabs_poison(&k, &s.layout, s.dtype);
	tables = attn_fill(&s, &k, ctx);
	for (i = 0; i < 64; i++)
		q[0][i] = q[1][i] = kv_uniform();
	memset(out, 0xff, sizeof(out));
	rc = kvp_paged_attention_decode_ref(&s, out, q, tables, ctx);
	ck_assert_int_eq(rc, 0);
	for (i = 0; i < 64; i++) {
		ck_assert(out[0][i] == 0.0f);
		ck_assert(!isnan(out[1][i]));
	}
	free(tables);
	slabs_free(&k);
}
END_TEST

/* The default layout is the formula of docs/kv-layout.md. */
START_TEST(test_kernels_default_layout_is_documented_order)
{
	struct kvp_kv_layout l = kvp_kv_layout_default(3, 4, 64, 16);
	uint32_t layer, kv, h, t, d;
	size_t bad = 0;

	ck_assert_uint_eq(l.page_elems, 2ull * 3 * 4 * 64 * 16);
	for (layer = 0; layer < 3; layer++)
		for (kv = 0; kv < 2; kv++)
			for (h = 0; h < 4; h++)
				for (t = 0; t < 16; t++)
					for (d = 0; d < 64; d += 7)
						bad += elem_at(&l, layer, kv, h, t, d) !=
						       ((((size_t)layer * 2 + kv) * 4 + h) *
							16 + t) * 64 + d;
	ck_assert_uint_eq(bad, 0);
}
END_TEST

START_TEST(test_kernels_workspace_bytes)
{
	struct kvp_attention_shape s = { 0 };

	s.layout = kvp_kv_layout_default(2, 8, 128, 16);
	s.batch = 3;
	s.q_heads = 32;
	s.max_context = KVP_ATTENTION_PARTITION_TOKENS;
	ck_assert_uint_eq(kvp_paged_attention_workspace_bytes(&s), 0);
	s.max_context = KVP_ATTENTION_PARTITION_TOKENS + 1;
	ck_assert_uint_eq(kvp_paged_attention_workspace_bytes(&s),
			  3 * 32 * 2 * (128 + 2) * 4);
	s.max_context = 32768;
	ck_assert_uint_eq(kvp_paged_attention_workspace_bytes(&s),
			  3 * 32 * 64 * (128 + 2) * 4);
	ck_assert_uint_eq(kvp_paged_attention_workspace_bytes(NULL), 0);
}
END_TEST

/* --- Argument checks of the attention reference ------------------------- */

struct attn_args {
	struct kvp_attention_shape s;
	struct kv_slabs k;
	uint32_t ctx[2];
	uint64_t *tables;
	float q[2][4][64];
	float out[2][4][64];
	float poison[2][4][64];
};

static struct attn_args *attn_args_new(void)
{
	struct attn_args *a = calloc(1, sizeof(*a));

	ck_assert_ptr_nonnull(a);
	kv_rng = 0x61726773;
	a->s.layout = kvp_kv_layout_default(2, 2, 64, 8);
	a->s.dtype = KVP_DTYPE_F32;
	a->s.layer = 1;
	a->s.batch = 2;
	a->s.q_heads = 4;
	a->s.max_blocks = 3;
	a->s.max_context = 20;
	a->s.scale = 0.125f;
	a->ctx[0] = 20;
	a->ctx[1] = 9;
	slabs_init(&a->k, &a->s.layout, a->s.dtype, 6);
	a->tables = attn_fill(&a->s, &a->k, a->ctx);
	memset(a->out, 0x5a, sizeof(a->out));
	memset(a->poison, 0x5a, sizeof(a->poison));
	return a;
}

static void attn_args_free(struct attn_args *a)
{
	free(a->tables);
	slabs_free(&a->k);
	free(a);
}

static int attn_call(struct attn_args *a, const struct kvp_attention_shape *s)
{
	return kvp_paged_attention_decode_ref(s, a->out, a->q, a->tables,
					      a->ctx);
}

START_TEST(test_kernels_attention_bad_shape_is_einval)
{
	struct attn_args *a = attn_args_new();
	struct kvp_attention_shape s;

	ck_assert_int_eq(attn_call(a, &a->s), 0);	/* the base is valid */
	memcpy(a->out, a->poison, sizeof(a->out));
	ck_assert_int_eq(attn_call(a, NULL), -EINVAL);
#define BAD(field, value) do {						\
		s = a->s;						\
		s.field = (value);					\
		ck_assert_msg(attn_call(a, &s) == -EINVAL,		\
			      #field " = " #value " was accepted");	\
	} while (0)
	BAD(dtype, KVP_DTYPE_FP8);
	BAD(dtype, 0);
	BAD(layer, 2);
	BAD(q_heads, 3);
	BAD(q_heads, 0);
	BAD(max_context, 25);
	BAD(max_blocks, 2);
	BAD(max_context, 19);	/* a context is longer */
	BAD(layout.head_dim, 96);
	BAD(layout.head_dim, 512);
	BAD(layout.block_tokens, 4);
	BAD(layout.block_tokens, 24);
	BAD(layout.block_tokens, 256);
	BAD(layout.kv_heads, 0);
	BAD(layout.token_stride, 32);
	BAD(layout.token_stride, 68);
	BAD(layout.head_stride, 516);
	BAD(layout.kv_stride, 1028);
	BAD(layout.layer_stride, 2049);
#undef BAD
	ck_assert(memcmp(a->out, a->poison, sizeof(a->out)) == 0);
	attn_args_free(a);
}
END_TEST

START_TEST(test_kernels_attention_bad_pointers_are_einval)
{
	struct attn_args *a = attn_args_new();
	struct kvp_attention_shape s = a->s;

	ck_assert_int_eq(kvp_paged_attention_decode_ref(&s, NULL, a->q,
			 a->tables, a->ctx), -EINVAL);
	ck_assert_int_eq(kvp_paged_attention_decode_ref(&s, a->out, NULL,
			 a->tables, a->ctx), -EINVAL);
	ck_assert_int_eq(kvp_paged_attention_decode_ref(&s, a->out, a->q,
			 NULL, a->ctx), -EINVAL);
	ck_assert_int_eq(kvp_paged_attention_decode_ref(&s, a->out, a->q,
			 a->tables, NULL), -EINVAL);
	/* a hole inside a context */
	a->tables[1 * s.max_blocks + 1] = 0;
	ck_assert_int_eq(attn_call(a, &s), -EINVAL);
	ck_assert(memcmp(a->out, a->poison, sizeof(a->out)) == 0);
	/* an empty batch needs no pointers */
	s.batch = 0;
	ck_assert_int_eq(kvp_paged_attention_decode_ref(&s, NULL, NULL, NULL,
							NULL), 0);
	attn_args_free(a);
}
END_TEST

/* --- write_kv ------------------------------------------------------------ */

#define WKV_TOKENS	20

/* Writes WKV_TOKENS tokens (every fourth one skipped) into random distinct
 * slots of pages in two slabs and checks every byte of both slabs: the
 * slots hold the rows, everything else keeps its fill. */
static void write_kv_case(uint32_t dtype, int vllm_layout)
{
	struct kvp_kv_layout l = kvp_kv_layout_default(2, 3, 64, 8);
	size_t esize = dtype_bytes(dtype), row = l.head_dim * esize;
	size_t in_bytes = (size_t)WKV_TOKENS * l.kv_heads * row;
	size_t slab_bytes, n_slots, i;
	struct kvp_kv_slot slots[WKV_TOKENS];
	unsigned char *key = malloc(in_bytes), *value = malloc(in_bytes);
	unsigned char *wslab[2];
	uint64_t *used;
	struct kv_slabs k;
	uint32_t t, h, s;
	int rc;

	if (vllm_layout) {
		l.head_stride = l.head_dim;
		l.token_stride = (uint64_t)l.kv_heads * l.head_dim;
	}
	kv_rng = 0x77726974ULL + dtype + 16 * (uint64_t)vllm_layout;
	slabs_init(&k, &l, dtype, 6);
	slab_bytes = k.pages_per_slab * k.page_bytes;
	n_slots = 2 * k.pages_per_slab * l.block_tokens;
	used = calloc(n_slots, sizeof(*used));
	ck_assert(key && value && used);
	for (i = 0; i < in_bytes; i++) {
		key[i] = (unsigned char)kv_next();
		value[i] = (unsigned char)kv_next();
	}
	for (s = 0; s < 2; s++) {
		memset(k.slab[s], 0xa5, slab_bytes);
		wslab[s] = malloc(slab_bytes);
		ck_assert_ptr_nonnull(wslab[s]);
		memset(wslab[s], 0xa5, slab_bytes);
	}
	for (t = 0; t < WKV_TOKENS; t++) {
		size_t slot;

		do
			slot = (size_t)(kv_next() % n_slots);
		while (used[slot]);
		used[slot] = 1;
		slots[t].page = t % 4 == 3 ? 0 : k.order[slot / l.block_tokens];
		slots[t].offset = (uint32_t)(slot % l.block_tokens);
		slots[t].reserved = 0;
		if (!slots[t].page)
			continue;
		for (h = 0; h < l.kv_heads; h++) {
			/* where the page lies in wslab[] */
			unsigned char *p = (unsigned char *)(uintptr_t)slots[t].page;
			int in1 = p >= k.slab[1] && p < k.slab[1] + slab_bytes;
			unsigned char *w = wslab[in1] + (p - k.slab[in1]);
			size_t src = ((size_t)t * l.kv_heads + h) * row;

			memcpy(w + elem_at(&l, 1, 0, h, slots[t].offset, 0) * esize,
			       key + src, row);
			memcpy(w + elem_at(&l, 1, 1, h, slots[t].offset, 0) * esize,
			       value + src, row);
		}
	}
	rc = kvp_write_kv_ref(&l, dtype, 1, key, value, slots, WKV_TOKENS);
	ck_assert_int_eq(rc, 0);
	for (s = 0; s < 2; s++) {
		check_bytes(k.slab[s], wslab[s], slab_bytes);
		free(wslab[s]);
	}
	free(used);
	free(key);
	free(value);
	slabs_free(&k);
}

START_TEST(test_kernels_write_kv_places_rows_only)
{
	write_kv_case(KVP_DTYPE_F16, 0);
	write_kv_case(KVP_DTYPE_BF16, 1);
	write_kv_case(KVP_DTYPE_F32, 0);
	write_kv_case(KVP_DTYPE_F32, 1);
}
END_TEST

START_TEST(test_kernels_write_kv_bad_arguments_are_einval)
{
	struct kvp_kv_layout l = kvp_kv_layout_default(2, 1, 64, 8), bad;
	uint16_t key[2][64], value[2][64];
	struct kvp_kv_slot slots[2];
	unsigned char *page = aligned_alloc(64, l.page_elems * 2);
	unsigned char *poison = malloc(l.page_elems * 2);

	ck_assert(page && poison);
	memset(key, 1, sizeof(key));
	memset(value, 2, sizeof(value));
	memset(page, 0xa5, l.page_elems * 2);
	memset(poison, 0xa5, l.page_elems * 2);
	slots[0].page = (uint64_t)(uintptr_t)page;
	slots[0].offset = 7;
	slots[0].reserved = 0;
	slots[1] = slots[0];
	slots[1].offset = 8;	/* past the block */

	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_F16, 0, key, value,
					  slots, 2), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_ref(NULL, KVP_DTYPE_F16, 0, key, value,
					  slots, 1), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_FP8, 0, key, value,
					  slots, 1), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_F16, 2, key, value,
					  slots, 1), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_F16, 0, NULL, value,
					  slots, 1), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_F16, 0, key, NULL,
					  slots, 1), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_F16, 0, key, value,
					  NULL, 1), -EINVAL);
	bad = l;
	bad.head_dim = 80;
	ck_assert_int_eq(kvp_write_kv_ref(&bad, KVP_DTYPE_F16, 0, key, value,
					  slots, 1), -EINVAL);
	bad = l;
	bad.token_stride = 65;
	ck_assert_int_eq(kvp_write_kv_ref(&bad, KVP_DTYPE_F16, 0, key, value,
					  slots, 1), -EINVAL);
	check_bytes(page, poison, l.page_elems * 2);
	/* an empty batch needs no pointers; a bad layout is still bad */
	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_F16, 0, NULL, NULL,
					  NULL, 0), 0);
	ck_assert_int_eq(kvp_write_kv_ref(&bad, KVP_DTYPE_F16, 0, NULL, NULL,
					  NULL, 0), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_ref(&l, KVP_DTYPE_F16, 0, key, value,
					  slots, 1), 0);
	free(poison);
	free(page);
}
END_TEST

/* Only a build without CUDA has the stub; a CUDA build tests the kernel in
 * tests/cuda_copy_pages.c instead. */
#ifndef KVP_HAVE_CUDA
START_TEST(test_kernels_cuda_without_cuda_is_enotsup)
{
	const struct kvp_copy_pair pair = { .src = 1, .dst = 2 };
	struct kvp_attention_shape s = { 0 };
	struct kvp_kv_slot slot = { 0 };
	int rc;

	fill_pools();
	rc = kvp_copy_pages_cuda(dst_pool, 64, src_pool, 64, 64, &pair, 1,
				 NULL);
	ck_assert_int_eq(rc, -ENOTSUP);
	check_bytes(dst_pool, want, sizeof(dst_pool));
	s.layout = kvp_kv_layout_default(1, 1, 64, 8);
	rc = kvp_paged_attention_decode_cuda(&s, NULL, NULL, NULL, NULL, NULL,
					     0, NULL);
	ck_assert_int_eq(rc, -ENOTSUP);
	rc = kvp_write_kv_cuda(&s.layout, KVP_DTYPE_F16, 0, dst_pool, src_pool,
			       &slot, 1, NULL);
	ck_assert_int_eq(rc, -ENOTSUP);
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

	tc = tcase_create("half");
	tcase_add_test(tc, test_kernels_half_round_trips_every_value);
	tcase_add_test(tc, test_kernels_half_stores_round_to_nearest_even);
	suite_add_tcase(s, tc);

	tc = tcase_create("attention_ref");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_kernels_attention_ref_matches_naive, 0,
			    (int)(sizeof(attn_cases) / sizeof(attn_cases[0])));
	tcase_add_test(tc, test_kernels_attention_ref_empty_context_is_zero);
	tcase_add_test(tc, test_kernels_default_layout_is_documented_order);
	tcase_add_test(tc, test_kernels_workspace_bytes);
	suite_add_tcase(s, tc);

	tc = tcase_create("attention_args");
	tcase_add_test(tc, test_kernels_attention_bad_shape_is_einval);
	tcase_add_test(tc, test_kernels_attention_bad_pointers_are_einval);
	suite_add_tcase(s, tc);

	tc = tcase_create("write_kv_ref");
	tcase_add_test(tc, test_kernels_write_kv_places_rows_only);
	tcase_add_test(tc, test_kernels_write_kv_bad_arguments_are_einval);
	suite_add_tcase(s, tc);

#ifndef KVP_HAVE_CUDA
	tc = tcase_create("cuda_stub");
	tcase_add_test(tc, test_kernels_cuda_without_cuda_is_enotsup);
	suite_add_tcase(s, tc);
#endif
	return s;
}
