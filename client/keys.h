/* SPDX-License-Identifier: MIT */
/*
 * keys.h - inside libkvpool: the SHA-256 under the prefix keys
 * (client/keys_sha256.c). The public key functions are kvp_key_root(),
 * kvp_key_block() and kvp_key_chain() in kvpool.h; what is here is not
 * exported (hidden visibility, version script) and is declared only so
 * that the key tests (tests/check_keys*.c) can hold the hash against FIPS
 * 180-4's examples and run the portable and x86 code in turn.
 */
#ifndef KVP_KEYS_H
#define KVP_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define KEYS_SHA256_BYTES 32

/* A SHA-256 computation in progress. Plain data: copy it to fork a hash,
 * no cleanup needed. */
struct keys_sha256 {
	uint32_t h[8];		/* chaining state H0..H7 */
	uint64_t bytes;		/* message bytes hashed so far */
	size_t fill;		/* bytes waiting in buf, 0..63 */
	uint8_t buf[64];	/* a partial message block */
};

/* keys_sha256_init() - start a new message. */
void keys_sha256_init(struct keys_sha256 *s);

/* keys_sha256_update() - append len bytes of data (data may be NULL when
 * len is 0). Any split of a message into updates gives the same digest. */
void keys_sha256_update(struct keys_sha256 *s, const void *data, size_t len);

/* keys_sha256_final() - pad, write the 32-byte digest to out; s must be
 * initialised again before reuse. */
void keys_sha256_final(struct keys_sha256 *s, uint8_t out[KEYS_SHA256_BYTES]);

/* The message of the last key function that failed on this thread, which
 * kvp_last_error() returns (the library's one error buffer). */
#define KEYS_ERROR_MAX 513
extern __thread char keys_error_buf[KEYS_ERROR_MAX];

/* keys_cpu_use() - the code the key functions run from now on: KEYS_CPU_C
 * (portable C), KEYS_CPU_X86 (every x86 extension the CPU has of those
 * kvpool uses: SHA for SHA-256, AVX-512 VBMI2 for encoding token ids;
 * -ENOTSUP where it has neither) or 0 (the best there is, the default).
 * Returns the one in use. For the tests, which hold both to the same
 * vectors. */
#define KEYS_CPU_C	1
#define KEYS_CPU_X86	2
int keys_cpu_use(int impl);

/* keys_sha256() - the digest of one whole message. */
void keys_sha256(const void *data, size_t len, uint8_t out[KEYS_SHA256_BYTES]);

/* keys_seed_id() - what HELLO's key_seed_id carries for a key seed: the
 * first 8 bytes of SHA-256 of its text, never all zero (that means no
 * seed asked). The seed itself never goes over the socket. */
#define KEYS_SEED_ID_BYTES 8
void keys_seed_id(const char *seed, uint8_t id[KEYS_SEED_ID_BYTES]);

#endif /* KVP_KEYS_H */
