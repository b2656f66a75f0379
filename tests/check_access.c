/* SPDX-License-Identifier: MIT */
/*
 * check_access.c - integration tests of the --access rules: a real
 * kvpoold, and client processes that drop to another uid (nobody) before
 * they connect, refused or allowed exactly as the rules say; rules read
 * again on SIGHUP, wider rights taking effect on live connections (taking
 * rights away is in check_security); rule errors at start-up. The
 * tests that change uid need root; without it they are not run (and the
 * runner says so).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"

#define PAGE 4096u	/* 2 x 1 layer x 1 head x 64 x 16 tokens x f16 */

static const kvp_geometry geo = {
	.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "test/access",
};

/* write_config() - the config file of d with the given rules. */
static void write_config(const struct daemon *d, const char *path, const char *rules)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fprintf(f, "# written by check_access\nsocket-group = nogroup\n%s", rules);
	ck_assert_int_eq(fclose(f), 0);
	(void)d;
}

/* rights_of() - what LIST_CLIENTS says nobody's client in ns may do. */
static uint32_t rights_of(const char *sock, const char *ns)
{
	struct kvp_wire_client r[16];
	kvp_client *c;
	int n, i;
	uint32_t rights = 0xffffffffu;

	ck_assert_int_eq(kvp_connect(sock, NULL, NULL, &c), 0);
	n = kvp_list_clients(c, r, 16, NULL);
	ck_assert_int_ge(n, 0);
	for (i = 0; i < n && i < 16; i++)
		if (r[i].uid == (uint32_t)harness_nobody_uid && !strcmp(r[i].ns, ns))
			rights = r[i].rights;
	kvp_close(c);
	ck_assert_msg(rights != 0xffffffffu, "no client of nobody in '%s'", ns);
	return rights;
}

START_TEST(test_access_rules_allow_and_refuse_a_real_peer)
{
	const char *rules =
		"access = shared read @nogroup\n"
		"access = scratch read,write,admin 65534\n";
	char conf[256];
	const char *args[] = { "-c", conf, NULL };
	int go[2], ready[2], status;
	kvp_key key = { { 1 } };
	kvp_client *root;
	kvp_stats_t st;
	struct daemon d;
	kvp_page p[2];
	pid_t pid;
	char b;

	daemon_dir(&d);
	ck_assert_int_eq(chmod(d.dir, 0711), 0);	/* nobody may reach the socket */
	snprintf(conf, sizeof(conf), "%s/kvpoold.conf", d.dir);
	write_config(&d, conf, rules);
	daemon_restart(&d, args);
	/* root publishes a page in 'shared' for the reader to find */
	ck_assert_int_eq(kvp_connect(d.sock, "shared", &geo, &root), 0);
	ck_assert_int_eq(kvp_alloc(root, 1, p), 0);
	harness_fill(kvp_page_ptr(root, p[0]), PAGE, &key);
	ck_assert_int_eq(kvp_publish(root, NULL, p, &key, 1, 1, p), 0);
	ck_assert_int_eq(kvp_release(root, p, 1), 0);
	kvp_close(root);
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *sh, *sc, *pv;
		kvp_page q[2];
		pid_t w;
		int ws;

		become_nobody();
		/* read only: joins, acquires, may not allocate */
		expect(kvp_connect(d.sock, "shared", &geo, &sh) == 0, 10);
		expect(kvp_alloc(sh, 1, q) == -EACCES, 11);
		expect(strstr(kvp_last_error(), "ALLOC needs write rights in namespace "
			      "'shared'"), 12);
		expect(kvp_acquire(sh, NULL, &key, 1, NULL, 0, q, NULL) == 1, 13);
		/* it reads the page; its mapping is read-only, so a write faults */
		expect(harness_holds(kvp_page_ptr(sh, q[0]), PAGE, &key), 26);
		w = fork();
		if (w == 0) {
			signal(SIGSEGV, SIG_DFL);	/* not a sanitizer's report */
			((volatile char *)kvp_page_ptr(sh, q[0]))[0] ^= 1;
			_exit(0);
		}
		expect(waitpid(w, &ws, 0) == w && WIFSIGNALED(ws) &&
		       WTERMSIG(ws) == SIGSEGV, 27);
		expect(harness_holds(kvp_page_ptr(sh, q[0]), PAGE, &key), 28);
		expect(kvp_release(sh, q, 1) == 0, 29);
		/* no rule: may not even join */
		expect(kvp_connect(d.sock, "private", &geo, &pv) == -EACCES, 14);
		expect(strstr(kvp_last_error(), "may not use namespace 'private'"), 15);
		/* read, write and admin of its own namespace by uid */
		expect(kvp_connect(d.sock, "scratch", &geo, &sc) == 0, 16);
		expect(kvp_alloc(sc, 2, q) == 0, 17);
		expect(kvp_release(sc, q, 2) == 0, 18);
		expect(kvp_evict(sc, "scratch", 0) >= 0, 19);
		expect(kvp_evict(sc, "shared", 0) == -EACCES, 20);
		expect(kvp_evict(sc, NULL, 0) == -EACCES, 21);
		/* SIGHUP gives write on 'shared' to the same connection */
		expect(write(ready[1], "r", 1) == 1, 22);
		expect(read(go[0], &b, 1) == 1, 23);
		expect(kvp_alloc(sh, 2, q) == 0, 24);
		expect(kvp_release(sh, q, 2) == 0, 25);
		kvp_close(sh);
		kvp_close(sc);
		_exit(0);
	}
	close(ready[1]);	/* so that a child that died reads as EOF */
	close(go[0]);
	if (read(ready[0], &b, 1) != 1) {
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_abort_msg("the child failed at step %d (see its message above)",
			     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
	ck_assert_uint_eq(rights_of(d.sock, "shared"), KVP_RIGHT_READ);
	ck_assert_uint_eq(rights_of(d.sock, "scratch"),
			  KVP_RIGHT_READ | KVP_RIGHT_WRITE | KVP_RIGHT_ADMIN);
	write_config(&d, conf, "access = shared read,write @nogroup\n"
			       "access = scratch read,write,admin 65534\n");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	wait_log(&d, "SIGHUP: 2 access rules");
	ck_assert_uint_eq(rights_of(d.sock, "shared"), KVP_RIGHT_READ | KVP_RIGHT_WRITE);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child failed at step %d (see its message above)",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	/* root has every right whatever the rules; the refusals are counted */
	ck_assert_int_eq(kvp_connect(d.sock, "private", &geo, &root), 0);
	ck_assert_int_eq(kvp_alloc(root, 2, p), 0);
	ck_assert_int_eq(kvp_release(root, p, 2), 0);
	ck_assert_int_ge(kvp_stats(root, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.requests_denied, 4);
	kvp_close(root);
	close(go[1]);
	close(ready[0]);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_access_broken_file_on_sighup_keeps_the_rules)
{
	char conf[256];
	const char *args[] = { "-c", conf, NULL };
	int status;
	struct daemon d;
	pid_t pid;

	daemon_dir(&d);
	ck_assert_int_eq(chmod(d.dir, 0711), 0);
	snprintf(conf, sizeof(conf), "%s/kvpoold.conf", d.dir);
	write_config(&d, conf, "access = shared read,write @nogroup\n");
	daemon_restart(&d, args);
	write_config(&d, conf, "access = shared read,write @no-such-group-here\n");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	wait_log(&d, "no group 'no-such-group-here'");
	wait_log(&d, "the access rules stay as they are (1)");
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *c;
		kvp_page q[1];

		become_nobody();
		expect(kvp_connect(d.sock, "shared", &geo, &c) == 0, 10);
		expect(kvp_alloc(c, 1, q) == 0, 11);
		kvp_close(c);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child step %d",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_access_admin_group_counts_a_supplementary_group)
{
	const char *args[] = { "--socket-group", "nogroup", "--admin-group", "nogroup",
			       "--access", "* read,write 65534", NULL };
	struct group *other = getgrnam("daemon");
	struct daemon d;
	int status;
	pid_t pid;

	ck_assert_ptr_nonnull(other);	/* gid 1 on Debian */
	daemon_dir(&d);
	ck_assert_int_eq(chmod(d.dir, 0711), 0);
	daemon_restart(&d, args);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *k;

		/* nogroup only as a supplementary group: the primary is another */
		if (setgroups(1, &harness_nogroup_gid) < 0 || setgid(other->gr_gid) < 0 ||
		    setuid(harness_nobody_uid) < 0)
			_exit(90);
		expect(kvp_connect(d.sock, "any", &geo, &k) == 0, 10);
		expect(kvp_evict(k, NULL, 0) >= 0, 11);	/* every namespace: a daemon admin */
		kvp_close(k);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child step %d",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_access_max_clients_keeps_room_for_an_admin)
{
	/* a user's connection past --max-clients is refused; root's (a
	 * daemon admin's: `kvpool status`, a container's probes) is not */
	const char *args[] = { "--socket-group", "nogroup", "--max-clients", "1", NULL };
	kvp_client *a, *b;
	kvp_stats_t st;
	struct daemon d;
	int status;
	pid_t pid;

	daemon_dir(&d);
	ck_assert_int_eq(chmod(d.dir, 0711), 0);
	daemon_restart(&d, args);
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &a), 0);
	ck_assert_int_eq(kvp_stats(a, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.clients, 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *k;

		become_nobody();
		expect(kvp_connect(d.sock, NULL, NULL, &k) == -EDQUOT, 10);
		expect(strstr(kvp_last_error(), "max-clients") != NULL, 11);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child step %d",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &b), 0);
	ck_assert_int_eq(kvp_stats(b, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.clients, 2);
	ck_assert_uint_eq(st.connections_refused, 1);
	kvp_close(b);
	kvp_close(a);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_access_bad_rules_stop_start_up_with_the_reason)
{
	static const struct {
		const char *rule, *says;
	} bad[] = {
		{ "shared read", "is not NAMESPACE RIGHTS WHO" },
		{ "shared peek @nogroup", "rights 'peek' are not read, write, admin or all" },
		{ "shared read no-such-user-here", "no user 'no-such-user-here'" },
		{ "shared read @no-such-group-here", "no group 'no-such-group-here'" },
		{ "shared read a b", "is not NAMESPACE RIGHTS WHO" },
	};
	char out[4096];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = { harness_kvpoold(), "--foreground", "--socket",
				       "/nonexistent/kvpool.sock", "--access", bad[i].rule,
				       NULL };

		int st = run_cmd(argv, out, sizeof(out));

		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d: %s", st, out);
		ck_assert_msg(strstr(out, bad[i].says) && strstr(out, "--access"),
			      "rule '%s': %s", bad[i].rule, out);
	}
}
END_TEST

/* connect_as_nobody() - kvp_connect to sock as nobody in a child: the
 * error it returned and kvp_last_error() into why. */
static int connect_as_nobody(const char *sock, char *why, size_t len)
{
	int p[2], rc = 0;
	kvp_client *c;
	pid_t pid;

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char buf[1024];

		close(p[0]);
		become_nobody();
		rc = kvp_connect(sock, NULL, NULL, &c);
		snprintf(buf, sizeof(buf), "%d %s", rc, kvp_last_error());
		if (write(p[1], buf, strlen(buf) + 1) < 0)
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	memset(why, 0, len);
	ck_assert_int_gt(read(p[0], why, len - 1), 0);
	close(p[0]);
	child_wait(pid);
	sscanf(why, "%d", &rc);
	return rc;
}

START_TEST(test_access_a_refused_connection_names_the_path_its_mode_and_what_to_do)
{
	char why[1024], want[256];
	struct daemon d;

	daemon_dir(&d);
	daemon_restart(&d, NULL);
	/* the test's directory is 0700: nobody may not even search it */
	ck_assert_int_eq(connect_as_nobody(d.sock, why, sizeof(why)), -EACCES);
	snprintf(want, sizeof(want), "its directory %s is mode 0700, owner root, group root, "
		 "which lets user nobody (uid %u) not search it", d.dir,
		 (unsigned)harness_nobody_uid);
	ck_assert_msg(strstr(why, want), "%s", why);
	ck_assert_msg(strstr(why, d.sock), "%s", why);
	/* searchable: the socket, 0660 in group root, is what stops it; joining
	 * group root is never the advice */
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	ck_assert_int_eq(connect_as_nobody(d.sock, why, sizeof(why)), -EACCES);
	ck_assert_msg(strstr(why, "the socket") && strstr(why, "is mode 0660, owner root, "
		      "group root, and user nobody") && strstr(why, "--socket-group=GROUP"),
		      "%s", why);
	ck_assert_msg(!strstr(why, "usermod"), "%s", why);
	ck_assert_int_eq(chmod(d.dir, 0700), 0);
	daemon_stop(&d);
}
END_TEST

static Suite *access_suite(void)
{
	Suite *s = suite_create("access");
	TCase *tc;

	tc = tcase_create("rules");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_access_bad_rules_stop_start_up_with_the_reason);
	suite_add_tcase(s, tc);

	if (!harness_have_nobody()) {
		printf("check_access: the peer tests need root and the users nobody "
		       "and nogroup; not run\n");
		return s;
	}
	tc = tcase_create("peers");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_access_rules_allow_and_refuse_a_real_peer);
	tcase_add_test(tc, test_access_broken_file_on_sighup_keeps_the_rules);
	tcase_add_test(tc, test_access_admin_group_counts_a_supplementary_group);
	tcase_add_test(tc, test_access_a_refused_connection_names_the_path_its_mode_and_what_to_do);
	tcase_add_test(tc, test_access_max_clients_keeps_room_for_an_admin);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(access_suite());
}
