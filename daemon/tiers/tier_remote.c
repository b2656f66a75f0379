/* SPDX-License-Identifier: MIT */
/*
 * tier_remote.c - the remote tier in the daemon (see tier_remote.h).
 *
 * A fetch owns fresh PRIVATE pages, one per block asked for, until every
 * GET has ended; only then are the blocks indexed, in chain order up to
 * the first one that did not come back, each under its parent, so that no
 * block is indexed behind a missing one. The request is then served again
 * from the start, marked as tried, so it never fetches twice.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/keys.h"
#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/remote/remote.h"
#include "daemon/store/lease.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/tier.h"
#include "daemon/tiers/tier_remote.h"

/* The bytes of a namespace's identity that tell a change (SIGHUP's
 * remote-share) while a request is in flight. */
#define RID_BYTES 16u

struct rfetch {
	void (*done)(void *arg, const uint8_t *gone, uint32_t ngone);	/* the caller's */
	void *arg;
	struct ns *n;
	uint8_t rid[RID_BYTES];		/* the identity it asked under */
	uint32_t count, outstanding;
	uint8_t parent[KVP_KEY_BYTES];	/* of the first block */
	uint8_t *keys;			/* [count][KVP_KEY_BYTES] */
	uint32_t *ids;			/* [nids_blocks][block_tokens]: the request's
					 * token ids of the leading blocks, or NULL */
	uint32_t nids_blocks;
	uint64_t *pages;		/* [count] */
	int *res;			/* [count] */
	struct rfetch_one {
		struct rfetch *f;
		uint32_t i;
	} *ones;
	/* a WAIT's: whether its first missing key and its handoff's were
	 * abandoned on another machine (tier_remote_abandoned()) */
	struct rmark {
		struct rfetch *f;
		uint8_t key[KVP_KEY_BYTES];	/* the block's key */
		uint64_t until;			/* the value: le64, wall-clock ms */
		int res;
	} marks[TIER_REMOTE_GONE_MAX];
	uint32_t nmarks;
};

/* how far ahead of this one another daemon's clock may run */
#define MARK_SKEW_MS	60000u

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* mark_key() - the name under which block key's abandon is kept: no
 * block's (a hash of another domain). */
static void mark_key(const uint8_t *key, uint8_t out[KVP_KEY_BYTES])
{
	static const char domain[] = "kvpool abandoned block 1";
	struct keys_sha256 s;

	keys_sha256_init(&s);
	keys_sha256_update(&s, domain, sizeof(domain));
	keys_sha256_update(&s, key, KVP_KEY_BYTES);
	keys_sha256_final(&s, out);
}

void tier_remote_abandoned(struct ns *n, const uint8_t *key, bool abandoned)
{
	uint64_t until = htole64(abandoned ? wall_ms() + KVP_WIRE_ABANDON_MS : 0);
	uint8_t mk[KVP_KEY_BYTES];

	if (!n->remote)
		return;
	mark_key(key, mk);
	/* a cache's write: a tier that cannot take it now loses it, and the
	 * waits elsewhere last until their deadlines, as before; Redis drops
	 * it once no daemon would take it */
	(void)remote_note_put(n->remote, n->rid, mk, &until, sizeof(until),
			      KVP_WIRE_ABANDON_MS + MARK_SKEW_MS);
}

/*
 * A SET in flight whose answer the KV events wait for: its block is
 * announced in the remote medium once Redis has it, if it is still
 * indexed then. A namespace that goes first unhooks its own
 * (remote_ns_gone()). Only with KV events on.
 */
struct rput {
	struct rput *prev, *next;
	struct ns *n;		/* NULL: its namespace is gone */
	uint8_t rid[RID_BYTES];	/* the identity it was sent under */
	uint8_t key[KVP_KEY_BYTES];
};
static struct rput *rputs;

static void put_done(void *arg, int res)
{
	struct rput *q = arg;
	uint32_t e;

	if (q->prev)
		q->prev->next = q->next;
	else
		rputs = q->next;
	if (q->next)
		q->next->prev = q->prev;
	if (res == 0 && q->n && !memcmp(q->rid, q->n->rid, RID_BYTES)) {
		e = prefix_find(q->n->idx, q->key);
		if (e != PREFIX_NIL && !prefix_tokens(q->n->idx, e))
			prefix_remote_stored(q->n->idx, e);
	}
	free(q);
}

/* remote_ns_gone() - tier_ops.ns_gone: SETs still in flight forget n. */
static void remote_ns_gone(struct ns *n)
{
	struct rput *q;

	for (q = rputs; q; q = q->next)
		if (q->n == n)
			q->n = NULL;
}

/*
 * touch_up() - e and the blocks above it that Redis has are TOUCHed,
 * deepest first: when a block is written or fetched, its ancestors count
 * as used at least as late as it. Under allkeys-lru Redis then drops
 * the tails of chains before their heads, and what it keeps can be
 * served: a head that many prompts share is written once, and would
 * otherwise be the oldest key of all, and go first, taking every chain
 * below it with it. remote_touch() sends one a second per key at most;
 * a block touched this second had its ancestors touched then too, so the
 * walk stops there (a chain costs its depth a second, not its square).
 */
static void touch_up(struct ns *n, uint32_t e)
{
	unsigned k;

	for (k = 0; e != PREFIX_NIL && k < 1024; e = prefix_parent(n->idx, e), k++)
		if (prefix_remote(n->idx, e) && !prefix_tokens(n->idx, e) &&
		    remote_touch(n->remote, n->rid, prefix_key(n->idx, e)))
			break;
}

/* remote_left_pool() - the full block e is leaving the pool (to a lower
 * tier or out of the index); page holds its bytes until this returns. */
static void remote_left_pool(struct ns *n, uint32_t e, const void *page)
{
	struct rput *q = NULL;

	if (!n->remote || prefix_tokens(n->idx, e) || prefix_remote(n->idx, e))
		return;		/* partial pages stay local; Redis has it */
	if (n->events) {	/* without memory: sent all the same, not announced */
		q = calloc(1, sizeof(*q));
		if (q) {
			q->n = n;
			memcpy(q->rid, n->rid, RID_BYTES);
			memcpy(q->key, prefix_key(n->idx, e), KVP_KEY_BYTES);
		}
	}
	if (remote_put(n->remote, n->be, n->rid, prefix_key(n->idx, e), page, n->page_bytes,
		       q ? put_done : NULL, q) < 0) {
		free(q);
		return;
	}
	if (q) {
		q->next = rputs;
		if (rputs)
			rputs->prev = q;
		rputs = q;
	}
	prefix_set_remote(n->idx, e);
	n->remote_st.sent++;
	touch_up(n, prefix_parent(n->idx, e));
}

void tier_remote_published(struct ns *n, uint32_t e, const void *page)
{
	if (n->remote_through)
		remote_left_pool(n, e, page);
}

/* The remote tier in the walk: a copy of every full block that leaves the
 * pool (written back), holding no entry of the index; what it has comes
 * back through tier_remote_fetch(). */
const struct tier_ops tier_remote_ops = {
	.name = "remote",
	.copy = true,
	.left_pool = remote_left_pool,
	.ns_gone = remote_ns_gone,
};

/* index_fetched() - index the leading blocks that came back, cached;
 * free every other page. */
static void index_fetched(struct rfetch *f)
{
	struct ns *n = f->n;
	struct pool *p = n->pool;
	const uint8_t *parent_key = f->parent;
	uint32_t i, e, parent = prefix_find(n->idx, f->parent);
	bool chain = !memcmp(f->rid, n->rid, RID_BYTES);	/* else asked for another */

	for (i = 0; i < f->count; i++) {
		const uint8_t *key = f->keys + (size_t)i * KVP_KEY_BYTES;

		if (chain && f->res[i] == 0 && i > 0 && parent == PREFIX_NIL)
			chain = false;	/* its parent went meanwhile */
		if (chain && f->res[i] == 0) {
			e = prefix_find(n->idx, key);
			if (e == PREFIX_NIL) {
				e = prefix_insert_block(n->idx, key, parent_key, parent,
							f->pages[i], 0, i < f->nids_blocks ?
							f->ids + (size_t)i * n->block_tokens :
							NULL, n->block_tokens);
				if (e != PREFIX_NIL) {
					pool_publish(p, f->pages[i]);
					pool_set_tag(p, f->pages[i], e);
					prefix_remote_stored(n->idx, e);	/* not sent back */
					lease_put(p, n, f->pages[i]);	/* cached */
					f->pages[i] = 0;
					n->remote_st.restored++;
				}
			}
			if (e == PREFIX_NIL)
				chain = false;
			parent = e;
			parent_key = key;
		} else {
			chain = false;
		}
		if (f->pages[i])
			pool_unref(p, f->pages[i]);	/* PRIVATE: free again */
	}
}

/* fetch_end() - the last GET of f ended: index what came back, tell the
 * caller what was abandoned elsewhere, free f. */
static void fetch_end(struct rfetch *f)
{
	uint8_t gone[TIER_REMOTE_GONE_MAX * KVP_KEY_BYTES];
	uint64_t now = wall_ms(), until;
	uint32_t i, ngone = 0;

	index_fetched(f);
	for (i = 0; i < f->nmarks && !memcmp(f->rid, f->n->rid, RID_BYTES); i++) {
		until = le64toh(f->marks[i].until);
		/* holding still, and not further ahead than any can */
		if (f->marks[i].res == 0 && until > now &&
		    until <= now + KVP_WIRE_ABANDON_MS + MARK_SKEW_MS) {
			memcpy(gone + (size_t)ngone++ * KVP_KEY_BYTES, f->marks[i].key,
			       KVP_KEY_BYTES);
		}
	}
	f->done(f->arg, gone, ngone);	/* now the pool has what came back */
	free(f->keys);
	free(f->ids);
	free(f->pages);
	free(f->res);
	free(f->ones);
	free(f);
}

static void fetch_done(void *arg, int res)
{
	struct rfetch_one *o = arg;
	struct rfetch *f = o->f;

	f->res[o->i] = res;
	if (!--f->outstanding)
		fetch_end(f);
}

static void mark_done(void *arg, int res)
{
	struct rmark *m = arg;
	struct rfetch *f = m->f;

	m->res = res;
	if (!--f->outstanding)
		fetch_end(f);
}

/* ask_marks() - with a WAIT, ask whether keys[from] and the handoff's key
 * were abandoned on another machine; each GET that went out holds f. */
static void ask_marks(struct rfetch *f, const struct kvp_wire_acquire *a, const uint8_t *first,
		      const uint8_t *handoff)
{
	const uint8_t *ask[TIER_REMOTE_GONE_MAX] = { first, handoff };
	uint8_t mk[KVP_KEY_BYTES];
	uint32_t i;

	if (!(a->flags & KVP_WIRE_ACQ_WAIT))
		return;
	for (i = 0; i < TIER_REMOTE_GONE_MAX; i++) {
		struct rmark *m = &f->marks[f->nmarks];

		if (!ask[i] || (i && !memcmp(ask[i], first, KVP_KEY_BYTES)))
			continue;
		*m = (struct rmark){ .f = f, .res = -EAGAIN };
		memcpy(m->key, ask[i], KVP_KEY_BYTES);
		mark_key(ask[i], mk);
		if (remote_note_get(f->n->remote, f->n->rid, mk, &m->until, sizeof(m->until),
				    mark_done, m) < 0)
			continue;
		f->nmarks++;
		f->outstanding++;
	}
}

/*
 * worth_it() - fetching count blocks is faster than computing them at the
 * prefill rate (tokens/s: the client's, else the daemon's; 0: always
 * fetch) and within the client's cut-off (us; 0: none). Before anything
 * is measured, a fetch is the measurement.
 */
static bool worth_it(struct ns *n, const struct kvp_wire_acquire *a, uint32_t count)
{
	uint64_t fetch = remote_fetch_ns(n->remote, count, n->page_bytes);
	uint64_t rate = a->prefill_rate ? a->prefill_rate : n->remote_prefill_rate;
	double compute;

	if (fetch == UINT64_MAX)
		return false;
	if (a->remote_max_us == KVP_REMOTE_NEVER ||
	    (a->remote_max_us && fetch > (uint64_t)a->remote_max_us * 1000u)) {
		n->remote_st.skipped_slow++;
		return false;
	}
	if (!rate)
		return true;
	compute = (double)count * n->block_tokens * 1e9 / (double)rate;
	if ((double)fetch <= compute)
		return true;
	n->remote_st.skipped_slow++;
	return false;
}

/* keep_ids() - with KV events, the request's token ids of the blocks f
 * fetches (as far as they reach), for the events that announce them. */
static void keep_ids(struct rfetch *f, const struct kvp_wire_acquire *a, const uint8_t *keys,
		     uint32_t from)
{
	const uint8_t *raw = keys + (size_t)a->nkeys * KVP_KEY_BYTES;
	uint32_t bt = f->n->block_tokens, nb, i;

	nb = a->ntokens / bt > from ? a->ntokens / bt - from : 0;
	if (nb > f->count)
		nb = f->count;
	if (!f->n->events || !nb)
		return;
	f->ids = malloc((size_t)nb * bt * sizeof(*f->ids));
	if (!f->ids)
		return;		/* announced without them */
	for (i = 0; i < nb * bt; i++)
		f->ids[i] = wire_u32_at(raw, (size_t)from * bt + i);
	f->nids_blocks = nb;
}

/* marks_only() - a WAIT whose blocks are not fetched (not worth it, no
 * room, its node refuses): it asks whether they were abandoned all the
 * same, unless the client never lets it ask the tier. True when asked:
 * done() follows as for a fetch. */
static bool marks_only(struct ns *n, const struct kvp_wire_acquire *a, const uint8_t *first,
		       const uint8_t *handoff,
		       void (*done)(void *arg, const uint8_t *gone, uint32_t ngone), void *arg)
{
	struct rfetch *f;

	if (!(a->flags & KVP_WIRE_ACQ_WAIT) || a->remote_max_us == KVP_REMOTE_NEVER)
		return false;
	f = calloc(1, sizeof(*f));
	if (!f)
		return false;
	f->done = done;
	f->arg = arg;
	f->n = n;
	memcpy(f->rid, n->rid, RID_BYTES);
	f->outstanding = 1;	/* held while sending */
	ask_marks(f, a, first, handoff);
	if (!f->nmarks) {
		free(f);
		return false;
	}
	f->outstanding--;
	return true;
}

bool tier_remote_fetch(struct ns *n, const struct kvp_wire_acquire *a, const uint8_t *keys,
		       uint32_t from, const uint8_t *handoff,
		       void (*done)(void *arg, const uint8_t *gone, uint32_t ngone), void *arg)
{
	struct pool *p = n->pool;
	struct rfetch *f;
	char msg[256];
	uint32_t i, sent = 0, nkeys = a->nkeys, count = nkeys - from;

	if (!n->remote || from >= nkeys || !remote_up(n->remote))
		return false;
	if (count > n->remote_fetch_max)
		count = n->remote_fetch_max;
	if (!worth_it(n, a, count))
		return marks_only(n, a, keys + (size_t)from * KVP_KEY_BYTES, handoff, done, arg);
	f = calloc(1, sizeof(*f));
	if (!f)
		return false;
	f->keys = malloc((size_t)count * KVP_KEY_BYTES);
	f->pages = calloc(count, sizeof(*f->pages));
	f->res = calloc(count, sizeof(*f->res));
	f->ones = calloc(count, sizeof(*f->ones));
	if (!f->keys || !f->pages || !f->res || !f->ones)
		goto out_free;
	/* room for what comes back; the tiers not taking it now is no reason
	 * to wait: serve what the pool has */
	if (tier_make_room(p, n, count) < 0 ||
	    pool_alloc(p, n->pool_ns, count, f->pages, msg, sizeof(msg)) < 0)
		goto out_free;
	f->done = done;
	f->arg = arg;
	f->n = n;
	memcpy(f->rid, n->rid, RID_BYTES);
	f->count = count;
	memcpy(f->parent, from ? keys + (size_t)(from - 1) * KVP_KEY_BYTES : a->parent,
	       KVP_KEY_BYTES);
	memcpy(f->keys, keys + (size_t)from * KVP_KEY_BYTES, (size_t)count * KVP_KEY_BYTES);
	keep_ids(f, a, keys, from);
	f->outstanding = 1;	/* held while sending: no end before the last */
	for (i = 0; i < count; i++) {
		f->ones[i] = (struct rfetch_one){ f, i };
		f->res[i] = -EAGAIN;
		if (remote_get(n->remote, n->be, n->rid, f->keys + (size_t)i * KVP_KEY_BYTES,
			       pool_page_addr(p, f->pages[i]), n->page_bytes, fetch_done,
			       &f->ones[i]) < 0)
			break;	/* the blocks after it would not be indexed */
		f->outstanding++;
		sent++;
	}
	if (!sent) {
		for (i = 0; i < count; i++)
			pool_unref(p, f->pages[i]);
		goto out_free;
	}
	ask_marks(f, a, f->keys, handoff);
	n->remote_st.fetches++;
	/* what is above the fetched blocks, here in the pool, is used now in
	 * Redis too: it goes after them, not before */
	touch_up(n, prefix_find(n->idx, f->parent));
	/* the send's own hold: the GETs end later, from the loop */
	f->outstanding--;
	return true;
out_free:
	free(f->keys);
	free(f->ids);
	free(f->pages);
	free(f->res);
	free(f->ones);
	free(f);
	return marks_only(n, a, keys + (size_t)from * KVP_KEY_BYTES, handoff, done, arg);
}
