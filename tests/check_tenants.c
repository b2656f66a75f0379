/* SPDX-License-Identifier: MIT */
/*
 * check_tenants.c - what one local user can do to the others, round two
 * (docs/security.md, "Tenants and peers, round two"): a real root kvpoold
 * and client processes that drop to nobody. One user's many tier files
 * neither hold up another user's namespace nor take unbounded disk, and a
 * secret file that another user could change is refused. The tests need
 * root (they change uid and owners) and say so when they are not run.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"

static const kvp_geometry geo = {	/* 4 KiB pages: a tier file of many slots */
	.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "test/tenants",
};

/* start() - a root kvpoold with an NVMe tier of spill_size per namespace
 * in DIR/spill, the socket's group nogroup in a directory nobody may
 * reach the socket of, and extra flags. */
static void start(struct daemon *d, const char *spill_size, const char *const *extra)
{
	char spill[128];
	const char *args[16] = { "--socket-group", "nogroup", "--spill-dir", spill,
				 "--spill-size", spill_size, "--pool-size", "8M",
				 "--slab-size", "1M" };
	int n = 10;

	daemon_dir(d);
	ck_assert_int_eq(chmod(d->dir, 0711), 0);
	snprintf(spill, sizeof(spill), "%s/spill", d->dir);
	ck_assert_int_eq(mkdir(spill, 0700), 0);
	while (extra && *extra && n < 15)
		args[n++] = *extra++;
	args[n] = NULL;
	daemon_restart(d, args);
}

/* join_as_nobody() - in a child of nobody, HELLO into namespace ns (made
 * with its tier file, which the HELLO waits for); the time it was ready
 * into *ready_ns. Returns the child's pid; it exits with 0 or 10 + -rc. */
static pid_t join_as_nobody(const char *sock, const char *ns, uint64_t *ready_ns)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *c;
		int rc;

		become_nobody();
		rc = kvp_connect(sock, ns, &geo, &c);
		*ready_ns = harness_now_ns();
		if (rc == 0)
			kvp_close(c);
		_exit(rc ? 10 - rc : 0);
	}
	return pid;
}

#define QUEUED 16	/* --max-namespaces-per-uid's default */

/*
 * One user's 16 new namespaces queued their tier files first, and another
 * user's namespace waited for most of them: with one queue on 4 workers,
 * root's was ready only after about 13 of nobody's (8.3 s instead of 1.3 s
 * with 128 MiB files). Now each user's preparations are a queue of its
 * own, served in turn, at most 2 of one user at once: root's namespace is
 * ready while most of nobody's still wait.
 */
START_TEST(test_tenants_one_user_s_tier_files_do_not_hold_up_another_s)
{
	uint64_t *ready, mine, t0;
	unsigned i, before = 0;
	pid_t pids[QUEUED];
	struct kvp_wire_stats st;
	struct daemon d;
	kvp_client *c;
	char ns[16];

	if (!harness_have_nobody()) {
		fprintf(stderr, "SKIP test: needs root and the user nobody\n");
		return;
	}
	ready = mmap(NULL, QUEUED * sizeof(*ready), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(ready, MAP_FAILED);
	start(&d, "64M", NULL);
	t0 = harness_now_ns();
	for (i = 0; i < QUEUED; i++) {
		snprintf(ns, sizeof(ns), "u%u", i);
		pids[i] = join_as_nobody(d.sock, ns, &ready[i]);
	}
	for (i = 0; i < 2500; i++) {	/* every one of them asked for */
		stats_of(d.sock, &st);
		if (st.namespaces >= QUEUED)
			break;
		usleep(2000);
	}
	ck_assert_uint_eq(st.namespaces, QUEUED);
	ck_assert_int_eq(kvp_connect(d.sock, "root-ns", &geo, &c), 0);
	mine = harness_now_ns();
	kvp_close(c);
	for (i = 0; i < QUEUED; i++)
		child_wait(pids[i]);
	for (i = 0; i < QUEUED; i++)
		before += ready[i] < mine;
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "root's namespace ready after %.2f s, %u of nobody's %u "
			"before it\n", (double)(mine - t0) / 1e9, before, QUEUED);
	ck_assert_msg(before < 8, "root's namespace waited for %u of nobody's %u tier "
		      "files (%.2f s)", before, QUEUED, (double)(mine - t0) / 1e9);
	munmap(ready, QUEUED * sizeof(*ready));
	check_conservation(d.sock);
	daemon_stop(&d);
}
END_TEST

/* --max-spill-per-uid bounds the disk one user's tier files take: nobody
 * makes 2 namespaces of 4M tier files under 8M, the third is refused
 * naming the option (and nothing is made), root is not counted, and a
 * drop gives the room back. */
START_TEST(test_tenants_one_user_s_tier_files_are_bounded)
{
	static const char *const extra[] = { "--max-spill-per-uid", "8M", NULL };
	uint64_t when;
	struct kvp_wire_stats st;
	struct daemon d;
	kvp_client *c;
	int status;
	pid_t pid;

	if (!harness_have_nobody()) {
		fprintf(stderr, "SKIP test: needs root and the user nobody\n");
		return;
	}
	start(&d, "4M", extra);
	child_wait(join_as_nobody(d.sock, "a", &when));
	child_wait(join_as_nobody(d.sock, "b", &when));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		become_nobody();
		expect(kvp_connect(d.sock, "c", &geo, &c) == -EDQUOT, 10);
		expect(strstr(kvp_last_error(), "--max-spill-per-uid 8.0 MiB"), 11);
		expect(strstr(kvp_last_error(), "2 namespaces hold 8.0 MiB"), 12);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child step %d",
		      WEXITSTATUS(status));
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.namespaces, 2);
	ck_assert_int_eq(kvp_connect(d.sock, "root-1", &geo, &c), 0);	/* not counted */
	kvp_close(c);
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &c), 0);
	ck_assert_int_eq(kvp_drop_namespace(c, "a"), 0);
	kvp_close(c);
	child_wait(join_as_nobody(d.sock, "c", &when));
	check_conservation(d.sock);
	daemon_stop(&d);
}
END_TEST

/* kvpoold_refuses() - kvpoold with args stops at start, saying text. */
static void kvpoold_refuses(const char *const *args, const char *text)
{
	const char *argv[16] = { harness_kvpoold(), "--foreground", "--socket",
				 "/tmp/kvp-tenants-never.sock" };
	char out[4096];
	int n = 4;

	while (*args && n < 15)
		argv[n++] = *args++;
	argv[n] = NULL;
	unlink("/tmp/kvp-tenants-never.sock");	/* a failed run's */
	ck_assert_int_ne(run_cmd(argv, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, text) != NULL, "'%s' not in: %s", text, out);
	ck_assert_msg(access("/tmp/kvp-tenants-never.sock", F_OK) != 0, "it listened");
}

/* with_remote() - kvpoold was built with the remote tier (hiredis). */
static bool with_remote(void)
{
	const char *argv[] = { harness_kvpoold(), "--version", NULL };
	char out[1024];

	run_cmd(argv, out, sizeof(out));
	return strstr(out, "built with hiredis") != NULL;
}

/* secret() - path holds 32 bytes and a newline, mode 0600, root's. */
static void secret(const char *path)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fprintf(f, "0123456789abcdef0123456789abcdef\n");
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0600), 0);
}

/*
 * A secret file that a user other than root or kvpoold's could change
 * plants a secret that user knows: a key file of mode 0602 was taken
 * silently, so after the next restart forgery worked again. Now a key,
 * password or salt file that others may write, that another user owns,
 * or that sits in a directory others may write (not sticky) or own, or a
 * link to it that another user owns, stops the start, saying which and
 * the command that fixes it.
 */
START_TEST(test_tenants_secret_files_others_may_change_are_refused)
{
	static const char *const opts[] = { "--key-salt-file", "--remote-key-file",
					    "--remote-password-file" };
	char dir[64], safe[64], sub[96], file[128], link[128], key[128], text[640];
	const char *args[8];
	unsigned i, at, n = with_remote() ? 3 : 1;

	if (!harness_have_nobody()) {
		fprintf(stderr, "SKIP test: needs root and the user nobody\n");
		return;
	}
	snprintf(dir, sizeof(dir), "/tmp/kvp-secrets-XXXXXX");
	snprintf(safe, sizeof(safe), "/tmp/kvp-secrets-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_ptr_nonnull(mkdtemp(safe));
	snprintf(sub, sizeof(sub), "%s/theirs", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	snprintf(file, sizeof(file), "%s/secret", dir);
	snprintf(link, sizeof(link), "%s/link", sub);
	snprintf(key, sizeof(key), "%s/remote.key", safe);	/* a good one, for the others */
	secret(key);
	for (i = 0; i < n; i++) {
		/* the file under test last: the salt's alone; the remote tier's
		 * with a URL where nothing answers (no reason to stop) and, for
		 * the password, a good key */
		args[0] = "--remote";
		args[1] = "redis://127.0.0.1:1";
		args[2] = "--remote-key-file";
		args[3] = key;
		args[4] = NULL;
		at = i == 0 ? 0 : i == 1 ? 2 : 4;
		args[at] = opts[i];
		args[at + 1] = file;
		args[at + 2] = NULL;
		secret(file);
		ck_assert_int_eq(chmod(file, 0602), 0);		/* others may write it */
		snprintf(text, sizeof(text), "%s %s may be written by every user (mode 0602), "
			 "who could change it to a secret they know; chmod go-w %s", opts[i],
			 file, file);
		kvpoold_refuses(args, text);
		ck_assert_int_eq(chmod(file, 0620), 0);		/* its group may */
		kvpoold_refuses(args, "may be written by its group (mode 0620)");
		ck_assert_int_eq(chmod(file, 0600), 0);		/* another user owns it */
		ck_assert_int_eq(chown(file, harness_nobody_uid, (gid_t)-1), 0);
		snprintf(text, sizeof(text), "%s %s is owned by uid %u, who could change it "
			 "to a secret they know; chown root: %s", opts[i], file,
			 (unsigned)harness_nobody_uid, file);
		kvpoold_refuses(args, text);
		ck_assert_int_eq(chown(file, 0, (gid_t)-1), 0);
		ck_assert_int_eq(chmod(dir, 0777), 0);		/* others may replace it */
		snprintf(text, sizeof(text), "its directory %s may be written by others (mode "
			 "0777), who could put a file of their own in its place; chmod go-w %s",
			 dir, dir);
		kvpoold_refuses(args, text);
		ck_assert_int_eq(chmod(dir, 0700), 0);
		/* named through a link in a directory of nobody's */
		ck_assert_int_eq(chown(sub, harness_nobody_uid, (gid_t)-1), 0);
		ck_assert_int_eq(symlink(file, link), 0);
		args[at + 1] = link;
		snprintf(text, sizeof(text), "its directory %s is owned by uid %u", sub,
			 (unsigned)harness_nobody_uid);
		kvpoold_refuses(args, text);
		ck_assert_int_eq(unlink(link), 0);
		ck_assert_int_eq(chown(sub, 0, (gid_t)-1), 0);
		/* a link of nobody's in a sticky directory anyone may write */
		ck_assert_int_eq(chmod(dir, 01777), 0);
		snprintf(link, sizeof(link), "%s/theirs-link", dir);
		ck_assert_int_eq(symlink(file, link), 0);
		ck_assert_int_eq(lchown(link, harness_nobody_uid, (gid_t)-1), 0);
		args[at + 1] = link;
		snprintf(text, sizeof(text), "%s %s is a link of uid %u, who could point it at a "
			 "secret they know", opts[i], link, (unsigned)harness_nobody_uid);
		kvpoold_refuses(args, text);
		ck_assert_int_eq(unlink(link), 0);
		ck_assert_int_eq(chmod(dir, 0700), 0);
		snprintf(link, sizeof(link), "%s/link", sub);
		ck_assert_int_eq(unlink(file), 0);
	}
	ck_assert_int_eq(unlink(key), 0);
	ck_assert_int_eq(rmdir(safe), 0);
	ck_assert_int_eq(rmdir(sub), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *tenants_suite(void)
{
	Suite *s = suite_create("tenants");
	TCase *tc = tcase_create("another user");

	/* 16 tier files of 64 MiB made on disk: beside the real engines'
	 * tests of the suite's first pass, past a minute once (what is
	 * asserted is the order they were made in, not their time) */
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_tenants_one_user_s_tier_files_do_not_hold_up_another_s);
	tcase_add_test(tc, test_tenants_one_user_s_tier_files_are_bounded);
	tcase_add_test(tc, test_tenants_secret_files_others_may_change_are_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(tenants_suite());
}
