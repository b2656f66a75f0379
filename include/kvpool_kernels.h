/* SPDX-License-Identifier: MIT */
/*
 * kvpool_kernels.h - the C API of kvpool's KV-cache kernels.
 *
 * Every operation has two entry points with the same arguments:
 *   kvp_<op>_ref()   the plain C implementation: the reference the CUDA
 *                    kernels are tested against, and the CPU path that
 *                    host-backend users run;
 *   kvp_<op>_cuda()  the CUDA launcher: checks its arguments, launches on
 *                    the caller's stream and returns without waiting.
 *                    Without CUDA support in the build it returns -ENOTSUP.
 *
 * All functions return 0 on success or a negative errno value; they never
 * allocate memory that the caller must free, and they are thread-safe
 * (they keep no state).
 *
 * The KV operations (attention, write_kv) address pages through their
 * ADDRESSES: a block table entry or a slot is the uint64_t value of a
 * pointer to the first byte of a page, a device pointer for _cuda and a
 * host pointer for _ref. A namespace's pages live in several slabs
 * (separate allocations), so a page number alone would not do. The layout
 * inside a page is described by struct kvp_kv_layout; docs/kv-layout.md
 * says why it is what it is.
 */
#ifndef KVPOOL_KERNELS_H
#define KVPOOL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"	/* enum kvp_dtype */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVP_KERNEL_API __attribute__((visibility("default")))
#else
#define KVP_KERNEL_API
#endif

/* The CUDA runtime's cudaStream_t is a pointer to this opaque struct;
 * declaring it here keeps CUDA headers out of C users. NULL means the
 * legacy default stream. */
struct CUstream_st;

/* One page copy: page number src of the source region to page number dst
 * of the destination region. */
struct kvp_copy_pair {
	uint64_t src;
	uint64_t dst;
};

/*
 * kvp_copy_pages_ref() / kvp_copy_pages_cuda() - batched page copy.
 *
 * For each i < n, copies page_bytes bytes from
 *     src + pairs[i].src * src_stride   to   dst + pairs[i].dst * dst_stride.
 * It serves copy-on-write (src and dst the same slab) and gathering pages
 * into a spill staging buffer (dst a packed buffer, pairs[i].dst = i).
 *
 *   dst,   // [dst pages][dst_stride bytes]
 *   src,   // [src pages][src_stride bytes]
 *   pairs, // [n]; host memory for _ref, device (or managed) memory for _cuda
 *
 * The caller guarantees that every page index is inside its region and
 * that no destination page is also a source page or the destination of
 * another pair (copies of one batch run in any order, in parallel).
 *
 * Returns 0, or -EINVAL if page_bytes is larger than a stride (checked even
 * when n == 0) or n > 0 and a pointer is NULL; n == 0 with a valid geometry
 * is a no-op (_cuda launches nothing). Nothing is written when a call fails.
 * _cuda also returns -ENOTSUP (built without CUDA) and -EIO (the launch
 * failed; the CUDA error is logged to stderr); faults while the kernel runs
 * surface at the caller's next synchronization of the stream.
 */
KVP_KERNEL_API int kvp_copy_pages_ref(void *dst, size_t dst_stride,
				      const void *src, size_t src_stride,
				      size_t page_bytes,
				      const struct kvp_copy_pair *pairs,
				      size_t n);

KVP_KERNEL_API int kvp_copy_pages_cuda(void *dst, size_t dst_stride,
				       const void *src, size_t src_stride,
				       size_t page_bytes,
				       const struct kvp_copy_pair *pairs,
				       size_t n, struct CUstream_st *stream);

/* --- KV layout inside a page -------------------------------------------- */

/*
 * Where element (layer, kv, kv_head, token, d) of a page lives: at
 *     layer * layer_stride + kv * kv_stride + kv_head * head_stride
 *     + token * token_stride + d
 * elements of the namespace's dtype from the page's address (kv is 0 for
 * K, 1 for V; d is contiguous). The kernels take the strides rather than
 * assume one order; kvp_kv_layout_default() gives kvpool's own.
 *
 * The kernels accept head_dim 64, 128 or 256, block_tokens a power of two
 * from 8 to 128, and strides that are multiples of 8 elements with
 * token_stride >= head_dim; that the strides describe disjoint elements
 * is the caller's promise. Pages must be 16-byte aligned.
 */
struct kvp_kv_layout {
	uint32_t layers, kv_heads, head_dim, block_tokens;
	uint64_t layer_stride;	/* elements from one layer to the next */
	uint64_t kv_stride;	/* from K to V of one layer */
	uint64_t head_stride;	/* from one kv head to the next */
	uint64_t token_stride;	/* from one token to the next */
	uint64_t page_elems;	/* elements in one page */
};

/*
 * kvp_kv_layout_default() - kvpool's page layout:
 *     [layers][2 (K, V)][kv_heads][block_tokens][head_dim]
 * so that one layer's and head's keys (or values) of a block are one
 * contiguous [block_tokens][head_dim] tile. Page bytes are page_elems x
 * dtype size, which is the page_bytes the daemon reports in HELLO.
 */
static inline struct kvp_kv_layout kvp_kv_layout_default(uint32_t layers,
							 uint32_t kv_heads,
							 uint32_t head_dim,
							 uint32_t block_tokens)
{
	struct kvp_kv_layout l;

	l.layers = layers;
	l.kv_heads = kv_heads;
	l.head_dim = head_dim;
	l.block_tokens = block_tokens;
	l.token_stride = head_dim;
	l.head_stride = (uint64_t)block_tokens * l.token_stride;
	l.kv_stride = (uint64_t)kv_heads * l.head_stride;
	l.layer_stride = 2 * l.kv_stride;
	l.page_elems = (uint64_t)layers * l.layer_stride;
	return l;
}

/* --- Paged attention, decode -------------------------------------------- */

/* Partition size of the CUDA decode kernel: a sequence longer than this is
 * split into partitions of this many tokens, each reduced separately and
 * then combined (flash-decoding). A multiple of every block_tokens. */
#define KVP_ATTENTION_PARTITION_TOKENS 512

/* The longest context the decode kernels take (max_context), 2^22 tokens:
 * the CUDA reduction keeps one weight per partition in shared memory. */
#define KVP_ATTENTION_MAX_CONTEXT (1u << 22)

/* The shape of one decode step. */
struct kvp_attention_shape {
	struct kvp_kv_layout layout;	/* of the pages */
	uint32_t dtype;		/* enum kvp_dtype: F16, BF16 or F32; of q, out and pages */
	uint32_t layer;		/* which layer's K and V, < layout.layers */
	uint32_t batch;		/* sequences, one query token each */
	uint32_t q_heads;	/* a multiple of layout.kv_heads (GQA) */
	uint32_t max_blocks;	/* row length of the block table */
	uint32_t max_context;	/* >= every context_lens[b], <= max_blocks x block_tokens */
	float scale;		/* of the logits, normally 1 / sqrt(head_dim) */
};

/*
 * kvp_paged_attention_decode_ref() / kvp_paged_attention_decode_cuda() -
 * attention of one new query token per sequence over its cached K and V.
 *
 * For every sequence b and query head h (served by kv head h / (q_heads /
 * kv_heads)), out[b][h] = softmax(scale * q[b][h] . K^T) V over the first
 * context_lens[b] tokens of the sequence, token t being token t %
 * block_tokens of the page at block_tables[b][t / block_tokens]. Products
 * and the softmax are computed in fp32 (online softmax), whatever the
 * dtype. A sequence with context_lens[b] == 0 gets a zero output row.
 *
 *   out,          // [batch][q_heads][head_dim], dtype
 *   q,            // [batch][q_heads][head_dim], dtype
 *   block_tables, // [batch][max_blocks] page addresses
 *   context_lens, // [batch]
 *
 * _ref takes host memory, _cuda device memory (or managed), the page
 * addresses likewise. _cuda also takes:
 *   workspace,    // kvp_paged_attention_workspace_bytes(shape) bytes of
 *                 // device memory, 16-byte aligned; NULL when that is 0
 * which it uses for the partial results of long sequences; one workspace
 * must not serve two calls that may run at the same time.
 *
 * Returns 0, or -EINVAL for a shape outside what the kernels accept (see
 * struct kvp_kv_layout; also dtype, layer, q_heads, max_context above
 * max_blocks x block_tokens or KVP_ATTENTION_MAX_CONTEXT), a NULL
 * pointer with batch > 0, or a workspace too small. _ref also returns
 * -EINVAL for a context_lens[b] > max_context or a zero page address
 * inside a context, checked before anything is written; the GPU cannot
 * check those and reads at most min(context_lens[b], max_context) tokens.
 * _cuda returns -ENOTSUP without CUDA and -EIO when the launch failed.
 * batch == 0 is a no-op.
 */
KVP_KERNEL_API int kvp_paged_attention_decode_ref(const struct kvp_attention_shape *shape,
						  void *out, const void *q,
						  const uint64_t *block_tables,
						  const uint32_t *context_lens);

KVP_KERNEL_API int kvp_paged_attention_decode_cuda(const struct kvp_attention_shape *shape,
						   void *out, const void *q,
						   const uint64_t *block_tables,
						   const uint32_t *context_lens,
						   void *workspace,
						   size_t workspace_bytes,
						   struct CUstream_st *stream);

/*
 * kvp_paged_attention_workspace_bytes() - the workspace that
 * kvp_paged_attention_decode_cuda() needs for shape: 0 when max_context
 * fits one partition, else batch x q_heads x P x (head_dim + 2) x 4 bytes
 * with P = ceil(max_context / KVP_ATTENTION_PARTITION_TOKENS). Returns 0
 * for a NULL shape. Plain arithmetic, available in every build.
 */
KVP_KERNEL_API size_t kvp_paged_attention_workspace_bytes(const struct kvp_attention_shape *shape);

/* --- Writing new tokens' K and V --------------------------------------- */

/* Where one token goes: token offset (< block_tokens) of the page at
 * address page. A slot with page == 0 is skipped (a padding token). */
struct kvp_kv_slot {
	uint64_t page;		/* page address; 0: skip this token */
	uint32_t offset;	/* token within the block */
	uint32_t reserved;	/* 0 */
};

/*
 * kvp_write_kv_ref() / kvp_write_kv_cuda() - store the K and V of ntokens
 * new tokens of one layer into their pages.
 *
 *   key,   // [ntokens][kv_heads][head_dim], dtype
 *   value, // [ntokens][kv_heads][head_dim], dtype
 *   slots, // [ntokens]
 *
 * For each token i with slots[i].page != 0, writes key[i][h] to K and
 * value[i][h] to V of (layer, h, slots[i].offset) in that page for every
 * kv head h, and nothing else. Two tokens must not share a slot.
 *
 * Returns 0, or -EINVAL for a layout the kernels do not accept, dtype not
 * F16, BF16 or F32, layer >= layers, or a NULL pointer with ntokens > 0.
 * _ref also returns -EINVAL for a slot offset >= block_tokens (checked
 * before writing anything); the GPU skips such a slot. _cuda returns
 * -ENOTSUP without CUDA and -EIO when the launch failed. ntokens == 0 is
 * a no-op.
 */
KVP_KERNEL_API int kvp_write_kv_ref(const struct kvp_kv_layout *layout,
				    uint32_t dtype, uint32_t layer,
				    const void *key, const void *value,
				    const struct kvp_kv_slot *slots,
				    uint32_t ntokens);

KVP_KERNEL_API int kvp_write_kv_cuda(const struct kvp_kv_layout *layout,
				     uint32_t dtype, uint32_t layer,
				     const void *key, const void *value,
				     const struct kvp_kv_slot *slots,
				     uint32_t ntokens, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_KERNELS_H */
