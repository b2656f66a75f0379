/* SPDX-License-Identifier: MIT */
/*
 * list.c - bench/list: what the admin listings cost the daemon's other
 * clients. It fills a namespace with --pages cached pages, joins --idle
 * clients to it (each holding --leases of them), and times --samples
 * STATS round trips of one more client twice: with nobody else asking
 * (the reference), then while --listers processes ask LIST_PAGES and
 * LIST_PREFIXES of everything back to back. The daemon serves one
 * request of a connection at a time from one thread, so each STATS waits
 * behind the listings in progress: the ratio of the two medians is what
 * a listing costs everyone else.
 *
 * One line of key=value pairs: the medians and 99th percentiles in
 * microseconds, the listings' own medians, and the ratios.
 *
 * This is a benchmark, not a test: bench/run-list.sh runs it.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "bench/opt.h"

#define LIST_NS "bench-list"
#define LIST_MAX_LISTERS 64
#define LIST_MAX_SAMPLES 100000

/* 16 KiB pages. */
static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "bench/list",
};

struct list_opts {
	const char *socket;
	size_t pages, idle, leases, listers, samples;
};

/* What the listers report: their listings' latencies, in shared memory. */
struct list_shared {
	uint64_t n[LIST_MAX_LISTERS];
	uint64_t ns[LIST_MAX_LISTERS][4096];	/* the first 4096 of each */
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: list [OPTION]...\n"
		"Time one client's STATS round trips while others ask for listings.\n\n"
		"  -s, --socket=PATH  the daemon's socket (default: $KVPOOL_SOCKET, else %s)\n"
		"  -p, --pages=N      cached pages in the namespace (default 8000)\n"
		"  -i, --idle=N       clients joined to it, doing nothing (default 250)\n"
		"  -l, --leases=N     pages each idle client holds (default 4)\n"
		"  -L, --listers=N    processes asking LIST_PAGES and LIST_PREFIXES (default 4)\n"
		"  -n, --samples=N    STATS round trips timed each way (default 300)\n"
		"  -h, --help         show this help and exit\n\n"
		"The daemon needs room: --pool-size of pages x 16 KiB and more, and\n"
		"--max-clients above idle + listers + 2.\n", KVP_SOCKET_DEFAULT);
}

static int parse_opts(int argc, char **argv, struct list_opts *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "pages", required_argument, NULL, 'p' },
		{ "idle", required_argument, NULL, 'i' },
		{ "leases", required_argument, NULL, 'l' },
		{ "listers", required_argument, NULL, 'L' },
		{ "samples", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc = 0;

	*o = (struct list_opts){ .pages = 8000, .idle = 250, .leases = 4, .listers = 4,
				 .samples = 300 };
	while ((c = getopt_long(argc, argv, "s:p:i:l:L:n:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket = optarg;
			break;
		case 'p':
			rc = bench_count("list", "--pages", optarg, 1, 1u << 22, &o->pages);
			break;
		case 'i':
			rc = bench_count("list", "--idle", optarg, 0, 65536, &o->idle);
			break;
		case 'l':
			rc = bench_count("list", "--leases", optarg, 0, 4096, &o->leases);
			break;
		case 'L':
			rc = bench_count("list", "--listers", optarg, 0, LIST_MAX_LISTERS,
					 &o->listers);
			break;
		case 'n':
			rc = bench_count("list", "--samples", optarg, 1, LIST_MAX_SAMPLES,
					 &o->samples);
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (rc < 0)
			return rc;
	}
	if (o->leases > o->pages) {
		fprintf(stderr, "list: --leases %zu is more than --pages %zu\n", o->leases,
			o->pages);
		return -EINVAL;
	}
	return 0;
}

/* key_of() - the content key of page i: distinct, nothing more. */
static void key_of(size_t i, kvp_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->b, &i, sizeof(i));
	k->b[31] = 0x5a;
}

/* fill() - publish o->pages pages and release them: all cached. */
static int fill(const struct list_opts *o)
{
	enum { BATCH = 1000 };
	kvp_page pages[BATCH];
	kvp_key keys[BATCH];
	kvp_client *c;
	size_t done, n, i;
	int rc;

	rc = kvp_connect(o->socket, LIST_NS, &geo, &c);
	if (rc < 0)
		return rc;
	for (done = 0; done < o->pages && rc == 0; done += n) {
		n = o->pages - done < BATCH ? o->pages - done : BATCH;
		for (i = 0; i < n; i++)
			key_of(done + i, &keys[i]);
		rc = kvp_alloc(c, n, pages);
		if (rc == 0)
			rc = kvp_publish(c, NULL, pages, keys, n, KVP_PRIO_NORMAL, pages);
		if (rc == 0)
			rc = kvp_release(c, pages, n);
	}
	if (rc < 0)
		fprintf(stderr, "list: filling the namespace: %s (%s)\n", kvp_strerror(rc),
			kvp_last_error());
	kvp_close(c);
	return rc;
}

/* idle_join() - o->idle clients in the namespace, each leasing o->leases
 * pages (its own stretch of them). */
static int idle_join(const struct list_opts *o, kvp_client **idle)
{
	kvp_page pages[4096];
	kvp_key keys[4096];
	size_t i, k;
	int rc;

	for (i = 0; i < o->idle; i++) {
		rc = kvp_connect(o->socket, LIST_NS, &geo, &idle[i]);
		for (k = 0; rc == 0 && k < o->leases; k++)
			key_of((i * o->leases + k) % o->pages, &keys[k]);
		if (rc == 0 && o->leases)
			rc = kvp_acquire(idle[i], NULL, keys, o->leases, NULL, 0, pages, NULL);
		if (rc < 0) {
			fprintf(stderr, "list: idle client %zu: %s (%s)\n", i, kvp_strerror(rc),
				kvp_last_error());
			return rc;
		}
	}
	return 0;
}

/* lister() - a child: list everything until killed, timing each. */
static void lister(const struct list_opts *o, struct list_shared *sh, size_t id)
{
	struct kvp_wire_page *pg = malloc(8192 * sizeof(*pg));
	struct kvp_wire_prefix *pr = malloc(8192 * sizeof(*pr));
	kvp_client *c;
	uint64_t t0;
	int rc;

	if (!pg || !pr || kvp_connect(o->socket, NULL, NULL, &c) < 0)
		_exit(1);
	for (;;) {
		t0 = bench_now_ns();
		rc = sh->n[id] % 2 ? kvp_list_prefixes(c, LIST_NS, 0, pr, 8192, NULL)
				   : kvp_list_pages(c, NULL, pg, 8192, NULL);
		if (rc < 0)
			_exit(2);
		if (sh->n[id] < 4096)
			sh->ns[id][sh->n[id]] = bench_now_ns() - t0;
		sh->n[id]++;
	}
}

/* time_stats() - o->samples STATS round trips of c into v (ns). */
static int time_stats(kvp_client *c, const struct list_opts *o, uint64_t *v)
{
	kvp_stats_t st;
	uint64_t t0;
	size_t i;
	int rc;

	for (i = 0; i < o->samples; i++) {
		t0 = bench_now_ns();
		rc = kvp_stats(c, &st, NULL, 0);
		if (rc < 0)
			return rc;
		v[i] = bench_now_ns() - t0;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static uint64_t quiet[LIST_MAX_SAMPLES], busy[LIST_MAX_SAMPLES], lists[LIST_MAX_LISTERS * 4096];
	pid_t pids[LIST_MAX_LISTERS];
	struct list_shared *sh;
	struct list_opts o;
	kvp_client **idle, *victim;
	size_t i, k, nl = 0;
	uint64_t total = 0;
	double q50, b50;
	int rc;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	idle = calloc(o.idle + 1, sizeof(*idle));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!idle || sh == MAP_FAILED) {
		fprintf(stderr, "list: out of memory\n");
		return 1;
	}
	memset(sh, 0, sizeof(*sh));
	if (fill(&o) < 0 || idle_join(&o, idle) < 0)
		return 1;
	rc = kvp_connect(o.socket, NULL, NULL, &victim);
	if (rc == 0)
		rc = time_stats(victim, &o, quiet);
	for (i = 0; rc == 0 && i < o.listers; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			lister(&o, sh, i);
	}
	/* the listers are under way once each has finished a listing */
	for (k = 0; rc == 0 && k < 100000; k++) {
		for (i = 0; i < o.listers && sh->n[i]; i++)
			;
		if (i == o.listers)
			break;
		usleep(1000);
	}
	if (rc == 0)
		rc = time_stats(victim, &o, busy);
	for (i = 0; i < o.listers; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
		total += sh->n[i];
		for (k = 0; k < sh->n[i] && k < 4096; k++)
			lists[nl++] = sh->ns[i][k];
	}
	if (rc < 0) {
		fprintf(stderr, "list: STATS: %s (%s)\n", kvp_strerror(rc), kvp_last_error());
		return 1;
	}
	q50 = bench_pct_us(quiet, o.samples, 50);
	b50 = bench_pct_us(busy, o.samples, 50);
	printf("list pages=%zu idle=%zu leases=%zu listers=%zu samples=%zu "
	       "stats_quiet_p50_us=%.1f stats_quiet_p99_us=%.1f "
	       "stats_busy_p50_us=%.1f stats_busy_p99_us=%.1f listing_p50_us=%.1f "
	       "listings=%" PRIu64 " busy_over_quiet_p50=%.2f\n",
	       o.pages, o.idle, o.leases, o.listers, o.samples, q50, bench_pct_us(quiet, o.samples, 99),
	       b50, bench_pct_us(busy, o.samples, 99), bench_pct_us(lists, nl, 50), total,
	       q50 > 0 ? b50 / q50 : 0);
	kvp_close(victim);
	for (i = 0; i < o.idle; i++)
		kvp_close(idle[i]);
	return 0;
}
