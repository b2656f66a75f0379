/* SPDX-License-Identifier: MIT */
/*
 * kvpool.h - libkvpool, the client library of kvpool.
 *
 * A model-server process connects to kvpoold over a Unix socket, maps the
 * daemon's page pool, and leases, shares and releases KV-cache pages.
 *
 * Conventions: every function that can fail returns 0 (or a count) on
 * success and a negative errno value on failure. A struct kvp_client is
 * not thread-safe: use one per thread, or serialize calls on it.
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
 * KVPOOL_SOCKET overrides it for kvp_connect(NULL, ...). */
#define KVP_SOCKET_DEFAULT "/run/kvpool/kvpool.sock"

/* One connection to kvpoold. Opaque. */
struct kvp_client;

/* --- Library --------------------------------------------------------- */

/* kvp_version() - the library's version string ("0.1.0"); static storage. */
KVP_API const char *kvp_version(void);

/*
 * kvp_strerror() - a one-line description of a negative errno value that
 * a kvp_ function returned, in kvpool's terms where it has one (-ESTALE:
 * "stale or unknown page handle"); static storage, never NULL.
 */
KVP_API const char *kvp_strerror(int err);

/* --- Connection life cycle ------------------------------------------- */

/*
 * kvp_connect() - connect to kvpoold.
 * @socket_path: the daemon's socket; NULL means $KVPOOL_SOCKET, else
 *               KVP_SOCKET_DEFAULT.
 * @out:         on success, the new client; free it with kvp_close().
 *
 * Returns 0, -ENAMETOOLONG (path longer than a sockaddr_un holds),
 * -ENOENT or -ECONNREFUSED (no daemon there), -EACCES, -ENOMEM, or another
 * -errno of socket(2)/connect(2).
 */
KVP_API int kvp_connect(const char *socket_path, struct kvp_client **out);

/*
 * kvp_close() - close the connection. The daemon drops every lease the
 * connection held. @c may be NULL; it is invalid after the call.
 */
KVP_API void kvp_close(struct kvp_client *c);

/* --- Inspection ------------------------------------------------------- */

/*
 * kvp_stats() - a snapshot of the daemon's counters into *st.
 *
 * Returns 0, -EPIPE (the daemon closed the connection), -EPROTO (the
 * reply was malformed), or the error the daemon replied with.
 */
KVP_API int kvp_stats(struct kvp_client *c, struct kvp_wire_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_H */
