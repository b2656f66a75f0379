/* SPDX-License-Identifier: MIT */
/*
 * model_cuda.cu - the GPU path of the example model (see model_cuda.h).
 *
 * One stream carries everything of a forward pass: the uploads of the
 * batch's tokens, positions, slots and block tables, the projections
 * (cublasSgemv per row), the element-wise kernels below, the kvpool
 * kernels on the pool's pages, and the download of the logits, after
 * which the stream is synchronized.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "model_cuda.h"

#define KV_DIM		(MODEL_KV_HEADS * MODEL_HEAD_DIM)
#define HALF		(MODEL_HEAD_DIM / 2)
#define NORM_THREADS	256u

struct model_cuda {
	cudaStream_t stream;
	cublasHandle_t blas;
	float *weights;			/* device copy of the host's block */
	struct model_cuda_weights w;	/* offsets into it */
	struct kvp_kv_layout layout;

	/* scratch, MODEL_MAX_ROWS rows each */
	float *x, *h, *q, *k, *v, *att, *gate, *up, *logits;
	uint32_t *tokens, *pos, *ctx;
	struct kvp_kv_slot *slots;
	uint64_t *tables;
	size_t tables_cap;		/* entries */
	void *workspace;		/* of the attention kernel */
	size_t workspace_bytes;
	float *rope_cos, *rope_sin;	/* [rope_len][HALF] */
	uint32_t rope_len;
};

/* cuda_ok() / blas_ok() - report a failed call on stderr. */
static bool cuda_ok(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return true;
	fprintf(stderr, "kvpool-model-server: %s: CUDA error %s: %s\n", what,
		cudaGetErrorName(e), cudaGetErrorString(e));
	return false;
}

static bool blas_ok(cublasStatus_t s, const char *what)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return true;
	fprintf(stderr, "kvpool-model-server: %s: cuBLAS status %d\n", what, (int)s);
	return false;
}

/* --- Element-wise kernels ------------------------------------------------ */

/* x[r] = embed[tokens[r]]; grid: rows. */
__global__ void embed_kernel(float *x, const float *embed, const uint32_t *tokens)
{
	const float *e = embed + (size_t)tokens[blockIdx.x] * MODEL_DIM;

	for (uint32_t i = threadIdx.x; i < MODEL_DIM; i += blockDim.x)
		x[(size_t)blockIdx.x * MODEL_DIM + i] = e[i];
}

/* y[r] = x[r] / rms(x[r]) * w; grid: rows, NORM_THREADS threads. Each
 * thread sums its elements in order, then a fixed tree: the same order
 * for every row of every batch. */
__global__ void rmsnorm_kernel(float *y, const float *x, const float *w)
{
	__shared__ float part[NORM_THREADS];
	const float *xr = x + (size_t)blockIdx.x * MODEL_DIM;
	float *yr = y + (size_t)blockIdx.x * MODEL_DIM;
	float s = 0.0f;

	for (uint32_t i = threadIdx.x; i < MODEL_DIM; i += NORM_THREADS)
		s += xr[i] * xr[i];
	part[threadIdx.x] = s;
	__syncthreads();
	for (uint32_t k = NORM_THREADS / 2; k > 0; k /= 2) {
		if (threadIdx.x < k)
			part[threadIdx.x] += part[threadIdx.x + k];
		__syncthreads();
	}
	s = 1.0f / sqrtf(part[0] / MODEL_DIM + MODEL_NORM_EPS);
	for (uint32_t i = threadIdx.x; i < MODEL_DIM; i += NORM_THREADS)
		yr[i] = xr[i] * s * w[i];
}

/* Rotate pairs (i, i + HALF) of each head of row r by the angles of
 * pos[r]; v is [rows][heads][HEAD_DIM]; grid: rows, heads x HALF threads. */
__global__ void rope_kernel(float *v, uint32_t heads, const uint32_t *pos,
			    const float *cosv, const float *sinv)
{
	const uint32_t h = threadIdx.x / HALF, i = threadIdx.x % HALF;
	const size_t at = (size_t)pos[blockIdx.x] * HALF + i;
	float *x = v + ((size_t)blockIdx.x * heads + h) * MODEL_HEAD_DIM;
	const float a = x[i], b = x[i + HALF];

	x[i] = a * cosv[at] - b * sinv[at];
	x[i + HALF] = a * sinv[at] + b * cosv[at];
}

/* gate = silu(gate) * up over n elements. */
__global__ void swiglu_kernel(float *gate, const float *up, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		float g = gate[i];

		gate[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

/* x += h over n elements. */
__global__ void add_kernel(float *x, const float *h, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] += h[i];
}

static unsigned blocks_of(size_t n, unsigned threads)
{
	return (unsigned)((n + threads - 1) / threads);
}

/* --- Set-up ---------------------------------------------------------------- */

void model_cuda_close(struct model_cuda *g)
{
	if (!g)
		return;
	if (g->blas)
		cublasDestroy(g->blas);
	if (g->stream)
		cudaStreamDestroy(g->stream);
	cudaFree(g->weights);
	cudaFree(g->x);
	cudaFree(g->h);
	cudaFree(g->q);
	cudaFree(g->k);
	cudaFree(g->v);
	cudaFree(g->att);
	cudaFree(g->gate);
	cudaFree(g->up);
	cudaFree(g->logits);
	cudaFree(g->tokens);
	cudaFree(g->pos);
	cudaFree(g->ctx);
	cudaFree(g->slots);
	cudaFree(g->tables);
	cudaFree(g->workspace);
	cudaFree(g->rope_cos);
	cudaFree(g->rope_sin);
	free(g);
}

/* dev_alloc() - n bytes of device memory into *p; false on failure. */
template <typename T> static bool dev_alloc(T **p, size_t n)
{
	return cudaMalloc((void **)p, n) == cudaSuccess;
}

int model_cuda_open(const struct model_cuda_weights *w, struct model_cuda **out,
		    char *err, size_t errlen)
{
	const size_t R = MODEL_MAX_ROWS;
	struct model_cuda *g;
	cudaError_t e;
	int ndev = 0;

	e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		snprintf(err, errlen, "no CUDA device answers (%s)",
			 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return -ENODEV;
	}
	g = (struct model_cuda *)calloc(1, sizeof(*g));
	if (!g) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	g->w = *w;
	g->layout = kvp_kv_layout_default(MODEL_LAYERS, MODEL_KV_HEADS, MODEL_HEAD_DIM,
					  MODEL_BLOCK_TOKENS);
	if (!dev_alloc(&g->weights, w->count * sizeof(float)) ||
	    !dev_alloc(&g->x, R * MODEL_DIM * sizeof(float)) ||
	    !dev_alloc(&g->h, R * MODEL_DIM * sizeof(float)) ||
	    !dev_alloc(&g->q, R * MODEL_DIM * sizeof(float)) ||
	    !dev_alloc(&g->att, R * MODEL_DIM * sizeof(float)) ||
	    !dev_alloc(&g->k, R * KV_DIM * sizeof(float)) ||
	    !dev_alloc(&g->v, R * KV_DIM * sizeof(float)) ||
	    !dev_alloc(&g->gate, R * MODEL_FFN * sizeof(float)) ||
	    !dev_alloc(&g->up, R * MODEL_FFN * sizeof(float)) ||
	    !dev_alloc(&g->logits, R * MODEL_VOCAB * sizeof(float)) ||
	    !dev_alloc(&g->tokens, R * sizeof(uint32_t)) ||
	    !dev_alloc(&g->pos, R * sizeof(uint32_t)) ||
	    !dev_alloc(&g->ctx, R * sizeof(uint32_t)) ||
	    !dev_alloc(&g->slots, R * sizeof(struct kvp_kv_slot))) {
		snprintf(err, errlen, "cudaMalloc of the model's weights and scratch "
			 "(%zu MiB) failed", (w->count * sizeof(float)) >> 20);
		model_cuda_close(g);
		return -ENOMEM;
	}
	if (!cuda_ok(cudaMemcpy(g->weights, w->base, w->count * sizeof(float),
				cudaMemcpyHostToDevice), "copying the weights") ||
	    !cuda_ok(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking),
		     "cudaStreamCreate") ||
	    !blas_ok(cublasCreate(&g->blas), "cublasCreate") ||
	    !blas_ok(cublasSetStream(g->blas, g->stream), "cublasSetStream") ||
	    /* no TF32, whatever NVIDIA_TF32_OVERRIDE says; no atomics */
	    !blas_ok(cublasSetMathMode(g->blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode") ||
	    !blas_ok(cublasSetAtomicsMode(g->blas, CUBLAS_ATOMICS_NOT_ALLOWED),
		     "cublasSetAtomicsMode")) {
		snprintf(err, errlen, "setting up CUDA and cuBLAS failed (see above)");
		model_cuda_close(g);
		return -EIO;
	}
	*out = g;
	return 0;
}

/* --- Forward pass ------------------------------------------------------- */

/* W() - a weight on the device by its offset. */
#define W(g, off) ((g)->weights + (off))

/*
 * project() - y[r] = w x[r] for r < n, w [out][in] row-major: one gemv of
 * the same shape per row, so a row's result never depends on the batch.
 * In cuBLAS's column-major terms w is an in x out matrix, and y = w^T x.
 */
static bool project(struct model_cuda *g, float *y, const float *x, size_t woff,
		    uint32_t n, uint32_t out, uint32_t in)
{
	const float one = 1.0f, zero = 0.0f;

	for (uint32_t r = 0; r < n; r++)
		if (!blas_ok(cublasSgemv(g->blas, CUBLAS_OP_T, (int)in, (int)out, &one,
					 W(g, woff), (int)in, x + (size_t)r * in, 1, &zero,
					 y + (size_t)r * out, 1), "cublasSgemv"))
			return false;
	return true;
}

/* upload() - the batch's per-row data and the RoPE tables it needs. */
static int upload(struct model_cuda *g, const struct model_cuda_batch *b)
{
	const size_t n = b->n, tb = (size_t)b->n * b->max_blocks;
	cudaStream_t s = g->stream;

	if (tb > g->tables_cap) {
		cudaFree(g->tables);
		g->tables = NULL;
		g->tables_cap = 0;
		if (!dev_alloc(&g->tables, tb * sizeof(uint64_t)))
			return -ENOMEM;
		g->tables_cap = tb;
	}
	if (b->rope_len > g->rope_len) {
		cudaFree(g->rope_cos);
		cudaFree(g->rope_sin);
		g->rope_cos = g->rope_sin = NULL;
		g->rope_len = 0;
		if (!dev_alloc(&g->rope_cos, (size_t)b->rope_len * HALF * sizeof(float)) ||
		    !dev_alloc(&g->rope_sin, (size_t)b->rope_len * HALF * sizeof(float)))
			return -ENOMEM;
		if (!cuda_ok(cudaMemcpy(g->rope_cos, b->rope_cos, (size_t)b->rope_len *
					HALF * sizeof(float), cudaMemcpyHostToDevice), "RoPE") ||
		    !cuda_ok(cudaMemcpy(g->rope_sin, b->rope_sin, (size_t)b->rope_len *
					HALF * sizeof(float), cudaMemcpyHostToDevice), "RoPE"))
			return -EIO;
		g->rope_len = b->rope_len;
	}
	if (!cuda_ok(cudaMemcpyAsync(g->tokens, b->tokens, n * sizeof(uint32_t),
				     cudaMemcpyHostToDevice, s), "upload") ||
	    !cuda_ok(cudaMemcpyAsync(g->pos, b->pos, n * sizeof(uint32_t),
				     cudaMemcpyHostToDevice, s), "upload") ||
	    !cuda_ok(cudaMemcpyAsync(g->ctx, b->ctx, n * sizeof(uint32_t),
				     cudaMemcpyHostToDevice, s), "upload") ||
	    !cuda_ok(cudaMemcpyAsync(g->slots, b->slots, n * sizeof(struct kvp_kv_slot),
				     cudaMemcpyHostToDevice, s), "upload") ||
	    !cuda_ok(cudaMemcpyAsync(g->tables, b->tables, tb * sizeof(uint64_t),
				     cudaMemcpyHostToDevice, s), "upload"))
		return -EIO;
	return 0;
}

/* layer() - attention and MLP of layer l for every row. */
static int layer(struct model_cuda *g, const struct model_cuda_batch *b, uint32_t l)
{
	const uint32_t n = b->n;
	const size_t xs = (size_t)n * MODEL_DIM, fs = (size_t)n * MODEL_FFN;
	struct kvp_attention_shape shape;
	cudaStream_t s = g->stream;
	size_t ws;
	int rc;

	memset(&shape, 0, sizeof(shape));
	shape.layout = g->layout;
	shape.dtype = MODEL_DTYPE;
	shape.layer = l;
	shape.batch = n;
	shape.q_heads = MODEL_Q_HEADS;
	shape.max_blocks = b->max_blocks;
	shape.max_context = b->max_context;
	shape.scale = 1.0f / sqrtf((float)MODEL_HEAD_DIM);
	ws = kvp_paged_attention_workspace_bytes(&shape);
	if (ws > g->workspace_bytes) {
		cudaFree(g->workspace);
		g->workspace = NULL;
		g->workspace_bytes = 0;
		if (!dev_alloc((char **)&g->workspace, ws))
			return -ENOMEM;
		g->workspace_bytes = ws;
	}

	rmsnorm_kernel<<<n, NORM_THREADS, 0, s>>>(g->h, g->x, W(g, g->w.layer[l].norm1));
	if (!project(g, g->q, g->h, g->w.layer[l].wq, n, MODEL_DIM, MODEL_DIM) ||
	    !project(g, g->k, g->h, g->w.layer[l].wk, n, KV_DIM, MODEL_DIM) ||
	    !project(g, g->v, g->h, g->w.layer[l].wv, n, KV_DIM, MODEL_DIM))
		return -EIO;
	rope_kernel<<<n, MODEL_Q_HEADS * HALF, 0, s>>>(g->q, MODEL_Q_HEADS, g->pos,
						       g->rope_cos, g->rope_sin);
	rope_kernel<<<n, MODEL_KV_HEADS * HALF, 0, s>>>(g->k, MODEL_KV_HEADS, g->pos,
							g->rope_cos, g->rope_sin);
	/* every row's K/V first: later rows of a prefill attend to them */
	rc = kvp_write_kv_cuda(&g->layout, MODEL_DTYPE, l, g->k, g->v, g->slots, n, s);
	if (rc < 0)
		return rc;
	rc = kvp_paged_attention_decode_cuda(&shape, g->att, g->q, g->tables, g->ctx,
					     g->workspace, g->workspace_bytes, s);
	if (rc < 0)
		return rc;
	if (!project(g, g->h, g->att, g->w.layer[l].wo, n, MODEL_DIM, MODEL_DIM))
		return -EIO;
	add_kernel<<<blocks_of(xs, 256), 256, 0, s>>>(g->x, g->h, xs);

	rmsnorm_kernel<<<n, NORM_THREADS, 0, s>>>(g->h, g->x, W(g, g->w.layer[l].norm2));
	if (!project(g, g->gate, g->h, g->w.layer[l].wg, n, MODEL_FFN, MODEL_DIM) ||
	    !project(g, g->up, g->h, g->w.layer[l].wu, n, MODEL_FFN, MODEL_DIM))
		return -EIO;
	swiglu_kernel<<<blocks_of(fs, 256), 256, 0, s>>>(g->gate, g->up, fs);
	if (!project(g, g->h, g->gate, g->w.layer[l].wd, n, MODEL_DIM, MODEL_FFN))
		return -EIO;
	add_kernel<<<blocks_of(xs, 256), 256, 0, s>>>(g->x, g->h, xs);
	return cuda_ok(cudaGetLastError(), "a kernel launch") ? 0 : -EIO;
}

int model_cuda_forward(struct model_cuda *g, const struct model_cuda_batch *b,
		       float *logits)
{
	const float one = 1.0f, zero = 0.0f;
	uint32_t r, l;
	int rc;

	if (b->n == 0)
		return 0;
	if (b->n > MODEL_MAX_ROWS || b->pos == NULL || b->rope_len < b->max_context)
		return -EINVAL;
	rc = upload(g, b);
	if (rc < 0)
		return rc;
	embed_kernel<<<b->n, 256, 0, g->stream>>>(g->x, W(g, g->w.embed), g->tokens);
	for (l = 0; l < MODEL_LAYERS; l++) {
		rc = layer(g, b, l);
		if (rc < 0)
			return rc;
	}
	rmsnorm_kernel<<<b->n, NORM_THREADS, 0, g->stream>>>(g->h, g->x, W(g, g->w.norm_f));
	for (r = 0; r < b->n; r++) {
		if (!b->want_next[r])
			continue;
		if (!blas_ok(cublasSgemv(g->blas, CUBLAS_OP_T, MODEL_DIM, MODEL_VOCAB, &one,
					 W(g, g->w.head), MODEL_DIM,
					 g->h + (size_t)r * MODEL_DIM, 1, &zero,
					 g->logits + (size_t)r * MODEL_VOCAB, 1), "cublasSgemv") ||
		    !cuda_ok(cudaMemcpyAsync(logits + (size_t)r * MODEL_VOCAB,
					     g->logits + (size_t)r * MODEL_VOCAB,
					     MODEL_VOCAB * sizeof(float),
					     cudaMemcpyDeviceToHost, g->stream), "logits"))
			return -EIO;
	}
	/* the pages are written once this returns: the caller may publish */
	return cuda_ok(cudaStreamSynchronize(g->stream), "the forward pass") ? 0 : -EIO;
}
