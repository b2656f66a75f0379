/* SPDX-License-Identifier: MIT */
/*
 * prefix.h - what the two halves of bench/prefix share: the options, the
 * workload, the figures of a run, and the few helpers both use.
 * prefix_run.c runs the client processes and samples the daemon;
 * prefix.c parses the options, times ACQUIRE and prints.
 */
#ifndef KVP_BENCH_PREFIX_H
#define KVP_BENCH_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"

#define PFX_MAX_CLIENTS 64
#define PFX_MAX_PROMPTS 256
#define PFX_MAX_WINDOW 64
#define PFX_SUFFIX_MAX 8192u	/* tokens */
#define PFX_VOCAB 152064u	/* token ids are below this (a Qwen2-sized vocabulary) */
#define PFX_MAX_NS 32		/* namespace records read per sample */
#define PFX_CHAIN 256u		/* blocks of the latency chain */
#define PFX_BT 16u		/* tokens a page */

/* 16 KiB pages: 2 x 2 layers x 2 KV heads x head_dim 64 x 16 tokens x f16 */
extern const kvp_geometry pfx_geom;

#define PFX_NS_SHARE "bench-prefix"
#define PFX_NS_NOSHARE "bench-prefix-noshare"
#define PFX_NS_LAT "bench-prefix-lat"

struct pfx_opts {
	const char *socket;	/* NULL: $KVPOOL_SOCKET or the default */
	size_t clients, requests, prompts, window;
	size_t prompt_min, prompt_max;	/* tokens */
	double zipf, suffix_mean, suffix_sigma;
	uint64_t seed;
	size_t poll_us, lat_iters;
	bool share, noshare, latency;	/* which parts run */
};

/* The system prompts, made by the parent before it forks. */
struct pfx_work {
	uint32_t *prompt[PFX_MAX_PROMPTS];	/* token ids; freed at exit */
	size_t len[PFX_MAX_PROMPTS];
	double cdf[PFX_MAX_PROMPTS];		/* of the choice, cdf[S - 1] == 1 */
	size_t max_tokens;			/* longest request */
};

/* What one client reports to the parent, in shared memory. */
struct pfx_slot {
	uint64_t start_ns, end_ns;
	uint64_t tokens, suffix_tokens;
	uint64_t blocks;	/* full blocks of all prompts */
	uint64_t hits;		/* of them leased from the cache */
	uint64_t allocated;	/* pages from kvp_alloc(), partial tails included */
	uint64_t published;
	uint64_t dups;		/* published pages another client had published first */
	uint64_t page_bytes;
	uint64_t picks[PFX_MAX_PROMPTS];	/* requests of each system prompt */
	int rc;			/* 0, or the -errno that stopped the client */
	char err[256];
};

/* Where a request's setup time goes (nanoseconds). */
enum pfx_phase {
	PFX_KEYS,	/* kvp_block_keys() */
	PFX_CALLS,	/* kvp_acquire(), kvp_alloc(), kvp_publish(), kvp_release() */
	PFX_FILL,	/* memset of the new pages, first-touch faults included */
	PFX_PHASES
};

struct pfx_pct {
	double p50, p99;
};

/* A run's figures, merged by the parent. */
struct pfx_result {
	struct pfx_slot sum;
	struct pfx_pct req, phase[PFX_PHASES];
	double wall_s;
	uint64_t peak, peak_private, peak_shared, peak_cached, end_cached;
	uint64_t demand_peak, samples, page_bytes;
	uint64_t ceiling;	/* most hits possible: every prompt block but its first use */
	struct kvp_wire_prefix_stats d;	/* the daemon's counters over the run */
	uint32_t key_scheme;
};
/* pfx_now_ns() - CLOCK_MONOTONIC in nanoseconds. */
uint64_t pfx_now_ns(void);

/* pfx_rng_tokens() - n token ids below PFX_VOCAB from the SplitMix64
 * state *s. */
void pfx_rng_tokens(uint64_t *s, uint32_t *t, size_t n);

/* pfx_pct_of() - sort v[0..n) (n > 0) in place; its p50 and p99 in µs
 * (nearest rank). Note that this is O(n log n). */
struct pfx_pct pfx_pct_of(uint64_t *v, size_t n);

/* pfx_work_make() - the system prompts and the choice's distribution.
 * Returns 0 or -ENOMEM; free the prompts with pfx_work_free(). */
int pfx_work_make(const struct pfx_opts *o, struct pfx_work *w);
void pfx_work_free(struct pfx_work *w);

/*
 * pfx_run_mode() - one run of the workload, with sharing or without,
 * against the daemon of o->socket; its figures into *res. Forks
 * o->clients processes and reaps them. Returns 0, -ECHILD when a client
 * failed (what failed is on stderr), or another -errno.
 */
int pfx_run_mode(const struct pfx_opts *o, const struct pfx_work *w, bool share,
		 struct pfx_result *res);

#endif /* KVP_BENCH_PREFIX_H */
