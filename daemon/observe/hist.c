/* SPDX-License-Identifier: MIT */
/*
 * hist.c - latency histograms for /metrics (see hist.h).
 */
#include <inttypes.h>
#include <time.h>

#include "daemon/observe/hist.h"

/* 10 us to 10 s: a STATS round trip to a restore from a busy disk */
static const uint64_t hist_le_ns[HIST_BUCKETS] = {
	10000u, 25000u, 50000u, 100000u, 250000u, 500000u,
	1000000u, 2500000u, 5000000u, 10000000u, 25000000u, 50000000u,
	100000000u, 250000000u, 500000000u, 1000000000u, 2500000000u, 5000000000u,
	10000000000u,
};

uint64_t hist_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void hist_add(struct hist *h, uint64_t ns)
{
	unsigned i = 0;

	while (i < HIST_BUCKETS && ns > hist_le_ns[i])
		i++;
	h->n[i]++;
	h->count++;
	h->sum_ns += ns;
}

void hist_print(FILE *f, const char *name, const char *labels, const struct hist *h)
{
	const char *sep = labels[0] ? "," : "";
	uint64_t cum = 0;
	unsigned i;

	if (!h->count)
		return;
	for (i = 0; i < HIST_BUCKETS; i++) {
		cum += h->n[i];
		fprintf(f, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep,
			(double)hist_le_ns[i] / 1e9, cum);
	}
	fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, h->count);
	if (labels[0]) {
		fprintf(f, "%s_sum{%s} %.9f\n", name, labels, (double)h->sum_ns / 1e9);
		fprintf(f, "%s_count{%s} %" PRIu64 "\n", name, labels, h->count);
	} else {
		fprintf(f, "%s_sum %.9f\n", name, (double)h->sum_ns / 1e9);
		fprintf(f, "%s_count %" PRIu64 "\n", name, h->count);
	}
}
