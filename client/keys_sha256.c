/* SPDX-License-Identifier: MIT */
/*
 * keys_sha256.c - SHA-256 (FIPS 180-4) for the prefix keys (keys.h):
 * streaming and one-shot, in plain C and with the x86 SHA extensions
 * where the CPU has them; keys_cpu_use() makes the choice, for the token
 * encoders of keys_direct.c too. Pure and thread-safe.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvpool.h"
#include "client/keys.h"
#include "client/keys_int.h"

/* --- SHA-256 (FIPS 180-4) ------------------------------------------------ */

/* Section 4.2.2: the first 32 bits of the fractional parts of the cube
 * roots of the first 64 primes. */
static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5,
	0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
	0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5,
	0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Section 5.3.3: the square roots of the first 8 primes. */
static const uint32_t sha256_h0[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* Section 4.1.2; compilers turn ROTR into one rotate instruction. */
#define ROTR(x, n)	(((x) >> (n)) | ((x) << (32 - (n))))
#define BSIG0(x)	(ROTR(x, 2) ^ ROTR(x, 13) ^ ROTR(x, 22))
#define BSIG1(x)	(ROTR(x, 6) ^ ROTR(x, 11) ^ ROTR(x, 25))
#define SSIG0(x)	(ROTR(x, 7) ^ ROTR(x, 18) ^ ((x) >> 3))
#define SSIG1(x)	(ROTR(x, 17) ^ ROTR(x, 19) ^ ((x) >> 10))
#define CH(x, y, z)	((z) ^ ((x) & ((y) ^ (z))))
#define MAJ(x, y, z)	(((x) & (y)) | ((z) & ((x) | (y))))

/* One round of section 6.2.2 step 3. Instead of moving eight variables
 * each round, the caller rotates their names: after eight rounds they are
 * back in place. */
#define SHA256_ROUND(a, b, c, d, e, f, g, h, i) do {			\
	uint32_t t1 = (h) + BSIG1(e) + CH(e, f, g) + sha256_k[i] +	\
		      w[i];						\
	(d) += t1;							\
	(h) = t1 + BSIG0(a) + MAJ(a, b, c);				\
} while (0)

static inline uint32_t load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* sha256_blocks_c() - hash n whole 64-byte blocks of p into st. */
static void sha256_blocks_c(uint32_t st[8], const uint8_t *p, size_t n)
{
	uint32_t w[64];
	int i;

	for (; n > 0; n--, p += 64) {
		uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
		uint32_t e = st[4], f = st[5], g = st[6], h = st[7];

		for (i = 0; i < 16; i++)
			w[i] = load_be32(p + 4 * i);
		for (i = 16; i < 64; i++)
			w[i] = SSIG1(w[i - 2]) + w[i - 7] + SSIG0(w[i - 15]) +
			       w[i - 16];
		for (i = 0; i < 64; i += 8) {
			SHA256_ROUND(a, b, c, d, e, f, g, h, i + 0);
			SHA256_ROUND(h, a, b, c, d, e, f, g, i + 1);
			SHA256_ROUND(g, h, a, b, c, d, e, f, i + 2);
			SHA256_ROUND(f, g, h, a, b, c, d, e, i + 3);
			SHA256_ROUND(e, f, g, h, a, b, c, d, i + 4);
			SHA256_ROUND(d, e, f, g, h, a, b, c, i + 5);
			SHA256_ROUND(c, d, e, f, g, h, a, b, i + 6);
			SHA256_ROUND(b, c, d, e, f, g, h, a, i + 7);
		}
		st[0] += a;
		st[1] += b;
		st[2] += c;
		st[3] += d;
		st[4] += e;
		st[5] += f;
		st[6] += g;
		st[7] += h;
	}
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define SHA_NI_TARGET __attribute__((target("sha,sse4.1,ssse3")))

/*
 * sha256_blocks_ni() - sha256_blocks_c() with the x86 SHA extensions:
 * SHA256RNDS2 does two rounds on the state held as ABEF and CDGH (which
 * swap roles after each call), SHA256MSG1/MSG2 the message schedule.
 */
SHA_NI_TARGET static void sha256_blocks_ni(uint32_t st[8], const uint8_t *p, size_t n)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
	__m128i abef, cdgh, save0, save1, m[4], k, t;
	int i;

	t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[0]), 0xb1);	/* B A D C */
	cdgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[4]), 0x1b);	/* H G F E */
	abef = _mm_alignr_epi8(t, cdgh, 8);						/* F E B A */
	cdgh = _mm_blend_epi16(cdgh, t, 0xf0);						/* H G D C */
	for (; n > 0; n--, p += 64) {
		save0 = abef;
		save1 = cdgh;
		/* four rounds with the message words m and constants K[4i..] */
#define NI_ROUNDS(m, i)                                                              \
	do {                                                                         \
		k = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)&sha256_k[4 * (i)])); \
		cdgh = _mm_sha256rnds2_epu32(cdgh, abef, k);                          \
		abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(k, 0x0e)); \
	} while (0)
		/* the next 4 words of the schedule into a (the oldest), from a..d:
		 * W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16] */
#define NI_NEXT(a, b, c, d)                                                           \
	(a = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(a, b),            \
						_mm_alignr_epi8(d, c, 4)), d))
		m[0] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 0)), bswap);
		m[1] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), bswap);
		m[2] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 32)), bswap);
		m[3] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 48)), bswap);
		NI_ROUNDS(m[0], 0);
		NI_ROUNDS(m[1], 1);
		NI_ROUNDS(m[2], 2);
		NI_ROUNDS(m[3], 3);
		for (i = 4; i < 16; i += 4) {
			NI_ROUNDS(NI_NEXT(m[0], m[1], m[2], m[3]), i);
			NI_ROUNDS(NI_NEXT(m[1], m[2], m[3], m[0]), i + 1);
			NI_ROUNDS(NI_NEXT(m[2], m[3], m[0], m[1]), i + 2);
			NI_ROUNDS(NI_NEXT(m[3], m[0], m[1], m[2]), i + 3);
		}
#undef NI_NEXT
#undef NI_ROUNDS
		abef = _mm_add_epi32(abef, save0);
		cdgh = _mm_add_epi32(cdgh, save1);
	}
	t = _mm_shuffle_epi32(abef, 0x1b);		/* A B E F */
	cdgh = _mm_shuffle_epi32(cdgh, 0xb1);		/* G H C D */
	_mm_storeu_si128((__m128i *)&st[0], _mm_blend_epi16(t, cdgh, 0xf0));	/* A B C D */
	_mm_storeu_si128((__m128i *)&st[4], _mm_alignr_epi8(cdgh, t, 8));	/* E F G H */
}

/* sha_ni() - the CPU has the SHA extensions, SSSE3 and SSE4.1 (CPUID
 * leaf 7 EBX bit 29, leaf 1 ECX bits 9 and 19). */
static bool sha_ni(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19)))
		return false;
	return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
}

/* avx512_enc() - the CPU (and the OS) has what the token encoders of
 * keys_direct.c use: AVX-512 F, BW, VL and VBMI2 (VPCOMPRESSB), and BMI2 (PDEP). */
static bool avx512_enc(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2");
}
#else
static bool sha_ni(void)
{
	return false;
}

static bool avx512_enc(void)
{
	return false;
}
#endif

/* What keys_cpu_use() chose: 0 not yet, else KEYS_CPU_*; and whether the
 * SHA extensions and the AVX-512 encoders are on. A race on the first
 * choice writes the same. */
int keys_cpu_impl;		/* KEYS_CPU_*, 0 before keys_cpu_use() */
bool keys_use_avx512;		/* the token encoders' AVX-512 variants */
static bool use_sha_ni;

int keys_cpu_use(int impl)
{
	bool ni = sha_ni(), enc = avx512_enc();

	if (impl == KEYS_CPU_X86 && !ni && !enc)
		return -ENOTSUP;
	if (!impl)
		impl = ni || enc ? KEYS_CPU_X86 : KEYS_CPU_C;
	use_sha_ni = impl == KEYS_CPU_X86 && ni;
	keys_use_avx512 = impl == KEYS_CPU_X86 && enc;
	keys_cpu_impl = impl;
	return impl;
}

static inline void sha256_blocks(uint32_t st[8], const uint8_t *p, size_t n)
{
	if (!keys_cpu_impl)
		keys_cpu_use(0);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	if (use_sha_ni) {
		sha256_blocks_ni(st, p, n);
		return;
	}
#endif
	sha256_blocks_c(st, p, n);
}

void keys_sha256_init(struct keys_sha256 *s)
{
	memcpy(s->h, sha256_h0, sizeof(s->h));
	s->bytes = 0;
	s->fill = 0;
}

void keys_sha256_update(struct keys_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	if (s->fill) {
		size_t n = 64 - s->fill;

		if (n > len)
			n = len;
		memcpy(s->buf + s->fill, p, n);
		s->fill += n;
		p += n;
		len -= n;
		if (s->fill < 64)
			return;
		sha256_blocks(s->h, s->buf, 1);
		s->fill = 0;
	}
	if (len >= 64) {
		sha256_blocks(s->h, p, len / 64);
		p += len & ~(size_t)63;
		len &= 63;
	}
	if (len)
		memcpy(s->buf, p, len);
	s->fill = len;
}

/* Section 5.1.1: a 1 bit, zeros up to 56 mod 64 bytes, then the message
 * length in bits as a big-endian 64-bit integer. */
void keys_sha256_final(struct keys_sha256 *s, uint8_t out[KEYS_SHA256_BYTES])
{
	uint64_t bits = s->bytes << 3;
	int i;

	s->buf[s->fill++] = 0x80;
	if (s->fill > 56) {
		memset(s->buf + s->fill, 0, 64 - s->fill);
		sha256_blocks(s->h, s->buf, 1);
		s->fill = 0;
	}
	memset(s->buf + s->fill, 0, 56 - s->fill);
	store_be32(s->buf + 56, (uint32_t)(bits >> 32));
	store_be32(s->buf + 60, (uint32_t)bits);
	sha256_blocks(s->h, s->buf, 1);
	for (i = 0; i < 8; i++)
		store_be32(out + 4 * i, s->h[i]);
}

/* keys_sha256_padded() - the digest of msg[0..len), padded in place: msg must
 * have 72 bytes of room past len. One pass, nothing copied. */
void keys_sha256_padded(uint8_t *msg, size_t len, uint8_t out[KEYS_SHA256_BYTES])
{
	size_t nblocks = (len + 9 + 63) / 64, end = nblocks * 64;
	uint64_t bits = (uint64_t)len << 3;
	uint32_t h[8];
	int i;

	msg[len] = 0x80;
	memset(msg + len + 1, 0, end - 8 - len - 1);
	store_be32(msg + end - 8, (uint32_t)(bits >> 32));
	store_be32(msg + end - 4, (uint32_t)bits);
	memcpy(h, sha256_h0, sizeof(h));
	sha256_blocks(h, msg, nblocks);
	for (i = 0; i < 8; i++)
		store_be32(out + 4 * i, h[i]);
}

void keys_sha256(const void *data, size_t len, uint8_t out[KEYS_SHA256_BYTES])
{
	struct keys_sha256 s;

	keys_sha256_init(&s);
	keys_sha256_update(&s, data, len);
	keys_sha256_final(&s, out);
}

void keys_seed_id(const char *seed, uint8_t id[KEYS_SEED_ID_BYTES])
{
	uint8_t d[KEYS_SHA256_BYTES];
	unsigned i, any = 0;

	keys_sha256(seed, strlen(seed), d);
	for (i = 0; i < KEYS_SEED_ID_BYTES; i++)
		any |= id[i] = d[i];
	if (!any)
		id[KEYS_SEED_ID_BYTES - 1] = 1;
}
