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
 * tier_remote_abandoned() - block key will not be published in n (a
 * prefill engine's ABANDON, or its connection gone): said to the remote
 * tier too, so that the waits for it on other machines end. A sealed
 * value of 8 bytes (until when it holds, by the wall clock:
 * KVP_WIRE_ABANDON_MS on) under a name of its own (rpage_key() of the
 * SHA-256 of a domain and key), sent as a page is, never waited for.
 * abandoned false: it is abandoned no more (a prefill engine was issued a
 * ticket for it): the value says so (it holds until 0).
 */
void tier_remote_abandoned(struct ns *n, const uint8_t *key, bool abandoned);

/* what a fetch found abandoned on another machine: at most the first key
 * it lacked and its handoff's */
#define TIER_REMOTE_GONE_MAX	2u

/*
 * tier_remote_fetch() - an ACQUIRE of n (a, with a->nkeys keys) found
 * keys[0..from) locally and not keys[from]: fetch keys[from..nkeys) from
 * the remote tier when it is up and that is faster than recomputing them
 * (at a's prefill rate, else the daemon's) and than a's cut-off. A WAIT
 * also asks whether keys[from], and the key of the handoff it waits for
 * (handoff, or NULL), were abandoned on another machine
 * (tier_remote_abandoned()). True when the fetch went out: done(arg,
 * gone, ngone) is called from the loop once what came back is indexed
 * (never before this returns), with the keys found abandoned (ngone of
 * KVP_KEY_BYTES at gone, for the call alone); false to serve the request
 * with what the pool has.
 */
bool tier_remote_fetch(struct ns *n, const struct kvp_wire_acquire *a, const uint8_t *keys,
		       uint32_t from, const uint8_t *handoff,
		       void (*done)(void *arg, const uint8_t *gone, uint32_t ngone), void *arg);

#endif /* KVP_TIER_REMOTE_H */
