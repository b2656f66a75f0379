/* SPDX-License-Identifier: MIT */
/*
 * paged_attention_ref.c - the C reference of paged attention, decode.
 *
 * Owns kvp_paged_attention_decode_ref(): the CPU path of host-backend users
 * and the oracle the CUDA kernel in paged_attention.cu is tested against.
 *
 * One pass over a sequence's K and V per group of up to REF_HEADS query
 * heads of one kv head (GQA: a K or V row is converted to fp32 once and
 * used by every head of the group). A block of block_tokens tokens is
 * done at a time: its logits, then the online-softmax rescale of the
 * running output when the block raises the running max, then the
 * weighted V rows. Everything after the load is fp32; the inner loops run
 * over head_dim contiguous floats and vectorize.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kvpool_kernels.h"
#include "kern_check.h"
#include "kv_dtype.h"

#define REF_HEADS	8	/* query heads per pass over K and V */
#define REF_MAX_DIM	256	/* largest head_dim */
#define REF_MAX_BLOCK	128	/* largest block_tokens */

/* One sequence's query heads [h0, h0 + nh) of kv head kvh. */
struct ref_group {
	uint32_t b, kvh, h0, nh;
	float q[REF_HEADS][REF_MAX_DIM];	/* scaled query rows */
	float acc[REF_HEADS][REF_MAX_DIM];	/* running sum of p x V */
	float m[REF_HEADS], l[REF_HEADS];	/* running max and sum */
	float s[REF_HEADS][REF_MAX_BLOCK];	/* logits, then p, of a block */
	float row[REF_MAX_DIM];			/* one K or V row in fp32 */
};

/* ref_load() - n elements of dtype at src into floats. */
static void ref_load(float *dst, const void *src, uint32_t dtype, uint32_t n)
{
	const uint16_t *h = src;
	uint32_t i;

	switch (dtype) {
	case KVP_DTYPE_F16:
		for (i = 0; i < n; i++)
			dst[i] = kv_f16_to_f32(h[i]);
		break;
	case KVP_DTYPE_BF16:
		for (i = 0; i < n; i++)
			dst[i] = kv_bf16_to_f32(h[i]);
		break;
	default:
		memcpy(dst, src, n * sizeof(float));
		break;
	}
}

/* ref_store() - n floats into dtype at dst, rounding to nearest even. */
static void ref_store(void *dst, const float *src, uint32_t dtype, uint32_t n)
{
	uint16_t *h = dst;
	uint32_t i;

	switch (dtype) {
	case KVP_DTYPE_F16:
		for (i = 0; i < n; i++)
			h[i] = kv_f32_to_f16(src[i]);
		break;
	case KVP_DTYPE_BF16:
		for (i = 0; i < n; i++)
			h[i] = kv_f32_to_bf16(src[i]);
		break;
	default:
		memcpy(dst, src, n * sizeof(float));
		break;
	}
}

/* ref_dot() - a . b over n (a multiple of 8) floats, in 8 partial sums so
 * that the compiler may vectorize without reassociating. */
static float ref_dot(const float *a, const float *b, uint32_t n)
{
	float part[8] = { 0 };
	uint32_t i, j;

	for (i = 0; i < n; i += 8)
		for (j = 0; j < 8; j++)
			part[j] += a[i + j] * b[i + j];
	return ((part[0] + part[4]) + (part[1] + part[5])) +
	       ((part[2] + part[6]) + (part[3] + part[7]));
}

/* ref_row() - address of row (kv, token) of kv head kvh in a page. */
static const unsigned char *ref_row(const struct kvp_attention_shape *s,
				    uint64_t page, uint32_t kv, uint32_t kvh,
				    uint32_t token, size_t esize)
{
	const struct kvp_kv_layout *l = &s->layout;
	uint64_t e = s->layer * l->layer_stride + kv * l->kv_stride +
		     kvh * l->head_stride + token * l->token_stride;

	return (const unsigned char *)(uintptr_t)page + e * esize;
}

/* ref_block() - fold tokens [0, n) of one page into the group's state. */
static void ref_block(const struct kvp_attention_shape *s, struct ref_group *g,
		      uint64_t page, uint32_t n, size_t esize)
{
	uint32_t d = s->layout.head_dim, t, h, i;

	for (t = 0; t < n; t++) {
		ref_load(g->row, ref_row(s, page, 0, g->kvh, t, esize),
			 s->dtype, d);
		for (h = 0; h < g->nh; h++)
			g->s[h][t] = ref_dot(g->q[h], g->row, d);
	}
	for (h = 0; h < g->nh; h++) {
		float mb = g->m[h], sum = 0.0f;

		for (t = 0; t < n; t++)
			mb = fmaxf(mb, g->s[h][t]);
		if (mb > g->m[h]) {
			/* exp(-inf) = 0 clears the empty start state */
			float c = expf(g->m[h] - mb);

			g->l[h] *= c;
			for (i = 0; i < d; i++)
				g->acc[h][i] *= c;
			g->m[h] = mb;
		}
		for (t = 0; t < n; t++) {
			g->s[h][t] = expf(g->s[h][t] - mb);
			sum += g->s[h][t];
		}
		g->l[h] += sum;
	}
	for (t = 0; t < n; t++) {
		ref_load(g->row, ref_row(s, page, 1, g->kvh, t, esize),
			 s->dtype, d);
		for (h = 0; h < g->nh; h++) {
			float p = g->s[h][t];

			for (i = 0; i < d; i++)
				g->acc[h][i] += p * g->row[i];
		}
	}
}

/* ref_group_run() - the output rows of one group of query heads. */
static void ref_group_run(const struct kvp_attention_shape *s,
			  struct ref_group *g, void *out, const void *q,
			  const uint64_t *table, uint32_t ctx)
{
	uint32_t d = s->layout.head_dim, bt = s->layout.block_tokens;
	size_t esize = kern_dtype_size(s->dtype);
	size_t row_bytes = d * esize;
	uint32_t h, i, t;

	for (h = 0; h < g->nh; h++) {
		size_t r = (size_t)g->b * s->q_heads + g->h0 + h;

		ref_load(g->q[h], (const unsigned char *)q + r * row_bytes,
			 s->dtype, d);
		for (i = 0; i < d; i++) {
			g->q[h][i] *= s->scale;
			g->acc[h][i] = 0.0f;
		}
		g->m[h] = -INFINITY;
		g->l[h] = 0.0f;
	}
	for (t = 0; t < ctx; t += bt)
		ref_block(s, g, table[t / bt], ctx - t < bt ? ctx - t : bt,
			  esize);
	for (h = 0; h < g->nh; h++) {
		size_t r = (size_t)g->b * s->q_heads + g->h0 + h;
		float inv = g->l[h] > 0.0f ? 1.0f / g->l[h] : 0.0f;

		for (i = 0; i < d; i++)
			g->row[i] = g->acc[h][i] * inv;
		ref_store((unsigned char *)out + r * row_bytes, g->row,
			  s->dtype, d);
	}
}

/* ref_check_tables() - -EINVAL if a context is longer than max_context or
 * a page it reaches is 0. */
static int ref_check_tables(const struct kvp_attention_shape *s,
			    const uint64_t *block_tables,
			    const uint32_t *context_lens)
{
	uint32_t b, i, bt = s->layout.block_tokens;

	for (b = 0; b < s->batch; b++) {
		const uint64_t *row = block_tables + (size_t)b * s->max_blocks;
		uint32_t blocks = (context_lens[b] + bt - 1) / bt;

		if (context_lens[b] > s->max_context)
			return -EINVAL;
		for (i = 0; i < blocks; i++)
			if (row[i] == 0)
				return -EINVAL;
	}
	return 0;
}

/*
 * kvp_paged_attention_decode_ref() - see kvpool_kernels.h.
 *
 *   out,          // [batch][q_heads][head_dim], host memory
 *   q,            // [batch][q_heads][head_dim], host memory
 *   block_tables, // [batch][max_blocks] host page addresses
 *   context_lens, // [batch]
 *
 * Runs on the calling thread. Cost: O(batch x q_heads x context x
 * head_dim); about 20 KiB of stack, no allocation. Returns 0 or -EINVAL.
 */
KVP_KERNEL_API int kvp_paged_attention_decode_ref(const struct kvp_attention_shape *shape,
						  void *out, const void *q,
						  const uint64_t *block_tables,
						  const uint32_t *context_lens)
{
	const struct kvp_attention_shape *s = shape;
	struct ref_group g;
	uint32_t group, b, h;
	int rc;

	rc = kern_check_attention(s);
	if (rc)
		return rc;
	if (s->batch == 0)
		return 0;
	if (!out || !q || !block_tables || !context_lens)
		return -EINVAL;
	rc = ref_check_tables(s, block_tables, context_lens);
	if (rc)
		return rc;

	group = s->q_heads / s->layout.kv_heads;
	for (b = 0; b < s->batch; b++) {
		for (h = 0; h < s->q_heads; h += g.nh) {
			uint32_t end = (h / group + 1) * group;

			g.b = b;
			g.kvh = h / group;
			g.h0 = h;
			g.nh = end - h < REF_HEADS ? end - h : REF_HEADS;
			ref_group_run(s, &g, out, q,
				      block_tables + (size_t)b * s->max_blocks,
				      context_lens[b]);
		}
	}
	return 0;
}
