/* SPDX-License-Identifier: MIT */
/*
 * rvalue.h - what the remote tier stores in Redis for a page: a header
 * and the page's bytes, sealed with XChaCha20-Poly1305 under the key of
 * --remote-key-file. The header (namespace identity, block key, length,
 * nonce) is authenticated; the page is encrypted and authenticated. So a
 * value is only served to a pool that holds the same key, for the
 * namespace and block it was stored under, with its bytes as stored; and
 * whoever reads Redis without the key learns the keys and sizes, never
 * the KV bytes (which could give back the prompts). No I/O; docs/remote.md
 * says what the key protects and what it does not.
 */
#ifndef KVP_RVALUE_H
#define KVP_RVALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"
#include "daemon/remote/rpage.h"

#define RVALUE_FORMAT		2u	/* 1: checksums only (XXH3), never accepted */
#define RVALUE_KEY_BYTES	32u
#define RVALUE_FILE_MIN		32u	/* bytes of a key file, at least */
#define RVALUE_FILE_MAX		4096u

/* rvalue_init() - the crypto library's start-up: 0, or -ENOSYS. */
int rvalue_init(void);

/* rvalue_use_sodium - seal and open with libsodium alone, also where
 * OpenSSL would (the tests hold the two to each other). */
extern bool rvalue_use_sodium;

/* rvalue_key() - the sealing key made from the bytes of a key file: the
 * same file gives the same key on every machine. */
void rvalue_key(const void *file, size_t len, uint8_t sk[RVALUE_KEY_BYTES]);

/*
 * rvalue_seal() - seal the page of bytes at out + RPAGE_HDR (encrypted in
 * place) and write the header before it, for block key of namespace id,
 * under sk. A fresh random nonce each time. Returns 0, or -EIO (the
 * cipher failed halfway: the bytes are zeroed, and the value must not be
 * stored).
 */
int rvalue_seal(void *out, const uint8_t sk[RVALUE_KEY_BYTES],
		const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
		uint64_t bytes);

/*
 * rvalue_open() - check and open a value whose header (RPAGE_HDR bytes at
 * hdr) and sealed data (bytes at data, decrypted in place when it opens)
 * may be apart; len is the value's whole length. Returns 0 (data holds
 * the page), -EBADMSG (not a value of this format or length: an older
 * kvpool's, cut short, grown), -ESTALE (a value of another namespace or
 * block) or -EKEYREJECTED (its seal does not open: forged, sealed under
 * another key, or damaged; data is zeroed: no byte of it is served).
 */
int rvalue_open(const void *hdr, size_t len, void *data, const uint8_t sk[RVALUE_KEY_BYTES],
		const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
		uint64_t bytes);

#endif /* KVP_RVALUE_H */
