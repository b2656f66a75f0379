/* SPDX-License-Identifier: MIT */
/*
 * kvpool_wire.h - the kvpool wire protocol: constants and message layouts.
 *
 * Transport: AF_UNIX, SOCK_SEQPACKET, one request or reply per packet.
 * Every message is a struct kvp_wire_hdr followed by hdr.len payload bytes.
 * All integers are little-endian; every struct below has a fixed size,
 * checked with _Static_assert, and no implicit padding. docs/protocol.md
 * describes each operation.
 *
 * Status codes on the wire are the stable enum kvp_status (never the errno
 * values of the machine that built the daemon).
 */
#ifndef KVPOOL_WIRE_H
#define KVPOOL_WIRE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define KVP_STATIC_ASSERT static_assert
#else
#define KVP_STATIC_ASSERT _Static_assert
#endif

#define KVP_WIRE_MAGIC		0x3150564bu	/* "KVP1" in memory order */
#define KVP_WIRE_VERSION	1u
#define KVP_WIRE_HDR_SIZE	32u
/* Largest packet either side sends unless the daemon is configured with a
 * larger limit; a larger packet is a protocol error. */
#define KVP_WIRE_MAX_MSG_DEFAULT	(256u * 1024u)

/* Operations. Requests carry one; the reply repeats it with
 * KVP_WIRE_F_REPLY set in flags. */
enum kvp_op {
	KVP_OP_STATS = 1,	/* pool and daemon counters (struct kvp_wire_stats) */
};

/* Header flags. */
#define KVP_WIRE_F_REPLY	0x1u	/* this message is a reply */

/* Reply status, stable across builds and machines. */
enum kvp_status {
	KVP_S_OK = 0,
	KVP_S_PROTO = 1,	/* malformed message; the connection is closed */
	KVP_S_VERSION = 2,	/* unsupported protocol version */
	KVP_S_OP = 3,		/* unknown operation */
	KVP_S_INVAL = 4,	/* an argument is out of range */
	KVP_S_NOSPC = 5,	/* no free page */
	KVP_S_STALE = 6,	/* the page handle is stale, forged or released */
	KVP_S_PERM = 7,		/* not allowed for this client */
	KVP_S_LIMIT = 8,	/* a configured limit was reached */
	KVP_S_NOENT = 9,	/* no such object */
	KVP_S_MISMATCH = 10,	/* namespace geometry differs */
	KVP_S_INTERNAL = 11,	/* the daemon failed; see its log */
	KVP_S__COUNT
};

/* struct kvp_wire_hdr - 32 bytes in front of every message. */
struct kvp_wire_hdr {
	uint32_t magic;		/* KVP_WIRE_MAGIC */
	uint16_t version;	/* KVP_WIRE_VERSION */
	uint16_t op;		/* enum kvp_op */
	uint32_t flags;		/* KVP_WIRE_F_* */
	uint32_t status;	/* replies: enum kvp_status; requests: 0 */
	uint64_t req_id;	/* chosen by the client, echoed in the reply */
	uint32_t len;		/* payload bytes after this header */
	uint32_t reserved;	/* 0 */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_hdr) == KVP_WIRE_HDR_SIZE,
	       "kvp_wire_hdr is 32 bytes on the wire");

/* Backends, as reported by STATS. */
enum kvp_backend_kind {
	KVP_BACKEND_NONE = 0,	/* no pool configured */
	KVP_BACKEND_HOST = 1,	/* memfd slabs */
	KVP_BACKEND_CUDA = 2,	/* cudaMalloc slabs, CUDA IPC handles */
};

/* STATS reply payload: a snapshot of the daemon. Requests have no payload.
 * Page counts satisfy the conservation invariant
 *   pages_free + pages_leased + pages_cached + pages_spilled
 *   + pages_inflight == pages_total. */
struct kvp_wire_stats {
	char version[16];	/* daemon version, NUL-terminated */
	uint32_t pid;		/* daemon pid */
	uint32_t backend;	/* enum kvp_backend_kind */
	uint64_t uptime_ms;
	uint32_t clients;	/* connections now open */
	uint32_t max_clients;
	uint64_t connections_total;	/* accepted since start */
	uint64_t connections_refused;	/* turned away at max_clients */
	uint64_t requests_total;
	uint64_t protocol_errors;
	uint64_t pages_total;
	uint64_t pages_free;
	uint64_t pages_leased;
	uint64_t pages_cached;
	uint64_t pages_spilled;
	uint64_t pages_inflight;
	uint64_t page_size;	/* bytes; 0 while no namespace exists */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_stats) == 128,
	       "kvp_wire_stats is 128 bytes on the wire");

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_WIRE_H */
