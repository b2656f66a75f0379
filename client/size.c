/* SPDX-License-Identifier: MIT */
/* size.c - see size.h. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "client/size.h"

bool size_parse(const char *s, uint64_t *out)
{
	static const char units[] = "KMGTP";
	uint64_t whole = 0, frac = 0, scale = 1, mult = 1;
	const char *u;
	int i, digits = 0;

	if (!s || !isdigit((unsigned char)*s))
		return false;
	for (; isdigit((unsigned char)*s); s++) {
		if (whole > (UINT64_MAX - 9) / 10)
			return false;
		whole = whole * 10 + (uint64_t)(*s - '0');
	}
	if (*s == '.') {
		s++;
		if (!isdigit((unsigned char)*s))
			return false;
		for (; isdigit((unsigned char)*s); s++) {
			if (digits++ >= 12)
				continue;	/* finer than any unit: ignored */
			frac = frac * 10 + (uint64_t)(*s - '0');
			scale *= 10;
		}
	}
	u = *s ? strchr(units, toupper((unsigned char)*s)) : NULL;
	if (u && *s) {
		s++;
		for (i = 0; i <= u - units; i++)
			mult <<= 10;
		if (tolower((unsigned char)s[0]) == 'i' && tolower((unsigned char)s[1]) == 'b')
			s += 2;
		else if (tolower((unsigned char)s[0]) == 'b')
			s++;
	} else if (tolower((unsigned char)*s) == 'b') {
		s++;
	}
	if (*s)
		return false;
	if (whole > UINT64_MAX / mult)
		return false;
	/* frac / scale of a unit; a long double holds it to the byte */
	whole *= mult;
	frac = (uint64_t)((long double)frac * (long double)mult / (long double)scale);
	if (whole > UINT64_MAX - frac)
		return false;
	*out = whole + frac;
	return true;
}

const char *size_text(uint64_t b, char *buf, size_t len)
{
	static const char *const unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
	return buf;
}
