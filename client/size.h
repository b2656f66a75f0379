/* SPDX-License-Identifier: MIT */
/*
 * size.h - the one reading of a size that every program takes (kvpoold's
 * options and config file, the CLI's planner): a number, decimals
 * allowed, and an optional unit, case-insensitive: K, M, G, T, P are
 * powers of 1024, and KB, KiB, MB, MiB (and so on) mean the same; B or
 * nothing means bytes. "8G", "8gb", "8GiB" and "1.5G" are all accepted.
 */
#ifndef KVPOOL_CLIENT_SIZE_H
#define KVPOOL_CLIENT_SIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The text to show after "is not a size": what is accepted. */
#define SIZE_HELP "a number, decimals allowed, with an optional K, M, G, T or P " \
		  "(powers of 1024; KB, KiB and the like mean the same)"

/* size_parse() - s as bytes into *out (a fraction of a byte is dropped).
 * false when s is not a size or does not fit in 64 bits. */
bool size_parse(const char *s, uint64_t *out);

/* size_text() - b as "512.0 MiB" (or "512 bytes") into buf, for
 * messages; returns buf. */
const char *size_text(uint64_t b, char *buf, size_t len);

#endif /* KVPOOL_CLIENT_SIZE_H */
