/* SPDX-License-Identifier: MIT */
/*
 * model_seq.h - one request's sequence and its kvpool pages: what to
 * acquire from the cache, what to compute, what to publish, and when a
 * page may no longer be written.
 *
 * Life of a sequence (cached mode):
 *   seq_new()            tokens of the prompt, room for max_tokens more
 *   seq_admit()          ACQUIRE the prompt's cached full blocks and a
 *                        partial page after them (COW'd: it is appended
 *                        to); says where the prefill starts
 *   seq_grow()           ALLOC the pages that the next tokens need
 *   seq_slot()           where a token's K and V go
 *   seq_publish_prompt() PUBLISH the prompt's full blocks this process
 *                        computed, PUBLISH_PARTIAL the prompt's tail
 *   seq_finish()         PUBLISH the blocks the answer filled and the
 *                        last partial page, then RELEASE everything
 * With cache off, seq_admit() and the publishes do nothing: pages are
 * allocated, written and released, never shared.
 *
 * Errors are -errno from libkvpool; the client then still holds what it
 * leased (kvp_close() drops it).
 */
#ifndef KVPOOL_EXAMPLES_MODEL_SEQ_H
#define KVPOOL_EXAMPLES_MODEL_SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool.h>
#include <kvpool_kernels.h>

struct seq {
	size_t index;		/* request number, from 0 */
	uint32_t *tokens;	/* [cap]: the prompt, then what was generated */
	uint32_t n_prompt;	/* prompt tokens */
	uint32_t n_tokens;	/* tokens known: n_prompt + generated */
	uint32_t cap;		/* n_prompt + max_tokens */
	uint32_t n_kv;		/* leading tokens whose K and V are in pages */
	uint32_t max_tokens;	/* tokens to generate */

	kvp_page *pages;	/* [page_cap] the page of block i */
	uint64_t *table;	/* [page_cap] its address: the block table */
	uint32_t n_pages, page_cap;
	uint32_t n_frozen;	/* leading pages that are published (shared or
				 * acquired): never written again */
	kvp_key *keys;		/* [page_cap] keys of the full blocks known */

	/* what the cache did for this request */
	uint32_t cached;	/* prompt tokens whose K/V came from the pool */
	uint32_t hits;		/* full pages acquired from the pool */
	uint32_t published;	/* pages this request published first */
	uint32_t computed;	/* prompt tokens run through the model */
	double prefill_s;	/* its admission: acquire, prefill, publish */
	double ttft_s;		/* from the server's start to its first token */
};

/* seq_new() - a sequence for prompt[0..n) (n >= 1) that will generate
 * max_tokens (>= 1) tokens. Free with seq_free(). NULL: out of memory. */
struct seq *seq_new(size_t index, const uint32_t *prompt, uint32_t n,
		    uint32_t max_tokens);

/* seq_free() - free s (may be NULL); its leases must be released. */
void seq_free(struct seq *s);

/*
 * seq_admit() - with cache, lease the longest cached prefix of the prompt:
 * full blocks, then a published partial page after them, which is COW'd
 * so that the prefill appends to a private copy. Sets s->cached and
 * s->n_kv. Returns the position the prefill starts at: s->cached, but at
 * most n_prompt - 1, because the next token needs the last prompt token's
 * hidden state even when its K/V are cached. Else -errno.
 */
int seq_admit(kvp_client *c, bool cache, struct seq *s);

/*
 * seq_grow() - lease, in one kvp_alloc() for the n sequences v[0..n),
 * the pages that hold positions 0 .. n_tokens - 1 of each and fill in
 * their block tables. Returns 0 or -errno (-ENOSPC: pool full).
 */
int seq_grow(kvp_client *c, struct seq *const *v, size_t n);

/* seq_slot() - where the K/V of position pos go: page 0 (skip) for a
 * position whose K/V are in the pages already, else its page and offset. */
struct kvp_kv_slot seq_slot(const struct seq *s, uint32_t pos);

/*
 * seq_publish_prompt() - after the prefill: publish the prompt's full
 * blocks this request computed (a block someone else published first is
 * replaced by theirs: equal keys, equal bytes) and its tail as a partial
 * page. A published page is immutable, and decode appends to the tail's
 * page; so the tail is published first and the decode goes on in a
 * kvp_cow() of it. Returns 0 or -errno. No-op without cache.
 */
int seq_publish_prompt(kvp_client *c, bool cache, struct seq *s);

/*
 * seq_finish() - with cache, publish the full blocks the answer filled
 * and the partial page at the end (the next turn of a chat starts with
 * this turn's prompt and answer); then release every page. Returns 0 or
 * -errno.
 */
int seq_finish(kvp_client *c, bool cache, struct seq *s);

#endif /* KVPOOL_EXAMPLES_MODEL_SEQ_H */
