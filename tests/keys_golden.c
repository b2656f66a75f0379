/* SPDX-License-Identifier: MIT */
/*
 * keys_golden.c - what the key tests share: reading tests/golden/keys_vllm*.txt
 * (the vectors of tests/golden/gen_keys*.py), their hex, token and extras
 * fields, and the check of a key against a digest. Used by check_keys.c,
 * check_keys_sha256.c and check_keys_request.c.
 */
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

/* impl_or_skip() - run the test with the key code impl (KEYS_CPU_*: the
 * loop tests run each); false, saying so, where the CPU has none of the
 * x86 extensions kvpool uses. */
bool impl_or_skip(int impl)
{
	if (keys_cpu_use(impl) == impl)
		return true;
	fprintf(stderr, "keys: the CPU has neither the SHA extensions nor AVX-512 "
		"VBMI2; the run of the x86 code is skipped\n");
	return false;
}

/* --- Reading a golden file -------------------------------------------------- */

void golden_open_file(struct golden *g, const char *path)
{
	memset(g, 0, sizeof(*g));
	g->f = fopen(path, "r");
	ck_assert_msg(g->f, "cannot open %s: %s (see tests/golden/gen_keys*.py)", path,
		      strerror(errno));
}

void golden_close(struct golden *g)
{
	free(g->line);
	fclose(g->f);
}

/* golden_next() - the next vector whose first field is kind, split into
 * g->field[]; false at the end of the file. */
bool golden_next(struct golden *g, const char *kind)
{
	while (getline(&g->line, &g->cap, g->f) > 0) {
		char *p = g->line, *save = NULL, *tok;

		g->lineno++;
		g->n = 0;
		while ((tok = strtok_r(p, " \n", &save)) && g->n < GOLDEN_MAX_FIELDS) {
			g->field[g->n++] = tok;
			p = NULL;
		}
		if (g->n > 0 && strcmp(g->field[0], kind) == 0)
			return true;
	}
	return false;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* unhex() - decode hex ("-": empty) into a new buffer with a NUL after the
 * bytes; *len gets their count. Caller frees. */
uint8_t *unhex(const char *s, size_t *len)
{
	size_t n = strcmp(s, "-") == 0 ? 0 : strlen(s) / 2, i;
	uint8_t *out = malloc(n + 1);

	ck_assert_ptr_nonnull(out);
	for (i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		ck_assert_msg(hi >= 0 && lo >= 0, "bad hex '%s'", s);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	out[n] = 0;
	*len = n;
	return out;
}

void unhex_key(const char *s, kvp_key *k)
{
	size_t n;
	uint8_t *b = unhex(s, &n);

	ck_assert_uint_eq(n, KVP_KEY_BYTES);
	memcpy(k->b, b, KVP_KEY_BYTES);
	free(b);
}

/* parse_tokens() - "1,2,3" or "-"; caller frees. */
uint32_t *parse_tokens(const char *s, size_t *n)
{
	size_t cap = 1, i = 0;
	uint32_t *t;
	const char *p;

	for (p = s; *p; p++)
		cap += *p == ',';
	t = malloc(cap * sizeof(*t));
	ck_assert_ptr_nonnull(t);
	if (strcmp(s, "-") != 0) {
		for (p = s; ; p++) {
			char *end;
			unsigned long long v = strtoull(p, &end, 10);

			ck_assert_uint_le(v, UINT32_MAX);
			t[i++] = (uint32_t)v;
			p = end;
			if (*p != ',')
				break;
		}
	}
	*n = i;
	return t;
}

/* parse_extras() - "-", or items s:<hex>, r:<count>:<hex>, n:<num>; free
 * with free_extras(). */
kvp_extra *parse_extras(char *s, size_t *n)
{
	char *save = NULL, *item;
	size_t cap = 1, i = 0;
	kvp_extra *e;
	const char *p;

	for (p = s; *p; p++)
		cap += *p == ',';
	e = calloc(cap, sizeof(*e));
	ck_assert_ptr_nonnull(e);
	if (strcmp(s, "-") != 0) {
		for (item = strtok_r(s, ",", &save); item;
		     item = strtok_r(NULL, ",", &save), i++) {
			size_t len;

			if (item[0] == 'n') {
				e[i].num = strtoull(item + 2, NULL, 10);
			} else if (item[0] == 's') {
				e[i].str = (char *)unhex(item + 2, &len);
			} else {
				char *end;
				size_t count = strtoul(item + 2, &end, 10), k;
				uint8_t *one = unhex(end + 1, &len);
				char *str = malloc(count * len + 1);

				ck_assert_ptr_nonnull(str);
				for (k = 0; k < count; k++)
					memcpy(str + k * len, one, len);
				str[count * len] = 0;
				free(one);
				e[i].str = str;
			}
		}
	}
	*n = i;
	return e;
}

void free_extras(kvp_extra *e, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free((char *)e[i].str);
	free(e);
}

void key_hex(const kvp_key *k, char out[2 * KVP_KEY_BYTES + 1])
{
	int i;

	for (i = 0; i < KVP_KEY_BYTES; i++)
		sprintf(out + 2 * i, "%02x", k->b[i]);
}

/* --- vLLM's hash names and digests ----------------------------------------- */

/* vLLM's sha256, xxhash and xxhash_cbor (and sha256_cbor), vectors from
 * vLLM's own hash functions (tests/golden/gen_keys_vllm.py). */
uint32_t algo_scheme(const char *algo, size_t *digest)
{
	*digest = strstr(algo, "xxhash") ? 16 : 32;
	return !strcmp(algo, "sha256") ? KVP_KEYS_VLLM_SHA256 :
	       !strcmp(algo, "xxhash") ? KVP_KEYS_VLLM_XXHASH :
	       !strcmp(algo, "xxhash_cbor") ? KVP_KEYS_VLLM_XXHASH_CBOR :
	       KVP_KEYS_VLLM_SHA256_CBOR;
}

/* digest_is() - key k holds the digest hex (and zeros after a short one) */
void digest_is(const kvp_key *k, const char *hex, size_t digest,
	       const struct golden *g, int block)
{
	size_t n, i;
	uint8_t *want = unhex(hex, &n);

	ck_assert_uint_eq(n, digest);
	ck_assert_msg(memcmp(k->b, want, n) == 0, "line %lu, block %d: another digest",
		      g->lineno, block);
	for (i = n; i < KVP_KEY_BYTES; i++)
		ck_assert_msg(k->b[i] == 0, "line %lu: byte %zu after the digest is not 0",
			      g->lineno, i);
	free(want);
}
