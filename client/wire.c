/* SPDX-License-Identifier: MIT */
/*
 * wire.c - encoding and checking of kvpool protocol messages.
 *
 * Owns the byte layout of every message: fields are written one by one in
 * little-endian order, so the in-memory layout of the structs (and the
 * byte order of the machine) never reaches the wire.
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
	put16(p + 4, KVP_WIRE_VERSION);
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
	if (hdr->version != KVP_WIRE_VERSION)
		return -KVP_S_VERSION;
	if (hdr->reserved != 0 || (hdr->flags & ~KVP_WIRE_F_REPLY) != 0)
		return -KVP_S_PROTO;
	if (hdr->len != n - KVP_WIRE_HDR_SIZE)
		return -KVP_S_PROTO;
	return 0;
}

#define STATS_VERSION_OFF 0
#define STATS_U32_OFF	16	/* pid, backend */
#define STATS_UPTIME_OFF 24
#define STATS_CLIENTS_OFF 32	/* clients, max_clients */
#define STATS_U64_OFF	40	/* connections_total ... page_size */

/* The uint64_t counters after max_clients, in wire order. */
#define STATS_U64_FIELDS(st)						\
	&(st)->connections_total, &(st)->connections_refused,	\
	&(st)->requests_total,		\
	&(st)->protocol_errors, &(st)->pages_total, &(st)->pages_free,	\
	&(st)->pages_leased, &(st)->pages_cached, &(st)->pages_spilled,	\
	&(st)->pages_inflight, &(st)->page_size

void wire_stats_encode(void *buf, const struct kvp_wire_stats *st)
{
	const uint64_t *const u64[] = { STATS_U64_FIELDS(st) };
	uint8_t *p = buf;
	size_t i;

	memset(p, 0, sizeof(struct kvp_wire_stats));
	memcpy(p + STATS_VERSION_OFF, st->version, sizeof(st->version) - 1);
	put32(p + STATS_U32_OFF, st->pid);
	put32(p + STATS_U32_OFF + 4, st->backend);
	put64(p + STATS_UPTIME_OFF, st->uptime_ms);
	put32(p + STATS_CLIENTS_OFF, st->clients);
	put32(p + STATS_CLIENTS_OFF + 4, st->max_clients);
	for (i = 0; i < sizeof(u64) / sizeof(u64[0]); i++)
		put64(p + STATS_U64_OFF + 8 * i, *u64[i]);
}

int wire_stats_decode(const void *buf, size_t len, struct kvp_wire_stats *st)
{
	uint64_t *const u64[] = { STATS_U64_FIELDS(st) };
	const uint8_t *p = buf;
	size_t i;

	if (len != sizeof(struct kvp_wire_stats))
		return -KVP_S_PROTO;
	memcpy(st->version, p + STATS_VERSION_OFF, sizeof(st->version));
	st->version[sizeof(st->version) - 1] = '\0';
	st->pid = get32(p + STATS_U32_OFF);
	st->backend = get32(p + STATS_U32_OFF + 4);
	st->uptime_ms = get64(p + STATS_UPTIME_OFF);
	st->clients = get32(p + STATS_CLIENTS_OFF);
	st->max_clients = get32(p + STATS_CLIENTS_OFF + 4);
	for (i = 0; i < sizeof(u64) / sizeof(u64[0]); i++)
		*u64[i] = get64(p + STATS_U64_OFF + 8 * i);
	return 0;
}

static const char *const status_str[KVP_S__COUNT] = {
	[KVP_S_OK] = "success",
	[KVP_S_PROTO] = "malformed message",
	[KVP_S_VERSION] = "unsupported protocol version",
	[KVP_S_OP] = "unknown operation",
	[KVP_S_INVAL] = "invalid argument",
	[KVP_S_NOSPC] = "no free page in the pool",
	[KVP_S_STALE] = "stale or unknown page handle",
	[KVP_S_PERM] = "permission denied",
	[KVP_S_LIMIT] = "limit reached",
	[KVP_S_NOENT] = "no such object",
	[KVP_S_MISMATCH] = "namespace geometry mismatch",
	[KVP_S_INTERNAL] = "internal daemon error (see the kvpoold log)",
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
	}
	return "?";
}
