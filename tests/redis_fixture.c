/* SPDX-License-Identifier: MIT */
/*
 * redis_fixture.c - a real Redis Cluster (or plain servers) on loopback
 * for the tests of the remote tier (see redis_fixture.h): each test's own
 * cluster from tests/redis-cluster.sh, the shell helpers that drive it,
 * and the main() both test programs share.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"
#include "redis_fixture.h"

char root[64];		/* the parent's: every test's cluster under it */
char keyfile[96];	/* root/remote.key: every daemon's, so they share */
char dir[96];		/* this test's cluster */
unsigned port;		/* its first node's */

/* sh() - run the cluster script; its status. */
int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* sh_line() - the first line a shell command prints, into out (len
 * bytes, no newline; "" when none). */
void sh_line(char *out, size_t len, const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	if (!fgets(out, (int)len, f))
		out[0] = '\0';
	pclose(f);
	out[strcspn(out, "\r\n")] = '\0';
}

void cluster(const char *what, const char *more)
{
	ck_assert_int_eq(sh("%s/tests/redis-cluster.sh %s %s %u %s", KVP_SRCDIR, what, dir,
			    port, more ? more : ""), 0);
}

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

char url[256];

const char *cluster_url(void)
{
	snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%u,127.0.0.1:%u", port + 1,
		 port);
	return url;
}

/* setrange_one() - change one byte of key's value at offset 5000 (to 'Z',
 * or to 'Y' where it is 'Z' already: the value is ciphertext, so 1 in 256
 * holds 'Z' there), following a redirect; retried for up to 5 s while the
 * cluster answers with an error (a failover under load), since redis-cli
 * exits 0 on an error reply. */
void setrange_one(const char *k)
{
	ck_assert_msg(sh("for i in $(seq 50); do b=$(redis-cli -c -p %u getrange %s 5000 5000); "
			 "c=Z; [ \"$b\" = Z ] && c=Y; r=$(redis-cli -c -p %u setrange %s 5000 $c); "
			 "case \"$r\" in ''|*[!0-9]*) sleep 0.1;; *) exit 0;; esac; done; "
			 "echo \"setrange: $r\" >&2; exit 1", port, k, port, k) == 0,
		      "SETRANGE %s failed: see the test's stderr", k);
}

void kill_first_master(void)
{
	sh("%s/tests/redis-cluster.sh kill %s %u", KVP_SRCDIR, dir, port);
}

/* replica_in_sync() - the first master's replica has all it was sent. */
void replica_in_sync(void)
{
	ck_assert_int_eq(sh("for i in $(seq 100); do r=$(redis-cli -p %u info replication | "
			    "tr -d '\\r'); m=$(echo \"$r\" | sed -n 's/^master_repl_offset://p'); "
			    "s=$(echo \"$r\" | sed -n 's/^slave0:.*offset=\\([0-9]*\\).*/\\1/p'); "
			    "[ \"$m\" = \"$s\" ] && exit 0; sleep 0.05; done; exit 1", port), 0);
}

/* rf_setup() - a directory and a range of ports of this test's own. */
void rf_setup(void)
{
	snprintf(dir, sizeof(dir), "%s/XXXXXX", root);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	/* a range of its own per process: tests run in parallel */
	/* data ports 10000..19999, so that the cluster bus ports (+10000) are
	 * below the ephemeral ports and no test's data port is another's bus;
	 * or KVPOOL_TEST_PORTS's (the bus ports are 10000 above them) */
	port = harness_port_base(20);
	if (!port)
		port = 10000 + (unsigned)(getpid() % 499) * 20;
}

/* rf_teardown() - stop this test's cluster (main() stops what a failed
 * test left too). */
void rf_teardown(void)
{
	sh("%s/tests/redis-cluster.sh stop %s", KVP_SRCDIR, dir);
}

/* stop_all() - every cluster under root stopped, root removed. */
static void stop_all(void)
{
	sh("for d in %s/*/; do [ -d \"$d\" ] && %s/tests/redis-cluster.sh stop \"$d\"; done; "
	   "rm -rf %s", root, KVP_SRCDIR, root);
}

/*
 * watch() - a process of a session of its own (a signal to the suite's
 * process group does not reach it) that waits for this program to end,
 * however it ends (the suite stopped: SIGTERM, a CI time-out, SIGKILL),
 * then stops what it left: the Redis servers daemonize, and would stay.
 * It waits on a pipe whose write end this program and its forked tests
 * hold (close-on-exec: no server keeps it open).
 */
static void watch(void)
{
	int p[2];
	pid_t pid;
	char b;

	if (pipe2(p, O_CLOEXEC) < 0)
		return;		/* no watcher: the end of main() still stops them */
	pid = fork();
	if (pid == 0) {
		setsid();
		signal(SIGTERM, SIG_IGN);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		close(p[1]);
		while (read(p[0], &b, 1) < 0 && errno == EINTR)
			;
		stop_all();
		_exit(0);
	}
	close(p[0]);	/* p[1] open until this program and its tests are gone */
}

int rf_main(Suite *(*suite)(void), const char *prog)
{
	SRunner *sr;
	int failed;

	if (sh("command -v redis-server >/dev/null && command -v redis-cli >/dev/null")) {
		fprintf(stderr, "%s: SKIP: redis-server or redis-cli not found "
			"(Debian: apt-get install redis-server redis-tools)\n", prog);
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	snprintf(root, sizeof(root), "/tmp/kvp-remote-XXXXXX");
	if (!mkdtemp(root)) {
		fprintf(stderr, "%s: mkdtemp %s: %s\n", prog, root, strerror(errno));
		return EXIT_FAILURE;
	}
	snprintf(keyfile, sizeof(keyfile), "%s/remote.key", root);
	if (sh("(umask 077; head -c 32 /dev/urandom > %s)", keyfile) != 0) {
		fprintf(stderr, "%s: cannot write %s\n", prog, keyfile);
		return EXIT_FAILURE;
	}
	watch();
	sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	/* a failed test's teardown does not run: stop what it left here */
	stop_all();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

