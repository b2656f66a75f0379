/* SPDX-License-Identifier: MIT */
/*
 * remote.c - the remote tier's client (see remote.h): the requests and
 * their queue (the backlog of SETs, the rate cap, routing to a slot's
 * master), the tick (timeouts, reconnects, map reads), start and close,
 * and the measurements the fetch-or-recompute policy uses. The
 * connections and their replies are rnode.c's, the cluster's map
 * rmap.c's (remote_int.h is what they share).
 *
 * Requests on a connection are answered in order, so each node keeps its
 * requests in flight in a list, oldest first: the tick (every TICK_MS
 * while anything is in flight or a node is down) compares the oldest
 * one's age with the timeout. A node that fails is freed at once (hiredis
 * then ends each of its requests with a NULL reply: a miss) and marked
 * down before that, so a callback that sends again never reaches it.
 *
 * Past 800 lines on purpose: the backlog of SETs, the rate cap and the
 * tick are one queue's policy (the tick expires what the backlog holds,
 * the backlog waits on the cap), kept in one place.
 */
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>
#ifdef HAVE_LIBCRYPTO
#include <openssl/crypto.h>
#endif

#include "daemon/log.h"
#include "daemon/remote/remote_int.h"
#include "daemon/remote/rloop.h"

static void remote_free(struct remote *r);
static bool rate_take(struct remote *r, uint64_t bytes);
static void rate_give(struct remote *r, uint64_t bytes);

/* --- the state log: one line per change ------------------------------ */

/* remote_note_state() - log a change of remote_serving(): a connect under way (a
 * reconnect's back-off) is not one, else a cluster that is gone would be
 * logged as back at every try. */
void remote_note_state(struct remote *r)
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

static void idle_done(struct loop_op *op, int res);

/* remote_idle_arm() - call idle_fn from the loop's next turn: never from inside
 * a hiredis callback, where the caller could not free what it uses. */
void remote_idle_arm(struct remote *r)
{
	if (r->idle_armed || r->closing)
		return;
	if (loop_timeout(r->l, &r->idle, &r->idle_ts, 0) == 0) {
		r->idle_armed = true;
		r->ops++;
	}
}

/* --- requests ---------------------------------------------------------- */

void rreq_finish(struct rreq *q, int res)
{
	remote_done_fn done = q->done;
	void *arg = q->arg;

	free(q);
	if (done)
		done(arg, res);
}


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

static void wait_del(struct rreq **head, struct rreq **tail, struct rreq *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		*head = q->next;
	if (q->next)
		q->next->prev = q->prev;
	else
		*tail = q->prev;
	q->next = q->prev = NULL;
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

/* rreq_forget() - q's bytes leave the backlog. */
void rreq_forget(struct remote *r, struct rreq *q)
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

	return o == RC_NONE ? NULL : rnode_of(r, o);
}

/* put_wait() - q waits for its master, or for a map that names one. */
static void put_wait(struct remote *r, struct rreq *q)
{
	struct rnode *nd = owner_of(r, q);

	if (nd)
		wait_push(&nd->wait_head, &nd->wait_tail, q);
	else
		wait_push(&r->lost_head, &r->lost_tail, q);
	remote_tick_arm(r);
}

/* put_give_up() - q is not written: counted, said, and ended. */
static void put_give_up(struct rreq *q, bool sent, const char *why)
{
	struct remote *r = q->r;

	if (q->note)
		;	/* a note lost: its waits last until their deadlines */
	else if (sent)
		r->st.put_errors++;
	else
		r->st.put_skipped++;
	if (!r->closing && !q->note)
		say_unwritten(r, why);
	rreq_forget(r, q);
	rreq_finish(q, r->closing ? -ECANCELED : -EIO);
}

/* rreq_retry() - q failed once: it waits to go again, or is given up. */
void rreq_retry(struct rreq *q, const char *why)
{
	struct remote *r = q->r;

	/* a note is sent once: again, it could land after a later one */
	if (r->closing || q->note || q->errs >= PUT_TRIES ||
	    now_ns() - q->born_ns > PUT_MAX_AGE_NS) {
		put_give_up(q, true, why);
	} else {
		q->hops = 0;	/* MAX_HOPS bounds one chain of redirects */
		put_wait(r, q);
	}
}

/* put_send() - q to nd, now. 0, or -EAGAIN. */
static int put_send(struct rnode *nd, struct rreq *q)
{
	struct remote *r = nd->r;

	if (!remote_node_takes(nd) || !rate_take(r, q->cmdlen))
		return -EAGAIN;
	if (rreq_send(nd, q, q->cmd, q->cmdlen, q->asking) < 0) {
		rate_give(r, q->cmdlen);
		return -EAGAIN;
	}
	if (!q->tries++ && !q->note)
		r->st.puts++;	/* a page, once: not each time it is sent */
	if (!q->note)
		r->st.bytes_out += RPAGE_HDR + q->bytes;
	return 0;
}

bool rreq_redirected(struct rreq *q, struct rnode *to, bool ask)
{
	struct remote *r = q->r;

	q->asking = ask;
	if (ask) {	/* the map still names the old master: wait for this one */
		if (to->wait_head || put_send(to, q) < 0) {
			wait_push(&to->wait_head, &to->wait_tail, q);
			remote_tick_arm(r);
		}
		return true;
	}
	put_wait(r, q);		/* MOVED: the map names its master now */
	rreq_pump(to);
	return true;
}

/* rreq_pump() - nd's waiting SETs go while it takes them. */
void rreq_pump(struct rnode *nd)
{
	struct rreq *q;

	while (nd->wait_head && remote_node_takes(nd) && !nd->r->closing) {
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

/* rreq_reroute() - every waiting SET goes to the list of its slot's
 * master in the map now (a new map moved slots, retired nodes). */
void rreq_reroute(struct remote *r)
{
	struct rreq *h = NULL, *t = NULL, *q;
	unsigned i;

	waits_take(r, &h, &t);
	while ((q = wait_pop(&h, &t))) {
		q->asking = false;	/* the map says where it goes now */
		q->hops = 0;
		put_wait(r, q);
	}
	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i])
			rreq_pump(r->nodes[i]);
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
		for (q = *h; q; q = next) {	/* not in age order: retries and
						 * redirects wait behind younger */
			next = q->next;
			if (now - q->born_ns <= PUT_MAX_AGE_NS)
				continue;
			wait_del(h, t, q);
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

/* remote_node_takes() - nd can take a request now: up (it answered since it
 * connected), under its in-flight cap, and its connection's output buffer
 * under OBUF_MAX (checked before the rate cap's tokens are taken). */
bool remote_node_takes(const struct rnode *nd)
{
	return nd && nd->ac && nd->state == RN_UP && nd->inflight < nd->r->c.max_inflight &&
	       sdslen(nd->ac->c.obuf) < OBUF_MAX;
}

/* obuf_bytes() - the memory hiredis holds for commands not yet written to
 * the nodes' sockets: each a copy of a SET the backlog keeps too. */
static uint64_t obuf_bytes(const struct remote *r)
{
	const struct rnode *nd;
	uint64_t b = 0;
	unsigned i;

	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i] && r->nodes[i]->ac)
			b += sdsalloc(r->nodes[i]->ac->c.obuf);
	for (nd = r->retired; nd; nd = nd->next_retired)
		if (nd->ac)
			b += sdsalloc(nd->ac->c.obuf);
	return b;
}

/*
 * rreq_send() - send q to nd: a GET of its key (cmd NULL), or the SET
 * already formatted in cmd. Returns 0, or -EAGAIN (nd cannot take it).
 */
int rreq_send(struct rnode *nd, struct rreq *q, const char *cmd, size_t len,
		     bool asking)
{
	struct remote *r = nd->r;
	int rc;

	if (!remote_node_takes(nd))
		return -EAGAIN;
	if (asking)
		redisAsyncCommand(nd->ac, NULL, NULL, "ASKING");
	if (cmd) {
		rc = redisAsyncFormattedCommand(nd->ac, rnode_got_reply, q, cmd, len);
	} else {
		rc = redisAsyncCommand(nd->ac, rnode_got_reply, q, "GET %b", q->rkey,
				       (size_t)RPAGE_KEY_LEN);
	}
	if (rc != REDIS_OK)
		return -EAGAIN;
	q->t0 = now_ns();
	q->idle_sent = nd->inflight == 0;
	rnode_list_add(nd, q);
	remote_tick_arm(r);
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

/* route() - the node that serves q, up or connecting; NULL when none
 * can take a request now. */
static struct rnode *route(struct remote *r, const struct rreq *q)
{
	uint16_t owner;
	struct rnode *nd;

	if (r->closing)
		return NULL;
	owner = rc_map_owner(&r->map, rc_slot(q->rkey, sizeof(q->rkey)));
	if (owner == RC_NONE)
		return NULL;
	nd = rnode_of(r, owner);
	if (!nd || nd->state == RN_DOWN)
		return NULL;	/* the tick reconnects it */
	return nd;
}

/* get_takes() - nd can take a GET now: it takes requests, or it is on its
 * first connect since it was named (a daemon that just started), which
 * has not failed yet: the GET waits behind the PING, and ends as a miss
 * with it at --remote-timeout. A node that failed since (a stopped
 * server that still completes TCP connects) takes none until it
 * answered. */
static bool get_takes(const struct rnode *nd)
{
	if (remote_node_takes(nd))
		return true;
	return nd && nd->ac && nd->state == RN_CONNECTING && !nd->failed &&
	       nd->inflight < nd->r->c.max_inflight;
}

/* get() - remote_get() and remote_note_get(). */
static int get(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
	       remote_done_fn done, void *arg, bool note)
{
	struct rreq *q = req_new(r, true, id, key, bytes, done, arg);
	struct rnode *nd;

	if (!q)
		return -ENOMEM;
	q->dst = dst;
	q->be = be;
	q->note = note;
	nd = route(r, q);
	if (!get_takes(nd) || !rate_take(r, bytes + RPAGE_HDR)) {
		free(q);
		r->st.skipped += !note;
		return -EAGAIN;
	}
	if (rreq_send(nd, q, NULL, 0, false) < 0) {
		rate_give(r, bytes + RPAGE_HDR);
		free(q);
		r->st.skipped += !note;
		return -EAGAIN;
	}
	r->st.gets += !note;
	return 0;
}

int remote_get(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
	       remote_done_fn done, void *arg)
{
	return get(r, be, id, key, dst, bytes, done, arg, false);
}

int remote_note_get(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		    const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
		    remote_done_fn done, void *arg)
{
	return get(r, backend_host_bytes(), id, key, dst, bytes, done, arg, true);
}

/* format_set() - "SET key value" of q in RESP, the value its header and
 * the page at src: malloc'd, *len long. NULL when out of memory, or the
 * copy or the seal failed. */
static char *format_set(struct remote *r, const struct rreq *q, const void *src, size_t *len)
{
	char head[64], *buf;
	int hl;

	char px[48] = "";
	int pl = 0;

	if (q->ttl_ms)	/* a note's: SET key value PX ms */
		pl = snprintf(px, sizeof(px), "$2\r\nPX\r\n$%d\r\n%u\r\n",
			      snprintf(NULL, 0, "%u", q->ttl_ms), q->ttl_ms);
	hl = snprintf(head, sizeof(head), "*%d\r\n$3\r\nSET\r\n$%u\r\n", q->ttl_ms ? 5 : 3,
		      RPAGE_KEY_LEN);
	*len = (size_t)hl + RPAGE_KEY_LEN + 2 + 24 + RPAGE_HDR + q->bytes + 2 + (size_t)pl;
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
	memcpy(buf + hl + RPAGE_HDR + q->bytes + 2, px, (size_t)pl);
	*len = (size_t)hl + RPAGE_HDR + q->bytes + 2 + (size_t)pl;
	return buf;
}

/* put() - remote_put() and remote_note_put() (ttl_ms: a note's). */
static int put(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
	       remote_done_fn done, void *arg, bool note, uint32_t ttl_ms)
{
	struct rreq *q;
	struct rnode *nd;

	if (r->closing)
		return -EAGAIN;
	q = req_new(r, false, id, key, bytes, done, arg);
	if (!q)
		return -ENOMEM;
	q->be = be;
	q->note = note;
	q->ttl_ms = ttl_ms;
	q->cmd = format_set(r, q, src, &q->cmdlen);
	if (!q->cmd) {
		free(q);
		return -ENOMEM;
	}
	/* the bound is the memory: SETs held, and hiredis' copies of those it
	 * could not write yet */
	if (r->backlog + obuf_bytes(r) + q->cmdlen > r->c.max_backlog) {
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

int remote_put(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
	       remote_done_fn done, void *arg)
{
	return put(r, be, id, key, src, bytes, done, arg, false, 0);
}

int remote_note_put(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		    const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
		    uint32_t ttl_ms)
{
	return put(r, backend_host_bytes(), id, key, src, bytes, NULL, NULL, true, ttl_ms);
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
	struct rtouch *t;
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
	if (!remote_node_takes(nd))
		return false;
	t = calloc(1, sizeof(*t));	/* for its answer: an ASK is followed */
	if (!t)
		return false;
	memcpy(t->rkey, rkey, sizeof(rkey));
	if (redisAsyncCommand(nd->ac, rnode_touch_reply, t, "TOUCH %b", rkey,
			      (size_t)RPAGE_KEY_LEN) != REDIS_OK) {
		free(t);
		return false;
	}
	r->touched[slot].tag = h;
	r->touched[slot].sec = sec;
	return false;
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
	rmap_free_retired(r, false);
	waits_expire(r, now);
	for (i = 0; i < r->nnodes; i++)	/* what the rate cap held back */
		if (r->nodes[i])
			rreq_pump(r->nodes[i]);
	if (r->idle_fn && !remote_busy(r))
		remote_idle_arm(r);
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
			rnode_fail(nd, "did not answer in time (--remote-timeout)");
		} else if (nd->state == RN_CONNECTING && now - nd->since_ns > limit) {
			nd->timed_out = true;
			rnode_fail(nd, "did not answer in time after connecting");
		}
		if (nd->state == RN_DOWN && master && i < nmap && master[i]) {
			if (now >= nd->retry_ns)
				rnode_connect(nd);
			need = true;
		}
		need = need || nd->inflight || nd->state == RN_CONNECTING;
	}
	free(master);
	if (r->map_inflight && r->map_node && now - r->map_sent_ns > limit) {
		r->map_node->timed_out = true;	/* its answer ends the read: NULL */
		rnode_fail(r->map_node, "did not answer CLUSTER SLOTS in time");
	}
	if (r->url.cluster && (r->map_wanted || !r->map.covered) && !r->map_inflight &&
	    now >= r->map_ns) {
		r->map_ns = now + (uint64_t)MAP_EVERY_MS * 1000000u;
		rmap_read(r);
	}
	need = need || (r->url.cluster && (r->map_wanted || !r->map.covered));
	if (need)
		remote_tick_arm(r);
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
	remote_idle_arm(r);
}

bool remote_busy(const struct remote *r)
{
	return r && (r->st.inflight > 0 || waits_pending(r));
}

void remote_tick_arm(struct remote *r)
{
	if (r->ticking || r->closing || r->l->draining || r->l->stopping)
		return;
	if (loop_timeout(r->l, &r->tick, &r->ts, TICK_MS) == 0) {
		r->ticking = true;
		r->ops++;
	}
}

/* --- start-up ---------------------------------------------------------- */

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
	rc = rmap_resolve_seeds(r, err, errlen);
	if (rc < 0)
		goto out_free;
	for (i = 0, rc = 0; i < r->url.nseeds && rc == 0; i++)
		rc = rmap_check_seed(r, &r->url.seeds[i], err, errlen);
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
		struct rnode *nd = rnode_of(r, i);

		if (nd && nd->state == RN_DOWN)
			rnode_connect(nd);
	}
	rnode_count(r);
	remote_tick_arm(r);
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
	rmap_free_retired(r, true);
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

void remote_print_libraries(FILE *f)
{
	fprintf(f, "  libsodium %s\n", sodium_version_string());
	/* hiredis reports no version of its own: the one built against */
	fprintf(f, "  hiredis %d.%d.%d (built with)\n", HIREDIS_MAJOR, HIREDIS_MINOR,
		HIREDIS_PATCH);
#ifdef HAVE_LIBCRYPTO
	fprintf(f, "  %s\n", OpenSSL_version(OPENSSL_VERSION));
#endif
}
