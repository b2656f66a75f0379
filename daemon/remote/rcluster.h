/* SPDX-License-Identifier: MIT */
/*
 * rcluster.h - Redis Cluster routing: which node serves a key.
 *
 * The part of a cluster client that no Debian package provides: the
 * --remote URL, key slots (CRC16 with hash tags), the slot map built
 * from a CLUSTER SLOTS reply, and MOVED / ASK redirects. No I/O: the
 * remote tier (remote.c) does the talking through hiredis and asks this
 * module where each request goes, so all of it is unit-tested alone.
 */
#ifndef KVP_RCLUSTER_H
#define KVP_RCLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis.h>

#define RC_SLOTS	16384u
#define RC_HOST_MAX	256u	/* bytes of a host name, with its NUL */
#define RC_SEEDS_MAX	16u	/* HOST:PORT entries of one URL */
#define RC_NODES_MAX	1024u	/* nodes of one slot map (Redis' own limit is ~1000) */
#define RC_NONE		0xffffu	/* slot map: no node serves this slot */

/* One server's address. */
struct rc_addr {
	char host[RC_HOST_MAX];
	uint16_t port;
};

/* A parsed --remote URL. */
struct rc_url {
	bool cluster;			/* redis-cluster://: else redis:// (one server) */
	unsigned nseeds;
	struct rc_addr seeds[RC_SEEDS_MAX];
	char user[128];			/* AUTH user (ACL); "" for the default user */
	char password[256];		/* "" for none */
	unsigned db;			/* redis:// only: SELECT db */
};

/*
 * rc_url_parse() - parse s, one of
 *   redis-cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]
 * (PORT defaults to 6379; an IPv6 HOST is written [ADDR]). The password
 * may also come from the environment (remote.c reads KVPOOL_REMOTE_PASSWORD).
 * Returns 0, or -EINVAL with err saying what is wrong, where.
 */
int rc_url_parse(const char *s, struct rc_url *u, char *err, size_t errlen);

/* rc_crc16() - CRC16-CCITT (XMODEM), the checksum of Redis Cluster's
 * key slots: polynomial 0x1021, initial value 0. */
uint16_t rc_crc16(const void *buf, size_t len);

/* rc_slot() - the slot of key: CRC16 of the key, or of its hash tag (the
 * bytes between the first '{' and the next '}', when not empty), mod
 * RC_SLOTS. */
uint16_t rc_slot(const void *key, size_t len);

/* Which node serves each slot. */
struct rc_map {
	uint16_t owner[RC_SLOTS];	/* node index, or RC_NONE */
	struct rc_addr *nodes;		/* [nnodes]: masters and replicas seen */
	unsigned nnodes, cap;
	unsigned covered;		/* slots that have an owner */
	unsigned nnamed;		/* entries of the last load given by host name */
	char named[64];			/* the first of those names, for the log */
};

/* rc_map_init() / rc_map_fini() - an empty map (no slot served); fini frees
 * its nodes and leaves it empty again. */
void rc_map_init(struct rc_map *m);
void rc_map_fini(struct rc_map *m);

/*
 * rc_map_node() - the index of host:port in m, added when new. Returns the
 * index, or -ENOMEM / -ENOSPC (RC_NODES_MAX nodes already).
 */
int rc_map_node(struct rc_map *m, const char *host, uint16_t port);

/* rc_map_find() - the index of host:port in m, or -1: never adds. */
int rc_map_find(const struct rc_map *m, const char *host, uint16_t port);

/* rc_numeric() - host is a numeric IPv4 or IPv6 address: connecting to it
 * asks no resolver. */
bool rc_numeric(const char *host);

/*
 * rc_map_load() - replace m's slot ownership by what the CLUSTER SLOTS
 * reply r says: each range [start, end] goes to its master (the first
 * node of the entry). A master given as "" is the node that answered,
 * from (the Redis 7 way of saying "the address you used"); one given as
 * "?" (unknown endpoint) leaves its slots without an owner, and so does
 * one given by host name (counted in m->nnamed): what a cluster names is
 * connected to without asking a resolver, which could stall the loop.
 * Nodes already in m keep their index. A reply a cluster cannot give
 * (more entries than slots, ranges that overlap) is refused before it
 * costs more than one look at each slot. Returns 0, or -EPROTO (r is not
 * a CLUSTER SLOTS reply: err says how; m's slots are unchanged, though
 * nodes may have been added) or -ENOMEM.
 */
int rc_map_load(struct rc_map *m, const redisReply *r, const struct rc_addr *from,
		char *err, size_t errlen);

/* rc_map_single() - every slot to host:port: a server that is not a
 * cluster (redis://). Returns 0 or -ENOMEM. */
int rc_map_single(struct rc_map *m, const char *host, uint16_t port);

/* rc_map_owner() - the node that serves slot, or RC_NONE. */
static inline uint16_t rc_map_owner(const struct rc_map *m, uint16_t slot)
{
	return m->owner[slot % RC_SLOTS];
}

/* What an error reply says about where a key lives. */
enum rc_redirect {
	RC_NO_REDIRECT = 0,	/* another error, or not an error */
	RC_MOVED,		/* the slot lives at to now: update the map, resend */
	RC_ASK,			/* send this one request to to, after ASKING */
};

/*
 * rc_redirect_parse() - read "MOVED <slot> <host>:<port>" or "ASK <slot>
 * <host>:<port>" (host may be empty: the node that answered, from; IPv6
 * hosts contain colons: the port follows the last one) into *slot and
 * *to. Anything else is RC_NO_REDIRECT.
 */
enum rc_redirect rc_redirect_parse(const char *s, size_t len, const struct rc_addr *from,
				   uint16_t *slot, struct rc_addr *to);

#endif /* KVP_RCLUSTER_H */
