/* SPDX-License-Identifier: MIT */
/*
 * check_hostile.c - the remote tier's client against nodes that lie: a
 * scripted fake Redis (fake_redis.c) on loopback that speaks first,
 * answers twice, sends garbage, redirects to an address no map names,
 * names hosts instead of addresses, answers CLUSTERDOWN from a stale
 * map, or sends a CLUSTER SLOTS reply no cluster could. The tier must
 * drop what broke the protocol and count it, send nothing (no password
 * above all) where no map points, never resolve a name on the loop, and
 * never stall it; the daemon's process is this test's, so an abort()
 * in hiredis is a failed test.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "kvpool.h"
#include "fake_redis.h"
#include "daemon/loop/loop.h"
#include "daemon/remote/remote.h"
#include "daemon/store/backend.h"

#define PAGE 4096u

static struct loop L;
static struct backend BE;
static char dir[64];
static uint8_t ns_id[RPAGE_ID_BYTES];
static struct fake_redis A, B;
static char url[256];

static void setup(void)
{
	char err[256];
	const char *note;

	snprintf(dir, sizeof(dir), "/tmp/kvp-hostile-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(loop_init(&L, 256, LOOP_IO_AUTO, &note, err, sizeof(err)), 0);
	ck_assert_int_eq(backend_host_init(&BE, err, sizeof(err)), 0);
	memset(ns_id, 0x42, sizeof(ns_id));
	A.pid = B.pid = 0;
	A.lfd = B.lfd = -1;
}

static void teardown(void)
{
	char cmd[128];

	fake_stop(&A);
	fake_stop(&B);
	BE.ops->fini(&BE);
	loop_fini(&L);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "check_hostile: could not remove %s\n", dir);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* cpu_us() - the CPU time this thread (the loop's) has used, in us: a
 * turn's work, not the time a loaded machine kept it off a core. */
static uint64_t cpu_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* turn() - run the loop for ms; the most CPU time a single turn took, in
 * us (what it held every other client of the loop for). */
static uint64_t turn(uint64_t ms)
{
	uint64_t end = now_ms() + ms, worst = 0, t0;

	while (now_ms() < end) {
		t0 = cpu_us();
		loop_turn(&L, 10);
		if (cpu_us() - t0 > worst)
			worst = cpu_us() - t0;
	}
	return worst;
}

/* busy() - a child that spins on every CPU until killed: the loaded
 * machine the daemon shares with engines. Its pids in pids[] (n). */
static void busy(pid_t *pids, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			for (volatile unsigned long x = 0;; x++)
				;
		}
	}
}

static void unbusy(pid_t *pids, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
}

static struct remote *open_remote(void)
{
	static const char key[] = "thirty-two bytes of a key file, not random";
	struct remote_config c = { .url = url, .timeout_ms = 1000, .check_ms = 1000,
				   .key = key, .key_len = sizeof(key) };
	struct remote *r = NULL;
	const char *note;
	char err[512];

	ck_assert_msg(remote_open(&r, &L, &c, &note, err, sizeof(err)) == 0, "%s", err);
	return r;
}

static void close_remote(struct remote *r)
{
	remote_close(r);
	turn(100);
}

struct got {
	bool done;
	int res;
};

static void got_fn(void *arg, int res)
{
	struct got *g = arg;

	g->done = true;
	g->res = res;
}

/* get_one() - GET one page through r: its result, -EAGAIN when not sent. */
static int get_one(struct remote *r, unsigned i)
{
	static uint8_t page[PAGE];
	uint8_t key[KVP_KEY_BYTES] = { 0 };
	struct got g = { 0 };
	uint64_t end = now_ms() + 3000;

	memcpy(key, &i, sizeof(i));
	if (remote_get(r, &BE, ns_id, key, page, PAGE, got_fn, &g) < 0)
		return -EAGAIN;
	while (!g.done && now_ms() < end)
		loop_turn(&L, 10);
	ck_assert_msg(g.done, "a GET never ended");
	return g.res;
}

/* get_until() - GETs until one is sent and answered; its result. */
static int get_until(struct remote *r, uint64_t ms)
{
	uint64_t end = now_ms() + ms;
	unsigned i = 0;
	int res;

	while ((res = get_one(r, i++)) == -EAGAIN && now_ms() < end)
		turn(20);
	return res;
}

/* Item: a reply nobody asked for once made hiredis 0.14 assert, and the
 * daemon abort with its whole pool. */
static void unasked(const char *greeting, const char *after_get)
{
	struct fake_script s = { .greeting = greeting, .after_get = after_get };
	struct remote_stats st;
	struct remote *r;

	fake_listen(&A, dir);
	fake_run(&A, &s);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", A.port);
	r = open_remote();
	turn(300);
	if (after_get)	/* the GET is answered; the second answer drops it */
		ck_assert_int_eq(get_until(r, 2000), -ENOENT);
	turn(300);
	remote_get_stats(r, &st);
	ck_assert_uint_ge(st.errors, 1);
	ck_assert_uint_ge(fake_count(&A, "CLOSE"), 1);	/* we hung up */
	ck_assert_uint_ge(st.connects, 2);		/* and came back */
	close_remote(r);
}

START_TEST(test_hostile_a_node_that_speaks_first_is_dropped_not_fatal)
{
	unasked("+OK\r\n", NULL);
}
END_TEST

START_TEST(test_hostile_a_second_answer_to_a_get_is_dropped_not_fatal)
{
	unasked(NULL, "+OK\r\n");
}
END_TEST

START_TEST(test_hostile_garbage_on_the_wire_is_dropped_and_counted)
{
	unasked("%what\r\n", NULL);
}
END_TEST

/* Item: MOVED once made kvpoold connect to any host:port, send AUTH there
 * in the clear, and keep the node. */
START_TEST(test_hostile_a_redirect_no_map_names_gets_no_connection_nor_password)
{
	char slots[128], moved[64];
	struct fake_script s = { 0 }, t = { 0 };
	struct remote_stats st;
	struct remote *r;

	fake_listen(&A, dir);
	fake_listen(&B, dir);
	s.slots = fake_slots_all(slots, sizeof(slots), "127.0.0.1", A.port);
	snprintf(moved, sizeof(moved), "-MOVED 5 127.0.0.1:%u\r\n", B.port);
	s.get = moved;
	fake_run(&A, &s);
	fake_run(&B, &t);
	snprintf(url, sizeof(url), "redis-cluster://:s3cret@127.0.0.1:%u", A.port);
	r = open_remote();
	ck_assert_int_eq(get_until(r, 2000), -EIO);	/* a miss */
	turn(1500);					/* the map is read again */
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.redirects, 0);
	ck_assert_uint_ge(fake_count(&A, "CLUSTER SLOTS"), 2);
	ck_assert_uint_eq(fake_count(&B, "CONNECT"), 0);
	ck_assert_uint_eq(fake_count(&B, "AUTH"), 0);
	ck_assert_uint_eq(st.nodes, 1);
	close_remote(r);
}
END_TEST

/* A node that a new map no longer names is let go: its connection closes
 * and it stops counting. */
START_TEST(test_hostile_a_node_no_map_names_is_let_go)
{
	char first[256], later[128];
	struct fake_script s = { 0 }, t = { 0 };
	struct remote_stats st;
	struct remote *r;

	fake_listen(&A, dir);
	fake_listen(&B, dir);
	snprintf(first, sizeof(first), "*2\r\n*3\r\n:0\r\n:8191\r\n*2\r\n$9\r\n127.0.0.1\r\n:%u\r\n"
		 "*3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%u\r\n", A.port, B.port);
	s.slots = first;
	s.slots_later = fake_slots_all(later, sizeof(later), "127.0.0.1", A.port);
	s.get = "-CLUSTERDOWN Hash slot not served\r\n";	/* something changed */
	t.slots = s.slots_later;	/* B knows: A serves all */
	fake_run(&A, &s);
	fake_run(&B, &t);
	snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%u", A.port);
	r = open_remote();
	turn(300);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.nodes, 2);
	ck_assert_uint_eq(st.nodes_up, 2);
	ck_assert_uint_eq(fake_count(&B, "CONNECT"), 1);
	/* B serves half the keys; find one of A's */
	for (unsigned i = 0; i < 64 && fake_count(&A, "GET") == 0; i++)
		get_one(r, i);
	turn(1500);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.nodes, 1);
	ck_assert_uint_eq(st.nodes_up, 1);
	ck_assert_uint_eq(fake_count(&B, "CLOSE"), 1);
	close_remote(r);
}
END_TEST

/* Item: a map that stays wrong (a master removed from the cluster and
 * reset answers CLUSTERDOWN, and its own CLUSTER SLOTS still looks whole
 * to us) was never read again: it is, from another node. */
START_TEST(test_hostile_clusterdown_reads_the_map_from_another_node)
{
	char sa[128], sb[128];
	struct fake_script s = { 0 }, t = { 0 };
	struct remote_stats st;
	struct remote *r;

	fake_listen(&A, dir);
	fake_listen(&B, dir);
	s.slots = fake_slots_all(sa, sizeof(sa), "127.0.0.1", A.port);	/* stale, forever */
	s.get = "-CLUSTERDOWN Hash slot not served\r\n";
	t.slots = fake_slots_all(sb, sizeof(sb), "127.0.0.1", B.port);
	fake_run(&A, &s);
	fake_run(&B, &t);
	snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%u,127.0.0.1:%u", A.port, B.port);
	r = open_remote();
	ck_assert_int_eq(get_until(r, 2000), -EIO);
	turn(1500);
	ck_assert_int_eq(get_until(r, 2000), -ENOENT);	/* B answers: a plain miss */
	ck_assert_uint_ge(fake_count(&B, "GET"), 1);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.nodes, 1);
	ck_assert_uint_eq(st.slots, 16384);
	close_remote(r);
}
END_TEST

/* Item: 300,000 full-range entries once cost 8-10 s of the loop
 * (entries x slots), and still 244-279 ms once refused after one look at
 * each slot: hiredis read the whole reply (1.5 million objects) in one
 * turn and freed it in another. A reply is refused at its 65,536th
 * object now, and one turn reads at most 64 chunks: no turn's work is
 * near 10 ms, on a quiet machine and on one whose every CPU is busy. */
static void giant_slots(unsigned loaders)
{
	const unsigned n = 300000;
	char slots[128], moved[64], entry[96];
	struct fake_script s = { 0 };
	struct remote_stats st;
	struct remote *r;
	size_t el, len;
	char *giant;
	uint64_t worst, limit = 10000;
	pid_t pids[8];
	const char *mul = getenv("CK_TIMEOUT_MULTIPLIER");	/* sanitizers: 3 */
	int hl;

	if (mul && atoi(mul) > 1)
		limit *= (uint64_t)atoi(mul);
	fake_listen(&A, dir);
	s.slots = fake_slots_all(slots, sizeof(slots), "127.0.0.1", A.port);
	el = (size_t)snprintf(entry, sizeof(entry), "*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n"
			      "127.0.0.1\r\n:%u\r\n", A.port);
	giant = malloc(32 + el * n);
	ck_assert_ptr_nonnull(giant);
	hl = snprintf(giant, 32, "*%u\r\n", n);
	len = (size_t)hl;
	for (unsigned i = 0; i < n; i++, len += el)
		memcpy(giant + len, entry, el);
	s.slots_later = giant;
	s.slots_later_len = len;
	snprintf(moved, sizeof(moved), "-MOVED 5 127.0.0.1:%u\r\n", A.port);	/* re-read */
	s.get = moved;
	fake_run(&A, &s);
	free(giant);
	snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%u", A.port);
	r = open_remote();
	turn(300);	/* the first map, taken */
	busy(pids, loaders);
	get_until(r, 2000);
	worst = turn(3000);
	unbusy(pids, loaders);
	ck_assert_uint_ge(fake_count(&A, "CLUSTER SLOTS"), 2);
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "busiest turn: %llu us of CPU\n", (unsigned long long)worst);
	ck_assert_msg(worst < limit, "one turn of the loop took %llu us of CPU reading a "
		      "peer's reply (goal: under %llu)", (unsigned long long)worst,
		      (unsigned long long)limit);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.map_loads, 0);	/* the giant map was not taken */
	ck_assert_uint_eq(st.slots, 16384);	/* the first one stays */
	ck_assert_uint_ge(st.errors, 1);	/* the reply was refused, counted */
	close_remote(r);
}

START_TEST(test_hostile_a_giant_cluster_slots_is_refused_without_a_stall)
{
	giant_slots(0);
}
END_TEST

START_TEST(test_hostile_a_giant_cluster_slots_on_a_loaded_machine_is_refused_without_a_stall)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	giant_slots(cpus < 1 ? 1 : cpus > 8 ? 8 : (unsigned)cpus);
}
END_TEST

/* Item: host names from the cluster were resolved with a blocking
 * getaddrinfo on the loop; only addresses are taken from it now, while
 * the URL may name hosts (resolved at the start). */
START_TEST(test_hostile_host_names_from_the_cluster_are_not_resolved)
{
	char slots[256], moved[64];
	struct fake_script s = { 0 }, t = { 0 };
	struct remote_stats st;
	struct remote *r;

	fake_listen(&A, dir);
	fake_listen(&B, dir);
	snprintf(slots, sizeof(slots), "*2\r\n*3\r\n:0\r\n:8191\r\n*2\r\n$9\r\n127.0.0.1\r\n:%u\r\n"
		 "*3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\nlocalhost\r\n:%u\r\n", A.port, B.port);
	s.slots = slots;
	snprintf(moved, sizeof(moved), "-MOVED 5 localhost:%u\r\n", B.port);
	s.get = moved;
	fake_run(&A, &s);
	fake_run(&B, &t);
	snprintf(url, sizeof(url), "redis-cluster://localhost:%u", A.port);	/* a name: fine */
	r = open_remote();
	turn(300);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.slots, 8192);
	ck_assert_uint_eq(st.nodes_up, 1);
	for (unsigned i = 0; i < 16; i++)
		get_one(r, i);
	turn(300);
	ck_assert_uint_ge(fake_count(&A, "GET"), 1);
	ck_assert_uint_eq(fake_count(&B, "CONNECT"), 0);
	close_remote(r);
}
END_TEST

/* A request's done callback that closes the tier (a daemon stopping when
 * its last fetch ends): the tier is freed from the loop, after hiredis's
 * callbacks have returned, never under them (ASan sees a use after free
 * otherwise). */
struct closer {
	struct remote *r;
	bool done;
	int res;
};

static void close_in_done(void *arg, int res)
{
	struct closer *c = arg;

	c->done = true;
	c->res = res;
	remote_close(c->r);
}

START_TEST(test_hostile_closing_the_tier_from_a_done_callback_is_safe)
{
	static uint8_t page[PAGE];
	struct fake_script s = { 0 };
	uint8_t key[KVP_KEY_BYTES] = { 7 };
	struct closer c = { 0 };
	uint64_t end;

	fake_listen(&A, dir);
	fake_run(&A, &s);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", A.port);
	c.r = open_remote();
	turn(200);
	ck_assert_int_eq(remote_get(c.r, &BE, ns_id, key, page, PAGE, close_in_done, &c), 0);
	for (end = now_ms() + 3000; !c.done && now_ms() < end;)
		loop_turn(&L, 10);
	ck_assert(c.done);
	ck_assert_int_eq(c.res, -ENOENT);
	turn(200);	/* the tier's last operations end, and free it */
}
END_TEST

static Suite *hostile_suite(void)
{
	Suite *s = suite_create("hostile");
	TCase *tc = tcase_create("remote");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_hostile_a_node_that_speaks_first_is_dropped_not_fatal);
	tcase_add_test(tc, test_hostile_a_second_answer_to_a_get_is_dropped_not_fatal);
	tcase_add_test(tc, test_hostile_garbage_on_the_wire_is_dropped_and_counted);
	tcase_add_test(tc, test_hostile_a_redirect_no_map_names_gets_no_connection_nor_password);
	tcase_add_test(tc, test_hostile_a_node_no_map_names_is_let_go);
	tcase_add_test(tc, test_hostile_clusterdown_reads_the_map_from_another_node);
	tcase_add_test(tc, test_hostile_a_giant_cluster_slots_is_refused_without_a_stall);
	tcase_add_test(tc, test_hostile_a_giant_cluster_slots_on_a_loaded_machine_is_refused_without_a_stall);
	tcase_add_test(tc, test_hostile_host_names_from_the_cluster_are_not_resolved);
	tcase_add_test(tc, test_hostile_closing_the_tier_from_a_done_callback_is_safe);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	signal(SIGPIPE, SIG_IGN);
	sr = srunner_create(hostile_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
