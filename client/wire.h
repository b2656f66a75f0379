/* SPDX-License-Identifier: MIT */
/*
 * wire.h - the codec of the kvpool protocol, shared by kvpoold and libkvpool.
 *
 * The codec turns messages into bytes and back and checks every length,
 * count and field against the message size before anything uses it. It
 * does no I/O and allocates nothing, so it is unit-tested and fuzzed on
 * its own. Decoders return 0 or a negative enum kvp_status: -KVP_S_PROTO
 * for a malformed message (wrong length, count that disagrees with the
 * payload), -KVP_S_INVAL for a well-formed one with a bad field.
 */
#ifndef KVP_WIRE_H
#define KVP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"

/*
 * wire_hdr_encode() - write hdr into buf (KVP_WIRE_HDR_SIZE bytes).
 * The magic is filled in, the version too when hdr->version is 0 (this
 * build's, KVP_WIRE_VERSION); the other fields come from hdr.
 */
void wire_hdr_encode(void *buf, const struct kvp_wire_hdr *hdr);

/*
 * wire_hdr_decode() - read and check the header of a message of n bytes.
 *
 * Returns 0 and fills *hdr, or -KVP_S_PROTO when the message is shorter
 * than a header, the magic is wrong, reserved bits are set or hdr.len
 * differs from n - header size; -KVP_S_VERSION when the version is not
 * one this build speaks, KVP_WIRE_VERSION_MIN to KVP_WIRE_VERSION (hdr is
 * still filled so the reply can name the op and request id). Whether it
 * is the connection's version is the caller's to check.
 */
int wire_hdr_decode(const void *buf, size_t n, struct kvp_wire_hdr *hdr);

/*
 * wire_op_since() - the protocol version that added op: a connection of
 * an older version is answered OP for it, as that version's daemon
 * answered. 0 for the operations of every version this build speaks, and
 * for unknown ones.
 */
uint16_t wire_op_since(uint16_t op);

/* wire_acq_flags() - the ACQUIRE flags (KVP_WIRE_ACQ_*) of version. */
uint32_t wire_acq_flags(uint16_t version);

/*
 * wire_fixed_decode() - copy a payload that must be exactly size bytes
 * into out. Returns 0 or -KVP_S_PROTO.
 */
int wire_fixed_decode(const void *payload, size_t len, void *out, size_t size);

/*
 * wire_hello_decode() - a HELLO request into *h. Every string must end
 * within its field (-KVP_S_INVAL otherwise) and reserved words be 0.
 */
int wire_hello_decode(const void *payload, size_t len, struct kvp_wire_hello *h);

/*
 * wire_pages_decode() - a page list: struct kvp_wire_pages then n
 * handles. *handles points into payload (unaligned: read entries with
 * wire_handle_at()). Returns -KVP_S_PROTO unless len == 8 + 8 * n.
 */
int wire_pages_decode(const void *payload, size_t len, uint32_t *n,
		      const void **handles);

/* wire_handle_at() - the i-th handle of an array that may be unaligned. */
uint64_t wire_handle_at(const void *handles, size_t i);

/* wire_pages_size() - payload bytes of a list of n pages. */
static inline size_t wire_pages_size(size_t n)
{
	return sizeof(struct kvp_wire_pages) + n * sizeof(uint64_t);
}

/* wire_max_pages() - most handles a list may carry in a message of at
 * most max_msg bytes. */
static inline uint32_t wire_max_pages(size_t max_msg)
{
	return (uint32_t)((max_msg - KVP_WIRE_HDR_SIZE - sizeof(struct kvp_wire_pages)) /
			  sizeof(uint64_t));
}

/*
 * wire_acquire_decode() - an ACQUIRE request of a connection of version:
 * *a, then keys (nkeys x KVP_KEY_BYTES, unaligned) and tokens (ntokens
 * uint32_t, unaligned: read with wire_u32_at()), then with
 * KVP_WIRE_ACQ_HANDOFF (since version 9) the handoff's key (*handoff;
 * else NULL). -KVP_S_PROTO unless the length matches exactly.
 */
int wire_acquire_decode(uint16_t version, const void *payload, size_t len,
			struct kvp_wire_acquire *a,
			const uint8_t **keys, const void **tokens, const uint8_t **handoff);

/* wire_publish_decode() - a PUBLISH request: *pb, then n entries of
 * struct kvp_wire_publish_ent (read with wire_publish_ent_at()), then
 * *ntokens token ids at *tokens (read with wire_u32_at(); 0 when none:
 * the caller checks that they are n x block_tokens). */
int wire_publish_decode(const void *payload, size_t len, struct kvp_wire_publish *pb,
			const void **ents, const void **tokens, size_t *ntokens);
void wire_publish_ent_at(const void *ents, size_t i, struct kvp_wire_publish_ent *e);

/* wire_partial_decode() - a PUBLISH_PARTIAL request: *pp, then ntokens
 * token ids (read with wire_u32_at()). */
int wire_partial_decode(const void *payload, size_t len,
			struct kvp_wire_publish_partial *pp, const void **tokens);

/* wire_u32_at() - the i-th uint32_t of an array that may be unaligned. */
uint32_t wire_u32_at(const void *a, size_t i);

/*
 * wire_stats_decode() - a STATS reply: the fixed part into *st and up to
 * max_ns namespace records into ns. Returns the number of records in the
 * reply (which may exceed max_ns), or -KVP_S_PROTO when the length does
 * not match st->namespaces. Strings come back NUL-terminated.
 */
int wire_stats_decode(const void *payload, size_t len, struct kvp_wire_stats *st,
		      struct kvp_wire_ns_stats *ns, size_t max_ns);

/* wire_stats_size() - payload bytes of a STATS reply with nns records. */
static inline size_t wire_stats_size(size_t nns)
{
	return sizeof(struct kvp_wire_stats) + nns * sizeof(struct kvp_wire_ns_stats);
}

/* wire_status_str() - a one-line description of a status code; never NULL. */
const char *wire_status_str(uint32_t status);

/* wire_op_str() - the name of an operation ("STATS"), or "?" if unknown. */
const char *wire_op_str(uint32_t op);

/* wire_dtype_bytes() - bytes per element of a dtype, 0 if unknown. */
unsigned wire_dtype_bytes(uint32_t dtype);

/* wire_dtype_str() - "f16", "bf16", "f32", "fp8" or "?". */
const char *wire_dtype_str(uint32_t dtype);

#endif /* KVP_WIRE_H */
