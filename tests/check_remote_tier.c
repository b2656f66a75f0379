/* SPDX-License-Identifier: MIT */
/*
 * check_remote_tier.c - the remote tier in the daemon (tiers/tier_remote.c)
 * with real kvpoold processes and a real Redis Cluster on loopback
 * (tests/redis_fixture.c): two daemons share prefixes through the
 * cluster, what leaves the pool is written back and fetched blocks are
 * not, a corrupted value or a forger's is a miss, a client's policy skips
 * a slower fetch, an ACQUIRE that waits for what another machine
 * publishes, failovers, a cluster that goes and comes back, a full
 * server, and the start-up's refusals. Exit 77 (SKIP) without
 * redis-server.
 *
 * Past 800 lines on purpose: one program for one Redis Cluster started
 * once (a cluster's start takes seconds), as check_remote is for the
 * client.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <hiredis.h>

#include "kvpool.h"
#include "harness.h"
#include "redis_fixture.h"
#include "daemon/log.h"
#include "daemon/loop/loop.h"
#include "daemon/remote/remote.h"
#include "daemon/store/backend.h"

/* --- two daemons, one cluster ----------------------------------------- */

#define BT 16u
static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/remote",
};

enum { PROMPTS = 10, BLOCKS = 100 };	/* 1,000 pages of 16 KiB */

static kvp_client *join(const char *sock)
{
	kvp_client *c;
	int rc = kvp_connect(sock, "remote", &geo, &c);

	ck_assert_msg(rc == 0, "kvp_connect: %s: %s", kvp_strerror(rc), kvp_last_error());
	return c;
}

/* serve_prompts() - serve prompts first..end-1 of BLOCKS blocks through
 * sock (each page filled with its key's bytes), releasing each. */
static void serve_prompts(const char *sock, unsigned first, unsigned end)
{
	static uint32_t t[BLOCKS * BT];
	static kvp_page out[BLOCKS];
	kvp_client *c = join(sock);
	unsigned p;

	for (p = first; p < end; p++) {
		harness_tokens(t, BLOCKS * BT, 0, p + 1);	/* no two alike */
		harness_serve(c, t, BLOCKS * BT, out);
		ck_assert_int_eq(kvp_release(c, out, BLOCKS), 0);
	}
	kvp_close(c);
}

/* machine_a() - serve PROMPTS prompts through sock. */
static void machine_a(const char *sock)
{
	serve_prompts(sock, 0, PROMPTS);
}

/* where acquire_prompt() wants every hit from (KVP_SOURCE_*); -1: not asked */
static int want_source = -1;

/* acquire_prompt() - acquire prompt p through c; every page that comes
 * back must hold its key's bytes (and come from want_source). Returns the
 * blocks hit. */
static unsigned acquire_prompt(kvp_client *c, unsigned p)
{
	static uint32_t t[BLOCKS * BT];
	static kvp_page out[BLOCKS];
	static kvp_key keys[BLOCKS];
	uint8_t src[BLOCKS];
	kvp_acquire_opts o;
	int h, i;

	harness_tokens(t, BLOCKS * BT, 0, p + 1);	/* no two alike */
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, BLOCKS * BT, NULL, 0, keys), BLOCKS);
	if (want_source < 0) {
		h = kvp_acquire(c, NULL, keys, BLOCKS, NULL, 0, out, NULL);
	} else {
		ck_assert_int_eq(kvp_acquire_defaults(c, &o, sizeof(o)), 0);
		o.flags |= KVP_ACQUIRE_SOURCES;
		o.sources = src;
		h = kvp_acquire_with(c, NULL, keys, BLOCKS, NULL, 0, out, NULL, &o, sizeof(o));
		for (i = 0; i < h; i++)
			ck_assert_msg(src[i] == want_source, "prompt %u block %d came from source "
				      "%u, not %d", p, i, src[i], want_source);
	}
	ck_assert_msg(h >= 0, "acquire: %s %s", kvp_strerror(h), kvp_last_error());
	for (i = 0; i < h; i++)
		ck_assert_msg(harness_holds(kvp_page_ptr(c, out[i]), kvp_page_bytes(c), &keys[i]),
			      "prompt %u block %d came back with other bytes", p, i);
	if (h)
		ck_assert_int_eq(kvp_release(c, out, (size_t)h), 0);
	return (unsigned)h;
}

/* machine_b() - acquire the same prompts through sock. Returns the
 * blocks hit. */
static unsigned machine_b(const char *sock)
{
	kvp_client *c = join(sock);
	unsigned p, hits = 0;

	for (p = 0; p < PROMPTS; p++)
		hits += acquire_prompt(c, p);
	kvp_close(c);
	return hits;
}

/* acquire_newest() - machine_b(), newest prompt first: Redis counts the
 * replies it holds for a client against maxmemory, so fetching old
 * prompts first (every block of a prompt at once) evicts newer ones. */
static unsigned acquire_newest(const char *sock)
{
	kvp_client *c = join(sock);
	unsigned p = PROMPTS, hits = 0;

	while (p-- > 0)
		hits += acquire_prompt(c, p);
	kvp_close(c);
	return hits;
}

/* b_ready() - start daemon b and wait (5 s at most) until it has every
 * master of the cluster up: the tests below count hits exactly, and a
 * master that has not answered its first PING yet makes its blocks
 * misses for those few milliseconds (the tier's rule, docs/remote.md). */
static void b_ready(struct daemon *b, const char *const *args)
{
	struct kvp_wire_stats st;
	unsigned i;

	daemon_start(b, args);
	for (i = 0; i < 500; i++) {
		stats_of(b->sock, &st);
		if (st.remote.nodes && st.remote.nodes_up == st.remote.nodes)
			return;
		usleep(10000);
	}
	ck_abort_msg("%u of %u masters up 5 s after the start", (unsigned)st.remote.nodes_up,
		     (unsigned)st.remote.nodes);
}

/* status_has() - `kvpool status` of sock prints text. */
static void status_has(const char *sock, const char *text)
{
	const char *argv[] = { harness_cli(), "--socket", sock, "status", NULL };
	static char out[16384];

	ck_assert_int_eq(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, text) != NULL, "'%s' not in:\n%s", text, out);
}

/* a_published() - a cluster, and machine A (a daemon of its own) that
 * published PROMPTS prompts into it (write-through) and is gone. */
static void a_published(void)
{
	const char *a_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote",
				 url, "--remote-key-file", keyfile, "--remote-write", "through",
				 NULL };
	struct daemon a;

	cluster("start", NULL);
	cluster_url();
	daemon_start(&a, a_args);
	machine_a(a.sock);
	daemon_stop(&a);
}

START_TEST(test_remote_daemons_share_prefixes_through_a_cluster)
{
	const char *a_args[] = { "--pool-size", "4M", "--slab-size", "1M", "--remote",
				 url, "--remote-key-file", keyfile, "--remote-write", "through",
				 NULL };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct daemon a, b;

	cluster("start", NULL);
	cluster_url();
	struct kvp_wire_stats st;

	daemon_start(&a, a_args);	/* 256 pages: most of the 1,000 are evicted */
	machine_a(a.sock);
	stats_of(a.sock, &st);
	ck_assert_uint_eq(st.remote.enabled, 1);
	ck_assert_uint_eq(st.remote.sent, PROMPTS * BLOCKS);	/* through: each once */
	ck_assert_uint_eq(st.remote.puts, PROMPTS * BLOCKS);
	daemon_stop(&a);		/* machine A is gone */
	b_ready(&b, b_args);
	want_source = KVP_SOURCE_REMOTE;	/* each block fetched for its lookup */
	ck_assert_uint_eq(machine_b(b.sock), PROMPTS * BLOCKS);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.up, 1);
	ck_assert_uint_eq(st.remote.nodes, 3);
	ck_assert_uint_eq(st.remote.slots, 16384);
	ck_assert_uint_eq(st.remote.restored, PROMPTS * BLOCKS);
	ck_assert_uint_eq(st.remote.hits, PROMPTS * BLOCKS);
	ck_assert_uint_eq(st.remote.corrupt, 0);
	ck_assert_uint_ge(st.remote.fetches, PROMPTS);
	ck_assert_uint_gt(st.remote.bytes_in, (uint64_t)PROMPTS * BLOCKS * 16384);
	status_has(b.sock, "remote tier   serving, 3 of 3 masters connected");
	/* again: now from B's own pool */
	want_source = KVP_SOURCE_POOL;
	ck_assert_uint_eq(machine_b(b.sock), PROMPTS * BLOCKS);
	want_source = -1;
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.restored, PROMPTS * BLOCKS);	/* nothing fetched */
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

/* calls() - the calls of cmd ("set", "get") the cluster's masters have
 * served so far. */
static long calls(const char *cmd_name)
{
	char cmd[512], line[256], want[64];
	size_t wl;
	long n = 0;
	FILE *f;
	unsigned i;

	wl = (size_t)snprintf(want, sizeof(want), "cmdstat_%s:calls=", cmd_name);
	for (i = 0; i < 6; i++) {
		snprintf(cmd, sizeof(cmd), "redis-cli -p %u info commandstats 2>/dev/null", port + i);
		f = popen(cmd, "r");
		ck_assert_ptr_nonnull(f);
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, want, wl))
				n += strtol(line + wl, NULL, 10);
		pclose(f);
	}
	return n;
}

/* sets() - SETs the cluster's masters have served so far. */
static long sets(void)
{
	char cmd[512], line[256];
	long n = 0;
	FILE *f;
	unsigned i;

	for (i = 0; i < 6; i++) {
		snprintf(cmd, sizeof(cmd), "redis-cli -p %u info commandstats 2>/dev/null", port + i);
		f = popen(cmd, "r");
		ck_assert_ptr_nonnull(f);
		while (fgets(line, sizeof(line), f)) {
			long c;

			if (sscanf(line, "cmdstat_set:calls=%ld", &c) == 1)
				n += c;
		}
		pclose(f);
	}
	return n;
}

/* A client of machine B that acquires a prompt with a wait (20 s): what
 * it got, and in how long. */
struct waiter {
	const char *sock;
	unsigned prompt, hits;
	double secs;
};

static void *wait_prompt(void *arg)
{
	struct waiter *w = arg;
	kvp_client *c = join(w->sock);
	struct timespec t0, t1;

	ck_assert_int_eq(kvp_set_acquire_wait(c, 20000), 0);
	/* a decode engine computes nothing it can fetch */
	ck_assert_int_eq(kvp_set_remote_policy(c, 1, 0), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	w->hits = acquire_prompt(c, w->prompt);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	w->secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	kvp_close(c);
	return NULL;
}

START_TEST(test_remote_a_waiting_acquire_gets_what_another_machine_publishes)
{
	/* disaggregated prefill across machines: B's ACQUIRE waits for keys
	 * nobody has, and A's daemon writes them to the cluster as A's
	 * client publishes them (write-through); B's daemon asks the cluster
	 * again while it waits (no PUBLISH on B announces them) */
	const char *a_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote",
				 url, "--remote-key-file", keyfile, "--remote-write", "through",
				 NULL };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct waiter w = { .prompt = 0 };
	struct kvp_wire_stats st;
	struct daemon a, b;
	pthread_t th;

	cluster("start", NULL);
	cluster_url();
	daemon_start(&a, a_args);
	b_ready(&b, b_args);
	w.sock = b.sock;
	ck_assert_int_eq(pthread_create(&th, NULL, wait_prompt, &w), 0);
	usleep(300000);
	serve_prompts(a.sock, 0, 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(w.hits, BLOCKS);
	ck_assert_msg(w.secs >= 0.25 && w.secs < 10.0, "the wait took %.2f s", w.secs);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.restored, BLOCKS);
	ck_assert_uint_eq(st.pages_shared + st.pages_private, 0);
	/* a handoff's ticket that A's daemon issued holds on B's (they share
	 * the key file), and on no daemon with another key */
	{
		kvp_client *ca = join(a.sock), *cb = join(b.sock), *cc;
		const char *c_args[] = { "--pool-size", "4M", "--slab-size", "1M", "--remote",
					 url, "--remote-key-file", NULL, NULL };
		char other[128];
		struct daemon c;
		kvp_ticket t;
		kvp_key k;
		uint32_t blocks = 0;

		memset(&k, 0x61, sizeof(k));
		ck_assert_int_eq(kvp_handoff_issue(ca, &k, BLOCKS, 30000, &t), 0);
		ck_assert_int_gt(kvp_handoff_check(cb, &t, &k, &blocks), 20000);
		ck_assert_uint_eq(blocks, BLOCKS);
		kvp_close(ca);
		kvp_close(cb);
		snprintf(other, sizeof(other), "%s.other", keyfile);
		ck_assert_int_eq(sh("(umask 077; head -c 32 /dev/urandom > %s)", other), 0);
		c_args[7] = other;
		daemon_start(&c, c_args);
		cc = join(c.sock);
		ck_assert_int_eq(kvp_handoff_check(cc, &t, &k, NULL), -ESTALE);
		kvp_close(cc);
		daemon_stop(&c);
		unlink(other);
	}
	check_conservation(b.sock);
	daemon_stop(&b);
	daemon_stop(&a);
}
END_TEST

/* A decode engine's wait on machine B for prompt p, as its connector
 * asks (for the handoff of its last block when handoff): what it got,
 * and in how long. */
struct handoff_wait {
	const char *sock;
	unsigned p;
	uint32_t wait_ms;
	bool handoff;
	unsigned hits;
	double secs;
};

/* prompt_keys() - the keys of prompt p's BLOCKS blocks. */
static void prompt_keys(kvp_client *c, unsigned p, kvp_key *keys)
{
	static uint32_t t[BLOCKS * BT];

	harness_tokens(t, BLOCKS * BT, 0, p + 1);	/* as serve_prompts() */
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, BLOCKS * BT, NULL, 0, keys), BLOCKS);
}

/* publish_head() - the first m blocks of prompt p, through c. */
static void publish_head(kvp_client *c, unsigned p, unsigned m)
{
	static uint32_t t[BLOCKS * BT];
	static kvp_page out[BLOCKS];

	harness_tokens(t, BLOCKS * BT, 0, p + 1);
	harness_serve(c, t, (size_t)m * BT, out);
	ck_assert_int_eq(kvp_release(c, out, m), 0);
}

static void *handoff_wait(void *arg)
{
	struct handoff_wait *w = arg;
	kvp_acquire_opts o = { .flags = KVP_ACQUIRE_WAIT, .wait_ms = w->wait_ms,
			       .prefill_rate = 1 };
	static kvp_key keys[BLOCKS];
	static kvp_page out[BLOCKS];
	kvp_client *c = join(w->sock);
	struct timespec t0, t1;
	int h;

	prompt_keys(c, w->p, keys);
	if (w->handoff) {
		o.flags |= KVP_ACQUIRE_HANDOFF;
		o.handoff = keys[BLOCKS - 1];
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	h = kvp_acquire_with(c, NULL, keys, BLOCKS, NULL, 0, out, NULL, &o, sizeof(o));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ck_assert_msg(h >= 0, "acquire: %s %s", kvp_strerror(h), kvp_last_error());
	if (h)
		ck_assert_int_eq(kvp_release(c, out, (size_t)h), 0);
	w->hits = (unsigned)h;
	w->secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	kvp_close(c);
	return NULL;
}

/* Issue 61, item 3, across machines: a prefill engine on machine A that
 * died mid-handoff, or abandoned a block, ended the waits for it on A's
 * daemon only; a decode engine on machine B waited all of its wait. A's
 * daemon now says the abandon in the cluster, and B's finds it as its
 * waits poll. */
START_TEST(test_remote_a_handoff_abandoned_on_one_machine_ends_the_wait_on_another)
{
	const char *a_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote",
				 url, "--remote-key-file", keyfile, "--remote-write", "through",
				 NULL };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct handoff_wait w = { .p = 20, .wait_ms = 20000, .handoff = true };
	static kvp_key keys[BLOCKS];
	struct daemon a, b;
	kvp_client *ca;
	kvp_ticket t;
	pthread_t th;
	int ready[2];
	pid_t pid;
	char c1;

	cluster("start", NULL);
	cluster_url();
	daemon_start(&a, a_args);
	b_ready(&b, b_args);
	w.sock = b.sock;
	/* A's prefill engine saved 10 of the prompt's blocks and dies; B's
	 * decode engine waits for the handoff */
	ck_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *c = join(a.sock);

		prompt_keys(c, w.p, keys);
		expect(kvp_handoff_issue(c, &keys[BLOCKS - 1], BLOCKS, 60000, &t) == 0, 70);
		publish_head(c, w.p, 10);
		expect(write(ready[1], &c1, 1) == 1, 71);
		pause();
		_exit(0);
	}
	ck_assert_int_eq(read(ready[0], &c1, 1), 1);
	ck_assert_int_eq(pthread_create(&th, NULL, handoff_wait, &w), 0);
	usleep(500000);	/* B fetched the 10, and waits for the 11th */
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(w.hits, 10);
	ck_assert_msg(w.secs >= 0.4 && w.secs < 10.0, "the wait took %.2f s", w.secs);
	/* another prefill engine on A computes the prompt again: issued a
	 * ticket for it, it is abandoned no more, and B's decode engine
	 * waits its whole wait (1.5 s: nobody saves the rest) */
	ca = join(a.sock);
	prompt_keys(ca, w.p, keys);
	ck_assert_int_eq(kvp_handoff_issue(ca, &keys[BLOCKS - 1], BLOCKS, 60000, &t), 0);
	usleep(1300000);	/* the cluster has A's word; B's of the abandon is old */
	w.wait_ms = 1500;
	handoff_wait(&w);
	ck_assert_uint_eq(w.hits, 10);
	ck_assert_msg(w.secs >= 1.4, "the wait took %.2f s", w.secs);
	/* a block A's prefill engine abandons (its save failed) ends B's
	 * wait that lacks it */
	publish_head(ca, w.p + 1, 5);
	w = (struct handoff_wait){ .sock = b.sock, .p = w.p + 1, .wait_ms = 20000 };
	ck_assert_int_eq(pthread_create(&th, NULL, handoff_wait, &w), 0);
	usleep(500000);
	prompt_keys(ca, w.p, keys);
	ck_assert_int_eq(kvp_handoff_abandon(ca, &keys[5]), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(w.hits, 5);
	ck_assert_msg(w.secs >= 0.4 && w.secs < 10.0, "the wait took %.2f s", w.secs);
	kvp_close(ca);
	check_conservation(b.sock);
	check_conservation(a.sock);
	daemon_stop(&b);
	daemon_stop(&a);
	close(ready[0]);
	close(ready[1]);
}
END_TEST

/* An ACQUIRE of prompt p (which nobody publishes) on its own connection,
 * waiting wait_ms, as a decode engine's does. */
struct idle_wait {
	const char *sock;
	unsigned p;
	uint32_t wait_ms;
};

static void *idle_wait(void *arg)
{
	const struct idle_wait *w = arg;
	uint32_t *t = calloc(BLOCKS * BT, sizeof(*t));
	kvp_key *keys = calloc(BLOCKS, sizeof(*keys));
	kvp_page *out = calloc(BLOCKS, sizeof(*out));
	kvp_client *c = join(w->sock);

	ck_assert(t && keys && out);
	harness_tokens(t, BLOCKS * BT, 0, 1000 + w->p);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, BLOCKS * BT, NULL, 0, keys), BLOCKS);
	ck_assert_int_eq(kvp_set_acquire_wait(c, w->wait_ms), 0);
	ck_assert_int_eq(kvp_set_remote_policy(c, 1, 0), 0);
	ck_assert_int_eq(kvp_acquire(c, NULL, keys, BLOCKS, NULL, 0, out, NULL), 0);
	kvp_close(c);
	free(t);
	free(keys);
	free(out);
	return NULL;
}

/* Item: 120 idle waits in a --remote namespace kept about 9,600 Redis
 * commands a second going: each asked the cluster again every 160 ms,
 * whatever the others did. Now all of them together ask at most 200
 * times a second. */
START_TEST(test_remote_idle_waits_ask_the_cluster_within_a_budget)
{
	enum { WAITS = 120, WAIT_MS = 4000 };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	static struct idle_wait w[WAITS];
	pthread_t th[WAITS];
	struct daemon b;
	long one, all;
	unsigned i;

	cluster("start", NULL);
	cluster_url();
	b_ready(&b, b_args);
	/* what one ask of a prompt nobody saved costs the cluster */
	one = calls("get");
	w[0] = (struct idle_wait){ b.sock, WAITS, 1 };
	idle_wait(&w[0]);
	one = calls("get") - one;
	ck_assert_int_ge(one, 1);
	all = calls("get");
	for (i = 0; i < WAITS; i++) {
		w[i] = (struct idle_wait){ b.sock, i, WAIT_MS };
		ck_assert_int_eq(pthread_create(&th[i], NULL, idle_wait, &w[i]), 0);
	}
	for (i = 0; i < WAITS; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	all = calls("get") - all;
	/* each asks once at first, then at most 200 asks a second for all:
	 * 120 + 800 in 4 s (before: about 3,000) */
	ck_assert_msg(all <= (WAITS + 200 * WAIT_MS / 1000 + WAITS) * one,
		      "%u idle waits of %u ms cost %ld GETs (%ld an ask)", WAITS, WAIT_MS, all,
		      one);
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "%u idle waits of %u ms: %ld GETs, %ld an ask\n", WAITS, WAIT_MS,
			all, one);
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

START_TEST(test_remote_fetched_blocks_are_not_sent_back)
{
	const char *b_args[] = { "--pool-size", "4M", "--slab-size", "1M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct daemon b;
	long before;

	a_published();
	before = sets();
	ck_assert_int_ge(before, PROMPTS * BLOCKS);	/* replicas count theirs too */
	b_ready(&b, b_args);	/* 256 pages: what it fetches, it evicts */
	ck_assert_uint_eq(machine_b(b.sock), PROMPTS * BLOCKS);
	daemon_stop(&b);
	ck_assert_int_eq(sets(), before);	/* Redis had them: none written back */
}
END_TEST

START_TEST(test_remote_write_back_sends_what_leaves_the_pool)
{
	const char *a_args[] = { "--pool-size", "4M", "--slab-size", "1M", "--remote",
				 url, "--remote-key-file", keyfile, NULL };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct daemon a, b;
	unsigned hits;

	cluster("start", NULL);
	cluster_url();
	daemon_start(&a, a_args);
	machine_a(a.sock);
	daemon_stop(&a);
	b_ready(&b, b_args);
	hits = machine_b(b.sock);
	/* what A's pool still held at the end never left it */
	/* a chain is found up to its first block that stayed: prompts whose
	 * first blocks A still held at the end (256 pages: 3 at most) miss */
	ck_assert_uint_ge(hits, (PROMPTS - 3) * BLOCKS);
	ck_assert_uint_lt(hits, PROMPTS * BLOCKS);
	daemon_stop(&b);
}
END_TEST

START_TEST(test_remote_unreachable_cluster_leaves_the_daemon_serving)
{
	const char *args[] = { "--pool-size", "4M", "--slab-size", "1M", "--remote",
			       url, "--remote-key-file", keyfile, "--remote-write", "through",
			       NULL };
	struct daemon a;

	cluster_url();		/* nothing listens there */
	daemon_start(&a, args);
	wait_log(&a, "no server answered");
	machine_a(a.sock);	/* publishes, evicts, serves: no wait on Redis */
	ck_assert_uint_gt(machine_b(a.sock), 0);	/* what its pool kept */
	daemon_stop(&a);
}
END_TEST

/* one_key() - a key of the remote tier held by the master on port; "" if none. */
static void one_key(unsigned on, char *k, size_t len)
{
	sh_line(k, len, "redis-cli -p %u --scan --pattern 'kvp1:*' | head -1", on);
}

START_TEST(test_remote_daemon_counts_a_corrupted_value_as_a_miss)
{
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct kvp_wire_stats st;
	struct daemon b;
	char k[256];
	unsigned hits;

	a_published();
	one_key(port, k, sizeof(k));
	ck_assert_msg(k[0], "no kvp1:* key on the first master");
	/* one byte of its data, on its master (no redirect needed) */
	setrange_one(k);
	b_ready(&b, b_args);
	hits = machine_b(b.sock);	/* right bytes or misses (it checks) */
	ck_assert_uint_lt(hits, PROMPTS * BLOCKS);	/* its chain stops there */
	ck_assert_uint_gt(hits, 0);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.corrupt, 1);
	ck_assert_uint_eq(st.remote.forged, 1);	/* damaged: its seal does not open */
	ck_assert_uint_eq(st.remote.restored, hits);
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

START_TEST(test_remote_client_policy_skips_a_slower_fetch)
{
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct kvp_wire_stats st;
	struct daemon b;
	kvp_client *c;

	a_published();
	b_ready(&b, b_args);
	c = join(b.sock);
	/* never: the pool has nothing, so nothing */
	ck_assert_int_eq(kvp_set_remote_policy(c, 0, KVP_REMOTE_NEVER), 0);
	ck_assert_uint_eq(acquire_prompt(c, 0), 0);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.gets, 0);
	ck_assert_uint_eq(st.remote.skipped_slow, 1);
	/* the default: fetched, and measured */
	ck_assert_int_eq(kvp_set_remote_policy(c, 0, 0), 0);
	ck_assert_uint_eq(acquire_prompt(c, 1), BLOCKS);
	ck_assert_uint_eq(acquire_prompt(c, 2), BLOCKS);
	stats_of(b.sock, &st);
	ck_assert_uint_gt(st.remote.latency_us, 0);
	ck_assert_uint_gt(st.remote.bandwidth, 0);
	/* an engine that prefills 4 billion tokens a second: recomputing wins */
	ck_assert_int_eq(kvp_set_remote_policy(c, 4000000000u, 0), 0);
	ck_assert_uint_eq(acquire_prompt(c, 3), 0);
	/* a cut-off of 1 us: no fetch is that fast */
	ck_assert_int_eq(kvp_set_remote_policy(c, 0, 1), 0);
	ck_assert_uint_eq(acquire_prompt(c, 4), 0);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.skipped_slow, 3);
	/* one token a second: fetching wins */
	ck_assert_int_eq(kvp_set_remote_policy(c, 1, 0), 0);
	ck_assert_uint_eq(acquire_prompt(c, 5), BLOCKS);
	kvp_close(c);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.restored, 3 * BLOCKS);
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

START_TEST(test_remote_daemon_reads_through_a_failover)
{
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile,
				 "--remote-timeout", "500", NULL };
	struct kvp_wire_stats st;
	struct daemon b;
	unsigned p, hits = 0, i;
	kvp_client *c;

	a_published();
	replica_in_sync();
	b_ready(&b, b_args);
	c = join(b.sock);
	/* a master dies halfway: right bytes or misses (acquire_prompt()
	 * checks every page), never a wait past the timeout */
	for (p = 0; p < PROMPTS; p++) {
		if (p == PROMPTS / 2)
			kill_first_master();
		hits += acquire_prompt(c, p);
	}
	ck_assert_uint_ge(hits, PROMPTS / 2 * BLOCKS);	/* those before it, whole */
	/* its replica takes over; the daemon finds it and serves every
	 * prompt whole again (what it has in its pool, the rest from Redis) */
	for (i = 0; i < 100; i++) {
		stats_of(b.sock, &st);
		if (st.remote.nodes_up == 3 && st.remote.slots == 16384)
			break;
		usleep(100 * 1000);
	}
	ck_assert_msg(st.remote.nodes_up == 3 && st.remote.slots == 16384,
		      "after the failover: %llu masters up, %llu slots",
		      (unsigned long long)st.remote.nodes_up, (unsigned long long)st.remote.slots);
	for (i = 0; i < 20; i++) {
		for (p = 0, hits = 0; p < PROMPTS; p++)
			hits += acquire_prompt(c, p);
		if (hits == PROMPTS * BLOCKS)
			break;
		usleep(250 * 1000);	/* nodes that have not heard: CLUSTERDOWN */
	}
	ck_assert_uint_eq(hits, PROMPTS * BLOCKS);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.corrupt, 0);
	ck_assert_uint_gt(st.remote.disconnects, 0);
	kvp_close(c);
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

START_TEST(test_remote_cluster_gone_and_back_leaves_the_daemon_serving)
{
	const char *args[] = { "--pool-size", "4M", "--slab-size", "1M", "--remote", url,
			       "--remote-key-file", keyfile,
			       "--remote-write", "through", "--remote-timeout", "500", NULL };
	struct kvp_wire_stats st;
	struct daemon a;
	unsigned i;

	cluster("start", NULL);
	cluster_url();
	daemon_start(&a, args);
	wait_log(&a, "serving (");
	machine_a(a.sock);
	/* every node gone: the pool and its tiers go on, and the log says so once */
	sh("%s/tests/redis-cluster.sh stop %s", KVP_SRCDIR, dir);
	wait_log(&a, "unreachable");
	machine_a(a.sock);	/* publishes and evicts: no wait on Redis */
	ck_assert_uint_gt(machine_b(a.sock), 0);	/* what its pool kept */
	ck_assert_uint_eq(log_count(&a, "unreachable"), 1);
	stats_of(a.sock, &st);
	ck_assert_uint_eq(st.remote.up, 0);
	status_has(a.sock, "remote tier   UNREACHABLE");
	/* a cluster on the same addresses again: found, said once */
	snprintf(dir, sizeof(dir), "%s/XXXXXX", root);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	cluster("start", NULL);
	for (i = 0; i < 100; i++) {
		stats_of(a.sock, &st);
		if (st.remote.up && st.remote.nodes_up == 3)
			break;
		usleep(100 * 1000);
	}
	ck_assert_uint_eq(st.remote.nodes_up, 3);
	ck_assert_uint_eq(log_count(&a, "unreachable"), 1);
	ck_assert_uint_eq(log_count(&a, ": serving ("), 2);
	check_conservation(a.sock);
	daemon_stop(&a);
}
END_TEST

START_TEST(test_remote_daemons_share_through_a_full_server)
{
	const char *a_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote",
				 url, "--remote-key-file", keyfile, "--remote-write", "through",
				 NULL };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct kvp_wire_stats st;
	struct daemon a, b;
	unsigned hits;

	/* one server of 8 MiB under allkeys-lru: 1,000 pages of 16 KiB do not fit */
	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u 8mb", KVP_SRCDIR, dir,
			    port), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
	daemon_start(&a, a_args);
	serve_prompts(a.sock, 0, PROMPTS - 1);
	/* Redis's LRU clock ticks once a second: pages written within one
	 * tick are evicted at random, and a chain breaks at its first hole.
	 * The last prompt, a tick later, is the newest: what the server
	 * keeps whole (1.6 MiB of 8). */
	usleep(1100 * 1000);
	serve_prompts(a.sock, PROMPTS - 1, PROMPTS);
	daemon_stop(&a);
	b_ready(&b, b_args);
	hits = acquire_newest(b.sock);	/* right bytes or misses (it checks) */
	ck_assert_uint_ge(hits, BLOCKS);
	ck_assert_uint_lt(hits, PROMPTS * BLOCKS);	/* the oldest were evicted */
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.corrupt, 0);	/* whole pages, never half */
	ck_assert_uint_gt(st.remote.misses, 0);
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

static void remote_settled(const char *sock, bool lost, struct kvp_wire_stats *st);

enum { HEAD = 4, CHAIN = 10, SHARERS = 50 };	/* blocks of a shared head, of a prompt */

/* shared_prompt() - prompt p of CHAIN blocks: HEAD blocks every prompt
 * shares (a system prompt), then its own. */
static void shared_prompt(uint32_t *t, unsigned p)
{
	harness_tokens(t, CHAIN * BT, HEAD * BT, p + 1);
}

/* used_memory() - the bytes the server on port p says it uses. */
static long used_memory(unsigned p)
{
	char line[64];

	sh_line(line, sizeof(line), "redis-cli -p %u info memory | tr -d '\\r' | "
		"sed -n 's/^used_memory://p'", p);
	return strtol(line, NULL, 10);
}

/* A head that many prompts share is written once, and each prompt's own
 * blocks after it: under allkeys-lru the head was the oldest key of all
 * and went first, and every chain below it with it, so that what Redis
 * kept could not be served (0 of 60 prompts). Writing a block now
 * TOUCHes the blocks above it, so heads outlive their tails: what Redis
 * keeps is the heads and the newest tails, and it can be served. */
START_TEST(test_remote_a_shared_head_outlives_its_tails_in_a_full_server)
{
	const char *a_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote",
				 url, "--remote-key-file", keyfile, "--remote-write", "through",
				 NULL };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	static uint32_t t[CHAIN * BT];
	static kvp_page out[CHAIN];
	static kvp_key keys[CHAIN];
	struct kvp_wire_stats st;
	unsigned p, hits = 0, newest = 0, prompts = 0;
	struct daemon a, b;
	kvp_client *c;
	long used;
	int h, i;

	/* one server of 4 MiB under allkeys-lru: 304 pages of 16 KiB do not fit
	 * (it holds 150); 37 a second go in for 8 s, so that what it holds
	 * turns over in about 4 s: a few ticks of its LRU clock, whose
	 * resolution is a second */
	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u 4mb", KVP_SRCDIR, dir,
			    port), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
	daemon_start(&a, a_args);
	c = join(a.sock);
	for (p = 0; p < SHARERS; p++) {		/* over 8 ticks of Redis's LRU clock */
		shared_prompt(t, p);
		harness_serve(c, t, CHAIN * BT, out);
		ck_assert_int_eq(kvp_release(c, out, CHAIN), 0);
		usleep(160 * 1000);
	}
	kvp_close(c);
	remote_settled(a.sock, false, &st);
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "A: %llu SETs, %llu failed, %llu not sent\n",
			(unsigned long long)st.remote.puts, (unsigned long long)st.remote.put_errors,
			(unsigned long long)st.remote.put_skipped);
	daemon_stop(&a);
	used = used_memory(port);
	b_ready(&b, b_args);
	c = join(b.sock);
	for (p = SHARERS; p-- > 0;) {		/* newest first */
		shared_prompt(t, p);
		ck_assert_int_eq(kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys), CHAIN);
		h = kvp_acquire(c, NULL, keys, CHAIN, NULL, 0, out, NULL);
		ck_assert_int_ge(h, 0);
		for (i = 0; i < h; i++)
			ck_assert_msg(harness_holds(kvp_page_ptr(c, out[i]), kvp_page_bytes(c),
						    &keys[i]), "prompt %u block %d: other bytes", p, i);
		if (h)
			ck_assert_int_eq(kvp_release(c, out, (size_t)h), 0);
		if (p == SHARERS - 1)
			newest = (unsigned)h;
		hits += (unsigned)h;
		prompts += h > HEAD;
	}
	kvp_close(c);
	stats_of(b.sock, &st);
	if (getenv("KVP_TEST_VERBOSE")) {
		fprintf(stderr, "B: %llu GETs, %llu hits, %llu misses, %llu corrupt, %llu errors, "
			"%llu not sent\n", (unsigned long long)st.remote.gets,
			(unsigned long long)st.remote.hits, (unsigned long long)st.remote.misses,
			(unsigned long long)st.remote.corrupt, (unsigned long long)st.remote.errors,
			(unsigned long long)st.remote.skipped);
	}
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "servable: %llu blocks of Redis's (%u prompts reach past the "
			"head) in %.1f MiB: %.1f blocks/MiB; the newest prompt %u of %u\n",
			(unsigned long long)st.remote.restored, prompts, (double)used / 1048576,
			(double)st.remote.restored / ((double)used / 1048576), newest, CHAIN);
	ck_assert_uint_ge(newest, HEAD);	/* its head, at least */
	ck_assert_uint_ge(prompts, SHARERS / 8);
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

/* remote_settled() - a's remote tier has no request in flight and,
 * when reconnected, is up again after at least one lost connection. */
static void remote_settled(const char *sock, bool lost, struct kvp_wire_stats *st)
{
	unsigned i;

	for (i = 0; i < 100; i++) {
		stats_of(sock, st);
		if (!st->remote.inflight && st->remote.up && (!lost || st->remote.disconnects))
			return;
		usleep(50 * 1000);
	}
	ck_abort_msg("remote tier not settled: inflight %llu, up %llu, disconnects %llu",
		     (unsigned long long)st->remote.inflight, (unsigned long long)st->remote.up,
		     (unsigned long long)st->remote.disconnects);
}

START_TEST(test_remote_password_file_after_a_reconnect)
{
	char pwfile[300];
	const char *a_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile,
				 "--remote-write", "through", "--remote-password-file", pwfile,
				 NULL };
	struct kvp_wire_stats st;
	struct daemon a;

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u && redis-cli -p %u "
			    "config set requirepass s3cret >/dev/null", KVP_SRCDIR, dir, port,
			    port), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
	snprintf(pwfile, sizeof(pwfile), "%s/password", dir);
	ck_assert_int_eq(sh("printf 's3cret\\n' >%s && chmod 600 %s", pwfile, pwfile), 0);
	daemon_start(&a, a_args);
	serve_prompts(a.sock, 0, 1);
	remote_settled(a.sock, false, &st);
	ck_assert_uint_eq(st.remote.puts, BLOCKS);
	ck_assert_uint_eq(st.remote.put_errors, 0);
	ck_assert_int_eq(sh("redis-cli -p %u -a s3cret --no-auth-warning client kill type normal "
			    ">/dev/null", port), 0);
	remote_settled(a.sock, true, &st);
	serve_prompts(a.sock, 1, 2);	/* through the new connection: AUTH again */
	remote_settled(a.sock, true, &st);
	ck_assert_uint_eq(st.remote.puts, 2 * BLOCKS);
	ck_assert_uint_eq(st.remote.put_errors, 0);
	daemon_stop(&a);
}
END_TEST

/* dbsize() - the keys of the server on port p. */
static long dbsize(unsigned p)
{
	char line[64];

	sh_line(line, sizeof(line), "redis-cli -p %u dbsize", p);
	return strtol(line, NULL, 10);
}

/* One kvp_evict() of 2,000 pages once wrote 768 to 1,230 of them: the rest
 * were skipped past --remote-max-inflight, and writes to a stalled master
 * were dropped for good. Now they wait in the backlog, and go again once
 * the master is back: every evicted page ends up in Redis. */
START_TEST(test_remote_an_eviction_is_written_whole_through_caps_and_a_stall)
{
	const char *a_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, "--remote-max-inflight", "8",
				 "--remote-timeout", "300", NULL };
	struct kvp_wire_stats st;
	struct daemon a;
	kvp_client *c;
	long keys = 0;
	int i, n;

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u", KVP_SRCDIR, dir, port), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
	daemon_start(&a, a_args);
	serve_prompts(a.sock, 0, PROMPTS);	/* 1,000 cached pages, none sent yet */
	stats_of(a.sock, &st);
	ck_assert_uint_eq(st.remote.puts, 0);
	/* the master stops taking writes for 1.2 s: SETs time out, the node
	 * is dropped and connected again, twice or more */
	ck_assert_int_eq(sh("redis-cli -p %u client pause 1200 WRITE >/dev/null", port), 0);
	c = join(a.sock);
	n = kvp_evict(c, "remote", 0);
	kvp_close(c);
	ck_assert_int_eq(n, PROMPTS * BLOCKS);
	for (i = 0; i < 300 && keys < n; i++) {
		usleep(50 * 1000);
		keys = dbsize(port);
	}
	stats_of(a.sock, &st);
	ck_assert_msg(keys == n, "%ld of %d evicted pages in Redis: %llu sent, %llu not "
		      "sent, %llu failed", keys, n, (unsigned long long)st.remote.puts,
		      (unsigned long long)st.remote.put_skipped,
		      (unsigned long long)st.remote.put_errors);
	ck_assert_uint_eq(st.remote.put_skipped, 0);
	ck_assert_uint_eq(st.remote.put_errors, 0);
	ck_assert_uint_gt(st.remote.disconnects, 0);	/* the stall was seen */
	check_conservation(a.sock);
	daemon_stop(&a);
}
END_TEST

START_TEST(test_remote_bad_url_stops_the_start)
{
	const char *argv[] = { harness_kvpoold(), "--foreground", "--socket",
			       "/tmp/kvp-remote-never.sock", "--remote-key-file", keyfile,
			       "--remote", "redis-cluster://h:0",
			       NULL };
	char out[4096];

	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "bad port") != NULL, "%s", out);
	ck_assert_msg(access("/tmp/kvp-remote-never.sock", F_OK) != 0, "it listened");
}
END_TEST

START_TEST(test_remote_plain_server_given_as_a_cluster_stops_the_start)
{
	char u[128], out[4096];
	const char *argv[] = { harness_kvpoold(), "--foreground", "--socket",
			       "/tmp/kvp-remote-never.sock", "--remote-key-file", keyfile,
			       "--remote", u, NULL };

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u", KVP_SRCDIR, dir, port), 0);
	snprintf(u, sizeof(u), "redis-cluster://127.0.0.1:%u", port);
	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "is not a Redis Cluster node") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "redis://127.0.0.1:") != NULL, "%s", out);	/* what to give */
	ck_assert_msg(access("/tmp/kvp-remote-never.sock", F_OK) != 0, "it listened");
}
END_TEST

/* A writer to Redis without the key: a kvpoold with a key file of its
 * own, serving the victim's prompts (same model, same salt: the same Redis
 * keys) with bytes of its choosing. Before values were sealed it could
 * recompute their checksums; now none of its values opens for the pools
 * of the real key, which count them as forged and serve them as misses,
 * while pools of the real key still share. */
START_TEST(test_remote_a_forger_without_the_key_gets_no_hit)
{
	char forger_key[128];
	const char *f_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", forger_key, "--remote-write", "through",
				 NULL };
	const char *b_args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
				 "--remote-key-file", keyfile, NULL };
	struct kvp_wire_stats st;
	struct daemon f, b;
	unsigned hits;

	cluster("start", NULL);
	cluster_url();
	snprintf(forger_key, sizeof(forger_key), "%s/forger.key", dir);
	ck_assert_int_eq(sh("(umask 077; head -c 32 /dev/urandom > %s)", forger_key), 0);
	daemon_start(&f, f_args);
	machine_a(f.sock);	/* its pages hold the right bytes: sealed otherwise */
	daemon_stop(&f);
	b_ready(&b, b_args);
	hits = machine_b(b.sock);
	ck_assert_uint_eq(hits, 0);
	stats_of(b.sock, &st);
	ck_assert_uint_gt(st.remote.forged, 0);
	ck_assert_uint_eq(st.remote.forged, st.remote.corrupt);
	ck_assert_uint_eq(st.remote.restored, 0);
	status_has(b.sock, "forged");
	check_conservation(b.sock);
	daemon_stop(&b);
}
END_TEST

/* --remote without a key file, or with one that others can read or that
 * is too short, stops the start, saying how to make one. */
START_TEST(test_remote_needs_a_key_file_of_its_own)
{
	char k[128], out[4096];
	const char *argv[] = { harness_kvpoold(), "--foreground", "--socket",
			       "/tmp/kvp-remote-never.sock", "--remote",
			       "redis-cluster://127.0.0.1:7000", NULL, NULL, NULL };

	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "--remote needs --remote-key-file") &&
		      strstr(out, "(umask 077; head -c 32 /dev/urandom > /etc/kvpool/remote.key)"),
		      "%s", out);
	snprintf(k, sizeof(k), "%s/open.key", dir);
	argv[6] = "--remote-key-file";
	argv[7] = k;
	ck_assert_int_eq(sh("head -c 32 /dev/urandom > %s && chmod 644 %s", k, k), 0);
	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "other users can read the key; chmod 600"), "%s", out);
	ck_assert_int_eq(sh("head -c 16 /dev/urandom > %s && chmod 600 %s", k, k), 0);
	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "16 bytes; it needs 32 or more"), "%s", out);
	ck_assert_msg(access("/tmp/kvp-remote-never.sock", F_OK) != 0, "it listened");
}
END_TEST

static Suite *remote_tier_suite(void)
{
	Suite *s = suite_create("remote_tier");
	TCase *tc;

/* KVP_TEST=name runs that test alone */
#define ADD(t) do { if (!getenv("KVP_TEST") || !strcmp(getenv("KVP_TEST"), #t)) \
			tcase_add_test(tc, t); } while (0)
	tc = tcase_create("daemon");
	tcase_add_checked_fixture(tc, rf_setup, rf_teardown);
	tcase_set_timeout(tc, 120);
	ADD(test_remote_daemons_share_prefixes_through_a_cluster);
	ADD(test_remote_a_waiting_acquire_gets_what_another_machine_publishes);
	ADD(test_remote_a_handoff_abandoned_on_one_machine_ends_the_wait_on_another);
	ADD(test_remote_idle_waits_ask_the_cluster_within_a_budget);
	ADD(test_remote_write_back_sends_what_leaves_the_pool);
	ADD(test_remote_fetched_blocks_are_not_sent_back);
	ADD(test_remote_daemon_counts_a_corrupted_value_as_a_miss);
	ADD(test_remote_client_policy_skips_a_slower_fetch);
	ADD(test_remote_daemon_reads_through_a_failover);
	ADD(test_remote_cluster_gone_and_back_leaves_the_daemon_serving);
	ADD(test_remote_unreachable_cluster_leaves_the_daemon_serving);
	ADD(test_remote_daemons_share_through_a_full_server);
	ADD(test_remote_a_shared_head_outlives_its_tails_in_a_full_server);
	ADD(test_remote_password_file_after_a_reconnect);
	ADD(test_remote_an_eviction_is_written_whole_through_caps_and_a_stall);
	ADD(test_remote_bad_url_stops_the_start);
	ADD(test_remote_a_forger_without_the_key_gets_no_hit);
	ADD(test_remote_needs_a_key_file_of_its_own);
	ADD(test_remote_plain_server_given_as_a_cluster_stops_the_start);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return rf_main(remote_tier_suite, "check_remote_tier");
}
