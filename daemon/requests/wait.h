/* SPDX-License-Identifier: MIT */
/*
 * wait.h - requests that wait, and their resumption: a request that
 * cannot be served now (its namespace is being made or dropped, the NVMe
 * tier has no staging buffer free or --spill-rate says later, the remote
 * tier is fetching its blocks) is held here with its connection and served
 * again from the start, through the dispatcher (srv->dispatch), when what
 * it waits for says so. The handlers (requests.c, share.c, admin.c) queue
 * their requests here; ns.c and the tiers wake them through the hooks
 * they were given (ns_config.wake, tier_room_hook, the fetch's
 * continuation), never by calling the dispatcher.
 */
#ifndef KVP_WAIT_H
#define KVP_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool_wire.h"
#include "daemon/serve/conn.h"

/* wait_wake() - ns_config.wake: what waits on n goes on. When n is
 * ready, each request is served again from the start, but a HELLO is
 * refused (STATE) when a DROP_NS of n waits too. When n is gone (dropped,
 * or its tier could not be made), a DROP_NS is answered OK (the namespace
 * is no more; unless a HELLO ahead of it made it anew: then it runs again
 * and drops that one), a HELLO gets status and msg when status < 0, else
 * runs again (and may make the namespace anew). */
void wait_wake(struct ns *n, int status, const char *msg);

/* wait_retry() - staging buffers of n's tier came free: serve the
 * requests that waited for them (as tier_room_hook). */
void wait_retry(struct ns *n);

/* wait_defer() - queue c's request req on its namespace: it runs again
 * from the start when a tier write ends or the --spill-rate timer fires.
 * Only for a wait that one of those is sure to end. */
void wait_defer(struct conn *c, const struct kvp_wire_hdr *req);

/* wait_defer_on() - the same on namespace ns, which need not be c's
 * (a DROP_NS waits on the namespace it drops). */
void wait_defer_on(struct conn *c, const struct kvp_wire_hdr *req, struct ns *ns);

/* wait_drop_ahead() - a DROP_NS of n waits for its clients to go:
 * n takes no new client meanwhile. */
bool wait_drop_ahead(const struct ns *n);

/* wait_tier() - back-pressure of the NVMe tier: true when c's
 * request was queued to be served again once the tier can take the
 * evictions that n pages need. */
bool wait_tier(struct conn *c, const struct kvp_wire_hdr *req, uint32_t n);

/* wait_tier_room() - the tiers of ns cannot take evictions now (a
 * write in flight, --spill-rate): queue c's request on ns until they can,
 * true; false when nothing would wake it. */
bool wait_tier_room(struct conn *c, const struct kvp_wire_hdr *req, struct ns *ns);

/* wait_remote() - c's ACQUIRE req (a, with a->nkeys keys; a WAIT for
 * the handoff of key handoff, or NULL) found keys[0..from) locally and
 * not keys[from]: when the remote tier was not asked for this request yet
 * and fetching is worth it (tier_remote_fetch()), true: the request waits
 * and is served again once the blocks are back, and what another
 * machine abandoned of keys[from] and handoff is abandoned here too.
 * False: serve it with what the pool has. */
bool wait_remote(struct conn *c, const struct kvp_wire_hdr *req,
		 const struct kvp_wire_acquire *a, const uint8_t *keys, uint32_t from,
		 const uint8_t *handoff);

/* wait_keys() - c's ACQUIRE req (a) holds keys[0..hits) and not all
 * a->nkeys: with KVP_WIRE_ACQ_WAIT and before its deadline (a->wait_ms
 * from its first try), true: it waits, indexed by keys[hits], and is
 * served again from the start once a client has published every key it
 * lacked, at a poll (a remote namespace; a key held up in a tier), or at
 * its deadline (then it is answered with what is held). With handoff (the
 * key of the handoff it waits for, KVP_WIRE_ACQ_HANDOFF), it is answered
 * at once when that key is abandoned (wait_abandon()). It leases nothing
 * meanwhile, and a client that hangs up meanwhile is let go at once. True
 * too when c's uid has --max-waits-per-uid waits already: refused
 * (answered). False: serve it now. */
bool wait_keys(struct conn *c, const struct kvp_wire_hdr *req,
	       const struct kvp_wire_acquire *a, const uint8_t *keys, uint32_t hits,
	       const uint8_t *handoff);

/* wait_published() - key was published in n: the ACQUIREs that lack it
 * (as their first missing key) look past it, and are served again once
 * they lack none. O(1 + waits that lacked it). */
void wait_published(struct ns *n, struct server *s, const uint8_t *key);

/* wait_abandon() - key will not be published in n (HANDOFF ABANDON, or
 * the client issued the ticket of a handoff that ends with key hung up;
 * said to the remote tier too, tier_remote_abandoned()):
 * the ACQUIREs that lack it (as their first missing key) or wait for the
 * handoff it ends are answered now with what is held, and so are those
 * that come to in the next KVP_WIRE_ABANDON_MS (n remembers its last
 * GONE_SLOTS or so), until a client publishes it. O(1 + waits that lacked
 * it). 0, or -ENOMEM. */
int wait_abandon(struct ns *n, struct server *s, const uint8_t *key);

/* wait_unabandon() - key is abandoned in n no more: a client was issued a
 * ticket for a handoff that ends with it (a prefill engine computes the
 * prompt again, after the one that abandoned it); with a remote tier, on
 * the other machines too (one small SET a ticket). O(1). */
void wait_unabandon(struct ns *n, const uint8_t *key);

#endif /* KVP_WAIT_H */
