/* SPDX-License-Identifier: MIT */
/*
 * loop.h - kvpoold's event loop: one io_uring, one thread.
 *
 * The only module that calls io_uring. Every asynchronous operation is
 * described by a struct loop_op that its owner embeds in its own object
 * and must keep alive until op->done runs; done receives the operation's
 * result (>= 0, or -errno) exactly once, unless the loop is torn down
 * first (loop_fini() cancels what is left without calling done).
 */
#ifndef KVP_LOOP_H
#define KVP_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <liburing.h>

struct loop_op;
typedef void (*loop_done_fn)(struct loop_op *op, int res);

struct loop_op {
	loop_done_fn done;
};

struct loop {
	struct io_uring ring;
	unsigned inflight;	/* submitted, not yet completed */
	bool stopping;
};

/*
 * loop_init() - set up a ring of entries submission slots.
 * Returns 0 or -errno; on failure err (errlen bytes) says why and names
 * the usual causes (seccomp, kernel.io_uring_disabled, RLIMIT_MEMLOCK).
 */
int loop_init(struct loop *l, unsigned entries, char *err, size_t errlen);

/* loop_fini() - cancel whatever is in flight and free the ring. */
void loop_fini(struct loop *l);

/* Queue one operation; it is submitted on the next turn of the loop.
 * Each returns 0, or -EBUSY when the ring cannot take it. */
int loop_accept(struct loop *l, struct loop_op *op, int fd);
int loop_recvmsg(struct loop *l, struct loop_op *op, int fd,
		 struct msghdr *msg, unsigned flags);
int loop_sendmsg(struct loop *l, struct loop_op *op, int fd,
		 const struct msghdr *msg, unsigned flags);
int loop_read(struct loop *l, struct loop_op *op, int fd, void *buf,
	      unsigned len);

/* loop_cancel() - ask the kernel to cancel target, which then completes
 * with -ECANCELED (or its result, if it won the race). The cancel request
 * itself completes through op. */
int loop_cancel(struct loop *l, struct loop_op *op, struct loop_op *target);

/*
 * loop_run() - submit and complete operations until loop_stop().
 * Returns 0, or -errno if waiting on the ring failed.
 */
int loop_run(struct loop *l);

/* loop_stop() - make loop_run() return after the current completions. */
void loop_stop(struct loop *l);

#endif /* KVP_LOOP_H */
