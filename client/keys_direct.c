/* SPDX-License-Identifier: MIT */
/*
 * keys_direct.c - the common case of the prefix keys: a block without
 * extra keys written straight into one stack buffer and hashed in one go,
 * and a chain that encodes the next block while the current one is
 * hashed; the token encoders in plain C and AVX-512. Byte for byte what
 * keys_enc.c writes. Pure and thread-safe.
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
#include <immintrin.h>

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
	if (!keys_cpu_impl)
		keys_cpu_use(0);
#ifdef ENC_X86
	if (keys_use_avx512)
		return pk_put_ints_avx512(p, v, n);
#endif
	return pk_put_ints(p, v, n);
}

static inline uint8_t *cb_tokens(uint8_t *p, const uint32_t *v, size_t n)
{
	if (!keys_cpu_impl)
		keys_cpu_use(0);
#ifdef ENC_X86
	if (keys_use_avx512)
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
		keys_sha256_padded(buf, len, key->b);	/* FAST_STAGE has the room */
		return;
	}
	h = XXH3_128bits(buf, len);
	store_be64(key->b, h.high64);	/* xxhash's canonical form */
	store_be64(key->b + 8, h.low64);
	memset(key->b + 16, 0, KVP_KEY_BYTES - 16);
}

/* vllm_block_direct() - the block's key when it has no extras and its
 * encoding fits; false (nothing written) when it does not. */
bool vllm_block_direct(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
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
 * chain_xxh_cbor() - keys_chain_direct() for xxhash_cbor, whose chain is short
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

/* keys_chain_direct() - kvp_key_chain() without extras, blocks that fit: two
 * buffers, the next block's ids encoded before this block is hashed.
 * False (nothing written) when the blocks do not fit. */
bool keys_chain_direct(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
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
