/* SPDX-License-Identifier: MIT */
/*
 * ns.c - the namespace table: creation on first HELLO, exact geometry
 * matching after that, and the page size a geometry implies; the warm
 * restart's scan of tier files; a namespace's tier file made, scanned and
 * removed on a worker thread (NS_PREPARING, NS_GONE) and its drop.
 *
 * Past 800 lines on purpose: a namespace's making, restoring and dropping
 * are one life cycle over the same table and tier-file jobs.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpool.h"
#include "client/keys.h"
#include "client/size.h"
#include "client/utf8.h"
#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/observe/events.h"
#include "daemon/remote/rpage.h"
#include "daemon/requests/access.h"
#include "daemon/requests/ns.h"
#include "daemon/store/lease.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/hosttier.h"
#include "daemon/tiers/spill.h"
#include "daemon/tiers/tier.h"

/* Bounds on geometry fields: generous, but they keep products in range. */
#define NS_MAX_LAYERS		1024u
#define NS_MAX_KV_HEADS		1024u
#define NS_MAX_HEAD_DIM		4096u
#define NS_MAX_BLOCK_TOKENS	4096u

uint32_t ns_head_dim_v(uint32_t head_dim, uint32_t head_dim_v)
{
	return head_dim_v == head_dim ? 0 : head_dim_v;
}

uint64_t ns_page_bytes(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		       uint32_t head_dim_v, uint32_t block_tokens, uint32_t dtype)
{
	uint64_t b = wire_dtype_bytes(dtype);
	uint64_t v = head_dim_v == 0 ? head_dim : head_dim_v == KVP_K_ONLY ? 0 : head_dim_v;

	if (!b || !layers || !kv_heads || !head_dim || !block_tokens ||
	    layers > NS_MAX_LAYERS || kv_heads > NS_MAX_KV_HEADS ||
	    head_dim > NS_MAX_HEAD_DIM || v > NS_MAX_HEAD_DIM ||
	    block_tokens > NS_MAX_BLOCK_TOKENS)
		return 0;
	/* at most 2^10 * 2^10 * 2^13 * 2^12 * 4: fits in 64 bits */
	return b * layers * kv_heads * (head_dim + v) * block_tokens;
}

/* mismatch() - name the first field in which h differs from n, or NULL. */
static const char *mismatch(const struct ns *n, const struct kvp_wire_hello *h,
			    uint32_t *have, uint32_t *sent)
{
	static const char *const names[] = {
		"layers", "kv_heads", "head_dim", "block_tokens", "dtype", "head_dim_v",
	};
	const uint32_t a[] = { n->layers, n->kv_heads, n->head_dim,
			       n->block_tokens, n->dtype, n->head_dim_v };
	const uint32_t b[] = { h->layers, h->kv_heads, h->head_dim,
			       h->block_tokens, h->dtype,
			       ns_head_dim_v(h->head_dim, h->head_dim_v) };
	size_t i;

	for (i = 0; i < sizeof(a) / sizeof(a[0]); i++) {
		if (a[i] != b[i]) {
			*have = a[i];
			*sent = b[i];
			return names[i];
		}
	}
	return NULL;
}

static struct ns *ns_find(struct ns_table *t, const char *name)
{
	uint32_t i;

	for (i = 0; i < t->count; i++)
		if (t->ns[i] && strcmp(t->ns[i]->name, name) == 0)
			return t->ns[i];
	return NULL;
}

/*
 * ns_root() - the root key of a new namespace: H(seed) of its scheme,
 * which is vLLM's NONE_HASH for the same seed; with a salt, the key of an
 * empty block under that root with extra keys [salt, namespace name], so
 * that salted namespaces never share a key with anything else.
 */
static int ns_root(struct ns *n, const struct ns_config *k)
{
	const kvp_extra extras[2] = { { .str = k->salt }, { .str = n->name } };
	kvp_key root;
	int rc;

	rc = kvp_key_root(n->key_scheme, k->seed, &root);
	if (rc == 0 && k->salt && k->salt[0])
		rc = kvp_key_block(n->key_scheme, &root, NULL, 0, extras, 2, &root);
	memcpy(n->root, root.b, sizeof(n->root));
	return rc;
}

/* Re-indexing a warm tier file: entries and the parent keys to link. */
struct scan_ctx {
	struct ns *n;
	uint32_t *entries;
	uint8_t (*parents)[KVP_KEY_BYTES];
	uint32_t count;
	uint64_t kept;
};

static bool scan_slot(void *arg, uint32_t slot, const struct spill_meta *m)
{
	struct scan_ctx *sc = arg;
	struct prefix *x = sc->n->idx;
	uint32_t e;

	if (m->ntokens >= sc->n->block_tokens)
		return false;
	if (m->ntokens ? prefix_find_partial_exact(x, m->key, m->tokens, m->ntokens) :
			 prefix_find(x, m->key))
		return false;	/* an older copy of a key already indexed */
	e = prefix_insert(x, m->key, m->ntokens ? m->key : m->parent, PREFIX_NIL, 0, m->prio,
			  m->tokens, m->ntokens);
	if (e == PREFIX_NIL)
		return false;
	prefix_spilling(x, e, slot);
	prefix_spilled(x, e);
	sc->n->slot_entry[slot] = e;
	sc->entries[sc->count] = e;
	memcpy(sc->parents[sc->count++], m->ntokens ? m->key : m->parent, KVP_KEY_BYTES);
	sc->kept++;
	return true;
}

/* ns_identity() - what tier files and remote values say n is. */
static void ns_identity(const struct ns *n, struct spill_ns *id)
{
	memset(id, 0, sizeof(*id));
	memcpy(id->name, n->name, sizeof(id->name));
	memcpy(id->model, n->model, sizeof(id->model));
	id->layers = n->layers;
	id->kv_heads = n->kv_heads;
	id->head_dim = n->head_dim;
	id->block_tokens = n->block_tokens;
	id->dtype = n->dtype;
	id->key_scheme = n->key_scheme;
	id->page_bytes = n->page_bytes;
	memcpy(id->root, n->root, sizeof(id->root));
	id->memory = n->memory;
	id->head_dim_v = n->head_dim_v;
}

/* A namespace's tier file job on a worker thread: making the file
 * (prep_run()) or removing it (unlink_run()). The thread reads the inputs,
 * kept here by value, and writes the outputs; the namespace is touched on
 * the loop only. */
struct ns_job {
	struct loop_op op;
	char path[4096];	/* prep: the spill directory; unlink: the file */
	uint64_t bytes;
	bool discard;
	struct spill_ns id;
	struct spill *sp;	/* prep: the result */
	char err[512];
	char note[4200];	/* prep: a warning for the log, or "" */
	struct ns *n;
	struct ns_table *t;
	const struct ns_config *k;
};

/* prep_run() - on a worker thread: the slow part of a new tier. */
static int prep_run(struct loop_op *op)
{
	struct ns_job *j = (struct ns_job *)op;

	return spill_prepare(&j->sp, j->path, j->bytes, j->discard, &j->id, j->note,
			     sizeof(j->note), j->err, sizeof(j->err));
}

/* unlink_run() - on a worker thread: remove a dropped tier file (the file
 * system frees its blocks now: seconds for a large one on a busy disk). */
static int unlink_run(struct loop_op *op)
{
	struct ns_job *j = (struct ns_job *)op;

	return unlink(j->path) < 0 ? -errno : 0;
}

/*
 * ns_tier_finish() - on the loop, the tier spill_prepare() made becomes
 * n's; if it is warm, its slots are re-indexed and each entry linked to its
 * parent block. Returns pages re-indexed, or -ENOMEM with err filled.
 */
static int64_t ns_tier_finish(struct ns *n, const struct ns_config *k, struct spill *sp,
			      char *err, size_t errlen)
{
	struct spill_stats st;
	struct scan_ctx sc = { .n = n };
	static const uint8_t zero_key[KVP_KEY_BYTES];
	uint32_t i, p, orphans = 0;
	const char *why = spill_cold_why(sp);

	n->tier = sp;
	spill_attach(sp, k->loop, n->be);
	if (why)
		log_info("namespace '%s': cold start of %s: %s", n->name, spill_path(sp), why);
	spill_set_rate(sp, k->spill_rate);
	spill_get_stats(sp, &st);
	n->slot_entry = calloc(st.slots, sizeof(*n->slot_entry));
	sc.entries = calloc(st.slots, sizeof(*sc.entries));
	sc.parents = calloc(st.slots, sizeof(*sc.parents));
	if (!n->slot_entry || !sc.entries || !sc.parents) {
		free(sc.entries);
		free(sc.parents);
		snprintf(err, errlen, "no memory for the slot table of %s", spill_path(sp));
		return -ENOMEM;
	}
	spill_scan(sp, scan_slot, &sc);
	for (i = 0; i < sc.count; i++) {
		p = prefix_find(n->idx, sc.parents[i]);
		if (p)
			prefix_set_parent(n->idx, sc.entries[i], p);
	}
	/* A block whose parent is not there (its slot was reused, or the
	 * parent was dropped while this one's write was in flight) could
	 * never be reached from the root: it goes, with what is below it, so
	 * that no chain has a hole. Root-level blocks name no parent; a
	 * partial page at the root names the root. */
	for (i = 0; i < sc.count; i++) {
		uint32_t e = sc.entries[i];

		if (!prefix_used(n->idx, e) || prefix_parent(n->idx, e) != PREFIX_NIL ||
		    !memcmp(sc.parents[i], zero_key, KVP_KEY_BYTES) ||
		    !memcmp(sc.parents[i], n->root, KVP_KEY_BYTES))
			continue;
		orphans += prefix_count(n->idx);
		tier_drop_subtree(n->pool, n, e);
		orphans -= prefix_count(n->idx);
	}
	sc.kept -= orphans;
	if (orphans)
		log_info("namespace '%s': %u blocks of %s could not be reached: a block "
			 "before them is not there; they were dropped", n->name, orphans,
			 spill_path(sp));
	free(sc.entries);
	free(sc.parents);
	if (sc.kept)
		log_info("namespace '%s': %llu pages re-indexed from %s", n->name,
			 (unsigned long long)sc.kept, spill_path(sp));
	return (int64_t)sc.kept;
}

/* remote_id() - the name n shares remote pages under by k's rules, and
 * its identity there. */
static void remote_id(const struct ns *n, const struct ns_config *k, char *name,
		      uint8_t rid[RPAGE_ID_BYTES])
{
	struct spill_ns id;

	access_share_name(k->shares, k->nshares, n->name, name);
	ns_identity(n, &id);
	memcpy(id.name, name, sizeof(id.name));
	rpage_ns_id(&id, rid);
}

/* ns_remote_open() - n uses the remote tier, under its identity there. */
static void ns_remote_open(struct ns *n, const struct ns_config *k)
{
	if (!k->remote)
		return;
	remote_id(n, k, n->remote_name, n->rid);
	if (strcmp(n->remote_name, n->name))
		log_info("namespace '%s': shares remote pages as '%s' (remote-share)",
			 n->name, n->remote_name);
	n->remote = k->remote;
	n->remote_through = k->remote_through;
	n->remote_prefill_rate = k->remote_prefill_rate;
	n->remote_fetch_max = k->remote_fetch_max;
}

unsigned ns_remote_reshare(struct ns_table *t, const struct ns_config *k)
{
	uint8_t rid[RPAGE_ID_BYTES];
	char name[KVP_NAME_MAX];
	unsigned i, changed = 0;

	for (i = 0; i < t->count; i++) {
		struct ns *n = t->ns[i];

		if (!n->remote)
			continue;
		remote_id(n, k, name, rid);
		if (!memcmp(rid, n->rid, sizeof(rid)))
			continue;
		log_info("namespace '%s': shares remote pages as '%s' now, not as '%s'; "
			 "what it sent or fetched as '%s' is not its own any more", n->name,
			 name, n->remote_name, n->remote_name);
		memcpy(n->rid, rid, sizeof(rid));
		memcpy(n->remote_name, name, sizeof(name));
		prefix_remote_forget(n->idx);
		changed++;
	}
	return changed;
}

/* ns_free() - a namespace's index, tier and memory (not its pool pages). */
static void ns_free(struct ns *n)
{
	if (n->job) {	/* only after loop_fini(): the job never completed */
		spill_close(n->job->sp);
		free(n->job);
	}
	if (n->state == NS_GONE && !n->idx) {	/* a drop's stand-in */
		free(n);
		return;
	}
	tier_ns_gone(n);
	free(n->gone);
	prefix_free(n->idx);
	free(n->ev_topic);
	hosttier_close(n->host);
	spill_close(n->tier);
	free(n->slot_entry);
	free(n);
}

/*
 * hello_check() - what a HELLO that creates a namespace must hold: a
 * model identity, a geometry whose page size is defined, a key scheme
 * the daemon has. Changes nothing. Returns 0 with the page size and the
 * scheme, or -KVP_S_INVAL with err saying what is wrong.
 */
static int hello_check(const struct ns_config *k, const struct kvp_wire_hello *h,
		       uint64_t *pb, uint32_t *scheme, char *err, size_t errlen)
{
	*scheme = h->key_scheme ? h->key_scheme : k->scheme;
	if (!h->model[0]) {
		snprintf(err, errlen, "namespace '%s': the model identity is empty; "
			 "name the model (e.g. meta-llama/Llama-3.1-8B)", h->ns);
		return -KVP_S_INVAL;
	}
	*pb = ns_page_bytes(h->layers, h->kv_heads, h->head_dim, h->head_dim_v,
			    h->block_tokens, h->dtype);
	if (!*pb) {
		snprintf(err, errlen, "namespace '%s': bad geometry layers %u kv_heads %u "
			 "head_dim %u block_tokens %u dtype %u head_dim_v %u (each must be "
			 "1..%u/%u/%u/%u, dtype 1..4, head_dim_v 0 (as head_dim), 1..%u or "
			 "%u (K only))", h->ns, h->layers, h->kv_heads, h->head_dim,
			 h->block_tokens, h->dtype, h->head_dim_v, NS_MAX_LAYERS,
			 NS_MAX_KV_HEADS, NS_MAX_HEAD_DIM, NS_MAX_BLOCK_TOKENS,
			 NS_MAX_HEAD_DIM, KVP_K_ONLY);
		return -KVP_S_INVAL;
	}
	if (*scheme < KVP_WIRE_KEYS_VLLM_SHA256_CBOR || *scheme > KVP_WIRE_KEYS_MAX) {
		snprintf(err, errlen, "namespace '%s': key scheme %u is not 1 "
			 "(vllm-sha256-cbor), 2 (vllm-xxhash-cbor, also called fast), 3 "
			 "(vllm-sha256) or 4 (vllm-xxhash)", h->ns, *scheme);
		return -KVP_S_INVAL;
	}
	if (h->memory == KVP_MEMORY_HOST && k->host_memory < 0) {
		snprintf(err, errlen, "namespace '%s': this client asks for host pages, and "
			 "kvpoold serves none beside its cuda backend (--host-pool-size 0); "
			 "ask the daemon's admin for a --host-pool-size", h->ns);
		return -KVP_S_INVAL;
	}
	return 0;
}

/* memory_of() - the pool memory of a namespace that asks for memory. */
static uint32_t memory_of(const struct ns_config *k, uint32_t memory)
{
	return memory == KVP_MEMORY_HOST ? (uint32_t)k->host_memory : 0;
}

/* table_remove() - take entry id out of the table, which stays dense: the
 * last namespace moves into its slot (and takes its id). */
static void table_remove(struct ns_table *t, uint32_t id)
{
	t->ns[id] = t->ns[--t->count];
	t->ns[t->count] = NULL;
	if (id < t->count)
		t->ns[id]->id = id;
}

/* tier_failed() - what a client is told when n's tier cannot be made;
 * the reason names the daemon's files: for its log, not for clients. */
static void tier_failed(const struct ns *n, const char *why, char *err, size_t errlen)
{
	log_error("namespace '%s': %s", n->name, why);
	snprintf(err, errlen, "namespace '%s' cannot be created: its NVMe tier cannot be "
		 "used (the kvpoold log says why; ask the daemon's admin)", n->name);
}

/*
 * prep_done() - on the loop: n's tier file is made (or not). n becomes
 * ready, or leaves the table; either way what waits on it is woken.
 */
static void prep_done(struct loop_op *op, int res)
{
	struct ns_job *j = (struct ns_job *)op;
	const struct ns_config *k = j->k;
	char msg[KVP_WIRE_ERRMSG_MAX];
	struct ns *n = j->n;
	int64_t kept = -1;

	n->job = NULL;
	if (j->note[0])
		log_warn("namespace '%s': %s", n->name, j->note);
	if (res == 0)
		kept = ns_tier_finish(n, k, j->sp, j->err, sizeof(j->err));
	if (kept >= 0) {
		free(j);
		n->state = NS_READY;
		k->wake(n, 0, NULL);
		return;
	}
	tier_failed(n, j->err, msg, sizeof(msg));
	table_remove(j->t, n->id);
	pool_ns_release(n->pool, n->pool_ns);	/* no client ever joined: no page */
	n->state = NS_GONE;
	free(j);
	k->wake(n, -KVP_S_INTERNAL, msg);
	ns_free(n);
}

/*
 * tier_start() - make n's tier file: on a worker thread, n NS_PREPARING
 * until prep_done(); here and now when wait (at start-up, before anyone is
 * served) or when no thread can be had. Returns 0, or -KVP_S_INTERNAL with
 * err filled (only when it ran here).
 */
static int tier_start(struct ns_table *t, struct ns *n, const struct ns_config *k, bool wait,
		      char *err, size_t errlen)
{
	struct ns_job *j = calloc(1, sizeof(*j));
	int64_t kept = -1;
	int rc;

	if (!j) {
		snprintf(err, errlen, "out of memory creating namespace '%s'", n->name);
		return -KVP_S_INTERNAL;
	}
	snprintf(j->path, sizeof(j->path), "%s", k->spill_dir);
	j->bytes = k->spill_bytes;
	j->discard = k->spill_discard;
	ns_identity(n, &j->id);
	j->n = n;
	j->t = t;
	j->k = k;
	j->op.done = prep_done;
	if (!wait && k->loop && k->wake && loop_work(k->loop, &j->op, prep_run,
							  (uint32_t)n->creator) == 0) {
		n->state = NS_PREPARING;
		n->job = j;
		return 0;
	}
	rc = prep_run(&j->op);
	if (j->note[0])
		log_warn("namespace '%s': %s", n->name, j->note);
	if (rc == 0)	/* a failed spill_prepare() left nothing to close */
		kept = ns_tier_finish(n, k, j->sp, j->err, sizeof(j->err));
	if (kept < 0)
		tier_failed(n, j->err, err, errlen);
	free(j);
	return kept < 0 ? -KVP_S_INTERNAL : 0;
}

/*
 * ns_create() - a new namespace from h at the end of the table, its tier
 * file made (and re-indexed when warm): here when wait, else on a worker
 * thread while it is NS_PREPARING. A failure leaves the table and the pool
 * as they were. Returns 0 and *out, or a negative enum kvp_status with err
 * filled.
 */
static int ns_create(struct ns_table *t, struct pool *p, const struct ns_config *k,
		     const struct kvp_wire_hello *h, uid_t creator, bool wait, struct ns **out,
		     char *err, size_t errlen)
{
	uint32_t scheme, id = t->count;
	uint64_t pb;
	struct ns *n;
	int pns, rc;

	rc = hello_check(k, h, &pb, &scheme, err, errlen);
	if (rc < 0)
		return rc;
	if (id >= POOL_MAX_NS) {
		snprintf(err, errlen, "cannot create namespace '%s': %u namespaces exist",
			 h->ns, t->count);
		return -KVP_S_LIMIT;
	}
	pns = pool_ns_add_mem(p, pb, memory_of(k, h->memory));
	if (pns == -EINVAL) {
		snprintf(err, errlen, "namespace '%s': a page of %llu bytes does not fit "
			 "in a slab of %llu bytes; raise --slab-size", h->ns,
			 (unsigned long long)pb, (unsigned long long)pool_slab_bytes(p));
		return -KVP_S_INVAL;
	}
	if (pns < 0) {
		snprintf(err, errlen, "cannot create namespace '%s': the pool has no room "
			 "for another page size", h->ns);
		return -KVP_S_LIMIT;
	}
	n = calloc(1, sizeof(*n));
	if (n) {
		n->idx = prefix_new();
		n->drop_subtree = tier_drop_subtree;
	}
	if (!n || !n->idx) {
		free(n);
		pool_ns_release(p, pns);
		snprintf(err, errlen, "out of memory creating namespace '%s'", h->ns);
		return -KVP_S_INTERNAL;
	}
	memcpy(n->name, h->ns, sizeof(n->name));
	memcpy(n->model, h->model, sizeof(n->model));
	n->key_scheme = scheme;
	n->block_tokens = h->block_tokens;
	ns_root(n, k);
	events_ns_open(k->events, n);	/* before a tier re-indexes */
	n->creator = creator;
	n->id = id;
	n->layers = h->layers;
	n->kv_heads = h->kv_heads;
	n->head_dim = h->head_dim;
	n->head_dim_v = ns_head_dim_v(h->head_dim, h->head_dim_v);
	n->dtype = h->dtype;
	n->page_bytes = pb;
	n->pool_ns = pns;
	n->pool = p;
	n->be = pool_ns_backend(p, pns);
	n->memory = h->memory;
	n->pinned_quota = pool_ns_capacity(p, pns) * k->pinned_pct / 100;
	ns_remote_open(n, k);
	if (k->host_bytes) {
		if (hosttier_open(&n->host, n->be, k->host_bytes, pb, err, errlen) < 0)
			goto out_free;
	}
	if (k->spill_dir && k->spill_dir[0] && tier_start(t, n, k, wait, err, errlen) < 0)
		goto out_free;
	t->ns[id] = n;
	t->count++;
	*out = n;
	return 0;

out_free:
	ns_free(n);
	pool_ns_release(p, pns);
	return -KVP_S_INTERNAL;
}

/*
 * ns_destroy() - free n and everything it holds: the pool pages it has
 * cached, its slabs (back to the pool's budget), its index and tiers
 * (the tier file stays), its table entry. n must have no client and no
 * tier I/O in flight. Returns 0, or -EBUSY (a page is still in use:
 * nothing changed).
 */
static int ns_destroy(struct ns_table *t, struct pool *p, struct ns *n)
{
	uint32_t e;

	/* Without a client, its pool pages are cached: free them; the index
	 * goes with the namespace. */
	for (e = prefix_next(n->idx, PREFIX_NIL); e != PREFIX_NIL; e = prefix_next(n->idx, e))
		if (prefix_where(n->idx, e) == PREFIX_IN_POOL)
			pool_evict(p, prefix_page(n->idx, e));
	if (pool_ns_release(p, n->pool_ns) < 0)
		return -EBUSY;
	table_remove(t, n->id);
	ns_free(n);
	return 0;
}

/* may_create() - j may create a namespace now; else err says why and
 * the status is returned. */
static int may_create(const struct ns_table *t, const struct ns_config *k,
		      const struct ns_joiner *j, const struct kvp_wire_hello *h, char *err,
		      size_t errlen)
{
	const char *name = h->ns;
	uint32_t i, mine = 0;

	if (!j->may_create) {
		snprintf(err, errlen, "namespace '%s' does not exist, and creating it needs "
			 "write rights there", name);
		return -KVP_S_PERM;
	}
	for (i = 0; !j->unlimited && i < t->count; i++)
		mine += t->ns[i]->creator == j->uid;
	if (!j->unlimited && mine >= k->max_per_uid) {
		snprintf(err, errlen, "cannot create namespace '%s': uid %u created %u "
			 "namespaces, --max-namespaces-per-uid is %u; drop one (kvpool "
			 "drop) or ask the daemon's admin to raise it", name,
			 (unsigned)j->uid, mine, k->max_per_uid);
		return -KVP_S_LIMIT;
	}
	if (!j->unlimited && k->spill_dir && k->spill_dir[0] && k->max_spill_per_uid &&
	    (uint64_t)(mine + 1) * k->spill_bytes > k->max_spill_per_uid) {
		char a[32], b[32], c[32];

		snprintf(err, errlen, "cannot create namespace '%s': the tier files of uid "
			 "%u's %u namespaces hold %s, and one more of %s (--spill-size) would "
			 "pass --max-spill-per-uid %s; drop one (kvpool drop) or ask the "
			 "daemon's admin to raise it", name, (unsigned)j->uid, mine,
			 size_text((uint64_t)mine * k->spill_bytes, a, sizeof(a)),
			 size_text(k->spill_bytes, b, sizeof(b)),
			 size_text(k->max_spill_per_uid, c, sizeof(c)));
		return -KVP_S_LIMIT;
	}
	return 0;
}

/*
 * seed_differs() - true when the client derives keys from a key seed of
 * its own (HELLO key_seed_id) that is not the daemon's --key-seed: its
 * keys would never meet the namespace's. err says so without telling
 * the seed, which may be a secret.
 */
static bool seed_differs(const struct ns_config *k, const struct kvp_wire_hello *h,
			 char *err, size_t errlen)
{
	static const uint8_t none[sizeof(h->key_seed_id)];
	uint8_t mine[KEYS_SEED_ID_BYTES];

	if (!memcmp(h->key_seed_id, none, sizeof(none)))
		return false;
	if (k->salt && k->salt[0]) {
		snprintf(err, errlen, "namespace '%s': key_seed cannot be matched: kvpoold "
			 "salts every namespace's root (--key-salt), so keys this client "
			 "derives from a seed never meet the namespace's; key from the root "
			 "the daemon gives (no key seed), or run kvpoold without --key-salt",
			 h->ns);
		return true;
	}
	keys_seed_id(k->seed, mine);
	if (!memcmp(h->key_seed_id, mine, sizeof(mine)))
		return false;
	snprintf(err, errlen, "namespace '%s': key_seed differs: kvpoold derives keys "
		 "from another seed than this client (--key-seed, not told here); "
		 "give both the same one (vLLM: PYTHONHASHSEED, \"vllm-none-hash\" "
		 "when it is unset)", h->ns);
	return true;
}

int ns_join(struct ns_table *t, struct pool *p, const struct ns_config *k,
	    const struct kvp_wire_hello *h, const struct ns_joiner *j, struct ns **out,
	    char *err, size_t errlen)
{
	uint32_t have = 0, sent = 0, scheme;
	const char *field;
	uint64_t pb;
	struct ns *n;
	size_t bad;
	int rc;

	if (!access_name_ok(h->ns)) {
		snprintf(err, errlen, "namespace name '%.63s' is not 1 to 63 letters, "
			 "digits or . _ - : / @", h->ns);
		return -KVP_S_INVAL;
	}
	if (!utf8_printable(h->model, &bad)) {
		snprintf(err, errlen, "namespace '%s': the model identity is not printable "
			 "UTF-8 (byte %zu is 0x%02x: a control character or not UTF-8); name "
			 "the model as its hub does (e.g. meta-llama/Llama-3.1-8B)", h->ns,
			 bad, (unsigned)(unsigned char)h->model[bad]);
		return -KVP_S_INVAL;
	}
	if (h->memory > KVP_MEMORY_HOST) {
		snprintf(err, errlen, "namespace '%s': memory %u is not 0 (the daemon's "
			 "backend) or 1 (host pages)", h->ns, h->memory);
		return -KVP_S_INVAL;
	}
	if (seed_differs(k, h, err, errlen))
		return -KVP_S_MISMATCH;
	n = ns_find(t, h->ns);
	if (!n) {
		rc = may_create(t, k, j, h, err, errlen);
		return rc < 0 ? rc : ns_create(t, p, k, h, j->uid, false, out, err, errlen);
	}

	field = mismatch(n, h, &have, &sent);
	if (!field && h->key_scheme && h->key_scheme != n->key_scheme) {
		field = "key_scheme";
		have = n->key_scheme;
		sent = h->key_scheme;
	}
	if (!field && strcmp(n->model, h->model) != 0)
		field = "model";
	if (!field && h->memory == KVP_MEMORY_HOST && n->be->ops->kind != KVP_BACKEND_HOST)
		field = "memory";
	if (field && n->from_disk && j->may_create) {
		/* Nobody has used what the tier file brought back: a client that
		 * may create the namespace makes it anew with its geometry, and
		 * the file starts cold. A HELLO that could not create one
		 * changes nothing. */
		rc = hello_check(k, h, &pb, &scheme, err, errlen);
		if (rc == 0)
			rc = may_create(t, k, j, h, err, errlen);
		if (rc < 0)
			return rc;
		events_ns_gone(n->events, n, t);
		if (ns_destroy(t, p, n) == 0) {
			log_info("namespace '%s': the first client since the restart sent "
				 "another %s; cold start", h->ns, field);
			return ns_create(t, p, k, h, j->uid, false, out, err, errlen);
		}
	}
	if (field && strcmp(field, "memory") == 0) {
		snprintf(err, errlen, "namespace '%s' holds GPU pages (kvpoold's %s "
			 "backend), this client asks for host pages: give clients that "
			 "need host pages a namespace of their own", n->name,
			 n->be->ops->name);
		return -KVP_S_MISMATCH;
	}
	if (field && strcmp(field, "model") == 0) {
		snprintf(err, errlen, "namespace '%s' holds model '%s', this client "
			 "sent '%.127s': use another namespace name per model",
			 n->name, n->model, h->model);
		return -KVP_S_MISMATCH;
	}
	if (field) {
		snprintf(err, errlen, "namespace '%s' has %s %u, this client sent %u: "
			 "use the namespace's geometry or another namespace name",
			 n->name, field, have, sent);
		return -KVP_S_MISMATCH;
	}
	n->from_disk = false;
	*out = n;
	return 0;
}

uint64_t ns_restore_all(struct ns_table *t, struct pool *p, const struct ns_config *k)
{
	char path[4096], err[512];
	struct kvp_wire_hello h;
	struct spill_ns id;
	struct dirent *de;
	uint64_t pages = 0;
	struct ns *n;
	size_t len;
	DIR *d;
	int rc;

	if (!k->spill_dir || !k->spill_dir[0] || k->spill_discard)
		return 0;
	d = opendir(k->spill_dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		len = strlen(de->d_name);
		if (len < 9 || strcmp(de->d_name + len - 8, ".kvspill"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", k->spill_dir, de->d_name);
		rc = spill_read_ns(path, &id);
		if (rc == -EPERM) {
			log_error("%s is a link, or not a file kvpoold made (another owner, "
				  "or open to others): it is not re-indexed nor used; remove it",
				  path);
			continue;
		}
		if (rc < 0) {
			log_warn("%s is not a kvpool tier file; left alone", path);
			continue;
		}
		memset(&h, 0, sizeof(h));
		memcpy(h.ns, id.name, sizeof(h.ns));
		memcpy(h.model, id.model, sizeof(h.model));
		h.layers = id.layers;
		h.kv_heads = id.kv_heads;
		h.head_dim = id.head_dim;
		h.head_dim_v = id.head_dim_v;
		h.block_tokens = id.block_tokens;
		h.dtype = id.dtype;
		h.key_scheme = id.key_scheme;
		h.memory = id.memory;
		if (h.memory == KVP_MEMORY_HOST && k->host_memory < 0)
			h.memory = KVP_MEMORY_DEFAULT;	/* no host pages now */
		if (!access_name_ok(h.ns) || ns_find(t, h.ns))
			continue;
		if (ns_create(t, p, k, &h, geteuid(), true, &n, err, sizeof(err)) < 0) {
			log_warn("%s: %s; left alone", path, err);
			continue;
		}
		n->from_disk = true;
		pages += prefix_spilled_count(n->idx);
	}
	closedir(d);
	return pages;
}

struct ns *ns_by_name(struct ns_table *t, const char *name)
{
	return ns_find(t, name);
}

bool ns_busy(const struct ns *n)
{
	return n->state == NS_PREPARING || n->clients || n->rate_armed ||
	       (n->tier && spill_get_writing(n->tier));
}

struct ns *ns_gone_by_name(struct ns_table *t, const char *name)
{
	struct ns *g;

	for (g = t->gone; g; g = g->gone_next)
		if (strcmp(g->name, name) == 0)
			return g;
	return NULL;
}

/* unlink_done() - on the loop: a dropped namespace's tier file is gone (or
 * could not be removed); what waited for it goes on. */
static void unlink_done(struct loop_op *op, int res)
{
	struct ns_job *j = (struct ns_job *)op;
	struct ns *g = j->n, **pp;

	for (pp = &j->t->gone; *pp != g; pp = &(*pp)->gone_next)
		;
	*pp = g->gone_next;
	g->job = NULL;
	if (res < 0 && res != -ENOENT)
		log_warn("namespace '%s' was dropped, but its tier file %s cannot be "
			 "removed: %s; remove it by hand, or kvpoold brings the namespace "
			 "back at its next start", g->name, j->path, strerror(-res));
	else
		log_info("namespace '%s': its tier file %s is removed", g->name, j->path);
	j->k->wake(g, 0, NULL);
	free(j);
	free(g);
}

/* gone_start() - remove a dropped namespace's tier file on a worker
 * thread; its stand-in (NS_GONE, on t->gone) holds the name meanwhile.
 * NULL when no thread can be had (the caller removes it itself). */
static struct ns *gone_start(struct ns_table *t, const struct ns_config *k, const char *name,
			     const char *path, uid_t creator)
{
	struct ns_job *j = calloc(1, sizeof(*j));
	struct ns *g = calloc(1, sizeof(*g));

	if (!j || !g || !k->loop || !k->wake)
		goto out_free;
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->state = NS_GONE;
	g->job = j;
	snprintf(j->path, sizeof(j->path), "%s", path);
	j->n = g;
	j->t = t;
	j->k = k;
	j->op.done = unlink_done;
	if (loop_work(k->loop, &j->op, unlink_run, (uint32_t)creator) < 0)
		goto out_free;
	g->gone_next = t->gone;
	t->gone = g;
	return g;
out_free:
	free(j);
	free(g);
	return NULL;
}

int ns_drop(struct ns_table *t, struct pool *p, const struct ns_config *k, struct ns *n,
	    struct ns **gone, char *err, size_t errlen)
{
	struct spill_stats ss;
	char path[4096], name[KVP_NAME_MAX];
	uid_t creator;

	*gone = NULL;
	if (n->state == NS_PREPARING) {
		snprintf(err, errlen, "namespace '%s' is being made (its tier file is "
			 "prepared); try again in a moment", n->name);
		return -EBUSY;
	}
	if (n->clients) {
		snprintf(err, errlen, "namespace '%s' has %u clients; disconnect them "
			 "first (kvpool clients, kvpool disconnect ID)", n->name, n->clients);
		return -EBUSY;
	}
	path[0] = '\0';
	if (n->tier) {
		spill_get_stats(n->tier, &ss);
		if (ss.writing || n->rate_armed) {
			snprintf(err, errlen, "namespace '%s' has %llu tier writes in flight; "
				 "try again in a moment", n->name,
				 (unsigned long long)ss.writing);
			return -EBUSY;
		}
		snprintf(path, sizeof(path), "%s", spill_path(n->tier));
	}
	memcpy(name, n->name, sizeof(name));
	creator = n->creator;
	/* told first, while the index is there (a failing destroy below is a
	 * page still in use: not expected without clients) */
	events_ns_gone(n->events, n, t);
	if (ns_destroy(t, p, n) < 0) {
		snprintf(err, errlen, "namespace '%s' still has pages in use", name);
		return -EBUSY;
	}
	if (path[0]) {
		*gone = gone_start(t, k, name, path, creator);
		if (*gone) {
			log_info("namespace '%s' dropped: its pages and slabs are gone; its "
				 "tier file is being removed", name);
			return 0;
		}
		unlink(path);
	}
	log_info("namespace '%s' dropped: its pages, slabs and tier file are gone", name);
	return 0;
}

void ns_table_fini(struct ns_table *t)
{
	struct ns *g;
	uint32_t i;

	for (i = 0; i < t->count; i++)
		if (t->ns[i])
			ns_free(t->ns[i]);
	t->count = 0;
	while ((g = t->gone)) {
		t->gone = g->gone_next;
		ns_free(g);
	}
}
