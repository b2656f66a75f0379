/* SPDX-License-Identifier: MIT */
/*
 * write_kv_ref.c - the C reference of writing new tokens' K and V.
 *
 * Owns kvp_write_kv_ref(): the CPU path of host-backend users and the
 * oracle the CUDA kernel in write_kv.cu is tested against. One memcpy per
 * token, kv head and K or V row: a row is head_dim contiguous elements in
 * any layout the kernels accept.
 */
#include <errno.h>
#include <string.h>

#include "kvpool_kernels.h"
#include "kern_check.h"

/*
 * kvp_write_kv_ref() - see kvpool_kernels.h.
 *
 *   key,   // [ntokens][kv_heads][head_dim], host memory
 *   value, // [ntokens][kv_heads][head_dim], host memory
 *   slots, // [ntokens], host page addresses
 *
 * Returns 0 or -EINVAL; nothing is written when it fails. Cost: O(ntokens
 * x kv_heads x head_dim), no allocation.
 */
KVP_KERNEL_API int kvp_write_kv_ref(const struct kvp_kv_layout *layout,
				    uint32_t dtype, uint32_t layer,
				    const void *key, const void *value,
				    const struct kvp_kv_slot *slots,
				    uint32_t ntokens)
{
	const struct kvp_kv_layout *l = layout;
	const unsigned char *k = key, *v = value;
	size_t esize, row_bytes;
	uint32_t i, h;
	int rc;

	rc = kern_check_layout(l, dtype, layer);
	if (rc)
		return rc;
	if (ntokens == 0)
		return 0;
	if (!key || !value || !slots)
		return -EINVAL;
	for (i = 0; i < ntokens; i++)
		if (slots[i].page && slots[i].offset >= l->block_tokens)
			return -EINVAL;

	esize = kern_dtype_size(dtype);
	row_bytes = l->head_dim * esize;
	for (i = 0; i < ntokens; i++) {
		unsigned char *page = (unsigned char *)(uintptr_t)slots[i].page;

		if (!page)
			continue;
		for (h = 0; h < l->kv_heads; h++) {
			size_t in = ((size_t)i * l->kv_heads + h) * row_bytes;
			unsigned char *dst = page + (layer * l->layer_stride +
				h * l->head_stride +
				slots[i].offset * l->token_stride) * esize;

			memcpy(dst, k + in, row_bytes);
			memcpy(dst + l->kv_stride * esize, v + in, row_bytes);
		}
	}
	return 0;
}
