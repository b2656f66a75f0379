/* SPDX-License-Identifier: MIT */
/*
 * keys_enc.c - the general encoders of the prefix keys: vLLM's canonical
 * CBOR streamed into SHA-256 (sha256_cbor), CPython's pickle and the CBOR
 * into SHA-256 or XXH3-128 (sha256, xxhash, xxhash_cbor) through a small
 * staging buffer, and a block's extra keys as general values (kvp_value).
 * keys_direct.c has the fast path for blocks without extras. Pure and
 * thread-safe: all state is on the caller's stack.
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

/* --- Canonical CBOR into SHA-256 (RFC 8949) ------------------------------ */


/* Encoded items wait in buf and go to the hash CBOR_STAGE bytes at a time,
 * so a block of any length is hashed in constant memory. */
struct cbor_sink {
	struct keys_sha256 sha;
	size_t len;		/* bytes waiting in buf */
	uint8_t buf[CBOR_STAGE];
};

static void cbor_flush(struct cbor_sink *c)
{
	keys_sha256_update(&c->sha, c->buf, c->len);
	c->len = 0;
}

/* cbor_head() - an item's head with its argument in the shortest form
 * (section 4.2.1: preferred serialization of the argument). */
static inline void cbor_head(struct cbor_sink *c, enum cbor_major major,
			     uint64_t v)
{
	uint8_t *p, ib = (uint8_t)(major << 5);

	if (c->len > CBOR_STAGE - CBOR_HEAD_MAX)
		cbor_flush(c);
	p = c->buf + c->len;
	if (v < 24) {
		p[0] = ib | (uint8_t)v;
		c->len += 1;
	} else if (v <= 0xff) {
		p[0] = ib | 24;
		p[1] = (uint8_t)v;
		c->len += 2;
	} else if (v <= 0xffff) {
		p[0] = ib | 25;
		p[1] = (uint8_t)(v >> 8);
		p[2] = (uint8_t)v;
		c->len += 3;
	} else if (v <= 0xffffffff) {
		p[0] = ib | 26;
		store_be32(p + 1, (uint32_t)v);
		c->len += 5;
	} else {
		p[0] = ib | 27;
		store_be32(p + 1, (uint32_t)(v >> 32));
		store_be32(p + 5, (uint32_t)v);
		c->len += 9;
	}
}

/* cbor_string() - a byte or text string: head, then the bytes as given
 * (a text string's bytes are not checked to be UTF-8). */
static void cbor_string(struct cbor_sink *c, enum cbor_major major,
			const void *data, size_t n)
{
	cbor_head(c, major, n);
	if (n <= CBOR_STAGE - c->len) {
		memcpy(c->buf + c->len, data, n);
		c->len += n;
		return;
	}
	cbor_flush(c);
	keys_sha256_update(&c->sha, data, n);
}

static void cbor_simple(struct cbor_sink *c, uint8_t byte)
{
	if (c->len == CBOR_STAGE)
		cbor_flush(c);
	c->buf[c->len++] = byte;
}

static void cbor_begin(struct cbor_sink *c)
{
	keys_sha256_init(&c->sha);
	c->len = 0;
}

static void cbor_end(struct cbor_sink *c, kvp_key *key)
{
	cbor_flush(c);
	keys_sha256_final(&c->sha, key->b);
}

/* vllm_root() - SHA-256(cbor2.dumps(seed, canonical=True)): vLLM's
 * NONE_HASH when PYTHONHASHSEED=seed. */
void vllm_root(const char *seed, kvp_key *root)
{
	struct cbor_sink c;

	cbor_begin(&c);
	cbor_string(&c, CBOR_TEXT, seed, strlen(seed));
	cbor_end(&c, root);
}


/* vllm_block() - SHA-256(cbor2.dumps((parent, tuple(tokens), extras),
 * canonical=True)) where extras is None when nextras is 0: vLLM's
 * hash_block_tokens() with sha256_cbor. */
void vllm_block(const kvp_key *parent, const uint32_t *tokens,
		       size_t ntokens, const kvp_extra *extras, size_t nextras,
		       kvp_key *key)
{
	struct cbor_sink c;
	size_t i;

	if (nextras == 0 && vllm_block_direct(KVP_KEYS_VLLM_SHA256_CBOR, parent, tokens,
					      ntokens, key))
		return;
	cbor_begin(&c);
	cbor_head(&c, CBOR_ARRAY, 3);
	cbor_string(&c, CBOR_BYTES, parent->b, KVP_KEY_BYTES);
	cbor_head(&c, CBOR_ARRAY, ntokens);
	for (i = 0; i < ntokens; i++)
		cbor_head(&c, CBOR_UINT, tokens[i]);
	if (nextras == 0) {
		cbor_simple(&c, CBOR_NULL);
	} else {
		cbor_head(&c, CBOR_ARRAY, nextras);
		for (i = 0; i < nextras; i++) {
			if (extras[i].str)
				cbor_string(&c, CBOR_TEXT, extras[i].str,
					    strlen(extras[i].str));
			else
				cbor_head(&c, CBOR_UINT, extras[i].num);
		}
	}
	cbor_end(&c, key);
}

/* --- vLLM's other algorithms: pickle, XXH3-128 ------------------------------
 *
 * vLLM's `sha256` hashes pickle.dumps(obj, protocol=5) with SHA-256, its
 * `xxhash` the same pickle with XXH3-128, its `xxhash_cbor` the canonical
 * CBOR of sha256_cbor with XXH3-128 (vllm/utils/hashing.py). obj is the
 * root's seed (a str) or a block's (parent digest, tuple(token ids),
 * None or tuple(extra keys)), the parent digest being 32 bytes for
 * SHA-256 and 16 for XXH3-128 (xxhash's digest(): big-endian).
 *
 * The pickle is CPython's for exactly these shapes: PROTO 5, one FRAME
 * (8-byte little-endian length of what follows), then
 *   bytes  SHORT_BINBYTES 'C' n<256 / BINBYTES 'B' u32, then MEMOIZE
 *   str    SHORT_BINUNICODE 0x8c n<256 / BINUNICODE 'X' u32, then MEMOIZE
 *   int    BININT1 'K' (< 2^8), BININT2 'M' (< 2^16), BININT 'J' (< 2^31,
 *          signed 32-bit little-endian), else LONG1 0x8a with the
 *          shortest little-endian two's complement
 *   None   'N'
 *   tuple  ')' when empty (not memoized); 1..3 items then TUPLE1..3
 *          (0x85..0x87); more: MARK '(' items TUPLE 't'; then MEMOIZE
 * and STOP '.'. CPython starts a new frame at 64 KiB, so a pickle whose
 * frame would reach that is refused (-EINVAL): a block of up to about
 * 13,000 tokens fits. No object is repeated, so no memo is read back.
 */

/* A byte sink into SHA-256 or XXH3-128, CBOR_STAGE bytes at a time. */
struct hsink {
	bool xxh;
	bool dry;		/* only count what would be written */
	struct keys_sha256 sha;
	XXH3_state_t *st;	/* xxh: created on the first flush */
	int err;
	size_t len, total;
	uint8_t buf[FAST_STAGE];
};

static void hs_begin(struct hsink *h, bool xxh)
{
	h->xxh = xxh;
	h->dry = false;
	h->st = NULL;
	h->err = 0;
	h->len = 0;
	h->total = 0;
	if (!xxh)
		keys_sha256_init(&h->sha);
}

static void hs_flush(struct hsink *h)
{
	if (!h->xxh) {
		keys_sha256_update(&h->sha, h->buf, h->len);
	} else if (!h->err) {
		if (!h->st) {
			h->st = XXH3_createState();
			if (!h->st || XXH3_128bits_reset(h->st) != XXH_OK)
				h->err = -ENOMEM;
		}
		if (!h->err)
			XXH3_128bits_update(h->st, h->buf, h->len);
	}
	h->len = 0;
}

static void hs_write(struct hsink *h, const void *data, size_t n)
{
	const uint8_t *p = data;

	h->total += n;
	if (h->dry)
		return;
	while (n > 0) {
		size_t k = sizeof(h->buf) - h->len;

		if (k == 0) {
			hs_flush(h);
			k = sizeof(h->buf);
		}
		if (k > n)
			k = n;
		memcpy(h->buf + h->len, p, k);
		h->len += k;
		p += k;
		n -= k;
	}
}

static inline void hs_byte(struct hsink *h, uint8_t b)
{
	if (h->dry) {
		h->total++;
		return;
	}
	if (h->len == sizeof(h->buf))
		hs_flush(h);
	h->buf[h->len++] = b;
	h->total++;
}

/* hs_end() - the digest as a key: SHA-256's 32 bytes, or XXH3-128's 16
 * (big-endian, as xxhash's digest()) and 16 zero bytes. 0 or -ENOMEM. */
static int hs_end(struct hsink *h, kvp_key *key)
{
	XXH128_canonical_t c;
	XXH128_hash_t d;

	if (!h->xxh) {
		hs_flush(h);
		keys_sha256_final(&h->sha, key->b);
		return 0;
	}
	if (!h->st) {
		d = XXH3_128bits(h->buf, h->len);
	} else {
		hs_flush(h);
		d = h->err ? (XXH128_hash_t){ 0, 0 } : XXH3_128bits_digest(h->st);
	}
	XXH3_freeState(h->st);
	if (h->err)
		return h->err;
	XXH128_canonicalFromHash(&c, d);
	memcpy(key->b, c.digest, 16);
	memset(key->b + 16, 0, KVP_KEY_BYTES - 16);
	return 0;
}

/* CBOR into an hsink (for xxhash_cbor): the same encoding as above. */
static void hc_head(struct hsink *h, enum cbor_major major, uint64_t v)
{
	uint8_t p[CBOR_HEAD_MAX], ib = (uint8_t)(major << 5);
	size_t n;

	if (v < 24) {
		p[0] = ib | (uint8_t)v;
		n = 1;
	} else if (v <= 0xff) {
		p[0] = ib | 24;
		p[1] = (uint8_t)v;
		n = 2;
	} else if (v <= 0xffff) {
		p[0] = ib | 25;
		p[1] = (uint8_t)(v >> 8);
		p[2] = (uint8_t)v;
		n = 3;
	} else if (v <= 0xffffffff) {
		p[0] = ib | 26;
		store_be32(p + 1, (uint32_t)v);
		n = 5;
	} else {
		p[0] = ib | 27;
		store_be32(p + 1, (uint32_t)(v >> 32));
		store_be32(p + 5, (uint32_t)v);
		n = 9;
	}
	hs_write(h, p, n);
}

/* The pickle's pieces: their sizes (for the frame) and their bytes. */
static size_t pk_int_size(uint64_t v)
{
	size_t n = 1;

	if (v <= 0xff)
		return 2;
	if (v <= 0xffff)
		return 3;
	if (v < 0x80000000u)
		return 5;
	while (n < 9 && (v >> (8 * n - 1)) != 0)	/* room for a 0 sign bit */
		n++;
	return 2 + n;
}

static void pk_int(struct hsink *h, uint64_t v)
{
	uint8_t p[12];
	size_t n, i;

	if (v <= 0xff) {
		p[0] = 'K';
		p[1] = (uint8_t)v;
		n = 2;
	} else if (v <= 0xffff) {
		p[0] = 'M';
		p[1] = (uint8_t)v;
		p[2] = (uint8_t)(v >> 8);
		n = 3;
	} else if (v < 0x80000000u) {
		p[0] = 'J';
		store_le32(p + 1, (uint32_t)v);
		n = 5;
	} else {
		n = pk_int_size(v);
		p[0] = 0x8a;
		p[1] = (uint8_t)(n - 2);
		for (i = 0; i < n - 2; i++)
			p[2 + i] = i < 8 ? (uint8_t)(v >> (8 * i)) : 0;
	}
	hs_write(h, p, n);
}

static size_t pk_str_size(size_t n)
{
	return (n < 256 ? 2 : 5) + n + 1;
}

/* pk_str() - a str (op 0x8c / 'X') or bytes (op 'C' / 'B') and MEMOIZE. */
static void pk_string(struct hsink *h, bool text, const void *data, size_t n)
{
	uint8_t p[5];

	if (n < 256) {
		p[0] = text ? 0x8c : 'C';
		p[1] = (uint8_t)n;
		hs_write(h, p, 2);
	} else {
		p[0] = text ? 'X' : 'B';
		store_le32(p + 1, (uint32_t)n);
		hs_write(h, p, 5);
	}
	hs_write(h, data, n);
	hs_byte(h, PK_MEMOIZE);
}

static void pk_tuple_open(struct hsink *h, size_t n)
{
	if (n > 3)
		hs_byte(h, '(');
}

static void pk_tuple_close(struct hsink *h, size_t n)
{
	hs_byte(h, n == 0 ? ')' : n <= 3 ? (uint8_t)(0x84 + n) : 't');
	if (n)
		hs_byte(h, PK_MEMOIZE);
}

/* pk_begin() / pk_end() - PROTO 5 and a FRAME of len bytes, and STOP
 * (counted in len). */
static int pk_begin(struct hsink *h, size_t len)
{
	uint8_t p[11] = { 0x80, 5, 0x95 };

	if (len > PK_FRAME_MAX)
		return keys_bad("the block's pickle would be %zu bytes, past the 64 KiB frame CPython "
			   "writes whole: vLLM's sha256 and xxhash algorithms take at most "
			   "about 9,000 large token ids a block", len);
	store_le64(p + 3, len);
	hs_write(h, p, sizeof(p));
	return 0;
}

/* vllm_any_root() / vllm_any_block() - vLLM's NONE_HASH and
 * hash_block_tokens() with the sha256, xxhash and xxhash_cbor algorithms. */
int vllm_any_root(uint32_t scheme, const char *seed, kvp_key *root)
{
	size_t n = strlen(seed);
	struct hsink h;
	int rc;

	hs_begin(&h, scheme != KVP_KEYS_VLLM_SHA256);
	if (scheme == KVP_KEYS_VLLM_XXHASH_CBOR) {
		hc_head(&h, CBOR_TEXT, n);
		hs_write(&h, seed, n);
	} else {
		rc = pk_begin(&h, pk_str_size(n) + 1);
		if (rc < 0) {
			hs_end(&h, root);
			return rc;
		}
		pk_string(&h, true, seed, n);
		hs_byte(&h, '.');
	}
	return hs_end(&h, root);
}


/* vllm_any_block() - the common case straight into a buffer, else the
 * general encoder with the kvp_extra items as values (a str or an
 * unsigned int each). */
int vllm_any_block(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			  size_t ntokens, const kvp_extra *extras, size_t nextras,
			  kvp_key *key)
{
	kvp_value stack[8], *v = stack;
	size_t i;
	int rc;

	if (nextras == 0)	/* the common case: no copy of the extras */
		return vllm_block_direct(scheme, parent, tokens, ntokens, key) ? 0 :
		       keys_values_block(scheme, parent, tokens, ntokens, NULL, 0, key);
	if (nextras > sizeof(stack) / sizeof(stack[0])) {
		v = malloc(nextras * sizeof(*v));
		if (!v)
			return -ENOMEM;
	}
	for (i = 0; i < nextras; i++)
		v[i] = extras[i].str ? (kvp_value){ .type = KVP_VALUE_STR, .str = extras[i].str } :
			(kvp_value){ .type = KVP_VALUE_UINT, .u = extras[i].num };
	rc = keys_values_block(scheme, parent, tokens, ntokens, v, nextras, key);
	if (v != stack)
		free(v);
	return rc;
}


/* --- Extra keys as general values (kvp_value) ------------------------------
 *
 * A block's extras as vLLM builds them: ints, str, bytes and tuples of
 * them. In the pickle, a str, bytes or non-empty tuple is memoized when
 * written and a second occurrence of the same object is a memo reference
 * (BINGET 'h' index < 256, else LONG_BINGET 'j'); here the same object is
 * the same pointer (kvp_value.str, .bytes or .items), as vLLM's tag
 * literals ("mm", "lora") are one object. The memo counts from the parent
 * (0) and the token tuple (1 when it is not empty).
 */

struct pk_memo {
	const void *ptr[VAL_MAX_ITEMS];
	uint32_t idx[VAL_MAX_ITEMS];
	uint32_t n, next;	/* entries, the next memo index */
};

static int memo_find(const struct pk_memo *m, const void *p)
{
	uint32_t i;

	for (i = 0; i < m->n; i++)
		if (m->ptr[i] == p)
			return (int)m->idx[i];
	return -1;
}

/* memo_add() - the object just written was memoized (MEMOIZE written). */
static void memo_add(struct pk_memo *m, const void *p)
{
	if (m->n < VAL_MAX_ITEMS) {
		m->ptr[m->n] = p;
		m->idx[m->n++] = m->next;
	}
	m->next++;
}

static void pk_get(struct hsink *h, uint32_t idx)
{
	uint8_t p[5];

	if (idx < 256) {
		p[0] = 'h';
		p[1] = (uint8_t)idx;
		hs_write(h, p, 2);
	} else {
		p[0] = 'j';
		store_le32(p + 1, idx);
		hs_write(h, p, 5);
	}
}

/* pk_sint() - a Python int: BININT1/2 for small non-negative ones, BININT
 * from -2^31 to 2^31 - 1, else LONG1 of the shortest two's complement. */
static void pk_sint(struct hsink *h, int64_t v)
{
	uint8_t p[12];
	size_t n = 1, i;

	if (v >= 0) {
		pk_int(h, (uint64_t)v);
		return;
	}
	if (v >= INT32_MIN) {
		p[0] = 'J';
		store_le32(p + 1, (uint32_t)v);
		hs_write(h, p, 5);
		return;
	}
	/* the fewest bytes whose top bit is the sign: -2^(8n-1) <= v */
	while (n < 8 && v < -((int64_t)1 << (8 * n - 1)))
		n++;
	p[0] = 0x8a;
	p[1] = (uint8_t)n;
	for (i = 0; i < n; i++)
		p[2 + i] = (uint8_t)((uint64_t)v >> (8 * i));
	hs_write(h, p, 2 + n);
}

static int val_check(const kvp_value *v, int depth, uint32_t *count)
{
	uint32_t i;
	int rc;

	if (!v)
		return keys_bad("an extra key's tuple has items NULL");
	if (depth > VAL_MAX_DEPTH)
		return keys_bad("extra keys nest deeper than %d tuples", VAL_MAX_DEPTH);
	if (++*count > VAL_MAX_ITEMS)
		return keys_bad("a block's extra keys hold more than %d values", VAL_MAX_ITEMS);
	switch (v->type) {
	case KVP_VALUE_INT:
	case KVP_VALUE_UINT:
		return 0;
	case KVP_VALUE_STR:
		return v->str ? 0 : keys_bad("value %u of the extra keys is a str with str NULL",
					 *count);
	case KVP_VALUE_BYTES:
		return v->bytes || !v->n ? 0 : keys_bad("value %u of the extra keys is %u bytes at "
						   "NULL", *count, v->n);
	case KVP_VALUE_TUPLE:
		if (v->n && !v->items)
			return keys_bad("value %u of the extra keys is a tuple of %u items at NULL",
				   *count, v->n);
		for (i = 0; i < v->n; i++) {
			rc = val_check(&v->items[i], depth + 1, count);
			if (rc < 0)
				return rc;
		}
		return 0;
	default:
		return keys_bad("value %u of the extra keys has type %u, which vLLM does not hash "
			   "(int, str, bytes and tuple: KVP_VALUE_*)", *count, v->type);
	}
}

static size_t val_strlen(const kvp_value *v)
{
	return v->n ? v->n : strlen(v->str);
}

static void pk_value(struct hsink *h, struct pk_memo *m, const kvp_value *v)
{
	const void *id = v->type == KVP_VALUE_STR ? (const void *)v->str :
			 v->type == KVP_VALUE_BYTES ? v->bytes :
			 v->type == KVP_VALUE_TUPLE ? (const void *)v->items : NULL;
	int got = id && (v->type != KVP_VALUE_TUPLE || v->n) ? memo_find(m, id) : -1;
	uint32_t i;

	if (got >= 0) {
		pk_get(h, (uint32_t)got);
		return;
	}
	switch (v->type) {
	case KVP_VALUE_INT:
		pk_sint(h, v->i);
		break;
	case KVP_VALUE_UINT:
		pk_int(h, v->u);
		break;
	case KVP_VALUE_STR:
	case KVP_VALUE_BYTES:
		pk_string(h, v->type == KVP_VALUE_STR, id,
			  v->type == KVP_VALUE_STR ? val_strlen(v) : v->n);
		memo_add(m, id);
		break;
	case KVP_VALUE_TUPLE:
		pk_tuple_open(h, v->n);
		for (i = 0; i < v->n; i++)
			pk_value(h, m, &v->items[i]);
		pk_tuple_close(h, v->n);
		if (v->n)
			memo_add(m, id);
		break;
	}
}

/* hc_value() - the same value in canonical CBOR (ints major 0 or 1). */
static void hc_value(struct hsink *h, const kvp_value *v)
{
	uint32_t i;

	switch (v->type) {
	case KVP_VALUE_INT:
		if (v->i >= 0)
			hc_head(h, CBOR_UINT, (uint64_t)v->i);
		else
			hc_head(h, (enum cbor_major)1, (uint64_t)(-(v->i + 1)));
		break;
	case KVP_VALUE_UINT:
		hc_head(h, CBOR_UINT, v->u);
		break;
	case KVP_VALUE_STR:
		hc_head(h, CBOR_TEXT, val_strlen(v));
		hs_write(h, v->str, val_strlen(v));
		break;
	case KVP_VALUE_BYTES:
		hc_head(h, CBOR_BYTES, v->n);
		hs_write(h, v->bytes, v->n);
		break;
	case KVP_VALUE_TUPLE:
		hc_head(h, CBOR_ARRAY, v->n);
		for (i = 0; i < v->n; i++)
			hc_value(h, &v->items[i]);
		break;
	}
}

/* pk_block_values() - the block tuple's pickle (after the frame). */
static void pk_block_values(struct hsink *h, struct pk_memo *m, const kvp_key *parent,
			    size_t pb, const uint32_t *tokens, size_t ntokens,
			    const kvp_value *extras, size_t nextras)
{
	size_t i;

	memset(m, 0, sizeof(*m));
	pk_tuple_open(h, 3);
	pk_string(h, false, parent->b, pb);
	m->next = 1;
	pk_tuple_open(h, ntokens);
	for (i = 0; i < ntokens; i++)
		pk_int(h, tokens[i]);
	pk_tuple_close(h, ntokens);
	if (ntokens)
		m->next++;
	if (nextras == 0) {
		hs_byte(h, 'N');
	} else {
		pk_tuple_open(h, nextras);
		for (i = 0; i < nextras; i++)
			pk_value(h, m, &extras[i]);
		pk_tuple_close(h, nextras);
	}
	pk_tuple_close(h, 3);
	hs_byte(h, '.');
}

int keys_values_block(uint32_t scheme, const kvp_key *parent, const uint32_t *tokens,
			size_t ntokens, const kvp_value *extras, size_t nextras, kvp_key *key)
{
	size_t pb = scheme == KVP_KEYS_VLLM_SHA256 || scheme == KVP_KEYS_VLLM_SHA256_CBOR ?
		    32 : 16, i;
	struct pk_memo *m;
	struct hsink h;
	int rc;

	hs_begin(&h, pb == 16);
	if (scheme == KVP_KEYS_VLLM_SHA256_CBOR || scheme == KVP_KEYS_VLLM_XXHASH_CBOR) {
		hc_head(&h, CBOR_ARRAY, 3);
		hc_head(&h, CBOR_BYTES, pb);
		hs_write(&h, parent->b, pb);
		hc_head(&h, CBOR_ARRAY, ntokens);
		for (i = 0; i < ntokens; i++)
			hc_head(&h, CBOR_UINT, tokens[i]);
		if (nextras == 0) {
			hs_byte(&h, CBOR_NULL);
		} else {
			hc_head(&h, CBOR_ARRAY, nextras);
			for (i = 0; i < nextras; i++)
				hc_value(&h, &extras[i]);
		}
		return hs_end(&h, key);
	}
	m = malloc(sizeof(*m));
	if (!m) {
		hs_end(&h, key);
		return -ENOMEM;
	}
	/* the frame's length first: the same writing, counted */
	h.dry = true;
	pk_block_values(&h, m, parent, pb, tokens, ntokens, extras, nextras);
	h.dry = false;
	i = h.total;
	h.total = 0;
	rc = pk_begin(&h, i);
	if (rc == 0)
		pk_block_values(&h, m, parent, pb, tokens, ntokens, extras, nextras);
	free(m);
	if (rc < 0) {
		hs_end(&h, key);
		return rc;
	}
	return hs_end(&h, key);
}

KVP_API int kvp_key_block_values(uint32_t scheme, const kvp_key *parent,
				 const uint32_t *tokens, size_t ntokens,
				 const kvp_value *extras, size_t nextras, kvp_key *key)
{
	uint32_t count = 0;
	size_t i;

	keys_error_buf[0] = '\0';
	if (!keys_scheme_known(scheme))
		return keys_bad_scheme(scheme);
	if (!parent || !key || (ntokens && !tokens) || (nextras && !extras))
		return keys_bad("kvp_key_block_values: parent and key must not be NULL, nor tokens "
			   "or extras when there are some");
	if (nextras > VAL_MAX_ITEMS)
		return keys_bad("%zu extra keys for one block: at most %d", nextras, VAL_MAX_ITEMS);
	for (i = 0; i < nextras; i++)
		if (val_check(&extras[i], 1, &count) < 0)
			return -EINVAL;
	return keys_values_block(scheme, parent, tokens, ntokens, extras, nextras, key);
}
