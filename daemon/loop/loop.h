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

struct loop_sync;
struct loop_workers;

struct loop {
	struct io_uring ring;
	unsigned inflight;	/* submitted, not yet completed */
	bool stopping;
	bool draining;		/* stop once nothing is in flight */
	bool buffers;		/* a sparse table of LOOP_BUFFERS is registered */
	uint64_t buffers_used;	/* bit i: fixed buffer i is taken */
	bool sync;		/* no ring: epoll and I/O threads (loop_sync.c) */
	struct loop_sync *s;
	struct loop_workers *w;	/* loop_work()'s threads, or NULL */
	void (*turn_fn)(void *arg);	/* after each turn's completions */
	void *turn_arg;
};

/* How the loop does its I/O. */
enum loop_io {
	LOOP_IO_AUTO = 0,	/* io_uring, else the fallback (logged);
				 * KVPOOL_IO=sync or =uring in the environment
				 * decides instead */
	LOOP_IO_URING = 1,	/* io_uring or fail */
	LOOP_IO_SYNC = 2,	/* the fallback: epoll, non-blocking calls,
				 * file I/O on a few threads */
};

/*
 * loop_init() - set up a ring of entries submission slots, or the
 * fallback when io is LOOP_IO_SYNC, or LOOP_IO_AUTO and the ring cannot
 * be had (seccomp, kernel.io_uring_disabled): then *note says so (else
 * NULL) for the caller to log once. Returns 0 or -errno; on failure err
 * (errlen bytes) says why and names the usual causes.
 */
int loop_init(struct loop *l, unsigned entries, enum loop_io io, const char **note,
	      char *err, size_t errlen);

/* loop_io_name() - "io_uring" or "epoll and I/O threads". */
const char *loop_io_name(const struct loop *l);

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

/*
 * loop_poll() - complete op once fd is ready for events (POLLIN, POLLOUT),
 * with the ready mask as its result (POLLERR and POLLHUP included: the
 * caller's next read or write on fd says what happened). One shot: poll
 * again for more. For libraries that do their own socket I/O (hiredis).
 */
int loop_poll(struct loop *l, struct loop_op *op, int fd, unsigned events);

/*
 * loop_pread() / loop_pwrite() - read or write len bytes at offset off of
 * fd (O_DIRECT files: buf, len and off aligned). buf_index >= 0 names the
 * registered buffer that holds buf (see loop_buffer_add()); -1 for none.
 * The result is the byte count, which may be short: the caller resubmits
 * the rest.
 */
int loop_pread(struct loop *l, struct loop_op *op, int fd, void *buf, unsigned len,
	       uint64_t off, int buf_index);
int loop_pwrite(struct loop *l, struct loop_op *op, int fd, const void *buf,
		unsigned len, uint64_t off, int buf_index);

/*
 * loop_buffer_add() - register [base, base + len) as a fixed buffer, so
 * that I/O on it skips pinning the pages each time (the kernel keeps them
 * pinned instead: they count in the daemon's VmPin). Returns its number
 * (< LOOP_BUFFERS), or -errno (no free number, the fallback loop, old
 * kernels): then use -1 as buf_index.
 */
#define LOOP_BUFFERS 64u
int loop_buffer_add(struct loop *l, void *base, size_t len);

/* loop_buffer_remove() - unregister fixed buffer idx (from
 * loop_buffer_add(); -1 is ignored), which unpins its pages, and free
 * its number. No I/O on it may be in flight. After loop_fini() there is
 * nothing to unregister. */
void loop_buffer_remove(struct loop *l, int idx);

/* loop_now_ms() - the monotonic clock in milliseconds (the timers' clock). */
uint64_t loop_now_ms(void);

/*
 * loop_timeout() - complete op after ms milliseconds (res -ETIME), or
 * earlier with -ECANCELED if cancelled. op must live until then.
 */
int loop_timeout(struct loop *l, struct loop_op *op, struct __kernel_timespec *ts,
		 uint64_t ms);

/* loop_cancel() - ask the kernel to cancel target, which then completes
 * with -ECANCELED (or its result, if it won the race). The cancel request
 * itself completes through op. */
int loop_cancel(struct loop *l, struct loop_op *op, struct loop_op *target);

/*
 * loop_work() - run fn(op) on a worker thread (one of up to LOOP_WORKERS,
 * loop_work.c), then complete op on the loop thread with fn's result:
 * for file-system calls that can take milliseconds (fallocate, unlink,
 * fsync, reading a whole file's headers), which must never stall the
 * loop. fn may touch only what op's owner set aside for it, and nothing
 * the loop thread reads or writes until op->done runs; it must not log.
 * Jobs are queued by whom they are for (who: a uid), each one's in order
 * of arrival; the queues are served in turn, and at most
 * LOOP_WORKERS_PER_WHO jobs of one who run at once, so that one user's
 * many jobs never keep another's waiting behind them. loop_fini() still
 * runs the jobs queued (a dropped namespace's unlink is not lost) but
 * completes none: what their fn made is for the owner to free. Returns
 * 0, or -ENOMEM or -EAGAIN (no thread could be started: the caller may
 * run fn itself).
 */
#define LOOP_WORKERS 4u
#define LOOP_WORKERS_PER_WHO 2u
typedef int (*loop_work_fn)(struct loop_op *op);
int loop_work(struct loop *l, struct loop_op *op, loop_work_fn fn, uint32_t who);

/* loop_work_turn() - for loop_run() and loop_turn(), after each turn: the
 * eventfd's poll is posted again if the ring could not take it before. */
void loop_work_turn(struct loop *l);

/* loop_work_fini() - for loop_fini(): run what is queued, join the
 * threads. */
void loop_work_fini(struct loop *l);

/*
 * loop_run() - submit and complete operations until loop_stop().
 * Returns 0, or -errno if waiting on the ring failed.
 */
int loop_run(struct loop *l);

/*
 * loop_turn() - submit what is queued and handle the completions that
 * arrive within ms milliseconds (at least one, unless the time runs
 * out). Returns how many were handled, or -errno. For harnesses that
 * drive the loop step by step (tests/fuzz); the daemon uses loop_run().
 */
int loop_turn(struct loop *l, unsigned ms);

/* loop_on_turn() - call fn(arg) after each turn's completions, before the
 * loop waits again (KV events close their batch there); NULL: none. */
void loop_on_turn(struct loop *l, void (*fn)(void *arg), void *arg);

/* loop_stop() - make loop_run() return after the current completions. */
void loop_stop(struct loop *l);

/* loop_drain() - make loop_run() return once every operation in flight
 * has completed (writes to disk finish before the daemon exits). */
void loop_drain(struct loop *l);

#endif /* KVP_LOOP_H */
