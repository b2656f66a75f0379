/* SPDX-License-Identifier: MIT */
/*
 * check_remote_tenants.c - namespaces stay apart through the remote tier
 * (docs/security.md, "Tenants and peers, round two", finding 1): real
 * root kvpoold processes with --access rules, a real Redis Cluster on
 * loopback (tests/redis_fixture.c), and a tenant's client process that
 * drops to nobody and writes pages of its choosing into its own
 * namespace. Another namespace of the same model, on the same machine or
 * on another that shares the cluster, never serves them; a namespace of
 * the same name on two machines still shares, and so do the namespaces a
 * --remote-share rule names (read again on SIGHUP). Exit 77 (SKIP)
 * without redis-server; the tests that change uid need root.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "kvpool.h"
#include "harness.h"
#include "redis_fixture.h"

#define BT 16u
#define BLOCKS 4u	/* the attack's prompt: 4 blocks */
#define PAGE 16384u	/* 2 x 2 layers x 2 heads x 64 x 16 tokens x f16 */

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/remote",
};

/* start() - a root kvpoold whose config file has lines after `socket-group
 * = nogroup`, the remote tier on this test's cluster with write-through,
 * in a directory nobody may reach the socket of. conf receives the file's
 * path (for a SIGHUP). */
static void start(struct daemon *d, char *conf, size_t conflen, const char *lines)
{
	const char *args[] = { "-c", conf, "--pool-size", "16M", "--slab-size", "1M",
			       "--remote", url, "--remote-key-file", keyfile,
			       "--remote-write", "through", NULL };
	FILE *f;

	daemon_dir(d);
	ck_assert_int_eq(chmod(d->dir, 0711), 0);
	snprintf(conf, conflen, "%s/kvpoold.conf", d->dir);
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "socket-group = nogroup\n%s", lines);
	ck_assert_int_eq(fclose(f), 0);
	daemon_restart(d, args);
}

/* prompt_keys() - the block keys of the test's one prompt in c's namespace. */
static int prompt_keys(kvp_client *c, kvp_key *keys)
{
	uint32_t t[BLOCKS * BT];

	harness_tokens(t, BLOCKS * BT, BLOCKS * BT, 0);
	return kvp_block_keys(c, NULL, t, BLOCKS * BT, NULL, 0, keys);
}

/* publish() - through sock, into namespace ns, the prompt's blocks: each
 * page filled for its key (the right bytes) or, when forged, with 0xee
 * (bytes of the writer's choosing). No assert: children call it too;
 * returns 0 or the step that failed. */
static int publish(const char *sock, const char *ns, bool forged)
{
	kvp_page pages[BLOCKS], out[BLOCKS];
	kvp_key keys[BLOCKS];
	kvp_client *c;
	unsigned i;

	if (kvp_connect(sock, ns, &geo, &c) != 0)
		return 1;
	if (prompt_keys(c, keys) != (int)BLOCKS || kvp_alloc(c, BLOCKS, pages) != 0)
		return 2;
	for (i = 0; i < BLOCKS; i++) {
		if (forged)
			memset(kvp_page_ptr(c, pages[i]), 0xee, PAGE);
		else
			harness_fill(kvp_page_ptr(c, pages[i]), PAGE, &keys[i]);
	}
	if (kvp_publish(c, NULL, pages, keys, BLOCKS, KVP_PRIO_NORMAL, out) != 0 ||
	    kvp_release(c, out, BLOCKS) != 0)
		return 3;
	kvp_close(c);
	return 0;
}

/* tenant_publishes() - as nobody, the forged prompt into namespace ns. */
static void tenant_publishes(const char *sock, const char *ns)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int rc;

		become_nobody();
		rc = publish(sock, ns, true);
		_exit(rc ? 10 + rc : 0);
	}
	child_wait(pid);
}

/* puts_settled() - sock's remote tier has answered puts SETs (write-through). */
static void puts_settled(const char *sock, uint64_t puts)
{
	struct kvp_wire_stats st;
	unsigned i;

	for (i = 0; i < 200; i++) {
		stats_of(sock, &st);
		if (st.remote.puts >= puts && !st.remote.inflight)
			return;
		usleep(25 * 1000);
	}
	ck_abort_msg("%llu of %llu SETs answered", (unsigned long long)st.remote.puts,
		     (unsigned long long)puts);
}

/* forged() - page holds the forger's bytes. */
static bool forged(const void *page)
{
	static uint8_t mark[PAGE];

	memset(mark, 0xee, sizeof(mark));
	return !memcmp(page, mark, PAGE);
}

/*
 * acquire_prompt() - as root, the prompt's blocks from namespace ns
 * through sock: the blocks served. Every page served must hold its key's
 * bytes; it fails first when any holds the forger's.
 */
static unsigned acquire_prompt(const char *sock, const char *ns)
{
	kvp_page out[BLOCKS];
	kvp_key keys[BLOCKS];
	unsigned bad = 0;
	kvp_client *c;
	int h, i;

	ck_assert_int_eq(kvp_connect(sock, ns, &geo, &c), 0);
	ck_assert_int_eq(prompt_keys(c, keys), BLOCKS);
	h = kvp_acquire(c, NULL, keys, BLOCKS, NULL, 0, out, NULL);
	ck_assert_msg(h >= 0, "acquire: %s %s", kvp_strerror(h), kvp_last_error());
	for (i = 0; i < h; i++)
		bad += forged(kvp_page_ptr(c, out[i]));
	ck_assert_msg(!bad, "namespace '%s' served %u of %d blocks with the bytes "
		      "another namespace's writer chose", ns, bad, h);
	for (i = 0; i < h; i++)
		ck_assert_msg(harness_holds(kvp_page_ptr(c, out[i]), PAGE, &keys[i]),
			      "block %d of '%s' came back with other bytes", i, ns);
	if (h)
		ck_assert_int_eq(kvp_release(c, out, (size_t)h), 0);
	kvp_close(c);
	return (unsigned)h;
}

/*
 * A tenant with write rights on namespace evil only, of the same model
 * as namespace prod, publishes the prompt with bytes of its choosing
 * (write-through puts them in Redis at once). prod, on the same machine
 * and on a machine that shares the cluster, must not serve them: before
 * the namespace's name entered its remote identity, both served all 4
 * blocks of it as hits. prod of the two machines still shares.
 */
START_TEST(test_tenants_one_namespace_never_serves_another_s_remote_pages)
{
	char ca[128], cb[128];
	struct kvp_wire_stats st;
	struct daemon a, b;

	if (!harness_have_nobody()) {
		fprintf(stderr, "SKIP test: needs root and the user nobody\n");
		return;
	}
	cluster("start", NULL);
	cluster_url();
	start(&a, ca, sizeof(ca), "access = evil read,write nobody\n");
	start(&b, cb, sizeof(cb), "access = evil read,write nobody\n");
	tenant_publishes(a.sock, "evil");
	puts_settled(a.sock, BLOCKS);
	ck_assert_uint_eq(acquire_prompt(a.sock, "prod"), 0);	/* the same machine */
	ck_assert_uint_eq(acquire_prompt(b.sock, "prod"), 0);	/* another one */
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.restored, 0);
	/* prod on two machines still shares: A publishes, B reads from Redis */
	ck_assert_int_eq(publish(a.sock, "prod", false), 0);
	puts_settled(a.sock, 2 * BLOCKS);
	ck_assert_uint_eq(acquire_prompt(b.sock, "prod"), BLOCKS);
	stats_of(b.sock, &st);
	ck_assert_uint_eq(st.remote.restored, BLOCKS);
	check_conservation(a.sock);
	check_conservation(b.sock);
	daemon_stop(&a);
	daemon_stop(&b);
}
END_TEST

/* rehup() - a new config file for d, applied by SIGHUP. */
static void rehup(struct daemon *d, const char *conf, const char *lines, const char *logged)
{
	FILE *f = fopen(conf, "w");

	ck_assert_ptr_nonnull(f);
	fprintf(f, "socket-group = nogroup\n%s", lines);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(kill(d->pid, SIGHUP), 0);
	wait_log(d, logged);
}

/*
 * --remote-share names namespaces that trust each other's writers: prod-a
 * on machine A and prod-b on machine B share once both machines say so
 * (a SIGHUP reads the rule); a namespace no rule names stays apart,
 * whatever its model, and a rule that names one twice is refused whole.
 */
START_TEST(test_tenants_remote_share_rules_name_who_shares)
{
	char ca[128], cb[128];
	struct daemon a, b;

	cluster("start", NULL);
	cluster_url();
	start(&a, ca, sizeof(ca), "remote-share = llama prod-a,prod-b\n");
	start(&b, cb, sizeof(cb), "");
	ck_assert_int_eq(publish(a.sock, "prod-a", false), 0);
	puts_settled(a.sock, BLOCKS);
	ck_assert_uint_eq(acquire_prompt(b.sock, "prod-b"), 0);	/* B has no rule */
	rehup(&b, cb, "remote-share = llama prod-b\n", "1 remote-share rules");
	wait_log(&b, "namespace 'prod-b': shares remote pages as 'llama' now");
	ck_assert_uint_eq(acquire_prompt(b.sock, "prod-b"), BLOCKS);
	ck_assert_uint_eq(acquire_prompt(b.sock, "other"), 0);	/* not in the share */
	/* a rule that names a namespace twice is refused whole: the old rules
	 * stay */
	rehup(&b, cb, "remote-share = llama prod-b\nremote-share = x prod-b\n",
	      "is in two rules ('llama' and 'x')");
	ck_assert_uint_eq(acquire_prompt(b.sock, "prod-c"), 0);
	check_conservation(a.sock);
	check_conservation(b.sock);
	daemon_stop(&a);
	daemon_stop(&b);
}
END_TEST

/* A share rule that names a namespace twice, or a bad name, stops the
 * start, saying which. */
START_TEST(test_tenants_bad_remote_share_rules_stop_the_start)
{
	const char *argv[] = { harness_kvpoold(), "--foreground", "--socket",
			       "/tmp/kvp-remote-never.sock", "--remote-share", "a x,y",
			       "--remote-share", NULL, NULL };
	char out[4096];

	argv[7] = "b y";
	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "'y' is in two rules ('a' and 'b')"), "%s", out);
	argv[7] = "b bad!name";
	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "'bad!name' is not a namespace name or *"), "%s", out);
	argv[7] = "b";
	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "is not NAME NAMESPACE[,NAMESPACE...]"), "%s", out);
	ck_assert_msg(access("/tmp/kvp-remote-never.sock", F_OK) != 0, "it listened");
}
END_TEST

static Suite *tenants_suite(void)
{
	Suite *s = suite_create("remote_tenants");
	TCase *tc = tcase_create("tenants");

	tcase_add_checked_fixture(tc, rf_setup, rf_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_tenants_one_namespace_never_serves_another_s_remote_pages);
	tcase_add_test(tc, test_tenants_remote_share_rules_name_who_shares);
	tcase_add_test(tc, test_tenants_bad_remote_share_rules_stop_the_start);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return rf_main(tenants_suite, "check_remote_tenants");
}
