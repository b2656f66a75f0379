/* SPDX-License-Identifier: MIT */
/*
 * remote_int.h - what the remote tier's client shares among its files,
 * and with no one else: its request, node and client objects, and the
 * functions each file offers the others. remote.c holds the requests and
 * their queue (the backlog of SETs, the rate cap, routing, the tick,
 * start and close), rnode.c the connections and the replies, rmap.c the
 * cluster's map and seeds. Everything outside remote/ goes through
 * remote.h.
 */
#ifndef KVP_REMOTE_INT_H
#define KVP_REMOTE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <async.h>
#include <hiredis.h>

#include "daemon/loop/loop.h"
#include "daemon/remote/rcluster.h"
#include "daemon/remote/remote.h"
#include "daemon/remote/rpage.h"
#include "daemon/remote/rvalue.h"

#define TICK_MS		50u
#define BACKOFF_MIN_MS	100u
#define BACKOFF_MAX_MS	5000u
#define MAP_EVERY_MS	1000u	/* re-read the slot map this often while it is wanted */
#define MAX_HOPS	3u	/* redirects one request may follow */
#define PUT_TRIES	3u	/* error replies to one SET before it is given up */
#define PUT_MAX_AGE_NS	30000000000ull	/* a SET waiting longer is given up */
#define SAY_EVERY_S	60u	/* a line that may flood is said once a minute */
#define TOUCH_SLOTS	4096u	/* keys touched this second, remembered */
/* objects one reply may hold (rnode.c oversized(); its log line says it) */
#define RNODE_REPLY_OBJECTS	65536u
_Static_assert(RNODE_REPLY_OBJECTS == 65536u, "rnode.c's on_disconnect() says 65,536");
#define OBUF_MAX	(1u << 20)	/* bytes a connection's output buffer takes
					 * more commands at: a node that does not
					 * read holds this much of our memory, not
					 * every SET that waits for it */

enum rnode_state {
	RN_DOWN,		/* no connection; the next try at retry_at */
	RN_CONNECTING,		/* connect, AUTH and PING under way; SETs wait */
	RN_UP,			/* it answered: takes requests */
};

struct rnode;

/* One request: a GET or a SET of one page. */
struct rreq {
	struct rreq *prev, *next;	/* its node's requests in flight, oldest first */
	struct remote *r;
	struct rnode *node;		/* where it was sent */
	bool get;
	uint8_t id[RPAGE_ID_BYTES];
	uint8_t key[KVP_KEY_BYTES];
	char rkey[RPAGE_KEY_LEN];	/* its Redis key, made once */
	void *dst;			/* GET: the page */
	struct backend *be;		/* of the page's memory */
	uint64_t bytes;
	remote_done_fn done;
	void *arg;
	uint64_t t0;			/* sent, ns */
	bool idle_sent;			/* its node had nothing in flight */
	unsigned hops;
	char *cmd;			/* SET: its RESP, kept until Redis answers */
	size_t cmdlen;			/* (counted in the backlog) */
	unsigned tries;			/* SET: sends so far */
	bool asking;			/* SET: its next send goes after ASKING
					 * (an ASK sent it to the node it waits for) */
	unsigned errs;			/* SET: error replies so far */
	uint64_t born_ns;		/* SET: when remote_put() took it */
	bool note;			/* a note (remote_note_put/get()), no page */
	uint32_t ttl_ms;		/* a note's SET: its time to live */
};

/* A TOUCH on its way, for the redirect it may get (rnode_touch_reply()). */
struct rtouch {
	char rkey[RPAGE_KEY_LEN];
	unsigned hops;
};

struct rnode {
	struct remote *r;
	struct rc_addr addr;		/* numeric: connecting asks no resolver */
	struct rnode *next_retired;	/* named by no map now: freed when idle */
	enum rnode_state state;
	redisAsyncContext *ac;		/* NULL when down */
	struct rreq *head, *tail;
	unsigned inflight;
	struct rreq *wait_head, *wait_tail;	/* SETs for it, not sent yet */
	uint64_t since_ns;		/* connect started */
	uint64_t retry_ns;		/* DOWN: the next connect */
	uint32_t backoff_ms;
	bool timed_out;			/* it is being dropped for silence */
	bool auth_refused;
	bool hello_refused;		/* it answered the PING with an error */
	bool owned;			/* it served slots in the map before the last */
	bool was_up;			/* connected; for one log line per change */
	bool lost;			/* was up, then lost: say so when it is back */
	bool failed;			/* its last connect failed or it was lost */
	bool unasked;			/* it sent a reply nobody asked for */
	bool oversized;			/* it sent a reply of over RNODE_REPLY_OBJECTS */
	unsigned reply_objects;		/* objects of the reply being read */
	bool erred;			/* it answered CLUSTERDOWN, LOADING and the like */
	uint64_t busy_ns, busy_bytes;	/* the busy period now: start, bytes in */
	unsigned busy_replies;
};

struct remote {
	struct loop *l;
	struct remote_config c;		/* c.password is password, or NULL */
	char *password;			/* our copy: each connection sends AUTH */
	uint8_t sk[RVALUE_KEY_BYTES];	/* the values' sealing key */
	struct rc_url url;
	struct rc_map map;
	struct rnode **nodes;		/* [map.nnodes], by map index */
	unsigned nnodes;
	struct rnode *retired;		/* dropped by a new map; freed once idle */
	uint64_t refused_ns, broke_ns;	/* the last redirect not followed, the last
					 * broken protocol, logged */
	struct rreq *lost_head, *lost_tail;	/* SETs whose slot has no master now */
	uint64_t backlog;		/* bytes of SETs held: waiting or in flight */
	struct {
		uint32_t tag, sec;	/* a key's hash, the second it was touched */
	} touched[TOUCH_SLOTS];
	uint64_t unwritten, unwritten_ns;	/* SETs given up since the last line */
	struct loop_op tick, cancel, idle, closer;
	struct __kernel_timespec ts, idle_ts, closer_ts;
	unsigned ops;			/* of those four, in the ring */
	bool ticking, closing;
	void (*idle_fn)(void *);	/* remote_on_idle() */
	void *idle_arg;
	bool idle_armed;
	bool map_wanted, map_inflight;
	struct rnode *map_node;		/* asked for the map; NULL when none is */
	uint64_t map_sent_ns;
	uint64_t map_ns;		/* the next map read */
	unsigned seed_next;		/* round-robin over seeds for the map */
	bool was_up;
	unsigned avail;			/* masters up (they answered): requests go */
	uint64_t tokens, refill_ns;	/* the rate cap's bucket */
	struct remote_stats st;
	char desc[96];
};

/* now_ns() - the monotonic clock in nanoseconds. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- rnode.c: connections and replies ---------------------------------- */

/* rnode_of() - the node of map index idx, made when new; NULL without memory. */
struct rnode *rnode_of(struct remote *r, unsigned idx);

/* rnode_count() - count the masters, those up and those connecting, and the slots served. */
void rnode_count(struct remote *r);

/* rnode_list_add() - q is in flight on nd, newest. */
void rnode_list_add(struct rnode *nd, struct rreq *q);

/* rnode_connect() - start connecting nd (and AUTH); requests queue meanwhile. */
void rnode_connect(struct rnode *nd);

/* rnode_fail() - drop nd for why: its requests end as misses, it reconnects with back-off. */
void rnode_fail(struct rnode *nd, const char *why);

/* rnode_refused() - say (once a minute) that nd redirected to a, which no map names. */
void rnode_refused(struct remote *r, const struct rc_addr *a, const struct rnode *nd);

/* rnode_clean() - at most len bytes of s, a peer's text, for a message:
 * anything but printable ASCII as '?', so that no reply writes lines of
 * its own or drives a terminal. In a static buffer: the next call's. */
const char *rnode_clean(const char *s, size_t len);

/* rnode_got_reply() - hiredis' callback for every request: a GET's value, a SET's answer, a redirect, an error. */
void rnode_got_reply(redisAsyncContext *ac, void *reply, void *priv);

/* rnode_touch_reply() - a TOUCH's answer (priv: its struct rtouch, freed): an
 * ASK or MOVED sends it on to that node if it takes it now (MAX_HOPS at
 * most). */
void rnode_touch_reply(redisAsyncContext *ac, void *reply, void *priv);

/* --- rmap.c: the cluster's map and seeds ------------------------------- */

/* rmap_is_seed() - a is one of the URL's seeds. */
bool rmap_is_seed(const struct remote *r, const struct rc_addr *a);

/* rmap_want() - read the slot map again at the next tick that MAP_EVERY_MS allows. */
void rmap_want(struct remote *r);

/* rmap_free_retired() - free the nodes no map names once idle (all: every one). */
void rmap_free_retired(struct remote *r, bool all);

/* rmap_read() - ask a node (a seed, round robin) for the slot map. */
void rmap_read(struct remote *r);

/* rmap_check_seed() - ask one seed synchronously what it is: 1 answered, 0 silent, -errno wrong (err says). */
int rmap_check_seed(struct remote *r, const struct rc_addr *a, char *err, size_t errlen);

/* rmap_resolve_seeds() - the URL's host names as numeric addresses, once, at the start. 0 or -EINVAL. */
int rmap_resolve_seeds(struct remote *r, char *err, size_t errlen);

/* --- remote.c: requests, their queue, the tick ------------------------- */

/* remote_note_state() - log a change of remote_serving(), once. */
void remote_note_state(struct remote *r);

/* remote_idle_arm() - call idle_fn from the loop's next turn. */
void remote_idle_arm(struct remote *r);

/* rreq_finish() - q ended with res (0, or -errno: a miss): its caller hears it, q is freed. */
void rreq_finish(struct rreq *q, int res);

/* rreq_forget() - a SET given up or answered: its bytes leave the backlog. */
void rreq_forget(struct remote *r, struct rreq *q);

/* rreq_retry() - a SET that failed (why) goes again, or is given up after PUT_TRIES. */
void rreq_retry(struct rreq *q, const char *why);

/* rreq_pump() - send the SETs waiting for nd while it takes more. */
void rreq_pump(struct rnode *nd);

/* rreq_redirected() - SET q was redirected to node to (ask: for this send
 * alone, after ASKING; else MOVED, and the map says so now): it is sent
 * there now, or waits for that node. True (it went on). */
bool rreq_redirected(struct rreq *q, struct rnode *to, bool ask);

/* rreq_reroute() - after a new map: every waiting SET to its slot's master. */
void rreq_reroute(struct remote *r);

/* rreq_send() - send q's command (cmd, len bytes; ASKING first when asking) on nd. 0 or -errno. */
int rreq_send(struct rnode *nd, struct rreq *q, const char *cmd, size_t len,
		     bool asking);

/* remote_node_takes() - nd takes a request now: up, under its in-flight cap,
 * its output buffer under OBUF_MAX. */
bool remote_node_takes(const struct rnode *nd);

/* remote_tick_arm() - the tick runs while anything is in flight or a node is down. */
void remote_tick_arm(struct remote *r);

#endif /* KVP_REMOTE_INT_H */
