/* SPDX-License-Identifier: MIT */
/*
 * copy_pages.cu - the batched page copy on the GPU.
 *
 * Owns copy_pages_kernel and its launcher kvp_copy_pages_cuda(), the CUDA
 * twin of kvp_copy_pages_ref() in copy_pages_ref.c (same arguments, same
 * errors, same result; the tests hold one against the other).
 *
 * Work split: blockIdx.x walks the pairs and blockIdx.y the 64 KiB chunks
 * of a page, both with a grid-stride loop, so that any batch size and any
 * page size fit in a grid of at most 65535 x 65535 blocks; the threads of
 * a block copy one chunk with coalesced accesses. The copy unit is the
 * widest of 16, 8, 4, 2 or 1 bytes that divides both base pointers, both
 * strides and page_bytes: KV pages are normally 16-byte aligned and take
 * the uint4 path, one 128-bit load and store per thread and step.
 */
#include <errno.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kvpool_kernels.h"
#include "cuda_check.h"

#define COPY_THREADS		256	/* threads per block, at most */
#define COPY_CHUNK_BYTES	65536	/* bytes of a page per block step */
#define COPY_GRID_MAX		65535	/* gridDim.x and gridDim.y cap */

/*
 * copy_pages_kernel - copy page_units units of T per pair.
 *
 * Strides are in bytes, page and chunk sizes in units of T. Block
 * (x, y) copies chunks y, y + gridDim.y, ... of pairs x, x + gridDim.x, ...
 * The caller guarantees that the pages of a batch do not overlap, which
 * makes the __restrict__ on dst and src true even when they are one slab.
 */
template <typename T>
__global__ void copy_pages_kernel(unsigned char *__restrict__ dst,       // [dst pages][dst_stride bytes]
				  const unsigned char *__restrict__ src, // [src pages][src_stride bytes]
				  size_t dst_stride, size_t src_stride,
				  size_t page_units, size_t chunk_units,
				  const struct kvp_copy_pair *__restrict__ pairs, // [n]
				  size_t n)
{
	for (size_t p = blockIdx.x; p < n; p += gridDim.x) {
		const struct kvp_copy_pair pair = pairs[p];
		T *d = reinterpret_cast<T *>(dst + pair.dst * dst_stride);
		const T *s = reinterpret_cast<const T *>(src + pair.src * src_stride);

		for (size_t c = blockIdx.y * chunk_units; c < page_units;
		     c += (size_t)gridDim.y * chunk_units) {
			size_t end = c + chunk_units < page_units ?
				     c + chunk_units : page_units;

#pragma unroll 4
			for (size_t i = c + threadIdx.x; i < end; i += blockDim.x)
				d[i] = s[i];
		}
	}
}

/* copy_pages_launch() - size the grid for units of T and launch. */
template <typename T>
static int copy_pages_launch(unsigned char *dst,       // [dst pages][dst_stride bytes]
			     const unsigned char *src, // [src pages][src_stride bytes]
			     size_t dst_stride, size_t src_stride,
			     size_t page_bytes,
			     const struct kvp_copy_pair *pairs, // [n], device memory
			     size_t n, cudaStream_t stream)
{
	size_t page_units = page_bytes / sizeof(T);
	size_t chunk_units = COPY_CHUNK_BYTES / sizeof(T);
	size_t chunks = (page_units + chunk_units - 1) / chunk_units;
	size_t busy = page_units < chunk_units ? page_units : chunk_units;
	/* Small pages get a smaller block rather than idle warps. */
	unsigned int threads = (unsigned int)((busy + 31) / 32 * 32);
	dim3 grid;

	if (threads > COPY_THREADS)
		threads = COPY_THREADS;
	grid.x = (unsigned int)(n < COPY_GRID_MAX ? n : COPY_GRID_MAX);
	grid.y = (unsigned int)(chunks < COPY_GRID_MAX ? chunks : COPY_GRID_MAX);
	grid.z = 1;

	/* Drop a stale error of an earlier, unrelated call: only this
	 * launch's error is ours to report. Sticky errors come back anyway. */
	(void)cudaGetLastError();
	copy_pages_kernel<T><<<grid, threads, 0, stream>>>(dst, src,
		dst_stride, src_stride, page_units, chunk_units, pairs, n);
	return cuda_check_launch("copy_pages_kernel launch");
}

/*
 * kvp_copy_pages_cuda() - the launcher; see kvpool_kernels.h.
 *
 *   dst,   // [dst pages][dst_stride bytes], device memory
 *   src,   // [src pages][src_stride bytes], device memory
 *   pairs, // [n], device or managed memory
 *
 * Checks the arguments as kvp_copy_pages_ref() does, launches on stream and
 * returns without waiting: dst, src and pairs must stay valid until the
 * stream has passed the copy. Returns 0, -EINVAL or -EIO.
 */
extern "C" KVP_KERNEL_API int kvp_copy_pages_cuda(void *dst, size_t dst_stride,
						  const void *src, size_t src_stride,
						  size_t page_bytes,
						  const struct kvp_copy_pair *pairs,
						  size_t n, struct CUstream_st *stream)
{
	unsigned char *d = static_cast<unsigned char *>(dst);
	const unsigned char *s = static_cast<const unsigned char *>(src);
	cudaStream_t cu_stream = stream;	/* the same pointer type */
	uintptr_t align;

	if (page_bytes > dst_stride || page_bytes > src_stride)
		return -EINVAL;
	if (n == 0)
		return 0;
	if (!dst || !src || !pairs)
		return -EINVAL;
	if (page_bytes == 0)
		return 0;

	/* The lowest set bit of all five is the widest unit that fits. */
	align = (uintptr_t)dst | (uintptr_t)src | dst_stride | src_stride |
		page_bytes;
	switch (align & -align) {
	case 1:
		return copy_pages_launch<unsigned char>(d, s, dst_stride,
				src_stride, page_bytes, pairs, n, cu_stream);
	case 2:
		return copy_pages_launch<uint16_t>(d, s, dst_stride,
				src_stride, page_bytes, pairs, n, cu_stream);
	case 4:
		return copy_pages_launch<uint32_t>(d, s, dst_stride,
				src_stride, page_bytes, pairs, n, cu_stream);
	case 8:
		return copy_pages_launch<uint2>(d, s, dst_stride,
				src_stride, page_bytes, pairs, n, cu_stream);
	default:	/* 16 or more */
		return copy_pages_launch<uint4>(d, s, dst_stride,
				src_stride, page_bytes, pairs, n, cu_stream);
	}
}
