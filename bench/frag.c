/* SPDX-License-Identifier: MIT */
/*
 * frag.c - bench/frag: how much of a fixed KV-cache capacity holds token
 * states under contiguous reservation (Orca Max, Pow2, Oracle) and under
 * paging with the real page pool (daemon/store/pool.c on the host backend), and
 * how many KV blocks sharing saves (parallel sampling, shared system
 * prompts). Set against the vLLM paper's Figure 2 by bench/run-frag.sh.
 *
 * One serving loop for every policy: all requests of a trace wait at step
 * 0; each step admits waiting requests first come first served while
 * memory allows, every running sequence decodes one token, the state is
 * measured, and sequences that reached their output length leave. Shares
 * are time averages over the steps that end with a request still waiting
 * (the system is saturated), so the drain at the end does not count.
 *
 * Contiguous policies reserve one range of token slots per request in a
 * first-fit allocator over the capacity as one linear address space.
 * Paging gives a sequence one pool page (block_tokens slots) when its
 * next token needs a new block; admission needs the blocks of the prompt
 * and its first output token; when a sequence cannot grow, the request
 * admitted last is preempted (its pages freed, it waits again at the head
 * of the queue and starts over), as vLLM does with recomputation.
 *
 * Output: key=value lines on stdout, one per trace, run and sharing case
 * (bench/run-frag.sh turns them into the BENCHMARKS.md section).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/store/backend.h"
#include "daemon/store/pool.h"

#define FRAG_MAX_LEN 2048	/* max tokens of a sequence, prompt + output */
#define FRAG_MAX_SAMPLES 6	/* parallel samples of one request, at most */
#define FRAG_TOKEN_BYTES 1024u	/* 2 layers x 2 KV heads x head_dim 64 x f16, K and V */
#define FRAG_SLAB_BYTES (1u << 20)
#define FRAG_MAX_BLOCK 128

static const int frag_blocks[] = { 8, 16, 32, 64, 128 };
#define FRAG_NBLOCKS (int)(sizeof(frag_blocks) / sizeof(frag_blocks[0]))

/* --- traces ---------------------------------------------------------------- */

struct trace_spec {
	const char *name;
	double mean_in, mean_out;	/* published means, tokens */
	double sigma;			/* of the log, for input and output */
};

/* One request: its user input and one output length per sample. */
struct req {
	int in;
	int out[FRAG_MAX_SAMPLES];
};

/* frag_rng() - splitmix64: the same sequence on every machine. */
static uint64_t frag_rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* frag_lognormal() - a log-normal draw with the given mean and sigma of
 * its log (mu = ln(mean) - sigma^2 / 2), rounded, at least 1. */
static int frag_lognormal(uint64_t *s, double mean, double sigma)
{
	double u1 = ((double)(frag_rng(s) >> 11) + 0.5) * 0x1.0p-53;
	double u2 = ((double)(frag_rng(s) >> 11) + 0.5) * 0x1.0p-53;
	double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
	double x = exp(log(mean) - sigma * sigma / 2.0 + sigma * z);

	return x < 1.0 ? 1 : x > 1e6 ? 1000000 : (int)lround(x);
}

/*
 * trace_make() - n requests of spec from seed, clipped so that prefix +
 * input + output <= FRAG_MAX_LEN: the input to FRAG_MAX_LEN - prefix - 1,
 * then each output to what is left. The raw draws do not depend on
 * prefix, so every run of a trace serves the same requests. Counts the
 * clipped requests into *clipped. r has n entries (caller's).
 */
static void trace_make(const struct trace_spec *spec, int n, uint64_t seed,
		       int prefix, struct req *r, int *clipped)
{
	uint64_t s = seed;
	int i, k, room;

	*clipped = 0;
	for (i = 0; i < n; i++) {
		bool clip = false;

		r[i].in = frag_lognormal(&s, spec->mean_in, spec->sigma);
		for (k = 0; k < FRAG_MAX_SAMPLES; k++)
			r[i].out[k] = frag_lognormal(&s, spec->mean_out, spec->sigma);
		if (r[i].in > FRAG_MAX_LEN - prefix - 1) {
			r[i].in = FRAG_MAX_LEN - prefix - 1;
			clip = true;
		}
		room = FRAG_MAX_LEN - prefix - r[i].in;
		for (k = 0; k < FRAG_MAX_SAMPLES; k++) {
			if (r[i].out[k] > room) {
				r[i].out[k] = room;
				clip = clip || k == 0;
			}
		}
		*clipped += clip;
	}
}

/* --- what a run measures ----------------------------------------------------- */

/* Sums over the saturated steps of a run, token slots unless said. */
struct frag_acc {
	double stored;		/* token states held */
	double reserved;	/* slots held for future tokens of live sequences */
	double internal;	/* slots held that will never be used */
	double free;		/* slots not held by anyone */
	double seqs;		/* running sequences */
	double reqs;		/* running requests */
	double logical;		/* blocks the sequences' tables name */
	double physical;	/* distinct pages in use (pool counts) */
	long sat_steps, steps;
	long blocked_by_frag;	/* saturated steps whose head fit in the free total */
	long preemptions;
};

static void acc_print(const char *trace, const char *policy, int block,
		      int capacity, const struct frag_acc *a)
{
	double d = (double)capacity * (a->sat_steps ? a->sat_steps : 1) / 100.0;
	double st = a->sat_steps ? (double)a->sat_steps : 1.0;

	printf("frag trace=%s policy=%s block=%d token_pct=%.1f reserved_pct=%.1f "
	       "internal_pct=%.1f external_pct=%.1f concurrent=%.1f "
	       "blocked_by_frag_pct=%.1f preemptions=%ld sat_steps=%ld steps=%ld\n",
	       trace, policy, block, a->stored / d, a->reserved / d, a->internal / d,
	       a->free / d, a->seqs / st, 100.0 * (double)a->blocked_by_frag / st,
	       a->preemptions, a->sat_steps, a->steps);
}

/* --- contiguous reservation with first fit ------------------------------------ */

enum resv_policy { RESV_MAX, RESV_POW2, RESV_ORACLE };

static int resv_size(enum resv_policy pol, const struct req *r)
{
	int need = r->in + r->out[0], p = 1;

	if (pol == RESV_MAX)
		return FRAG_MAX_LEN;
	if (pol == RESV_ORACLE)
		return need;
	while (p < need)
		p <<= 1;
	return p;
}

/* First fit over [0, cap): the held ranges sorted by offset. O(ranges). */
struct ff {
	int n, cap;
	int *off, *len;	/* [cap] each, the caller's */
};

/* ff_alloc() - the lowest offset of a gap of len slots, held now; -1 when
 * no gap is large enough. */
static int ff_alloc(struct ff *f, int len)
{
	int i, end = 0;

	for (i = 0; i <= f->n; i++) {
		int next = i < f->n ? f->off[i] : f->cap;

		if (next - end >= len) {
			memmove(f->off + i + 1, f->off + i, (size_t)(f->n - i) * sizeof(int));
			memmove(f->len + i + 1, f->len + i, (size_t)(f->n - i) * sizeof(int));
			f->off[i] = end;
			f->len[i] = len;
			f->n++;
			return end;
		}
		if (i < f->n)
			end = f->off[i] + f->len[i];
	}
	return -1;
}

static void ff_free(struct ff *f, int off)
{
	int i;

	for (i = 0; i < f->n && f->off[i] != off; i++)
		;
	memmove(f->off + i, f->off + i + 1, (size_t)(f->n - i - 1) * sizeof(int));
	memmove(f->len + i, f->len + i + 1, (size_t)(f->n - i - 1) * sizeof(int));
	f->n--;
}

/* A running request of a contiguous policy. */
struct cseq {
	int req, off, resv, gen;
};

/* contig_run() - the serving loop with one reservation per request. */
static int contig_run(const struct req *r, int nreq, int cap,
		      enum resv_policy pol, struct frag_acc *a)
{
	struct ff f = { .cap = cap };
	struct cseq *act = calloc((size_t)cap, sizeof(*act));
	int nact = 0, next = 0, i, held;

	f.off = calloc((size_t)cap, sizeof(int));
	f.len = calloc((size_t)cap, sizeof(int));
	if (!act || !f.off || !f.len) {
		free(act), free(f.off), free(f.len);
		return -ENOMEM;
	}
	memset(a, 0, sizeof(*a));
	while (next < nreq || nact) {
		for (; next < nreq; next++) {
			int sz = resv_size(pol, &r[next]), off = ff_alloc(&f, sz);

			if (off < 0)
				break;
			act[nact++] = (struct cseq){ .req = next, .off = off, .resv = sz };
		}
		for (i = 0, held = 0; i < nact; i++) {
			act[i].gen++;
			held += act[i].resv;
		}
		if (next < nreq) {
			a->sat_steps++;
			a->free += cap - held;
			a->seqs += nact;
			a->reqs += nact;
			if (cap - held >= resv_size(pol, &r[next]))
				a->blocked_by_frag++;
			for (i = 0; i < nact; i++) {
				const struct req *q = &r[act[i].req];
				int t = q->in + act[i].gen;

				a->stored += t;
				a->reserved += q->in + q->out[0] - t;
				a->internal += act[i].resv - (q->in + q->out[0]);
			}
		}
		for (i = 0; i < nact;) {
			if (act[i].gen < r[act[i].req].out[0]) {
				i++;
				continue;
			}
			ff_free(&f, act[i].off);
			act[i] = act[--nact];
		}
		a->steps++;
	}
	free(act), free(f.off), free(f.len);
	return 0;
}

/* --- paging on the real pool --------------------------------------------------- */

/* One sequence (one sample of a request): its block table of pool pages,
 * the shared ones first, each holding one reference of this sequence. */
struct pseq {
	int prompt;		/* prompt tokens, shared system prompt included */
	int out, gen;
	int np;
	bool done;
	uint64_t pages[FRAG_MAX_LEN / 8 + 1];
};

struct pgroup {
	int req, n, live;
	struct pseq s[FRAG_MAX_SAMPLES];
};

/* One paged run: its pool namespace and how it shares. */
struct paged {
	struct pool *p;
	int ns, block, cap;
	int nsamples;		/* samples a request, 1 without parallel sampling */
	int prefix;		/* system prompt tokens before every input, 0 for none */
	bool share;		/* share full prompt blocks (and the system prompt) */
	uint64_t prefix_pages[FRAG_MAX_LEN / 8];
	int prefix_np;		/* full blocks of the system prompt, held by the run */
	char err[256];
};

static int ceil_div(int a, int b)
{
	return (a + b - 1) / b;
}

static void pseq_drop(struct paged *pg, struct pseq *s)
{
	int i;

	for (i = 0; i < s->np; i++)
		pool_unref(pg->p, s->pages[i]);
	s->np = 0;
}

/* pgroup_blocks() - the pages admitting a request of prompt tokens
 * takes: its prompt and first output token, full prompt blocks once when
 * shared (less the system prompt's, already held). */
static int pgroup_blocks(const struct paged *pg, int prompt)
{
	int full = prompt / pg->block, own = ceil_div(prompt + 1, pg->block);

	if (!pg->share)
		return pg->nsamples * own;
	return full - pg->prefix_np + pg->nsamples * (own - full);
}

/*
 * pgroup_admit() - allocate g's prompt pages: without sharing, each
 * sample its own; with sharing, the system prompt's full blocks (a
 * reference each) and the request's further full prompt blocks allocated
 * once and referenced by every sample, the partial last block each
 * sample's own. Returns 0, or -ENOSPC with nothing held.
 */
static int pgroup_admit(struct paged *pg, struct pgroup *g, const struct req *r)
{
	int prompt = pg->prefix + r->in, full = prompt / pg->block;
	int k, i, nsh = pg->share ? full : 0, rc;
	uint64_t sh[FRAG_MAX_LEN / 8];

	if (pool_available(pg->p, pg->ns) < (uint64_t)pgroup_blocks(pg, prompt))
		return -ENOSPC;
	if (pg->share) {
		memcpy(sh, pg->prefix_pages, (size_t)pg->prefix_np * sizeof(uint64_t));
		rc = pool_alloc(pg->p, pg->ns, (size_t)(full - pg->prefix_np),
				sh + pg->prefix_np, pg->err, sizeof(pg->err));
		if (rc)
			return rc;
		for (i = 0; i < pg->prefix_np; i++)	/* the run keeps its own */
			pool_ref(pg->p, sh[i]);
	}
	g->n = g->live = pg->nsamples;
	for (k = 0; k < g->n; k++) {
		struct pseq *s = &g->s[k];

		*s = (struct pseq){ .prompt = prompt, .out = r->out[k], .np = nsh };
		memcpy(s->pages, sh, (size_t)nsh * sizeof(uint64_t));
		for (i = 0; k > 0 && i < nsh; i++)	/* sample 0 has the first */
			pool_ref(pg->p, sh[i]);
		rc = pool_alloc(pg->p, pg->ns, (size_t)(ceil_div(prompt, pg->block) - nsh),
				s->pages + nsh, pg->err, sizeof(pg->err));
		if (rc)	/* cannot happen: pool_available() said there is room */
			return rc;
		s->np = ceil_div(prompt, pg->block);
	}
	return 0;
}

/* pseq_grow() - decode one token of s: a new page when the token starts
 * a block. Returns 0 or -ENOSPC (the token not taken). */
static int pseq_grow(struct paged *pg, struct pseq *s)
{
	int rc;

	if (s->prompt + s->gen + 1 > s->np * pg->block) {
		rc = pool_alloc(pg->p, pg->ns, 1, &s->pages[s->np], pg->err, sizeof(pg->err));
		if (rc)
			return rc;
		s->np++;
	}
	s->gen++;
	return 0;
}

/* paged_measure() - add the state after a saturated step to a. */
static void paged_measure(struct paged *pg, struct pgroup **act, int nact,
			  struct frag_acc *a)
{
	struct pool_counts c;
	int i, k;

	pool_counts(pg->p, pg->ns, &c);
	a->sat_steps++;
	a->reqs += nact;
	a->physical += (double)c.by_state[PAGE_PRIVATE];
	a->free += pg->cap - (double)c.by_state[PAGE_PRIVATE] * pg->block;
	for (i = 0; i < nact; i++) {
		for (k = 0; k < act[i]->n; k++) {
			struct pseq *s = &act[i]->s[k];
			int t = s->prompt + s->gen, slots = s->np * pg->block;
			int fut = slots < s->prompt + s->out ? slots : s->prompt + s->out;

			if (s->done)
				continue;
			a->seqs++;
			a->logical += s->np;
			a->stored += t;
			a->reserved += fut - t;
			a->internal += slots - fut;
		}
	}
}

/* paged_decode() - one token for every live sequence, oldest request
 * first; when the pool is out of pages, preempt the newest request (its
 * pages go, it waits again on stack). Returns the running count left. */
static int paged_decode(struct paged *pg, struct pgroup **act, int nact,
			struct pgroup **stack, int *nstack, struct frag_acc *a)
{
	int i, k;

	for (i = 0; i < nact; i++) {
		for (k = 0; k < act[i]->n; k++) {
			if (act[i]->s[k].done)
				continue;
			while (pseq_grow(pg, &act[i]->s[k]) == -ENOSPC) {
				struct pgroup *v = act[--nact];
				int j;

				for (j = 0; j < v->n; j++)
					pseq_drop(pg, &v->s[j]);
				stack[(*nstack)++] = v;
				a->preemptions++;
				if (v == act[i])
					return nact;
			}
		}
	}
	return nact;
}

/* paged_finish() - free the sequences that reached their output length
 * and drop the requests with none left, keeping the admission order. */
static int paged_finish(struct paged *pg, struct pgroup **act, int nact,
			struct pgroup **spare, int *nspare)
{
	int i, k, kept = 0;

	for (i = 0; i < nact; i++) {
		for (k = 0; k < act[i]->n; k++) {
			struct pseq *s = &act[i]->s[k];

			if (!s->done && s->gen >= s->out) {
				pseq_drop(pg, s);
				s->done = true;
				act[i]->live--;
			}
		}
		if (act[i]->live)
			act[kept++] = act[i];
		else
			spare[(*nspare)++] = act[i];
	}
	return kept;
}

/* paged_loop() - the serving loop of one paged run over r. Returns 0 or
 * -errno. The groups are preallocated: one per request at most running. */
static int paged_loop(struct paged *pg, const struct req *r, int nreq,
		      struct pgroup *groups, struct frag_acc *a)
{
	struct pgroup **act = calloc((size_t)nreq * 3, sizeof(*act));
	struct pgroup **stack = act + nreq, **spare = act + 2 * nreq;
	int nact = 0, nstack = 0, nspare = 0, next = 0, i, rc = 0;

	if (!act)
		return -ENOMEM;
	for (i = 0; i < nreq; i++)
		spare[nspare++] = &groups[i];
	while (next < nreq || nstack || nact) {
		for (;;) {	/* admit: the preempted ones first, oldest first */
			struct pgroup *g = nstack ? stack[nstack - 1] : next < nreq ? spare[nspare - 1] : NULL;
			int req = nstack ? g->req : next;

			if (!g || pgroup_admit(pg, g, &r[req]) == -ENOSPC)
				break;
			g->req = req;
			if (nstack)
				nstack--;
			else
				nspare--, next++;
			act[nact++] = g;
		}
		nact = paged_decode(pg, act, nact, stack, &nstack, a);
		if (next < nreq || nstack)
			paged_measure(pg, act, nact, a);
		nact = paged_finish(pg, act, nact, spare, &nspare);
		a->steps++;
	}
	free(act);
	return rc;
}

/*
 * paged_run() - one paged run on namespace ns of p: the system prompt's
 * pages for the run, the loop, then every page back and the namespace's
 * slabs returned. Returns 0, or -errno with a message on stderr.
 */
static int paged_run(struct paged *pg, const struct req *r, int nreq, struct frag_acc *a)
{
	struct pgroup *groups = calloc((size_t)nreq, sizeof(*groups));
	struct pool_counts c;
	int i, rc;

	if (!groups)
		return -ENOMEM;
	memset(a, 0, sizeof(*a));
	pg->prefix_np = pg->share ? pg->prefix / pg->block : 0;
	rc = pool_alloc(pg->p, pg->ns, (size_t)pg->prefix_np, pg->prefix_pages,
			pg->err, sizeof(pg->err));
	if (!rc)
		rc = paged_loop(pg, r, nreq, groups, a);
	for (i = 0; !rc && i < pg->prefix_np; i++)
		pool_unref(pg->p, pg->prefix_pages[i]);
	pool_counts(pg->p, pg->ns, &c);
	if (!rc && (c.by_state[PAGE_PRIVATE] || !pool_audit(pg->p)))
		rc = -EPROTO;
	if (!rc)
		rc = pool_ns_release(pg->p, pg->ns);
	if (rc)
		fprintf(stderr, "frag: paged run (block %d) failed: %s %s\n",
			pg->block, strerror(-rc), pg->err);
	free(groups);
	return rc;
}

/* --- the runs ---------------------------------------------------------------- */

struct frag_opts {
	uint64_t seed;
	int capacity, requests;
	double sigma_sharegpt, sigma_alpaca;
};

struct frag_ctx {
	struct frag_opts o;
	struct pool *p;
	int ns[FRAG_NBLOCKS];	/* a namespace per block size, page = block tokens */
};

static int frag_trace(struct frag_ctx *x, const struct trace_spec *t)
{
	static const struct { enum resv_policy pol; const char *name; } cp[] = {
		{ RESV_MAX, "orca-max" }, { RESV_POW2, "orca-pow2" }, { RESV_ORACLE, "orca-oracle" },
	};
	struct req *r = calloc((size_t)x->o.requests, sizeof(*r));
	struct frag_acc a;
	double sin = 0, sout = 0;
	int i, clipped, rc = 0;
	char name[32];

	if (!r)
		return -ENOMEM;
	trace_make(t, x->o.requests, x->o.seed, 0, r, &clipped);
	for (i = 0; i < x->o.requests; i++)
		sin += r[i].in, sout += r[i].out[0];
	printf("frag-trace name=%s mean_in_target=%.2f mean_out_target=%.2f sigma=%.2f "
	       "mean_in=%.2f mean_out=%.2f clipped=%d\n", t->name, t->mean_in, t->mean_out,
	       t->sigma, sin / x->o.requests, sout / x->o.requests, clipped);
	for (i = 0; !rc && i < 3; i++) {
		rc = contig_run(r, x->o.requests, x->o.capacity, cp[i].pol, &a);
		if (!rc)
			acc_print(t->name, cp[i].name, 0, x->o.capacity, &a);
	}
	for (i = 0; !rc && i < FRAG_NBLOCKS; i++) {
		struct paged pg = { .p = x->p, .ns = x->ns[i], .block = frag_blocks[i],
				    .cap = x->o.capacity, .nsamples = 1 };

		rc = paged_run(&pg, r, x->o.requests, &a);
		snprintf(name, sizeof(name), "kvpool-%d", frag_blocks[i]);
		if (!rc)
			acc_print(t->name, name, frag_blocks[i], x->o.capacity, &a);
	}
	free(r);
	return rc;
}

/* frag_share() - one sharing case at block 16: with sharing and without. */
static int frag_share(struct frag_ctx *x, const struct trace_spec *t, const char *kind,
		      int nsamples, int prefix)
{
	struct req *r = calloc((size_t)x->o.requests, sizeof(*r));
	struct paged pg = { .p = x->p, .ns = x->ns[1], .block = 16, .cap = x->o.capacity,
			    .nsamples = nsamples, .prefix = prefix };
	struct frag_acc on, off;
	int clipped, rc;

	if (!r)
		return -ENOMEM;
	trace_make(t, x->o.requests, x->o.seed, prefix, r, &clipped);
	pg.share = true;
	rc = paged_run(&pg, r, x->o.requests, &on);
	pg.share = false;
	if (!rc)
		rc = paged_run(&pg, r, x->o.requests, &off);
	if (!rc)
		printf("frag-share trace=%s kind=%s n=%d prefix=%d block=16 saved_pct=%.1f "
		       "seqs_share=%.1f seqs_noshare=%.1f reqs_share=%.1f reqs_noshare=%.1f "
		       "preempt_share=%ld preempt_noshare=%ld\n", t->name, kind, nsamples, prefix,
		       100.0 * (1.0 - on.physical / on.logical),
		       on.seqs / on.sat_steps, off.seqs / off.sat_steps,
		       on.reqs / on.sat_steps, off.reqs / off.sat_steps,
		       on.preemptions, off.preemptions);
	free(r);
	return rc;
}

static int frag_all(struct frag_ctx *x)
{
	const struct trace_spec tr[] = {
		{ "sharegpt", 161.31, 337.99, x->o.sigma_sharegpt },
		{ "alpaca", 19.31, 58.45, x->o.sigma_alpaca },
	};
	static const int nsamp[] = { 2, 4, 6 }, prefix[] = { 80, 341 };
	int i, j, rc = 0;

	for (i = 0; !rc && i < 2; i++)
		rc = frag_trace(x, &tr[i]);
	for (i = 0; !rc && i < 2; i++) {
		for (j = 0; !rc && j < 3; j++)
			rc = frag_share(x, &tr[i], "samples", nsamp[j], 0);
		for (j = 0; !rc && j < 2; j++)
			rc = frag_share(x, &tr[i], "prefix", 1, prefix[j]);
	}
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: frag [--capacity TOKENS] [--requests N] [--seed S]\n"
		"            [--sigma-sharegpt X] [--sigma-alpaca X]\n"
		"KV-cache memory utilization of contiguous reservation and of paging\n"
		"on the page pool, for ShareGPT- and Alpaca-like traces; key=value lines.\n"
		"  --capacity TOKENS  KV token slots, a multiple of 1024 (default 40960)\n"
		"  --requests N       requests per trace (default 10000)\n"
		"  --seed S           trace seed (default 42)\n"
		"  --sigma-sharegpt X sigma of log length, ShareGPT (default 1.0)\n"
		"  --sigma-alpaca X   sigma of log length, Alpaca (default 0.7)\n");
}

static int frag_parse(int argc, char **argv, struct frag_opts *o)
{
	static const struct option lo[] = {
		{ "capacity", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "sigma-sharegpt", required_argument, NULL, 'g' },
		{ "sigma-alpaca", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct frag_opts){ 42, 40960, 10000, 1.0, 0.7 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'c': o->capacity = atoi(optarg); break;
		case 'n': o->requests = atoi(optarg); break;
		case 's': o->seed = strtoull(optarg, NULL, 0); break;
		case 'g': o->sigma_sharegpt = atof(optarg); break;
		case 'a': o->sigma_alpaca = atof(optarg); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
	}
	if (o->capacity < 8192 || o->capacity % 1024 || o->requests < 1 ||
	    o->sigma_sharegpt <= 0 || o->sigma_alpaca <= 0) {
		fprintf(stderr, "frag: --capacity must be a multiple of 1024, at least "
			"8192 (got %d); --requests and the sigmas positive\n", o->capacity);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct frag_ctx x;
	struct backend be;
	char err[256] = "";
	int i, rc;

	if (frag_parse(argc, argv, &x.o))
		return 2;
	rc = backend_host_init(&be, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "frag: host backend: %s\n", err);
		return 1;
	}
	/* The pool holds exactly capacity token slots in every namespace. */
	rc = pool_init(&x.p, &be, (uint64_t)x.o.capacity * FRAG_TOKEN_BYTES, FRAG_SLAB_BYTES);
	for (i = 0; !rc && i < FRAG_NBLOCKS; i++) {
		x.ns[i] = pool_ns_add(x.p, (uint64_t)frag_blocks[i] * FRAG_TOKEN_BYTES);
		if (x.ns[i] < 0)
			rc = x.ns[i];
		else if (pool_ns_capacity(x.p, x.ns[i]) != (uint64_t)(x.o.capacity / frag_blocks[i]))
			rc = -EPROTO;
	}
	if (rc) {
		fprintf(stderr, "frag: pool of %d token slots: %s\n", x.o.capacity, strerror(-rc));
		return 1;
	}
	printf("frag-params capacity=%d requests=%d seed=%llu token_bytes=%u slab_bytes=%u "
	       "pool_bytes=%llu max_len=%d\n", x.o.capacity, x.o.requests,
	       (unsigned long long)x.o.seed, FRAG_TOKEN_BYTES, FRAG_SLAB_BYTES,
	       (unsigned long long)x.o.capacity * FRAG_TOKEN_BYTES, FRAG_MAX_LEN);
	rc = frag_all(&x);
	pool_free(x.p);
	be.ops->fini(&be);
	return rc ? 1 : 0;
}
