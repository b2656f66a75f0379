/* SPDX-License-Identifier: MIT */
/*
 * json.c - a tiny JSON reader for the tests: checks a document's syntax
 * and finds values by path, so that a test asserts what a program's
 * --json output says field by field.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "json.h"

static const char *ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *skip_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	for (; *p && *p != '"'; p++) {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				int i;

				for (i = 1; i <= 4; i++)
					if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
						return NULL;
				p += 4;
			} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
				return NULL;
			}
		}
	}
	return *p == '"' ? p + 1 : NULL;
}

static const char *skip_number(const char *p)
{
	const char *s = p;

	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (*p >= '0' && *p <= '9')
			p++;
	else
		return NULL;
	if (*p == '.') {
		if (!(*++p >= '0' && *p <= '9'))
			return NULL;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!(*p >= '0' && *p <= '9'))
			return NULL;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	return p > s ? p : NULL;
}

static const char *skip_container(const char *p, char close, bool object)
{
	p = ws(p + 1);
	if (*p == close)
		return p + 1;
	for (;;) {
		if (object) {
			p = skip_string(ws(p));
			if (!p || *(p = ws(p)) != ':')
				return NULL;
			p++;
		}
		p = json_skip(p);
		if (!p)
			return NULL;
		p = ws(p);
		if (*p == close)
			return p + 1;
		if (*p++ != ',')
			return NULL;
	}
}

const char *json_skip(const char *p)
{
	p = ws(p);
	switch (*p) {
	case '{':
		return skip_container(p, '}', true);
	case '[':
		return skip_container(p, ']', false);
	case '"':
		return skip_string(p);
	case 't':
		return strncmp(p, "true", 4) ? NULL : p + 4;
	case 'f':
		return strncmp(p, "false", 5) ? NULL : p + 5;
	case 'n':
		return strncmp(p, "null", 4) ? NULL : p + 4;
	}
	return skip_number(p);
}

/* json_valid() - s is exactly one JSON value (and white space). */
bool json_valid(const char *s)
{
	const char *end = json_skip(s);

	return end && *ws(end) == '\0';
}

/* json_at() - the value at path in the document s, or NULL. */
const char *json_at(const char *s, const char *path)
{
	const char *p = ws(s), *seg = path;

	while (*seg) {
		if (*seg == '[') {
			long i = strtol(seg + 1, (char **)&seg, 10);

			if (*p != '[' || *seg++ != ']')
				return NULL;
			p = ws(p + 1);
			for (; i > 0; i--) {
				p = json_skip(p);
				if (!p || *(p = ws(p)) != ',')
					return NULL;
				p = ws(p + 1);
			}
			if (*p == ']')
				return NULL;
		} else {
			size_t klen;
			bool found = false;

			if (*seg == '.')
				seg++;
			klen = strcspn(seg, ".[");
			if (*p != '{')
				return NULL;
			p = ws(p + 1);
			while (*p == '"') {
				const char *kend = skip_string(p);

				if (!kend)
					return NULL;
				found = (size_t)(kend - p - 2) == klen &&
					strncmp(p + 1, seg, klen) == 0;
				p = ws(ws(kend) + 1);	/* past ':' */
				if (found)
					break;
				p = json_skip(p);
				if (!p)
					return NULL;
				p = ws(p);
				if (*p == ',')
					p = ws(p + 1);
			}
			if (!found)
				return NULL;
			seg += klen;
		}
	}
	return p;
}

/* json_u64() - the unsigned number at path; fails the test without one. */
unsigned long long json_u64(const char *s, const char *path)
{
	const char *v = json_at(s, path);

	ck_assert_msg(v && *v >= '0' && *v <= '9', "no number at %s in %s", path, s);
	return strtoull(v, NULL, 10);
}

double json_num(const char *s, const char *path)
{
	const char *v = json_at(s, path);

	ck_assert_msg(v && skip_number(v), "no number at %s in %s", path, s);
	return strtod(v, NULL);
}

/* json_str_is() - the string at path equals want (no escapes in want). */
bool json_str_is(const char *s, const char *path, const char *want)
{
	const char *v = json_at(s, path);
	size_t n = strlen(want);

	return v && *v == '"' && strncmp(v + 1, want, n) == 0 && v[n + 1] == '"';
}

/* json_len() - elements of the array at path. */
int json_len(const char *s, const char *path)
{
	const char *p = json_at(s, path);
	int n = 0;

	ck_assert_msg(p && *p == '[', "no array at %s in %s", path, s);
	p = ws(p + 1);
	if (*p == ']')
		return 0;
	for (;;) {
		n++;
		p = ws(json_skip(p));
		if (*p != ',')
			return n;
		p++;
	}
}

