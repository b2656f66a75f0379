/* SPDX-License-Identifier: MIT */
/*
 * harness.c - start and stop a real kvpoold for integration tests.
 *
 * Readiness comes from the daemon itself (sd_notify READY=1 on a datagram
 * socket in the test's directory) and exit from a pidfd, so no test
 * sleeps to wait for something it could wait on.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <grp.h>
#include <pwd.h>

#include "client/wire.h"
#include "harness.h"

#define READY_TIMEOUT_MS 20000

const char *harness_kvpoold(void)
{
	const char *p = getenv("KVPOOLD");

	return p && *p ? p : "../daemon/kvpoold";
}

const char *harness_cli(void)
{
	const char *p = getenv("KVPOOL_CLI");

	return p && *p ? p : "../client/kvpool";
}

void read_file(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	buf[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, len - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
}

int harness_pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

void daemon_dir(struct daemon *d)
{
	memset(d, 0, sizeof(*d));
	strcpy(d->dir, "/tmp/kvpool-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(d->dir));
	snprintf(d->sock, sizeof(d->sock), "%s/kvpool.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvpoold.log", d->dir);
}

void daemon_start(struct daemon *d, const char *const *args)
{
	daemon_dir(d);
	daemon_restart(d, args);
}

void daemon_restart(struct daemon *d, const char *const *args)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *argv[64], **envp;
	char notify[128], notify_env[160], msg[256], log[4096];
	struct pollfd pfd[2];
	int nfd, n = 0, i, rc;
	ssize_t len;

	snprintf(notify, sizeof(notify), "%s/notify", d->dir);
	/* The child's environment is made here: a process with threads (a
	 * test's ZeroMQ context) may fork while one holds the allocator's
	 * lock, and the child must not allocate before exec. */
	snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s", notify);
	for (i = 0; environ[i]; i++)
		;
	envp = calloc((size_t)i + 2, sizeof(*envp));
	ck_assert_ptr_nonnull(envp);
	for (i = 0, rc = 0; environ[i]; i++)
		if (strncmp(environ[i], "NOTIFY_SOCKET=", 14))
			envp[rc++] = environ[i];
	envp[rc] = notify_env;

	nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(nfd, 0);
	strcpy(sa.sun_path, notify);
	unlink(notify);
	ck_assert_int_eq(bind(nfd, (struct sockaddr *)&sa, sizeof(sa)), 0);

	argv[n++] = harness_kvpoold();
	argv[n++] = "--foreground";
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	for (i = 0; args && args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;

	unlink(d->log);	/* a restart's log starts empty: its "listening on" is new */
	d->pid = fork();
	ck_assert_int_ge(d->pid, 0);
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		/* A failed test exits its process: the daemon goes with it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		execve(argv[0], (char *const *)argv, (char *const *)envp);
		if (write(STDERR_FILENO, "exec failed: ", 13) > 0 &&
		    write(STDERR_FILENO, argv[0], strlen(argv[0])) > 0)
			(void)!write(STDERR_FILENO, "\n", 1);
		_exit(127);	/* the test reads this in the log */
	}
	free(envp);
	d->pidfd = harness_pidfd_open(d->pid);
	ck_assert_int_ge(d->pidfd, 0);

	pfd[0] = (struct pollfd){ .fd = nfd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = d->pidfd, .events = POLLIN };
#ifndef HAVE_LIBSYSTEMD
	/* a kvpoold without libsystemd sends no READY=1: it is ready once it
	 * logs that it listens (a probe connection would count as a client) */
	for (i = 0; i < READY_TIMEOUT_MS / 10; i++) {
		read_file(d->log, log, sizeof(log));
		if (strstr(log, " listening on ")) {
			close(nfd);
			return;
		}
		if (poll(&pfd[1], 1, 10) > 0)
			break;
	}
#endif
	for (;;) {
		rc = poll(pfd, 2, READY_TIMEOUT_MS);
		if (rc == 0 || pfd[1].revents) {
			read_file(d->log, log, sizeof(log));
			ck_abort_msg("kvpoold did not become ready (%s); its log:\n%s",
				     rc == 0 ? "timeout" : "it exited", log);
		}
		len = recv(nfd, msg, sizeof(msg) - 1, 0);
		if (len <= 0)
			continue;
		msg[len] = '\0';
		if (strstr(msg, "READY=1"))
			break;
	}
	close(nfd);
}

int daemon_wait_exit(struct daemon *d, int ms)
{
	struct pollfd pfd = { .fd = d->pidfd, .events = POLLIN };
	int status;

	if (poll(&pfd, 1, ms) != 1)
		return -1;
	if (waitpid(d->pid, &status, 0) != d->pid)
		return -1;
	return status;
}

void stats_of(const char *sock, struct kvp_wire_stats *st)
{
	kvp_client *c;
	int rc;

	rc = kvp_connect(sock, NULL, NULL, &c);
	ck_assert_msg(rc == 0, "connect %s: %s", sock, kvp_strerror(rc));
	rc = kvp_stats(c, st, NULL, 0);
	kvp_close(c);
	ck_assert_msg(rc >= 0, "STATS: %s", kvp_strerror(rc));
}

void check_conservation(const char *sock)
{
	struct kvp_wire_stats st;
	uint64_t sum;

	stats_of(sock, &st);
	sum = st.pages_free + st.pages_private + st.pages_shared +
	      st.pages_cached + st.pages_spilled + st.pages_inflight;
	ck_assert_msg(sum == st.pages_total,
		      "conservation: free %llu + private %llu + shared %llu + "
		      "cached %llu + spilled %llu + in flight %llu != total %llu",
		      (unsigned long long)st.pages_free,
		      (unsigned long long)st.pages_private,
		      (unsigned long long)st.pages_shared,
		      (unsigned long long)st.pages_cached,
		      (unsigned long long)st.pages_spilled,
		      (unsigned long long)st.pages_inflight,
		      (unsigned long long)st.pages_total);
	ck_assert_msg(st.flags & KVP_STATS_F_CONSERVED,
		      "the daemon's own recount of every page disagrees with its counts");
}

void daemon_stop(struct daemon *d)
{
	daemon_halt(d);
	daemon_cleanup(d);
}

void daemon_halt(struct daemon *d)
{
	char log[4096];
	struct stat st;
	int status;

	check_conservation(d->sock);
	ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
	status = daemon_wait_exit(d, READY_TIMEOUT_MS);
	read_file(d->log, log, sizeof(log));
	ck_assert_msg(status >= 0, "kvpoold did not exit after SIGTERM; log:\n%s", log);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "kvpoold exited with status 0x%x; log:\n%s", status, log);
	ck_assert_msg(lstat(d->sock, &st) < 0 && errno == ENOENT,
		      "socket %s still exists after shutdown", d->sock);
	close(d->pidfd);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void daemon_cleanup(struct daemon *d)
{
	nftw(d->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

int run_cmd(const char *const argv[], char *out, size_t outlen)
{
	size_t used = 0;
	int p[2], status;
	ssize_t n;
	pid_t pid;

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		char scratch[512];

		if (used + 1 < outlen)
			n = read(p[0], out + used, outlen - 1 - used);
		else
			n = read(p[0], scratch, sizeof(scratch));	/* drain */
		if (n <= 0)
			break;
		if (used + 1 < outlen)
			used += (size_t)n;
	}
	out[used] = '\0';
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

void harness_fill(void *page, size_t bytes, const kvp_key *k)
{
	uint64_t x, *w = page;
	size_t i;

	memcpy(&x, k->b, sizeof(x));
	for (i = 0; i < bytes / 8; i++)
		w[i] = x ^ (i * 0x9e3779b97f4a7c15ull);
}

bool harness_holds(const void *page, size_t bytes, const kvp_key *k)
{
	const uint64_t *w = page;
	uint64_t x;
	size_t i;

	memcpy(&x, k->b, sizeof(x));
	for (i = 0; i < bytes / 8; i++)
		if (w[i] != (x ^ (i * 0x9e3779b97f4a7c15ull)))
			return false;
	return true;
}

void harness_tokens(uint32_t *t, size_t n, size_t prompt_len, uint32_t who)
{
	size_t i;

	for (i = 0; i < n; i++)
		t[i] = i < prompt_len ? (uint32_t)(i * 7 + 3) % 50000
				      : (uint32_t)(who * 1000 + i) % 50000 + 60000;
}

int harness_serve(kvp_client *c, const uint32_t *t, size_t n, kvp_page *out)
{
	size_t bt = kvp_block_tokens(c), pb = kvp_page_bytes(c), nb = n / bt, i, k;
	kvp_key *keys = calloc(nb + 1, sizeof(*keys));
	kvp_page *mine = calloc(nb + 1, sizeof(*mine));
	int hits, rc;

	ck_assert(keys && mine);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, n, NULL, 0, keys), (int)nb);
	hits = kvp_acquire(c, NULL, keys, nb, NULL, 0, out, NULL);
	ck_assert_msg(hits >= 0, "acquire: %s", kvp_strerror(hits));
	k = nb - (size_t)hits;
	if (k) {
		rc = kvp_alloc(c, k, mine);
		ck_assert_msg(rc == 0, "alloc: %s %s", kvp_strerror(rc), kvp_last_error());
		for (i = 0; i < k; i++)
			harness_fill(kvp_page_ptr(c, mine[i]), pb, &keys[(size_t)hits + i]);
		rc = kvp_publish(c, hits ? &keys[hits - 1] : NULL, mine, keys + hits, k,
				 KVP_PRIO_NORMAL, out + hits);
		ck_assert_msg(rc == 0, "publish: %s %s", kvp_strerror(rc), kvp_last_error());
		/* drop our duplicates of keys someone else published first */
		for (i = 0; i < k; i++)
			if (out[(size_t)hits + i] != mine[i])
				ck_assert_int_eq(kvp_release(c, &mine[i], 1), 0);
	}
	for (i = 0; i < nb; i++)
		ck_assert_msg(harness_holds(kvp_page_ptr(c, out[i]), pb, &keys[i]),
			      "block %zu does not hold the bytes of its key", i);
	free(keys);
	free(mine);
	return hits;
}

int harness_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

unsigned log_count(const struct daemon *d, const char *text)
{
	static char log[1 << 17];
	const char *at = log;
	unsigned n = 0;

	read_file(d->log, log, sizeof(log));
	while ((at = strstr(at, text)) != NULL) {
		n++;
		at += strlen(text);
	}
	return n;
}

long proc_kib(pid_t pid, const char *field)
{
	char path[64], line[256], name[64];
	long kib = -1, v;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	while (kib < 0 && fgets(line, sizeof(line), f))
		if (sscanf(line, "%63[^:]: %ld kB", name, &v) == 2 && !strcmp(name, field))
			kib = v;
	fclose(f);
	ck_assert_msg(kib >= 0, "%s has no %s", path, field);
	return kib;
}

void wait_log(const struct daemon *d, const char *text)
{
	static char log[1 << 16];
	int i;

	for (i = 0; i < 500; i++) {
		read_file(d->log, log, sizeof(log));
		if (strstr(log, text))
			return;
		usleep(10 * 1000);
	}
	ck_abort_msg("kvpoold's log never said '%s':\n%s", text, log);
}

/* --- the raw protocol ------------------------------------------------------ */

int raw_connect(const char *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), e;

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int raw_send(int fd, uint16_t op, uint64_t id, const void *payload, size_t len)
{
	static unsigned char buf[KVP_WIRE_MAX_MSG_DEFAULT * 2];
	struct kvp_wire_hdr h = { .op = op, .req_id = id, .len = (uint32_t)len };
	ssize_t n;

	if (len > sizeof(buf) - KVP_WIRE_HDR_SIZE)
		return -EMSGSIZE;
	wire_hdr_encode(buf, &h);
	if (len)
		memcpy(buf + KVP_WIRE_HDR_SIZE, payload, len);
	n = send(fd, buf, KVP_WIRE_HDR_SIZE + len, MSG_NOSIGNAL);
	if (n < 0)
		return -errno;
	return n == (ssize_t)(KVP_WIRE_HDR_SIZE + len) ? 0 : -EIO;
}

int raw_recv(int fd, uint64_t id, void *out, size_t outlen, int *rfd)
{
	static unsigned char buf[KVP_WIRE_MAX_MSG_DEFAULT];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	struct kvp_wire_hdr h;
	int passed = -1;
	ssize_t n;

	if (rfd)
		*rfd = -1;
	n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return -1;
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&passed, CMSG_DATA(cm), sizeof(int));
	if (rfd)
		*rfd = passed;
	else if (passed >= 0)
		close(passed);
	if (wire_hdr_decode(buf, (size_t)n, &h) < 0 || !(h.flags & KVP_WIRE_F_REPLY) ||
	    h.req_id != id)
		return -2;
	if (out && outlen) {
		size_t k = h.len < outlen ? h.len : outlen;

		memcpy(out, buf + KVP_WIRE_HDR_SIZE, k);
		if (k < outlen)
			((char *)out)[k] = '\0';
	}
	return (int)h.status;
}

int raw_hello(int fd, const char *ns, const kvp_geometry *g, char *why, size_t whylen)
{
	struct kvp_wire_hello h;
	int rc;

	memset(&h, 0, sizeof(h));
	if (ns)
		snprintf(h.ns, sizeof(h.ns), "%s", ns);
	snprintf(h.client_name, sizeof(h.client_name), "raw");
	if (g) {
		snprintf(h.model, sizeof(h.model), "%s", g->model ? g->model : "");
		h.layers = g->layers;
		h.kv_heads = g->kv_heads;
		h.head_dim = g->head_dim;
		h.block_tokens = g->block_tokens;
		h.dtype = g->dtype;
		h.key_scheme = g->key_scheme;
	}
	rc = raw_send(fd, KVP_OP_HELLO, 1, &h, sizeof(h));
	if (rc < 0)
		return -1;
	return raw_recv(fd, 1, why, whylen, NULL);
}

/* --- another uid ------------------------------------------------------------ */

uid_t harness_nobody_uid;
gid_t harness_nogroup_gid;

bool harness_have_nobody(void)
{
	struct passwd *pw = getpwnam("nobody");
	struct group *gr = getgrnam("nogroup");

	if (geteuid() != 0 || !pw || !gr)
		return false;
	harness_nobody_uid = pw->pw_uid;
	harness_nogroup_gid = gr->gr_gid;
	return true;
}

void become_nobody(void)
{
	if (setgroups(1, &harness_nogroup_gid) < 0 || setgid(harness_nogroup_gid) < 0 ||
	    setuid(harness_nobody_uid) < 0) {
		perror("dropping to nobody");
		_exit(90);
	}
}

void child_wait(pid_t pid)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child failed at step %d (see its message above)",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
}

/* test_ports() - KVPOOL_TEST_PORTS's range into *lo, *hi: false when it
 * is unset; a malformed one aborts the test, naming it. */
static bool test_ports(unsigned *lo, unsigned *hi)
{
	const char *spec = getenv("KVPOOL_TEST_PORTS");

	if (!spec || !*spec)
		return false;
	ck_assert_msg(sscanf(spec, "%u-%u", lo, hi) == 2 && *lo > 0 && *lo <= *hi &&
		      *hi < 65536, "KVPOOL_TEST_PORTS=%s is not LO-HI, two ports", spec);
	return true;
}

int harness_bind_loopback(int fd, struct sockaddr_in *a)
{
	static bool seeded;
	socklen_t l = sizeof(*a);
	unsigned lo, hi, i;

	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!test_ports(&lo, &hi)) {
		if (bind(fd, (struct sockaddr *)a, sizeof(*a)) < 0 ||
		    getsockname(fd, (struct sockaddr *)a, &l) < 0)
			return -errno;
		return ntohs(a->sin_port);
	}
	if (!seeded) {	/* each process its own picks: tests run side by side */
		srandom((unsigned)getpid() ^ (unsigned)harness_now_ns());
		seeded = true;
	}
	/* the range's lower half: the upper one is the Redis Clusters' */
	hi = lo + (hi - lo + 1) / 2 - 1;
	for (i = 0; i < 1000; i++) {
		a->sin_port = htons((uint16_t)(lo + (unsigned)random() % (hi - lo + 1)));
		if (bind(fd, (struct sockaddr *)a, sizeof(*a)) == 0)
			return ntohs(a->sin_port);
	}
	return -EADDRINUSE;
}

unsigned harness_port_base(unsigned span)
{
	unsigned lo, hi, slots;

	if (!test_ports(&lo, &hi))
		return 0;
	ck_assert_msg(hi + 10000 <= 65535, "KVPOOL_TEST_PORTS=%u-%u: a Redis Cluster's bus "
		      "ports are 10000 above its ports; keep the range under 55536", lo, hi);
	lo += (hi - lo + 1) / 2;	/* the upper half: single ports take the lower */
	slots = (hi - lo + 1) / span;
	ck_assert_msg(slots > 0, "KVPOOL_TEST_PORTS=%u-%u: its upper half holds fewer than "
		      "the %u ports a Redis Cluster of a test takes", lo, hi, span);
	return lo + (unsigned)(getpid() % (int)slots) * span;
}

uint64_t harness_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
