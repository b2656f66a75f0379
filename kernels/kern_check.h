/* SPDX-License-Identifier: MIT */
/*
 * kern_check.h - the argument checks of the KV kernels, written once.
 *
 * Internal to kernels/: the C references and the CUDA launchers call the
 * same functions, so both accept and refuse exactly the same shapes. Each
 * returns 0 or -EINVAL and reads only host memory (the shape structs).
 */
#ifndef KVPOOL_KERN_CHECK_H
#define KVPOOL_KERN_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kern_dtype_size() - bytes of one element of an F16, BF16 or F32 dtype;
 * 0 for any other. */
size_t kern_dtype_size(uint32_t dtype);

/* kern_check_layout() - 0 if the kernels accept layout (see struct
 * kvp_kv_layout) in dtype and layer is one of its layers. */
int kern_check_layout(const struct kvp_kv_layout *layout, uint32_t dtype,
		      uint32_t layer);

/* kern_check_attention() - 0 if shape is one the decode kernels accept. */
int kern_check_attention(const struct kvp_attention_shape *shape);

/* kern_attention_partitions() - how many partitions the CUDA decode
 * splits max_context into (at least 1). */
uint32_t kern_attention_partitions(uint32_t max_context);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_KERN_CHECK_H */
