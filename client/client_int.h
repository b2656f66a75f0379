/* SPDX-License-Identifier: MIT */
/*
 * client_int.h - what libkvpool's files share, and with no one else: the
 * client object and the functions one file offers another. client.c holds
 * the connection (HELLO, one request at a time, errors, connect and
 * close), pages.c the mapped slabs and the pages this client holds
 * (alloc, release, cow, retain, the view), share.c prefix sharing
 * (acquire, publish, the keys), admin.c STATS and the administration
 * requests. Each function's full comment is at its definition.
 */
#ifndef KVP_CLIENT_INT_H
#define KVP_CLIENT_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"
#include "kvpool_wire.h"
#include "client/hset.h"
#include "client/keys.h"

/* The thread's error text, shared with the key functions (client/keys.c). */
#define last_error keys_error_buf
_Static_assert(KEYS_ERROR_MAX >= KVP_WIRE_ERRMSG_MAX + 1, "the error buffer holds a reply");

struct slab_map {
	uint8_t *base;		/* NULL until mapped */
	size_t bytes;
};

struct kvp_client {
	pthread_mutex_t mu;	/* serializes every call on this client */
	int fd;
	/* the protocol version it speaks: KVP_WIRE_VERSION, or the older one
	 * (KVP_WIRE_VERSION_MIN ..) of a kvpoold that refused it at HELLO */
	uint16_t proto;
	uint16_t peer_version;	/* the version of the last reply's header */
	uint64_t next_req_id;
	uint8_t *buf;		/* one message */
	size_t buf_size;
	bool has_ns;
	struct kvp_wire_hello_reply hello;
	struct slab_map *slabs;	/* [KVP_MAX_SLABS], when has_ns */
	struct hset held;	/* page handle -> leases held */
	/* The namespace's view (host backend): every slab the pool may have
	 * mapped at view + slab x span, in one reserved range of view_slabs
	 * spans, so that a page's address is view + index x page_stride. */
	uint8_t *view;		/* NULL: no view (CUDA, inspection, no room) */
	uint32_t view_slabs;	/* the pool's most slabs */
	uint64_t span;		/* bytes a slab takes in the view */
	uint32_t per_slab;	/* indices a slab takes: span / page_stride */
	uint32_t **gens;	/* [KVP_MAX_SLABS][per_slab]: generation held at
				 * each index, 0 none; a slab's row made with
				 * its first lease */
	uint32_t prefill_rate, remote_max_us;	/* kvp_set_remote_policy() */
	uint32_t acquire_flags;	/* KVP_WIRE_ACQ_LOAD: kvp_set_lookups_counted() */
	uint32_t wait_ms;	/* kvp_set_acquire_wait(); 0: no wait */
	uint32_t timeout_ms;	/* kvp_set_timeout(); 0: none */
	uint32_t sock_ms;	/* the socket's SO_RCVTIMEO and SO_SNDTIMEO now */
	bool dead;		/* the connection is gone (lost()): bye says why */
	bool timed_out;		/* closed by a timeout: bye says which */
	char bye[KVP_WIRE_ERRMSG_MAX + 1];	/* the daemon's notice before it closed */
};

/* client_held_add() / client_held_sub() - one lease more or fewer on h (client.c). */
int client_held_add(struct kvp_client *c, kvp_page h);

int client_held_sub(struct kvp_client *c, kvp_page h);

/* client_dead() - 0, or -EPIPE when c's connection is gone, saying why (client.c). */
int client_dead(struct kvp_client *c);

/* client_needs() - 0 when c speaks protocol version (or later); else
 * -EPROTONOSUPPORT, saying that kvpoold's older version lacks what. */
int client_needs(const struct kvp_client *c, uint16_t version, const char *what);

/* client_set_error() - this thread's kvp_last_error() text. */
void client_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* client_call() - one request and its reply in c->buf; 0 or -errno. */
int client_call(struct kvp_client *c, uint16_t op, const void *payload,
		size_t len, const void *tail, size_t tail_len,
		size_t *reply_len, int *fd);

/* client_reserve_view() - reserve the namespace's view (pages.c). */
void client_reserve_view(struct kvp_client *c);

/* client_map_slab() - map slab when it is not yet; 0 or -errno. */
int client_map_slab(struct kvp_client *c, uint32_t slab);

/* client_send_release() / client_release_batch() - RELEASE n pages. */
int client_send_release(struct kvp_client *c, const kvp_page *pages, size_t n);

int client_release_batch(struct kvp_client *c, const kvp_page *pages, size_t n);

/* client_remember() - hold pages the daemon leased to c; 0 or -ENOMEM. */
int client_remember(struct kvp_client *c, const kvp_page *pages, size_t n);

/* client_map_all() - map the slabs of pages; 0 or -errno. */
int client_map_all(struct kvp_client *c, const kvp_page *pages, size_t n);

#endif /* KVP_CLIENT_INT_H */
