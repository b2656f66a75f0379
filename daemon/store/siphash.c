/* SPDX-License-Identifier: MIT */
/*
 * siphash.c - SipHash-2-4 and its keys (see siphash.h): two compression
 * rounds per 8-byte word, four to finish; little-endian words.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "daemon/store/siphash.h"

static inline uint64_t rotl(uint64_t x, unsigned b)
{
	return x << b | x >> (64 - b);
}

static inline uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	unsigned i;

	for (i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#define SIPROUND(v0, v1, v2, v3)                                        \
	do {                                                            \
		v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32); \
		v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                   \
		v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                   \
		v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32); \
	} while (0)

uint64_t siphash24(const uint8_t k[SIPHASH_KEY_BYTES], const void *m, size_t n)
{
	const uint8_t *p = m;
	uint64_t k0 = le64(k), k1 = le64(k + 8), w;
	uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		w = le64(p + i);
		v3 ^= w;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= w;
	}
	/* the last word: the bytes left over, and the length in the top byte */
	w = (uint64_t)n << 56;
	for (; i < n; i++)
		w |= (uint64_t)p[i] << (8 * (i & 7));
	v3 ^= w;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= w;
	v2 ^= 0xff;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

int siphash_key(uint8_t k[SIPHASH_KEY_BYTES])
{
	struct timespec ts;
	uint64_t mix[2];
	ssize_t n;
	int fd, e;

	if (getrandom(k, SIPHASH_KEY_BYTES, 0) == SIPHASH_KEY_BYTES)
		return 0;
	e = errno;
	fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, k, SIPHASH_KEY_BYTES);
		close(fd);
		if (n == SIPHASH_KEY_BYTES)
			return 0;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	mix[0] = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 48;
	mix[1] = (uint64_t)(uintptr_t)&ts ^ (uint64_t)(uintptr_t)k << 13;
	memcpy(k, mix, SIPHASH_KEY_BYTES);
	return -e;
}
