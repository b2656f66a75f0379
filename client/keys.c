/* SPDX-License-Identifier: MIT */
/*
 * keys.c - prefix keys: kvp_key_root(), kvp_key_block(), kvp_key_chain().
 *
 * Owns the key schemes of kvpool.h, vLLM's four prefix-caching
 * algorithms, and what they are built from:
 *
 * KVP_KEYS_VLLM_SHA256_CBOR, byte for byte vLLM's sha256_cbor prefix
 * hash: a block key is SHA-256 of the canonical CBOR (RFC 8949 section
 * 4.2.1, what cbor2.dumps(..., canonical=True) writes) of the array
 * [parent key as a byte string, [token ids], null or [extra keys]], and
 * the root is SHA-256 of the CBOR text string of the seed. SHA-256
 * (FIPS 180-4) and the few CBOR items needed are written here; the
 * encoding streams into the hash through a small staging buffer, never
 * a buffer the size of the block.
 *
 * KVP_KEYS_VLLM_SHA256 and KVP_KEYS_VLLM_XXHASH hash CPython's pickle of
 * the same tuple, KVP_KEYS_VLLM_XXHASH_CBOR (also KVP_KEYS_FAST) its CBOR,
 * with SHA-256 or XXH3-128 (libxxhash); see vllm_any_block(). SHA-256 uses
 * the x86 SHA extensions where the CPU has them.
 *
 * Every function here is pure and thread-safe: all state is on the
 * caller's stack.
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

/* What the last key call of this thread found wrong (kvp_last_error()). */
__thread char keys_error_buf[KEYS_ERROR_MAX];

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(keys_error_buf, sizeof(keys_error_buf), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int bad_scheme(uint32_t scheme)
{
	return bad("key scheme %u is not one of 1 (vllm-sha256-cbor), 2 (vllm-xxhash-cbor, "
		   "also fast), 3 (vllm-sha256), 4 (vllm-xxhash)", scheme);
}

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

static inline void store_be32(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap32(v);	/* one store */
#endif
	memcpy(p, &v, 4);
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

/* avx512_enc() - the CPU (and the OS) has what the token encoders below
 * use: AVX-512 F, BW, VL and VBMI2 (VPCOMPRESSB), and BMI2 (PDEP). */
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
static int cpu_impl;
static bool use_sha_ni, use_avx512;

int keys_cpu_use(int impl)
{
	bool ni = sha_ni(), enc = avx512_enc();

	if (impl == KEYS_CPU_X86 && !ni && !enc)
		return -ENOTSUP;
	if (!impl)
		impl = ni || enc ? KEYS_CPU_X86 : KEYS_CPU_C;
	use_sha_ni = impl == KEYS_CPU_X86 && ni;
	use_avx512 = impl == KEYS_CPU_X86 && enc;
	cpu_impl = impl;
	return impl;
}

static inline void sha256_blocks(uint32_t st[8], const uint8_t *p, size_t n)
{
	if (!cpu_impl)
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

/* sha256_padded() - the digest of msg[0..len), padded in place: msg must
 * have 72 bytes of room past len. One pass, nothing copied. */
static void sha256_padded(uint8_t *msg, size_t len, uint8_t out[KEYS_SHA256_BYTES])
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

/* --- Canonical CBOR into SHA-256 (RFC 8949) ------------------------------ */

enum cbor_major {
	CBOR_UINT = 0,		/* unsigned integer */
	CBOR_BYTES = 2,		/* byte string */
	CBOR_TEXT = 3,		/* text string (UTF-8) */
	CBOR_ARRAY = 4,		/* array of n items */
};

#define CBOR_NULL	0xf6	/* major 7, simple value 22 */
#define CBOR_HEAD_MAX	9	/* initial byte + 8-byte argument */
#define CBOR_STAGE	256

/* Encoded items wait in buf and go to the hash CBOR_STAGE bytes at a time,
 * so a block of any length is hashed in constant memory. */
struct cbor_sink {
	struct keys_sha256 sha;
	size_t len;		/* bytes waiting in buf */
	uint8_t buf[CBOR_STAGE];
};

static void cbor_flush(struct cbor_sink *c)
{
	keys_sha256_update(&c->sha, c->buf, c->len);
	c->len = 0;
}

/* cbor_head() - an item's head with its argument in the shortest form
 * (section 4.2.1: preferred serialization of the argument). */
static inline void cbor_head(struct cbor_sink *c, enum cbor_major major,
			     uint64_t v)
{
	uint8_t *p, ib = (uint8_t)(major << 5);

	if (c->len > CBOR_STAGE - CBOR_HEAD_MAX)
		cbor_flush(c);
	p = c->buf + c->len;
	if (v < 24) {
		p[0] = ib | (uint8_t)v;
		c->len += 1;
	} else if (v <= 0xff) {
		p[0] = ib | 24;
		p[1] = (uint8_t)v;
		c->len += 2;
	} else if (v <= 0xffff) {
		p[0] = ib | 25;
		p[1] = (uint8_t)(v >> 8);
		p[2] = (uint8_t)v;
		c->len += 3;
	} else if (v <= 0xffffffff) {
		p[0] = ib | 26;
		store_be32(p + 1, (uint32_t)v);
		c->len += 5;
	} else {
		p[0] = ib | 27;
		store_be32(p + 1, (uint32_t)(v >> 32));
		store_be32(p + 5, (uint32_t)v);
		c->len += 9;
	}
}

/* cbor_string() - a byte or text string: head, then the bytes as given
 * (a text string's bytes are not checked to be UTF-8). */
static void cbor_string(struct cbor_sink *c, enum cbor_major major,
			const void *data, size_t n)
{
	cbor_head(c, major, n);
	if (n <= CBOR_STAGE - c->len) {
		memcpy(c->buf + c->len, data, n);
		c->len += n;
		return;
	}
	cbor_flush(c);
	keys_sha256_update(&c->sha, data, n);
}

static void cbor_simple(struct cbor_sink *c, uint8_t byte)
{
	if (c->len == CBOR_STAGE)
		cbor_flush(c);
	c->buf[c->len++] = byte;
}

static void cbor_begin(struct cbor_sink *c)
{
	keys_sha256_init(&c->sha);
	c->len = 0;
}

static void cbor_end(struct cbor_sink *c, kvp_key *key)
{
	cbor_flush(c);
	keys_sha256_final(&c->sha, key->b);
}

/* vllm_root() - SHA-256(cbor2.dumps(seed, canonical=True)): vLLM's
 * NONE_HASH when PYTHONHASHSEED=seed. */
static void vllm_root(const char *seed, kvp_key *root)
{
	struct cbor_sink c;

	cbor_begin(&c);
	cbor_string(&c, CBOR_TEXT, seed, strlen(seed));
	cbor_end(&c, root);
}

static bool vllm_block_direct(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			      size_t ntokens, kvp_key *key);

/* vllm_block() - SHA-256(cbor2.dumps((parent, tuple(tokens), extras),
 * canonical=True)) where extras is None when nextras is 0: vLLM's
 * hash_block_tokens() with sha256_cbor. */
static void vllm_block(const kvp_key *parent, const uint32_t *tokens,
		       size_t ntokens, const kvp_extra *extras, size_t nextras,
		       kvp_key *key)
{
	struct cbor_sink c;
	size_t i;

	if (nextras == 0 && vllm_block_direct(KVP_KEYS_VLLM_SHA256_CBOR, parent, tokens,
					      ntokens, key))
		return;
	cbor_begin(&c);
	cbor_head(&c, CBOR_ARRAY, 3);
	cbor_string(&c, CBOR_BYTES, parent->b, KVP_KEY_BYTES);
	cbor_head(&c, CBOR_ARRAY, ntokens);
	for (i = 0; i < ntokens; i++)
		cbor_head(&c, CBOR_UINT, tokens[i]);
	if (nextras == 0) {
		cbor_simple(&c, CBOR_NULL);
	} else {
		cbor_head(&c, CBOR_ARRAY, nextras);
		for (i = 0; i < nextras; i++) {
			if (extras[i].str)
				cbor_string(&c, CBOR_TEXT, extras[i].str,
					    strlen(extras[i].str));
			else
				cbor_head(&c, CBOR_UINT, extras[i].num);
		}
	}
	cbor_end(&c, key);
}

/* --- Little-endian stores, the staging size ------------------------------ */

#define FAST_STAGE	4096	/* a block encoded into one stack buffer */

static inline void store_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void store_le64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(p, &v, 8);	/* one store */
#else
	store_le32(p, (uint32_t)v);
	store_le32(p + 4, (uint32_t)(v >> 32));
#endif
}

static inline void store_be64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap64(v);
	memcpy(p, &v, 8);
#else
	memcpy(p, &v, 8);
#endif
}

/* --- vLLM's other algorithms: pickle, XXH3-128 ------------------------------
 *
 * vLLM's `sha256` hashes pickle.dumps(obj, protocol=5) with SHA-256, its
 * `xxhash` the same pickle with XXH3-128, its `xxhash_cbor` the canonical
 * CBOR of sha256_cbor with XXH3-128 (vllm/utils/hashing.py). obj is the
 * root's seed (a str) or a block's (parent digest, tuple(token ids),
 * None or tuple(extra keys)), the parent digest being 32 bytes for
 * SHA-256 and 16 for XXH3-128 (xxhash's digest(): big-endian).
 *
 * The pickle is CPython's for exactly these shapes: PROTO 5, one FRAME
 * (8-byte little-endian length of what follows), then
 *   bytes  SHORT_BINBYTES 'C' n<256 / BINBYTES 'B' u32, then MEMOIZE
 *   str    SHORT_BINUNICODE 0x8c n<256 / BINUNICODE 'X' u32, then MEMOIZE
 *   int    BININT1 'K' (< 2^8), BININT2 'M' (< 2^16), BININT 'J' (< 2^31,
 *          signed 32-bit little-endian), else LONG1 0x8a with the
 *          shortest little-endian two's complement
 *   None   'N'
 *   tuple  ')' when empty (not memoized); 1..3 items then TUPLE1..3
 *          (0x85..0x87); more: MARK '(' items TUPLE 't'; then MEMOIZE
 * and STOP '.'. CPython starts a new frame at 64 KiB, so a pickle whose
 * frame would reach that is refused (-EINVAL): a block of up to about
 * 13,000 tokens fits. No object is repeated, so no memo is read back.
 */
#define PK_FRAME_MAX	65535u
#define PK_MEMOIZE	0x94

/* A byte sink into SHA-256 or XXH3-128, CBOR_STAGE bytes at a time. */
struct hsink {
	bool xxh;
	bool dry;		/* only count what would be written */
	struct keys_sha256 sha;
	XXH3_state_t *st;	/* xxh: created on the first flush */
	int err;
	size_t len, total;
	uint8_t buf[FAST_STAGE];
};

static void hs_begin(struct hsink *h, bool xxh)
{
	h->xxh = xxh;
	h->dry = false;
	h->st = NULL;
	h->err = 0;
	h->len = 0;
	h->total = 0;
	if (!xxh)
		keys_sha256_init(&h->sha);
}

static void hs_flush(struct hsink *h)
{
	if (!h->xxh) {
		keys_sha256_update(&h->sha, h->buf, h->len);
	} else if (!h->err) {
		if (!h->st) {
			h->st = XXH3_createState();
			if (!h->st || XXH3_128bits_reset(h->st) != XXH_OK)
				h->err = -ENOMEM;
		}
		if (!h->err)
			XXH3_128bits_update(h->st, h->buf, h->len);
	}
	h->len = 0;
}

static void hs_write(struct hsink *h, const void *data, size_t n)
{
	const uint8_t *p = data;

	h->total += n;
	if (h->dry)
		return;
	while (n > 0) {
		size_t k = sizeof(h->buf) - h->len;

		if (k == 0) {
			hs_flush(h);
			k = sizeof(h->buf);
		}
		if (k > n)
			k = n;
		memcpy(h->buf + h->len, p, k);
		h->len += k;
		p += k;
		n -= k;
	}
}

static inline void hs_byte(struct hsink *h, uint8_t b)
{
	if (h->dry) {
		h->total++;
		return;
	}
	if (h->len == sizeof(h->buf))
		hs_flush(h);
	h->buf[h->len++] = b;
	h->total++;
}

/* hs_end() - the digest as a key: SHA-256's 32 bytes, or XXH3-128's 16
 * (big-endian, as xxhash's digest()) and 16 zero bytes. 0 or -ENOMEM. */
static int hs_end(struct hsink *h, kvp_key *key)
{
	XXH128_canonical_t c;
	XXH128_hash_t d;

	if (!h->xxh) {
		hs_flush(h);
		keys_sha256_final(&h->sha, key->b);
		return 0;
	}
	if (!h->st) {
		d = XXH3_128bits(h->buf, h->len);
	} else {
		hs_flush(h);
		d = h->err ? (XXH128_hash_t){ 0, 0 } : XXH3_128bits_digest(h->st);
	}
	XXH3_freeState(h->st);
	if (h->err)
		return h->err;
	XXH128_canonicalFromHash(&c, d);
	memcpy(key->b, c.digest, 16);
	memset(key->b + 16, 0, KVP_KEY_BYTES - 16);
	return 0;
}

/* CBOR into an hsink (for xxhash_cbor): the same encoding as above. */
static void hc_head(struct hsink *h, enum cbor_major major, uint64_t v)
{
	uint8_t p[CBOR_HEAD_MAX], ib = (uint8_t)(major << 5);
	size_t n;

	if (v < 24) {
		p[0] = ib | (uint8_t)v;
		n = 1;
	} else if (v <= 0xff) {
		p[0] = ib | 24;
		p[1] = (uint8_t)v;
		n = 2;
	} else if (v <= 0xffff) {
		p[0] = ib | 25;
		p[1] = (uint8_t)(v >> 8);
		p[2] = (uint8_t)v;
		n = 3;
	} else if (v <= 0xffffffff) {
		p[0] = ib | 26;
		store_be32(p + 1, (uint32_t)v);
		n = 5;
	} else {
		p[0] = ib | 27;
		store_be32(p + 1, (uint32_t)(v >> 32));
		store_be32(p + 5, (uint32_t)v);
		n = 9;
	}
	hs_write(h, p, n);
}

/* The pickle's pieces: their sizes (for the frame) and their bytes. */
static size_t pk_int_size(uint64_t v)
{
	size_t n = 1;

	if (v <= 0xff)
		return 2;
	if (v <= 0xffff)
		return 3;
	if (v < 0x80000000u)
		return 5;
	while (n < 9 && (v >> (8 * n - 1)) != 0)	/* room for a 0 sign bit */
		n++;
	return 2 + n;
}

static void pk_int(struct hsink *h, uint64_t v)
{
	uint8_t p[12];
	size_t n, i;

	if (v <= 0xff) {
		p[0] = 'K';
		p[1] = (uint8_t)v;
		n = 2;
	} else if (v <= 0xffff) {
		p[0] = 'M';
		p[1] = (uint8_t)v;
		p[2] = (uint8_t)(v >> 8);
		n = 3;
	} else if (v < 0x80000000u) {
		p[0] = 'J';
		store_le32(p + 1, (uint32_t)v);
		n = 5;
	} else {
		n = pk_int_size(v);
		p[0] = 0x8a;
		p[1] = (uint8_t)(n - 2);
		for (i = 0; i < n - 2; i++)
			p[2 + i] = i < 8 ? (uint8_t)(v >> (8 * i)) : 0;
	}
	hs_write(h, p, n);
}

static size_t pk_str_size(size_t n)
{
	return (n < 256 ? 2 : 5) + n + 1;
}

/* pk_str() - a str (op 0x8c / 'X') or bytes (op 'C' / 'B') and MEMOIZE. */
static void pk_string(struct hsink *h, bool text, const void *data, size_t n)
{
	uint8_t p[5];

	if (n < 256) {
		p[0] = text ? 0x8c : 'C';
		p[1] = (uint8_t)n;
		hs_write(h, p, 2);
	} else {
		p[0] = text ? 'X' : 'B';
		store_le32(p + 1, (uint32_t)n);
		hs_write(h, p, 5);
	}
	hs_write(h, data, n);
	hs_byte(h, PK_MEMOIZE);
}

static void pk_tuple_open(struct hsink *h, size_t n)
{
	if (n > 3)
		hs_byte(h, '(');
}

static void pk_tuple_close(struct hsink *h, size_t n)
{
	hs_byte(h, n == 0 ? ')' : n <= 3 ? (uint8_t)(0x84 + n) : 't');
	if (n)
		hs_byte(h, PK_MEMOIZE);
}

/* pk_begin() / pk_end() - PROTO 5 and a FRAME of len bytes, and STOP
 * (counted in len). */
static int pk_begin(struct hsink *h, size_t len)
{
	uint8_t p[11] = { 0x80, 5, 0x95 };

	if (len > PK_FRAME_MAX)
		return bad("the block's pickle would be %zu bytes, past the 64 KiB frame CPython "
			   "writes whole: vLLM's sha256 and xxhash algorithms take at most "
			   "about 9,000 large token ids a block", len);
	store_le64(p + 3, len);
	hs_write(h, p, sizeof(p));
	return 0;
}

/*
 * The common case, written straight into a buffer: a block without extra
 * keys whose encoding fits in FAST_STAGE (up to about 800 tokens), then
 * one-shot hashing. Byte for byte what the general path writes.
 */
/* pk_put_int() / cb_put_uint() - one token id, without a branch on its
 * size (token ids are random to the branch predictor): every byte of the
 * widest form is stored and the pointer moves by the right length. They
 * write up to 9 and 5 bytes past what they keep. */
static inline uint8_t *pk_put_int(uint8_t *p, uint32_t v)
{
	static const uint8_t op[4] = { 'K', 'M', 'J', 0x8a }, len[4] = { 2, 3, 5, 7 };
	unsigned cls = (v > 0xff) + (v > 0xffff) + (v >= 0x80000000u);

	uint64_t le = v;	/* x86 and every little-endian host: one store */

	p[0] = op[cls];
	p[1] = 5;		/* LONG1's length; the others' first byte */
	if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
		memcpy(p + 1 + (cls == 3), &le, 8);
	else
		store_le64(p + 1 + (cls == 3), v);
	return p + len[cls];
}

static inline uint8_t *cb_put_uint(uint8_t *p, uint32_t v)
{
	static const uint8_t shift[4] = { 0, 24, 16, 0 }, len[4] = { 1, 2, 3, 5 };
	unsigned cls = (v >= 24) + (v > 0xff) + (v > 0xffff);

	uint32_t w = v << shift[cls];
	uint32_t be = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? __builtin_bswap32(w) : w;

	p[0] = cls ? (uint8_t)(23 + cls) : (uint8_t)v;
	memcpy(p + 1, &be, 4);	/* one store */
	return p + len[cls];
}

/* cb_put_head() - a CBOR head of major with argument v (v < 2^32). */
static inline uint8_t *cb_put_head(uint8_t *p, enum cbor_major major, uint32_t v)
{
	uint8_t *q = cb_put_uint(p, v);

	*p |= (uint8_t)(major << 5);
	return q;
}

static uint8_t *pk_put_ints(uint8_t *p, const uint32_t *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p = pk_put_int(p, v[i]);
	return p;
}

static uint8_t *cb_put_uints(uint8_t *p, const uint32_t *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p = cb_put_uint(p, v[i]);
	return p;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/*
 * The same with AVX-512, eight token ids at a time: each is widened to a
 * 64-bit lane holding every byte of its widest form, a byte mask (built
 * with PDEP from the size comparisons) keeps the bytes its size needs,
 * and VPCOMPRESSB packs the kept bytes of all eight together. They write
 * up to 64 bytes past what they keep.
 */
#define ENC_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,bmi2,popcnt")))
#define LANE_BYTES(b) (0x0101010101010101ull * (b))

/* enc_load8() - v[0..k) (k <= 8) zero-extended into eight 64-bit lanes. */
ENC_TARGET static inline __m512i enc_load8(const uint32_t *v, size_t k)
{
	return _mm512_cvtepu32_epi64(_mm256_maskz_loadu_epi32((__mmask8)((1u << k) - 1), v));
}

/* enc_pack() - store the bytes of w that k keeps (those of the first
 * lanes lanes only) at p; p past them. */
ENC_TARGET static inline uint8_t *enc_pack(uint8_t *p, __m512i w, uint64_t k, size_t lanes)
{
	if (lanes < 8)
		k &= (1ull << (8 * lanes)) - 1;
	_mm512_storeu_si512(p, _mm512_maskz_compress_epi8(k, w));
	return p + _mm_popcnt_u64(k);
}

/* Pickle: a lane is [op, 5, v0, v1, v2, v3, 0, -]; K keeps bytes 0 and 2,
 * M also 3, J also 4 and 5, LONG1 0 to 6. */
ENC_TARGET static uint8_t *pk_put_ints_avx512(uint8_t *p, const uint32_t *v, size_t n)
{
	const __m512i le = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)0x80800b0a09088080ull,
								  (long long)0x8080030201008080ull));
	size_t i, k;

	for (i = 0; i < n; i += 8) {
		__m512i x, op;
		__mmask8 m2, m4, m5;

		k = n - i < 8 ? n - i : 8;
		x = enc_load8(v + i, k);
		m2 = _mm512_cmpgt_epu64_mask(x, _mm512_set1_epi64(0xff));
		m4 = _mm512_cmpgt_epu64_mask(x, _mm512_set1_epi64(0xffff));
		m5 = _mm512_cmpgt_epu64_mask(x, _mm512_set1_epi64(0x7fffffff));
		op = _mm512_set1_epi64(0x0500 | 'K');
		op = _mm512_mask_mov_epi64(op, m2, _mm512_set1_epi64(0x0500 | 'M'));
		op = _mm512_mask_mov_epi64(op, m4, _mm512_set1_epi64(0x0500 | 'J'));
		op = _mm512_mask_mov_epi64(op, m5, _mm512_set1_epi64(0x0500 | 0x8a));
		p = enc_pack(p, _mm512_or_si512(_mm512_shuffle_epi8(x, le), op),
			     LANE_BYTES(0x05) | _pdep_u64(m2, LANE_BYTES(0x08)) |
			     _pdep_u64(m4, LANE_BYTES(0x10)) * 3 | _pdep_u64(m5, LANE_BYTES(0x02)) * 0x21,
			     k);
	}
	return p;
}

/* CBOR: a lane is [head, v3, v2, v1, v0] (big-endian); v < 24 keeps byte
 * 0 (the head is v), one byte more bytes 0 and 4, two 0, 3 and 4, four 0
 * to 4. */
ENC_TARGET static uint8_t *cb_put_uints_avx512(uint8_t *p, const uint32_t *v, size_t n)
{
	const __m512i be = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)0x80808008090a0b80ull,
								  (long long)0x8080800001020380ull));
	size_t i, k;

	for (i = 0; i < n; i += 8) {
		__m512i x, head;
		__mmask8 m1, m2, m4;

		k = n - i < 8 ? n - i : 8;
		x = enc_load8(v + i, k);
		m1 = _mm512_cmpge_epu64_mask(x, _mm512_set1_epi64(24));
		m2 = _mm512_cmpgt_epu64_mask(x, _mm512_set1_epi64(0xff));
		m4 = _mm512_cmpgt_epu64_mask(x, _mm512_set1_epi64(0xffff));
		head = _mm512_mask_mov_epi64(x, m1, _mm512_set1_epi64(24));
		head = _mm512_mask_mov_epi64(head, m2, _mm512_set1_epi64(25));
		head = _mm512_mask_mov_epi64(head, m4, _mm512_set1_epi64(26));
		p = enc_pack(p, _mm512_or_si512(_mm512_shuffle_epi8(x, be), head),
			     LANE_BYTES(0x01) | _pdep_u64(m1, LANE_BYTES(0x10)) |
			     _pdep_u64(m2, LANE_BYTES(0x08)) | _pdep_u64(m4, LANE_BYTES(0x02)) * 3,
			     k);
	}
	return p;
}
#undef LANE_BYTES
#define ENC_X86 1
#endif

/* pk_tokens() / cb_tokens() - the token ids of a block, by the code
 * keys_cpu_use() chose; up to 64 bytes written past what is kept. */
static inline uint8_t *pk_tokens(uint8_t *p, const uint32_t *v, size_t n)
{
	if (!cpu_impl)
		keys_cpu_use(0);
#ifdef ENC_X86
	if (use_avx512)
		return pk_put_ints_avx512(p, v, n);
#endif
	return pk_put_ints(p, v, n);
}

static inline uint8_t *cb_tokens(uint8_t *p, const uint32_t *v, size_t n)
{
	if (!cpu_impl)
		keys_cpu_use(0);
#ifdef ENC_X86
	if (use_avx512)
		return cb_put_uints_avx512(p, v, n);
#endif
	return cb_put_uints(p, v, n);
}

/*
 * A block's encoding without extras, in three steps, so that a chain can
 * encode the next block's token ids (which do not depend on the parent)
 * while the current block is hashed: direct_plan() lays the encoding
 * out for a block size (the parent's place, the tokens', what is fixed),
 * direct_fill() writes the tokens and what follows them, direct_hash()
 * puts the parent in and hashes. Byte for byte what the general path
 * writes.
 */
struct direct {
	bool sha;		/* SHA-256, else XXH3-128 */
	bool pickle;		/* pickle, else CBOR */
	size_t pb;		/* parent bytes: 32 or 16 */
	size_t parent_at;	/* where the parent goes */
	size_t tokens_at;	/* where the token ids go */
	size_t ntokens;
	uint8_t head[64];	/* bytes 0..tokens_at, the parent's zero */
};

/* direct_plan() - the layout for blocks of ntokens; false when the
 * encoding may not fit in FAST_STAGE: at most 7 bytes a token, 64 of
 * framing, tuples and parent, 72 written past the end (the token
 * encoders' 64, SHA-256's padding). */
static bool direct_plan(uint32_t scheme, size_t ntokens, struct direct *d)
{
	uint8_t *p = d->head;

	if (ntokens > (FAST_STAGE - 136) / 7)
		return false;
	d->sha = scheme == KVP_KEYS_VLLM_SHA256 || scheme == KVP_KEYS_VLLM_SHA256_CBOR;
	d->pickle = scheme == KVP_KEYS_VLLM_SHA256 || scheme == KVP_KEYS_VLLM_XXHASH;
	d->pb = d->sha ? 32 : 16;
	d->ntokens = ntokens;
	memset(d->head, 0, sizeof(d->head));
	if (d->pickle) {
		memcpy(p, "\x80\x05\x95", 3);	/* PROTO 5, FRAME (length later) */
		p += 11;
		*p++ = 'C';
		*p++ = (uint8_t)d->pb;
		d->parent_at = (size_t)(p - d->head);
		p += d->pb;
		*p++ = PK_MEMOIZE;
		if (ntokens > 3)
			*p++ = '(';
	} else {
		*p++ = 0x83;			/* array of 3 */
		p = cb_put_head(p, CBOR_BYTES, (uint32_t)d->pb);
		d->parent_at = (size_t)(p - d->head);
		p += d->pb;
		p = cb_put_head(p, CBOR_ARRAY, (uint32_t)ntokens);
	}
	d->tokens_at = (size_t)(p - d->head);
	return true;
}

/* direct_fill() - the fixed bytes (once per buffer: fresh), the token
 * ids and what follows them into buf; the encoding's length. */
static size_t direct_fill(const struct direct *d, uint8_t *buf, const uint32_t *tokens,
			  bool fresh)
{
	uint8_t *p = buf + d->tokens_at;
	size_t n = d->ntokens;

	if (fresh)
		memcpy(buf, d->head, d->tokens_at);
	if (!d->pickle) {
		p = cb_tokens(p, tokens, n);
		*p++ = CBOR_NULL;
		return (size_t)(p - buf);
	}
	p = pk_tokens(p, tokens, n);
	*p++ = n == 0 ? ')' : n <= 3 ? (uint8_t)(0x84 + n) : 't';
	if (n)
		*p++ = PK_MEMOIZE;
	*p++ = 'N';
	*p++ = 0x87;			/* TUPLE3 */
	*p++ = PK_MEMOIZE;
	*p++ = '.';
	store_le64(buf + 3, (uint64_t)(p - buf - 11));	/* the frame's length */
	return (size_t)(p - buf);
}

static void direct_hash(const struct direct *d, uint8_t *buf, size_t len,
			const kvp_key *parent, kvp_key *key)
{
	XXH128_hash_t h;

	memcpy(buf + d->parent_at, parent->b, d->pb);
	if (d->sha) {
		sha256_padded(buf, len, key->b);	/* FAST_STAGE has the room */
		return;
	}
	h = XXH3_128bits(buf, len);
	store_be64(key->b, h.high64);	/* xxhash's canonical form */
	store_be64(key->b + 8, h.low64);
	memset(key->b + 16, 0, KVP_KEY_BYTES - 16);
}

/* vllm_block_direct() - the block's key when it has no extras and its
 * encoding fits; false (nothing written) when it does not. */
static bool vllm_block_direct(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			      size_t ntokens, kvp_key *key)
{
	uint8_t buf[FAST_STAGE];
	struct direct d;

	if (!direct_plan(scheme, ntokens, &d))
		return false;
	direct_hash(&d, buf, direct_fill(&d, buf, tokens, true), parent, key);
	return true;
}

/* fill_next() - for a chain of nblocks blocks hashed one after the other
 * from two buffers: while block i is hashed from buf[i & 1], encode block
 * i + 1 (if any) into the other, its length into len[]. */
static inline void fill_next(const struct direct *d, uint8_t (*buf)[FAST_STAGE], size_t *len,
			     const uint32_t *tokens, size_t i, size_t nblocks,
			     uint32_t block_tokens)
{
	if (i + 1 < nblocks)
		len[(i + 1) & 1] = direct_fill(d, buf[(i + 1) & 1],
					      tokens + (i + 1) * (size_t)block_tokens, i == 0);
}

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline uint64_t load_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/*
 * chain_xxh_cbor() - chain_direct() for xxhash_cbor, whose chain is short
 * enough that how the parent reaches the hash counts: it stays in
 * registers (the last digest's halves), and the first 24 bytes of the
 * encoding (array head, byte-string head, parent, token array head) are
 * written as three 8-byte words, which XXH3's 8-byte reads take straight
 * from the store buffer rather than waiting for bytes stored piecemeal.
 */
static void chain_xxh_cbor(const struct direct *d, uint8_t (*buf)[FAST_STAGE],
			   const kvp_key *parent, const uint32_t *tokens, size_t nblocks,
			   uint32_t block_tokens, kvp_key *keys)
{
	uint64_t bh = load_le64(parent->b), bl = load_le64(parent->b + 8);	/* as stored */
	size_t len[2], i;
	XXH128_hash_t h;
	uint8_t *b;

	len[0] = direct_fill(d, buf[0], tokens, true);
	for (i = 0; i < nblocks; i++) {
		fill_next(d, buf, len, tokens, i, nblocks, block_tokens);
		b = buf[i & 1];
		store_le64(b + 16, bl >> 48 | (load_le64(b + 16) & ~(uint64_t)0xffff));
		store_le64(b + 8, bh >> 48 | bl << 16);
		store_le64(b, 0x5083 | bh << 16);	/* 0x83 0x50, parent bytes 0..5 */
		h = XXH3_128bits(b, len[i & 1]);
		bh = __builtin_bswap64(h.high64);
		bl = __builtin_bswap64(h.low64);
		memcpy(keys[i].b, &bh, 8);
		memcpy(keys[i].b + 8, &bl, 8);
		memset(keys[i].b + 16, 0, KVP_KEY_BYTES - 16);
	}
}
#endif

/* chain_direct() - kvp_key_chain() without extras, blocks that fit: two
 * buffers, the next block's ids encoded before this block is hashed.
 * False (nothing written) when the blocks do not fit. */
static bool chain_direct(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			 size_t nblocks, uint32_t block_tokens, kvp_key *keys)
{
	uint8_t buf[2][FAST_STAGE];
	size_t len[2], i;
	struct direct d;

	if (!direct_plan(scheme, block_tokens, &d))
		return false;
	if (!nblocks)
		return true;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (!d.sha && !d.pickle && d.parent_at == 2 && d.tokens_at <= 24) {
		chain_xxh_cbor(&d, buf, parent, tokens, nblocks, block_tokens, keys);
		return true;
	}
#endif
	len[0] = direct_fill(&d, buf[0], tokens, true);
	for (i = 0; i < nblocks; i++) {
		fill_next(&d, buf, len, tokens, i, nblocks, block_tokens);
		direct_hash(&d, buf[i & 1], len[i & 1], i ? &keys[i - 1] : parent, &keys[i]);
	}
	return true;
}

/* vllm_any_root() / vllm_any_block() - vLLM's NONE_HASH and
 * hash_block_tokens() with the sha256, xxhash and xxhash_cbor algorithms. */
static int vllm_any_root(uint32_t scheme, const char *seed, kvp_key *root)
{
	size_t n = strlen(seed);
	struct hsink h;
	int rc;

	hs_begin(&h, scheme != KVP_KEYS_VLLM_SHA256);
	if (scheme == KVP_KEYS_VLLM_XXHASH_CBOR) {
		hc_head(&h, CBOR_TEXT, n);
		hs_write(&h, seed, n);
	} else {
		rc = pk_begin(&h, pk_str_size(n) + 1);
		if (rc < 0) {
			hs_end(&h, root);
			return rc;
		}
		pk_string(&h, true, seed, n);
		hs_byte(&h, '.');
	}
	return hs_end(&h, root);
}

static int values_block(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			size_t ntokens, const kvp_value *extras, size_t nextras, kvp_key *key);

/* vllm_any_block() - the common case straight into a buffer, else the
 * general encoder with the kvp_extra items as values (a str or an
 * unsigned int each). */
static int vllm_any_block(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			  size_t ntokens, const kvp_extra *extras, size_t nextras,
			  kvp_key *key)
{
	kvp_value stack[8], *v = stack;
	size_t i;
	int rc;

	if (nextras == 0)	/* the common case: no copy of the extras */
		return vllm_block_direct(scheme, parent, tokens, ntokens, key) ? 0 :
		       values_block(scheme, parent, tokens, ntokens, NULL, 0, key);
	if (nextras > sizeof(stack) / sizeof(stack[0])) {
		v = malloc(nextras * sizeof(*v));
		if (!v)
			return -ENOMEM;
	}
	for (i = 0; i < nextras; i++)
		v[i] = extras[i].str ? (kvp_value){ .type = KVP_VALUE_STR, .str = extras[i].str } :
			(kvp_value){ .type = KVP_VALUE_UINT, .u = extras[i].num };
	rc = values_block(scheme, parent, tokens, ntokens, v, nextras, key);
	if (v != stack)
		free(v);
	return rc;
}

static bool keys_scheme_known(uint32_t scheme);

/* --- Extra keys as general values (kvp_value) ------------------------------
 *
 * A block's extras as vLLM builds them: ints, str, bytes and tuples of
 * them. In the pickle, a str, bytes or non-empty tuple is memoized when
 * written and a second occurrence of the same object is a memo reference
 * (BINGET 'h' index < 256, else LONG_BINGET 'j'); here the same object is
 * the same pointer (kvp_value.str, .bytes or .items), as vLLM's tag
 * literals ("mm", "lora") are one object. The memo counts from the parent
 * (0) and the token tuple (1 when it is not empty).
 */
#define VAL_MAX_ITEMS	1024	/* values in one block's extras */
#define VAL_MAX_DEPTH	8

struct pk_memo {
	const void *ptr[VAL_MAX_ITEMS];
	uint32_t idx[VAL_MAX_ITEMS];
	uint32_t n, next;	/* entries, the next memo index */
};

static int memo_find(const struct pk_memo *m, const void *p)
{
	uint32_t i;

	for (i = 0; i < m->n; i++)
		if (m->ptr[i] == p)
			return (int)m->idx[i];
	return -1;
}

/* memo_add() - the object just written was memoized (MEMOIZE written). */
static void memo_add(struct pk_memo *m, const void *p)
{
	if (m->n < VAL_MAX_ITEMS) {
		m->ptr[m->n] = p;
		m->idx[m->n++] = m->next;
	}
	m->next++;
}

static void pk_get(struct hsink *h, uint32_t idx)
{
	uint8_t p[5];

	if (idx < 256) {
		p[0] = 'h';
		p[1] = (uint8_t)idx;
		hs_write(h, p, 2);
	} else {
		p[0] = 'j';
		store_le32(p + 1, idx);
		hs_write(h, p, 5);
	}
}

/* pk_sint() - a Python int: BININT1/2 for small non-negative ones, BININT
 * from -2^31 to 2^31 - 1, else LONG1 of the shortest two's complement. */
static void pk_sint(struct hsink *h, int64_t v)
{
	uint8_t p[12];
	size_t n = 1, i;

	if (v >= 0) {
		pk_int(h, (uint64_t)v);
		return;
	}
	if (v >= INT32_MIN) {
		p[0] = 'J';
		store_le32(p + 1, (uint32_t)v);
		hs_write(h, p, 5);
		return;
	}
	/* the fewest bytes whose top bit is the sign: -2^(8n-1) <= v */
	while (n < 8 && v < -((int64_t)1 << (8 * n - 1)))
		n++;
	p[0] = 0x8a;
	p[1] = (uint8_t)n;
	for (i = 0; i < n; i++)
		p[2 + i] = (uint8_t)((uint64_t)v >> (8 * i));
	hs_write(h, p, 2 + n);
}

static int val_check(const kvp_value *v, int depth, uint32_t *count)
{
	uint32_t i;
	int rc;

	if (!v)
		return bad("an extra key's tuple has items NULL");
	if (depth > VAL_MAX_DEPTH)
		return bad("extra keys nest deeper than %d tuples", VAL_MAX_DEPTH);
	if (++*count > VAL_MAX_ITEMS)
		return bad("a block's extra keys hold more than %d values", VAL_MAX_ITEMS);
	switch (v->type) {
	case KVP_VALUE_INT:
	case KVP_VALUE_UINT:
		return 0;
	case KVP_VALUE_STR:
		return v->str ? 0 : bad("value %u of the extra keys is a str with str NULL",
					 *count);
	case KVP_VALUE_BYTES:
		return v->bytes || !v->n ? 0 : bad("value %u of the extra keys is %u bytes at "
						   "NULL", *count, v->n);
	case KVP_VALUE_TUPLE:
		if (v->n && !v->items)
			return bad("value %u of the extra keys is a tuple of %u items at NULL",
				   *count, v->n);
		for (i = 0; i < v->n; i++) {
			rc = val_check(&v->items[i], depth + 1, count);
			if (rc < 0)
				return rc;
		}
		return 0;
	default:
		return bad("value %u of the extra keys has type %u, which vLLM does not hash "
			   "(int, str, bytes and tuple: KVP_VALUE_*)", *count, v->type);
	}
}

static size_t val_strlen(const kvp_value *v)
{
	return v->n ? v->n : strlen(v->str);
}

static void pk_value(struct hsink *h, struct pk_memo *m, const kvp_value *v)
{
	const void *id = v->type == KVP_VALUE_STR ? (const void *)v->str :
			 v->type == KVP_VALUE_BYTES ? v->bytes :
			 v->type == KVP_VALUE_TUPLE ? (const void *)v->items : NULL;
	int got = id && (v->type != KVP_VALUE_TUPLE || v->n) ? memo_find(m, id) : -1;
	uint32_t i;

	if (got >= 0) {
		pk_get(h, (uint32_t)got);
		return;
	}
	switch (v->type) {
	case KVP_VALUE_INT:
		pk_sint(h, v->i);
		break;
	case KVP_VALUE_UINT:
		pk_int(h, v->u);
		break;
	case KVP_VALUE_STR:
	case KVP_VALUE_BYTES:
		pk_string(h, v->type == KVP_VALUE_STR, id,
			  v->type == KVP_VALUE_STR ? val_strlen(v) : v->n);
		memo_add(m, id);
		break;
	case KVP_VALUE_TUPLE:
		pk_tuple_open(h, v->n);
		for (i = 0; i < v->n; i++)
			pk_value(h, m, &v->items[i]);
		pk_tuple_close(h, v->n);
		if (v->n)
			memo_add(m, id);
		break;
	}
}

/* hc_value() - the same value in canonical CBOR (ints major 0 or 1). */
static void hc_value(struct hsink *h, const kvp_value *v)
{
	uint32_t i;

	switch (v->type) {
	case KVP_VALUE_INT:
		if (v->i >= 0)
			hc_head(h, CBOR_UINT, (uint64_t)v->i);
		else
			hc_head(h, (enum cbor_major)1, (uint64_t)(-(v->i + 1)));
		break;
	case KVP_VALUE_UINT:
		hc_head(h, CBOR_UINT, v->u);
		break;
	case KVP_VALUE_STR:
		hc_head(h, CBOR_TEXT, val_strlen(v));
		hs_write(h, v->str, val_strlen(v));
		break;
	case KVP_VALUE_BYTES:
		hc_head(h, CBOR_BYTES, v->n);
		hs_write(h, v->bytes, v->n);
		break;
	case KVP_VALUE_TUPLE:
		hc_head(h, CBOR_ARRAY, v->n);
		for (i = 0; i < v->n; i++)
			hc_value(h, &v->items[i]);
		break;
	}
}

/* pk_block_values() - the block tuple's pickle (after the frame). */
static void pk_block_values(struct hsink *h, struct pk_memo *m, const kvp_key *parent,
			    size_t pb, const uint32_t *tokens, size_t ntokens,
			    const kvp_value *extras, size_t nextras)
{
	size_t i;

	memset(m, 0, sizeof(*m));
	pk_tuple_open(h, 3);
	pk_string(h, false, parent->b, pb);
	m->next = 1;
	pk_tuple_open(h, ntokens);
	for (i = 0; i < ntokens; i++)
		pk_int(h, tokens[i]);
	pk_tuple_close(h, ntokens);
	if (ntokens)
		m->next++;
	if (nextras == 0) {
		hs_byte(h, 'N');
	} else {
		pk_tuple_open(h, nextras);
		for (i = 0; i < nextras; i++)
			pk_value(h, m, &extras[i]);
		pk_tuple_close(h, nextras);
	}
	pk_tuple_close(h, 3);
	hs_byte(h, '.');
}

static int values_block(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			size_t ntokens, const kvp_value *extras, size_t nextras, kvp_key *key)
{
	size_t pb = scheme == KVP_KEYS_VLLM_SHA256 || scheme == KVP_KEYS_VLLM_SHA256_CBOR ?
		    32 : 16, i;
	struct pk_memo *m;
	struct hsink h;
	int rc;

	hs_begin(&h, pb == 16);
	if (scheme == KVP_KEYS_VLLM_SHA256_CBOR || scheme == KVP_KEYS_VLLM_XXHASH_CBOR) {
		hc_head(&h, CBOR_ARRAY, 3);
		hc_head(&h, CBOR_BYTES, pb);
		hs_write(&h, parent->b, pb);
		hc_head(&h, CBOR_ARRAY, ntokens);
		for (i = 0; i < ntokens; i++)
			hc_head(&h, CBOR_UINT, tokens[i]);
		if (nextras == 0) {
			hs_byte(&h, CBOR_NULL);
		} else {
			hc_head(&h, CBOR_ARRAY, nextras);
			for (i = 0; i < nextras; i++)
				hc_value(&h, &extras[i]);
		}
		return hs_end(&h, key);
	}
	m = malloc(sizeof(*m));
	if (!m) {
		hs_end(&h, key);
		return -ENOMEM;
	}
	/* the frame's length first: the same writing, counted */
	h.dry = true;
	pk_block_values(&h, m, parent, pb, tokens, ntokens, extras, nextras);
	h.dry = false;
	i = h.total;
	h.total = 0;
	rc = pk_begin(&h, i);
	if (rc == 0)
		pk_block_values(&h, m, parent, pb, tokens, ntokens, extras, nextras);
	free(m);
	if (rc < 0) {
		hs_end(&h, key);
		return rc;
	}
	return hs_end(&h, key);
}

KVP_API int kvp_key_block_values(uint32_t scheme, const kvp_key *parent,
				 const uint32_t *tokens, size_t ntokens,
				 const kvp_value *extras, size_t nextras, kvp_key *key)
{
	uint32_t count = 0;
	size_t i;

	keys_error_buf[0] = '\0';
	if (!keys_scheme_known(scheme))
		return bad_scheme(scheme);
	if (!parent || !key || (ntokens && !tokens) || (nextras && !extras))
		return bad("kvp_key_block_values: parent and key must not be NULL, nor tokens "
			   "or extras when there are some");
	if (nextras > VAL_MAX_ITEMS)
		return bad("%zu extra keys for one block: at most %d", nextras, VAL_MAX_ITEMS);
	for (i = 0; i < nextras; i++)
		if (val_check(&extras[i], 1, &count) < 0)
			return -EINVAL;
	return values_block(scheme, parent, tokens, ntokens, extras, nextras, key);
}

/* --- A request's keys, as vLLM 0.33 derives them ----------------------------
 *
 * vllm/v1/core/kv_cache_utils.py: generate_block_hash_extra_keys() gives
 * each full block the extras LoRA + multimodal + cache salt + prompt
 * embeddings, in that order, each a tagged tuple; a block with none has
 * None. The tags are one object each (their pointers below).
 */
static const char tag_lora[] = "lora", tag_mm[] = "mm", tag_salt[] = "cache_salt",
		  tag_embeds[] = "prompt_embeds";

static kvp_value v_str(const char *str)
{
	return (kvp_value){ .type = KVP_VALUE_STR, .str = str };
}

static kvp_value v_int(int64_t i)
{
	return (kvp_value){ .type = KVP_VALUE_INT, .i = i };
}

KVP_API int kvp_request_keys(uint32_t scheme, const kvp_key *root, uint32_t block_tokens,
			     const kvp_request *r, kvp_key *keys)
{
	kvp_value *items, *tuples;
	size_t nblocks, b, mm_idx = 0, cap;
	int rc = 0;

	keys_error_buf[0] = '\0';
	if (!keys_scheme_known(scheme))
		return bad_scheme(scheme);
	if (!root || !r || block_tokens == 0 || (r->ntokens && !r->tokens) ||
	    (r->nmm && !r->mm))
		return bad("kvp_request_keys: root and r must not be NULL, block_tokens 0, nor "
			   "tokens or mm NULL when there are some");
	if (r->lora_name && !r->lora_path)
		return bad("LoRA adapter '%.64s' without its path: vLLM keys both", r->lora_name);
	nblocks = r->ntokens / block_tokens;
	if (nblocks > INT_MAX || (nblocks && !keys))
		return bad("kvp_request_keys: keys NULL, or %zu blocks", nblocks);
	if (r->nmm > VAL_MAX_ITEMS / 4)
		return bad("%zu multimodal inputs: at most %d", r->nmm, VAL_MAX_ITEMS / 4);
	for (b = 0; b < r->nmm; b++) {
		if (!r->mm[b].identifier)
			return bad("multimodal input %zu has no identifier", b);
		if (b && r->mm[b].offset < r->mm[b - 1].offset)	/* as vLLM keeps them */
			return bad("multimodal input %zu (offset %lld) comes before input %zu "
				   "(offset %lld): give them sorted by offset", b,
				   (long long)r->mm[b].offset, b - 1,
				   (long long)r->mm[b - 1].offset);
	}
	cap = 3 + r->nmm;	/* extras a block may have */
	items = malloc(cap * 3 * sizeof(*items));
	tuples = malloc(cap * sizeof(*tuples));
	if (!items || !tuples) {
		free(items);
		free(tuples);
		return -ENOMEM;
	}
	for (b = 0; b < nblocks && rc == 0; b++) {
		int64_t start = (int64_t)(b * block_tokens), end = start + block_tokens;
		size_t nt = 0, ni = 0;

#define ADD_TUPLE(...)                                                               \
	do {                                                                         \
		const kvp_value tv[] = { __VA_ARGS__ };                              \
		memcpy(&items[ni], tv, sizeof(tv));                                  \
		tuples[nt++] = (kvp_value){ .type = KVP_VALUE_TUPLE,                 \
					    .n = sizeof(tv) / sizeof(tv[0]),         \
					    .items = &items[ni] };                   \
		ni += sizeof(tv) / sizeof(tv[0]);                                    \
	} while (0)
		if (r->lora_name)
			ADD_TUPLE(v_str(tag_lora), v_str(r->lora_name), v_str(r->lora_path));
		/* _gen_mm_extra_hash_keys(): the features the block overlaps, from
		 * the first one the last block did not finish */
		if (r->nmm && r->mm[r->nmm - 1].offset + (int64_t)r->mm[r->nmm - 1].length > start) {
			while (mm_idx < r->nmm) {
				const kvp_mm_feature *f = &r->mm[mm_idx];
				int64_t fend = f->offset + (int64_t)f->length;

				if (end <= f->offset)
					break;		/* not reached yet */
				if (start >= fend) {
					mm_idx++;	/* passed */
					continue;
				}
				ADD_TUPLE(v_str(tag_mm), v_str(f->identifier), v_int(f->offset - start));
				if (end < fend)
					break;		/* it goes on in the next block */
				mm_idx++;
			}
		}
		if (start == 0 && r->cache_salt && r->cache_salt[0])
			ADD_TUPLE(v_str(tag_salt), v_str(r->cache_salt));
		if (r->embeds)
			ADD_TUPLE(v_str(tag_embeds), ((kvp_value){ .type = KVP_VALUE_BYTES, .n = 32,
								  .bytes = r->embeds[b] }));
#undef ADD_TUPLE
		rc = values_block(scheme, b ? &keys[b - 1] : root,
				  r->tokens + b * block_tokens, block_tokens, tuples, nt, &keys[b]);
	}
	free(items);
	free(tuples);
	return rc < 0 ? rc : (int)nblocks;
}

/* --- The API ----------------------------------------------------------- */

static bool keys_scheme_known(uint32_t scheme)
{
	return scheme == KVP_KEYS_VLLM_SHA256_CBOR || scheme == KVP_KEYS_VLLM_XXHASH_CBOR ||
	       scheme == KVP_KEYS_VLLM_SHA256 || scheme == KVP_KEYS_VLLM_XXHASH;
}

/* keys_block() - one block's key, arguments already checked. Returns 0,
 * -EINVAL (a pickle past one frame) or -ENOMEM (XXH3's streaming state,
 * for a block too large for FAST_STAGE). */
static int keys_block(uint32_t scheme, const kvp_key *parent,
		      const uint32_t *tokens, size_t ntokens,
		      const kvp_extra *extras, size_t nextras, kvp_key *key)
{
	if (scheme != KVP_KEYS_VLLM_SHA256_CBOR)
		return vllm_any_block(scheme, parent, tokens, ntokens, extras, nextras, key);
	vllm_block(parent, tokens, ntokens, extras, nextras, key);
	return 0;
}

KVP_API int kvp_key_root(uint32_t scheme, const char *seed, kvp_key *root)
{
	keys_error_buf[0] = '\0';
	if (!keys_scheme_known(scheme))
		return bad_scheme(scheme);
	if (!seed || !root)
		return bad("kvp_key_root: seed and root must not be NULL");
	if (scheme != KVP_KEYS_VLLM_SHA256_CBOR)
		return vllm_any_root(scheme, seed, root);
	vllm_root(seed, root);
	return 0;
}

/*
 * kvp_key_block() - see kvpool.h. Besides 0 and -EINVAL, the XXH3 schemes
 * return -ENOMEM when a block too large for FAST_STAGE (over about 800
 * tokens) cannot get its streaming state; so does kvp_key_chain().
 */
KVP_API int kvp_key_block(uint32_t scheme, const kvp_key *parent,
			  const uint32_t *tokens, size_t ntokens,
			  const kvp_extra *extras, size_t nextras, kvp_key *key)
{
	keys_error_buf[0] = '\0';
	if (!keys_scheme_known(scheme))
		return bad_scheme(scheme);
	if (!parent || !key || (ntokens && !tokens) || (nextras && !extras))
		return bad("kvp_key_block: parent and key must not be NULL, nor tokens or "
			   "extras when there are some");
	return keys_block(scheme, parent, tokens, ntokens, extras, nextras,
			  key);
}

/*
 * kvp_key_chain() - keys[i] = block(keys[i - 1], i-th block of tokens),
 * keys[-1] = *parent. keys may alias parent only as keys == parent (the
 * parent is read before keys[0] is written). The per-block work is that
 * of kvp_key_block() without its argument checks.
 */
KVP_API int kvp_key_chain(uint32_t scheme, const kvp_key *parent,
			  const uint32_t *tokens, size_t ntokens,
			  uint32_t block_tokens, const kvp_extra *extras,
			  size_t nextras, kvp_key *keys)
{
	size_t nblocks, i;
	int rc;

	keys_error_buf[0] = '\0';
	if (!keys_scheme_known(scheme))
		return bad_scheme(scheme);
	if (!parent || block_tokens == 0 || (nextras && !extras))
		return bad("kvp_key_chain: parent NULL, block_tokens 0, or extras NULL");
	nblocks = ntokens / block_tokens;
	if (nblocks > INT_MAX)
		return bad("%zu blocks in one call: at most %d", nblocks, INT_MAX);
	if (nblocks && (!tokens || !keys))
		return bad("kvp_key_chain: tokens and keys must not be NULL");
	if (!nextras && chain_direct(scheme, parent, tokens, nblocks, block_tokens, keys))
		return (int)nblocks;
	for (i = 0; i < nblocks; i++) {
		rc = keys_block(scheme, i ? &keys[i - 1] : parent,
				tokens + i * (size_t)block_tokens, block_tokens,
				extras, nextras, &keys[i]);
		if (rc < 0)
			return rc;
	}
	return (int)nblocks;
}
