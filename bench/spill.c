/* SPDX-License-Identifier: MIT */
/*
 * spill.c - bench/spill: spill and restore throughput of kvpoold's NVMe
 * tier, restore latency, and a plain O_DIRECT pwrite/pread loop beside
 * them as a reference.
 *
 * --mode kvpool (the default) drives a running kvpoold that has a spill
 * directory, like a model server whose working set outgrows the pool:
 *
 *   fill     publish chains of --chain blocks (kvp_alloc, a stamp of the
 *            block's key in each page, kvp_publish, kvp_release) until the
 *            pool holds nothing else; no eviction yet; untimed.
 *   spill    publish --extra-pages more, so that every kvp_alloc() evicts
 *            as many cached pages to the tier, then "flush": lease the
 *            pool's worth of private pages, a chain's worth at a time,
 *            which evicts the rest; wait until STATS says no write is in
 *            flight. Timed from just before the first evicting call to
 *            that moment. With --max-writing Q > 0 the client polls STATS
 *            before each call and waits while more than Q - chain writes
 *            are in flight: the daemon has no back-pressure and drops a
 *            page it has no staging buffer for (st.nvme.dropped); Q 0
 *            publishes as fast as it can. The flushed pages are released:
 *            the pool is empty, the tier holds every page.
 *   restore  kvp_acquire() the oldest chains back, one call a chain, each
 *            timed, holding every page (the pool has room for them all:
 *            no eviction, no write meanwhile when the daemon runs with
 *            --free-watermark 0); then check each page's stamp.
 *
 * Throughputs count page bytes (kvp_page_bytes), not the slot headers or
 * padding the daemon writes with them; the slot-byte rates are printed
 * too. --mode pio writes --pio-bytes to --pio-file with pwrite() from one
 * aligned buffer of --block bytes (O_DIRECT, queue depth 1, sequential),
 * reads it back with pread(), and deletes the file.
 *
 * Prints key=value lines; bench/run-spill.sh starts the daemon, runs fio
 * beside this, and writes the spill section of BENCHMARKS.md. `make bench`
 * runs it; `make check` never does.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvpool.h"
#include "bench/opt.h"

#define SPL_NS "bench-spill"
#define SPL_BT 16u		/* tokens a page */
#define SPL_HDR 4096u		/* the daemon's slot header (daemon/tiers/spill.h) */
#define SPL_MAX_CHAIN 1024u
#define SPL_POLL_NS 200000	/* between STATS polls while pacing or draining */

struct spl_opts {
	const char *socket;	/* NULL: $KVPOOL_SOCKET or the default */
	const char *spill_dir;	/* the daemon's, to learn its slot size */
	uint32_t layers;	/* page = 64 KiB x layers */
	size_t chain;		/* blocks a chain (one request) */
	size_t extra_pages;	/* published beyond the pool; 0: the pool's size */
	size_t max_writing;	/* pacing; 0: none */
	size_t restore_chains;	/* SIZE_MAX: as many as the pool holds */
	bool full_fill;		/* write every byte of a page, not just a stamp */
	bool pio;		/* --mode pio */
	const char *pio_file;
	size_t pio_bytes, block;
};

/* One run against the daemon. */
struct spl {
	const struct spl_opts *o;
	kvp_client *c;
	size_t page_bytes, slot_bytes, pool_pages, nchains;
	uint64_t align;
	uint32_t daemon_pid;
	kvp_key *keys;		/* [nchains * chain] */
	uint64_t polls, depth_sum, depth_n, depth_max;	/* pacing samples */
};

/* A snapshot for a phase's deltas. */
struct spl_mark {
	uint64_t ns;
	kvp_stats_t st;
	double daemon_cpu, client_cpu;	/* seconds */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void nap(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* pct() - the p-th percentile of the sorted v[0..n) (n > 0), nearest rank. */
static uint64_t pct(const uint64_t *v, size_t n, unsigned p)
{
	size_t r = (n * p + 99) / 100;

	return v[r ? r - 1 : 0];
}

/* dio_align() - what the daemon's spill.c computes for the file at path:
 * STATX_DIOALIGN, else st_blksize, at least 512. 0 if path is missing. */
static uint64_t dio_align(const char *path)
{
	struct statx stx;
	uint64_t a = 0;

	if (statx(AT_FDCWD, path, 0, STATX_DIOALIGN, &stx) < 0)
		return 0;
	if ((stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
		a = stx.stx_dio_offset_align;
		if (stx.stx_dio_mem_align > a)
			a = stx.stx_dio_mem_align;
	} else {
		a = stx.stx_blksize;
	}
	return a < 512 ? 512 : a;
}

/* proc_cpu() - user + system seconds of process pid (0: this one), or -1. */
static double proc_cpu(uint32_t pid)
{
	unsigned long ut, st;
	char path[64], buf[1024], *p;
	struct rusage ru;
	FILE *f;
	size_t n;

	if (!pid) {
		getrusage(RUSAGE_SELF, &ru);
		return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	}
	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');	/* the command may hold spaces */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			 &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int stats(struct spl *s, kvp_stats_t *st)
{
	int rc = kvp_stats(s->c, st, NULL, 0);

	if (rc < 0)
		fprintf(stderr, "spill: STATS: %s %s\n", kvp_strerror(rc), kvp_last_error());
	return rc < 0 ? rc : 0;
}

static int mark(struct spl *s, struct spl_mark *m)
{
	m->ns = now_ns();
	m->daemon_cpu = proc_cpu(s->daemon_pid);
	m->client_cpu = proc_cpu(0);
	return stats(s, &m->st);
}

/* pace() - with --max-writing, wait until a chain's evictions fit under
 * it; samples the writes in flight. Returns 0 or -errno. */
static int pace(struct spl *s)
{
	kvp_stats_t st;
	int rc;

	if (!s->o->max_writing)
		return 0;
	for (;;) {
		rc = stats(s, &st);
		if (rc < 0)
			return rc;
		s->polls++;
		s->depth_sum += st.nvme.writing;
		s->depth_n++;
		if (st.nvme.writing > s->depth_max)
			s->depth_max = st.nvme.writing;
		if (st.nvme.writing + s->o->chain <= s->o->max_writing)
			return 0;
		nap(SPL_POLL_NS);
	}
}

/* drain() - wait until no write is in flight; *st is the last STATS. */
static int drain(struct spl *s, kvp_stats_t *st)
{
	int rc;

	while ((rc = stats(s, st)) == 0 && st->nvme.writing) {
		s->polls++;
		nap(SPL_POLL_NS);
	}
	return rc;
}

static const kvp_key *chain_keys(const struct spl *s, size_t ch)
{
	return s->keys + ch * s->o->chain;
}

/* stamp() - mark page of block k of chain ch: its key at the start, after
 * a byte pattern over the whole page when full. */
static void stamp(const struct spl *s, void *page, size_t ch, size_t k, bool full)
{
	if (full)
		memset(page, (int)(ch * 31 + k) & 0xff, s->page_bytes);
	memcpy(page, &chain_keys(s, ch)[k], sizeof(kvp_key));
}

/* publish_chain() - chain ch into the pool as cached pages: alloc, stamp
 * (every byte when full), publish, release. 0 or -errno (-EEXIST: a key
 * was indexed already). */
static int publish_chain(struct spl *s, size_t ch, bool full)
{
	kvp_page pages[SPL_MAX_CHAIN], canon[SPL_MAX_CHAIN];
	size_t i, n = s->o->chain;
	void *p;
	int rc;

	rc = kvp_alloc(s->c, n, pages);
	for (i = 0; rc == 0 && i < n; i++) {
		p = kvp_page_ptr(s->c, pages[i]);
		if (!p)
			return -ESTALE;
		stamp(s, p, ch, i, full);
	}
	if (rc == 0)
		rc = kvp_publish(s->c, NULL, pages, chain_keys(s, ch), n, KVP_PRIO_NORMAL,
				 canon);
	for (i = 0; rc == 0 && i < n; i++)
		if (canon[i] != pages[i])
			rc = -EEXIST;
	if (rc == 0)
		rc = kvp_release(s->c, pages, n);
	if (rc < 0)
		fprintf(stderr, "spill: publishing chain %zu: %s%s%s\n", ch,
			rc == -EEXIST ? "its keys were published already: start the daemon "
			"afresh (--spill-discard)" : kvp_strerror(rc),
			kvp_last_error()[0] ? ": " : "", kvp_last_error());
	return rc;
}

/* flush() - lease the whole pool as private pages, a chain's worth a
 * call (paced), evicting every cached page; then release them all. */
static int flush(struct spl *s, uint64_t *t_last)
{
	kvp_page *held = calloc(s->pool_pages, sizeof(*held));
	size_t got = 0, n;
	int rc = held ? 0 : -ENOMEM;

	while (rc == 0 && got < s->pool_pages) {
		n = s->pool_pages - got < s->o->chain ? s->pool_pages - got : s->o->chain;
		rc = pace(s);
		if (rc == 0)
			rc = kvp_alloc(s->c, n, held + got);
		if (rc == 0)
			got += n;
	}
	*t_last = now_ns();
	if (rc < 0)
		fprintf(stderr, "spill: leasing the pool's %zu pages to flush it (%zu so far): "
			"%s %s\n", s->pool_pages, got, kvp_strerror(rc), kvp_last_error());
	for (size_t i = 0; i < got; i += 4096) {
		int r = kvp_release(s->c, held + i, got - i < 4096 ? got - i : 4096);

		if (r < 0 && rc == 0)
			rc = r;
	}
	free(held);
	return rc;
}

static void print_phase_cpu(const struct spl_mark *a, const struct spl_mark *b)
{
	double wall = (double)(b->ns - a->ns) / 1e9;

	printf(" wall_s=%.3f daemon_cpu=%.2f client_cpu=%.2f", wall,
	       a->daemon_cpu < 0 ? -1.0 : (b->daemon_cpu - a->daemon_cpu) / wall,
	       (b->client_cpu - a->client_cpu) / wall);
}

/* run_spill() - fill, then the timed spill phase; prints spill-write. */
static int run_spill(struct spl *s)
{
	size_t fill = s->pool_pages / s->o->chain, ch;
	struct spl_mark a, b;
	uint64_t t_last = 0;
	double wall;
	int rc = 0;

	/* Every byte of the pool is written once here, untimed, as a model
	 * would: else the daemon's first copy out of a page would fault in
	 * and clear the memfd's memory, and that would be timed. */
	for (ch = 0; rc == 0 && ch < fill; ch++)
		rc = publish_chain(s, ch, true);
	if (rc == 0)
		rc = mark(s, &a);
	if (rc == 0 && a.st.prefix.evictions) {
		fprintf(stderr, "spill: filling the pool evicted %" PRIu64 " pages: the pool "
			"is smaller than %zu pages or the daemon was not fresh\n",
			(uint64_t)a.st.prefix.evictions, s->pool_pages);
		rc = -EINVAL;
	}
	s->depth_sum = s->depth_n = s->depth_max = s->polls = 0;
	for (; rc == 0 && ch < s->nchains; ch++) {
		rc = pace(s);
		if (rc == 0)
			rc = publish_chain(s, ch, s->o->full_fill);
	}
	if (rc == 0)
		rc = flush(s, &t_last);
	if (rc == 0)
		rc = drain(s, &b.st);
	if (rc < 0)
		return rc;
	b.ns = now_ns();
	b.daemon_cpu = proc_cpu(s->daemon_pid);
	b.client_cpu = proc_cpu(0);
	wall = (double)(b.ns - a.ns) / 1e9;
	uint64_t pages = b.st.nvme.spills - a.st.nvme.spills;
	printf("spill-write pages=%" PRIu64 " bytes=%" PRIu64 " dropped=%" PRIu64
	       " io_errors=%" PRIu64 " evictions=%" PRIu64 " mbs=%.1f slot_mbs=%.1f"
	       " client_s=%.3f drain_s=%.3f depth_mean=%.1f depth_max=%" PRIu64
	       " polls=%" PRIu64, pages, pages * s->page_bytes,
	       b.st.nvme.dropped - a.st.nvme.dropped, b.st.nvme.io_errors - a.st.nvme.io_errors,
	       b.st.prefix.evictions - a.st.prefix.evictions,
	       (double)(pages * s->page_bytes) / wall / 1e6,
	       (double)(pages * s->slot_bytes) / wall / 1e6, (double)(t_last - a.ns) / 1e9,
	       (double)(b.ns - t_last) / 1e9,
	       s->depth_n ? (double)s->depth_sum / (double)s->depth_n : 0.0, s->depth_max,
	       s->polls);
	print_phase_cpu(&a, &b);
	printf("\n");
	return 0;
}

/* check_stamps() - pages of chain ch that do not hold their key. */
static size_t check_stamps(struct spl *s, const kvp_page *pages, size_t ch, size_t hits)
{
	size_t k, bad = 0;
	void *p;

	for (k = 0; k < hits; k++) {
		p = kvp_page_ptr(s->c, pages[k]);
		if (!p || memcmp(p, &chain_keys(s, ch)[k], sizeof(kvp_key)))
			bad++;
	}
	return bad;
}

/* run_restore() - acquire chains 0..n-1 back, each timed, holding all;
 * prints spill-restore. */
static int run_restore(struct spl *s, size_t n)
{
	size_t k, B = s->o->chain, hits = 0, shorts = 0, bad = 0;
	kvp_page *held = calloc(n * B, sizeof(*held));
	uint64_t *lat = calloc(n, sizeof(*lat)), t0;
	struct spl_mark a, b;
	int rc = held && lat ? mark(s, &a) : -ENOMEM;

	for (k = 0; rc == 0 && k < n; k++) {
		t0 = now_ns();
		rc = kvp_acquire(s->c, NULL, chain_keys(s, k), B, NULL, 0, held + k * B, NULL);
		lat[k] = now_ns() - t0;
		if (rc < 0) {
			fprintf(stderr, "spill: acquiring chain %zu: %s %s\n", k,
				kvp_strerror(rc), kvp_last_error());
			break;
		}
		hits += (size_t)rc;
		shorts += (size_t)rc < B;
		bad += check_stamps(s, held + k * B, k, (size_t)rc);
		/* what did not hit is not held: keep the array dense per chain */
		for (size_t i = (size_t)rc; i < B; i++)
			held[k * B + i] = 0;
		rc = 0;
	}
	if (rc == 0)
		rc = mark(s, &b);
	if (rc == 0) {
		uint64_t pages = b.st.nvme.restores - a.st.nvme.restores, sum = 0;
		double wall = (double)(b.ns - a.ns) / 1e9;

		printf("spill-restore-lat ms=");
		for (k = 0; k < n; k++) {
			printf("%s%.3f", k ? "," : "", lat[k] / 1e6);
			sum += lat[k];
		}
		printf("\n");
		qsort(lat, n, sizeof(*lat), cmp_u64);
		printf("spill-restore chains=%zu blocks=%zu hits=%zu short=%zu bad=%zu"
		       " pages=%" PRIu64 " bytes=%" PRIu64 " mbs=%.1f slot_mbs=%.1f"
		       " acquire_p50_ms=%.2f acquire_p99_ms=%.2f acquire_max_ms=%.2f"
		       " acquire_min_ms=%.2f acquire_sum_s=%.3f restore_us_mean=%" PRIu64
		       " restore_us_max=%" PRIu64
		       " checksum_failures=%" PRIu64 " io_errors=%" PRIu64 " evictions=%" PRIu64
		       " spills=%" PRIu64, n, n * B, hits, shorts, bad, pages,
		       pages * s->page_bytes, (double)(pages * s->page_bytes) / wall / 1e6,
		       (double)(pages * s->slot_bytes) / wall / 1e6, pct(lat, n, 50) / 1e6,
		       pct(lat, n, 99) / 1e6, lat[n - 1] / 1e6, lat[0] / 1e6, sum / 1e9,
		       (uint64_t)b.st.nvme.restore_us_mean, (uint64_t)b.st.nvme.restore_us_max,
		       b.st.nvme.checksum_failures - a.st.nvme.checksum_failures,
		       b.st.nvme.io_errors - a.st.nvme.io_errors,
		       b.st.prefix.evictions - a.st.prefix.evictions,
		       b.st.nvme.spills - a.st.nvme.spills);
		print_phase_cpu(&a, &b);
		printf("\n");
	}
	for (k = 0; k < n * B; k++)
		if (held[k])
			kvp_release(s->c, &held[k], 1);
	free(held);
	free(lat);
	return rc;
}

/* cpu_cost() - what the daemon's loop spends per page beside the I/O, on
 * this CPU: the copy into (or out of) a staging buffer and the XXH3-64 of
 * the page. Prints spill-cpu. */
static void cpu_cost(size_t bytes)
{
	enum { REPS = 64 };
	uint8_t *src, *dst;
	uint64_t t0, t1, t2, sum = 0;

	if (posix_memalign((void **)&src, 4096, bytes) ||
	    posix_memalign((void **)&dst, 4096, bytes + SPL_HDR))
		return;
	memset(src, 0x5a, bytes);
	memset(dst, 0, bytes + SPL_HDR);
	t0 = now_ns();
	for (int i = 0; i < REPS; i++) {
		src[i] = (uint8_t)i;
		memcpy(dst + SPL_HDR, src, bytes);
	}
	t1 = now_ns();
	for (int i = 0; i < REPS; i++) {
		dst[SPL_HDR + i] = (uint8_t)i;
		sum += XXH3_64bits(dst + SPL_HDR, bytes);
	}
	t2 = now_ns();
	printf("spill-cpu page_bytes=%zu copy_us=%.1f xxh3_us=%.1f sum=%" PRIx64 "\n", bytes,
	       (double)(t1 - t0) / REPS / 1e3, (double)(t2 - t1) / REPS / 1e3, sum & 0xff);
	free(src);
	free(dst);
}

/* setup() - connect, learn the pool's and the tier's sizes, make keys. */
static int setup(struct spl *s)
{
	kvp_geometry g = { .layers = s->o->layers, .kv_heads = 8, .head_dim = 128,
			   .block_tokens = SPL_BT, .dtype = KVP_DTYPE_F16,
			   .model = "bench/spill" };
	kvp_ns_stats_t ns[16];
	kvp_stats_t st;
	char path[4200];
	uint32_t *tokens;
	size_t ch, B = s->o->chain, i;
	int rc, nns;

	rc = kvp_connect(s->o->socket, SPL_NS, &g, &s->c);
	if (rc < 0) {
		fprintf(stderr, "spill: cannot join namespace %s: %s %s\n", SPL_NS,
			kvp_strerror(rc), kvp_last_error());
		return rc;
	}
	s->page_bytes = kvp_page_bytes(s->c);
	nns = kvp_stats(s->c, &st, ns, 16);
	for (i = 0; nns > 0 && i < (size_t)nns && i < 16; i++)
		if (!strcmp(ns[i].name, SPL_NS))
			break;
	if (nns <= 0 || i == (size_t)nns || i == 16 || !st.nvme.slots) {
		fprintf(stderr, "spill: STATS shows no tier for namespace %s: start kvpoold "
			"with --spill-dir\n", SPL_NS);
		return -EINVAL;
	}
	s->daemon_pid = st.pid;
	s->pool_pages = (st.pool_bytes / st.slab_bytes) * (st.slab_bytes / ns[i].page_stride);
	s->pool_pages -= s->pool_pages % B;
	s->nchains = (s->pool_pages + (s->o->extra_pages ? s->o->extra_pages
							 : s->pool_pages)) / B;
	if (s->nchains * B > st.nvme.slots) {
		fprintf(stderr, "spill: %zu pages to spill, the tier has %" PRIu64 " slots: "
			"raise --spill-size or lower --extra-pages\n", s->nchains * B,
			(uint64_t)st.nvme.slots);
		return -EINVAL;
	}
	snprintf(path, sizeof(path), "%s/%s.kvspill", s->o->spill_dir ? s->o->spill_dir : ".",
		 SPL_NS);
	s->align = s->o->spill_dir ? dio_align(path) : 0;
	s->slot_bytes = s->align ? round_up(SPL_HDR + s->page_bytes, s->align)
				 : round_up(SPL_HDR + s->page_bytes, 4096);
	s->keys = calloc(s->nchains * B, sizeof(*s->keys));
	tokens = calloc(B * SPL_BT, sizeof(*tokens));
	if (!s->keys || !tokens) {
		free(tokens);
		return -ENOMEM;
	}
	for (ch = 0; rc >= 0 && ch < s->nchains; ch++) {
		for (i = 0; i < B * SPL_BT; i++)
			tokens[i] = (uint32_t)((ch * 1000003u + i * 7u) % 150000u);
		rc = kvp_block_keys(s->c, NULL, tokens, B * SPL_BT, NULL, 0, s->keys + ch * B);
	}
	free(tokens);
	if (rc < 0)
		return rc;
	printf("spill-setup page_bytes=%zu slot_bytes=%" PRIu64 " align=%" PRIu64
	       " layers=%u chain=%zu pool_pages=%zu published=%zu tier_slots=%" PRIu64
	       " max_writing=%zu fill=%s daemon_pid=%u\n", s->page_bytes,
	       (uint64_t)s->slot_bytes, s->align, s->o->layers, B, s->pool_pages,
	       s->nchains * B, (uint64_t)st.nvme.slots, s->o->max_writing,
	       s->o->full_fill ? "full" : "stamp", s->daemon_pid);
	return 0;
}

static int run_kvpool(const struct spl_opts *o)
{
	struct spl s = { .o = o };
	size_t n;
	int rc;

	rc = setup(&s);
	if (rc == 0)
		cpu_cost(s.page_bytes);
	if (rc == 0)
		rc = run_spill(&s);
	n = o->restore_chains == SIZE_MAX ? s.pool_pages / o->chain : o->restore_chains;
	if (n > s.nchains)
		n = s.nchains;
	if (rc == 0 && n)
		rc = run_restore(&s, n);
	free(s.keys);
	kvp_close(s.c);
	return rc;
}

/* --- the pwrite/pread reference ------------------------------------------ */

/* pio_pass() - one sequential pass over the file, write or read; 0 or -errno. */
static int pio_pass(int fd, uint8_t *buf, size_t block, size_t bytes, bool wr)
{
	size_t off, done;
	ssize_t n;

	for (off = 0; off < bytes; off += block) {
		for (done = 0; done < block; done += (size_t)n) {
			n = wr ? pwrite(fd, buf + done, block - done, (off_t)(off + done))
			       : pread(fd, buf + done, block - done, (off_t)(off + done));
			if (n < 0 && errno == EINTR)
				n = 0;
			else if (n <= 0)
				return n < 0 ? -errno : -EIO;
		}
	}
	return 0;
}

static int run_pio(const struct spl_opts *o)
{
	size_t bytes = o->pio_bytes / o->block * o->block;
	uint64_t t0, t1, t2;
	uint8_t *buf;
	int fd, rc;

	fd = open(o->pio_file, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		fprintf(stderr, "spill: cannot open %s with O_DIRECT: %s\n", o->pio_file,
			strerror(-rc));
		return rc;
	}
	rc = posix_memalign((void **)&buf, 4096, o->block) ? -ENOMEM : 0;
	if (rc == 0 && fallocate(fd, 0, 0, (off_t)bytes) < 0)
		rc = -errno;	/* like the daemon's tier file */
	if (rc == 0) {
		memset(buf, 0xa5, o->block);
		t0 = now_ns();
		rc = pio_pass(fd, buf, o->block, bytes, true);
		t1 = now_ns();
		if (rc == 0)
			rc = pio_pass(fd, buf, o->block, bytes, false);
		t2 = now_ns();
	}
	if (rc == 0)
		printf("spill-pio block=%zu bytes=%zu write_mbs=%.1f read_mbs=%.1f"
		       " write_s=%.3f read_s=%.3f\n", o->block, bytes,
		       (double)bytes / ((double)(t1 - t0) / 1e9) / 1e6,
		       (double)bytes / ((double)(t2 - t1) / 1e9) / 1e6,
		       (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9);
	else
		fprintf(stderr, "spill: pwrite/pread of %s: %s\n", o->pio_file, strerror(-rc));
	close(fd);
	unlink(o->pio_file);
	free(buf);
	return rc;
}

/* --- options ---------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: spill [OPTION]...\n"
		"Measure kvpoold's NVMe tier (--mode kvpool, against a running daemon with\n"
		"--spill-dir) or a plain O_DIRECT pwrite/pread loop (--mode pio).\n\n"
		"  -s, --socket=PATH      the daemon's socket (default: $KVPOOL_SOCKET, else %s)\n"
		"      --spill-dir=DIR    the daemon's --spill-dir, to compute its slot size\n"
		"      --layers=N         page = N x 64 KiB: 8 KV heads, head_dim 128, 16 tokens,\n"
		"                         f16 (default 8: 512 KiB)\n"
		"      --chain=N          blocks a chain, one kvp_alloc/kvp_acquire (default 32)\n"
		"      --extra-pages=N    pages published beyond the pool (default: the pool's)\n"
		"      --max-writing=Q    wait while more than Q - chain writes are in flight\n"
		"                         (default 64; 0: publish as fast as possible)\n"
		"      --restore-chains=N chains acquired back (default: as many as the pool\n"
		"                         holds; 0: none)\n"
		"      --fill=HOW         stamp (default: the key in a page's first bytes) or\n"
		"                         full (every byte written by the client)\n"
		"      --mode=MODE        kvpool (default) or pio\n"
		"      --pio-file=PATH    pio: the file, created and deleted\n"
		"      --pio-bytes=N      pio: bytes written then read (default 512 MiB)\n"
		"      --block=N          pio: bytes a call (default 528384)\n"
		"  -h, --help             show this help and exit\n", KVP_SOCKET_DEFAULT);
}

static int parse_opt(int ch, struct spl_opts *o)
{
	size_t v;
	int rc = 0;

	switch (ch) {
	case 's': o->socket = optarg; break;
	case 256: o->spill_dir = optarg; break;
	case 257:
		rc = bench_count("spill", "layers", optarg, 1, 64, &v);
		o->layers = (uint32_t)v;
		break;
	case 258: return bench_count("spill", "chain", optarg, 1, SPL_MAX_CHAIN, &o->chain);
	case 259: return bench_count("spill", "extra-pages", optarg, 1, 1u << 24, &o->extra_pages);
	case 260: return bench_count("spill", "max-writing", optarg, 0, 1u << 20, &o->max_writing);
	case 261: return bench_count("spill", "restore-chains", optarg, 0, 1u << 20, &o->restore_chains);
	case 262:
		o->full_fill = !strcmp(optarg, "full");
		if (!o->full_fill && strcmp(optarg, "stamp")) {
			fprintf(stderr, "spill: --fill '%s': give stamp or full\n", optarg);
			rc = -EINVAL;
		}
		break;
	case 263:
		o->pio = !strcmp(optarg, "pio");
		if (!o->pio && strcmp(optarg, "kvpool")) {
			fprintf(stderr, "spill: --mode '%s': give kvpool or pio\n", optarg);
			rc = -EINVAL;
		}
		break;
	case 264: o->pio_file = optarg; break;
	case 265: return bench_count("spill", "pio-bytes", optarg, 4096, (size_t)1 << 40, &o->pio_bytes);
	case 266:
		rc = bench_count("spill", "block", optarg, 4096, 64u << 20, &o->block);
		if (rc == 0 && o->block % 4096) {
			fprintf(stderr, "spill: --block %zu is not a multiple of 4096\n", o->block);
			rc = -EINVAL;
		}
		break;
	default:
		usage(stderr);
		return -EINVAL;
	}
	return rc;
}

/* parse_opts() - fill *o from argv. Returns 0, 1 (help shown) or -EINVAL. */
static int parse_opts(int argc, char **argv, struct spl_opts *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "spill-dir", required_argument, NULL, 256 },
		{ "layers", required_argument, NULL, 257 },
		{ "chain", required_argument, NULL, 258 },
		{ "extra-pages", required_argument, NULL, 259 },
		{ "max-writing", required_argument, NULL, 260 },
		{ "restore-chains", required_argument, NULL, 261 },
		{ "fill", required_argument, NULL, 262 },
		{ "mode", required_argument, NULL, 263 },
		{ "pio-file", required_argument, NULL, 264 },
		{ "pio-bytes", required_argument, NULL, 265 },
		{ "block", required_argument, NULL, 266 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch, rc = 0;

	*o = (struct spl_opts){ .layers = 8, .chain = 32, .max_writing = 64,
				.restore_chains = SIZE_MAX, .pio_bytes = 512u << 20,
				.block = 528384 };
	while (rc == 0 && (ch = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
		if (ch == 'h') {
			usage(stdout);
			return 1;
		}
		rc = parse_opt(ch, o);
	}
	if (rc == 0 && optind < argc) {
		fprintf(stderr, "spill: unexpected argument '%s'; see spill --help\n", argv[optind]);
		rc = -EINVAL;
	}
	if (rc == 0 && o->pio && !o->pio_file) {
		fprintf(stderr, "spill: --mode pio needs --pio-file\n");
		rc = -EINVAL;
	}
	if (rc == 0 && o->max_writing && o->max_writing < o->chain) {
		fprintf(stderr, "spill: --max-writing %zu is below --chain %zu: nothing could "
			"ever be published\n", o->max_writing, o->chain);
		rc = -EINVAL;
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct spl_opts o;
	int rc;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = o.pio ? run_pio(&o) : run_kvpool(&o);
	return rc == 0 ? 0 : 1;
}
