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
 */
#ifndef KVPOOL_KERNELS_H
#define KVPOOL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

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

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_KERNELS_H */
