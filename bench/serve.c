/* SPDX-License-Identifier: MIT */
/*
 * serve.c - bench/serve: serving throughput of paging + prefix sharing
 * against contiguous reservation, in simulated time, with every page of
 * KV memory leased from a running kvpoold.
 *
 * --clients processes are each a model server with iteration-level
 * batching (vLLM's scheduler, simplified). Requests arrive to each as a
 * Poisson process of rate --rate / --clients. A request is one of
 * --prompts system prompts (lengths drawn once, uniform in 256..1024
 * tokens; chosen by Zipf of exponent --zipf), a log-normal user part and
 * a log-normal output length (means --user-mean and --out-mean, sigma
 * --sigma of the log; clipped so that the whole fits --max-len).
 *
 * Compute is not run: an engine step costs t0 + t1 x (tokens computed in
 * the step: the uncached prompt tokens of the sequences admitted in it
 * plus one per decoding sequence) of simulated time. The processes take
 * turns by semaphores in shared memory so that the one with the lowest
 * simulated clock always runs next: the pool they share is contended in
 * simulated time order, and the run is deterministic.
 *
 * Policy "paged": a sequence gets pages as it grows (one kvp_alloc() per
 * step for every sequence that crosses a block), acquires the cached
 * blocks of its system prompt (kvp_acquire(); hits are not computed),
 * publishes the system-prompt blocks it computed, and releases all at
 * the end. When the pool is full the last admitted sequence is preempted
 * (pages released, recomputed later), as vLLM does.
 * Policy "reserve": a sequence is admitted only when one kvp_alloc() of
 * --max-len tokens of pages succeeds; no sharing, no growth.
 * Either way admission is first come, first served, at most --max-prefill
 * prompt tokens per step.
 *
 * Prints key=value lines; bench/run-serve.sh runs the rate sweep and
 * turns them into the serve section of BENCHMARKS.md.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "bench/opt.h"

#define SRV_BT		16u		/* tokens per page */
#define SRV_MAX_CLIENTS	16
#define SRV_MAX_PROMPTS	16
#define SRV_MAX_LEN	8192u
#define SRV_MAX_PAGES	(SRV_MAX_LEN / SRV_BT + 1)

static const kvp_geometry srv_geom = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = SRV_BT,
	.dtype = KVP_DTYPE_F16, .model = "bench/serve-model",
};

struct srv_opts {
	const char *socket, *ns;
	size_t clients, requests, prompts, max_len, max_prefill, max_batch;
	double rate, zipf, user_mean, out_mean, sigma, t0_ms, t1_ms;
	uint64_t seed;
	bool paged;
};

/* One request, in the shared region: drawn by its client, read by the
 * parent after the run. Times in simulated seconds. */
struct srv_req {
	double arrival, finish;
	uint32_t sys, user, out;
};

/* One client's counters, in the shared region. */
struct srv_stat {
	uint64_t steps, batch_sum, computed, hit_tokens, preempts, calls, peak_pages;
	uint64_t done;
	int err;
};

/* The shared region: turns and clocks, counters, requests[clients][requests]. */
struct srv_shared {
	sem_t turn[SRV_MAX_CLIENTS];
	double clock[SRV_MAX_CLIENTS];
	struct srv_stat st[SRV_MAX_CLIENTS];
	struct srv_req req[];
};

/* A client's view of one request while it runs. */
enum srv_state { SRV_FUTURE, SRV_WAITING, SRV_RUNNING, SRV_DONE };

struct srv_seq {
	enum srv_state state;
	uint32_t kv, gen;		/* tokens with K/V in pages; output so far */
	uint32_t npages;
	kvp_page pages[SRV_MAX_PAGES];
};

/* The system prompts: lengths and the keys of their full blocks. */
struct srv_prompts {
	uint32_t len[SRV_MAX_PROMPTS];
	kvp_key *keys[SRV_MAX_PROMPTS];
	double cdf[SRV_MAX_PROMPTS];
};

/* --- Random draws (splitmix64; every draw from --seed) ------------------- */

static uint64_t srv_rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* srv_unif() - uniform in (0, 1). */
static double srv_unif(uint64_t *s)
{
	return ((double)(srv_rng(s) >> 11) + 0.5) / 9007199254740992.0;
}

/* srv_lognormal() - log-normal of mean m and sigma s of its log. */
static double srv_lognormal(uint64_t *r, double m, double s)
{
	double z = sqrt(-2 * log(srv_unif(r))) * cos(2 * M_PI * srv_unif(r));

	return exp(log(m) - s * s / 2 + s * z);
}

/* srv_prompts_make() - draw the system prompts and their block keys.
 * Returns 0 or -errno. Free with srv_prompts_free(). */
static int srv_prompts_make(const struct srv_opts *o, kvp_client *c, struct srv_prompts *p)
{
	uint32_t tokens[1024];
	uint64_t r = o->seed * 7919 + 17;
	double sum = 0;
	size_t i, j;
	int rc;

	for (i = 0; i < o->prompts; i++) {
		p->len[i] = 256 + (uint32_t)(srv_rng(&r) % 769);
		for (j = 0; j < p->len[i]; j++)
			tokens[j] = (uint32_t)(srv_rng(&r) % 152064);
		p->keys[i] = calloc(p->len[i] / SRV_BT, sizeof(kvp_key));
		if (!p->keys[i])
			return -ENOMEM;
		rc = kvp_block_keys(c, NULL, tokens, p->len[i], NULL, 0, p->keys[i]);
		if (rc < 0)
			return rc;
		sum += 1 / pow((double)(i + 1), o->zipf);
		p->cdf[i] = sum;
	}
	for (i = 0; i < o->prompts; i++)
		p->cdf[i] /= sum;
	return 0;
}

static void srv_prompts_free(struct srv_prompts *p)
{
	size_t i;

	for (i = 0; i < SRV_MAX_PROMPTS; i++)
		free(p->keys[i]);
}

/* srv_requests_make() - client k's requests into req[0..o->requests). */
static void srv_requests_make(const struct srv_opts *o, const struct srv_prompts *p,
			      size_t k, struct srv_req *req)
{
	uint64_t r = o->seed * 1000003 + k * 7777 + 1;
	double t = 0, u, lam = o->rate / (double)o->clients;
	uint32_t room;
	size_t i, j;

	for (i = 0; i < o->requests; i++) {
		t += -log(srv_unif(&r)) / lam;
		u = srv_unif(&r);
		for (j = 0; j + 1 < o->prompts && p->cdf[j] < u; j++)
			;
		req[i] = (struct srv_req){ .arrival = t, .sys = (uint32_t)j };
		room = (uint32_t)o->max_len - p->len[j];
		req[i].user = (uint32_t)fmin(fmax(1, srv_lognormal(&r, o->user_mean, o->sigma)),
					     room / 2);
		room -= req[i].user;
		req[i].out = (uint32_t)fmin(fmax(1, srv_lognormal(&r, o->out_mean, o->sigma)), room);
	}
}

/* --- One model server ------------------------------------------------------ */

struct srv_engine {
	const struct srv_opts *o;
	const struct srv_prompts *p;
	kvp_client *c;
	struct srv_shared *sh;
	size_t k;			/* this client's index */
	struct srv_req *req;		/* its requests in the shared region */
	struct srv_seq *seq;		/* [o->requests] */
	size_t *run, nrun;		/* running, in admission order */
	size_t next;			/* first request not arrived yet */
	size_t done;
	uint64_t held;			/* pages this client holds */
	struct srv_stat *st;
};

static int srv_release(struct srv_engine *e, struct srv_seq *s)
{
	int rc = 0;

	if (s->npages) {
		rc = kvp_release(e->c, s->pages, s->npages);
		e->st->calls++;
	}
	e->held -= s->npages;
	s->npages = 0;
	s->kv = 0;
	return rc;
}

/* srv_admit_paged() - acquire the cached system-prompt blocks of request
 * i, allocate pages for the rest of its prompt (and the output so far,
 * after a preemption) and publish the system-prompt blocks it computes.
 * Returns the tokens to compute, -ENOSPC (nothing held) or -errno. */
static int srv_admit_paged(struct srv_engine *e, size_t i)
{
	const struct srv_req *q = &e->req[i];
	struct srv_seq *s = &e->seq[i];
	uint32_t ctx = e->p->len[q->sys] + q->user + s->gen;
	uint32_t nsys = e->p->len[q->sys] / SRV_BT, need;
	const kvp_key *keys = e->p->keys[q->sys];
	kvp_page canon[SRV_MAX_PAGES];
	int hits, rc;
	uint32_t j;

	hits = kvp_acquire(e->c, NULL, keys, nsys, NULL, 0, s->pages, NULL);
	e->st->calls++;
	if (hits < 0)
		return hits;
	need = (ctx + SRV_BT - 1) / SRV_BT - (uint32_t)hits;
	rc = kvp_alloc(e->c, need, s->pages + hits);
	e->st->calls++;
	if (rc < 0) {
		if (hits)
			kvp_release(e->c, s->pages, (size_t)hits);
		return rc;
	}
	s->npages = (uint32_t)hits + need;
	e->held += s->npages;
	if ((uint32_t)hits < nsys) {
		rc = kvp_publish(e->c, hits ? &keys[hits - 1] : NULL, s->pages + hits,
				 keys + hits, nsys - (uint32_t)hits, KVP_PRIO_NORMAL, canon);
		e->st->calls++;
		for (j = 0; rc == 0 && j < nsys - (uint32_t)hits; j++) {
			if (canon[j] == s->pages[hits + j])
				continue;
			/* published by another client meanwhile: use its page */
			rc = kvp_release(e->c, &s->pages[hits + j], 1);
			s->pages[hits + j] = canon[j];
		}
		if (rc < 0)
			return rc;
	}
	s->kv = ctx;
	e->st->hit_tokens += (uint64_t)hits * SRV_BT;
	return (int)(ctx - (uint32_t)hits * SRV_BT);
}

/* srv_admit_reserve() - reserve --max-len tokens of pages for request i.
 * Returns the tokens to compute, -ENOSPC or -errno. */
static int srv_admit_reserve(struct srv_engine *e, size_t i)
{
	const struct srv_req *q = &e->req[i];
	struct srv_seq *s = &e->seq[i];
	uint32_t n = ((uint32_t)e->o->max_len + SRV_BT - 1) / SRV_BT;
	int rc;

	rc = kvp_alloc(e->c, n, s->pages);
	e->st->calls++;
	if (rc < 0)
		return rc;
	s->npages = n;
	e->held += n;
	s->kv = e->p->len[q->sys] + q->user + s->gen;
	return (int)s->kv;
}

/* srv_admit() - admit waiting requests first come, first served while
 * memory and the step's prefill budget allow. Returns the prompt tokens
 * to compute in this step or -errno. */
static int srv_admit(struct srv_engine *e, double now)
{
	size_t i, tokens = 0;
	int rc;

	while (e->next < e->o->requests && e->req[e->next].arrival <= now)
		e->seq[e->next++].state = SRV_WAITING;
	for (i = 0; i < e->next && e->nrun < e->o->max_batch; i++) {
		if (e->seq[i].state != SRV_WAITING)
			continue;
		if (tokens && tokens + e->p->len[e->req[i].sys] + e->req[i].user >
		    e->o->max_prefill)
			break;
		rc = e->o->paged ? srv_admit_paged(e, i) : srv_admit_reserve(e, i);
		if (rc == -ENOSPC)
			break;
		if (rc < 0)
			return rc;
		tokens += (size_t)rc;
		e->seq[i].state = SRV_RUNNING;
		e->run[e->nrun++] = i;
	}
	return (int)tokens;
}

/* srv_grow() - one page more for every running sequence whose next K/V
 * token starts a block (one kvp_alloc()), preempting the last admitted
 * sequences while the pool has too few (all of them, when other clients
 * hold the pool). Paged policy only. 0 or -errno. */
static int srv_grow(struct srv_engine *e)
{
	kvp_page pages[SRV_MAX_PAGES * 4];
	size_t i, n;
	struct srv_seq *s;
	int rc;

	for (;;) {
		for (i = n = 0; i < e->nrun; i++)
			n += e->seq[e->run[i]].kv % SRV_BT == 0;
		if (n == 0)
			return 0;
		if (n > sizeof(pages) / sizeof(pages[0]))
			return -E2BIG;
		rc = kvp_alloc(e->c, n, pages);
		e->st->calls++;
		if (rc == 0)
			break;
		if (rc != -ENOSPC || e->nrun == 0)	/* other clients hold the pool */
			return rc;
		s = &e->seq[e->run[--e->nrun]];	/* preempt: recompute later */
		rc = srv_release(e, s);
		if (rc < 0)
			return rc;
		s->state = SRV_WAITING;
		e->st->preempts++;
	}
	for (i = n = 0; i < e->nrun; i++) {
		s = &e->seq[e->run[i]];
		if (s->kv % SRV_BT == 0)
			s->pages[s->npages++] = pages[n++];
	}
	e->held += n;
	return 0;
}

/* srv_step() - one engine step from the client's clock on: grow the
 * running sequences (paged; a preemption admits nothing new this step),
 * admit, advance the clock by the cost model, retire finished sequences.
 * With nothing to run the clock jumps to the next arrival (or a t0 tick
 * when requests wait for memory that other clients hold). 0 or -errno. */
static int srv_step(struct srv_engine *e)
{
	double *clock = &e->sh->clock[e->k];
	size_t i, j, decode = e->nrun;
	struct srv_seq *s;
	int prefill = 0, rc;

	if (e->o->paged && decode) {
		rc = srv_grow(e);
		if (rc < 0)
			return rc;
	}
	if (e->nrun == decode) {
		decode = e->nrun;
		prefill = srv_admit(e, *clock);
		if (prefill < 0)
			return prefill;
	} else {
		decode = e->nrun;
	}
	if (e->nrun == 0) {
		if (e->next > e->done)
			*clock += e->o->t0_ms / 1000;
		else
			*clock = e->req[e->next].arrival;
		return 0;
	}
	if (e->held > e->st->peak_pages)
		e->st->peak_pages = e->held;
	*clock += (e->o->t0_ms + e->o->t1_ms * (double)((size_t)prefill + decode)) / 1000;
	e->st->steps++;
	e->st->batch_sum += e->nrun;
	e->st->computed += (size_t)prefill + decode;
	for (i = j = 0; i < e->nrun; i++) {
		s = &e->seq[e->run[i]];
		if (i < decode)
			s->kv++;
		if (++s->gen < e->req[e->run[i]].out) {
			e->run[j++] = e->run[i];
			continue;
		}
		rc = srv_release(e, s);
		if (rc < 0)
			return rc;
		s->state = SRV_DONE;
		e->req[e->run[i]].finish = *clock;
		e->done++;
	}
	e->nrun = j;
	return 0;
}

/* srv_next_turn() - the client with the lowest clock (the lowest index
 * among equals), or -1 when every client has finished. */
static int srv_next_turn(const struct srv_shared *sh, size_t n)
{
	int best = -1;
	size_t i;

	for (i = 0; i < n; i++)
		if (sh->clock[i] < INFINITY && (best < 0 || sh->clock[i] < sh->clock[best]))
			best = (int)i;
	return best;
}

/* srv_client() - client k's whole run; the child's exit status. */
static int srv_client(const struct srv_opts *o, struct srv_shared *sh, size_t k)
{
	struct srv_engine e = { .o = o, .sh = sh, .k = k, .st = &sh->st[k] };
	struct srv_prompts p = { 0 };
	int rc, t;

	e.req = &sh->req[k * o->requests];
	e.seq = calloc(o->requests, sizeof(*e.seq));
	e.run = calloc(o->requests, sizeof(*e.run));
	rc = e.seq && e.run ? kvp_connect(o->socket, o->ns, &srv_geom, &e.c) : -ENOMEM;
	if (rc == 0)
		rc = srv_prompts_make(o, e.c, &p);
	e.p = &p;
	if (rc == 0)
		srv_requests_make(o, &p, k, e.req);
	while (sem_wait(&sh->turn[k]) < 0 && errno == EINTR)
		;
	while (rc == 0 && e.done < o->requests) {
		rc = srv_step(&e);
		t = srv_next_turn(sh, o->clients);
		if (rc == 0 && e.done < o->requests && t != (int)k) {
			sem_post(&sh->turn[t]);
			while (sem_wait(&sh->turn[k]) < 0 && errno == EINTR)
				;
		}
	}
	sh->clock[k] = INFINITY;
	e.st->done = e.done;
	e.st->err = rc;
	t = srv_next_turn(sh, o->clients);
	if (t >= 0)
		sem_post(&sh->turn[t]);
	if (rc < 0)
		fprintf(stderr, "serve: client %zu: %s%s%s\n", k, kvp_strerror(rc),
			kvp_last_error()[0] ? ": " : "", kvp_last_error());
	kvp_close(e.c);
	srv_prompts_free(&p);
	free(e.seq);
	free(e.run);
	return rc ? 1 : 0;
}

/* --- The parent: run, merge, print ----------------------------------------- */

static int srv_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void srv_report(const struct srv_opts *o, const struct srv_shared *sh, double wall)
{
	size_t i, n = o->clients * o->requests;
	double *norm = calloc(n, sizeof(*norm));
	double end = 0, sum = 0, lat = 0, out = 0, in = 0;
	struct srv_stat t = { 0 };

	if (!norm)
		return;
	for (i = 0; i < n; i++) {
		const struct srv_req *q = &sh->req[i];

		end = fmax(end, q->finish);
		norm[i] = (q->finish - q->arrival) / q->out;
		sum += norm[i];
		lat += q->finish - q->arrival;
		out += q->out;
		in += q->user;
	}
	for (i = 0; i < o->clients; i++) {
		t.steps += sh->st[i].steps;
		t.batch_sum += sh->st[i].batch_sum;
		t.computed += sh->st[i].computed;
		t.hit_tokens += sh->st[i].hit_tokens;
		t.preempts += sh->st[i].preempts;
		t.calls += sh->st[i].calls;
		t.peak_pages += sh->st[i].peak_pages;
	}
	qsort(norm, n, sizeof(*norm), srv_cmp_double);
	printf("serve policy=%s rate=%.3f requests=%zu sim_s=%.2f req_per_s=%.3f"
	       " tok_per_s=%.1f norm_mean=%.4f norm_p50=%.4f norm_p90=%.4f lat_mean_s=%.2f"
	       " mean_batch=%.2f steps=%" PRIu64 " computed=%" PRIu64 " hit_tokens=%" PRIu64
	       " preempts=%" PRIu64 " calls=%" PRIu64 " peak_pages_sum=%" PRIu64
	       " mean_user=%.1f mean_out=%.1f wall_s=%.2f\n",
	       o->paged ? "paged" : "reserve", o->rate, n, end, (double)n / end, out / end,
	       sum / (double)n, norm[n / 2], norm[(size_t)((double)n * 0.9)], lat / (double)n,
	       (double)t.batch_sum / (double)t.steps, t.steps, t.computed, t.hit_tokens,
	       t.preempts, t.calls, t.peak_pages, in / (double)n, out / (double)n, wall);
	free(norm);
}

static int srv_run(const struct srv_opts *o)
{
	size_t i, bytes = sizeof(struct srv_shared) +
		o->clients * o->requests * sizeof(struct srv_req);
	struct srv_shared *sh;
	struct timespec a, b;
	pid_t pid[SRV_MAX_CLIENTS];
	int status, bad = 0;

	sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -errno;
	for (i = 0; i < o->clients; i++)
		sem_init(&sh->turn[i], 1, 0);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < o->clients; i++) {
		pid[i] = fork();
		if (pid[i] == 0)
			_exit(srv_client(o, sh, i));
		if (pid[i] < 0)
			return -errno;
	}
	sem_post(&sh->turn[0]);
	for (i = 0; i < o->clients; i++)
		if (waitpid(pid[i], &status, 0) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			bad = 1;
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (!bad)
		srv_report(o, sh, (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
	munmap(sh, bytes);
	return bad ? -EIO : 0;
}

/* --- Options and main ---------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: serve [OPTION]...\n"
		"Serving throughput and normalized latency of simulated model servers whose\n"
		"KV memory comes from a running kvpoold, paged with sharing or reserved.\n\n"
		"  -s, --socket=PATH     the daemon's socket (default: $KVPOOL_SOCKET)\n"
		"      --ns=NAME         namespace (default serve)\n"
		"  -c, --clients=N       model-server processes (default 4, at most %d)\n"
		"  -n, --requests=N      requests per client (default 100)\n"
		"  -r, --rate=R          arrivals per second, all clients together (default 4)\n"
		"      --policy=P        paged (default) or reserve\n"
		"      --prompts=N       system prompts (default 4, at most %d)\n"
		"      --zipf=S          Zipf exponent of the prompt choice (default 1)\n"
		"      --user-mean=N     mean user part, tokens (default 128)\n"
		"      --out-mean=N      mean output length, tokens (default 256)\n"
		"      --sigma=F         sigma of the logs of both (default 0.8)\n"
		"      --max-len=N       most tokens of a sequence, the reservation (default 2048)\n"
		"      --max-prefill=N   most prompt tokens admitted in one step (default 2048)\n"
		"      --max-batch=N     most sequences in a step per client (default 256)\n"
		"      --t0-ms=F         cost of a step (default 20)\n"
		"      --t1-ms=F         cost of each token computed in a step (default 0.13)\n"
		"      --seed=N          seed of every draw (default 1)\n"
		"  -h, --help            show this help and exit\n",
		SRV_MAX_CLIENTS, SRV_MAX_PROMPTS);
}

static int srv_opt(int ch, struct srv_opts *o)
{
	double v;
	int rc;

	switch (ch) {
	case 's': o->socket = optarg; return 0;
	case 'c': return bench_count("serve", "clients", optarg, 1, SRV_MAX_CLIENTS, &o->clients);
	case 'n': return bench_count("serve", "requests", optarg, 1, 1e6, &o->requests);
	case 'r': return bench_num("serve", "rate", optarg, 1e-3, 1e6, &o->rate);
	case 256: o->ns = optarg; return 0;
	case 257:
		o->paged = strcmp(optarg, "paged") == 0;
		if (o->paged || strcmp(optarg, "reserve") == 0)
			return 0;
		fprintf(stderr, "serve: --policy '%s': give paged or reserve\n", optarg);
		return -EINVAL;
	case 258: return bench_count("serve", "prompts", optarg, 1, SRV_MAX_PROMPTS, &o->prompts);
	case 259: return bench_num("serve", "zipf", optarg, 0, 10, &o->zipf);
	case 260: return bench_num("serve", "user-mean", optarg, 1, 4096, &o->user_mean);
	case 261: return bench_num("serve", "out-mean", optarg, 1, 4096, &o->out_mean);
	case 262: return bench_num("serve", "sigma", optarg, 0, 3, &o->sigma);
	case 263: return bench_count("serve", "max-len", optarg, 1280, SRV_MAX_LEN, &o->max_len);
	case 264: return bench_count("serve", "max-prefill", optarg, 1, 1e6, &o->max_prefill);
	case 265: return bench_count("serve", "max-batch", optarg, 1, 4096, &o->max_batch);
	case 266: return bench_num("serve", "t0-ms", optarg, 0, 1e4, &o->t0_ms);
	case 267: return bench_num("serve", "t1-ms", optarg, 0, 1e4, &o->t1_ms);
	case 268:
		rc = bench_num("serve", "seed", optarg, 0, 1e15, &v);
		o->seed = (uint64_t)v;
		return rc;
	}
	usage(stderr);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'n' },
		{ "rate", required_argument, NULL, 'r' },
		{ "ns", required_argument, NULL, 256 },
		{ "policy", required_argument, NULL, 257 },
		{ "prompts", required_argument, NULL, 258 },
		{ "zipf", required_argument, NULL, 259 },
		{ "user-mean", required_argument, NULL, 260 },
		{ "out-mean", required_argument, NULL, 261 },
		{ "sigma", required_argument, NULL, 262 },
		{ "max-len", required_argument, NULL, 263 },
		{ "max-prefill", required_argument, NULL, 264 },
		{ "max-batch", required_argument, NULL, 265 },
		{ "t0-ms", required_argument, NULL, 266 },
		{ "t1-ms", required_argument, NULL, 267 },
		{ "seed", required_argument, NULL, 268 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct srv_opts o = { .ns = "serve", .clients = 4, .requests = 100, .prompts = 4,
			      .max_len = 2048, .max_prefill = 2048, .max_batch = 256,
			      .rate = 4, .zipf = 1, .user_mean = 128, .out_mean = 256,
			      .sigma = 0.8, .t0_ms = 20, .t1_ms = 0.13, .seed = 1,
			      .paged = true };
	int ch, rc = 0;

	while (rc == 0 && (ch = getopt_long(argc, argv, "s:c:n:r:h", longopts, NULL)) != -1) {
		if (ch == 'h') {
			usage(stdout);
			return 0;
		}
		rc = srv_opt(ch, &o);
	}
	if (rc == 0 && optind < argc) {
		fprintf(stderr, "serve: unexpected argument '%s'; see serve --help\n", argv[optind]);
		rc = -EINVAL;
	}
	if (rc)
		return 2;
	printf("serve-workload clients=%zu requests=%zu prompts=%zu zipf=%.2f user_mean=%.0f"
	       " out_mean=%.0f sigma=%.2f max_len=%zu max_prefill=%zu t0_ms=%.3f t1_ms=%.3f"
	       " seed=%" PRIu64 " block_tokens=%u\n", o.clients, o.requests, o.prompts, o.zipf,
	       o.user_mean, o.out_mean, o.sigma, o.max_len, o.max_prefill, o.t0_ms, o.t1_ms,
	       o.seed, SRV_BT);
	fflush(stdout);
	rc = srv_run(&o);
	if (rc < 0)
		fprintf(stderr, "serve: the run failed: %s\n", strerror(-rc));
	return rc ? 1 : 0;
}
