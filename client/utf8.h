/* SPDX-License-Identifier: MIT */
/*
 * utf8.h - UTF-8 as names and labels need it: whether a string is
 * printable UTF-8 (what kvpoold accepts as a model identity) and the
 * length of one character (for escaping what came from elsewhere).
 */
#ifndef KVP_UTF8_H
#define KVP_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/*
 * utf8_char() - the length (1..4) of the well-formed UTF-8 character at
 * s[0..n), or 0 when it is not one: a stray continuation byte, a
 * sequence cut short, an overlong form, a surrogate or past U+10FFFF.
 */
size_t utf8_char(const char *s, size_t n);

/* utf8_control() - the character of len bytes at s is a control
 * character: C0 (U+0000..U+001F), DEL or C1 (U+0080..U+009F). */
bool utf8_control(const char *s, size_t len);

/*
 * utf8_printable() - s (NUL-terminated) is well-formed UTF-8 without
 * control characters. On false, *bad (when not NULL) is the offset of the
 * first byte that is not.
 */
bool utf8_printable(const char *s, size_t *bad);

#endif /* KVP_UTF8_H */
