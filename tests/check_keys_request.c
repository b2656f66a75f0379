/* SPDX-License-Identifier: MIT */
/*
 * check_keys_request.c - unit tests of a request's keys with their extras:
 * vLLM 0.33's tagged extras as kvp_value trees (kvp_key_block_values(),
 * client/keys_enc.c) against vLLM's own hash functions, the values vLLM
 * does not hash refused, and whole requests (kvp_request_keys(),
 * client/keys_request.c: LoRA, multimodal items, cache salt, prompt
 * embeddings) against vLLM's request block hasher
 * (tests/golden/keys_vllm_algos.txt).
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "kvpool.h"
#include "client/keys.h"
#include "keys_golden.h"
#include "suites.h"

/* --- vLLM 0.33's tagged extras as kvp_value trees --------------------------- */

struct vparse {
	kvp_value vals[4096];
	size_t nvals;
	char *tags[64];		/* S strings: one pointer per text */
	size_t ntags;
};

static char *vp_text(struct vparse *vp, const char **p, bool tag, uint32_t *len)
{
	const char *e = *p;
	size_t n, i;
	uint8_t *b;
	char hex[1024];

	while (isxdigit((unsigned char)*e))
		e++;
	ck_assert_uint_lt((size_t)(e - *p), sizeof(hex));
	memcpy(hex, *p, (size_t)(e - *p));
	hex[e - *p] = '\0';
	*p = e;
	b = unhex(hex, &n);
	if (len)
		*len = (uint32_t)n;
	if (!tag)
		return (char *)b;
	for (i = 0; i < vp->ntags; i++)
		if (!strcmp(vp->tags[i], (char *)b)) {
			free(b);
			return vp->tags[i];
		}
	ck_assert_uint_lt(vp->ntags, 64);
	return vp->tags[vp->ntags++] = (char *)b;
}

/* vp_value() - one value of the vector syntax at *p into *v. */
static void vp_value(struct vparse *vp, const char **p, kvp_value *v)
{
	kvp_value tmp[64];
	size_t n = 0;
	char c = *(*p)++;

	memset(v, 0, sizeof(*v));
	switch (c) {
	case 'i':
		v->type = KVP_VALUE_INT;
		v->i = strtoll(*p, (char **)p, 10);
		break;
	case 's':
	case 'S':
		v->type = KVP_VALUE_STR;
		v->str = vp_text(vp, p, c == 'S', NULL);
		break;
	case 'b':
		v->type = KVP_VALUE_BYTES;
		v->bytes = vp_text(vp, p, false, &v->n);
		break;
	case 't':
		ck_assert_int_eq(*(*p)++, '(');
		while (**p != ')') {
			ck_assert_uint_lt(n, 64);
			vp_value(vp, p, &tmp[n++]);
			if (**p == ',')
				(*p)++;
		}
		(*p)++;
		v->type = KVP_VALUE_TUPLE;
		v->n = (uint32_t)n;
		ck_assert_uint_le(vp->nvals + n, 4096);
		v->items = &vp->vals[vp->nvals];
		memcpy(&vp->vals[vp->nvals], tmp, n * sizeof(*tmp));
		vp->nvals += n;
		break;
	default:
		ck_abort_msg("bad value syntax at '%c'", c);
	}
}

/* vp_free() - the strings and bytes of vp's values. */
static void vp_free_value(const kvp_value *v, const struct vparse *vp)
{
	uint32_t i;
	size_t t;

	if (v->type == KVP_VALUE_TUPLE) {
		for (i = 0; i < v->n; i++)
			vp_free_value(&v->items[i], vp);
	} else if (v->type == KVP_VALUE_STR || v->type == KVP_VALUE_BYTES) {
		for (t = 0; t < vp->ntags; t++)
			if ((const void *)vp->tags[t] == (const void *)v->str)
				return;
		free((void *)v->str);
	}
}

START_TEST(test_keys_request_tagged_extras_match_vllm)
{
	static struct vparse vp;
	struct golden g;
	kvp_key parent, k;
	size_t digest;
	int chains = 0, blocks = 0;

	if (!impl_or_skip(_i))
		return;
	golden_open_file(&g, GOLDEN_ALGOS);
	while (golden_next(&g, "vvchain")) {
		uint32_t scheme = algo_scheme(g.field[1], &digest);
		size_t ntok, n;
		char *seed = (char *)unhex(g.field[2], &n), *want, *save = NULL;
		uint32_t bt = (uint32_t)strtoul(g.field[3], NULL, 10);
		uint32_t *tok = parse_tokens(g.field[4], &ntok);
		const char *p = g.field[5];
		int b;

		ck_assert_int_eq(g.n, 7);
		ck_assert_int_eq(kvp_key_root(scheme, seed, &parent), 0);
		want = strtok_r(g.field[6], ":", &save);
		for (b = 0; (size_t)(b + 1) * bt <= ntok; b++, want = strtok_r(NULL, ":", &save)) {
			kvp_value v;

			memset(&vp, 0, sizeof(vp));
			if (*p == '-') {
				p++;
				ck_assert_int_eq(kvp_key_block_values(scheme, &parent, tok + b * bt,
								      bt, NULL, 0, &k), 0);
			} else {
				vp_value(&vp, &p, &v);
				ck_assert_uint_eq(v.type, KVP_VALUE_TUPLE);
				ck_assert_int_eq(kvp_key_block_values(scheme, &parent, tok + b * bt,
								      bt, v.items, v.n, &k), 0);
				vp_free_value(&v, &vp);
			}
			for (n = 0; n < vp.ntags; n++)
				free(vp.tags[n]);
			if (*p == '|')
				p++;
			ck_assert_ptr_nonnull(want);
			digest_is(&k, want, digest, &g, b);
			parent = k;
			blocks++;
		}
		free(seed);
		free(tok);
		chains++;
	}
	golden_close(&g);
	ck_assert_int_eq(chains, 40);
	ck_assert_int_eq(blocks, 160);
}
END_TEST

START_TEST(test_keys_request_values_refuse_what_vllm_does_not_hash)
{
	kvp_value bad = { .type = 99 }, nul = { .type = KVP_VALUE_STR, .str = NULL };
	kvp_value deep[10], ok = { .type = KVP_VALUE_INT, .i = -1 };
	uint32_t tok[16] = { 0 };
	kvp_key root, k, k2;
	kvp_extra ex = { NULL, 7 };
	kvp_value v7 = { .type = KVP_VALUE_UINT, .u = 7 };
	int i;

	ck_assert_int_eq(kvp_key_root(KVP_KEYS_VLLM_SHA256, "0", &root), 0);
	ck_assert_int_eq(kvp_key_block_values(KVP_KEYS_VLLM_SHA256, &root, tok, 16, &bad, 1, &k),
			 -EINVAL);
	/* (kvp_last_error() returns this buffer; the test links the key code
	 * statically, beside the library's own copy) */
	ck_assert_msg(strstr(keys_error_buf, "has type 99, which vLLM does not hash"), "%s",
		      keys_error_buf);
	ck_assert_int_eq(kvp_key_block_values(KVP_KEYS_VLLM_SHA256, &root, tok, 16, &nul, 1, &k),
			 -EINVAL);
	ck_assert_int_eq(kvp_key_block_values(5, &root, tok, 16, &ok, 1, &k), -EINVAL);
	ck_assert_msg(strstr(keys_error_buf, "key scheme 5 is not one of 1 (vllm-sha256-cbor)"),
		      "%s", keys_error_buf);
	for (i = 0; i < 10; i++)	/* ten tuples deep: past the limit */
		deep[i] = (kvp_value){ .type = KVP_VALUE_TUPLE, .n = i < 9 ? 1 : 0,
				       .items = i < 9 ? &deep[i + 1] : NULL };
	ck_assert_int_eq(kvp_key_block_values(KVP_KEYS_VLLM_SHA256, &root, tok, 16, deep, 1, &k),
			 -EINVAL);
	ck_assert_msg(strstr(keys_error_buf, "nest deeper than 8 tuples"), "%s",
		      keys_error_buf);
	/* the same block through either call: the same key */
	for (i = 1; i <= 4; i++) {
		ck_assert_int_eq(kvp_key_root((uint32_t)i, "0", &root), 0);
		ck_assert_int_eq(kvp_key_block((uint32_t)i, &root, tok, 16, &ex, 1, &k), 0);
		ck_assert_int_eq(kvp_key_block_values((uint32_t)i, &root, tok, 16, &v7, 1, &k2), 0);
		ck_assert_mem_eq(k.b, k2.b, KVP_KEY_BYTES);
	}
}
END_TEST

/* split() - s cut at each sep into out (at most max); the count */
static int split(char *s, const char *sep, char **out, int max)
{
	char *save = NULL, *t;
	int n = 0;

	for (t = strtok_r(s, sep, &save); t && n < max; t = strtok_r(NULL, sep, &save))
		out[n++] = t;
	return n;
}

/* Whole requests against vLLM 0.33's own request block hasher. */
START_TEST(test_keys_request_whole_requests_match_vllms_hasher)
{
	static kvp_key keys[64];
	static uint8_t embeds[64][32];
	struct golden g;
	kvp_key root;
	size_t digest;
	int reqs = 0, blocks = 0;

	golden_open_file(&g, GOLDEN_ALGOS);
	while (golden_next(&g, "vreq")) {
		uint32_t scheme = algo_scheme(g.field[1], &digest);
		char *seed, *lora[2] = { NULL, NULL }, *part[16], *kw[64], *ew[64];
		uint32_t bt = (uint32_t)strtoul(g.field[3], NULL, 10);
		kvp_mm_feature mm[8];
		kvp_request r = { 0 };
		size_t n, ntok;
		int i, nk, nb, nm = 0;

		ck_assert_int_eq(g.n, GOLDEN_MAX_FIELDS);	/* 10 fields */
		seed = (char *)unhex(g.field[2], &n);
		r.tokens = parse_tokens(g.field[4], &ntok);
		r.ntokens = ntok;
		if (strcmp(g.field[5], "-")) {
			ck_assert_int_eq(split(g.field[5], ":", part, 2), 2);
			lora[0] = (char *)unhex(part[0], &n);
			lora[1] = (char *)unhex(part[1], &n);
			r.lora_name = lora[0];
			r.lora_path = lora[1];
		}
		if (strcmp(g.field[6], "-")) {
			char *f[8];

			nm = split(g.field[6], ";", f, 8);
			for (i = 0; i < nm; i++) {
				char *x[3];

				ck_assert_int_eq(split(f[i], ":", x, 3), 3);
				mm[i].identifier = (char *)unhex(x[0], &n);
				mm[i].offset = strtoll(x[1], NULL, 10);
				mm[i].length = strtoull(x[2], NULL, 10);
			}
			r.mm = mm;
			r.nmm = (size_t)nm;
		}
		if (strcmp(g.field[7], "-"))
			r.cache_salt = (char *)unhex(g.field[7], &n);
		if (strcmp(g.field[8], "-")) {
			int ne = split(g.field[8], ":", ew, 64);

			for (i = 0; i < ne; i++) {
				uint8_t *d = unhex(ew[i], &n);

				ck_assert_uint_eq(n, 32);
				memcpy(embeds[i], d, 32);
				free(d);
			}
			r.embeds = (const uint8_t (*)[32])embeds;
		}
		nk = split(g.field[9], ":", kw, 64);
		ck_assert_int_eq(kvp_key_root(scheme, seed, &root), 0);
		nb = kvp_request_keys(scheme, &root, bt, &r, keys);
		ck_assert_int_eq(nb, nk);
		for (i = 0; i < nb; i++) {
			digest_is(&keys[i], kw[i], digest, &g, i);
			blocks++;
		}
		for (i = 0; i < nm; i++)
			free((void *)mm[i].identifier);
		free((void *)r.cache_salt);
		free(lora[0]);
		free(lora[1]);
		free((void *)r.tokens);
		free(seed);
		reqs++;
	}
	golden_close(&g);
	ck_assert_int_eq(reqs, 48);
	ck_assert_int_ge(blocks, 240);
}
END_TEST

Suite *keys_request_suite(void)
{
	Suite *s = suite_create("keys_request");
	TCase *values = tcase_create("values");
	TCase *request = tcase_create("request");

	tcase_add_loop_test(values, test_keys_request_tagged_extras_match_vllm, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_test(values, test_keys_request_values_refuse_what_vllm_does_not_hash);
	suite_add_tcase(s, values);

	tcase_add_test(request, test_keys_request_whole_requests_match_vllms_hasher);
	suite_add_tcase(s, request);
	return s;
}
