/* SPDX-License-Identifier: MIT */
/*
 * keys_golden.h - the golden vectors of the key tests (keys_golden.c).
 */
#ifndef KVPOOL_TESTS_KEYS_GOLDEN_H
#define KVPOOL_TESTS_KEYS_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvpool.h"

#define GOLDEN_FILE KVP_GOLDEN_DIR "/keys_vllm.txt"
#define GOLDEN_ALGOS KVP_GOLDEN_DIR "/keys_vllm_algos.txt"
#define GOLDEN_MAX_FIELDS 10

/* impl_or_skip() - run the test with the key code impl (KEYS_CPU_*: the
 * loop tests run each); false, saying so, where the CPU has none of the
 * x86 extensions kvpool uses. */
bool impl_or_skip(int impl);

/* One golden file, read vector by vector. */
struct golden {
	FILE *f;
	char *line;		/* getline()'s buffer, freed by golden_close() */
	size_t cap;
	unsigned long lineno;
	int n;			/* fields of the current line */
	char *field[GOLDEN_MAX_FIELDS];
};

void golden_open_file(struct golden *g, const char *path);
#define golden_open(g) golden_open_file(g, GOLDEN_FILE)
void golden_close(struct golden *g);
/* golden_next() - the next vector whose first field is kind, split into
 * g->field[]; false at the end of the file. */
bool golden_next(struct golden *g, const char *kind);

/* unhex() - decode hex ("-": empty) into a new buffer with a NUL after the
 * bytes; *len gets their count. Caller frees. */
uint8_t *unhex(const char *s, size_t *len);
void unhex_key(const char *s, kvp_key *k);
/* parse_tokens() - "1,2,3" or "-"; caller frees. */
uint32_t *parse_tokens(const char *s, size_t *n);
/* parse_extras() - "-", or items s:<hex>, r:<count>:<hex>, n:<num>; free
 * with free_extras(). */
kvp_extra *parse_extras(char *s, size_t *n);
void free_extras(kvp_extra *e, size_t n);
void key_hex(const kvp_key *k, char out[2 * KVP_KEY_BYTES + 1]);

/* ck_assert_key_eq() - key got is want_hex, at vector g of GOLDEN_FILE */
#define ck_assert_key_eq(got, want_hex, g) do {				\
	char hex_[2 * KVP_KEY_BYTES + 1];					\
	key_hex(got, hex_);							\
	ck_assert_msg(strcmp(hex_, want_hex) == 0,				\
		      "%s line %lu: key %s, want %s", GOLDEN_FILE,		\
		      (g)->lineno, hex_, want_hex);				\
} while (0)

/* algo_scheme() - the scheme of vLLM's hash name algo, *digest its bytes */
uint32_t algo_scheme(const char *algo, size_t *digest);
/* digest_is() - key k holds the digest hex (and zeros after a short one) */
void digest_is(const kvp_key *k, const char *hex, size_t digest,
	       const struct golden *g, int block);

#endif /* KVPOOL_TESTS_KEYS_GOLDEN_H */
