/* SPDX-License-Identifier: MIT */
/*
 * check_keys.c - unit tests of the prefix keys (client/keys.c): SHA-256
 * against FIPS 180-4's examples (portable and with the SHA extensions),
 * vLLM's sha256_cbor byte for byte against tests/golden/keys_vllm.txt
 * (tests/golden/gen_keys.py, cbor2 and hashlib), all four of vLLM's
 * algorithms against tests/golden/keys_vllm_algos.txt (vLLM's own hash
 * functions), the fast scheme's properties, and the argument checks.
 *
 * Past 800 lines on purpose: the key files (keys.c, keys_sha256.c,
 * keys_enc.c, keys_direct.c, keys_request.c) are one API, held byte for
 * byte to the same golden vectors.
 */
#include <ctype.h>
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
#include "suites.h"

#define GOLDEN_FILE KVP_GOLDEN_DIR "/keys_vllm.txt"
#define GOLDEN_ALGOS KVP_GOLDEN_DIR "/keys_vllm_algos.txt"
#define GOLDEN_MAX_FIELDS 10

static const uint32_t schemes[] = {
	KVP_KEYS_VLLM_SHA256_CBOR, KVP_KEYS_VLLM_XXHASH_CBOR, KVP_KEYS_VLLM_SHA256,
	KVP_KEYS_VLLM_XXHASH,
};

/* impl_or_skip() - run the test with the key code impl (KEYS_CPU_*: the
 * loop tests run each); false, saying so, where the CPU has none of the
 * x86 extensions kvpool uses. */
static bool impl_or_skip(int impl)
{
	if (keys_cpu_use(impl) == impl)
		return true;
	fprintf(stderr, "check_keys: the CPU has neither the SHA extensions nor AVX-512 "
		"VBMI2; the run of the x86 code is skipped\n");
	return false;
}

/* --- Reading the golden file --------------------------------------------- */

struct golden {
	FILE *f;
	char *line;		/* getline()'s buffer, freed by golden_close() */
	size_t cap;
	unsigned long lineno;
	int n;			/* fields of the current line */
	char *field[GOLDEN_MAX_FIELDS];
};

static void golden_open_file(struct golden *g, const char *path)
{
	memset(g, 0, sizeof(*g));
	g->f = fopen(path, "r");
	ck_assert_msg(g->f, "cannot open %s: %s (see tests/golden/gen_keys*.py)", path,
		      strerror(errno));
}

#define golden_open(g) golden_open_file(g, GOLDEN_FILE)

static void golden_close(struct golden *g)
{
	free(g->line);
	fclose(g->f);
}

/* golden_next() - the next vector whose first field is kind, split into
 * g->field[]; false at the end of the file. */
static bool golden_next(struct golden *g, const char *kind)
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
static uint8_t *unhex(const char *s, size_t *len)
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

static void unhex_key(const char *s, kvp_key *k)
{
	size_t n;
	uint8_t *b = unhex(s, &n);

	ck_assert_uint_eq(n, KVP_KEY_BYTES);
	memcpy(k->b, b, KVP_KEY_BYTES);
	free(b);
}

/* parse_tokens() - "1,2,3" or "-"; caller frees. */
static uint32_t *parse_tokens(const char *s, size_t *n)
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
static kvp_extra *parse_extras(char *s, size_t *n)
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

static void free_extras(kvp_extra *e, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free((char *)e[i].str);
	free(e);
}

static void key_hex(const kvp_key *k, char out[2 * KVP_KEY_BYTES + 1])
{
	int i;

	for (i = 0; i < KVP_KEY_BYTES; i++)
		sprintf(out + 2 * i, "%02x", k->b[i]);
}

#define ck_assert_key_eq(got, want_hex, g) do {				\
	char hex_[2 * KVP_KEY_BYTES + 1];					\
	key_hex(got, hex_);							\
	ck_assert_msg(strcmp(hex_, want_hex) == 0,				\
		      "%s line %lu: key %s, want %s", GOLDEN_FILE,		\
		      (g)->lineno, hex_, want_hex);				\
} while (0)

/* --- SHA-256 ---------------------------------------------------------------- */

static void sha_hex(const uint8_t d[KEYS_SHA256_BYTES], char out[65])
{
	int i;

	for (i = 0; i < KEYS_SHA256_BYTES; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

/* FIPS 180-4's examples (the NIST "SHA256.pdf" example values). */
START_TEST(test_keys_sha256_fips_examples)
{
	static const char m448[] =
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	uint8_t d[KEYS_SHA256_BYTES], chunk[997];
	struct keys_sha256 s;
	char hex[65];
	size_t left;
	if (!impl_or_skip(_i))
		return;

	keys_sha256("abc", 3, d);
	sha_hex(d, hex);
	ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223"
			      "b00361a396177a9cb410ff61f20015ad");
	keys_sha256(m448, strlen(m448), d);
	sha_hex(d, hex);
	ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039"
			      "a33ce45964ff2167f6ecedd419db06c1");
	keys_sha256("", 0, d);
	sha_hex(d, hex);
	ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb924"
			      "27ae41e4649b934ca495991b7852b855");
	/* one million 'a', streamed in pieces that straddle blocks */
	memset(chunk, 'a', sizeof(chunk));
	keys_sha256_init(&s);
	for (left = 1000000; left > 0; ) {
		size_t n = left < sizeof(chunk) ? left : sizeof(chunk);

		keys_sha256_update(&s, chunk, n);
		left -= n;
	}
	keys_sha256_final(&s, d);
	sha_hex(d, hex);
	ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67"
			      "f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* hashlib's digests of every length around the padding boundaries, whole
 * and split in two at every point. */
START_TEST(test_keys_sha256_matches_hashlib_at_every_length)
{
	struct golden g;
	int vectors = 0;
	if (!impl_or_skip(_i))
		return;

	golden_open(&g);
	while (golden_next(&g, "sha")) {
		size_t n = strtoul(g.field[1], NULL, 10), i, cut;
		uint8_t *m = malloc(n + 1), d[KEYS_SHA256_BYTES];
		char hex[65];

		ck_assert_ptr_nonnull(m);
		for (i = 0; i < n; i++)
			m[i] = (uint8_t)(i * 31 + 7);
		keys_sha256(m, n, d);
		sha_hex(d, hex);
		ck_assert_msg(strcmp(hex, g.field[2]) == 0,
			      "sha256 of %zu bytes: %s, want %s", n, hex, g.field[2]);
		for (cut = 0; n <= 256 && cut <= n; cut++) {
			struct keys_sha256 s;

			keys_sha256_init(&s);
			keys_sha256_update(&s, m, cut);
			keys_sha256_update(&s, m + cut, n - cut);
			keys_sha256_final(&s, d);
			sha_hex(d, hex);
			ck_assert_msg(strcmp(hex, g.field[2]) == 0,
				      "sha256 of %zu bytes split at %zu", n, cut);
		}
		free(m);
		vectors++;
	}
	golden_close(&g);
	ck_assert_int_ge(vectors, 100);
}
END_TEST

/* --- vLLM's sha256_cbor ------------------------------------------------------ */

/* vLLM's sha256, xxhash and xxhash_cbor (and sha256_cbor), vectors from
 * vLLM's own hash functions (tests/golden/gen_keys_vllm.py). */
static uint32_t algo_scheme(const char *algo, size_t *digest)
{
	*digest = strstr(algo, "xxhash") ? 16 : 32;
	return !strcmp(algo, "sha256") ? KVP_KEYS_VLLM_SHA256 :
	       !strcmp(algo, "xxhash") ? KVP_KEYS_VLLM_XXHASH :
	       !strcmp(algo, "xxhash_cbor") ? KVP_KEYS_VLLM_XXHASH_CBOR :
	       KVP_KEYS_VLLM_SHA256_CBOR;
}

/* digest_is() - key k holds the digest hex (and zeros after a short one) */
static void digest_is(const kvp_key *k, const char *hex, size_t digest,
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

START_TEST(test_keys_tagged_extras_match_vllm)
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

START_TEST(test_keys_values_refuse_what_vllm_does_not_hash)
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
START_TEST(test_keys_request_keys_match_vllms_request_hasher)
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
	TCase *sha = tcase_create("sha256");
	TCase *vllm = tcase_create("vllm");
	TCase *both = tcase_create("schemes");
	TCase *fast = tcase_create("fast");

	tcase_add_loop_test(sha, test_keys_sha256_fips_examples, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(sha, test_keys_sha256_matches_hashlib_at_every_length, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	suite_add_tcase(s, sha);

	tcase_add_loop_test(vllm, test_keys_vllm_roots_match_golden, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(vllm, test_keys_vllm_blocks_match_golden, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(vllm, test_keys_vllm_chains_match_golden, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(vllm, test_keys_every_vllm_algorithm_matches_vllm, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_test(vllm, test_keys_pickle_schemes_refuse_a_block_past_one_frame);
	tcase_add_test(vllm, test_keys_x86_encoders_equal_the_portable_ones);
	tcase_add_loop_test(vllm, test_keys_tagged_extras_match_vllm, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_test(vllm, test_keys_values_refuse_what_vllm_does_not_hash);
	tcase_add_test(vllm, test_keys_request_keys_match_vllms_request_hasher);
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
