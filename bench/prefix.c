/* SPDX-License-Identifier: MIT */
/*
 * prefix.c - bench/prefix: what sharing prompt prefixes saves and costs
 * model-server processes against a running kvpoold.
 *
 * The workload: --clients processes each serve --requests requests. A
 * request is one of --prompts system prompts (lengths drawn once, uniform
 * in [--prompt-min, --prompt-max] tokens; chosen per request by a Zipf
 * law of exponent --zipf, 0 meaning uniform) followed by a user suffix
 * of random tokens (log-normal length of mean --suffix-mean and log
 * spread --suffix-sigma, clipped to 1 .. PFX_SUFFIX_MAX). Everything is
 * drawn from --seed, so every mode serves the same requests.
 *
 * Per request a process does what a model server does. With sharing:
 * kvp_block_keys() over the prompt's full blocks, kvp_acquire() of the
 * cached prefix, kvp_alloc() of the missing blocks plus one page for a
 * partial last block, a memset of each new page (standing in for
 * prefill), kvp_publish() of the new full blocks (a duplicate, published
 * by another process meanwhile, is released for the canonical page).
 * Without sharing (--no-share): kvp_alloc() of every block, the memset.
 * Either way the pages are held while the next --window - 1 requests of
 * the process start ("decode"), then released.
 *
 * While the clients run, the parent samples the daemon's page counts of
 * the namespace every --poll-us through an inspection session and keeps
 * the peak of private + shared pages. The clients also keep, in shared
 * memory, the exact peak of pages they would hold without sharing.
 *
 * Last, one client publishes a 256-block chain and times kvp_acquire() +
 * kvp_release() of its first 32 and of all 256 keys (all hits), beside
 * kvp_alloc() + kvp_release() of as many fresh pages.
 *
 * Prints key=value lines; bench/run-prefix.sh turns them into the prefix
 * section of BENCHMARKS.md. `make bench` runs it; `make check` never does.
 *
 * This file holds the options, the ACQUIRE latency and the output;
 * prefix_run.c runs the workload (clients, sampling, merging).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/prefix.h"
#include "bench/opt.h"

static void print_run(const struct pfx_opts *o, bool share, const struct pfx_result *r)
{
	const struct pfx_slot *s = &r->sum;

	printf("prefix mode=%s requests=%zu tokens=%" PRIu64 " blocks=%" PRIu64
	       " hits=%" PRIu64 " hit_rate=%.4f ceiling=%" PRIu64 " ceiling_rate=%.4f"
	       " hit_tokens=%" PRIu64
	       " allocated=%" PRIu64 " published=%" PRIu64 " dups=%" PRIu64
	       " peak_pages=%" PRIu64 " peak_private=%" PRIu64 " peak_shared=%" PRIu64
	       " peak_cached=%" PRIu64 " end_cached=%" PRIu64 " demand_peak=%" PRIu64
	       " samples=%" PRIu64 " wall_s=%.3f req_p50_us=%.1f req_p99_us=%.1f"
	       " keys_p50_us=%.1f keys_p99_us=%.1f calls_p50_us=%.1f calls_p99_us=%.1f"
	       " fill_p50_us=%.1f fill_p99_us=%.1f"
	       " d_acquires=%" PRIu64 " d_hits=%" PRIu64 " d_misses=%" PRIu64
	       " d_hit_tokens=%" PRIu64 " d_publishes=%" PRIu64 " d_dedups=%" PRIu64
	       " d_evictions=%" PRIu64 "\n",
	       share ? "share" : "no-share", o->clients * o->requests, s->tokens,
	       s->blocks, s->hits, s->blocks ? (double)s->hits / (double)s->blocks : 0.0,
	       r->ceiling, s->blocks ? (double)r->ceiling / (double)s->blocks : 0.0,
	       s->hits * pfx_geom.block_tokens, s->allocated, s->published, s->dups,
	       r->peak, r->peak_private, r->peak_shared, r->peak_cached, r->end_cached,
	       r->demand_peak, r->samples, r->wall_s, r->req.p50, r->req.p99,
	       r->phase[PFX_KEYS].p50, r->phase[PFX_KEYS].p99, r->phase[PFX_CALLS].p50,
	       r->phase[PFX_CALLS].p99, r->phase[PFX_FILL].p50, r->phase[PFX_FILL].p99,
	       r->d.acquires, r->d.hits, r->d.misses, r->d.hit_tokens, r->d.publishes,
	       r->d.dedups, r->d.evictions);
}

static void print_workload(const struct pfx_opts *o, const struct pfx_work *w,
			   const struct pfx_result *r)
{
	size_t i, n = o->clients * o->requests;

	printf("prefix-workload clients=%zu requests=%zu prompts=%zu window=%zu zipf=%.2f"
	       " prompt_min=%zu prompt_max=%zu suffix_mean=%.0f suffix_sigma=%.2f"
	       " seed=%" PRIu64 " poll_us=%zu block_tokens=%u page_bytes=%" PRIu64 " key_scheme=%s"
	       " mean_tokens=%.1f mean_suffix=%.1f mean_blocks=%.1f prompt_lens=",
	       o->clients, o->requests, o->prompts, o->window, o->zipf, o->prompt_min,
	       o->prompt_max, o->suffix_mean, o->suffix_sigma, o->seed, o->poll_us,
	       pfx_geom.block_tokens, r->page_bytes,
	       r->key_scheme == KVP_KEYS_VLLM_XXHASH_CBOR ? "vllm-xxhash-cbor" :
	       r->key_scheme == KVP_KEYS_VLLM_SHA256_CBOR ? "vllm-sha256-cbor" :
	       r->key_scheme == KVP_KEYS_VLLM_SHA256 ? "vllm-sha256" :
	       r->key_scheme == KVP_KEYS_VLLM_XXHASH ? "vllm-xxhash" : "unknown",
	       (double)r->sum.tokens / n, (double)r->sum.suffix_tokens / n,
	       (double)r->sum.blocks / n);
	for (i = 0; i < o->prompts; i++)
		printf("%s%zu", i ? "," : "", w->len[i]);
	printf(" picks=");
	for (i = 0; i < o->prompts; i++)
		printf("%s%" PRIu64, i ? "," : "", r->sum.picks[i]);
	printf("\n");
}

/* --- ACQUIRE latency of a fully cached chain -------------------------- */

/* lat_chain() - publish a PFX_CHAIN-block chain in namespace PFX_NS_LAT and
 * release it (its pages stay cached). keys[] gets its keys. 0 or -errno. */
static int lat_chain(const struct pfx_opts *o, kvp_client *c, kvp_key *keys)
{
	kvp_page pages[PFX_CHAIN], canon[PFX_CHAIN];
	uint32_t tokens[PFX_CHAIN * PFX_BT];
	uint64_t rng = o->seed + 0x1234567u;
	size_t i, bytes = kvp_page_bytes(c);
	void *p;
	int rc;

	pfx_rng_tokens(&rng, tokens, PFX_CHAIN * PFX_BT);
	rc = kvp_block_keys(c, NULL, tokens, PFX_CHAIN * PFX_BT, NULL, 0, keys);
	if (rc >= 0)
		rc = kvp_alloc(c, PFX_CHAIN, pages);
	for (i = 0; rc >= 0 && i < PFX_CHAIN; i++) {
		p = kvp_page_ptr(c, pages[i]);
		if (!p)
			return -ESTALE;
		memset(p, 0x5a, bytes);
	}
	if (rc >= 0)
		rc = kvp_publish(c, NULL, pages, keys, PFX_CHAIN, KVP_PRIO_NORMAL, canon);
	if (rc >= 0)
		rc = kvp_release(c, pages, PFX_CHAIN);
	for (i = 0; rc >= 0 && i < PFX_CHAIN; i++)	/* published by an earlier run */
		if (canon[i] != pages[i])
			rc = kvp_release(c, &canon[i], 1);
	return rc < 0 ? rc : 0;
}

struct pfx_lat {
	struct pfx_pct acquire, release, pair, alloc, free;
};

/* lat_time() - iters timed kvp_acquire()+kvp_release() of keys[0..n) and
 * kvp_alloc()+kvp_release() of n pages, after iters / 10 untimed ones.
 * t[] holds 5 x iters. Returns 0, -EBADE (not all hit) or -errno. */
static int lat_time(kvp_client *c, const kvp_key *keys, size_t n, size_t iters,
		    uint64_t *t, struct pfx_lat *l)
{
	kvp_page pages[PFX_CHAIN];
	size_t i, warm = iters / 10;
	uint64_t t0, t1, t2;
	int rc = 0;

	for (i = 0; i < warm + iters && rc >= 0; i++) {
		t0 = pfx_now_ns();
		rc = kvp_acquire(c, NULL, keys, n, NULL, 0, pages, NULL);
		t1 = pfx_now_ns();
		if (rc >= 0 && (size_t)rc != n)
			return -EBADE;
		if (rc >= 0)
			rc = kvp_release(c, pages, n);
		t2 = pfx_now_ns();
		if (i >= warm) {
			t[i - warm] = t1 - t0;
			t[iters + i - warm] = t2 - t1;
			t[2 * iters + i - warm] = t2 - t0;
		}
	}
	for (i = 0; i < warm + iters && rc >= 0; i++) {
		t0 = pfx_now_ns();
		rc = kvp_alloc(c, n, pages);
		t1 = pfx_now_ns();
		if (rc >= 0)
			rc = kvp_release(c, pages, n);
		t2 = pfx_now_ns();
		if (i >= warm) {
			t[3 * iters + i - warm] = t1 - t0;
			t[4 * iters + i - warm] = t2 - t1;
		}
	}
	if (rc < 0)
		return rc;
	l->acquire = pfx_pct_of(t, iters);
	l->release = pfx_pct_of(t + iters, iters);
	l->pair = pfx_pct_of(t + 2 * iters, iters);
	l->alloc = pfx_pct_of(t + 3 * iters, iters);
	l->free = pfx_pct_of(t + 4 * iters, iters);
	return 0;
}

/* run_latency() - the ACQUIRE latency lines. Returns 0 or -errno. */
static int run_latency(const struct pfx_opts *o)
{
	static const size_t lens[] = { 32, PFX_CHAIN };
	kvp_key keys[PFX_CHAIN];
	kvp_client *c = NULL;
	struct pfx_lat l;
	uint64_t *t;
	size_t i;
	int rc;

	t = malloc(5 * o->lat_iters * sizeof(*t));
	if (!t)
		return -ENOMEM;
	rc = kvp_connect(o->socket, PFX_NS_LAT, &pfx_geom, &c);
	if (rc == 0)
		rc = lat_chain(o, c, keys);
	for (i = 0; rc == 0 && i < 2; i++) {
		rc = lat_time(c, keys, lens[i], o->lat_iters, t, &l);
		if (rc < 0)
			break;
		printf("prefix-acquire blocks=%zu iters=%zu acquire_p50_us=%.2f acquire_p99_us=%.2f"
		       " release_p50_us=%.2f release_p99_us=%.2f pair_p50_us=%.2f pair_p99_us=%.2f"
		       " alloc_p50_us=%.2f alloc_p99_us=%.2f free_p50_us=%.2f free_p99_us=%.2f\n",
		       lens[i], o->lat_iters, l.acquire.p50, l.acquire.p99, l.release.p50,
		       l.release.p99, l.pair.p50, l.pair.p99, l.alloc.p50, l.alloc.p99,
		       l.free.p50, l.free.p99);
	}
	if (rc < 0)
		fprintf(stderr, "prefix: ACQUIRE latency in namespace %s: %s%s%s\n", PFX_NS_LAT,
			rc == -EBADE ? "the published chain did not hit in full" :
			kvp_strerror(rc), kvp_last_error()[0] ? ": " : "", kvp_last_error());
	kvp_close(c);
	free(t);
	return rc;
}

/* --- Options and main ---------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: prefix [OPTION]...\n"
		"Measure prefix sharing against a running kvpoold: hit rate, peak pages with\n"
		"and without sharing on the same requests, and ACQUIRE latency.\n\n"
		"  -s, --socket=PATH      the daemon's socket (default: $KVPOOL_SOCKET, else %s)\n"
		"  -c, --clients=N        client processes (default 4, at most %d)\n"
		"  -n, --requests=N       requests per client (default 500)\n"
		"  -p, --prompts=N        system prompts (default 8, at most %d)\n"
		"  -w, --window=N         requests in flight per client (default 8, at most %d)\n"
		"      --zipf=S           prompt choice: Zipf exponent, 0 for uniform (default 1)\n"
		"      --prompt-min=N     shortest system prompt, tokens (default 200)\n"
		"      --prompt-max=N     longest system prompt, tokens (default 2000)\n"
		"      --suffix-mean=N    mean user suffix, tokens, log-normal (default 256)\n"
		"      --suffix-sigma=F   sigma of the suffix length's log (default 0.8)\n"
		"      --seed=N           seed of every random draw (default 1)\n"
		"      --poll-us=N        sample the daemon's page counts this often (default 500)\n"
		"      --lat-iters=N      timed ACQUIREs per chain length (default 5000)\n"
		"      --mode=MODE        all (default): the run with sharing, the run without\n"
		"                         (no-share) and the ACQUIRE latency; or only one of\n"
		"                         share, no-share, latency\n"
		"  -h, --help             show this help and exit\n",
		KVP_SOCKET_DEFAULT, PFX_MAX_CLIENTS, PFX_MAX_PROMPTS, PFX_MAX_WINDOW);
}

static int parse_mode(const char *s, struct pfx_opts *o)
{
	bool all = strcmp(s, "all") == 0;

	o->share = all || strcmp(s, "share") == 0;
	o->noshare = all || strcmp(s, "no-share") == 0;
	o->latency = all || strcmp(s, "latency") == 0;
	if (o->share || o->noshare || o->latency)
		return 0;
	fprintf(stderr, "prefix: --mode '%s': give all, share, no-share or latency\n", s);
	return -EINVAL;
}

/* parse_long() - the options without a short form (getopt's value >= 256). */
static int parse_long(int ch, struct pfx_opts *o)
{
	size_t seed;

	switch (ch) {
	case 256: return bench_num("prefix", "zipf", optarg, 0, 10, &o->zipf);
	case 257: return bench_count("prefix", "prompt-min", optarg, 16, 1 << 20, &o->prompt_min);
	case 258: return bench_count("prefix", "prompt-max", optarg, 16, 1 << 20, &o->prompt_max);
	case 259: return bench_num("prefix", "suffix-mean", optarg, 1, PFX_SUFFIX_MAX, &o->suffix_mean);
	case 260: return bench_num("prefix", "suffix-sigma", optarg, 0, 4, &o->suffix_sigma);
	case 261:
		if (bench_count("prefix", "seed", optarg, 0, 1e15, &seed) < 0)
			return -EINVAL;
		o->seed = seed;
		return 0;
	case 262: return bench_count("prefix", "poll-us", optarg, 1, 1000000, &o->poll_us);
	case 263: return bench_count("prefix", "lat-iters", optarg, 10, 10000000, &o->lat_iters);
	case 264: return parse_mode(optarg, o);
	}
	usage(stderr);
	return -EINVAL;
}

/* parse_opts() - fill *o from argv. Returns 0, 1 (help shown) or -EINVAL. */
static int parse_opts(int argc, char **argv, struct pfx_opts *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'n' },
		{ "prompts", required_argument, NULL, 'p' },
		{ "window", required_argument, NULL, 'w' },
		{ "zipf", required_argument, NULL, 256 },
		{ "prompt-min", required_argument, NULL, 257 },
		{ "prompt-max", required_argument, NULL, 258 },
		{ "suffix-mean", required_argument, NULL, 259 },
		{ "suffix-sigma", required_argument, NULL, 260 },
		{ "seed", required_argument, NULL, 261 },
		{ "poll-us", required_argument, NULL, 262 },
		{ "lat-iters", required_argument, NULL, 263 },
		{ "mode", required_argument, NULL, 264 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch, rc = 0;

	*o = (struct pfx_opts){ .clients = 4, .requests = 500, .prompts = 8, .window = 8,
				.prompt_min = 200, .prompt_max = 2000, .zipf = 1.0,
				.suffix_mean = 256, .suffix_sigma = 0.8, .seed = 1,
				.poll_us = 500, .lat_iters = 5000, .share = true,
				.noshare = true, .latency = true };
	while (rc == 0 && (ch = getopt_long(argc, argv, "s:c:n:p:w:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			o->socket = optarg;
			break;
		case 'c':
			rc = bench_count("prefix", "clients", optarg, 1, PFX_MAX_CLIENTS, &o->clients);
			break;
		case 'n':
			rc = bench_count("prefix", "requests", optarg, 1, 10000000, &o->requests);
			break;
		case 'p':
			rc = bench_count("prefix", "prompts", optarg, 1, PFX_MAX_PROMPTS, &o->prompts);
			break;
		case 'w':
			rc = bench_count("prefix", "window", optarg, 1, PFX_MAX_WINDOW, &o->window);
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			rc = parse_long(ch, o);
			break;
		}
	}
	if (rc == 0 && optind < argc) {
		fprintf(stderr, "prefix: unexpected argument '%s'; see prefix --help\n", argv[optind]);
		rc = -EINVAL;
	}
	if (rc == 0 && o->prompt_min > o->prompt_max) {
		fprintf(stderr, "prefix: --prompt-min %zu is above --prompt-max %zu\n",
			o->prompt_min, o->prompt_max);
		rc = -EINVAL;
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct pfx_result share, noshare;
	struct pfx_work w = { 0 };
	struct pfx_opts o;
	int rc;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	rc = pfx_work_make(&o, &w);
	if (rc < 0)
		fprintf(stderr, "prefix: no memory for %zu system prompts\n", o.prompts);
	if (rc == 0 && o.share && (rc = pfx_run_mode(&o, &w, true, &share)) == 0) {
		print_workload(&o, &w, &share);
		print_run(&o, true, &share);
	}
	if (rc == 0 && o.noshare && (rc = pfx_run_mode(&o, &w, false, &noshare)) == 0) {
		if (!o.share)
			print_workload(&o, &w, &noshare);
		print_run(&o, false, &noshare);
	}
	if (rc == 0 && o.latency)
		rc = run_latency(&o);
	pfx_work_free(&w);
	return rc == 0 ? 0 : 1;
}
