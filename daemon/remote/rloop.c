/* SPDX-License-Identifier: MIT */
/*
 * rloop.c - hiredis on the daemon's loop (see rloop.h).
 *
 * hiredis asks for read and write readiness; each is one poll in flight
 * at a time. A poll whose interest was dropped meanwhile completes into
 * nothing. When hiredis lets go of the context (cleanup), the polls in
 * flight are cancelled: io_uring keeps a poll on a closed descriptor, so
 * waiting for it would never end. The adapter lives until the last of its
 * operations has completed, since the ring holds pointers into it.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <stdlib.h>

#include "daemon/remote/rloop.h"

struct rloop {
	struct loop *l;
	redisAsyncContext *ac;		/* NULL once hiredis cleaned up */
	int fd;
	struct loop_op rd, wr;		/* the polls */
	struct loop_op cancel_rd, cancel_wr;
	unsigned ops;			/* of the four, in flight */
	bool rd_on, wr_on;		/* a poll is in flight */
	bool want_rd, want_wr;		/* hiredis wants it */
};

/* rl_put() - one operation of a is done; the last after cleanup frees it. */
static void rl_put(struct rloop *a)
{
	if (--a->ops == 0 && !a->ac)
		free(a);
}

static void rl_arm(struct rloop *a, bool rd)
{
	if (rd ? a->rd_on : a->wr_on)
		return;
	if (loop_poll(a->l, rd ? &a->rd : &a->wr, a->fd, rd ? POLLIN : POLLOUT) < 0)
		return;		/* the ring is full: the request times out */
	a->ops++;
	if (rd)
		a->rd_on = true;
	else
		a->wr_on = true;
}

/* Reads of 16 KiB one poll lets hiredis make: 1 MiB, a few pages, read
 * and parsed in well under a millisecond. */
#define RL_READS_PER_POLL	64u

/* rl_read() - let hiredis read until the socket is empty, or for
 * RL_READS_PER_POLL reads (then the next poll reads on): it reads 16 KiB
 * a call, and a page is many of those; one poll a page, not one a read,
 * and a peer that sends without end holds the loop no longer than that.
 * Each call may clean up (a->ac NULL). */
static void rl_read(struct rloop *a)
{
	unsigned n = 0;
	int avail = 0;

	do
		redisAsyncHandleRead(a->ac);
	while (a->ac && a->want_rd && ++n < RL_READS_PER_POLL &&
	       ioctl(a->fd, FIONREAD, &avail) == 0 && avail > 0);
}

static void rl_done(struct rloop *a, bool rd, int res)
{
	if (rd)
		a->rd_on = false;
	else
		a->wr_on = false;
	if (a->ac && res != -ECANCELED && (rd ? a->want_rd : a->want_wr)) {
		if (rd)
			rl_read(a);
		else
			redisAsyncHandleWrite(a->ac);
		if (a->ac && a->want_rd)
			rl_arm(a, true);
		if (a->ac && a->want_wr)
			rl_arm(a, false);
	}
	rl_put(a);
}

static void rd_done(struct loop_op *op, int res)
{
	rl_done((struct rloop *)((char *)op - offsetof(struct rloop, rd)), true, res);
}

static void wr_done(struct loop_op *op, int res)
{
	rl_done((struct rloop *)((char *)op - offsetof(struct rloop, wr)), false, res);
}

static void cancel_rd_done(struct loop_op *op, int res)
{
	(void)res;
	rl_put((struct rloop *)((char *)op - offsetof(struct rloop, cancel_rd)));
}

static void cancel_wr_done(struct loop_op *op, int res)
{
	(void)res;
	rl_put((struct rloop *)((char *)op - offsetof(struct rloop, cancel_wr)));
}

static void add_read(void *p)
{
	struct rloop *a = p;

	a->want_rd = true;
	rl_arm(a, true);
}

static void del_read(void *p)
{
	((struct rloop *)p)->want_rd = false;
}

static void add_write(void *p)
{
	struct rloop *a = p;

	a->want_wr = true;
	rl_arm(a, false);
}

static void del_write(void *p)
{
	((struct rloop *)p)->want_wr = false;
}

/* cleanup() - hiredis is freeing the context (and will close fd). */
static void cleanup(void *p)
{
	struct rloop *a = p;

	a->ac = NULL;
	a->want_rd = a->want_wr = false;
	if (a->rd_on && loop_cancel(a->l, &a->cancel_rd, &a->rd) == 0)
		a->ops++;
	if (a->wr_on && loop_cancel(a->l, &a->cancel_wr, &a->wr) == 0)
		a->ops++;
	if (!a->ops)
		free(a);
}

int rloop_attach(redisAsyncContext *ac, struct loop *l)
{
	struct rloop *a;

	if (ac->ev.data)
		return -EEXIST;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->l = l;
	a->ac = ac;
	a->fd = ac->c.fd;
	a->rd.done = rd_done;
	a->wr.done = wr_done;
	a->cancel_rd.done = cancel_rd_done;
	a->cancel_wr.done = cancel_wr_done;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = a;
	return 0;
}
