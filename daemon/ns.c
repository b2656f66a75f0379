/* SPDX-License-Identifier: MIT */
/*
 * ns.c - the namespace table: creation on first HELLO, exact geometry
 * matching after that, and the page size a geometry implies.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "client/wire.h"
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
		if (strcmp(t->ns[i]->name, name) == 0)
			return t->ns[i];
	return NULL;
}

/*
 * ns_root() - the root key of a new namespace: H(seed) of its scheme,
 * which is vLLM's NONE_HASH for the same seed; with a salt, the key of an
 * empty block under that root with extra keys [salt, namespace name], so
 * that salted namespaces never share a key with anything else.
 */
static int ns_root(struct ns *n, const struct ns_keys *k)
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

int ns_join(struct ns_table *t, struct pool *p, const struct ns_keys *k,
	    const struct kvp_wire_hello *h, struct ns **out, char *err, size_t errlen)
{
	uint32_t scheme = h->key_scheme ? h->key_scheme : k->scheme;
	const char *field;
	uint32_t have, sent;
	uint64_t pb;
	struct ns *n;
	int pns;

	if (!name_ok(h->ns)) {
		snprintf(err, errlen, "namespace name '%.63s' is not 1 to 63 letters, "
			 "digits or . _ - : / @", h->ns);
		return -KVP_S_INVAL;
	}
	n = ns_find(t, h->ns);
	if (n) {
		field = mismatch(n, h, &have, &sent);
		if (field) {
			snprintf(err, errlen, "namespace '%s' has %s %u, this client sent %u: "
				 "use the namespace's geometry or another namespace name",
				 n->name, field, have, sent);
			return -KVP_S_MISMATCH;
		}
		if (h->key_scheme && h->key_scheme != n->key_scheme) {
			snprintf(err, errlen, "namespace '%s' uses key scheme %u, this "
				 "client asked for %u: omit the scheme or use the "
				 "namespace's", n->name, n->key_scheme, h->key_scheme);
			return -KVP_S_MISMATCH;
		}
		if (strcmp(n->model, h->model) != 0) {
			snprintf(err, errlen, "namespace '%s' holds model '%s', this client "
				 "sent '%.127s': use another namespace name per model",
				 n->name, n->model, h->model);
			return -KVP_S_MISMATCH;
		}
		*out = n;
		return 0;
	}

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
	if (t->count >= POOL_MAX_NS) {
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
	n->id = t->count;
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
	t->ns[t->count++] = n;
	*out = n;
	return 0;
}

void ns_table_fini(struct ns_table *t)
{
	uint32_t i;

	for (i = 0; i < t->count; i++) {
		prefix_free(t->ns[i]->idx);
		free(t->ns[i]);
	}
	t->count = 0;
}
