/* SPDX-License-Identifier: MIT */
/*
 * check_keys.c - unit tests of the prefix keys' schemes (client/keys.c,
 * keys_enc.c, keys_direct.c): vLLM's sha256_cbor byte for byte against
 * tests/golden/keys_vllm.txt (tests/golden/gen_keys.py, cbor2 and
 * hashlib), all four of vLLM's algorithms against
 * tests/golden/keys_vllm_algos.txt (vLLM's own hash functions), the x86
 * encoders against the portable ones, the fast scheme's properties, and
 * the argument checks. SHA-256 is check_keys_sha256.c's; a request's
 * extras are check_keys_request.c's.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <xxhash.h>

#include "kvpool.h"
#include "client/keys.h"
#include "keys_golden.h"
#include "suites.h"

static const uint32_t schemes[] = {
	KVP_KEYS_VLLM_SHA256_CBOR, KVP_KEYS_VLLM_XXHASH_CBOR, KVP_KEYS_VLLM_SHA256,
	KVP_KEYS_VLLM_XXHASH,
};

/* --- vLLM's schemes --------------------------------------------------------- */

START_TEST(test_keys_every_vllm_algorithm_matches_vllm)
{
	int roots = 0, chains = 0, blocks = 0, schemes_seen = 0;
	static kvp_key keys[64];
	struct golden g;
	kvp_key root;
	size_t digest;
	if (!impl_or_skip(_i))
		return;

	golden_open_file(&g, GOLDEN_ALGOS);
	while (golden_next(&g, "vroot")) {
		uint32_t scheme = algo_scheme(g.field[1], &digest);
		size_t n;
		char *seed = (char *)unhex(g.field[2], &n);

		ck_assert_int_eq(kvp_key_root(scheme, seed, &root), 0);
		digest_is(&root, g.field[3], digest, &g, -1);
		free(seed);
		roots++;
	}
	golden_close(&g);
	golden_open_file(&g, GOLDEN_ALGOS);
	while (golden_next(&g, "vchain")) {
		uint32_t scheme = algo_scheme(g.field[1], &digest);
		size_t ntok, nex, n;
		char *seed = (char *)unhex(g.field[2], &n), *want, *save = NULL;
		uint32_t bt = (uint32_t)strtoul(g.field[3], NULL, 10);
		uint32_t *tok = parse_tokens(g.field[4], &ntok);
		kvp_extra *ex = parse_extras(g.field[5], &nex);
		int nb, i;

		ck_assert_int_eq(g.n, 7);
		ck_assert_int_eq(kvp_key_root(scheme, seed, &root), 0);
		nb = kvp_key_chain(scheme, &root, tok, ntok, bt, ex, nex, keys);
		ck_assert_int_eq(nb, (int)(ntok / bt));
		for (i = 0, want = strtok_r(g.field[6], ":", &save); i < nb;
		     i++, want = strtok_r(NULL, ":", &save)) {
			ck_assert_ptr_nonnull(want);
			digest_is(&keys[i], want, digest, &g, i);
			blocks++;
		}
		free(seed);
		free(tok);
		free_extras(ex, nex);
		chains++;
	}
	golden_close(&g);
	schemes_seen = roots / 5;
	ck_assert_int_eq(schemes_seen, 4);
	ck_assert_int_ge(chains, 60);
	ck_assert_int_ge(blocks, 120);
}
END_TEST

START_TEST(test_keys_vllm_roots_match_golden)
{
	struct golden g;
	int vectors = 0;
	if (!impl_or_skip(_i))
		return;

	golden_open(&g);
	while (golden_next(&g, "root")) {
		size_t n;
		char *seed = (char *)unhex(g.field[1], &n);
		kvp_key k;

		ck_assert_int_eq(kvp_key_root(KVP_KEYS_VLLM_SHA256_CBOR, seed, &k), 0);
		ck_assert_key_eq(&k, g.field[2], &g);
		free(seed);
		vectors++;
	}
	golden_close(&g);
	ck_assert_int_ge(vectors, 5);
}
END_TEST

START_TEST(test_keys_vllm_blocks_match_golden)
{
	struct golden g;
	int vectors = 0;
	if (!impl_or_skip(_i))
		return;

	golden_open(&g);
	while (golden_next(&g, "block")) {
		size_t ntok, nex;
		uint32_t *tok = parse_tokens(g.field[2], &ntok);
		kvp_extra *ex = parse_extras(g.field[3], &nex);
		kvp_key parent, k;

		ck_assert_int_eq(g.n, 5);
		unhex_key(g.field[1], &parent);
		ck_assert_int_eq(kvp_key_block(KVP_KEYS_VLLM_SHA256_CBOR, &parent,
					       tok, ntok, ex, nex, &k), 0);
		ck_assert_key_eq(&k, g.field[4], &g);
		free(tok);
		free_extras(ex, nex);
		vectors++;
	}
	golden_close(&g);
	ck_assert_int_ge(vectors, 40);
}
END_TEST

/* Each chain line: kvp_key_chain() and block after block from the root. */
START_TEST(test_keys_vllm_chains_match_golden)
{
	struct golden g;
	int vectors = 0;
	if (!impl_or_skip(_i))
		return;

	golden_open(&g);
	while (golden_next(&g, "chain")) {
		size_t ntok, nex, nkeys, i;
		uint32_t bt = (uint32_t)strtoul(g.field[2], NULL, 10);
		uint32_t *tok = parse_tokens(g.field[3], &ntok);
		kvp_extra *ex = parse_extras(g.field[4], &nex);
		char *want = g.field[5], *save = NULL, *h;
		kvp_key parent, step, next, *keys;

		ck_assert_int_eq(g.n, 6);
		unhex_key(g.field[1], &parent);
		nkeys = ntok / bt;
		keys = calloc(nkeys + 1, sizeof(*keys));
		ck_assert_ptr_nonnull(keys);
		ck_assert_int_eq(kvp_key_chain(KVP_KEYS_VLLM_SHA256_CBOR, &parent,
					       tok, ntok, bt, ex, nex, keys),
				 (int)nkeys);
		step = parent;
		h = strcmp(want, "-") ? strtok_r(want, ":", &save) : NULL;
		for (i = 0; i < nkeys; i++, h = strtok_r(NULL, ":", &save)) {
			ck_assert_ptr_nonnull(h);
			ck_assert_key_eq(&keys[i], h, &g);
			ck_assert_int_eq(kvp_key_block(KVP_KEYS_VLLM_SHA256_CBOR,
						       &step, tok + i * bt, bt,
						       ex, nex, &next), 0);
			ck_assert_key_eq(&next, h, &g);
			step = next;
		}
		ck_assert_ptr_null(h);
		free(keys);
		free(tok);
		free_extras(ex, nex);
		vectors++;
	}
	golden_close(&g);
	ck_assert_int_ge(vectors, 4);
}
END_TEST

/* --- Both schemes -------------------------------------------------------------- */

static void fill_tokens(uint32_t *t, size_t n, uint64_t x)
{
	size_t i;

	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* every CBOR width: < 24, < 2^8, < 2^16, < 2^32 */
		t[i] = (uint32_t)(x >> (8 * (x & 3) + 8));
	}
}

START_TEST(test_keys_chain_equals_repeated_block)
{
	static const kvp_extra ex[] = { { "lora-a", 0 }, { NULL, 42 } };
	uint32_t tok[16 * 40 + 7];
	kvp_key root, keys[41], step, next;
	size_t s, nex;
	int i;

	fill_tokens(tok, sizeof(tok) / sizeof(tok[0]), 0x1234567);
	for (s = 0; s < 2; s++) {
		for (nex = 0; nex <= 2; nex++) {
			ck_assert_int_eq(kvp_key_root(schemes[s], "kvpool", &root), 0);
			ck_assert_int_eq(kvp_key_chain(schemes[s], &root, tok,
						       sizeof(tok) / sizeof(tok[0]),
						       16, ex, nex, keys), 40);
			step = root;
			for (i = 0; i < 40; i++) {
				ck_assert_int_eq(kvp_key_block(schemes[s], &step,
							       tok + 16 * i, 16,
							       ex, nex, &next), 0);
				ck_assert_mem_eq(keys[i].b, next.b, KVP_KEY_BYTES);
				step = next;
			}
		}
	}
}
END_TEST

START_TEST(test_keys_chain_ignores_a_partial_last_block)
{
	uint32_t tok[64];
	kvp_key root, full[4], part[4], sentinel;
	size_t s;

	fill_tokens(tok, 64, 99);
	memset(&sentinel, 0xa5, sizeof(sentinel));
	for (s = 0; s < 2; s++) {
		ck_assert_int_eq(kvp_key_root(schemes[s], "0", &root), 0);
		ck_assert_int_eq(kvp_key_chain(schemes[s], &root, tok, 48, 16,
					       NULL, 0, full), 3);
		part[3] = sentinel;
		ck_assert_int_eq(kvp_key_chain(schemes[s], &root, tok, 63, 16,
					       NULL, 0, part), 3);
		ck_assert_mem_eq(full, part, 3 * sizeof(kvp_key));
		ck_assert_mem_eq(&part[3], &sentinel, sizeof(sentinel));
		/* fewer tokens than a block: no keys, keys may be NULL */
		ck_assert_int_eq(kvp_key_chain(schemes[s], &root, tok, 15, 16,
					       NULL, 0, NULL), 0);
		ck_assert_int_eq(kvp_key_chain(schemes[s], &root, NULL, 0, 16,
					       NULL, 0, NULL), 0);
	}
}
END_TEST

START_TEST(test_keys_rejects_bad_arguments)
{
	uint32_t tok[32] = { 1, 2, 3 };
	kvp_key root, k[2];
	size_t s;

	for (s = 0; s < 2; s++) {
		uint32_t sc = schemes[s];

		ck_assert_int_eq(kvp_key_root(sc, NULL, &root), -EINVAL);
		ck_assert_int_eq(kvp_key_root(sc, "0", NULL), -EINVAL);
		ck_assert_int_eq(kvp_key_root(sc, "0", &root), 0);
		ck_assert_int_eq(kvp_key_block(sc, NULL, tok, 16, NULL, 0, k), -EINVAL);
		ck_assert_int_eq(kvp_key_block(sc, &root, NULL, 16, NULL, 0, k), -EINVAL);
		ck_assert_int_eq(kvp_key_block(sc, &root, tok, 16, NULL, 1, k), -EINVAL);
		ck_assert_int_eq(kvp_key_block(sc, &root, tok, 16, NULL, 0, NULL), -EINVAL);
		ck_assert_int_eq(kvp_key_block(sc, &root, NULL, 0, NULL, 0, k), 0);
		ck_assert_int_eq(kvp_key_chain(sc, NULL, tok, 32, 16, NULL, 0, k), -EINVAL);
		ck_assert_int_eq(kvp_key_chain(sc, &root, NULL, 32, 16, NULL, 0, k), -EINVAL);
		ck_assert_int_eq(kvp_key_chain(sc, &root, tok, 32, 16, NULL, 0, NULL), -EINVAL);
		ck_assert_int_eq(kvp_key_chain(sc, &root, tok, 32, 16, NULL, 2, k), -EINVAL);
		ck_assert_int_eq(kvp_key_chain(sc, &root, tok, 32, 0, NULL, 0, k), -EINVAL);
	}
	ck_assert_int_eq(kvp_key_root(0, "0", &root), -EINVAL);
	ck_assert_int_eq(kvp_key_root(5, "0", &root), -EINVAL);
	ck_assert_int_eq(kvp_key_block(0, &root, tok, 16, NULL, 0, k), -EINVAL);
	ck_assert_int_eq(kvp_key_block(5, &root, tok, 16, NULL, 0, k), -EINVAL);
	ck_assert_int_eq(kvp_key_chain(0, &root, tok, 32, 16, NULL, 0, k), -EINVAL);
	ck_assert_int_eq(kvp_key_chain(UINT32_MAX, &root, tok, 32, 16, NULL, 0, k),
			 -EINVAL);
}
END_TEST

/* The pickle schemes hash one pickle frame, as CPython writes one below
 * 64 KiB: a block whose pickle would be larger is refused, not hashed
 * into a key vLLM would never compute. */
START_TEST(test_keys_pickle_schemes_refuse_a_block_past_one_frame)
{
	static uint32_t tok[20000];
	static const uint32_t pickled[] = { KVP_KEYS_VLLM_SHA256, KVP_KEYS_VLLM_XXHASH };
	kvp_key root, k;
	size_t i;

	for (i = 0; i < 20000; i++)
		tok[i] = 0x90000000u + (uint32_t)i;	/* LONG1: 7 bytes each */
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(kvp_key_root(pickled[i], "0", &root), 0);
		ck_assert_int_eq(kvp_key_block(pickled[i], &root, tok, 9000, NULL, 0, &k), 0);
		ck_assert_int_eq(kvp_key_block(pickled[i], &root, tok, 10000, NULL, 0, &k),
				 -EINVAL);
		ck_assert_msg(strstr(keys_error_buf, "past the 64 KiB frame"), "%s",
			      keys_error_buf);
	}
	/* the CBOR ones have no frame: any length */
	ck_assert_int_eq(kvp_key_block(KVP_KEYS_VLLM_XXHASH_CBOR, &root, tok, 20000, NULL, 0,
				       &k), 0);
}
END_TEST

START_TEST(test_keys_vllm_and_fast_differ)
{
	uint32_t tok[16];
	kvp_key rv, rf, kv, kf;

	fill_tokens(tok, 16, 7);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_VLLM_SHA256_CBOR, "0", &rv), 0);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_FAST, "0", &rf), 0);
	ck_assert_mem_ne(rv.b, rf.b, KVP_KEY_BYTES);
	/* same parent, same block */
	ck_assert_int_eq(kvp_key_block(KVP_KEYS_VLLM_SHA256_CBOR, &rv, tok, 16,
				       NULL, 0, &kv), 0);
	ck_assert_int_eq(kvp_key_block(KVP_KEYS_FAST, &rv, tok, 16, NULL, 0, &kf), 0);
	ck_assert_mem_ne(kv.b, kf.b, KVP_KEY_BYTES);
	ck_assert_mem_ne(kv.b, kf.b, 16);
}
END_TEST

/* --- The fast scheme: vLLM's xxhash_cbor -------------------------------------- */

START_TEST(test_keys_fast_is_deterministic_with_zero_upper_half)
{
	static const uint8_t zero[16];
	uint32_t tok[128];
	kvp_extra ex[] = { { "lora", 0 }, { NULL, 5 } };
	kvp_key r1, r2, k1, k2;
	int i;

	fill_tokens(tok, 128, 3);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_FAST, "kvpool", &r1), 0);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_FAST, "kvpool", &r2), 0);
	ck_assert_mem_eq(r1.b, r2.b, KVP_KEY_BYTES);
	ck_assert_mem_eq(r1.b + 16, zero, 16);
	for (i = 0; i < 3; i++) {
		size_t n = i == 0 ? 0 : i == 1 ? 16 : 128;

		memset(&k1, 0xff, sizeof(k1));
		memset(&k2, 0x11, sizeof(k2));
		ck_assert_int_eq(kvp_key_block(KVP_KEYS_FAST, &r1, tok, n, ex, 2, &k1), 0);
		ck_assert_int_eq(kvp_key_block(KVP_KEYS_FAST, &r1, tok, n, ex, 2, &k2), 0);
		ck_assert_mem_eq(k1.b, k2.b, KVP_KEY_BYTES);
		ck_assert_mem_eq(k1.b + 16, zero, 16);
		ck_assert_mem_ne(k1.b, zero, 16);
	}
}
END_TEST

/* key_differs() - the fast key of this block differs from base. */
static void key_differs(const kvp_key *base, const kvp_key *parent,
			const uint32_t *tok, size_t n, const kvp_extra *ex,
			size_t nex, const char *what)
{
	kvp_key k;

	ck_assert_int_eq(kvp_key_block(KVP_KEYS_FAST, parent, tok, n, ex, nex, &k), 0);
	ck_assert_msg(memcmp(k.b, base->b, KVP_KEY_BYTES) != 0,
		      "changing %s left the fast key unchanged", what);
}

START_TEST(test_keys_fast_changes_with_every_input)
{
	kvp_extra ex[] = { { "lora-a", 0 }, { NULL, 42 } }, ex2[2];
	uint32_t tok[16], t2[16];
	kvp_key root, other, base, p2;
	int i, bit;

	fill_tokens(tok, 16, 11);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_FAST, "kvpool", &root), 0);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_FAST, "kvpoo1", &other), 0);
	ck_assert_mem_ne(root.b, other.b, KVP_KEY_BYTES);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_FAST, "", &other), 0);
	ck_assert_mem_ne(root.b, other.b, KVP_KEY_BYTES);
	ck_assert_int_eq(kvp_key_block(KVP_KEYS_FAST, &root, tok, 16, ex, 2, &base), 0);

	for (i = 0; i < 16; i++) {	/* one token, one bit */
		memcpy(t2, tok, sizeof(t2));
		t2[i] ^= 1u << (i * 2);
		key_differs(&base, &root, t2, 16, ex, 2, "a token");
	}
	memcpy(t2, tok, sizeof(t2));	/* two tokens swapped */
	t2[0] = tok[1];
	t2[1] = tok[0];
	key_differs(&base, &root, t2, 16, ex, 2, "the token order");
	key_differs(&base, &root, tok, 15, ex, 2, "the token count");
	for (bit = 0; bit < 8 * 16; bit += 7) {	/* the digest's 16 bytes */
		p2 = root;
		p2.b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		key_differs(&base, &p2, tok, 16, ex, 2, "a parent bit");
	}
	key_differs(&base, &other, tok, 16, ex, 2, "the parent's seed");
	memcpy(ex2, ex, sizeof(ex2));
	ex2[0].str = "lora-b";
	key_differs(&base, &root, tok, 16, ex2, 2, "an extra string");
	memcpy(ex2, ex, sizeof(ex2));
	ex2[1].num = 43;
	key_differs(&base, &root, tok, 16, ex2, 2, "an extra number");
	memcpy(ex2, ex, sizeof(ex2));
	ex2[1].str = "*";		/* "*" as text, not the number 42 */
	ex2[1].num = 0;
	key_differs(&base, &root, tok, 16, ex2, 2, "an extra's type");
	key_differs(&base, &root, tok, 16, ex, 1, "the number of extras");
	key_differs(&base, &root, tok, 16, NULL, 0, "extras to none");
	/* where one string ends and the next begins */
	ex2[0].str = "ab";
	ex2[1].str = "c";
	{
		kvp_extra ex3[2] = { { "a", 0 }, { "bc", 0 } };
		kvp_key k;

		ck_assert_int_eq(kvp_key_block(KVP_KEYS_FAST, &root, tok, 16, ex2, 2, &k), 0);
		key_differs(&k, &root, tok, 16, ex3, 2, "a string boundary");
	}
}
END_TEST

/* The x86 token encoders write what the portable ones do, for every size
 * class and its edges, at every length around their 8-id steps and
 * around the direct path's limit (566 ids), for all four schemes. */
START_TEST(test_keys_x86_encoders_equal_the_portable_ones)
{
	static const uint32_t edge[] = { 0, 1, 23, 24, 25, 255, 256, 257, 65535, 65536, 65537,
					 0x7fffffffu, 0x80000000u, 0x80000001u, 0xfffffffeu,
					 0xffffffffu };
	static uint32_t tok[600];
	kvp_key root, a, b;
	size_t len, i, s;
	unsigned seed = 7;

	if (keys_cpu_use(KEYS_CPU_X86) != KEYS_CPU_X86) {
		fprintf(stderr, "check_keys: no x86 extensions; nothing to compare\n");
		return;
	}
	for (i = 0; i < 600; i++) {
		seed = seed * 1103515245u + 12345u;
		tok[i] = edge[(seed >> 8) % (sizeof(edge) / sizeof(edge[0]))];
	}
	for (s = 0; s < sizeof(schemes) / sizeof(schemes[0]); s++) {
		ck_assert_int_eq(kvp_key_root(schemes[s], "0", &root), 0);
		for (len = 0; len <= 600; len++) {
			if (len > 40 && (len < 126 || len > 130) && (len < 560 || len > 572))
				continue;
			ck_assert_int_eq(keys_cpu_use(KEYS_CPU_C), KEYS_CPU_C);
			ck_assert_int_eq(kvp_key_block(schemes[s], &root, tok, len, NULL, 0, &a), 0);
			ck_assert_int_eq(keys_cpu_use(KEYS_CPU_X86), KEYS_CPU_X86);
			ck_assert_int_eq(kvp_key_block(schemes[s], &root, tok, len, NULL, 0, &b), 0);
			ck_assert_msg(!memcmp(a.b, b.b, sizeof(a.b)), "scheme %u, %zu ids: the x86 "
				      "encoding differs", schemes[s], len);
		}
	}
	keys_cpu_use(0);
}
END_TEST

Suite *keys_suite(void)
{
	Suite *s = suite_create("keys");
	TCase *vllm = tcase_create("vllm");
	TCase *both = tcase_create("schemes");
	TCase *fast = tcase_create("fast");

	tcase_add_loop_test(vllm, test_keys_vllm_roots_match_golden, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(vllm, test_keys_vllm_blocks_match_golden, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(vllm, test_keys_vllm_chains_match_golden, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(vllm, test_keys_every_vllm_algorithm_matches_vllm, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_test(vllm, test_keys_pickle_schemes_refuse_a_block_past_one_frame);
	tcase_add_test(vllm, test_keys_x86_encoders_equal_the_portable_ones);
	suite_add_tcase(s, vllm);

	tcase_add_test(both, test_keys_chain_equals_repeated_block);
	tcase_add_test(both, test_keys_chain_ignores_a_partial_last_block);
	tcase_add_test(both, test_keys_rejects_bad_arguments);
	tcase_add_test(both, test_keys_vllm_and_fast_differ);
	suite_add_tcase(s, both);

	tcase_add_test(fast, test_keys_fast_is_deterministic_with_zero_upper_half);
	tcase_add_test(fast, test_keys_fast_changes_with_every_input);
	suite_add_tcase(s, fast);
	return s;
}
