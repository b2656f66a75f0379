/* SPDX-License-Identifier: MIT */
/*
 * events.h - KV events (--kv-events): what the pool holds, told to cache-
 * aware routers (llm-d's KV-cache indexer, Dynamo's KV router) in vLLM's
 * format over ZeroMQ, so that a router sees this machine's pool tier by
 * tier as it sees a vLLM instance's GPU cache.
 *
 * observe/ (docs/architecture.md): KV events and the metrics endpoint.
 * They tell what the pool holds and never change it.
 *
 * The loop's side turns the prefix index's media changes (prefix.h's
 * sink) into BlockStored and BlockRemoved events, merges a chain of
 * stores into one event as vLLM does, gathers one batch per namespace and
 * 10 ms, and hands it (raw) to the publisher thread, which packs it with
 * msgpack-c, through a queue of bounded size: when the queue is full the
 * batch is dropped and counted, its sequence number left unused, and the
 * loop never waits. The thread owns the ZeroMQ sockets: it sends each
 * batch as [topic, sequence number (8 bytes, big-endian), payload] on the
 * PUB socket and keeps the last ones for the ROUTER socket's replay
 * requests. A namespace with a router stream (--kv-events-router) has
 * its batches packed a second time, filtered for a router that reads one
 * engine's stream (events_int.h's raw_for_router()), and sent on topic ""
 * with sequence numbers of their own on that stream's sockets; the main
 * stream may be off then. Built without libzmq or msgpack-c, events_start() refuses,
 * saying so, and the rest does nothing.
 */
#ifndef KVP_EVENTS_H
#define KVP_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool_wire.h"
#include "daemon/observe/topic.h"

struct loop;
struct ns;
struct ns_table;
struct events;

/* Encodings of an event (--kv-events-format). */
#define EVENTS_FORMAT_MAP	0u	/* tagged maps: vLLM 0.24 and later */
#define EVENTS_FORMAT_ARRAY	1u	/* tagged positional arrays: vLLM <= 0.23 */

/* Block hashes (--kv-events-hashes). */
#define EVENTS_HASH_INT		0u	/* the digest's last 8 bytes, big-endian */
#define EVENTS_HASH_BYTES	1u	/* the digest */

struct events_config {
	const char *endpoint;	/* PUB: tcp://ADDR:PORT or ipc://PATH; "": no
				 * main stream (router streams alone) */
	const char *replay;	/* ROUTER, or "" for none */
	const char *topic;	/* template: {host}, {model}, {ns} (topic.h) */
	const char (*ns_topics)[TOPIC_RULE_MAX];	/* --kv-events-ns-topic rules */
	unsigned nns_topics;
	const struct topic_route *routes;	/* --kv-events-router rules (checked) */
	unsigned nroutes;
	unsigned format;	/* EVENTS_FORMAT_* */
	unsigned hashes;	/* EVENTS_HASH_* */
	uint64_t queue_bytes;	/* queued, and kept for replay, at most each */
	uint64_t replay_batches;	/* kept for replay at most */
	const char *pool_medium;	/* the pool's medium: "GPU" or "CPU" */
	gid_t ipc_gid;		/* ipc:// sockets' group ((gid_t)-1: the daemon's) */
	struct loop *loop;	/* for the batch window's timer (NULL: a batch
				 * per loop turn) */
};

/* events_built() - whether kvpoold was built with libzmq and msgpack-c. */
bool events_built(void);

/*
 * events_start() - check the topic templates (topic.h), bind the sockets
 * and start the publisher thread. Returns 0 and *out, or -errno with the
 * reason (the template or endpoint, and what to do) in err.
 */
int events_start(struct events **out, const struct events_config *cfg, char *err,
		 size_t errlen);

/*
 * events_ns_open() - namespace n publishes its events through ev (NULL:
 * events are off): its topic is made from its template (its
 * --kv-events-ns-topic rule's, else --kv-events-topic), and its index
 * reports to ev from now on (call before its first entry). Without the
 * main stream, only a namespace with a router stream publishes.
 */
void events_ns_open(struct events *ev, struct ns *n);

/*
 * events_ns_gone() - n is about to be dropped with everything it holds:
 * AllBlocksCleared on its topic, or, when another namespace of t shares
 * that topic, BlockRemoved for each of n's blocks in each medium; its
 * router stream, if any, gets AllBlocksCleared either way.
 */
void events_ns_gone(struct events *ev, struct ns *n, const struct ns_table *t);

/* events_all_gone() - the daemon stops: AllBlocksCleared on every topic of
 * t and every router stream of its namespaces (the pool and host tier go;
 * a warm restart tells the NVMe tier's blocks again). */
void events_all_gone(struct events *ev, const struct ns_table *t);

/* events_flush() - end of a loop turn (the loop's turn hook; arg is the
 * struct events): the batch being gathered goes to the queue once it is
 * 10 ms old, by a timer if no turn comes. */
void events_flush(void *arg);

/* events_stats() - the counters for STATS (zero when ev is NULL); the
 * batch being gathered is queued first, so that they count it. */
void events_stats(struct events *ev, struct kvp_wire_events_stats *st);

/*
 * events_free() - flush, let the thread send what is queued (ZeroMQ
 * lingers up to a second for slow peers), stop it and close the sockets.
 * ev may be NULL. Call once the loop stopped.
 */
void events_free(struct events *ev);

#endif /* KVP_EVENTS_H */
