/* SPDX-License-Identifier: MIT */
/*
 * slabs.c - bench/slabs: what making the pool's slabs costs with the host
 * backend, where --prefault (the default) takes each slab's memory when
 * the daemon makes it and --no-prefault leaves that to the first write of
 * each page. One client leases every page of a running kvpoold's pool in
 * one kvp_alloc() (which makes every slab), then writes every page twice:
 * the first write pays for what the slabs did not take (page faults, and
 * the memory itself without prefault), the second is the steady state.
 * As the reference, in the same process: the same slabs as plain memfds
 * with fallocate() (what prefault asks of the kernel), and as plain
 * mappings written once.
 *
 * One line of key=value pairs, seconds.
 *
 * With --grow BATCH, instead: what growing the pool costs the daemon's
 * other clients. One client, joined to a namespace of its own, times STATS
 * round trips alone (the reference), then while a second process grows
 * the pool as an engine does: BATCH pages at a time, each written once
 * before the next batch, until every slab is made. One line: the round
 * trips' medians, 99th percentiles and maxima in microseconds, alone and
 * while the pool grows, and the slabs made.
 *
 * This is a benchmark, not a test: bench/run-slabs.sh runs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "bench/opt.h"

/* 2 MiB pages */
static const kvp_geometry geo = {
	.layers = 32, .kv_heads = 8, .head_dim = 128, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "bench/slabs",
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* plain() - nslabs memfds of bytes each, fallocated (touch false) or
 * mapped and written once (touch true), then let go; seconds. Exits on a
 * failure, saying which call failed. */
static double plain(size_t nslabs, size_t bytes, int touch)
{
	double t0 = now_s(), t;
	int *fds = calloc(nslabs, sizeof(*fds));
	void **maps = calloc(nslabs, sizeof(*maps));
	const char *what = NULL;
	size_t i;

	if (!fds || !maps) {
		fprintf(stderr, "slabs: out of memory\n");
		exit(1);
	}
	for (i = 0; i < nslabs && !what; i++) {
		fds[i] = memfd_create("bench-slab", MFD_CLOEXEC);
		if (fds[i] < 0 || ftruncate(fds[i], (off_t)bytes) < 0)
			what = "memfd_create/ftruncate";
		else if (!touch && fallocate(fds[i], 0, 0, (off_t)bytes) < 0)
			what = "fallocate";
		else if (touch && (maps[i] = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
						  fds[i], 0)) == MAP_FAILED)
			what = "mmap";
		else if (touch)
			memset(maps[i], 1, bytes);
	}
	if (what) {
		fprintf(stderr, "slabs: the plain reference: %s of a %zu-byte memfd: %s\n", what,
			bytes, strerror(errno));
		exit(1);
	}
	t = now_s() - t0;
	for (i = 0; i < nslabs; i++) {
		if (touch)
			munmap(maps[i], bytes);
		close(fds[i]);
	}
	free(fds);
	free(maps);
	return t;
}

#define GROW_SAMPLES 1000000

/* grower() - a child: lease the pool's pages batch at a time, writing
 * each batch once, until none is left; exit 0, or 1 saying why. */
static void grower(const char *sock, size_t batch)
{
	kvp_page *pages = calloc(batch, sizeof(*pages));
	kvp_client *c;
	size_t i, pb;
	int rc;

	rc = kvp_connect(sock, "bench-slabs", &geo, &c);
	if (rc < 0 || !pages) {
		fprintf(stderr, "slabs: %s (%s)\n", kvp_strerror(rc), kvp_last_error());
		_exit(1);
	}
	pb = kvp_page_bytes(c);
	while ((rc = kvp_alloc(c, batch, pages)) == 0)
		for (i = 0; i < batch; i++)
			memset(kvp_page_ptr(c, pages[i]), 1, pb);
	if (rc != -ENOSPC) {
		fprintf(stderr, "slabs: kvp_alloc(%zu): %s (%s)\n", batch, kvp_strerror(rc),
			kvp_last_error());
		_exit(1);
	}
	kvp_close(c);
	_exit(0);
}

/* grow() - --grow: STATS round trips alone, then while grower() runs. */
static int grow(const char *sock, size_t batch)
{
	static uint64_t quiet[GROW_SAMPLES], busy[GROW_SAMPLES];
	static const kvp_geometry small = {
		.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
		.dtype = KVP_DTYPE_F16, .model = "bench/slabs-steady",
	};
	size_t nq = 0, nb = 0, i, slow = 0;
	kvp_stats_t st;
	kvp_client *c;
	uint64_t t0;
	pid_t pid;
	int rc, status;

	rc = kvp_connect(sock, "bench-steady", &small, &c);
	for (; rc >= 0 && nq < 3000; nq++) {
		t0 = bench_now_ns();
		rc = kvp_stats(c, &st, NULL, 0);
		quiet[nq] = bench_now_ns() - t0;
	}
	if (rc < 0) {
		fprintf(stderr, "slabs: %s (%s)\n", kvp_strerror(rc), kvp_last_error());
		return 1;
	}
	pid = fork();
	if (pid == 0)
		grower(sock, batch);
	while (rc >= 0 && nb < GROW_SAMPLES && waitpid(pid, &status, WNOHANG) == 0) {
		t0 = bench_now_ns();
		rc = kvp_stats(c, &st, NULL, 0);
		busy[nb++] = bench_now_ns() - t0;
	}
	if (nb == GROW_SAMPLES || rc < 0)
		waitpid(pid, &status, 0);
	if (rc >= 0)
		rc = kvp_stats(c, &st, NULL, 0);
	if (rc < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "slabs: --grow failed\n");
		return 1;
	}
	for (i = 0; i < nb; i++)	/* as long as making a slab of 64 MiB takes */
		slow += busy[i] > 5000000u;
	printf("grow batch=%zu slabs=%" PRIu64 " samples_quiet=%zu samples_grow=%zu "
	       "grow_over_5ms=%zu "
	       "stats_quiet_p50_us=%.1f stats_quiet_p99_us=%.1f stats_quiet_max_us=%.1f "
	       "stats_grow_p50_us=%.1f stats_grow_p99_us=%.1f stats_grow_max_us=%.1f\n",
	       batch, (uint64_t)st.slabs, nq, nb, slow, bench_pct_us(quiet, nq, 50),
	       bench_pct_us(quiet, nq, 99), bench_pct_us(quiet, nq, 100),
	       bench_pct_us(busy, nb, 50), bench_pct_us(busy, nb, 99),
	       bench_pct_us(busy, nb, 100));
	kvp_close(c);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "grow", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL;
	size_t batch = 0;
	double t0, alloc_s, touch1_s, touch2_s, fall_s, mem_s;
	kvp_stats_t st;
	kvp_info_t info;
	kvp_page *pages;
	kvp_client *c;
	size_t n, i, pb, slab;
	int o, rc;

	while ((o = getopt_long(argc, argv, "s:g:h", longopts, NULL)) != -1) {
		if (o == 's') {
			sock = optarg;
			continue;
		}
		if (o == 'g' && bench_count("slabs", "--grow", optarg, 1, 4096, &batch) == 0)
			continue;
		fprintf(o == 'h' ? stdout : stderr, "Usage: slabs [--socket PATH] [--grow BATCH]\n"
			"Lease every page of a running kvpoold's pool (host backend, 2 MiB\n"
			"pages), write them twice, and time it beside plain memfds. With\n"
			"--grow, time another client's STATS while the pool grows BATCH pages\n"
			"at a time instead.\n");
		return o == 'h' ? 0 : 2;
	}
	if (batch)
		return grow(sock, batch);
	rc = kvp_connect(sock, "bench-slabs", &geo, &c);
	if (rc == 0)
		rc = kvp_info(c, &info);
	if (rc == 0)
		rc = kvp_stats(c, &st, NULL, 0);
	if (rc < 0) {
		fprintf(stderr, "slabs: %s (%s)\n", kvp_strerror(rc), kvp_last_error());
		return 1;
	}
	pb = kvp_page_bytes(c);
	slab = (size_t)st.slab_bytes;
	n = (size_t)(st.pool_bytes / slab) * info.pages_per_slab;
	pages = calloc(n, sizeof(*pages));
	if (!pages)
		return 1;
	t0 = now_s();
	rc = kvp_alloc(c, n, pages);
	alloc_s = now_s() - t0;
	if (rc < 0) {
		fprintf(stderr, "slabs: kvp_alloc(%zu): %s (%s)\n", n, kvp_strerror(rc),
			kvp_last_error());
		return 1;
	}
	t0 = now_s();
	for (i = 0; i < n; i++)
		memset(kvp_page_ptr(c, pages[i]), 1, pb);
	touch1_s = now_s() - t0;
	t0 = now_s();
	for (i = 0; i < n; i++)
		memset(kvp_page_ptr(c, pages[i]), 2, pb);
	touch2_s = now_s() - t0;
	kvp_release(c, pages, n);
	kvp_close(c);
	fall_s = plain(st.pool_bytes / slab, slab, 0);
	mem_s = plain(st.pool_bytes / slab, slab, 1);
	printf("slabs pool_bytes=%llu slab_bytes=%zu pages=%zu alloc_s=%.4f touch1_s=%.4f "
	       "touch2_s=%.4f first_total_s=%.4f plain_fallocate_s=%.4f plain_write_s=%.4f\n",
	       (unsigned long long)st.pool_bytes, slab, n, alloc_s, touch1_s, touch2_s,
	       alloc_s + touch1_s, fall_s, mem_s);
	free(pages);
	return 0;
}
