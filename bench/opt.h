/* SPDX-License-Identifier: MIT */
/*
 * opt.h - option values of the benchmark programs: a number in a range,
 * or an error on stderr that names the program, the option, the value
 * and the range.
 */
#ifndef KVPOOL_BENCH_OPT_H
#define KVPOOL_BENCH_OPT_H

#include <stddef.h>

/* bench_num() - decimal number s in [min, max] into *out; 0 or -EINVAL. */
int bench_num(const char *prog, const char *opt, const char *s, double min,
	      double max, double *out);

/* bench_count() - whole number s in [min, max] into *out; 0 or -EINVAL. */
int bench_count(const char *prog, const char *opt, const char *s, size_t min,
		size_t max, size_t *out);

#endif
