/* SPDX-License-Identifier: MIT */
/*
 * check_core.c - integration tests of the page service: a real kvpoold on
 * a temporary socket, real client processes linked with libkvpool, and
 * raw sockets for hostile input. Every test ends with daemon_stop(),
 * which checks the conservation invariant and a clean shutdown.
 *
 * Past 800 lines on purpose: the page service's requests (ALLOC,
 * RELEASE, RETAIN, MAP_SLAB) and their hostile forms are one suite.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "client/wire.h"
#include "harness.h"

/* 2 x 2 layers x 2 heads x 64 dims x 16 tokens x 2 bytes = 16 KiB pages */
static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "test/tiny",
};
#define PAGE_BYTES 16384u

/* A small pool so that exhaustion is quick to reach: 4 MiB in 1 MiB slabs
 * holds 256 pages of 16 KiB. */
static const char *const small_pool[] = {
	"--pool-size", "4M", "--slab-size", "1M", NULL,
};

static void connect_ok(const char *sock, kvp_client **c)
{
	int rc = kvp_connect(sock, "tiny", &geo, c);

	ck_assert_msg(rc == 0, "kvp_connect: %s: %s", kvp_strerror(rc), kvp_last_error());
	ck_assert_uint_eq(kvp_page_bytes(*c), PAGE_BYTES);
}

/* fill() / holds() - a pattern that names its writer and its page. */
static void fill(void *page, uint32_t who, uint32_t which)
{
	uint32_t *w = page;
	size_t i;

	for (i = 0; i < PAGE_BYTES / 4; i++)
		w[i] = who * 0x9e3779b9u ^ which * 0x85ebca6bu ^ (uint32_t)i;
}

static bool holds(const void *page, uint32_t who, uint32_t which)
{
	const uint32_t *w = page;
	size_t i;

	for (i = 0; i < PAGE_BYTES / 4; i++)
		if (w[i] != (who * 0x9e3779b9u ^ which * 0x85ebca6bu ^ (uint32_t)i))
			return false;
	return true;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- raw protocol, for what the library would never send ---------------- */

/* connect_raw() - a raw connection to sock; fails the test without one. */
static int connect_raw(const char *sock)
{
	int fd = raw_connect(sock);

	ck_assert_msg(fd >= 0, "connect %s: %s", sock, strerror(-fd));
	return fd;
}

/* join_tiny() - HELLO into "tiny" over a raw connection. */
static void join_tiny(int fd)
{
	ck_assert_int_eq(raw_hello(fd, "tiny", &geo, NULL, 0), KVP_S_OK);
}

/* raw_alloc() - ALLOC one page over a raw connection; its handle. */
static uint64_t raw_alloc(int fd, uint64_t id)
{
	struct kvp_wire_pages req = { .n = 1 };
	unsigned char rep[16];
	uint64_t h;

	ck_assert_int_eq(raw_send(fd, KVP_OP_ALLOC, id, &req, sizeof(req)), 0);
	ck_assert_int_eq(raw_recv(fd, id, rep, sizeof(rep), NULL), KVP_S_OK);
	memcpy(&h, rep + 8, 8);
	return h;
}

static int raw_release(int fd, uint64_t id, const uint64_t *h, uint32_t n)
{
	unsigned char buf[8 + 8 * 8];
	struct kvp_wire_pages pl = { .n = n };

	memcpy(buf, &pl, sizeof(pl));
	memcpy(buf + 8, h, 8 * n);
	ck_assert_int_eq(raw_send(fd, KVP_OP_RELEASE, id, buf, 8 + 8 * (size_t)n), 0);
	return raw_recv(fd, id, NULL, 0, NULL);
}

/* --- sharing memory between processes ------------------------------------ */

START_TEST(test_core_eight_processes_write_and_read_their_pages)
{
	enum { PROCS = 8, PAGES = 24 };
	uint64_t all[PROCS * PAGES];
	struct daemon d;
	int p[2], go[2], i, j, status;

	daemon_start(&d, small_pool);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(pipe(go), 0);
	for (i = 0; i < PROCS; i++) {
		pid_t pid = fork();

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			kvp_page pages[PAGES];
			kvp_client *c;
			int k;

			close(p[0]);
			close(go[1]);
			if (kvp_connect(d.sock, "tiny", &geo, &c) < 0 ||
			    kvp_alloc(c, PAGES, pages) < 0)
				_exit(1);
			for (k = 0; k < PAGES; k++)
				fill(kvp_page_ptr(c, pages[k]), (uint32_t)i, (uint32_t)k);
			for (k = 0; k < PAGES; k++)
				if (!holds(kvp_page_ptr(c, pages[k]), (uint32_t)i, (uint32_t)k))
					_exit(2);
			if (write(p[1], pages, sizeof(pages)) != (ssize_t)sizeof(pages))
				_exit(3);
			/* hold the pages until every process has written:
			 * the parent closes go[1] then */
			if (read(go[0], &k, 1) != 0)
				_exit(4);
			for (k = 0; k < PAGES; k++)
				if (!holds(kvp_page_ptr(c, pages[k]), (uint32_t)i, (uint32_t)k))
					_exit(5);
			if (kvp_release(c, pages, PAGES) < 0)
				_exit(6);
			kvp_close(c);
			_exit(0);
		}
	}
	close(p[1]);
	close(go[0]);
	for (i = 0; i < PROCS; i++)
		ck_assert_int_eq(read(p[0], all + i * PAGES, PAGES * 8), PAGES * 8);
	close(p[0]);
	close(go[1]);	/* all 8 hold their pages at once; now let them go */
	for (i = 0; i < PROCS; i++) {
		ck_assert_int_gt(wait(&status), 0);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "a client process failed with status 0x%x", status);
	}
	/* No page was handed to two processes. */
	for (i = 0; i < PROCS * PAGES; i++)
		for (j = i + 1; j < PROCS * PAGES; j++)
			ck_assert_uint_ne(all[i], all[j]);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_bytes_written_by_one_process_are_seen_by_another)
{
	kvp_page first, again;
	int to_child[2], to_parent[2], status;
	struct daemon d;
	kvp_client *c;
	pid_t pid;

	daemon_start(&d, small_pool);
	ck_assert_int_eq(pipe(to_child), 0);
	ck_assert_int_eq(pipe(to_parent), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_client *w;
		kvp_page pg;

		if (kvp_connect(d.sock, "tiny", &geo, &w) < 0 || kvp_alloc(w, 1, &pg) < 0)
			_exit(1);
		fill(kvp_page_ptr(w, pg), 0xabcd, 7);
		if (kvp_release(w, &pg, 1) < 0)
			_exit(2);
		if (write(to_parent[1], &pg, sizeof(pg)) != sizeof(pg))
			_exit(3);
		kvp_close(w);
		_exit(0);
	}
	ck_assert_int_eq(read(to_parent[0], &first, sizeof(first)), sizeof(first));
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* The pool hands out the page freed last: the same memory, a new
	 * handle, and the other process's bytes seen through our mapping. */
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 1, &again), 0);
	ck_assert_uint_ne(again, first);
	ck_assert_uint_eq(KVP_HANDLE_SLAB(again), KVP_HANDLE_SLAB(first));
	ck_assert_uint_eq(KVP_HANDLE_INDEX(again), KVP_HANDLE_INDEX(first));
	ck_assert(holds(kvp_page_ptr(c, again), 0xabcd, 7));
	kvp_close(c);
	close(to_child[0]);
	close(to_child[1]);
	close(to_parent[0]);
	close(to_parent[1]);
	daemon_stop(&d);
}
END_TEST

/* --- dead clients ----------------------------------------------------------- */

START_TEST(test_core_killed_client_pages_are_free_within_100ms)
{
	static const char *const args[] = { "--pool-size", "64M", "--slab-size", "4M", NULL };
	kvp_page mine[4];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	int p[2], status, i;
	uint64_t t0, spent, limit = 100000000u;
	pid_t pid;
	char ok;

	/* under valgrind (make check-valgrind) the daemon runs 20-50 times
	 * slower: the bound is a claim about the daemon as built */
	if (getenv("KVPOOLD_WRAPPER"))
		limit *= 20;
	daemon_start(&d, args);
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 4, mine), 0);
	for (i = 0; i < 4; i++)
		fill(kvp_page_ptr(c, mine[i]), 1, (uint32_t)i);

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		static kvp_page pages[1000];
		kvp_client *k;

		ok = kvp_connect(d.sock, "tiny", &geo, &k) == 0 &&
		     kvp_alloc(k, 1000, pages) == 0 ? 'y' : 'n';
		if (write(p[1], &ok, 1) != 1)
			_exit(1);
		pause();	/* holding 1,000 pages until killed */
		_exit(0);
	}
	ck_assert_int_eq(read(p[0], &ok, 1), 1);
	ck_assert_int_eq(ok, 'y');
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_private, 1004);

	t0 = now_ns();
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	do {
		ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
		spent = now_ns() - t0;
	} while (st.pages_private != 4 && spent < limit);
	ck_assert_msg(st.pages_private == 4, "after %llu ms, %llu pages still private",
		      (unsigned long long)(spent / 1000000),
		      (unsigned long long)st.pages_private);

	/* The other client is untouched: its pages, its bytes, its calls. */
	for (i = 0; i < 4; i++)
		ck_assert(holds(kvp_page_ptr(c, mine[i]), 1, (uint32_t)i));
	ck_assert_int_eq(kvp_release(c, mine, 4), 0);
	kvp_close(c);
	close(p[0]);
	close(p[1]);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_closing_a_client_returns_its_pages)
{
	kvp_page pages[100];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_start(&d, small_pool);
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 100, pages), 0);
	kvp_close(c);
	connect_ok(d.sock, &c);	/* served after the close: counts are settled */
	ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.pages_private, 0);
	ck_assert_uint_eq(st.pages_free, st.pages_total);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* --- hostile input ---------------------------------------------------------- */

/* A client with pages whose bytes must survive everything below. */
struct witness {
	kvp_client *c;
	kvp_page pages[3];
};

static void witness_start(struct witness *w, const char *sock)
{
	int i;

	connect_ok(sock, &w->c);
	ck_assert_int_eq(kvp_alloc(w->c, 3, w->pages), 0);
	for (i = 0; i < 3; i++)
		fill(kvp_page_ptr(w->c, w->pages[i]), 77, (uint32_t)i);
}

static void witness_check(struct witness *w)
{
	kvp_stats_t st;
	int i;

	for (i = 0; i < 3; i++)
		ck_assert(holds(kvp_page_ptr(w->c, w->pages[i]), 77, (uint32_t)i));
	ck_assert_int_ge(kvp_stats(w->c, &st, NULL, 0), 0);	/* still served */
	ck_assert_int_eq(kvp_release(w->c, w->pages, 3), 0);
	kvp_close(w->c);
}

START_TEST(test_core_malformed_messages_get_error_or_close)
{
	unsigned char junk[64];
	struct kvp_wire_hdr h = { .op = KVP_OP_STATS, .req_id = 9 };
	static const char *const args[] = {
		"--pool-size", "4M", "--slab-size", "1M", "--max-msg-size", "64K", NULL,
	};
	struct witness w;
	struct daemon d;
	int fd;

	daemon_start(&d, args);
	witness_start(&w, d.sock);

	/* truncated header */
	fd = connect_raw(d.sock);
	ck_assert_int_eq(send(fd, "KVP1", 4, 0), 4);
	ck_assert_int_eq(raw_recv(fd, 0, NULL, 0, NULL), KVP_S_PROTO);
	ck_assert_int_eq(raw_recv(fd, 0, NULL, 0, NULL), -1);
	close(fd);

	/* wrong magic */
	fd = connect_raw(d.sock);
	wire_hdr_encode(junk, &h);
	junk[0] = 'X';
	ck_assert_int_eq(send(fd, junk, KVP_WIRE_HDR_SIZE, 0), KVP_WIRE_HDR_SIZE);
	ck_assert_int_eq(raw_recv(fd, 9, NULL, 0, NULL), KVP_S_PROTO);
	ck_assert_int_eq(raw_recv(fd, 0, NULL, 0, NULL), -1);
	close(fd);

	/* wrong version */
	fd = connect_raw(d.sock);
	wire_hdr_encode(junk, &h);
	junk[4] = KVP_WIRE_VERSION + 1;	/* another version than this build's */
	ck_assert_int_eq(send(fd, junk, KVP_WIRE_HDR_SIZE, 0), KVP_WIRE_HDR_SIZE);
	ck_assert_int_eq(raw_recv(fd, 9, NULL, 0, NULL), KVP_S_VERSION);
	ck_assert_int_eq(raw_recv(fd, 0, NULL, 0, NULL), -1);
	close(fd);

	/* unknown opcode: an error, and the connection goes on */
	fd = connect_raw(d.sock);
	ck_assert_int_eq(raw_send(fd, 4242, 3, NULL, 0), 0);
	ck_assert_int_eq(raw_recv(fd, 3, NULL, 0, NULL), KVP_S_OP);
	ck_assert_int_eq(raw_send(fd, KVP_OP_STATS, 4, NULL, 0), 0);
	ck_assert_int_eq(raw_recv(fd, 4, NULL, 0, NULL), KVP_S_OK);
	close(fd);

	/* a page count larger than the payload */
	fd = connect_raw(d.sock);
	join_tiny(fd);
	{
		unsigned char buf[8 + 16];
		struct kvp_wire_pages pl = { .n = 5 };

		memcpy(buf, &pl, sizeof(pl));
		memset(buf + 8, 0xee, 16);
		ck_assert_int_eq(raw_send(fd, KVP_OP_RELEASE, 5, buf, sizeof(buf)), 0);
		ck_assert_int_eq(raw_recv(fd, 5, NULL, 0, NULL), KVP_S_PROTO);
		ck_assert_int_eq(raw_recv(fd, 0, NULL, 0, NULL), -1);
	}
	close(fd);

	/* an ALLOC payload of the wrong size */
	fd = connect_raw(d.sock);
	join_tiny(fd);
	ck_assert_int_eq(raw_send(fd, KVP_OP_ALLOC, 6, junk, 3), 0);
	ck_assert_int_eq(raw_recv(fd, 6, NULL, 0, NULL), KVP_S_PROTO);
	close(fd);

	/* oversize message */
	fd = connect_raw(d.sock);
	{
		static unsigned char big[(64 << 10) + 64];
		struct kvp_wire_hdr bh = { .op = KVP_OP_STATS, .req_id = 8,
					   .len = sizeof(big) - KVP_WIRE_HDR_SIZE };

		wire_hdr_encode(big, &bh);
		ck_assert_int_eq(send(fd, big, sizeof(big), 0), (ssize_t)sizeof(big));
		ck_assert_int_eq(raw_recv(fd, 8, NULL, 0, NULL), KVP_S_PROTO);
		ck_assert_int_eq(raw_recv(fd, 0, NULL, 0, NULL), -1);
	}
	close(fd);

	witness_check(&w);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_stale_forged_and_double_release_are_refused)
{
	struct witness w;
	struct daemon d;
	uint64_t a, b, pair[2];
	int fd;

	daemon_start(&d, small_pool);
	witness_start(&w, d.sock);
	fd = connect_raw(d.sock);
	join_tiny(fd);
	a = raw_alloc(fd, 10);
	b = raw_alloc(fd, 11);

	/* someone else's page: leased, but not by this connection */
	ck_assert_int_eq(raw_release(fd, 12, &w.pages[0], 1), KVP_S_STALE);
	/* forged handles */
	pair[0] = 0;
	ck_assert_int_eq(raw_release(fd, 13, pair, 1), KVP_S_STALE);
	pair[0] = UINT64_MAX;
	ck_assert_int_eq(raw_release(fd, 14, pair, 1), KVP_S_STALE);
	pair[0] = a ^ (1ull << 32);	/* another generation of a */
	ck_assert_int_eq(raw_release(fd, 15, pair, 1), KVP_S_STALE);
	/* the same page twice in one batch: all or none, so b stays */
	pair[0] = b;
	pair[1] = b;
	ck_assert_int_eq(raw_release(fd, 16, pair, 2), KVP_S_STALE);
	/* release, then the stale handle again */
	ck_assert_int_eq(raw_release(fd, 17, &a, 1), KVP_S_OK);
	ck_assert_int_eq(raw_release(fd, 18, &a, 1), KVP_S_STALE);
	/* b survived the refused batch */
	ck_assert_int_eq(raw_release(fd, 19, &b, 1), KVP_S_OK);
	close(fd);

	witness_check(&w);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_attached_fd_is_closed_and_refused)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	unsigned char hdr[KVP_WIRE_HDR_SIZE];
	struct kvp_wire_hdr h = { .op = KVP_OP_STATS, .req_id = 21 };
	struct iovec iov = { hdr, sizeof(hdr) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	struct pollfd pfd;
	struct daemon d;
	int fd, p[2];
	char c;

	daemon_start(&d, NULL);
	fd = connect_raw(d.sock);
	ck_assert_int_eq(pipe(p), 0);
	wire_hdr_encode(hdr, &h);
	memset(&ctl, 0, sizeof(ctl));
	cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &p[1], sizeof(int));
	ck_assert_int_eq(sendmsg(fd, &msg, 0), (ssize_t)sizeof(hdr));
	ck_assert_int_eq(raw_recv(fd, 21, NULL, 0, NULL), KVP_S_INVAL);

	/* Our write end was the only other one: once the daemon closed its
	 * copy, the pipe reads end of file. */
	close(p[1]);
	pfd = (struct pollfd){ .fd = p[0], .events = POLLIN };
	ck_assert_int_eq(poll(&pfd, 1, 5000), 1);
	ck_assert_int_eq(read(p[0], &c, 1), 0);
	close(p[0]);

	/* the connection goes on */
	ck_assert_int_eq(raw_send(fd, KVP_OP_STATS, 22, NULL, 0), 0);
	ck_assert_int_eq(raw_recv(fd, 22, NULL, 0, NULL), KVP_S_OK);
	close(fd);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_requests_need_hello_and_their_own_namespace)
{
	static const kvp_geometry other = {
		.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
		.dtype = KVP_DTYPE_F16, .model = "test/other",
	};
	struct kvp_wire_map_slab m = { .slab = 0 };
	struct kvp_wire_pages one = { .n = 1 };
	kvp_client *c;
	kvp_page pg;
	struct daemon d;
	int fd;

	daemon_start(&d, small_pool);
	fd = connect_raw(d.sock);
	ck_assert_int_eq(raw_send(fd, KVP_OP_ALLOC, 30, &one, sizeof(one)), 0);
	ck_assert_int_eq(raw_recv(fd, 30, NULL, 0, NULL), KVP_S_STATE);

	/* slab 0 belongs to namespace "other" */
	ck_assert_int_eq(kvp_connect(d.sock, "other", &other, &c), 0);
	ck_assert_int_eq(kvp_alloc(c, 1, &pg), 0);
	join_tiny(fd);	/* joins "tiny" */
	ck_assert_int_eq(raw_send(fd, KVP_OP_MAP_SLAB, 31, &m, sizeof(m)), 0);
	ck_assert_int_eq(raw_recv(fd, 31, NULL, 0, NULL), KVP_S_NOENT);
	/* and its page is not ours to release */
	ck_assert_int_eq(raw_release(fd, 32, &pg, 1), KVP_S_STALE);
	ck_assert_int_eq(raw_send(fd, KVP_OP_HELLO, 33, NULL, 0), 0);
	ck_assert_int_eq(raw_recv(fd, 33, NULL, 0, NULL), KVP_S_STATE);	/* HELLO twice */
	close(fd);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* --- namespaces ------------------------------------------------------------- */

START_TEST(test_core_geometry_mismatch_names_the_field)
{
	kvp_geometry g = geo;
	struct daemon d;
	kvp_client *a, *b;

	daemon_start(&d, NULL);
	connect_ok(d.sock, &a);
	g.layers = 40;
	ck_assert_int_eq(kvp_connect(d.sock, "tiny", &g, &b), -EBADE);
	ck_assert_msg(strstr(kvp_last_error(), "has layers 2, this client sent 40"),
		      "%s", kvp_last_error());
	g = geo;
	g.dtype = KVP_DTYPE_BF16;
	ck_assert_int_eq(kvp_connect(d.sock, "tiny", &g, &b), -EBADE);
	ck_assert_msg(strstr(kvp_last_error(), "dtype"), "%s", kvp_last_error());
	g = geo;
	g.model = "test/else";
	ck_assert_int_eq(kvp_connect(d.sock, "tiny", &g, &b), -EBADE);
	ck_assert_msg(strstr(kvp_last_error(), "holds model 'test/tiny'"), "%s",
		      kvp_last_error());
	g = geo;
	g.head_dim = 0;
	ck_assert_int_eq(kvp_connect(d.sock, "zero", &g, &b), -EINVAL);
	ck_assert_int_eq(kvp_connect(d.sock, "bad name!", &geo, &b), -EINVAL);
	kvp_close(a);
	daemon_stop(&d);
}
END_TEST

/* MLA (K alone) and K and V of different sizes: the page holds what the
 * geometry says, later clients must say the same, and STATS reports it. */
START_TEST(test_core_k_only_and_k_v_of_different_sizes_size_the_page)
{
	kvp_geometry mla = {
		.layers = 3, .kv_heads = 1, .head_dim = 576, .block_tokens = 16,
		.dtype = KVP_DTYPE_BF16, .model = "test/mla", .head_dim_v = KVP_K_ONLY,
	};
	kvp_geometry kv = {
		.layers = 2, .kv_heads = 2, .head_dim = 192, .block_tokens = 16,
		.dtype = KVP_DTYPE_F16, .model = "test/kv", .head_dim_v = 128,
	};
	kvp_geometry g;
	kvp_ns_stats_t ns[4];
	kvp_stats_t st;
	kvp_client *a, *b, *c;
	struct daemon d;
	int i, n;

	daemon_start(&d, NULL);
	ck_assert_int_eq(kvp_connect(d.sock, "mla", &mla, &a), 0);
	ck_assert_uint_eq(kvp_page_bytes(a), 3u * 576 * 16 * 2);
	ck_assert_int_eq(kvp_connect(d.sock, "kv", &kv, &b), 0);
	ck_assert_uint_eq(kvp_page_bytes(b), 2u * 2 * (192 + 128) * 16 * 2);
	/* the V a later client leaves out (or sends as K's) is another page */
	g = mla;
	g.head_dim_v = 0;
	ck_assert_int_eq(kvp_connect(d.sock, "mla", &g, &c), -EBADE);
	ck_assert_msg(strstr(kvp_last_error(), "head_dim_v"), "%s", kvp_last_error());
	g.head_dim_v = 576;
	ck_assert_int_eq(kvp_connect(d.sock, "mla", &g, &c), -EBADE);
	/* V's size sent as K's is the same geometry as 0 */
	g = geo;
	g.head_dim_v = geo.head_dim;
	ck_assert_int_eq(kvp_connect(d.sock, "tiny", &geo, &c), 0);
	kvp_close(c);
	ck_assert_int_eq(kvp_connect(d.sock, "tiny", &g, &c), 0);
	ck_assert_uint_eq(kvp_page_bytes(c), PAGE_BYTES);
	n = kvp_stats(c, &st, ns, 4);
	ck_assert_int_eq(n, 3);
	for (i = 0; i < n; i++) {
		if (!strcmp(ns[i].name, "mla"))
			ck_assert_uint_eq(ns[i].head_dim_v, KVP_K_ONLY);
		else if (!strcmp(ns[i].name, "kv"))
			ck_assert_uint_eq(ns[i].head_dim_v, 128);
		else
			ck_assert_uint_eq(ns[i].head_dim_v, 0);
	}
	kvp_close(c);
	/* out of range: neither a size nor KVP_K_ONLY */
	g = kv;
	g.head_dim_v = 4097;
	ck_assert_int_eq(kvp_connect(d.sock, "big-v", &g, &c), -EINVAL);
	ck_assert_msg(strstr(kvp_last_error(), "head_dim_v 4097"), "%s", kvp_last_error());
	kvp_close(a);
	kvp_close(b);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_page_larger_than_a_slab_is_refused)
{
	static const kvp_geometry huge = {
		.layers = 80, .kv_heads = 8, .head_dim = 128, .block_tokens = 128,
		.dtype = KVP_DTYPE_F16, .model = "test/huge",
	};
	struct daemon d;
	kvp_client *c;

	daemon_start(&d, small_pool);
	ck_assert_int_eq(kvp_connect(d.sock, "huge", &huge, &c), -EINVAL);
	ck_assert_msg(strstr(kvp_last_error(), "raise --slab-size"), "%s", kvp_last_error());
	daemon_stop(&d);
}
END_TEST

/* --- limits ----------------------------------------------------------------- */

START_TEST(test_core_lease_limit_refuses_at_the_edge)
{
	static const char *const args[] = { "--max-leases", "10", NULL };
	kvp_page pages[11];
	struct daemon d;
	kvp_client *c;

	daemon_start(&d, args);
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 10, pages), 0);
	ck_assert_int_eq(kvp_alloc(c, 1, pages + 10), -EDQUOT);
	ck_assert_msg(strstr(kvp_last_error(), "max-leases is 10"), "%s", kvp_last_error());
	ck_assert_int_eq(kvp_release(c, pages, 1), 0);
	ck_assert_int_eq(kvp_alloc(c, 1, pages), 0);
	ck_assert_int_eq(kvp_release(c, pages, 10), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_exhausted_pool_refuses_all_or_none)
{
	static kvp_page pages[257];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_start(&d, small_pool);	/* 256 pages */
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 257, pages), -ENOSPC);
	ck_assert_msg(strstr(kvp_last_error(), "raise --pool-size"), "%s", kvp_last_error());
	ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.pages_private, 0);
	ck_assert_int_eq(kvp_alloc(c, 250, pages), 0);
	ck_assert_int_eq(kvp_alloc(c, 7, pages + 250), -ENOSPC);
	ck_assert_int_eq(kvp_alloc(c, 6, pages + 250), 0);
	ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.pages_private, 256);
	ck_assert_uint_eq(st.pages_free, 0);
	ck_assert_uint_eq(st.errors_nospc, 2);
	/* the refusals are said, once a minute: the first alone */
	ck_assert_uint_eq(log_count(&d, "refused 257 pages to client"), 1);
	ck_assert_uint_eq(log_count(&d, "refused 7 pages"), 0);
	ck_assert_int_eq(kvp_release(c, pages, 256), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_alloc_beyond_one_message_is_split_and_atomic)
{
	static const char *const args[] = {
		"--pool-size", "64M", "--slab-size", "4M", "--max-msg-size", "4K", NULL,
	};
	static kvp_page pages[2000], more[2097];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	int i;

	daemon_start(&d, args);	/* 4096 pages; 507 handles per message */
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 2000, pages), 0);
	for (i = 0; i < 2000; i++)
		ck_assert_ptr_nonnull(kvp_page_ptr(c, pages[i]));
	ck_assert_int_eq(kvp_alloc(c, 2097, more), -ENOSPC);	/* 2096 left */
	ck_assert_int_ge(kvp_stats(c, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.pages_private, 2000);
	ck_assert_int_eq(kvp_release(c, pages, 2000), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* --- the library's own checks ------------------------------------------------ */

START_TEST(test_core_library_refuses_pages_it_does_not_hold)
{
	kvp_page pg, fake;
	struct daemon d;
	kvp_client *c;

	daemon_start(&d, small_pool);
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 1, &pg), 0);
	ck_assert_ptr_nonnull(kvp_page_ptr(c, pg));
	fake = pg ^ (1ull << 32);
	ck_assert_ptr_null(kvp_page_ptr(c, fake));
	ck_assert_int_eq(kvp_release(c, &fake, 1), -ESTALE);
	ck_assert_msg(strstr(kvp_last_error(), "not leased by this client"), "%s",
		      kvp_last_error());
	ck_assert_int_eq(kvp_release(c, &pg, 1), 0);
	ck_assert_ptr_null(kvp_page_ptr(c, pg));
	ck_assert_int_eq(kvp_release(c, &pg, 1), -ESTALE);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_core_stats_count_namespaces_and_states)
{
	static kvp_ns_stats_t ns[4];
	kvp_page pages[5];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_start(&d, small_pool);
	connect_ok(d.sock, &c);
	ck_assert_int_eq(kvp_alloc(c, 5, pages), 0);
	ck_assert_int_eq(kvp_stats(c, &st, ns, 4), 1);
	ck_assert_str_eq(ns[0].name, "tiny");
	ck_assert_str_eq(ns[0].model, "test/tiny");
	ck_assert_uint_eq(ns[0].page_bytes, PAGE_BYTES);
	ck_assert_uint_eq(ns[0].clients, 1);
	ck_assert_uint_eq(ns[0].pages_private, 5);
	ck_assert_uint_eq(ns[0].pages_total, 64);	/* one 1 MiB slab */
	ck_assert_uint_eq(st.pages_total, 64);
	ck_assert_uint_eq(st.allocs, 5);
	ck_assert_uint_eq(st.pool_bytes, 4u << 20);
	ck_assert_int_eq(kvp_release(c, pages, 5), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* --- memory: a pool larger than memory ------------------------------------- */

/* memory_cgroup() - move this process into a new memory cgroup limited to
 * limit bytes (v2 or v1, below the one it is in); its path into dir.
 * false (the test skips, saying why) where none can be made. */
static bool memory_cgroup(uint64_t limit, char *dir, size_t len)
{
	static const struct { const char *root, *max; } kinds[] = {
		{ "/sys/fs/cgroup", "memory.max" },
		{ "/sys/fs/cgroup/unified", "memory.max" },
		{ "/sys/fs/cgroup/memory", "memory.limit_in_bytes" },
	};
	char line[256], path[1024], *cg = NULL;
	FILE *f = fopen("/proc/self/cgroup", "r");
	size_t k;

	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		for (k = 0; k < 3; k++) {
			const char *p = k < 2 ? (strncmp(line, "0::", 3) ? NULL : line + 3)
					      : (strstr(line, ":memory:") ? strstr(line, ":memory:") + 8
									 : NULL);

			if (!p)
				continue;
			if ((size_t)snprintf(dir, len, "%s%.200s/kvpool-test-%d", kinds[k].root,
					     strcmp(p, "/") ? p : "", (int)getpid()) >= len)
				continue;
			if (mkdir(dir, 0755) < 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, kinds[k].max);
			f = freopen(path, "w", f);
			if (f && fprintf(f, "%llu\n", (unsigned long long)limit) > 0 &&
			    fflush(f) == 0) {
				snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
				f = freopen(path, "w", f);
				if (f && fprintf(f, "%d\n", (int)getpid()) > 0 && fflush(f) == 0)
					cg = dir;
			}
			if (!cg)
				rmdir(dir);
			break;
		}
		if (cg || !f)
			break;
	}
	if (f)
		fclose(f);
	if (!cg)
		fprintf(stderr, "%s: skipped: no memory cgroup could be made (needs root and "
			"a writable memory controller)\n", __FILE__);
	return cg != NULL;
}

/* leave_cgroup() - back to the parent cgroup; remove dir. */
static void leave_cgroup(const char *dir)
{
	char parent[1024], path[1100];
	FILE *f;

	snprintf(parent, sizeof(parent), "%s", dir);
	*strrchr(parent, '/') = '\0';
	snprintf(path, sizeof(path), "%s/cgroup.procs", parent);
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
	rmdir(dir);
}

START_TEST(test_core_by_default_a_memory_limit_refuses_slabs_and_kills_nobody)
{
	static const char *const args[] = {	/* no --prefault: the default */
		"--pool-size", "512M", "--slab-size", "16M", NULL,
	};
	enum { BATCH = 1024 };		/* a slab of 16 KiB pages */
	const uint64_t LIMIT = 192u << 20;
	static kvp_page pages[32 * BATCH];
	char cg[512], log[8192];
	struct daemon d;
	size_t n = 0, i;
	kvp_client *c;
	int rc;

	/* room for a few slabs and their spare, beside a daemon under
	 * valgrind too (make check-valgrind) */
	if (!memory_cgroup(LIMIT, cg, sizeof(cg)))
		return;
	daemon_start(&d, args);		/* in the cgroup, with this process */
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "--pool-size 512.0 MiB is more than the") &&
		      strstr(log, "the memory limit of cgroup") &&
		      strstr(log, "allocations past that are refused (-ENOSPC)") &&
		      strstr(log, "warn: --pool-size 512.0 MiB"), "%s", log);
	connect_ok(d.sock, &c);
	/* slabs come while the limit has room; then -ENOSPC, not a kill */
	while ((rc = kvp_alloc(c, BATCH, pages + n)) == 0)
		n += BATCH;
	ck_assert_int_eq(rc, -ENOSPC);
	ck_assert_msg(strstr(kvp_last_error(), "no memory for another slab of 16.0 MiB: "),
		      "%s", kvp_last_error());
	ck_assert_uint_gt(n, 0);
	ck_assert_uint_lt(n * PAGE_BYTES, LIMIT);
	/* every page it got is memory it can write */
	for (i = 0; i < n; i++)
		fill(kvp_page_ptr(c, pages[i]), 1, (uint32_t)i);
	for (i = 0; i < n; i++)
		ck_assert(holds(kvp_page_ptr(c, pages[i]), 1, (uint32_t)i));
	ck_assert_int_eq(kvp_release(c, pages, n), 0);
	kvp_close(c);
	daemon_stop(&d);
	leave_cgroup(cg);
}
END_TEST

/* --no-prefault keeps the old behaviour, and the start-up says what it
 * risks (no page is written here: the writer would be killed). */
START_TEST(test_core_no_prefault_warns_that_writers_may_be_killed)
{
	static const char *const args[] = {
		"--pool-size", "512M", "--slab-size", "16M", "--no-prefault", NULL,
	};
	static kvp_page pages[1024];
	char cg[512], log[8192];
	struct daemon d;
	kvp_client *c;

	if (!memory_cgroup(96u << 20, cg, sizeof(cg)))
		return;
	daemon_start(&d, args);
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "would be killed by the OOM killer") &&
		      strstr(log, "drop --no-prefault"), "%s", log);
	connect_ok(d.sock, &c);
	/* slabs are made without their memory: past the limit too */
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(kvp_alloc(c, 1024, pages), 0);
	kvp_close(c);
	daemon_stop(&d);
	leave_cgroup(cg);
}
END_TEST

/*
 * The view: all the namespace's pages as one array, across slabs, also
 * when a slab is not a whole number of pages (24 KiB pages in 1 MiB
 * slabs: 42 pages, then a hole); index <-> handle both ways; another
 * process sees the same bytes at the same index; released pages leave
 * no handle behind.
 */
START_TEST(test_core_the_view_is_one_array_of_every_page)
{
	static const kvp_geometry g24 = {
		.layers = 3, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
		.dtype = KVP_DTYPE_F16, .model = "test/view24",
	};
	const kvp_geometry *gs[2] = { &geo, &g24 };
	kvp_page pages[150];
	kvp_view_t v, v2;
	struct daemon d;
	kvp_client *c, *c2;
	int64_t idx;
	size_t i, k;
	int rc;

	static const char *const pool8[] = { "--pool-size", "8M", "--slab-size", "1M", NULL };

	daemon_start(&d, pool8);
	for (k = 0; k < 2; k++) {
		const char *ns = k ? "view24" : "tiny";

		rc = kvp_connect(d.sock, ns, gs[k], &c);
		ck_assert_msg(rc == 0, "%s", kvp_last_error());
		ck_assert_int_eq(kvp_view(c, &v), 0);
		ck_assert_uint_eq(v.stride, k ? 24576 : PAGE_BYTES);
		ck_assert_uint_eq(v.per_slab, k ? 43 : 64);	/* 1 MiB + a 24 KiB hole */
		ck_assert_uint_eq(v.pages, 8 * (uint64_t)v.per_slab);	/* 8 slabs at most */
		ck_assert_int_eq(kvp_alloc(c, k ? 100 : 150, pages), 0);	/* 3 slabs */
		for (i = 0; i < (k ? 100u : 150u); i++) {
			idx = kvp_page_index(c, pages[i]);
			ck_assert_int_ge(idx, 0);
			ck_assert_uint_lt((uint64_t)idx, v.pages);
			ck_assert_uint_lt((uint64_t)idx % v.per_slab, k ? 42 : 64);
			ck_assert_ptr_eq(kvp_page_ptr(c, pages[i]),
					 (char *)v.base + (uint64_t)idx * v.stride);
			ck_assert_uint_eq(kvp_page_at(c, (uint64_t)idx), pages[i]);
			if (!k)
				fill((char *)v.base + (uint64_t)idx * v.stride, 7, (uint32_t)i);
		}
		if (!k) {
			/* another process's view: the same bytes at the same index */
			connect_ok(d.sock, &c2);
			ck_assert_int_eq(kvp_view(c2, &v2), 0);
			ck_assert_int_eq(kvp_retain(c, pages, 1), 0);
			for (i = 0; i < 150; i++)
				ck_assert(holds((char *)v.base + (uint64_t)kvp_page_index(c, pages[i]) *
						v.stride, 7, (uint32_t)i));
			kvp_close(c2);
			ck_assert_int_eq(kvp_release(c, pages, 1), 0);
		}
		idx = kvp_page_index(c, pages[0]);
		ck_assert_int_eq(kvp_release(c, pages, k ? 100 : 150), 0);
		ck_assert_int_eq(kvp_page_index(c, pages[0]), -ESTALE);
		ck_assert_uint_eq(kvp_page_at(c, (uint64_t)idx), 0);
		ck_assert_uint_eq(kvp_page_at(c, v.pages + 5), 0);
		kvp_close(c);
	}
	/* an inspection session has no view */
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &c), 0);
	ck_assert_int_eq(kvp_view(c, &v), -ENOTCONN);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

static Suite *core_suite(void)
{
	Suite *s = suite_create("core");
	TCase *tc;

	tc = tcase_create("sharing");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_core_eight_processes_write_and_read_their_pages);
	tcase_add_test(tc, test_core_bytes_written_by_one_process_are_seen_by_another);
	suite_add_tcase(s, tc);

	tc = tcase_create("dead clients");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_core_killed_client_pages_are_free_within_100ms);
	tcase_add_test(tc, test_core_closing_a_client_returns_its_pages);
	suite_add_tcase(s, tc);

	tc = tcase_create("hostile input");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_core_malformed_messages_get_error_or_close);
	tcase_add_test(tc, test_core_stale_forged_and_double_release_are_refused);
	tcase_add_test(tc, test_core_attached_fd_is_closed_and_refused);
	tcase_add_test(tc, test_core_requests_need_hello_and_their_own_namespace);
	suite_add_tcase(s, tc);

	tc = tcase_create("namespaces");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_core_geometry_mismatch_names_the_field);
	tcase_add_test(tc, test_core_page_larger_than_a_slab_is_refused);
	tcase_add_test(tc, test_core_k_only_and_k_v_of_different_sizes_size_the_page);
	suite_add_tcase(s, tc);

	tc = tcase_create("memory");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_core_by_default_a_memory_limit_refuses_slabs_and_kills_nobody);
	tcase_add_test(tc, test_core_no_prefault_warns_that_writers_may_be_killed);
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_core_lease_limit_refuses_at_the_edge);
	tcase_add_test(tc, test_core_exhausted_pool_refuses_all_or_none);
	tcase_add_test(tc, test_core_alloc_beyond_one_message_is_split_and_atomic);
	suite_add_tcase(s, tc);

	tc = tcase_create("library");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_core_library_refuses_pages_it_does_not_hold);
	tcase_add_test(tc, test_core_the_view_is_one_array_of_every_page);
	tcase_add_test(tc, test_core_stats_count_namespaces_and_states);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(core_suite());
}
