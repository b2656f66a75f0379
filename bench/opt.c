/* SPDX-License-Identifier: MIT */
/*
 * opt.c - option values of the benchmark programs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

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
