/* SPDX-License-Identifier: MIT */
/*
 * server.h - kvpoold's socket server: the listening socket, one state
 * machine per client connection, and dispatch of requests.
 */
#ifndef KVP_SERVER_H
#define KVP_SERVER_H

#include <stddef.h>

#include "daemon/backend.h"
#include "daemon/loop.h"
#include "daemon/options.h"
#include "daemon/pool.h"

struct server;

/*
 * server_init() - bind and listen on o->socket_path (mode 0660, group
 * o->socket_group; its directory is created 0750 if missing) and start
 * accepting. A stale socket file (its daemon gone) is replaced; a live
 * daemon's is not. Returns 0 and *out, or -errno with the reason in err
 * (errlen bytes). The server keeps pointers to l, o, be and pool; they
 * must outlive it.
 */
int server_init(struct server **out, struct loop *l, const struct options *o,
		struct backend *be, struct pool *pool, char *err, size_t errlen);

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
