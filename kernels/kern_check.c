/* SPDX-License-Identifier: MIT */
/*
 * kern_check.c - the argument checks shared by the C references and the
 * CUDA launchers, and the workspace size of the decode kernel.
 *
 * Owns what a KV kernel accepts: head_dim 64, 128 or 256 (the CUDA
 * instantiations), block_tokens a power of two from 8 to 128 (a divisor of
 * the 512-token partition), strides in multiples of 8 elements (16-byte
 * vector loads in every dtype) and F16, BF16 or F32 elements.
 */
#include <errno.h>
#include <stdbool.h>

#include "kern_check.h"

_Static_assert(sizeof(struct kvp_kv_slot) == 16, "a slot is 16 bytes");
_Static_assert(KVP_ATTENTION_PARTITION_TOKENS % 128 == 0,
	       "a partition holds whole blocks of every block_tokens");

size_t kern_dtype_size(uint32_t dtype)
{
	switch (dtype) {
	case KVP_DTYPE_F16:
	case KVP_DTYPE_BF16:
		return 2;
	case KVP_DTYPE_F32:
		return 4;
	default:
		return 0;
	}
}

static bool stride_ok(uint64_t stride)
{
	return stride % 8 == 0;
}

int kern_check_layout(const struct kvp_kv_layout *layout, uint32_t dtype,
		      uint32_t layer)
{
	const struct kvp_kv_layout *l = layout;

	if (!l || kern_dtype_size(dtype) == 0)
		return -EINVAL;
	if (l->head_dim != 64 && l->head_dim != 128 && l->head_dim != 256)
		return -EINVAL;
	if (l->block_tokens < 8 || l->block_tokens > 128 ||
	    (l->block_tokens & (l->block_tokens - 1)) != 0)
		return -EINVAL;
	if (l->layers == 0 || l->kv_heads == 0 || layer >= l->layers)
		return -EINVAL;
	if (l->token_stride < l->head_dim)
		return -EINVAL;
	if (!stride_ok(l->layer_stride) || !stride_ok(l->kv_stride) ||
	    !stride_ok(l->head_stride) || !stride_ok(l->token_stride))
		return -EINVAL;
	return 0;
}

int kern_check_attention(const struct kvp_attention_shape *shape)
{
	const struct kvp_attention_shape *s = shape;
	int rc;

	if (!s)
		return -EINVAL;
	rc = kern_check_layout(&s->layout, s->dtype, s->layer);
	if (rc)
		return rc;
	if (s->q_heads == 0 || s->q_heads % s->layout.kv_heads != 0)
		return -EINVAL;
	if ((uint64_t)s->max_context >
	    (uint64_t)s->max_blocks * s->layout.block_tokens ||
	    s->max_context > KVP_ATTENTION_MAX_CONTEXT)
		return -EINVAL;
	return 0;
}

uint32_t kern_attention_partitions(uint32_t max_context)
{
	uint32_t p = (uint32_t)(((uint64_t)max_context +
				 KVP_ATTENTION_PARTITION_TOKENS - 1) /
				KVP_ATTENTION_PARTITION_TOKENS);

	return p ? p : 1;
}

/*
 * kvp_paged_attention_workspace_bytes() - see kvpool_kernels.h. The
 * workspace holds, per sequence, query head and partition, the partial
 * max and sum of the logits and the partial output row, all fp32:
 *     max[batch][q_heads][P], sum[batch][q_heads][P],
 *     out[batch][q_heads][P][head_dim].
 */
KVP_KERNEL_API size_t kvp_paged_attention_workspace_bytes(const struct kvp_attention_shape *shape)
{
	uint32_t p;

	if (!shape)
		return 0;
	p = kern_attention_partitions(shape->max_context);
	if (p == 1)
		return 0;
	return (size_t)shape->batch * shape->q_heads * p *
	       ((size_t)shape->layout.head_dim + 2) * sizeof(float);
}
