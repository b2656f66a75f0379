/* SPDX-License-Identifier: MIT */
/*
 * requests.h - the request handlers of kvpoold and the helpers they
 * share (requests.c, share.c, admin.c). Internal to the daemon. A
 * handler replies (or defers, setting c->deferred) exactly once.
 *
 * requests/ (docs/architecture.md): what each request does, the
 * namespace table, the access rules, and requests that wait (wait.h). It
 * replies through the connection object (serve/conn.h), never through
 * the server above it, and knows nothing of sockets.
 */
#ifndef KVP_REQUESTS_H
#define KVP_REQUESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/serve/conn.h"

/* requests_handle() - serve one well-formed request of conn c (the
 * server's dispatcher). */
void requests_handle(struct conn *c, const struct kvp_wire_hdr *req,
		     const uint8_t *payload);

/*
 * requests_stats() - a STATS reply's payload as the daemon would send it now
 * (struct kvp_wire_stats, then one kvp_wire_ns_stats per namespace), in a
 * buffer to free(), its length into *len; NULL when memory ran out. Counts
 * every page again (pool_audit): O(pages). For --metrics-listen.
 */
uint8_t *requests_stats(struct server *s, size_t *len);

/* requests_conn_gone() - drop every lease of c and leave its namespace. */
void requests_conn_gone(struct conn *c);

/* requests_need_ns() - true when c joined a namespace; else replies STATE. */
bool requests_need_ns(struct conn *c, const struct kvp_wire_hdr *req);

/* requests_room_for_leases() - true when c may take n more leases; else
 * replies LIMIT. */
bool requests_room_for_leases(struct conn *c, const struct kvp_wire_hdr *req, uint64_t n);

/* requests_held_list() - true when every handle of a list is a page of
 * c's namespace that c holds; else replies STALE naming the first. */
bool requests_held_list(struct conn *c, const struct kvp_wire_hdr *req,
			const void *handles, uint32_t n);

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

/* handoff.c - disaggregated prefill's handoffs (HANDOFF): the tickets a
 * prefill engine's connector is issued when it announces its saves and a
 * decode engine's checks before it waits for them, and the blocks a
 * prefill engine abandons (a save skipped or failed), which end the
 * waits for them at once (wait_abandon()). A ticket is a MAC
 * (HMAC-SHA256, cut to 16 bytes) of the namespace's name and model, the
 * last block's key, the block count and the expiry, under the server's
 * ticket key: a random one, or one made from --remote-key-file, so that
 * every daemon that shares a remote tier takes the others' tickets. The
 * issuing connection keeps its last tickets' keys (CONN_TICKETS): when it
 * hangs up before one is published (a prefill engine that died), that
 * key is abandoned, so the waits for its handoff end at once. */
#define HANDOFF_KEY_BYTES	32u
void handoff_handle(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload);
/* handoff_conn_gone() - c leaves its namespace: the last keys of the
 * handoffs it was issued tickets for that hold still and are not
 * published are abandoned (wait_abandon()). O(CONN_TICKETS). */
void handoff_conn_gone(struct conn *c);
/* handoff_key_from() - the server's ticket key from the bytes of
 * --remote-key-file (another domain than the sealing key's). */
void handoff_key_from(const void *file, size_t len, uint8_t out[HANDOFF_KEY_BYTES]);

#endif /* KVP_REQUESTS_H */
