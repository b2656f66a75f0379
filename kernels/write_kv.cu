/* SPDX-License-Identifier: MIT */
/*
 * write_kv.cu - writing new tokens' K and V into pages on the GPU.
 *
 * Owns write_kv_kernel and its launcher kvp_write_kv_cuda(), the CUDA twin
 * of kvp_write_kv_ref() in write_kv_ref.c (same shape checks, same bytes
 * written; the tests hold one against the other).
 *
 * It is a scatter copy, the same for every dtype: a block takes a token
 * (grid-stride over tokens) and its threads copy the token's kv_heads K
 * rows and V rows, head_dim x dtype size bytes each, in units of the
 * widest of 16, 8, 4, 2 or 1 bytes that the key and value pointers allow
 * (pages and page strides are 16-byte multiples by contract). Reads of a
 * token's rows are contiguous; writes are contiguous per row.
 */
#include <errno.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kvpool_kernels.h"
#include "cuda_check.h"
#include "kern_check.h"

#define WKV_THREADS	128	/* threads per block */
#define WKV_GRID_MAX	65535	/* blocks, at most; then grid-stride */

/* Byte offsets of the layout, for one dtype. */
struct wkv_params {
	const unsigned char *key;	/* [ntokens][kv_heads][row_bytes] */
	const unsigned char *value;	/* [ntokens][kv_heads][row_bytes] */
	const struct kvp_kv_slot *slots;	/* [ntokens] */
	uint64_t layer_off, kv_stride, head_stride, token_stride;	/* bytes */
	uint32_t ntokens, kv_heads, row_units, block_tokens;
};

/*
 * write_kv_kernel - copy each token's rows in units of U. Grid: x blocks
 * over the tokens; WKV_THREADS threads over kv_heads x row_units units.
 */
template <typename U>
__global__ void __launch_bounds__(WKV_THREADS)
write_kv_kernel(const wkv_params p)
{
	const uint32_t units = p.kv_heads * p.row_units;

	for (uint32_t t = blockIdx.x; t < p.ntokens; t += gridDim.x) {
		const struct kvp_kv_slot slot = p.slots[t];
		const U *k = reinterpret_cast<const U *>(p.key) +
			     (uint64_t)t * units;
		const U *v = reinterpret_cast<const U *>(p.value) +
			     (uint64_t)t * units;
		unsigned char *base;

		if (slot.page == 0 || slot.offset >= p.block_tokens)
			continue;	/* padding, or a slot the ref refuses */
		base = reinterpret_cast<unsigned char *>((uintptr_t)slot.page) +
		       p.layer_off + slot.offset * p.token_stride;
		for (uint32_t i = threadIdx.x; i < units; i += blockDim.x) {
			uint32_t h = i / p.row_units, u = i % p.row_units;
			U *dst = reinterpret_cast<U *>(base + h * p.head_stride) + u;

			dst[0] = k[i];
			reinterpret_cast<U *>(reinterpret_cast<unsigned char *>(dst) +
					      p.kv_stride)[0] = v[i];
		}
	}
}

template <typename U>
static int wkv_launch(wkv_params &p, uint64_t row_bytes, cudaStream_t stream)
{
	unsigned int blocks = p.ntokens < WKV_GRID_MAX ? p.ntokens : WKV_GRID_MAX;

	p.row_units = (uint32_t)(row_bytes / sizeof(U));
	/* Drop a stale error of an earlier, unrelated call: only this
	 * launch's error is ours to report. Sticky errors come back anyway. */
	(void)cudaGetLastError();
	write_kv_kernel<U><<<blocks, WKV_THREADS, 0, stream>>>(p);
	return cuda_check_launch("write_kv_kernel launch");
}

/*
 * kvp_write_kv_cuda() - the launcher; see kvpool_kernels.h.
 *
 *   key,   // [ntokens][kv_heads][head_dim], device memory
 *   value, // [ntokens][kv_heads][head_dim], device memory
 *   slots, // [ntokens] device page addresses, device memory
 *
 * Checks the arguments as kvp_write_kv_ref() does (except the slot
 * offsets, which live on the device: a slot past the block is skipped),
 * launches on stream and returns without waiting. Returns 0, -EINVAL or
 * -EIO.
 */
extern "C" KVP_KERNEL_API int kvp_write_kv_cuda(const struct kvp_kv_layout *layout,
						uint32_t dtype, uint32_t layer,
						const void *key, const void *value,
						const struct kvp_kv_slot *slots,
						uint32_t ntokens, struct CUstream_st *stream)
{
	const struct kvp_kv_layout *l = layout;
	uint64_t esize, row_bytes;
	uintptr_t align;
	wkv_params p;
	int rc;

	rc = kern_check_layout(l, dtype, layer);
	if (rc)
		return rc;
	if (ntokens == 0)
		return 0;
	if (!key || !value || !slots)
		return -EINVAL;

	esize = kern_dtype_size(dtype);
	row_bytes = l->head_dim * esize;
	p.key = static_cast<const unsigned char *>(key);
	p.value = static_cast<const unsigned char *>(value);
	p.slots = slots;
	p.layer_off = layer * l->layer_stride * esize;
	p.kv_stride = l->kv_stride * esize;
	p.head_stride = l->head_stride * esize;
	p.token_stride = l->token_stride * esize;
	p.ntokens = ntokens;
	p.kv_heads = l->kv_heads;
	p.block_tokens = l->block_tokens;

	/* The lowest set bit of the inputs' addresses (rows are 128 bytes
	 * at least) picks the unit. */
	align = (uintptr_t)key | (uintptr_t)value | 16;
	switch (align & -align) {
	case 1:
		return wkv_launch<unsigned char>(p, row_bytes, stream);
	case 2:
		return wkv_launch<uint16_t>(p, row_bytes, stream);
	case 4:
		return wkv_launch<uint32_t>(p, row_bytes, stream);
	case 8:
		return wkv_launch<uint2>(p, row_bytes, stream);
	default:	/* 16 */
		return wkv_launch<uint4>(p, row_bytes, stream);
	}
}
