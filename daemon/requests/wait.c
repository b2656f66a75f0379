/* SPDX-License-Identifier: MIT */
/*
 * wait.c - requests that wait (see wait.h): on a namespace's queue, for
 * its tier file, its drop, the NVMe tier's staging buffers or
 * --spill-rate, and for the remote tier's fetch. A request that waited is
 * served again from the start through the server's dispatcher
 * (srv->dispatch, the continuation every connection carries), so the
 * modules it waited on (ns.c, the tiers) never call the dispatcher.
 */
#include <errno.h>
#include <stddef.h>

#include "client/wire.h"
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
