/* SPDX-License-Identifier: MIT */
/*
 * check_soak.c - the soak test: 16 client processes do random allocs,
 * publishes, acquires, copies on write, retains and releases against one
 * kvpoold (a small pool, a host tier and an NVMe tier, so pages are
 * evicted, spilled and restored all the time), while the parent kills a
 * random one with SIGKILL every 100 ms and starts another. Every page
 * carries a pattern derived from its key (published) or from its owner
 * (private) and is checked whenever it is read: a single byte out of
 * place fails the run. Afterwards no client is left, no page is leased,
 * the conservation invariant holds with the daemon's own recount, and
 * every cached chain still holds its keys' bytes.
 *
 * `make check` runs it for 8 s. KVPOOL_SOAK_SECONDS and
 * KVPOOL_SOAK_CLIENTS make it longer or wider (docs/security.md has the
 * last long run).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"

#define BT		16u	/* tokens a block */
#define CHAIN		8u	/* blocks a chain */
#define CHAINS		512u	/* distinct chains: 8 times what the pool holds */
#define HELD_MAX	48u	/* pages a worker keeps (up to 2 leases each; with a
				 * chain in flight under --max-leases 128) */
#define PAGE		16384u	/* 2 layers x 2 heads x 64 x 16 tokens x f16 x 2 */
#define MAX_WORKERS	64

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/soak",
};

/* Exit codes of a worker: 0 stopped cleanly; others say what broke. */
enum {
	SOAK_OK = 0, SOAK_CONNECT = 10, SOAK_CALL = 11, SOAK_CORRUPT = 12, SOAK_COW = 13,
};

/* One page a worker holds, and the pattern it must hold. */
struct held {
	kvp_page page;
	kvp_key key;		/* the pattern's key */
	unsigned leases;	/* 1, or 2 after a retain */
	bool mine;		/* private: nobody else may change it */
};

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* chain_tokens() - the tokens of chain id. */
static void chain_tokens(uint32_t *t, uint32_t id)
{
	uint32_t i;

	for (i = 0; i < CHAIN * BT; i++)
		t[i] = (id * 7919u + i * 31u) % 50000u;
}

/* die() - a worker's end: say what and exit with code. */
static void die(int code, const char *what, int rc)
{
	fprintf(stderr, "soak worker %d: %s: %s (%s)\n", (int)getpid(), what,
		rc < 0 ? kvp_strerror(rc) : "-", kvp_last_error());
	_exit(code);
}

/* check_page() - h holds the bytes of its key. */
static void check_page(kvp_client *c, const struct held *h)
{
	const void *p = kvp_page_ptr(c, h->page);

	if (!p || !harness_holds(p, PAGE, &h->key))
		die(SOAK_CORRUPT, h->mine ? "a private page changed under its owner"
					: "a published page does not hold its key's bytes", 0);
}

/* drop() - release held[i] (all its leases), checking it first. */
static void drop(kvp_client *c, struct held *held, unsigned *n, unsigned i)
{
	int rc;

	check_page(c, &held[i]);
	while (held[i].leases--) {
		rc = kvp_release(c, &held[i].page, 1);
		if (rc < 0)
			die(SOAK_CALL, "release", rc);
	}
	held[i] = held[--*n];
}

/* serve() - acquire a chain, compute (fill) and publish what is missing,
 * keep the chain's pages. */
static void serve(kvp_client *c, uint64_t *s, struct held *held, unsigned *n)
{
	uint32_t t[CHAIN * BT], id = (uint32_t)(rnd(s) % CHAINS), i, k;
	kvp_page got[CHAIN], mine[CHAIN];
	kvp_key keys[CHAIN];
	int hits, rc;

	if (id % 3)	/* a skewed popularity: low ids are hot */
		id = (uint32_t)(rnd(s) % (CHAINS / 8));
	chain_tokens(t, id);
	if (kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys) != CHAIN)
		die(SOAK_CALL, "block keys", 0);
	hits = kvp_acquire(c, NULL, keys, CHAIN, NULL, 0, got, NULL);
	if (hits < 0)
		die(SOAK_CALL, "acquire", hits);
	k = CHAIN - (uint32_t)hits;
	if (k) {
		rc = kvp_alloc(c, k, mine);
		if (rc == -ENOSPC || rc == -EDQUOT) {	/* a full pool is no error */
			rc = kvp_release(c, got, (size_t)hits);
			if (rc < 0)
				die(SOAK_CALL, "release after a full pool", rc);
			return;
		}
		if (rc < 0)
			die(SOAK_CALL, "alloc", rc);
		for (i = 0; i < k; i++)
			harness_fill(kvp_page_ptr(c, mine[i]), PAGE, &keys[hits + i]);
		rc = kvp_publish(c, hits ? &keys[hits - 1] : NULL, mine, keys + hits, k,
				 KVP_PRIO_NORMAL, got + hits);
		if (rc < 0)
			die(SOAK_CALL, "publish", rc);
		for (i = 0; i < k; i++)	/* someone else's copy won: drop ours */
			if (got[hits + i] != mine[i] && (rc = kvp_release(c, &mine[i], 1)) < 0)
				die(SOAK_CALL, "release of a duplicate", rc);
	}
	for (i = 0; i < CHAIN; i++) {
		struct held h = { .page = got[i], .key = keys[i], .leases = 1 };

		check_page(c, &h);
		if (*n < HELD_MAX) {
			held[(*n)++] = h;
		} else if ((rc = kvp_release(c, &got[i], 1)) < 0) {
			die(SOAK_CALL, "release", rc);
		}
	}
}

/* private_pages() - allocate a few pages and stamp them as this
 * worker's own. */
static void private_pages(kvp_client *c, uint64_t *s, struct held *held, unsigned *n,
			  uint64_t *serial)
{
	kvp_page p[4];
	unsigned want = 1 + (unsigned)(rnd(s) % 4), i;
	int rc;

	if (*n + want > HELD_MAX)
		return;
	rc = kvp_alloc(c, want, p);
	if (rc == -ENOSPC || rc == -EDQUOT)
		return;
	if (rc < 0)
		die(SOAK_CALL, "alloc", rc);
	for (i = 0; i < want; i++) {
		struct held *h = &held[(*n)++];
		uint64_t tag = ((uint64_t)getpid() << 32) | ++*serial;

		memset(h, 0, sizeof(*h));
		h->page = p[i];
		memcpy(h->key.b, &tag, sizeof(tag));
		h->key.b[31] = 0xee;
		h->leases = 1;
		h->mine = true;
		harness_fill(kvp_page_ptr(c, p[i]), PAGE, &h->key);
	}
}

/* cow() - copy a held published page; the copy must match, then it is
 * ours to change. */
static void cow(kvp_client *c, uint64_t *s, struct held *held, unsigned *n,
		uint64_t *serial)
{
	struct held *src, *h;
	uint64_t tag;
	kvp_page copy;
	int rc;

	if (!*n || *n >= HELD_MAX)
		return;
	src = &held[rnd(s) % *n];
	if (src->mine)
		return;
	rc = kvp_cow(c, &src->page, 1, &copy);
	if (rc == -ENOSPC || rc == -EDQUOT)
		return;
	if (rc < 0)
		die(SOAK_CALL, "cow", rc);
	h = &held[(*n)++];
	*h = (struct held){ .page = copy, .key = src->key, .leases = 1, .mine = true };
	check_page(c, h);	/* the copy holds the source's bytes */
	tag = ((uint64_t)getpid() << 32) | ++*serial;
	memcpy(h->key.b, &tag, sizeof(tag));
	harness_fill(kvp_page_ptr(c, copy), PAGE, &h->key);
	check_page(c, src);	/* and the source did not change */
}

static void worker(const char *sock, uint64_t seed)
{
	struct held held[HELD_MAX];
	uint64_t s = seed | 1, serial = 0;
	unsigned n = 0, i;
	kvp_client *c;
	int rc;

	signal(SIGTERM, on_term);
	rc = kvp_connect(sock, "soak", &geo, &c);
	if (rc < 0)
		die(SOAK_CONNECT, "connect", rc);
	while (!stop) {
		unsigned op = (unsigned)(rnd(&s) % 100);

		if (op < 35) {
			serve(c, &s, held, &n);
		} else if (op < 50) {
			private_pages(c, &s, held, &n, &serial);
		} else if (op < 60) {
			cow(c, &s, held, &n, &serial);
		} else if (op < 70 && n) {
			i = (unsigned)(rnd(&s) % n);
			if (held[i].leases == 1 && (rc = kvp_retain(c, &held[i].page, 1)) == 0)
				held[i].leases++;
			else if (rc < 0 && rc != -EDQUOT)
				die(SOAK_CALL, "retain", rc);
		} else if (n) {
			unsigned k = 1 + (unsigned)(rnd(&s) % 8);

			while (k-- && n)
				drop(c, held, &n, (unsigned)(rnd(&s) % n));
		}
	}
	while (n)
		drop(c, held, &n, n - 1);
	kvp_close(c);
	_exit(SOAK_OK);
}

static pid_t spawn(const char *sock, uint64_t seed)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		worker(sock, seed);
	return pid;
}

static unsigned env_uint(const char *name, unsigned def, unsigned max)
{
	const char *v = getenv(name);
	unsigned long n;

	if (!v || !*v)
		return def;
	n = strtoul(v, NULL, 10);
	return n && n <= max ? (unsigned)n : def;
}

/* worker_status() - fail the test unless st is a clean exit or our kill. */
static void worker_status(pid_t pid, int st, bool killed)
{
	if (killed && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		return;
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == SOAK_OK,
		      "worker %d ended with %s %d (10 connect, 11 a call failed, "
		      "12 corrupt page, see its message above)", (int)pid,
		      WIFEXITED(st) ? "exit" : "signal",
		      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

START_TEST(test_soak_random_clients_and_kills_leak_and_corrupt_nothing)
{
	unsigned seconds = env_uint("KVPOOL_SOAK_SECONDS", 8, 86400);
	unsigned nw = env_uint("KVPOOL_SOAK_CLIENTS", 16, MAX_WORKERS);
	char spill[160];
	const char *args[] = { "--pool-size", "8M", "--slab-size", "1M",
			       "--host-tier-size", "2M", "--spill-dir", spill,
			       "--spill-size", "16M", "--max-leases", "128", NULL };
	uint32_t t[CHAIN * BT];
	kvp_key keys[CHAIN];
	kvp_page got[CHAIN];
	pid_t pids[MAX_WORKERS];
	uint64_t s = 0x5eed, kills = 0, spawned, deadline;
	kvp_stats_t st;
	kvp_client *c;
	struct daemon d;
	struct timespec ts;
	unsigned i, id;
	int hits, status, polls = 0;

	daemon_dir(&d);
	snprintf(spill, sizeof(spill), "%s/spill", d.dir);
	ck_assert_int_eq(mkdir(spill, 0700), 0);
	daemon_restart(&d, args);
	for (i = 0; i < nw; i++)
		pids[i] = spawn(d.sock, rnd(&s));
	spawned = nw;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	deadline = (uint64_t)ts.tv_sec + seconds;
	for (;;) {
		usleep(100 * 1000);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((uint64_t)ts.tv_sec >= deadline)
			break;
		/* one of them dies mid-whatever; another takes its place */
		i = (unsigned)(rnd(&s) % nw);
		ck_assert_int_eq(kill(pids[i], SIGKILL), 0);
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		worker_status(pids[i], status, true);
		kills++;
		pids[i] = spawn(d.sock, rnd(&s));
		spawned++;
	}
	for (i = 0; i < nw; i++)
		ck_assert_int_eq(kill(pids[i], SIGTERM), 0);
	for (i = 0; i < nw; i++) {
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		worker_status(pids[i], status, false);
	}

	/* nobody holds anything any more, and every page is accounted for */
	do {
		stats_of(d.sock, &st);
	} while (st.clients > 1 && ++polls < 100000);
	ck_assert_uint_eq(st.clients, 1);
	ck_assert_uint_eq(st.pages_private, 0);
	ck_assert_uint_eq(st.pages_shared, 0);
	ck_assert_msg(st.flags & KVP_STATS_F_CONSERVED, "the recount disagrees");
	ck_assert_uint_eq(st.pages_free + st.pages_cached + st.pages_spilled +
			  st.pages_inflight, st.pages_total);
	/* what is still cached, in any tier, holds its keys' bytes */
	ck_assert_int_eq(kvp_connect(d.sock, "soak", &geo, &c), 0);
	for (id = 0; id < CHAINS; id++) {
		chain_tokens(t, id);
		ck_assert_int_eq(kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys),
				 CHAIN);
		hits = kvp_acquire(c, NULL, keys, CHAIN, NULL, 0, got, NULL);
		ck_assert_int_ge(hits, 0);
		for (i = 0; i < (unsigned)hits; i++)
			ck_assert_msg(harness_holds(kvp_page_ptr(c, got[i]), PAGE, &keys[i]),
				      "chain %u block %u lost its bytes", id, i);
		ck_assert_int_eq(kvp_release(c, got, (size_t)hits), 0);
	}
	stats_of(d.sock, &st);
	printf("soak: %u s, %u clients, %llu started, %llu killed; %llu requests, "
	       "%llu pages allocated, %llu published, %llu deduplicated, %llu copied, "
	       "%llu evicted; host tier %llu in, %llu back; nvme %llu spilled, %llu "
	       "restored; %llu checksum failures\n", seconds, nw,
	       (unsigned long long)spawned, (unsigned long long)kills,
	       (unsigned long long)st.requests_total, (unsigned long long)st.allocs,
	       (unsigned long long)st.prefix.publishes, (unsigned long long)st.prefix.dedups,
	       (unsigned long long)st.prefix.cows, (unsigned long long)st.prefix.evictions,
	       (unsigned long long)st.host.spills, (unsigned long long)st.host.restores,
	       (unsigned long long)st.nvme.spills, (unsigned long long)st.nvme.restores,
	       (unsigned long long)st.nvme.checksum_failures);
	ck_assert_uint_eq(st.nvme.checksum_failures, 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

static Suite *soak_suite(void)
{
	Suite *s = suite_create("soak");
	TCase *tc = tcase_create("soak");

	tcase_set_timeout(tc, 60 + 2 * env_uint("KVPOOL_SOAK_SECONDS", 8, 86400));
	tcase_add_test(tc, test_soak_random_clients_and_kills_leak_and_corrupt_nothing);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(soak_suite());
}
