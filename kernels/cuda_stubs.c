/* SPDX-License-Identifier: MIT */
/*
 * cuda_stubs.c - the CUDA launchers of a build without CUDA.
 *
 * Owns one stub per kernel launcher of kvpool_kernels.h. When configure
 * finds no usable CUDA toolkit, kernels/local.mk builds this file instead
 * of the .cu files, so libkvpool exports the same symbols either way and
 * callers learn at run time, from -ENOTSUP, that they must take the _ref
 * path (or rebuild with --with-cuda). No #ifdef is needed anywhere else.
 */
#include <errno.h>

#include "kvpool_kernels.h"

/* kvp_copy_pages_cuda() - always -ENOTSUP: this build has no CUDA. */
KVP_KERNEL_API int kvp_copy_pages_cuda(void *dst, size_t dst_stride,
				       const void *src, size_t src_stride,
				       size_t page_bytes,
				       const struct kvp_copy_pair *pairs,
				       size_t n, struct CUstream_st *stream)
{
	(void)dst;
	(void)dst_stride;
	(void)src;
	(void)src_stride;
	(void)page_bytes;
	(void)pairs;
	(void)n;
	(void)stream;
	return -ENOTSUP;
}

/* kvp_paged_attention_decode_cuda() - always -ENOTSUP: this build has no
 * CUDA. */
KVP_KERNEL_API int kvp_paged_attention_decode_cuda(const struct kvp_attention_shape *shape,
						   void *out, const void *q,
						   const uint64_t *block_tables,
						   const uint32_t *context_lens,
						   void *workspace,
						   size_t workspace_bytes,
						   struct CUstream_st *stream)
{
	(void)shape;
	(void)out;
	(void)q;
	(void)block_tables;
	(void)context_lens;
	(void)workspace;
	(void)workspace_bytes;
	(void)stream;
	return -ENOTSUP;
}

/* kvp_write_kv_cuda() - always -ENOTSUP: this build has no CUDA. */
KVP_KERNEL_API int kvp_write_kv_cuda(const struct kvp_kv_layout *layout,
				     uint32_t dtype, uint32_t layer,
				     const void *key, const void *value,
				     const struct kvp_kv_slot *slots,
				     uint32_t ntokens, struct CUstream_st *stream)
{
	(void)layout;
	(void)dtype;
	(void)layer;
	(void)key;
	(void)value;
	(void)slots;
	(void)ntokens;
	(void)stream;
	return -ENOTSUP;
}
