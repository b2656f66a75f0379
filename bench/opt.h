/* SPDX-License-Identifier: MIT */
/*
 * opt.h - what the benchmark programs share: option values (a number in
 * a range, or an error on stderr that names the program, the option, the
 * value and the range), the clock and percentiles.
 */
#ifndef KVPOOL_BENCH_OPT_H
#define KVPOOL_BENCH_OPT_H

#include <stddef.h>
#include <stdint.h>

/* bench_num() - decimal number s in [min, max] into *out; 0 or -EINVAL. */
int bench_num(const char *prog, const char *opt, const char *s, double min,
	      double max, double *out);

/* bench_count() - whole number s in [min, max] into *out; 0 or -EINVAL. */
int bench_count(const char *prog, const char *opt, const char *s, size_t min,
		size_t max, size_t *out);

/* bench_now_ns() - CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* bench_pct_us() - the p-th percentile (0..100) of the nanoseconds
 * v[0..n), in microseconds; sorts v in place. 0 when n is 0. */
double bench_pct_us(uint64_t *v, size_t n, double p);

#endif
