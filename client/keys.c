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
 * (FIPS 180-4) and the few CBOR items needed are kvpool's own
 * (keys_sha256.c, keys_enc.c); the encoding streams into the hash through a small staging buffer, never
 * a buffer the size of the block.
 *
 * KVP_KEYS_VLLM_SHA256 and KVP_KEYS_VLLM_XXHASH hash CPython's pickle of
 * the same tuple, KVP_KEYS_VLLM_XXHASH_CBOR (also KVP_KEYS_FAST) its CBOR,
 * with SHA-256 or XXH3-128 (libxxhash); see vllm_any_block(). SHA-256 uses
 * the x86 SHA extensions where the CPU has them.
 *
 * Every function here is pure and thread-safe: all state is on the
 * caller's stack.
 *
 * This file holds the API and the schemes' dispatch; SHA-256 is
 * keys_sha256.c's, the encoders keys_enc.c's and keys_direct.c's, a vLLM
 * request's extras keys_request.c's (keys_int.h is what they share).
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

/* What the last key call of this thread found wrong (kvp_last_error()). */
__thread char keys_error_buf[KEYS_ERROR_MAX];

int keys_bad(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(keys_error_buf, sizeof(keys_error_buf), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int keys_bad_scheme(uint32_t scheme)
{
	return keys_bad("key scheme %u is not one of 1 (vllm-sha256-cbor), 2 (vllm-xxhash-cbor, "
		   "also fast), 3 (vllm-sha256), 4 (vllm-xxhash)", scheme);
}

/* --- The API ----------------------------------------------------------- */

bool keys_scheme_known(uint32_t scheme)
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
		return keys_bad_scheme(scheme);
	if (!seed || !root)
		return keys_bad("kvp_key_root: seed and root must not be NULL");
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
		return keys_bad_scheme(scheme);
	if (!parent || !key || (ntokens && !tokens) || (nextras && !extras))
		return keys_bad("kvp_key_block: parent and key must not be NULL, nor tokens or "
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
		return keys_bad_scheme(scheme);
	if (!parent || block_tokens == 0 || (nextras && !extras))
		return keys_bad("kvp_key_chain: parent NULL, block_tokens 0, or extras NULL");
	nblocks = ntokens / block_tokens;
	if (nblocks > INT_MAX)
		return keys_bad("%zu blocks in one call: at most %d", nblocks, INT_MAX);
	if (nblocks && (!tokens || !keys))
		return keys_bad("kvp_key_chain: tokens and keys must not be NULL");
	if (!nextras && keys_chain_direct(scheme, parent, tokens, nblocks, block_tokens, keys))
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
