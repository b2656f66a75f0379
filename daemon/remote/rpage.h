/* SPDX-License-Identifier: MIT */
/*
 * rpage.h - the remote tier's names: one Redis value per page (so that
 * the server's eviction drops a page whole), under a key made of the
 * namespace's identity and the block's key. What a value holds, and how
 * it is sealed, is rvalue.h's. No I/O; docs/remote.md describes both.
 */
#ifndef KVP_RPAGE_H
#define KVP_RPAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"
#include "daemon/tiers/spill.h"

#define RPAGE_HDR	128u	/* bytes of a value's header before the page */
#define RPAGE_ID_BYTES	32u	/* namespace identity digest */
/* Redis key: "kvp1:" 16 hex digits of the identity ':' 64 of the key. */
#define RPAGE_KEY_LEN	(5u + 16u + 1u + 2u * KVP_KEY_BYTES)

/*
 * rpage_ns_id() - the identity digest of a namespace: SHA-256 of the name
 * it shares under (ns->name: its own, or its --remote-share rule's), its
 * model, geometry, page size, key scheme and key root (which holds the
 * salt). Namespaces of one name (or share) on machines with the same key
 * find each other's pages; two namespaces of other names never do, even
 * of the same model, so a tenant's writers cannot write what another
 * namespace reads.
 */
void rpage_ns_id(const struct spill_ns *ns, uint8_t id[RPAGE_ID_BYTES]);

/* rpage_key() - the Redis key of block key in namespace id, in out
 * (RPAGE_KEY_LEN bytes, no NUL). */
void rpage_key(const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
	       char out[RPAGE_KEY_LEN]);

#endif /* KVP_RPAGE_H */
