/* SPDX-License-Identifier: MIT */
/*
 * requests.h - the request handlers of kvpoold and the helpers they
 * share (requests.c, share.c, admin.c). Internal to the daemon. A
 * handler replies (or defers, setting c->deferred) exactly once.
 */
#ifndef KVP_REQUESTS_H
#define KVP_REQUESTS_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/serve/conn.h"

/* requests_need_ns() - true when c joined a namespace; else replies STATE. */
bool requests_need_ns(struct conn *c, const struct kvp_wire_hdr *req);

/* requests_room_for_leases() - true when c may take n more leases; else
 * replies LIMIT. */
bool requests_room_for_leases(struct conn *c, const struct kvp_wire_hdr *req, uint64_t n);

/* requests_held_list() - true when every handle of a list is a page of
 * c's namespace that c holds; else replies STALE naming the first. */
bool requests_held_list(struct conn *c, const struct kvp_wire_hdr *req,
			const void *handles, uint32_t n);

/* requests_defer() - queue c's request req on its namespace: it runs again
 * from the start when a tier write ends or the --spill-rate timer fires.
 * Only for a wait that one of those is sure to end. */
void requests_defer(struct conn *c, const struct kvp_wire_hdr *req);

/* requests_defer_on() - the same on namespace ns, which need not be c's
 * (a DROP_NS waits on the namespace it drops). */
void requests_defer_on(struct conn *c, const struct kvp_wire_hdr *req, struct ns *ns);

/* requests_drop_waits() - a DROP_NS of n waits for its clients to go:
 * n takes no new client meanwhile. */
bool requests_drop_waits(const struct ns *n);

/* requests_tier_wait() - back-pressure of the NVMe tier: true when c's
 * request was queued to be served again once the tier can take the
 * evictions that n pages need. */
bool requests_tier_wait(struct conn *c, const struct kvp_wire_hdr *req, uint32_t n);

/* requests_defer_tier() - the tiers of ns cannot take evictions now (a
 * write in flight, --spill-rate): queue c's request on ns until they can,
 * true; false when nothing would wake it. */
bool requests_defer_tier(struct conn *c, const struct kvp_wire_hdr *req, struct ns *ns);

/* requests_alloc_pages() - n leased PRIVATE pages into out; false when it
 * replied an error or deferred the request. */
bool requests_alloc_pages(struct conn *c, const struct kvp_wire_hdr *req, uint32_t n,
			  uint64_t *out);

/* share.c */
void share_acquire(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload);
void share_publish(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload);
void share_publish_partial(struct conn *c, const struct kvp_wire_hdr *req,
			   const uint8_t *payload);

/* admin.c */
void admin_list_clients(struct conn *c, const struct kvp_wire_hdr *req);
void admin_list_pages(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload);
void admin_list_prefixes(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload);
void admin_evict(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload);
void admin_disconnect(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload);
void admin_drop_ns(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload);

#endif /* KVP_REQUESTS_H */
