/* SPDX-License-Identifier: MIT */
/*
 * kv_elem.h - one element of a K/V or query array of any page dtype, for
 * the tests that fill arrays and read results element by element.
 */
#ifndef KVPOOL_TESTS_KV_ELEM_H
#define KVPOOL_TESTS_KV_ELEM_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool_kernels.h"
#include "kernels/kv_dtype.h"

/* elem_set() - element i of an array of dtype := v, rounded to nearest even. */
static inline void elem_set(void *base, size_t i, uint32_t dtype, float v)
{
	if (dtype == KVP_DTYPE_F32)
		((float *)base)[i] = v;
	else if (dtype == KVP_DTYPE_F16)
		((uint16_t *)base)[i] = kv_f32_to_f16(v);
	else
		((uint16_t *)base)[i] = kv_f32_to_bf16(v);
}

/* elem_get() - element i of an array of dtype, exactly (every value of
 * each dtype is a double), so that products of two stay exact too. */
static inline double elem_get(const void *base, size_t i, uint32_t dtype)
{
	if (dtype == KVP_DTYPE_F32)
		return ((const float *)base)[i];
	if (dtype == KVP_DTYPE_F16)
		return kv_f16_to_f32(((const uint16_t *)base)[i]);
	return kv_bf16_to_f32(((const uint16_t *)base)[i]);
}

#endif
