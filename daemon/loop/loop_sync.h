/* SPDX-License-Identifier: MIT */
/*
 * loop_sync.h - the loop without io_uring (loop.c's fallback): the same
 * operations, made with epoll and non-blocking system calls on the
 * loop's thread, and file reads and writes on a small thread pool. Only
 * loop.c includes this.
 */
#ifndef KVP_LOOP_SYNC_H
#define KVP_LOOP_SYNC_H

#include "daemon/loop/loop.h"

#define LOOP_SYNC_THREADS 4	/* file I/O threads */

int sync_init(struct loop *l, char *err, size_t errlen);
void sync_fini(struct loop *l);
int sync_accept(struct loop *l, struct loop_op *op, int fd);
int sync_recvmsg(struct loop *l, struct loop_op *op, int fd, struct msghdr *msg,
		 unsigned flags);
int sync_sendmsg(struct loop *l, struct loop_op *op, int fd, const struct msghdr *msg,
		 unsigned flags);
int sync_read(struct loop *l, struct loop_op *op, int fd, void *buf, unsigned len);
int sync_file(struct loop *l, struct loop_op *op, int fd, void *buf, unsigned len,
	      uint64_t off, bool write);
int sync_poll(struct loop *l, struct loop_op *op, int fd, unsigned events);
int sync_timeout(struct loop *l, struct loop_op *op, uint64_t ms);
int sync_cancel(struct loop *l, struct loop_op *op, struct loop_op *target);
/* sync_turn() - wait up to ms (-1: until something happens) and complete
 * what is ready; returns how many completed, or -errno. */
int sync_turn(struct loop *l, int ms);

#endif /* KVP_LOOP_SYNC_H */
