/* SPDX-License-Identifier: MIT */
/*
 * server.h - kvpoold's socket server, the top of serve/: the listening
 * socket, the connections' arrival, receipt and end, and the stop. serve/
 * owns sockets, the event loops (io_uring and sync), systemd and the
 * connection object (conn.h); it hands each request to requests/ and
 * knows nothing of what a request does.
 */
#ifndef KVP_SERVER_H
#define KVP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/options.h"
#include "daemon/serve/loop.h"
#include "daemon/store/backend.h"
#include "daemon/store/pool.h"

struct server;

/*
 * server_init() - bind and listen on o->socket_path (mode 0660, group
 * o->socket_group; its directory is created 0750 if missing) and start
 * accepting. A stale socket file (its daemon gone) is replaced; a live
 * daemon's is not. With listen_fd >= 0, a socket already listening there
 * (systemd's socket activation), that one is used as it is and left in
 * place at exit; the lock is taken all the same. Returns 0 and *out, or
 * -errno with the reason in err (errlen bytes). The server keeps pointers
 * to l, o, be and pool; they must outlive it.
 */
int server_init(struct server **out, struct loop *l, const struct options *o,
		struct backend *be, struct pool *pool, int listen_fd, char *err,
		size_t errlen);

/* server_on_shutdown() - call fn(arg) when server_shutdown() begins (to
 * cancel timers of the caller's, which would keep the loop running). */
void server_on_shutdown(struct server *s, void (*fn)(void *arg), void *arg);

/* server_status() - one line on the server's state for people (systemd's
 * STATUS=): clients, namespaces, the pool's pages by state. */
void server_status(const struct server *s, char *buf, size_t len);

/*
 * server_shutdown() - stop accepting, close every connection (dropping
 * their leases) and stop the loop once all their operations completed.
 */
void server_shutdown(struct server *s);

/*
 * server_reload() - SIGHUP: read the access rules again (the config
 * file's as it is now, and the flags') and recompute every connected
 * client's rights. A client that may no longer read or write its
 * namespace, or that could write and may not now, is disconnected (its
 * mappings cannot be revoked, a writer's are writable); the others keep
 * their connections with their new rights. A file that does not read
 * keeps the old rules, logged. Other settings need a restart.
 */
void server_reload(struct server *s);

/* server_free() - unlink the socket and free the server and its
 * namespaces (not the pool). Call after the loop stopped; s may be NULL. */
void server_free(struct server *s);

#endif /* KVP_SERVER_H */
