/* SPDX-License-Identifier: MIT */
/*
 * client.c - libkvpool's connection to kvpoold: HELLO, the mapped slabs,
 * the pages this client holds, and one request at a time.
 *
 * The connection is a SOCK_SEQPACKET socket, so each send and receive is
 * one whole message; slab fds arrive as SCM_RIGHTS with MAP_SLAB replies.
 * The client keeps its own set of held page handles: kvp_page_ptr()
 * answers only for pages this client holds, and kvp_release() refuses a
 * handle it does not hold before anything reaches the daemon.
 *
 * This file holds the connection: HELLO, one request at a time, errors,
 * connect and close. The pages are pages.c's, sharing share.c's,
 * inspection and administration admin.c's (client_int.h is what they
 * share).
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvpool.h"
#include "client/cuda_ipc.h"
#include "client/errors.h"
#include "client/client_int.h"
#include "client/hset.h"
#include "client/keys.h"
#include "client/wire.h"

KVP_API const char *kvp_last_error(void)
{
	return last_error;
}

/*
 * client_held_add() / client_held_sub() - one lease more or fewer on h in c->held, and
 * the generation held at h's index when the count goes from 0 or to 0.
 * Return hset_add()'s and hset_sub()'s values.
 */
int client_held_add(struct kvp_client *c, kvp_page h)
{
	uint32_t slab = KVP_HANDLE_SLAB(h), idx = KVP_HANDLE_INDEX(h);
	bool fresh = !hset_count(&c->held, h);
	int rc;

	if (fresh && c->gens && idx < c->per_slab && !c->gens[slab]) {
		c->gens[slab] = calloc(c->per_slab, sizeof(**c->gens));
		if (!c->gens[slab])
			return -ENOMEM;
	}
	rc = hset_add(&c->held, h, 1);
	if (rc == 0 && fresh && c->gens && idx < c->per_slab)
		c->gens[slab][idx] = KVP_HANDLE_GEN(h);
	return rc;
}

int client_held_sub(struct kvp_client *c, kvp_page h)
{
	uint32_t slab = KVP_HANDLE_SLAB(h), idx = KVP_HANDLE_INDEX(h);
	int rc = hset_sub(&c->held, h, 1);

	if (rc == 0 && !hset_count(&c->held, h) && c->gens && c->gens[slab] &&
	    idx < c->per_slab)
		c->gens[slab][idx] = 0;
	return rc;
}

void client_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

/* recv_msg() - one message into c->buf; a passed fd into *fd (else -1).
 * Returns its length or -errno. */
static ssize_t recv_msg(struct kvp_client *c, int *fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 4)];
	} ctl;
	struct iovec iov = { c->buf, c->buf_size };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	struct cmsghdr *cm;
	ssize_t n;

	*fd = -1;
	do {
		n = recvmsg(c->fd, &msg, MSG_TRUNC | MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		size_t i, nfd;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < nfd; i++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (*fd < 0)
				*fd = f;
			else
				close(f);	/* only one is ever expected */
		}
	}
	if (n == 0)
		return -EPIPE;
	if ((size_t)n > c->buf_size || (msg.msg_flags & MSG_CTRUNC))
		return -EPROTO;
	return n;
}


/* forget_gens() - no index holds a page any more. */
static void forget_gens(struct kvp_client *c)
{
	uint32_t i;

	for (i = 0; c->gens && i < KVP_MAX_SLABS; i++) {
		free(c->gens[i]);
		c->gens[i] = NULL;
	}
}

/*
 * lost() - the connection broke (err from send or recv): the daemon has
 * dropped every lease of this client, so the library forgets them too
 * (kvp_page_ptr() answers NULL: the pages may belong to others now).
 * Returns -EPIPE for a reset or a close, else err.
 */
/* notice() - keep the text of a notice (KVP_WIRE_NOTICE_ID) in c->bye:
 * true when the message at c->buf (n bytes, header rh) is one. */
static bool notice(struct kvp_client *c, const struct kvp_wire_hdr *rh, ssize_t n)
{
	size_t tl;

	if (rh->req_id != KVP_WIRE_NOTICE_ID || rh->status == KVP_S_OK)
		return false;
	tl = rh->len < KVP_WIRE_ERRMSG_MAX ? rh->len : KVP_WIRE_ERRMSG_MAX;
	if (KVP_WIRE_HDR_SIZE + tl > (size_t)n)
		tl = (size_t)n - KVP_WIRE_HDR_SIZE;
	memcpy(c->bye, c->buf + KVP_WIRE_HDR_SIZE, tl);
	c->bye[tl] = '\0';
	return true;
}

/* lost() - the daemon closed the connection: the leases are gone; say why
 * when it said so (a notice, perhaps still queued behind a send that
 * failed). */
static int lost(struct kvp_client *c, int err)
{
	struct kvp_wire_hdr rh;
	ssize_t n;

	if (err == -ECONNRESET)
		err = -EPIPE;
	c->dead = true;
	hset_fini(&c->held);
	hset_init(&c->held);
	forget_gens(c);
	while (!c->bye[0] && (n = recv(c->fd, c->buf, c->buf_size, MSG_DONTWAIT)) > 0)
		if (wire_hdr_decode(c->buf, (size_t)n, &rh) == 0 && notice(c, &rh, n))
			break;
	if (!c->bye[0])
		snprintf(c->bye, sizeof(c->bye), "the daemon exited or disconnected this client "
			 "(%s; see its log: idle, unread replies, an admin)", strerror(-err));
	return client_dead(c);
}

/* client_dead() - 0 while c's connection lives; else -EPIPE, saying why
 * it is gone (every call after the loss, page lists included, which would
 * otherwise find their handles stale). */
int client_dead(struct kvp_client *c)
{
	if (!c->dead)
		return 0;
	if (c->timed_out)
		client_set_error("this connection is closed: %s", c->bye);
	else
		client_set_error("kvpoold closed this connection: %s; its leases are released. "
				 "Connect again with kvp_connect()", c->bye);
	return -EPIPE;
}

/* sock_limit() - the socket's send and receive time-outs (SO_SNDTIMEO,
 * SO_RCVTIMEO) at ms, 0 none: set only when they change, so that a call
 * under a limit costs no system call more than one without. 0 or -errno. */
static int sock_limit(struct kvp_client *c, uint32_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (ms == c->sock_ms)
		return 0;
	if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	c->sock_ms = ms;
	return 0;
}

/* timed_out() - kvpoold did not answer op within ms: the connection is
 * closed (the answer would lease pages nobody holds) and the leases are
 * forgotten, as the daemon drops them when it reads again. */
static int timed_out(struct kvp_client *c, uint16_t op, uint32_t ms)
{
	snprintf(c->bye, sizeof(c->bye), "kvpoold did not answer %s within %u ms (stopped, "
		 "hung or overloaded: see its log and `kvpool status`), so this client closed "
		 "its connection; the daemon releases its leases. Connect again with "
		 "kvp_connect(), or raise the limit (kvp_set_timeout())", wire_op_str(op), ms);
	c->timed_out = true;
	(void)shutdown(c->fd, SHUT_RDWR);
	(void)lost(c, -EPIPE);
	client_set_error("%s", c->bye);
	return -ETIMEDOUT;
}

/*
 * client_call() - send one request and wait for its reply. On success the
 * reply's payload is at c->buf + KVP_WIRE_HDR_SIZE, its length in
 * *reply_len, valid until the next call; a passed fd goes to *fd (the
 * caller closes it) or is closed when fd is NULL. Returns 0, the daemon's
 * status as -errno (its text in last_error), or a transport error.
 */
int client_call(struct kvp_client *c, uint16_t op, const void *payload,
		size_t len, const void *tail, size_t tail_len,
		size_t *reply_len, int *fd)
{
	struct kvp_wire_hdr hdr = { .version = c->proto, .op = op, .req_id = c->next_req_id++ };
	struct kvp_wire_hdr rh;
	uint32_t limit = 0;
	int rfd = -1, rc;
	ssize_t n;

	last_error[0] = '\0';
	rc = client_dead(c);	/* gone: say so again */
	if (rc < 0)
		return rc;
	if (c->timeout_ms) {
		uint64_t ms = c->timeout_ms;

		if (op == KVP_OP_ACQUIRE)	/* its own wait and the remote tier's */
			ms += c->wait_ms + (c->remote_max_us == KVP_REMOTE_NEVER ? 0 :
					    c->remote_max_us / 1000);
		limit = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
	}
	rc = sock_limit(c, limit);
	if (rc < 0)
		return rc;
	if (KVP_WIRE_HDR_SIZE + len + tail_len > c->buf_size)
		return -EMSGSIZE;
	hdr.len = (uint32_t)(len + tail_len);
	wire_hdr_encode(c->buf, &hdr);
	if (len)
		memcpy(c->buf + KVP_WIRE_HDR_SIZE, payload, len);
	if (tail_len)
		memcpy(c->buf + KVP_WIRE_HDR_SIZE + len, tail, tail_len);
	do {
		n = send(c->fd, c->buf, KVP_WIRE_HDR_SIZE + hdr.len, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0 && limit && (errno == EAGAIN || errno == EWOULDBLOCK))
		return timed_out(c, op, limit);	/* its queue stayed full */
	if (n < 0)
		return errno == EPIPE || errno == ECONNRESET ? lost(c, -errno) : -errno;

	for (;;) {
		n = recv_msg(c, &rfd);
		if (limit && (n == -EAGAIN || n == -EWOULDBLOCK))
			return timed_out(c, op, limit);
		if (n == -EPIPE || n == -ECONNRESET)
			return lost(c, (int)n);
		if (n < 0)
			return (int)n;
		rc = wire_hdr_decode(c->buf, (size_t)n, &rh);
		if (rc == 0 || rc == -KVP_S_VERSION)
			c->peer_version = rh.version;
		/* replies come in the connection's version; a kvpoold that
		 * refuses it at HELLO answers in its own */
		if (rc == 0 && rh.version != c->proto && rh.status != KVP_S_VERSION)
			rc = -KVP_S_PROTO;
		if (rc < 0 || !(rh.flags & KVP_WIRE_F_REPLY)) {
			if (rfd >= 0)
				close(rfd);
			if (rc == -KVP_S_VERSION)
				client_set_error("the daemon speaks protocol version %u, this "
						 "libkvpool versions %u to %u: upgrade the older of "
						 "the two (docs/deploy.md, \"Upgrades\")", rh.version,
						 KVP_WIRE_VERSION_MIN, KVP_WIRE_VERSION);
			return rc == -KVP_S_VERSION ? -EPROTONOSUPPORT : -EPROTO;
		}
		if (rh.req_id == hdr.req_id)
			break;
		if (rfd >= 0)	/* a stale reply or a notice: not ours to keep */
			close(rfd);
		notice(c, &rh, n);	/* the close follows it */
	}
	if (rh.status != KVP_S_OK) {
		size_t tl = rh.len < KVP_WIRE_ERRMSG_MAX ? rh.len : KVP_WIRE_ERRMSG_MAX;

		memcpy(last_error, c->buf + KVP_WIRE_HDR_SIZE, tl);
		last_error[tl] = '\0';
		if (rfd >= 0)
			close(rfd);
		return errors_from_status(rh.status);
	}
	if (rh.op != op) {
		if (rfd >= 0)
			close(rfd);
		return -EPROTO;
	}
	*reply_len = rh.len;
	if (fd)
		*fd = rfd;
	else if (rfd >= 0)
		close(rfd);
	return 0;
}

static int hello(struct kvp_client *c, const char *ns, const kvp_geometry *g,
		 const char *name)
{
	struct kvp_wire_hello h;
	size_t len = 0;
	int rc;

	memset(&h, 0, sizeof(h));
	if (ns) {
		if (!g || !g->model)
			return -EINVAL;
		if (strlen(ns) >= sizeof(h.ns) || strlen(g->model) >= sizeof(h.model))
			return -ENAMETOOLONG;
		memcpy(h.ns, ns, strlen(ns));
		memcpy(h.model, g->model, strlen(g->model));
		h.layers = g->layers;
		h.kv_heads = g->kv_heads;
		h.head_dim = g->head_dim;
		h.block_tokens = g->block_tokens;
		h.dtype = g->dtype;
		h.key_scheme = g->key_scheme;
		h.memory = g->memory;
		h.head_dim_v = g->head_dim_v;
		if (g->key_seed)
			keys_seed_id(g->key_seed, h.key_seed_id);
	}
	/* a program that rewrites its argv (vLLM's setproctitle) leaves its
	 * invocation name empty: the pid then, never nothing */
	if (!name || !*name)
		name = program_invocation_short_name;
	if (name && *name)
		snprintf(h.client_name, sizeof(h.client_name), "%s", name);
	else
		snprintf(h.client_name, sizeof(h.client_name), "pid %ld", (long)getpid());
	rc = client_call(c, KVP_OP_HELLO, &h, sizeof(h), NULL, 0, &len, NULL);
	if (rc == -EBADE && g && g->key_seed && strstr(last_error, "key_seed")) {
		size_t at = strlen(last_error);

		snprintf(last_error + at, sizeof(last_error) - at,
			 " (this client's key seed is '%.64s')", g->key_seed);
	}
	if (rc < 0)
		return rc;
	if (wire_fixed_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &c->hello,
			      sizeof(c->hello)) < 0)
		return -EPROTO;
	return 0;
}

/* grow_buf() - make room for the largest message the daemon sends. */
static int grow_buf(struct kvp_client *c, size_t size)
{
	uint8_t *b;

	if (size <= c->buf_size)
		return 0;
	b = realloc(c->buf, size);
	if (!b)
		return -ENOMEM;
	c->buf = b;
	c->buf_size = size;
	return 0;
}

/* user_name() / group_name() - a name for messages, or the number. */
static const char *user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *r = NULL;
	char tmp[1024];

	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &r) == 0 && r)
		snprintf(buf, len, "%s", r->pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
	return buf;
}

static const char *group_name(gid_t gid, char *buf, size_t len)
{
	struct group gr, *r = NULL;
	char tmp[4096];

	if (getgrgid_r(gid, &gr, tmp, sizeof(tmp), &r) == 0 && r)
		snprintf(buf, len, "%s", r->gr_name);
	else
		snprintf(buf, len, "gid %u", (unsigned)gid);
	return buf;
}

/*
 * explain_denied() - the first part of path this process may not pass
 * (a directory it may not search, or the socket it may not write), its
 * owner, group and mode, and what to do.
 */
static void explain_denied(const char *path)
{
	char part[sizeof(((struct sockaddr_un *)0)->sun_path)], me[64], u[64], g[64];
	const char *what = "the socket";
	struct stat st;
	size_t i, n = strlen(path);

	snprintf(part, sizeof(part), "%s", path);
	for (i = 1; i <= n; i++) {
		if (i < n && path[i] != '/')
			continue;
		part[i] = '\0';
		if (i < n ? access(part, X_OK) < 0 : access(part, W_OK) < 0)
			break;
		part[i] = path[i];
	}
	if (i > n || stat(part, &st) < 0) {
		client_set_error("cannot connect to kvpoold at %s: permission denied (check the "
			  "socket's and its directories' modes)", path);
		return;
	}
	if (i < n)
		what = "its directory";
	user_name(getuid(), me, sizeof(me));
	user_name(st.st_uid, u, sizeof(u));
	group_name(st.st_gid, g, sizeof(g));
	if (!(st.st_mode & (i < n ? 010 : 020))) {
		/* not even its group may pass */
		client_set_error("cannot connect to kvpoold at %s: permission denied: %s %s is mode "
			  "%04o, owner %s, group %s, which lets user %s (uid %u) %s: give "
			  "kvpoold a socket in a directory of mode 0750 or 0755 (the one it "
			  "makes itself is 0750, in the group of --socket-group), or connect "
			  "as %s%s.", path, what, part, (unsigned)(st.st_mode & 07777), u, g,
			  me, (unsigned)getuid(), i < n ? "not search it" : "not write it",
			  st.st_uid ? u : "root", st.st_uid ? " or root" : "");
		return;
	}
	client_set_error("cannot connect to kvpoold at %s: permission denied: %s %s is mode %04o, "
		  "owner %s, group %s, and user %s (uid %u) is not in group %s: start "
		  "kvpoold with --socket-group=GROUP for a group the user is in (it gives "
		  "the socket, and the directory it makes for it, to that group)%s%s%s, "
		  "or connect as %s%s.", path, what, part, (unsigned)(st.st_mode & 07777),
		  u, g, me, (unsigned)getuid(), g,
		  st.st_gid ? ", or add the user to group " : "", st.st_gid ? g : "",
		  st.st_gid ? " (usermod -aG GROUP USER, then log in again)" : "",
		  st.st_uid ? u : "root", st.st_uid ? " or root" : "");
}

/* connect_error() - say why connecting to path failed with rc, and what
 * to do, in last_error (as `kvpool` says it). */
static void connect_error(int rc, const char *path)
{
	const char *daemon_hint = "is kvpoold running? Start it, or name its socket "
				  "(the path given to kvp_connect, KVPOOL_SOCKET, or "
				  "kvpool --socket)";
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], *slash;
	struct stat st;

	switch (rc) {
	case -ENOENT:
		snprintf(dir, sizeof(dir), "%s", path);
		slash = strrchr(dir, '/');
		if (slash && slash != dir)
			*slash = '\0';
		if (slash && slash != dir && stat(dir, &st) < 0)
			client_set_error("cannot connect to kvpoold at %s: no such file, nor the "
				  "directory %s: %s", path, dir, daemon_hint);
		else
			client_set_error("cannot connect to kvpoold at %s: no such file: %s", path,
				  daemon_hint);
		break;
	case -ECONNREFUSED:
		client_set_error("cannot connect to kvpoold at %s: nothing listens there (a "
			  "socket left by a daemon that died, or not a socket): %s", path,
			  daemon_hint);
		break;
	case -EACCES:
	case -EPERM:
		explain_denied(path);
		break;
	case -ENAMETOOLONG:
		client_set_error("socket path %s is too long (%zu bytes; at most %zu)", path,
			  strlen(path), sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		break;
	case -ENOTSOCK:
	case -EPROTOTYPE:
		client_set_error("cannot connect to kvpoold at %s: %s: not a kvpoold socket (it "
			  "listens on a SOCK_SEQPACKET socket)", path, strerror(-rc));
		break;
	default:
		client_set_error("cannot connect to kvpoold at %s: %s: %s", path, strerror(-rc),
			  daemon_hint);
	}
}

KVP_API int kvp_fd(const kvp_client *c)
{
	return c ? c->fd : -EINVAL;
}

KVP_API int kvp_set_timeout(kvp_client *c, uint32_t ms)
{
	if (!c || ms > KVP_TIMEOUT_MAX_MS)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	c->timeout_ms = ms;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* dial() - connect c to the socket at sa (closing the one it had), with
 * the limit ms from the connect on (a full backlog: a daemon that does
 * not accept), HELLO included. 0 or -errno, said. */
static int dial(struct kvp_client *c, const struct sockaddr_un *sa, const char *path,
		uint32_t ms)
{
	int rc;

	if (c->fd >= 0)
		close(c->fd);
	c->sock_ms = 0;
	c->dead = false;
	c->bye[0] = '\0';
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	rc = sock_limit(c, ms);
	if (rc < 0)
		return rc;
	if (connect(c->fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
		return 0;
	rc = -errno;
	if (ms && (rc == -EAGAIN || rc == -EWOULDBLOCK)) {
		rc = -ETIMEDOUT;
		client_set_error("kvpoold at %s did not take the connection within %u ms "
				 "(stopped, hung or overloaded: see its log); try again "
				 "later, or raise the limit", path, ms);
	} else {
		connect_error(rc, path);
	}
	return rc;
}

int client_needs(const struct kvp_client *c, uint16_t version, const char *what)
{
	if (c->proto >= version)
		return 0;
	client_set_error("kvpoold speaks protocol version %u, which has no %s (version %u "
			 "and later): upgrade kvpoold to use them; everything else works",
			 c->proto, what, version);
	return -EPROTONOSUPPORT;
}

KVP_API int kvp_protocol(const kvp_client *c)
{
	return c ? c->proto : -EINVAL;
}

KVP_API int kvp_connect(const char *socket_path, const char *ns,
			const kvp_geometry *g, kvp_client **out)
{
	return kvp_connect_as(socket_path, ns, g, NULL, out);
}

KVP_API int kvp_connect_as(const char *socket_path, const char *ns,
			   const kvp_geometry *g, const char *name, kvp_client **out)
{
	return kvp_connect_timeout(socket_path, ns, g, name, 0, out);
}

KVP_API int kvp_connect_timeout(const char *socket_path, const char *ns,
				const kvp_geometry *g, const char *name, uint32_t ms,
				kvp_client **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvp_client *c;
	int rc;

	last_error[0] = '\0';
	if (!out || (ns && (!*ns || !g)) || ms > KVP_TIMEOUT_MAX_MS)
		return -EINVAL;
	if (name && strlen(name) >= KVP_CLIENT_NAME_MAX) {
		client_set_error("client name '%.64s' is %zu bytes; at most %u", name,
				 strlen(name), KVP_CLIENT_NAME_MAX - 1);
		return -ENAMETOOLONG;
	}
	if (!socket_path)
		socket_path = getenv("KVPOOL_SOCKET");
	if (!socket_path || !*socket_path)
		socket_path = KVP_SOCKET_DEFAULT;
	if (strlen(socket_path) >= sizeof(sa.sun_path)) {
		connect_error(-ENAMETOOLONG, socket_path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->mu, NULL);
	hset_init(&c->held);
	c->next_req_id = 1;
	c->fd = -1;
	rc = grow_buf(c, KVP_WIRE_MAX_MSG_DEFAULT);
	if (rc < 0)
		goto out_free;
	c->timeout_ms = ms;
	c->proto = KVP_WIRE_VERSION;
	rc = dial(c, &sa, socket_path, ms);
	if (rc < 0)
		goto out_free;
	rc = hello(c, ns, g, name);
	if (rc == -EPROTONOSUPPORT && c->peer_version >= KVP_WIRE_VERSION_MIN &&
	    c->peer_version < c->proto) {
		/* a kvpoold of the previous release: it closed the connection
		 * after its refusal; say HELLO again in its version */
		c->proto = c->peer_version;
		last_error[0] = '\0';
		rc = dial(c, &sa, socket_path, ms);
		if (rc < 0)
			goto out_free;
		rc = hello(c, ns, g, name);
	}
	if (rc == -EPROTO && !last_error[0])
		client_set_error("%s answered with a message that is not kvpool protocol version "
			  "%u: a kvpoold of another release, or not a kvpoold socket",
			  socket_path, c->proto);
	if (rc < 0)
		goto out_free;
	rc = grow_buf(c, c->hello.max_msg);
	if (rc < 0)
		goto out_free;
	{
		/* A SEQPACKET message must fit in the sender's buffer. */
		int sndbuf = (int)c->buf_size + 4096;

		(void)setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	}
	if (ns) {
		c->has_ns = true;
		c->slabs = calloc(KVP_MAX_SLABS, sizeof(*c->slabs));
		if (!c->slabs) {
			rc = -ENOMEM;
			goto out_free;
		}
		if (c->hello.backend == KVP_BACKEND_HOST)
			client_reserve_view(c);
	}
	*out = c;
	return 0;

out_free:
	kvp_close(c);
	return rc;
}

KVP_API void kvp_close(kvp_client *c)
{
	size_t i;

	if (!c)
		return;
	for (i = 0; c->slabs && !c->view && i < KVP_MAX_SLABS; i++) {
		if (!c->slabs[i].base)
			continue;
		if (c->hello.backend == KVP_BACKEND_CUDA)
			cuda_ipc_close(c->slabs[i].base);
		else
			munmap(c->slabs[i].base, c->slabs[i].bytes);
	}
	if (c->view)	/* the slabs' mappings with it */
		munmap(c->view, (size_t)c->view_slabs * c->span);
	forget_gens(c);
	free(c->gens);
	free(c->slabs);
	if (c->fd >= 0)
		close(c->fd);
	hset_fini(&c->held);
	pthread_mutex_destroy(&c->mu);
	free(c->buf);
	free(c);
}

KVP_API int kvp_info(const kvp_client *c, kvp_info_t *out)
{
	const struct kvp_wire_hello_reply *h;

	if (!c || !out)
		return -EINVAL;
	h = &c->hello;
	memset(out, 0, sizeof(*out));
	out->client_id = h->client_id;
	out->backend = h->backend;
	out->slab_bytes = h->slab_bytes;
	out->max_batch = h->max_batch;
	out->max_leases = h->max_leases;
	out->max_msg = h->max_msg;
	if (c->has_ns) {
		out->ns_id = h->ns_id;
		out->page_bytes = h->page_bytes;
		out->page_stride = h->page_stride;
		out->pages_per_slab = h->pages_per_slab;
		out->block_tokens = h->block_tokens;
		out->key_scheme = h->key_scheme;
		memcpy(out->root.b, h->root_key, sizeof(out->root.b));
	}
	return 0;
}

KVP_API size_t kvp_page_bytes(const kvp_client *c)
{
	return c && c->has_ns ? (size_t)c->hello.page_bytes : 0;
}
