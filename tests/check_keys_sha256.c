/* SPDX-License-Identifier: MIT */
/*
 * check_keys_sha256.c - unit tests of the prefix keys' SHA-256
 * (client/keys_sha256.c), portable and with the SHA extensions: FIPS
 * 180-4's examples, and hashlib's digests at every length around the
 * padding, whole and streamed in two.
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
#include "suites.h"

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

Suite *keys_sha256_suite(void)
{
	Suite *s = suite_create("keys_sha256");
	TCase *sha = tcase_create("sha256");

	tcase_add_loop_test(sha, test_keys_sha256_fips_examples, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	tcase_add_loop_test(sha, test_keys_sha256_matches_hashlib_at_every_length, KEYS_CPU_C, KEYS_CPU_X86 + 1);
	suite_add_tcase(s, sha);
	return s;
}
