/* SPDX-License-Identifier: MIT */
/*
 * rcluster.c - Redis Cluster routing: URLs, key slots, the slot map and
 * redirects (see rcluster.h). Pure functions over memory; no I/O.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/remote/rcluster.h"

#define DEFAULT_PORT 6379u

/* parse_port() - digits of s[0..len) as a port 1..65535; -1 if not one. */
static int parse_port(const char *s, size_t len)
{
	unsigned long v = 0;
	size_t i;

	if (!len || len > 5)
		return -1;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	return v >= 1 && v <= 65535 ? (int)v : -1;
}

/* host_ok() - a host name or address we will pass to connect: no spaces,
 * no separators of the URL. */
static bool host_ok(const char *h, size_t len)
{
	size_t i;

	if (!len || len >= RC_HOST_MAX)
		return false;
	for (i = 0; i < len; i++)
		if ((unsigned char)h[i] <= ' ' || strchr("/@,?#[]{}", h[i]))
			return false;
	return true;
}

/* parse_hostport() - "HOST[:PORT]" or "[V6ADDR][:PORT]" of s[0..len). */
static int parse_hostport(const char *s, size_t len, struct rc_addr *a, char *err,
			  size_t errlen)
{
	const char *host = s, *colon = NULL;
	size_t hlen = len;
	int port = DEFAULT_PORT;

	if (len && s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (!close)
			goto bad;
		host = s + 1;
		hlen = (size_t)(close - host);
		if (close + 1 < s + len) {
			if (close[1] != ':')
				goto bad;
			colon = close + 1;
		}
		if (!hlen || hlen >= RC_HOST_MAX || !memchr(host, ':', hlen))
			goto bad;
	} else {
		colon = memchr(s, ':', len);
		if (colon)
			hlen = (size_t)(colon - s);
		if (!host_ok(host, hlen))
			goto bad;
	}
	if (colon) {
		port = parse_port(colon + 1, (size_t)(s + len - colon - 1));
		if (port < 0) {
			snprintf(err, errlen, "bad port in '%.*s': give 1..65535",
				 (int)len, s);
			return -EINVAL;
		}
	}
	memcpy(a->host, host, hlen);
	a->host[hlen] = '\0';
	a->port = (uint16_t)port;
	return 0;
bad:
	snprintf(err, errlen, "bad host in '%.*s': give HOST:PORT or [IPV6]:PORT",
		 (int)len, s);
	return -EINVAL;
}

/* parse_userinfo() - "[USER]:PASSWORD" or "PASSWORD" before the '@'. */
static int parse_userinfo(const char *s, size_t len, struct rc_url *u, char *err,
			  size_t errlen)
{
	const char *colon = memchr(s, ':', len);
	const char *pw = colon ? colon + 1 : s;
	size_t ulen = colon ? (size_t)(colon - s) : 0;
	size_t plen = (size_t)(s + len - pw);

	if (ulen >= sizeof(u->user) || plen >= sizeof(u->password)) {
		snprintf(err, errlen, "the user or password before '@' is too long "
			 "(at most %zu and %zu bytes)", sizeof(u->user) - 1,
			 sizeof(u->password) - 1);
		return -EINVAL;
	}
	memcpy(u->user, s, ulen);
	u->user[ulen] = '\0';
	memcpy(u->password, pw, plen);
	u->password[plen] = '\0';
	return 0;
}

int rc_url_parse(const char *s, struct rc_url *u, char *err, size_t errlen)
{
	static const char cl[] = "redis-cluster://", one[] = "redis://";
	const char *p, *end, *at, *slash;
	int rc;

	memset(u, 0, sizeof(*u));
	if (!strncmp(s, cl, sizeof(cl) - 1)) {
		u->cluster = true;
		p = s + sizeof(cl) - 1;
	} else if (!strncmp(s, one, sizeof(one) - 1)) {
		p = s + sizeof(one) - 1;
	} else {
		snprintf(err, errlen, "remote URL '%s': give redis-cluster://HOST:PORT[,HOST:PORT...] "
			 "or redis://HOST:PORT (rediss:// and TLS are not available: "
			 "see docs/remote.md)", s);
		return -EINVAL;
	}
	end = p + strlen(p);
	slash = memchr(p, '/', (size_t)(end - p));
	if (slash)
		end = slash;
	at = NULL;
	for (const char *q = p; q < end; q++)	/* the last '@': passwords may hold one */
		if (*q == '@')
			at = q;
	if (at) {
		rc = parse_userinfo(p, (size_t)(at - p), u, err, errlen);
		if (rc < 0)
			return rc;
		p = at + 1;
	}
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *stop = comma ? comma : end;

		if (u->nseeds == RC_SEEDS_MAX) {
			snprintf(err, errlen, "remote URL '%s': more than %u HOST:PORT entries",
				 s, RC_SEEDS_MAX);
			return -EINVAL;
		}
		rc = parse_hostport(p, (size_t)(stop - p), &u->seeds[u->nseeds], err, errlen);
		if (rc < 0)
			return rc;
		u->nseeds++;
		p = comma ? comma + 1 : end;
		if (comma && p == end) {
			snprintf(err, errlen, "remote URL '%s' ends in ','", s);
			return -EINVAL;
		}
	}
	if (!u->nseeds) {
		snprintf(err, errlen, "remote URL '%s' names no HOST:PORT", s);
		return -EINVAL;
	}
	if (!u->cluster && u->nseeds > 1) {
		snprintf(err, errlen, "remote URL '%s': redis:// takes one server; "
			 "a cluster is redis-cluster://HOST:PORT,HOST:PORT...", s);
		return -EINVAL;
	}
	if (slash && slash[1]) {
		char *e;
		unsigned long db = strtoul(slash + 1, &e, 10);

		if (u->cluster || *e || db > 1000000) {
			snprintf(err, errlen, "remote URL '%s': '%s' %s", s, slash,
				 u->cluster ? "is not allowed: a cluster has only database 0"
					    : "is not a database number");
			return -EINVAL;
		}
		u->db = (unsigned)db;
	}
	return 0;
}

/* crc_table() - CRC16 of each byte value, made on first use: a byte at a
 * time rather than a bit, for a slot per request. */
static const uint16_t *crc_table(void)
{
	static uint16_t t[256];
	static bool made;
	unsigned i, k;
	uint16_t c;

	if (made)
		return t;
	for (i = 0; i < 256; i++) {
		c = (uint16_t)(i << 8);
		for (k = 0; k < 8; k++)
			c = (uint16_t)(c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1);
		t[i] = c;
	}
	made = true;
	return t;
}

uint16_t rc_crc16(const void *buf, size_t len)
{
	const uint16_t *t = crc_table();
	const uint8_t *b = buf;
	uint16_t crc = 0;
	size_t i;

	for (i = 0; i < len; i++)
		crc = (uint16_t)((crc << 8) ^ t[((crc >> 8) ^ b[i]) & 0xff]);
	return crc;
}

uint16_t rc_slot(const void *key, size_t len)
{
	const char *k = key, *open = memchr(k, '{', len), *close;

	if (open) {
		size_t rest = len - (size_t)(open - k) - 1;

		close = memchr(open + 1, '}', rest);
		if (close && close > open + 1)
			return rc_crc16(open + 1, (size_t)(close - open - 1)) % RC_SLOTS;
	}
	return rc_crc16(k, len) % RC_SLOTS;
}

void rc_map_init(struct rc_map *m)
{
	memset(m, 0, sizeof(*m));
	memset(m->owner, 0xff, sizeof(m->owner));
}

void rc_map_fini(struct rc_map *m)
{
	free(m->nodes);
	rc_map_init(m);
}

bool rc_numeric(const char *host)
{
	struct in6_addr a;

	return inet_pton(AF_INET, host, &a) == 1 || inet_pton(AF_INET6, host, &a) == 1;
}

int rc_map_find(const struct rc_map *m, const char *host, uint16_t port)
{
	unsigned i;

	for (i = 0; i < m->nnodes; i++)
		if (m->nodes[i].port == port && !strcmp(m->nodes[i].host, host))
			return (int)i;
	return -1;
}

int rc_map_node(struct rc_map *m, const char *host, uint16_t port)
{
	struct rc_addr *n;
	int i = rc_map_find(m, host, port);

	if (i >= 0)
		return i;
	if (m->nnodes == RC_NODES_MAX)
		return -ENOSPC;
	if (strlen(host) >= RC_HOST_MAX)
		return -EINVAL;
	if (m->nnodes == m->cap) {
		unsigned cap = m->cap ? m->cap * 2 : 8;

		n = realloc(m->nodes, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		m->nodes = n;
		m->cap = cap;
	}
	n = &m->nodes[m->nnodes];
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	return (int)m->nnodes++;
}

/* slots_entry() - check one entry of a CLUSTER SLOTS reply: [start, end,
 * [host, port, ...], ...]. Returns 0 and the range and master, or -EPROTO. */
static int slots_entry(const redisReply *e, unsigned *start, unsigned *stop,
		       const redisReply **master)
{
	const redisReply *h;

	if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
	    e->element[0]->type != REDIS_REPLY_INTEGER ||
	    e->element[1]->type != REDIS_REPLY_INTEGER)
		return -EPROTO;
	if (e->element[0]->integer < 0 || e->element[1]->integer >= RC_SLOTS ||
	    e->element[0]->integer > e->element[1]->integer)
		return -EPROTO;
	h = e->element[2];
	if (h->type != REDIS_REPLY_ARRAY || h->elements < 2 ||
	    h->element[0]->type != REDIS_REPLY_STRING ||
	    h->element[1]->type != REDIS_REPLY_INTEGER ||
	    h->element[1]->integer < 1 || h->element[1]->integer > 65535)
		return -EPROTO;
	*start = (unsigned)e->element[0]->integer;
	*stop = (unsigned)e->element[1]->integer;
	*master = h;
	return 0;
}

int rc_map_load(struct rc_map *m, const redisReply *r, const struct rc_addr *from,
		char *err, size_t errlen)
{
	uint8_t seen[RC_SLOTS / 8] = { 0 };
	uint16_t *owner;
	unsigned i, s, start, stop, covered = 0, named = 0;
	const redisReply *h;
	const char *host;
	int node, rc = 0;

	if (r->type == REDIS_REPLY_ERROR) {
		snprintf(err, errlen, "CLUSTER SLOTS failed: %.*s", (int)r->len, r->str);
		return -EPROTO;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		snprintf(err, errlen, "CLUSTER SLOTS answered a reply of type %d, not an array",
			 r->type);
		return -EPROTO;
	}
	if (r->elements > RC_SLOTS) {	/* each entry holds one slot at least */
		snprintf(err, errlen, "CLUSTER SLOTS has %zu entries, more than the %u "
			 "slots of a cluster: not a cluster's map", r->elements, RC_SLOTS);
		return -EPROTO;
	}
	owner = malloc(sizeof(m->owner));
	if (!owner)
		return -ENOMEM;
	memset(owner, 0xff, sizeof(m->owner));
	/* one pass: each slot is looked at once, since ranges may not overlap */
	for (i = 0; i < r->elements; i++) {
		if (slots_entry(r->element[i], &start, &stop, &h) < 0) {
			snprintf(err, errlen, "CLUSTER SLOTS entry %u is not "
				 "[start, end, [host, port, ...], ...]", i);
			rc = -EPROTO;
			goto out;
		}
		for (s = start; s <= stop; s++) {
			if (seen[s / 8] & (1u << (s % 8))) {
				snprintf(err, errlen, "CLUSTER SLOTS entry %u (slots %u-%u) "
					 "overlaps another at slot %u: not a cluster's map",
					 i, start, stop, s);
				rc = -EPROTO;
				goto out;
			}
			seen[s / 8] |= (uint8_t)(1u << (s % 8));
		}
		host = h->element[0]->str[0] ? h->element[0]->str : from->host;
		if (!strcmp(host, "?"))
			continue;	/* its endpoint is unknown: no owner */
		if (!rc_numeric(host)) {	/* never resolved on the loop */
			if (!named++)
				snprintf(m->named, sizeof(m->named), "%.*s", (int)sizeof(m->named) - 1,
					 host);
			continue;
		}
		node = rc_map_node(m, host, (uint16_t)h->element[1]->integer);
		if (node < 0) {
			snprintf(err, errlen, "CLUSTER SLOTS entry %u: cannot add node '%s': %s",
				 i, host, strerror(-node));
			rc = node == -ENOMEM ? -ENOMEM : -EPROTO;
			goto out;
		}
		for (s = start; s <= stop; s++)
			owner[s] = (uint16_t)node;
		covered += stop - start + 1;
	}
	memcpy(m->owner, owner, sizeof(m->owner));
	m->covered = covered;
	m->nnamed = named;
out:
	free(owner);
	return rc;
}

int rc_map_single(struct rc_map *m, const char *host, uint16_t port)
{
	int node = rc_map_node(m, host, port);
	unsigned s;

	if (node < 0)
		return node;
	for (s = 0; s < RC_SLOTS; s++)
		m->owner[s] = (uint16_t)node;
	m->covered = RC_SLOTS;
	return 0;
}

enum rc_redirect rc_redirect_parse(const char *s, size_t len, const struct rc_addr *from,
				   uint16_t *slot, struct rc_addr *to)
{
	enum rc_redirect kind;
	const char *p, *end = s + len, *sp, *colon = NULL, *q;
	unsigned long v = 0;
	int port;

	if (len > 6 && !memcmp(s, "MOVED ", 6)) {
		kind = RC_MOVED;
		p = s + 6;
	} else if (len > 4 && !memcmp(s, "ASK ", 4)) {
		kind = RC_ASK;
		p = s + 4;
	} else {
		return RC_NO_REDIRECT;
	}
	sp = memchr(p, ' ', (size_t)(end - p));
	if (!sp || sp == p || sp - p > 5)
		return RC_NO_REDIRECT;
	for (q = p; q < sp; q++) {
		if (*q < '0' || *q > '9')
			return RC_NO_REDIRECT;
		v = v * 10 + (unsigned long)(*q - '0');
	}
	if (v >= RC_SLOTS)
		return RC_NO_REDIRECT;
	for (q = sp + 1; q < end; q++)	/* the last ':': IPv6 hosts have many */
		if (*q == ':')
			colon = q;
	if (!colon)
		return RC_NO_REDIRECT;
	port = parse_port(colon + 1, (size_t)(end - colon - 1));
	if (port < 0 || (size_t)(colon - sp - 1) >= RC_HOST_MAX)
		return RC_NO_REDIRECT;
	if (colon == sp + 1) {
		snprintf(to->host, sizeof(to->host), "%s", from->host);
	} else {
		memcpy(to->host, sp + 1, (size_t)(colon - sp - 1));
		to->host[colon - sp - 1] = '\0';
	}
	to->port = (uint16_t)port;
	*slot = (uint16_t)v;
	return kind;
}
