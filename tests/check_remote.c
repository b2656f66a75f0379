/* SPDX-License-Identifier: MIT */
/*
 * check_remote.c - the remote tier's client (remote/) against real Redis
 * servers on loopback: a 6-node cluster (3 masters, 3 replicas) and plain
 * servers, started by tests/redis-cluster.sh from Debian's redis-server
 * (tests/redis_fixture.c). Pages of random bytes go in through one client
 * ("machine A") and come back through another ("machine B"), across
 * redirects, a killed master, a corrupted value, a full server and a
 * cluster that is not there yet. The tier in a real kvpoold is
 * check_remote_tier's. Exit 77 (SKIP) without redis-server.
 */
#include <errno.h>
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

#define PAGE	16384u
#define WINDOW	200u	/* GETs sent before waiting for them */

static struct loop L;
static struct backend BE;
static const char key_bytes[] = "thirty-two bytes of a key file, not random";
static uint8_t ns_id[RPAGE_ID_BYTES];

static void setup(void)
{
	char err[256];
	const char *note;

	rf_setup();
	ck_assert_int_eq(loop_init(&L, 256, LOOP_IO_AUTO, &note, err, sizeof(err)), 0);
	ck_assert_int_eq(backend_host_init(&BE, err, sizeof(err)), 0);
	memset(ns_id, 0x42, sizeof(ns_id));
	ns_id[0] = (uint8_t)getpid();
}

static void teardown(void)
{
	rf_teardown();
	BE.ops->fini(&BE);
	loop_fini(&L);
}

/* turn() - run the loop until *flag or ms passed. */
static void turn_until(const bool *flag, uint64_t ms)
{
	uint64_t end = now_ms() + ms;

	while ((!flag || !*flag) && now_ms() < end)
		loop_turn(&L, 10);
}

static void turn_ms(uint64_t ms)
{
	turn_until(NULL, ms);
}

/* settle_up() - turn the loop until every master r knows of answered (a
 * node takes requests once it answered its PING), or ms passed. */
static void settle_up(struct remote *r, uint64_t ms)
{
	uint64_t end = now_ms() + ms;
	struct remote_stats st;

	do {
		remote_get_stats(r, &st);
		if (st.nodes && st.nodes_up == st.nodes)
			return;
		loop_turn(&L, 10);
	} while (now_ms() < end);
}

static struct remote *open_remote(const char *u, uint32_t timeout_ms)
{
	struct remote_config c = { .url = u, .timeout_ms = timeout_ms, .key = key_bytes,
				   .key_len = sizeof(key_bytes) };
	struct remote *r = NULL;
	const char *note;
	char err[512];

	ck_assert_msg(remote_open(&r, &L, &c, &note, err, sizeof(err)) == 0, "%s", err);
	settle_up(r, 1000);
	return r;
}

static void close_remote(struct remote *r)
{
	remote_close(r);
	turn_ms(100);	/* what the ring held ends */
}

static void key_of(unsigned i, uint8_t key[KVP_KEY_BYTES])
{
	memset(key, 0, KVP_KEY_BYTES);
	memcpy(key, &i, sizeof(i));
	key[31] = 0xa5;
}

static void fill(uint8_t *page, unsigned i, unsigned seed)
{
	uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + seed + 1;
	unsigned k;

	for (k = 0; k < PAGE; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		page[k] = (uint8_t)x;
	}
}

/* Results of a batch of requests. */
struct batch {
	unsigned n, done;
	int *res;
	bool all;
};

struct one {
	struct batch *b;
	unsigned i;
};

static void done_fn(void *arg, int res)
{
	struct one *o = arg;

	o->b->res[o->i] = res;
	if (++o->b->done == o->b->n)
		o->b->all = true;
}

/* put_all() - put pages 0..n of seed through r; returns how many were
 * stored (0 replies). */
static unsigned put_all(struct remote *r, unsigned n, unsigned seed)
{
	struct batch b = { .n = n, .res = calloc(n, sizeof(int)) };
	struct one *o = calloc(n, sizeof(*o));
	uint8_t *page = malloc(PAGE), key[KVP_KEY_BYTES];
	unsigned i, ok = 0, sent = 0;

	for (i = 0; i < n; i++) {
		o[i] = (struct one){ &b, i };
		key_of(i, key);
		fill(page, i, seed);
		while (remote_put(r, &BE, ns_id, key, page, PAGE, done_fn, &o[i]) == -EAGAIN &&
		       sent < 100000) {
			loop_turn(&L, 1);	/* the in-flight cap: wait for answers */
			sent++;
		}
	}
	turn_until(&b.all, 10000);
	for (i = 0; i < n; i++)
		ok += b.res[i] == 0;
	free(b.res);
	free(o);
	free(page);
	return ok;
}

/* get_all() - get pages 0..n through r and check each; counts of right
 * pages and misses into *right and *missed; wrong bytes fail the test. */
static void get_all(struct remote *r, unsigned n, unsigned seed, unsigned *right,
		    unsigned *missed, void (*midway)(void))
{
	struct batch b = { .n = n, .res = calloc(n, sizeof(int)) };
	struct one *o = calloc(n, sizeof(*o));
	uint8_t *pages = calloc(n, PAGE), *want = malloc(PAGE), key[KVP_KEY_BYTES];
	uint64_t deadline = now_ms() + 20000;
	unsigned i;

	*right = *missed = 0;
	for (i = 0; i < n; i++) {
		if (i % WINDOW == 0 && i)	/* under the in-flight cap per node */
			while (b.done < i && now_ms() < deadline)
				loop_turn(&L, 10);
		o[i] = (struct one){ &b, i };
		key_of(i, key);
		memset(pages + (size_t)i * PAGE, 0xee, PAGE);
		if (remote_get(r, &BE, ns_id, key, pages + (size_t)i * PAGE, PAGE, done_fn,
			       &o[i]) < 0) {
			b.res[i] = -EAGAIN;	/* not sent: a miss at once */
			if (++b.done == n)
				b.all = true;
		}
		if (midway && i == n / 2)
			midway();
	}
	turn_until(&b.all, 15000);
	ck_assert_msg(b.all, "%u of %u requests never ended", n - b.done, n);
	for (i = 0; i < n; i++) {
		if (b.res[i] < 0) {
			if (getenv("KVP_TEST_VERBOSE"))
				fprintf(stderr, "page %u: %s\n", i, strerror(-b.res[i]));
			(*missed)++;
			continue;
		}
		fill(want, i, seed);
		ck_assert_msg(!memcmp(pages + (size_t)i * PAGE, want, PAGE),
			      "page %u came back with other bytes", i);
		(*right)++;
	}
	free(b.res);
	free(o);
	free(pages);
	free(want);
}


START_TEST(test_remote_two_machines_share_pages_through_a_cluster)
{
	struct remote *a, *b;
	struct remote_stats st;
	unsigned right, missed;

	cluster("start", NULL);
	a = open_remote(cluster_url(), 2000);
	b = open_remote(cluster_url(), 2000);
	ck_assert(remote_up(a));
	ck_assert_uint_eq(put_all(a, 1000, 1), 1000);
	get_all(b, 1000, 1, &right, &missed, NULL);
	ck_assert_uint_eq(right, 1000);
	remote_get_stats(b, &st);
	ck_assert_uint_eq(st.hits, 1000);
	ck_assert_uint_eq(st.nodes, 3);
	ck_assert_uint_eq(st.nodes_up, 3);
	ck_assert_uint_eq(st.slots, 16384);
	ck_assert_uint_gt(st.bandwidth, 0);
	ck_assert_uint_gt(st.latency_ns, 0);
	ck_assert_uint_eq(st.inflight, 0);
	ck_assert_uint_ne(remote_fetch_ns(b, 10, PAGE), UINT64_MAX);
	close_remote(a);
	close_remote(b);
}
END_TEST

START_TEST(test_remote_a_missing_key_is_a_miss)
{
	struct remote *r;
	struct remote_stats st;
	unsigned right, missed;

	cluster("start", NULL);
	r = open_remote(cluster_url(), 2000);
	get_all(r, 50, 1, &right, &missed, NULL);
	ck_assert_uint_eq(right, 0);
	ck_assert_uint_eq(missed, 50);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.misses, 50);
	ck_assert_uint_eq(st.corrupt, 0);
	close_remote(r);
}
END_TEST


/* corrupt_value() - damage the remote value of block i: one byte, or cut it off, with
 * redis-cli's cluster mode (-c) following the redirect. */
static void corrupt_value(unsigned i, bool truncate)
{
	char k[RPAGE_KEY_LEN + 1];
	uint8_t key[KVP_KEY_BYTES];

	key_of(i, key);
	rpage_key(ns_id, key, k);
	k[RPAGE_KEY_LEN] = '\0';
	if (truncate)	/* half a page: as if cut off */
		ck_assert_int_eq(sh("redis-cli -c -p %u eval \"local v = redis.call('get', "
				    "KEYS[1]); redis.call('set', KEYS[1], string.sub(v, 1, 8000)); "
				    "return 1\" 1 %s >/dev/null", port, k), 0);
	else		/* one byte of the data */
		setrange_one(k);
}

START_TEST(test_remote_a_corrupted_value_is_a_counted_miss)
{
	struct remote *r;
	struct remote_stats st;
	unsigned right, missed;

	cluster("start", NULL);
	r = open_remote(cluster_url(), 2000);
	ck_assert_uint_eq(put_all(r, 20, 7), 20);
	corrupt_value(3, false);
	corrupt_value(11, true);
	get_all(r, 20, 7, &right, &missed, NULL);
	ck_assert_uint_eq(right, 18);
	ck_assert_uint_eq(missed, 2);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.corrupt, 2);
	close_remote(r);
}
END_TEST

START_TEST(test_remote_follows_moved_after_resharding)
{
	struct remote *a, *b;
	struct remote_stats st;
	unsigned right, missed;

	cluster("start", NULL);
	a = open_remote(cluster_url(), 2000);
	b = open_remote(cluster_url(), 2000);	/* its map is from before the move */
	ck_assert_uint_eq(put_all(a, 300, 3), 300);
	/* move 2000 slots from the first master to the second */
	ck_assert_int_eq(sh("f=$(redis-cli -p %u cluster myid); t=$(redis-cli -p %u cluster myid); "
			    "redis-cli --cluster reshard 127.0.0.1:%u --cluster-from $f "
			    "--cluster-to $t --cluster-slots 2000 --cluster-yes >%s/reshard.log 2>&1",
			    port, port + 1, port, dir), 0);
	get_all(b, 300, 3, &right, &missed, NULL);
	ck_assert_uint_eq(right, 300);
	remote_get_stats(b, &st);
	ck_assert_uint_gt(st.redirects, 0);
	close_remote(a);
	close_remote(b);
}
END_TEST

/* A master leaves the way an operator removes one (rebalance to weight 0,
 * then del-node: CLUSTER FORGET everywhere, CLUSTER RESET on it) while a
 * client's map still names it. The reset node answers CLUSTERDOWN to
 * every GET of its former slots; that map was never read again, and
 * those slots stayed misses for good. Now the error makes the client
 * read the map from another node, and let the old master go. */
START_TEST(test_remote_a_removed_master_is_left_for_the_map_of_another)
{
	struct remote *r;
	struct remote_stats st;
	unsigned right, missed, i;

	cluster("start", "4 0");	/* 4 masters, no replicas */
	r = open_remote(cluster_url(), 2000);
	ck_assert_uint_eq(put_all(r, 400, 9), 400);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.nodes, 4);
	ck_assert_int_eq(sh("id=$(redis-cli -p %u cluster myid) && "
			    "redis-cli --cluster rebalance 127.0.0.1:%u --cluster-weight $id=0 "
			    "--cluster-yes >%s/rebalance.log 2>&1 && "
			    "redis-cli --cluster del-node 127.0.0.1:%u $id >%s/del.log 2>&1",
			    port + 3, port, dir, port, dir), 0);
	/* its keys moved with its slots; the client has not looked */
	for (i = 0; i < 3; i++) {	/* errors, then the map of another node */
		get_all(r, 400, 9, &right, &missed, NULL);
		if (right == 400)
			break;
		turn_ms(1500);
	}
	ck_assert_uint_eq(right, 400);
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.nodes, 3);
	ck_assert_uint_eq(st.nodes_up, 3);
	ck_assert_uint_eq(st.slots, 16384);
	close_remote(r);
}
END_TEST


START_TEST(test_remote_a_master_killed_during_reads_fails_over)
{
	struct remote *a, *b;
	struct remote_stats st;
	unsigned right, missed, i;

	cluster("start", NULL);
	a = open_remote(cluster_url(), 500);
	b = open_remote(cluster_url(), 500);
	ck_assert_uint_eq(put_all(a, 1000, 5), 1000);
	replica_in_sync();
	get_all(b, 1000, 5, &right, &missed, kill_first_master);
	/* misses or right bytes, never wrong ones (get_all checks) */
	ck_assert_uint_eq(right + missed, 1000);
	ck_assert_uint_gt(right, 0);
	/* the replica takes over; the daemon finds it and serves again */
	for (i = 0; i < 100; i++) {
		turn_ms(100);
		remote_get_stats(b, &st);
		if (st.nodes_up == 3 && st.slots == 16384)
			break;
	}
	ck_assert_msg(st.nodes_up == 3 && st.slots == 16384,
		      "after the failover: %u masters up, %u slots", st.nodes_up, st.slots);
	/* the replica had them all (the offsets above): every page comes back.
	 * The cluster's nodes learn of the failover one by one (gossip), and
	 * answer CLUSTERDOWN until they do: a read may miss meanwhile, but
	 * only for a moment, and never with wrong bytes */
	for (i = 0; i < 20; i++) {
		get_all(b, 1000, 5, &right, &missed, NULL);
		if (right == 1000)
			break;
		remote_get_stats(b, &st);
		fprintf(stderr, "after the failover, read %u: %u right, %u missed (%llu "
			"errors, %llu not sent, %u masters up)\n", i, right, missed,
			(unsigned long long)st.errors, (unsigned long long)st.skipped,
			st.nodes_up);
		turn_ms(250);
	}
	ck_assert_uint_eq(right, 1000);
	ck_assert_uint_lt(i, 8);	/* within 2 s */
	close_remote(a);
	close_remote(b);
}
END_TEST

START_TEST(test_remote_unreachable_at_start_comes_up_later)
{
	struct remote *r;
	struct remote_stats st;
	unsigned right, missed, i;
	uint64_t t0;

	r = open_remote(cluster_url(), 500);	/* nothing listens yet */
	ck_assert(!remote_up(r));
	ck_assert_uint_eq(remote_fetch_ns(r, 1, PAGE), UINT64_MAX);
	t0 = now_ms();
	get_all(r, 100, 2, &right, &missed, NULL);
	ck_assert_uint_eq(missed, 100);
	ck_assert_uint_lt(now_ms() - t0, 1000);		/* misses at once, no waiting */
	cluster("start", NULL);
	for (i = 0; i < 100 && !remote_up(r); i++)
		turn_ms(100);
	ck_assert(remote_up(r));
	for (i = 0; i < 50; i++) {	/* every master, not only the seed */
		remote_get_stats(r, &st);
		if (st.nodes_up == 3)
			break;
		turn_ms(100);
	}
	ck_assert_uint_eq(st.nodes_up, 3);
	ck_assert_uint_eq(put_all(r, 100, 2), 100);
	get_all(r, 100, 2, &right, &missed, NULL);
	ck_assert_uint_eq(right, 100);
	/* and gone again: misses at once, then back */
	sh("%s/tests/redis-cluster.sh stop %s", KVP_SRCDIR, dir);
	turn_ms(300);
	t0 = now_ms();
	get_all(r, 100, 2, &right, &missed, NULL);
	ck_assert_uint_eq(missed, 100);
	ck_assert_uint_lt(now_ms() - t0, 2000);
	ck_assert(!remote_up(r));
	close_remote(r);
}
END_TEST

START_TEST(test_remote_a_full_server_drops_pages_whole)
{
	struct remote *r;
	struct remote_stats st;
	unsigned right, missed;
	char u[128];

	/* one server of 4 MiB, allkeys-lru: 1000 pages of 16 KiB do not fit */
	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u 4mb", KVP_SRCDIR, dir,
			    port), 0);
	snprintf(u, sizeof(u), "redis://127.0.0.1:%u", port);
	r = open_remote(u, 2000);
	ck_assert_uint_eq(put_all(r, 1000, 9), 1000);
	get_all(r, 1000, 9, &right, &missed, NULL);
	ck_assert_uint_gt(right, 0);
	ck_assert_uint_gt(missed, 0);		/* evicted: whole pages */
	remote_get_stats(r, &st);
	ck_assert_uint_eq(st.corrupt, 0);	/* no half page anywhere */
	ck_assert_uint_eq(st.misses, missed);
	close_remote(r);
}
END_TEST

START_TEST(test_remote_wrong_kind_of_server_is_refused_at_start)
{
	struct remote_config c = { .key = key_bytes, .key_len = sizeof(key_bytes) };
	struct remote *r = NULL;
	const char *note;
	char u[128], err[512];

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u", KVP_SRCDIR, dir,
			    port + 10), 0);
	snprintf(u, sizeof(u), "redis-cluster://127.0.0.1:%u", port + 10);
	c.url = u;
	ck_assert_int_eq(remote_open(&r, &L, &c, &note, err, sizeof(err)), -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "is not a Redis Cluster node"));
	cluster("start", NULL);
	snprintf(u, sizeof(u), "redis://127.0.0.1:%u", port);
	ck_assert_int_eq(remote_open(&r, &L, &c, &note, err, sizeof(err)), -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "redis-cluster://"));
	c.url = "redis-cluster://127.0.0.1:99999";
	ck_assert_int_eq(remote_open(&r, &L, &c, &note, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "port"));
}
END_TEST

START_TEST(test_remote_auth)
{
	struct remote_config c = { .key = key_bytes, .key_len = sizeof(key_bytes) };
	struct remote *r = NULL;
	const char *note;
	char u[128], err[512];
	unsigned right, missed;

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u && redis-cli -p %u "
			    "config set requirepass s3cret >/dev/null", KVP_SRCDIR, dir, port,
			    port), 0);
	snprintf(u, sizeof(u), "redis://127.0.0.1:%u", port);
	c.url = u;
	ck_assert_int_eq(remote_open(&r, &L, &c, &note, err, sizeof(err)), -EACCES);
	ck_assert_ptr_nonnull(strstr(err, "password"));
	c.password = "wrong";
	ck_assert_int_eq(remote_open(&r, &L, &c, &note, err, sizeof(err)), -EACCES);
	c.password = NULL;
	snprintf(u, sizeof(u), "redis://:s3cret@127.0.0.1:%u", port);
	r = open_remote(u, 2000);
	ck_assert_uint_eq(put_all(r, 10, 4), 10);
	get_all(r, 10, 4, &right, &missed, NULL);
	ck_assert_uint_eq(right, 10);
	close_remote(r);
}
END_TEST

/* the password given (as --remote-password-file's is) in a buffer that
 * is zeroed once remote_open() returns: every reconnect still sends it */
START_TEST(test_remote_auth_again_after_a_reconnect)
{
	struct remote_config c = { .key = key_bytes, .key_len = sizeof(key_bytes) };
	struct remote_stats st;
	struct remote *r = NULL;
	const char *note;
	char u[128], err[512], pw[64];
	unsigned right, missed, i;

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u && redis-cli -p %u "
			    "config set requirepass s3cret >/dev/null", KVP_SRCDIR, dir, port,
			    port), 0);
	snprintf(u, sizeof(u), "redis://127.0.0.1:%u", port);
	snprintf(pw, sizeof(pw), "s3cret");
	c.url = u;
	c.password = pw;
	ck_assert_msg(remote_open(&r, &L, &c, &note, err, sizeof(err)) == 0, "%s", err);
	explicit_bzero(pw, sizeof(pw));
	ck_assert_uint_eq(put_all(r, 10, 5), 10);
	ck_assert_int_eq(sh("redis-cli -p %u -a s3cret --no-auth-warning client kill type normal "
			    ">/dev/null", port), 0);
	for (i = 0; i < 50; i++) {	/* the loss is seen, then the tick reconnects */
		turn_ms(100);
		remote_get_stats(r, &st);
		if (st.disconnects && remote_up(r))
			break;
	}
	ck_assert_uint_ge(st.disconnects, 1);
	ck_assert(remote_up(r));
	get_all(r, 10, 5, &right, &missed, NULL);
	ck_assert_uint_eq(right, 10);
	ck_assert_uint_eq(put_all(r, 10, 6), 10);
	close_remote(r);
}
END_TEST

static Suite *remote_suite(void)
{
	Suite *s = suite_create("remote");
	TCase *tc = tcase_create("cluster");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
/* KVP_TEST=name runs that test alone */
#define ADD(t) do { if (!getenv("KVP_TEST") || !strcmp(getenv("KVP_TEST"), #t)) \
			tcase_add_test(tc, t); } while (0)
	ADD(test_remote_two_machines_share_pages_through_a_cluster);
	ADD(test_remote_a_missing_key_is_a_miss);
	ADD(test_remote_a_corrupted_value_is_a_counted_miss);
	ADD(test_remote_follows_moved_after_resharding);
	ADD(test_remote_a_removed_master_is_left_for_the_map_of_another);
	ADD(test_remote_a_master_killed_during_reads_fails_over);
	ADD(test_remote_unreachable_at_start_comes_up_later);
	ADD(test_remote_a_full_server_drops_pages_whole);
	ADD(test_remote_wrong_kind_of_server_is_refused_at_start);
	ADD(test_remote_auth);
	ADD(test_remote_auth_again_after_a_reconnect);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return rf_main(remote_suite, "check_remote");
}
