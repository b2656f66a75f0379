/* SPDX-License-Identifier: MIT */
/*
 * tier_remote.h - the remote tier in the daemon: in the tier walk (tier.h) it is
 * tier_remote_ops, a copy tier that gets every full block leaving the
 * pool (with --remote-write through, also each one published), and here
 * is how an ACQUIRE that misses locally gets the rest of its chain back
 * (one GET per block, pipelined per node, into fresh pool pages; the
 * blocks that came back in order are indexed, and the request is served
 * again from the start, now from the pool). remote.c does the talking.
 */
#ifndef KVP_TIER_REMOTE_H
#define KVP_TIER_REMOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool_wire.h"

struct ns;

/* tier_remote_published() - with --remote-write through: the full block e was
 * published into page. */
void tier_remote_published(struct ns *n, uint32_t e, const void *page);

/*
 * tier_remote_fetch() - an ACQUIRE of n (a, with a->nkeys keys) found
 * keys[0..from) locally and not keys[from]: fetch keys[from..nkeys) from
 * the remote tier when it is up and that is faster than recomputing them
 * (at a's prefill rate, else the daemon's) and than a's cut-off. True
 * when the fetch went out: done(arg) is called from the loop once what
 * came back is indexed (never before this returns); false to serve the
 * request with what the pool has.
 */
bool tier_remote_fetch(struct ns *n, const struct kvp_wire_acquire *a, const uint8_t *keys,
		       uint32_t from, void (*done)(void *arg), void *arg);

#endif /* KVP_TIER_REMOTE_H */
