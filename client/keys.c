/* SPDX-License-Identifier: MIT */
/*
 * keys.c - prefix keys: kvp_key_root(), kvp_key_block(), kvp_key_chain().
 *
 * Owns the two key schemes of kvpool.h and what they are built from:
 *
 * KVP_KEYS_VLLM_SHA256_CBOR, byte for byte vLLM's sha256_cbor prefix
 * hash: a block key is SHA-256 of the canonical CBOR (RFC 8949 section
 * 4.2.1, what cbor2.dumps(..., canonical=True) writes) of the array
 * [parent key as a byte string, [token ids], null or [extra keys]], and
 * the root is SHA-256 of the CBOR text string of the seed. SHA-256
 * (FIPS 180-4) and the few CBOR items needed are written here; the
 * encoding streams into the hash through a small staging buffer, never
 * a buffer the size of the block.
 *
 * KVP_KEYS_FAST: XXH3-128 (libxxhash) over a self-delimiting little-endian
 * serialization of the same inputs; see fast_block() for the bytes.
 *
 * Every function here is pure and thread-safe: all state is on the
 * caller's stack.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <xxhash.h>

#include "kvpool.h"
#include "client/keys.h"

/* --- SHA-256 (FIPS 180-4) ------------------------------------------------ */

/* Section 4.2.2: the first 32 bits of the fractional parts of the cube
 * roots of the first 64 primes. */
static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5,
	0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
	0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5,
	0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Section 5.3.3: the square roots of the first 8 primes. */
static const uint32_t sha256_h0[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* Section 4.1.2; compilers turn ROTR into one rotate instruction. */
#define ROTR(x, n)	(((x) >> (n)) | ((x) << (32 - (n))))
#define BSIG0(x)	(ROTR(x, 2) ^ ROTR(x, 13) ^ ROTR(x, 22))
#define BSIG1(x)	(ROTR(x, 6) ^ ROTR(x, 11) ^ ROTR(x, 25))
#define SSIG0(x)	(ROTR(x, 7) ^ ROTR(x, 18) ^ ((x) >> 3))
#define SSIG1(x)	(ROTR(x, 17) ^ ROTR(x, 19) ^ ((x) >> 10))
#define CH(x, y, z)	((z) ^ ((x) & ((y) ^ (z))))
#define MAJ(x, y, z)	(((x) & (y)) | ((z) & ((x) | (y))))

/* One round of section 6.2.2 step 3. Instead of moving eight variables
 * each round, the caller rotates their names: after eight rounds they are
 * back in place. */
#define SHA256_ROUND(a, b, c, d, e, f, g, h, i) do {			\
	uint32_t t1 = (h) + BSIG1(e) + CH(e, f, g) + sha256_k[i] +	\
		      w[i];						\
	(d) += t1;							\
	(h) = t1 + BSIG0(a) + MAJ(a, b, c);				\
} while (0)

static inline uint32_t load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* sha256_blocks() - hash n whole 64-byte blocks of p into st. */
static void sha256_blocks(uint32_t st[8], const uint8_t *p, size_t n)
{
	uint32_t w[64];
	int i;

	for (; n > 0; n--, p += 64) {
		uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
		uint32_t e = st[4], f = st[5], g = st[6], h = st[7];

		for (i = 0; i < 16; i++)
			w[i] = load_be32(p + 4 * i);
		for (i = 16; i < 64; i++)
			w[i] = SSIG1(w[i - 2]) + w[i - 7] + SSIG0(w[i - 15]) +
			       w[i - 16];
		for (i = 0; i < 64; i += 8) {
			SHA256_ROUND(a, b, c, d, e, f, g, h, i + 0);
			SHA256_ROUND(h, a, b, c, d, e, f, g, i + 1);
			SHA256_ROUND(g, h, a, b, c, d, e, f, i + 2);
			SHA256_ROUND(f, g, h, a, b, c, d, e, i + 3);
			SHA256_ROUND(e, f, g, h, a, b, c, d, i + 4);
			SHA256_ROUND(d, e, f, g, h, a, b, c, i + 5);
			SHA256_ROUND(c, d, e, f, g, h, a, b, i + 6);
			SHA256_ROUND(b, c, d, e, f, g, h, a, i + 7);
		}
		st[0] += a;
		st[1] += b;
		st[2] += c;
		st[3] += d;
		st[4] += e;
		st[5] += f;
		st[6] += g;
		st[7] += h;
	}
}

void keys_sha256_init(struct keys_sha256 *s)
{
	memcpy(s->h, sha256_h0, sizeof(s->h));
	s->bytes = 0;
	s->fill = 0;
}

void keys_sha256_update(struct keys_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	if (s->fill) {
		size_t n = 64 - s->fill;

		if (n > len)
			n = len;
		memcpy(s->buf + s->fill, p, n);
		s->fill += n;
		p += n;
		len -= n;
		if (s->fill < 64)
			return;
		sha256_blocks(s->h, s->buf, 1);
		s->fill = 0;
	}
	if (len >= 64) {
		sha256_blocks(s->h, p, len / 64);
		p += len & ~(size_t)63;
		len &= 63;
	}
	if (len)
		memcpy(s->buf, p, len);
	s->fill = len;
}

/* Section 5.1.1: a 1 bit, zeros up to 56 mod 64 bytes, then the message
 * length in bits as a big-endian 64-bit integer. */
void keys_sha256_final(struct keys_sha256 *s, uint8_t out[KEYS_SHA256_BYTES])
{
	uint64_t bits = s->bytes << 3;
	int i;

	s->buf[s->fill++] = 0x80;
	if (s->fill > 56) {
		memset(s->buf + s->fill, 0, 64 - s->fill);
		sha256_blocks(s->h, s->buf, 1);
		s->fill = 0;
	}
	memset(s->buf + s->fill, 0, 56 - s->fill);
	store_be32(s->buf + 56, (uint32_t)(bits >> 32));
	store_be32(s->buf + 60, (uint32_t)bits);
	sha256_blocks(s->h, s->buf, 1);
	for (i = 0; i < 8; i++)
		store_be32(out + 4 * i, s->h[i]);
}

void keys_sha256(const void *data, size_t len, uint8_t out[KEYS_SHA256_BYTES])
{
	struct keys_sha256 s;

	keys_sha256_init(&s);
	keys_sha256_update(&s, data, len);
	keys_sha256_final(&s, out);
}

/* --- Canonical CBOR into SHA-256 (RFC 8949) ------------------------------ */

enum cbor_major {
	CBOR_UINT = 0,		/* unsigned integer */
	CBOR_BYTES = 2,		/* byte string */
	CBOR_TEXT = 3,		/* text string (UTF-8) */
	CBOR_ARRAY = 4,		/* array of n items */
};

#define CBOR_NULL	0xf6	/* major 7, simple value 22 */
#define CBOR_HEAD_MAX	9	/* initial byte + 8-byte argument */
#define CBOR_STAGE	256

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
static void vllm_root(const char *seed, kvp_key *root)
{
	struct cbor_sink c;

	cbor_begin(&c);
	cbor_string(&c, CBOR_TEXT, seed, strlen(seed));
	cbor_end(&c, root);
}

/* vllm_block() - SHA-256(cbor2.dumps((parent, tuple(tokens), extras),
 * canonical=True)) where extras is None when nextras is 0: vLLM's
 * hash_block_tokens() with sha256_cbor. */
static void vllm_block(const kvp_key *parent, const uint32_t *tokens,
		       size_t ntokens, const kvp_extra *extras, size_t nextras,
		       kvp_key *key)
{
	struct cbor_sink c;
	size_t i;

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

/* --- The fast scheme: XXH3-128 ------------------------------------------- */

/*
 * The bytes hashed (all integers little-endian):
 *
 *   root:  0x52 'R', "kvpool-fast-root", u64 seed length, the seed's bytes
 *   block: 0x42 'B', parent key (32 bytes), u64 token count, u32 per token,
 *          u64 extra count (0: vLLM's None), then per extra either
 *          0x01, u64 length, the string's bytes   (str != NULL)
 *          0x02, u64 num                          (str == NULL)
 *
 * Every field is fixed-size or preceded by its length, and the first byte
 * tells a root from a block, so two different inputs never give the same
 * bytes. The 128-bit hash h is stored as key bytes 0..7 = h.low64 and
 * 8..15 = h.high64, each little-endian; bytes 16..31 are zero.
 *
 * A block whose bytes fit in FAST_STAGE (a 16-token block is 113 bytes; up
 * to about 1000 tokens fit) is hashed with one-shot XXH3_128bits() over a
 * stack buffer, which for small inputs is several times faster than the
 * streaming API (whose state is 576 bytes to reset). A larger block falls
 * back to XXH3_128bits_update() in FAST_STAGE pieces; only then is memory
 * allocated (XXH3_createState(): a heap state, since libxxhash does not
 * promise the state's layout to programs that link it dynamically).
 */
#define FAST_STAGE	4096
#define FAST_ROOT_TAG	"kvpool-fast-root"

enum fast_tag {
	FAST_TAG_ROOT = 0x52,
	FAST_TAG_BLOCK = 0x42,
	FAST_TAG_STR = 0x01,
	FAST_TAG_NUM = 0x02,
};

struct fast_sink {
	XXH3_state_t *st;	/* NULL until the input outgrows buf */
	int err;		/* -ENOMEM when the state could not be had */
	size_t len;		/* bytes waiting in buf */
	uint8_t buf[FAST_STAGE];
};

static inline void store_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void store_le64(uint8_t *p, uint64_t v)
{
	store_le32(p, (uint32_t)v);
	store_le32(p + 4, (uint32_t)(v >> 32));
}

/* fast_begin() - an empty sink. Not an initializer: that would zero the
 * whole 4 KiB buffer, which costs as much as hashing a 16-token block. */
static void fast_begin(struct fast_sink *f)
{
	f->st = NULL;
	f->err = 0;
	f->len = 0;
}

/* fast_flush() - move buf into the streaming state, creating it first. */
static void fast_flush(struct fast_sink *f)
{
	if (!f->st && !f->err) {
		f->st = XXH3_createState();
		if (!f->st || XXH3_128bits_reset(f->st) != XXH_OK)
			f->err = -ENOMEM;
	}
	if (!f->err)
		XXH3_128bits_update(f->st, f->buf, f->len);
	f->len = 0;
}

/* fast_room() - make room for n <= FAST_STAGE bytes; returns where. */
static inline uint8_t *fast_room(struct fast_sink *f, size_t n)
{
	if (FAST_STAGE - f->len < n)
		fast_flush(f);
	return f->buf + f->len;
}

static void fast_u8(struct fast_sink *f, uint8_t v)
{
	*fast_room(f, 1) = v;
	f->len += 1;
}

static void fast_u64(struct fast_sink *f, uint64_t v)
{
	store_le64(fast_room(f, 8), v);
	f->len += 8;
}

static void fast_bytes(struct fast_sink *f, const void *data, size_t n)
{
	const uint8_t *p = data;

	while (n > 0) {
		size_t k = FAST_STAGE - f->len;

		if (k == 0) {
			fast_flush(f);
			k = FAST_STAGE;
		}
		if (k > n)
			k = n;
		memcpy(f->buf + f->len, p, k);
		f->len += k;
		p += k;
		n -= k;
	}
}

static void fast_tokens(struct fast_sink *f, const uint32_t *tokens, size_t n)
{
	while (n > 0) {
		size_t k = (FAST_STAGE - f->len) / 4, i;
		uint8_t *p;

		if (k == 0) {
			fast_flush(f);
			k = FAST_STAGE / 4;
		}
		if (k > n)
			k = n;
		p = f->buf + f->len;
		for (i = 0; i < k; i++)
			store_le32(p + 4 * i, tokens[i]);
		f->len += 4 * k;
		tokens += k;
		n -= k;
	}
}

/* fast_end() - the key of what was written; 0 or -ENOMEM. */
static int fast_end(struct fast_sink *f, kvp_key *key)
{
	XXH128_hash_t h = { 0, 0 };

	if (!f->st) {
		h = XXH3_128bits(f->buf, f->len);
	} else if (!f->err) {
		XXH3_128bits_update(f->st, f->buf, f->len);
		h = XXH3_128bits_digest(f->st);
	}
	XXH3_freeState(f->st);	/* accepts NULL */
	if (f->err)
		return f->err;
	store_le64(key->b, h.low64);
	store_le64(key->b + 8, h.high64);
	memset(key->b + 16, 0, KVP_KEY_BYTES - 16);
	return 0;
}

static int fast_root(const char *seed, kvp_key *root)
{
	struct fast_sink f;
	size_t n = strlen(seed);

	fast_begin(&f);
	fast_u8(&f, FAST_TAG_ROOT);
	fast_bytes(&f, FAST_ROOT_TAG, sizeof(FAST_ROOT_TAG) - 1);
	fast_u64(&f, n);
	fast_bytes(&f, seed, n);
	return fast_end(&f, root);
}

static int fast_block(const kvp_key *parent, const uint32_t *tokens,
		      size_t ntokens, const kvp_extra *extras, size_t nextras,
		      kvp_key *key)
{
	struct fast_sink f;
	size_t i;

	fast_begin(&f);
	fast_u8(&f, FAST_TAG_BLOCK);
	fast_bytes(&f, parent->b, KVP_KEY_BYTES);
	fast_u64(&f, ntokens);
	fast_tokens(&f, tokens, ntokens);
	fast_u64(&f, nextras);
	for (i = 0; i < nextras; i++) {
		if (extras[i].str) {
			size_t n = strlen(extras[i].str);

			fast_u8(&f, FAST_TAG_STR);
			fast_u64(&f, n);
			fast_bytes(&f, extras[i].str, n);
		} else {
			fast_u8(&f, FAST_TAG_NUM);
			fast_u64(&f, extras[i].num);
		}
	}
	return fast_end(&f, key);
}

/* --- The API ----------------------------------------------------------- */

static bool keys_scheme_known(uint32_t scheme)
{
	return scheme == KVP_KEYS_VLLM_SHA256_CBOR || scheme == KVP_KEYS_FAST;
}

/* keys_block() - one block's key, arguments already checked. Returns 0,
 * or -ENOMEM from the fast scheme's streaming fallback. */
static int keys_block(uint32_t scheme, const kvp_key *parent,
		      const uint32_t *tokens, size_t ntokens,
		      const kvp_extra *extras, size_t nextras, kvp_key *key)
{
	if (scheme == KVP_KEYS_FAST)
		return fast_block(parent, tokens, ntokens, extras, nextras,
				  key);
	vllm_block(parent, tokens, ntokens, extras, nextras, key);
	return 0;
}

KVP_API int kvp_key_root(uint32_t scheme, const char *seed, kvp_key *root)
{
	if (!keys_scheme_known(scheme) || !seed || !root)
		return -EINVAL;
	if (scheme == KVP_KEYS_FAST)
		return fast_root(seed, root);
	vllm_root(seed, root);
	return 0;
}

/*
 * kvp_key_block() - see kvpool.h. Besides 0 and -EINVAL, the fast scheme
 * returns -ENOMEM when a block too large for FAST_STAGE (over about 1000
 * tokens) cannot get its streaming state; so does kvp_key_chain().
 */
KVP_API int kvp_key_block(uint32_t scheme, const kvp_key *parent,
			  const uint32_t *tokens, size_t ntokens,
			  const kvp_extra *extras, size_t nextras, kvp_key *key)
{
	if (!keys_scheme_known(scheme) || !parent || !key ||
	    (ntokens && !tokens) || (nextras && !extras))
		return -EINVAL;
	return keys_block(scheme, parent, tokens, ntokens, extras, nextras,
			  key);
}

/*
 * kvp_key_chain() - keys[i] = block(keys[i - 1], i-th block of tokens),
 * keys[-1] = *parent. keys may alias parent only as keys == parent (the
 * parent is read before keys[0] is written). The per-block work is that
 * of kvp_key_block() without its argument checks.
 */
KVP_API int kvp_key_chain(uint32_t scheme, const kvp_key *parent,
			  const uint32_t *tokens, size_t ntokens,
			  uint32_t block_tokens, const kvp_extra *extras,
			  size_t nextras, kvp_key *keys)
{
	size_t nblocks, i;
	int rc;

	if (!keys_scheme_known(scheme) || !parent || block_tokens == 0 ||
	    (nextras && !extras))
		return -EINVAL;
	nblocks = ntokens / block_tokens;
	if (nblocks > INT_MAX)
		return -EINVAL;
	if (nblocks && (!tokens || !keys))
		return -EINVAL;
	for (i = 0; i < nblocks; i++) {
		rc = keys_block(scheme, i ? &keys[i - 1] : parent,
				tokens + i * (size_t)block_tokens, block_tokens,
				extras, nextras, &keys[i]);
		if (rc < 0)
			return rc;
	}
	return (int)nblocks;
}
