/* SPDX-License-Identifier: MIT */
/*
 * rloop.h - hiredis on the daemon's loop: the event hooks of one
 * redisAsyncContext (addRead, delRead, addWrite, delWrite, cleanup) as
 * one-shot loop_poll() operations, so that Redis connections are served
 * by the same thread and ring as everything else, and nothing blocks.
 */
#ifndef KVP_RLOOP_H
#define KVP_RLOOP_H

#include <async.h>

#include "daemon/loop/loop.h"

/*
 * rloop_attach() - drive ac from l. Returns 0, or -ENOMEM (ac is untouched:
 * free it). The adapter frees itself once hiredis cleans ac up (on
 * redisAsyncFree() or a disconnect) and its polls have completed.
 */
int rloop_attach(redisAsyncContext *ac, struct loop *l);

#endif /* KVP_RLOOP_H */
