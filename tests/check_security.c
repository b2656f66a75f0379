/* SPDX-License-Identifier: MIT */
/*
 * check_security.c - integration tests of what a local user who is not
 * trusted with a namespace can do (docs/security.md): a real kvpoold run
 * by root, and client processes that drop to nobody before they connect
 * and then try what an attacker would, over the library or raw sockets.
 * Each test is named for the promise it checks; the tests that change
 * uid need root and are not run without it (the runner says so).
 *
 * Past 800 lines on purpose: docs/security.md's promises are checked in
 * one place, each test named for one.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "client/wire.h"
#include "harness.h"

#define PAGE 4096u	/* 2 x 1 layer x 1 head x 64 x 16 tokens x f16 */

static const kvp_geometry geo = {
	.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "test/security",
};

#define WITH_SPILL 0x1u	/* start(): an NVMe tier in DIR/spill */

/* start() - kvpoold as root with a config file of these lines (after
 * `socket-group = nogroup`, and a tier with WITH_SPILL) in a directory
 * nobody may reach the socket of; extra flags may follow. conf receives
 * the file's path. */
static void start(struct daemon *d, char *conf, size_t conflen, const char *lines,
		  unsigned flags, const char *const *extra)
{
	const char *args[32] = { "-c", conf };
	char spill[128];
	FILE *f;
	int n = 2;

	daemon_dir(d);
	ck_assert_int_eq(chmod(d->dir, 0711), 0);
	snprintf(conf, conflen, "%s/kvpoold.conf", d->dir);
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "socket-group = nogroup\n%s", lines);
	if (flags & WITH_SPILL) {
		snprintf(spill, sizeof(spill), "%s/spill", d->dir);
		ck_assert_int_eq(mkdir(spill, 0700), 0);
		fprintf(f, "spill-dir = %s\nspill-size = 4M\n", spill);
	}
	ck_assert_int_eq(fclose(f), 0);
	while (extra && *extra && n < 31)
		args[n++] = *extra++;
	args[n] = NULL;
	daemon_restart(d, args);
}

/* restart() - stop d's daemon cleanly and start it again on its files. */
static void restart(struct daemon *d, const char *conf)
{
	daemon_halt(d);
	daemon_restart(d, (const char *const[]){ "-c", conf, NULL });
}

/* rewrite() - new lines for the config file (a SIGHUP applies them). */
static void rewrite(const char *conf, const char *lines)
{
	FILE *f = fopen(conf, "w");

	ck_assert_ptr_nonnull(f);
	fprintf(f, "socket-group = nogroup\n%s", lines);
	ck_assert_int_eq(fclose(f), 0);
}

/* publish_key() - as root, publish one page of ns filled for key. */
static void publish_key(const char *sock, const char *ns, const kvp_key *key)
{
	kvp_client *c;
	kvp_page p;

	ck_assert_int_eq(kvp_connect(sock, ns, &geo, &c), 0);
	ck_assert_int_eq(kvp_alloc(c, 1, &p), 0);
	harness_fill(kvp_page_ptr(c, p), PAGE, key);
	ck_assert_int_eq(kvp_publish(c, NULL, &p, key, 1, KVP_PRIO_NORMAL, &p), 0);
	ck_assert_int_eq(kvp_release(c, &p, 1), 0);
	kvp_close(c);
}

/* still_holds() - as root, ns still serves key's page with its bytes. */
static void still_holds(const char *sock, const char *ns, const kvp_key *key)
{
	kvp_client *c;
	kvp_page p;

	ck_assert_int_eq(kvp_connect(sock, ns, &geo, &c), 0);
	ck_assert_int_eq(kvp_acquire(c, NULL, key, 1, NULL, 0, &p, NULL), 1);
	ck_assert_msg(harness_holds(kvp_page_ptr(c, p), PAGE, key),
		      "the page of '%s' no longer holds its bytes", ns);
	ck_assert_int_eq(kvp_release(c, &p, 1), 0);
	kvp_close(c);
}

/* map_slab() - MAP_SLAB slab over a raw connection: the fd passed, or -1. */
static int map_slab(int fd, uint32_t slab, uint64_t id)
{
	struct kvp_wire_map_slab m = { .slab = slab };
	int mfd = -1;

	if (raw_send(fd, KVP_OP_MAP_SLAB, id, &m, sizeof(m)) < 0 ||
	    raw_recv(fd, id, NULL, 0, &mfd) != KVP_S_OK)
		return -1;
	return mfd;
}

/* --- finding 1: a reader's slab fd never leads to write access ------------- */

START_TEST(test_security_reader_cannot_reopen_its_slab_writable)
{
	char conf[128], path[64];
	kvp_key key = { { 7 } };
	struct daemon d;
	pid_t pid;

	start(&d, conf, sizeof(conf), "access = shared read @nogroup\n", 0, NULL);
	publish_key(d.sock, "shared", &key);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd, mfd;
		void *p;

		become_nobody();
		fd = raw_connect(d.sock);
		expect(fd >= 0, 10);
		expect(raw_hello(fd, "shared", &geo, NULL, 0) == KVP_S_OK, 11);
		mfd = map_slab(fd, 0, 2);
		expect(mfd >= 0, 12);
		/* the descriptor itself is read-only ... */
		expect(mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0) ==
		       MAP_FAILED, 13);
		expect(fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, PAGE) < 0,
		       14);
		/* ... and so is every way back to its inode */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
		expect(open(path, O_RDWR) < 0 && errno == EACCES, 15);
		expect(open(path, O_WRONLY) < 0 && errno == EACCES, 16);
		expect(fchmod(mfd, 0666) < 0, 17);
		/* reading is what it may do */
		p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, mfd, 0);
		expect(p != MAP_FAILED && harness_holds(p, PAGE, &key), 18);
		_exit(0);
	}
	child_wait(pid);
	still_holds(d.sock, "shared", &key);
	daemon_stop(&d);
}
END_TEST

/* --- findings 2 and 8: namespaces ------------------------------------------ */

/* warm_restart() - keys[0..n) published in "warm", evicted to the NVMe
 * tier, and the daemon restarted on the same files with rules. */
static void warm_restart(struct daemon *d, char *conf, size_t conflen, const char *rules,
			 const kvp_key *keys, int n)
{
	char says[64];
	kvp_client *c;
	int i;

	start(d, conf, conflen, rules, WITH_SPILL, NULL);
	for (i = 0; i < n; i++)
		publish_key(d->sock, "warm", &keys[i]);
	ck_assert_int_eq(kvp_connect(d->sock, NULL, NULL, &c), 0);
	ck_assert_int_eq(kvp_evict(c, "warm", 0), n);
	kvp_close(c);
	restart(d, conf);	/* the tier's writes finish first */
	snprintf(says, sizeof(says), "namespace 'warm': %d pages re-indexed", n);
	wait_log(d, says);
}

/* spilled_in() - STATS: the namespaces there are, and the pages of ns
 * in a tier (-1 when there is no such namespace). */
static int spilled_in(const char *sock, const char *ns, uint32_t *namespaces)
{
	kvp_ns_stats_t r[8];
	kvp_stats_t st;
	kvp_client *c;
	int n, i, found = -1;

	ck_assert_int_eq(kvp_connect(sock, NULL, NULL, &c), 0);
	n = kvp_stats(c, &st, r, 8);
	ck_assert_int_ge(n, 0);
	for (i = 0; i < n && i < 8; i++)
		if (!strcmp(r[i].name, ns))
			found = (int)r[i].pages_spilled;
	*namespaces = st.namespaces;
	kvp_close(c);
	return found;
}

START_TEST(test_security_bad_hello_after_a_warm_restart_changes_nothing)
{
	const kvp_key keys[3] = { { { 1 } }, { { 2 } }, { { 3 } } };
	kvp_geometry bad = geo;
	char conf[128], why[256];
	struct daemon d;
	uint32_t nns;
	int fd, i;

	warm_restart(&d, conf, sizeof(conf), "access = warm read @nogroup\n", keys, 3);
	/* as root (every right) and as a reader, geometries that cannot be */
	for (i = 0; i < 4; i++) {
		bad = geo;
		if (i % 2)
			bad.layers = 0;
		else
			bad.model = "";
		if (i < 2) {
			fd = raw_connect(d.sock);
			ck_assert_int_ge(fd, 0);
			ck_assert_int_eq(raw_hello(fd, "warm", &bad, why, sizeof(why)),
					 KVP_S_INVAL);
			close(fd);
			continue;
		}
		pid_t pid = fork();

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			become_nobody();
			fd = raw_connect(d.sock);
			expect(fd >= 0, 10);
			/* not its geometry, and it may not make the namespace anew */
			expect(raw_hello(fd, "warm", &bad, why, sizeof(why)) == KVP_S_MISMATCH,
			       11);
			_exit(0);
		}
		child_wait(pid);
	}
	/* the daemon still answers everyone, and warm still has its pages */
	ck_assert_int_eq(spilled_in(d.sock, "warm", &nns), 3);
	ck_assert_uint_eq(nns, 1);
	for (i = 0; i < 3; i++)
		still_holds(d.sock, "warm", &keys[i]);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_reader_cannot_create_or_reshape_a_namespace)
{
	const kvp_key keys[3] = { { { 4 } }, { { 5 } }, { { 6 } } };
	char conf[128];
	struct daemon d;
	uint32_t nns;
	pid_t pid;
	int i;

	warm_restart(&d, conf, sizeof(conf), "access = * read @nogroup\n", keys, 3);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_geometry other = geo;
		char why[512];
		int fd;

		become_nobody();
		fd = raw_connect(d.sock);
		expect(fd >= 0, 10);
		expect(raw_hello(fd, "fresh", &geo, why, sizeof(why)) == KVP_S_PERM, 11);
		expect(strstr(why, "creating it needs write rights"), 12);
		close(fd);
		/* the restored namespace keeps its geometry and its pages */
		other.head_dim = 128;
		fd = raw_connect(d.sock);
		expect(raw_hello(fd, "warm", &other, why, sizeof(why)) == KVP_S_MISMATCH, 13);
		expect(strstr(why, "head_dim 64"), 14);
		close(fd);
		fd = raw_connect(d.sock);
		expect(raw_hello(fd, "warm", &geo, why, sizeof(why)) == KVP_S_OK, 15);
		close(fd);
		_exit(0);
	}
	child_wait(pid);
	ck_assert_int_eq(spilled_in(d.sock, "warm", &nns), 3);
	ck_assert_int_eq(spilled_in(d.sock, "fresh", &nns), -1);
	ck_assert_uint_eq(nns, 1);
	for (i = 0; i < 3; i++)
		still_holds(d.sock, "warm", &keys[i]);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_drop_disconnects_the_namespace_clients)
{
	int ready[2], go[2];
	struct daemon d;
	kvp_client *c;
	char conf[128], b;
	uint32_t nns;
	pid_t pid;

	start(&d, conf, sizeof(conf), "", 0, NULL);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *sq;
		kvp_stats_t st;
		kvp_page q[2];

		become_nobody();
		close(ready[0]);
		close(go[1]);
		expect(kvp_connect(d.sock, "doomed", &geo, &sq) == 0, 10);
		expect(kvp_alloc(sq, 2, q) == 0, 11);
		expect(write(ready[1], "r", 1) == 1, 12);
		expect(read(go[0], &b, 1) == 1, 13);
		/* dropped with its namespace: told so on its next call */
		expect(kvp_stats(sq, &st, NULL, 0) == -EPIPE, 14);
		kvp_close(sq);
		_exit(0);
	}
	close(ready[1]);
	close(go[0]);
	ck_assert_int_eq(read(ready[0], &b, 1), 1);
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &c), 0);
	ck_assert_msg(kvp_drop_namespace(c, "doomed") == 0, "drop: %s", kvp_last_error());
	kvp_close(c);
	ck_assert_int_eq(spilled_in(d.sock, "doomed", &nns), -1);
	ck_assert_uint_eq(nns, 0);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	child_wait(pid);
	wait_log(&d, "was dropped by an admin");
	daemon_stop(&d);
}
END_TEST

/* --- finding 3: the spill directory and the tier files ---------------------- */

/* refused() - kvpoold with --spill-dir dir must refuse to start, saying
 * that directory what says (it would run until killed if it started: 30 s
 * at most, time for valgrind to start it too). */
static void refused(const struct daemon *d, const char *dir, const char *what,
		    const char *says)
{
	char out[4096];
	const char *argv[] = { "/usr/bin/timeout", "30", harness_kvpoold(), "--foreground",
			       "--socket", d->sock, "--spill-dir", dir, NULL };
	int st = run_cmd(argv, out, sizeof(out));

	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1,
		      "kvpoold with --spill-dir %s: status %d (124: it started): %s",
		      dir, st, out);
	ck_assert_msg(strstr(out, says) && strstr(out, what), "kvpoold said: %s", out);
}

START_TEST(test_security_spill_dir_others_can_write_is_refused)
{
	char dir[160], open_[160], inner[200];
	struct daemon d;

	daemon_dir(&d);
	snprintf(dir, sizeof(dir), "%s/spill", d.dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	ck_assert_int_eq(chmod(dir, 01777), 0);	/* a shared scratch directory */
	refused(&d, dir, dir, "is writable by others (mode 1777)");
	ck_assert_int_eq(chmod(dir, 0770), 0);
	refused(&d, dir, dir, "is writable by others (mode 0770)");
	ck_assert_int_eq(chmod(dir, 0700), 0);
	ck_assert_int_eq(chown(dir, harness_nobody_uid, harness_nogroup_gid), 0);
	refused(&d, dir, dir, "is owned by uid 65534");
	/* a safe directory inside one that others may rename it in */
	snprintf(open_, sizeof(open_), "%s/open", d.dir);
	snprintf(inner, sizeof(inner), "%s/spill", open_);
	ck_assert_int_eq(mkdir(open_, 0777), 0);
	ck_assert_int_eq(chmod(open_, 0777), 0);
	ck_assert_int_eq(mkdir(inner, 0700), 0);
	refused(&d, inner, open_, "is writable by others (mode 0777)");
	daemon_cleanup(&d);
}
END_TEST

/* file_is() - the whole of path equals want[0..len). */
static bool file_is(const char *path, const void *want, size_t len)
{
	static char buf[8u << 20];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	return n == (ssize_t)len && !memcmp(buf, want, len);
}

START_TEST(test_security_planted_tier_files_are_never_followed_or_trusted)
{
	static char foreign[8u << 20];
	const kvp_key keys[2] = { { { 8 } }, { { 9 } } };
	char conf[128], victim[160], link[160], path[160], why[512], log[16384];
	static const char precious[] = "precious data of another file\n";
	struct daemon d;
	ssize_t flen;
	uint32_t nns;
	kvp_client *c;
	int fd;

	/* a genuine tier file of namespace "foreign", then made over to nobody
	 * as if nobody had planted it */
	warm_restart(&d, conf, sizeof(conf), "", keys, 2);
	daemon_halt(&d);
	snprintf(path, sizeof(path), "%s/spill/foreign.kvspill", d.dir);
	snprintf(link, sizeof(link), "%s/spill/warm.kvspill", d.dir);
	ck_assert_int_eq(rename(link, path), 0);
	ck_assert_int_eq(chown(path, harness_nobody_uid, harness_nogroup_gid), 0);
	ck_assert_int_eq(chmod(path, 0666), 0);
	fd = open(path, O_RDONLY);
	flen = read(fd, foreign, sizeof(foreign));
	close(fd);
	ck_assert_int_gt(flen, 0);
	/* and a link to someone else's file where a tier file would go */
	snprintf(victim, sizeof(victim), "%s/victim", d.dir);
	fd = open(victim, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_eq(write(fd, precious, sizeof(precious) - 1), (ssize_t)sizeof(precious) - 1);
	close(fd);
	snprintf(link, sizeof(link), "%s/spill/linked.kvspill", d.dir);
	ck_assert_int_eq(symlink(victim, link), 0);

	daemon_restart(&d, (const char *const[]){ "-c", conf, NULL });
	ck_assert_int_eq(spilled_in(d.sock, "foreign", &nns), -1);	/* not re-indexed */
	ck_assert_uint_eq(nns, 0);
	/* neither file is used, and the clients are not told where they are */
	fd = raw_connect(d.sock);
	ck_assert_int_eq(raw_hello(fd, "foreign", &geo, why, sizeof(why)), KVP_S_INTERNAL);
	ck_assert_msg(strstr(why, "its NVMe tier cannot be used") && !strstr(why, d.dir),
		      "the client was told: %s", why);
	close(fd);
	fd = raw_connect(d.sock);
	ck_assert_int_eq(raw_hello(fd, "linked", &geo, why, sizeof(why)), KVP_S_INTERNAL);
	close(fd);
	ck_assert(file_is(victim, precious, sizeof(precious) - 1));
	ck_assert(file_is(path, foreign, (size_t)flen));
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "is a symbolic link: kvpoold never follows one") &&
		      strstr(log, "foreign.kvspill is a link, or not a file kvpoold made"),
		      "%s", log);
	/* a namespace of its own still gets a tier */
	ck_assert_int_eq(kvp_connect(d.sock, "other", &geo, &c), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* --- findings 4 and 5: the lock and pid files ------------------------------- */

/* mode_of() - the permission bits of path. */
static unsigned mode_of(const char *path)
{
	struct stat st;

	ck_assert_int_eq(lstat(path, &st), 0);
	return (unsigned)(st.st_mode & 07777);
}

START_TEST(test_security_lock_and_pid_files_never_follow_links)
{
	static const char keep[] = "another file's contents\n";
	char lock[160], pidf[160], victim[160], out[4096];
	struct daemon d;
	mode_t old;
	int st, fd;

	daemon_dir(&d);
	snprintf(lock, sizeof(lock), "%s.lock", d.sock);
	snprintf(pidf, sizeof(pidf), "%s/kvpoold.pid", d.dir);
	snprintf(victim, sizeof(victim), "%s/victim", d.dir);
	fd = open(victim, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_eq(write(fd, keep, sizeof(keep) - 1), (ssize_t)sizeof(keep) - 1);
	close(fd);
	/* a link where the lock file goes, then where the pid file goes */
	for (int i = 0; i < 2; i++) {
		const char *at = i ? pidf : lock;
		const char *argv[] = { "/usr/bin/timeout", "30", harness_kvpoold(),
				       "--foreground", "--socket", d.sock, "--pid-file", pidf,
				       NULL };

		ck_assert_int_eq(symlink(victim, at), 0);
		st = run_cmd(argv, out, sizeof(out));
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1,
			      "status %d (124: it started): %s", st, out);
		ck_assert_msg(strstr(out, i ? "the pid file" : "the lock file") &&
			      strstr(out, "is a symbolic link"), "%s", out);
		ck_assert(file_is(victim, keep, sizeof(keep) - 1));
		ck_assert_int_eq(unlink(at), 0);
	}
	/* an old lock file anyone could read is made private; a umask of 0
	 * widens nothing */
	unlink(lock);	/* the run above left one */
	fd = open(lock, O_WRONLY | O_CREAT | O_EXCL, 0644);
	ck_assert_int_eq(fchmod(fd, 0644), 0);
	close(fd);
	old = umask(0);
	daemon_restart(&d, (const char *const[]){ "--pid-file", pidf, NULL });
	umask(old);
	ck_assert_uint_eq(mode_of(lock), 0600);
	ck_assert_uint_eq(mode_of(pidf), 0644);
	ck_assert_uint_eq(mode_of(d.sock), 0660);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_others_cannot_lock_out_a_restart)
{
	int ready[2], go[2];
	char lock[160], b;
	struct daemon d;
	pid_t pid;

	daemon_dir(&d);
	ck_assert_int_eq(chmod(d.dir, 0755), 0);	/* anyone may look inside */
	daemon_restart(&d, NULL);
	snprintf(lock, sizeof(lock), "%s.lock", d.sock);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd;

		become_nobody();
		close(ready[0]);
		close(go[1]);
		/* a shared lock on the lock file would make the next start
		 * believe a daemon runs */
		fd = open(lock, O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			(void)flock(fd, LOCK_SH | LOCK_NB);
		expect(write(ready[1], fd >= 0 ? "h" : errno == EACCES ? "r" : "?", 1) == 1, 10);
		expect(read(go[0], &b, 1) >= 0, 11);
		_exit(0);
	}
	close(ready[1]);
	close(go[0]);
	ck_assert_int_eq(read(ready[0], &b, 1), 1);
	ck_assert_msg(b == 'r', "nobody opened the lock file (%c)", b);
	daemon_halt(&d);
	daemon_restart(&d, NULL);	/* not locked out */
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	child_wait(pid);
	daemon_stop(&d);
}
END_TEST

/* --- finding 6: SIGHUP takes rights away ----------------------------------- */

START_TEST(test_security_sighup_cuts_off_revoked_clients)
{
	const kvp_key key = { { 11 } };
	int ready[2], go[2];
	struct daemon d;
	char conf[128], b;
	pid_t pid;

	start(&d, conf, sizeof(conf), "access = shared read @nogroup\n"
				       "access = rw read,write @nogroup\n", 0, NULL);
	publish_key(d.sock, "shared", &key);
	publish_key(d.sock, "rw", &key);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *rd, *wr, *again;
		kvp_stats_t st;
		kvp_page q[2];

		become_nobody();
		close(ready[0]);
		close(go[1]);
		expect(kvp_connect(d.sock, "shared", &geo, &rd) == 0, 10);
		expect(kvp_acquire(rd, NULL, &key, 1, NULL, 0, q, NULL) == 1, 11);
		expect(kvp_connect(d.sock, "rw", &geo, &wr) == 0, 12);
		expect(kvp_alloc(wr, 1, q) == 0, 13);
		expect(write(ready[1], "r", 1) == 1, 14);
		expect(read(go[0], &b, 1) == 1, 15);
		/* the reader lost every right, the writer its write: both are
		 * cut off at once, slabs and all */
		expect(kvp_stats(rd, &st, NULL, 0) == -EPIPE, 16);
		expect(kvp_alloc(wr, 1, q) == -EPIPE, 17);
		kvp_close(rd);
		kvp_close(wr);
		/* and come back with what they have now */
		expect(kvp_connect(d.sock, "shared", &geo, &again) == -EACCES, 18);
		expect(kvp_connect(d.sock, "rw", &geo, &again) == 0, 19);
		expect(kvp_acquire(again, NULL, &key, 1, NULL, 0, q, NULL) == 1, 20);
		expect(harness_holds(kvp_page_ptr(again, q[0]), PAGE, &key), 21);
		expect(kvp_alloc(again, 1, q + 1) == -EACCES, 22);
		kvp_close(again);
		_exit(0);
	}
	close(ready[1]);
	close(go[0]);
	ck_assert_int_eq(read(ready[0], &b, 1), 1);
	rewrite(conf, "access = rw read @nogroup\n");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	wait_log(&d, "SIGHUP: 1 access rules");
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	child_wait(pid);
	wait_log(&d, "may no longer write there, and its slabs are mapped writable");
	still_holds(d.sock, "shared", &key);
	daemon_stop(&d);
}
END_TEST

/* --- finding 7: no user takes the daemon for itself ------------------------- */

START_TEST(test_security_one_uid_cannot_take_every_connection)
{
	char conf[128];
	struct daemon d;
	kvp_client *c;
	pid_t pid;

	start(&d, conf, sizeof(conf), "max-clients = 8\nmax-clients-per-uid = 3\n", 0, NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char why[512];
		int fd[4], i;

		become_nobody();
		for (i = 0; i < 3; i++) {
			fd[i] = raw_connect(d.sock);
			expect(fd[i] >= 0 && raw_hello(fd[i], NULL, NULL, why, sizeof(why)) ==
			       KVP_S_OK, 10 + i);
		}
		fd[3] = raw_connect(d.sock);
		expect(fd[3] >= 0, 13);
		expect(raw_hello(fd[3], NULL, NULL, why, sizeof(why)) == KVP_S_LIMIT, 14);
		expect(strstr(why, "uid 65534 has 3 connections to kvpoold, "
			      "--max-clients-per-uid is 3"), 15);
		expect(raw_recv(fd[3], 0, NULL, 0, NULL) == -1, 16);	/* then closed */
		close(fd[3]);
		/* one of its own closed: room again */
		close(fd[0]);
		for (i = 0; i < 100; i++) {
			fd[0] = raw_connect(d.sock);
			if (fd[0] >= 0 && raw_hello(fd[0], NULL, NULL, why, sizeof(why)) == KVP_S_OK)
				break;
			close(fd[0]);
			usleep(10 * 1000);	/* until the daemon has seen the close */
		}
		expect(i < 100, 17);
		_exit(0);
	}
	child_wait(pid);
	/* others still get in while nobody holds its share */
	ck_assert_int_eq(kvp_connect(d.sock, "mine", &geo, &c), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_unread_replies_are_bounded_in_total)
{
	enum { CONNS = 4, REQS = 1500 };
	int fd[CONNS], sent[CONNS] = { 0 }, i, k, open_ = CONNS;
	char conf[128];
	kvp_stats_t st;
	struct daemon d;

	start(&d, conf, sizeof(conf), "max-output-total = 1M\n", 0, NULL);
	/* four clients ask for STATS 1,500 times each and never read (about
	 * 0.8 MB of replies each): each stays under --max-output (16M),
	 * together they pass 1M */
	for (i = 0; i < CONNS; i++) {
		fd[i] = raw_connect(d.sock);
		ck_assert_int_ge(fd[i], 0);
		ck_assert_int_eq(fcntl(fd[i], F_SETFL, O_NONBLOCK), 0);
	}
	for (k = 0; k < 100000 && open_ == CONNS; k++) {
		bool any = false;

		for (i = 0; i < CONNS; i++) {
			int rc;

			if (sent[i] == REQS)
				continue;
			rc = raw_send(fd[i], KVP_OP_STATS, (uint64_t)sent[i] + 1, NULL, 0);
			if (rc == 0) {
				sent[i]++;
				any = true;
			} else if (rc != -EAGAIN) {
				open_--;	/* the daemon closed it */
			}
		}
		if (!any)
			usleep(1000);	/* their buffers are full: let the daemon read */
	}
	wait_log(&d, "more than --max-output-total 1048576; disconnecting client");
	stats_of(d.sock, &st);
	ck_assert_uint_ge(st.closed_output, 1);
	for (i = 0; i < CONNS; i++)
		close(fd[i]);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_one_big_reply_is_not_left_unread)
{
	static struct kvp_wire_page r[5000];
	static kvp_page p[1000];
	static kvp_key k[1000];
	uint64_t base;
	uint32_t total = 0;
	char conf[128];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	int i, j, slow;

	start(&d, conf, sizeof(conf), "max-output-total = 256K\n", 0, NULL);
	ck_assert_int_eq(kvp_connect(d.sock, "big", &geo, &c), 0);
	for (i = 0; i < 5; i++) {
		for (j = 0; j < 1000; j++) {
			memset(&k[j], 0, sizeof(k[j]));
			memcpy(k[j].b, &(int){ i * 1000 + j }, sizeof(int));
		}
		ck_assert_int_eq(kvp_alloc(c, 1000, p), 0);
		ck_assert_int_eq(kvp_publish(c, NULL, p, k, 1000, KVP_PRIO_NORMAL, p), 0);
		ck_assert_int_eq(kvp_release(c, p, 1000), 0);
	}
	kvp_close(c);
	/* a client that leaves some replies unread ... */
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &c), 0);
	ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
	base = st.requests_total;
	slow = raw_connect(d.sock);
	ck_assert_int_ge(slow, 0);
	for (i = 0; i < 250; i++)
		ck_assert_int_eq(raw_send(slow, KVP_OP_STATS, (uint64_t)i + 1, NULL, 0), 0);
	for (i = 0; i < 1000 && st.requests_total < base + 251; i++) {
		ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
		usleep(1000);
	}
	/* ... and one that lists 5,000 pages: a reply of 256 KiB by itself,
	 * which passes the budget with the other's; it is being sent, not
	 * left unread, so its client gets it */
	ck_assert_int_gt(kvp_list_pages(c, NULL, r, 5000, &total), 4000);	/* one reply */
	ck_assert_uint_eq(total, 5000);
	ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
	kvp_close(c);
	close(slow);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_listings_know_a_page_s_holders)
{
	struct kvp_wire_client cl[8];
	kvp_client *h[3], *adm;
	const kvp_key key = { { 12 } };
	struct kvp_wire_page r[4];
	char conf[128];
	struct daemon d;
	kvp_page p[3];
	int i, n;

	start(&d, conf, sizeof(conf), "", 0, NULL);
	publish_key(d.sock, "held", &key);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(kvp_connect(d.sock, "held", &geo, &h[i]), 0);
		ck_assert_int_eq(kvp_acquire(h[i], NULL, &key, 1, NULL, 0, &p[i], NULL), 1);
	}
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &adm), 0);
	ck_assert_int_eq(kvp_list_pages(adm, NULL, r, 4, NULL), 1);
	ck_assert_uint_eq(r[0].refs, 3);
	ck_assert_uint_eq(r[0].holders, 3);
	ck_assert_uint_eq(r[0].holder, 0);	/* several: none named */
	ck_assert_int_eq(kvp_retain(h[2], &p[2], 1), 0);	/* a second lease */
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(kvp_release(h[i], &p[i], 1), 0);
	n = kvp_list_clients(adm, cl, 8, NULL);
	ck_assert_int_ge(n, 4);
	for (i = 0; i < n && cl[i].leases != 2; i++)
		;
	ck_assert_int_lt(i, n);
	ck_assert_int_eq(kvp_list_pages(adm, NULL, r, 4, NULL), 1);
	ck_assert_uint_eq(r[0].refs, 2);
	ck_assert_uint_eq(r[0].holders, 1);
	ck_assert_uint_eq(r[0].holder, cl[i].id);
	for (i = 0; i < 3; i++)
		kvp_close(h[i]);
	/* the daemon sees the closes when it next runs */
	for (i = 0; i < 500; i++) {
		ck_assert_int_eq(kvp_list_pages(adm, NULL, r, 4, NULL), 1);
		if (!r[0].holders)
			break;
		usleep(10 * 1000);
	}
	ck_assert_uint_eq(r[0].holders, 0);
	ck_assert_uint_eq(r[0].refs, 0);
	kvp_close(adm);
	daemon_stop(&d);
}
END_TEST

/* --- finding 10: namespaces and pinned memory come back ------------------ */

/* vmpin_kb() - the daemon's VmPin (memory the kernel keeps pinned for it,
 * such as io_uring's fixed buffers), in KiB. */
static long vmpin_kb(pid_t pid)
{
	char path[64], buf[4096], *v;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	read_file(path, buf, sizeof(buf));
	v = strstr(buf, "VmPin:");
	ck_assert_ptr_nonnull(v);
	return strtol(v + 6, NULL, 10);
}

/* drop() - as root, drop namespace ns. */
static void drop(const char *sock, const char *ns)
{
	kvp_client *c;

	ck_assert_int_eq(kvp_connect(sock, NULL, NULL, &c), 0);
	ck_assert_msg(kvp_drop_namespace(c, ns) == 0, "drop %s: %s", ns, kvp_last_error());
	kvp_close(c);
}

START_TEST(test_security_namespaces_come_back_after_a_drop)
{
	char conf[128], name[32];
	struct daemon d;
	kvp_client *c;
	kvp_page p;
	int i, rc;

	start(&d, conf, sizeof(conf), "", 0, NULL);
	/* more than there may be at once (256), one after another */
	for (i = 0; i < 260; i++) {
		snprintf(name, sizeof(name), "ns%d", i);
		rc = kvp_connect(d.sock, name, &geo, &c);
		ck_assert_msg(rc == 0, "namespace %d: %s", i, kvp_last_error());
		ck_assert_int_eq(kvp_alloc(c, 1, &p), 0);
		kvp_close(c);
		drop(d.sock, name);
	}
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_one_uid_creates_a_bounded_number_of_namespaces)
{
	char conf[128];
	struct daemon d;
	kvp_client *c;
	pid_t pid;

	start(&d, conf, sizeof(conf), "max-namespaces-per-uid = 2\n", 0, NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *a, *b, *x;

		become_nobody();
		expect(kvp_connect(d.sock, "mine-a", &geo, &a) == 0, 10);
		expect(kvp_connect(d.sock, "mine-b", &geo, &b) == 0, 11);
		kvp_close(b);
		expect(kvp_connect(d.sock, "mine-c", &geo, &x) == -EDQUOT, 12);
		expect(strstr(kvp_last_error(), "uid 65534 created 2 namespaces, "
			      "--max-namespaces-per-uid is 2"), 13);
		expect(kvp_connect(d.sock, "mine-b", &geo, &b) == 0, 14);	/* joining is */
		kvp_close(a);
		kvp_close(b);
		_exit(0);
	}
	child_wait(pid);
	/* root is not counted; a dropped namespace counts no more */
	ck_assert_int_eq(kvp_connect(d.sock, "roots", &geo, &c), 0);
	kvp_close(c);
	drop(d.sock, "mine-a");
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *x;

		become_nobody();
		expect(kvp_connect(d.sock, "mine-c", &geo, &x) == 0, 20);
		kvp_close(x);
		_exit(0);
	}
	child_wait(pid);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_a_dropped_namespace_unpins_its_staging_buffers)
{
	char conf[128], name[32], log[8192];
	long base, pinned = 0;
	struct daemon d;
	kvp_client *c;
	int i;

	start(&d, conf, sizeof(conf), "", WITH_SPILL, NULL);
	base = vmpin_kb(d.pid);
	for (i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "tier%d", i);
		ck_assert_int_eq(kvp_connect(d.sock, name, &geo, &c), 0);
		kvp_close(c);
	}
	/* each tier registers its staging buffers (one per slot here: 511 of
	 * 8 KiB) with io_uring; the loop without io_uring (KVPOOL_IO=sync,
	 * and under valgrind) registers none */
	read_file(d.log, log, sizeof(log));
	if (strstr(log, "I/O by io_uring")) {
		pinned = vmpin_kb(d.pid);
		ck_assert_msg(pinned >= base + 4 * 4000, "VmPin %ld kB, was %ld", pinned, base);
	}
	for (i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "tier%d", i);
		drop(d.sock, name);
	}
	/* the kernel unpins once nothing uses the old buffers: it may take a
	 * moment after the unregistration */
	for (i = 0; i < 500 && (pinned = vmpin_kb(d.pid)) > base; i++)
		usleep(10 * 1000);
	ck_assert_msg(pinned <= base, "VmPin %ld kB after the drops, was %ld", pinned, base);
	daemon_stop(&d);
}
END_TEST

/* --- finding 11: what the listings and errors tell ------------------------- */

START_TEST(test_security_listings_show_only_namespaces_one_may_use)
{
	const kvp_key keys[5] = { { { 21 } }, { { 22 } }, { { 23 } }, { { 24 } }, { { 25 } } };
	struct kvp_wire_prefix pr[8];
	kvp_client *c;
	char conf[128];
	struct daemon d;
	pid_t pid;
	int i;

	start(&d, conf, sizeof(conf), "access = mine read @nogroup\n", 0, NULL);
	for (i = 0; i < 5; i++)
		publish_key(d.sock, i < 2 ? "mine" : "theirs", &keys[i]);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct kvp_wire_list_pages f = { .ns = "theirs" };
		struct kvp_wire_page pg[8];
		kvp_ns_stats_t ns[4];
		kvp_stats_t st;
		uint32_t mine = 99;
		int n, k;

		become_nobody();
		expect(kvp_connect(d.sock, NULL, NULL, &c) == 0, 10);
		n = kvp_stats(c, &st, ns, 4);	/* names and counts are for all */
		expect(n == 2, 11);
		for (k = 0; k < n; k++)
			if (!strcmp(ns[k].name, "mine"))
				mine = ns[k].id;
		expect(kvp_list_prefixes(c, NULL, 0, pr, 8, NULL) == 2, 12);
		expect(pr[0].ns_id == mine && pr[1].ns_id == mine, 13);
		expect(kvp_list_pages(c, NULL, pg, 8, NULL) == 2, 14);
		expect(pg[0].ns_id == mine && pg[1].ns_id == mine, 15);
		expect(kvp_list_prefixes(c, "theirs", 0, pr, 8, NULL) == -EACCES, 16);
		expect(strstr(kvp_last_error(), "needs a right there"), 17);
		expect(kvp_list_pages(c, &f, pg, 8, NULL) == -EACCES, 18);
		kvp_close(c);
		_exit(0);
	}
	child_wait(pid);
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &c), 0);
	ck_assert_int_eq(kvp_list_prefixes(c, NULL, 0, pr, 8, NULL), 5);	/* root: all */
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_security_a_refused_release_names_the_entry_it_stopped_at)
{
	struct kvp_wire_pages two = { .n = 2 };
	unsigned char rep[24], buf[8 + 3 * 8];
	char conf[128], why[512];
	struct kvp_wire_pages pl = { .n = 3 };
	uint64_t h[3];
	struct daemon d;
	int fd;

	start(&d, conf, sizeof(conf), "", 0, NULL);
	fd = raw_connect(d.sock);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(raw_hello(fd, "rel", &geo, NULL, 0), KVP_S_OK);
	ck_assert_int_eq(raw_send(fd, KVP_OP_ALLOC, 2, &two, sizeof(two)), 0);
	ck_assert_int_eq(raw_recv(fd, 2, rep, sizeof(rep), NULL), KVP_S_OK);
	memcpy(h, rep + 8, 16);
	h[2] = h[1] ^ (1ull << 32);	/* another generation: stale */
	memcpy(buf, &pl, sizeof(pl));
	memcpy(buf + 8, h, sizeof(h));
	ck_assert_int_eq(raw_send(fd, KVP_OP_RELEASE, 3, buf, sizeof(buf)), 0);
	ck_assert_int_eq(raw_recv(fd, 3, why, sizeof(why), NULL), KVP_S_STALE);
	ck_assert_msg(strstr(why, "(entry 2)") && strstr(why, "nothing was released"),
		      "the client was told: %s", why);
	/* and nothing was: both pages are still its own */
	memcpy(buf, &two, sizeof(two));
	ck_assert_int_eq(raw_send(fd, KVP_OP_RELEASE, 4, buf, 8 + 2 * 8), 0);
	ck_assert_int_eq(raw_recv(fd, 4, NULL, 0, NULL), KVP_S_OK);
	close(fd);
	daemon_stop(&d);
}
END_TEST

static Suite *security_suite(void)
{
	Suite *s = suite_create("security");
	TCase *tc;

	if (!harness_have_nobody()) {
		printf("check_security: the tests need root and the users nobody and "
		       "nogroup; not run\n");
		return s;
	}
	tc = tcase_create("memory");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_security_reader_cannot_reopen_its_slab_writable);
	suite_add_tcase(s, tc);
	tc = tcase_create("files");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_security_spill_dir_others_can_write_is_refused);
	tcase_add_test(tc, test_security_planted_tier_files_are_never_followed_or_trusted);
	tcase_add_test(tc, test_security_lock_and_pid_files_never_follow_links);
	tcase_add_test(tc, test_security_others_cannot_lock_out_a_restart);
	suite_add_tcase(s, tc);
	tc = tcase_create("rights");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_security_sighup_cuts_off_revoked_clients);
	suite_add_tcase(s, tc);
	tc = tcase_create("limits");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_security_one_uid_cannot_take_every_connection);
	tcase_add_test(tc, test_security_unread_replies_are_bounded_in_total);
	tcase_add_test(tc, test_security_one_big_reply_is_not_left_unread);
	tcase_add_test(tc, test_security_listings_know_a_page_s_holders);
	suite_add_tcase(s, tc);
	tc = tcase_create("leaks");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_security_listings_show_only_namespaces_one_may_use);
	tcase_add_test(tc, test_security_a_refused_release_names_the_entry_it_stopped_at);
	suite_add_tcase(s, tc);
	tc = tcase_create("namespaces");
	tcase_set_timeout(tc, 120);	/* 260 namespaces, under valgrind too */
	tcase_add_test(tc, test_security_bad_hello_after_a_warm_restart_changes_nothing);
	tcase_add_test(tc, test_security_reader_cannot_create_or_reshape_a_namespace);
	tcase_add_test(tc, test_security_drop_disconnects_the_namespace_clients);
	tcase_add_test(tc, test_security_namespaces_come_back_after_a_drop);
	tcase_add_test(tc, test_security_one_uid_creates_a_bounded_number_of_namespaces);
	tcase_add_test(tc, test_security_a_dropped_namespace_unpins_its_staging_buffers);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(security_suite());
}
