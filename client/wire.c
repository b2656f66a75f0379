/* SPDX-License-Identifier: MIT */
/*
 * wire.c - encoding and checking of kvpool protocol messages.
 *
 * Owns the byte layout of every message. The header is written field by
 * field; payload structs are little-endian, padding-free and statically
 * sized (kvpool_wire.h), so they are copied whole and then checked: every
 * count against the payload length, every string for its terminator.
 */
#include <endian.h>
#include <string.h>

#include "client/wire.h"

/* Little-endian field access at a byte offset; no alignment assumed. */
static void put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

void wire_hdr_encode(void *buf, const struct kvp_wire_hdr *hdr)
{
	uint8_t *p = buf;

	put32(p + 0, KVP_WIRE_MAGIC);
	put16(p + 4, hdr->version ? hdr->version : KVP_WIRE_VERSION);
	put16(p + 6, hdr->op);
	put32(p + 8, hdr->flags);
	put32(p + 12, hdr->status);
	put64(p + 16, hdr->req_id);
	put32(p + 24, hdr->len);
	put32(p + 28, 0);
}

int wire_hdr_decode(const void *buf, size_t n, struct kvp_wire_hdr *hdr)
{
	const uint8_t *p = buf;

	if (n < KVP_WIRE_HDR_SIZE)
		return -KVP_S_PROTO;
	hdr->magic = get32(p + 0);
	hdr->version = get16(p + 4);
	hdr->op = get16(p + 6);
	hdr->flags = get32(p + 8);
	hdr->status = get32(p + 12);
	hdr->req_id = get64(p + 16);
	hdr->len = get32(p + 24);
	hdr->reserved = get32(p + 28);
	if (hdr->magic != KVP_WIRE_MAGIC)
		return -KVP_S_PROTO;
	if (hdr->version < KVP_WIRE_VERSION_MIN || hdr->version > KVP_WIRE_VERSION)
		return -KVP_S_VERSION;
	if (hdr->reserved != 0 || (hdr->flags & ~KVP_WIRE_F_REPLY) != 0)
		return -KVP_S_PROTO;
	if (hdr->len != n - KVP_WIRE_HDR_SIZE)
		return -KVP_S_PROTO;
	return 0;
}

uint16_t wire_op_since(uint16_t op)
{
	return op == KVP_OP_HANDOFF ? 9 : 0;
}

uint32_t wire_acq_flags(uint16_t version)
{
	return version >= 9 ? KVP_WIRE_ACQ_ALL :
			      KVP_WIRE_ACQ_ALL & ~(KVP_WIRE_ACQ_HANDOFF | KVP_WIRE_ACQ_SOURCES);
}

int wire_fixed_decode(const void *payload, size_t len, void *out, size_t size)
{
	if (len != size)
		return -KVP_S_PROTO;
	memcpy(out, payload, size);
	return 0;
}

/* terminated() - true when the field of size bytes holds a NUL. */
static bool terminated(const char *field, size_t size)
{
	return memchr(field, '\0', size) != NULL;
}

int wire_hello_decode(const void *payload, size_t len, struct kvp_wire_hello *h)
{
	int rc = wire_fixed_decode(payload, len, h, sizeof(*h));

	if (rc < 0)
		return rc;
	if (!terminated(h->ns, sizeof(h->ns)) ||
	    !terminated(h->model, sizeof(h->model)) ||
	    !terminated(h->client_name, sizeof(h->client_name)))
		return -KVP_S_INVAL;
	return 0;
}

int wire_pages_decode(const void *payload, size_t len, uint32_t *n,
		      const void **handles)
{
	struct kvp_wire_pages pl;

	if (len < sizeof(pl))
		return -KVP_S_PROTO;
	memcpy(&pl, payload, sizeof(pl));
	if (pl.reserved != 0 || len != wire_pages_size(pl.n))
		return -KVP_S_PROTO;
	*n = pl.n;
	*handles = (const uint8_t *)payload + sizeof(pl);
	return 0;
}

uint64_t wire_handle_at(const void *handles, size_t i)
{
	uint64_t h;

	memcpy(&h, (const uint8_t *)handles + i * sizeof(h), sizeof(h));
	return h;
}

uint32_t wire_u32_at(const void *a, size_t i)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)a + i * sizeof(v), sizeof(v));
	return v;
}

int wire_acquire_decode(uint16_t version, const void *payload, size_t len,
			struct kvp_wire_acquire *a, const uint8_t **keys, const void **tail,
			const uint8_t **handoff)
{
	const uint8_t *p = payload;
	bool key;
	uint64_t body;

	if (len < sizeof(*a))
		return -KVP_S_PROTO;
	memcpy(a, p, sizeof(*a));
	/* 64-bit sums: counts up to 2^32 cannot wrap */
	body = sizeof(*a) + (uint64_t)a->nkeys * KVP_KEY_BYTES +
	       (uint64_t)a->ntokens * sizeof(uint32_t);
	key = (a->flags & wire_acq_flags(version) & KVP_WIRE_ACQ_HANDOFF) != 0;
	if ((uint64_t)len != body + (key ? KVP_KEY_BYTES : 0))
		return -KVP_S_PROTO;
	*keys = p + sizeof(*a);
	*tail = p + sizeof(*a) + (size_t)a->nkeys * KVP_KEY_BYTES;
	*handoff = key ? p + body : NULL;
	return 0;
}

int wire_publish_decode(const void *payload, size_t len, struct kvp_wire_publish *pb,
			const void **ents, const void **tokens, size_t *ntokens)
{
	uint64_t head;

	if (len < sizeof(*pb))
		return -KVP_S_PROTO;
	memcpy(pb, payload, sizeof(*pb));
	head = sizeof(*pb) + (uint64_t)pb->n * sizeof(struct kvp_wire_publish_ent);
	if ((uint64_t)len < head || ((uint64_t)len - head) % sizeof(uint32_t))
		return -KVP_S_PROTO;
	*ents = (const uint8_t *)payload + sizeof(*pb);
	*tokens = (const uint8_t *)payload + head;
	*ntokens = (size_t)(((uint64_t)len - head) / sizeof(uint32_t));
	return 0;
}

void wire_publish_ent_at(const void *ents, size_t i, struct kvp_wire_publish_ent *e)
{
	memcpy(e, (const uint8_t *)ents + i * sizeof(*e), sizeof(*e));
}

int wire_partial_decode(const void *payload, size_t len,
			struct kvp_wire_publish_partial *pp, const void **tokens)
{
	if (len < sizeof(*pp))
		return -KVP_S_PROTO;
	memcpy(pp, payload, sizeof(*pp));
	if ((uint64_t)len != sizeof(*pp) + (uint64_t)pp->ntokens * sizeof(uint32_t))
		return -KVP_S_PROTO;
	*tokens = (const uint8_t *)payload + sizeof(*pp);
	return 0;
}

int wire_stats_decode(const void *payload, size_t len, struct kvp_wire_stats *st,
		      struct kvp_wire_ns_stats *ns, size_t max_ns)
{
	const uint8_t *p = payload;
	size_t i;

	if (len < sizeof(*st))
		return -KVP_S_PROTO;
	memcpy(st, p, sizeof(*st));
	if (len != wire_stats_size(st->namespaces))
		return -KVP_S_PROTO;
	st->version[sizeof(st->version) - 1] = '\0';
	for (i = 0; i < st->namespaces && i < max_ns; i++) {
		memcpy(&ns[i], p + wire_stats_size(i), sizeof(ns[i]));
		ns[i].name[sizeof(ns[i].name) - 1] = '\0';
		ns[i].model[sizeof(ns[i].model) - 1] = '\0';
	}
	return (int)st->namespaces;
}

static const char *const status_str[KVP_S__COUNT] = {
	[KVP_S_OK] = "success",
	[KVP_S_PROTO] = "malformed message",
	[KVP_S_VERSION] = "unsupported protocol version",
	[KVP_S_OP] = "unknown operation",
	[KVP_S_INVAL] = "invalid argument",
	[KVP_S_NOSPC] = "no free page in the pool",
	[KVP_S_STALE] = "stale or unknown page handle or ticket",
	[KVP_S_PERM] = "permission denied",
	[KVP_S_LIMIT] = "limit reached",
	[KVP_S_NOENT] = "no such object",
	[KVP_S_MISMATCH] = "namespace geometry mismatch",
	[KVP_S_INTERNAL] = "internal daemon error (see the kvpoold log)",
	[KVP_S_STATE] = "not allowed in this state of the session",
	[KVP_S_BUSY] = "in use",
};

const char *wire_status_str(uint32_t status)
{
	if (status < KVP_S__COUNT && status_str[status])
		return status_str[status];
	return "unknown status";
}

const char *wire_op_str(uint32_t op)
{
	switch (op) {
	case KVP_OP_STATS:
		return "STATS";
	case KVP_OP_HELLO:
		return "HELLO";
	case KVP_OP_MAP_SLAB:
		return "MAP_SLAB";
	case KVP_OP_ALLOC:
		return "ALLOC";
	case KVP_OP_RELEASE:
		return "RELEASE";
	case KVP_OP_ACQUIRE:
		return "ACQUIRE";
	case KVP_OP_PUBLISH:
		return "PUBLISH";
	case KVP_OP_PUBLISH_PARTIAL:
		return "PUBLISH_PARTIAL";
	case KVP_OP_COW:
		return "COW";
	case KVP_OP_RETAIN:
		return "RETAIN";
	case KVP_OP_LIST_CLIENTS:
		return "LIST_CLIENTS";
	case KVP_OP_LIST_PAGES:
		return "LIST_PAGES";
	case KVP_OP_LIST_PREFIXES:
		return "LIST_PREFIXES";
	case KVP_OP_EVICT:
		return "EVICT";
	case KVP_OP_DISCONNECT:
		return "DISCONNECT";
	case KVP_OP_DROP_NS:
		return "DROP_NS";
	case KVP_OP_HANDOFF:
		return "HANDOFF";
	}
	return "?";
}

unsigned wire_dtype_bytes(uint32_t dtype)
{
	switch (dtype) {
	case KVP_WIRE_DTYPE_F16:
	case KVP_WIRE_DTYPE_BF16:
		return 2;
	case KVP_WIRE_DTYPE_F32:
		return 4;
	case KVP_WIRE_DTYPE_FP8:
		return 1;
	}
	return 0;
}

const char *wire_dtype_str(uint32_t dtype)
{
	switch (dtype) {
	case KVP_WIRE_DTYPE_F16:
		return "f16";
	case KVP_WIRE_DTYPE_BF16:
		return "bf16";
	case KVP_WIRE_DTYPE_F32:
		return "f32";
	case KVP_WIRE_DTYPE_FP8:
		return "fp8";
	}
	return "?";
}
