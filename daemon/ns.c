/* SPDX-License-Identifier: MIT */
/*
 * ns.c - the namespace table: creation on first HELLO, exact geometry
 * matching after that, and the page size a geometry implies.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpool.h"
#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/ns.h"

/* Bounds on geometry fields: generous, but they keep products in range. */
#define NS_MAX_LAYERS		1024u
#define NS_MAX_KV_HEADS		1024u
#define NS_MAX_HEAD_DIM		4096u
#define NS_MAX_BLOCK_TOKENS	4096u

uint64_t ns_page_bytes(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		       uint32_t block_tokens, uint32_t dtype)
{
	uint64_t b = wire_dtype_bytes(dtype);

	if (!b || !layers || !kv_heads || !head_dim || !block_tokens ||
	    layers > NS_MAX_LAYERS || kv_heads > NS_MAX_KV_HEADS ||
	    head_dim > NS_MAX_HEAD_DIM || block_tokens > NS_MAX_BLOCK_TOKENS)
		return 0;
	/* at most 2^1 * 2^10 * 2^10 * 2^12 * 2^12 * 4: fits in 64 bits */
	return 2 * b * layers * kv_heads * head_dim * block_tokens;
}

/* name_ok() - names are 1..63 bytes of letters, digits and . _ - : / @ */
static bool name_ok(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-:/@", *s))
			return false;
	return true;
}

/* mismatch() - name the first field in which h differs from n, or NULL. */
static const char *mismatch(const struct ns *n, const struct kvp_wire_hello *h,
			    uint32_t *have, uint32_t *sent)
{
	static const char *const names[] = {
		"layers", "kv_heads", "head_dim", "block_tokens", "dtype",
	};
	const uint32_t a[] = { n->layers, n->kv_heads, n->head_dim,
			       n->block_tokens, n->dtype };
	const uint32_t b[] = { h->layers, h->kv_heads, h->head_dim,
			       h->block_tokens, h->dtype };
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

/* The loop's fixed-buffer numbers, one per tier, never reused (a number
 * past the loop's table means plain reads and writes). */
static unsigned next_buffer;

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
	e = prefix_insert(x, m->key, m->key, PREFIX_NIL, 0, m->prio, m->tokens, m->ntokens);
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

/*
 * ns_tier_open() - open n's tier file; if it is warm, re-index its slots
 * and link each entry to its parent block. Returns pages re-indexed, or
 * -errno with err filled.
 */
static int64_t ns_tier_open(struct ns *n, const struct ns_config *k, char *err,
			    size_t errlen)
{
	struct spill_stats st;
	struct scan_ctx sc = { .n = n };
	struct spill_ns id;
	const char *why;
	uint32_t i, p;
	int rc;

	memset(&id, 0, sizeof(id));
	memcpy(id.name, n->name, sizeof(id.name));
	memcpy(id.model, n->model, sizeof(id.model));
	id.layers = n->layers;
	id.kv_heads = n->kv_heads;
	id.head_dim = n->head_dim;
	id.block_tokens = n->block_tokens;
	id.dtype = n->dtype;
	id.key_scheme = n->key_scheme;
	id.page_bytes = n->page_bytes;
	memcpy(id.root, n->root, sizeof(id.root));
	rc = spill_open(&n->tier, k->loop, k->be, k->spill_dir, k->spill_bytes,
			k->spill_discard, &id, next_buffer++, &why, err, errlen);
	if (rc < 0)
		return rc;
	if (why)
		log_info("namespace '%s': cold start of %s: %s", n->name,
			 spill_path(n->tier), why);
	spill_set_rate(n->tier, k->spill_rate);
	spill_get_stats(n->tier, &st);
	n->slot_entry = calloc(st.slots, sizeof(*n->slot_entry));
	sc.entries = calloc(st.slots, sizeof(*sc.entries));
	sc.parents = calloc(st.slots, sizeof(*sc.parents));
	if (!n->slot_entry || !sc.entries || !sc.parents) {
		free(sc.entries);
		free(sc.parents);
		snprintf(err, errlen, "no memory for the slot table of %s", spill_path(n->tier));
		return -ENOMEM;
	}
	if (!why)
		spill_scan(n->tier, scan_slot, &sc);
	for (i = 0; i < sc.count; i++) {
		p = prefix_find(n->idx, sc.parents[i]);
		if (p)
			prefix_set_parent(n->idx, sc.entries[i], p);
	}
	free(sc.entries);
	free(sc.parents);
	return (int64_t)sc.kept;
}

/* ns_free() - a namespace's index, tier and memory (not its pool pages). */
static void ns_free(struct ns *n)
{
	prefix_free(n->idx);
	hosttier_close(n->host);
	spill_close(n->tier);
	free(n->slot_entry);
	free(n);
}

/*
 * ns_create() - a new namespace from h in table slot id (t->count for a
 * new one), its tier opened (and re-indexed when warm). Returns 0 and
 * *out, or a negative enum kvp_status with err filled.
 */
static int ns_create(struct ns_table *t, struct pool *p, const struct ns_config *k,
		     const struct kvp_wire_hello *h, uint32_t id, struct ns **out,
		     char *err, size_t errlen)
{
	uint32_t scheme = h->key_scheme ? h->key_scheme : k->scheme;
	int64_t kept = 0;
	uint64_t pb;
	struct ns *n;
	int pns;

	if (!h->model[0]) {
		snprintf(err, errlen, "namespace '%s': the model identity is empty; "
			 "name the model (e.g. meta-llama/Llama-3.1-8B)", h->ns);
		return -KVP_S_INVAL;
	}
	pb = ns_page_bytes(h->layers, h->kv_heads, h->head_dim, h->block_tokens, h->dtype);
	if (!pb) {
		snprintf(err, errlen, "namespace '%s': bad geometry layers %u kv_heads %u "
			 "head_dim %u block_tokens %u dtype %u (each must be 1..%u/%u/%u/%u, "
			 "dtype 1..4)", h->ns, h->layers, h->kv_heads, h->head_dim,
			 h->block_tokens, h->dtype, NS_MAX_LAYERS, NS_MAX_KV_HEADS,
			 NS_MAX_HEAD_DIM, NS_MAX_BLOCK_TOKENS);
		return -KVP_S_INVAL;
	}
	if (scheme != KVP_WIRE_KEYS_VLLM_SHA256_CBOR && scheme != KVP_WIRE_KEYS_FAST) {
		snprintf(err, errlen, "namespace '%s': key scheme %u is not 1 "
			 "(vllm-sha256-cbor) or 2 (fast)", h->ns, scheme);
		return -KVP_S_INVAL;
	}
	if (id >= POOL_MAX_NS) {
		snprintf(err, errlen, "cannot create namespace '%s': %u namespaces exist",
			 h->ns, t->count);
		return -KVP_S_LIMIT;
	}
	pns = pool_ns_add(p, pb);
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
	if (n)
		n->idx = prefix_new();
	if (!n || !n->idx) {
		free(n);
		snprintf(err, errlen, "out of memory creating namespace '%s'", h->ns);
		return -KVP_S_INTERNAL;
	}
	memcpy(n->name, h->ns, sizeof(n->name));
	memcpy(n->model, h->model, sizeof(n->model));
	n->id = id;
	n->layers = h->layers;
	n->kv_heads = h->kv_heads;
	n->head_dim = h->head_dim;
	n->block_tokens = h->block_tokens;
	n->dtype = h->dtype;
	n->page_bytes = pb;
	n->pool_ns = pns;
	n->key_scheme = scheme;
	n->pinned_quota = pool_ns_capacity(p, pns) * k->pinned_pct / 100;
	ns_root(n, k);
	if (k->host_bytes) {
		if (hosttier_open(&n->host, k->be, k->host_bytes, pb, err, errlen) < 0) {
			ns_free(n);
			return -KVP_S_INTERNAL;
		}
	}
	if (k->spill_dir && k->spill_dir[0]) {
		kept = ns_tier_open(n, k, err, errlen);
		if (kept < 0) {
			ns_free(n);
			return -KVP_S_INTERNAL;
		}
		if (kept)
			log_info("namespace '%s': %lld pages re-indexed from %s", n->name,
				 (long long)kept, spill_path(n->tier));
	}
	t->ns[id] = n;
	if (id == t->count)
		t->count++;
	*out = n;
	return 0;
}

int ns_join(struct ns_table *t, struct pool *p, const struct ns_config *k,
	    const struct kvp_wire_hello *h, struct ns **out, char *err, size_t errlen)
{
	uint32_t have = 0, sent = 0;
	const char *field;
	struct ns *n;

	if (!name_ok(h->ns)) {
		snprintf(err, errlen, "namespace name '%.63s' is not 1 to 63 letters, "
			 "digits or . _ - : / @", h->ns);
		return -KVP_S_INVAL;
	}
	n = ns_find(t, h->ns);
	if (!n)
		return ns_create(t, p, k, h, t->count, out, err, errlen);

	field = mismatch(n, h, &have, &sent);
	if (!field && h->key_scheme && h->key_scheme != n->key_scheme) {
		field = "key_scheme";
		have = n->key_scheme;
		sent = h->key_scheme;
	}
	if (!field && strcmp(n->model, h->model) != 0)
		field = "model";
	if (field && n->from_disk) {
		/* Nobody has used what the tier file brought back: the new
		 * geometry wins and the file starts cold. */
		uint32_t id = n->id;

		log_info("namespace '%s': the first client since the restart sent "
			 "another %s; cold start", n->name, field);
		ns_free(n);
		t->ns[id] = NULL;
		return ns_create(t, p, k, h, id, out, err, errlen);
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
		if (spill_read_ns(path, &id) < 0) {
			log_warn("%s is not a kvpool tier file; left alone", path);
			continue;
		}
		memset(&h, 0, sizeof(h));
		memcpy(h.ns, id.name, sizeof(h.ns));
		memcpy(h.model, id.model, sizeof(h.model));
		h.layers = id.layers;
		h.kv_heads = id.kv_heads;
		h.head_dim = id.head_dim;
		h.block_tokens = id.block_tokens;
		h.dtype = id.dtype;
		h.key_scheme = id.key_scheme;
		if (!name_ok(h.ns) || ns_find(t, h.ns))
			continue;
		if (ns_create(t, p, k, &h, t->count, &n, err, sizeof(err)) < 0) {
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

int ns_drop(struct ns_table *t, struct pool *p, struct ns *n, char *err, size_t errlen)
{
	struct spill_stats ss;
	char path[4096];
	uint32_t e, id = n->id;

	if (n->clients) {
		snprintf(err, errlen, "namespace '%s' has %u clients; disconnect them "
			 "first (kvpool clients, kvpool disconnect ID)", n->name, n->clients);
		return -EBUSY;
	}
	if (n->tier) {
		spill_get_stats(n->tier, &ss);
		if (ss.writing || n->rate_armed) {
			snprintf(err, errlen, "namespace '%s' has %llu tier writes in flight; "
				 "try again in a moment", n->name,
				 (unsigned long long)ss.writing);
			return -EBUSY;
		}
	}
	/* With no client, its pages are cached (or spilled): free the pool
	 * pages; the index goes with the namespace. */
	for (e = prefix_next(n->idx, PREFIX_NIL); e != PREFIX_NIL; e = prefix_next(n->idx, e))
		if (prefix_where(n->idx, e) == PREFIX_IN_POOL)
			pool_evict(p, prefix_page(n->idx, e));
	if (pool_ns_release(p, n->pool_ns) < 0) {
		snprintf(err, errlen, "namespace '%s' still has pages in use", n->name);
		return -EBUSY;
	}
	if (n->tier) {
		snprintf(path, sizeof(path), "%s", spill_path(n->tier));
		unlink(path);
	}
	log_info("namespace '%s' dropped: its pages, slabs and tier file are gone", n->name);
	ns_free(n);
	/* keep the table dense: the last namespace takes the slot */
	t->ns[id] = t->ns[--t->count];
	t->ns[t->count] = NULL;
	if (id < t->count)
		t->ns[id]->id = id;
	return 0;
}

void ns_table_fini(struct ns_table *t)
{
	uint32_t i;

	for (i = 0; i < t->count; i++)
		if (t->ns[i])
			ns_free(t->ns[i]);
	t->count = 0;
}
