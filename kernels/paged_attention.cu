/* SPDX-License-Identifier: MIT */
/*
 * paged_attention.cu - paged attention, decode, on the GPU.
 *
 * Owns paged_attention_kernel, paged_attention_reduce_kernel and their
 * launcher kvp_paged_attention_decode_cuda(), the CUDA twin of
 * kvp_paged_attention_decode_ref() in paged_attention_ref.c (same shape
 * checks, same result within rounding; the tests hold one against the
 * other and both against cuBLAS).
 *
 * Work split (flash-decoding): a block serves one sequence, up to
 * ATT_GROUP query heads of one kv head, and one partition of
 * KVP_ATTENTION_PARTITION_TOKENS tokens. Serving the query heads of a kv
 * head together reads each K and V row once per group instead of once per
 * query head (GQA). A block:
 *   A. computes the logits of its tokens: LANES lanes per token, each with
 *      16-byte loads of its slice of the K row and its slice of the scaled
 *      query in registers, a shuffle sum across the lanes; logits to
 *      shared memory;
 *   B. takes the max and the sum of exp(logit - max) per query head (one
 *      warp per head), leaving exp(logit - max) in shared memory;
 *   C. accumulates p x V: each thread owns a 16-byte slice of the row and a
 *      stride of the tokens, then the slices are summed across threads.
 * A sequence of one partition writes its output directly; a longer one
 * writes the partition's max, sum and normalised output to the workspace,
 * and paged_attention_reduce_kernel combines the partitions. All of it is
 * fp32 after the loads; the output is rounded once, to nearest even.
 *
 * Every token's row is found through the block table, so K and V of one
 * block are one contiguous tile in the default layout (docs/kv-layout.md):
 * the lanes of a warp read consecutive 16-byte pieces of it.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kvpool_kernels.h"
#include "cuda_check.h"
#include "kern_check.h"

#define ATT_THREADS	128	/* threads per block */
#define ATT_WARPS	(ATT_THREADS / 32)
#define ATT_PART	KVP_ATTENTION_PARTITION_TOKENS
#define ATT_GROUP	8	/* query heads per block, at most */
#define ATT_UNROLL	4	/* rows in flight per thread */

/* What every block needs; passed by value. Offsets and strides are in
 * elements of the dtype. */
struct att_params {
	void *out;			/* [batch][q_heads][head_dim] */
	const void *q;			/* [batch][q_heads][head_dim] */
	const uint64_t *tables;		/* [batch][max_blocks] */
	const uint32_t *context_lens;	/* [batch] */
	float *ws_max;			/* [batch][q_heads][parts] */
	float *ws_sum;			/* [batch][q_heads][parts] */
	float *ws_out;			/* [batch][q_heads][parts][head_dim] */
	uint64_t layer_off, kv_stride, head_stride, token_stride;
	uint32_t q_heads, group, chunks, max_blocks, max_context;
	uint32_t bt_shift, parts;
	float scale;
};

/* Loads and stores of one element in fp32. */
template <typename T> struct att_elem;

template <> struct att_elem<float> {
	static __device__ __forceinline__ float load(float x) { return x; }
	static __device__ __forceinline__ float store(float x) { return x; }
};

template <> struct att_elem<__half> {
	static __device__ __forceinline__ float load(__half x)
	{
		return __half2float(x);
	}
	static __device__ __forceinline__ __half store(float x)
	{
		return __float2half_rn(x);
	}
};

template <> struct att_elem<__nv_bfloat16> {
	static __device__ __forceinline__ float load(__nv_bfloat16 x)
	{
		return __bfloat162float(x);
	}
	static __device__ __forceinline__ __nv_bfloat16 store(float x)
	{
		return __float2bfloat16_rn(x);
	}
};

/* The 16 / sizeof(T) elements of a 16-byte vector in fp32. */
template <typename T>
static __device__ __forceinline__ void att_unpack(const uint4 &v, float *f)
{
	const T *e = reinterpret_cast<const T *>(&v);

#pragma unroll
	for (int i = 0; i < (int)(16 / sizeof(T)); i++)
		f[i] = att_elem<T>::load(e[i]);
}

static __device__ __forceinline__ float att_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

static __device__ __forceinline__ float att_warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* The context a sequence is computed over: the GPU cannot refuse a
 * context_lens[b] above max_context, so it clamps (see the header). */
static __device__ __forceinline__ uint32_t att_context(const att_params &p,
						       uint32_t b)
{
	uint32_t ctx = p.context_lens[b];

	return ctx < p.max_context ? ctx : p.max_context;
}

static __device__ __forceinline__ uint32_t att_nparts(uint32_t ctx)
{
	uint32_t n = (ctx + ATT_PART - 1) / ATT_PART;

	return n ? n : 1;
}

/* Address of row (kv, token t) of the block's kv head; head_off holds the
 * layer and head offsets, kv_off 0 for K or kv_stride for V. */
template <typename T>
static __device__ __forceinline__ const uint4 *att_row(const att_params &p,
						       const uint64_t *table,
						       uint64_t head_off,
						       uint32_t t)
{
	const T *page = reinterpret_cast<const T *>(
		(uintptr_t)table[t >> p.bt_shift]);
	uint32_t off = t & ((1u << p.bt_shift) - 1);

	return reinterpret_cast<const uint4 *>(page + head_off +
					       off * p.token_stride);
}

/*
 * paged_attention_kernel - one partition of one sequence for up to G query
 * heads of one kv head. Grid: x = batch x kv_heads x chunks (chunks of G
 * query heads per kv head), y = partitions; ATT_THREADS threads.
 */
template <typename T, int D, int G>
__global__ void __launch_bounds__(ATT_THREADS)
paged_attention_kernel(const att_params p)
{
	constexpr int VE = 16 / sizeof(T);		/* elements per vector */
	constexpr int ROWV = D / VE;			/* vectors per row */
	constexpr int LANES = ROWV < 32 ? ROWV : 32;	/* lanes per K row */
	constexpr int VPL = ROWV / LANES;		/* K vectors per lane */
	constexpr int TPW = 32 / LANES;			/* K rows per warp step */
	constexpr int TL = ATT_THREADS / ROWV;		/* V rows per block step */

	__shared__ float s_p[G][ATT_PART];	/* logits, then exp(l - max) */
	__shared__ float s_acc[G][D];
	__shared__ float s_max[G], s_sum[G];

	const uint32_t per_seq = p.q_heads / p.group * p.chunks;
	const uint32_t b = blockIdx.x / per_seq;
	const uint32_t kvh = (blockIdx.x % per_seq) / p.chunks;
	const uint32_t chunk = (blockIdx.x % per_seq) % p.chunks;
	const uint32_t h0 = kvh * p.group + chunk * G;
	const uint32_t nh = p.group - chunk * G < G ? p.group - chunk * G : G;
	const uint32_t part = blockIdx.y;
	const uint32_t ctx = att_context(p, b);
	const uint32_t nparts = att_nparts(ctx);
	const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const uint64_t *table = p.tables + (uint64_t)b * p.max_blocks;
	const uint64_t head_off = p.layer_off + kvh * p.head_stride;
	uint32_t t0, n;

	if (part >= nparts)
		return;
	t0 = part * ATT_PART;
	n = ctx > t0 ? (ctx - t0 < ATT_PART ? ctx - t0 : ATT_PART) : 0;

	for (uint32_t i = threadIdx.x; i < G * D; i += ATT_THREADS)
		s_acc[i / D][i % D] = 0.0f;

	/* A. logits */
	{
		const uint32_t sub = lane % LANES;
		float qr[G][VPL * VE];

#pragma unroll
		for (int g = 0; g < G; g++) {
			const T *qrow = static_cast<const T *>(p.q) +
				((uint64_t)b * p.q_heads + h0 + g) * D;
#pragma unroll
			for (int j = 0; j < VPL; j++)
#pragma unroll
				for (int e = 0; e < VE; e++)
					qr[g][j * VE + e] = (uint32_t)g < nh ?
						att_elem<T>::load(qrow[(j * LANES + sub) * VE + e]) *
						p.scale : 0.0f;
		}

		for (uint32_t base = warp * TPW; base < n;
		     base += ATT_WARPS * TPW * ATT_UNROLL) {
			uint4 kv[ATT_UNROLL][VPL];

#pragma unroll
			for (int u = 0; u < ATT_UNROLL; u++) {
				uint32_t i = base + u * ATT_WARPS * TPW + lane / LANES;

				if (i < n) {
					const uint4 *row = att_row<T>(p, table,
							head_off, t0 + i);
#pragma unroll
					for (int j = 0; j < VPL; j++)
						kv[u][j] = row[j * LANES + sub];
				} else {
#pragma unroll
					for (int j = 0; j < VPL; j++)
						kv[u][j] = make_uint4(0, 0, 0, 0);
				}
			}
#pragma unroll
			for (int u = 0; u < ATT_UNROLL; u++) {
				uint32_t i = base + u * ATT_WARPS * TPW + lane / LANES;
				float dot[G];

#pragma unroll
				for (int g = 0; g < G; g++)
					dot[g] = 0.0f;
#pragma unroll
				for (int j = 0; j < VPL; j++) {
					float k[VE];

					att_unpack<T>(kv[u][j], k);
#pragma unroll
					for (int g = 0; g < G; g++)
#pragma unroll
						for (int e = 0; e < VE; e++)
							dot[g] += qr[g][j * VE + e] * k[e];
				}
#pragma unroll
				for (int g = 0; g < G; g++)
#pragma unroll
					for (int o = LANES / 2; o > 0; o /= 2)
						dot[g] += __shfl_xor_sync(0xffffffffu,
									  dot[g], o);
				if (sub == 0 && i < n)
#pragma unroll
					for (int g = 0; g < G; g++)
						s_p[g][i] = dot[g];
			}
		}
	}
	__syncthreads();

	/* B. max and sum per query head, one warp per head */
	for (uint32_t g = warp; g < nh; g += ATT_WARPS) {
		float m = -INFINITY, sum = 0.0f;

		for (uint32_t i = lane; i < n; i += 32)
			m = fmaxf(m, s_p[g][i]);
		m = att_warp_max(m);
		for (uint32_t i = lane; i < n; i += 32) {
			float e = expf(s_p[g][i] - m);

			s_p[g][i] = e;
			sum += e;
		}
		sum = att_warp_sum(sum);
		if (lane == 0) {
			s_max[g] = m;
			s_sum[g] = sum;
		}
	}
	__syncthreads();

	/* C. p x V: thread owns vector `slice` of the row, rows tl, tl + TL... */
	{
		const uint32_t slice = threadIdx.x % ROWV;
		const uint32_t tl = threadIdx.x / ROWV;
		float acc[G][VE];

#pragma unroll
		for (int g = 0; g < G; g++)
#pragma unroll
			for (int e = 0; e < VE; e++)
				acc[g][e] = 0.0f;

		for (uint32_t base = tl; base < n; base += TL * ATT_UNROLL) {
			uint4 vv[ATT_UNROLL];

#pragma unroll
			for (int u = 0; u < ATT_UNROLL; u++) {
				uint32_t i = base + u * TL;

				vv[u] = i < n ? att_row<T>(p, table,
						head_off + p.kv_stride, t0 + i)[slice] :
						make_uint4(0, 0, 0, 0);
			}
#pragma unroll
			for (int u = 0; u < ATT_UNROLL; u++) {
				uint32_t i = base + u * TL;
				float v[VE];

				if (i >= n)
					break;
				att_unpack<T>(vv[u], v);
#pragma unroll
				for (int g = 0; g < G; g++) {
					float pg = s_p[g][i];

#pragma unroll
					for (int e = 0; e < VE; e++)
						acc[g][e] += pg * v[e];
				}
			}
		}
		/* Lanes ROWV apart in a warp hold the same slice. */
#pragma unroll
		for (int o = 16; o >= ROWV; o /= 2)
#pragma unroll
			for (int g = 0; g < G; g++)
#pragma unroll
				for (int e = 0; e < VE; e++)
					acc[g][e] += __shfl_xor_sync(0xffffffffu,
								     acc[g][e], o);
		/* Then warp by warp into shared memory: deterministic order. */
		for (uint32_t w = 0; w < ATT_WARPS; w++) {
			if (w == warp && (ROWV >= 32 || lane < (uint32_t)ROWV))
#pragma unroll
				for (int g = 0; g < G; g++)
#pragma unroll
					for (int e = 0; e < VE; e++)
						s_acc[g][slice * VE + e] += acc[g][e];
			__syncthreads();
		}
	}

	/* Out: directly, or the partition's share to the workspace. */
	for (uint32_t i = threadIdx.x; i < nh * D; i += ATT_THREADS) {
		uint32_t g = i / D, d = i % D;
		uint64_t row = (uint64_t)b * p.q_heads + h0 + g;
		float sum = s_sum[g];
		float v = sum > 0.0f ? s_acc[g][d] / sum : 0.0f;

		if (nparts == 1) {
			static_cast<T *>(p.out)[row * D + d] = att_elem<T>::store(v);
		} else {
			uint64_t w = row * p.parts + part;

			p.ws_out[w * D + d] = v;
			if (d == 0) {
				p.ws_max[w] = s_max[g];
				p.ws_sum[w] = sum;
			}
		}
	}
}

/* The sum of v over the block; every thread gets it. s holds ATT_WARPS
 * floats; the caller synchronizes before s is used again. */
static __device__ float att_block_reduce(float v, float *s, bool is_max)
{
	uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;

	v = is_max ? att_warp_max(v) : att_warp_sum(v);
	if (lane == 0)
		s[warp] = v;
	__syncthreads();
	v = s[0];
	for (int w = 1; w < ATT_WARPS; w++)
		v = is_max ? fmaxf(v, s[w]) : v + s[w];
	return v;
}

/*
 * paged_attention_reduce_kernel - combine the partitions of one sequence
 * and query head: out = sum_p w_p o_p / sum_p w_p with w_p = sum_p x
 * exp(max_p - max). Grid: x = batch x q_heads; ATT_THREADS threads; dynamic
 * shared memory: one float per partition.
 */
template <typename T, int D>
__global__ void __launch_bounds__(ATT_THREADS)
paged_attention_reduce_kernel(const att_params p)
{
	extern __shared__ float s_w[];		/* [parts] */
	__shared__ float s_red[2][ATT_WARPS];
	const uint32_t b = blockIdx.x / p.q_heads;
	const uint64_t row = blockIdx.x;
	const uint32_t nparts = att_nparts(att_context(p, b));
	const float *mx = p.ws_max + row * p.parts;
	const float *sm = p.ws_sum + row * p.parts;
	const float *po = p.ws_out + row * p.parts * D;
	float m = -INFINITY, total = 0.0f;

	if (nparts == 1)	/* written by paged_attention_kernel */
		return;
	for (uint32_t i = threadIdx.x; i < nparts; i += ATT_THREADS)
		m = fmaxf(m, mx[i]);
	m = att_block_reduce(m, s_red[0], true);
	for (uint32_t i = threadIdx.x; i < nparts; i += ATT_THREADS) {
		float w = sm[i] * expf(mx[i] - m);

		s_w[i] = w;
		total += w;
	}
	total = att_block_reduce(total, s_red[1], false);	/* syncs s_w too */
	for (uint32_t d = threadIdx.x; d < D; d += ATT_THREADS) {
		float acc = 0.0f;

		for (uint32_t i = 0; i < nparts; i++)
			acc += s_w[i] * po[(uint64_t)i * D + d];
		static_cast<T *>(p.out)[row * D + d] =
			att_elem<T>::store(total > 0.0f ? acc / total : 0.0f);
	}
}

/* att_launch() - both kernels for one dtype, head size and group size. */
template <typename T, int D, int G>
static int att_launch(const struct kvp_attention_shape *s, att_params &p,
		      cudaStream_t stream)
{
	dim3 grid(s->batch * s->layout.kv_heads * p.chunks, p.parts, 1);
	int rc;

	/* Drop a stale error of an earlier, unrelated call: only this
	 * launch's error is ours to report. Sticky errors come back anyway. */
	(void)cudaGetLastError();
	paged_attention_kernel<T, D, G><<<grid, ATT_THREADS, 0, stream>>>(p);
	rc = cuda_check_launch("paged_attention_kernel launch");
	if (rc || p.parts == 1)
		return rc;
	paged_attention_reduce_kernel<T, D><<<s->batch * s->q_heads,
		ATT_THREADS, p.parts * sizeof(float), stream>>>(p);
	return cuda_check_launch("paged_attention_reduce_kernel launch");
}

/* att_group() - pick the group size: the smallest power of two that holds
 * the query heads of a kv head, at most ATT_GROUP. */
template <typename T, int D>
static int att_group(const struct kvp_attention_shape *s, att_params &p,
		     cudaStream_t stream)
{
	uint32_t g = p.group >= ATT_GROUP ? ATT_GROUP :
		     p.group > 2 ? 4 : p.group;

	p.chunks = (p.group + g - 1) / g;
	switch (g) {
	case 1:
		return att_launch<T, D, 1>(s, p, stream);
	case 2:
		return att_launch<T, D, 2>(s, p, stream);
	case 4:
		return att_launch<T, D, 4>(s, p, stream);
	default:
		return att_launch<T, D, ATT_GROUP>(s, p, stream);
	}
}

template <typename T>
static int att_head_dim(const struct kvp_attention_shape *s, att_params &p,
			cudaStream_t stream)
{
	switch (s->layout.head_dim) {
	case 64:
		return att_group<T, 64>(s, p, stream);
	case 128:
		return att_group<T, 128>(s, p, stream);
	default:	/* 256: kern_check_layout() allows no other */
		return att_group<T, 256>(s, p, stream);
	}
}

/*
 * kvp_paged_attention_decode_cuda() - the launcher; see kvpool_kernels.h.
 *
 *   out,          // [batch][q_heads][head_dim], device memory
 *   q,            // [batch][q_heads][head_dim], device memory
 *   block_tables, // [batch][max_blocks] device page addresses, device memory
 *   context_lens, // [batch], device memory
 *   workspace,    // [workspace_bytes], device memory, 16-byte aligned
 *
 * Checks the shape as kvp_paged_attention_decode_ref() does, launches on
 * stream and returns without waiting: every buffer must stay valid until
 * the stream has passed the kernels. Returns 0, -EINVAL or -EIO.
 */
extern "C" KVP_KERNEL_API int kvp_paged_attention_decode_cuda(const struct kvp_attention_shape *shape,
							      void *out, const void *q,
							      const uint64_t *block_tables,
							      const uint32_t *context_lens,
							      void *workspace,
							      size_t workspace_bytes,
							      struct CUstream_st *stream)
{
	const struct kvp_attention_shape *s = shape;
	size_t need;
	att_params p;
	uint64_t per_head;
	int rc;

	rc = kern_check_attention(s);
	if (rc)
		return rc;
	if (s->batch == 0)
		return 0;
	if (!out || !q || !block_tables || !context_lens)
		return -EINVAL;
	need = kvp_paged_attention_workspace_bytes(s);
	if (need && (!workspace || workspace_bytes < need ||
		     (uintptr_t)workspace % 16 != 0))
		return -EINVAL;
	/* grid.x = batch x kv_heads x chunks must fit 2^31 - 1 */
	if ((uint64_t)s->batch * s->q_heads > 0x7fffffffu)
		return -EINVAL;

	p.out = out;
	p.q = q;
	p.tables = block_tables;
	p.context_lens = context_lens;
	p.parts = kern_attention_partitions(s->max_context);
	per_head = (uint64_t)s->batch * s->q_heads * p.parts;
	p.ws_max = static_cast<float *>(workspace);
	p.ws_sum = p.ws_max ? p.ws_max + per_head : NULL;
	p.ws_out = p.ws_max ? p.ws_sum + per_head : NULL;
	p.layer_off = s->layer * s->layout.layer_stride;
	p.kv_stride = s->layout.kv_stride;
	p.head_stride = s->layout.head_stride;
	p.token_stride = s->layout.token_stride;
	p.q_heads = s->q_heads;
	p.group = s->q_heads / s->layout.kv_heads;
	p.chunks = 1;
	p.max_blocks = s->max_blocks;
	p.max_context = s->max_context;
	p.bt_shift = (uint32_t)__builtin_ctz(s->layout.block_tokens);
	p.scale = s->scale;

	switch (s->dtype) {
	case KVP_DTYPE_F16:
		return att_head_dim<__half>(s, p, stream);
	case KVP_DTYPE_BF16:
		return att_head_dim<__nv_bfloat16>(s, p, stream);
	default:	/* F32: kern_check_layout() allows no other */
		return att_head_dim<float>(s, p, stream);
	}
}
