/* SPDX-License-Identifier: MIT */
/*
 * model_seq.c - a request's sequence and its kvpool pages: acquire the
 * cached prefix, allocate, publish, release (see model_seq.h).
 *
 * Immutability: a page is frozen once it is published or acquired. The
 * first n_frozen entries of a sequence's block table are frozen and only
 * read; every write goes to a page from kvp_alloc() or kvp_cow() that
 * this sequence holds privately. The prompt's tail page is the one page
 * that is both published early (so that concurrent requests with the
 * same prompt find it) and appended to later (by the decode): it is
 * published as it is after the prefill and the decode goes on in a COW
 * of it, one page copy per request.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_seq.h"

#define BT MODEL_BLOCK_TOKENS

struct seq *seq_new(size_t index, const uint32_t *prompt, uint32_t n,
		    uint32_t max_tokens)
{
	struct seq *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->index = index;
	s->n_prompt = s->n_tokens = n;
	s->max_tokens = max_tokens;
	s->cap = n + max_tokens;
	s->page_cap = (s->cap + BT - 1) / BT;
	s->tokens = malloc(s->cap * sizeof(*s->tokens));
	s->pages = calloc(s->page_cap, sizeof(*s->pages));
	s->table = calloc(s->page_cap, sizeof(*s->table));
	s->keys = calloc(s->page_cap, sizeof(*s->keys));
	if (!s->tokens || !s->pages || !s->table || !s->keys) {
		seq_free(s);
		return NULL;
	}
	memcpy(s->tokens, prompt, n * sizeof(*prompt));
	return s;
}

void seq_free(struct seq *s)
{
	if (!s)
		return;
	free(s->tokens);
	free(s->pages);
	free(s->table);
	free(s->keys);
	free(s);
}

/* seq_set() - block i of s is page p (leased by the caller). */
static int seq_set(kvp_client *c, struct seq *s, uint32_t i, kvp_page p)
{
	void *addr = kvp_page_ptr(c, p);

	if (!addr)
		return -ESTALE;
	s->pages[i] = p;
	s->table[i] = (uint64_t)(uintptr_t)addr;
	return 0;
}

/* parent_of() - the key before block i: NULL (the root) for block 0. */
static const kvp_key *parent_of(const struct seq *s, uint32_t i)
{
	return i ? &s->keys[i - 1] : NULL;
}

int seq_admit(kvp_client *c, bool cache, struct seq *s)
{
	uint32_t nb = s->n_prompt / BT, i;
	kvp_partial part = { 0, 0 };
	kvp_page copy;
	int hits, rc;

	if (!cache)
		return 0;
	rc = kvp_block_keys(c, NULL, s->tokens, s->n_prompt, NULL, 0, s->keys);
	if (rc < 0)
		return rc;
	hits = kvp_acquire(c, NULL, s->keys, nb, s->tokens, s->n_prompt,
			   s->pages, &part);
	if (hits < 0)
		return hits;
	s->n_pages = s->n_frozen = s->hits = (uint32_t)hits;
	for (i = 0; i < s->n_pages; i++) {
		rc = seq_set(c, s, i, s->pages[i]);
		if (rc < 0)
			return rc;
	}
	s->cached = (uint32_t)hits * BT;
	if (part.tokens) {
		/* turn 2 of a chat: append to a private copy of turn 1's tail */
		rc = kvp_cow(c, &part.page, 1, &copy);
		if (rc == 0)
			rc = kvp_release(c, &part.page, 1);
		if (rc == 0)
			rc = seq_set(c, s, s->n_pages, copy);
		if (rc < 0)
			return rc;
		s->n_pages++;
		s->cached += part.tokens;
	}
	s->n_kv = s->cached;
	return (int)(s->cached < s->n_prompt ? s->cached : s->n_prompt - 1);
}

int seq_grow(kvp_client *c, struct seq *const *v, size_t n)
{
	size_t want = 0, used = 0, i;
	kvp_page *fresh;
	int rc;

	for (i = 0; i < n; i++) {
		uint32_t need = (v[i]->n_tokens + BT - 1) / BT;

		if (need > v[i]->n_pages)
			want += need - v[i]->n_pages;
	}
	if (want == 0)
		return 0;
	fresh = malloc(want * sizeof(*fresh));
	if (!fresh)
		return -ENOMEM;
	rc = kvp_alloc(c, want, fresh);
	for (i = 0; rc == 0 && i < n; i++) {
		struct seq *s = v[i];

		while (rc == 0 && s->n_pages < (s->n_tokens + BT - 1) / BT) {
			rc = seq_set(c, s, s->n_pages, fresh[used++]);
			s->n_pages += rc == 0;
		}
	}
	free(fresh);
	return rc;
}

struct kvp_kv_slot seq_slot(const struct seq *s, uint32_t pos)
{
	struct kvp_kv_slot slot = { 0, 0, 0 };

	if (pos >= s->n_kv) {
		slot.page = s->table[pos / BT];
		slot.offset = pos % BT;
	}
	return slot;
}

/*
 * seq_publish_full() - publish blocks [s->n_frozen, upto) of s, whose keys
 * are in s->keys. Where another client published a block first, its page
 * replaces ours in the block table (same key, same bytes) and ours goes
 * back to the pool. Returns 0 or -errno.
 */
static int seq_publish_full(kvp_client *c, struct seq *s, uint32_t upto)
{
	uint32_t first = s->n_frozen, n = upto - first, i;
	kvp_page *canon;
	int rc;

	if (upto <= first)
		return 0;
	canon = malloc(n * sizeof(*canon));
	if (!canon)
		return -ENOMEM;
	rc = kvp_publish(c, parent_of(s, first), s->pages + first, s->keys + first,
			 n, KVP_PRIO_NORMAL, canon);
	for (i = 0; rc == 0 && i < n; i++) {
		kvp_page mine = s->pages[first + i];

		if (canon[i] == mine) {
			s->published++;
			continue;
		}
		rc = seq_set(c, s, first + i, canon[i]);
		if (rc == 0)
			rc = kvp_release(c, &mine, 1);
	}
	free(canon);
	if (rc == 0)
		s->n_frozen = upto;
	return rc;
}

/*
 * seq_publish_tail() - publish block i of s, holding its first ntok
 * tokens, as a partial page. If ours is now the indexed one and keep is
 * true, block i continues in a private COW of it (the published page is
 * frozen); if another client's page is indexed, ours stays private and
 * our lease on theirs is dropped. Returns 0 or -errno.
 */
static int seq_publish_tail(kvp_client *c, struct seq *s, uint32_t i, uint32_t ntok,
			    bool keep)
{
	kvp_page mine = s->pages[i], canon, copy;
	int rc;

	rc = kvp_publish_partial(c, parent_of(s, i), mine, s->tokens + (size_t)i * BT,
				 ntok, KVP_PRIO_NORMAL, &canon);
	if (rc < 0)
		return rc;
	if (canon != mine)
		return kvp_release(c, &canon, 1);
	s->published++;
	if (!keep)
		return 0;
	rc = kvp_cow(c, &mine, 1, &copy);
	if (rc == 0)
		rc = seq_set(c, s, i, copy);
	if (rc == 0)
		rc = kvp_release(c, &mine, 1);
	return rc;
}

int seq_publish_prompt(kvp_client *c, bool cache, struct seq *s)
{
	uint32_t nb = s->n_prompt / BT, tail = s->n_prompt % BT;
	int rc;

	if (!cache)
		return 0;
	rc = seq_publish_full(c, s, nb);
	/* a tail that came from the cache whole is published already */
	if (rc == 0 && tail && s->cached < s->n_prompt)
		rc = seq_publish_tail(c, s, nb, tail, true);
	return rc;
}

int seq_finish(kvp_client *c, bool cache, struct seq *s)
{
	uint32_t nfull = s->n_kv / BT, tail = s->n_kv % BT, first = s->n_frozen;
	int rc = 0, rc2;

	if (cache && nfull > first) {
		/* keys of the blocks the answer completed, chained on */
		rc = kvp_block_keys(c, parent_of(s, first), s->tokens + (size_t)first * BT,
				    (size_t)(nfull - first) * BT, NULL, 0, s->keys + first);
		if (rc >= 0)
			rc = seq_publish_full(c, s, nfull);
	}
	if (cache && rc >= 0 && tail && s->n_kv > s->n_prompt)
		rc = seq_publish_tail(c, s, nfull, tail, false);
	rc2 = s->n_pages ? kvp_release(c, s->pages, s->n_pages) : 0;
	s->n_pages = 0;
	return rc < 0 ? rc : rc2;
}
