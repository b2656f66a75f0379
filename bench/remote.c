/* SPDX-License-Identifier: MIT */
/*
 * remote.c - restores from the remote tier: machine A publishes prompts
 * of --chain blocks of random bytes through one kvpoold (--remote-write
 * through), then machine B, a kvpoold with an empty pool on the same
 * cluster, ACQUIREs them: each ACQUIRE misses locally, fetches its chain
 * from Redis into its pool and is answered. Prints one line
 *
 *   remote pages=N page_bytes=B secs=S pages_per_s=P mib_per_s=M
 *
 * for B's ACQUIREs (every page checked after each, off the clock). With
 * --skip-check, ACQUIRE the last prompt's chain once, expecting a miss
 * (the daemon chose to recompute), and print "remote skipped=1 hits=0"
 * (or skipped=0 and the hits). --first N publishes prompts from N on
 * (for a second round that must not find the first's).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"
#include "opt.h"

static kvp_geometry geo = {
	.layers = 8, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "bench/remote",
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench/remote: %s: %s (%s)\n", what, kvp_strerror(rc),
		kvp_last_error());
	exit(1);
}

/* keys_of() - the keys of prompt p's chain of n blocks. */
static void keys_of(kvp_client *c, unsigned p, size_t n, kvp_key *keys)
{
	size_t t, nt = n * geo.block_tokens;
	uint32_t *tok = malloc(nt * sizeof(*tok));
	int rc;

	for (t = 0; t < nt; t++)
		tok[t] = (uint32_t)(p * 1000003u + t) % 100000;
	rc = kvp_block_keys(c, NULL, tok, nt, NULL, 0, keys);
	if (rc != (int)n)
		die("block keys", rc < 0 ? rc : -EINVAL);
	free(tok);
}

static void publish(const char *sock, unsigned first, unsigned prompts, size_t chain)
{
	kvp_key *keys = calloc(chain, sizeof(*keys));
	kvp_page *pages = calloc(chain, sizeof(*pages)), *canon = calloc(chain, sizeof(*canon));
	kvp_client *c;
	unsigned p;
	size_t i;
	int rc;

	rc = kvp_connect(sock, "bench-remote-a", &geo, &c);
	if (rc)
		die("connect A", rc);
	for (p = first; p < first + prompts; p++) {
		keys_of(c, p, chain, keys);
		if ((rc = kvp_alloc(c, chain, pages)))
			die("alloc", rc);
		for (i = 0; i < chain; i++)
			fill(kvp_page_ptr(c, pages[i]), kvp_page_bytes(c), p * chain + i);
		if ((rc = kvp_publish(c, NULL, pages, keys, chain, KVP_PRIO_NORMAL, canon)))
			die("publish", rc);
		if ((rc = kvp_release(c, canon, chain)))
			die("release", rc);
	}
	kvp_close(c);
	free(keys);
	free(pages);
	free(canon);
}

static int acquire(const char *sock, unsigned prompts, size_t chain, bool expect_skip)
{
	kvp_key *keys = calloc((size_t)prompts * chain, sizeof(*keys));
	kvp_page *pages = calloc((size_t)prompts * chain, sizeof(*pages));
	uint8_t *want;
	kvp_client *c;
	double t0, secs;
	size_t i, pb;
	unsigned p;
	int h, rc;

	rc = kvp_connect(sock, "bench-remote-b", &geo, &c);
	if (rc)
		die("connect B", rc);
	pb = kvp_page_bytes(c);
	for (p = 0; p < prompts; p++)
		keys_of(c, p, chain, keys + (size_t)p * chain);
	if (expect_skip) {	/* the last prompt's chain: nothing of it is here */
		h = kvp_acquire(c, NULL, keys + (size_t)(prompts - 1) * chain, chain, NULL, 0,
				pages, NULL);
		printf("remote skipped=%d hits=%d\n", h == 0, h);
		kvp_close(c);
		return 0;
	}
	want = malloc(pb);
	secs = 0;
	for (p = 0; p < prompts; p++) {
		kvp_page *got = pages + (size_t)p * chain;

		t0 = now_s();
		h = kvp_acquire(c, NULL, keys + (size_t)p * chain, chain, NULL, 0, got, NULL);
		secs += now_s() - t0;
		if (h != (int)chain) {
			fprintf(stderr, "bench/remote: prompt %u: %d of %zu blocks came back\n",
				p, h, chain);
			return 1;
		}
		/* off the clock: every byte, then the leases go */
		for (i = 0; i < chain; i++) {
			fill(want, pb, (size_t)p * chain + i);
			if (memcmp(kvp_page_ptr(c, got[i]), want, pb)) {
				fprintf(stderr, "bench/remote: prompt %u block %zu came back with "
					"other bytes\n", p, i);
				return 1;
			}
		}
		if ((rc = kvp_release(c, got, chain)))
			die("release", rc);
	}
	printf("remote pages=%zu page_bytes=%zu secs=%.4f pages_per_s=%.0f mib_per_s=%.1f\n",
	       (size_t)prompts * chain, pb, secs, (double)prompts * chain / secs,
	       (double)prompts * chain * pb / secs / 1048576.0);
	kvp_close(c);
	free(want);
	free(keys);
	free(pages);
	return 0;
}

int main(int argc, char **argv)
{
	const char *a = NULL, *b = NULL;
	size_t prompts = 20, chain = 128, layers = 8, first = 0;
	bool skip = false;
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--publish") && i + 1 < argc)
			a = argv[++i];
		else if (!strcmp(argv[i], "--acquire") && i + 1 < argc)
			b = argv[++i];
		else if (!strcmp(argv[i], "--prompts") && i + 1 < argc) {
			if (bench_count("bench/remote", "--prompts", argv[++i], 1, 100000, &prompts))
				return 2;
		} else if (!strcmp(argv[i], "--chain") && i + 1 < argc) {
			if (bench_count("bench/remote", "--chain", argv[++i], 1, 4096, &chain))
				return 2;
		} else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
			if (bench_count("bench/remote", "--layers", argv[++i], 1, 128, &layers))
				return 2;
		} else if (!strcmp(argv[i], "--first") && i + 1 < argc) {
			if (bench_count("bench/remote", "--first", argv[++i], 0, 100000, &first))
				return 2;
		} else if (!strcmp(argv[i], "--skip-check")) {
			skip = true;
		} else {
			fprintf(stderr, "usage: bench/remote [--publish SOCK] [--acquire SOCK] "
				"[--prompts N] [--first N] [--chain BLOCKS] [--layers N] "
				"[--skip-check]\n");
			return 2;
		}
	}
	geo.layers = (uint32_t)layers;	/* 8 KiB a layer: 8 layers, 64 KiB pages */
	if (a)
		publish(a, (unsigned)first, (unsigned)prompts, chain);
	if (b)
		return acquire(b, (unsigned)prompts, chain, skip);
	return 0;
}
