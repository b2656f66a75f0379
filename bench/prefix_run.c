/* SPDX-License-Identifier: MIT */
/*
 * prefix_run.c - bench/prefix's runs of the workload: the system prompts
 * and request stream drawn from the seed, the client processes that
 * serve the requests as model servers do (with sharing or without), and
 * the parent that starts them together, samples the daemon's page counts
 * while they run and merges what they report through shared memory.
 * See prefix.c for the whole benchmark.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/prefix.h"

const kvp_geometry pfx_geom = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = PFX_BT,
	.dtype = KVP_DTYPE_F16, .model = "bench/prefix-model",
};

/* The shared region: this header, slots[clients], then for each phase
 * ns[phase][clients][requests]. */
struct pfx_shared {
	_Atomic uint64_t held;	/* pages all clients hold, counted as if unshared */
	_Atomic uint64_t peak;	/* its maximum */
	struct pfx_slot *slots;
	uint64_t *ns[PFX_PHASES];
	size_t bytes;
};

/* One client's state while it serves requests. */
struct pfx_client {
	const struct pfx_opts *o;
	const struct pfx_work *w;
	struct pfx_shared *sh;
	struct pfx_slot *slot;
	kvp_client *c;
	bool share;
	uint64_t rng;
	uint64_t t_keys, t_fill;	/* of the request being set up */
	size_t page_bytes, bt;
	uint32_t *tokens;		/* the request being set up */
	kvp_key *keys;
	kvp_page *canon, *dups;
	kvp_page *held[PFX_MAX_WINDOW];	/* pages of the requests in flight */
	size_t nheld[PFX_MAX_WINDOW];
};

uint64_t pfx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- Random numbers: SplitMix64, and the distributions built on it ------ */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* rng_unit() - uniform in [0, 1). */
static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

/* rng_lognormal() - log-normal with the given mean and sigma of its log
 * (Box-Muller for the normal). */
static double rng_lognormal(uint64_t *s, double mean, double sigma)
{
	double u1 = 1.0 - rng_unit(s), u2 = rng_unit(s);
	double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);

	return exp(log(mean) - sigma * sigma / 2.0 + sigma * z);
}

void pfx_rng_tokens(uint64_t *s, uint32_t *t, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		t[i] = (uint32_t)(rng_next(s) % PFX_VOCAB);
}

int pfx_work_make(const struct pfx_opts *o, struct pfx_work *w)
{
	uint64_t s = o->seed;
	double sum = 0, acc = 0;
	size_t i, longest = 0;

	for (i = 0; i < o->prompts; i++) {
		w->len[i] = o->prompt_min +
			    (size_t)(rng_next(&s) % (o->prompt_max - o->prompt_min + 1));
		w->prompt[i] = malloc(w->len[i] * sizeof(uint32_t));
		if (!w->prompt[i])
			return -ENOMEM;
		pfx_rng_tokens(&s, w->prompt[i], w->len[i]);
		longest = w->len[i] > longest ? w->len[i] : longest;
		sum += pow((double)(i + 1), -o->zipf);
	}
	for (i = 0; i < o->prompts; i++) {
		acc += pow((double)(i + 1), -o->zipf);
		w->cdf[i] = acc / sum;
	}
	w->cdf[o->prompts - 1] = 1.0;
	w->max_tokens = longest + PFX_SUFFIX_MAX;
	return 0;
}

void pfx_work_free(struct pfx_work *w)
{
	size_t i;

	for (i = 0; i < PFX_MAX_PROMPTS; i++)
		free(w->prompt[i]);
}

/* work_next() - the next request of a client into tokens[]; its length.
 * *suffix gets the suffix's length, *prompt the system prompt's index. */
static size_t work_next(const struct pfx_opts *o, const struct pfx_work *w,
			uint64_t *rng, uint32_t *tokens, size_t *suffix, size_t *prompt)
{
	double u = rng_unit(rng), len;
	size_t p = 0;

	while (p + 1 < o->prompts && u >= w->cdf[p])
		p++;
	len = rng_lognormal(rng, o->suffix_mean, o->suffix_sigma);
	*suffix = len < 1 ? 1 : len > PFX_SUFFIX_MAX ? PFX_SUFFIX_MAX : (size_t)len;
	memcpy(tokens, w->prompt[p], w->len[p] * sizeof(uint32_t));
	pfx_rng_tokens(rng, tokens + w->len[p], *suffix);
	*prompt = p;
	return w->len[p] + *suffix;
}

/* --- One client process --------------------------------------------------- */

/* fail() - note what failed in the client's slot; returns rc. */
static int fail(struct pfx_client *k, int rc, const char *fmt, ...)
{
	const char *why = kvp_last_error();
	char what[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(k->slot->err, sizeof(k->slot->err), "%s: %s%s%s", what,
		 kvp_strerror(rc), why[0] ? ": " : "", why);
	return rc;
}

/* fill() - write into pages[0..n) as prefill would. Returns 0 or -ESTALE. */
static int fill(struct pfx_client *k, const kvp_page *pages, size_t n)
{
	uint64_t t0 = pfx_now_ns();
	size_t i;

	for (i = 0; i < n; i++) {
		void *p = kvp_page_ptr(k->c, pages[i]);

		if (!p)
			return fail(k, -ESTALE, "kvp_page_ptr of a page just leased");
		memset(p, (int)(i & 0xff) | 1, k->page_bytes);
	}
	k->t_fill = pfx_now_ns() - t0;
	return 0;
}

/*
 * setup_shared() - lease the pages of a prompt of ntok tokens with
 * sharing into pages[]: acquire, alloc the rest, fill, publish, trade
 * duplicates for the canonical pages. Returns the page count or -errno.
 */
static int setup_shared(struct pfx_client *k, size_t ntok, kvp_page *pages)
{
	size_t nblk, hits, miss, tail = ntok % k->bt ? 1 : 0, ndup = 0, i;
	uint64_t t0 = pfx_now_ns();
	int rc;

	rc = kvp_block_keys(k->c, NULL, k->tokens, ntok, NULL, 0, k->keys);
	if (rc < 0)
		return fail(k, rc, "kvp_block_keys of %zu tokens", ntok);
	k->t_keys = pfx_now_ns() - t0;
	nblk = (size_t)rc;
	rc = kvp_acquire(k->c, NULL, k->keys, nblk, NULL, 0, pages, NULL);
	if (rc < 0)
		return fail(k, rc, "kvp_acquire of %zu keys", nblk);
	hits = (size_t)rc;
	miss = nblk - hits;
	rc = kvp_alloc(k->c, miss + tail, pages + hits);
	if (rc < 0)
		return fail(k, rc, "kvp_alloc of %zu pages", miss + tail);
	rc = fill(k, pages + hits, miss + tail);
	if (rc < 0 || miss == 0)
		goto out;
	rc = kvp_publish(k->c, hits ? &k->keys[hits - 1] : NULL, pages + hits,
			 k->keys + hits, miss, KVP_PRIO_NORMAL, k->canon);
	if (rc < 0)
		return fail(k, rc, "kvp_publish of %zu pages", miss);
	for (i = 0; i < miss; i++) {
		if (k->canon[i] == pages[hits + i])
			continue;
		k->dups[ndup++] = pages[hits + i];
		pages[hits + i] = k->canon[i];
	}
	if (ndup && (rc = kvp_release(k->c, k->dups, ndup)) < 0)
		return fail(k, rc, "kvp_release of %zu duplicates", ndup);
out:
	k->slot->blocks += nblk;
	k->slot->hits += hits;
	k->slot->allocated += miss + tail;
	k->slot->published += miss - ndup;
	k->slot->dups += ndup;
	return rc < 0 ? rc : (int)(nblk + tail);
}

/* setup_private() - every page of the prompt from kvp_alloc(), filled.
 * Returns the page count or -errno. */
static int setup_private(struct pfx_client *k, size_t ntok, kvp_page *pages)
{
	size_t n = (ntok + k->bt - 1) / k->bt;
	int rc;

	rc = kvp_alloc(k->c, n, pages);
	if (rc < 0)
		return fail(k, rc, "kvp_alloc of %zu pages", n);
	rc = fill(k, pages, n);
	k->slot->blocks += ntok / k->bt;
	k->slot->allocated += n;
	return rc < 0 ? rc : (int)n;
}

/* drop() - release the pages of window entry i (if any). */
static int drop(struct pfx_client *k, size_t i)
{
	int rc;

	if (!k->nheld[i])
		return 0;
	rc = kvp_release(k->c, k->held[i], k->nheld[i]);
	if (rc < 0)
		return fail(k, rc, "kvp_release of %zu pages", k->nheld[i]);
	atomic_fetch_sub(&k->sh->held, k->nheld[i]);
	k->nheld[i] = 0;
	return 0;
}

/* note_held() - n more pages held; keep the peak. */
static void note_held(struct pfx_shared *sh, uint64_t n)
{
	uint64_t now = atomic_fetch_add(&sh->held, n) + n;
	uint64_t peak = atomic_load(&sh->peak);

	while (now > peak && !atomic_compare_exchange_weak(&sh->peak, &peak, now))
		;
}

/* client_serve() - the requests; request r's time in each phase into
 * the shared ns[phase][id * requests + r]. */
static int client_serve(struct pfx_client *k, size_t id)
{
	size_t r, ntok, suffix, prompt, win, at;
	uint64_t t;
	int rc = 0;

	k->slot->start_ns = pfx_now_ns();
	for (r = 0; r < k->o->requests && rc >= 0; r++) {
		win = r % k->o->window;
		rc = drop(k, win);	/* the oldest request's decode is over */
		if (rc < 0)
			break;
		ntok = work_next(k->o, k->w, &k->rng, k->tokens, &suffix, &prompt);
		/* counted before the leases: never below what the daemon has */
		k->nheld[win] = (ntok + k->bt - 1) / k->bt;
		note_held(k->sh, k->nheld[win]);
		k->t_keys = k->t_fill = 0;
		t = pfx_now_ns();
		rc = k->share ? setup_shared(k, ntok, k->held[win]) :
				setup_private(k, ntok, k->held[win]);
		t = pfx_now_ns() - t;
		if (rc < 0)
			break;
		at = id * k->o->requests + r;
		k->sh->ns[PFX_KEYS][at] = k->t_keys;
		k->sh->ns[PFX_FILL][at] = k->t_fill;
		k->sh->ns[PFX_CALLS][at] = t - k->t_keys - k->t_fill;
		k->slot->tokens += ntok;
		k->slot->suffix_tokens += suffix;
		k->slot->picks[prompt]++;
	}
	for (win = 0; win < k->o->window && rc >= 0; win++)
		rc = drop(k, win);
	k->slot->end_ns = pfx_now_ns();
	return rc < 0 ? rc : 0;
}

/* client_alloc() - the client's buffers; 0 or -ENOMEM. */
static int client_alloc(struct pfx_client *k)
{
	size_t maxblk = k->w->max_tokens / k->bt + 1, i;

	k->tokens = malloc(k->w->max_tokens * sizeof(*k->tokens));
	k->keys = malloc(maxblk * sizeof(*k->keys));
	k->canon = malloc(maxblk * sizeof(*k->canon));
	k->dups = malloc(maxblk * sizeof(*k->dups));
	if (!k->tokens || !k->keys || !k->canon || !k->dups)
		return -ENOMEM;
	for (i = 0; i < k->o->window; i++) {
		k->held[i] = malloc(maxblk * sizeof(kvp_page));
		if (!k->held[i])
			return -ENOMEM;
	}
	return 0;
}

/*
 * client_main() - the body of client process id: connect, say 'R' (ready)
 * or 'F' (failed) on ready_fd, wait until go_fd reads EOF, serve. The
 * process exits afterwards; its memory goes with it. Returns its status.
 */
static int client_main(const struct pfx_opts *o, const struct pfx_work *w,
		       struct pfx_shared *sh, bool share, size_t id,
		       int ready_fd, int go_fd)
{
	struct pfx_client k = { .o = o, .w = w, .sh = sh, .slot = &sh->slots[id],
				.share = share, .bt = pfx_geom.block_tokens,
				.rng = o->seed ^ (0x5bd1e995u * (id + 1)) };
	const char *ns = share ? PFX_NS_SHARE : PFX_NS_NOSHARE;
	char ch;
	int rc;

	rc = client_alloc(&k);
	if (rc < 0) {
		snprintf(k.slot->err, sizeof(k.slot->err), "no memory for the buffers");
		goto out_signal;
	}
	rc = kvp_connect(o->socket, ns, &pfx_geom, &k.c);
	if (rc < 0) {
		fail(&k, rc, "kvp_connect to %s, namespace %s",
		     o->socket ? o->socket : "the default socket", ns);
		goto out_signal;
	}
	k.page_bytes = kvp_page_bytes(k.c);
	k.slot->page_bytes = k.page_bytes;
out_signal:
	ch = rc == 0 ? 'R' : 'F';
	if (write(ready_fd, &ch, 1) != 1)
		rc = rc ? rc : -EPIPE;
	close(ready_fd);
	if (rc == 0 && read(go_fd, &ch, 1) != 0)	/* EOF: the parent let go */
		rc = -EPIPE;
	if (rc == 0)
		rc = client_serve(&k, id);
	k.slot->rc = rc;
	kvp_close(k.c);
	return rc == 0 ? 0 : 1;
}

/* --- The parent: clients, sampling, merging ------------------------------ */

/* One sample of the daemon's counts for a namespace. */
struct pfx_sample {
	uint64_t private, shared, cached;
	uint32_t key_scheme;
	struct kvp_wire_prefix_stats prefix;
};

/* sample() - the counts of namespace ns now (zeros when it does not exist
 * yet). Returns 0 or the -errno of kvp_stats(). */
static int sample(kvp_client *insp, const char *ns, struct pfx_sample *out)
{
	kvp_ns_stats_t recs[PFX_MAX_NS];
	kvp_stats_t st;
	int n, i;

	memset(out, 0, sizeof(*out));
	n = kvp_stats(insp, &st, recs, PFX_MAX_NS);
	if (n < 0)
		return n;
	for (i = 0; i < n && i < PFX_MAX_NS; i++) {
		if (strncmp(recs[i].name, ns, sizeof(recs[i].name)) != 0)
			continue;
		out->private = recs[i].pages_private;
		out->shared = recs[i].pages_shared;
		out->cached = recs[i].pages_cached;
		out->key_scheme = recs[i].key_scheme;
		out->prefix = recs[i].prefix;
	}
	return 0;
}

/* prefix_delta() - d = the counters of b since a, the gauge pinned as in b. */
static void prefix_delta(struct kvp_wire_prefix_stats *d,
			 const struct kvp_wire_prefix_stats *b,
			 const struct kvp_wire_prefix_stats *a)
{
	d->acquires = b->acquires - a->acquires;
	d->hits = b->hits - a->hits;
	d->misses = b->misses - a->misses;
	d->hit_tokens = b->hit_tokens - a->hit_tokens;
	d->publishes = b->publishes - a->publishes;
	d->dedups = b->dedups - a->dedups;
	d->cows = b->cows - a->cows;
	d->evictions = b->evictions - a->evictions;
	d->pinned = b->pinned;
}

/* watch() - sample ns every poll_us until done_fd reads EOF (every client
 * has exited), keeping the peak in *res. Returns 0 or -errno. */
static int watch(const struct pfx_opts *o, kvp_client *insp, const char *ns,
		 int done_fd, struct pfx_result *res)
{
	struct timespec gap = { .tv_sec = (time_t)(o->poll_us / 1000000),
				.tv_nsec = (long)(o->poll_us % 1000000) * 1000 };
	struct pollfd pfd = { .fd = done_fd, .events = POLLIN };
	struct pfx_sample s;
	int rc;

	for (;;) {
		rc = sample(insp, ns, &s);
		if (rc < 0)
			return rc;
		res->samples++;
		if (s.private + s.shared > res->peak) {
			res->peak = s.private + s.shared;
			res->peak_private = s.private;
			res->peak_shared = s.shared;
		}
		res->peak_cached = s.cached > res->peak_cached ? s.cached : res->peak_cached;
		rc = ppoll(&pfd, 1, &gap, NULL);
		if (rc < 0 && errno != EINTR)
			return -errno;
		if (rc > 0)
			return 0;
	}
}

/* reap() - wait for n clients; -ECHILD when one failed. */
static int reap(const pid_t *pids, size_t n)
{
	int status, rc = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (waitpid(pids[i], &status, 0) < 0) {
			rc = -errno;
			continue;
		}
		if (WIFSIGNALED(status))
			fprintf(stderr, "prefix: client %zu died of signal %d\n", i,
				WTERMSIG(status));
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			rc = rc ? rc : -ECHILD;
	}
	return rc;
}

/* spawn() - fork o->clients clients; pids[] gets them. The pipes' parent
 * ends stay open in fds[0] (ready, read), fds[1] (go, write), fds[2]
 * (done, read). Returns how many started; *rc is 0 or -errno. */
static size_t spawn(const struct pfx_opts *o, const struct pfx_work *w,
		    struct pfx_shared *sh, bool share, pid_t *pids, int fds[3], int *rc)
{
	int ready[2], go[2], done[2];
	size_t n;

	*rc = 0;
	if (pipe(ready) < 0 || pipe(go) < 0 || pipe(done) < 0) {
		*rc = -errno;
		fprintf(stderr, "prefix: pipe: %s\n", strerror(errno));
		return 0;
	}
	fflush(NULL);
	for (n = 0; n < o->clients; n++) {
		pids[n] = fork();
		if (pids[n] < 0) {
			*rc = -errno;
			fprintf(stderr, "prefix: fork of client %zu: %s\n", n, strerror(errno));
			break;
		}
		if (pids[n] == 0) {	/* done[1] stays open until the client exits */
			close(ready[0]);
			close(go[1]);
			close(done[0]);
			_exit(client_main(o, w, sh, share, n, ready[1], go[0]));
		}
	}
	close(ready[1]);
	close(go[0]);
	close(done[1]);
	fds[0] = ready[0];
	fds[1] = go[1];
	fds[2] = done[0];
	return n;
}

/*
 * run_clients() - one run: the clients in namespace ns, started together,
 * watched until they exit. Fills the sampled part of *res. Returns 0, or
 * -ECHILD when a client failed (its slot says why), or another -errno.
 */
static int run_clients(const struct pfx_opts *o, const struct pfx_work *w,
		       struct pfx_shared *sh, bool share, struct pfx_result *res)
{
	const char *ns = share ? PFX_NS_SHARE : PFX_NS_NOSHARE;
	pid_t pids[PFX_MAX_CLIENTS];
	struct pfx_sample before, after;
	kvp_client *insp = NULL;
	size_t n, got = 0, i;
	int fds[3], rc, wrc;
	char ch;

	n = spawn(o, w, sh, share, pids, fds, &rc);
	if (n == 0)
		return rc;
	while (rc == 0 && got < n && read(fds[0], &ch, 1) == 1 && ch == 'R')
		got++;
	if (rc == 0 && got < n)
		rc = -ECHILD;
	if (rc == 0 && (rc = kvp_connect(o->socket, NULL, NULL, &insp)) < 0)
		fprintf(stderr, "prefix: inspection session: %s\n", kvp_strerror(rc));
	if (rc == 0 && (rc = sample(insp, ns, &before)) < 0)
		fprintf(stderr, "prefix: kvp_stats: %s\n", kvp_strerror(rc));
	if (rc < 0) {		/* stop the ones that started */
		for (i = 0; i < n; i++)
			kill(pids[i], SIGTERM);
	}
	close(fds[1]);		/* the barrier: every client reads EOF now */
	close(fds[0]);
	if (rc == 0 && (rc = watch(o, insp, ns, fds[2], res)) < 0)
		fprintf(stderr, "prefix: sampling the daemon: %s\n", kvp_strerror(rc));
	close(fds[2]);
	wrc = reap(pids, n);
	rc = rc ? rc : wrc;
	if (rc == 0 && (rc = sample(insp, ns, &after)) == 0) {
		res->end_cached = after.cached;
		res->key_scheme = after.key_scheme;
		prefix_delta(&res->d, &after.prefix, &before.prefix);
	}
	kvp_close(insp);
	return rc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct pfx_pct pfx_pct_of(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (struct pfx_pct){ .p50 = v[(n * 50 + 99) / 100 - 1] / 1e3,
				 .p99 = v[(n * 99 + 99) / 100 - 1] / 1e3 };
}

/* merge() - the clients' counters and latencies into *res; the ceiling
 * of hits from the prompts' picks. */
static void merge(const struct pfx_opts *o, const struct pfx_work *w,
		  struct pfx_shared *sh, struct pfx_result *res)
{
	size_t n = o->clients * o->requests, i, p;
	uint64_t start = UINT64_MAX, end = 0, *total = sh->ns[PFX_PHASES - 1] + n;

	for (i = 0; i < o->clients; i++) {
		const struct pfx_slot *s = &sh->slots[i];

		start = s->start_ns < start ? s->start_ns : start;
		end = s->end_ns > end ? s->end_ns : end;
		res->sum.tokens += s->tokens;
		res->sum.suffix_tokens += s->suffix_tokens;
		res->sum.blocks += s->blocks;
		res->sum.hits += s->hits;
		res->sum.allocated += s->allocated;
		res->sum.published += s->published;
		res->sum.dups += s->dups;
		for (p = 0; p < o->prompts; p++)
			res->sum.picks[p] += s->picks[p];
	}
	for (p = 0; p < o->prompts; p++)
		if (res->sum.picks[p])
			res->ceiling += (res->sum.picks[p] - 1) * (w->len[p] / PFX_BT);
	res->wall_s = (double)(end - start) / 1e9;
	res->page_bytes = sh->slots[0].page_bytes;
	for (i = 0; i < n; i++)	/* the whole setup, into the spare array */
		total[i] = sh->ns[PFX_KEYS][i] + sh->ns[PFX_CALLS][i] + sh->ns[PFX_FILL][i];
	for (p = 0; p < PFX_PHASES; p++)
		res->phase[p] = pfx_pct_of(sh->ns[p], n);
	res->req = pfx_pct_of(total, n);
	res->demand_peak = atomic_load(&sh->peak);
}

int pfx_run_mode(const struct pfx_opts *o, const struct pfx_work *w, bool share,
		 struct pfx_result *res)
{
	size_t slots = (o->clients * sizeof(struct pfx_slot) + 63) & ~(size_t)63;
	size_t hdr = (sizeof(struct pfx_shared) + 63) & ~(size_t)63, i;
	size_t n = o->clients * o->requests;
	struct pfx_shared *sh;
	void *base;
	int rc;

	memset(res, 0, sizeof(*res));
	/* one more array after the phases: merge() sums them into it */
	i = hdr + slots + (PFX_PHASES + 1) * n * sizeof(uint64_t);
	base = mmap(NULL, i, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		fprintf(stderr, "prefix: cannot map %zu bytes for the results: %s\n",
			i, strerror(errno));
		return -ENOMEM;
	}
	sh = base;
	sh->bytes = i;
	sh->slots = (struct pfx_slot *)(void *)((char *)base + hdr);
	for (i = 0; i < PFX_PHASES; i++)
		sh->ns[i] = (uint64_t *)(void *)((char *)base + hdr + slots) + i * n;
	rc = run_clients(o, w, sh, share, res);
	for (i = 0; i < o->clients; i++)
		if (sh->slots[i].rc < 0)
			fprintf(stderr, "prefix: client %zu: %s\n", i, sh->slots[i].err);
	if (rc == 0)
		merge(o, w, sh, res);
	munmap(base, sh->bytes);
	return rc;
}
