/* SPDX-License-Identifier: MIT */
/*
 * opt.c - option values, the clock and percentiles of the benchmark
 * programs (opt.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "opt.h"

int bench_num(const char *prog, const char *opt, const char *s, double min,
	      double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max)) {
		fprintf(stderr, "%s: --%s '%s': give a number from %g to %g\n",
			prog, opt, s, min, max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int bench_count(const char *prog, const char *opt, const char *s, size_t min,
		size_t max, size_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "%s: --%s '%s': give a whole number from %zu to %zu\n",
			prog, opt, s, min, max);
		return -EINVAL;
	}
	*out = (size_t)v;
	return 0;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

double bench_pct_us(uint64_t *v, size_t n, double p)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	return (double)v[(size_t)(p / 100.0 * (double)(n - 1))] / 1000.0;
}
