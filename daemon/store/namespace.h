/* SPDX-License-Identifier: MIT */
/*
 * namespace.h - the namespace record: one model's KV format, by name, and
 * everything kvpoold keeps for it (its pool namespace, prefix index,
 * tiers, waiting requests, counters). Every wing passes it down; its
 * objects of other wings (tiers, events, the remote tier, connections)
 * are pointers this header only names. The table of namespaces and what
 * HELLO and DROP_NS do to it are requests/ns.c's.
 */
#ifndef KVP_NAMESPACE_H
#define KVP_NAMESPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool_wire.h"
#include "daemon/loop/loop.h"
#include "daemon/requests/access.h"
#include "daemon/store/pool.h"

struct backend;
struct conn;
struct events;
struct hosttier;
struct prefix;
struct remote;
struct spill;

/* Where a namespace is in its life (its tier file is made and removed off
 * the loop, so both take a while). */
enum ns_state {
	NS_READY,	/* clients join and use it */
	NS_PREPARING,	/* its tier file is being made (or scanned): a HELLO
			 * waits on its queue, a DROP_NS too */
	NS_GONE,	/* dropped (its tier file is being removed), or its
			 * tier could not be made: out of the table; what
			 * waits on it is answered when the file is gone */
};

struct ns_job;
struct wait_gone;

struct ns {
	char name[KVP_NAME_MAX];
	enum ns_state state;
	struct ns_job *job;	/* PREPARING or GONE: its tier file's job on a worker thread */
	struct ns *gone_next;	/* GONE: the table's list of drops */
	char model[KVP_MODEL_MAX];
	uid_t creator;		/* who made it (the daemon's user when restored) */
	uint32_t id;		/* index in the table, reported in STATS */
	uint32_t layers, kv_heads, head_dim, block_tokens, dtype;
	uint32_t head_dim_v;	/* canonical: 0 (as head_dim), KVP_K_ONLY, or
				 * another size (never head_dim itself) */
	uint64_t page_bytes;
	int pool_ns;		/* its namespace in the pool */
	struct pool *pool;	/* the pool (borrowed) */
	struct backend *be;	/* its pages' memory: copies and tiers go
				 * through it (the pool's, borrowed) */
	uint32_t memory;	/* KVP_MEMORY_* its creator asked for */
	uint32_t clients;	/* connections joined to it now */
	uint32_t key_scheme;	/* KVP_WIRE_KEYS_* */
	uint8_t root[KVP_KEY_BYTES];	/* parent key of first blocks */
	struct prefix *idx;	/* published pages by key */
	struct hosttier *host;	/* host-memory tier, or NULL */
	struct spill *tier;	/* NVMe tier, or NULL */
	uint32_t *slot_entry;	/* tier slot -> index entry (PREFIX_NIL: none) */
	bool from_disk;		/* made at start-up from a tier file; no
				 * client joined since */
	unsigned faults_logged;	/* NS_FAULT_* kinds already logged */
	uint64_t nospc_said_ns;	/* an ALLOC refused for room, last logged */
	struct wait_gone *gone;	/* keys abandoned (requests/wait.c), or NULL */
	struct conn *wait_head;	/* requests waiting for staging buffers */
	struct conn *wait_tail;
	struct loop_op rate_op;	/* wakes the waiters when --spill-rate allows */
	struct __kernel_timespec rate_ts;
	bool rate_armed;
	bool saving;		/* a stop writes its pages to the NVMe tier */
	uint64_t saved;		/* pages the stop wrote (or took back to a copy) */
	uint64_t pinned_quota;	/* pages in the pinned class, at most */
	struct kvp_wire_prefix_stats st;	/* counters for STATS */
	struct events *events;	/* its KV events go there, or NULL */
	char *ev_topic;		/* their topic (with events), owned */
	struct remote *remote;	/* the remote tier (borrowed), or NULL */
	uint8_t rid[32];	/* its identity there (rpage_ns_id()) */
	char remote_name[KVP_NAME_MAX];	/* the name it shares under there */
	bool remote_through;	/* --remote-write through */
	uint64_t remote_prefill_rate;	/* tokens/s; 0: always fetch */
	uint32_t remote_fetch_max;	/* blocks one ACQUIRE fetches, at most */
	struct kvp_wire_ns_remote_stats remote_st;	/* what the remote tier did for it */
	/* drop_subtree() - the cached block e lost its parent: it and every
	 * block below it leave the index, in every tier (tier_drop_subtree(),
	 * set by ns.c): how a lease let go (store/lease.c) reaches the tiers
	 * without knowing them */
	void (*drop_subtree)(struct pool *p, struct ns *n, uint32_t e);
};

/* Kinds of tier faults, each logged once per namespace (then counted). */
#define NS_FAULT_WRITE		0x1u
#define NS_FAULT_READ		0x2u
#define NS_FAULT_CHECKSUM	0x4u

/* ns_fault_first() - true the first time n meets fault kind. */
static inline bool ns_fault_first(struct ns *n, unsigned kind)
{
	bool first = !(n->faults_logged & kind);

	n->faults_logged |= kind;
	return first;
}

/* Settings from the daemon's options, for new namespaces. */
struct ns_config {
	uint32_t scheme;	/* default when a client asks for none */
	const char *seed;	/* root = H(seed) */
	const char *salt;	/* "" or mixed into each namespace's root */
	unsigned pinned_pct;	/* pinned quota, percent of the pool's pages */
	unsigned max_per_uid;	/* namespaces one (counted) uid may create */
	uint64_t host_bytes;	/* host tier per namespace; 0: none */
	const char *spill_dir;	/* "" : no tier */
	uint64_t spill_bytes;
	uint64_t max_spill_per_uid;	/* bytes of tier files of one uid's
					 * namespaces; 0: no bound */
	uint64_t spill_rate;	/* bytes/s, 0: no cap */
	bool spill_discard;
	struct loop *loop;	/* for the tier's I/O */
	/* the pool memory of namespaces that ask for host pages
	 * (KVP_MEMORY_HOST): 0 when the pool's backend is host, 1 beside a
	 * cuda backend, -1 when there is none (--host-pool-size 0) */
	int host_memory;
	struct events *events;	/* KV events, or NULL */
	struct remote *remote;	/* the remote tier, or NULL */
	bool remote_through;
	uint64_t remote_prefill_rate;
	uint32_t remote_fetch_max;
	/* --remote-share rules (access.h): which namespaces share remote
	 * pages under which name; SIGHUP may change them (ns_remote_reshare()) */
	const char (*shares)[ACCESS_RULE_MAX];
	unsigned nshares;
	/* ns_wake() - what waits on n may go on: n is ready (status 0), or it
	 * is gone (n->state NS_GONE: its drop finished with status 0, or its
	 * tier could not be made: -KVP_S_INTERNAL with msg for the clients).
	 * Called on the loop; n is freed when it returns, if gone. */
	void (*wake)(struct ns *n, int status, const char *msg);
};

/* The namespaces: ns[0..count) are never NULL, and ns[i]->id == i.
 * Dropped ones whose tier file is still being removed are on gone. */
struct ns_table {
	struct ns *ns[POOL_MAX_NS];
	uint32_t count;
	struct ns *gone;
};

#endif /* KVP_NAMESPACE_H */
