/* SPDX-License-Identifier: MIT */
/*
 * ns.h - namespaces: one model's KV format each, by name.
 *
 * The first client that names a namespace creates it with its geometry;
 * later clients must send the same geometry and model, field for field.
 * A namespace owns a pool namespace (its page size and its slabs).
 */
#ifndef KVP_NS_H
#define KVP_NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool_wire.h"
#include "daemon/store/pool.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/hosttier.h"
#include "daemon/tiers/spill.h"

struct conn;
struct events;
struct remote;

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
	bool remote_through;	/* --remote-write through */
	uint64_t remote_prefill_rate;	/* tokens/s; 0: always fetch */
	uint32_t remote_fetch_max;	/* blocks one ACQUIRE fetches, at most */
	struct kvp_wire_ns_remote_stats remote_st;	/* what the remote tier did for it */
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

/* Who joins: whether it may create the namespace, and as whom that
 * counts against ns_config.max_per_uid. */
struct ns_joiner {
	uid_t uid;
	bool may_create;	/* write or admin rights in the namespace */
	bool unlimited;		/* root or the daemon's user: not counted */
};

/*
 * ns_join() - find namespace h->ns, or create it in pool p with h's
 * geometry when j->may_create (the client has write or admin rights there).
 * A namespace with an NVMe tier comes back NS_PREPARING while its tier
 * file is made on a worker thread (k->loop): the caller waits on its queue
 * for k->wake; so does one that finds it still preparing.
 * Returns 0 and *out, or a negative enum kvp_status with the reason in
 * err: -KVP_S_INVAL (bad name or geometry), -KVP_S_MISMATCH (the
 * namespace exists with another geometry; err names the field),
 * -KVP_S_PERM (it does not exist and may not be created), -KVP_S_LIMIT
 * (too many namespaces, or j->uid created its max_per_uid already),
 * -KVP_S_INTERNAL (no memory, or its tier could
 * not be opened). A new namespace takes its key scheme from h (or k's
 * default), its root key from k's seed (and salt with the namespace's
 * name), and an empty index. A namespace restored from a tier file that
 * no client has joined yet is made anew (cold) for a client that may
 * create it and sends another geometry; anyone else gets MISMATCH. A
 * refused HELLO changes nothing.
 */
int ns_join(struct ns_table *t, struct pool *p, const struct ns_config *k,
	    const struct kvp_wire_hello *h, const struct ns_joiner *j, struct ns **out,
	    char *err, size_t errlen);

/*
 * ns_restore_all() - at start-up, make a namespace for every tier file in
 * cfg->spill_dir and re-index the pages its slots hold (warm restart).
 * A file whose format, geometry or key root no longer fits starts cold,
 * logged with the reason. Returns the pages re-indexed.
 */
uint64_t ns_restore_all(struct ns_table *t, struct pool *p, const struct ns_config *cfg);

/*
 * ns_drop() - forget namespace n: every page it indexes, its tier file,
 * its slabs (back to the pool's budget). Returns 0, or -EBUSY with err
 * saying why while n has a client or a tier write in flight (nothing
 * changed then; also while n is NS_PREPARING). The table stays dense:
 * another namespace may take n's id. The tier file is removed on a worker
 * thread: *gone is then the NS_GONE namespace of that name, on whose queue
 * the caller may wait for k->wake (else NULL: nothing left to do).
 */
int ns_drop(struct ns_table *t, struct pool *p, const struct ns_config *k, struct ns *n,
	    struct ns **gone, char *err, size_t errlen);

/* ns_busy() - n has a client, a tier write in flight or a --spill-rate
 * timer armed: ns_drop() refuses until they are done, and each of them
 * wakes the requests waiting on n when it is. */
bool ns_busy(const struct ns *n);

/* ns_by_name() - the namespace called name, or NULL. */
struct ns *ns_by_name(struct ns_table *t, const char *name);

/* ns_gone_by_name() - the dropped namespace called name whose tier file
 * is being removed, or NULL. */
struct ns *ns_gone_by_name(struct ns_table *t, const char *name);

/* ns_table_fini() - free every namespace. */
void ns_table_fini(struct ns_table *t);

/* ns_head_dim_v() - HELLO's head_dim_v in canonical form: 0 for the
 * same as head_dim (0 or head_dim sent), KVP_K_ONLY, or V's own size. */
uint32_t ns_head_dim_v(uint32_t head_dim, uint32_t head_dim_v);

/* ns_page_bytes() - the page size of a geometry, 0 if it overflows or a
 * field is 0 or out of range or the dtype unknown. head_dim_v as HELLO's. */
uint64_t ns_page_bytes(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		       uint32_t head_dim_v, uint32_t block_tokens, uint32_t dtype);

#endif /* KVP_NS_H */
