/* SPDX-License-Identifier: MIT */
/*
 * ns.h - the namespace table: namespaces made on a client's first HELLO,
 * joined, restored from tier files at start, dropped (the record itself,
 * struct ns, is store/namespace.h's).
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
#include "daemon/store/namespace.h"
#include "daemon/store/pool.h"

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

/*
 * ns_remote_reshare() - the --remote-share rules of k changed (SIGHUP):
 * every namespace whose share name changed takes its new identity in the
 * remote tier, and forgets what it sent there or fetched under the old
 * one (so that it writes its blocks again). Returns how many changed.
 */
unsigned ns_remote_reshare(struct ns_table *t, const struct ns_config *k);

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
