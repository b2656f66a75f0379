/* SPDX-License-Identifier: MIT */
/*
 * kvpool.h - libkvpool, the client library of kvpool.
 *
 * A model-server process connects to kvpoold over a Unix socket, joins a
 * namespace (one model's KV format), maps the daemon's page pool and
 * leases, writes, shares and releases fixed-size KV-cache pages.
 *
 * Conventions
 *   - Every function that can fail returns 0 (or a count) on success and
 *     a negative errno value on failure; kvp_strerror() describes it and
 *     kvp_last_error() holds the daemon's own words on it: read it right
 *     after the call that failed, before the next kvp_ call.
 *   - Calls are synchronous: one request message, one reply. Batches of
 *     pages travel in one message.
 *   - Threads: a kvp_client may be shared by threads; calls on it are
 *     serialized by a mutex inside the library (one request in flight per
 *     client). For parallel requests, open one client per thread.
 *     kvp_page_ptr() takes the same mutex and is cheap (a hash lookup).
 *   - A page's memory may be used from any thread while the client holds
 *     its lease; after kvp_release() or kvp_close() it must not be.
 */
#ifndef KVPOOL_H
#define KVPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVP_API __attribute__((visibility("default")))
#else
#define KVP_API
#endif

/* Where kvpoold listens unless told otherwise. The environment variable
 * KVPOOL_SOCKET overrides it when a socket_path argument is NULL. */
#define KVP_SOCKET_DEFAULT "/run/kvpool/kvpool.sock"

/* --- Types -------------------------------------------------------------- */

typedef struct kvp_client kvp_client;	/* one connection; opaque */
typedef uint64_t kvp_page;		/* page handle; opaque, never 0 */

enum kvp_dtype {
	KVP_DTYPE_F16 = 1,
	KVP_DTYPE_BF16 = 2,
	KVP_DTYPE_F32 = 3,
	KVP_DTYPE_FP8 = 4,
};

/* A namespace's KV format. A page holds K and V of block_tokens tokens
 * for every layer: layers x kv_heads x (head_dim + V's head size) x
 * block_tokens x dtype size bytes; in each layer K's kv_heads x
 * block_tokens x head_dim elements, then V's (docs/kv-layout.md). */
typedef struct kvp_geometry {
	uint32_t layers, kv_heads, head_dim, block_tokens;
	uint32_t dtype;			/* enum kvp_dtype */
	const char *model;		/* model identity, e.g. "meta-llama/Llama-3.1-8B":
				 * printable UTF-8, at most 127 bytes */
	uint32_t key_scheme;		/* enum kvp_key_scheme; 0: the daemon's default */
	/* the key seed this client derives keys from itself (vLLM: its
	 * PYTHONHASHSEED, else "vllm-none-hash"), or NULL: none, it keys
	 * from the root key the daemon gives. When set, kvp_connect() is
	 * refused (-EBADE) unless kvpoold's --key-seed is the same. */
	const char *key_seed;
	/* where the namespace's pages live: KVP_MEMORY_DEFAULT (0), the
	 * daemon's backend (GPU memory when it runs the cuda backend), or
	 * KVP_MEMORY_HOST, host memory whatever the backend, for clients that
	 * work on the pages with the CPU or copy them with DMA (the vLLM
	 * connector): kvp_view() needs host pages. The namespace's creator
	 * chooses; a later client asking for another memory is refused
	 * (-EBADE). kvp_info()'s backend says which the namespace has. */
	uint32_t memory;
	/* V's head size: 0, the same as head_dim (most models); KVP_K_ONLY,
	 * no V (MLA: one latent vector per token, e.g. DeepSeek's 512 + 64
	 * = head_dim 576); else 1..4096, V's size where it differs from K's.
	 * Part of the geometry later clients must send alike. */
	uint32_t head_dim_v;
} kvp_geometry;

/* --- Prefix keys ----------------------------------------------------------
 *
 * A block key names the contents of one full block of block_tokens
 * tokens by chaining: key_i = H(key_{i-1}, the block's token ids, extra
 * keys). Equal keys mean equal KV, so pages with equal keys are shared.
 */
typedef struct kvp_key {
	uint8_t b[KVP_KEY_BYTES];
} kvp_key;

/*
 * The four schemes are vLLM's four --prefix-caching-hash-algo values,
 * byte for byte (checked against vLLM 0.30.0, 0.32.0 and 0.33.0, run on
 * CPython 3.10 to 3.13); kvp_request_keys() follows vLLM 0.32 and later,
 * whose extras are tagged (docs/protocol.md has the table).
 */
enum kvp_key_scheme {
	/* byte-compatible with vLLM's sha256_cbor prefix-caching hash:
	 * key_i = SHA-256(canonical CBOR [key_{i-1} as a byte string,
	 * [token ids as unsigned integers], null or [extra keys]]);
	 * root = SHA-256(canonical CBOR text string of a seed) */
	KVP_KEYS_VLLM_SHA256_CBOR = 1,
	/* vLLM's xxhash_cbor: XXH3-128 of that canonical CBOR. Its 16-byte
	 * digest (big-endian, as xxhash's digest() returns it) is key bytes
	 * 0..15 and what is hashed as a parent; bytes 16..31 are zero. The
	 * fastest scheme, and kvpool's "fast" one: not collision-resistant
	 * against an adversary, so for trusted tenants (or a secret seed) */
	KVP_KEYS_VLLM_XXHASH_CBOR = 2,
	KVP_KEYS_FAST = KVP_KEYS_VLLM_XXHASH_CBOR,
	/* vLLM's sha256 (its default algorithm): SHA-256 of the pickle
	 * (protocol 5, as CPython writes it) of the same tuples; a block
	 * whose pickle would pass one 64 KiB frame is -EINVAL */
	KVP_KEYS_VLLM_SHA256 = 3,
	/* vLLM's xxhash: XXH3-128 of that pickle, 16 bytes as above */
	KVP_KEYS_VLLM_XXHASH = 4,
};

/* One extra key of a block (vLLM's extra_keys, in the untagged form of
 * vLLM before 0.33: a LoRA adapter's name, a multimodal input's hash, a
 * cache salt). Text when str is not NULL (a CBOR text string, a Python
 * str), else the unsigned integer num. vLLM 0.33's tagged tuples, such as
 * ("lora", name, path), take kvp_value and kvp_key_block_values(). */
typedef struct kvp_extra {
	const char *str;
	uint64_t num;
} kvp_extra;

/*
 * An extra key as vLLM 0.33 builds them: a Python int (INT signed, UINT
 * unsigned), str (STR: str, n bytes or 0 for strlen), bytes (BYTES: bytes,
 * n) or tuple (TUPLE: n items). vLLM's extras of a block are a tuple of
 * such values, e.g. ("mm", identifier, offset - block_start) or
 * ("lora", name, path). For the pickle schemes, the same object twice in
 * one block is pickled once and then referred to, as CPython does: give
 * it the same pointer (as vLLM's tag literals "mm", "lora" are one
 * object), and equal but distinct objects different pointers.
 */
enum kvp_value_type {
	KVP_VALUE_INT = 1,
	KVP_VALUE_UINT = 2,
	KVP_VALUE_STR = 3,
	KVP_VALUE_BYTES = 4,
	KVP_VALUE_TUPLE = 5,
};

typedef struct kvp_value {
	uint32_t type;		/* enum kvp_value_type */
	uint32_t n;		/* STR: bytes (0: strlen), BYTES: bytes, TUPLE: items */
	union {
		int64_t i;
		uint64_t u;
		const char *str;
		const void *bytes;
		const struct kvp_value *items;
	};
} kvp_value;

/*
 * kvp_key_root() - the root parent key of a scheme for a seed (vLLM: the
 * NONE_HASH for PYTHONHASHSEED=seed). Returns 0 or -EINVAL (unknown
 * scheme, NULL argument). Pure function, thread-safe.
 */
KVP_API int kvp_key_root(uint32_t scheme, const char *seed, kvp_key *root);

/*
 * kvp_key_block() - the key of one block: H(parent, tokens[0..ntokens),
 * extras[0..nextras)). nextras 0 encodes vLLM's None. Returns 0, -EINVAL,
 * or -ENOMEM (the fast scheme on a block of more than about 1,000 tokens
 * hashes through a heap state). Pure function, thread-safe.
 */
KVP_API int kvp_key_block(uint32_t scheme, const kvp_key *parent,
			  const uint32_t *tokens, size_t ntokens,
			  const kvp_extra *extras, size_t nextras, kvp_key *key);

/* A multimodal input of a request: vLLM's mm_feature.identifier and its
 * placeholder tokens' mm_position (offset, length). */
typedef struct kvp_mm_feature {
	const char *identifier;
	int64_t offset;
	uint64_t length;
} kvp_mm_feature;

/* The parts of a request vLLM's block keys come from. */
typedef struct kvp_request {
	const uint32_t *tokens;
	size_t ntokens;
	const char *lora_name;		/* NULL: no LoRA; then lora_path too */
	const char *lora_path;
	const kvp_mm_feature *mm;	/* sorted by offset, as vLLM keeps them */
	size_t nmm;
	const char *cache_salt;		/* NULL or "": none */
	const uint8_t (*embeds)[32];	/* prompt embeddings: SHA-256 of each
					 * full block's, or NULL */
} kvp_request;

/*
 * kvp_request_keys() - the keys of the full blocks of request r, as vLLM
 * 0.33's request block hasher computes them (get_request_block_hasher()):
 * each block's extras are ("lora", name, path), then ("mm", identifier,
 * offset - block start) for every input the block overlaps, then
 * ("cache_salt", salt) on the first block, then ("prompt_embeds", digest);
 * none: None. The chain starts at root. Distinct strings must be distinct
 * pointers (see kvp_value). Returns the number of keys, or -EINVAL (bad
 * arguments, unsorted inputs), -ENOMEM.
 */
KVP_API int kvp_request_keys(uint32_t scheme, const kvp_key *root, uint32_t block_tokens,
			     const kvp_request *r, kvp_key *keys);

/*
 * kvp_key_block_values() - kvp_key_block() with extras[0..nextras) as
 * general values (the block's extra-key tuple; none: vLLM's None), for
 * vLLM 0.33's tagged extras. Returns 0, -EINVAL (unknown scheme or type,
 * NULL where a value is needed, more than 1024 values or nesting deeper
 * than 8, a pickle past one frame), -ENOMEM.
 */
KVP_API int kvp_key_block_values(uint32_t scheme, const kvp_key *parent,
				 const uint32_t *tokens, size_t ntokens,
				 const kvp_value *extras, size_t nextras, kvp_key *key);

/*
 * kvp_key_chain() - keys of the full blocks of tokens: keys[i] is the key
 * of tokens[i*block_tokens .. (i+1)*block_tokens), chained from parent,
 * every block with the same extras. A partial last block gets no key.
 * keys must hold ntokens / block_tokens entries. Returns that count,
 * -EINVAL or -ENOMEM (as kvp_key_block()). Pure function, thread-safe.
 */
KVP_API int kvp_key_chain(uint32_t scheme, const kvp_key *parent,
			  const uint32_t *tokens, size_t ntokens,
			  uint32_t block_tokens, const kvp_extra *extras,
			  size_t nextras, kvp_key *keys);

/* The daemon's counters (struct kvp_wire_stats) and one record per
 * namespace (struct kvp_wire_ns_stats); see kvpool_wire.h. */
typedef struct kvp_wire_stats kvp_stats_t;
typedef struct kvp_wire_ns_stats kvp_ns_stats_t;

/* A session's fixed facts, as the daemon gave them when the client
 * connected (kvp_info()). The page fields are 0 for an inspection
 * session. */
typedef struct kvp_info {
	uint64_t client_id;	/* this connection's id, as `kvpool clients` shows it */
	uint32_t ns_id;		/* its namespace's id in STATS */
	uint32_t backend;	/* enum kvp_backend_kind: where the pages live */
	uint64_t page_bytes;	/* bytes of K/V a page holds */
	uint64_t page_stride;	/* distance between two pages of a slab */
	uint64_t slab_bytes;
	uint32_t pages_per_slab;
	uint32_t block_tokens;	/* tokens a page holds */
	uint32_t key_scheme;	/* enum kvp_key_scheme of the namespace */
	uint32_t max_batch;	/* most pages one request carries (the library
				 * splits larger ALLOCs and RELEASEs) */
	uint64_t max_leases;	/* most pages this client may hold */
	uint64_t max_msg;	/* largest message, either way */
	kvp_key root;		/* the parent key of a sequence's first block:
				 * H(--key-seed), salted per namespace with
				 * --key-salt */
} kvp_info_t;

/* --- Library ------------------------------------------------------------ */

/* kvp_version() - the library's version string ("0.1.0"); static storage. */
KVP_API const char *kvp_version(void);

/*
 * kvp_strerror() - a one-line description of a negative errno value that
 * a kvp_ function returned, in kvpool's terms where it has one (-ESTALE:
 * "stale or unknown page handle"); static storage, never NULL.
 */
KVP_API const char *kvp_strerror(int err);

/*
 * kvp_last_error() - what the thread's most recent kvp_ call said: the
 * daemon's (or the library's) explanation when it failed ("namespace
 * 'llama' has layers 32, not 40"), "" when it failed without one. Every
 * kvp_ call that talks to the daemon replaces it, a successful one too
 * (with "" or a note), as sqlite3_errmsg() does: read it right after the
 * call that failed. Thread-local storage.
 */
KVP_API const char *kvp_last_error(void);

/* --- Connection life cycle --------------------------------------------- */

/*
 * kvp_connect() - connect to kvpoold and join namespace ns.
 * @socket_path: the daemon's socket; NULL means $KVPOOL_SOCKET, else
 *               KVP_SOCKET_DEFAULT.
 * @ns:          namespace name (at most 63 bytes). The first client of a
 *               namespace creates it with geometry g (with access rules,
 *               only one that may write there: -EACCES for a reader);
 *               later clients must give the same geometry. NULL opens an inspection session
 *               (kvp_stats() only); g is then ignored.
 * @out:         on success, the new client; free it with kvp_close().
 *
 * Returns 0, -EINVAL (bad arguments), -ENAMETOOLONG (a path or name too
 * long), -ENOENT or -ECONNREFUSED (no daemon there), -EACCES (socket
 * permissions), -EBADE (geometry differs from the namespace's; see
 * kvp_last_error()), -EDQUOT (the daemon is at max-clients), -ENOMEM, or
 * another -errno of socket(2)/connect(2). On every failure
 * kvp_last_error() says what failed and what to do: the path tried, and
 * for -EACCES the directory or socket that refused, its owner, group and
 * mode, and the kvpoold option (--socket-group) that would let this user
 * in. -EPROTONOSUPPORT: kvpoold speaks no protocol version this library
 * does (this release's and the previous one's, KVP_WIRE_VERSION_MIN to
 * KVP_WIRE_VERSION). A kvpoold of the previous release is spoken to in
 * its version (kvp_protocol()): what it lacks returns -EPROTONOSUPPORT,
 * saying so, and everything else works.
 */
KVP_API int kvp_connect(const char *socket_path, const char *ns,
			const kvp_geometry *g, kvp_client **out);

/*
 * kvp_protocol() - the protocol version c speaks with its kvpoold:
 * KVP_WIRE_VERSION, or the previous release's when the daemon is of that
 * release (then kvp_handoff_*() and KVP_ACQUIRE_HANDOFF, protocol 9's,
 * return -EPROTONOSUPPORT). -EINVAL when c is NULL.
 */
KVP_API int kvp_protocol(const kvp_client *c);

/*
 * kvp_connect_as() - kvp_connect() under a name of the client's own (at
 * most 31 bytes; NULL: the program's name), which `kvpool clients` and
 * kvpoold's log show: an engine says what it is (engine, role, rank).
 * -ENAMETOOLONG for a longer name.
 */
KVP_API int kvp_connect_as(const char *socket_path, const char *ns,
			   const kvp_geometry *g, const char *name, kvp_client **out);

/*
 * kvp_set_timeout() - each later call on c waits at most ms milliseconds
 * for kvpoold's answer (an ACQUIRE: plus its kvp_set_acquire_wait() wait
 * and its remote tier's cut-off), so that a daemon that is stopped, hung
 * or swapped out cannot hold the caller. A call that waits longer returns
 * -ETIMEDOUT and closes the connection: its answer, when it comes, would
 * hold leases the caller never learns of, so the daemon drops every lease
 * of c when it reads again, as for a client that died; later calls return
 * -EPIPE, and kvp_last_error() says which request timed out. 0 (the
 * default): no limit. Holds until changed. Returns 0, or -EINVAL when c is
 * NULL or ms is over 3,600,000.
 */
KVP_API int kvp_set_timeout(kvp_client *c, uint32_t ms);

#define KVP_TIMEOUT_MAX_MS 3600000u

/*
 * kvp_connect_timeout() - kvp_connect_as() under a time limit of ms
 * milliseconds (0: none): the connect and the daemon's answer to it each
 * wait at most that long (-ETIMEDOUT, kvp_last_error() saying which), and
 * the client keeps it as its kvp_set_timeout(). -EINVAL when ms is over
 * KVP_TIMEOUT_MAX_MS.
 */
KVP_API int kvp_connect_timeout(const char *socket_path, const char *ns,
				const kvp_geometry *g, const char *name, uint32_t ms,
				kvp_client **out);

/*
 * kvp_close() - close the connection and unmap the pool. The daemon drops
 * every lease the client held. c may be NULL; it is invalid afterwards.
 *
 * A client whose daemon went away (it exited or was killed, or it
 * disconnected the client) gets -EPIPE from its next call and every call
 * after it, with kvp_last_error() saying so; its leases are gone. The
 * library never reconnects by itself: kvp_close() the client and
 * kvp_connect() again (a restarted daemon takes over the same socket) for
 * a new session, in which page handles of the old one mean nothing.
 */
KVP_API void kvp_close(kvp_client *c);

/*
 * kvp_fd() - the connection's socket, for poll(2) alone: it reports
 * POLLRDHUP/POLLHUP once the daemon has closed the connection (it exited,
 * or disconnected this client), so that a program can notice at once and
 * connect again before its next request. Never read, write or close it.
 * -EINVAL when c is NULL.
 */
KVP_API int kvp_fd(const kvp_client *c);

/* kvp_page_bytes() - bytes of one page in the client's namespace (0 for an
 * inspection session). */
KVP_API size_t kvp_page_bytes(const kvp_client *c);

/* kvp_info() - the session's fixed facts into *out: its limits, its
 * namespace's layout, key scheme and root key. No round trip. Returns 0
 * or -EINVAL. */
KVP_API int kvp_info(const kvp_client *c, kvp_info_t *out);

/* --- Pages --------------------------------------------------------------- */

/*
 * kvp_alloc() - lease n new private pages, all or none, into pages[0..n).
 * Their contents are unspecified. The pages' slabs are mapped before the
 * call returns, so kvp_page_ptr() works at once.
 *
 * Any n: the library asks for at most kvp_info().max_batch pages per
 * request, and when a later request fails it gives back the pages of
 * the earlier ones (all or none; the earlier requests may still have
 * evicted cached pages to make room). One request that cannot be met
 * evicts nothing.
 *
 * Returns 0, -ENOSPC (the pool has fewer than n free or evictable pages;
 * nothing was allocated), -EDQUOT (the client would exceed its lease
 * limit), -EINVAL (pages NULL), -ENOTCONN (an inspection session), -EPIPE
 * (the daemon closed the connection), or -ENOMEM.
 */
KVP_API int kvp_alloc(kvp_client *c, size_t n, kvp_page *pages);

/*
 * kvp_release() - drop the leases on pages[0..n), all or none. A private
 * page whose lease is dropped goes back to the pool. Returns 0, or
 * -ESTALE when one handle is not leased by this client (stale, forged or
 * already released; nothing was released, kvp_last_error() names it).
 */
KVP_API int kvp_release(kvp_client *c, const kvp_page *pages, size_t n);

/*
 * kvp_page_ptr() - the address of page p in this process: with the host
 * backend a host pointer into the mapped memfd, with the CUDA backend a
 * device pointer into the slab opened with cudaIpcOpenMemHandle (the
 * library must be built with CUDA). NULL when this client does not hold
 * a lease on p.
 */
KVP_API void *kvp_page_ptr(kvp_client *c, kvp_page p);

/*
 * The namespace's view: with the host backend, the library maps every
 * slab of the client's namespace into one reserved address range, so that
 * all its pages form one array indexed by page number, as engines index
 * one KV tensor with integer block tables:
 *
 *     kvp_page_ptr(c, p) == (char *)view.base + kvp_page_index(c, p) * view.stride
 *
 * index = slab x per_slab + page in slab; an index past a slab's last
 * page, or of a slab not mapped, is a hole (PROT_NONE: touching it
 * faults), as is any page this client holds no lease on (its bytes may be
 * another client's). The view spans as many slabs as the pool may have
 * (kvpoold's --pool-size / --slab-size), reserved, not allocated. See
 * docs/kv-layout.md.
 */
typedef struct kvp_view {
	void *base;		/* the address of index 0 */
	uint64_t stride;	/* bytes from one index to the next (page_stride) */
	uint64_t pages;		/* indices the view spans */
	uint32_t per_slab;	/* indices a slab spans (its pages, then holes) */
} kvp_view_t;

/* kvp_view() - the view into *out. Returns 0, -ENOTCONN (an inspection
 * session), -ENOTSUP (the CUDA backend: each page's device pointer comes
 * from kvp_page_ptr()) or -ENOMEM (no address range could be reserved). */
KVP_API int kvp_view(const kvp_client *c, kvp_view_t *out);

/* kvp_page_index() - the index in the view of page p, which this client
 * holds; -ESTALE when it holds no lease on p, else kvp_view()'s errors. */
KVP_API int64_t kvp_page_index(kvp_client *c, kvp_page p);

/* kvp_page_at() - the handle of the page this client holds at index in
 * the view; 0 when it holds none there. */
KVP_API kvp_page kvp_page_at(kvp_client *c, uint64_t index);

/* --- Sharing prefixes ------------------------------------------------------
 *
 * A model server computes the keys of a prompt's full blocks, ACQUIREs
 * the longest cached prefix, computes the rest into pages of its own,
 * and PUBLISHes them so that others find them. Published pages are
 * immutable: write only to pages from kvp_alloc() or kvp_cow() before
 * publishing them.
 */

/* A partly filled page found by kvp_acquire(): the K/V of its first
 * `tokens` tokens are valid. tokens is 0 when there is none. */
typedef struct kvp_partial {
	kvp_page page;
	uint32_t tokens;
} kvp_partial;

/* Priorities of published pages: eviction takes the lowest first.
 * KVP_PRIO_PINNED (system prompts) counts against the namespace's pinned
 * quota. The values are KVP_PRIO_LOW .. KVP_PRIO_PINNED of kvpool_wire.h. */

/* kvp_root_key() - the namespace's root key: the parent of a sequence's
 * first block. Returns 0, or -ENOTCONN for an inspection session. */
KVP_API int kvp_root_key(const kvp_client *c, kvp_key *root);

/* kvp_block_tokens() - tokens per page in the client's namespace. */
KVP_API uint32_t kvp_block_tokens(const kvp_client *c);

/*
 * kvp_block_keys() - the keys of the full blocks of tokens in the
 * client's namespace (its scheme and block size), chained from parent
 * (NULL: the namespace's root). keys must hold ntokens / block_tokens
 * entries. Returns that count, -EINVAL or -ENOTCONN. No daemon round trip.
 */
KVP_API int kvp_block_keys(const kvp_client *c, const kvp_key *parent,
			   const uint32_t *tokens, size_t ntokens,
			   const kvp_extra *extras, size_t nextras, kvp_key *keys);

/*
 * kvp_acquire() - lease the pages of the longest cached prefix of
 * keys[0..n): returns hits, the number of leading keys found, with their
 * pages in pages[0..hits).
 *
 * tokens[0..ntokens) (NULL when ntokens is 0) are the token ids from the
 * first key's block on: the n blocks' tokens and then those of a partly
 * filled block after them, fewer than (n + 1) x block_tokens in all.
 * With them the daemon also looks for a partial page after the last
 * block that hit (after parent, or the root when parent is NULL, if none
 * hit) whose tokens are a prefix of that block's tokens, and leases it
 * into *partial (which may be NULL when ntokens is 0): turn 2 of a chat
 * finds turn 1's partly filled last page, COWs it and appends.
 *
 * One round trip per about 2,500 blocks with tokens (8,000 without).
 * Returns hits (0..n), or -EDQUOT (lease limit), -EINVAL (too many
 * tokens), -EMSGSIZE (one block's tokens do not fit in the daemon's
 * largest message), -EPIPE, -ENOMEM. The caller releases what it got.
 */
KVP_API int kvp_acquire(kvp_client *c, const kvp_key *parent, const kvp_key *keys,
			size_t n, const uint32_t *tokens, size_t ntokens,
			kvp_page *pages, kvp_partial *partial);

/*
 * Per-call options of kvp_acquire_with(): what kvp_set_acquire_wait(),
 * kvp_set_lookups_counted() and kvp_set_remote_policy() set for each
 * kvp_acquire() of a client, given to one call alone, as liburing takes
 * flags per submission; and what only a call can say (the handoff a wait
 * is for). Those setters stay, and kvp_acquire() is kvp_acquire_with()
 * with what they set (kvp_acquire_defaults()).
 *
 * The struct may grow at its end: a caller passes the sizeof it was
 * built with, and fields a smaller struct lacks are 0; a larger one's
 * bytes past what this library knows must be 0 (else -E2BIG).
 */
#define KVP_ACQUIRE_LOAD	0x1u	/* not a lookup: another client of the engine
					 * looked the keys up (kvp_set_lookups_counted(0)) */
#define KVP_ACQUIRE_WAIT	0x4u	/* wait up to wait_ms for keys not held yet
					 * (kvp_set_acquire_wait()) */
#define KVP_ACQUIRE_HANDOFF	0x8u	/* with WAIT: the wait is for the handoff whose
					 * last key is handoff; it ends at once when that
					 * key is abandoned, or when the client issued its
					 * ticket hangs up before publishing it */
#define KVP_ACQUIRE_SOURCES	0x10u	/* say where each leased block came from, into
					 * sources (a kvpoold of 0.2.0: -EPROTONOSUPPORT) */
/* Where a leased block came from (kvp_acquire_opts.sources). */
#define KVP_SOURCE_POOL		0u	/* the pool had it */
#define KVP_SOURCE_HOST		1u	/* read back from the host tier */
#define KVP_SOURCE_NVME		2u	/* read back from the NVMe tier */
#define KVP_SOURCE_REMOTE	3u	/* fetched from the remote tier (another machine's) */
typedef struct kvp_acquire_opts {
	uint32_t flags;		/* KVP_ACQUIRE_* */
	uint32_t wait_ms;	/* with KVP_ACQUIRE_WAIT: 1 .. 600,000; else 0 */
	uint32_t prefill_rate;	/* as kvp_set_remote_policy() */
	uint32_t remote_max_us;
	kvp_key handoff;	/* with KVP_ACQUIRE_HANDOFF: kvp_handoff_issue()'s last */
	/* with KVP_ACQUIRE_SOURCES (else NULL): n bytes, of which the first
	 * hits (the return value) get each leased block's KVP_SOURCE_* */
	uint8_t *sources;
} kvp_acquire_opts;

/*
 * kvp_acquire_with() - kvp_acquire() with this call's options opts
 * (opts_size: sizeof(*opts) as the caller was built), not the client's.
 * Returns as kvp_acquire(), and -EINVAL for an unknown flag, a wait out
 * of range, HANDOFF without WAIT or an opts_size under the first
 * struct's (48), -E2BIG for bytes past what this library knows that are
 * not 0. A daemon older than this library answers an ACQUIRE with
 * HANDOFF with a protocol error, and closes the connection (-EPROTO).
 */
KVP_API int kvp_acquire_with(kvp_client *c, const kvp_key *parent, const kvp_key *keys,
			     size_t n, const uint32_t *tokens, size_t ntokens,
			     kvp_page *pages, kvp_partial *partial,
			     const kvp_acquire_opts *opts, size_t opts_size);

/*
 * kvp_acquire_defaults() - the options kvp_acquire() uses on c (its
 * setters'), into *opts of opts_size bytes (sizeof(*opts) as the caller
 * was built; fields this library does not know are 0): a call that
 * changes one starts from them. Returns 0, or -EINVAL.
 */
KVP_API int kvp_acquire_defaults(kvp_client *c, kvp_acquire_opts *opts, size_t opts_size);

/*
 * kvp_contains() - how many leading keys of keys[0..n) (the blocks after
 * parent; NULL: the root) the daemon holds, in its pool or a local tier:
 * a block a client is about to save that the pool has already need not
 * be copied again. Leases nothing, counts no lookup, asks no remote tier,
 * moves nothing. One round trip per about 8,000 keys. Returns 0..n, or
 * -EINVAL, -ENOTCONN (no namespace joined), -EPIPE, -ENOMEM.
 */
KVP_API int kvp_contains(kvp_client *c, const kvp_key *parent, const kvp_key *keys, size_t n);

/*
 * kvp_set_acquire_wait() - this client's kvp_acquire() calls wait up to ms
 * milliseconds for keys the daemon does not hold yet: blocks another
 * client is still computing or saving (a decode engine waits for the
 * prefill engine's saves of its prompt). The daemon answers once every
 * key is held, or at the deadline with the prefix it holds then, as
 * without a wait; the wait ends early when the client hangs up. The
 * waiting is the daemon's (it wakes the request when a client publishes
 * in the namespace), not a poll. 0 (the default): no wait. Holds until
 * changed. Returns 0, or -EINVAL when c is NULL or ms is over 600,000.
 * A daemon older than this library answers such an ACQUIRE -EINVAL.
 */
KVP_API int kvp_set_acquire_wait(kvp_client *c, uint32_t ms);

/*
 * Handoffs (disaggregated prefill). A prefill engine that saves a prompt's
 * blocks for a decode engine asks kvpoold for a ticket, and hands it over
 * with the request (vLLM: its kv_transfer_params). The decode engine
 * checks the ticket before it waits for the blocks: only a writer of the
 * namespace can have one issued, and no one without kvpoold's ticket key
 * can make one, so a request body cannot make a decode engine wait. A
 * prefill engine that will not save a block (no room, an error) abandons
 * it: waits for it end at once.
 */
#define KVP_TICKET_BYTES 32
typedef struct kvp_ticket {
	uint8_t b[KVP_TICKET_BYTES];	/* opaque; the same on every machine */
} kvp_ticket;

/*
 * kvp_handoff_issue() - a ticket for a handoff of blocks blocks, the last
 * of them under key last, valid ttl_ms milliseconds (1 .. 600,000; the
 * clocks of machines that share a remote tier must agree to within the
 * margin they need). Needs WRITE rights in the namespace. Daemons that
 * share a --remote-key-file take each other's tickets; any other takes
 * only its own, and not after it restarts. Returns 0, or -EINVAL,
 * -ENOTCONN (no namespace joined), -EACCES (no WRITE), -EPIPE, -ETIMEDOUT; a daemon
 * older than this library answers -EPROTONOSUPPORT (refused at HELLO).
 */
KVP_API int kvp_handoff_issue(kvp_client *c, const kvp_key *last, uint32_t blocks,
			      uint32_t ttl_ms, kvp_ticket *out);

/*
 * kvp_handoff_check() - whether ticket t was issued in this namespace for
 * the handoff whose last block is under key last and has not expired:
 * the milliseconds it holds still (>= 1), or -ESTALE when not (forged,
 * another prompt's, another daemon's, expired; kvp_last_error() says
 * which), -EINVAL, -ENOTCONN, -EPIPE, -ETIMEDOUT. *blocks (when not NULL)
 * is the handoff's block count, which the ticket carries. Needs READ.
 */
KVP_API int kvp_handoff_check(kvp_client *c, const kvp_ticket *t, const kvp_key *last,
			      uint32_t *blocks);

/*
 * kvp_handoff_abandon() - the block under key will not be published by
 * this client (its save was skipped or failed): the kvp_acquire() waits
 * for it (kvp_set_acquire_wait()) that lack it as their first missing key
 * are answered at once with what is held, and so are those that come to
 * lack it in the next 10 minutes (as long as a ticket holds), until a
 * client publishes it. Needs WRITE. Returns 0, or -EINVAL,
 * -ENOTCONN, -EACCES, -EPIPE, -ETIMEDOUT, -EIO.
 */
KVP_API int kvp_handoff_abandon(kvp_client *c, const kvp_key *key);

/*
 * kvp_set_lookups_counted() - counted 0: this client's kvp_acquire() calls
 * lease what another client of the same engine looked up already (vLLM's
 * workers load what its scheduler found), so kvpoold does not count them
 * as lookups (its acquires, hits and misses count each block an engine
 * looks up once). 1 (the default): they are lookups. Returns 0, or
 * -EINVAL when c is NULL.
 */
KVP_API int kvp_set_lookups_counted(kvp_client *c, int counted);

/*
 * kvp_set_remote_policy() - when this client's kvp_acquire() calls let the
 * daemon ask its remote tier (kvpoold --remote) for the blocks this
 * machine lacks. prefill_rate: the tokens per second this client computes
 * a prompt at (0: the daemon's --remote-prefill-rate); the tier is skipped
 * when its measured latency and bandwidth say that fetching the blocks
 * would take longer than computing them. max_us: skip it when the fetch
 * would take longer than this many microseconds (0: no cut-off;
 * KVP_REMOTE_NEVER: never ask it). Both hold until changed; the default
 * is (0, 0). Returns 0, or -EINVAL when c is NULL.
 */
KVP_API int kvp_set_remote_policy(kvp_client *c, uint32_t prefill_rate, uint32_t max_us);

/*
 * kvp_publish() - index pages[0..n), the blocks after parent (NULL: the
 * root) with keys keys[0..n), at priority prio, so that kvp_acquire()
 * finds them. Each page must be private and held once by this client,
 * with its K/V complete. canonical[i] receives the page now indexed
 * under keys[i]: pages[i] itself, or the page another client published
 * first (dedup), on which this client then holds a lease too; pages[i]
 * then stays private and goes back to the pool when released.
 *
 * Returns 0, -ESTALE (a page not held), -EINVAL (a page already
 * published or shared, repeated, or prio > KVP_PRIO_PINNED), -EDQUOT
 * (lease limit, or the pinned quota for KVP_PRIO_PINNED). All or none
 * for up to about 6,000 pages (one message).
 */
KVP_API int kvp_publish(kvp_client *c, const kvp_key *parent, const kvp_page *pages,
			const kvp_key *keys, size_t n, unsigned prio, kvp_page *canonical);

/* The CUDA runtime's cudaStream_t points to this opaque struct. */
struct CUstream_st;

/*
 * kvp_publish_stream() - kvp_publish() of pages written on a GPU: first
 * waits until the work queued on stream (the writer's cudaStream_t; NULL
 * when the caller has synchronized itself) is done, so that no client
 * reads a page before its K/V are complete. Returns kvp_publish()'s
 * values, or -EIO (the stream failed), -ENOTSUP (built without CUDA).
 */
KVP_API int kvp_publish_stream(kvp_client *c, struct CUstream_st *stream,
			       const kvp_key *parent, const kvp_page *pages,
			       const kvp_key *keys, size_t n, unsigned prio,
			       kvp_page *canonical);

/*
 * kvp_publish_tokens() - kvp_publish_stream() that also sends each block's
 * token ids: tokens[0 .. n x block_tokens), block i's at i x block_tokens
 * (NULL: none). A daemon that publishes KV events (kvpoold --kv-events)
 * puts them in its BlockStored events, from which routers compute their
 * own keys; without them the events carry empty token_ids. Callers of
 * kvp_block_keys() have them. Costs 4 x block_tokens bytes a block on
 * the wire. Returns kvp_publish_stream()'s values.
 */
KVP_API int kvp_publish_tokens(kvp_client *c, struct CUstream_st *stream,
			       const kvp_key *parent, const kvp_page *pages,
			       const kvp_key *keys, const uint32_t *tokens, size_t n,
			       unsigned prio, kvp_page *canonical);

/*
 * kvp_publish_partial() - index page, which holds the K/V of
 * tokens[0..ntokens) (1 .. block_tokens - 1 tokens), as the partial block
 * after parent (NULL: the root). *canonical as for kvp_publish().
 */
KVP_API int kvp_publish_partial(kvp_client *c, const kvp_key *parent, kvp_page page,
				const uint32_t *tokens, size_t ntokens, unsigned prio,
				kvp_page *canonical);

/*
 * kvp_cow() - copies[i] becomes a new private page with the bytes of
 * src[i], which this client holds (shared or not): the copy is made by
 * the daemon. Use it to append to a shared partial page. All or none.
 * Returns 0, -ESTALE, -ENOSPC, -EDQUOT.
 */
KVP_API int kvp_cow(kvp_client *c, const kvp_page *src, size_t n, kvp_page *copies);

/*
 * kvp_retain() - one more lease on each of pages[0..n), which this client
 * holds (forks for parallel sampling or beam search: each fork releases
 * its own). Returns 0, -ESTALE, -EDQUOT.
 */
KVP_API int kvp_retain(kvp_client *c, const kvp_page *pages, size_t n);

/* --- Inspection ---------------------------------------------------------- */

/*
 * kvp_stats() - a snapshot of the daemon's counters into *st and up to
 * max_ns namespace records into ns (may be NULL when max_ns is 0).
 * Returns the number of namespaces the daemon has (which may exceed
 * max_ns), or -EPIPE, -EPROTO, or the error the daemon replied with.
 */
KVP_API int kvp_stats(kvp_client *c, kvp_stats_t *st, kvp_ns_stats_t *ns,
		      size_t max_ns);

/* --- Administration -------------------------------------------------------
 *
 * For `kvpool` and monitoring: these work on any session, inspection ones
 * (kvp_connect with a NULL namespace) included. The records are the wire
 * structs of kvpool_wire.h. The evict, disconnect and drop operations
 * need admin rights (root, the daemon's user or its --admin-group): else
 * -EACCES.
 */

/*
 * The listings copy up to max records into out and return how many they
 * copied (fewer than max when fewer match, or when one reply of the
 * daemon holds no more: about 1,900 clients, 4,600 pages or 6,500
 * prefixes), or -errno. *total, when total is not NULL, receives how
 * many there are in all, which may be more.
 */

/* kvp_list_clients() - the connections. */
KVP_API int kvp_list_clients(kvp_client *c, struct kvp_wire_client *out, size_t max,
			     uint32_t *total);

/* kvp_list_pages() - the pages matching filter (NULL: all; see struct
 * kvp_wire_list_pages). -ENOENT: no such namespace or client. */
KVP_API int kvp_list_pages(kvp_client *c, const struct kvp_wire_list_pages *filter,
			   struct kvp_wire_page *out, size_t max, uint32_t *total);

/* kvp_list_prefixes() - the top indexed blocks of ns (NULL or "": all)
 * by hits, at most top (0: as many as fit). *total: blocks indexed. */
KVP_API int kvp_list_prefixes(kvp_client *c, const char *ns, size_t top,
			      struct kvp_wire_prefix *out, size_t max, uint32_t *total);

/* kvp_evict() - push up to max (0: all) cached pages of ns (NULL: all)
 * out of the pool, to the tier when there is one. Under --spill-rate the
 * call waits for the rate until it is done. Returns the count. */
KVP_API int kvp_evict(kvp_client *c, const char *ns, uint64_t max);

/* kvp_disconnect() - close client id's connection (its leases go back). */
KVP_API int kvp_disconnect(kvp_client *c, uint64_t id);

/* kvp_drop_namespace() - forget namespace ns: its pages, slabs and tier
 * file. Its clients are disconnected first, each told why (their next
 * call fails with -EPIPE, kvp_last_error() naming the drop); returns once
 * they are gone and the tier's writes are done. -ENOTCONN when c is a
 * client of ns, -ENOENT when there is no such namespace. */
KVP_API int kvp_drop_namespace(kvp_client *c, const char *ns);

/* kvp_drop_unused_namespace() - kvp_drop_namespace() of a namespace no
 * client uses: -EBUSY (nothing changed, kvp_last_error() says how many
 * clients) when it has any. `kvpool drop` without --force. */
KVP_API int kvp_drop_unused_namespace(kvp_client *c, const char *ns);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_H */
