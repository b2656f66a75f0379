/* SPDX-License-Identifier: MIT */
/*
 * rpc.c - bench/rpc: round-trip latency and throughput of kvp_alloc() and
 * kvp_release() against a running kvpoold.
 *
 * The parent forks --clients processes. Each opens its own kvp_client,
 * runs --warmup untimed alloc+release cycles of --batch pages, waits on a
 * pipe barrier so that all start together, then times --iters cycles,
 * each call on its own with CLOCK_MONOTONIC. The per-call latencies go
 * into memory shared with the parent, which merges them after the
 * children exit and prints one line of key=value pairs (or, with --json,
 * one JSON object): p50/p99 of alloc, of release and of the pair, and
 * the rates of all clients together over the common wall time.
 *
 * This is a benchmark, not a test: `make bench` runs it through
 * bench/run-rpc.sh; `make check` never does.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "bench/opt.h"

#define RPC_MAX_CLIENTS 256

/* A namespace the benchmark joins; its page size is the only difference
 * between them that the daemon sees. */
struct rpc_geom {
	const char *name;	/* --geometry value */
	const char *ns;		/* namespace joined */
	kvp_geometry g;
};

static const struct rpc_geom rpc_geoms[] = {
	/* 2 MiB pages: a Llama-3-8B-like layout, 16 tokens a page */
	{ "large", "bench", { .layers = 32, .kv_heads = 8, .head_dim = 128,
			      .block_tokens = 16, .dtype = KVP_DTYPE_F16,
			      .model = "bench/model" } },
	/* 16 KiB pages: so that 64-page batches of 8 clients fit any pool */
	{ "small", "bench-small", { .layers = 2, .kv_heads = 2, .head_dim = 64,
				    .block_tokens = 16, .dtype = KVP_DTYPE_F16,
				    .model = "bench/model-small" } },
};

struct rpc_opts {
	const char *socket;	/* NULL: $KVPOOL_SOCKET or the default */
	const struct rpc_geom *geom;
	unsigned int clients;
	size_t batch;
	bool publish;		/* publish each page under a fresh key before release */
	size_t iters;
	size_t warmup;
	size_t timeout_ms;	/* kvp_set_timeout() of each client; 0: none */
	bool json;
};

/* What one client reports to the parent, in shared memory. */
struct rpc_slot {
	uint64_t start_ns;	/* after the barrier */
	uint64_t end_ns;	/* after the last timed call */
	uint64_t page_bytes;
	int rc;			/* 0, or the -errno that stopped the client */
	char err[256];		/* what failed, when rc < 0 */
};

/*
 * The shared region: slots[clients], then alloc_ns[clients][iters] and
 * release_ns[clients][iters], each call's latency in nanoseconds.
 */
struct rpc_shared {
	struct rpc_slot *slots;
	uint64_t *alloc_ns;
	uint64_t *release_ns;
	void *base;
	size_t bytes;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: rpc [OPTION]...\n"
		"Time kvp_alloc() and kvp_release() round trips against a running kvpoold.\n\n"
		"  -s, --socket=PATH    the daemon's socket (default: $KVPOOL_SOCKET, else %s)\n"
		"  -c, --clients=N      client processes, started together (default 1, at most %d)\n"
		"  -b, --batch=N        pages per kvp_alloc()/kvp_release() (default 1)\n"
		"  -n, --iters=N        timed alloc+release cycles per client (default 10000)\n"
		"  -w, --warmup=N       untimed cycles per client before the barrier\n"
		"                       (default iters/10, at least 100)\n"
		"  -p, --publish        publish the pages under fresh keys, with their\n"
		"                       tokens, between alloc and release (the release\n"
		"                       latency then counts both)\n"
		"  -t, --timeout=MS     each client's kvp_set_timeout() (default 0: none;\n"
		"                       for the cost of the limit's poll before each answer)\n"
		"  -g, --geometry=KIND  large (2 MiB pages, namespace 'bench') or small\n"
		"                       (16 KiB pages, namespace 'bench-small'; default large)\n"
		"  -j, --json           print one JSON object instead of one key=value line\n"
		"  -h, --help           show this help and exit\n\n"
		"Latencies are in microseconds; rates count all clients together over the\n"
		"time from the first client's start to the last one's end. One pair is an\n"
		"alloc and a release; pages/s counts pages leased and returned.\n",
		KVP_SOCKET_DEFAULT, RPC_MAX_CLIENTS);
}

static int parse_geom(const char *s, const struct rpc_geom **out)
{
	size_t i;

	for (i = 0; i < sizeof(rpc_geoms) / sizeof(rpc_geoms[0]); i++) {
		if (strcmp(s, rpc_geoms[i].name) == 0) {
			*out = &rpc_geoms[i];
			return 0;
		}
	}
	fprintf(stderr, "rpc: --geometry '%s': give large or small\n", s);
	return -EINVAL;
}

/* parse_opts() - fill *o from argv. Returns 0, 1 (help shown) or -EINVAL. */
static int parse_opts(int argc, char **argv, struct rpc_opts *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "batch", required_argument, NULL, 'b' },
		{ "iters", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "geometry", required_argument, NULL, 'g' },
		{ "timeout", required_argument, NULL, 't' },
		{ "publish", no_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	size_t v, warmup = SIZE_MAX;
	int ch, rc = 0;

	*o = (struct rpc_opts){ .geom = &rpc_geoms[0], .clients = 1, .batch = 1,
				.iters = 10000 };
	while (rc == 0 && (ch = getopt_long(argc, argv, "s:c:b:n:w:g:t:pjh", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			o->socket = optarg;
			break;
		case 'c':
			rc = bench_count("rpc", "clients", optarg, 1, RPC_MAX_CLIENTS, &v);
			o->clients = (unsigned int)v;
			break;
		case 'b':
			rc = bench_count("rpc", "batch", optarg, 1, 1u << 20, &o->batch);
			break;
		case 'n':
			rc = bench_count("rpc", "iters", optarg, 1, 100000000, &o->iters);
			break;
		case 'w':
			rc = bench_count("rpc", "warmup", optarg, 0, 100000000, &warmup);
			break;
		case 'g':
			rc = parse_geom(optarg, &o->geom);
			break;
		case 't':
			rc = bench_count("rpc", "timeout", optarg, 0, KVP_TIMEOUT_MAX_MS,
					 &o->timeout_ms);
			break;
		case 'j':
			o->json = true;
			break;
		case 'p':
			o->publish = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (rc == 0 && optind < argc) {
		fprintf(stderr, "rpc: unexpected argument '%s'; see rpc --help\n", argv[optind]);
		rc = -EINVAL;
	}
	o->warmup = warmup != SIZE_MAX ? warmup : (o->iters / 10 > 100 ? o->iters / 10 : 100);
	return rc;
}

/* shared_map() - the shared region for o's clients; 0 or -ENOMEM. Free it
 * with munmap(sh->base, sh->bytes). */
static int shared_map(const struct rpc_opts *o, struct rpc_shared *sh)
{
	size_t slots = o->clients * sizeof(struct rpc_slot);
	size_t lat = (size_t)o->clients * o->iters * sizeof(uint64_t);

	slots = (slots + 63) & ~(size_t)63;
	sh->bytes = slots + 2 * lat;
	sh->base = mmap(NULL, sh->bytes, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh->base == MAP_FAILED) {
		fprintf(stderr, "rpc: cannot map %zu bytes for the results: %s\n",
			sh->bytes, strerror(errno));
		return -ENOMEM;
	}
	sh->slots = sh->base;
	sh->alloc_ns = (uint64_t *)(void *)((char *)sh->base + slots);
	sh->release_ns = sh->alloc_ns + (size_t)o->clients * o->iters;
	return 0;
}

/* publish_fresh() - publish pages[0..n) as root blocks under keys no one
 * used (this process's pid and a count), each with block_tokens token ids;
 * the canonical pages are the pages themselves. */
static int publish_fresh(kvp_client *c, size_t n, const kvp_page *pages, kvp_page *canon)
{
	static uint64_t seq;
	uint32_t bt = kvp_block_tokens(c), pid = (uint32_t)getpid();
	uint32_t *tokens = malloc(n * bt * sizeof(*tokens) + 1);
	kvp_key *keys = calloc(n + 1, sizeof(*keys));
	size_t i, t;
	int rc = -ENOMEM;

	if (tokens && keys) {
		for (i = 0; i < n; i++, seq++) {
			memcpy(keys[i].b, &pid, sizeof(pid));
			memcpy(keys[i].b + 8, &seq, sizeof(seq));
			for (t = 0; t < bt; t++)
				tokens[i * bt + t] = (uint32_t)(seq + t);
		}
		rc = kvp_publish_tokens(c, NULL, NULL, pages, keys, tokens, n, KVP_PRIO_NORMAL,
					canon);
	}
	free(tokens);
	free(keys);
	return rc;
}

/* cycle() - one kvp_alloc() and one kvp_release() of n pages (with
 * --publish, a kvp_publish_tokens() of them in between); their latencies
 * into *a and *r (the publish counts in *r). Returns 0 or the failed
 * call's -errno, with what failed in slot->err. */
static int cycle(kvp_client *c, size_t n, kvp_page *pages, struct rpc_slot *slot,
		 uint64_t *a, uint64_t *r, bool publish)
{
	uint64_t t0, t1, t2;
	int rc;

	t0 = now_ns();
	rc = kvp_alloc(c, n, pages);
	t1 = now_ns();
	if (rc < 0) {
		snprintf(slot->err, sizeof(slot->err), "kvp_alloc of %zu pages: %s%s%s",
			 n, kvp_strerror(rc), kvp_last_error()[0] ? ": " : "", kvp_last_error());
		return rc;
	}
	if (publish) {
		kvp_page canon[64];

		rc = n <= 64 ? publish_fresh(c, n, pages, canon) : -EINVAL;
		if (rc < 0) {
			snprintf(slot->err, sizeof(slot->err), "kvp_publish_tokens of %zu pages "
				 "(at most 64): %s%s%s", n, kvp_strerror(rc),
				 kvp_last_error()[0] ? ": " : "", kvp_last_error());
			return rc;
		}
	}
	rc = kvp_release(c, pages, n);
	t2 = now_ns();
	if (rc < 0) {
		snprintf(slot->err, sizeof(slot->err), "kvp_release of %zu pages: %s%s%s",
			 n, kvp_strerror(rc), kvp_last_error()[0] ? ": " : "", kvp_last_error());
		return rc;
	}
	*a = t1 - t0;
	*r = t2 - t1;
	return 0;
}

/* client_timed() - the timed cycles of client id, after the barrier. */
static int client_timed(const struct rpc_opts *o, struct rpc_shared *sh,
			unsigned int id, kvp_client *c, kvp_page *pages)
{
	struct rpc_slot *slot = &sh->slots[id];
	uint64_t *a = sh->alloc_ns + (size_t)id * o->iters;
	uint64_t *r = sh->release_ns + (size_t)id * o->iters;
	size_t i;
	int rc = 0;

	slot->start_ns = now_ns();
	for (i = 0; i < o->iters && rc == 0; i++)
		rc = cycle(c, o->batch, pages, slot, &a[i], &r[i], o->publish);
	slot->end_ns = now_ns();
	return rc;
}

/*
 * client_main() - the body of client process id: connect, warm up, say
 * 'R' (ready) or 'F' (failed) on ready_fd, wait until go_fd reads EOF,
 * run the timed cycles. Returns the process's exit status.
 */
static int client_main(const struct rpc_opts *o, struct rpc_shared *sh,
		       unsigned int id, int ready_fd, int go_fd)
{
	struct rpc_slot *slot = &sh->slots[id];
	kvp_client *c = NULL;
	kvp_page *pages;
	uint64_t a, r;
	size_t i;
	char ch;
	int rc;

	pages = calloc(o->batch, sizeof(*pages));
	if (!pages) {
		rc = -ENOMEM;
		snprintf(slot->err, sizeof(slot->err), "no memory for %zu page handles", o->batch);
		goto out_signal;
	}
	rc = kvp_connect(o->socket, o->geom->ns, &o->geom->g, &c);
	if (rc < 0) {
		snprintf(slot->err, sizeof(slot->err), "kvp_connect to %s: %s%s%s",
			 o->socket ? o->socket : "the default socket", kvp_strerror(rc),
			 kvp_last_error()[0] ? ": " : "", kvp_last_error());
		goto out_signal;
	}
	slot->page_bytes = kvp_page_bytes(c);
	rc = kvp_set_timeout(c, (uint32_t)o->timeout_ms);
	for (i = 0; i < o->warmup && rc == 0; i++)
		rc = cycle(c, o->batch, pages, slot, &a, &r, o->publish);
out_signal:
	ch = rc == 0 ? 'R' : 'F';
	if (write(ready_fd, &ch, 1) != 1)
		rc = rc ? rc : -EPIPE;
	close(ready_fd);
	if (rc == 0 && read(go_fd, &ch, 1) != 0)	/* EOF: the parent let go */
		rc = -EPIPE;
	if (rc == 0)
		rc = client_timed(o, sh, id, c, pages);
	slot->rc = rc;
	kvp_close(c);
	free(pages);
	return rc == 0 ? 0 : 1;
}

/* run_clients() - fork the clients, hold them on the barrier until all
 * are ready, let them go and reap them. Returns 0, or -ECHILD when one
 * failed (its slot says why), or -errno of pipe(2)/fork(2). */
static int run_clients(const struct rpc_opts *o, struct rpc_shared *sh)
{
	pid_t pids[RPC_MAX_CLIENTS];
	int ready[2], go[2], status, rc = 0;
	unsigned int i, n = 0, got = 0;
	char ch;

	if (pipe(ready) < 0 || pipe(go) < 0) {
		fprintf(stderr, "rpc: pipe: %s\n", strerror(errno));
		return -errno;
	}
	fflush(NULL);
	for (n = 0; n < o->clients; n++) {
		pids[n] = fork();
		if (pids[n] < 0) {
			rc = -errno;
			fprintf(stderr, "rpc: fork of client %u: %s\n", n, strerror(errno));
			break;
		}
		if (pids[n] == 0) {
			close(ready[0]);
			close(go[1]);
			_exit(client_main(o, sh, n, ready[1], go[0]));
		}
	}
	close(ready[1]);
	close(go[0]);
	while (rc == 0 && got < n && read(ready[0], &ch, 1) == 1)
		got++;
	if (rc < 0) {		/* a fork failed: stop the ones that started */
		for (i = 0; i < n; i++)
			kill(pids[i], SIGTERM);
	}
	close(go[1]);		/* the barrier: every client reads EOF now */
	close(ready[0]);
	for (i = 0; i < n; i++) {
		if (waitpid(pids[i], &status, 0) < 0) {
			rc = -errno;
			continue;
		}
		if (WIFSIGNALED(status))
			fprintf(stderr, "rpc: client %u died of signal %d\n", i, WTERMSIG(status));
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			rc = rc ? rc : -ECHILD;
	}
	return rc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Latencies of one kind, sorted, in microseconds. */
struct rpc_pct {
	double p50, p99, mean, max;
};

/* pct_of() - sort v[0..n) in place and take its percentiles (nearest
 * rank). Note that this is O(n log n). */
static struct rpc_pct pct_of(uint64_t *v, size_t n)
{
	struct rpc_pct p;
	double sum = 0;
	size_t i;

	qsort(v, n, sizeof(*v), cmp_u64);
	for (i = 0; i < n; i++)
		sum += (double)v[i];
	p.p50 = v[(n * 50 + 99) / 100 - 1] / 1e3;
	p.p99 = v[(n * 99 + 99) / 100 - 1] / 1e3;
	p.mean = sum / (double)n / 1e3;
	p.max = v[n - 1] / 1e3;
	return p;
}

struct rpc_result {
	struct rpc_pct alloc, release, pair;
	double wall_s, pairs_per_s, calls_per_s, pages_per_s;
	uint64_t page_bytes;
};

/* merge() - the children's figures into *res. Returns 0 or -ENOMEM. The
 * latency arrays in sh are sorted afterwards (no longer per call). */
static int merge(const struct rpc_opts *o, struct rpc_shared *sh, struct rpc_result *res)
{
	size_t n = (size_t)o->clients * o->iters, i;
	uint64_t start = UINT64_MAX, end = 0, *pair;
	unsigned int c;

	pair = malloc(n * sizeof(*pair));
	if (!pair) {
		fprintf(stderr, "rpc: no memory to merge %zu latencies\n", n);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		pair[i] = sh->alloc_ns[i] + sh->release_ns[i];
	for (c = 0; c < o->clients; c++) {
		start = sh->slots[c].start_ns < start ? sh->slots[c].start_ns : start;
		end = sh->slots[c].end_ns > end ? sh->slots[c].end_ns : end;
	}
	res->alloc = pct_of(sh->alloc_ns, n);
	res->release = pct_of(sh->release_ns, n);
	res->pair = pct_of(pair, n);
	res->wall_s = (double)(end - start) / 1e9;
	res->pairs_per_s = (double)n / res->wall_s;
	res->calls_per_s = 2 * res->pairs_per_s;
	res->pages_per_s = res->pairs_per_s * (double)o->batch;
	res->page_bytes = sh->slots[0].page_bytes;
	free(pair);
	return 0;
}

static void print_line(const struct rpc_opts *o, const struct rpc_result *r)
{
	printf("rpc clients=%u batch=%zu geometry=%s page_bytes=%" PRIu64
	       " iters=%zu warmup=%zu"
	       " alloc_p50_us=%.2f alloc_p99_us=%.2f alloc_mean_us=%.2f alloc_max_us=%.1f"
	       " release_p50_us=%.2f release_p99_us=%.2f release_mean_us=%.2f release_max_us=%.1f"
	       " pair_p50_us=%.2f pair_p99_us=%.2f pair_mean_us=%.2f pair_max_us=%.1f"
	       " wall_s=%.3f pairs_per_s=%.0f calls_per_s=%.0f pages_per_s=%.0f\n",
	       o->clients, o->batch, o->geom->name, r->page_bytes, o->iters, o->warmup,
	       r->alloc.p50, r->alloc.p99, r->alloc.mean, r->alloc.max,
	       r->release.p50, r->release.p99, r->release.mean, r->release.max,
	       r->pair.p50, r->pair.p99, r->pair.mean, r->pair.max,
	       r->wall_s, r->pairs_per_s, r->calls_per_s, r->pages_per_s);
}

static void print_pct_json(const char *name, const struct rpc_pct *p, bool last)
{
	printf("  \"%s\": {\"p50_us\": %.2f, \"p99_us\": %.2f, \"mean_us\": %.2f, "
	       "\"max_us\": %.1f}%s\n", name, p->p50, p->p99, p->mean, p->max,
	       last ? "" : ",");
}

static void print_json(const struct rpc_opts *o, const struct rpc_result *r)
{
	printf("{\n  \"clients\": %u, \"batch\": %zu, \"geometry\": \"%s\", "
	       "\"page_bytes\": %" PRIu64 ", \"iters\": %zu, \"warmup\": %zu,\n",
	       o->clients, o->batch, o->geom->name, r->page_bytes, o->iters, o->warmup);
	printf("  \"wall_s\": %.3f, \"pairs_per_s\": %.0f, \"calls_per_s\": %.0f, "
	       "\"pages_per_s\": %.0f,\n",
	       r->wall_s, r->pairs_per_s, r->calls_per_s, r->pages_per_s);
	print_pct_json("alloc", &r->alloc, false);
	print_pct_json("release", &r->release, false);
	print_pct_json("pair", &r->pair, true);
	printf("}\n");
}

int main(int argc, char **argv)
{
	struct rpc_opts o;
	struct rpc_shared sh;
	struct rpc_result res;
	unsigned int i;
	int rc;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (shared_map(&o, &sh) < 0)
		return 1;
	rc = run_clients(&o, &sh);
	for (i = 0; i < o.clients; i++)
		if (sh.slots[i].rc < 0)
			fprintf(stderr, "rpc: client %u: %s\n", i, sh.slots[i].err);
	if (rc == 0)
		rc = merge(&o, &sh, &res);
	if (rc == 0) {
		if (o.json)
			print_json(&o, &res);
		else
			print_line(&o, &res);
	}
	munmap(sh.base, sh.bytes);
	return rc == 0 ? 0 : 1;
}
