/* SPDX-License-Identifier: MIT */
/*
 * kvpool_wire.h - the kvpool wire protocol: constants and message layouts.
 *
 * Transport: AF_UNIX, SOCK_SEQPACKET, one request or reply per packet.
 * Every message is a struct kvp_wire_hdr followed by hdr.len payload bytes.
 * All integers are little-endian, and so are the hosts kvpool runs on
 * (x86-64, aarch64): the structs below are the wire layout in memory,
 * with fixed sizes checked by static assertions and no implicit padding.
 * docs/protocol.md describes each operation.
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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvpool's wire structs are little-endian in memory: big-endian hosts are not supported"
#endif

#define KVP_WIRE_MAGIC		0x3150564bu	/* "KVP1" in memory order */
#define KVP_WIRE_VERSION	9u
/* The oldest version this build speaks: the previous release's (N-1).
 * kvpoold answers a connection in the version of its first message, from
 * KVP_WIRE_VERSION_MIN to KVP_WIRE_VERSION, and refuses there what a
 * later version added; libkvpool, refused at HELLO by a kvpoold of
 * version KVP_WIRE_VERSION_MIN or later, says HELLO again in that one
 * (docs/protocol.md, "Versions"). */
#define KVP_WIRE_VERSION_MIN	8u
#define KVP_WIRE_HDR_SIZE	32u
/* Largest packet either side sends unless the daemon is configured with a
 * larger limit; a larger packet is a protocol error. */
#define KVP_WIRE_MAX_MSG_DEFAULT	(256u * 1024u)
/* Longest error text an error reply carries as its payload. */
#define KVP_WIRE_ERRMSG_MAX	512u

#define KVP_KEY_BYTES		32	/* a block's content key */
#define KVP_NAME_MAX		64u	/* namespace name, NUL-padded */
#define KVP_MODEL_MAX		128u	/* model identity, NUL-padded */
#define KVP_CLIENT_NAME_MAX	32u	/* client name, NUL-padded */

/*
 * Page handles: gen << 32 | slab << KVP_HANDLE_INDEX_BITS | index.
 * gen >= 1, so 0 is never a handle. Clients treat handles as opaque
 * except to find the slab a page lives in.
 */
#define KVP_HANDLE_INDEX_BITS	20u
#define KVP_HANDLE_SLAB_BITS	12u
#define KVP_MAX_SLABS		(1u << KVP_HANDLE_SLAB_BITS)
#define KVP_MAX_SLAB_PAGES	(1u << KVP_HANDLE_INDEX_BITS)
#define KVP_HANDLE_INDEX(h)	((uint32_t)(h) & (KVP_MAX_SLAB_PAGES - 1))
#define KVP_HANDLE_SLAB(h)	(((uint32_t)(h) >> KVP_HANDLE_INDEX_BITS) & (KVP_MAX_SLABS - 1))
#define KVP_HANDLE_GEN(h)	((uint32_t)((h) >> 32))
#define KVP_HANDLE(gen, slab, index) \
	((uint64_t)(gen) << 32 | (uint64_t)(slab) << KVP_HANDLE_INDEX_BITS | (uint64_t)(index))

/* Operations. Requests carry one; the reply repeats it with
 * KVP_WIRE_F_REPLY set in flags. */
enum kvp_op {
	KVP_OP_STATS = 1,	/* daemon and pool counters */
	KVP_OP_HELLO = 2,	/* join a namespace (first request) */
	KVP_OP_MAP_SLAB = 3,	/* get one slab's fd or IPC handle */
	KVP_OP_ALLOC = 4,	/* lease n new PRIVATE pages */
	KVP_OP_RELEASE = 5,	/* drop n leases */
	KVP_OP_ACQUIRE = 6,	/* lease the longest indexed prefix of n keys */
	KVP_OP_PUBLISH = 7,	/* index a chain of PRIVATE pages under keys */
	KVP_OP_PUBLISH_PARTIAL = 8, /* index a partly filled page by its tokens */
	KVP_OP_COW = 9,		/* new PRIVATE copies of held pages */
	KVP_OP_RETAIN = 10,	/* one more lease on held pages */
	KVP_OP_LIST_CLIENTS = 11,	/* the connections and what they hold */
	KVP_OP_LIST_PAGES = 12,	/* pages, filtered: state, tier, holders */
	KVP_OP_LIST_PREFIXES = 13,	/* the most used prefix blocks */
	KVP_OP_EVICT = 14,	/* admin: push cached pages out of the pool */
	KVP_OP_DISCONNECT = 15,	/* admin: close a client's connection */
	KVP_OP_DROP_NS = 16,	/* admin: forget a namespace and its pages */
	KVP_OP_HANDOFF = 17,	/* P/D: a handoff's ticket: issue, check; abandon a key */
};

/* Key schemes of a namespace (enum kvp_key_scheme in kvpool.h). */
#define KVP_WIRE_KEYS_VLLM_SHA256_CBOR	1u
#define KVP_WIRE_KEYS_VLLM_XXHASH_CBOR	2u
#define KVP_WIRE_KEYS_FAST		KVP_WIRE_KEYS_VLLM_XXHASH_CBOR
#define KVP_WIRE_KEYS_VLLM_SHA256	3u
#define KVP_WIRE_KEYS_VLLM_XXHASH	4u
#define KVP_WIRE_KEYS_MAX		4u

/* Priority classes of published pages: evicted lowest first; PINNED
 * counts against the namespace's pinned quota. */
#define KVP_PRIO_LOW	0u
#define KVP_PRIO_NORMAL	1u
#define KVP_PRIO_HIGH	2u
#define KVP_PRIO_PINNED	3u

/* Header flags. */
#define KVP_WIRE_F_REPLY	0x1u	/* this message is a reply */

/* Reply status, stable across builds and machines. A reply with a status
 * other than OK may carry a text payload (at most KVP_WIRE_ERRMSG_MAX
 * bytes, not NUL-terminated) that says what failed and with which value. */
enum kvp_status {
	KVP_S_OK = 0,
	KVP_S_PROTO = 1,	/* malformed message; the connection is closed */
	KVP_S_VERSION = 2,	/* unsupported protocol version; closed */
	KVP_S_OP = 3,		/* unknown operation */
	KVP_S_INVAL = 4,	/* an argument is out of range */
	KVP_S_NOSPC = 5,	/* no free page */
	KVP_S_STALE = 6,	/* the page handle is stale, forged or released */
	KVP_S_PERM = 7,		/* not allowed for this client */
	KVP_S_LIMIT = 8,	/* a configured limit was reached */
	KVP_S_NOENT = 9,	/* no such object */
	KVP_S_MISMATCH = 10,	/* namespace geometry differs */
	KVP_S_INTERNAL = 11,	/* the daemon failed; see its log */
	KVP_S_STATE = 12,	/* not now: e.g. ALLOC before HELLO */
	KVP_S_BUSY = 13,	/* in use: e.g. DROP_NS of a namespace with clients */
	KVP_S__COUNT
};

/* struct kvp_wire_hdr - 32 bytes in front of every message. */
struct kvp_wire_hdr {
	uint32_t magic;		/* KVP_WIRE_MAGIC */
	uint16_t version;	/* the connection's version (see KVP_WIRE_VERSION_MIN) */
	uint16_t op;		/* enum kvp_op */
	uint32_t flags;		/* KVP_WIRE_F_* */
	uint32_t status;	/* replies: enum kvp_status; requests: 0 */
	uint64_t req_id;	/* chosen by the client, echoed in the reply */
	uint32_t len;		/* payload bytes after this header */
	uint32_t reserved;	/* 0 */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_hdr) == KVP_WIRE_HDR_SIZE,
		  "kvp_wire_hdr is 32 bytes on the wire");

/* Backends, as reported by HELLO and STATS. */
enum kvp_backend_kind {
	KVP_BACKEND_NONE = 0,	/* no pool */
	KVP_BACKEND_HOST = 1,	/* memfd slabs */
	KVP_BACKEND_CUDA = 2,	/* cudaMalloc slabs, CUDA IPC handles */
};

/* Where a namespace's pages live (HELLO memory; since version 5). */
#define KVP_MEMORY_DEFAULT	0u	/* the daemon's backend: GPU memory with cuda */
#define KVP_MEMORY_HOST		1u	/* host memory (memfd slabs), whatever the backend */

/* HELLO head_dim_v (since version 6) of a namespace whose pages hold K
 * alone: MLA models keep one latent vector per token and layer, no V. */
#define KVP_K_ONLY		0xFFFFFFFFu

/* KV element types of a namespace. */
enum kvp_wire_dtype {
	KVP_WIRE_DTYPE_F16 = 1,
	KVP_WIRE_DTYPE_BF16 = 2,
	KVP_WIRE_DTYPE_F32 = 3,
	KVP_WIRE_DTYPE_FP8 = 4,
};

/*
 * HELLO request: the namespace to join and its geometry. An empty ns
 * opens an inspection session (STATS only). The first client of a
 * namespace creates it (if it may write there); later ones must send the
 * same geometry and model.
 */
struct kvp_wire_hello {
	char ns[KVP_NAME_MAX];
	char model[KVP_MODEL_MAX];
	char client_name[KVP_CLIENT_NAME_MAX];
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t block_tokens;
	uint32_t dtype;		/* enum kvp_wire_dtype */
	uint32_t key_scheme;	/* KVP_WIRE_KEYS_*; 0: the daemon's default */
	/* the first 8 bytes of SHA-256 of the key seed the client derives
	 * its own keys from (vLLM: PYTHONHASHSEED, else "vllm-none-hash");
	 * all zero: none asked, the client keys from the namespace's root */
	uint8_t key_seed_id[8];
	/* since version 5: KVP_MEMORY_*, the memory of the namespace's pages.
	 * The namespace's creator chooses it; a later client that asks for
	 * another is refused (MISMATCH), one that asks DEFAULT takes the
	 * namespace's. The reply's backend says which it is. */
	uint32_t memory;
	/* since version 6: V's head size. 0: the same as head_dim (K and V
	 * alike); KVP_K_ONLY: no V at all (MLA's one latent vector per
	 * token); else 1..4096 (K and V of different sizes) */
	uint32_t head_dim_v;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_hello) == 264, "kvp_wire_hello is 264 bytes");

/* HELLO reply: the namespace's page layout and this session's limits. */
struct kvp_wire_hello_reply {
	uint64_t client_id;
	uint64_t page_bytes;	/* layers x kv_heads x (head_dim + V's) x block_tokens x dtype size */
	uint64_t page_stride;	/* distance between pages in a slab */
	uint64_t slab_bytes;
	uint32_t pages_per_slab;
	uint32_t backend;	/* enum kvp_backend_kind of the namespace's pages
				 * (the daemon's for an inspection session) */
	uint32_t ns_id;
	uint32_t max_batch;	/* most pages in one ALLOC or RELEASE */
	uint64_t max_leases;	/* most pages this client may hold */
	uint64_t max_msg;	/* largest message the daemon takes or sends */
	uint32_t key_scheme;	/* the namespace's KVP_WIRE_KEYS_* */
	uint32_t block_tokens;	/* tokens per page */
	uint8_t root_key[KVP_KEY_BYTES];	/* parent of a sequence's first block */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_hello_reply) == 104, "kvp_wire_hello_reply is 104 bytes");

/* MAP_SLAB request and reply. The host backend's reply carries the
 * slab's memfd as SCM_RIGHTS ancillary data; the cuda backend's carries
 * the IPC handle in ipc_handle. Only slabs of the client's namespace. */
struct kvp_wire_map_slab {
	uint32_t slab;
	uint32_t reserved;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_map_slab) == 8, "kvp_wire_map_slab is 8 bytes");

struct kvp_wire_map_slab_reply {
	uint32_t slab;
	uint32_t pages;
	uint64_t bytes;
	uint8_t ipc_handle[64];
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_map_slab_reply) == 80, "kvp_wire_map_slab_reply is 80 bytes");

/*
 * A list of pages: ALLOC's request is this struct alone (n = pages
 * wanted); ALLOC's reply and RELEASE's request are this struct followed
 * by n uint64_t handles. n must match the payload length exactly.
 */
struct kvp_wire_pages {
	uint32_t n;
	uint32_t reserved;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_pages) == 8, "kvp_wire_pages is 8 bytes");

/*
 * ACQUIRE request: this struct, nkeys keys of KVP_KEY_BYTES, then ntokens
 * uint32_t token ids from the first key's block on (0 .. (nkeys + 1) x
 * block_tokens - 1 of them), then with KVP_WIRE_ACQ_HANDOFF one key. The daemon leases the pages of the longest
 * indexed prefix of the keys, hits blocks; then, when the tokens reach
 * past block hits' start, the longest partial page under keys[hits - 1]
 * (under parent when hits is 0) whose tokens are a prefix of that
 * block's tokens: turn 2 of a chat finds turn 1's partly filled tail.
 */
struct kvp_wire_acquire {
	uint32_t nkeys;
	uint32_t ntokens;
	uint8_t parent[KVP_KEY_BYTES];
	/* Since version 4: when the keys that the pool lacks are asked of the
	 * remote tier (--remote). prefill_rate: tokens per second the client
	 * computes them at, 0 for the daemon's --remote-prefill-rate; the
	 * tier is skipped when its estimated fetch takes longer. remote_max_us:
	 * skip it when the fetch would take longer than this, 0 for no
	 * cut-off, KVP_REMOTE_NEVER never to ask it. */
	uint32_t prefill_rate;
	uint32_t remote_max_us;
	/* Since version 7: KVP_WIRE_ACQ_*. Since version 8, wait_ms (a
	 * reserved 0 before): with KVP_WIRE_ACQ_WAIT, 1 ..
	 * KVP_WIRE_WAIT_MAX_MS; else 0. */
	uint32_t flags;
	uint32_t wait_ms;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_acquire) == 56, "kvp_wire_acquire is 56 bytes");
#define KVP_REMOTE_NEVER	0xffffffffu
/* ACQUIRE flags. LOAD: the keys were looked up already, by another client
 * of the same engine (vLLM's scheduler looks up, its workers lease and
 * copy): the request is not counted as a lookup (acquires, hits, misses,
 * hit tokens). PROBE: lease nothing and count nothing; the reply's hits
 * is how many leading keys the daemon holds, in the pool or a local tier
 * (the remote tier is not asked, no partial page is looked for), with no
 * handles after it. WAIT: keys the daemon does not hold yet are waited
 * for (another client is computing them: a decode engine waits for its
 * prefill engine's saves) up to wait_ms milliseconds; the reply comes
 * once every key is held, or at the deadline with the prefix held then
 * (since version 8). HANDOFF (with WAIT, since version 9): the wait is
 * for a handoff, and the payload ends with one key more, after the
 * tokens: the key HANDOFF ISSUE was asked for (the handoff's last
 * block). The wait ends at once, answered with what is held, when that
 * key is abandoned, or when the client that was issued the ticket hangs
 * up before the key is published (a prefill engine that died). */
#define KVP_WIRE_ACQ_LOAD	0x1u
#define KVP_WIRE_ACQ_PROBE	0x2u
#define KVP_WIRE_ACQ_WAIT	0x4u
#define KVP_WIRE_ACQ_HANDOFF	0x8u
#define KVP_WIRE_ACQ_SOURCES	0x10u
#define KVP_WIRE_ACQ_ALL	(KVP_WIRE_ACQ_LOAD | KVP_WIRE_ACQ_PROBE | KVP_WIRE_ACQ_WAIT | \
				 KVP_WIRE_ACQ_HANDOFF | KVP_WIRE_ACQ_SOURCES)
#define KVP_WIRE_WAIT_MAX_MS	600000u

/* ACQUIRE reply: this struct, then hits page handles; with
 * KVP_WIRE_ACQ_SOURCES (since version 9), then hits bytes, each leased
 * block's source (KVP_SRC_*), zero-padded to a multiple of 8. */
#define KVP_SRC_POOL	0u	/* in the pool already */
#define KVP_SRC_HOST	1u	/* read back from the host tier */
#define KVP_SRC_NVME	2u	/* read back from the NVMe tier */
#define KVP_SRC_REMOTE	3u	/* fetched from the remote tier for this request */
struct kvp_wire_acquire_reply {
	uint32_t hits;		/* leading keys found */
	uint32_t partial_tokens;	/* tokens of the partial page, 0 if none */
	uint64_t partial_page;	/* its handle (leased), 0 if none */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_acquire_reply) == 16, "kvp_wire_acquire_reply is 16 bytes");

/*
 * PUBLISH request: this struct, then n entries, then optionally (since
 * version 3) n x block_tokens uint32_t token ids: entry i's block's
 * tokens, for the KV events that name it (kept only while the daemon
 * publishes events). Entry i is the block after
 * entry i - 1; entry 0 is the block after parent. Each page must be a
 * PRIVATE page that only this client holds. Reply: struct kvp_wire_pages
 * and n handles: the canonical page of each key (the entry's own page,
 * or the page already indexed under its key, on which the client then
 * holds a lease too; its own page stays private until released).
 */
struct kvp_wire_publish {
	uint32_t n;
	uint32_t prio;		/* KVP_PRIO_* */
	uint8_t parent[KVP_KEY_BYTES];
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_publish) == 40, "kvp_wire_publish is 40 bytes");

struct kvp_wire_publish_ent {
	uint64_t page;
	uint8_t key[KVP_KEY_BYTES];
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_publish_ent) == 40, "kvp_wire_publish_ent is 40 bytes");

/*
 * PUBLISH_PARTIAL request: this struct, then ntokens uint32_t token ids
 * (1 .. block_tokens - 1): the page holds the K/V of those tokens, the
 * block after parent. Reply: struct kvp_wire_pages with one handle, the
 * canonical page (as for PUBLISH).
 */
struct kvp_wire_publish_partial {
	uint64_t page;
	uint32_t ntokens;
	uint32_t prio;
	uint8_t parent[KVP_KEY_BYTES];
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_publish_partial) == 48,
		  "kvp_wire_publish_partial is 48 bytes");

/*
 * HANDOFF request (since version 9): this struct. A handoff is a prefill
 * engine's saves that a decode engine waits for; its ticket is kvpoold's
 * proof that a writer of the namespace announced it, which no one
 * without the daemon's ticket key can make.
 * - ISSUE (WRITE rights): a ticket for the blocks key[] ends, blocks long,
 *   valid ttl_ms (1 .. KVP_WIRE_WAIT_MAX_MS). Reply: struct
 *   kvp_wire_ticket.
 * - CHECK (READ rights): ticket is one this daemon (or one holding the
 *   same --remote-key-file) issued in this namespace for the blocks key
 *   ends, not expired. Reply: struct kvp_wire_handoff_left; STALE (with
 *   why) when not.
 * - ABANDON (WRITE rights): the block key will not be published (a save
 *   skipped or failed): the ACQUIREs that wait for it as the first key
 *   they lack are answered now with what is held, and so are those that
 *   come to lack it in the next KVP_WIRE_ABANDON_MS (as long as a ticket
 *   holds), until a client publishes it after all. Reply: empty.
 */
struct kvp_wire_ticket {
	uint64_t expires_ms;	/* CLOCK_REALTIME, milliseconds */
	uint32_t blocks;	/* the handoff's blocks, the last under its key */
	uint32_t reserved;	/* 0 */
	uint8_t mac[16];
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_ticket) == 32, "kvp_wire_ticket is 32 bytes");

struct kvp_wire_handoff {
	uint32_t what;		/* KVP_HANDOFF_* */
	uint32_t blocks;	/* ISSUE: the handoff's blocks; else 0 */
	uint32_t ttl_ms;	/* ISSUE: how long the ticket holds; else 0 */
	uint32_t reserved;	/* 0 */
	uint8_t key[KVP_KEY_BYTES];
	struct kvp_wire_ticket ticket;	/* CHECK: the ticket; else zeros */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_handoff) == 80, "kvp_wire_handoff is 80 bytes");
#define KVP_HANDOFF_ISSUE	1u
#define KVP_HANDOFF_CHECK	2u
#define KVP_HANDOFF_ABANDON	3u
#define KVP_WIRE_ABANDON_MS	KVP_WIRE_WAIT_MAX_MS	/* a ticket's longest */

/* CHECK reply. */
struct kvp_wire_handoff_left {
	uint32_t left_ms;	/* until the ticket expires (>= 1) */
	uint32_t reserved;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_handoff_left) == 8, "kvp_wire_handoff_left is 8 bytes");

/*
 * LIST_CLIENTS reply: struct kvp_wire_count, then count records. Request:
 * no payload.
 */
struct kvp_wire_count {
	uint32_t count;		/* records that follow */
	uint32_t total;		/* records there are (more when cut short) */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_count) == 8, "kvp_wire_count is 8 bytes");

/* A client's rights (LIST_CLIENTS): read, write, admin in its namespace
 * (the --access rules'), and ADMIN_ALL for an admin of the daemon. */
#define KVP_RIGHT_READ		0x1u
#define KVP_RIGHT_WRITE		0x2u
#define KVP_RIGHT_ADMIN		0x4u
#define KVP_RIGHT_ADMIN_ALL	0x8u

struct kvp_wire_client {
	uint64_t id;
	uint32_t pid, uid, gid;
	uint32_t rights;	/* KVP_RIGHT_*: in its namespace, and daemon-wide admin */
	uint64_t leases;	/* pages held (with repeats) */
	uint64_t connected_ms;	/* when, in daemon uptime */
	char name[KVP_CLIENT_NAME_MAX];
	char ns[KVP_NAME_MAX];	/* "" for an inspection session */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_client) == 136, "kvp_wire_client is 136 bytes");

/* LIST_PAGES request: filters (0 / "" match all) and a limit. */
struct kvp_wire_list_pages {
	char ns[KVP_NAME_MAX];
	uint32_t state;		/* 0 any, else a KVP_PAGE_* state */
	uint32_t limit;		/* most records (0: as many as fit) */
	uint64_t client;	/* only pages this client holds */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_list_pages) == 80, "kvp_wire_list_pages is 80 bytes");

/* Page states in LIST_PAGES. */
enum kvp_page_state {
	KVP_PAGE_PRIVATE = 1,
	KVP_PAGE_SHARED = 2,
	KVP_PAGE_CACHED = 3,
	KVP_PAGE_INFLIGHT = 4,
	KVP_PAGE_SPILLED = 5,	/* in the NVMe tier */
	KVP_PAGE_HOST = 6,	/* in the host tier */
};

/* LIST_PAGES reply: struct kvp_wire_count, then records. */
struct kvp_wire_page {
	uint64_t handle;	/* 0 for a spilled page (it has no pool page) */
	uint32_t ns_id;
	uint32_t state;		/* KVP_PAGE_* */
	uint32_t refs;		/* leases */
	uint32_t holders;	/* clients holding it */
	uint64_t holder;	/* its one holder's id; 0: none or several */
	uint32_t prio;		/* published: priority class */
	uint32_t tokens;	/* published: tokens (block_tokens, or a partial's) */
	uint64_t age_ms;	/* published: since last used */
	uint8_t key[8];		/* published: the key's first bytes */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_page) == 56, "kvp_wire_page is 56 bytes");

/* LIST_PREFIXES request: the namespace ("" all) and how many. Reply:
 * struct kvp_wire_count, then records, most hits first. */
struct kvp_wire_list_prefixes {
	char ns[KVP_NAME_MAX];
	uint32_t top;
	uint32_t reserved;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_list_prefixes) == 72, "kvp_wire_list_prefixes is 72 bytes");

struct kvp_wire_prefix {
	uint8_t key[8];		/* the block's key's first bytes */
	uint32_t ns_id;
	uint32_t depth;		/* blocks from the root, this one included */
	uint32_t refs;		/* leases now */
	uint32_t state;		/* KVP_PAGE_* */
	uint64_t hits;		/* ACQUIREs that served it */
	uint64_t bytes;		/* depth x page bytes: the prefix's K/V */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_prefix) == 40, "kvp_wire_prefix is 40 bytes");

/* EVICT request: namespace ("" all) and most pages (0: every cached
 * page). Reply: struct kvp_wire_count with the pages evicted. */
struct kvp_wire_evict {
	char ns[KVP_NAME_MAX];
	uint64_t max;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_evict) == 72, "kvp_wire_evict is 72 bytes");

/* DISCONNECT request: the client's id. DROP_NS request: the name, and
 * (since version 7) flags: KVP_WIRE_DROP_FORCE disconnects the
 * namespace's clients (each told why) where without it a namespace that
 * has clients is refused (BUSY); reserved is 0. */
struct kvp_wire_disconnect {
	uint64_t client;
};
struct kvp_wire_drop_ns {
	char ns[KVP_NAME_MAX];
	uint32_t flags;
	uint32_t reserved;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_drop_ns) == 72, "kvp_wire_drop_ns is 72 bytes");
#define KVP_WIRE_DROP_FORCE	0x1u

/*
 * A notice: a message with KVP_WIRE_F_REPLY, req_id 0 and a status other
 * than OK that no request asked for. The daemon sends one just before it
 * closes a client's connection for a reason the client should hear (an
 * admin disconnected it, its namespace was dropped); its text says which.
 * libkvpool keeps it for the kvp_last_error() of the call that finds the
 * connection gone.
 */
#define KVP_WIRE_NOTICE_ID	0u

/*
 * STATS reply: struct kvp_wire_stats, then `namespaces` records of
 * struct kvp_wire_ns_stats. Requests have no payload. Page counts satisfy
 * the conservation invariant
 *   free + private + shared + cached + spilled + inflight == total,
 * where total counts the pool's pages and the pages spilled to a tier.
 */
/* Prefix-sharing counters, per namespace and summed over all. */
struct kvp_wire_prefix_stats {
	uint64_t acquires;	/* ACQUIRE requests */
	uint64_t hits;		/* blocks found (full and partial) */
	uint64_t misses;	/* keys asked for and not found */
	uint64_t hit_tokens;	/* tokens served from the cache */
	uint64_t publishes;	/* pages indexed */
	uint64_t dedups;	/* published keys that were already indexed */
	uint64_t cows;		/* pages copied */
	uint64_t evictions;	/* cached pages freed for new ones */
	uint64_t pinned;	/* indexed pages in the pinned class, now */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_prefix_stats) == 72, "kvp_wire_prefix_stats is 72 bytes");

/* A tier's counters (host memory or NVMe), per namespace and summed over
 * all. The host tier has no checksums and nothing in flight: those are 0. */
struct kvp_wire_tier_stats {
	uint64_t slots;		/* capacity in pages (0: no tier) */
	uint64_t used;		/* slots holding a page or being written */
	uint64_t spills;	/* pages written */
	uint64_t restores;	/* pages read back and checked */
	uint64_t checksum_failures;	/* reads that failed their check: misses */
	uint64_t io_errors;	/* writes or reads that failed */
	uint64_t dropped;	/* evicted pages not spilled: no slot or buffer */
	uint64_t restore_us_mean;	/* restore latency, microseconds */
	uint64_t restore_us_max;
	uint64_t writing;	/* writes in flight now */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_tier_stats) == 80, "kvp_wire_tier_stats is 80 bytes");

/* KV events (--kv-events): enabled is 1 when the daemon publishes them. */
struct kvp_wire_events_stats {
	uint64_t enabled;
	uint64_t batches;	/* batches sent on the PUB socket */
	uint64_t events;	/* events in them */
	uint64_t dropped_batches;	/* dropped: the queue was full */
	uint64_t dropped_events;	/* events in those */
	uint64_t queued_bytes;	/* waiting for the socket now */
	uint64_t replays;	/* replay requests answered */
	uint64_t replayed;	/* batches sent again by replays */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_events_stats) == 64, "kvp_wire_events_stats is 64 bytes");

/*
 * The remote tier (--remote; since version 4): enabled is 1 when the
 * daemon has one. The connection counters are the daemon's (one set of
 * connections serves every namespace); fetches, restored, sent and
 * skipped_slow are summed over the namespaces, each of which has its own
 * in struct kvp_wire_ns_remote_stats.
 */
struct kvp_wire_remote_stats {
	uint64_t enabled;
	uint64_t up;		/* 1 while a master is connected and slots are mapped */
	uint64_t nodes;		/* masters in the slot map */
	uint64_t nodes_up;	/* of those, connected */
	uint64_t slots;		/* slots with a master (16384 when whole) */
	uint64_t gets;		/* GETs sent */
	uint64_t hits;		/* values that came back and passed their checks */
	uint64_t misses;	/* keys the cluster did not have */
	uint64_t corrupt;	/* values that failed their checks: misses */
	uint64_t errors;	/* GETs lost to a dead node, a timeout or an error reply,
				 * and connections dropped for breaking the protocol */
	uint64_t skipped;	/* GETs not sent: node down, in-flight cap, rate cap */
	uint64_t puts;		/* pages sent, each once however often its SET went */
	uint64_t put_errors;	/* pages sent and never taken (given up) */
	uint64_t put_skipped;	/* SETs not sent: node down, caps */
	uint64_t bytes_in;
	uint64_t bytes_out;
	uint64_t redirects;	/* MOVED and ASK replies followed */
	uint64_t map_loads;	/* slot maps read */
	uint64_t connects;
	uint64_t disconnects;	/* connections lost */
	uint64_t inflight;	/* requests sent and not answered, now */
	uint64_t latency_us;	/* measured round trip of a GET to an idle node */
	uint64_t bandwidth;	/* measured bytes/s a busy node delivers */
	uint64_t fetches;	/* ACQUIREs that asked the tier */
	uint64_t restored;	/* blocks it gave back, indexed in the pool */
	uint64_t sent;		/* pages the namespaces sent to it */
	uint64_t skipped_slow;	/* ACQUIREs that did not ask: recomputing is faster */
	uint64_t forged;	/* of corrupt: values whose seal did not open (forged,
				 * sealed under another key, or damaged) */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_remote_stats) == 224, "kvp_wire_remote_stats is 224 bytes");

/* A namespace's share of the remote tier's work. */
struct kvp_wire_ns_remote_stats {
	uint64_t fetches;
	uint64_t restored;
	uint64_t sent;
	uint64_t skipped_slow;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_ns_remote_stats) == 32, "kvp_wire_ns_remote_stats is 32 bytes");

/* The daemon recounted every page for this reply and its counts add up:
 * the conservation invariant holds (see below). */
#define KVP_STATS_F_CONSERVED	0x1u

struct kvp_wire_stats {
	char version[16];	/* daemon version, NUL-terminated */
	uint32_t pid;
	uint32_t backend;	/* enum kvp_backend_kind */
	uint64_t uptime_ms;
	uint32_t clients;	/* connections served now */
	uint32_t max_clients;
	uint32_t namespaces;	/* records that follow */
	uint32_t flags;		/* KVP_STATS_F_* */
	uint64_t pool_bytes;	/* configured budget */
	uint64_t slab_bytes;	/* configured slab size */
	uint64_t slabs;		/* slabs allocated now */
	uint64_t connections_total;	/* accepted and served since start */
	uint64_t connections_refused;	/* turned away at max_clients */
	uint64_t requests_total;
	uint64_t protocol_errors;
	uint64_t allocs;	/* pages allocated since start */
	uint64_t releases;	/* leases released since start */
	uint64_t errors_nospc;
	uint64_t errors_stale;
	uint64_t errors_limit;
	uint64_t errors_inval;	/* INVAL, STATE, NOENT, PERM */
	uint64_t errors_mismatch;
	uint64_t pages_total;
	uint64_t pages_free;
	uint64_t pages_private;
	uint64_t pages_shared;
	uint64_t pages_cached;
	uint64_t pages_spilled;
	uint64_t pages_inflight;
	struct kvp_wire_prefix_stats prefix;	/* all namespaces */
	struct kvp_wire_tier_stats nvme;	/* all namespaces */
	struct kvp_wire_tier_stats host;	/* all namespaces */
	uint64_t closed_output;	/* clients disconnected at --max-output */
	uint64_t closed_idle;	/* clients disconnected at --idle-timeout */
	uint64_t requests_denied;	/* refused by the access rules (PERM) */
	struct kvp_wire_events_stats events;	/* since version 3 */
	struct kvp_wire_remote_stats remote;	/* since version 4 */
	/* since version 5: host pages beside a cuda backend's (--host-pool-size,
	 * for namespaces that ask KVP_MEMORY_HOST; 0 with the host backend,
	 * whose pool_bytes holds every namespace), and the slab numbers the
	 * pool may use in all (a client's view spans them) */
	uint64_t host_pool_bytes;
	uint64_t host_slabs;	/* its slabs now (also counted in slabs) */
	uint64_t max_slabs;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_stats) == 784, "kvp_wire_stats is 784 bytes");

/* Where a namespace is in its life (kvp_wire_ns_stats.state). */
#define KVP_WIRE_NS_READY	0u	/* clients join and use it */
#define KVP_WIRE_NS_PREPARING	1u	/* its tier file is being made: HELLOs wait */

struct kvp_wire_ns_stats {
	char name[KVP_NAME_MAX];
	char model[KVP_MODEL_MAX];
	uint32_t id;
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t block_tokens;
	uint32_t dtype;
	uint32_t clients;
	uint32_t slabs;
	uint64_t page_bytes;
	uint64_t page_stride;
	uint64_t pages_total;
	uint64_t pages_free;
	uint64_t pages_private;
	uint64_t pages_shared;
	uint64_t pages_cached;
	uint64_t pages_spilled;
	uint64_t pages_inflight;
	uint32_t key_scheme;
	uint32_t pinned_quota;	/* pages */
	struct kvp_wire_prefix_stats prefix;
	struct kvp_wire_tier_stats nvme;
	struct kvp_wire_tier_stats host;
	struct kvp_wire_ns_remote_stats remote;	/* since version 4 */
	uint32_t backend;	/* since version 5: enum kvp_backend_kind of its pages */
	uint32_t state;		/* KVP_WIRE_NS_* (0 from daemons before it) */
	uint32_t head_dim_v;	/* since version 6: as HELLO's (0: head_dim) */
	uint32_t reserved;	/* 0 */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_wire_ns_stats) == 584, "kvp_wire_ns_stats is 584 bytes");

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_WIRE_H */
