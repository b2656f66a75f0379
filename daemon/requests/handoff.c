/* SPDX-License-Identifier: MIT */
/*
 * handoff.c - HANDOFF: tickets issued and checked, keys abandoned, and
 * the handoffs of a client that hangs up (see requests.h).
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/keys.h"
#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/loop/loop.h"
#include "daemon/requests/access.h"
#include "daemon/requests/requests.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/server.h"
#include "daemon/store/namespace.h"
#include "daemon/store/prefix.h"

/* how far ahead of this one another daemon's clock may run */
#define CLOCK_SKEW_MS	60000u
/* the tickets a connection remembers: its last, which a prefill engine's
 * handoffs in flight at once are far fewer than */
#define CONN_TICKETS	256u

/* a ticket a connection was issued: the handoff's last key, and until
 * when (monotonic) the ticket holds; 0: a free slot */
struct conn_ticket {
	uint64_t until_ms;
	uint8_t key[KVP_KEY_BYTES];
};

static uint64_t realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* hmac() - HMAC-SHA256 (RFC 2104) of the parts under key k. */
static void hmac(const uint8_t k[HANDOFF_KEY_BYTES], const void *const *part,
		 const size_t *len, unsigned nparts, uint8_t out[KEYS_SHA256_BYTES])
{
	uint8_t pad[64], inner[KEYS_SHA256_BYTES];
	struct keys_sha256 s;
	unsigned i;

	memset(pad, 0x36, sizeof(pad));
	for (i = 0; i < HANDOFF_KEY_BYTES; i++)
		pad[i] ^= k[i];
	keys_sha256_init(&s);
	keys_sha256_update(&s, pad, sizeof(pad));
	for (i = 0; i < nparts; i++)
		keys_sha256_update(&s, part[i], len[i]);
	keys_sha256_final(&s, inner);
	memset(pad, 0x5c, sizeof(pad));
	for (i = 0; i < HANDOFF_KEY_BYTES; i++)
		pad[i] ^= k[i];
	keys_sha256_init(&s);
	keys_sha256_update(&s, pad, sizeof(pad));
	keys_sha256_update(&s, inner, sizeof(inner));
	keys_sha256_final(&s, out);
	explicit_bzero(pad, sizeof(pad));
}

/* ticket_mac() - the MAC of a ticket of n for the blocks key ends. */
static void ticket_mac(const struct server *s, const struct ns *n, const uint8_t *key,
		       uint32_t blocks, uint64_t expires_ms, uint8_t mac[16])
{
	static const char domain[] = "kvpool handoff ticket 1";
	uint8_t tail[12], out[KEYS_SHA256_BYTES];
	uint32_t b = htole32(blocks);
	uint64_t e = htole64(expires_ms);
	const void *part[] = { domain, n->name, n->model, key, tail };
	size_t len[] = { sizeof(domain), strnlen(n->name, sizeof(n->name)) + 1,
			 strnlen(n->model, sizeof(n->model)) + 1, KVP_KEY_BYTES, sizeof(tail) };

	memcpy(tail, &b, sizeof(b));
	memcpy(tail + sizeof(b), &e, sizeof(e));
	hmac(s->ticket_key, part, len, 5, out);
	memcpy(mac, out, 16);
}

/* same() - a and b equal, in time that does not depend on where they
 * differ. */
static bool same(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint8_t d = 0;
	size_t i;

	for (i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

static bool zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

void handoff_key_from(const void *file, size_t len, uint8_t out[HANDOFF_KEY_BYTES])
{
	static const char domain[] = "kvpool handoff ticket key 1";
	struct keys_sha256 s;

	keys_sha256_init(&s);
	keys_sha256_update(&s, domain, sizeof(domain));
	keys_sha256_update(&s, file, len);
	keys_sha256_final(&s, out);
}

/* --- the request */

/* remember() - c was issued a ticket for the handoff ending with key,
 * holding until until_ms: in its slot for the key, else over the oldest.
 * O(CONN_TICKETS). */
static void remember(struct conn *c, const uint8_t *key, uint64_t until_ms)
{
	struct conn_ticket *t = NULL;
	uint32_t i;

	for (i = 0; i < CONN_TICKETS && !t; i++)
		if (c->tickets[i].until_ms && !memcmp(c->tickets[i].key, key, KVP_KEY_BYTES))
			t = &c->tickets[i];
	if (!t) {
		t = &c->tickets[c->ticket_next];
		c->ticket_next = (c->ticket_next + 1) % CONN_TICKETS;
		t->until_ms = 0;
		memcpy(t->key, key, KVP_KEY_BYTES);
	}
	if (until_ms > t->until_ms)
		t->until_ms = until_ms;
}

static void issue(struct conn *c, const struct kvp_wire_hdr *req, const struct kvp_wire_handoff *h)
{
	struct kvp_wire_ticket t;

	if (!h->blocks || !h->ttl_ms || h->ttl_ms > KVP_WIRE_WAIT_MAX_MS) {
		conn_error(c, req, KVP_S_INVAL, "HANDOFF ISSUE of %u blocks for %u ms: a "
			   "ticket is for 1 block or more and holds 1 to %u ms", h->blocks,
			   h->ttl_ms, KVP_WIRE_WAIT_MAX_MS);
		return;
	}
	if (!c->tickets && !(c->tickets = calloc(CONN_TICKETS, sizeof(*c->tickets)))) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for the tickets of client "
			   "%llu", (unsigned long long)c->id);
		return;
	}
	memset(&t, 0, sizeof(t));
	t.blocks = h->blocks;
	t.expires_ms = realtime_ms() + h->ttl_ms;
	ticket_mac(c->srv, c->ns, h->key, t.blocks, t.expires_ms, t.mac);
	/* remembered (once a key, over the oldest): should this client go
	 * before the handoff's last block is published, the waits for it
	 * end; and a key abandoned before (a prefill engine that died, whose
	 * prompt this one computes again) is abandoned no more */
	remember(c, h->key, loop_now_ms() + h->ttl_ms);
	wait_unabandon(c->ns, h->key);
	c->srv->n.tickets_issued++;
	conn_reply(c, req, KVP_S_OK, &t, sizeof(t), -1);
}

void handoff_conn_gone(struct conn *c)
{
	struct server *s = c->srv;
	struct ns *n = c->ns;
	uint64_t now = loop_now_ms();
	uint32_t i, orphaned = 0;

	if (!c->tickets)
		return;
	for (i = 0; i < CONN_TICKETS && !s->shutting_down; i++) {
		const struct conn_ticket *t = &c->tickets[i];

		if (t->until_ms <= now || prefix_find(n->idx, t->key) != PREFIX_NIL)
			continue;	/* expired (its waits ended), or published */
		if (wait_abandon(n, s, t->key) == 0)
			orphaned++;
	}
	free(c->tickets);
	c->tickets = NULL;
	if (!orphaned)
		return;
	s->n.handoffs_orphaned += orphaned;
	log_info("client %llu (%s, pid %d) hung up before it published the last block of "
		 "%u handoff%s in namespace '%s': the waits for them end (their decode "
		 "engines compute those requests)", (unsigned long long)c->id, c->name,
		 (int)c->cred.pid, orphaned, orphaned == 1 ? "" : "s", n->name);
}

static void check(struct conn *c, const struct kvp_wire_hdr *req, const struct kvp_wire_handoff *h)
{
	struct kvp_wire_handoff_left left = { 0 };
	const struct kvp_wire_ticket *t = &h->ticket;
	uint64_t now = realtime_ms();
	uint8_t mac[16];

	ticket_mac(c->srv, c->ns, h->key, t->blocks, t->expires_ms, mac);
	if (!same(mac, t->mac, sizeof(mac)) || t->reserved) {
		c->srv->n.tickets_refused++;
		conn_error(c, req, KVP_S_STALE, "HANDOFF CHECK: the ticket was not issued for "
			   "these %u blocks in namespace '%s' by this daemon, nor by one that "
			   "shares its --remote-key-file: forged, or for another prompt; "
			   "compute the request", t->blocks, c->ns->name);
		return;
	}
	if (t->expires_ms > now + KVP_WIRE_WAIT_MAX_MS + CLOCK_SKEW_MS) {
		c->srv->n.tickets_refused++;
		conn_error(c, req, KVP_S_STALE, "HANDOFF CHECK: the ticket expires %llu s from "
			   "now, past the longest a ticket holds (%u s): the issuing daemon's "
			   "clock is ahead of this one's; keep the machines' clocks in step",
			   (unsigned long long)((t->expires_ms - now) / 1000),
			   KVP_WIRE_WAIT_MAX_MS / 1000);
		return;
	}
	if (t->expires_ms <= now) {
		c->srv->n.tickets_refused++;
		conn_error(c, req, KVP_S_STALE, "HANDOFF CHECK: the ticket expired %llu ms "
			   "ago: compute the request (or give prefill engines a longer ttl)",
			   (unsigned long long)(now - t->expires_ms));
		return;
	}
	left.left_ms = t->expires_ms - now > KVP_WIRE_WAIT_MAX_MS ? KVP_WIRE_WAIT_MAX_MS :
		       (uint32_t)(t->expires_ms - now);
	conn_reply(c, req, KVP_S_OK, &left, sizeof(left), -1);
}

static void abandon(struct conn *c, const struct kvp_wire_hdr *req, const struct kvp_wire_handoff *h)
{
	if (wait_abandon(c->ns, c->srv, h->key) < 0) {
		conn_error(c, req, KVP_S_INTERNAL, "out of memory for the abandoned keys of "
			   "namespace '%s'", c->ns->name);
		return;
	}
	c->srv->n.keys_abandoned++;
	conn_reply(c, req, KVP_S_OK, NULL, 0, -1);
}

void handoff_handle(struct conn *c, const struct kvp_wire_hdr *req, const uint8_t *payload)
{
	struct kvp_wire_handoff h;
	unsigned need;

	if (wire_fixed_decode(payload, req->len, &h, sizeof(h)) < 0) {
		conn_fatal(c, req, KVP_S_PROTO, "HANDOFF payload is not 80 bytes");
		return;
	}
	if (!requests_need_ns(c, req))
		return;
	if (h.reserved || (h.what != KVP_HANDOFF_ISSUE && h.what != KVP_HANDOFF_CHECK &&
			   h.what != KVP_HANDOFF_ABANDON)) {
		conn_error(c, req, KVP_S_INVAL, "HANDOFF what %u (reserved %u): this daemon "
			   "knows ISSUE (%u), CHECK (%u) and ABANDON (%u); is the client newer "
			   "than kvpoold?", h.what, h.reserved, KVP_HANDOFF_ISSUE,
			   KVP_HANDOFF_CHECK, KVP_HANDOFF_ABANDON);
		return;
	}
	if ((h.what != KVP_HANDOFF_ISSUE && (h.blocks || h.ttl_ms)) ||
	    (h.what != KVP_HANDOFF_CHECK && !zero(&h.ticket, sizeof(h.ticket)))) {
		conn_error(c, req, KVP_S_INVAL, "HANDOFF what %u with blocks %u, ttl_ms %u "
			   "and a ticket: blocks and ttl_ms are ISSUE's, the ticket CHECK's "
			   "(else 0)", h.what, h.blocks, h.ttl_ms);
		return;
	}
	need = h.what == KVP_HANDOFF_CHECK ? ACCESS_READ : ACCESS_WRITE;
	if (!(c->rights & need)) {
		conn_error(c, req, KVP_S_PERM, "HANDOFF %s needs %s rights in namespace '%s'; "
			   "uid %u has %s there: ask the daemon's admin for an --access rule "
			   "(kvpoold(8), ACCESS)", h.what == KVP_HANDOFF_ISSUE ? "ISSUE" :
			   h.what == KVP_HANDOFF_CHECK ? "CHECK" : "ABANDON",
			   access_rights_str(need), c->ns->name, (unsigned)c->peer.uid,
			   access_rights_str(c->rights));
		return;
	}
	switch (h.what) {
	case KVP_HANDOFF_ISSUE:
		issue(c, req, &h);
		break;
	case KVP_HANDOFF_CHECK:
		check(c, req, &h);
		break;
	default:
		abandon(c, req, &h);
		break;
	}
}
