/* SPDX-License-Identifier: MIT */
/*
 * kernel_bench.c - achieved memory bandwidth of the KV kernels.
 *
 * Measures, on the first CUDA device, a device-to-device cudaMemcpy (the
 * ceiling), then kvp_paged_attention_decode_cuda() and
 * kvp_copy_pages_cuda(), and prints one Markdown table: for each kernel
 * and shape the time per call, the bytes it must move divided by that
 * time, and that bandwidth as a fraction of the cudaMemcpy's, all from the
 * same run on the same device.
 *
 * Shapes: a Llama-3.1-8B-like namespace in fp16 (8 kv heads, 32 query
 * heads, head_dim 128); block_tokens 16 and 64; contexts 1k to 32k;
 * batch 1 to 64. Pages are shuffled over one slab, as a pool that has run
 * a while hands them out. Bytes counted for the decode: K and V of the
 * layer for every context token (q and out are noise). For copy_pages:
 * every page read once and written once.
 *
 * Not a test: it asserts nothing and `make check` only builds it. Run by
 * tests/gpu/device-check.sh; exits 77 where no CUDA device answers, 1 on
 * a CUDA or kernel error. Meant to take well under a minute on an
 * H100/H200 (about 50 shapes at >= 50 ms each); not yet timed on one.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kvpool_kernels.h"

#define EXIT_SKIP	77
#define LAYERS		2	/* layer 1 is read: pages are strided */
#define KV_HEADS	8
#define Q_HEADS		32
#define HEAD_DIM	128
#define MAX_BATCH	64
#define MAX_CONTEXT	32768
#define MIN_MS		50.0f	/* time each shape at least this long */

#define CUDA_TRY(call)							\
	do {								\
		cudaError_t err_ = (call);				\
		if (err_ != cudaSuccess) {				\
			fprintf(stderr, "kernel_bench: %s: %s\n", #call, \
				cudaGetErrorString(err_));		\
			exit(EXIT_FAILURE);				\
		}							\
	} while (0)

static cudaStream_t stream;
static cudaEvent_t ev_start, ev_stop;
static uint64_t rng_state = 0x62656e6368ULL;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

/* A call to time: returns 0 or a negative errno. */
typedef int (*bench_fn)(void *arg);

/* Milliseconds per call of fn: a warm-up, then enough calls to fill
 * MIN_MS, timed with events on the stream. */
static float time_ms(bench_fn fn, void *arg)
{
	int iters = 1, i;
	float ms = 0;

	for (;;) {
		if (fn(arg) != 0) {
			fprintf(stderr, "kernel_bench: kernel call failed\n");
			exit(EXIT_FAILURE);
		}
		CUDA_TRY(cudaEventRecord(ev_start, stream));
		for (i = 0; i < iters; i++)
			if (fn(arg) != 0)
				exit(EXIT_FAILURE);
		CUDA_TRY(cudaEventRecord(ev_stop, stream));
		CUDA_TRY(cudaEventSynchronize(ev_stop));
		CUDA_TRY(cudaEventElapsedTime(&ms, ev_start, ev_stop));
		if (ms >= MIN_MS || iters >= 1 << 16)
			return ms / (float)iters;
		iters = ms > 0.5f ? (int)(iters * MIN_MS * 1.2f / ms) + 1 :
				    iters * 16;
	}
}

struct memcpy_arg {
	void *dst;
	const void *src;
	size_t bytes;
};

static int run_memcpy(void *arg)
{
	struct memcpy_arg *m = arg;

	return cudaMemcpyAsync(m->dst, m->src, m->bytes,
			       cudaMemcpyDeviceToDevice, stream) == cudaSuccess ?
	       0 : -EIO;
}

struct attn_arg {
	struct kvp_attention_shape s;
	void *out, *q, *ws;
	size_t ws_bytes;
	uint64_t *tables;
	uint32_t *ctx;
};

static int run_attention(void *arg)
{
	struct attn_arg *a = arg;

	return kvp_paged_attention_decode_cuda(&a->s, a->out, a->q, a->tables,
					       a->ctx, a->ws, a->ws_bytes, stream);
}

struct copy_arg {
	void *slab;
	size_t page_bytes;
	struct kvp_copy_pair *pairs;
	size_t n;
};

static int run_copy(void *arg)
{
	struct copy_arg *c = arg;

	return kvp_copy_pages_cuda(c->slab, c->page_bytes, c->slab,
				   c->page_bytes, c->page_bytes, c->pairs, c->n,
				   stream);
}

static void row(const char *op, uint32_t bt, const char *ctx, uint32_t batch,
		float ms, double bytes, double ceiling)
{
	double gbs = bytes / (ms * 1e-3) / 1e9;

	printf("| %-13s | %3u | %6s | %5u | %9.1f | %7.0f | %5.1f%% |\n", op, bt,
	       ctx, batch, ms * 1e3, gbs, 100.0 * gbs / ceiling);
}

/* Shuffled page addresses of a slab: [pages]. */
static uint64_t *shuffled_pages(unsigned char *slab, size_t pages,
				size_t page_bytes)
{
	uint64_t *order = malloc(pages * sizeof(*order));
	size_t i;

	if (!order)
		exit(EXIT_FAILURE);
	for (i = 0; i < pages; i++)
		order[i] = (uint64_t)(uintptr_t)(slab + i * page_bytes);
	for (i = pages - 1; i > 0; i--) {
		size_t j = (size_t)(rng_next() % (i + 1));
		uint64_t t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	return order;
}

static void bench_attention(uint32_t bt, double ceiling)
{
	static const uint32_t contexts[] = { 1024, 4096, 8192, 16384, 32768 };
	static const uint32_t batches[] = { 1, 8, 32, 64 };
	struct kvp_kv_layout l = kvp_kv_layout_default(LAYERS, KV_HEADS,
						       HEAD_DIM, bt);
	size_t page_bytes = l.page_elems * 2;
	size_t max_blocks = MAX_CONTEXT / bt;
	size_t pages = MAX_BATCH * max_blocks;
	size_t ci, bi, i;
	uint64_t *order, *tables;
	unsigned char *slab;
	struct attn_arg a;
	uint32_t ctx[MAX_BATCH];

	CUDA_TRY(cudaMalloc((void **)&slab, pages * page_bytes));
	CUDA_TRY(cudaMemset(slab, 0x11, pages * page_bytes));	/* small fp16 */
	order = shuffled_pages(slab, pages, page_bytes);
	memset(&a, 0, sizeof(a));
	a.s.layout = l;
	a.s.dtype = KVP_DTYPE_F16;
	a.s.layer = 1;
	a.s.q_heads = Q_HEADS;
	a.s.max_blocks = (uint32_t)max_blocks;
	a.s.scale = 0.088f;
	a.s.batch = MAX_BATCH;
	a.s.max_context = MAX_CONTEXT;
	a.ws_bytes = kvp_paged_attention_workspace_bytes(&a.s);
	CUDA_TRY(cudaMalloc(&a.ws, a.ws_bytes));
	CUDA_TRY(cudaMalloc(&a.q, (size_t)MAX_BATCH * Q_HEADS * HEAD_DIM * 2));
	CUDA_TRY(cudaMalloc(&a.out, (size_t)MAX_BATCH * Q_HEADS * HEAD_DIM * 2));
	CUDA_TRY(cudaMemset(a.q, 0x22, (size_t)MAX_BATCH * Q_HEADS * HEAD_DIM * 2));
	CUDA_TRY(cudaMalloc((void **)&a.tables, pages * sizeof(uint64_t)));
	CUDA_TRY(cudaMalloc((void **)&a.ctx, sizeof(ctx)));
	/* sequence b owns pages [b x max_blocks, (b + 1) x max_blocks) of
	 * the shuffled order */
	tables = order;
	CUDA_TRY(cudaMemcpy(a.tables, tables, pages * sizeof(uint64_t),
			    cudaMemcpyHostToDevice));

	for (ci = 0; ci < sizeof(contexts) / sizeof(contexts[0]); ci++) {
		for (bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
			char label[16];
			double bytes;
			float ms;

			for (i = 0; i < MAX_BATCH; i++)
				ctx[i] = contexts[ci];
			CUDA_TRY(cudaMemcpy(a.ctx, ctx, sizeof(ctx),
					    cudaMemcpyHostToDevice));
			a.s.batch = batches[bi];
			a.s.max_context = contexts[ci];
			ms = time_ms(run_attention, &a);
			bytes = (double)batches[bi] * contexts[ci] * KV_HEADS *
				HEAD_DIM * 2 /* K, V */ * 2 /* fp16 */;
			snprintf(label, sizeof(label), "%uk", contexts[ci] / 1024);
			row("decode", bt, label, batches[bi], ms, bytes, ceiling);
		}
	}
	cudaFree(a.ctx);
	cudaFree(a.tables);
	cudaFree(a.out);
	cudaFree(a.q);
	cudaFree(a.ws);
	free(order);
	cudaFree(slab);
}

/* Copy n whole pages (all layers, as CoW does) to distinct free pages. */
static void bench_copy(uint32_t bt, double ceiling)
{
	static const size_t counts[] = { 1, 8, 64, 512 };
	/* Llama-3.1-8B: 32 layers; pages of 2 MiB (bt 16) or 8 MiB (bt 64) */
	struct kvp_kv_layout l = kvp_kv_layout_default(32, KV_HEADS, HEAD_DIM, bt);
	size_t page_bytes = l.page_elems * 2;
	size_t pages = 2 * counts[3], i, ci;
	struct kvp_copy_pair *pairs, *d_pairs;
	struct copy_arg c;
	void *slab;

	CUDA_TRY(cudaMalloc(&slab, pages * page_bytes));
	CUDA_TRY(cudaMemset(slab, 0x33, pages * page_bytes));
	pairs = malloc(counts[3] * sizeof(*pairs));
	if (!pairs)
		exit(EXIT_FAILURE);
	for (i = 0; i < counts[3]; i++) {
		pairs[i].src = i;
		pairs[i].dst = counts[3] + (i * 7919) % counts[3];
	}
	CUDA_TRY(cudaMalloc((void **)&d_pairs, counts[3] * sizeof(*pairs)));
	CUDA_TRY(cudaMemcpy(d_pairs, pairs, counts[3] * sizeof(*pairs),
			    cudaMemcpyHostToDevice));
	c.slab = slab;
	c.page_bytes = page_bytes;
	c.pairs = d_pairs;
	for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		float ms;

		c.n = counts[ci];
		ms = time_ms(run_copy, &c);
		row("copy_pages", bt, "-", (uint32_t)c.n, ms,
		    2.0 * (double)c.n * page_bytes, ceiling);
	}
	cudaFree(d_pairs);
	free(pairs);
	cudaFree(slab);
}

int main(void)
{
	struct cudaDeviceProp prop;
	struct memcpy_arg m;
	cudaError_t err;
	int count = 0;
	double ceiling;
	float ms;

	err = cudaGetDeviceCount(&count);
	if (err != cudaSuccess || count == 0) {
		printf("SKIP: no CUDA device answers (cudaGetDeviceCount: %s)\n",
		       err != cudaSuccess ? cudaGetErrorString(err) :
					    "0 devices");
		return EXIT_SKIP;
	}
	CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
	CUDA_TRY(cudaStreamCreate(&stream));
	CUDA_TRY(cudaEventCreate(&ev_start));
	CUDA_TRY(cudaEventCreate(&ev_stop));

	m.bytes = (size_t)1 << 30;
	CUDA_TRY(cudaMalloc(&m.dst, m.bytes));
	CUDA_TRY(cudaMalloc((void **)&m.src, m.bytes));
	CUDA_TRY(cudaMemset(m.dst, 0, m.bytes));
	CUDA_TRY(cudaMemset((void *)m.src, 1, m.bytes));
	ms = time_ms(run_memcpy, &m);
	ceiling = 2.0 * (double)m.bytes / (ms * 1e-3) / 1e9;	/* read + write */
	cudaFree(m.dst);
	cudaFree((void *)m.src);

	printf("## KV kernels on %s\n\n", prop.name);
	printf("cudaMemcpy device to device, 1 GiB: %.0f GB/s (read + write), "
	       "the 100%% of the last column.\n", ceiling);
	printf("decode: fp16, %d kv heads, %d query heads, head_dim %d, "
	       "layer 1 of %d; bytes = K and V of every context token.\n"
	       "copy_pages: whole 32-layer pages; bytes = read + write.\n\n",
	       KV_HEADS, Q_HEADS, HEAD_DIM, LAYERS);
	printf("| op            |  bt | context| batch | time (us) |    GB/s | of memcpy |\n");
	printf("|---------------|-----|--------|-------|-----------|---------|-----------|\n");
	bench_attention(16, ceiling);
	bench_attention(64, ceiling);
	bench_copy(16, ceiling);
	bench_copy(64, ceiling);

	cudaEventDestroy(ev_stop);
	cudaEventDestroy(ev_start);
	cudaStreamDestroy(stream);
	return EXIT_SUCCESS;
}
