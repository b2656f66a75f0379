/* SPDX-License-Identifier: MIT */
/*
 * rvalue.c - a page's value in Redis, sealed (see rvalue.h), with
 * XChaCha20-Poly1305 (IETF): its 192-bit nonces may be random for any
 * number of values under one key, where AES-GCM's 96-bit ones would wear
 * a busy cluster's key out within hours. XChaCha20-Poly1305 is
 * ChaCha20-Poly1305 under a subkey, HChaCha20 of the key and the nonce's
 * first 16 bytes, with the last 8 as its nonce: libsodium makes the
 * subkey, and OpenSSL's ChaCha20-Poly1305 (2 to 3 times libsodium's on
 * x86, with AVX2) seals with it where kvpoold was built with libcrypto;
 * else libsodium does it all. The bytes are the same either way
 * (tests/check_rcluster holds both to each other).
 */
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <sodium.h>
#ifdef HAVE_LIBCRYPTO
#include <openssl/evp.h>
#endif

#include "daemon/remote/rvalue.h"

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

/* rvalue_use_sodium: libsodium alone (the tests' cross-check). */
bool rvalue_use_sodium;

#ifdef HAVE_LIBCRYPTO
/*
 * evp_seal() - ChaCha20-Poly1305 (IETF) of data in place under the subkey
 * of key and nonce, ad authenticated: the tag out (seal), or checked
 * (open). Returns 1 (done; opened: authentic), 0 (OpenSSL did not start:
 * data untouched, libsodium may do it) or -1 (failed with data touched:
 * a seal must not be tried again under this nonce; an open is not
 * authentic, and data is zeroed). The context is the loop's, made once.
 */
static int evp_seal(bool seal, unsigned char *data, size_t bytes, unsigned char *tag,
		    const unsigned char *ad, size_t adlen, const unsigned char nonce[24],
		    const uint8_t key[RVALUE_KEY_BYTES])
{
	static EVP_CIPHER_CTX *ctx;
	unsigned char sub[32], n12[12] = { 0 };
	int len, ok;

	if (!ctx)
		ctx = EVP_CIPHER_CTX_new();
	if (!ctx)
		return 0;
	crypto_core_hchacha20(sub, nonce, key, NULL);
	memcpy(n12 + 4, nonce + 16, 8);
	ok = EVP_CipherInit_ex(ctx, EVP_chacha20_poly1305(), NULL, sub, n12, seal) == 1 &&
	     (seal || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tag) == 1) &&
	     EVP_CipherUpdate(ctx, NULL, &len, ad, (int)adlen) == 1;
	sodium_memzero(sub, sizeof(sub));
	if (!ok)
		return 0;
	ok = EVP_CipherUpdate(ctx, data, &len, data, (int)bytes) == 1 &&
	     EVP_CipherFinal_ex(ctx, data + len, &len) == 1 &&
	     (!seal || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1);
	if (ok)
		return 1;
	sodium_memzero(data, bytes);	/* half done, or decrypted but not authentic */
	return -1;
}
#endif

/* by_evp() - OpenSSL seals this one: built with it, asked, and a length
 * its int takes. */
static bool by_evp(uint64_t bytes)
{
#ifdef HAVE_LIBCRYPTO
	return !rvalue_use_sodium && bytes <= INT_MAX;
#else
	(void)bytes;
	return false;
#endif
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

int rvalue_seal(void *out, const uint8_t sk[RVALUE_KEY_BYTES],
		const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
		uint64_t bytes)
{
	unsigned char *data = (unsigned char *)out + RPAGE_HDR;
	struct rvalue_hdr h;
#ifdef HAVE_LIBCRYPTO
	int rc;
#endif

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, magic, sizeof(magic));
	h.format = htole32(RVALUE_FORMAT);
	h.hdr_bytes = htole32(RPAGE_HDR);
	memcpy(h.ns_id, id, RPAGE_ID_BYTES);
	memcpy(h.key, key, KVP_KEY_BYTES);
	h.data_bytes = htole64(bytes);
	randombytes_buf(h.nonce, sizeof(h.nonce));
#ifdef HAVE_LIBCRYPTO
	rc = by_evp(bytes) ? evp_seal(true, data, bytes, h.tag, (const unsigned char *)&h,
				      AD_BYTES, h.nonce, sk) : 0;
	if (rc < 0)
		return -EIO;	/* never again under this nonce: not sent */
	if (rc > 0) {
		memcpy(out, &h, sizeof(h));
		return 0;
	}
#endif
	crypto_aead_xchacha20poly1305_ietf_encrypt_detached(data, h.tag, NULL, data, bytes,
							    (const unsigned char *)&h, AD_BYTES,
							    NULL, h.nonce, sk);
	memcpy(out, &h, sizeof(h));
	return 0;
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
	/* a value that does not open leaves data zeroed */
#ifdef HAVE_LIBCRYPTO
	if (by_evp(bytes)) {
		int rc = evp_seal(false, data, bytes, h.tag, (const unsigned char *)&h,
				  AD_BYTES, h.nonce, sk);

		if (rc)
			return rc > 0 ? 0 : -EKEYREJECTED;
	}
#endif
	if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(data, NULL, data, bytes, h.tag,
								(const unsigned char *)&h,
								AD_BYTES, h.nonce, sk) != 0)
		return -EKEYREJECTED;
	return 0;
}
