/* SPDX-License-Identifier: MIT */
/*
 * seal.c - what sealing a page for the remote tier costs one core:
 * rvalue_seal() (encrypt and authenticate, as a page is written) and
 * rvalue_open() (check and decrypt, as it is read), against memcpy() of
 * the same bytes in the same run (the copy the write path makes anyway).
 * bench/run-remote.sh sets it beside the tier's restore rate.
 *
 *   bench/seal [--page BYTES] [--ms MS]
 *
 * Prints "seal page=... seal_pages_per_s=... open_pages_per_s=...
 * copy_pages_per_s=...": medians of 5 runs of MS each.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/remote/rvalue.h"
#include "opt.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

enum what { SEAL, OPEN, COPY };

/* rate() - pages/s of one kind of work for ms. */
static double rate(enum what w, uint8_t *v, uint8_t *sealed, uint8_t *src, size_t page,
		   const uint8_t *sk, const uint8_t *id, const uint8_t *key, double ms)
{
	double t0 = now_s(), t;
	size_t n = 0;

	do {
		for (int i = 0; i < 8; i++, n++) {
			if (w == SEAL) {
				memcpy(v + RPAGE_HDR, src, page);
				if (rvalue_seal(v, sk, id, key, page) != 0) {
					fprintf(stderr, "bench/seal: a seal failed\n");
					exit(1);
				}
			} else if (w == OPEN) {
				memcpy(v, sealed, RPAGE_HDR + page);	/* as the reply lands */
				if (rvalue_open(v, RPAGE_HDR + page, v + RPAGE_HDR, sk, id, key,
						page) != 0) {
					fprintf(stderr, "bench/seal: a sealed page did not open\n");
					exit(1);
				}
			} else {
				memcpy(v + RPAGE_HDR, src, page);
				memcpy(v, sealed, RPAGE_HDR + page);
			}
		}
		t = now_s() - t0;
	} while (t < ms / 1e3);
	return (double)n / t;
}

int main(int argc, char **argv)
{
	size_t page = 65536, ms = 300;
	double r[3][5], med[3];
	uint8_t sk[RVALUE_KEY_BYTES], id[RPAGE_ID_BYTES] = { 1 }, key[KVP_KEY_BYTES] = { 2 };
	uint8_t *v, *sealed, *src;
	int i, k;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--page") && i + 1 < argc) {
			if (bench_count("bench/seal", "--page", argv[++i], 64, 1u << 26, &page))
				return 2;
		} else if (!strcmp(argv[i], "--ms") && i + 1 < argc) {
			if (bench_count("bench/seal", "--ms", argv[++i], 10, 60000, &ms))
				return 2;
		} else {
			fprintf(stderr, "usage: bench/seal [--page BYTES] [--ms MS]\n");
			return 2;
		}
	}
	if (rvalue_init() < 0) {
		fprintf(stderr, "bench/seal: libsodium would not start\n");
		return 1;
	}
	rvalue_key("a key file of thirty-two bytes or more", 38, sk);
	v = malloc(RPAGE_HDR + page);
	sealed = malloc(RPAGE_HDR + page);
	src = malloc(page);
	if (!v || !sealed || !src)
		return 1;
	for (size_t b = 0; b < page; b++)
		src[b] = (uint8_t)(b * 131 + 7);
	memcpy(sealed + RPAGE_HDR, src, page);
	if (rvalue_seal(sealed, sk, id, key, page) != 0)
		return 1;
	for (k = 0; k < 5; k++)		/* interleaved: the machine's noise hits all */
		for (i = 0; i < 3; i++)
			r[i][k] = rate((enum what)i, v, sealed, src, page, sk, id, key, (double)ms);
	for (i = 0; i < 3; i++) {
		qsort(r[i], 5, sizeof(double), cmp);
		med[i] = r[i][2];
	}
	printf("seal page=%zu seal_pages_per_s=%.0f open_pages_per_s=%.0f "
	       "copy_pages_per_s=%.0f\n", page, med[SEAL], med[OPEN], med[COPY]);
	free(v);
	free(sealed);
	free(src);
	return 0;
}
