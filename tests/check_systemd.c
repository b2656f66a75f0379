/* SPDX-License-Identifier: MIT */
/*
 * check_systemd.c - kvpoold under systemd: the units of contrib/systemd
 * pass `systemd-analyze verify`; kvpoold started by systemd's own
 * `systemd-socket-activate --seqpacket` serves the client whose
 * connection started it (it connected before kvpoold was ready) on the
 * socket it was handed, and leaves that socket in place; the notify
 * messages (READY=1 with STATUS=, WATCHDOG=1 from the loop, which stop
 * while the loop is stopped, STOPPING=1) arrive on a NOTIFY_SOCKET the
 * test listens on. Exits 77 (skip) when kvpoold was built without
 * libsystemd, saying so.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

#ifdef HAVE_LIBSYSTEMD

struct notify {
	int fd;
	char path[128];
	char seen[16384];	/* every message so far, one a line */
	size_t len;
};

static uint64_t ms_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void notify_open(struct notify *n, const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(n, 0, sizeof(*n));
	snprintf(n->path, sizeof(n->path), "%s/notify", dir);
	n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(n->fd, 0);
	strcpy(sa.sun_path, n->path);
	ck_assert_int_eq(bind(n->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

/* notify_count() - messages that arrive within ms, appended to seen;
 * returns how many hold what (NULL: any). */
static int notify_count(struct notify *n, int ms, const char *what)
{
	uint64_t end = ms_now() + (uint64_t)ms;
	int count = 0;

	for (;;) {
		struct pollfd p = { .fd = n->fd, .events = POLLIN };
		uint64_t now = ms_now();
		char msg[1024];
		ssize_t len;

		if (now >= end || poll(&p, 1, (int)(end - now)) <= 0)
			return count;
		len = recv(n->fd, msg, sizeof(msg) - 1, 0);
		if (len <= 0)
			continue;
		msg[len] = '\0';
		if (!what || strstr(msg, what))
			count++;
		if (n->len + (size_t)len + 2 < sizeof(n->seen)) {
			memcpy(n->seen + n->len, msg, (size_t)len);
			n->len += (size_t)len;
			n->seen[n->len++] = '\n';
			n->seen[n->len] = '\0';
		}
	}
}

/* notify_wait() - wait up to ms for a message holding what. */
static bool notify_wait(struct notify *n, int ms, const char *what)
{
	uint64_t end = ms_now() + (uint64_t)ms;

	while (ms_now() < end)
		if (notify_count(n, 50, what) > 0)
			return true;
	return false;
}

/* spawn() - run argv with NOTIFY_SOCKET (and more env, "K=V" strings,
 * NULL-terminated) and stderr into log. */
static pid_t spawn(const char *const *argv, const char *notify, const char *const *env,
		   const char *log)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("WATCHDOG_USEC");
		unsetenv("WATCHDOG_PID");
		setenv("NOTIFY_SOCKET", notify, 1);
		for (; env && *env; env++)
			putenv((char *)*env);
		execvp(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

static int wait_exit(pid_t pid, int ms)
{
	uint64_t end = ms_now() + (uint64_t)ms;
	int status;

	while (ms_now() < end) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return status;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

static void make_dir(char *dir, size_t len)
{
	snprintf(dir, len, "/tmp/kvpool-sd-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* which() - the path of prog on $PATH into buf; false when it is not there. */
static bool which(const char *prog, char *buf, size_t len)
{
	char cmd[256];
	FILE *f;
	bool ok;

	snprintf(cmd, sizeof(cmd), "command -v %s 2>/dev/null", prog);
	f = popen(cmd, "r");
	if (!f)
		return false;
	ok = fgets(buf, (int)len, f) != NULL;
	pclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return ok && buf[0] == '/';
}

static bool have(const char *prog)
{
	char path[PATH_MAX];

	return which(prog, path, sizeof(path));
}

START_TEST(test_the_units_verify)
{
	const char *src = getenv("KVPOOL_SRCDIR"), *real = getenv("KVPOOLD_REAL");
	char dir[64], cmd[2 * PATH_MAX + 512], out[8192], abs[PATH_MAX];
	const char *argv[] = { NULL, "verify", "--man=no", NULL, NULL, NULL };
	char sock[256], svc[256], prog[PATH_MAX];
	int st;

	ck_assert_msg(which("systemd-analyze", prog, sizeof(prog)), "systemd-analyze is "
		      "missing: apt-get install systemd (contrib/quickstart test does)");
	argv[0] = prog;
	ck_assert_ptr_nonnull(src);
	ck_assert_ptr_nonnull(realpath(real ? real : harness_kvpoold(), abs));
	make_dir(dir, sizeof(dir));
	/* ExecStart= must name an executable that exists: the one built here */
	snprintf(cmd, sizeof(cmd), "sed 's|/usr/sbin/kvpoold|%s|' '%s/contrib/systemd/kvpoold."
		 "service' > %s/kvpoold.service && cp '%s/contrib/systemd/kvpoold.socket' %s/",
		 abs, src, dir, src, dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(sock, sizeof(sock), "%s/kvpoold.socket", dir);
	snprintf(svc, sizeof(svc), "%s/kvpoold.service", dir);
	argv[3] = sock;
	argv[4] = svc;
	st = run_cmd(argv, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0 && out[0] == '\0',
		      "systemd-analyze verify: status %d:\n%s", st, out);
	remove_dir(dir);
}
END_TEST

/* The unit allows AF_UNIX only, which stops --metrics-listen, --kv-events
 * tcp:// and --remote from opening sockets; the drop-in the package ships
 * (contrib/systemd/network.conf) allows AF_INET and AF_INET6: it
 * verifies with the unit, and where a systemd manager runs, kvpoold
 * under the unit's restriction cannot listen for /metrics and can with
 * the drop-in's. */
START_TEST(test_the_network_drop_in_verifies_and_opens_inet)
{
	const char *src = getenv("KVPOOL_SRCDIR"), *real = getenv("KVPOOLD_REAL");
	char dir[64], cmd[3 * PATH_MAX + 512], out[8192], abs[PATH_MAX], prog[PATH_MAX];
	const char *argv[] = { NULL, "verify", "--man=no", NULL, NULL };
	char svc[256];
	int st, i;

	static const char *const runs[2] = { "AF_UNIX", "AF_UNIX AF_INET AF_INET6" };

	ck_assert_msg(which("systemd-analyze", prog, sizeof(prog)), "systemd-analyze is "
		      "missing: apt-get install systemd (contrib/quickstart test does)");
	argv[0] = prog;
	ck_assert_ptr_nonnull(src);
	ck_assert_ptr_nonnull(realpath(real ? real : harness_kvpoold(), abs));
	make_dir(dir, sizeof(dir));
	snprintf(cmd, sizeof(cmd), "grep -qx 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' "
		 "'%s/contrib/systemd/network.conf' && "
		 "sed 's|/usr/sbin/kvpoold|%s|' '%s/contrib/systemd/kvpoold.service' > "
		 "%s/kvpoold.service && cp '%s/contrib/systemd/kvpoold.socket' %s/ && "
		 "mkdir %s/kvpoold.service.d && cp '%s/contrib/systemd/network.conf' "
		 "%s/kvpoold.service.d/", src, abs, src, dir, src, dir, dir, src, dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(svc, sizeof(svc), "%s/kvpoold.service", dir);
	argv[3] = svc;
	/* the unit with its drop-in, as systemd finds it in the unit path
	 * (the trailing ':' keeps the default path after it); a line of the
	 * drop-in that systemd cannot parse would be output */
	snprintf(cmd, sizeof(cmd), "%s:", dir);
	setenv("SYSTEMD_UNIT_PATH", cmd, 1);
	st = run_cmd(argv, out, sizeof(out));
	unsetenv("SYSTEMD_UNIT_PATH");
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0 && out[0] == '\0',
		      "systemd-analyze verify with network.conf: status %d:\n%s", st, out);
	if (system("systemctl is-system-running >/dev/null 2>&1 || "
		   "[ \"$(systemctl is-system-running 2>/dev/null)\" = degraded ]") != 0) {
		printf("check_systemd: no systemd manager runs here: kvpoold under the "
		       "unit's RestrictAddressFamilies= not tried (systemd-run needs one)\n");
		remove_dir(dir);
		return;
	}
	for (i = 0; i < 2; i++) {
		/* kvpoold in a transient unit with one or the other restriction,
		 * stopped by timeout(1) after 3 s */
		snprintf(cmd, sizeof(cmd), "systemd-run --quiet --wait --collect --pipe "
			 "-p 'RestrictAddressFamilies=%s' timeout -s TERM 3 %s --foreground "
			 "--socket %s/run%d.sock --metrics-listen 127.0.0.1:%u --pool-size 1M "
			 "--slab-size 1M >%s/run%d.log 2>&1", runs[i], abs, dir, i,
			 20000 + (unsigned)getpid() % 20000, dir, i);
		st = system(cmd);
		snprintf(cmd, sizeof(cmd), "%s/run%d.log", dir, i);
		read_file(cmd, out, sizeof(out));
		if (i == 0)
			ck_assert_msg(strstr(out, "Address family not supported"),
				      "AF_UNIX only, and kvpoold listened:\n%s", out);
		else
			ck_assert_msg(strstr(out, "metrics: Prometheus text at"),
				      "with network.conf, no /metrics:\n%s", out);
	}
	remove_dir(dir);
}
END_TEST

/* A client connects before kvpoold runs at all: systemd-socket-activate
 * holds the socket and starts kvpoold at that first connection, handing
 * it over; the client is served once kvpoold is ready. */
START_TEST(test_socket_activation_serves_the_client_that_came_first)
{
	char dir[64], sock[128], log[128], text[8192];
	const char *argv[12];
	struct kvp_wire_stats st;
	struct notify n;
	struct stat sb;
	kvp_client *c;
	pid_t pid;
	int i, rc;

	ck_assert_msg(have("systemd-socket-activate"), "systemd-socket-activate is missing: "
		      "apt-get install systemd");
	make_dir(dir, sizeof(dir));
	snprintf(sock, sizeof(sock), "%s/kvpool.sock", dir);
	snprintf(log, sizeof(log), "%s/log", dir);
	notify_open(&n, dir);
	i = 0;
	argv[i++] = "systemd-socket-activate";
	argv[i++] = "--seqpacket";
	argv[i++] = "-l";
	argv[i++] = sock;
	argv[i++] = "-E";
	argv[i++] = "NOTIFY_SOCKET";
	argv[i++] = harness_kvpoold();
	argv[i++] = "--foreground";
	argv[i++] = "--socket";
	argv[i++] = sock;
	argv[i] = NULL;
	pid = spawn(argv, n.path, NULL, log);
	for (i = 0; i < 500 && stat(sock, &sb) < 0; i++)
		usleep(10000);
	ck_assert_msg(i < 500, "systemd-socket-activate made no socket");
	ck_assert_int_eq(notify_count(&n, 100, "READY=1"), 0);	/* not started yet */

	rc = kvp_connect(sock, NULL, NULL, &c);	/* this connection starts kvpoold */
	ck_assert_msg(rc == 0, "connect: %s", kvp_strerror(rc));
	ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
	kvp_close(c);
	ck_assert_msg(notify_wait(&n, 5000, "READY=1"), "no READY=1: %s", n.seen);
	read_file(log, text, sizeof(text));
	ck_assert_msg(strstr(text, "socket activation: listening on the socket systemd "
			     "passed"), "%s", text);
	check_conservation(sock);

	kill(pid, SIGTERM);
	ck_assert_msg(notify_wait(&n, 5000, "STOPPING=1"), "no STOPPING=1: %s", n.seen);
	rc = wait_exit(pid, 10000);
	read_file(log, text, sizeof(text));
	ck_assert_msg(rc == 0, "kvpoold exited with %d: %s", rc, text);
	/* the socket is systemd's: it stays for the next start's clients */
	ck_assert_int_eq(stat(sock, &sb), 0);
	close(n.fd);
	remove_dir(dir);
}
END_TEST

START_TEST(test_a_socket_for_another_path_is_refused_with_the_fix)
{
	char dir[64], sock[128], other[128], log[128], text[8192];
	const char *argv[12];
	struct notify n;
	struct stat sb;
	kvp_client *c;
	pid_t pid;
	int i, rc;

	make_dir(dir, sizeof(dir));
	snprintf(sock, sizeof(sock), "%s/kvpool.sock", dir);
	snprintf(other, sizeof(other), "%s/other.sock", dir);
	snprintf(log, sizeof(log), "%s/log", dir);
	notify_open(&n, dir);
	i = 0;
	argv[i++] = "systemd-socket-activate";
	argv[i++] = "--seqpacket";
	argv[i++] = "-l";
	argv[i++] = other;
	argv[i++] = harness_kvpoold();
	argv[i++] = "--foreground";
	argv[i++] = "--socket";
	argv[i++] = sock;
	argv[i] = NULL;
	pid = spawn(argv, n.path, NULL, log);
	for (i = 0; i < 500 && stat(other, &sb) < 0; i++)
		usleep(10000);
	rc = kvp_connect(other, NULL, NULL, &c);
	if (rc == 0)
		kvp_close(c);
	rc = wait_exit(pid, 10000);
	read_file(log, text, sizeof(text));
	ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "status %d: %s", rc, text);
	ck_assert_msg(strstr(text, "none a listening SOCK_SEQPACKET socket at") &&
		      strstr(text, "ListenSequentialPacket="), "%s", text);
	ck_assert_int_ne(stat(sock, &sb), 0);	/* nothing bound in its place */
	close(n.fd);
	remove_dir(dir);
}
END_TEST

/* WATCHDOG=1 comes from the loop: stopped with SIGSTOP, the pings stop
 * (systemd would restart it), and they come back with SIGCONT. */
START_TEST(test_notify_ready_status_watchdog_and_stopping)
{
	char dir[64], sock[128], log[128], text[8192];
	const char *env[] = { "WATCHDOG_USEC=200000", NULL };
	const char *argv[8];
	struct notify n;
	pid_t pid;
	int pings, rc;

	make_dir(dir, sizeof(dir));
	snprintf(sock, sizeof(sock), "%s/kvpool.sock", dir);
	snprintf(log, sizeof(log), "%s/log", dir);
	notify_open(&n, dir);
	argv[0] = harness_kvpoold();
	argv[1] = "--foreground";
	argv[2] = "--socket";
	argv[3] = sock;
	argv[4] = NULL;
	pid = spawn(argv, n.path, env, log);
	ck_assert_msg(notify_wait(&n, 20000, "READY=1"), "no READY=1: %s", n.seen);
	ck_assert_msg(strstr(n.seen, "STATUS=serving: 0 clients, 0 namespaces; pages:"),
		      "READY without its STATUS=: %s", n.seen);
	check_conservation(sock);

	/* every 100 ms (half of WatchdogSec 200 ms): about 10 in a second */
	pings = notify_count(&n, 1000, "WATCHDOG=1");
	ck_assert_msg(pings >= 5, "%d WATCHDOG=1 in a second: %s", pings, n.seen);
	kill(pid, SIGSTOP);
	notify_count(&n, 150, NULL);	/* one may have been sent as it stopped */
	pings = notify_count(&n, 700, "WATCHDOG=1");
	ck_assert_msg(pings == 0, "%d WATCHDOG=1 from a stopped loop", pings);
	kill(pid, SIGCONT);
	ck_assert_msg(notify_wait(&n, 1000, "WATCHDOG=1"), "no WATCHDOG=1 after SIGCONT");
	read_file(log, text, sizeof(text));
	ck_assert_msg(strstr(text, "systemd watchdog: WATCHDOG=1 every 100 ms"), "%s", text);

	kill(pid, SIGTERM);
	ck_assert_msg(notify_wait(&n, 5000, "STOPPING=1"), "no STOPPING=1: %s", n.seen);
	rc = wait_exit(pid, 10000);
	ck_assert_msg(rc == 0, "kvpoold exited with %d", rc);
	close(n.fd);
	remove_dir(dir);
}
END_TEST

static Suite *systemd_suite(void)
{
	Suite *s = suite_create("systemd");
	TCase *tc = tcase_create("units");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_the_units_verify);
	tcase_add_test(tc, test_the_network_drop_in_verifies_and_opens_inet);
	suite_add_tcase(s, tc);

	tc = tcase_create("activation");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_socket_activation_serves_the_client_that_came_first);
	tcase_add_test(tc, test_a_socket_for_another_path_is_refused_with_the_fix);
	suite_add_tcase(s, tc);

	tc = tcase_create("notify");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_notify_ready_status_watchdog_and_stopping);
	suite_add_tcase(s, tc);
	return s;
}

#endif /* HAVE_LIBSYSTEMD */

int main(void)
{
#ifndef HAVE_LIBSYSTEMD
	printf("SKIP: kvpoold was built without libsystemd (configure found no "
	       "libsystemd-dev): no socket activation or notify to test\n");
	return 77;
#else
	return harness_run(systemd_suite());
#endif
}
