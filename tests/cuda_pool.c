/* SPDX-License-Identifier: MIT */
/*
 * cuda_pool.c - the pool on a GPU, end to end: a kvpoold with the cuda
 * backend, a small pool, a pinned host tier and an NVMe tier; a writer
 * process that fills pages on the device (cudaMemcpy from host patterns)
 * and publishes 48 chains, far more than the pool holds, so most of them
 * move to the host tier and on to NVMe; then a reader process, which
 * opens the slabs with CUDA IPC handles of its own, acquires every chain
 * back (restored from whichever tier holds it), copies each page to the
 * host and checks every byte. Afterwards the daemon's counts must show
 * both tiers used both ways and add up, and it must stop cleanly.
 *
 * A plain program (CUDA does not survive fork(), so no Check runner):
 * exit 0 when it held, 1 when it did not, 77 (skip) when no GPU answers.
 * KVPOOLD names the daemon (default ../daemon/kvpoold).
 */
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kvpool.h"

#define BT	16u
#define CHAIN	8u
#define CHAINS	48u		/* 384 pages through a 64-page pool */
#define PAGE	16384u		/* 2 layers x 2 heads x 64 x 16 tokens x f16 x 2 */

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/cuda-pool",
};

/* the test's directory (socket, log, tier files), removed at its exit:
 * by the process that made it, not by the clients it forks */
static char tmp[64];
static pid_t tmp_owner;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_tmp(void)
{
	if (tmp[0] && getpid() == tmp_owner)
		(void)nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "cuda_pool: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(code);
}

/* pattern() - the bytes of the page of key k. */
static void pattern(uint64_t *w, const kvp_key *k)
{
	uint64_t x;
	size_t i;

	memcpy(&x, k->b, sizeof(x));
	for (i = 0; i < PAGE / 8; i++)
		w[i] = x ^ (i * 0x9e3779b97f4a7c15ull);
}

static void chain_keys(kvp_client *c, uint32_t id, kvp_key *keys)
{
	uint32_t t[CHAIN * BT], i;

	for (i = 0; i < CHAIN * BT; i++)
		t[i] = id * 7919u + i;
	if (kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys) != CHAIN)
		die(1, "kvp_block_keys: %s", kvp_last_error());
}

static kvp_client *join(const char *sock)
{
	kvp_client *c;
	int rc = kvp_connect(sock, "gpu", &geo, &c);

	if (rc < 0)
		die(1, "kvp_connect: %s (%s)", kvp_strerror(rc), kvp_last_error());
	return c;
}

/* writer() - publish every chain, computing (filling) its pages on the
 * device, and let them go: the older ones leave the pool. */
static void writer(const char *sock)
{
	static uint64_t host[PAGE / 8];
	kvp_key keys[CHAIN];
	kvp_page mine[CHAIN], out[CHAIN];
	kvp_client *c = join(sock);
	uint32_t id, i;
	int hits, rc;

	for (id = 0; id < CHAINS; id++) {
		chain_keys(c, id, keys);
		hits = kvp_acquire(c, NULL, keys, CHAIN, NULL, 0, out, NULL);
		if (hits != 0)
			die(1, "chain %u: %d hits before it was published", id, hits);
		rc = kvp_alloc(c, CHAIN, mine);
		if (rc < 0)
			die(1, "alloc: %s (%s)", kvp_strerror(rc), kvp_last_error());
		for (i = 0; i < CHAIN; i++) {
			pattern(host, &keys[i]);
			if (cudaMemcpy(kvp_page_ptr(c, mine[i]), host, PAGE,
				       cudaMemcpyHostToDevice) != cudaSuccess)
				die(1, "cudaMemcpy to a pool page failed");
		}
		rc = kvp_publish(c, NULL, mine, keys, CHAIN, KVP_PRIO_NORMAL, out);
		if (rc < 0)
			die(1, "publish: %s (%s)", kvp_strerror(rc), kvp_last_error());
		if (kvp_release(c, out, CHAIN) < 0)
			die(1, "release: %s", kvp_last_error());
	}
	kvp_close(c);
}

/* reader() - another process: every chain comes back whole and exact,
 * newest first: the pool's, then the host tier's, then the NVMe tier's. */
static void reader(const char *sock)
{
	static uint64_t want[PAGE / 8], got[PAGE / 8];
	kvp_key keys[CHAIN];
	kvp_page out[CHAIN];
	kvp_client *c = join(sock);
	uint32_t id, i;
	int hits;

	for (id = CHAINS; id-- > 0;) {
		chain_keys(c, id, keys);
		hits = kvp_acquire(c, NULL, keys, CHAIN, NULL, 0, out, NULL);
		if (hits != (int)CHAIN)
			die(1, "chain %u came back with %d of %u blocks (%s)", id, hits,
			    CHAIN, kvp_last_error());
		for (i = 0; i < CHAIN; i++) {
			if (cudaMemcpy(got, kvp_page_ptr(c, out[i]), PAGE,
				       cudaMemcpyDeviceToHost) != cudaSuccess)
				die(1, "cudaMemcpy from a pool page failed");
			pattern(want, &keys[i]);
			if (memcmp(got, want, PAGE) != 0)
				die(1, "chain %u block %u: wrong bytes", id, i);
		}
		if (kvp_release(c, out, CHAIN) < 0)
			die(1, "release: %s", kvp_last_error());
	}
	kvp_close(c);
}

/* child() - run fn in a fresh process (CUDA starts there); its status. */
static int child(void (*fn)(const char *), const char *sock)
{
	int st;
	pid_t pid = fork();

	if (pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (pid == 0) {
		int n = 0;

		if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
			_exit(77);
		fn(sock);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid)
		die(1, "waitpid: %s", strerror(errno));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
	const char *kvpoold = getenv("KVPOOLD");
	char dir[] = "/tmp/kvpool-cudapool-XXXXXX", sock[128], spill[128], log[128];
	char text[4096] = "";
	kvp_client *c;
	kvp_stats_t st;
	pid_t d;
	int rc, i, status;
	FILE *f;

	if (!kvpoold || !*kvpoold)
		kvpoold = "../daemon/kvpoold";
	if (!mkdtemp(dir))
		die(1, "mkdtemp: %s", strerror(errno));
	snprintf(tmp, sizeof(tmp), "%s", dir);
	tmp_owner = getpid();
	atexit(rm_tmp);
	snprintf(sock, sizeof(sock), "%s/s.sock", dir);
	snprintf(spill, sizeof(spill), "%s/spill", dir);
	snprintf(log, sizeof(log), "%s/kvpoold.log", dir);
	mkdir(spill, 0700);
	d = fork();
	if (d == 0) {
		if (!freopen(log, "w", stderr))
			_exit(1);
		execl(kvpoold, kvpoold, "--foreground", "--socket", sock, "--backend", "cuda",
		      "--pool-size", "1M", "--slab-size", "256K", "--host-tier-size", "512K",
		      "--spill-dir", spill, "--spill-size", "64M", "--free-watermark", "0",
		      (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 200; i++) {	/* up to 20 s for the device to answer */
		if (waitpid(d, &status, WNOHANG) == d) {
			f = fopen(log, "r");
			if (f) {
				text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
				fclose(f);
			}
			if (strstr(text, "no CUDA device answers") ||
			    strstr(text, "built without CUDA")) {
				printf("SKIP: kvpoold --backend cuda: %s", text);
				return 77;
			}
			die(1, "kvpoold exited during start-up:\n%s", text);
		}
		if (kvp_connect(sock, NULL, NULL, &c) == 0)
			break;
		usleep(100 * 1000);
	}
	if (i == 200)
		die(1, "kvpoold did not answer within 20 s");
	rc = child(writer, sock);
	if (rc == 0)
		rc = child(reader, sock);
	if (rc == 0 && kvp_stats(c, &st, NULL, 0) < 0)
		rc = 1;
	if (rc == 0) {
		printf("cuda_pool: %u chains of %u pages through a %llu-page pool: host tier "
		       "%llu in, %llu back (restore mean %llu us); nvme %llu spilled, %llu "
		       "restored; %llu dropped\n", CHAINS, CHAIN,
		       (unsigned long long)(st.pages_total - st.pages_spilled),
		       (unsigned long long)st.host.spills, (unsigned long long)st.host.restores,
		       (unsigned long long)st.host.restore_us_mean,
		       (unsigned long long)st.nvme.spills, (unsigned long long)st.nvme.restores,
		       (unsigned long long)(st.host.dropped + st.nvme.dropped));
		if (!(st.flags & KVP_STATS_F_CONSERVED) || !st.host.spills ||
		    !st.host.restores || !st.nvme.spills || !st.nvme.restores ||
		    st.pages_private || st.pages_shared) {
			fprintf(stderr, "cuda_pool: the counts do not show both tiers used both "
				"ways, or do not add up\n");
			rc = 1;
		}
	}
	kvp_close(c);
	kill(d, SIGTERM);
	if (waitpid(d, &status, 0) != d || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "cuda_pool: kvpoold did not stop cleanly (status %d)\n", status);
		rc = rc ? rc : 1;
	}
	if (rc == 77)
		printf("SKIP: no CUDA device answers in the client processes\n");
	return rc;
}
