/* SPDX-License-Identifier: MIT */
/*
 * rtier.h - the remote tier in the daemon: in the tier walk (tier.h) it is
 * tier_remote_ops, a copy tier that gets every full block leaving the
 * pool (with --remote-write through, also each one published), and here
 * is how an ACQUIRE that misses locally gets the rest of its chain back
 * (one GET per block, pipelined per node, into fresh pool pages; the
 * blocks that came back in order are indexed, and the request is served
 * again from the start, now from the pool). remote.c does the talking.
 */
#ifndef KVP_RTIER_H
#define KVP_RTIER_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool_wire.h"

struct conn;
struct ns;

/* rtier_ns_gone() - n is being freed: SETs still in flight forget it. */
void rtier_ns_gone(struct ns *n);

/* rtier_published() - with --remote-write through: the full block e was
 * published into page. */
void rtier_published(struct ns *n, uint32_t e, const void *page);

/*
 * rtier_fetch() - c's ACQUIRE req (a, with a->nkeys keys) found
 * keys[0..from) locally and not keys[from]: fetch keys[from..nkeys) from
 * the remote tier when it is up, not tried for this request yet, and
 * faster than recomputing them (at a's prefill rate, else the daemon's)
 * and than a's cut-off. True when the request now waits for the fetch
 * (it is served again when the fetch ends); false to serve it with what
 * the pool has.
 */
bool rtier_fetch(struct conn *c, const struct kvp_wire_hdr *req,
		 const struct kvp_wire_acquire *a, const uint8_t *keys, uint32_t from);

#endif /* KVP_RTIER_H */
