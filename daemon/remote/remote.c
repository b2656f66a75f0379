/* SPDX-License-Identifier: MIT */
/*
 * remote.c - the remote tier's client (see remote.h): one hiredis
 * connection per master, the slot map, redirects, timeouts, back-off,
 * limits and the measurements the fetch-or-recompute policy uses.
 *
 * Requests on a connection are answered in order, so each node keeps its
 * requests in flight in a list, oldest first: the tick (every TICK_MS
 * while anything is in flight or a node is down) compares the oldest
 * one's age with the timeout. A node that fails is freed at once (hiredis
 * then ends each of its requests with a NULL reply: a miss) and marked
 * down before that, so a callback that sends again never reaches it.
 */
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <async.h>
#include <hiredis.h>

#include "daemon/log.h"
#include "daemon/remote/rcluster.h"
#include "daemon/remote/remote.h"
#include "daemon/remote/rloop.h"
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

enum rnode_state {
	RN_DOWN,		/* no connection; the next try at retry_at */
	RN_CONNECTING,		/* connect (and AUTH) under way; requests queue */
	RN_UP,			/* connected */
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
	unsigned errs;			/* SET: error replies so far */
	uint64_t born_ns;		/* SET: when remote_put() took it */
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
	bool was_up;			/* connected; for one log line per change */
	bool lost;			/* was up, then lost: say so when it is back */
	bool failed;			/* its last connect failed or it was lost */
	bool unasked;			/* it sent a reply nobody asked for */
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
	unsigned avail;			/* masters connected or connecting */
	uint64_t tokens, refill_ns;	/* the rate cap's bucket */
	struct remote_stats st;
	char desc[96];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void tick_arm(struct remote *r);
static void remote_free(struct remote *r);
static void node_fail(struct rnode *nd, const char *why);
static void node_pump(struct rnode *nd);
static bool rate_take(struct remote *r, uint64_t bytes);
static void rate_give(struct remote *r, uint64_t bytes);
static bool node_takes(const struct rnode *nd);
static void put_retry(struct rreq *q, const char *why);
static void put_forget(struct remote *r, struct rreq *q);

/* --- the state log: one line per change ------------------------------ */

/* note_state() - log a change of remote_serving(): a connect under way (a
 * reconnect's back-off) is not one, else a cluster that is gone would be
 * logged as back at every try. */
static void note_state(struct remote *r)
{
	bool up = remote_serving(r);

	if (up == r->was_up)
		return;
	r->was_up = up;
	if (up)
		log_info("remote tier %s: serving (%u of %u masters connected, %u slots)",
			 r->desc, r->st.nodes_up, r->st.nodes, r->map.covered);
	else
		log_warn("remote tier %s: unreachable; pages are kept in the local tiers "
			 "only and acquires miss what they lack, until it answers again",
			 r->desc);
}

/* --- nodes ------------------------------------------------------------ */

/* node_of() - the node of map index idx, made when new. NULL: no memory. */
static struct rnode *node_of(struct remote *r, unsigned idx)
{
	struct rnode **v, *nd;

	if (idx < r->nnodes && r->nodes[idx])
		return r->nodes[idx];
	if (idx >= r->nnodes) {
		v = realloc(r->nodes, (idx + 1) * sizeof(*v));
		if (!v)
			return NULL;
		memset(v + r->nnodes, 0, (idx + 1 - r->nnodes) * sizeof(*v));
		r->nodes = v;
		r->nnodes = idx + 1;
	}
	nd = calloc(1, sizeof(*nd));
	if (!nd)
		return NULL;
	nd->r = r;
	nd->addr = r->map.nodes[idx];
	nd->backoff_ms = BACKOFF_MIN_MS;
	r->nodes[idx] = nd;
	return nd;
}

static void idle_done(struct loop_op *op, int res);

/* idle_arm() - call idle_fn from the loop's next turn: never from inside
 * a hiredis callback, where the caller could not free what it uses. */
static void idle_arm(struct remote *r)
{
	if (r->idle_armed || r->closing)
		return;
	if (loop_timeout(r->l, &r->idle, &r->idle_ts, 0) == 0) {
		r->idle_armed = true;
		r->ops++;
	}
}

static void count_nodes(struct remote *r)
{
	unsigned i, s, masters = 0, up = 0, avail = 0;
	bool *is = calloc(r->map.nnodes ? r->map.nnodes : 1, 1);

	if (!is)
		return;
	for (s = 0; s < RC_SLOTS; s++)
		if (r->map.owner[s] != RC_NONE)
			is[r->map.owner[s]] = true;
	for (i = 0; i < r->map.nnodes; i++) {
		if (!is[i])
			continue;
		masters++;
		up += i < r->nnodes && r->nodes[i] && r->nodes[i]->state == RN_UP;
		avail += i < r->nnodes && r->nodes[i] && r->nodes[i]->state != RN_DOWN;
	}
	free(is);
	r->st.nodes = masters;
	r->st.nodes_up = up;
	r->avail = avail;
	r->st.slots = r->map.covered;
}

static void list_add(struct rnode *nd, struct rreq *q)
{
	q->node = nd;
	q->prev = nd->tail;
	q->next = NULL;
	if (nd->tail)
		nd->tail->next = q;
	else
		nd->head = q;
	nd->tail = q;
	if (!nd->inflight++) {
		nd->busy_ns = q->t0;
		nd->busy_bytes = 0;
		nd->busy_replies = 0;
	}
	nd->r->st.inflight++;
}

/* list_del() - q is answered (or lost); the end of a busy period of
 * several GETs is a bandwidth sample. */
static void list_del(struct rreq *q)
{
	struct rnode *nd = q->node;
	struct remote *r = nd->r;

	if (q->prev)
		q->prev->next = q->next;
	else
		nd->head = q->next;
	if (q->next)
		q->next->prev = q->prev;
	else
		nd->tail = q->prev;
	q->prev = q->next = NULL;
	if (--r->st.inflight == 0 && r->idle_fn)
		idle_arm(r);
	if (--nd->inflight == 0 && nd->busy_replies >= 2) {
		uint64_t dt = now_ns() - nd->busy_ns;

		if (dt > 0) {
			uint64_t bw = (uint64_t)((double)nd->busy_bytes * 1e9 / (double)dt);

			r->st.bandwidth = r->st.bandwidth ? (r->st.bandwidth * 3 + bw) / 4 : bw;
		}
	}
}

static void on_connect(const redisAsyncContext *ac, int status);
static void on_disconnect(const redisAsyncContext *ac, int status);

/*
 * The reply of a GET goes straight into its page, when that is host
 * memory: hiredis would copy the value into a string of its own, and the
 * string into the page, both copies of the whole page. Replies come in
 * the order of the requests, so when a top-level string is read, the
 * oldest request in flight on that connection is the GET it answers; its
 * header goes into the reply, for the checks, and its sealed data into
 * the page, where it is opened in place. Anything else is hiredis's
 * (device pages: opened in the reply, then copied).
 */
static redisReplyObjectFunctions *hiredis_fn;
static redisReplyObjectFunctions direct_fn;

#define DIRECT_COPIED	1	/* reply->integer of a string: the data is in the page */
#define DIRECT_FAILED	2	/* ... the copy into the page failed */

/*
 * unasked() - a reply begins on nd's connection while no request waits
 * for one: a server that speaks first, or answers twice. hiredis 0.14
 * would assert (abort the daemon) on it; refusing to make its object
 * (NULL: the reader fails) makes hiredis drop the connection instead,
 * and on_disconnect() counts it. Replies come one at a time, so when a
 * reply's first object is made, the requests it could answer are still
 * queued.
 */
static bool unasked(const redisReadTask *t)
{
	struct rnode *nd = t->privdata;

	if (t->parent || !nd || !nd->ac || nd->ac->replies.head)
		return false;
	nd->unasked = true;
	return true;
}

static void *checked_array(const redisReadTask *t, int elements)
{
	return unasked(t) ? NULL : hiredis_fn->createArray(t, elements);
}

static void *checked_integer(const redisReadTask *t, long long value)
{
	return unasked(t) ? NULL : hiredis_fn->createInteger(t, value);
}

static void *checked_nil(const redisReadTask *t)
{
	return unasked(t) ? NULL : hiredis_fn->createNil(t);
}

static void *direct_string(const redisReadTask *t, char *str, size_t len)
{
	struct rnode *nd = t->privdata;
	struct rreq *q = nd ? nd->head : NULL;
	struct backend *be;
	redisReply *r;

	if (unasked(t))
		return NULL;
	if (t->parent || t->type != REDIS_REPLY_STRING || !q || !q->get ||
	    len != RPAGE_HDR + q->bytes || q->be->ops->kind != KVP_BACKEND_HOST)
		return hiredis_fn->createString(t, str, len);	/* opened in the reply */
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->str = malloc(RPAGE_HDR + 1);
	if (!r->str) {
		free(r);
		return NULL;
	}
	memcpy(r->str, str, RPAGE_HDR);
	r->str[RPAGE_HDR] = '\0';
	r->len = len;
	r->type = REDIS_REPLY_STRING;
	be = q->be;
	r->integer = be->ops->from_host(be, q->dst, str + RPAGE_HDR, q->bytes) < 0 ?
		     DIRECT_FAILED : DIRECT_COPIED;
	return r;
}

/* direct_attach() - ac's replies of GETs go straight into their pages, and
 * a reply nobody asked for drops the connection. */
static void direct_attach(redisAsyncContext *ac, struct rnode *nd)
{
	redisReader *rd = ac->c.reader;

	if (!hiredis_fn) {
		hiredis_fn = rd->fn;
		direct_fn = *rd->fn;
		direct_fn.createString = direct_string;
		direct_fn.createArray = checked_array;
		direct_fn.createInteger = checked_integer;
		direct_fn.createNil = checked_nil;
	}
	if (rd->fn != hiredis_fn)
		return;		/* not the functions we know */
	rd->fn = &direct_fn;
	rd->privdata = nd;
	rd->maxbuf = 0;		/* keep the buffer: every page needs it again */
}

static void auth_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct rnode *nd = priv;
	redisReply *rep = reply;

	if (!rep || nd->ac != ac || rep->type != REDIS_REPLY_ERROR)
		return;
	if (!nd->auth_refused)
		log_error("remote tier %s: %s:%u refused AUTH: %.*s; check the password "
			  "(--remote-password-file, KVPOOL_REMOTE_PASSWORD or the URL) "
			  "and the user's ACL", nd->r->desc, nd->addr.host, nd->addr.port,
			  (int)rep->len, rep->str);
	nd->auth_refused = true;
	node_fail(nd, NULL);
}

/* node_connect() - start connecting nd; requests queue until it is up. */
static void node_connect(struct rnode *nd)
{
	struct remote *r = nd->r;
	const struct rc_addr *a = &nd->addr;
	const char *pw = r->c.password ? r->c.password : r->url.password;
	redisAsyncContext *ac;

	ac = redisAsyncConnect(a->host, a->port);
	if (!ac || ac->err) {
		if (ac)
			redisAsyncFree(ac);
		nd->state = RN_DOWN;
		nd->failed = true;
		nd->retry_ns = now_ns() + (uint64_t)nd->backoff_ms * 1000000u;
		if (nd->backoff_ms < BACKOFF_MAX_MS)
			nd->backoff_ms *= 2;
		return;
	}
	if (rloop_attach(ac, r->l) < 0) {
		redisAsyncFree(ac);
		nd->failed = true;
		nd->retry_ns = now_ns() + (uint64_t)nd->backoff_ms * 1000000u;
		return;
	}
	ac->data = nd;
	direct_attach(ac, nd);
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	/* hiredis learns that the connect is through from the first write
	 * event, and asks for one only once a command is queued: ask now */
	ac->ev.addWrite(ac->ev.data);
	nd->ac = ac;
	nd->state = RN_CONNECTING;
	nd->since_ns = now_ns();
	nd->timed_out = false;
	r->st.connects++;
	if (pw[0] && r->url.user[0])
		redisAsyncCommand(ac, auth_reply, nd, "AUTH %s %s", r->url.user, pw);
	else if (pw[0])
		redisAsyncCommand(ac, auth_reply, nd, "AUTH %s", pw);
	if (r->url.db)
		redisAsyncCommand(ac, NULL, NULL, "SELECT %u", r->url.db);
	count_nodes(r);
	tick_arm(r);
}

/* node_down() - nd lost its connection (ac is gone or going). */
static void node_down(struct rnode *nd)
{
	struct remote *r = nd->r;

	if (nd->state == RN_UP)
		r->st.disconnects++;
	nd->ac = NULL;
	nd->state = RN_DOWN;
	nd->failed = true;
	nd->retry_ns = now_ns() + (uint64_t)(nd->auth_refused ? BACKOFF_MAX_MS : nd->backoff_ms) *
				  1000000u;
	if (nd->backoff_ms < BACKOFF_MAX_MS)
		nd->backoff_ms *= 2;
	if (nd->was_up && !r->closing) {
		log_warn("remote tier %s: lost %s:%u; its slots are misses until the "
			 "slot map is read again", r->desc, nd->addr.host, nd->addr.port);
		nd->lost = true;
	}
	nd->was_up = false;
	if (r->url.cluster && !r->closing) {
		r->map_wanted = true;
		r->map_ns = 0;
	}
	count_nodes(r);
	note_state(r);
	tick_arm(r);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct rnode *nd = ac->data;

	if (!nd || nd->ac != ac)
		return;
	if (status != REDIS_OK) {
		node_down(nd);	/* hiredis frees ac after this */
		return;
	}
	nd->state = RN_UP;
	nd->failed = false;
	nd->backoff_ms = BACKOFF_MIN_MS;
	if (nd->lost)
		log_info("remote tier %s: %s:%u is back", nd->r->desc, nd->addr.host,
			 nd->addr.port);
	nd->lost = false;
	nd->was_up = true;
	count_nodes(nd->r);
	note_state(nd->r);
	node_pump(nd);		/* the SETs that waited for it */
}

/* broke_protocol() - say (at most once a minute) that nd sent what no
 * Redis server sends, and count it: an error. */
static void broke_protocol(struct rnode *nd, const char *what)
{
	nd->r->st.errors++;
	if (!log_every(&nd->r->broke_ns, SAY_EVERY_S))
		return;
	log_warn("remote tier %s: %s:%u %s; dropped the connection (is something else "
		 "listening on that port?)", nd->r->desc, nd->addr.host, nd->addr.port, what);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct rnode *nd = ac->data;

	if (!nd || nd->ac != ac)
		return;
	if (nd->unasked)
		broke_protocol(nd, "sent a reply nobody asked for");
	else if (status != REDIS_OK && ac->err == REDIS_ERR_PROTOCOL)
		broke_protocol(nd, "broke the protocol");
	nd->unasked = false;
	node_down(nd);
}

/* node_fail() - drop nd's connection now: its requests end as misses. */
static void node_fail(struct rnode *nd, const char *why)
{
	redisAsyncContext *ac = nd->ac;

	if (!ac)
		return;
	if (why && nd->was_up && !nd->r->closing) {
		log_warn("remote tier %s: %s:%u %s; dropping the connection; its slots "
			 "are misses until it or its replica answers", nd->r->desc,
			 nd->addr.host, nd->addr.port, why);
		nd->lost = true;
		nd->was_up = false;	/* said once */
	}
	node_down(nd);		/* first: callbacks that send again see it down */
	redisAsyncFree(ac);	/* deferred by hiredis when inside its callback */
}

/* --- requests ---------------------------------------------------------- */

static void req_finish(struct rreq *q, int res)
{
	remote_done_fn done = q->done;
	void *arg = q->arg;

	free(q);
	if (done)
		done(arg, res);
}

static int node_send(struct rnode *nd, struct rreq *q, const char *cmd, size_t len,
		     bool asking);

/* --- the backlog of SETs ------------------------------------------------

 * A SET holds a copy of its page (cmd) from remote_put() until Redis
 * answers it. One that its master cannot take now (--remote-max-inflight,
 * the rate cap, a connect under way, a node down, a slot without a
 * master) waits, in order, on its master's list or on lost_head, and
 * goes as soon as it can; one whose node went away is sent again when it
 * is back, and one whose slot moved or that got CLUSTERDOWN and the like
 * is sent again, until PUT_TRIES error replies. The bytes held are bounded (--remote-backlog): past the bound a
 * page is not taken, and a SET waiting PUT_MAX_AGE_NS is given up; both
 * are counted and said once a minute, never silently. */

static void wait_push(struct rreq **head, struct rreq **tail, struct rreq *q)
{
	q->prev = *tail;
	q->next = NULL;
	if (*tail)
		(*tail)->next = q;
	else
		*head = q;
	*tail = q;
}

static void wait_unshift(struct rreq **head, struct rreq **tail, struct rreq *q)
{
	q->prev = NULL;
	q->next = *head;
	if (*head)
		(*head)->prev = q;
	else
		*tail = q;
	*head = q;
}

static struct rreq *wait_pop(struct rreq **head, struct rreq **tail)
{
	struct rreq *q = *head;

	if (!q)
		return NULL;
	*head = q->next;
	if (*head)
		(*head)->prev = NULL;
	else
		*tail = NULL;
	q->next = q->prev = NULL;
	return q;
}

/* put_forget() - q's bytes leave the backlog. */
static void put_forget(struct remote *r, struct rreq *q)
{
	r->backlog -= q->cmdlen;
	free(q->cmd);
	q->cmd = NULL;
	q->cmdlen = 0;
}

/* say_unwritten() - one more page not written: said at most once a
 * minute, with how many since the last time. */
static void say_unwritten(struct remote *r, const char *why)
{
	r->unwritten++;
	if (!log_every(&r->unwritten_ns, SAY_EVERY_S))
		return;
	log_warn("remote tier %s: %llu page%s not written to Redis since the last such "
		 "line (the last: %s); they stay in the local tiers only: raise "
		 "--remote-backlog, or see to the cluster", r->desc,
		 (unsigned long long)r->unwritten, r->unwritten == 1 ? "" : "s", why);
	r->unwritten = 0;
}

/* owner_of() - the node of q's slot in the map, whatever its state; NULL
 * when the slot has no master. */
static struct rnode *owner_of(struct remote *r, const struct rreq *q)
{
	uint16_t o = rc_map_owner(&r->map, rc_slot(q->rkey, sizeof(q->rkey)));

	return o == RC_NONE ? NULL : node_of(r, o);
}

/* put_wait() - q waits for its master, or for a map that names one. */
static void put_wait(struct remote *r, struct rreq *q)
{
	struct rnode *nd = owner_of(r, q);

	if (nd)
		wait_push(&nd->wait_head, &nd->wait_tail, q);
	else
		wait_push(&r->lost_head, &r->lost_tail, q);
	tick_arm(r);
}

/* put_give_up() - q is not written: counted, said, and ended. */
static void put_give_up(struct rreq *q, bool sent, const char *why)
{
	struct remote *r = q->r;

	if (sent)
		r->st.put_errors++;
	else
		r->st.put_skipped++;
	if (!r->closing)
		say_unwritten(r, why);
	put_forget(r, q);
	req_finish(q, r->closing ? -ECANCELED : -EIO);
}

/* put_retry() - q failed once: it waits to go again, or is given up. */
static void put_retry(struct rreq *q, const char *why)
{
	struct remote *r = q->r;

	if (r->closing || q->errs >= PUT_TRIES || now_ns() - q->born_ns > PUT_MAX_AGE_NS)
		put_give_up(q, true, why);
	else
		put_wait(r, q);
}

/* put_send() - q to nd, now. 0, or -EAGAIN. */
static int put_send(struct rnode *nd, struct rreq *q)
{
	struct remote *r = nd->r;

	if (!node_takes(nd) || !rate_take(r, q->cmdlen))
		return -EAGAIN;
	if (node_send(nd, q, q->cmd, q->cmdlen, false) < 0) {
		rate_give(r, q->cmdlen);
		return -EAGAIN;
	}
	q->tries++;
	r->st.puts++;
	r->st.bytes_out += RPAGE_HDR + q->bytes;
	return 0;
}

/* node_pump() - nd's waiting SETs go while it takes them. */
static void node_pump(struct rnode *nd)
{
	struct rreq *q;

	while (nd->wait_head && node_takes(nd) && !nd->r->closing) {
		q = wait_pop(&nd->wait_head, &nd->wait_tail);
		if (put_send(nd, q) < 0) {
			wait_unshift(&nd->wait_head, &nd->wait_tail, q);
			break;	/* the rate cap: the tick tries again */
		}
	}
}

/* waits_take() - every waiting SET, of every node and of none, onto the
 * list h..t, in the order they waited per list. */
static void waits_take(struct remote *r, struct rreq **h, struct rreq **t)
{
	struct rnode *nd;
	struct rreq *q;
	unsigned i;

	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i])
			while ((q = wait_pop(&r->nodes[i]->wait_head, &r->nodes[i]->wait_tail)))
				wait_push(h, t, q);
	for (nd = r->retired; nd; nd = nd->next_retired)
		while ((q = wait_pop(&nd->wait_head, &nd->wait_tail)))
			wait_push(h, t, q);
	while ((q = wait_pop(&r->lost_head, &r->lost_tail)))
		wait_push(h, t, q);
}

/* waits_reroute() - every waiting SET goes to the list of its slot's
 * master in the map now (a new map moved slots, retired nodes). */
static void waits_reroute(struct remote *r)
{
	struct rreq *h = NULL, *t = NULL, *q;
	unsigned i;

	waits_take(r, &h, &t);
	while ((q = wait_pop(&h, &t)))
		put_wait(r, q);
	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i])
			node_pump(r->nodes[i]);
}

/* waits_expire() - give up the SETs that waited too long: the cluster
 * cannot take them (a master down for good, a rate cap far too low). */
static void waits_expire(struct remote *r, uint64_t now)
{
	struct rreq *q, *next;
	unsigned i;

	for (i = 0; i <= r->nnodes; i++) {
		struct rreq **h, **t;

		if (i < r->nnodes) {
			if (!r->nodes[i])
				continue;
			h = &r->nodes[i]->wait_head;
			t = &r->nodes[i]->wait_tail;
		} else {
			h = &r->lost_head;
			t = &r->lost_tail;
		}
		for (q = *h; q; q = next) {
			next = q->next;
			if (now - q->born_ns <= PUT_MAX_AGE_NS)
				break;	/* oldest first */
			wait_pop(h, t);
			put_give_up(q, q->tries > 0, "it waited 30 s for its master");
		}
	}
}

/* waits_pending() - SETs wait for a node that is up or coming up. */
static bool waits_pending(const struct remote *r)
{
	unsigned i;

	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i] && r->nodes[i]->wait_head && r->nodes[i]->state != RN_DOWN)
			return true;
	return false;
}

/* waits_any() - any SET waits, anywhere. */
static bool waits_any(const struct remote *r)
{
	unsigned i;

	if (r->lost_head)
		return true;
	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i] && r->nodes[i]->wait_head)
			return true;
	return false;
}

/* rate_take() - bytes fit the rate cap now (taken from the bucket). */
static bool rate_take(struct remote *r, uint64_t bytes)
{
	uint64_t now, add;

	if (!r->c.max_rate)
		return true;
	now = now_ns();
	add = (uint64_t)((double)(now - r->refill_ns) * (double)r->c.max_rate / 1e9);
	if (add) {
		r->tokens = r->tokens + add > r->c.max_rate ? r->c.max_rate : r->tokens + add;
		r->refill_ns = now;
	}
	/* a request larger than the whole bucket goes when the bucket is full,
	 * else it would never go */
	if (r->tokens < bytes && !(r->tokens == r->c.max_rate && bytes > r->c.max_rate))
		return false;
	r->tokens = r->tokens > bytes ? r->tokens - bytes : 0;
	return true;
}

/* rate_give() - bytes taken for a request that was not sent after all. */
static void rate_give(struct remote *r, uint64_t bytes)
{
	if (r->c.max_rate)
		r->tokens = r->tokens + bytes > r->c.max_rate ? r->c.max_rate : r->tokens + bytes;
}

/* node_takes() - nd can take a request now: connected or connecting, under
 * its in-flight cap (checked before the rate cap's tokens are taken). */
static bool node_takes(const struct rnode *nd)
{
	return nd && nd->ac && nd->state != RN_DOWN && nd->inflight < nd->r->c.max_inflight;
}

/* get_value() - a GET's answer: check, copy, count. */
static int get_value(struct rreq *q, const redisReply *rep)
{
	struct remote *r = q->r;
	int rc;

	if (rep->type == REDIS_REPLY_NIL) {
		r->st.misses++;
		return -ENOENT;
	}
	if (rep->type != REDIS_REPLY_STRING) {
		r->st.errors++;
		return -EIO;
	}
	r->st.bytes_in += rep->len;
	q->node->busy_bytes += rep->len;
	q->node->busy_replies++;
	if (rep->integer == DIRECT_FAILED) {
		r->st.errors++;
		return -EIO;
	}
	if (rep->integer == DIRECT_COPIED) {	/* the data is in the page already */
		rc = rvalue_open(rep->str, rep->len, q->dst, r->sk, q->id, q->key, q->bytes);
	} else {
		rc = rep->len < RPAGE_HDR ? -EBADMSG :
		     rvalue_open(rep->str, rep->len, rep->str + RPAGE_HDR, r->sk, q->id, q->key,
				 q->bytes);
		if (rc == 0 && q->be->ops->from_host(q->be, q->dst, rep->str + RPAGE_HDR,
						      q->bytes) < 0) {
			r->st.errors++;
			return -EIO;
		}
	}
	if (rc < 0) {
		r->st.corrupt++;
		r->st.forged += rc == -EKEYREJECTED;
		return rc;
	}
	r->st.hits++;
	return 0;
}

/* is_seed() - a is one of the URL's seeds (resolved at the start). */
static bool is_seed(const struct remote *r, const struct rc_addr *a)
{
	unsigned i;

	for (i = 0; i < r->url.nseeds; i++)
		if (r->url.seeds[i].port == a->port && !strcmp(r->url.seeds[i].host, a->host))
			return true;
	return false;
}

/* want_map() - read the slot map again, at the next tick that the
 * MAP_EVERY_MS limit allows. */
static void want_map(struct remote *r)
{
	if (!r->url.cluster || r->closing)
		return;
	r->map_wanted = true;
	tick_arm(r);
}

/* refused() - say (once a minute) that nd redirected to a, which no map
 * names: no request and no password goes there. */
static void refused(struct remote *r, const struct rc_addr *a, const struct rnode *nd)
{
	if (!log_every(&r->refused_ns, SAY_EVERY_S))
		return;
	log_warn("remote tier %s: %s:%u redirected to %s:%u, which no slot map names and "
		 "no seed is; not followed (a miss), reading the map again", r->desc,
		 nd->addr.host, nd->addr.port, a->host, a->port);
}

/* cluster_trouble() - an error that says the map may be stale: the node
 * is no master of the slot, or the cluster is changing. */
static bool cluster_trouble(const redisReply *rep)
{
	static const char *const what[] = { "CLUSTERDOWN", "LOADING", "MASTERDOWN",
					    "TRYAGAIN" };
	unsigned i;

	for (i = 0; i < sizeof(what) / sizeof(what[0]); i++)
		if (rep->len >= strlen(what[i]) && !memcmp(rep->str, what[i], strlen(what[i])))
			return true;
	return false;
}

/* redirect() - follow MOVED or ASK for q to a node of the map or a seed;
 * true when q went on. */
static bool redirect(struct rreq *q, const redisReply *rep)
{
	struct remote *r = q->r;
	struct rnode *nd = q->node, *to;
	struct rc_addr a;
	enum rc_redirect kind;
	uint16_t slot;
	int idx;

	kind = rc_redirect_parse(rep->str, rep->len, &nd->addr, &slot, &a);
	if (kind == RC_NO_REDIRECT)
		return false;
	idx = rc_map_find(&r->map, a.host, a.port);
	if (idx < 0 && is_seed(r, &a))
		idx = rc_map_node(&r->map, a.host, a.port);
	if (idx < 0) {
		/* a node no map names: maybe a new master, maybe anyone's; the
		 * map, read again from the cluster, says which */
		refused(r, &a, nd);
		want_map(r);
		return false;
	}
	r->st.redirects++;
	if (kind == RC_MOVED) {
		if (r->map.owner[slot] == RC_NONE)
			r->map.covered++;
		r->map.owner[slot] = (uint16_t)idx;
		r->map_wanted = true;	/* more slots have probably moved */
		tick_arm(r);
	}
	if (!q->get || ++q->hops > MAX_HOPS)
		return false;	/* a SET goes again from its backlog (put_retry) */
	to = node_of(r, (unsigned)idx);
	if (!to)
		return false;
	if (to->state == RN_DOWN && !r->closing)
		node_connect(to);
	return node_send(to, q, NULL, 0, kind == RC_ASK) == 0;
}

/* put_answer() - what Redis said to SET q: done, or sent again later
 * (its node is gone, the slot moved, the cluster is changing). */
static void put_answer(struct rreq *q, const redisReply *rep)
{
	struct remote *r = q->r;

	if (rep && rep->type == REDIS_REPLY_STATUS) {
		q->node->erred = false;
		put_forget(r, q);
		req_finish(q, 0);
		return;
	}
	if (rep)
		q->errs++;	/* a node that went away is not the SET's fault */
	if (rep && rep->type == REDIS_REPLY_ERROR) {
		redirect(q, rep);	/* MOVED: the map says where it goes now */
		if (cluster_trouble(rep)) {
			q->node->erred = true;
			want_map(r);
		}
	}
	put_retry(q, !rep ? "its master went away" : rep->type == REDIS_REPLY_ERROR ?
		  "Redis answered an error" : "Redis answered what SET does not");
}

static void got_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct rreq *q = priv;
	struct remote *r = q->r;
	struct rnode *nd = q->node;
	redisReply *rep = reply;
	uint64_t rtt = now_ns() - q->t0;
	int res;

	list_del(q);
	if (!q->get) {
		put_answer(q, rep);
	} else if (!rep) {	/* the connection went away */
		r->st.errors++;
		req_finish(q, r->closing ? -ECANCELED :
			      q->node->timed_out ? -ETIMEDOUT : -EHOSTDOWN);
	} else if (rep->type == REDIS_REPLY_ERROR) {
		if (redirect(q, rep))
			return;
		if (cluster_trouble(rep)) {	/* read the map from another node */
			q->node->erred = true;
			want_map(r);
		}
		r->st.errors++;
		req_finish(q, -EIO);
	} else {
		q->node->erred = false;
		if (q->idle_sent)	/* nothing queued before it: a latency sample */
			r->st.latency_ns = r->st.latency_ns ? (r->st.latency_ns * 7 + rtt) / 8
							     : rtt;
		res = get_value(q, rep);
		req_finish(q, res);
	}
	if (!r->closing && nd->ac == ac)	/* room on its connection: its SETs go */
		node_pump(nd);
}

/*
 * node_send() - send q to nd: a GET of its key (cmd NULL), or the SET
 * already formatted in cmd. Returns 0, or -EAGAIN (nd cannot take it).
 */
static int node_send(struct rnode *nd, struct rreq *q, const char *cmd, size_t len,
		     bool asking)
{
	struct remote *r = nd->r;
	int rc;

	if (!nd->ac || nd->state == RN_DOWN || nd->inflight >= r->c.max_inflight)
		return -EAGAIN;
	if (asking)
		redisAsyncCommand(nd->ac, NULL, NULL, "ASKING");
	if (cmd) {
		rc = redisAsyncFormattedCommand(nd->ac, got_reply, q, cmd, len);
	} else {
		rc = redisAsyncCommand(nd->ac, got_reply, q, "GET %b", q->rkey,
				       (size_t)RPAGE_KEY_LEN);
	}
	if (rc != REDIS_OK)
		return -EAGAIN;
	q->t0 = now_ns();
	q->idle_sent = nd->inflight == 0;
	list_add(nd, q);
	tick_arm(r);
	return 0;
}

/* req_new() - a request for block key of namespace id, its Redis key
 * made; NULL when out of memory. */
static struct rreq *req_new(struct remote *r, bool get, const uint8_t id[RPAGE_ID_BYTES],
			    const uint8_t key[KVP_KEY_BYTES], uint64_t bytes,
			    remote_done_fn done, void *arg)
{
	struct rreq *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->r = r;
	q->get = get;
	memcpy(q->id, id, RPAGE_ID_BYTES);
	memcpy(q->key, key, KVP_KEY_BYTES);
	rpage_key(id, key, q->rkey);
	q->bytes = bytes;
	q->done = done;
	q->arg = arg;
	return q;
}

/* route() - the node that serves q, connected or connecting; NULL when
 * none can take a request now. */
static struct rnode *route(struct remote *r, const struct rreq *q)
{
	uint16_t owner;
	struct rnode *nd;

	if (r->closing)
		return NULL;
	owner = rc_map_owner(&r->map, rc_slot(q->rkey, sizeof(q->rkey)));
	if (owner == RC_NONE)
		return NULL;
	nd = node_of(r, owner);
	if (!nd || nd->state == RN_DOWN)
		return NULL;	/* the tick reconnects it */
	return nd;
}

int remote_get(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
	       remote_done_fn done, void *arg)
{
	struct rreq *q = req_new(r, true, id, key, bytes, done, arg);
	struct rnode *nd;

	if (!q)
		return -ENOMEM;
	q->dst = dst;
	q->be = be;
	nd = route(r, q);
	if (!node_takes(nd) || !rate_take(r, bytes + RPAGE_HDR)) {
		free(q);
		r->st.skipped++;
		return -EAGAIN;
	}
	if (node_send(nd, q, NULL, 0, false) < 0) {
		rate_give(r, bytes + RPAGE_HDR);
		free(q);
		r->st.skipped++;
		return -EAGAIN;
	}
	r->st.gets++;
	return 0;
}

/* format_set() - "SET key value" of q in RESP, the value its header and
 * the page at src: malloc'd, *len long. NULL when out of memory, or the
 * copy or the seal failed. */
static char *format_set(struct remote *r, const struct rreq *q, const void *src, size_t *len)
{
	char head[64], *buf;
	int hl;

	hl = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$%u\r\n", RPAGE_KEY_LEN);
	*len = (size_t)hl + RPAGE_KEY_LEN + 2 + 24 + RPAGE_HDR + q->bytes + 2;
	buf = malloc(*len);
	if (!buf)
		return NULL;
	memcpy(buf, head, (size_t)hl);
	memcpy(buf + hl, q->rkey, RPAGE_KEY_LEN);
	hl += RPAGE_KEY_LEN;
	hl += snprintf(buf + hl, 28, "\r\n$%llu\r\n", (unsigned long long)(RPAGE_HDR + q->bytes));
	if (q->be->ops->to_host(q->be, buf + hl + RPAGE_HDR, src, q->bytes) < 0) {
		free(buf);
		return NULL;
	}
	if (rvalue_seal(buf + hl, r->sk, q->id, q->key, q->bytes) < 0) {
		free(buf);
		return NULL;
	}
	memcpy(buf + hl + RPAGE_HDR + q->bytes, "\r\n", 2);
	*len = (size_t)hl + RPAGE_HDR + q->bytes + 2;
	return buf;
}

int remote_put(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
	       remote_done_fn done, void *arg)
{
	struct rreq *q;
	struct rnode *nd;

	if (r->closing)
		return -EAGAIN;
	q = req_new(r, false, id, key, bytes, done, arg);
	if (!q)
		return -ENOMEM;
	q->be = be;
	q->cmd = format_set(r, q, src, &q->cmdlen);
	if (!q->cmd) {
		free(q);
		return -ENOMEM;
	}
	if (r->backlog + q->cmdlen > r->c.max_backlog) {
		free(q->cmd);
		free(q);
		r->st.put_skipped++;
		say_unwritten(r, "the backlog of --remote-backlog bytes was full");
		return -EAGAIN;
	}
	r->backlog += q->cmdlen;
	q->born_ns = now_ns();
	nd = owner_of(r, q);
	if (!nd || nd->wait_head || put_send(nd, q) < 0)
		put_wait(r, q);		/* in order, behind the others */
	return 0;
}

/*
 * remote_touch() - TOUCH the value of block key: Redis then counts it as
 * used now. Nothing waits for it and nothing is queued: a node down or
 * busy, or a key touched within this second already, is simply skipped.
 * True for the last: a key touched this second.
 */
bool remote_touch(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		  const uint8_t key[KVP_KEY_BYTES])
{
	char rkey[RPAGE_KEY_LEN];
	uint32_t sec = (uint32_t)(now_ns() / 1000000000u), h;
	uint16_t o;
	struct rnode *nd;
	unsigned slot;

	if (r->closing)
		return false;
	memcpy(&h, key, sizeof(h));	/* a block key is a hash already */
	slot = (h ^ ((uint32_t)key[4] << 24 | (uint32_t)key[5] << 16)) % TOUCH_SLOTS;
	if (r->touched[slot].tag == h && r->touched[slot].sec == sec)
		return true;
	rpage_key(id, key, rkey);
	o = rc_map_owner(&r->map, rc_slot(rkey, sizeof(rkey)));
	nd = o == RC_NONE || o >= r->nnodes ? NULL : r->nodes[o];
	if (!nd || !nd->ac || nd->state != RN_UP || nd->inflight >= r->c.max_inflight)
		return false;
	if (redisAsyncCommand(nd->ac, NULL, NULL, "TOUCH %b", rkey, (size_t)RPAGE_KEY_LEN) !=
	    REDIS_OK)
		return false;
	r->touched[slot].tag = h;
	r->touched[slot].sec = sec;
	return false;
}

/* --- the slot map ------------------------------------------------------ */

/*
 * keep_live_owners() - a slot that the new map nm gives to no one, or to a
 * node that failed, stays with its old owner when that one is connected
 * and answered its last request. Nodes learn of a failover by gossip, one
 * after another: a map read from one that has not heard yet names the
 * dead master again, and its slots would be misses until the next read.
 * A live node is never a wrong place to ask: one that no longer owns the
 * slot answers MOVED, and the request follows. was[] is scratch space of
 * RC_NODES_MAX entries.
 */
static void keep_live_owners(struct remote *r, struct rc_map *nm, struct rnode **was)
{
	unsigned i, j, s;
	int idx;

	for (i = 0; i < nm->nnodes; i++) {	/* the node behind each new index */
		was[i] = NULL;
		for (j = 0; j < r->nnodes && !was[i]; j++)
			if (r->nodes[j] && r->nodes[j]->addr.port == nm->nodes[i].port &&
			    !strcmp(r->nodes[j]->addr.host, nm->nodes[i].host))
				was[i] = r->nodes[j];
	}
	for (s = 0; s < RC_SLOTS; s++) {
		uint16_t o = r->map.owner[s], n = nm->owner[s];
		struct rnode *old = o != RC_NONE && o < r->nnodes ? r->nodes[o] : NULL;

		if (!old || old->state != RN_UP || old->erred || (n != RC_NONE && was[n] == old))
			continue;
		if (n != RC_NONE && !(was[n] && was[n]->state == RN_DOWN && was[n]->failed))
			continue;
		idx = rc_map_node(nm, old->addr.host, old->addr.port);
		if (idx < 0)
			continue;
		was[idx] = old;
		nm->covered += n == RC_NONE;
		nm->owner[s] = (uint16_t)idx;
	}
}

/* node_retire() - nd is named by no map: drop its connection quietly (its
 * requests end as misses); the tick frees it once nothing is in flight. */
static void node_retire(struct remote *r, struct rnode *nd)
{
	redisAsyncContext *ac = nd->ac;

	nd->ac = NULL;		/* on_disconnect() finds another: nothing more */
	nd->state = RN_DOWN;
	if (r->map_node == nd)
		r->map_node = NULL;	/* its answer comes as NULL, or not at all */
	nd->next_retired = r->retired;
	r->retired = nd;
	if (ac)
		redisAsyncFree(ac);	/* deferred by hiredis when inside its callback */
}

/*
 * map_replace() - nm becomes r's map: nodes it names keep their
 * connections (under their new index), the others are retired, so that
 * no node outlives the maps that name it and nothing from a reply stays
 * longer than the next one. nm's nodes move into r. -ENOMEM: r unchanged.
 */
static int map_replace(struct remote *r, struct rc_map *nm)
{
	struct rnode **v = calloc(nm->nnodes ? nm->nnodes : 1, sizeof(*v)), **old = r->nodes;
	unsigned i, j, nold = r->nnodes;

	if (!v)
		return -ENOMEM;
	for (i = 0; i < nm->nnodes; i++)
		for (j = 0; j < nold && !v[i]; j++)
			if (old[j] && old[j]->addr.port == nm->nodes[i].port &&
			    !strcmp(old[j]->addr.host, nm->nodes[i].host)) {
				v[i] = old[j];
				old[j] = NULL;
			}
	free(r->map.nodes);
	r->map = *nm;
	r->nodes = v;
	r->nnodes = nm->nnodes;
	/* retired last: their requests end now, and whatever their callers
	 * send next sees the new map */
	for (j = 0; j < nold; j++)
		if (old[j])
			node_retire(r, old[j]);
	free(old);
	return 0;
}

/* free_retired() - free the retired nodes that nothing points to. */
static void free_retired(struct remote *r, bool all)
{
	struct rnode **pp = &r->retired, *nd;

	while ((nd = *pp)) {
		if (all || (!nd->inflight && !nd->ac)) {
			*pp = nd->next_retired;
			free(nd);
		} else {
			pp = &nd->next_retired;
		}
	}
}

/* say_named() - log that the map m read from a names masters by host name. */
static void say_named(const struct remote *r, const struct rc_map *m, const struct rc_addr *a)
{
	if (m->nnamed)
		log_warn("remote tier %s: the slot map from %s:%u names %u masters by host "
			 "name (such as '%s'), not by address; their slots are misses (set "
			 "cluster-preferred-endpoint-type ip on the cluster)", r->desc,
			 a->host, a->port, m->nnamed, m->named);
}

static void slots_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct remote *r = priv;
	struct rnode *nd = ac->data, **was;
	struct rc_map *nm;
	char err[256];
	int rc;

	r->map_inflight = false;
	r->map_node = NULL;
	if (!reply || r->closing || !nd)
		return;
	nm = malloc(sizeof(*nm));
	was = calloc(RC_NODES_MAX, sizeof(*was));
	if (!nm || !was) {
		free(nm);
		free(was);
		return;		/* the next tick reads it again */
	}
	rc_map_init(nm);
	rc = rc_map_load(nm, reply, &nd->addr, err, sizeof(err));
	if (rc < 0) {
		rc_map_fini(nm);
		free(nm);
		free(was);
		log_warn("remote tier %s: slot map from %s:%u: %s", r->desc, nd->addr.host,
			 nd->addr.port, err);
		return;
	}
	say_named(r, nm, &nd->addr);
	if (!nm->covered && r->map.covered) {
		/* a node being set up, or reset, knows no slot: not a map to take
		 * over one that has slots; the next read asks another node */
		nd->erred = true;
		r->map_wanted = true;
		rc_map_fini(nm);
		free(nm);
		free(was);
		tick_arm(r);
		return;
	}
	keep_live_owners(r, nm, was);
	free(was);
	if (map_replace(r, nm) < 0) {
		rc_map_fini(nm);
		free(nm);
		return;
	}
	free(nm);
	waits_reroute(r);	/* waiting SETs go where the map says now */
	r->st.map_loads++;
	r->map_wanted = r->map.covered < RC_SLOTS;	/* keep reading until whole */
	/* the map says who serves: a master in back-off is tried at once */
	for (unsigned s = 0; s < RC_SLOTS; s++) {
		struct rnode *m = r->map.owner[s] == RC_NONE ? NULL : node_of(r, r->map.owner[s]);

		if (m && m->state == RN_DOWN && !m->auth_refused && m->retry_ns) {
			m->retry_ns = 0;
			m->backoff_ms = BACKOFF_MIN_MS;
		}
	}
	tick_arm(r);
	count_nodes(r);
	note_state(r);
}

/* seed_node() - the node of the next seed that did not just answer with an
 * error, connected or connecting; NULL when none can be asked now. */
static struct rnode *seed_node(struct remote *r)
{
	struct rnode *nd;
	unsigned i, k;
	int idx;

	for (i = 0; i < r->url.nseeds; i++) {
		k = r->seed_next++ % r->url.nseeds;
		idx = rc_map_node(&r->map, r->url.seeds[k].host, r->url.seeds[k].port);
		nd = idx < 0 ? NULL : node_of(r, (unsigned)idx);
		if (!nd || nd->erred)
			continue;
		if (nd->state == RN_DOWN) {
			if (now_ns() < nd->retry_ns)
				continue;
			node_connect(nd);
		}
		if (nd->ac)
			return nd;
	}
	return NULL;
}

/* map_read() - ask for the map: a connected master that did not just
 * answer with an error, else a seed that did not, else anyone connected
 * (a map from a node whose own is stale would only keep it stale). */
static void map_read(struct remote *r)
{
	struct rnode *nd = NULL;
	unsigned i;

	for (i = 0; i < r->nnodes && !nd; i++)
		if (r->nodes[i] && r->nodes[i]->state == RN_UP && !r->nodes[i]->erred)
			nd = r->nodes[i];
	if (!nd)
		nd = seed_node(r);
	for (i = 0; i < r->nnodes && !nd; i++)
		if (r->nodes[i] && r->nodes[i]->state == RN_UP)
			nd = r->nodes[i];
	if (!nd)
		return;
	if (redisAsyncCommand(nd->ac, slots_reply, r, "CLUSTER SLOTS") == REDIS_OK) {
		r->map_inflight = true;
		r->map_node = nd;
		r->map_sent_ns = now_ns();
	}
}

/* --- the tick: timeouts, reconnects, map reads ------------------------- */

static void tick_done(struct loop_op *op, int res)
{
	struct remote *r = (struct remote *)((char *)op - offsetof(struct remote, tick));
	uint64_t now = now_ns(), limit = (uint64_t)r->c.timeout_ms * 1000000u;
	bool need = false, *master;
	unsigned i, s, nmap = r->map.nnodes;

	(void)res;
	r->ticking = false;
	if (--r->ops == 0 && r->closing) {
		remote_free(r);	/* remote_close() left it to the ring */
		return;
	}
	if (r->closing)
		return;
	free_retired(r, false);
	waits_expire(r, now);
	for (i = 0; i < r->nnodes; i++)	/* what the rate cap held back */
		if (r->nodes[i])
			node_pump(r->nodes[i]);
	if (r->idle_fn && !remote_busy(r))
		idle_arm(r);
	need = r->retired != NULL || waits_any(r);
	master = calloc(nmap ? nmap : 1, 1);
	if (master)
		for (s = 0; s < RC_SLOTS; s++)
			if (r->map.owner[s] != RC_NONE)
				master[r->map.owner[s]] = true;
	for (i = 0; i < r->nnodes; i++) {
		struct rnode *nd = r->nodes[i];

		if (!nd)
			continue;
		if (nd->head && now - nd->head->t0 > limit) {
			nd->timed_out = true;
			node_fail(nd, "did not answer in time (--remote-timeout)");
		} else if (nd->state == RN_CONNECTING && now - nd->since_ns > limit) {
			nd->timed_out = true;
			node_fail(nd, "did not accept the connection in time");
		}
		if (nd->state == RN_DOWN && master && i < nmap && master[i]) {
			if (now >= nd->retry_ns)
				node_connect(nd);
			need = true;
		}
		need = need || nd->inflight || nd->state == RN_CONNECTING;
	}
	free(master);
	if (r->map_inflight && r->map_node && now - r->map_sent_ns > limit) {
		r->map_node->timed_out = true;	/* its answer ends the read: NULL */
		node_fail(r->map_node, "did not answer CLUSTER SLOTS in time");
	}
	if (r->url.cluster && (r->map_wanted || !r->map.covered) && !r->map_inflight &&
	    now >= r->map_ns) {
		r->map_ns = now + (uint64_t)MAP_EVERY_MS * 1000000u;
		map_read(r);
	}
	need = need || (r->url.cluster && (r->map_wanted || !r->map.covered));
	if (need)
		tick_arm(r);
}

/* cancel_done() - remote_close()'s cancel of the tick is through; the
 * last operation of r in the ring frees it. */
static void cancel_done(struct loop_op *op, int res)
{
	struct remote *r = (struct remote *)((char *)op - offsetof(struct remote, cancel));

	(void)res;
	if (--r->ops == 0 && r->closing)
		remote_free(r);
}

/* closer_done() - remote_close()'s own turn of the loop is through: no
 * hiredis callback of r runs any more. */
static void closer_done(struct loop_op *op, int res)
{
	struct remote *r = (struct remote *)((char *)op - offsetof(struct remote, closer));

	(void)res;
	if (--r->ops == 0)
		remote_free(r);
}

static void idle_done(struct loop_op *op, int res)
{
	struct remote *r = (struct remote *)((char *)op - offsetof(struct remote, idle));
	void (*fn)(void *) = r->idle_fn;

	(void)res;
	r->idle_armed = false;
	if (--r->ops == 0 && r->closing) {
		remote_free(r);
		return;
	}
	if (r->closing || !fn || remote_busy(r))
		return;
	r->idle_fn = NULL;
	fn(r->idle_arg);	/* may close r */
}

void remote_on_idle(struct remote *r, void (*fn)(void *arg), void *arg)
{
	r->idle_fn = fn;
	r->idle_arg = arg;
	idle_arm(r);
}

bool remote_busy(const struct remote *r)
{
	return r && (r->st.inflight > 0 || waits_pending(r));
}

static void tick_arm(struct remote *r)
{
	if (r->ticking || r->closing || r->l->draining || r->l->stopping)
		return;
	if (loop_timeout(r->l, &r->tick, &r->ts, TICK_MS) == 0) {
		r->ticking = true;
		r->ops++;
	}
}

/* --- start-up ---------------------------------------------------------- */

/*
 * check_seed() - ask one seed synchronously what it is. Returns 1 when it
 * answered as it should (the map is loaded from it for a cluster), 0 when
 * it did not answer, or -errno for a server that is not what the URL says
 * or refuses AUTH (err says so).
 */
static int check_seed(struct remote *r, const struct rc_addr *a, char *err, size_t errlen)
{
	struct timeval tv = { r->c.check_ms / 1000, (r->c.check_ms % 1000) * 1000 };
	const char *pw = r->c.password ? r->c.password : r->url.password;
	redisContext *c = redisConnectWithTimeout(a->host, a->port, tv);
	redisReply *rep = NULL;
	int rc = 0;

	if (!c || c->err)
		goto out;
	redisSetTimeout(c, tv);
	if (pw[0]) {
		rep = r->url.user[0] ? redisCommand(c, "AUTH %s %s", r->url.user, pw)
				     : redisCommand(c, "AUTH %s", pw);
		if (!rep)
			goto out;
		if (rep->type == REDIS_REPLY_ERROR) {
			snprintf(err, errlen, "remote tier: %s:%u refused AUTH: %s; check the "
				 "password and the user's ACL", a->host, a->port, rep->str);
			rc = -EACCES;
			goto out;
		}
		freeReplyObject(rep);
	}
	rep = redisCommand(c, r->url.cluster ? "CLUSTER SLOTS" : "INFO cluster");
	if (!rep)
		goto out;
	if (rep->type == REDIS_REPLY_ERROR && (strstr(rep->str, "NOAUTH") ||
					       strstr(rep->str, "NOPERM"))) {
		snprintf(err, errlen, "remote tier: %s:%u wants a password or a user with "
			 "more rights: %s", a->host, a->port, rep->str);
		rc = -EACCES;
	} else if (r->url.cluster && rep->type == REDIS_REPLY_ERROR) {
		snprintf(err, errlen, "remote tier: %s:%u is not a Redis Cluster node (%s); "
			 "give a cluster's nodes, or redis://%s:%u for one server",
			 a->host, a->port, rep->str, a->host, a->port);
		rc = -EPROTO;
	} else if (r->url.cluster) {
		rc = rc_map_load(&r->map, rep, a, err, errlen);
		if (rc == 0)
			say_named(r, &r->map, a);
		rc = rc < 0 ? rc : 1;
	} else if (rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_enabled:1")) {
		snprintf(err, errlen, "remote tier: %s:%u is a Redis Cluster node: give "
			 "redis-cluster://%s:%u so that keys go to the nodes that own them",
			 a->host, a->port, a->host, a->port);
		rc = -EPROTO;
	} else {
		rc = rc_map_single(&r->map, a->host, a->port);
		rc = rc < 0 ? rc : 1;
	}
out:
	if (rep)
		freeReplyObject(rep);
	if (c)
		redisFree(c);
	return rc;
}

/*
 * resolve_seeds() - the URL's host names as addresses, once, at the start
 * (the one place where waiting for a resolver stalls no one): from then
 * on every connection goes to a numeric address. IPv4 first, as Redis
 * Cluster announces. Returns 0 or -EINVAL (err says which name).
 */
static int resolve_seeds(struct remote *r, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *p, *pick;
	unsigned i;
	int rc;

	for (i = 0; i < r->url.nseeds; i++) {
		struct rc_addr *a = &r->url.seeds[i];

		if (rc_numeric(a->host))
			continue;
		rc = getaddrinfo(a->host, NULL, &hints, &ai);
		if (rc != 0) {
			snprintf(err, errlen, "remote tier: cannot resolve '%s' of --remote: "
				 "%s; give an address, or a name the resolver knows when "
				 "kvpoold starts", a->host, gai_strerror(rc));
			return -EINVAL;
		}
		for (pick = ai, p = ai; p; p = p->ai_next)
			if (p->ai_family == AF_INET) {
				pick = p;
				break;
			}
		rc = getnameinfo(pick->ai_addr, pick->ai_addrlen, a->host, sizeof(a->host),
				 NULL, 0, NI_NUMERICHOST);
		freeaddrinfo(ai);
		if (rc != 0) {
			snprintf(err, errlen, "remote tier: '%s' of --remote: %s", a->host,
				 gai_strerror(rc));
			return -EINVAL;
		}
	}
	return 0;
}

/* forget_password() - zero r's secrets: its sealing key, its copy of the
 * caller's password and the URL's. */
static void forget_password(struct remote *r)
{
	explicit_bzero(r->sk, sizeof(r->sk));
	explicit_bzero(r->url.password, sizeof(r->url.password));
	if (r->password) {
		explicit_bzero(r->password, strlen(r->password));
		free(r->password);
	}
	r->password = NULL;
	r->c.password = NULL;
}

int remote_open(struct remote **out, struct loop *l, const struct remote_config *c,
		const char **note, char *err, size_t errlen)
{
	static char why[512];
	struct remote *r;
	unsigned i;
	int rc = 0;

	*note = NULL;
	if (!c->key || c->key_len < RVALUE_FILE_MIN) {
		snprintf(err, errlen, "remote tier: no key to seal its values with (give "
			 "--remote-key-file)");
		return -EINVAL;
	}
	if (rvalue_init() < 0) {
		snprintf(err, errlen, "remote tier: libsodium would not start");
		return -ENOSYS;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->l = l;
	r->c = *c;
	rvalue_key(c->key, c->key_len, r->sk);
	r->c.key = NULL;	/* the caller's; r->sk is ours */
	if (c->password) {	/* the caller's buffer ends with remote_open() */
		r->password = strdup(c->password);
		if (!r->password) {
			free(r);
			return -ENOMEM;
		}
		r->c.password = r->password;
	}
	if (!r->c.timeout_ms)
		r->c.timeout_ms = 1000;
	if (!r->c.max_backlog)
		r->c.max_backlog = 256ull << 20;
	if (!r->c.max_inflight)
		r->c.max_inflight = 256;
	if (!r->c.check_ms)
		r->c.check_ms = 1000;
	r->tokens = r->c.max_rate;
	r->refill_ns = now_ns();
	r->tick.done = tick_done;
	r->cancel.done = cancel_done;
	r->closer.done = closer_done;
	r->idle.done = idle_done;
	rc_map_init(&r->map);
	rc = rc_url_parse(c->url, &r->url, err, errlen);
	if (rc < 0)
		goto out_free;
	snprintf(r->desc, sizeof(r->desc), "%s%.60s:%u%s", r->url.cluster ? "redis-cluster://"
		 : "redis://", r->url.seeds[0].host, r->url.seeds[0].port,
		 r->url.nseeds > 1 ? ",..." : "");
	rc = resolve_seeds(r, err, errlen);
	if (rc < 0)
		goto out_free;
	for (i = 0, rc = 0; i < r->url.nseeds && rc == 0; i++)
		rc = check_seed(r, &r->url.seeds[i], err, errlen);
	if (rc < 0)
		goto out_free;
	if (rc == 0) {
		snprintf(why, sizeof(why), "remote tier %s: no server answered within %u ms; "
			 "starting without it and trying again in the background", r->desc,
			 r->c.check_ms);
		*note = why;
		if (!r->url.cluster)
			rc_map_single(&r->map, r->url.seeds[0].host, r->url.seeds[0].port);
		r->map_wanted = r->url.cluster;
	}
	/* connect to every master now: the first requests find them ready */
	for (i = 0; i < r->map.nnodes; i++) {
		struct rnode *nd = node_of(r, i);

		if (nd && nd->state == RN_DOWN)
			node_connect(nd);
	}
	count_nodes(r);
	tick_arm(r);
	*out = r;
	return 0;
out_free:
	rc_map_fini(&r->map);
	forget_password(r);
	free(r);
	return rc;
}

void remote_close(struct remote *r)
{
	unsigned i;

	if (!r)
		return;
	r->closing = true;
	forget_password(r);	/* no connection is made from here on */
	if (waits_any(r)) {
		struct rreq *h = NULL, *t = NULL, *q;
		unsigned n = 0;

		waits_take(r, &h, &t);
		while ((q = wait_pop(&h, &t))) {
			put_give_up(q, q->tries > 0, "the tier closed");
			n++;
		}
		log_warn("remote tier %s: %u page%s not written to Redis at stop: their "
			 "masters did not take them in time", r->desc, n, n == 1 ? "" : "s");
	}
	for (i = 0; i < r->nnodes; i++) {
		struct rnode *nd = r->nodes[i];

		if (nd && nd->ac) {
			redisAsyncContext *ac = nd->ac;

			nd->ac = NULL;
			nd->state = RN_DOWN;
			ac->data = NULL;	/* on_disconnect() has nothing to do */
			ac->c.reader->privdata = NULL;
			redisAsyncFree(ac);	/* its requests end -ECANCELED, now or
						 * once the callback we are in returns */
		}
	}
	/*
	 * remote_close() may run inside a hiredis callback of r (a request's
	 * done callback that stops the daemon): the nodes and r are freed
	 * from the loop, once every callback has returned. The ring points
	 * into r: the last of its operations frees it.
	 */
	if (loop_timeout(r->l, &r->closer, &r->closer_ts, 0) == 0)
		r->ops++;
	if (r->ticking && loop_cancel(r->l, &r->cancel, &r->tick) == 0)
		r->ops++;
	if (!r->ops)
		remote_free(r);	/* the ring took nothing: no turn to wait for */
}

/* remote_free() - free r and its nodes: closed, and nothing of the ring
 * or of hiredis points into them any more. */
static void remote_free(struct remote *r)
{
	unsigned i;

	for (i = 0; i < r->nnodes; i++)
		free(r->nodes[i]);
	free(r->nodes);
	free_retired(r, true);
	rc_map_fini(&r->map);
	free(r);
}

bool remote_up(const struct remote *r)
{
	return r && r->avail > 0 && r->map.covered > 0;
}

uint64_t remote_fetch_ns(const struct remote *r, uint32_t n, uint64_t bytes)
{
	uint64_t par, bw;

	if (!remote_up(r))
		return UINT64_MAX;
	if (!r->st.latency_ns || !r->st.bandwidth)
		return 0;	/* not measured yet: a fetch measures it */
	par = r->st.nodes_up < n ? r->st.nodes_up : n;
	bw = r->st.bandwidth * (par ? par : 1);
	return r->st.latency_ns +
	       (uint64_t)((double)n * (double)(bytes + RPAGE_HDR) * 1e9 / (double)bw);
}

void remote_get_stats(const struct remote *r, struct remote_stats *st)
{
	*st = r->st;
}

bool remote_serving(const struct remote *r)
{
	return r && r->st.nodes_up > 0 && r->map.covered > 0;
}

const char *remote_describe(const struct remote *r)
{
	return r->desc;
}
