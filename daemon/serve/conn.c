/* SPDX-License-Identifier: MIT */
/*
 * conn.c - the connection object (see conn.h): replies queued and sent one
 * at a time (the send path and its limits, --max-output and
 * --max-output-total), errors, holds across deferred work, and the close
 * that frees a connection after its last operation. Accepting, receiving
 * and shutting down are server.c's; what the requests do is requests/'s.
 * Nothing here calls up: the server's conn_gone hook hears of the end.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/serve/conn.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))


static void conn_free(struct conn *c)
{
	struct server *s = c->srv;
	struct outbuf *o, *next;

	for (o = c->out_head; o; o = next) {
		next = o->next;
		free(o);
	}
	s->out_total -= c->out_bytes;
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->conn_gone(c);
	close(c->fd);
	free(c->tickets);	/* handoff.c's, once it is done with them */
	free(c->rbuf);
	free(c);
}

/* drop_output() - free the replies c will never read, all but the one a
 * send in flight still uses. */
static void drop_output(struct conn *c)
{
	struct outbuf *keep = c->sending ? c->out_head : NULL, *o, *next;

	for (o = keep ? keep->next : c->out_head; o; o = next) {
		next = o->next;
		c->out_bytes -= o->len;
		c->srv->out_total -= o->len;
		free(o);
	}
	if (keep)
		keep->next = NULL;
	c->out_head = c->out_tail = keep;
}

void conn_close(struct conn *c)
{
	if (c->state == CONN_CLOSING)
		return;
	c->state = CONN_CLOSING;
	shutdown(c->fd, SHUT_RDWR);
	drop_output(c);
	if (c->ops == 0)
		conn_free(c);
}

/*
 * output_over() - the replies all clients left unread passed
 * --max-output-total: disconnect the client that holds the most of them
 * (O(clients), only then). The reply c was just given, when it is its
 * only one, is being sent, not left unread: c is not chosen for it.
 * True when c was disconnected.
 */
static bool output_over(struct conn *c)
{
	struct server *s = c->srv;
	struct conn *o, *worst = NULL;

	for (o = s->conns; o; o = o->next) {
		if (o->state == CONN_CLOSING || (o == c && o->out_head == o->out_tail))
			continue;
		if (!worst || o->out_bytes > worst->out_bytes)
			worst = o;
	}
	if (!worst)
		return false;
	s->n.closed_output++;
	log_warn("clients leave %zu bytes of replies unread, more than --max-output-total "
		 "%llu; disconnecting client %llu (%s, pid %d, uid %u), which leaves the "
		 "most (%zu bytes; its leases are released)", s->out_total,
		 (unsigned long long)s->opt->max_output_total, (unsigned long long)worst->id,
		 worst->name, (int)worst->cred.pid, (unsigned)worst->cred.uid,
		 worst->out_bytes);
	conn_close(worst);
	return worst == c;
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

static void conn_send_done(struct loop_op *op, int res);

void conn_post_recv(struct conn *c)
{
	c->riov.iov_base = c->rbuf;
	c->riov.iov_len = c->srv->opt->max_msg_size;
	memset(&c->rmsg, 0, sizeof(c->rmsg));
	c->rmsg.msg_iov = &c->riov;
	c->rmsg.msg_iovlen = 1;
	c->rmsg.msg_control = c->rctl.buf;
	c->rmsg.msg_controllen = sizeof(c->rctl.buf);
	/* MSG_TRUNC: the result is the packet's real length, so an oversized
	 * message is seen as such instead of being cut silently. */
	if (loop_recvmsg(c->srv->loop, &c->recv_op, c->fd, &c->rmsg,
			 MSG_TRUNC | MSG_CMSG_CLOEXEC) < 0) {
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
	c->send_op.done = conn_send_done;
	c->siov.iov_base = o->data;
	c->siov.iov_len = o->len;
	memset(&c->smsg, 0, sizeof(c->smsg));
	c->smsg.msg_iov = &c->siov;
	c->smsg.msg_iovlen = 1;
	if (o->fd >= 0) {
		struct cmsghdr *cm;

		memset(&c->sctl, 0, sizeof(c->sctl));
		c->smsg.msg_control = c->sctl.buf;
		c->smsg.msg_controllen = sizeof(c->sctl.buf);
		cm = CMSG_FIRSTHDR(&c->smsg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &o->fd, sizeof(int));
	}
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
 * reply_version() - the version of a reply (or notice) of status to c:
 * the connection's; before its first message was read whole, the
 * previous release's, which clients of both releases read, but for the
 * refusal of a version, which names this daemon's own (a client learns
 * from it what to speak).
 */
static uint16_t reply_version(const struct conn *c, uint32_t status)
{
	if (c->proto)
		return c->proto;
	return status == KVP_S_VERSION ? KVP_WIRE_VERSION : KVP_WIRE_VERSION_MIN;
}

void conn_reply(struct conn *c, const struct kvp_wire_hdr *req, uint32_t status,
		const void *payload, size_t len, int fd)
{
	struct kvp_wire_hdr h = {
		.version = reply_version(c, status), .op = req->op, .flags = KVP_WIRE_F_REPLY,
		.status = status, .req_id = req->req_id, .len = (uint32_t)len,
	};
	struct outbuf *o;

	/* a reply ends the request, its wait for keys and its ask of the
	 * remote tier (the next request asks again) */
	c->kwait_deadline = c->kwait_poll_at = 0;
	c->kwait_poll_ms = 0;
	c->kwait_handoff_gone = false;
	c->remote_tried = false;
	c->remote_from = UINT32_MAX;
	/* one reply per request: arrival to reply (a deferred one's too: the
	 * connection reads no other request meanwhile) */
	if (c->req_ns && req->op < sizeof(c->srv->n.rt) / sizeof(c->srv->n.rt[0])) {
		hist_add(&c->srv->n.rt[req->op], hist_now_ns() - c->req_ns);
		c->req_ns = 0;
	}
	o = malloc(sizeof(*o) + KVP_WIRE_HDR_SIZE + len);
	if (!o) {
		log_error("client %llu: out of memory for a %zu-byte reply; closing it",
			  (unsigned long long)c->id, len);
		conn_close(c);
		return;
	}
	o->next = NULL;
	o->len = KVP_WIRE_HDR_SIZE + len;
	o->fd = fd;
	wire_hdr_encode(o->data, &h);
	if (len)
		memcpy(o->data + KVP_WIRE_HDR_SIZE, payload, len);
	if (c->out_tail)
		c->out_tail->next = o;
	else
		c->out_head = o;
	c->out_tail = o;
	c->out_bytes += o->len;
	c->srv->out_total += o->len;
	if (c->out_bytes > c->srv->opt->max_output) {
		c->srv->n.closed_output++;
		log_warn("client %llu (%s, pid %d) leaves %zu bytes of replies unread, more "
			 "than --max-output %llu; disconnecting it (its leases are released)",
			 (unsigned long long)c->id, c->name, (int)c->cred.pid, c->out_bytes,
			 (unsigned long long)c->srv->opt->max_output);
		conn_close(c);
		return;
	}
	if (c->srv->out_total > c->srv->opt->max_output_total && output_over(c))
		return;
	conn_post_send(c);
}

void conn_hold(struct conn *c)
{
	c->ops++;
}

bool conn_put(struct conn *c)
{
	return conn_op_done(c);
}

bool conn_closing(const struct conn *c)
{
	return c->state == CONN_CLOSING;
}

void conn_kick(struct conn *c, const char *fmt, ...)
{
	struct kvp_wire_hdr h = { .version = reply_version(c, KVP_S_STATE), .op = KVP_OP_DISCONNECT,
				  .flags = KVP_WIRE_F_REPLY, .status = KVP_S_STATE,
				  .req_id = KVP_WIRE_NOTICE_ID };
	uint8_t msg[KVP_WIRE_HDR_SIZE + KVP_WIRE_ERRMSG_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf((char *)msg + KVP_WIRE_HDR_SIZE, KVP_WIRE_ERRMSG_MAX, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n >= (int)KVP_WIRE_ERRMSG_MAX)
		n = KVP_WIRE_ERRMSG_MAX - 1;
	log_info("client %llu (%s, pid %d) disconnected: %s", (unsigned long long)c->id, c->name,
		 (int)c->cred.pid, (char *)msg + KVP_WIRE_HDR_SIZE);
	/* the notice goes ahead of the close, without waiting: a client whose
	 * socket buffer is full learns only that the connection is gone */
	h.len = (uint32_t)n;
	wire_hdr_encode(msg, &h);
	if (c->state != CONN_CLOSING)
		(void)send(c->fd, msg, KVP_WIRE_HDR_SIZE + (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	conn_close(c);
}

void conn_resume(struct conn *c)
{
	c->deferred = false;
	if (c->state != CONN_CLOSING && !c->close_after_send)
		conn_post_recv(c);
}

void conn_error(struct conn *c, const struct kvp_wire_hdr *req, uint32_t status,
		const char *fmt, ...)
{
	char msg[KVP_WIRE_ERRMSG_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	if (status < KVP_S__COUNT)
		c->srv->n.errors_by_status[status]++;
	log_debug("client %llu (pid %d): %s %s: %s", (unsigned long long)c->id,
		  (int)c->cred.pid, wire_op_str(req->op), wire_status_str(status), msg);
	conn_reply(c, req, status, msg, (size_t)n, -1);
}

void conn_fatal(struct conn *c, const struct kvp_wire_hdr *req, uint32_t status,
		const char *why)
{
	c->srv->n.protocol_errors++;
	log_warn("client %llu (pid %d): %s: %s; closing the connection",
		 (unsigned long long)c->id, (int)c->cred.pid,
		 wire_status_str(status), why);
	c->close_after_send = true;
	conn_reply(c, req, status, why, strlen(why), -1);
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
	c->out_bytes -= o->len;
	c->srv->out_total -= o->len;
	free(o);
	if (c->close_after_send && !c->out_head) {
		conn_close(c);
		return;
	}
	conn_post_send(c);
}
