/* SPDX-License-Identifier: MIT */
/*
 * client.c - libkvpool's connection to kvpoold: connect, one request and
 * its reply at a time, close.
 *
 * The connection is a SOCK_SEQPACKET socket, so each send and receive is
 * one whole message. Replies are matched to requests by request id.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvpool.h"
#include "client/errors.h"
#include "client/wire.h"

struct kvp_client {
	int fd;
	uint64_t next_req_id;
	uint8_t *buf;		/* one message, KVP_WIRE_MAX_MSG_DEFAULT bytes */
	size_t buf_size;
};

KVP_API int kvp_connect(const char *socket_path, struct kvp_client **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvp_client *c;
	int rc;

	if (!out)
		return -EINVAL;
	if (!socket_path)
		socket_path = getenv("KVPOOL_SOCKET");
	if (!socket_path || !*socket_path)
		socket_path = KVP_SOCKET_DEFAULT;
	if (strlen(socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->next_req_id = 1;
	c->buf_size = KVP_WIRE_MAX_MSG_DEFAULT;
	c->buf = malloc(c->buf_size);
	if (!c->buf) {
		rc = -ENOMEM;
		goto out_free;
	}
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		rc = -errno;
		goto out_free_buf;
	}
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		goto out_close;
	}
	*out = c;
	return 0;

out_close:
	close(c->fd);
out_free_buf:
	free(c->buf);
out_free:
	free(c);
	return rc;
}

KVP_API void kvp_close(struct kvp_client *c)
{
	if (!c)
		return;
	close(c->fd);
	free(c->buf);
	free(c);
}

/*
 * call() - send one request and wait for its reply.
 * On success the reply's payload is in c->buf + KVP_WIRE_HDR_SIZE and its
 * length in *reply_len; the buffer is valid until the next call.
 * Returns 0, the daemon's status as -errno, or a transport error.
 */
static int call(struct kvp_client *c, uint16_t op, const void *payload,
		uint32_t len, size_t *reply_len)
{
	struct kvp_wire_hdr hdr = { .op = op, .req_id = c->next_req_id++,
				    .len = len };
	struct kvp_wire_hdr rh;
	ssize_t n;
	int rc;

	if ((size_t)len + KVP_WIRE_HDR_SIZE > c->buf_size)
		return -EMSGSIZE;
	wire_hdr_encode(c->buf, &hdr);
	if (len)
		memcpy(c->buf + KVP_WIRE_HDR_SIZE, payload, len);
	do {
		n = send(c->fd, c->buf, KVP_WIRE_HDR_SIZE + len, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;

	for (;;) {
		do {
			n = recv(c->fd, c->buf, c->buf_size, MSG_TRUNC);
		} while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		if ((size_t)n > c->buf_size)
			return -EPROTO;
		rc = wire_hdr_decode(c->buf, (size_t)n, &rh);
		if (rc < 0 || !(rh.flags & KVP_WIRE_F_REPLY))
			return -EPROTO;
		if (rh.req_id == hdr.req_id)
			break;
		/* A reply to a request this client gave up on: skip it. */
	}
	if (rh.status != KVP_S_OK)
		return errors_from_status(rh.status);
	if (rh.op != op)
		return -EPROTO;
	*reply_len = rh.len;
	return 0;
}

KVP_API int kvp_stats(struct kvp_client *c, struct kvp_wire_stats *st)
{
	size_t len = 0;
	int rc;

	if (!c || !st)
		return -EINVAL;
	rc = call(c, KVP_OP_STATS, NULL, 0, &len);
	if (rc < 0)
		return rc;
	if (wire_stats_decode(c->buf + KVP_WIRE_HDR_SIZE, len, st) < 0)
		return -EPROTO;
	return 0;
}
