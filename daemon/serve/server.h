/* SPDX-License-Identifier: MIT */
/*
 * server.h - kvpoold's socket server, the top of serve/: the listening
 * socket, the connections' arrival, receipt and end, and the stop. serve/
 * owns sockets, systemd and the connection object (conn.h); it hands each
 * request to requests/ through srv->dispatch and knows nothing of what a
 * request does. Its hooks that go up (conn.h's struct server: dispatch,
 * forget, stop_waits) are set by the composition root (daemon/compose.c),
 * which opens the server in three steps: server_init(), server_listen()
 * and, once the rest is wired, server_start().
 */
#ifndef KVP_SERVER_H
#define KVP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/loop/loop.h"
#include "daemon/options.h"
#include "daemon/store/backend.h"
#include "daemon/store/pool.h"

struct server;

/*
 * server_init() - a server for o, not listening yet: resolves
 * o->admin_group. Returns 0 and *out, or -errno with the reason in err
 * (errlen bytes). The server keeps pointers to l, o, be and pool; they
 * must outlive it. Free it with server_free().
 */
int server_init(struct server **out, struct loop *l, const struct options *o,
		struct backend *be, struct pool *pool, char *err, size_t errlen);

/*
 * server_listen() - bind and listen on o->socket_path (mode 0660, group
 * o->socket_group; its directory is created 0750 if missing). A stale
 * socket file (its daemon gone) is replaced; a live daemon's is not. With
 * listen_fd >= 0, a socket already listening there (systemd's socket
 * activation), that one is used as it is and left in place at exit; the
 * lock is taken all the same. Returns 0, or -errno with the reason in err.
 */
int server_listen(struct server *s, int listen_fd, char *err, size_t errlen);

/* server_start() - accept clients (from the loop's next turn). The hooks
 * dispatch and forget must be set first. */
void server_start(struct server *s);

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
 * server_maybe_done() - when the stop has nothing left to wait for (no
 * connection, no accept, no timer, and s->stop_waits says nothing above
 * is still finishing), let the loop drain and stop. The continuation of
 * what stop_waits started.
 */
void server_maybe_done(struct server *s);

/*
 * server_rights_again() - the access rules (s->rules) changed (SIGHUP):
 * recompute every connected client's rights. A client that may no longer
 * read or write its namespace, or that could write and may not now, is
 * disconnected (its mappings cannot be revoked, a writer's are writable),
 * logged; the others keep their connections with their new rights.
 * Returns how many were disconnected.
 */
unsigned server_rights_again(struct server *s);

/* server_unlisten() - close the listening socket and unlink its file (not
 * systemd's), and release the socket's lock. server_free() does it where
 * it was not done. */
void server_unlisten(struct server *s);

/* server_free() - stop listening (server_unlisten()) and free the server.
 * What the composition root opened (namespaces, events, the remote tier)
 * is its to free first. Call after the loop stopped; s may be NULL. */
void server_free(struct server *s);

/* server_waits_of() - the ACQUIREs of uid that wait for keys now
 * (--max-waits-per-uid; 0 for root and the daemon's user, who are not
 * counted). O(users). */
uint32_t server_waits_of(struct server *s, uid_t uid);

/* server_waits_add() - one such wait more (delta 1) or less (-1) for
 * uid, a user with a connection served. */
void server_waits_add(struct server *s, uid_t uid, int delta);

#endif /* KVP_SERVER_H */
