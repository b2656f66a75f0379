/* SPDX-License-Identifier: MIT */
/*
 * keys_int.h - what the files of the prefix keys share, and with no one
 * else: keys.c (the API and the schemes), keys_sha256.c (SHA-256 and its
 * x86 variants, the CPU's choice), keys_enc.c (the CBOR and pickle
 * encoders into SHA-256 or XXH3-128, general values), keys_direct.c (a
 * block written straight into one buffer, with the token encoders'
 * AVX-512 variants) and keys_request.c (a vLLM request's extra keys).
 * Everything outside goes through kvpool.h and keys.h.
 */
#ifndef KVP_KEYS_INT_H
#define KVP_KEYS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvpool.h"
#include "client/keys.h"

/* The CPU's choice (keys_cpu_use()): KEYS_CPU_*, 0 before the first. */
extern int keys_cpu_impl;
extern bool keys_use_avx512;

static inline void store_be32(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap32(v);	/* one store */
#endif
	memcpy(p, &v, 4);
}

/* --- The encodings' constants ---------------------------------------- */

enum cbor_major {
	CBOR_UINT = 0,		/* unsigned integer */
	CBOR_BYTES = 2,		/* byte string */
	CBOR_TEXT = 3,		/* text string (UTF-8) */
	CBOR_ARRAY = 4,		/* array of n items */
};

#define CBOR_NULL	0xf6	/* major 7, simple value 22 */
#define CBOR_HEAD_MAX	9	/* initial byte + 8-byte argument */
#define CBOR_STAGE	256

/* pickle: one frame at most; MEMOIZE follows each str, bytes, tuple */
#define PK_FRAME_MAX	65535u
#define PK_MEMOIZE	0x94

/* general values (kvp_value) in one block's extras, at most */
#define VAL_MAX_ITEMS	1024	/* values in one block's extras */
#define VAL_MAX_DEPTH	8

/* --- Byte stores, the staging size ------------------------------------- */

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

/* --- keys.c: the API ------------------------------------------------------- */

/* keys_bad() - set this thread's kvp_last_error() from fmt; -EINVAL. */
int keys_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* keys_bad_scheme() - keys_bad() for an unknown key scheme. */
int keys_bad_scheme(uint32_t scheme);

/* keys_scheme_known() - scheme is one of kvpool.h's KVP_KEYS_*. */
bool keys_scheme_known(uint32_t scheme);

/* --- keys_sha256.c: SHA-256 and its x86 variants --------------------------- */

/* keys_sha256_padded() - SHA-256 of msg[0..len) in one go; msg has room
 * for the padding (72 bytes past len) and is written there. */
void keys_sha256_padded(uint8_t *msg, size_t len, uint8_t out[KEYS_SHA256_BYTES]);

/* --- keys_enc.c: the encoders ---------------------------------------------- */

/* vllm_root() - sha256_cbor's root key: SHA-256 of the seed's CBOR text. */
void vllm_root(const char *seed, kvp_key *root);

/* vllm_block() - sha256_cbor's block key, streamed through the CBOR sink. */
void vllm_block(const kvp_key *parent, const uint32_t *tokens,
		       size_t ntokens, const kvp_extra *extras, size_t nextras,
		       kvp_key *key);

/* vllm_any_root() - vLLM's NONE_HASH with the sha256, xxhash and
 * xxhash_cbor algorithms. 0 or -errno. */
int vllm_any_root(uint32_t scheme, const char *seed, kvp_key *root);

/* vllm_any_block() - hash_block_tokens() with those algorithms: the direct
 * path when it can, else the general encoder. 0 or -errno. */
int vllm_any_block(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			  size_t ntokens, const kvp_extra *extras, size_t nextras,
			  kvp_key *key);

/* keys_values_block() - a block's key with extras as general values
 * (kvp_value), through the general encoder. 0 or -errno. */
int keys_values_block(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			size_t ntokens, const kvp_value *extras, size_t nextras, kvp_key *key);

/* --- keys_direct.c: one buffer, one hash ----------------------------------- */

/* vllm_block_direct() - a block without extras written straight into one
 * buffer and hashed in one go; false when it does not fit FAST_STAGE. */
bool vllm_block_direct(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			      size_t ntokens, kvp_key *key);

/* keys_chain_direct() - a chain of such blocks, the next block's tokens
 * encoded while the current one is hashed; false when they do not fit. */
bool keys_chain_direct(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			 size_t nblocks, uint32_t block_tokens, kvp_key *keys);

#endif /* KVP_KEYS_INT_H */
