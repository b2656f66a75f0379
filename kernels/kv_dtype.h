/* SPDX-License-Identifier: MIT */
/*
 * kv_dtype.h - fp16 and bf16 to and from fp32 in plain C, by their bits.
 *
 * Internal to the C references and the tests; no compiler half-float type
 * (_Float16, __fp16) is needed. Loads are exact; stores round to nearest,
 * ties to even, as the GPU's __float2half_rn and __float2bfloat16_rn do,
 * so the reference and the kernels store the same bits for the same float.
 * NaN stays NaN (quiet), infinities stay infinite, overflow goes to inf.
 */
#ifndef KVPOOL_KV_DTYPE_H
#define KVPOOL_KV_DTYPE_H

#include <stdint.h>
#include <string.h>

static inline uint32_t kv_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float kv_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* kv_bf16_to_f32() - bf16 is the top half of an fp32: exact. */
static inline float kv_bf16_to_f32(uint16_t h)
{
	return kv_bits_f32((uint32_t)h << 16);
}

/* kv_f32_to_bf16() - round to nearest even on the 16 dropped bits. */
static inline uint16_t kv_f32_to_bf16(float f)
{
	uint32_t u = kv_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)	/* NaN: keep sign, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* kv_f16_to_f32() - IEEE binary16 to binary32, exact (subnormals too). */
static inline float kv_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f)			/* inf or NaN */
		return kv_bits_f32(sign | 0x7f800000u | (man << 13));
	if (exp != 0)				/* normal */
		return kv_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
	/* zero or subnormal: man x 2^-24, exact in fp32 */
	return kv_bits_f32(sign | kv_f32_bits((float)man * 5.9604644775390625e-08f));
}

/* kv_f32_to_f16() - binary32 to binary16, round to nearest even. */
static inline uint16_t kv_f32_to_f16(float f)
{
	uint32_t u = kv_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	uint32_t exp, man, shift, half, rest;

	if (a > 0x7f800000u)			/* NaN */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u)			/* rounds to >= 65536: inf */
		return (uint16_t)(sign | 0x7c00u);
	exp = a >> 23;
	if (exp >= 113) {			/* normal in fp16 */
		man = a & 0x7fffffu;
		a = ((exp - 112) << 23 | man);
		/* round the 13 dropped bits; a carry bumps the exponent */
		a += 0xfffu + ((a >> 13) & 1u);
		return (uint16_t)(sign | (a >> 13));
	}
	if (exp < 102)				/* below half the smallest subnormal */
		return sign;
	/* subnormal in fp16: value = man24 x 2^(exp - 150), want units of 2^-24 */
	man = (a & 0x7fffffu) | 0x800000u;
	shift = 126 - exp;			/* 14..24 */
	half = 1u << (shift - 1);
	rest = man & ((1u << shift) - 1);
	man >>= shift;
	if (rest > half || (rest == half && (man & 1u)))
		man++;
	return (uint16_t)(sign | man);
}

#endif /* KVPOOL_KV_DTYPE_H */
