/* SPDX-License-Identifier: MIT */
/*
 * remote.h - the client of the remote tier: pages as values in Redis
 * Cluster (or one Redis server), over hiredis connections driven by the
 * daemon's loop (rloop.c), routed by rcluster.c, in rpage.c's format.
 *
 * remote/ (docs/architecture.md): the Redis client, its routing and its
 * values. It moves bytes by key and knows neither the pool's index nor a
 * request; tiers/tier_remote.c decides what goes there.
 *
 * Everything here is a cache: a request that cannot be served at once or
 * in time is a miss, never a wait. A node that does not answer within the
 * timeout is dropped; its requests end as misses, its slots are misses
 * until the slot map is read again, and it is reconnected with back-off.
 * Which pages go there and when is the tier walk's business (tier.c).
 */
#ifndef KVP_REMOTE_H
#define KVP_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvpool_wire.h"
#include "daemon/loop/loop.h"
#include "daemon/observe/hist.h"
#include "daemon/remote/rpage.h"
#include "daemon/store/backend.h"

struct remote_config {
	const char *url;		/* redis-cluster://... or redis://... */
	const char *password;		/* overrides the URL's; NULL: the URL's (copied) */
	const void *key;		/* the key file's bytes, the values' seal made */
	size_t key_len;			/* from them (rvalue_key()); required */
	uint32_t timeout_ms;		/* a node silent this long is down (0: 1000) */
	uint32_t max_inflight;		/* requests per node (0: 256) */
	uint64_t max_backlog;		/* bytes of SETs held, waiting or in flight (0: 256M) */
	uint64_t max_rate;		/* bytes/s each way, 0: no cap */
	uint32_t check_ms;		/* start-up check of the seeds (0: 1000) */
};

/* Counters, for STATS. */
struct remote_stats {
	uint64_t gets, hits, misses;	/* GETs sent; values served; not there */
	uint64_t corrupt;		/* values that failed their checks */
	uint64_t forged;		/* of those, values whose seal did not open */
	uint64_t errors;		/* GETs lost to a dead node, a timeout, an error;
				 * connections dropped for breaking the protocol */
	uint64_t skipped;		/* GETs not sent: node down, limits */
	uint64_t puts, put_errors, put_skipped;
	uint64_t bytes_in, bytes_out;
	uint64_t redirects, map_loads, connects, disconnects;
	uint64_t inflight;		/* requests sent, not answered */
	uint64_t latency_ns;		/* measured: a GET's round trip, idle node */
	uint64_t bandwidth;		/* measured: bytes/s received while busy */
	uint32_t nodes, nodes_up;	/* masters in the slot map; connected */
	uint32_t slots;			/* slots with a master */
	struct hist gets_hist;		/* GETs Redis answered: sent to answer */
};

struct remote;

/* done(arg, res) of a request: see remote_get() and remote_put(). */
typedef void (*remote_done_fn)(void *arg, int res);

/*
 * remote_open() - parse the URL and check the servers: each seed is asked
 * synchronously (check_ms each) whether it is what the URL says (a
 * cluster node for redis-cluster://, a plain server for redis://) and
 * whether AUTH is accepted; the first that answers gives the slot map. A
 * bad URL, a server of the wrong kind or a refused AUTH is an error
 * (-EINVAL, -EPROTO, -EACCES: err says which value is wrong and what to
 * do). No seed answering is not an error: the tier starts down, says so
 * in *note (else NULL), and keeps trying from the loop.
 */
int remote_open(struct remote **out, struct loop *l, const struct remote_config *c,
		const char **note, char *err, size_t errlen);

/*
 * remote_close() - drop every connection; requests in flight complete with
 * -ECANCELED first. r may be NULL. Operations of the loop that point into
 * the tier end on the loop's next turns, which free what is left: turn or
 * drain the loop before loop_fini().
 */
void remote_close(struct remote *r);

/*
 * remote_get() - fetch the page of block key in namespace id into dst
 * (bytes, a pool page of backend be's memory, which copies into it) and
 * check and open it (rvalue.h). done(arg, res) follows, never from
 * inside this call: res 0 (dst holds the page), -ENOENT (not there),
 * -EBADMSG / -ESTALE / -EKEYREJECTED (a value that failed its checks,
 * counted: a miss; dst may hold other bytes, the value is read straight
 * into it),
 * -EHOSTDOWN (its node went away), -ETIMEDOUT,
 * -ECANCELED (the tier is closing). dst must stay valid until done.
 * Returns 0, or -EAGAIN (not sent: the node is down, its slot has no
 * master, or a limit says not now) with done never called.
 */
int remote_get(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
	       remote_done_fn done, void *arg);

/*
 * remote_put() - store the page at src (bytes, of backend be's memory)
 * as block key of namespace id; src is copied (sealed) before this
 * returns. It is sent at once, or waits in order for its master (the
 * in-flight cap, the rate cap, a node down or connecting, a slot without
 * a master) and is sent again when its node went away (once it is back)
 * or its slot moved (up to 3 error replies), within 30 s. done (may be
 * NULL) follows with 0 or
 * -errno, as for remote_get(). Returns 0, -EAGAIN (not taken: the
 * backlog of max_backlog bytes is full, or the tier is closing; counted
 * and logged) or -ENOMEM.
 */
int remote_put(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
	       remote_done_fn done, void *arg);

/*
 * Notes: small values of the tier's own beside the pages (a block that
 * will not come: tiers/tier_remote.c), sealed as pages are, under names
 * made as theirs. remote_note_put() stores bytes at src as note key of
 * namespace id for ttl_ms (SET PX), sent once: one that finds its node
 * gone or gets an error is lost, never sent again behind a later note of
 * the same key. remote_note_get() reads one into dst (bytes of host
 * memory), as remote_get() reads a page. Neither counts as a page does
 * (gets, hits, misses, puts, bytes), nor in the measured latency and
 * bandwidth of remote_fetch_ns(). Return as remote_put() and
 * remote_get().
 */
int remote_note_put(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		    const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
		    uint32_t ttl_ms);
int remote_note_get(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		    const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
		    remote_done_fn done, void *arg);

/*
 * remote_touch() - tell Redis the value of block key was used now (TOUCH:
 * its LRU clock), at most once a second per key; never waits, never
 * queues: a node down or at its in-flight cap is skipped. Returns true
 * when the key was touched within this second already.
 */
bool remote_touch(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		  const uint8_t key[KVP_KEY_BYTES]);

/*
 * remote_on_idle() - call fn(arg) once no request is in flight and no
 * SET waits for a node that is up (from the loop, never from inside this
 * call), for a stop that lets its writes end; requests still end within
 * the timeout. remote_busy() - requests are in flight, or SETs wait for
 * a node that is up.
 */
void remote_on_idle(struct remote *r, void (*fn)(void *arg), void *arg);
bool remote_busy(const struct remote *r);

/* remote_up() - the map has slots and a master of them is connected or
 * connecting (requests queue until it is through). */
bool remote_up(const struct remote *r);

/* remote_serving() - a master is connected and slots are mapped: what the
 * log and STATS call serving (remote_up() also counts connects under way). */
bool remote_serving(const struct remote *r);

/*
 * remote_fetch_ns() - how long fetching n pages of bytes would take now,
 * from the measured latency and bandwidth: UINT64_MAX when the tier is
 * down, 0 before anything is measured (a first fetch measures it).
 */
uint64_t remote_fetch_ns(const struct remote *r, uint32_t n, uint64_t bytes);

void remote_get_stats(const struct remote *r, struct remote_stats *st);

/* remote_print_libraries() - the remote tier's libraries and their
 * versions, one "  NAME VERSION" line each (kvpoold --version --verbose). */
void remote_print_libraries(FILE *f);

/* remote_describe() - "redis-cluster (3 seeds)" and the like, for logs. */
const char *remote_describe(const struct remote *r);

#endif /* KVP_REMOTE_H */
