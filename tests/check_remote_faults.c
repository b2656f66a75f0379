/* SPDX-License-Identifier: MIT */
/*
 * check_remote_faults.c - the remote tier in real kvpoold processes when
 * the cluster misbehaves or changes under it (docs/security.md, "Tenants
 * and peers, round two", R6 to R8), on real Redis servers from Debian's
 * redis-server (tests/redis_fixture.c): a node stopped with SIGSTOP (it
 * still accepts connections) is not taken for back until it answers, and
 * the back-off grows meanwhile; the backlog bounds the memory it names
 * while every master is stopped; SETs follow ASK during a real reshard.
 * Exit 77 (SKIP) without redis-server.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "kvpool.h"
#include "harness.h"
#include "redis_fixture.h"

#define BT 16u
#define PAGE 65536u	/* 2 x 4 layers x 4 heads x 64 x 16 tokens x f16 */

static const kvp_geometry geo = {
	.layers = 4, .kv_heads = 4, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/faults",
};

/* publish() - prompt p of blocks blocks through sock (write-through puts
 * each in Redis), each page filled for its key. */
static void publish(const char *sock, unsigned p, unsigned blocks)
{
	uint32_t *t = malloc((size_t)blocks * BT * sizeof(*t));
	kvp_page *pages = calloc(blocks, sizeof(*pages)), *out = calloc(blocks, sizeof(*out));
	kvp_key *keys = calloc(blocks, sizeof(*keys));
	kvp_client *c;
	unsigned i;

	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(kvp_connect(sock, "faults", &geo, &c), 0);
	for (i = 0; i < blocks * BT; i++)	/* no two prompts alike */
		t[i] = p * 4096 + i;
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, (size_t)blocks * BT, NULL, 0, keys),
			 (int)blocks);
	ck_assert_int_eq(kvp_alloc(c, blocks, pages), 0);
	for (i = 0; i < blocks; i++)
		harness_fill(kvp_page_ptr(c, pages[i]), PAGE, &keys[i]);
	ck_assert_int_eq(kvp_publish(c, NULL, pages, keys, blocks, KVP_PRIO_NORMAL, out), 0);
	ck_assert_int_eq(kvp_release(c, out, blocks), 0);
	kvp_close(c);
	free(t);
	free(pages);
	free(out);
	free(keys);
}

/* settled() - sock's remote tier has nothing in flight and is up; fails
 * the test after 30 s. */
static void settled(const char *sock, struct kvp_wire_stats *st)
{
	unsigned i;

	for (i = 0; i < 600; i++) {
		stats_of(sock, st);
		if (!st->remote.inflight && st->remote.up)
			return;
		usleep(50 * 1000);
	}
	ck_abort_msg("remote tier not settled: %llu in flight, up %llu",
		     (unsigned long long)st->remote.inflight, (unsigned long long)st->remote.up);
}

/* keys() - the keys the masters on ports port..port+n-1 hold. */
static long keys(unsigned n)
{
	char line[64];
	long k = 0;
	unsigned i;

	for (i = 0; i < n; i++) {
		sh_line(line, sizeof(line), "redis-cli -p %u dbsize", port + i);
		k += strtol(line, NULL, 10);
	}
	return k;
}

/* cluster_keys() - the keys the cluster's masters hold now. */
static long cluster_keys(void)
{
	char line[64];

	sh_line(line, sizeof(line), "for p in $(redis-cli -p %u cluster nodes | awk "
		"'/master/ && !/fail/ { split($2, a, \"[:@]\"); print a[2] }'); do "
		"redis-cli -p $p dbsize; done | awk '{ s += $1 } END { print s + 0 }'", port);
	return strtol(line, NULL, 10);
}

/* signal_node() - send sig to the Redis server on port p. */
static void signal_node(unsigned p, const char *sig)
{
	ck_assert_int_eq(sh("kill -%s $(cat %s/%u/pid)", sig, dir, p), 0);
}

/* under_asan() - process pid runs with AddressSanitizer, whose allocator
 * keeps freed memory in quarantine: its memory says nothing of ours. */
static bool under_asan(pid_t pid)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "grep -q libasan /proc/%d/maps", (int)pid);
	return sh("%s", cmd) == 0;
}

/*
 * A Redis server stopped with SIGSTOP still accepts TCP connections. The
 * node was taken for up as soon as TCP connected: its back-off went back
 * to 100 ms, "is back" was logged, and its waiting SETs were sent again
 * into a socket nobody read (162 "is back" lines in 60 s, the interval
 * never past 1.1 s, 28,000 SETs sent again). Now a node is up once it
 * answered a PING: while it is stopped, nothing says it is back, the
 * connects thin out as the back-off grows, no SET is sent to it, and
 * each page counts once; after SIGCONT it is back once and every page
 * is written.
 */
START_TEST(test_faults_a_frozen_node_is_not_back_until_it_answers)
{
	const char *args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
			       "--remote-key-file", keyfile, "--remote-write", "through",
			       "--remote-timeout", "200", NULL };
	struct kvp_wire_stats st0, st;
	struct daemon d;
	unsigned back;

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u", KVP_SRCDIR, dir, port), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
	daemon_start(&d, args);
	publish(d.sock, 0, 50);
	settled(d.sock, &st0);
	ck_assert_uint_eq(st0.remote.puts, 50);
	signal_node(port, "STOP");
	publish(d.sock, 1, 50);		/* 50 SETs meet the stopped node */
	publish(d.sock, 2, 50);
	sleep(8);
	stats_of(d.sock, &st);
	back = log_count(&d, " is back");
	ck_assert_msg(back == 0, "a stopped node was back %u times", back);
	ck_assert_uint_eq(log_count(&d, "dropping the connection"), 1);	/* one per change */
	/* 8 s of back-off from 100 ms, doubling to 5 s, each try 200 ms:
	 * about 6 tries (40 at 100 ms apart) */
	ck_assert_msg(st.remote.connects - st0.remote.connects <= 9, "%llu connects in 8 s",
		      (unsigned long long)(st.remote.connects - st0.remote.connects));
	ck_assert_msg(st.remote.puts <= 150, "%llu pages counted as sent (150 in all)",
		      (unsigned long long)st.remote.puts);
	signal_node(port, "CONT");
	publish(d.sock, 3, 50);
	settled(d.sock, &st);
	for (back = 0; back < 100 && keys(1) < 200; back++)
		usleep(50 * 1000);	/* SETs queued behind a back-off go */
	ck_assert_int_eq(keys(1), 200);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(log_count(&d, " is back"), 1);
	ck_assert_uint_eq(st.remote.puts, 200);		/* each page once */
	ck_assert_uint_eq(st.remote.put_errors, 0);
	ck_assert_uint_eq(st.remote.put_skipped, 0);
	check_conservation(d.sock);
	daemon_stop(&d);
}
END_TEST

/*
 * The same in a cluster: a master stopped with SIGSTOP (no replica takes
 * over; the others go on, cluster-require-full-coverage no). Every map
 * read after it was lost named it again, and that once put it back to a
 * 100 ms back-off: a try every few hundred milliseconds for as long as it
 * was stopped. Now a map that names a master it named before is no news:
 * the back-off grows, and the map is read at its usual pace.
 */
START_TEST(test_faults_a_frozen_master_backs_off_in_a_cluster)
{
	const char *args[] = { "--pool-size", "64M", "--slab-size", "4M", "--remote", url,
			       "--remote-key-file", keyfile, "--remote-write", "through",
			       "--remote-timeout", "200", NULL };
	struct kvp_wire_stats st0, st;
	struct daemon d;
	unsigned i;

	cluster("start", "3 0");
	ck_assert_int_eq(sh("for p in %u %u %u; do redis-cli -p $p config set "
			    "cluster-require-full-coverage no >/dev/null || exit 1; done", port,
			    port + 1, port + 2), 0);
	cluster_url();
	daemon_start(&d, args);
	publish(d.sock, 0, 50);
	settled(d.sock, &st0);
	signal_node(port, "STOP");
	publish(d.sock, 1, 50);
	sleep(8);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(log_count(&d, " is back"), 0);
	ck_assert_msg(st.remote.connects - st0.remote.connects <= 9, "%llu connects in 8 s",
		      (unsigned long long)(st.remote.connects - st0.remote.connects));
	ck_assert_msg(st.remote.map_loads - st0.remote.map_loads <= 12, "%llu map reads in 8 s",
		      (unsigned long long)(st.remote.map_loads - st0.remote.map_loads));
	signal_node(port, "CONT");
	publish(d.sock, 2, 50);
	for (i = 0; i < 200 && cluster_keys() < 150; i++)
		usleep(50 * 1000);	/* SETs queued behind a back-off go */
	ck_assert_int_eq(cluster_keys(), 150);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(log_count(&d, " is back"), 1);
	ck_assert_uint_eq(st.remote.puts, 150);
	ck_assert_uint_eq(st.remote.put_errors, 0);
	check_conservation(d.sock);
	daemon_stop(&d);
}
END_TEST

/*
 * With --remote-backlog 8M and every master stopped, kvpoold's memory
 * grew by 12.6 to 13 MiB (1.6 times the bound) and stayed there: hiredis'
 * output buffers held copies of the SETs the backlog held. Now what
 * hiredis holds counts against the same bound, and a connection takes
 * more only while its buffer is under 1 MiB: the private memory kvpoold
 * gains while 3 times the backlog is published stays within the bound
 * and a small margin (2 MiB a master, and the allocator's).
 */
START_TEST(test_faults_the_backlog_bounds_the_memory_it_names)
{
	const char *args[] = { "--pool-size", "128M", "--slab-size", "4M", "--remote", url,
			       "--remote-key-file", keyfile, "--remote-write", "through",
			       "--remote-timeout", "200", "--remote-backlog", "16M", NULL };
	struct kvp_wire_stats st;
	struct daemon d;
	long before, after;
	unsigned p;

	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh single %s %u", KVP_SRCDIR, dir, port), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
	daemon_start(&d, args);
	publish(d.sock, 0, 64);		/* what a first round of SETs allocates */
	settled(d.sock, &st);
	before = proc_kib(d.pid, "RssAnon");
	signal_node(port, "STOP");
	for (p = 1; p <= 12; p++)	/* 48 MiB of pages: 3 backlogs */
		publish(d.sock, p, 64);
	sleep(3);			/* reconnects, back-off */
	after = proc_kib(d.pid, "RssAnon");
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "kvpoold's private memory grew %ld KiB with a 16 MiB backlog\n",
			after - before);
	if (under_asan(d.pid))
		fprintf(stderr, "check_remote_faults: kvpoold runs under AddressSanitizer, whose "
			"quarantine keeps what is freed: its memory is not checked\n");
	else
		ck_assert_msg(after - before <= 16 * 1024 + 4 * 1024, "kvpoold grew %ld KiB "
			      "with --remote-backlog 16M and its master stopped", after - before);
	signal_node(port, "CONT");
	settled(d.sock, &st);
	ck_assert_uint_gt(st.remote.put_skipped, 0);	/* past the bound: counted */
	ck_assert_uint_eq(st.remote.put_errors, 0);
	check_conservation(d.sock);
	daemon_stop(&d);
}
END_TEST

/*
 * During a reshard a SET of a key in a slot being migrated gets ASK: it
 * must go to the target, after ASKING, as a GET does. SETs went back to
 * the map's owner instead, got ASK again, and failed (243 put errors in
 * one run of `redis-cli --cluster reshard`). A reshard moves one slot at
 * a time, for as long as its keys take; here 3,000 slots of the first
 * master move to the second at once, by the steps `redis-cli --cluster
 * reshard` takes for each (CLUSTER SETSLOT IMPORTING on the target and
 * MIGRATING on the source, MIGRATE of every key, then SETSLOT NODE on
 * the target and every master), so that SETs meet open slots for
 * certain: pages are published while the slots are open, while their
 * keys move, and after. No put error, and every page is in the cluster
 * afterwards.
 */
START_TEST(test_faults_sets_follow_ask_during_a_reshard)
{
	const char *args[] = { "--pool-size", "256M", "--slab-size", "4M", "--remote", url,
			       "--remote-key-file", keyfile, "--remote-write", "through", NULL };
	struct kvp_wire_stats st;
	struct daemon d;
	char done[160];
	unsigned p = 0, i;
	long pages;

	cluster("start", NULL);
	cluster_url();
	daemon_start(&d, args);
	publish(d.sock, p++, 64);	/* keys to move */
	settled(d.sock, &st);
	ck_assert_int_eq(sh("s=$(redis-cli -p %u cluster myid); t=$(redis-cli -p %u cluster myid); "
			    "seq 0 2999 | sed \"s/.*/CLUSTER SETSLOT & IMPORTING $s/\" | "
			    "redis-cli -p %u >/dev/null && "
			    "seq 0 2999 | sed \"s/.*/CLUSTER SETSLOT & MIGRATING $t/\" | "
			    "redis-cli -p %u >/dev/null", port, port + 1, port + 1, port), 0);
	while (p < 21)			/* about 60 of 320 SETs meet an open slot */
		publish(d.sock, p++, 16);
	settled(d.sock, &st);
	ck_assert_uint_gt(st.remote.redirects, 0);
	ck_assert_uint_eq(st.remote.put_errors, 0);
	/* the keys move, then the slots, while pages keep coming */
	snprintf(done, sizeof(done), "%s/move.done", dir);
	ck_assert_int_eq(sh("(t=$(redis-cli -p %u cluster myid); "
			    "redis-cli -p %u --scan | while read k; do "
			    "[ $(redis-cli -p %u cluster keyslot \"$k\") -lt 3000 ] && "
			    "redis-cli -p %u migrate 127.0.0.1 %u \"$k\" 0 5000 >/dev/null; done; "
			    "for n in %u %u %u; do seq 0 2999 | "
			    "sed \"s/.*/CLUSTER SETSLOT & NODE $t/\" | redis-cli -p $n >/dev/null; "
			    "done; echo $? >%s) >%s/move.log 2>&1 &", port + 1, port, port, port,
			    port + 1, port + 1, port, port + 2, done, dir), 0);
	while (access(done, F_OK) != 0 && p < 400)
		publish(d.sock, p++, 16);
	for (i = 0; i < 600 && access(done, F_OK) != 0; i++)
		usleep(100 * 1000);
	ck_assert_msg(access(done, F_OK) == 0, "the move did not end");
	ck_assert_int_eq(sh("test \"$(cat %s)\" = 0", done), 0);
	while (p < 420)			/* and after: MOVED to the new owner */
		publish(d.sock, p++, 16);
	settled(d.sock, &st);
	pages = 64 + (long)(p - 1) * 16;
	for (i = 0; i < 100 && cluster_keys() < pages; i++)
		usleep(50 * 1000);
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "%ld pages, %llu redirects, %llu puts, %llu skipped, %llu errors, "
			"%ld keys\n", pages, (unsigned long long)st.remote.redirects,
			(unsigned long long)st.remote.puts,
			(unsigned long long)st.remote.put_skipped,
			(unsigned long long)st.remote.put_errors, cluster_keys());
	ck_assert_uint_eq(st.remote.put_errors, 0);
	ck_assert_uint_eq(st.remote.put_skipped, 0);
	ck_assert_int_eq(cluster_keys(), pages);
	check_conservation(d.sock);
	daemon_stop(&d);
}
END_TEST

static Suite *faults_suite(void)
{
	Suite *s = suite_create("remote_faults");
	TCase *tc = tcase_create("faults");

	tcase_add_checked_fixture(tc, rf_setup, rf_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_faults_a_frozen_node_is_not_back_until_it_answers);
	tcase_add_test(tc, test_faults_a_frozen_master_backs_off_in_a_cluster);
	tcase_add_test(tc, test_faults_the_backlog_bounds_the_memory_it_names);
	tcase_add_test(tc, test_faults_sets_follow_ask_during_a_reshard);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return rf_main(faults_suite, "check_remote_faults");
}
