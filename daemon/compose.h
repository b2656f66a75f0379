/* SPDX-License-Identifier: MIT */
/*
 * compose.h - kvpoold's composition root: the one place that opens the
 * server, the tiers, KV events and the remote tier and wires them
 * together (shared/DESIGN.md, "Processes and modules"). It stands above
 * every wing, so that no wing reaches up into another: the server
 * (serve/) hands requests over and hears of a connection's end and of the
 * stop's last steps through hooks that this module sets.
 */
#ifndef KVP_COMPOSE_H
#define KVP_COMPOSE_H

#include <stddef.h>

#include "daemon/loop/loop.h"
#include "daemon/options.h"
#include "daemon/serve/server.h"
#include "daemon/store/backend.h"
#include "daemon/store/pool.h"

/*
 * compose_open() - kvpoold serving o on l: the spill directory checked,
 * probed and locked (DIR/kvpool.lock), the socket listening
 * (server_listen(); listen_fd as there), the namespaces' settings, KV
 * events (--kv-events), the remote tier (--remote), the access rules,
 * the tiers' namespaces re-indexed from their files, then accepting, and
 * the pool's slabs made ahead on a worker (--slab-ahead). Returns 0 and
 * *out, or -errno with the reason in err (errlen bytes); a refused start
 * leaves no socket file, and no file in the spill directory. The server
 * keeps pointers to l, o, be and pool; they must outlive it. Free it with
 * compose_close().
 */
int compose_open(struct server **out, struct loop *l, const struct options *o,
		 struct backend *be, struct pool *pool, int listen_fd, char *err,
		 size_t errlen);

/*
 * compose_reload() - SIGHUP: read the access rules and the remote-share
 * rules again (the config file's as it is now, and the flags'), give the
 * namespaces their remote names again and recompute every connected
 * client's rights (server_rights_again()). A file that does not read
 * keeps the old rules, logged. Other settings need a restart.
 */
void compose_reload(struct server *s);

/*
 * compose_close() - stop listening, then free what compose_open() opened
 * (KV events, after telling their subscribers every namespace is gone;
 * the namespaces; the remote tier; slabs made ahead that never reached
 * the pool) and the server; the spill directory's lock goes. Call after
 * the loop stopped; s may be NULL. The pool is the caller's.
 */
void compose_close(struct server *s);

/* compose_print_libraries() - the libraries kvpoold runs with and their
 * versions, as each reports itself at run time (or as it was built, where
 * it reports none): `kvpoold --version --verbose`. */
void compose_print_libraries(FILE *f);

#endif /* KVP_COMPOSE_H */
