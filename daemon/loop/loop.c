/* SPDX-License-Identifier: MIT */
/*
 * loop.c - the io_uring event loop: queueing operations, submitting them
 * in batches, and dispatching completions to their owners. Where the
 * ring cannot be had, loop_sync.c does the same operations instead.
 *
 * Operations queued while handling a batch of completions go to the
 * kernel together in the next io_uring_submit_and_wait() call, so a busy
 * daemon makes one system call per turn of the loop.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/loop/loop.h"
#include "daemon/loop/loop_sync.h"

uint64_t loop_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* uring_init() - the ring, or -errno with err saying why. */
static int uring_init(struct loop *l, unsigned entries, char *err, size_t errlen)
{
	struct io_uring_params p;
	int rc;

	/* One thread submits and reaps: let the kernel run completion work
	 * only when we wait for it (6.1+), not by interrupting us. Older
	 * kernels refuse these flags; they get a plain ring. */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_CLAMP | IORING_SETUP_SINGLE_ISSUER |
		  IORING_SETUP_DEFER_TASKRUN;
	rc = io_uring_queue_init_params(entries, &l->ring, &p);
	if (rc == -EINVAL) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_CLAMP;
		rc = io_uring_queue_init_params(entries, &l->ring, &p);
	}
	if (rc == 0)	/* fixed buffers are an optimization: fine without */
		l->buffers = io_uring_register_buffers_sparse(&l->ring, LOOP_BUFFERS) == 0;
	if (rc < 0) {
		snprintf(err, errlen,
			 "cannot set up io_uring with %u entries: %s (%d). "
			 "Usual causes: a seccomp profile that blocks io_uring "
			 "(containers: allow io_uring_setup/enter/register), "
			 "sysctl kernel.io_uring_disabled=1 or 2, or a low "
			 "RLIMIT_MEMLOCK on kernels before 5.12",
			 entries, strerror(-rc), -rc);
		return rc;
	}
	return 0;
}

int loop_init(struct loop *l, unsigned entries, enum loop_io io, const char **note,
	      char *err, size_t errlen)
{
	static char why[512];
	const char *env = getenv("KVPOOL_IO");
	int rc;

	memset(l, 0, sizeof(*l));
	*note = NULL;
	if (io == LOOP_IO_AUTO && env && !strcmp(env, "sync"))
		io = LOOP_IO_SYNC;
	else if (io == LOOP_IO_AUTO && env && !strcmp(env, "uring"))
		io = LOOP_IO_URING;
	if (io == LOOP_IO_SYNC) {
		*note = "I/O: epoll and I/O threads, as asked (--io sync or KVPOOL_IO=sync)";
		return sync_init(l, err, errlen);
	}
	rc = uring_init(l, entries, why, sizeof(why));
	if (rc == 0 || io == LOOP_IO_URING) {
		if (rc < 0)
			snprintf(err, errlen, "%s", why);
		return rc;
	}
	memset(l, 0, sizeof(*l));
	snprintf(err, errlen, "io_uring is unavailable (%.400s); serving with epoll "
		 "and I/O threads instead, which costs throughput", why);
	rc = sync_init(l, why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen, "%s", why);
		return rc;
	}
	*note = err;
	return 0;
}

const char *loop_io_name(const struct loop *l)
{
	return l->sync ? "epoll and I/O threads" : "io_uring";
}

void loop_fini(struct loop *l)
{
	loop_work_fini(l);	/* before the ring: its poll is cancelled with it */
	if (l->sync)
		sync_fini(l);
	else
		io_uring_queue_exit(&l->ring);
	l->inflight = 0;
	l->buffers = false;	/* the ring's registrations went with it */
	l->buffers_used = 0;
}

/* get_sqe() - a free submission slot, flushing the queue once if full. */
static struct io_uring_sqe *get_sqe(struct loop *l, struct loop_op *op)
{
	struct io_uring_sqe *sqe;

	sqe = io_uring_get_sqe(&l->ring);
	if (!sqe) {
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
		if (!sqe)
			return NULL;
	}
	io_uring_sqe_set_data(sqe, op);
	l->inflight++;
	return sqe;
}

int loop_accept(struct loop *l, struct loop_op *op, int fd)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_accept(l, op, fd);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_accept(sqe, fd, NULL, NULL, SOCK_CLOEXEC);
	return 0;
}

int loop_recvmsg(struct loop *l, struct loop_op *op, int fd,
		 struct msghdr *msg, unsigned flags)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_recvmsg(l, op, fd, msg, flags);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_recvmsg(sqe, fd, msg, flags);
	return 0;
}

int loop_sendmsg(struct loop *l, struct loop_op *op, int fd,
		 const struct msghdr *msg, unsigned flags)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_sendmsg(l, op, fd, msg, flags);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_sendmsg(sqe, fd, msg, flags);
	return 0;
}

int loop_read(struct loop *l, struct loop_op *op, int fd, void *buf,
	      unsigned len)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_read(l, op, fd, buf, len);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, fd, buf, len, 0);
	return 0;
}

int loop_poll(struct loop *l, struct loop_op *op, int fd, unsigned events)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_poll(l, op, fd, events);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, fd, events);
	return 0;
}

int loop_pread(struct loop *l, struct loop_op *op, int fd, void *buf, unsigned len,
	       uint64_t off, int buf_index)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_file(l, op, fd, buf, len, off, false);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	if (buf_index >= 0)
		io_uring_prep_read_fixed(sqe, fd, buf, len, off, buf_index);
	else
		io_uring_prep_read(sqe, fd, buf, len, off);
	return 0;
}

int loop_pwrite(struct loop *l, struct loop_op *op, int fd, const void *buf,
		unsigned len, uint64_t off, int buf_index)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_file(l, op, fd, (void *)buf, len, off, true);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	if (buf_index >= 0)
		io_uring_prep_write_fixed(sqe, fd, buf, len, off, buf_index);
	else
		io_uring_prep_write(sqe, fd, buf, len, off);
	return 0;
}

int loop_timeout(struct loop *l, struct loop_op *op, struct __kernel_timespec *ts,
		 uint64_t ms)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_timeout(l, op, ms);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	ts->tv_sec = (long long)(ms / 1000);
	ts->tv_nsec = (long long)(ms % 1000) * 1000000;
	io_uring_prep_timeout(sqe, ts, 0, 0);
	return 0;
}

_Static_assert(LOOP_BUFFERS <= 64, "buffers_used has a bit per fixed buffer");

int loop_buffer_add(struct loop *l, void *base, size_t len)
{
	struct iovec iov = { base, len };
	__u64 tag = 0;
	unsigned idx;
	int rc;

	if (!l->buffers)
		return -ENOTSUP;
	for (idx = 0; idx < LOOP_BUFFERS && (l->buffers_used >> idx & 1); idx++)
		;
	if (idx == LOOP_BUFFERS)
		return -ENOSPC;
	rc = io_uring_register_buffers_update_tag(&l->ring, idx, &iov, &tag, 1);
	if (rc < 0)
		return rc;
	l->buffers_used |= 1ull << idx;
	return (int)idx;
}

void loop_buffer_remove(struct loop *l, int idx)
{
	struct iovec iov = { NULL, 0 };	/* an empty slot: the old one is unpinned */
	__u64 tag = 0;

	if (!l->buffers || idx < 0 || (unsigned)idx >= LOOP_BUFFERS ||
	    !(l->buffers_used >> idx & 1))
		return;
	(void)io_uring_register_buffers_update_tag(&l->ring, (unsigned)idx, &iov, &tag, 1);
	l->buffers_used &= ~(1ull << idx);
}

int loop_cancel(struct loop *l, struct loop_op *op, struct loop_op *target)
{
	struct io_uring_sqe *sqe;

	if (l->sync)
		return sync_cancel(l, op, target);
	sqe = get_sqe(l, op);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_cancel(sqe, target, 0);
	return 0;
}

/* reap() - hand every completion in the ring to its owner; how many. */
static unsigned reap(struct loop *l)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(&l->ring, head, cqe) {
		struct loop_op *op = io_uring_cqe_get_data(cqe);

		seen++;
		l->inflight--;
		op->done(op, cqe->res);
	}
	io_uring_cq_advance(&l->ring, seen);
	return seen;
}

int loop_run(struct loop *l)
{
	int rc;

	while (!l->stopping && !(l->draining && l->inflight == 0)) {
		if (l->sync) {
			rc = sync_turn(l, -1);
			if (rc < 0 && rc != -EINTR)
				return rc;
		} else {
			rc = io_uring_submit_and_wait(&l->ring, 1);
			if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
				return rc;
			reap(l);
		}
		loop_work_turn(l);
		if (l->turn_fn)
			l->turn_fn(l->turn_arg);
	}
	return 0;
}

void loop_on_turn(struct loop *l, void (*fn)(void *arg), void *arg)
{
	l->turn_fn = fn;
	l->turn_arg = arg;
}

int loop_turn(struct loop *l, unsigned ms)
{
	struct __kernel_timespec ts = { .tv_sec = ms / 1000,
					.tv_nsec = (long long)(ms % 1000) * 1000000 };
	struct io_uring_cqe *cqe;
	int rc;

	if (l->sync) {
		rc = sync_turn(l, (int)ms);
	} else {
		rc = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
		if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
			return rc;
		rc = (int)reap(l);
	}
	loop_work_turn(l);
	if (l->turn_fn)
		l->turn_fn(l->turn_arg);
	return rc;
}

void loop_stop(struct loop *l)
{
	l->stopping = true;
}

void loop_drain(struct loop *l)
{
	l->draining = true;
}
