/* SPDX-License-Identifier: MIT */
/*
 * fuzz_session.c - libFuzzer harness of whole sessions: an in-process
 * kvpoold (host backend, a small pool with a host tier and an NVMe tier,
 * access rules from a config file, its real loop and socket) and up to
 * four client connections, each of its own uid, that send the messages
 * an input describes and read the replies. An input may also close a
 * connection, attach a file descriptor to a request, change the rules
 * and send the daemon SIGHUP, or restart the daemon on its tier files.
 *
 * After every input the connections are closed, and then no page may be
 * leased or in flight and the pool's recount must agree with its counts
 * (the conservation invariant); then every namespace is dropped, after
 * which no slab, no fixed buffer and no file descriptor the input made
 * may be left. Anything else aborts. ASan and UBSan watch the daemon's
 * code meanwhile. Each input starts from the same empty daemon.
 *
 * An input is a sequence of chunks; the first byte's value modulo 8 says
 * what a chunk is (little endian throughout):
 *   0 | OP:u16 | LEN:u16 | LEN bytes   a request with a well-formed header
 *   1 | LEN:u16 | LEN bytes            raw bytes sent as one message
 *   2 | CONN | WHO                     use connection CONN % 4, connecting
 *                                      it first as WHO % 4 (0 root, else
 *                                      uid 1000 + WHO) if it is closed
 *   3                                  close the connection in use
 *   4 | OP:u16 | LEN:u16 | LEN bytes   as 0, with a descriptor attached
 *   5 | RULES                          rule set RULES % 4, then SIGHUP
 *   6                                  restart the daemon (warm)
 *   7                                  as 0
 * Requests go to the connection in use (connection 0, as root, when
 * none is).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/compose.h"
#include "daemon/log.h"
#include "daemon/requests/ns.h"
#include "daemon/serve/conn.h"
#include "daemon/serve/server.h"

#define TURN_MS		20	/* a reply comes within a turn or two */
#define TURNS_MAX	200	/* no reply after this many: a hang */
#define CONNS		4

/* The access rules a chunk of kind 5 may choose (uids 1001..1003). */
static const char *const rule_sets[4] = {
	"",
	"access = * read,write 1001\naccess = * read 1002\n",
	"access = fuzz read 1001\naccess = * read,write 1002\naccess = fuzz admin 1003\n",
	"access = * all 1003\naccess = other read 1001\n",
};

static struct options opt;
static struct loop loop;
static struct backend be;
static struct pool *pool;
static struct server *srv;
static char dir[64], spill[96], conf[96];
static int devnull = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
	fprintf(stderr, "fuzz_session: %s\n", what);
	abort();
}

/* open_fds() - how many descriptors this process has open. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		die("opendir /proc/self/fd");
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* the directory's own */
}

static void write_rules(const char *rules)
{
	FILE *f = fopen(conf, "w");

	if (!f || fputs(rules, f) < 0 || fclose(f) != 0)
		die("cannot write the config file");
}

/* turn_until() - run the loop until done() holds; false after TURNS_MAX. */
static bool turn_until(bool (*done)(void))
{
	int i;

	for (i = 0; i < TURNS_MAX && !done(); i++)
		loop_turn(&loop, TURN_MS);
	return done();
}

static bool no_conns(void)
{
	return srv->conns == NULL;
}

static bool nothing_in_flight(void)
{
	return loop.inflight == 0;
}

static void world_start(void)
{
	char err[1024];

	if (pool_init(&pool, &be, opt.pool_size, opt.slab_size) < 0 ||
	    compose_open(&srv, &loop, &opt, &be, pool, -1, err, sizeof(err)) < 0)
		die(err);
}

/* world_restart() - what a restart does: shut down (the tier's writes
 * finish), free everything, start again on the same files. */
static void world_restart(void)
{
	server_shutdown(srv);
	if (!turn_until(nothing_in_flight))
		die("the shutdown never finished");
	compose_close(srv);
	pool_free(pool);
	world_start();
}

/* warm_workers() - loop_work()'s workers and their eventfd are made for
 * the first job and kept for the loop's life (the first slab made ahead,
 * the first tier file): make them before the first input, so that no
 * input's count of descriptors takes them for a leak. */
static int noop_run(struct loop_op *op)
{
	(void)op;
	return 0;
}

static bool noop_ended;

static void noop_done(struct loop_op *op, int res)
{
	(void)op;
	(void)res;
	noop_ended = true;
}

static bool noop_over(void)
{
	return noop_ended;
}

static void warm_workers(void)
{
	static struct loop_op op = { .done = noop_done };

	if (loop_work(&loop, &op, noop_run, 0) < 0 || !turn_until(noop_over))
		die("the loop's workers would not start");
}

/* cleanup() - at exit, the fuzzer's directory and what is in it. */
static void cleanup(void)
{
	char path[160];
	struct dirent *de;
	DIR *d = opendir(spill);

	while (d && (de = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", spill, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(spill);
	unlink(conf);
	unlink(opt.socket_path);
	snprintf(path, sizeof(path), "%s.lock", opt.socket_path);
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *note;
	char err[1024];

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	log_set_level(getenv("KVPOOL_FUZZ_DEBUG") ? LOG_LVL_DEBUG : LOG_LVL_ERROR);
	options_defaults(&opt);
	/* in memory where there is /dev/shm: a tier file made and wiped for
	 * every input would make the disk the fuzzer's pace (tmpfs refuses
	 * O_DIRECT; the tier then goes through the page cache, the same code) */
	snprintf(dir, sizeof(dir), "%s/kvpool-fuzz-%d",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
	snprintf(spill, sizeof(spill), "%s/spill", dir);
	snprintf(conf, sizeof(conf), "%s/fuzz.conf", dir);
	/* others may reach the socket (the uids the chunks connect as) */
	if ((mkdir(dir, 0711) < 0 && errno != EEXIST) || chmod(dir, 0711) < 0 ||
	    (mkdir(spill, 0700) < 0 && errno != EEXIST))
		die("cannot make the fuzzer's directories");
	snprintf(opt.socket_path, sizeof(opt.socket_path), "%s/s.sock", dir);
	snprintf(opt.spill_dir, sizeof(opt.spill_dir), "%s", spill);
	snprintf(opt.config_file, sizeof(opt.config_file), "%s", conf);
	opt.pool_size = 2u << 20;
	opt.slab_size = 256u << 10;
	opt.max_msg_size = 64u << 10;
	opt.max_clients = CONNS;
	opt.host_tier_size = 256u << 10;
	opt.spill_size = 1u << 20;
	opt.max_output = opt.max_output_total = 256u << 10;	/* the least */
	write_rules(rule_sets[0]);
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0 ||
	    loop_init(&loop, 256, LOOP_IO_AUTO, &note, err, sizeof(err)) < 0 ||
	    backend_host_init(&be, err, sizeof(err)) < 0)
		die(err);
	world_start();
	warm_workers();
	atexit(cleanup);
	return 0;
}

/* client_connect() - a connection as root (who 0) or uid 1000 + who,
 * group 0 (the socket's); -1 when the daemon's backlog refuses it. Only
 * root can take another uid; otherwise every connection is its own. */
static int client_connect(unsigned who)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	bool as = who && geteuid() == 0;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), rc;

	if (fd < 0)
		die("socket");
	memcpy(sa.sun_path, opt.socket_path, strlen(opt.socket_path) + 1);
	/* the kernel takes the peer's credentials at connect() */
	if (as && seteuid(1000 + who) < 0)
		die("seteuid");
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (as && seteuid(0) < 0)
		die("seteuid back to root");
	if (rc < 0) {
		close(fd);
		return -1;
	}
	loop_turn(&loop, 0);	/* the accept */
	return fd;
}

/* drain() - read what came back (closing any fd passed); false once the
 * daemon closed the connection. */
static bool drain(int fd, bool *got)
{
	static uint8_t buf[128u << 10];
	char ctl[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;
	ssize_t n;

	for (;;) {
		m.msg_control = ctl;
		m.msg_controllen = sizeof(ctl);
		n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
		if (n == 0)
			return false;
		if (n < 0)
			return errno == EAGAIN;
		*got = true;
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			size_t i, k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (i = 0; cm->cmsg_type == SCM_RIGHTS && i < k; i++) {
				int f;

				memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				close(f);
			}
		}
	}
}

/* exchange() - send one message (with attach as SCM_RIGHTS unless -1),
 * run the daemon until it answers or hangs up. False when the
 * connection is gone. */
static bool exchange(int fd, const void *msg, size_t len, int attach)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { (void *)msg, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	bool got = false;
	int i;

	if (attach >= 0) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof(ctl.buf);
		cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &attach, sizeof(int));
	}
	if (sendmsg(fd, &m, MSG_NOSIGNAL) < 0)
		return false;
	for (i = 0; i < TURNS_MAX; i++) {
		loop_turn(&loop, TURN_MS);
		if (!drain(fd, &got))
			return false;
		if (got)
			return true;
	}
	die("no reply and no close: the daemon hangs on this message");
	return false;
}

/* short_waits() - an ACQUIRE that waits for keys (WAIT) waits at most
 * 100 ms here, not up to the 600 s the protocol allows: its deadline is
 * fuzzed, within what a turn of exchange() takes. */
static void short_waits(uint8_t *msg, size_t len)
{
	struct kvp_wire_hdr h;
	size_t at = KVP_WIRE_HDR_SIZE + offsetof(struct kvp_wire_acquire, wait_ms);
	uint32_t flags, ms;

	if (wire_hdr_decode(msg, len, &h) < 0 || h.op != KVP_OP_ACQUIRE ||
	    len < KVP_WIRE_HDR_SIZE + sizeof(struct kvp_wire_acquire))
		return;
	memcpy(&flags, msg + KVP_WIRE_HDR_SIZE + offsetof(struct kvp_wire_acquire, flags),
	       sizeof(flags));
	memcpy(&ms, msg + at, sizeof(ms));
	if ((flags & KVP_WIRE_ACQ_WAIT) && ms > 100) {
		ms = ms % 100 + 1;
		memcpy(msg + at, &ms, sizeof(ms));
	}
}

/* check_conserved() - with no client left, nothing is leased or in
 * flight and the recount agrees. */
static void check_conserved(void)
{
	struct pool_counts pc;

	pool_counts(pool, -1, &pc);
	if (pc.by_state[PAGE_PRIVATE] || pc.by_state[PAGE_SHARED] ||
	    pc.by_state[PAGE_INFLIGHT])
		die("pages are still leased or in flight after the clients left");
	if (!pool_audit(pool) || pc.total != pc.by_state[PAGE_FREE] +
	    pc.by_state[PAGE_CACHED])
		die("the pool's counts do not add up (conservation)");
}

/* list_fds() - what this process has open, for a leak's report. */
static void list_fds(void)
{
	char path[64], to[256];
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	ssize_t n;

	while (d && (de = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		n = readlink(path, to, sizeof(to) - 1);
		to[n > 0 ? n : 0] = '\0';
		fprintf(stderr, "fuzz_session: fd %s: %s\n", de->d_name, to);
	}
	if (d)
		closedir(d);
}

/* world_reset() - back to an empty daemon: no rules, every namespace
 * dropped (its slabs, fixed buffers, files and descriptors with it): as
 * many descriptors open as before the input (fds). */
static void world_reset(int fds)
{
	char err[KVP_WIRE_ERRMSG_MAX], path[160];
	struct pool_counts pc;
	struct dirent *de;
	DIR *d;
	int i;

	write_rules(rule_sets[0]);
	compose_reload(srv);
	while (srv->nst.count) {
		struct ns *n = srv->nst.ns[0], *gone;

		for (i = 0; i < TURNS_MAX && ns_busy(n); i++)
			loop_turn(&loop, TURN_MS);
		if (ns_drop(&srv->nst, pool, &srv->keys, n, &gone, err, sizeof(err)) < 0)
			die(err);
	}
	/* the dropped tier files are removed on worker threads */
	for (i = 0; i < TURNS_MAX && srv->nst.gone; i++)
		loop_turn(&loop, TURN_MS);
	if (srv->nst.gone)
		die("a dropped namespace's tier file was never removed");
	pool_counts(pool, -1, &pc);
	if (pc.total || pc.slabs)
		die("slabs are left after every namespace was dropped");
	if (loop.buffers_used)
		die("fixed buffers are left after every namespace was dropped");
	/* files a failed namespace made (and the drops did not) */
	d = opendir(spill);
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", spill, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	if (open_fds() != fds) {
		list_fds();
		die("file descriptors leaked");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t msg[64u << 10];
	int conns[CONNS] = { -1, -1, -1, -1 }, cur = -1, i;
	uint64_t req_id = 1;
	size_t at = 0, len;
	int fds = open_fds();

	while (at < size) {
		unsigned kind = data[at] % 8;
		int attach = -1;

		if (kind == 2) {	/* use (and open) a connection */
			if (at + 3 > size)
				break;
			cur = data[at + 1] % CONNS;
			if (conns[cur] < 0)
				conns[cur] = client_connect(data[at + 2] % 4);
			at += 3;
			continue;
		}
		if (kind == 3 || kind == 6) {	/* close; restart */
			at++;
			if (kind == 3 && cur >= 0 && conns[cur] >= 0) {
				close(conns[cur]);
				conns[cur] = -1;
			}
			if (kind == 6) {
				for (i = 0; i < CONNS; i++)
					if (conns[i] >= 0)
						close(conns[i]);
				memset(conns, -1, sizeof(conns));
				world_restart();
			}
			continue;
		}
		if (kind == 5) {	/* new rules, SIGHUP */
			if (at + 2 > size)
				break;
			write_rules(rule_sets[data[at + 1] % 4]);
			compose_reload(srv);
			at += 2;
			continue;
		}
		if (kind == 1) {	/* raw bytes */
			if (at + 3 > size)
				break;
			len = (size_t)(data[at + 1] | data[at + 2] << 8);
			at += 3;
			if (len > size - at)
				len = size - at;
			if (len > sizeof(msg))
				len = sizeof(msg);
			memcpy(msg, data + at, len);
			at += len;
			if (!len)
				continue;
		} else {		/* a well-formed header */
			struct kvp_wire_hdr h = { 0 };

			if (at + 5 > size)
				break;
			h.op = (uint16_t)(data[at + 1] | data[at + 2] << 8);
			len = (size_t)(data[at + 3] | data[at + 4] << 8);
			at += 5;
			if (len > size - at)
				len = size - at;
			if (len > sizeof(msg) - KVP_WIRE_HDR_SIZE)
				len = sizeof(msg) - KVP_WIRE_HDR_SIZE;
			h.req_id = req_id++;
			h.len = (uint32_t)len;
			wire_hdr_encode(msg, &h);
			memcpy(msg + KVP_WIRE_HDR_SIZE, data + at, len);
			at += len;
			len += KVP_WIRE_HDR_SIZE;
			attach = kind == 4 ? devnull : -1;
		}
		if (cur < 0 || conns[cur] < 0) {
			cur = cur < 0 ? 0 : cur;
			conns[cur] = client_connect(0);
		}
		short_waits(msg, len);
		if (conns[cur] >= 0 && !exchange(conns[cur], msg, len, attach)) {
			close(conns[cur]);
			conns[cur] = -1;
		}
	}
	for (i = 0; i < CONNS; i++)
		if (conns[i] >= 0)
			close(conns[i]);
	if (!turn_until(no_conns))
		die("a connection was never freed");
	check_conserved();
	world_reset(fds);
	return 0;
}
