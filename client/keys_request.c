/* SPDX-License-Identifier: MIT */
/*
 * keys_request.c - a vLLM request's block keys with their extras (LoRA,
 * multimodal items, cache salt, prompt embeddings), as vLLM 0.33 derives
 * them (kvp_request_keys() of kvpool.h). Pure and thread-safe.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvpool.h"
#include "client/keys.h"
#include "client/keys_int.h"

/* --- A request's keys, as vLLM 0.33 derives them ----------------------------
 *
 * vllm/v1/core/kv_cache_utils.py: generate_block_hash_extra_keys() gives
 * each full block the extras LoRA + multimodal + cache salt + prompt
 * embeddings, in that order, each a tagged tuple; a block with none has
 * None. The tags are one object each (their pointers below).
 */
static const char tag_lora[] = "lora", tag_mm[] = "mm", tag_salt[] = "cache_salt",
		  tag_embeds[] = "prompt_embeds";

static kvp_value v_str(const char *str)
{
	return (kvp_value){ .type = KVP_VALUE_STR, .str = str };
}

static kvp_value v_int(int64_t i)
{
	return (kvp_value){ .type = KVP_VALUE_INT, .i = i };
}

KVP_API int kvp_request_keys(uint32_t scheme, const kvp_key *root, uint32_t block_tokens,
			     const kvp_request *r, kvp_key *keys)
{
	kvp_value *items, *tuples;
	size_t nblocks, b, mm_idx = 0, cap;
	int rc = 0;

	keys_error_buf[0] = '\0';
	if (!keys_scheme_known(scheme))
		return keys_bad_scheme(scheme);
	if (!root || !r || block_tokens == 0 || (r->ntokens && !r->tokens) ||
	    (r->nmm && !r->mm))
		return keys_bad("kvp_request_keys: root and r must not be NULL, block_tokens 0, nor "
			   "tokens or mm NULL when there are some");
	if (r->lora_name && !r->lora_path)
		return keys_bad("LoRA adapter '%.64s' without its path: vLLM keys both", r->lora_name);
	nblocks = r->ntokens / block_tokens;
	if (nblocks > INT_MAX || (nblocks && !keys))
		return keys_bad("kvp_request_keys: keys NULL, or %zu blocks", nblocks);
	if (r->nmm > VAL_MAX_ITEMS / 4)
		return keys_bad("%zu multimodal inputs: at most %d", r->nmm, VAL_MAX_ITEMS / 4);
	for (b = 0; b < r->nmm; b++) {
		if (!r->mm[b].identifier)
			return keys_bad("multimodal input %zu has no identifier", b);
		if (b && r->mm[b].offset < r->mm[b - 1].offset)	/* as vLLM keeps them */
			return keys_bad("multimodal input %zu (offset %lld) comes before input %zu "
				   "(offset %lld): give them sorted by offset", b,
				   (long long)r->mm[b].offset, b - 1,
				   (long long)r->mm[b - 1].offset);
	}
	cap = 3 + r->nmm;	/* extras a block may have */
	items = malloc(cap * 3 * sizeof(*items));
	tuples = malloc(cap * sizeof(*tuples));
	if (!items || !tuples) {
		free(items);
		free(tuples);
		return -ENOMEM;
	}
	for (b = 0; b < nblocks && rc == 0; b++) {
		int64_t start = (int64_t)(b * block_tokens), end = start + block_tokens;
		size_t nt = 0, ni = 0;

#define ADD_TUPLE(...)                                                               \
	do {                                                                         \
		const kvp_value tv[] = { __VA_ARGS__ };                              \
		memcpy(&items[ni], tv, sizeof(tv));                                  \
		tuples[nt++] = (kvp_value){ .type = KVP_VALUE_TUPLE,                 \
					    .n = sizeof(tv) / sizeof(tv[0]),         \
					    .items = &items[ni] };                   \
		ni += sizeof(tv) / sizeof(tv[0]);                                    \
	} while (0)
		if (r->lora_name)
			ADD_TUPLE(v_str(tag_lora), v_str(r->lora_name), v_str(r->lora_path));
		/* _gen_mm_extra_hash_keys(): the features the block overlaps, from
		 * the first one the last block did not finish */
		if (r->nmm && r->mm[r->nmm - 1].offset + (int64_t)r->mm[r->nmm - 1].length > start) {
			while (mm_idx < r->nmm) {
				const kvp_mm_feature *f = &r->mm[mm_idx];
				int64_t fend = f->offset + (int64_t)f->length;

				if (end <= f->offset)
					break;		/* not reached yet */
				if (start >= fend) {
					mm_idx++;	/* passed */
					continue;
				}
				ADD_TUPLE(v_str(tag_mm), v_str(f->identifier), v_int(f->offset - start));
				if (end < fend)
					break;		/* it goes on in the next block */
				mm_idx++;
			}
		}
		if (start == 0 && r->cache_salt && r->cache_salt[0])
			ADD_TUPLE(v_str(tag_salt), v_str(r->cache_salt));
		if (r->embeds)
			ADD_TUPLE(v_str(tag_embeds), ((kvp_value){ .type = KVP_VALUE_BYTES, .n = 32,
								  .bytes = r->embeds[b] }));
#undef ADD_TUPLE
		rc = keys_values_block(scheme, b ? &keys[b - 1] : root,
				  r->tokens + b * block_tokens, block_tokens, tuples, nt, &keys[b]);
	}
	free(items);
	free(tuples);
	return rc < 0 ? rc : (int)nblocks;
}
