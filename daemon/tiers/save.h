/* SPDX-License-Identifier: MIT */
/*
 * save.h - save on stop: once every client is gone, the namespaces' hot
 * pages go to their NVMe tiers (save.c says how), and the caller hears
 * when it ended through the continuation it gave.
 */
#ifndef KVP_SAVE_H
#define KVP_SAVE_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/loop/loop.h"
#include "daemon/store/namespace.h"
#include "daemon/store/pool.h"

/* One stop's save; zeroed, it has not started. */
struct save {
	struct loop *loop;
	struct pool *pool;
	struct ns_table *nst;
	bool started;			/* save_start() was called */
	bool saving;			/* ... and it goes on */
	bool armed;			/* its time limit is armed */
	struct loop_op op;		/* the time limit */
	struct loop_op cancel_op;
	struct __kernel_timespec ts;
	uint64_t t0;
	void (*done)(void *arg);	/* it ended: the stop goes on */
	void *arg;
};

/*
 * save_start() - write each namespace's cached pool pages and host tier
 * pages to its NVMe tier, as many as the tier holds and seconds allow
 * (0: none), so that a warm restart finds the hot pages too. Logs what
 * was saved and what was not. True when it goes on: done(arg) is called
 * when it ends, and again when its time limit completes after that;
 * false when there is nothing to save. s, l, p and nst must outlive it.
 */
bool save_start(struct save *s, struct loop *l, struct pool *p, struct ns_table *nst,
		uint64_t seconds, void (*done)(void *arg), void *arg);

/* save_busy() - the save, or its time limit, is not over yet. */
static inline bool save_busy(const struct save *s)
{
	return s->saving || s->armed;
}

#endif /* KVP_SAVE_H */
