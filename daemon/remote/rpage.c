/* SPDX-License-Identifier: MIT */
/*
 * rpage.c - the remote tier's names: a namespace's identity there and the
 * Redis key of a block (see rpage.h).
 */
#include <endian.h>
#include <stddef.h>
#include <string.h>

#include "client/keys.h"
#include "daemon/remote/rpage.h"

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
	keys_sha256_update(&s, "kvpool remote namespace 2", 25);
	keys_sha256_update(&s, ns->name, strnlen(ns->name, sizeof(ns->name)));
	keys_sha256_update(&s, "", 1);
	keys_sha256_update(&s, ns->model, strnlen(ns->model, sizeof(ns->model)));
	keys_sha256_update(&s, "", 1);
	put32(b, ns->layers);
	put32(b + 4, ns->kv_heads);
	put32(b + 8, ns->head_dim);
	put32(b + 12, ns->block_tokens);
	put32(b + 16, ns->dtype);
	put32(b + 20, ns->key_scheme);
	put32(b + 24, ns->head_dim_v);	/* 0 before it: the same ids */
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
