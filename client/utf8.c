/* SPDX-License-Identifier: MIT */
/*
 * utf8.c - UTF-8 checks (see utf8.h), after the well-formed byte
 * sequences of the Unicode Standard, table 3-7.
 */
#include <stdint.h>
#include <string.h>

#include "client/utf8.h"

size_t utf8_char(const char *s, size_t n)
{
	const uint8_t *b = (const uint8_t *)s;
	uint8_t lo = 0x80, hi = 0xbf;
	size_t len, i;

	if (!n)
		return 0;
	if (b[0] < 0x80)
		return 1;
	if (b[0] < 0xc2)
		return 0;		/* a continuation byte, or overlong */
	if (b[0] < 0xe0) {
		len = 2;
	} else if (b[0] < 0xf0) {
		len = 3;
		if (b[0] == 0xe0)
			lo = 0xa0;	/* overlong */
		else if (b[0] == 0xed)
			hi = 0x9f;	/* surrogates */
	} else if (b[0] < 0xf5) {
		len = 4;
		if (b[0] == 0xf0)
			lo = 0x90;	/* overlong */
		else if (b[0] == 0xf4)
			hi = 0x8f;	/* past U+10FFFF */
	} else {
		return 0;
	}
	if (n < len || b[1] < lo || b[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (b[i] < 0x80 || b[i] > 0xbf)
			return 0;
	return len;
}

bool utf8_control(const char *s, size_t len)
{
	const uint8_t *b = (const uint8_t *)s;

	if (len == 1)
		return b[0] < 0x20 || b[0] == 0x7f;
	return len == 2 && b[0] == 0xc2 && b[1] < 0xa0;
}

bool utf8_printable(const char *s, size_t *bad)
{
	size_t n = strlen(s), i = 0, len;

	while (i < n) {
		len = utf8_char(s + i, n - i);
		if (!len || utf8_control(s + i, len)) {
			if (bad)
				*bad = i;
			return false;
		}
		i += len;
	}
	return true;
}
