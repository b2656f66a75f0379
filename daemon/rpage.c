/* SPDX-License-Identifier: MIT */
/*
 * rpage.c - the remote tier's value format (see rpage.h).
 */
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <xxhash.h>

#include "client/keys.h"
#include "daemon/rpage.h"

/* The header, little-endian. */
struct rpage_hdr {
	char magic[8];			/* "kvpoolRP" */
	uint32_t format;		/* RPAGE_FORMAT */
	uint32_t hdr_bytes;		/* RPAGE_HDR */
	uint8_t ns_id[RPAGE_ID_BYTES];
	uint8_t key[KVP_KEY_BYTES];
	uint64_t data_bytes;
	uint64_t data_checksum;		/* XXH3-64 of the data */
	uint8_t reserved[24];		/* zero */
	uint64_t hdr_checksum;		/* XXH3-64 of the bytes before it */
};
_Static_assert(sizeof(struct rpage_hdr) == RPAGE_HDR, "rpage header is 128 bytes");

static const char magic[8] = { 'k', 'v', 'p', 'o', 'o', 'l', 'R', 'P' };

/* put32() / put64() - v as little-endian into p. */
static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

void rpage_ns_id(const struct spill_ns *ns, uint8_t id[RPAGE_ID_BYTES])
{
	struct keys_sha256 s;
	uint8_t b[8 * 4 + 8];

	keys_sha256_init(&s);
	keys_sha256_update(&s, "kvpool remote namespace 1", 25);
	keys_sha256_update(&s, ns->model, strnlen(ns->model, sizeof(ns->model)));
	keys_sha256_update(&s, "", 1);
	put32(b, ns->layers);
	put32(b + 4, ns->kv_heads);
	put32(b + 8, ns->head_dim);
	put32(b + 12, ns->block_tokens);
	put32(b + 16, ns->dtype);
	put32(b + 20, ns->key_scheme);
	put32(b + 24, 0);
	put32(b + 28, 0);
	put64(b + 32, ns->page_bytes);
	keys_sha256_update(&s, b, sizeof(b));
	keys_sha256_update(&s, ns->root, sizeof(ns->root));
	keys_sha256_final(&s, id);
}

void rpage_key(const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
	       char out[RPAGE_KEY_LEN])
{
	static const char hex[] = "0123456789abcdef";
	char *p = out;
	unsigned i;

	memcpy(p, "kvp1:", 5);
	p += 5;
	for (i = 0; i < 8; i++) {
		*p++ = hex[id[i] >> 4];
		*p++ = hex[id[i] & 15];
	}
	*p++ = ':';
	for (i = 0; i < KVP_KEY_BYTES; i++) {
		*p++ = hex[key[i] >> 4];
		*p++ = hex[key[i] & 15];
	}
}

void rpage_pack(void *out, const uint8_t id[RPAGE_ID_BYTES],
		const uint8_t key[KVP_KEY_BYTES], uint64_t bytes)
{
	struct rpage_hdr h;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, magic, sizeof(magic));
	h.format = htole32(RPAGE_FORMAT);
	h.hdr_bytes = htole32(RPAGE_HDR);
	memcpy(h.ns_id, id, RPAGE_ID_BYTES);
	memcpy(h.key, key, KVP_KEY_BYTES);
	h.data_bytes = htole64(bytes);
	h.data_checksum = htole64(XXH3_64bits((const uint8_t *)out + RPAGE_HDR, bytes));
	h.hdr_checksum = htole64(XXH3_64bits(&h, offsetof(struct rpage_hdr, hdr_checksum)));
	memcpy(out, &h, sizeof(h));
}

int rpage_check(const void *val, size_t len, const uint8_t id[RPAGE_ID_BYTES],
		const uint8_t key[KVP_KEY_BYTES], uint64_t bytes)
{
	if (len < RPAGE_HDR)
		return -EBADMSG;
	return rpage_check_split(val, len, (const uint8_t *)val + RPAGE_HDR, id, key, bytes);
}

int rpage_check_split(const void *hdr, size_t len, const void *data,
		      const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
		      uint64_t bytes)
{
	struct rpage_hdr h;

	if (len < RPAGE_HDR)
		return -EBADMSG;
	memcpy(&h, hdr, sizeof(h));
	if (memcmp(h.magic, magic, sizeof(magic)) || le32toh(h.format) != RPAGE_FORMAT ||
	    le32toh(h.hdr_bytes) != RPAGE_HDR ||
	    le64toh(h.hdr_checksum) != XXH3_64bits(&h, offsetof(struct rpage_hdr, hdr_checksum)))
		return -EBADMSG;
	if (le64toh(h.data_bytes) != len - RPAGE_HDR)
		return -EBADMSG;	/* cut short, or grown */
	if (memcmp(h.ns_id, id, RPAGE_ID_BYTES) || memcmp(h.key, key, KVP_KEY_BYTES) ||
	    le64toh(h.data_bytes) != bytes)
		return -ESTALE;
	if (le64toh(h.data_checksum) != XXH3_64bits(data, bytes))
		return -EILSEQ;
	return 0;
}
