/* SPDX-License-Identifier: MIT */
/*
 * fuzz_session.c - libFuzzer harness of a whole session: an in-process
 * kvpoold (host backend, a small pool with a host tier, its real io_uring
 * loop and socket) and one client connection that sends the messages an
 * input describes, reading each reply. After every input the connection
 * is closed, and then no page may be leased, none in flight, and the
 * pool's recount must agree with its counts (the conservation invariant);
 * anything else aborts. ASan and UBSan watch the daemon's code meanwhile.
 *
 * An input is a sequence of chunks:
 *   0x00 | OP:u16 | LEN:u16 | LEN bytes   a request with a well-formed
 *                                         header (magic, version, id, len)
 *   0x01 | LEN:u16 | LEN bytes            raw bytes sent as one message
 * (the low bit of the first byte picks; little endian), so that the
 * fuzzer spends its time on the operations and their payloads, and still
 * tries broken headers.
 */
#include <errno.h>
#include <poll.h>
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
#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/server.h"

#define TURN_MS		20	/* a reply comes within a turn or two */
#define TURNS_MAX	200	/* no reply after this many: a hang */

static struct options opt;
static struct loop loop;
static struct backend be;
static struct pool *pool;
static struct server *srv;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
	fprintf(stderr, "fuzz_session: %s\n", what);
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char dir[64];
	const char *note;
	char err[1024];

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	log_set_level(LOG_LVL_ERROR);
	options_defaults(&opt);
	snprintf(dir, sizeof(dir), "/tmp/kvpool-fuzz-%d", (int)getpid());
	mkdir(dir, 0700);
	snprintf(opt.socket_path, sizeof(opt.socket_path), "%s/s.sock", dir);
	opt.pool_size = 2u << 20;
	opt.slab_size = 256u << 10;
	opt.max_msg_size = 64u << 10;
	opt.max_clients = 4;
	opt.host_tier_size = 256u << 10;
	if (loop_init(&loop, 256, LOOP_IO_AUTO, &note, err, sizeof(err)) < 0 ||
	    backend_host_init(&be, err, sizeof(err)) < 0 ||
	    pool_init(&pool, &be, opt.pool_size, opt.slab_size) < 0 ||
	    server_init(&srv, &loop, &opt, &be, pool, err, sizeof(err)) < 0)
		die(err);
	return 0;
}

static int client_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		die("socket");
	memcpy(sa.sun_path, opt.socket_path, strlen(opt.socket_path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
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

/* exchange() - send one message, run the daemon until it answers or
 * hangs up. False when the connection is gone. */
static bool exchange(int fd, const void *msg, size_t len)
{
	bool got = false;
	int i;

	if (send(fd, msg, len, MSG_NOSIGNAL) < 0)
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

/* check_conserved() - with no client left, nothing is leased or in
 * flight and the recount agrees. */
static void check_conserved(void)
{
	struct pool_counts pc;

	pool_counts(pool, -1, &pc);
	if (pc.by_state[PAGE_PRIVATE] || pc.by_state[PAGE_SHARED] ||
	    pc.by_state[PAGE_INFLIGHT])
		die("pages are still leased or in flight after the client left");
	if (!pool_audit(pool) || pc.total != pc.by_state[PAGE_FREE] +
	    pc.by_state[PAGE_CACHED])
		die("the pool's counts do not add up (conservation)");
}

static bool srv_conns_left(void)
{
	return srv->conns != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t msg[64u << 10];
	uint64_t req_id = 1;
	size_t at = 0;
	int fd = client_connect(), i;

	while (at + 3 <= size) {
		uint8_t kind = data[at];
		size_t len;

		if (!(kind & 1)) {	/* well-formed header */
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
		} else {		/* raw bytes */
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
		}
		if (!exchange(fd, msg, len))
			break;
	}
	close(fd);
	for (i = 0; i < TURNS_MAX && srv_conns_left(); i++)
		loop_turn(&loop, TURN_MS);
	if (srv_conns_left())
		die("the connection was never freed");
	check_conserved();
	return 0;
}
