/* SPDX-License-Identifier: MIT */
/*
 * pyref.c - bench/pyref: the C side of the Python package's benchmark
 * (bench/run-python.sh). It times what bench/python.py times, through
 * libkvpool directly, so that the ratio is the binding's cost:
 *
 *   pyref SOCKET pair N      N x (kvp_alloc of 1 page + kvp_release)
 *   pyref SOCKET acquire N   N x kvp_acquire of 256 published keys (the
 *                            release after each is not timed)
 *
 * Prints one line, "pyref mode=MODE n=N ns=NS": nanoseconds per
 * operation, the mean over the N (after N / 10 untimed ones).
 */
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"

#define NKEYS 256
#define BT 16

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "bench/python",
};

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int die(const char *what, int rc)
{
	fprintf(stderr, "pyref: %s: %s: %s\n", what, kvp_strerror(rc), kvp_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	static uint32_t tok[NKEYS * BT];
	static kvp_key keys[NKEYS];
	static kvp_page pages[NKEYS], canon[NKEYS];
	double t0 = 0, spent = 0;
	long n, i, warm;
	kvp_client *c;
	kvp_page p;
	int rc;

	if (argc != 4 || (strcmp(argv[2], "pair") && strcmp(argv[2], "acquire"))) {
		fprintf(stderr, "usage: pyref SOCKET pair|acquire N\n");
		return 2;
	}
	n = atol(argv[3]);
	warm = n / 10;
	rc = kvp_connect(argv[1], "bench-python", &geo, &c);
	if (rc < 0)
		return die("kvp_connect", rc);
	if (!strcmp(argv[2], "pair")) {
		for (i = -warm; i < n; i++) {
			if (i == 0)
				t0 = now_ns();
			rc = kvp_alloc(c, 1, &p);
			if (rc < 0)
				return die("kvp_alloc", rc);
			rc = kvp_release(c, &p, 1);
			if (rc < 0)
				return die("kvp_release", rc);
		}
		spent = now_ns() - t0;
	} else {
		for (i = 0; i < NKEYS * BT; i++)
			tok[i] = (uint32_t)(i * 7 + 11);
		kvp_block_keys(c, NULL, tok, NKEYS * BT, NULL, 0, keys);
		rc = kvp_alloc(c, NKEYS, pages);
		if (rc < 0)
			return die("kvp_alloc", rc);
		kvp_publish(c, NULL, pages, keys, NKEYS, KVP_PRIO_NORMAL, canon);
		kvp_release(c, pages, NKEYS);
		for (i = -warm; i < n; i++) {
			t0 = now_ns();
			rc = kvp_acquire(c, NULL, keys, NKEYS, NULL, 0, pages, NULL);
			if (i >= 0)
				spent += now_ns() - t0;
			if (rc != NKEYS)
				return die("kvp_acquire", rc < 0 ? rc : -ENOENT);
			kvp_release(c, pages, NKEYS);
		}
	}
	printf("pyref mode=%s n=%ld ns=%.0f\n", argv[2], n, spent / (double)n);
	kvp_close(c);
	return 0;
}
