/* SPDX-License-Identifier: MIT */
/*
 * copy_pages_ref.c - the C reference of the batched page copy.
 *
 * Owns kvp_copy_pages_ref(): the CPU path of host-backend users and the
 * oracle the CUDA kernel in copy_pages.cu is tested against. It is kept
 * deliberately plain (one memcpy per pair) so that it is obviously right.
 */
#include <errno.h>
#include <string.h>

#include "kvpool_kernels.h"

/*
 * kvp_copy_pages_ref() - copy page pairs[i].src of src to page pairs[i].dst
 * of dst for every i < n, on the calling thread, in order.
 *
 *   dst,   // [dst pages][dst_stride bytes]
 *   src,   // [src pages][src_stride bytes]
 *   pairs, // [n], host memory
 *
 * Returns 0, or -EINVAL if page_bytes is larger than a stride, or n > 0 and
 * a pointer is NULL. Nothing is written when it fails. Cost: O(n *
 * page_bytes), no allocation.
 */
KVP_KERNEL_API int kvp_copy_pages_ref(void *dst, size_t dst_stride,
				      const void *src, size_t src_stride,
				      size_t page_bytes,
				      const struct kvp_copy_pair *pairs,
				      size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	size_t i;

	if (page_bytes > dst_stride || page_bytes > src_stride)
		return -EINVAL;
	if (n == 0)
		return 0;
	if (!dst || !src || !pairs)
		return -EINVAL;

	for (i = 0; i < n; i++)
		memcpy(d + pairs[i].dst * dst_stride,
		       s + pairs[i].src * src_stride, page_bytes);
	return 0;
}
