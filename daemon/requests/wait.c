/* SPDX-License-Identifier: MIT */
/*
 * wait.c - requests that wait (see wait.h): on a namespace's queue, for
 * its tier file, its drop, the NVMe tier's staging buffers or
 * --spill-rate, and for the remote tier's fetch. A request that waited is
 * served again from the start through the server's dispatcher
 * (srv->dispatch, the continuation every connection carries), so the
 * modules it waited on (ns.c, the tiers) never call the dispatcher.
 * ACQUIREs that wait for keys other clients are still saving
 * (KVP_WIRE_ACQ_WAIT) wait on the server, indexed by the key each lacks:
 * woken by a PUBLISH of that key, by a poll, or by the timer of the first
 * deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/requests/ns.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/conn.h"
#include "daemon/serve/server.h"
#include "daemon/store/prefix.h"
#include "daemon/store/siphash.h"
#include "daemon/tiers/tier.h"
#include "daemon/tiers/tier_remote.h"

/* redo() - serve c's waiting request again from the start. */
static void redo(struct conn *c)
{
	c->srv->dispatch(c, &c->wait_req, c->rbuf + KVP_WIRE_HDR_SIZE);
}

/* rate_done() - the --spill-rate timer: the tier may write again. */
static void rate_done(struct loop_op *op, int res)
{
	struct ns *n = (struct ns *)((char *)op - offsetof(struct ns, rate_op));

	(void)res;
	n->rate_armed = false;
	if (n->wait_head)
		wait_retry(n);
}

/*
 * defer_for_tier() - queue c's request until the NVMe tier can take more:
 * a write in flight ends, or the --spill-rate timer (armed here, ms away,
 * when ms) fires. False when nothing would wake it (nothing queued).
 */
static bool defer_for_tier(struct conn *c, const struct kvp_wire_hdr *req, struct ns *ns,
			   uint64_t ms)
{
	struct server *s = c->srv;

	if (ms && !ns->rate_armed) {
		ns->rate_op.done = rate_done;
		if (loop_timeout(s->loop, &ns->rate_op, &ns->rate_ts, ms) == 0)
			ns->rate_armed = true;
	}
	if (!ns->rate_armed && !tier_writing(ns))
		return false;
	wait_defer_on(c, req, ns);
	return true;
}

bool wait_tier_room(struct conn *c, const struct kvp_wire_hdr *req, struct ns *ns)
{
	return tier_writes(ns) && defer_for_tier(c, req, ns, tier_write_wait_ms(ns, 1));
}

/*
 * wait_tier() - back-pressure: true when making room for n pages
 * would write more pages to a tier (NVMe) than it can take now: staging
 * buffers free while writes are in flight, and what --spill-rate allows
 * (tier_must_wait(); a tier above it, host memory, takes pages at once
 * into its free slots). Then it evicts what can go now and queues c's
 * request, served again from the start when a write completes or the
 * rate allows more, instead of dropping cached pages it could keep.
 */
bool wait_tier(struct conn *c, const struct kvp_wire_hdr *req, uint32_t n)
{
	struct server *s = c->srv;
	struct ns *ns = c->ns;
	uint64_t avail = pool_available(s->pool, ns->pool_ns), now, ms;

	if (!tier_writes(ns) || avail >= n || !tier_room_possible(s->pool, ns, n))
		return false;	/* nothing to wait for, or a refusal to come */
	if (!tier_must_wait(s->pool, ns, n - avail, &now, &ms))
		return false;
	/* what can go now goes; the rest waits */
	tier_evict_ahead(s->pool, ns, avail + now);
	if (pool_available(s->pool, ns->pool_ns) >= n)
		return false;
	return defer_for_tier(c, req, ns, ms);
}

void wait_defer(struct conn *c, const struct kvp_wire_hdr *req)
{
	wait_defer_on(c, req, c->ns);
}

void wait_defer_on(struct conn *c, const struct kvp_wire_hdr *req, struct ns *ns)
{
	c->wait_req = *req;
	c->wait_next = NULL;
	if (ns->wait_tail)
		ns->wait_tail->wait_next = c;
	else
		ns->wait_head = c;
	ns->wait_tail = c;
	c->deferred = true;
	conn_hold(c);
}

bool wait_drop_ahead(const struct ns *n)
{
	const struct conn *c;

	for (c = n->wait_head; c; c = c->wait_next)
		if (c->wait_req.op == KVP_OP_DROP_NS && !conn_closing(c))
			return true;
	return false;
}

void wait_retry(struct ns *n)
{
	wait_wake(n, 0, NULL);	/* n is ready: each runs again */
}

void wait_wake(struct ns *n, int status, const char *msg)
{
	/* a HELLO that waited for a namespace an admin then asked to drop is
	 * refused as one that came after the drop (not joined and kicked) */
	bool dropping = n->state == NS_READY && wait_drop_ahead(n);
	struct conn *c = n->wait_head, *next;
	uint16_t op;

	n->wait_head = n->wait_tail = NULL;
	for (; c; c = next) {
		next = c->wait_next;
		c->deferred = false;
		op = c->wait_req.op;
		if (conn_closing(c))
			;
		else if (n->state == NS_GONE && op == KVP_OP_DROP_NS &&
			 !ns_by_name(&c->srv->nst, n->name))	/* not made anew meanwhile */
			conn_reply(c, &c->wait_req, KVP_S_OK, NULL, 0, -1);
		else if (op == KVP_OP_HELLO && status < 0)
			conn_error(c, &c->wait_req, (uint32_t)-status, "%s", msg);
		else if (op == KVP_OP_HELLO && dropping)
			conn_error(c, &c->wait_req, KVP_S_STATE, "namespace '%s' is being "
				   "dropped by an admin; connect again once it is gone", n->name);
		else
			redo(c);
		if (!conn_closing(c) && !c->deferred)
			conn_resume(c);
		conn_put(c);	/* the hold of the wait; a new wait took its own */
	}
}

/* what another machine abandoned, found in the remote tier, holds here
 * this long: the waits it ends now see it, and a wait that comes later
 * asks the tier again (the key may be abandoned no more) */
#define REMOTE_GONE_MS	1000u

static int abandon_here(struct ns *n, struct server *s, const uint8_t *key, uint64_t ms);

/* remote_done() - tier_remote_fetch()'s continuation: what came back is
 * in the pool, and the keys abandoned on another machine (gone, ngone)
 * are abandoned here too, for REMOTE_GONE_MS; serve the ACQUIRE again,
 * not asking the remote tier twice. */
static void remote_done(void *arg, const uint8_t *gone, uint32_t ngone)
{
	struct conn *c = arg;
	uint32_t i;

	for (i = 0; i < ngone; i++)	/* c is held: its namespace with it */
		(void)abandon_here(c->ns, c->srv, gone + (size_t)i * KVP_KEY_BYTES,
				   REMOTE_GONE_MS);
	if (!conn_closing(c)) {
		c->deferred = false;
		c->remote_tried = true;
		redo(c);
		if (!c->deferred)
			conn_resume(c);
	}
	conn_put(c);	/* the hold of the wait */
}

bool wait_remote(struct conn *c, const struct kvp_wire_hdr *req,
		 const struct kvp_wire_acquire *a, const uint8_t *keys, uint32_t from,
		 const uint8_t *handoff)
{
	if (c->remote_tried ||
	    !tier_remote_fetch(c->ns, a, keys, from, handoff, remote_done, c))
		return false;
	c->remote_from = from;	/* what comes back is the remote tier's (SOURCES) */
	c->wait_req = *req;
	c->deferred = true;
	conn_hold(c);
	return true;
}

/* --- ACQUIREs that wait for keys ------------------------------------------
 *
 * A wait is indexed by the first key it lacks, in its namespace
 * (srv->kwait_buckets, a chained hash table under a secret SipHash key,
 * since clients choose keys), and queued by when it is next due
 * (srv->kwait_heap, a binary heap: its deadline, or its next poll). A
 * PUBLISH looks up each key it published: O(keys published + waits
 * woken), whatever else waits. A woken wait resumes where it stopped,
 * looking at the keys after the one it lacked, and is served again from
 * the start only once it lacks none (or at its deadline); a poll (the
 * remote tier, or a block held up in a tier) is served again as before,
 * within KWAIT_POLLS_PER_S for the whole server. Nothing scans every
 * wait.
 */

#define KWAIT_POLL_FIRST_MS	10u
#define KWAIT_POLL_MAX_MS	160u
#define KWAIT_POLLS_PER_S	200u	/* polls of all waits, each second */
#define KWAIT_BUCKETS_MIN	64u

static void kwait_arm(struct server *s);

/* kwait_due_at() - when c is next due: its deadline, or its poll. */
static uint64_t kwait_due_at(const struct conn *c)
{
	return c->kwait_poll_at && c->kwait_poll_at < c->kwait_deadline ? c->kwait_poll_at :
									  c->kwait_deadline;
}

/* --- the heap, by due time: O(log waits) a change */

static void heap_set(struct server *s, uint32_t i, struct conn *c)
{
	s->kwait_heap[i] = c;
	c->kwait_hidx = i;
}

static void heap_up(struct server *s, uint32_t i)
{
	struct conn *c = s->kwait_heap[i];

	while (i > 0 && kwait_due_at(s->kwait_heap[(i - 1) / 2]) > kwait_due_at(c)) {
		heap_set(s, i, s->kwait_heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(s, i, c);
}

static void heap_down(struct server *s, uint32_t i)
{
	struct conn *c = s->kwait_heap[i];
	uint32_t k;

	for (;;) {
		k = 2 * i + 1;
		if (k >= s->kwait_n)
			break;
		if (k + 1 < s->kwait_n &&
		    kwait_due_at(s->kwait_heap[k + 1]) < kwait_due_at(s->kwait_heap[k]))
			k++;
		if (kwait_due_at(s->kwait_heap[k]) >= kwait_due_at(c))
			break;
		heap_set(s, i, s->kwait_heap[k]);
		i = k;
	}
	heap_set(s, i, c);
}

static int heap_push(struct server *s, struct conn *c)
{
	if (s->kwait_n == s->kwait_cap) {
		uint32_t cap = s->kwait_cap ? s->kwait_cap * 2 : 64;
		struct conn **h = realloc(s->kwait_heap, cap * sizeof(*h));

		if (!h)
			return -ENOMEM;
		s->kwait_heap = h;
		s->kwait_cap = cap;
	}
	heap_set(s, s->kwait_n++, c);
	heap_up(s, c->kwait_hidx);
	return 0;
}

static void heap_del(struct server *s, struct conn *c)
{
	uint32_t i = c->kwait_hidx;
	struct conn *last = s->kwait_heap[--s->kwait_n];

	if (last == c)
		return;
	heap_set(s, i, last);
	heap_up(s, i);
	heap_down(s, last->kwait_hidx);
}

/* a namespace's abandoned keys: a table of GONE_SLOTS, a key in one of
 * the GONE_PROBE slots after its hash; where those are taken, the one
 * that expires first gives way (a wait for it then lasts until its
 * deadline, as before) */
#define GONE_SLOTS	1024u
#define GONE_PROBE	8u

struct wait_gone {
	uint64_t until_ms;	/* monotonic; 0: a free slot */
	uint8_t key[KVP_KEY_BYTES];
};

/* --- abandoned keys (HANDOFF ABANDON): a namespace's, in a table of
 * fixed size */

static uint32_t gone_slot(const uint8_t *key)
{
	uint32_t h;

	memcpy(&h, key, sizeof(h));	/* a hash already (vLLM's block hashes) */
	return h;
}

/* abandoned() - key was abandoned in n in the last KVP_WIRE_ABANDON_MS. */
static bool abandoned(const struct ns *n, const uint8_t *key)
{
	uint64_t now;
	uint32_t i, at;

	if (!n->gone)
		return false;
	now = loop_now_ms();
	at = gone_slot(key);
	for (i = 0; i < GONE_PROBE; i++) {
		const struct wait_gone *g = &n->gone[(at + i) & (GONE_SLOTS - 1)];

		if (g->until_ms > now && !memcmp(g->key, key, KVP_KEY_BYTES))
			return true;
	}
	return false;
}

/* ungone() - key is no longer abandoned in n (a client published it, or
 * was issued a ticket for it). */
static void ungone(struct ns *n, const uint8_t *key)
{
	uint32_t i, at = gone_slot(key);

	for (i = 0; i < GONE_PROBE; i++) {
		struct wait_gone *g = &n->gone[(at + i) & (GONE_SLOTS - 1)];

		if (!memcmp(g->key, key, KVP_KEY_BYTES))
			g->until_ms = 0;
	}
}

/* gone_add() - key abandoned in n for ms from now: in a free or expired
 * slot of its probe, else over the one that expires first. */
static int gone_add(struct ns *n, const uint8_t *key, uint64_t ms)
{
	struct wait_gone *g, *pick = NULL;
	uint64_t now = loop_now_ms();
	uint32_t i, at;

	if (!n->gone && !(n->gone = calloc(GONE_SLOTS, sizeof(*n->gone))))
		return -ENOMEM;
	at = gone_slot(key);
	for (i = 0; i < GONE_PROBE; i++) {
		g = &n->gone[(at + i) & (GONE_SLOTS - 1)];
		if (g->until_ms > now && !memcmp(g->key, key, KVP_KEY_BYTES)) {
			pick = g;	/* again */
			break;
		}
		if (!pick || g->until_ms < pick->until_ms)
			pick = g;
	}
	if (pick->until_ms <= now || memcmp(pick->key, key, KVP_KEY_BYTES)) {
		memcpy(pick->key, key, KVP_KEY_BYTES);	/* a slot of its own */
		pick->until_ms = now + ms;
	} else if (pick->until_ms < now + ms) {
		pick->until_ms = now + ms;	/* again: the longer of the two */
	}
	return 0;
}

/* --- the index, by (namespace, the first key lacking): O(1) a change */

static uint32_t kwait_bucket(const struct server *s, const struct ns *n, const uint8_t *key)
{
	uint8_t m[sizeof(n) + KVP_KEY_BYTES];

	memcpy(m, &n, sizeof(n));
	memcpy(m + sizeof(n), key, KVP_KEY_BYTES);
	return (uint32_t)siphash24(s->kwait_seed, m, sizeof(m)) & (s->kwait_nbuckets - 1);
}

/* link_handoff() - c on the chain of its handoff's key. */
static void link_handoff(struct server *s, struct conn *c)
{
	struct conn **b = &s->kwait_tbuckets[kwait_bucket(s, c->ns, c->kwait_handoff)];

	c->kwait_tnext = *b;
	if (*b)
		(*b)->kwait_tprev = &c->kwait_tnext;
	*b = c;
	c->kwait_tprev = b;
}

/* index_link() - c in the index under the key it lacks, and under its
 * handoff's key when it waits for one (and is not there yet). */
static void index_link(struct server *s, struct conn *c)
{
	struct conn **b = &s->kwait_buckets[kwait_bucket(s, c->ns, c->kwait_key)];

	c->kwait_hnext = *b;
	if (*b)
		(*b)->kwait_hprev = &c->kwait_hnext;
	*b = c;
	c->kwait_hprev = b;
	if (c->kwait_has_handoff && !c->kwait_tprev)
		link_handoff(s, c);
}

/* index_unlink() - c off the chain of the key it lacks (it may be linked
 * again under the next); off its handoff's too when all. */
static void index_unlink(struct conn *c, bool all)
{
	if (c->kwait_hprev) {
		*c->kwait_hprev = c->kwait_hnext;
		if (c->kwait_hnext)
			c->kwait_hnext->kwait_hprev = c->kwait_hprev;
		c->kwait_hnext = NULL;
		c->kwait_hprev = NULL;
	}
	if (all && c->kwait_tprev) {
		*c->kwait_tprev = c->kwait_tnext;
		if (c->kwait_tnext)
			c->kwait_tnext->kwait_tprev = c->kwait_tprev;
		c->kwait_tnext = NULL;
		c->kwait_tprev = NULL;
	}
}

/* index_room() - buckets for one wait more: doubled (every wait linked
 * again, O(waits) once per doubling) when waits outnumber them. */
static int index_room(struct server *s)
{
	uint32_t nb = s->kwait_nbuckets, i;
	struct conn **old = s->kwait_buckets, **b, **t, *c, *next;

	if (old && s->kwait_n < nb)
		return 0;
	if (!old)
		(void)siphash_key(s->kwait_seed);	/* weaker, not fixed, without one */
	nb = nb ? nb * 2 : KWAIT_BUCKETS_MIN;
	b = calloc(nb, sizeof(*b));
	t = calloc(nb, sizeof(*t));
	if (!b || !t) {
		free(b);
		free(t);
		return old ? 0 : -ENOMEM;	/* longer chains, not a failure */
	}
	/* each chain moves on its own: a wait being woken is off the chain
	 * of the key it lacked (kwait_hnext lists the woken then), not off
	 * its handoff's */
	s->kwait_buckets = b;
	s->kwait_nbuckets = nb;
	for (i = 0; old && i < nb / 2; i++)
		for (c = old[i]; c; c = next) {
			next = c->kwait_hnext;
			b = &s->kwait_buckets[kwait_bucket(s, c->ns, c->kwait_key)];
			c->kwait_hnext = *b;
			if (*b)
				(*b)->kwait_hprev = &c->kwait_hnext;
			*b = c;
			c->kwait_hprev = b;
		}
	free(old);
	old = s->kwait_tbuckets;
	s->kwait_tbuckets = t;
	for (i = 0; old && i < nb / 2; i++)
		for (c = old[i]; c; c = next) {
			next = c->kwait_tnext;
			link_handoff(s, c);
		}
	free(old);
	return 0;
}

/* kwait_leave() - c waits no more: off the heap, the index and its
 * uid's count. */
static void kwait_leave(struct conn *c)
{
	struct server *s = c->srv;

	if (!c->kwait)
		return;
	heap_del(s, c);
	index_unlink(c, true);
	server_waits_add(s, c->cred.uid, -1);
	c->kwait = false;
	c->kwait_has_handoff = false;
}

/* kwait_go() - serve c's request again from the start (it waits again,
 * or is answered); drops the hold of its wait. */
static void kwait_go(struct conn *c)
{
	kwait_leave(c);
	c->deferred = false;
	if (!conn_closing(c)) {
		redo(c);
		if (!conn_closing(c) && !c->deferred)
			conn_resume(c);
	}
	conn_put(c);
}

/* kwait_poll_next() - c polls again (the remote tier may have its keys by
 * now, or a tier may read its block back): 10 ms after it began, then at
 * twice the interval, up to 160 ms (the budget of all polls bounds what
 * many waits cost). */
static void kwait_poll_next(struct conn *c, uint64_t now)
{
	c->kwait_poll_ms = c->kwait_poll_ms ? c->kwait_poll_ms * 2 : KWAIT_POLL_FIRST_MS;
	if (c->kwait_poll_ms > KWAIT_POLL_MAX_MS)
		c->kwait_poll_ms = KWAIT_POLL_MAX_MS;
	c->kwait_poll_at = now + c->kwait_poll_ms;
}

/* kwait_poll_ok() - one poll more this second: false past
 * KWAIT_POLLS_PER_S (the poll waits for the next second). */
static bool kwait_poll_ok(struct server *s, uint64_t now)
{
	if (now / 1000 != s->kwait_poll_sec) {
		s->kwait_poll_sec = now / 1000;
		s->kwait_polls = 0;
	}
	return s->kwait_polls++ < KWAIT_POLLS_PER_S;
}

/* kwait_timer_done() - the first due time came (or the timer was
 * cancelled for an earlier one): deadlines are answered with what is
 * held, polls served again within the budget; the timer is armed for
 * the next. O(due x log waits). */
static void kwait_timer_done(struct loop_op *op, int res)
{
	struct server *s = (struct server *)((char *)op - offsetof(struct server, kwait_op));
	uint64_t now = loop_now_ms();
	struct conn *c;

	(void)res;
	s->kwait_armed = false;
	while (s->kwait_n && kwait_due_at(c = s->kwait_heap[0]) <= now) {
		if (c->kwait_deadline > now) {	/* a poll */
			if (!kwait_poll_ok(s, now)) {
				c->kwait_poll_at = (now / 1000 + 1) * 1000;
				heap_down(s, 0);
				continue;
			}
			/* the keys may have reached the remote tier from another
			 * machine's daemon, which no PUBLISH here announces */
			c->remote_tried = false;
		} else {
			s->n.kwaits_expired++;	/* answered with what is held */
		}
		kwait_go(c);
	}
	kwait_arm(s);
}

static void kwait_cancel_done(struct loop_op *op, int res)
{
	struct server *s = (struct server *)((char *)op -
					     offsetof(struct server, kwait_cancel_op));

	(void)res;
	s->kwait_cancelling = false;
}

/* kwait_arm() - the timer at the first due time of the waits; none when
 * none waits (a timer armed for a later one, or for none, is cancelled
 * and armed again when it completes). O(1). */
static void kwait_arm(struct server *s)
{
	uint64_t at = s->kwait_n ? kwait_due_at(s->kwait_heap[0]) : UINT64_MAX, now;

	if (s->kwait_armed) {
		/* nothing to wait for keeps no timer (nor the stop waiting) */
		if ((at < s->kwait_at || at == UINT64_MAX) && !s->kwait_cancelling) {
			s->kwait_cancel_op.done = kwait_cancel_done;
			if (loop_cancel(s->loop, &s->kwait_cancel_op, &s->kwait_op) == 0)
				s->kwait_cancelling = true;
		}
		return;
	}
	if (at == UINT64_MAX)
		return;
	now = loop_now_ms();
	s->kwait_op.done = kwait_timer_done;
	if (loop_timeout(s->loop, &s->kwait_op, &s->kwait_ts, at > now ? at - now : 1) == 0) {
		s->kwait_armed = true;
		s->kwait_at = at;
	}
}

/* kwait_poll_done() - the socket of a waiting client is readable: it
 * hung up (or sent a request before its answer, which a client must not):
 * its wait ends, and so does the connection, its leases with it. */
static void kwait_poll_done(struct loop_op *op, int res)
{
	struct conn *c = (struct conn *)((char *)op - offsetof(struct conn, kwait_poll_op));
	struct server *s = c->srv;
	ssize_t r;
	char b;

	c->kwait_polling = false;
	if (c->kwait && !conn_closing(c) && res >= 0 &&
	    !(res & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
		/* a poll armed before this wait may have heard the request
		 * that started it, since received: nothing to read is no
		 * hang-up, and the poll goes on */
		r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    loop_poll(s->loop, &c->kwait_poll_op, c->fd, POLLIN | POLLRDHUP) == 0) {
			c->kwait_polling = true;
			return;	/* the hold goes on with the poll */
		}
	}
	if (c->kwait) {
		kwait_leave(c);
		if (!conn_closing(c)) {
			log_info("client %llu (%s, pid %d) hung up while its ACQUIRE waited for "
				 "keys", (unsigned long long)c->id, c->name, (int)c->cred.pid);
			conn_close(c);
		}
		conn_put(c);	/* the wait's hold */
		kwait_arm(s);
	}
	conn_put(c);		/* the poll's */
}

/* kwait_enter() - c waits for keys[from] of its namespace (for the
 * handoff whose key is handoff, when not NULL): indexed by it (and by
 * the handoff), queued by its due time. False when memory ran out. */
static bool kwait_enter(struct conn *c, const uint8_t *keys, uint32_t from,
			const uint8_t *handoff)
{
	struct server *s = c->srv;

	if (index_room(s) < 0)
		return false;
	memcpy(c->kwait_key, keys + (size_t)from * KVP_KEY_BYTES, KVP_KEY_BYTES);
	c->kwait_from = from;
	c->kwait_has_handoff = handoff != NULL;
	if (handoff)
		memcpy(c->kwait_handoff, handoff, KVP_KEY_BYTES);
	if (heap_push(s, c) < 0)
		return false;
	index_link(s, c);
	server_waits_add(s, c->cred.uid, 1);
	c->kwait = true;
	return true;
}

bool wait_keys(struct conn *c, const struct kvp_wire_hdr *req,
	       const struct kvp_wire_acquire *a, const uint8_t *keys, uint32_t hits,
	       const uint8_t *handoff)
{
	struct server *s = c->srv;
	uint64_t now = loop_now_ms();
	uint32_t limit = (uint32_t)s->opt->max_waits_per_uid;

	if (!(a->flags & KVP_WIRE_ACQ_WAIT) || s->shutting_down || hits >= a->nkeys)
		return false;
	if (abandoned(c->ns, keys + (size_t)hits * KVP_KEY_BYTES) ||
	    (handoff && (c->kwait_handoff_gone || abandoned(c->ns, handoff)))) {
		s->n.kwaits_abandoned++;
		return false;	/* it will not come: answered with what is held */
	}
	if (!c->kwait_deadline) {	/* its first try: admitted, or refused */
		if (server_waits_of(s, c->cred.uid) >= limit) {
			s->n.kwaits_refused++;
			conn_error(c, req, KVP_S_LIMIT, "uid %u has %u ACQUIREs waiting for "
				   "keys already (--max-waits-per-uid %u): this one is not "
				   "held; ask without WAIT, or raise the limit",
				   (unsigned)c->cred.uid, limit, limit);
			return true;
		}
		c->kwait_deadline = now + a->wait_ms;
	}
	if (now >= c->kwait_deadline)
		return false;	/* answered with what is held */
	if (!c->kwait_polling) {
		c->kwait_poll_op.done = kwait_poll_done;
		if (loop_poll(s->loop, &c->kwait_poll_op, c->fd, POLLIN | POLLRDHUP) < 0)
			return false;	/* ring full: no wait rather than one unheard */
		c->kwait_polling = true;
		conn_hold(c);
	}
	/* with a remote tier, the keys may come from another machine; a key
	 * the pool has but cannot serve now (read back by another request,
	 * or past a tier's read budget) comes without a PUBLISH: both are
	 * asked again, 10 ms on, then at twice the interval */
	if (c->ns->remote ||
	    prefix_find(c->ns->idx, keys + (size_t)hits * KVP_KEY_BYTES) != PREFIX_NIL)
		kwait_poll_next(c, now);
	else
		c->kwait_poll_at = 0;
	if (!kwait_enter(c, keys, hits, handoff))
		return false;
	kwait_arm(s);
	if (!s->kwait_armed) {	/* no timer for its deadline: no wait */
		kwait_leave(c);
		return false;
	}
	c->wait_req = *req;
	c->deferred = true;
	conn_hold(c);
	return true;
}

/* kwait_resume() - c's missing key was published: look at the keys after
 * it (O(keys newly found)); served again from the start once it lacks
 * none, else indexed by the next one it lacks. */
static void kwait_resume(struct conn *c)
{
	struct kvp_wire_acquire a;
	const uint8_t *keys, *handoff;
	const void *raw;
	uint32_t from = c->kwait_from + 1;
	struct ns *n = c->ns;

	if (wire_acquire_decode(c->proto, c->rbuf + KVP_WIRE_HDR_SIZE, c->wait_req.len, &a,
				&keys, &raw, &handoff) < 0) {
		kwait_go(c);	/* cannot be: it was decoded once; the handler says */
		return;
	}
	while (from < a.nkeys && prefix_find(n->idx, keys + (size_t)from * KVP_KEY_BYTES) !=
	       PREFIX_NIL)
		from++;
	if (from >= a.nkeys || abandoned(n, keys + (size_t)from * KVP_KEY_BYTES) ||
	    (handoff && (c->kwait_handoff_gone || abandoned(n, handoff)))) {
		/* served; or answered, the key it lacks or its handoff abandoned */
		kwait_go(c);
		return;
	}
	memcpy(c->kwait_key, keys + (size_t)from * KVP_KEY_BYTES, KVP_KEY_BYTES);
	c->kwait_from = from;
	index_link(c->srv, c);
}

/* lacking() - the waits of n whose first missing key is key, off the
 * index, as a list of their own (through kwait_hnext). O(1 + them). */
static struct conn *lacking(struct server *s, struct ns *n, const uint8_t *key)
{
	struct conn *c, *next, *woken = NULL;

	if (!s->kwait_n)
		return NULL;
	for (c = s->kwait_buckets[kwait_bucket(s, n, key)]; c; c = next) {
		next = c->kwait_hnext;
		if (c->ns != n || memcmp(c->kwait_key, key, KVP_KEY_BYTES))
			continue;
		index_unlink(c, false);
		c->kwait_hnext = woken;
		woken = c;
	}
	return woken;
}

void wait_published(struct ns *n, struct server *s, const uint8_t *key)
{
	struct conn *c, *next;

	if (n->gone)
		ungone(n, key);	/* published after all: waits for it wait again */
	if (!s->kwait_n)
		return;
	for (c = lacking(s, n, key); c; c = next) {
		next = c->kwait_hnext;
		c->kwait_hnext = NULL;
		kwait_resume(c);
	}
	kwait_arm(s);
}

/* awaiting() - the waits of n for the handoff whose key is key, marked,
 * off the index, as a list of their own (through kwait_hnext). O(1 +
 * them). A wait off its key's chain is on a list of woken waits already
 * (this call's lacking(), or a wake further up the stack): its mark ends
 * it when its turn comes. */
static struct conn *awaiting(struct server *s, struct ns *n, const uint8_t *key)
{
	struct conn *c, *next, *woken = NULL;

	for (c = s->kwait_tbuckets[kwait_bucket(s, n, key)]; c; c = next) {
		next = c->kwait_tnext;
		if (c->ns != n || memcmp(c->kwait_handoff, key, KVP_KEY_BYTES))
			continue;
		c->kwait_handoff_gone = true;	/* whatever the table keeps */
		if (!c->kwait_hprev)
			continue;
		index_unlink(c, true);
		c->kwait_hnext = woken;
		woken = c;
	}
	return woken;
}

void wait_unabandon(struct ns *n, const uint8_t *key)
{
	if (n->gone)
		ungone(n, key);
	tier_remote_abandoned(n, key, false);	/* and on the other machines */
}

int wait_abandon(struct ns *n, struct server *s, const uint8_t *key)
{
	tier_remote_abandoned(n, key, true);	/* the other machines' waits end too */
	return abandon_here(n, s, key, KVP_WIRE_ABANDON_MS);
}

/* abandon_here() - wait_abandon() in this daemon alone, the key
 * abandoned for ms (what another machine abandoned, found in the remote
 * tier, for less). */
static int abandon_here(struct ns *n, struct server *s, const uint8_t *key, uint64_t ms)
{
	struct conn *c, *next, *list[2];
	unsigned i;

	if (gone_add(n, key, ms) < 0)
		return -ENOMEM;
	if (!s->kwait_n)
		return 0;
	/* both lists first: a wait answered may wait again, under another
	 * key, before the second list is made */
	list[0] = lacking(s, n, key);
	list[1] = s->kwait_tbuckets ? awaiting(s, n, key) : NULL;
	for (i = 0; i < 2; i++)
		for (c = list[i]; c; c = next) {
			next = c->kwait_hnext;
			c->kwait_hnext = NULL;
			kwait_go(c);	/* wait_keys() finds the key abandoned: answered */
		}
	kwait_arm(s);
	return 0;
}
