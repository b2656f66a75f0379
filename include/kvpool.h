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
 *     kvp_last_error() holds the daemon's own words on the last failure.
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
 * for every layer: 2 x layers x kv_heads x head_dim x block_tokens x
 * dtype size bytes. */
typedef struct kvp_geometry {
	uint32_t layers, kv_heads, head_dim, block_tokens;
	uint32_t dtype;			/* enum kvp_dtype */
	const char *model;		/* model identity, e.g. "meta-llama/Llama-3.1-8B" */
} kvp_geometry;

/* The daemon's counters (struct kvp_wire_stats) and one record per
 * namespace (struct kvp_wire_ns_stats); see kvpool_wire.h. */
typedef struct kvp_wire_stats kvp_stats_t;
typedef struct kvp_wire_ns_stats kvp_ns_stats_t;

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
 * kvp_last_error() - the daemon's explanation of the last request that
 * failed on this thread ("namespace 'llama' has layers 32, not 40"), or
 * "" if the last failure carried none. Thread-local storage, valid until
 * the thread's next kvp_ call.
 */
KVP_API const char *kvp_last_error(void);

/* --- Connection life cycle --------------------------------------------- */

/*
 * kvp_connect() - connect to kvpoold and join namespace ns.
 * @socket_path: the daemon's socket; NULL means $KVPOOL_SOCKET, else
 *               KVP_SOCKET_DEFAULT.
 * @ns:          namespace name (at most 63 bytes). The first client of a
 *               namespace creates it with geometry g; later clients must
 *               give the same geometry. NULL opens an inspection session
 *               (kvp_stats() only); g is then ignored.
 * @out:         on success, the new client; free it with kvp_close().
 *
 * Returns 0, -EINVAL (bad arguments), -ENAMETOOLONG (a path or name too
 * long), -ENOENT or -ECONNREFUSED (no daemon there), -EACCES (socket
 * permissions), -EBADE (geometry differs from the namespace's; see
 * kvp_last_error()), -EDQUOT (the daemon is at max-clients), -ENOMEM, or
 * another -errno of socket(2)/connect(2).
 */
KVP_API int kvp_connect(const char *socket_path, const char *ns,
			const kvp_geometry *g, kvp_client **out);

/*
 * kvp_close() - close the connection and unmap the pool. The daemon drops
 * every lease the client held. c may be NULL; it is invalid afterwards.
 */
KVP_API void kvp_close(kvp_client *c);

/* kvp_page_bytes() - bytes of one page in the client's namespace (0 for an
 * inspection session). */
KVP_API size_t kvp_page_bytes(const kvp_client *c);

/* --- Pages --------------------------------------------------------------- */

/*
 * kvp_alloc() - lease n new private pages, all or none, into pages[0..n).
 * Their contents are unspecified. The pages' slabs are mapped before the
 * call returns, so kvp_page_ptr() works at once.
 *
 * Returns 0, -ENOSPC (the pool has fewer than n free pages; nothing was
 * allocated), -EDQUOT (the client would exceed its lease limit), -EINVAL
 * (n larger than the daemon's batch limit), -EPIPE (the daemon closed the
 * connection), or -ENOMEM.
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
 * kvp_page_ptr() - the address of page p in this process (host backend:
 * the mapped memfd). NULL when this client does not hold a lease on p.
 */
KVP_API void *kvp_page_ptr(kvp_client *c, kvp_page p);

/* --- Inspection ---------------------------------------------------------- */

/*
 * kvp_stats() - a snapshot of the daemon's counters into *st and up to
 * max_ns namespace records into ns (may be NULL when max_ns is 0).
 * Returns the number of namespaces the daemon has (which may exceed
 * max_ns), or -EPIPE, -EPROTO, or the error the daemon replied with.
 */
KVP_API int kvp_stats(kvp_client *c, kvp_stats_t *st, kvp_ns_stats_t *ns,
		      size_t max_ns);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_H */
