/* SPDX-License-Identifier: MIT */
/*
 * hist.h - latency histograms for /metrics: fixed buckets from 10 us to
 * 10 s, counted on the loop thread (or under their owner's lock) and
 * written as Prometheus histograms (seconds).
 */
#ifndef KVP_DAEMON_OBSERVE_HIST_H
#define KVP_DAEMON_OBSERVE_HIST_H

#include <stdint.h>
#include <stdio.h>

#define HIST_BUCKETS 19u	/* bounds of hist_le_ns; one more for +Inf */

struct hist {
	uint64_t n[HIST_BUCKETS + 1];	/* per bucket, not cumulative */
	uint64_t count;
	uint64_t sum_ns;
};

/* hist_now_ns() - CLOCK_MONOTONIC in nanoseconds. */
uint64_t hist_now_ns(void);

/* hist_add() - count one duration of ns nanoseconds. */
void hist_add(struct hist *h, uint64_t ns);

/* hist_print() - h as the lines of Prometheus histogram name, with labels
 * (`op="ACQUIRE"`, or "" for none) in each; nothing when h counted none. */
void hist_print(FILE *f, const char *name, const char *labels, const struct hist *h);

#endif /* KVP_DAEMON_OBSERVE_HIST_H */
