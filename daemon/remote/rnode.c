/* SPDX-License-Identifier: MIT */
/*
 * rnode.c - the remote tier's connections and replies (see remote_int.h):
 * one hiredis connection per master, its connect and AUTH, back-off and
 * failure; the reply readers, which read a GET's value straight into its
 * page; and each reply's handling: a value opened, a SET answered, a
 * redirect followed (to a node of the map or a seed, never elsewhere), an
 * error that says the map is stale.
 */
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/log.h"
#include "daemon/remote/remote_int.h"
#include "daemon/remote/rloop.h"

/* --- nodes ------------------------------------------------------------ */

/* rnode_of() - the node of map index idx, made when new. NULL: no memory. */
struct rnode *rnode_of(struct remote *r, unsigned idx)
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

void rnode_count(struct remote *r)
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
		avail += i < r->nnodes && r->nodes[i] && r->nodes[i]->state == RN_UP;
	}
	free(is);
	r->st.nodes = masters;
	r->st.nodes_up = up;
	r->avail = avail;
	r->st.slots = r->map.covered;
}

void rnode_list_add(struct rnode *nd, struct rreq *q)
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
		remote_idle_arm(r);
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

/*
 * oversized() - the reply being read on nd's connection would hold more
 * than RNODE_REPLY_OBJECTS objects with the n that t makes (an array
 * counts its elements when its header is read, before hiredis allocates
 * them). No reply kvpoold asks for comes near: a page is one string, a
 * slot map of a 1,000-node cluster a few thousand objects. A peer's
 * giant reply (a CLUSTER SLOTS of 300,000 entries once held the loop a
 * quarter of a second, reading then freeing 1.5 million objects) is
 * refused at the limit and the connection dropped, as unasked() does.
 */
static bool oversized(const redisReadTask *t, long long n)
{
	struct rnode *nd = t->privdata;

	if (!nd)
		return false;
	if (!t->parent)
		nd->reply_objects = 0;	/* a new reply begins */
	if (n < 0 || (unsigned long long)n > RNODE_REPLY_OBJECTS - nd->reply_objects) {
		nd->oversized = true;
		return true;
	}
	nd->reply_objects += (unsigned)n;
	return false;
}

static void *checked_array(const redisReadTask *t, int elements)
{
	return unasked(t) || oversized(t, 1 + (long long)elements) ? NULL :
	       hiredis_fn->createArray(t, elements);
}

static void *checked_integer(const redisReadTask *t, long long value)
{
	return unasked(t) || oversized(t, 1) ? NULL : hiredis_fn->createInteger(t, value);
}

static void *checked_nil(const redisReadTask *t)
{
	return unasked(t) || oversized(t, 1) ? NULL : hiredis_fn->createNil(t);
}

static void *direct_string(const redisReadTask *t, char *str, size_t len)
{
	struct rnode *nd = t->privdata;
	struct rreq *q = nd ? nd->head : NULL;
	struct backend *be;
	redisReply *r;

	if (unasked(t) || oversized(t, 1))
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

const char *rnode_clean(const char *s, size_t len)
{
	static char out[200];
	size_t i;

	for (i = 0; i < len && i + 1 < sizeof(out); i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	out[i] = '\0';
	return out;
}

/*
 * node_up() - nd answered on its new connection: it is up, its back-off
 * starts over, and the SETs that waited for it go. A connect alone is no
 * proof: a stopped server (SIGSTOP) still completes TCP connects, and
 * taking that for "back" once made the node flap between back and lost
 * every few hundred milliseconds, re-sending its SETs into a socket
 * nobody read.
 */
static void node_up(struct rnode *nd)
{
	nd->state = RN_UP;
	nd->failed = false;
	nd->auth_refused = false;
	nd->backoff_ms = BACKOFF_MIN_MS;
	if (nd->lost)
		log_info("remote tier %s: %s:%u is back", nd->r->desc, nd->addr.host,
			 nd->addr.port);
	nd->lost = false;
	nd->was_up = true;
	rnode_count(nd->r);
	remote_note_state(nd->r);
	rreq_pump(nd);		/* the SETs that waited for it */
}

/* hello_reply() - the answer to the PING that ends a connect: the node is
 * up, or (an error: a server that wants a password, one still loading)
 * dropped, to be tried again after its back-off. */
static void hello_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct rnode *nd = priv;
	redisReply *rep = reply;

	if (!rep || nd->ac != ac || nd->state != RN_CONNECTING)
		return;
	if (rep->type == REDIS_REPLY_ERROR) {
		if (!nd->hello_refused)
			log_warn("remote tier %s: %s:%u answered PING with '%s'; trying it "
				 "again with back-off", nd->r->desc, nd->addr.host, nd->addr.port,
				 rnode_clean(rep->str, rep->len));
		nd->hello_refused = true;
		rnode_fail(nd, NULL);
		return;
	}
	nd->hello_refused = false;
	node_up(nd);
}

static void auth_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct rnode *nd = priv;
	redisReply *rep = reply;

	if (!rep || nd->ac != ac || rep->type != REDIS_REPLY_ERROR)
		return;
	if (!nd->auth_refused)
		log_error("remote tier %s: %s:%u refused AUTH: '%s'; check the password "
			  "(--remote-password-file, KVPOOL_REMOTE_PASSWORD or the URL) "
			  "and the user's ACL", nd->r->desc, nd->addr.host, nd->addr.port,
			  rnode_clean(rep->str, rep->len));
	nd->auth_refused = true;
	rnode_fail(nd, NULL);
}

/* rnode_connect() - start connecting nd; it is up once it answered a PING
 * (after AUTH), and takes requests then. */
void rnode_connect(struct rnode *nd)
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
	redisAsyncCommand(ac, hello_reply, nd, "PING");	/* up once it answers */
	rnode_count(r);
	remote_tick_arm(r);
}

/* node_down() - nd lost its connection (ac is gone or going). */
static void node_down(struct rnode *nd)
{
	struct remote *r = nd->r;
	bool served = nd->state == RN_UP;

	if (served)
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
	if (r->url.cluster && !r->closing) {
		/* a master lost: its slots may have moved (read the map at once);
		 * one that never came up is read about at the usual pace */
		r->map_wanted = true;
		if (served)
			r->map_ns = 0;
	}
	nd->was_up = false;
	rnode_count(r);
	remote_note_state(r);
	remote_tick_arm(r);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct rnode *nd = ac->data;

	if (!nd || nd->ac != ac)
		return;
	if (status != REDIS_OK)
		node_down(nd);	/* hiredis frees ac after this */
	/* else connected: up once the PING is answered (hello_reply()) */
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
	else if (nd->oversized)
		broke_protocol(nd, "sent a reply of more than 65,536 objects (no reply "
			       "kvpoold asks for has as many; a slot map that large is no "
			       "cluster's)");
	else if (status != REDIS_OK && ac->err == REDIS_ERR_PROTOCOL)
		broke_protocol(nd, "broke the protocol");
	nd->unasked = nd->oversized = false;
	node_down(nd);
}

/* rnode_fail() - drop nd's connection now: its requests end as misses. */
void rnode_fail(struct rnode *nd, const char *why)
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

/* get_value() - a GET's answer: check, copy, count. */
static int get_value(struct rreq *q, const redisReply *rep)
{
	struct remote *r = q->r;
	int rc;

	if (rep->type == REDIS_REPLY_NIL) {
		r->st.misses += !q->note;
		return -ENOENT;
	}
	if (rep->type != REDIS_REPLY_STRING) {
		r->st.errors++;
		return -EIO;
	}
	if (!q->note) {	/* a note's few bytes would say the tier is slow */
		r->st.bytes_in += rep->len;
		q->node->busy_bytes += rep->len;
		q->node->busy_replies++;
	}
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
	r->st.hits += !q->note;
	return 0;
}

/* rnode_refused() - say (once a minute) that nd redirected to a, which no map
 * names: no request and no password goes there. */
void rnode_refused(struct remote *r, const struct rc_addr *a, const struct rnode *nd)
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

/*
 * redirect_to() - the node a MOVED or ASK that nd answered names, by map
 * index, when it is a node of the map or a seed; -1 otherwise (another
 * error, or an address only the reply named: not followed, and the map is
 * read again). A MOVED updates the map for its slot. *kind says which.
 */
static int redirect_to(struct rnode *nd, const redisReply *rep, enum rc_redirect *kind)
{
	struct remote *r = nd->r;
	struct rc_addr a;
	uint16_t slot;
	int idx;

	*kind = rc_redirect_parse(rep->str, rep->len, &nd->addr, &slot, &a);
	if (*kind == RC_NO_REDIRECT)
		return -1;
	idx = rc_map_find(&r->map, a.host, a.port);
	if (idx < 0 && rmap_is_seed(r, &a))
		idx = rc_map_node(&r->map, a.host, a.port);
	if (idx < 0) {
		/* a node no map names: maybe a new master, maybe anyone's; the
		 * map, read again from the cluster, says which */
		rnode_refused(r, &a, nd);
		rmap_want(r);
		return -1;
	}
	r->st.redirects++;
	if (*kind == RC_MOVED) {
		if (r->map.owner[slot] == RC_NONE)
			r->map.covered++;
		r->map.owner[slot] = (uint16_t)idx;
		r->map_wanted = true;	/* more slots have probably moved */
		remote_tick_arm(r);
	}
	return idx;
}

/* What became of a redirect. */
enum redir {
	REDIR_NONE,	/* not one, or not followed (another error, a stranger, too many) */
	REDIR_WENT,	/* followed: q is on its way (or waits, a SET) */
	REDIR_BUSY,	/* a GET for a node that cannot take it now: a miss */
};

/* redirect() - follow MOVED or ASK for q to a node of the map or a seed:
 * a GET is sent there now (after ASKING for an ASK), a SET too or, when
 * that node cannot take it now, waits for it (rreq_redirected()). */
static enum redir redirect(struct rreq *q, const redisReply *rep)
{
	struct remote *r = q->r;
	enum rc_redirect kind;
	struct rnode *to;
	int idx = redirect_to(q->node, rep, &kind);

	if (idx < 0 || ++q->hops > MAX_HOPS)
		return REDIR_NONE;
	to = rnode_of(r, (unsigned)idx);
	if (!to)
		return REDIR_NONE;
	if (to->state == RN_DOWN && !r->closing)
		rnode_connect(to);
	if (!q->get)
		return rreq_redirected(q, to, kind == RC_ASK) ? REDIR_WENT : REDIR_NONE;
	return rreq_send(to, q, NULL, 0, kind == RC_ASK) == 0 ? REDIR_WENT : REDIR_BUSY;
}

void rnode_touch_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct rtouch *t = priv;
	redisReply *rep = reply;
	struct rnode *nd = ac->data, *to;
	enum rc_redirect kind;
	int idx;

	if (!rep || !nd || nd->r->closing || rep->type != REDIS_REPLY_ERROR ||
	    (idx = redirect_to(nd, rep, &kind)) < 0 || ++t->hops > MAX_HOPS) {
		free(t);
		return;
	}
	/* a TOUCH is never queued: the node it is sent to now takes it, or
	 * it is let go */
	to = rnode_of(nd->r, (unsigned)idx);
	if (!to || !remote_node_takes(to) ||
	    (kind == RC_ASK && redisAsyncCommand(to->ac, NULL, NULL, "ASKING") != REDIS_OK) ||
	    redisAsyncCommand(to->ac, rnode_touch_reply, t, "TOUCH %b", t->rkey,
			      (size_t)RPAGE_KEY_LEN) != REDIS_OK)
		free(t);
}

/* put_answer() - what Redis said to SET q: done, or sent again later
 * (its node is gone, the slot moved, the cluster is changing). */
static void put_answer(struct rreq *q, const redisReply *rep)
{
	struct remote *r = q->r;

	q->asking = false;	/* an ASK is for one send */
	if (rep && rep->type == REDIS_REPLY_STATUS) {
		q->node->erred = false;
		rreq_forget(r, q);
		rreq_finish(q, 0);
		return;
	}
	if (rep && rep->type == REDIS_REPLY_ERROR && redirect(q, rep) == REDIR_WENT)
		return;		/* MOVED or ASK: sent there, or waits for it */
	if (rep)
		q->errs++;	/* a node that went away is not the SET's fault */
	if (rep && rep->type == REDIS_REPLY_ERROR && cluster_trouble(rep)) {
		q->node->erred = true;
		rmap_want(r);
	}
	rreq_retry(q, !rep ? "its master went away" : rep->type == REDIS_REPLY_ERROR ?
		  "Redis answered an error" : "Redis answered what SET does not");
}

void rnode_got_reply(redisAsyncContext *ac, void *reply, void *priv)
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
		rreq_finish(q, r->closing ? -ECANCELED :
			      q->node->timed_out ? -ETIMEDOUT : -EHOSTDOWN);
	} else if (rep->type == REDIS_REPLY_ERROR) {
		switch (redirect(q, rep)) {
		case REDIR_WENT:
			return;
		case REDIR_BUSY:	/* as a GET routed to a node that is not up */
			r->st.skipped++;
			rreq_finish(q, -EAGAIN);
			goto pump;
		case REDIR_NONE:
			break;
		}
		if (cluster_trouble(rep)) {	/* read the map from another node */
			q->node->erred = true;
			rmap_want(r);
		}
		r->st.errors++;
		rreq_finish(q, -EIO);
	} else {
		q->node->erred = false;
		if (!q->note)
			hist_add(&r->st.gets_hist, rtt);
		if (q->idle_sent && !q->note)	/* nothing queued before it: a sample */
			r->st.latency_ns = r->st.latency_ns ? (r->st.latency_ns * 7 + rtt) / 8
							     : rtt;
		res = get_value(q, rep);
		rreq_finish(q, res);
	}
pump:
	if (!r->closing && nd->ac == ac)	/* room on its connection: its SETs go */
		rreq_pump(nd);
}
