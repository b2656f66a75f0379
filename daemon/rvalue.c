/* SPDX-License-Identifier: MIT */
/*
 * rvalue.c - a page's value in Redis, sealed (see rvalue.h), with
 * libsodium's XChaCha20-Poly1305: its 192-bit nonces may be random for
 * any number of values under one key, where AES-GCM's 96-bit ones would
 * wear a busy cluster's key out within hours.
 */
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <sodium.h>

#include "daemon/rvalue.h"

#define NONCE_BYTES	crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_BYTES	crypto_aead_xchacha20poly1305_ietf_ABYTES

/* The header, little-endian; all of it but the tag is authenticated. */
struct rvalue_hdr {
	char magic[8];			/* "kvpoolRP" */
	uint32_t format;		/* RVALUE_FORMAT */
	uint32_t hdr_bytes;		/* RPAGE_HDR */
	uint8_t ns_id[RPAGE_ID_BYTES];
	uint8_t key[KVP_KEY_BYTES];
	uint64_t data_bytes;
	uint8_t nonce[24];
	uint8_t tag[16];		/* Poly1305 of the header before it and the data */
};
_Static_assert(sizeof(struct rvalue_hdr) == RPAGE_HDR, "value header is 128 bytes");
_Static_assert(NONCE_BYTES == 24 && TAG_BYTES == 16, "XChaCha20-Poly1305 sizes");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == RVALUE_KEY_BYTES, "key size");

#define AD_BYTES offsetof(struct rvalue_hdr, tag)

static const char magic[8] = { 'k', 'v', 'p', 'o', 'o', 'l', 'R', 'P' };

int rvalue_init(void)
{
	return sodium_init() < 0 ? -ENOSYS : 0;
}

void rvalue_key(const void *file, size_t len, uint8_t sk[RVALUE_KEY_BYTES])
{
	static const char domain[] = "kvpool remote value key 1";
	crypto_hash_sha256_state s;

	crypto_hash_sha256_init(&s);
	crypto_hash_sha256_update(&s, (const unsigned char *)domain, sizeof(domain));
	crypto_hash_sha256_update(&s, file, len);
	crypto_hash_sha256_final(&s, sk);
	sodium_memzero(&s, sizeof(s));
}

void rvalue_seal(void *out, const uint8_t sk[RVALUE_KEY_BYTES],
		 const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
		 uint64_t bytes)
{
	unsigned char *data = (unsigned char *)out + RPAGE_HDR;
	struct rvalue_hdr h;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, magic, sizeof(magic));
	h.format = htole32(RVALUE_FORMAT);
	h.hdr_bytes = htole32(RPAGE_HDR);
	memcpy(h.ns_id, id, RPAGE_ID_BYTES);
	memcpy(h.key, key, KVP_KEY_BYTES);
	h.data_bytes = htole64(bytes);
	randombytes_buf(h.nonce, sizeof(h.nonce));
	crypto_aead_xchacha20poly1305_ietf_encrypt_detached(data, h.tag, NULL, data, bytes,
							    (const unsigned char *)&h, AD_BYTES,
							    NULL, h.nonce, sk);
	memcpy(out, &h, sizeof(h));
}

int rvalue_open(const void *hdr, size_t len, void *data, const uint8_t sk[RVALUE_KEY_BYTES],
		const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
		uint64_t bytes)
{
	struct rvalue_hdr h;

	if (len < RPAGE_HDR)
		return -EBADMSG;
	memcpy(&h, hdr, sizeof(h));
	if (memcmp(h.magic, magic, sizeof(magic)) || le32toh(h.format) != RVALUE_FORMAT ||
	    le32toh(h.hdr_bytes) != RPAGE_HDR || le64toh(h.data_bytes) != len - RPAGE_HDR)
		return -EBADMSG;	/* another format; cut short, or grown */
	if (memcmp(h.ns_id, id, RPAGE_ID_BYTES) || memcmp(h.key, key, KVP_KEY_BYTES) ||
	    le64toh(h.data_bytes) != bytes)
		return -ESTALE;
	/* the tag is checked before a byte is decrypted; a value that does
	 * not open leaves data zeroed */
	if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(data, NULL, data, bytes, h.tag,
								(const unsigned char *)&h,
								AD_BYTES, h.nonce, sk) != 0)
		return -EKEYREJECTED;
	return 0;
}
