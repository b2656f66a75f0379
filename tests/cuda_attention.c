/* SPDX-License-Identifier: MIT */
/*
 * cuda_attention.c - the KV kernels on the GPU held against the C
 * references and against attention computed with cuBLAS.
 *
 * A stand-alone test program for a CUDA build. For each geometry, random
 * K and V (fixed seed) are written into pages scattered over two slabs
 * with kvp_write_kv_ref() on the host and kvp_write_kv_cuda() on the GPU,
 * which must leave the slabs byte for byte equal. Then the decode runs
 * three ways on the same pages:
 *   - kvp_paged_attention_decode_cuda(), into an output and a workspace
 *     poisoned with 0xff bytes (NaN in every dtype) before each run;
 *   - kvp_paged_attention_decode_ref() on the host mirror;
 *   - a contiguous reference: each sequence's K and V copied out of the
 *     pages into contiguous fp32 buffers, S = scale Q K^T and O = P V as
 *     strided-batched cuBLAS SGEMMs (one batch entry per kv head, no
 *     TF32), the softmax in double on the host.
 * The largest error of an output row relative to the row's largest value
 * must stay under 2e-3 for fp16, 1e-2 for bf16 and 1e-4 for fp32.
 * Contexts up to 32k tokens exercise the split into partitions.
 *
 * Exits 0 when every test passes, 1 when one fails, and 77 (skip) when no
 * CUDA device answers.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kvpool_kernels.h"
#include "tests/cuda_run.h"
#include "kernels/kv_dtype.h"
#include "tests/kv_elem.h"

#define LAYERS		2
#define LAYER		1	/* the layer written and read */
#define BATCH		4

#define CUBLAS_OK(call)							\
	do {								\
		cublasStatus_t st_ = (call);				\
		ck_assert_msg(st_ == CUBLAS_STATUS_SUCCESS, "%s: status %d", \
			      #call, (int)st_);				\
	} while (0)

struct gcase {
	uint32_t dtype, kv_heads, group, head_dim, block_tokens;
	int vllm_layout;	/* [layer][kv][token][head][d] instead */
	int odd_input;		/* key/value not 16-byte aligned */
	uint32_t ctx[BATCH];
};

static const struct gcase cases[] = {
	{ KVP_DTYPE_F16, 2, 4, 128, 16, 0, 0, { 1, 511, 513, 1000 } },
	{ KVP_DTYPE_BF16, 2, 8, 128, 16, 0, 0, { 8195, 17, 512, 2049 } },
	{ KVP_DTYPE_F16, 1, 1, 64, 8, 0, 1, { 33, 1025, 7, 1 } },
	{ KVP_DTYPE_BF16, 4, 1, 256, 128, 0, 0, { 300, 1, 1537, 129 } },
	{ KVP_DTYPE_F16, 2, 12, 256, 64, 0, 0, { 32763, 5, 600, 1 } },
	{ KVP_DTYPE_BF16, 1, 4, 64, 128, 0, 0, { 32768, 16385, 3, 0 } },
	{ KVP_DTYPE_F16, 2, 3, 128, 32, 1, 0, { 4100, 77, 1, 515 } },
	{ KVP_DTYPE_BF16, 8, 8, 128, 16, 0, 1, { 8192, 8191, 1, 4000 } },
	{ KVP_DTYPE_F32, 2, 2, 128, 32, 0, 0, { 700, 1, 64, 4097 } },
	{ KVP_DTYPE_F32, 1, 8, 256, 16, 1, 1, { 1, 2, 1000, 555 } },
	{ KVP_DTYPE_F32, 2, 4, 64, 8, 0, 0, { 9000, 3, 2, 513 } },
};

static double tolerance(uint32_t dtype)
{
	return dtype == KVP_DTYPE_F16 ? 2e-3 : dtype == KVP_DTYPE_BF16 ? 1e-2 :
	       1e-4;
}

/* xorshift64*: the same values on every libc, from a fixed seed. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

static float rng_uniform(void)
{
	return (float)((double)(rng_next() >> 11) * 0x1.0p-52 - 1.0);
}

/*
 * One geometry set up twice: host slabs and device slabs of the same
 * size, pages in the same places, block tables of host addresses and of
 * device addresses.
 */
struct fixture {
	const struct gcase *c;
	struct kvp_attention_shape s;
	size_t esize, page_bytes, slab_bytes;
	unsigned char *h_slab[2], *d_slab[2];
	uint64_t *h_tables, *d_tables;	/* [batch][max_blocks] */
	uint32_t *d_ctx;
	size_t rows;			/* batch x q_heads */
	void *h_q, *d_q;		/* [batch][q_heads][head_dim] */
	size_t out_bytes;
};

static cudaStream_t stream;
static cublasHandle_t blas;

static uint64_t dev_addr(const struct fixture *f, uint64_t host)
{
	unsigned char *p = (unsigned char *)(uintptr_t)host;
	int s = p >= f->h_slab[1] && p < f->h_slab[1] + f->slab_bytes;

	return (uint64_t)(uintptr_t)(f->d_slab[s] + (p - f->h_slab[s]));
}

static struct kvp_kv_layout case_layout(const struct gcase *c)
{
	struct kvp_kv_layout l = kvp_kv_layout_default(LAYERS, c->kv_heads,
			c->head_dim, c->block_tokens);

	if (c->vllm_layout) {
		l.head_stride = c->head_dim;
		l.token_stride = (uint64_t)c->kv_heads * c->head_dim;
	}
	return l;
}

/* Slabs poisoned with 0xff on both sides; a shuffled page order over both
 * slabs; block tables of the pages in that order. */
static void fixture_pages(struct fixture *f)
{
	const struct gcase *c = f->c;
	size_t pages = 0, per_slab, i, next = 0;
	uint64_t *order, *d_tab;
	uint32_t b, blk;

	for (b = 0; b < BATCH; b++)
		pages += (c->ctx[b] + c->block_tokens - 1) / c->block_tokens;
	per_slab = pages / 2 + 2;
	f->slab_bytes = per_slab * f->page_bytes;
	order = malloc(2 * per_slab * sizeof(*order));
	ck_assert_ptr_nonnull(order);
	for (i = 0; i < 2; i++) {
		f->h_slab[i] = aligned_alloc(256, f->slab_bytes);
		ck_assert_ptr_nonnull(f->h_slab[i]);
		memset(f->h_slab[i], 0xff, f->slab_bytes);
		CUDA_OK(cudaMalloc((void **)&f->d_slab[i], f->slab_bytes));
		CUDA_OK(cudaMemset(f->d_slab[i], 0xff, f->slab_bytes));
	}
	for (i = 0; i < 2 * per_slab; i++)
		order[i] = (uint64_t)(uintptr_t)(f->h_slab[i % 2] +
						 (i / 2) * f->page_bytes);
	for (i = 2 * per_slab - 1; i > 0; i--) {
		size_t j = (size_t)(rng_next() % (i + 1));
		uint64_t t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	f->h_tables = calloc((size_t)BATCH * f->s.max_blocks, sizeof(uint64_t));
	d_tab = calloc((size_t)BATCH * f->s.max_blocks, sizeof(uint64_t));
	ck_assert(f->h_tables && d_tab);
	for (b = 0; b < BATCH; b++) {
		uint32_t blocks = (c->ctx[b] + c->block_tokens - 1) / c->block_tokens;

		for (blk = 0; blk < blocks; blk++) {
			size_t at = (size_t)b * f->s.max_blocks + blk;

			f->h_tables[at] = order[next++];
			d_tab[at] = dev_addr(f, f->h_tables[at]);
		}
	}
	CUDA_OK(cudaMalloc((void **)&f->d_tables,
			   (size_t)BATCH * f->s.max_blocks * sizeof(uint64_t)));
	CUDA_OK(cudaMemcpy(f->d_tables, d_tab,
			   (size_t)BATCH * f->s.max_blocks * sizeof(uint64_t),
			   cudaMemcpyHostToDevice));
	CUDA_OK(cudaMalloc((void **)&f->d_ctx, BATCH * sizeof(uint32_t)));
	CUDA_OK(cudaMemcpy(f->d_ctx, c->ctx, BATCH * sizeof(uint32_t),
			   cudaMemcpyHostToDevice));
	free(d_tab);
	free(order);
}

/*
 * Every token of every sequence, plus one padding token (page 0) after
 * every seventh, written with both write_kv implementations; the slabs
 * must come out equal, padding rows nowhere.
 */
static void fixture_write_kv(struct fixture *f)
{
	const struct gcase *c = f->c;
	const struct kvp_kv_layout *l = &f->s.layout;
	size_t ntok = 0, row = (size_t)l->kv_heads * l->head_dim, i, n = 0;
	size_t shift = c->odd_input ? f->esize : 0, bytes;
	struct kvp_kv_slot *h_slots, *d_slots_h, *d_slots;
	unsigned char *h_key, *h_val, *d_key, *d_val, *got;
	uint32_t b, t;
	int rc, s;

	for (b = 0; b < BATCH; b++)
		ntok += c->ctx[b] + c->ctx[b] / 7;
	if (ntok == 0)
		return;
	bytes = ntok * row * f->esize;
	h_key = malloc(bytes);
	h_val = malloc(bytes);
	h_slots = calloc(ntok, sizeof(*h_slots));
	d_slots_h = calloc(ntok, sizeof(*d_slots_h));
	ck_assert(h_key && h_val && h_slots && d_slots_h);
	for (i = 0; i < ntok * row; i++) {
		elem_set(h_key, i, c->dtype, rng_uniform());
		elem_set(h_val, i, c->dtype, rng_uniform());
	}
	for (b = 0; b < BATCH; b++) {
		for (t = 0; t < c->ctx[b]; t++) {
			uint64_t page = f->h_tables[(size_t)b * f->s.max_blocks +
						    t / c->block_tokens];

			h_slots[n].page = page;
			h_slots[n].offset = t % c->block_tokens;
			d_slots_h[n] = h_slots[n];
			d_slots_h[n].page = dev_addr(f, page);
			n++;
			if (t % 7 == 6)
				n++;	/* a padding token: page 0 */
		}
	}
	ck_assert_uint_eq(n, ntok);

	CUDA_OK(cudaMalloc((void **)&d_key, bytes + shift));
	CUDA_OK(cudaMalloc((void **)&d_val, bytes + shift));
	CUDA_OK(cudaMalloc((void **)&d_slots, ntok * sizeof(*d_slots)));
	CUDA_OK(cudaMemcpy(d_key + shift, h_key, bytes, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(d_val + shift, h_val, bytes, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(d_slots, d_slots_h, ntok * sizeof(*d_slots),
			   cudaMemcpyHostToDevice));

	rc = kvp_write_kv_cuda(l, c->dtype, LAYER, d_key + shift, d_val + shift,
			       d_slots, (uint32_t)ntok, stream);
	ck_assert_int_eq(rc, 0);
	rc = kvp_write_kv_ref(l, c->dtype, LAYER, h_key, h_val, h_slots,
			      (uint32_t)ntok);
	ck_assert_int_eq(rc, 0);
	CUDA_OK(cudaStreamSynchronize(stream));

	got = malloc(f->slab_bytes);
	ck_assert_ptr_nonnull(got);
	for (s = 0; s < 2; s++) {
		CUDA_OK(cudaMemcpy(got, f->d_slab[s], f->slab_bytes,
				   cudaMemcpyDeviceToHost));
		if (memcmp(got, f->h_slab[s], f->slab_bytes) != 0) {
			for (i = 0; got[i] == f->h_slab[s][i]; i++)
				;
			ck_abort_msg("write_kv: slab %d byte %zu is 0x%02x on the GPU, 0x%02x in the reference",
				     s, i, got[i], f->h_slab[s][i]);
		}
	}
	free(got);
	cudaFree(d_slots);
	cudaFree(d_val);
	cudaFree(d_key);
	free(d_slots_h);
	free(h_slots);
	free(h_val);
	free(h_key);
}

static void fixture_init(struct fixture *f, const struct gcase *c, int seed)
{
	uint32_t b, maxctx = 0;
	size_t i;

	memset(f, 0, sizeof(*f));
	rng_state = 0x6174746e63756461ULL + (uint64_t)seed;
	f->c = c;
	f->s.layout = case_layout(c);
	f->s.dtype = c->dtype;
	f->s.layer = LAYER;
	f->s.batch = BATCH;
	f->s.q_heads = c->kv_heads * c->group;
	f->s.scale = 1.0f / sqrtf((float)c->head_dim);
	for (b = 0; b < BATCH; b++)
		maxctx = c->ctx[b] > maxctx ? c->ctx[b] : maxctx;
	f->s.max_context = maxctx;
	f->s.max_blocks = (maxctx + c->block_tokens - 1) / c->block_tokens + 1;
	f->esize = c->dtype == KVP_DTYPE_F32 ? 4 : 2;
	f->page_bytes = f->s.layout.page_elems * f->esize;
	f->rows = (size_t)BATCH * f->s.q_heads;
	f->out_bytes = f->rows * c->head_dim * f->esize;

	fixture_pages(f);
	fixture_write_kv(f);

	/* q twice as large as K: sharper softmax than uniform noise gives */
	f->h_q = malloc(f->out_bytes);
	ck_assert_ptr_nonnull(f->h_q);
	for (i = 0; i < f->rows * c->head_dim; i++)
		elem_set(f->h_q, i, c->dtype, 2.0f * rng_uniform());
	CUDA_OK(cudaMalloc(&f->d_q, f->out_bytes));
	CUDA_OK(cudaMemcpy(f->d_q, f->h_q, f->out_bytes, cudaMemcpyHostToDevice));
}

static void fixture_free(struct fixture *f)
{
	int s;

	cudaFree(f->d_q);
	free(f->h_q);
	cudaFree(f->d_ctx);
	cudaFree(f->d_tables);
	free(f->h_tables);
	for (s = 0; s < 2; s++) {
		cudaFree(f->d_slab[s]);
		free(f->h_slab[s]);
	}
}

/* Runs the CUDA decode into a poisoned output and workspace; returns the
 * output copied to the host (malloc'd, the caller frees). */
static unsigned char *run_cuda(const struct fixture *f)
{
	size_t ws_bytes = kvp_paged_attention_workspace_bytes(&f->s);
	unsigned char *got = malloc(f->out_bytes);
	void *d_out, *ws = NULL;
	int rc;

	ck_assert_ptr_nonnull(got);
	CUDA_OK(cudaMalloc(&d_out, f->out_bytes));
	CUDA_OK(cudaMemset(d_out, 0xff, f->out_bytes));
	if (ws_bytes) {
		CUDA_OK(cudaMalloc(&ws, ws_bytes));
		CUDA_OK(cudaMemset(ws, 0xff, ws_bytes));
	}
	rc = kvp_paged_attention_decode_cuda(&f->s, d_out, f->d_q, f->d_tables,
					     f->d_ctx, ws, ws_bytes, stream);
	ck_assert_int_eq(rc, 0);
	CUDA_OK(cudaStreamSynchronize(stream));
	CUDA_OK(cudaGetLastError());
	CUDA_OK(cudaMemcpy(got, d_out, f->out_bytes, cudaMemcpyDeviceToHost));
	cudaFree(ws);
	cudaFree(d_out);
	return got;
}

/*
 * The contiguous reference of sequence b: K and V of every kv head copied
 * out of the device pages (cudaMemcpy2D per block: one row per token),
 * widened to fp32, then two strided-batched SGEMMs around a host softmax.
 * want: [q_heads][head_dim] floats.
 */
static void cublas_reference(const struct fixture *f, uint32_t b, float *want)
{
	const struct kvp_kv_layout *l = &f->s.layout;
	uint32_t ctx = f->c->ctx[b], d = l->head_dim, bt = l->block_tokens;
	uint32_t kvh = l->kv_heads, g = f->c->group, h, t, kv, blk, i;
	size_t n = (size_t)kvh * ctx * d, sn = (size_t)kvh * g * ctx;
	unsigned char *d_c, *h_c;
	float *h_f[2], *d_f[2], *h_s, *d_s, *d_qf, *d_o, *h_qf;
	const float one = 1.0f, zero = 0.0f;

	if (ctx == 0) {
		memset(want, 0, (size_t)f->s.q_heads * d * sizeof(float));
		return;
	}
	h_c = malloc(n * f->esize);
	h_s = malloc(sn * sizeof(float));
	h_qf = malloc((size_t)f->s.q_heads * d * sizeof(float));
	ck_assert(h_c && h_s && h_qf);
	CUDA_OK(cudaMalloc((void **)&d_c, n * f->esize));
	for (kv = 0; kv < 2; kv++) {
		for (h = 0; h < kvh; h++) {
			for (blk = 0; blk * bt < ctx; blk++) {
				uint64_t page = dev_addr(f, f->h_tables[(size_t)b *
							 f->s.max_blocks + blk]);
				uint64_t e = LAYER * l->layer_stride +
					     kv * l->kv_stride + h * l->head_stride;
				uint32_t rows = ctx - blk * bt < bt ? ctx - blk * bt : bt;

				CUDA_OK(cudaMemcpy2D(d_c + (((size_t)h * ctx + blk * bt) * d) *
						     f->esize, d * f->esize,
						     (const unsigned char *)(uintptr_t)page +
						     e * f->esize,
						     l->token_stride * f->esize,
						     d * f->esize, rows,
						     cudaMemcpyDeviceToDevice));
			}
		}
		h_f[kv] = malloc(n * sizeof(float));
		ck_assert_ptr_nonnull(h_f[kv]);
		CUDA_OK(cudaMemcpy(h_c, d_c, n * f->esize, cudaMemcpyDeviceToHost));
		for (i = 0; i < n; i++)
			h_f[kv][i] = (float)elem_get(h_c, i, f->c->dtype);
		CUDA_OK(cudaMalloc((void **)&d_f[kv], n * sizeof(float)));
		CUDA_OK(cudaMemcpy(d_f[kv], h_f[kv], n * sizeof(float),
				   cudaMemcpyHostToDevice));
		free(h_f[kv]);
	}
	/* q rows of sequence b, [kv_heads][group][d] */
	for (i = 0; i < f->s.q_heads * d; i++)
		h_qf[i] = (float)elem_get(f->h_q, (size_t)b * f->s.q_heads * d + i,
				   f->c->dtype);
	CUDA_OK(cudaMalloc((void **)&d_qf, (size_t)f->s.q_heads * d * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&d_s, sn * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&d_o, (size_t)f->s.q_heads * d * sizeof(float)));
	CUDA_OK(cudaMemcpy(d_qf, h_qf, (size_t)f->s.q_heads * d * sizeof(float),
			   cudaMemcpyHostToDevice));

	/* S^T (ctx x g, column-major) = K (d x ctx)^T Q (d x g), per kv head */
	CUBLAS_OK(cublasSgemmStridedBatched(blas, CUBLAS_OP_T, CUBLAS_OP_N,
		(int)ctx, (int)g, (int)d, &f->s.scale,
		d_f[0], (int)d, (long long)ctx * d,
		d_qf, (int)d, (long long)g * d, &zero,
		d_s, (int)ctx, (long long)g * ctx, (int)kvh));
	CUDA_OK(cudaMemcpy(h_s, d_s, sn * sizeof(float), cudaMemcpyDeviceToHost));
	for (h = 0; h < kvh * g; h++) {
		float *srow = h_s + (size_t)h * ctx;
		double mx = -INFINITY, sum = 0;

		for (t = 0; t < ctx; t++)
			mx = srow[t] > mx ? srow[t] : mx;
		for (t = 0; t < ctx; t++)
			sum += exp(srow[t] - mx);
		for (t = 0; t < ctx; t++)
			srow[t] = (float)(exp(srow[t] - mx) / sum);
	}
	CUDA_OK(cudaMemcpy(d_s, h_s, sn * sizeof(float), cudaMemcpyHostToDevice));
	/* O (d x g, column-major) = V (d x ctx) P (ctx x g), per kv head */
	CUBLAS_OK(cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N,
		(int)d, (int)g, (int)ctx, &one,
		d_f[1], (int)d, (long long)ctx * d,
		d_s, (int)ctx, (long long)g * ctx, &zero,
		d_o, (int)d, (long long)g * d, (int)kvh));
	CUDA_OK(cudaMemcpy(want, d_o, (size_t)f->s.q_heads * d * sizeof(float),
			   cudaMemcpyDeviceToHost));

	cudaFree(d_o);
	cudaFree(d_s);
	cudaFree(d_qf);
	cudaFree(d_f[1]);
	cudaFree(d_f[0]);
	cudaFree(d_c);
	free(h_qf);
	free(h_s);
	free(h_c);
}

/* Largest |got - want| / max |want| over the rows of sequence b; a row
 * that should be zero must be exactly zero. */
static double seq_error(const struct fixture *f, const void *got,
			uint32_t b, const void *want, int want_is_dtype)
{
	uint32_t d = f->s.layout.head_dim, h, i;
	double worst = 0;

	for (h = 0; h < f->s.q_heads; h++) {
		size_t r = ((size_t)b * f->s.q_heads + h) * d;
		double big = 0, err = 0;

		for (i = 0; i < d; i++) {
			double w = want_is_dtype ?
				   elem_get(want, r + i, f->c->dtype) :
				   ((const float *)want)[(size_t)h * d + i];

			big = fmax(big, fabs(w));
		}
		for (i = 0; i < d; i++) {
			double w = want_is_dtype ?
				   elem_get(want, r + i, f->c->dtype) :
				   ((const float *)want)[(size_t)h * d + i];
			double g = elem_get(got, r + i, f->c->dtype);

			if (isnan(g))
				return INFINITY;
			err = fmax(err, fabs(g - w));
		}
		worst = fmax(worst, big > 0 ? err / big : (err > 0 ? INFINITY : 0));
	}
	return worst;
}

START_TEST(test_cuda_attention_matches_ref_and_cublas)
{
	const struct gcase *c = &cases[_i];
	struct fixture f;
	unsigned char *got, *again, *ref;
	float *want;
	double tol = tolerance(c->dtype), e_ref = 0, e_blas = 0;
	uint32_t b;
	int rc;

	fixture_init(&f, c, _i);
	got = run_cuda(&f);
	again = run_cuda(&f);
	ck_assert_msg(memcmp(got, again, f.out_bytes) == 0,
		      "case %d: two runs on the same input differ", _i);

	ref = malloc(f.out_bytes);
	want = malloc((size_t)f.s.q_heads * c->head_dim * sizeof(float));
	ck_assert(ref && want);
	memset(ref, 0xff, f.out_bytes);
	rc = kvp_paged_attention_decode_ref(&f.s, ref, f.h_q, f.h_tables, c->ctx);
	ck_assert_int_eq(rc, 0);
	for (b = 0; b < BATCH; b++) {
		cublas_reference(&f, b, want);
		e_ref = fmax(e_ref, seq_error(&f, got, b, ref, 1));
		e_blas = fmax(e_blas, seq_error(&f, got, b, want, 0));
		/* and the C reference against cuBLAS, for the record */
		ck_assert_msg(seq_error(&f, ref, b, want, 0) < tol,
			      "case %d: C reference vs cuBLAS %g", _i,
			      seq_error(&f, ref, b, want, 0));
	}
	printf("case %2d %-4s G %2u D %3u bt %3u ctx %5u..: error vs ref %.2e, vs cuBLAS %.2e\n",
	       _i, c->dtype == KVP_DTYPE_F16 ? "f16" :
		   c->dtype == KVP_DTYPE_BF16 ? "bf16" : "f32",
	       c->group, c->head_dim, c->block_tokens, c->ctx[0], e_ref, e_blas);
	ck_assert_msg(e_ref < tol, "case %d: error vs C reference %g >= %g",
		      _i, e_ref, tol);
	ck_assert_msg(e_blas < tol, "case %d: error vs cuBLAS %g >= %g",
		      _i, e_blas, tol);

	free(want);
	free(ref);
	free(again);
	free(got);
	fixture_free(&f);
}
END_TEST

/* Rejected calls write nothing, launch nothing and leave no CUDA error. */
START_TEST(test_cuda_attention_checks_arguments)
{
	struct fixture f;
	struct kvp_attention_shape s;
	size_t ws_bytes;
	unsigned char *got, *poison;
	void *d_out, *ws;
	int rc;

	fixture_init(&f, &cases[1], 100);	/* 8195 tokens: needs a workspace */
	ws_bytes = kvp_paged_attention_workspace_bytes(&f.s);
	ck_assert_uint_gt(ws_bytes, 0);
	CUDA_OK(cudaMalloc(&d_out, f.out_bytes));
	CUDA_OK(cudaMalloc(&ws, ws_bytes + 16));
	CUDA_OK(cudaMemset(d_out, 0x5a, f.out_bytes));
	got = malloc(f.out_bytes);
	poison = malloc(f.out_bytes);
	ck_assert(got && poison);
	memset(poison, 0x5a, f.out_bytes);

#define CALL(shape, out, w, wb)						\
	kvp_paged_attention_decode_cuda((shape), (out), f.d_q, f.d_tables, \
					f.d_ctx, (w), (wb), stream)
	ck_assert_int_eq(CALL(NULL, d_out, ws, ws_bytes), -EINVAL);
	ck_assert_int_eq(CALL(&f.s, d_out, NULL, ws_bytes), -EINVAL);
	ck_assert_int_eq(CALL(&f.s, d_out, ws, ws_bytes - 1), -EINVAL);
	ck_assert_int_eq(CALL(&f.s, d_out, (char *)ws + 4, ws_bytes), -EINVAL);
	ck_assert_int_eq(CALL(&f.s, NULL, ws, ws_bytes), -EINVAL);
	ck_assert_int_eq(kvp_paged_attention_decode_cuda(&f.s, d_out, NULL,
			 f.d_tables, f.d_ctx, ws, ws_bytes, stream), -EINVAL);
	ck_assert_int_eq(kvp_paged_attention_decode_cuda(&f.s, d_out, f.d_q,
			 NULL, f.d_ctx, ws, ws_bytes, stream), -EINVAL);
	ck_assert_int_eq(kvp_paged_attention_decode_cuda(&f.s, d_out, f.d_q,
			 f.d_tables, NULL, ws, ws_bytes, stream), -EINVAL);
	s = f.s;
	s.dtype = KVP_DTYPE_FP8;
	ck_assert_int_eq(CALL(&s, d_out, ws, ws_bytes), -EINVAL);
	s = f.s;
	s.layout.head_dim = 96;
	ck_assert_int_eq(CALL(&s, d_out, ws, ws_bytes), -EINVAL);
	s = f.s;
	s.layout.block_tokens = 256;
	ck_assert_int_eq(CALL(&s, d_out, ws, ws_bytes), -EINVAL);
	s = f.s;
	s.q_heads = s.layout.kv_heads * 3 + 1;
	ck_assert_int_eq(CALL(&s, d_out, ws, ws_bytes), -EINVAL);
	s = f.s;
	s.layer = LAYERS;
	ck_assert_int_eq(CALL(&s, d_out, ws, ws_bytes), -EINVAL);
	s = f.s;
	s.max_blocks = 1;
	ck_assert_int_eq(CALL(&s, d_out, ws, ws_bytes), -EINVAL);
	s = f.s;
	s.batch = 0;
	ck_assert_int_eq(kvp_paged_attention_decode_cuda(&s, NULL, NULL, NULL,
			 NULL, NULL, 0, stream), 0);
#undef CALL
	ck_assert_int_eq(kvp_write_kv_cuda(&f.s.layout, KVP_DTYPE_FP8, LAYER,
			 f.d_q, f.d_q, (void *)f.d_tables, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_cuda(&f.s.layout, f.s.dtype, LAYERS,
			 f.d_q, f.d_q, (void *)f.d_tables, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_cuda(&f.s.layout, f.s.dtype, LAYER,
			 NULL, f.d_q, (void *)f.d_tables, 1, stream), -EINVAL);
	ck_assert_int_eq(kvp_write_kv_cuda(&f.s.layout, f.s.dtype, LAYER,
			 NULL, NULL, NULL, 0, stream), 0);

	CUDA_OK(cudaStreamSynchronize(stream));
	CUDA_OK(cudaGetLastError());
	CUDA_OK(cudaMemcpy(got, d_out, f.out_bytes, cudaMemcpyDeviceToHost));
	ck_assert_msg(memcmp(got, poison, f.out_bytes) == 0,
		      "a rejected call wrote the output");
	rc = kvp_paged_attention_decode_cuda(&f.s, d_out, f.d_q, f.d_tables,
					     f.d_ctx, ws, ws_bytes, stream);
	ck_assert_int_eq(rc, 0);
	CUDA_OK(cudaStreamSynchronize(stream));

	free(poison);
	free(got);
	cudaFree(ws);
	cudaFree(d_out);
	fixture_free(&f);
}
END_TEST

static void setup(void)
{
	CUDA_OK(cudaStreamCreate(&stream));
	CUBLAS_OK(cublasCreate(&blas));
	/* exact fp32 products: no TF32 in the reference */
	CUBLAS_OK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));
	CUBLAS_OK(cublasSetStream(blas, stream));
}

static void teardown(void)
{
	cublasDestroy(blas);
	cudaStreamDestroy(stream);
}

static Suite *cuda_attention_suite(void)
{
	Suite *s = suite_create("cuda_attention");
	TCase *tc = tcase_create("attention_cuda");
	int n = (int)(sizeof(cases) / sizeof(cases[0]));

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_cuda_attention_matches_ref_and_cublas, 0, n);
	tcase_add_test(tc, test_cuda_attention_checks_arguments);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return cuda_run_suite(cuda_attention_suite);
}
