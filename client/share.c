/* SPDX-License-Identifier: MIT */
/*
 * share.c - libkvpool's prefix sharing: the namespace's root key and
 * block keys, kvp_acquire() (the pages of a chain of keys the pool
 * holds, mapped and held), kvp_publish() and its variants (full blocks
 * and a partial one under their keys), and the remote tier's policy.
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvpool.h"
#include "client/cuda_ipc.h"
#include "client/errors.h"
#include "client/client_int.h"
#include "client/hset.h"
#include "client/keys.h"
#include "client/wire.h"

/* --- sharing ------------------------------------------------------------- */

/* parent_or_root() - the key bytes of parent, or of the namespace's root. */
static const uint8_t *parent_or_root(const struct kvp_client *c, const kvp_key *parent)
{
	return parent ? parent->b : c->hello.root_key;
}

KVP_API int kvp_root_key(const kvp_client *c, kvp_key *root)
{
	if (!c || !root)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	memcpy(root->b, c->hello.root_key, sizeof(root->b));
	return 0;
}

KVP_API uint32_t kvp_block_tokens(const kvp_client *c)
{
	return c && c->has_ns ? c->hello.block_tokens : 0;
}

KVP_API int kvp_block_keys(const kvp_client *c, const kvp_key *parent,
			   const uint32_t *tokens, size_t ntokens,
			   const kvp_extra *extras, size_t nextras, kvp_key *keys)
{
	kvp_key root;

	if (!c)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	if (!parent) {
		memcpy(root.b, c->hello.root_key, sizeof(root.b));
		parent = &root;
	}
	return kvp_key_chain(c->hello.key_scheme, parent, tokens, ntokens,
			     c->hello.block_tokens, extras, nextras, keys);
}

/* client_remember() - add n handles to the held set; on failure the set is as
 * before and the caller gives the pages back. */
int client_remember(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (client_held_add(c, pages[i]) < 0) {
			while (i--)
				client_held_sub(c, pages[i]);
			return -ENOMEM;
		}
	}
	return 0;
}

/* client_map_all() - map the slabs of n held pages. */
int client_map_all(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i;
	int rc;

	for (i = 0; i < n; i++) {
		rc = client_map_slab(c, KVP_HANDLE_SLAB(pages[i]));
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* the flags of kvp_acquire_opts are the wire's */
_Static_assert(KVP_ACQUIRE_LOAD == KVP_WIRE_ACQ_LOAD && KVP_ACQUIRE_WAIT == KVP_WIRE_ACQ_WAIT &&
	       KVP_ACQUIRE_HANDOFF == KVP_WIRE_ACQ_HANDOFF &&
	       KVP_ACQUIRE_SOURCES == KVP_WIRE_ACQ_SOURCES, "KVP_ACQUIRE_* are the wire's flags");
_Static_assert(KVP_SOURCE_POOL == KVP_SRC_POOL && KVP_SOURCE_HOST == KVP_SRC_HOST &&
	       KVP_SOURCE_NVME == KVP_SRC_NVME && KVP_SOURCE_REMOTE == KVP_SRC_REMOTE,
	       "KVP_SOURCE_* are the wire's");
#define ACQUIRE_FLAGS	(KVP_ACQUIRE_LOAD | KVP_ACQUIRE_WAIT | KVP_ACQUIRE_HANDOFF | \
			 KVP_ACQUIRE_SOURCES)
/* the first kvp_acquire_opts' size: a caller's may not be smaller (a
 * struct cut short would cut its last field: the handoff's key) */
#define ACQUIRE_OPTS_V1	48u
_Static_assert(offsetof(kvp_acquire_opts, sources) == ACQUIRE_OPTS_V1 &&
	       sizeof(kvp_acquire_opts) == ACQUIRE_OPTS_V1 + sizeof(uint8_t *),
	       "kvp_acquire_opts grows only at its end, and then ACQUIRE_OPTS_V1 stays");

/* acquire_batch() - one ACQUIRE of n keys with ntokens tokens from the
 * first key's block on, with options o. */
static int acquire_batch(struct kvp_client *c, const uint8_t *parent,
			 const kvp_key *keys, size_t n, const uint32_t *tokens,
			 size_t ntokens, kvp_page *pages, kvp_partial *partial,
			 const kvp_acquire_opts *o, uint8_t *sources)
{
	struct kvp_wire_acquire a = { .nkeys = (uint32_t)n, .ntokens = (uint32_t)ntokens,
				      .prefill_rate = o->prefill_rate,
				      .remote_max_us = o->remote_max_us,
				      .flags = o->flags, .wait_ms = o->wait_ms };
	struct kvp_wire_acquire_reply rep;
	size_t len = 0, i, klen = n * KVP_KEY_BYTES, tlen = ntokens * sizeof(*tokens);
	size_t hlen = o->flags & KVP_ACQUIRE_HANDOFF ? KVP_KEY_BYTES : 0;
	uint8_t *tmp;
	int rc;

	memcpy(a.parent, parent, sizeof(a.parent));
	/* keys, tokens and the handoff's key travel as one tail of the message */
	tmp = malloc(klen + tlen + hlen + 1);
	if (!tmp)
		return -ENOMEM;
	if (klen)
		memcpy(tmp, keys, klen);
	if (tlen)
		memcpy(tmp + klen, tokens, tlen);
	if (hlen)
		memcpy(tmp + klen + tlen, o->handoff.b, hlen);
	rc = client_call(c, KVP_OP_ACQUIRE, &a, sizeof(a), tmp, klen + tlen + hlen, &len, NULL);
	free(tmp);
	if (rc < 0)
		return rc;
	if (len < sizeof(rep))
		return -EPROTO;
	memcpy(&rep, c->buf + KVP_WIRE_HDR_SIZE, sizeof(rep));
	if (rep.hits > n || len != sizeof(rep) + (size_t)rep.hits * 8 +
	    (o->flags & KVP_ACQUIRE_SOURCES ? ((size_t)rep.hits + 7) / 8 * 8 : 0) ||
	    (rep.partial_tokens && !rep.partial_page))
		return -EPROTO;
	for (i = 0; i < rep.hits; i++)
		pages[i] = wire_handle_at(c->buf + KVP_WIRE_HDR_SIZE + sizeof(rep), i);
	if (sources && rep.hits)	/* each block's KVP_SRC_*, after the handles */
		memcpy(sources, c->buf + KVP_WIRE_HDR_SIZE + sizeof(rep) + (size_t)rep.hits * 8,
		       rep.hits);
	rc = client_remember(c, pages, rep.hits);
	if (rc < 0) {
		client_send_release(c, pages, rep.hits);
		if (rep.partial_tokens)
			client_send_release(c, &rep.partial_page, 1);
		return rc;
	}
	if (rep.partial_tokens) {
		rc = client_remember(c, &rep.partial_page, 1);
		if (rc < 0) {
			client_release_batch(c, pages, rep.hits);
			client_send_release(c, &rep.partial_page, 1);
			return rc;
		}
	}
	if (partial && rep.partial_tokens) {
		partial->page = rep.partial_page;
		partial->tokens = rep.partial_tokens;
	}
	rc = client_map_all(c, pages, rep.hits);
	if (rc == 0 && rep.partial_tokens)
		rc = client_map_all(c, &rep.partial_page, 1);
	return rc < 0 ? rc : (int)rep.hits;
}

/* defaults() - the options kvp_acquire() uses on c (c->mu held). */
static void defaults(const struct kvp_client *c, kvp_acquire_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->flags = c->acquire_flags | (c->wait_ms ? KVP_ACQUIRE_WAIT : 0);
	o->wait_ms = c->wait_ms;
	o->prefill_rate = c->prefill_rate;
	o->remote_max_us = c->remote_max_us;
}

/* acquire() - kvp_acquire() with options o, or c's when o is NULL. */
static int acquire(kvp_client *c, const kvp_key *parent, const kvp_key *keys, size_t n,
		   const uint32_t *tokens, size_t ntokens, kvp_page *pages,
		   kvp_partial *partial, const kvp_acquire_opts *o)
{
	size_t per, done = 0, k, bt, from, cnt;
	kvp_acquire_opts mine;
	const uint8_t *par;
	int rc = 0;

	if (!c || (n && (!keys || !pages)) || (ntokens && (!tokens || !partial)) ||
	    n > INT32_MAX)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	bt = c->hello.block_tokens;
	if (ntokens >= (n + 1) * bt)
		return -EINVAL;
	if (partial)
		*partial = (kvp_partial){ 0, 0 };
	pthread_mutex_lock(&c->mu);
	if (!o) {
		defaults(c, &mine);
		o = &mine;
	}
	/* keys per message: each with its block's tokens when there are any
	 * (and the handoff's key after them) */
	per = (c->buf_size - KVP_WIRE_HDR_SIZE - sizeof(struct kvp_wire_acquire) -
	       bt * sizeof(*tokens) - (o->flags & KVP_ACQUIRE_HANDOFF ? KVP_KEY_BYTES : 0)) /
	      (KVP_KEY_BYTES + (ntokens ? bt * sizeof(*tokens) : 0));
	if (!per) {	/* a block's tokens fill a message: none can be asked */
		pthread_mutex_unlock(&c->mu);
		return -EMSGSIZE;
	}
	par = parent_or_root(c, parent);
	do {
		k = n - done < per ? n - done : per;
		/* this batch's blocks' tokens, and up to a block after them */
		from = done * bt;
		cnt = from < ntokens ? ntokens - from : 0;
		if (cnt > (k + 1) * bt - 1)
			cnt = (k + 1) * bt - 1;
		rc = acquire_batch(c, par, keys + done, k, cnt ? tokens + from : NULL, cnt,
				   pages + done, partial, o, o->sources ? o->sources + done : NULL);
		if (rc < 0)
			break;
		done += (size_t)rc;
		if ((size_t)rc < k || (partial && partial->tokens))
			break;
		par = keys[done - 1].b;
	} while (done < n);
	if (rc < 0 && done)	/* give back the earlier batches' pages */
		client_release_batch(c, pages, done);
	pthread_mutex_unlock(&c->mu);
	return rc < 0 ? rc : (int)done;
}

KVP_API int kvp_acquire(kvp_client *c, const kvp_key *parent, const kvp_key *keys,
			size_t n, const uint32_t *tokens, size_t ntokens,
			kvp_page *pages, kvp_partial *partial)
{
	return acquire(c, parent, keys, n, tokens, ntokens, pages, partial, NULL);
}

KVP_API int kvp_acquire_with(kvp_client *c, const kvp_key *parent, const kvp_key *keys,
			     size_t n, const uint32_t *tokens, size_t ntokens,
			     kvp_page *pages, kvp_partial *partial,
			     const kvp_acquire_opts *opts, size_t opts_size)
{
	kvp_acquire_opts o;
	size_t i;

	if (!opts || opts_size < ACQUIRE_OPTS_V1)
		return -EINVAL;
	for (i = sizeof(o); i < opts_size; i++)
		if (((const uint8_t *)opts)[i])
			return -E2BIG;	/* a field this library does not know */
	memset(&o, 0, sizeof(o));
	memcpy(&o, opts, opts_size < sizeof(o) ? opts_size : sizeof(o));
	if ((o.flags & ~ACQUIRE_FLAGS) ||
	    ((o.flags & KVP_ACQUIRE_WAIT) ? !o.wait_ms || o.wait_ms > KVP_WIRE_WAIT_MAX_MS :
					    o.wait_ms || (o.flags & KVP_ACQUIRE_HANDOFF)) ||
	    !(o.flags & KVP_ACQUIRE_SOURCES) != !o.sources)
		return -EINVAL;
	if (c && (o.flags & ~wire_acq_flags(c->proto)))
		return client_needs(c, 9, o.flags & KVP_ACQUIRE_HANDOFF ? "waits for a handoff"
									: "sources of a lookup's blocks");
	return acquire(c, parent, keys, n, tokens, ntokens, pages, partial, &o);
}

KVP_API int kvp_acquire_defaults(kvp_client *c, kvp_acquire_opts *opts, size_t opts_size)
{
	kvp_acquire_opts o;

	if (!c || !opts || opts_size < ACQUIRE_OPTS_V1)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	defaults(c, &o);
	pthread_mutex_unlock(&c->mu);
	memcpy(opts, &o, opts_size < sizeof(o) ? opts_size : sizeof(o));
	if (opts_size > sizeof(o))	/* fields of a newer struct: not set */
		memset((uint8_t *)opts + sizeof(o), 0, opts_size - sizeof(o));
	return 0;
}

KVP_API int kvp_set_acquire_wait(kvp_client *c, uint32_t ms)
{
	if (!c || ms > KVP_WIRE_WAIT_MAX_MS)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	c->wait_ms = ms;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

KVP_API int kvp_set_lookups_counted(kvp_client *c, int counted)
{
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	c->acquire_flags = counted ? 0 : KVP_WIRE_ACQ_LOAD;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* probe_batch() - one ACQUIRE PROBE of n keys after parent. */
static int probe_batch(struct kvp_client *c, const uint8_t *parent, const kvp_key *keys,
		       size_t n)
{
	struct kvp_wire_acquire a = { .nkeys = (uint32_t)n, .flags = KVP_WIRE_ACQ_PROBE };
	struct kvp_wire_acquire_reply rep;
	size_t len = 0;
	int rc;

	memcpy(a.parent, parent, sizeof(a.parent));
	rc = client_call(c, KVP_OP_ACQUIRE, &a, sizeof(a), keys, n * KVP_KEY_BYTES, &len, NULL);
	if (rc < 0)
		return rc;
	if (len != sizeof(rep))
		return -EPROTO;
	memcpy(&rep, c->buf + KVP_WIRE_HDR_SIZE, sizeof(rep));
	if (rep.hits > n || rep.partial_tokens || rep.partial_page)
		return -EPROTO;
	return (int)rep.hits;
}

KVP_API int kvp_contains(kvp_client *c, const kvp_key *parent, const kvp_key *keys, size_t n)
{
	size_t per, done = 0, k;
	const uint8_t *par;
	int rc = 0;

	if (!c || (n && !keys) || n > INT32_MAX)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pthread_mutex_lock(&c->mu);
	per = (c->buf_size - KVP_WIRE_HDR_SIZE - sizeof(struct kvp_wire_acquire)) / KVP_KEY_BYTES;
	par = parent_or_root(c, parent);
	while (done < n) {
		k = n - done < per ? n - done : per;
		rc = probe_batch(c, par, keys + done, k);
		if (rc < 0)
			break;
		done += (size_t)rc;
		if ((size_t)rc < k)
			break;
		par = keys[done - 1].b;
	}
	pthread_mutex_unlock(&c->mu);
	return rc < 0 ? rc : (int)done;
}

KVP_API int kvp_set_remote_policy(kvp_client *c, uint32_t prefill_rate, uint32_t max_us)
{
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	c->prefill_rate = prefill_rate;
	c->remote_max_us = max_us;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* publish() - kvp_publish_tokens() without the stream: one PUBLISH per
 * message's worth of entries (and their tokens). */
static int publish(kvp_client *c, const kvp_key *parent, const kvp_page *pages,
		   const kvp_key *keys, const uint32_t *tokens, size_t n, unsigned prio,
		   kvp_page *canonical)
{
	struct kvp_wire_publish pb = { .prio = prio };
	size_t per, done = 0, k, i, len = 0, bt;
	struct kvp_wire_publish_ent *ents;
	const void *handles;
	uint32_t got;
	int rc = 0;

	if (!c || (n && (!pages || !keys || !canonical)))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	bt = tokens ? c->hello.block_tokens : 0;
	pthread_mutex_lock(&c->mu);
	per = (c->buf_size - KVP_WIRE_HDR_SIZE - sizeof(pb)) /
	      (sizeof(*ents) + bt * sizeof(uint32_t));
	ents = malloc((n < per ? n : per) * (sizeof(*ents) + bt * sizeof(uint32_t)) + 1);
	if (!ents) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(pb.parent, parent_or_root(c, parent), sizeof(pb.parent));
	while (done < n) {
		k = n - done < per ? n - done : per;
		pb.n = (uint32_t)k;
		for (i = 0; i < k; i++) {
			ents[i].page = pages[done + i];
			memcpy(ents[i].key, keys[done + i].b, KVP_KEY_BYTES);
		}
		if (bt)		/* then the blocks' token ids, little-endian */
			memcpy(ents + k, tokens + done * bt, k * bt * sizeof(uint32_t));
		rc = client_call(c, KVP_OP_PUBLISH, &pb, sizeof(pb), ents,
			  k * (sizeof(*ents) + bt * sizeof(uint32_t)), &len, NULL);
		if (rc < 0)
			break;
		if (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got, &handles) < 0 ||
		    got != k) {
			rc = -EPROTO;
			break;
		}
		for (i = 0; i < k; i++) {
			canonical[done + i] = wire_handle_at(handles, i);
			/* a dedup hit is one more lease of ours */
			if (canonical[done + i] != pages[done + i] &&
			    client_held_add(c, canonical[done + i]) < 0)
				rc = -ENOMEM;
		}
		if (rc == 0)
			rc = client_map_all(c, canonical + done, k);
		if (rc < 0)
			break;
		memcpy(pb.parent, keys[done + k - 1].b, sizeof(pb.parent));
		done += k;
	}
	free(ents);
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_publish(kvp_client *c, const kvp_key *parent, const kvp_page *pages,
			const kvp_key *keys, size_t n, unsigned prio, kvp_page *canonical)
{
	return publish(c, parent, pages, keys, NULL, n, prio, canonical);
}

KVP_API int kvp_publish_tokens(kvp_client *c, struct CUstream_st *stream,
			       const kvp_key *parent, const kvp_page *pages,
			       const kvp_key *keys, const uint32_t *tokens, size_t n,
			       unsigned prio, kvp_page *canonical)
{
	int rc;

	if (stream) {
		last_error[0] = '\0';
		rc = cuda_stream_sync(stream, last_error, sizeof(last_error));
		if (rc < 0)
			return rc;
	}
	return publish(c, parent, pages, keys, tokens, n, prio, canonical);
}

KVP_API int kvp_publish_stream(kvp_client *c, struct CUstream_st *stream,
			       const kvp_key *parent, const kvp_page *pages,
			       const kvp_key *keys, size_t n, unsigned prio,
			       kvp_page *canonical)
{
	return kvp_publish_tokens(c, stream, parent, pages, keys, NULL, n, prio, canonical);
}

KVP_API int kvp_publish_partial(kvp_client *c, const kvp_key *parent, kvp_page page,
				const uint32_t *tokens, size_t ntokens, unsigned prio,
				kvp_page *canonical)
{
	struct kvp_wire_publish_partial pp = { .page = page, .prio = prio };
	const void *handles;
	size_t len = 0;
	uint32_t got;
	int rc;

	if (!c || !tokens || !ntokens || !canonical || ntokens > UINT32_MAX)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pp.ntokens = (uint32_t)ntokens;
	pthread_mutex_lock(&c->mu);
	memcpy(pp.parent, parent_or_root(c, parent), sizeof(pp.parent));
	rc = client_call(c, KVP_OP_PUBLISH_PARTIAL, &pp, sizeof(pp), tokens,
		  ntokens * sizeof(*tokens), &len, NULL);
	if (rc == 0 && (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got,
					  &handles) < 0 || got != 1))
		rc = -EPROTO;
	if (rc == 0) {
		*canonical = wire_handle_at(handles, 0);
		if (*canonical != page)
			rc = client_held_add(c, *canonical);
		if (rc == 0)
			rc = client_map_all(c, canonical, 1);
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* handoff() - one HANDOFF h; its reply's payload (out_len bytes) to out. */
static int handoff(kvp_client *c, struct kvp_wire_handoff *h, void *out, size_t out_len)
{
	size_t len = 0;
	int rc;

	if (!c->has_ns)
		return -ENOTCONN;
	rc = client_needs(c, wire_op_since(KVP_OP_HANDOFF), "handoffs");
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&c->mu);
	rc = client_call(c, KVP_OP_HANDOFF, h, sizeof(*h), NULL, 0, &len, NULL);
	if (rc >= 0 && len != out_len)
		rc = -EPROTO;
	else if (rc >= 0 && out_len)
		memcpy(out, c->buf + KVP_WIRE_HDR_SIZE, out_len);
	pthread_mutex_unlock(&c->mu);
	return rc < 0 ? rc : 0;
}

KVP_API int kvp_handoff_issue(kvp_client *c, const kvp_key *last, uint32_t blocks,
			      uint32_t ttl_ms, kvp_ticket *out)
{
	struct kvp_wire_handoff h = { .what = KVP_HANDOFF_ISSUE, .blocks = blocks,
				      .ttl_ms = ttl_ms };
	struct kvp_wire_ticket t;
	int rc;

	if (!c || !last || !out || !blocks || !ttl_ms || ttl_ms > KVP_WIRE_WAIT_MAX_MS)
		return -EINVAL;
	memcpy(h.key, last->b, KVP_KEY_BYTES);
	rc = handoff(c, &h, &t, sizeof(t));
	if (rc < 0)
		return rc;
	_Static_assert(sizeof(t) == sizeof(out->b), "a ticket is its wire form");
	memcpy(out->b, &t, sizeof(t));
	return 0;
}

KVP_API int kvp_handoff_check(kvp_client *c, const kvp_ticket *t, const kvp_key *last,
			      uint32_t *blocks)
{
	struct kvp_wire_handoff h = { .what = KVP_HANDOFF_CHECK };
	struct kvp_wire_handoff_left left;
	int rc;

	if (!c || !t || !last)
		return -EINVAL;
	memcpy(h.key, last->b, KVP_KEY_BYTES);
	memcpy(&h.ticket, t->b, sizeof(h.ticket));	/* as given: kvpoold judges it */
	rc = handoff(c, &h, &left, sizeof(left));
	if (rc < 0)
		return rc;
	if (!left.left_ms || left.left_ms > KVP_WIRE_WAIT_MAX_MS)
		return -EPROTO;
	if (blocks)
		*blocks = h.ticket.blocks;
	return (int)left.left_ms;
}

KVP_API int kvp_handoff_abandon(kvp_client *c, const kvp_key *key)
{
	struct kvp_wire_handoff h = { .what = KVP_HANDOFF_ABANDON };

	if (!c || !key)
		return -EINVAL;
	memcpy(h.key, key->b, KVP_KEY_BYTES);
	return handoff(c, &h, NULL, 0);
}
