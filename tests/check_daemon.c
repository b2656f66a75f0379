/* SPDX-License-Identifier: MIT */
/*
 * check_daemon.c - integration tests: a real kvpoold on a temporary
 * socket, real clients (libkvpool, raw sockets, the kvpool CLI). Every
 * test that starts a daemon ends with daemon_stop(), which checks the
 * conservation invariant and a clean shutdown.
 *
 * Past 800 lines on purpose: the daemon's life (start, options, limits,
 * signals, stop) is one suite run against one fixture, each test a few
 * dozen lines.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <check.h>

#include "client/wire.h"
#include "harness.h"

#define OUT_MAX 32768

/* connect_raw() - a plain SEQPACKET connection, for speaking bad protocol. */
static int connect_raw(const char *sock)
{
	int fd = raw_connect(sock);

	ck_assert_msg(fd >= 0, "connect %s: %s", sock, strerror(-fd));
	return fd;
}

/* recv_reply() - the next message on fd, decoded; -1 when the daemon
 * closed the connection instead. */
static int recv_reply(int fd, struct kvp_wire_hdr *h)
{
	unsigned char buf[4096];
	ssize_t n = recv(fd, buf, sizeof(buf), 0);

	if (n <= 0)
		return -1;
	ck_assert_int_eq(wire_hdr_decode(buf, (size_t)n, h), 0);
	ck_assert(h->flags & KVP_WIRE_F_REPLY);
	return 0;
}

/* wait_clients() - ask until the daemon counts want clients (its own
 * probe connection included); it sees a close only when it next runs. */
static void wait_clients(const char *sock, uint32_t want)
{
	kvp_stats_t st;
	int i;

	for (i = 0; i < 100000; i++) {
		stats_of(sock, &st);
		if (st.clients == want)
			return;
	}
	ck_abort_msg("daemon still counts %u clients, want %u", st.clients, want);
}

START_TEST(test_daemon_help_and_version)
{
	char out[OUT_MAX];
	int st;

	st = run_cmd((const char *[]){ harness_kvpoold(), "--help", NULL }, out, sizeof(out));
	ck_assert_int_eq(st, 0);
	ck_assert_msg(strstr(out, "Usage: kvpoold") && strstr(out, "--socket"), "%s", out);
	st = run_cmd((const char *[]){ harness_kvpoold(), "--version", NULL }, out, sizeof(out));
	ck_assert_int_eq(st, 0);
	ck_assert_msg(strncmp(out, "kvpoold (kvpool) " PACKAGE_VERSION "\n",
			      strlen("kvpoold (kvpool) " PACKAGE_VERSION "\n")) == 0, "%s", out);
#ifdef HAVE_LIBSYSTEMD
	ck_assert_msg(strstr(out, "\nbuilt with libsystemd: socket activation"), "%s", out);
#else
	ck_assert_msg(strstr(out, "\nbuilt without libsystemd"), "%s", out);
#endif
#ifdef HAVE_LIBMICROHTTPD
	ck_assert_msg(strstr(out, "\nbuilt with libmicrohttpd: --metrics-listen"), "%s", out);
#else
	ck_assert_msg(strstr(out, "\nbuilt without libmicrohttpd"), "%s", out);
#endif
	st = run_cmd((const char *[]){ harness_cli(), "--help", NULL }, out, sizeof(out));
	ck_assert_int_eq(st, 0);
	ck_assert_msg(strstr(out, "Usage: kvpool") && strstr(out, "status"), "%s", out);
	st = run_cmd((const char *[]){ harness_cli(), "--version", NULL }, out, sizeof(out));
	ck_assert_int_eq(st, 0);
	ck_assert_str_eq(out, "kvpool " PACKAGE_VERSION " (libkvpool " PACKAGE_VERSION ")\n");
}
END_TEST

START_TEST(test_daemon_bad_flag_exits_2_and_says_why)
{
	char out[OUT_MAX];
	int st;

	st = run_cmd((const char *[]){ harness_kvpoold(), "--max-clients", "zero", NULL },
		     out, sizeof(out));
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	ck_assert_msg(strstr(out, "--max-clients: 'zero' is not a whole number"), "%s", out);
}
END_TEST

START_TEST(test_daemon_backend_cuda_says_why_it_cannot_start)
{
	char out[OUT_MAX];
	int st;

	/* device 999 exists nowhere: without a GPU, no device answers; with
	 * one, there is no device 999. Either way: exit 1 and why. */
	st = run_cmd((const char *[]){ harness_kvpoold(), "-f", "--socket",
				       "/tmp/kvpool-cuda-test.sock", "--backend", "cuda",
				       "--cuda-device", "999", NULL }, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status 0x%x: %s", st, out);
	ck_assert_msg(strstr(out, "--backend cuda: ") &&
		      (strstr(out, "no CUDA device answers") ||
		       strstr(out, "this machine has devices") ||
		       strstr(out, "built without CUDA")), "%s", out);
}
END_TEST

START_TEST(test_daemon_backend_auto_says_which_and_why)
{
	char log[8192];
	struct daemon d;

	daemon_start(&d, NULL);
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "backend cuda: ") ||
		      (strstr(log, "backend auto: ") && strstr(log, "using the host backend")),
		      "%s", log);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_bad_config_names_file_and_line)
{
	char cfg[] = "/tmp/kvpoold-conf-XXXXXX", out[OUT_MAX], want[128];
	int fd = mkstemp(cfg), st;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_gt(write(fd, "# ok\nsocket = /tmp/x\npool = 1\n", 30), 0);
	close(fd);
	st = run_cmd((const char *[]){ harness_kvpoold(), "-c", cfg, "-f", NULL },
		     out, sizeof(out));
	unlink(cfg);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	snprintf(want, sizeof(want), "%s:3: unknown key 'pool'", cfg);
	ck_assert_msg(strstr(out, want), "%s", out);
}
END_TEST

START_TEST(test_daemon_stats_over_the_socket)
{
	kvp_stats_t st;
	struct daemon d;

	daemon_start(&d, NULL);
	stats_of(d.sock, &st);
	ck_assert_str_eq(st.version, PACKAGE_VERSION);
	ck_assert_int_eq(st.pid, d.pid);
	ck_assert_uint_eq(st.backend, KVP_BACKEND_HOST);
	ck_assert_uint_eq(st.clients, 1);
	ck_assert_uint_eq(st.max_clients, 256);
	ck_assert_uint_eq(st.connections_total, 1);
	ck_assert_uint_eq(st.requests_total, 2);	/* HELLO, STATS */
	ck_assert_uint_eq(st.namespaces, 0);
	ck_assert_uint_eq(st.pages_total, 0);
	ck_assert_uint_eq(st.protocol_errors, 0);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_cli_status)
{
	char out[OUT_MAX];
	struct daemon d;
	int st;

	daemon_start(&d, NULL);
	st = run_cmd((const char *[]){ harness_cli(), "--socket", d.sock, "status", NULL },
		     out, sizeof(out));
	ck_assert_msg(st == 0, "status 0x%x: %s", st, out);
	ck_assert_msg(strstr(out, "kvpoold " PACKAGE_VERSION), "%s", out);
	ck_assert_msg(strstr(out, "conservation  ok"), "%s", out);
	/* counts agree with their nouns */
	ck_assert_msg(strstr(out, ", 0 slabs in use") && strstr(out, "(1 connection since start"),
		      "%s", out);
	st = run_cmd((const char *[]){ harness_cli(), "-s", d.sock, "--json", "status", NULL },
		     out, sizeof(out));
	ck_assert_msg(st == 0, "status 0x%x: %s", st, out);
	ck_assert_msg(out[0] == '{' && strstr(out, "\"conservation_ok\":true,"), "%s", out);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_cli_without_daemon_explains)
{
	char out[OUT_MAX];
	int st;

	st = run_cmd((const char *[]){ harness_cli(), "--socket", "/tmp/kvpool-none.sock",
				 "status", NULL }, out, sizeof(out));
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	ck_assert_msg(strstr(out, "kvpool: cannot connect to kvpoold at /tmp/kvpool-none.sock: "
			      "no such file: is kvpoold running?"), "%s", out);
	st = run_cmd((const char *[]){ harness_cli(), "frobnicate", NULL }, out, sizeof(out));
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	ck_assert_msg(strstr(out, "unknown command 'frobnicate'"), "%s", out);
}
END_TEST

START_TEST(test_daemon_library_explains_a_failed_connection)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[128];
	kvp_client *c;
	int fd;

	/* no daemon, no directory */
	ck_assert_int_eq(kvp_connect("/tmp/kvpool-none/x.sock", NULL, NULL, &c), -ENOENT);
	ck_assert_msg(strstr(kvp_last_error(), "cannot connect to kvpoold at "
			     "/tmp/kvpool-none/x.sock: no such file, nor the directory "
			     "/tmp/kvpool-none: is kvpoold running?"), "%s", kvp_last_error());
	/* a socket nobody listens on */
	snprintf(path, sizeof(path), "/tmp/kvpool-stale-%d.sock", (int)getpid());
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(fd, 0);
	strcpy(sa.sun_path, path);
	unlink(path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	ck_assert_int_eq(kvp_connect(path, NULL, NULL, &c), -ECONNREFUSED);
	ck_assert_msg(strstr(kvp_last_error(), "nothing listens there") &&
		      strstr(kvp_last_error(), path), "%s", kvp_last_error());
	unlink(path);
	/* KVPOOL_SOCKET names it when the caller does not */
	setenv("KVPOOL_SOCKET", "/tmp/kvpool-none/env.sock", 1);
	ck_assert_int_eq(kvp_connect(NULL, NULL, NULL, &c), -ENOENT);
	ck_assert_msg(strstr(kvp_last_error(), "/tmp/kvpool-none/env.sock"), "%s",
		      kvp_last_error());
	unsetenv("KVPOOL_SOCKET");
}
END_TEST

START_TEST(test_daemon_garbage_gets_error_then_close_others_unaffected)
{
	kvp_stats_t st;
	struct kvp_wire_hdr h;
	kvp_client *good;
	struct daemon d;
	int fd;

	daemon_start(&d, NULL);
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &good), 0);
	fd = connect_raw(d.sock);
	ck_assert_int_eq(send(fd, "hello, daemon", 13, 0), 13);
	ck_assert_int_eq(recv_reply(fd, &h), 0);
	ck_assert_uint_eq(h.status, KVP_S_PROTO);
	ck_assert_int_eq(recv_reply(fd, &h), -1);	/* then closed */
	close(fd);

	ck_assert_int_eq(kvp_stats(good, &st, NULL, 0), 0);
	ck_assert_uint_eq(st.protocol_errors, 1);
	kvp_close(good);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_other_version_is_refused_with_request_id)
{
	struct kvp_wire_hdr req = { .op = KVP_OP_STATS, .req_id = 77 }, h;
	unsigned char buf[KVP_WIRE_HDR_SIZE];
	struct daemon d;
	int fd;

	daemon_start(&d, NULL);
	fd = connect_raw(d.sock);
	wire_hdr_encode(buf, &req);
	buf[4] = KVP_WIRE_VERSION + 1;	/* a version this daemon does not speak */
	ck_assert_int_eq(send(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	ck_assert_int_eq(recv_reply(fd, &h), 0);
	ck_assert_uint_eq(h.status, KVP_S_VERSION);
	ck_assert_uint_eq(h.req_id, 77);
	ck_assert_int_eq(recv_reply(fd, &h), -1);
	close(fd);
	daemon_stop(&d);
}
END_TEST

/* send_v() - one request of version v on fd: header and payload. */
static void send_v(int fd, uint16_t v, uint16_t op, uint64_t id, const void *pl, size_t len)
{
	struct kvp_wire_hdr req = { .version = v, .op = op, .req_id = id, .len = (uint32_t)len };
	unsigned char buf[KVP_WIRE_HDR_SIZE + 1024];

	ck_assert_uint_le(len, 1024);
	wire_hdr_encode(buf, &req);
	if (len)
		memcpy(buf + KVP_WIRE_HDR_SIZE, pl, len);
	ck_assert_int_eq(send(fd, buf, KVP_WIRE_HDR_SIZE + len, 0),
			 (ssize_t)(KVP_WIRE_HDR_SIZE + len));
}

/* recv_text() - the next reply on fd and its error text (NUL-ended). */
static void recv_text(int fd, struct kvp_wire_hdr *h, char *text, size_t size)
{
	unsigned char buf[4096];
	ssize_t n = recv(fd, buf, sizeof(buf), 0);
	size_t tl;

	ck_assert_int_ge(n, KVP_WIRE_HDR_SIZE);
	ck_assert_int_eq(wire_hdr_decode(buf, (size_t)n, h), 0);
	tl = (size_t)n - KVP_WIRE_HDR_SIZE < size - 1 ? (size_t)n - KVP_WIRE_HDR_SIZE : size - 1;
	memcpy(text, buf + KVP_WIRE_HDR_SIZE, tl);
	text[tl] = '\0';
}

START_TEST(test_daemon_serves_a_client_of_the_previous_protocol_in_its_version)
{
	const uint16_t old = KVP_WIRE_VERSION_MIN;
	struct kvp_wire_hello hello = { .ns = "prev", .model = "m", .client_name = "old",
					.layers = 2, .kv_heads = 2, .head_dim = 16,
					.block_tokens = 16, .dtype = KVP_WIRE_DTYPE_F16 };
	struct kvp_wire_acquire a = { .nkeys = 1, .flags = KVP_WIRE_ACQ_WAIT | 0x8u,
				      .wait_ms = 10 };
	unsigned char acq[sizeof(a) + KVP_KEY_BYTES] = { 0 };
	struct kvp_wire_handoff ho = { .what = KVP_HANDOFF_ABANDON };
	struct kvp_wire_hdr h;
	char text[600];
	struct daemon d;
	kvp_client *now;
	int fd;

	ck_assert_uint_eq(old, KVP_WIRE_VERSION - 1);	/* N and N-1 */
	daemon_start(&d, NULL);
	fd = connect_raw(d.sock);
	send_v(fd, old, KVP_OP_HELLO, 1, &hello, sizeof(hello));
	recv_text(fd, &h, text, sizeof(text));
	ck_assert_msg(h.status == KVP_S_OK, "HELLO at version %u: %u %s", old, h.status, text);
	ck_assert_uint_eq(h.version, old);	/* answered in its version */
	/* what came later is refused as that version's daemon refused it,
	 * and the connection goes on */
	send_v(fd, old, KVP_OP_HANDOFF, 2, &ho, sizeof(ho));
	recv_text(fd, &h, text, sizeof(text));
	ck_assert_uint_eq(h.status, KVP_S_OP);
	ck_assert_uint_eq(h.version, old);
	ck_assert_msg(strstr(text, "HANDOFF is protocol version 9's"), "%s", text);
	/* the previous version's ACQUIRE has no handoff key after its tokens:
	 * HANDOFF (0x8) is an unknown flag there (INVAL), not a short payload */
	memcpy(acq, &a, sizeof(a));
	send_v(fd, old, KVP_OP_ACQUIRE, 3, acq, sizeof(acq));
	recv_text(fd, &h, text, sizeof(text));
	ck_assert_msg(h.status == KVP_S_INVAL && strstr(text, "this connection speaks 8"),
		      "%u %s", h.status, text);
	/* a client of this release beside it, sharing the namespace */
	ck_assert_int_eq(kvp_connect(d.sock, "prev", &(kvp_geometry){ .layers = 2,
			 .kv_heads = 2, .head_dim = 16, .block_tokens = 16,
			 .dtype = KVP_DTYPE_F16, .model = "m" }, &now), 0);
	ck_assert_int_eq(kvp_protocol(now), KVP_WIRE_VERSION);
	kvp_close(now);
	/* a connection keeps the version it began in */
	send_v(fd, KVP_WIRE_VERSION, KVP_OP_STATS, 4, NULL, 0);
	recv_text(fd, &h, text, sizeof(text));
	ck_assert_uint_eq(h.status, KVP_S_VERSION);
	ck_assert_uint_eq(h.version, old);
	ck_assert_msg(strstr(text, "began in 8"), "%s", text);
	ck_assert_int_eq(recv_reply(fd, &h), -1);
	close(fd);
	/* one older than that is refused in this daemon's version, which
	 * the client's error names */
	fd = connect_raw(d.sock);
	send_v(fd, old - 1, KVP_OP_STATS, 5, NULL, 0);
	recv_text(fd, &h, text, sizeof(text));
	ck_assert_uint_eq(h.status, KVP_S_VERSION);
	ck_assert_uint_eq(h.version, KVP_WIRE_VERSION);
	ck_assert_msg(strstr(text, "speaks versions 8 to 9"), "%s", text);
	close(fd);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_unknown_op_keeps_the_connection)
{
	struct kvp_wire_hdr req = { .op = 999, .req_id = 5 }, h;
	unsigned char buf[KVP_WIRE_HDR_SIZE];
	struct daemon d;
	int fd;

	daemon_start(&d, NULL);
	fd = connect_raw(d.sock);
	wire_hdr_encode(buf, &req);
	ck_assert_int_eq(send(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	ck_assert_int_eq(recv_reply(fd, &h), 0);
	ck_assert_uint_eq(h.status, KVP_S_OP);
	ck_assert_uint_eq(h.req_id, 5);

	req = (struct kvp_wire_hdr){ .op = KVP_OP_STATS, .req_id = 6 };
	wire_hdr_encode(buf, &req);
	ck_assert_int_eq(send(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	ck_assert_int_eq(recv_reply(fd, &h), 0);
	ck_assert_uint_eq(h.status, KVP_S_OK);
	ck_assert_uint_eq(h.req_id, 6);
	ck_assert_uint_eq(h.len, sizeof(struct kvp_wire_stats));	/* no namespaces */
	close(fd);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_stats_with_payload_is_inval)
{
	struct kvp_wire_hdr req = { .op = KVP_OP_STATS, .req_id = 8, .len = 4 }, h;
	unsigned char buf[KVP_WIRE_HDR_SIZE + 4] = { 0 };
	struct daemon d;
	int fd;

	daemon_start(&d, NULL);
	fd = connect_raw(d.sock);
	wire_hdr_encode(buf, &req);
	ck_assert_int_eq(send(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	ck_assert_int_eq(recv_reply(fd, &h), 0);
	ck_assert_uint_eq(h.status, KVP_S_INVAL);
	close(fd);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_message_over_max_size_is_refused)
{
	static const char *const args[] = { "--max-msg-size", "4096", NULL };
	struct kvp_wire_hdr req = { .op = KVP_OP_STATS, .req_id = 3, .len = 4097 }, h;
	static unsigned char buf[KVP_WIRE_HDR_SIZE + 4097];
	struct daemon d;
	int fd;

	daemon_start(&d, args);
	fd = connect_raw(d.sock);
	wire_hdr_encode(buf, &req);
	ck_assert_int_eq(send(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	ck_assert_int_eq(recv_reply(fd, &h), 0);
	ck_assert_uint_eq(h.status, KVP_S_PROTO);
	ck_assert_int_eq(recv_reply(fd, &h), -1);
	close(fd);

	/* one byte under the limit is served */
	fd = connect_raw(d.sock);
	req.len = 4096 - KVP_WIRE_HDR_SIZE;
	wire_hdr_encode(buf, &req);
	ck_assert_int_eq(send(fd, buf, 4096, 0), 4096);
	ck_assert_int_eq(recv_reply(fd, &h), 0);
	ck_assert_uint_eq(h.status, KVP_S_INVAL);	/* STATS takes no payload */
	close(fd);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_max_clients_refuses_at_the_edge)
{
	/* root is a daemon admin: 4 connections past --max-clients, then
	 * LIMIT (a user's stop at the limit itself: check_access) */
	static const char *const args[] = { "--max-clients", "2", NULL };
	kvp_client *c[6], *over;
	kvp_stats_t st;
	struct daemon d;
	int i;

	daemon_start(&d, args);
	for (i = 0; i < 6; i++) {
		ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &c[i]), 0);
		ck_assert_int_eq(kvp_stats(c[i], &st, NULL, 0), 0);
	}
	ck_assert_uint_eq(st.clients, 6);
	ck_assert_uint_eq(st.max_clients, 2);

	/* the kernel accepts, the daemon answers HELLO with LIMIT */
	ck_assert_int_eq(kvp_connect(d.sock, NULL, NULL, &over), -EDQUOT);
	ck_assert_msg(strstr(kvp_last_error(), "max-clients"), "%s", kvp_last_error());

	ck_assert_int_eq(kvp_stats(c[0], &st, NULL, 0), 0);
	ck_assert_uint_eq(st.connections_refused, 1);
	for (i = 1; i < 6; i++)
		kvp_close(c[i]);
	/* their slots free up: probe with c[0] */
	for (i = 0; i < 100000 && st.clients != 1; i++)
		ck_assert_int_eq(kvp_stats(c[0], &st, NULL, 0), 0);
	ck_assert_uint_eq(st.clients, 1);
	kvp_close(c[0]);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_killed_client_is_dropped)
{
	struct daemon d;
	int status;
	pid_t pid;

	daemon_start(&d, NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvp_stats_t st;
		kvp_client *c;

		if (kvp_connect(d.sock, NULL, NULL, &c) < 0 || kvp_stats(c, &st, NULL, 0) < 0)
			_exit(1);
		raise(SIGKILL);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	wait_clients(d.sock, 1);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_refuses_a_live_socket_and_replaces_a_stale_one)
{
	char out[OUT_MAX], want[64];
	struct daemon d;
	struct stat sb;
	int st;

	daemon_start(&d, NULL);
	st = run_cmd((const char *[]){ harness_kvpoold(), "-f", "--socket", d.sock, NULL },
		     out, sizeof(out));
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	snprintf(want, sizeof(want), "another kvpoold (pid %d) is listening on", (int)d.pid);
	ck_assert_msg(strstr(out, want), "%s", out);
	/* said before anything else is tried: no backend probed */
	ck_assert_msg(!strstr(out, "backend"), "%s", out);
	check_conservation(d.sock);	/* the first daemon is unharmed */

	/* A crashed daemon leaves a socket file that nobody listens on. */
	ck_assert_int_eq(kill(d.pid, SIGKILL), 0);
	ck_assert_int_ge(daemon_wait_exit(&d, 20000), 0);
	close(d.pidfd);
	ck_assert(lstat(d.sock, &sb) == 0 && S_ISSOCK(sb.st_mode));

	daemon_restart(&d, NULL);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_background_mode_is_ready_when_the_parent_exits)
{
	char dir[] = "/tmp/kvpool-bg-XXXXXX", sock[108], pidf[128], buf[128], out[OUT_MAX];
	kvp_stats_t st;
	struct stat sb;
	struct daemon d = { 0 };
	int status;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/kvpool.sock", dir);
	snprintf(pidf, sizeof(pidf), "%s/kvpoold.pid", dir);
	status = run_cmd((const char *[]){ harness_kvpoold(), "--socket", sock,
				     "--pid-file", pidf, NULL }, out, sizeof(out));
	ck_assert_msg(status == 0, "kvpoold exited 0x%x: %s", status, out);

	/* the parent has exited: the socket must already answer */
	stats_of(sock, &st);
	read_file(pidf, buf, sizeof(buf));
	ck_assert_int_eq(atoi(buf), (int)st.pid);
	d.pid = (pid_t)st.pid;
	d.pidfd = harness_pidfd_open(d.pid);
	ck_assert_int_ge(d.pidfd, 0);
	ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
	{
		struct pollfd pfd = { .fd = d.pidfd, .events = POLLIN };

		ck_assert_int_eq(poll(&pfd, 1, 20000), 1);	/* it exited */
	}
	close(d.pidfd);
	ck_assert(lstat(sock, &sb) < 0 && lstat(pidf, &sb) < 0);
	snprintf(buf, sizeof(buf), "%s.lock", sock);
	unlink(buf);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* stop_detached() - SIGTERM a daemon that is not our child and wait up to
 * 20 s until it has exited. */
static void stop_detached(pid_t pid)
{
	struct pollfd pfd = { .fd = harness_pidfd_open(pid), .events = POLLIN };

	ck_assert_int_ge(pfd.fd, 0);
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	ck_assert_int_eq(poll(&pfd, 1, 20000), 1);	/* it exited */
	close(pfd.fd);
}

START_TEST(test_daemon_detached_logs_to_its_log_file_and_reopens_it_on_sighup)
{
	char dir[] = "/tmp/kvpool-log-XXXXXX", sock[108], pidf[128], logf[128], old[128];
	char buf[128], out[OUT_MAX], log[8192];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	bool have_syslog;
	kvp_stats_t st;
	int status, fd;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/kvpool.sock", dir);
	snprintf(pidf, sizeof(pidf), "%s/kvpoold.pid", dir);
	snprintf(logf, sizeof(logf), "%s/kvpoold.log", dir);
	snprintf(old, sizeof(old), "%s/kvpoold.log.1", dir);
	/* without --log-file a detached daemon logs to syslog: where syslog
	 * does not answer, it says so before it detaches */
	strcpy(sa.sun_path, "/dev/log");
	fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	have_syslog = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	status = run_cmd((const char *[]){ harness_kvpoold(), "--socket", sock, "--pid-file",
				     pidf, NULL }, out, sizeof(out));
	ck_assert_msg(status == 0, "kvpoold exited 0x%x: %s", status, out);
	ck_assert_msg(have_syslog != !!strstr(out, "syslog is not reachable (/dev/log: ") &&
		      (have_syslog || strstr(out, "give --log-file PATH")), "%s", out);
	stats_of(sock, &st);
	stop_detached((pid_t)st.pid);
	/* with --log-file, every line goes there, time-stamped */
	status = run_cmd((const char *[]){ harness_kvpoold(), "--socket", sock, "--pid-file",
				     pidf, "--log-file", logf, NULL }, out, sizeof(out));
	ck_assert_msg(status == 0 && !strstr(out, "syslog"), "kvpoold exited 0x%x: %s",
		      status, out);
	stats_of(sock, &st);
	read_file(logf, log, sizeof(log));
	snprintf(buf, sizeof(buf), " kvpoold[%u]: info: kvpoold ", st.pid);
	ck_assert_msg(strstr(log, buf) && strstr(log, "listening on"), "%s", log);
	/* logrotate moves it away and sends SIGHUP: a new file */
	ck_assert_int_eq(rename(logf, old), 0);
	ck_assert_int_eq(kill((pid_t)st.pid, SIGHUP), 0);
	for (int i = 0; i < 500 && access(logf, F_OK) < 0; i++)
		usleep(10000);
	stop_detached((pid_t)st.pid);
	read_file(logf, log, sizeof(log));
	ck_assert_msg(strstr(log, "SIGTERM from pid") && strstr(log, "stopped") &&
		      !strstr(log, "listening on"), "%s", log);
	unlink(logf);
	unlink(old);
	snprintf(buf, sizeof(buf), "%s.lock", sock);
	unlink(buf);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Every option kvpoold --help shows is a key of contrib/kvpoold.conf. */
START_TEST(test_daemon_sample_config_has_every_option)
{
	char out[OUT_MAX], conf[16384], path[512], want[80], *p, *e;
	const char *src = getenv("KVPOOL_SRCDIR");
	int st;

	st = run_cmd((const char *[]){ harness_kvpoold(), "--help", NULL }, out, sizeof(out));
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	snprintf(path, sizeof(path), "%s/contrib/kvpoold.conf", src ? src : "..");
	read_file(path, conf, sizeof(conf));
	for (p = out; (p = strstr(p, " --")); p = e) {
		p += 3;
		for (e = p; *e && (isalnum((unsigned char)*e) || *e == '-'); e++)
			;
		snprintf(want, sizeof(want), "\n# %.*s =", (int)(e - p), p);
		if (!strncmp(p, "config", 6) || !strncmp(p, "help", 4) ||
		    !strncmp(p, "version", 7) || !strncmp(p, "verbose", 7) || e == p)
			continue;	/* the command line's alone */
		ck_assert_msg(strstr(conf, want), "contrib/kvpoold.conf lacks the key '%.*s'",
			      (int)(e - p), p);
	}
}
END_TEST

static const kvp_geometry small_geo = {
	.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "test/limits",
};

/* slab_fds() - the daemon's slab memfds (each slab has two: read-write
 * and read-only), over 2: slabs that exist, live or made ahead. */
static unsigned slab_fds(pid_t pid)
{
	char dir[64], path[384], link[256];
	unsigned n = 0;
	struct dirent *e;
	ssize_t len;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len > 0) {
			link[len] = '\0';
			n += strstr(link, "memfd:kvpool-slab") != NULL;
		}
	}
	closedir(d);
	return n / 2;
}

/* slabs_become() - wait (5 s at most) until the daemon holds n slabs. */
static void slabs_become(pid_t pid, unsigned n)
{
	unsigned i;

	for (i = 0; i < 500 && slab_fds(pid) != n; i++)
		usleep(10000);
	ck_assert_uint_eq(slab_fds(pid), n);
}

START_TEST(test_daemon_makes_the_next_slab_ahead_within_the_budget)
{
	static const char *const ahead[] = { "--pool-size", "4M", "--slab-size", "1M",
					     "--free-watermark", "0", NULL };
	static const char *const onloop[] = { "--pool-size", "4M", "--slab-size", "1M",
					      "--free-watermark", "0", "--no-slab-ahead", NULL };
	static kvp_page pg[256];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	size_t per;

	daemon_start(&d, ahead);
	ck_assert_int_eq(kvp_connect(d.sock, "ahead", &small_geo, &c), 0);
	per = (1u << 20) / kvp_page_bytes(c);
	ck_assert_uint_le(per, 256);
	usleep(200000);
	ck_assert_uint_eq(slab_fds(d.pid), 0);		/* nothing before the pool grows */
	ck_assert_int_eq(kvp_alloc(c, 1, pg), 0);	/* the first; the next is made */
	slabs_become(d.pid, 2);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.slabs, 1);			/* the one made ahead is no slab yet */
	ck_assert_uint_eq(st.pages_total, per);
	ck_assert_int_eq(kvp_alloc(c, per, pg), 0);	/* into the second */
	slabs_become(d.pid, 3);
	ck_assert_int_eq(kvp_alloc(c, per, pg), 0);	/* the third: the budget's last */
	slabs_become(d.pid, 3);
	ck_assert_int_eq(kvp_alloc(c, per, pg), 0);	/* the fourth, made on the spot */
	slabs_become(d.pid, 4);				/* none past the budget */
	kvp_close(c);
	daemon_stop(&d);

	daemon_start(&d, onloop);
	ck_assert_int_eq(kvp_connect(d.sock, "onloop", &small_geo, &c), 0);
	ck_assert_int_eq(kvp_alloc(c, 1, pg), 0);
	usleep(200000);
	ck_assert_uint_eq(slab_fds(d.pid), 1);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_pipelined_requests_are_answered_in_order)
{
	struct kvp_wire_hdr req = { .op = KVP_OP_STATS }, h;
	unsigned char buf[KVP_WIRE_HDR_SIZE + 8];
	struct daemon d;
	int fd, i;

	daemon_start(&d, NULL);
	fd = connect_raw(d.sock);
	/* ten requests at once, one of them bad: the daemon takes them one
	 * at a time from the socket and answers each, in order */
	for (i = 1; i <= 10; i++) {
		req.req_id = (uint64_t)i;
		req.len = i == 5 ? 8 : 0;	/* STATS with a payload: INVAL */
		wire_hdr_encode(buf, &req);
		ck_assert_int_eq(send(fd, buf, KVP_WIRE_HDR_SIZE + req.len, 0),
				 (ssize_t)(KVP_WIRE_HDR_SIZE + req.len));
	}
	for (i = 1; i <= 10; i++) {
		ck_assert_int_eq(recv_reply(fd, &h), 0);
		ck_assert_uint_eq(h.req_id, (uint64_t)i);
		ck_assert_uint_eq(h.status, i == 5 ? KVP_S_INVAL : KVP_S_OK);
	}
	close(fd);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_unread_replies_disconnect_at_max_output)
{
	const char *const args[] = { "--max-output", "256K", NULL };
	struct kvp_wire_hdr req = { .op = KVP_OP_STATS }, h;
	unsigned char buf[KVP_WIRE_HDR_SIZE];
	kvp_client *good;
	kvp_page pages[4];
	kvp_stats_t st;
	struct daemon d;
	int fd, i, sent = 0;

	daemon_start(&d, args);
	ck_assert_int_eq(kvp_connect(d.sock, "limits", &small_geo, &good), 0);
	ck_assert_int_eq(kvp_alloc(good, 4, pages), 0);
	/* ask for STATS (about 500 bytes a reply) and never read a reply */
	fd = connect_raw(d.sock);
	for (i = 0; i < 100000; i++) {
		req.req_id = (uint64_t)i + 1;
		wire_hdr_encode(buf, &req);
		if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf))
			break;	/* EPIPE / ECONNRESET: it hung up */
		sent++;
	}
	ck_assert_msg(i < 100000, "the daemon kept taking requests of a client that "
		      "reads nothing (%d sent)", sent);
	/* what the kernel buffered, then nothing more: closed */
	while (recv_reply(fd, &h) == 0)
		;
	close(fd);
	ck_assert_int_eq(kvp_stats(good, &st, NULL, 0), 1);
	ck_assert_uint_eq(st.closed_output, 1);
	/* the other client lost nothing */
	ck_assert_int_eq(kvp_release(good, pages, 4), 0);
	kvp_close(good);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_idle_client_is_disconnected_and_loses_its_leases)
{
	const char *const args[] = { "--idle-timeout", "1", NULL };
	kvp_client *idle, *busy;
	kvp_page a[8], b[1];
	kvp_stats_t st;
	struct daemon d;
	int i, rc;

	daemon_start(&d, args);
	ck_assert_int_eq(kvp_connect(d.sock, "limits", &small_geo, &idle), 0);
	ck_assert_int_eq(kvp_connect(d.sock, "limits", &small_geo, &busy), 0);
	ck_assert_int_eq(kvp_alloc(idle, 8, a), 0);
	ck_assert_int_eq(kvp_alloc(busy, 1, b), 0);
	/* busy asks something every 250 ms; idle says nothing for 2.5 s
	 * (the sweep runs every 250 ms: gone by 1.25 s) */
	for (i = 0; i < 10; i++) {
		usleep(250 * 1000);
		ck_assert_int_eq(kvp_stats(busy, &st, NULL, 0), 1);
	}
	ck_assert_uint_eq(st.closed_idle, 1);
	ck_assert_uint_eq(st.clients, 1);
	ck_assert_uint_eq(st.pages_private, 1);	/* idle's 8 are free again */
	rc = kvp_alloc(idle, 1, a);
	ck_assert_msg(rc == -EPIPE || rc == -ECONNRESET, "%d %s", rc, kvp_last_error());
	kvp_close(idle);
	ck_assert_int_eq(kvp_release(busy, b, 1), 0);
	kvp_close(busy);
	daemon_stop(&d);
}
END_TEST

/* waits up to 5 s for the daemon at sock to hold no lease */
static void wait_no_leases(const char *sock)
{
	struct kvp_wire_stats st;
	int i;

	for (i = 0; i < 500; i++) {
		stats_of(sock, &st);
		if (st.pages_private + st.pages_shared == 0)
			return;
		usleep(10 * 1000);
	}
	ck_abort_msg("leases held 5 s after their client went: %llu private, %llu shared",
		     (unsigned long long)st.pages_private, (unsigned long long)st.pages_shared);
}

START_TEST(test_daemon_a_stopped_daemon_times_a_call_out_and_drops_its_leases)
{
	kvp_client *c, *late;
	kvp_page p[4], q[1];
	kvp_key k;
	struct daemon d;
	uint64_t t0, ms;
	int rc;

	daemon_start(&d, NULL);
	ck_assert_int_eq(kvp_connect(d.sock, "limits", &small_geo, &c), 0);
	ck_assert_int_eq(kvp_set_timeout(NULL, 100), -EINVAL);
	ck_assert_int_eq(kvp_set_timeout(c, KVP_TIMEOUT_MAX_MS + 1), -EINVAL);
	ck_assert_int_eq(kvp_alloc(c, 4, p), 0);
	ck_assert_int_eq(kvp_set_timeout(c, 300), 0);
	/* a waiting ACQUIRE has its wait on top of the limit */
	memset(&k, 0x5a, sizeof(k));
	ck_assert_int_eq(kvp_set_acquire_wait(c, 600), 0);
	t0 = harness_now_ns();
	ck_assert_int_eq(kvp_acquire(c, NULL, &k, 1, NULL, 0, q, NULL), 0);
	ms = (harness_now_ns() - t0) / 1000000;
	ck_assert_msg(ms >= 550, "the ACQUIRE waited %llu ms", (unsigned long long)ms);
	ck_assert_int_eq(kvp_set_acquire_wait(c, 0), 0);
	/* stopped (SIGSTOP: a debugger, a hang, swapped out): the call ends
	 * at the limit, closing the connection, and says why */
	ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
	t0 = harness_now_ns();
	rc = kvp_alloc(c, 1, q);
	ms = (harness_now_ns() - t0) / 1000000;
	ck_assert_msg(rc == -ETIMEDOUT, "%d %s", rc, kvp_last_error());
	ck_assert_msg(ms >= 290 && ms < 3000, "the ALLOC took %llu ms", (unsigned long long)ms);
	ck_assert_msg(strstr(kvp_last_error(), "kvpoold did not answer ALLOC within 300 ms"),
		      "%s", kvp_last_error());
	ck_assert_ptr_null(kvp_page_ptr(c, p[0]));	/* its leases are gone */
	/* a connect under a limit ends there too (the kernel takes it, the
	 * daemon does not answer its HELLO) */
	t0 = harness_now_ns();
	rc = kvp_connect_timeout(d.sock, "limits", &small_geo, "late", 300, &late);
	ms = (harness_now_ns() - t0) / 1000000;
	ck_assert_msg(rc == -ETIMEDOUT, "%d %s", rc, kvp_last_error());
	ck_assert_msg(ms >= 290 && ms < 3000, "the connect took %llu ms", (unsigned long long)ms);
	ck_assert_msg(strstr(kvp_last_error(), "did not answer HELLO within 300 ms"), "%s",
		      kvp_last_error());
	ck_assert_int_eq(kvp_connect_timeout(d.sock, "limits", &small_geo, NULL,
					     KVP_TIMEOUT_MAX_MS + 1, &late), -EINVAL);
	/* later calls fail at once, saying so again, page lists included */
	rc = kvp_release(c, p, 4);
	ck_assert_msg(rc == -EPIPE, "%d %s", rc, kvp_last_error());
	ck_assert_msg(strstr(kvp_last_error(), "did not answer ALLOC"), "%s", kvp_last_error());
	t0 = harness_now_ns();
	rc = kvp_alloc(c, 1, q);
	ck_assert_msg(rc == -EPIPE, "%d %s", rc, kvp_last_error());
	ck_assert_msg(strstr(kvp_last_error(), "did not answer ALLOC"), "%s", kvp_last_error());
	ck_assert_uint_lt(harness_now_ns() - t0, 100 * 1000000ull);
	kvp_close(c);
	/* going on, it drops the closed connection's leases */
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	wait_no_leases(d.sock);
	check_conservation(d.sock);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_killed_daemon_clients_get_an_error_and_reconnect)
{
	kvp_client *c;
	kvp_page p[4];
	struct daemon d;
	int status, rc;

	daemon_start(&d, NULL);
	ck_assert_int_eq(kvp_connect(d.sock, "limits", &small_geo, &c), 0);
	ck_assert_int_eq(kvp_alloc(c, 4, p), 0);
	ck_assert_int_eq(kill(d.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(d.pid, &status, 0), d.pid);
	/* the next call fails at once, saying why; it never hangs */
	rc = kvp_alloc(c, 1, p);
	ck_assert_msg(rc == -EPIPE || rc == -ECONNRESET, "%d %s", rc, kvp_last_error());
	ck_assert_msg(strstr(kvp_last_error(), "kvpoold"), "%s", kvp_last_error());
	ck_assert_ptr_null(kvp_page_ptr(c, p[0]));
	rc = kvp_release(c, p, 4);	/* not "not leased": the connection is gone */
	ck_assert_msg(rc == -EPIPE, "%d %s", rc, kvp_last_error());
	ck_assert_msg(strstr(kvp_last_error(), "the daemon exited"), "%s", kvp_last_error());
	kvp_close(c);
	/* a restarted daemon takes over the stale socket; clients come back */
	daemon_restart(&d, NULL);
	ck_assert_int_eq(kvp_connect(d.sock, "limits", &small_geo, &c), 0);
	ck_assert_int_eq(kvp_alloc(c, 4, p), 0);
	ck_assert_int_eq(kvp_release(c, p, 4), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* block_io_uring() - from now on, io_uring_setup fails with EPERM in this
 * process and its children, as under Docker's default seccomp profile. */
static void block_io_uring(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	ck_assert_int_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	ck_assert_int_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
}

/* serve_a_little() - a client allocates, publishes, acquires, releases. */
static void serve_a_little(const char *sock)
{
	kvp_key key = { { 9 } };
	kvp_client *c;
	kvp_page p[4], q[1];

	ck_assert_int_eq(kvp_connect(sock, "io", &small_geo, &c), 0);
	ck_assert_int_eq(kvp_alloc(c, 4, p), 0);
	ck_assert_int_eq(kvp_publish(c, NULL, p, &key, 1, 1, p), 0);
	ck_assert_int_eq(kvp_acquire(c, NULL, &key, 1, NULL, 0, q, NULL), 1);
	ck_assert_int_eq(kvp_release(c, q, 1), 0);
	ck_assert_int_eq(kvp_release(c, p, 4), 0);
	kvp_close(c);
}

START_TEST(test_daemon_without_io_uring_falls_back_and_says_so)
{
	struct daemon d;
	char log[8192];

	unsetenv("KVPOOL_IO");	/* the suite may run with KVPOOL_IO=sync */
	block_io_uring();
	daemon_start(&d, NULL);
	serve_a_little(d.sock);
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "io_uring is unavailable") &&
		      strstr(log, "serving with epoll and I/O threads") &&
		      strstr(log, "I/O by epoll and I/O threads"), "%s", log);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_daemon_io_uring_required_fails_clearly)
{
	const char *argv[] = { harness_kvpoold(), "--foreground", "--socket",
			       "/tmp/kvpool-no-uring.sock", "--io", "uring", NULL };
	char out[4096];
	int st;

	block_io_uring();
	st = run_cmd(argv, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, out);
	ck_assert_msg(strstr(out, "cannot set up io_uring") && strstr(out, "seccomp"),
		      "%s", out);
}
END_TEST

START_TEST(test_daemon_io_sync_forced_serves_and_says_so)
{
	const char *args[] = { "--io", "sync", NULL };
	struct daemon d;
	char log[8192];

	daemon_start(&d, args);
	serve_a_little(d.sock);
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "epoll and I/O threads, as asked"), "%s", log);
	daemon_stop(&d);
}
END_TEST

static Suite *daemon_suite(void)
{
	Suite *s = suite_create("daemon");
	TCase *tc = tcase_create("start-up");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_daemon_help_and_version);
	tcase_add_test(tc, test_daemon_sample_config_has_every_option);
	tcase_add_test(tc, test_daemon_bad_flag_exits_2_and_says_why);
	tcase_add_test(tc, test_daemon_bad_config_names_file_and_line);
	tcase_add_test(tc, test_daemon_backend_cuda_says_why_it_cannot_start);
	tcase_add_test(tc, test_daemon_backend_auto_says_which_and_why);
	tcase_add_test(tc, test_daemon_refuses_a_live_socket_and_replaces_a_stale_one);
	suite_add_tcase(s, tc);

	/* Under valgrind (make check-valgrind) valgrind keeps the daemon's
	 * first stderr open, so a detached daemon's output pipe never ends,
	 * and the daemon always runs the epoll loop: these tests are for
	 * the daemon as it is, and are left out there. */
	tc = tcase_create("background");
	tcase_set_timeout(tc, 30);
	tcase_set_tags(tc, "no-valgrind");
	tcase_add_test(tc, test_daemon_background_mode_is_ready_when_the_parent_exits);
	tcase_add_test(tc, test_daemon_detached_logs_to_its_log_file_and_reopens_it_on_sighup);
	suite_add_tcase(s, tc);

	tc = tcase_create("protocol");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_daemon_stats_over_the_socket);
	tcase_add_test(tc, test_daemon_makes_the_next_slab_ahead_within_the_budget);
	tcase_add_test(tc, test_daemon_garbage_gets_error_then_close_others_unaffected);
	tcase_add_test(tc, test_daemon_other_version_is_refused_with_request_id);
	tcase_add_test(tc, test_daemon_serves_a_client_of_the_previous_protocol_in_its_version);
	tcase_add_test(tc, test_daemon_unknown_op_keeps_the_connection);
	tcase_add_test(tc, test_daemon_stats_with_payload_is_inval);
	tcase_add_test(tc, test_daemon_message_over_max_size_is_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("clients");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_daemon_max_clients_refuses_at_the_edge);
	tcase_add_test(tc, test_daemon_killed_client_is_dropped);
	tcase_add_test(tc, test_daemon_pipelined_requests_are_answered_in_order);
	tcase_add_test(tc, test_daemon_unread_replies_disconnect_at_max_output);
	tcase_add_test(tc, test_daemon_idle_client_is_disconnected_and_loses_its_leases);
	tcase_add_test(tc, test_daemon_killed_daemon_clients_get_an_error_and_reconnect);
	tcase_add_test(tc, test_daemon_a_stopped_daemon_times_a_call_out_and_drops_its_leases);
	suite_add_tcase(s, tc);

	tc = tcase_create("io");
	tcase_set_timeout(tc, 30);
	tcase_set_tags(tc, "no-valgrind");
	tcase_add_test(tc, test_daemon_without_io_uring_falls_back_and_says_so);
	tcase_add_test(tc, test_daemon_io_uring_required_fails_clearly);
	tcase_add_test(tc, test_daemon_io_sync_forced_serves_and_says_so);
	suite_add_tcase(s, tc);

	tc = tcase_create("cli");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_daemon_cli_status);
	tcase_add_test(tc, test_daemon_cli_without_daemon_explains);
	tcase_add_test(tc, test_daemon_library_explains_a_failed_connection);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(daemon_suite());
}
