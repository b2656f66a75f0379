/* SPDX-License-Identifier: MIT */
/*
 * nschurn.c - bench/nschurn: what making and dropping namespaces costs the
 * daemon's other clients. Each new namespace gets a tier file of
 * --spill-size in the daemon's --spill-dir (preallocated, its slot headers
 * wiped) and each drop removes one: file-system work of seconds on a busy
 * disk. One client joined to a namespace of its own times STATS round
 * trips twice: --samples of them with nobody else asking (the reference),
 * then for as long as a second process makes --cycles namespaces (a HELLO
 * that creates one returns once its tier file is ready) and drops each
 * again (DROP_NS returns once the file is gone). The daemon's loop must
 * not wait for the disk: the round trips with churn should look like
 * those without.
 *
 * One line of key=value pairs: the round trips' medians, 99th percentiles
 * and maxima in microseconds, and the creates' and drops' medians in
 * milliseconds.
 *
 * This is a benchmark, not a test: bench/run-nschurn.sh runs it.
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

#define CHURN_MAX_SAMPLES 1000000
#define CHURN_MAX_CYCLES 1000

/* 64 KiB pages: 16k slots in a 1 GiB tier file. */
static const kvp_geometry geo = {
	.layers = 4, .kv_heads = 4, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "bench/nschurn",
};

struct churn_opts {
	const char *socket;
	size_t samples, cycles;
};

/* What the churner reports, in shared memory. */
struct churn_shared {
	uint64_t n;				/* cycles done */
	uint64_t create_ns[CHURN_MAX_CYCLES];
	uint64_t drop_ns[CHURN_MAX_CYCLES];
	int rc;
	char err[256];
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: nschurn [OPTION]...\n"
		"Time one client's STATS round trips while another process makes and\n"
		"drops namespaces (each with a tier file in the daemon's --spill-dir).\n\n"
		"  -s, --socket=PATH  the daemon's socket (default: $KVPOOL_SOCKET, else %s)\n"
		"  -c, --cycles=N     namespaces made and dropped (default 4)\n"
		"  -n, --samples=N    STATS round trips timed alone (default 2000)\n"
		"  -h, --help         show this help and exit\n\n"
		"The daemon needs --spill-dir; its --spill-size is what each namespace's\n"
		"tier file takes (1G shows the cost of a large one).\n", KVP_SOCKET_DEFAULT);
}

static int parse_opts(int argc, char **argv, struct churn_opts *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "cycles", required_argument, NULL, 'c' },
		{ "samples", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc = 0;

	*o = (struct churn_opts){ .samples = 2000, .cycles = 4 };
	while ((c = getopt_long(argc, argv, "s:c:n:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket = optarg;
			break;
		case 'c':
			rc = bench_count("nschurn", "--cycles", optarg, 1, CHURN_MAX_CYCLES,
					 &o->cycles);
			break;
		case 'n':
			rc = bench_count("nschurn", "--samples", optarg, 1, CHURN_MAX_SAMPLES,
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
	return 0;
}

/* churner() - a child: make and drop o->cycles namespaces, timing each. */
static void churner(const struct churn_opts *o, struct churn_shared *sh)
{
	kvp_client *admin, *c;
	char name[64];
	uint64_t t0;
	int rc;

	rc = kvp_connect(o->socket, NULL, NULL, &admin);
	for (sh->n = 0; rc == 0 && sh->n < o->cycles; sh->n++) {
		snprintf(name, sizeof(name), "churn-%d-%" PRIu64, (int)getpid(), sh->n);
		t0 = bench_now_ns();
		rc = kvp_connect(o->socket, name, &geo, &c);
		if (rc < 0)
			break;
		sh->create_ns[sh->n] = bench_now_ns() - t0;
		kvp_close(c);
		t0 = bench_now_ns();
		rc = kvp_drop_namespace(admin, name);
		sh->drop_ns[sh->n] = bench_now_ns() - t0;
	}
	if (rc < 0) {
		sh->rc = rc;
		snprintf(sh->err, sizeof(sh->err), "%s (%s)", kvp_strerror(rc), kvp_last_error());
	}
	_exit(rc < 0);
}

int main(int argc, char **argv)
{
	static uint64_t quiet[CHURN_MAX_SAMPLES], busy[CHURN_MAX_SAMPLES];
	struct churn_shared *sh;
	struct churn_opts o;
	kvp_client *c;
	size_t nq = 0, nb = 0;
	kvp_stats_t st;
	uint64_t t0;
	double q50, b99;
	pid_t pid;
	int rc, status;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		fprintf(stderr, "nschurn: out of memory\n");
		return 1;
	}
	memset(sh, 0, sizeof(*sh));
	rc = kvp_connect(o.socket, "bench-steady", &geo, &c);
	for (; rc >= 0 && nq < o.samples; nq++) {
		t0 = bench_now_ns();
		rc = kvp_stats(c, &st, NULL, 0);	/* >= 0: namespaces */
		quiet[nq] = bench_now_ns() - t0;
	}
	if (rc < 0) {
		fprintf(stderr, "nschurn: %s (%s)\n", kvp_strerror(rc), kvp_last_error());
		return 1;
	}
	pid = fork();
	if (pid == 0)
		churner(&o, sh);
	while (rc >= 0 && nb < CHURN_MAX_SAMPLES && waitpid(pid, &status, WNOHANG) == 0) {
		t0 = bench_now_ns();
		rc = kvp_stats(c, &st, NULL, 0);
		busy[nb++] = bench_now_ns() - t0;
	}
	if (nb == CHURN_MAX_SAMPLES || rc < 0)
		waitpid(pid, &status, 0);
	if (rc < 0 || sh->rc < 0) {
		fprintf(stderr, "nschurn: %s\n", rc < 0 ? kvp_strerror(rc) : sh->err);
		return 1;
	}
	q50 = bench_pct_us(quiet, nq, 50);
	b99 = bench_pct_us(busy, nb, 99);
	printf("nschurn cycles=%" PRIu64 " samples_quiet=%zu samples_churn=%zu "
	       "stats_quiet_p50_us=%.1f stats_quiet_p99_us=%.1f stats_quiet_max_us=%.1f "
	       "stats_churn_p50_us=%.1f stats_churn_p99_us=%.1f stats_churn_max_us=%.1f "
	       "create_p50_ms=%.1f drop_p50_ms=%.1f churn_over_quiet_p99=%.2f\n",
	       sh->n, nq, nb, q50, bench_pct_us(quiet, nq, 99), bench_pct_us(quiet, nq, 100), bench_pct_us(busy, nb, 50),
	       b99, bench_pct_us(busy, nb, 100), bench_pct_us(sh->create_ns, sh->n, 50) / 1000.0,
	       bench_pct_us(sh->drop_ns, sh->n, 50) / 1000.0, bench_pct_us(quiet, nq, 99) > 0 ?
	       b99 / bench_pct_us(quiet, nq, 99) : 0);
	kvp_close(c);
	return 0;
}
