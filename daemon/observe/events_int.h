/* SPDX-License-Identifier: MIT */
/*
 * events_int.h - what the two halves of the KV events module share: the
 * loop's side (events.c: the index's sink, merging, batches, the queue)
 * and the publisher thread's (events_pub.c: msgpack, the sockets,
 * replay). Nothing outside them includes it.
 */
#ifndef KVP_EVENTS_INT_H
#define KVP_EVENTS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/loop/loop.h"
#include "daemon/observe/events.h"

#define TOPIC_MAX	2048u

enum ev_kind { EV_NONE = 0, EV_STORED, EV_REMOVED, EV_CLEARED };

/* Media by index in a raw event: the pool's (GPU or CPU), the host
 * tier's, the NVMe tier's. */
enum ev_medium { EVM_POOL = 0, EVM_HOST = 1, EVM_NVME = 2, EVM_REMOTE = 3 };

/* Which streams a raw event is for: the main one and its namespace's
 * router stream (as filtered: raw_for_router()), or one of them. */
enum ev_dest { EVD_ALL = 0, EVD_MAIN = 1, EVD_ROUTER = 2 };

/*
 * A batch on its way: the loop fills data with the topic, then `nraw`
 * raw events (struct raw_ev, each followed by its parent key when
 * has_parent, n keys and nids token ids), of which `nevents` go on the
 * main stream and `rnevents` on router stream `route`; the thread packs
 * each stream's with msgpack-c into a new emsg whose data is the topic
 * (none on a router stream) and the payload vLLM's subscribers decode
 * (packed), which it sends and keeps for replay.
 */
struct emsg {
	struct emsg *next;
	uint64_t seq;		/* on the main stream (when nevents) */
	uint64_t rseq;		/* on the router stream (when rnevents) */
	double ts;		/* when the batch closed, seconds since the epoch */
	uint32_t nevents;
	uint32_t rnevents;
	uint32_t nraw;
	int32_t route;		/* index in routes[], or -1 */
	uint32_t topic_len;
	uint32_t hash_len;	/* the namespace's digest: 32 or 16 bytes */
	uint32_t block_size;
	bool packed;
	_Atomic uint32_t refs;	/* packed: the ring's, and replays' in ZeroMQ's queues */
	size_t len;		/* bytes after the topic */
	uint8_t data[];
};

/* A replay whose batches ZeroMQ still holds for its peer (sent without a
 * copy: references to the ring's batches). */
struct replay {
	struct replay *next;
	uint8_t id[256];	/* the peer's ROUTER identity */
	size_t id_len;
	_Atomic uint32_t out;	/* its batches not yet written to the peer */
};

struct raw_ev {
	uint8_t kind;		/* enum ev_kind */
	uint8_t medium;		/* enum ev_medium (not for EV_CLEARED) */
	uint8_t has_parent;
	uint8_t has_ids;	/* the blocks came with token ids (stored or removed) */
	uint8_t dest;		/* enum ev_dest */
	uint8_t pad[3];
	uint32_t n;		/* keys */
	uint32_t nids;		/* token ids */
};
_Static_assert(sizeof(struct raw_ev) == 16, "raw_ev is 16 bytes");

/* raw_for_main() - raw event r goes on the main stream. */
static inline bool raw_for_main(const struct raw_ev *r)
{
	return r->dest != EVD_ROUTER;
}

/*
 * raw_for_router() - r goes on its namespace's router stream: a router
 * that reads one engine's stream (vllm-router's kv_aware) keys blocks by
 * their token ids, so blocks without them are left out (their stores and
 * their removals alike: it hears of no block it cannot key), and it
 * credits a medium it does not know as a GPU hit, so the remote tier's
 * (every machine's alike, no reason to prefer this one) is left out.
 * AllBlocksCleared goes. The loop counts with it what the thread packs.
 */
static inline bool raw_for_router(const struct raw_ev *r)
{
	if (r->dest == EVD_MAIN)
		return false;
	return r->kind == EV_CLEARED || (r->medium != EVM_REMOTE && r->has_ids);
}

/* raw_size() - bytes of raw event r with what follows it. */
static inline size_t raw_size(const struct raw_ev *r)
{
	return sizeof(*r) + (r->has_parent ? KVP_KEY_BYTES : 0) +
	       (size_t)r->n * KVP_KEY_BYTES + (size_t)r->nids * sizeof(uint32_t);
}

/* The event being merged: a store of a chain, or removals, in one medium. */
struct pend {
	enum ev_kind kind;
	unsigned medium;	/* enum ev_medium */
	unsigned dest;		/* enum ev_dest */
	bool has_parent;
	uint8_t parent[KVP_KEY_BYTES];
	bool ids;		/* blocks that all came with token ids */
	uint32_t n, cap;	/* keys */
	uint8_t (*keys)[KVP_KEY_BYTES];
	uint32_t nids, idcap;
	uint32_t *idv;
};

/*
 * One stream's sockets and kept batches: the main stream's (--kv-events,
 * --kv-events-replay) and each router stream's (--kv-events-router). Only
 * the publisher thread touches them once it runs.
 */
struct stream {
	const char *flag;	/* its option, for messages */
	const char *endpoint;	/* PUB, or "" (the main stream: off) */
	const char *replay;	/* ROUTER, or "" for none */
	void *pub, *router;
	struct emsg **ring;	/* the replay ring, packed batches */
	uint64_t ring_cap, ring_head, ring_count, ring_bytes;
	struct replay *replaying;	/* replays in progress */
	unsigned nreplaying;
	_Atomic uint64_t replay_bytes;	/* of batches replays hold: the budget's */
	uint64_t refused_ns;		/* the last refused replay logged */
};

/* A router stream: one namespace's events, on topic "", numbered alone. */
struct route {
	const char *ns;
	uint64_t next_seq;	/* the loop's: a namespace made again goes on */
	struct stream st;
};

struct events {
	struct events_config cfg;
	char host[256];
	int efd;		/* the loop wakes the thread */

	/* the loop's: the batch being gathered */
	struct loop *loop;
	struct loop_op timer_op;	/* closes the batch WINDOW_MS after it opened */
	struct __kernel_timespec timer_ts;
	bool armed;
	uint64_t opened_ns;
	const struct ns *bns;	/* whose, or NULL when none is open */
	int broute;		/* its router stream, or -1 */
	char btopic[TOPIC_MAX];
	uint32_t btopic_len;
	uint32_t hash_len;
	uint32_t block_size;
	uint8_t *raw;		/* the raw events so far */
	size_t raw_len, raw_cap;
	uint32_t braw, bevents, brevents;	/* raw events; for each stream */
	struct pend pend;
	uint64_t next_seq;
	uint64_t dropped_batches, dropped_events;

	/* shared, under mu */
	pthread_mutex_t mu;
	pthread_cond_t started_cv;	/* the thread set its sockets up ... */
	bool started;
	int start_rc;			/* ... with this result */
	char start_err[512];
	struct emsg *qhead, *qtail;
	uint64_t queued_bytes;
	bool stopping;

	/* the thread's (routes' next_seq: the loop's) */
	pthread_t thread;
	bool running;
	void *ctx;
	struct stream main;
	struct route routes[TOPIC_ROUTES_MAX];
	unsigned nroutes;

	_Atomic uint64_t sent_batches, sent_events, replays, replayed;
};

/*
 * events_pub_start() - start the publisher thread, which binds the
 * sockets; waits for that. Returns 0, or -errno with err.
 * events_pub_stop() - let it send what is queued, stop it (the caller
 * set stopping and woke it). events_pub_fini() - close the sockets,
 * free the replay ring.
 */
int events_pub_start(struct events *ev, char *err, size_t errlen);
void events_pub_stop(struct events *ev);
void events_pub_fini(struct events *ev);

#endif /* KVP_EVENTS_INT_H */
