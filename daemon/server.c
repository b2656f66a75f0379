/* SPDX-License-Identifier: MIT */
/*
 * server.c - the listening socket, client connections and request
 * dispatch of kvpoold.
 *
 * Each connection is a small state machine driven by loop completions:
 * one receive is always posted while the connection is open, replies are
 * queued and sent one at a time. Any protocol error moves the connection
 * to CONN_CLOSING: the socket is shut down, the operations in flight
 * complete, and the last completion frees the connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/server.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

enum conn_state {
	CONN_OPEN,	/* a receive is posted; requests are served */
	CONN_REFUSED,	/* over max-clients: the first request gets LIMIT */
	CONN_CLOSING,	/* shut down; freed when its last operation completes */
};

/* Connections over max-clients held at once to tell them why; past this
 * they are closed at once and see a reset. */
#define REFUSED_MAX 16

/* One queued reply. */
struct outbuf {
	struct outbuf *next;
	size_t len;
	uint8_t data[];
};

struct conn {
	struct server *srv;
	struct conn *prev, *next;	/* srv->conns */
	enum conn_state state;
	int fd;
	uint64_t id;			/* 1, 2, ... in order of arrival */
	struct ucred cred;		/* peer's pid, uid, gid at connect */
	unsigned ops;			/* loop operations in flight */

	struct loop_op recv_op;
	struct msghdr rmsg;
	struct iovec riov;
	uint8_t *rbuf;			/* srv->opt->max_msg_size bytes */

	struct loop_op send_op;
	struct msghdr smsg;
	struct iovec siov;
	struct outbuf *out_head, *out_tail;
	bool sending;
	bool close_after_send;		/* a fatal error reply is queued */
	bool refused;			/* counted in nrefused, not nconns */
};

struct server {
	struct loop *loop;
	const struct options *opt;
	int listen_fd;
	int lock_fd;			/* flock on SOCKET.lock, held for life */
	bool accepting;			/* accept_op is in flight */
	bool shutting_down;
	struct loop_op accept_op;
	struct loop_op cancel_op;
	struct conn *conns;
	uint32_t nconns;		/* served clients, CONN_OPEN or closing */
	uint32_t nrefused;		/* CONN_REFUSED or closing after it */
	uint64_t next_conn_id;
	uint64_t start_ms;

	/* counters for STATS */
	uint64_t connections_total;
	uint64_t connections_refused;
	uint64_t requests_total;
	uint64_t protocol_errors;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void server_maybe_done(struct server *s)
{
	if (s->shutting_down && !s->accepting && !s->conns)
		loop_stop(s->loop);
}

/* --- connection life cycle ------------------------------------------- */

static void conn_free(struct conn *c)
{
	struct server *s = c->srv;
	struct outbuf *o, *next;

	for (o = c->out_head; o; o = next) {
		next = o->next;
		free(o);
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->refused) {
		s->nrefused--;
	} else {
		s->nconns--;
		log_debug("client %llu (pid %d) disconnected",
			  (unsigned long long)c->id, (int)c->cred.pid);
	}
	close(c->fd);
	free(c->rbuf);
	free(c);
	server_maybe_done(s);
}

/*
 * conn_close() - move c to CONN_CLOSING. The shutdown makes the posted
 * receive (and any send) complete; the last completion frees c.
 */
static void conn_close(struct conn *c)
{
	if (c->state == CONN_CLOSING)
		return;
	c->state = CONN_CLOSING;
	shutdown(c->fd, SHUT_RDWR);
	if (c->ops == 0)
		conn_free(c);
}

/* conn_op_done() - account for one completed operation; true when the
 * connection was freed and must not be touched again. */
static bool conn_op_done(struct conn *c)
{
	c->ops--;
	if (c->state == CONN_CLOSING && c->ops == 0) {
		conn_free(c);
		return true;
	}
	return false;
}

static void conn_recv_done(struct loop_op *op, int res);
static void conn_send_done(struct loop_op *op, int res);

static void conn_post_recv(struct conn *c)
{
	c->riov.iov_base = c->rbuf;
	c->riov.iov_len = c->srv->opt->max_msg_size;
	memset(&c->rmsg, 0, sizeof(c->rmsg));
	c->rmsg.msg_iov = &c->riov;
	c->rmsg.msg_iovlen = 1;
	/* MSG_TRUNC: the result is the packet's real length, so an oversized
	 * message is seen as such instead of being cut silently. */
	if (loop_recvmsg(c->srv->loop, &c->recv_op, c->fd, &c->rmsg, MSG_TRUNC) < 0) {
		log_error("client %llu: cannot queue a receive: ring full; closing it",
			  (unsigned long long)c->id);
		conn_close(c);
		return;
	}
	c->ops++;
}

static void conn_post_send(struct conn *c)
{
	struct outbuf *o = c->out_head;

	if (c->sending || !o || c->state == CONN_CLOSING)
		return;
	c->siov.iov_base = o->data;
	c->siov.iov_len = o->len;
	memset(&c->smsg, 0, sizeof(c->smsg));
	c->smsg.msg_iov = &c->siov;
	c->smsg.msg_iovlen = 1;
	if (loop_sendmsg(c->srv->loop, &c->send_op, c->fd, &c->smsg, MSG_NOSIGNAL) < 0) {
		log_error("client %llu: cannot queue a send: ring full; closing it",
			  (unsigned long long)c->id);
		conn_close(c);
		return;
	}
	c->sending = true;
	c->ops++;
}

/*
 * conn_reply() - queue a reply to req with status and payload (copied).
 * A failed allocation closes the connection: the client sees EPIPE rather
 * than a request that never gets an answer.
 */
static void conn_reply(struct conn *c, const struct kvp_wire_hdr *req,
		       uint32_t status, const void *payload, uint32_t len)
{
	struct kvp_wire_hdr h = {
		.op = req->op, .flags = KVP_WIRE_F_REPLY, .status = status,
		.req_id = req->req_id, .len = len,
	};
	struct outbuf *o;

	o = malloc(sizeof(*o) + KVP_WIRE_HDR_SIZE + len);
	if (!o) {
		log_error("client %llu: out of memory for a %u-byte reply; closing it",
			  (unsigned long long)c->id, len);
		conn_close(c);
		return;
	}
	o->next = NULL;
	o->len = KVP_WIRE_HDR_SIZE + len;
	wire_hdr_encode(o->data, &h);
	if (len)
		memcpy(o->data + KVP_WIRE_HDR_SIZE, payload, len);
	if (c->out_tail)
		c->out_tail->next = o;
	else
		c->out_head = o;
	c->out_tail = o;
	conn_post_send(c);
}

/* conn_fatal() - answer with status, then close once the reply is out. */
static void conn_fatal(struct conn *c, const struct kvp_wire_hdr *req,
		       uint32_t status, const char *why)
{
	c->srv->protocol_errors++;
	log_warn("client %llu (pid %d): %s: %s; closing the connection",
		 (unsigned long long)c->id, (int)c->cred.pid,
		 wire_status_str(status), why);
	c->close_after_send = true;
	conn_reply(c, req, status, NULL, 0);
}

/* --- requests --------------------------------------------------------- */

static void handle_stats(struct conn *c, const struct kvp_wire_hdr *req)
{
	struct server *s = c->srv;
	struct kvp_wire_stats st;
	uint8_t buf[sizeof(st)];

	if (req->len != 0) {
		conn_reply(c, req, KVP_S_INVAL, NULL, 0);
		return;
	}
	memset(&st, 0, sizeof(st));
	snprintf(st.version, sizeof(st.version), "%s", PACKAGE_VERSION);
	st.pid = (uint32_t)getpid();
	st.backend = KVP_BACKEND_NONE;
	st.uptime_ms = now_ms() - s->start_ms;
	st.clients = s->nconns;
	st.max_clients = (uint32_t)s->opt->max_clients;
	st.connections_total = s->connections_total;
	st.connections_refused = s->connections_refused;
	st.requests_total = s->requests_total;
	st.protocol_errors = s->protocol_errors;
	wire_stats_encode(buf, &st);
	conn_reply(c, req, KVP_S_OK, buf, sizeof(buf));
}

/* handle_message() - decode and serve one received packet of n bytes. */
static void handle_message(struct conn *c, size_t n)
{
	struct kvp_wire_hdr req = { 0 };
	char why[128];
	int rc;

	if (n > c->srv->opt->max_msg_size) {
		snprintf(why, sizeof(why), "message of %zu bytes exceeds max-msg-size %llu",
			 n, (unsigned long long)c->srv->opt->max_msg_size);
		conn_fatal(c, &req, KVP_S_PROTO, why);
		return;
	}
	rc = wire_hdr_decode(c->rbuf, n, &req);
	if (rc < 0 || (req.flags & KVP_WIRE_F_REPLY)) {
		if (rc == -KVP_S_VERSION)
			snprintf(why, sizeof(why), "protocol version %u (this daemon speaks %u)",
				 req.version, KVP_WIRE_VERSION);
		else
			snprintf(why, sizeof(why), "bad header in a %zu-byte message", n);
		conn_fatal(c, &req, rc == -KVP_S_VERSION ? KVP_S_VERSION : KVP_S_PROTO, why);
		return;
	}
	if (c->state == CONN_REFUSED) {
		c->close_after_send = true;
		conn_reply(c, &req, KVP_S_LIMIT, NULL, 0);
		return;
	}
	c->srv->requests_total++;
	switch (req.op) {
	case KVP_OP_STATS:
		handle_stats(c, &req);
		break;
	default:
		log_debug("client %llu: unknown op %u", (unsigned long long)c->id, req.op);
		conn_reply(c, &req, KVP_S_OP, NULL, 0);
		break;
	}
}

static void conn_recv_done(struct loop_op *op, int res)
{
	struct conn *c = container_of(op, struct conn, recv_op);

	if (conn_op_done(c))
		return;
	if (c->state == CONN_CLOSING)
		return;
	if (res <= 0) {
		if (res < 0 && res != -ECONNRESET)
			log_debug("client %llu: receive failed: %s",
				  (unsigned long long)c->id, strerror(-res));
		conn_close(c);
		return;
	}
	handle_message(c, (size_t)res);
	if (c->state != CONN_CLOSING && !c->close_after_send)
		conn_post_recv(c);
}

static void conn_send_done(struct loop_op *op, int res)
{
	struct conn *c = container_of(op, struct conn, send_op);
	struct outbuf *o = c->out_head;

	c->sending = false;
	if (conn_op_done(c))
		return;
	if (c->state == CONN_CLOSING)
		return;
	if (res < 0) {
		if (res != -EPIPE && res != -ECONNRESET)
			log_debug("client %llu: send failed: %s",
				  (unsigned long long)c->id, strerror(-res));
		conn_close(c);
		return;
	}
	c->out_head = o->next;
	if (!c->out_head)
		c->out_tail = NULL;
	free(o);
	if (c->close_after_send && !c->out_head) {
		conn_close(c);
		return;
	}
	conn_post_send(c);
}

/* --- accepting -------------------------------------------------------- */

static void server_post_accept(struct server *s)
{
	if (loop_accept(s->loop, &s->accept_op, s->listen_fd) < 0) {
		log_error("cannot queue an accept: ring full; not accepting clients");
		return;
	}
	s->accepting = true;
}

static void server_accept_done(struct loop_op *op, int res)
{
	struct server *s = container_of(op, struct server, accept_op);
	socklen_t len = sizeof(struct ucred);
	struct conn *c;

	s->accepting = false;
	if (s->shutting_down) {
		if (res >= 0)
			close(res);
		server_maybe_done(s);
		return;
	}
	if (res < 0) {
		log_warn("accept on %s failed: %s", s->opt->socket_path, strerror(-res));
		server_post_accept(s);
		return;
	}
	if (s->nconns >= s->opt->max_clients) {
		s->connections_refused++;
		log_warn("refusing a client: %u clients connected, max-clients is %llu",
			 s->nconns, (unsigned long long)s->opt->max_clients);
		if (s->nrefused >= REFUSED_MAX) {
			close(res);
			server_post_accept(s);
			return;
		}
	}
	c = calloc(1, sizeof(*c));
	if (c)
		c->rbuf = malloc(s->opt->max_msg_size);
	if (!c || !c->rbuf) {
		log_error("out of memory for a new client; refusing it");
		free(c);
		close(res);
		server_post_accept(s);
		return;
	}
	c->srv = s;
	c->fd = res;
	c->id = ++s->next_conn_id;
	c->state = CONN_OPEN;
	if (s->nconns >= s->opt->max_clients) {
		/* Kept only to answer its first request with LIMIT: closing
		 * at once could reset the connection before it reads why. */
		c->state = CONN_REFUSED;
		c->refused = true;
	}
	c->recv_op.done = conn_recv_done;
	c->send_op.done = conn_send_done;
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len) < 0)
		c->cred.pid = -1;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	if (c->refused) {
		s->nrefused++;
		conn_post_recv(c);
		server_post_accept(s);
		return;
	}
	s->nconns++;
	s->connections_total++;
	log_debug("client %llu connected (pid %d, uid %u, gid %u)",
		  (unsigned long long)c->id, (int)c->cred.pid,
		  (unsigned)c->cred.uid, (unsigned)c->cred.gid);
	conn_post_recv(c);
	server_post_accept(s);
}

static void server_cancel_done(struct loop_op *op, int res)
{
	(void)op;
	(void)res;
}

/*
 * lock_socket() - take PATH.lock, which a running daemon holds for its
 * whole life. A lock, unlike a probe of the socket, tells a live daemon
 * from a dead one at once: the kernel drops it when its owner exits.
 * Returns the lock's fd or -errno with the reason in err.
 */
static int lock_socket(const char *path, char *err, size_t errlen)
{
	char lock[sizeof(((struct sockaddr_un *)0)->sun_path) + 8], pid[32];
	ssize_t n;
	int fd, rc;

	snprintf(lock, sizeof(lock), "%s.lock", path);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open %s: %s%s", lock, strerror(-rc),
			 rc == -ENOENT ? " (create its directory, e.g. with systemd's "
			 "RuntimeDirectory=kvpool, or choose another --socket)" : "");
		return rc;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		if (rc == -EWOULDBLOCK)
			snprintf(err, errlen, "another kvpoold (pid %s) is listening on %s; "
				 "stop it first or choose another --socket",
				 pid[0] ? pid : "?", path);
		else
			snprintf(err, errlen, "cannot lock %s: %s", lock, strerror(-rc));
		close(fd);
		return rc == -EWOULDBLOCK ? -EADDRINUSE : rc;
	}
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		log_warn("cannot write the pid into %s: %s", lock, strerror(errno));
	return fd;
}

/*
 * bind_socket() - bind and listen on path; the caller holds its lock, so
 * a socket file already there is stale and replaced. Returns the
 * listening fd or -errno with the reason in err.
 */
static int bind_socket(const char *path, unsigned backlog, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, rc;

	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket; "
				 "remove it or choose another --socket", path);
			return -EEXIST;
		}
		log_info("replacing the stale socket %s", path);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "socket(AF_UNIX, SOCK_SEQPACKET): %s", strerror(-rc));
		return rc;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(-rc));
		close(fd);
		return rc;
	}
	if (listen(fd, (int)backlog) < 0) {
		rc = -errno;
		snprintf(err, errlen, "listen on %s: %s", path, strerror(-rc));
		close(fd);
		unlink(path);
		return rc;
	}
	return fd;
}

int server_init(struct server **out, struct loop *l, const struct options *o,
		char *err, size_t errlen)
{
	struct server *s;
	int fd;

	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->opt = o;
	s->lock_fd = lock_socket(o->socket_path, err, errlen);
	if (s->lock_fd < 0) {
		fd = s->lock_fd;
		free(s);
		return fd;
	}
	fd = bind_socket(o->socket_path, 128, err, errlen);
	if (fd < 0) {
		close(s->lock_fd);
		free(s);
		return fd;
	}
	s->loop = l;
	s->opt = o;
	s->listen_fd = fd;
	s->start_ms = now_ms();
	s->accept_op.done = server_accept_done;
	s->cancel_op.done = server_cancel_done;
	server_post_accept(s);
	*out = s;
	return 0;
}

void server_shutdown(struct server *s)
{
	struct conn *c, *next;

	if (s->shutting_down)
		return;
	s->shutting_down = true;
	if (s->accepting)
		loop_cancel(s->loop, &s->cancel_op, &s->accept_op);
	for (c = s->conns; c; c = next) {
		next = c->next;
		conn_close(c);
	}
	server_maybe_done(s);
}

void server_free(struct server *s)
{
	if (!s)
		return;
	close(s->listen_fd);
	unlink(s->opt->socket_path);
	close(s->lock_fd);	/* the file stays: unlinking it would race */
	free(s);
}
