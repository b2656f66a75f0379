/* SPDX-License-Identifier: MIT */
/*
 * rpage.h - the remote tier's value format: one Redis value per page, a
 * fixed header and the page's bytes, so that the server's eviction drops
 * a page whole, and a value is only ever served to a pool of the same
 * namespace identity, for the key it was stored under, with its bytes
 * intact. No I/O; docs/remote.md describes the format.
 */
#ifndef KVP_RPAGE_H
#define KVP_RPAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"
#include "daemon/spill.h"

#define RPAGE_FORMAT	1u	/* value format version */
#define RPAGE_HDR	128u	/* bytes of the header before the page */
#define RPAGE_ID_BYTES	32u	/* namespace identity digest */
/* Redis key: "kvp1:" 16 hex digits of the identity ':' 64 of the key. */
#define RPAGE_KEY_LEN	(5u + 16u + 1u + 2u * KVP_KEY_BYTES)

/*
 * rpage_ns_id() - the identity digest of a namespace: SHA-256 of its
 * model, geometry, page size, key scheme and key root (which holds the
 * salt), not of its name, so pools of the same model and salt on other
 * machines share whatever they call the namespace.
 */
void rpage_ns_id(const struct spill_ns *ns, uint8_t id[RPAGE_ID_BYTES]);

/* rpage_key() - the Redis key of block key in namespace id, in out
 * (RPAGE_KEY_LEN bytes, no NUL). */
void rpage_key(const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
	       char out[RPAGE_KEY_LEN]);

/* rpage_pack() - write the header of the page data (bytes long, already
 * at out + RPAGE_HDR) stored under key in namespace id into out. */
void rpage_pack(void *out, const uint8_t id[RPAGE_ID_BYTES],
		const uint8_t key[KVP_KEY_BYTES], uint64_t bytes);

/*
 * rpage_check() - val (len bytes, as GET returned it) is a page of bytes
 * stored under key in namespace id, whole and unchanged: then its data
 * is at val + RPAGE_HDR. Returns 0, -EBADMSG (not a value of this
 * format: magic, version, header checksum, length), -ESTALE (a valid
 * value of another namespace or key: a hash collision of the key or a
 * mix-up, never served) or -EILSEQ (the data's checksum does not match).
 */
int rpage_check(const void *val, size_t len, const uint8_t id[RPAGE_ID_BYTES],
		const uint8_t key[KVP_KEY_BYTES], uint64_t bytes);

/* rpage_check_split() - the same for a value whose header (RPAGE_HDR
 * bytes) and data (bytes) are apart; len is the value's whole length. */
int rpage_check_split(const void *hdr, size_t len, const void *data,
		      const uint8_t id[RPAGE_ID_BYTES], const uint8_t key[KVP_KEY_BYTES],
		      uint64_t bytes);

#endif /* KVP_RPAGE_H */
