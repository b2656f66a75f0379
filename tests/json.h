/* SPDX-License-Identifier: MIT */
/*
 * json.h - a tiny JSON reader for the tests. json_skip() checks the
 * syntax of one value; json_at() finds a value by a path such as
 * "namespaces[1].pages.cached". Enough to check output exactly, not a
 * general parser: keys are compared without decoding escapes. The
 * json_u64() family fail the test (Check) when the value is missing.
 */
#ifndef KVPOOL_TESTS_JSON_H
#define KVPOOL_TESTS_JSON_H

#include <stdbool.h>

/* json_skip() - past one value at p (white space first), or NULL when it
 * is not JSON. */
const char *json_skip(const char *p);

/* json_valid() - s is exactly one JSON value (and white space). */
bool json_valid(const char *s);

/* json_at() - the text of the value at path in document s, or NULL. */
const char *json_at(const char *s, const char *path);

/* json_u64() / json_num() - the number at path. */
unsigned long long json_u64(const char *s, const char *path);
double json_num(const char *s, const char *path);

/* json_str_is() - the string at path equals want (no escapes in want). */
bool json_str_is(const char *s, const char *path, const char *want);

/* json_len() - elements of the array at path. */
int json_len(const char *s, const char *path);

#endif /* KVPOOL_TESTS_JSON_H */
