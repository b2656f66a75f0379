/* SPDX-License-Identifier: MIT */
/*
 * siphash.h - SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed hash
 * of short inputs, for hash tables whose keys a client chooses. Without
 * the key nobody can pick inputs that collide, so a table keyed with a
 * secret random key stays O(1) whatever the inputs.
 */
#ifndef KVP_SIPHASH_H
#define KVP_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define SIPHASH_KEY_BYTES 16

/* siphash24() - the 64-bit SipHash-2-4 of m[0..n) under key k. */
uint64_t siphash24(const uint8_t k[SIPHASH_KEY_BYTES], const void *m, size_t n);

/* siphash_key() - a fresh secret key from the kernel's random source
 * (getrandom; /dev/urandom where that is missing). Returns 0, or -errno
 * when neither answered: then k is mixed from the time, the pid and
 * addresses, which is weaker but still not a constant. */
int siphash_key(uint8_t k[SIPHASH_KEY_BYTES]);

#endif /* KVP_SIPHASH_H */
