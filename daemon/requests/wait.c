/* SPDX-License-Identifier: MIT */
/*
 * wait.c - requests that wait (see wait.h): on a namespace's queue, for
 * its tier file, its drop, the NVMe tier's staging buffers or
 * --spill-rate, and for the remote tier's fetch. A request that waited is
 * served again from the start through the server's dispatcher
 * (srv->dispatch, the continuation every connection carries), so the
 * modules it waited on (ns.c, the tiers) never call the dispatcher.
 * ACQUIREs that wait for keys other clients are still saving
 * (KVP_WIRE_ACQ_WAIT) wait on the server, woken by a PUBLISH of their
 * namespace or by the timer of the first deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/requests/ns.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/conn.h"
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

/* remote_done() - tier_remote_fetch()'s continuation: what came back is
 * in the pool; serve the ACQUIRE again, not asking the remote tier twice. */
static void remote_done(void *arg)
{
	struct conn *c = arg;

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
		 const struct kvp_wire_acquire *a, const uint8_t *keys, uint32_t from)
{
	if (c->remote_tried || !tier_remote_fetch(c->ns, a, keys, from, remote_done, c))
		return false;
	c->wait_req = *req;
	c->deferred = true;
	conn_hold(c);
	return true;
}

/* --- ACQUIREs that wait for keys ------------------------------------------ */

#define KWAIT_POLL_FIRST_MS	10u
#define KWAIT_POLL_MAX_MS	160u

static void kwait_arm(struct server *s);

/* kwait_unlink() - take c off the server's list of key waits. */
static void kwait_unlink(struct conn *c)
{
	struct conn **pp;

	for (pp = &c->srv->kwait_head; *pp; pp = &(*pp)->kwait_next)
		if (*pp == c) {
			*pp = c->kwait_next;
			break;
		}
	c->kwait_next = NULL;
	c->kwait = false;
}

/* kwait_take() - the waits for which due(c, arg) holds, off the list, in
 * the order they came. */
static struct conn *kwait_take(struct server *s, bool (*due)(const struct conn *, const void *),
			       const void *arg)
{
	struct conn *c, *next, *head = NULL, **tail = &head;

	for (c = s->kwait_head; c; c = next) {
		next = c->kwait_next;
		if (!due(c, arg))
			continue;
		kwait_unlink(c);
		*tail = c;
		tail = &c->kwait_next;
	}
	return head;
}

/* kwait_go() - serve each of the list's requests again from the start
 * (it waits again, or is answered); drops the holds of their waits. */
static void kwait_go(struct conn *c)
{
	struct conn *next;

	for (; c; c = next) {
		next = c->kwait_next;
		c->kwait_next = NULL;
		c->deferred = false;
		if (!conn_closing(c)) {
			redo(c);
			if (!conn_closing(c) && !c->deferred)
				conn_resume(c);
		}
		conn_put(c);
	}
}

static bool kwait_due(const struct conn *c, const void *now)
{
	uint64_t t = *(const uint64_t *)now;

	return c->kwait_deadline <= t || (c->kwait_poll_at && c->kwait_poll_at <= t);
}

static bool kwait_of_ns(const struct conn *c, const void *n)
{
	return c->ns == n;
}

/* kwait_timer_done() - the first deadline came (or the timer was
 * cancelled for an earlier one): answer what is due, arm for the next. */
static void kwait_timer_done(struct loop_op *op, int res)
{
	struct server *s = (struct server *)((char *)op - offsetof(struct server, kwait_op));
	uint64_t now = loop_now_ms();
	struct conn *due, *c;

	(void)res;
	s->kwait_armed = false;
	due = kwait_take(s, kwait_due, &now);
	for (c = due; c; c = c->kwait_next)
		if (c->kwait_poll_at && c->kwait_poll_at <= now && c->kwait_deadline > now) {
			/* the keys may have reached the remote tier from another
			 * machine's daemon, which no PUBLISH here announces */
			c->remote_tried = false;
			c->kwait_poll_at = 0;
		}
	kwait_go(due);
	kwait_arm(s);
}

static void kwait_cancel_done(struct loop_op *op, int res)
{
	struct server *s = (struct server *)((char *)op -
					     offsetof(struct server, kwait_cancel_op));

	(void)res;
	s->kwait_cancelling = false;
}

/* kwait_arm() - the timer at the first deadline of the waits; none when
 * none waits (a timer armed for a later one, or for none, is cancelled
 * and armed again when it completes). */
static void kwait_arm(struct server *s)
{
	uint64_t at = UINT64_MAX, now;
	struct conn *c;

	for (c = s->kwait_head; c; c = c->kwait_next) {
		if (c->kwait_deadline < at)
			at = c->kwait_deadline;
		if (c->kwait_poll_at && c->kwait_poll_at < at)
			at = c->kwait_poll_at;
	}
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
		kwait_unlink(c);
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

bool wait_keys(struct conn *c, const struct kvp_wire_hdr *req,
	       const struct kvp_wire_acquire *a)
{
	struct server *s = c->srv;
	uint64_t now = loop_now_ms();
	struct conn **pp;

	if (!(a->flags & KVP_WIRE_ACQ_WAIT) || s->shutting_down)
		return false;
	if (!c->kwait_deadline)
		c->kwait_deadline = now + a->wait_ms;
	if (now >= c->kwait_deadline)
		return false;	/* answered with what is held */
	if (!c->kwait_polling) {
		c->kwait_poll_op.done = kwait_poll_done;
		if (loop_poll(s->loop, &c->kwait_poll_op, c->fd, POLLIN | POLLRDHUP) < 0)
			return false;	/* ring full: no wait rather than one unheard */
		c->kwait_polling = true;
		conn_hold(c);
	}
	/* with a remote tier, the keys may come from another machine: it is
	 * asked again after 10 ms, then at twice the interval, up to 160 ms */
	if (c->ns->remote) {
		c->kwait_poll_ms = c->kwait_poll_ms ? c->kwait_poll_ms * 2 : KWAIT_POLL_FIRST_MS;
		if (c->kwait_poll_ms > KWAIT_POLL_MAX_MS)
			c->kwait_poll_ms = KWAIT_POLL_MAX_MS;
		c->kwait_poll_at = now + c->kwait_poll_ms;
	}
	for (pp = &s->kwait_head; *pp; pp = &(*pp)->kwait_next)
		;
	*pp = c;
	c->kwait_next = NULL;
	c->kwait = true;
	kwait_arm(s);
	if (!s->kwait_armed) {	/* no timer for its deadline: no wait */
		kwait_unlink(c);
		return false;
	}
	c->wait_req = *req;
	c->deferred = true;
	conn_hold(c);
	return true;
}

void wait_published(struct ns *n, struct server *s)
{
	if (!s->kwait_head)
		return;
	kwait_go(kwait_take(s, kwait_of_ns, n));
	kwait_arm(s);
}
