/* SPDX-License-Identifier: MIT */
/*
 * wire.h - the codec of the kvpool protocol, shared by kvpoold and libkvpool.
 *
 * The codec turns messages into bytes and back and checks every length
 * and field against the message size before anything uses it. It does no
 * I/O and allocates nothing, so it is unit-tested and fuzzed on its own.
 */
#ifndef KVP_WIRE_H
#define KVP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"

/*
 * wire_hdr_encode() - write hdr into buf (KVP_WIRE_HDR_SIZE bytes).
 * Magic and version are filled in; the other fields come from hdr.
 */
void wire_hdr_encode(void *buf, const struct kvp_wire_hdr *hdr);

/*
 * wire_hdr_decode() - read and check the header of a message of n bytes.
 *
 * Returns 0 and fills *hdr, or a negative value, the status to report:
 * -KVP_S_PROTO when the message is shorter than a header, the magic is
 * wrong, reserved bits are set or hdr.len differs from n - header size;
 * -KVP_S_VERSION when the version is not KVP_WIRE_VERSION (hdr is still
 * filled so the reply can name the op and request id).
 */
int wire_hdr_decode(const void *buf, size_t n, struct kvp_wire_hdr *hdr);

/* Encode or decode a STATS reply payload (sizeof(struct kvp_wire_stats)
 * bytes). wire_stats_decode() returns -KVP_S_PROTO when len is wrong. */
void wire_stats_encode(void *buf, const struct kvp_wire_stats *st);
int wire_stats_decode(const void *buf, size_t len, struct kvp_wire_stats *st);

/* wire_status_str() - a one-line description of a status code; never NULL. */
const char *wire_status_str(uint32_t status);

/* wire_op_str() - the name of an operation ("STATS"), or "?" if unknown. */
const char *wire_op_str(uint32_t op);

#endif /* KVP_WIRE_H */
