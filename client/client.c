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
#include <sys/un.h>
#include <unistd.h>

#include "kvpool.h"
#include "client/cuda_ipc.h"
#include "client/errors.h"
#include "client/hset.h"
#include "client/keys.h"
#include "client/wire.h"

struct slab_map {
	uint8_t *base;		/* NULL until mapped */
	size_t bytes;
};

struct kvp_client {
	pthread_mutex_t mu;	/* serializes every call on this client */
	int fd;
	uint64_t next_req_id;
	uint8_t *buf;		/* one message */
	size_t buf_size;
	bool has_ns;
	struct kvp_wire_hello_reply hello;
	struct slab_map *slabs;	/* [KVP_MAX_SLABS], when has_ns */
	struct hset held;	/* page handle -> leases held */
	/* The namespace's view (host backend): every slab the pool may have
	 * mapped at view + slab x span, in one reserved range of view_slabs
	 * spans, so that a page's address is view + index x page_stride. */
	uint8_t *view;		/* NULL: no view (CUDA, inspection, no room) */
	uint32_t view_slabs;	/* the pool's most slabs */
	uint64_t span;		/* bytes a slab takes in the view */
	uint32_t per_slab;	/* indices a slab takes: span / page_stride */
	uint32_t **gens;	/* [KVP_MAX_SLABS][per_slab]: generation held at
				 * each index, 0 none; a slab's row made with
				 * its first lease */
	uint32_t prefill_rate, remote_max_us;	/* kvp_set_remote_policy() */
};

/* The thread's error text, shared with the key functions (client/keys.c). */
#define last_error keys_error_buf
_Static_assert(KEYS_ERROR_MAX >= KVP_WIRE_ERRMSG_MAX + 1, "the error buffer holds a reply");

KVP_API const char *kvp_last_error(void)
{
	return last_error;
}

/*
 * held_add() / held_sub() - one lease more or fewer on h in c->held, and
 * the generation held at h's index when the count goes from 0 or to 0.
 * Return hset_add()'s and hset_sub()'s values.
 */
static int held_add(struct kvp_client *c, kvp_page h)
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

static int held_sub(struct kvp_client *c, kvp_page h)
{
	uint32_t slab = KVP_HANDLE_SLAB(h), idx = KVP_HANDLE_INDEX(h);
	int rc = hset_sub(&c->held, h, 1);

	if (rc == 0 && !hset_count(&c->held, h) && c->gens && c->gens[slab] &&
	    idx < c->per_slab)
		c->gens[slab][idx] = 0;
	return rc;
}

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...)
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

static void reserve_view(struct kvp_client *c);

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
static int lost(struct kvp_client *c, int err)
{
	if (err == -ECONNRESET)
		err = -EPIPE;
	hset_fini(&c->held);
	hset_init(&c->held);
	forget_gens(c);
	set_error("the connection to kvpoold is gone (%s): the daemon exited or "
		  "disconnected this client (see its log: idle, unread replies, an "
		  "admin); its leases are released. Connect again with kvp_connect()",
		  strerror(-err));
	return err;
}

/*
 * call() - send one request and wait for its reply. On success the
 * reply's payload is at c->buf + KVP_WIRE_HDR_SIZE, its length in
 * *reply_len, valid until the next call; a passed fd goes to *fd (the
 * caller closes it) or is closed when fd is NULL. Returns 0, the daemon's
 * status as -errno (its text in last_error), or a transport error.
 */
static int call(struct kvp_client *c, uint16_t op, const void *payload,
		size_t len, const void *tail, size_t tail_len,
		size_t *reply_len, int *fd)
{
	struct kvp_wire_hdr hdr = { .op = op, .req_id = c->next_req_id++ };
	struct kvp_wire_hdr rh;
	int rfd = -1, rc;
	ssize_t n;

	last_error[0] = '\0';
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
	if (n < 0)
		return errno == EPIPE || errno == ECONNRESET ? lost(c, -errno) : -errno;

	for (;;) {
		n = recv_msg(c, &rfd);
		if (n == -EPIPE || n == -ECONNRESET)
			return lost(c, (int)n);
		if (n < 0)
			return (int)n;
		rc = wire_hdr_decode(c->buf, (size_t)n, &rh);
		if (rc < 0 || !(rh.flags & KVP_WIRE_F_REPLY)) {
			if (rfd >= 0)
				close(rfd);
			if (rc == -KVP_S_VERSION)
				set_error("the daemon speaks protocol version %u, this "
					  "libkvpool %u: use matching versions", rh.version,
					  KVP_WIRE_VERSION);
			return rc == -KVP_S_VERSION ? -EPROTONOSUPPORT : -EPROTO;
		}
		if (rh.req_id == hdr.req_id)
			break;
		if (rfd >= 0)	/* a stale reply: not ours to keep */
			close(rfd);
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

static int hello(struct kvp_client *c, const char *ns, const kvp_geometry *g)
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
	snprintf(h.client_name, sizeof(h.client_name), "%s",
		 program_invocation_short_name);
	rc = call(c, KVP_OP_HELLO, &h, sizeof(h), NULL, 0, &len, NULL);
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
		set_error("cannot connect to kvpoold at %s: permission denied (check the "
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
		set_error("cannot connect to kvpoold at %s: permission denied: %s %s is mode "
			  "%04o, owner %s, group %s, which lets user %s (uid %u) %s: give "
			  "kvpoold a socket in a directory of mode 0750 or 0755 (the one it "
			  "makes itself is 0750, in the group of --socket-group), or connect "
			  "as %s%s.", path, what, part, (unsigned)(st.st_mode & 07777), u, g,
			  me, (unsigned)getuid(), i < n ? "not search it" : "not write it",
			  st.st_uid ? u : "root", st.st_uid ? " or root" : "");
		return;
	}
	set_error("cannot connect to kvpoold at %s: permission denied: %s %s is mode %04o, "
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
			set_error("cannot connect to kvpoold at %s: no such file, nor the "
				  "directory %s: %s", path, dir, daemon_hint);
		else
			set_error("cannot connect to kvpoold at %s: no such file: %s", path,
				  daemon_hint);
		break;
	case -ECONNREFUSED:
		set_error("cannot connect to kvpoold at %s: nothing listens there (a "
			  "socket left by a daemon that died, or not a socket): %s", path,
			  daemon_hint);
		break;
	case -EACCES:
	case -EPERM:
		explain_denied(path);
		break;
	case -ENAMETOOLONG:
		set_error("socket path %s is too long (%zu bytes; at most %zu)", path,
			  strlen(path), sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		break;
	case -ENOTSOCK:
	case -EPROTOTYPE:
		set_error("cannot connect to kvpoold at %s: %s: not a kvpoold socket (it "
			  "listens on a SOCK_SEQPACKET socket)", path, strerror(-rc));
		break;
	default:
		set_error("cannot connect to kvpoold at %s: %s: %s", path, strerror(-rc),
			  daemon_hint);
	}
}

KVP_API int kvp_connect(const char *socket_path, const char *ns,
			const kvp_geometry *g, kvp_client **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvp_client *c;
	int rc;

	last_error[0] = '\0';
	if (!out || (ns && (!*ns || !g)))
		return -EINVAL;
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
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		rc = -errno;
		goto out_free;
	}
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		connect_error(rc, socket_path);
		goto out_free;
	}
	rc = hello(c, ns, g);
	if (rc == -EPROTO && !last_error[0])
		set_error("%s answered with a message that is not kvpool protocol version "
			  "%u: a kvpoold of another release, or not a kvpoold socket",
			  socket_path, KVP_WIRE_VERSION);
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
			reserve_view(c);
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

/*
 * reserve_view() - reserve the namespace's view: as many slab spans as the
 * pool may have slabs (STATS: max_slabs, the slab numbers of all its
 * memories), PROT_NONE until map_slab() maps a slab into its span. A span is the slab rounded up to
 * a multiple of both the page stride and the system page, so that every
 * page of every slab is at view + index x page_stride. Without the room
 * (or the STATS), no view: slabs are mapped wherever mmap puts them.
 */
static void reserve_view(struct kvp_client *c)
{
	uint64_t stride = c->hello.page_stride, sys = (uint64_t)sysconf(_SC_PAGESIZE), unit, a, b,
		 t, nslabs;
	struct kvp_wire_stats st;
	size_t len = 0;
	void *v;

	if (!stride || !c->hello.slab_bytes ||
	    call(c, KVP_OP_STATS, NULL, 0, NULL, 0, &len, NULL) < 0 ||
	    wire_stats_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &st, NULL, 0) < 0 ||
	    !st.slab_bytes)
		return;
	for (a = stride, b = sys; b; t = a % b, a = b, b = t)
		;
	unit = stride / a * sys;	/* lcm(stride, system page) */
	nslabs = st.max_slabs;	/* slab numbers are shared by the pool's memories */
	if (nslabs > KVP_MAX_SLABS)
		nslabs = KVP_MAX_SLABS;
	c->span = (c->hello.slab_bytes + unit - 1) / unit * unit;
	if (!nslabs || c->span / stride > KVP_MAX_SLAB_PAGES || nslabs > SIZE_MAX / c->span)
		return;
	c->gens = calloc(KVP_MAX_SLABS, sizeof(*c->gens));
	if (!c->gens)
		return;
	v = mmap(NULL, (size_t)(nslabs * c->span), PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (v == MAP_FAILED) {
		free(c->gens);
		c->gens = NULL;
		return;
	}
	c->view = v;
	c->view_slabs = (uint32_t)nslabs;
	c->per_slab = (uint32_t)(c->span / stride);
}

/* map_slab() - map slab number slab of this namespace, once. */
static int map_slab(struct kvp_client *c, uint32_t slab)
{
	struct kvp_wire_map_slab req = { .slab = slab };
	struct kvp_wire_map_slab_reply rep;
	size_t len = 0;
	void *base, *at;
	int fd = -1, rc, fixed;

	if (c->slabs[slab].base)
		return 0;
	rc = call(c, KVP_OP_MAP_SLAB, &req, sizeof(req), NULL, 0, &len, &fd);
	if (rc < 0)
		return rc;
	rc = -EPROTO;
	if (wire_fixed_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &rep, sizeof(rep)) < 0 ||
	    rep.slab != slab)
		goto out_close;
	if (c->hello.backend == KVP_BACKEND_CUDA) {
		/* GPU memory: the reply carries the slab's IPC handle */
		rc = cuda_ipc_open(rep.ipc_handle, &base, last_error, sizeof(last_error));
		if (rc < 0)
			goto out_close;
		c->slabs[slab].base = base;
		c->slabs[slab].bytes = rep.bytes;
		rc = 0;
		goto out_close;
	}
	if (fd < 0)
		goto out_close;
	if (c->view && (slab >= c->view_slabs || rep.bytes > c->span)) {
		set_error("slab %u (%llu bytes) does not fit the view of %u slabs of %llu "
			  "bytes", slab, (unsigned long long)rep.bytes, c->view_slabs,
			  (unsigned long long)c->span);
		goto out_close;
	}
	at = c->view ? c->view + (size_t)slab * c->span : NULL;
	fixed = c->view ? MAP_FIXED : 0;
	base = mmap(at, rep.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | fixed, fd, 0);
	if (base == MAP_FAILED && errno == EACCES)	/* read rights only */
		base = mmap(at, rep.bytes, PROT_READ, MAP_SHARED | fixed, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		set_error("cannot map slab %u (%llu bytes): %s", slab,
			  (unsigned long long)rep.bytes, strerror(-rc));
		goto out_close;
	}
	c->slabs[slab].base = base;
	c->slabs[slab].bytes = rep.bytes;
	rc = 0;
out_close:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* send_release() - RELEASE pages[0..n) (n <= max_batch) at the daemon. */
static int send_release(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	struct kvp_wire_pages pl = { .n = (uint32_t)n };
	size_t len;

	return call(c, KVP_OP_RELEASE, &pl, sizeof(pl), pages, n * sizeof(*pages),
		    &len, NULL);
}

/* release_batch() - release pages this client holds and forget them. */
static int release_batch(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i;
	int rc;

	rc = send_release(c, pages, n);
	if (rc < 0)
		return rc;
	for (i = 0; i < n; i++)
		held_sub(c, pages[i]);
	return 0;
}

/* alloc_batch() - ALLOC n (<= max_batch) pages into pages, remember them
 * and map their slabs. On failure nothing stays allocated. */
static int alloc_batch(struct kvp_client *c, size_t n, kvp_page *pages)
{
	struct kvp_wire_pages req = { .n = (uint32_t)n };
	const void *handles;
	uint32_t got;
	size_t len = 0, i, j;
	int rc;

	rc = call(c, KVP_OP_ALLOC, &req, sizeof(req), NULL, 0, &len, NULL);
	if (rc < 0)
		return rc;
	if (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got, &handles) < 0 ||
	    got != n)
		return -EPROTO;
	for (i = 0; i < n; i++)
		pages[i] = wire_handle_at(handles, i);
	for (i = 0; i < n; i++) {
		rc = held_add(c, pages[i]);
		if (rc < 0) {
			for (j = 0; j < i; j++)
				held_sub(c, pages[j]);
			send_release(c, pages, n);
			return rc;
		}
	}
	for (i = 0; i < n; i++) {
		rc = map_slab(c, KVP_HANDLE_SLAB(pages[i]));
		if (rc < 0) {
			release_batch(c, pages, n);
			return rc;
		}
	}
	return 0;
}

KVP_API int kvp_alloc(kvp_client *c, size_t n, kvp_page *pages)
{
	size_t done = 0, k;
	int rc = 0;

	if (!c || (n && !pages))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pthread_mutex_lock(&c->mu);
	while (done < n) {
		k = n - done < c->hello.max_batch ? n - done : c->hello.max_batch;
		rc = alloc_batch(c, k, pages + done);
		if (rc < 0)
			break;
		done += k;
	}
	if (rc < 0) {	/* all or none: return the earlier batches */
		for (k = 0; k < done; k += c->hello.max_batch)
			release_batch(c, pages + k, done - k < c->hello.max_batch ?
				      done - k : c->hello.max_batch);
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_release(kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i, k;
	int rc = 0;

	if (!c || (n && !pages))
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	last_error[0] = '\0';
	/* All or none: take each lease off our own set first (a repeat
	 * takes a second lease), and put them back on the first one we do
	 * not hold; nothing has reached the daemon then. */
	for (i = 0; i < n; i++) {
		if (held_sub(c, pages[i]) < 0) {
			set_error("page handle %#llx (entry %zu) is not leased by this client",
				  (unsigned long long)pages[i], i);
			while (i--)
				held_add(c, pages[i]);
			rc = -ESTALE;
			goto out;
		}
	}
	for (i = 0; i < n; i += k) {
		k = n - i < c->hello.max_batch ? n - i : c->hello.max_batch;
		rc = send_release(c, pages + i, k);
		if (rc < 0) {
			/* the daemon kept these and the ones after them */
			for (; i < n; i++)
				held_add(c, pages[i]);
			goto out;
		}
	}
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API void *kvp_page_ptr(kvp_client *c, kvp_page p)
{
	struct slab_map *m;
	void *ptr = NULL;
	uint64_t off;

	if (!c || !c->has_ns)
		return NULL;
	pthread_mutex_lock(&c->mu);
	m = &c->slabs[KVP_HANDLE_SLAB(p)];
	off = (uint64_t)KVP_HANDLE_INDEX(p) * c->hello.page_stride;
	if (hset_count(&c->held, p) && m->base && off + c->hello.page_bytes <= m->bytes)
		ptr = m->base + off;
	pthread_mutex_unlock(&c->mu);
	return ptr;
}

KVP_API int kvp_view(const kvp_client *c, kvp_view_t *out)
{
	if (!c || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (!c->has_ns)
		return -ENOTCONN;
	if (c->hello.backend != KVP_BACKEND_HOST)
		return -ENOTSUP;
	if (!c->view)
		return -ENOMEM;
	out->base = c->view;
	out->stride = c->hello.page_stride;
	out->pages = (uint64_t)c->view_slabs * c->per_slab;
	out->per_slab = c->per_slab;
	return 0;
}

KVP_API int64_t kvp_page_index(kvp_client *c, kvp_page p)
{
	int64_t idx = -ESTALE;

	if (!c || !c->has_ns)
		return -ENOTCONN;
	if (!c->view)
		return c->hello.backend == KVP_BACKEND_HOST ? -ENOMEM : -ENOTSUP;
	pthread_mutex_lock(&c->mu);
	if (hset_count(&c->held, p) && KVP_HANDLE_SLAB(p) < c->view_slabs &&
	    KVP_HANDLE_INDEX(p) < c->per_slab)
		idx = (int64_t)KVP_HANDLE_SLAB(p) * c->per_slab + KVP_HANDLE_INDEX(p);
	pthread_mutex_unlock(&c->mu);
	return idx;
}

KVP_API kvp_page kvp_page_at(kvp_client *c, uint64_t index)
{
	uint64_t slab, idx;
	kvp_page h = 0;

	if (!c || !c->view || !c->per_slab)
		return 0;
	slab = index / c->per_slab;
	idx = index % c->per_slab;
	if (slab >= c->view_slabs)
		return 0;
	pthread_mutex_lock(&c->mu);
	if (c->gens[slab] && c->gens[slab][idx])
		h = KVP_HANDLE(c->gens[slab][idx], slab, idx);
	pthread_mutex_unlock(&c->mu);
	return h;
}

/* --- sharing ------------------------------------------------------------- */

/* parent_or_root() - the key bytes of parent, or of the namespace's root. */
static const uint8_t *parent_or_root(const struct kvp_client *c, const kvp_key *parent)
{
	return parent ? parent->b : c->hello.root_key;
}

KVP_API int kvp_root_key(const kvp_client *c, kvp_key *root)
{
	if (!c || !root)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	memcpy(root->b, c->hello.root_key, sizeof(root->b));
	return 0;
}

KVP_API uint32_t kvp_block_tokens(const kvp_client *c)
{
	return c && c->has_ns ? c->hello.block_tokens : 0;
}

KVP_API int kvp_block_keys(const kvp_client *c, const kvp_key *parent,
			   const uint32_t *tokens, size_t ntokens,
			   const kvp_extra *extras, size_t nextras, kvp_key *keys)
{
	kvp_key root;

	if (!c)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	if (!parent) {
		memcpy(root.b, c->hello.root_key, sizeof(root.b));
		parent = &root;
	}
	return kvp_key_chain(c->hello.key_scheme, parent, tokens, ntokens,
			     c->hello.block_tokens, extras, nextras, keys);
}

/* remember() - add n handles to the held set; on failure the set is as
 * before and the caller gives the pages back. */
static int remember(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (held_add(c, pages[i]) < 0) {
			while (i--)
				held_sub(c, pages[i]);
			return -ENOMEM;
		}
	}
	return 0;
}

/* map_all() - map the slabs of n held pages. */
static int map_all(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i;
	int rc;

	for (i = 0; i < n; i++) {
		rc = map_slab(c, KVP_HANDLE_SLAB(pages[i]));
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* acquire_batch() - one ACQUIRE of n keys with ntokens tokens from the
 * first key's block on. */
static int acquire_batch(struct kvp_client *c, const uint8_t *parent,
			 const kvp_key *keys, size_t n, const uint32_t *tokens,
			 size_t ntokens, kvp_page *pages, kvp_partial *partial)
{
	struct kvp_wire_acquire a = { .nkeys = (uint32_t)n, .ntokens = (uint32_t)ntokens,
				      .prefill_rate = c->prefill_rate,
				      .remote_max_us = c->remote_max_us };
	struct kvp_wire_acquire_reply rep;
	size_t len = 0, i, klen = n * KVP_KEY_BYTES, tlen = ntokens * sizeof(*tokens);
	uint8_t *tmp;
	int rc;

	memcpy(a.parent, parent, sizeof(a.parent));
	/* keys and tokens travel as one tail of the message */
	tmp = malloc(klen + tlen + 1);
	if (!tmp)
		return -ENOMEM;
	if (klen)
		memcpy(tmp, keys, klen);
	if (tlen)
		memcpy(tmp + klen, tokens, tlen);
	rc = call(c, KVP_OP_ACQUIRE, &a, sizeof(a), tmp, klen + tlen, &len, NULL);
	free(tmp);
	if (rc < 0)
		return rc;
	if (len < sizeof(rep))
		return -EPROTO;
	memcpy(&rep, c->buf + KVP_WIRE_HDR_SIZE, sizeof(rep));
	if (rep.hits > n || len != sizeof(rep) + (size_t)rep.hits * 8 ||
	    (rep.partial_tokens && !rep.partial_page))
		return -EPROTO;
	for (i = 0; i < rep.hits; i++)
		pages[i] = wire_handle_at(c->buf + KVP_WIRE_HDR_SIZE + sizeof(rep), i);
	rc = remember(c, pages, rep.hits);
	if (rc < 0) {
		send_release(c, pages, rep.hits);
		if (rep.partial_tokens)
			send_release(c, &rep.partial_page, 1);
		return rc;
	}
	if (rep.partial_tokens) {
		rc = remember(c, &rep.partial_page, 1);
		if (rc < 0) {
			release_batch(c, pages, rep.hits);
			send_release(c, &rep.partial_page, 1);
			return rc;
		}
	}
	if (partial && rep.partial_tokens) {
		partial->page = rep.partial_page;
		partial->tokens = rep.partial_tokens;
	}
	rc = map_all(c, pages, rep.hits);
	if (rc == 0 && rep.partial_tokens)
		rc = map_all(c, &rep.partial_page, 1);
	return rc < 0 ? rc : (int)rep.hits;
}

KVP_API int kvp_acquire(kvp_client *c, const kvp_key *parent, const kvp_key *keys,
			size_t n, const uint32_t *tokens, size_t ntokens,
			kvp_page *pages, kvp_partial *partial)
{
	size_t per, done = 0, k, bt, from, cnt;
	const uint8_t *par;
	int rc = 0;

	if (!c || (n && (!keys || !pages)) || (ntokens && (!tokens || !partial)) ||
	    n > INT32_MAX)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	bt = c->hello.block_tokens;
	if (ntokens >= (n + 1) * bt)
		return -EINVAL;
	if (partial)
		*partial = (kvp_partial){ 0, 0 };
	pthread_mutex_lock(&c->mu);
	/* keys per message: each with its block's tokens when there are any */
	per = (c->buf_size - KVP_WIRE_HDR_SIZE - sizeof(struct kvp_wire_acquire) -
	       bt * sizeof(*tokens)) / (KVP_KEY_BYTES + (ntokens ? bt * sizeof(*tokens) : 0));
	par = parent_or_root(c, parent);
	do {
		k = n - done < per ? n - done : per;
		/* this batch's blocks' tokens, and up to a block after them */
		from = done * bt;
		cnt = from < ntokens ? ntokens - from : 0;
		if (cnt > (k + 1) * bt - 1)
			cnt = (k + 1) * bt - 1;
		rc = acquire_batch(c, par, keys + done, k, cnt ? tokens + from : NULL, cnt,
				   pages + done, partial);
		if (rc < 0)
			break;
		done += (size_t)rc;
		if ((size_t)rc < k || (partial && partial->tokens))
			break;
		par = keys[done - 1].b;
	} while (done < n);
	if (rc < 0 && done)	/* give back the earlier batches' pages */
		release_batch(c, pages, done);
	pthread_mutex_unlock(&c->mu);
	return rc < 0 ? rc : (int)done;
}

KVP_API int kvp_set_remote_policy(kvp_client *c, uint32_t prefill_rate, uint32_t max_us)
{
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	c->prefill_rate = prefill_rate;
	c->remote_max_us = max_us;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* publish() - kvp_publish_tokens() without the stream: one PUBLISH per
 * message's worth of entries (and their tokens). */
static int publish(kvp_client *c, const kvp_key *parent, const kvp_page *pages,
		   const kvp_key *keys, const uint32_t *tokens, size_t n, unsigned prio,
		   kvp_page *canonical)
{
	struct kvp_wire_publish pb = { .prio = prio };
	size_t per, done = 0, k, i, len = 0, bt;
	struct kvp_wire_publish_ent *ents;
	const void *handles;
	uint32_t got;
	int rc = 0;

	if (!c || (n && (!pages || !keys || !canonical)))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	bt = tokens ? c->hello.block_tokens : 0;
	pthread_mutex_lock(&c->mu);
	per = (c->buf_size - KVP_WIRE_HDR_SIZE - sizeof(pb)) /
	      (sizeof(*ents) + bt * sizeof(uint32_t));
	ents = malloc((n < per ? n : per) * (sizeof(*ents) + bt * sizeof(uint32_t)) + 1);
	if (!ents) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(pb.parent, parent_or_root(c, parent), sizeof(pb.parent));
	while (done < n) {
		k = n - done < per ? n - done : per;
		pb.n = (uint32_t)k;
		for (i = 0; i < k; i++) {
			ents[i].page = pages[done + i];
			memcpy(ents[i].key, keys[done + i].b, KVP_KEY_BYTES);
		}
		if (bt)		/* then the blocks' token ids, little-endian */
			memcpy(ents + k, tokens + done * bt, k * bt * sizeof(uint32_t));
		rc = call(c, KVP_OP_PUBLISH, &pb, sizeof(pb), ents,
			  k * (sizeof(*ents) + bt * sizeof(uint32_t)), &len, NULL);
		if (rc < 0)
			break;
		if (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got, &handles) < 0 ||
		    got != k) {
			rc = -EPROTO;
			break;
		}
		for (i = 0; i < k; i++) {
			canonical[done + i] = wire_handle_at(handles, i);
			/* a dedup hit is one more lease of ours */
			if (canonical[done + i] != pages[done + i] &&
			    held_add(c, canonical[done + i]) < 0)
				rc = -ENOMEM;
		}
		if (rc == 0)
			rc = map_all(c, canonical + done, k);
		if (rc < 0)
			break;
		memcpy(pb.parent, keys[done + k - 1].b, sizeof(pb.parent));
		done += k;
	}
	free(ents);
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_publish(kvp_client *c, const kvp_key *parent, const kvp_page *pages,
			const kvp_key *keys, size_t n, unsigned prio, kvp_page *canonical)
{
	return publish(c, parent, pages, keys, NULL, n, prio, canonical);
}

KVP_API int kvp_publish_tokens(kvp_client *c, struct CUstream_st *stream,
			       const kvp_key *parent, const kvp_page *pages,
			       const kvp_key *keys, const uint32_t *tokens, size_t n,
			       unsigned prio, kvp_page *canonical)
{
	int rc;

	if (stream) {
		last_error[0] = '\0';
		rc = cuda_stream_sync(stream, last_error, sizeof(last_error));
		if (rc < 0)
			return rc;
	}
	return publish(c, parent, pages, keys, tokens, n, prio, canonical);
}

KVP_API int kvp_publish_stream(kvp_client *c, struct CUstream_st *stream,
			       const kvp_key *parent, const kvp_page *pages,
			       const kvp_key *keys, size_t n, unsigned prio,
			       kvp_page *canonical)
{
	return kvp_publish_tokens(c, stream, parent, pages, keys, NULL, n, prio, canonical);
}

KVP_API int kvp_publish_partial(kvp_client *c, const kvp_key *parent, kvp_page page,
				const uint32_t *tokens, size_t ntokens, unsigned prio,
				kvp_page *canonical)
{
	struct kvp_wire_publish_partial pp = { .page = page, .prio = prio };
	const void *handles;
	size_t len = 0;
	uint32_t got;
	int rc;

	if (!c || !tokens || !ntokens || !canonical || ntokens > UINT32_MAX)
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pp.ntokens = (uint32_t)ntokens;
	pthread_mutex_lock(&c->mu);
	memcpy(pp.parent, parent_or_root(c, parent), sizeof(pp.parent));
	rc = call(c, KVP_OP_PUBLISH_PARTIAL, &pp, sizeof(pp), tokens,
		  ntokens * sizeof(*tokens), &len, NULL);
	if (rc == 0 && (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got,
					  &handles) < 0 || got != 1))
		rc = -EPROTO;
	if (rc == 0) {
		*canonical = wire_handle_at(handles, 0);
		if (*canonical != page)
			rc = held_add(c, *canonical);
		if (rc == 0)
			rc = map_all(c, canonical, 1);
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* pages_call() - send a page list (COW or RETAIN) in batches, this
 * client's copies of the handles checked first. out (COW) receives the
 * reply's handles, which become held. */
static int pages_call(struct kvp_client *c, uint16_t op, const kvp_page *pages,
		      size_t n, kvp_page *out)
{
	size_t i, k, done = 0, len = 0;
	const void *handles;
	uint32_t got;
	int rc = 0;

	for (i = 0; i < n; i++) {
		if (!hset_count(&c->held, pages[i])) {
			set_error("page handle %#llx (entry %zu) is not leased by this client",
				  (unsigned long long)pages[i], i);
			return -ESTALE;
		}
	}
	while (done < n) {
		struct kvp_wire_pages pl;

		k = n - done < c->hello.max_batch ? n - done : c->hello.max_batch;
		pl = (struct kvp_wire_pages){ .n = (uint32_t)k };
		rc = call(c, op, &pl, sizeof(pl), pages + done, k * sizeof(*pages), &len, NULL);
		if (rc < 0)
			break;
		if (out) {
			if (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got, &handles) < 0 ||
			    got != k) {
				rc = -EPROTO;
				break;
			}
			for (i = 0; i < k; i++)
				out[done + i] = wire_handle_at(handles, i);
			rc = remember(c, out + done, k);
			if (rc == 0)
				rc = map_all(c, out + done, k);
		} else {
			rc = remember(c, pages + done, k);
		}
		if (rc < 0)
			break;
		done += k;
	}
	return rc;
}

KVP_API int kvp_cow(kvp_client *c, const kvp_page *src, size_t n, kvp_page *copies)
{
	int rc;

	if (!c || (n && (!src || !copies)))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pthread_mutex_lock(&c->mu);
	last_error[0] = '\0';
	rc = pages_call(c, KVP_OP_COW, src, n, copies);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_retain(kvp_client *c, const kvp_page *pages, size_t n)
{
	int rc;

	if (!c || (n && !pages))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pthread_mutex_lock(&c->mu);
	last_error[0] = '\0';
	rc = pages_call(c, KVP_OP_RETAIN, pages, n, NULL);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_stats(kvp_client *c, kvp_stats_t *st, kvp_ns_stats_t *ns,
		      size_t max_ns)
{
	size_t len = 0;
	int rc;

	if (!c || !st || (max_ns && !ns))
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	rc = call(c, KVP_OP_STATS, NULL, 0, NULL, 0, &len, NULL);
	if (rc == 0) {
		rc = wire_stats_decode(c->buf + KVP_WIRE_HDR_SIZE, len, st, ns, max_ns);
		if (rc < 0)
			rc = -EPROTO;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* --- administration --------------------------------------------------------- */

/* list_call() - a request whose reply is struct kvp_wire_count and records
 * of size bytes; copies up to max into out. Returns the total or -errno. */
/* list_call() - a listing: up to max records of size bytes into out;
 * returns how many were copied, the total into *total (may be NULL). */
static int list_call(struct kvp_client *c, uint16_t op, const void *req, size_t len,
		     void *out, size_t size, size_t max, uint32_t *total)
{
	struct kvp_wire_count cnt;
	size_t rlen = 0, n;
	int rc;

	pthread_mutex_lock(&c->mu);
	rc = call(c, op, req, len, NULL, 0, &rlen, NULL);
	if (rc == 0) {
		memcpy(&cnt, c->buf + KVP_WIRE_HDR_SIZE, rlen < sizeof(cnt) ? 0 : sizeof(cnt));
		if (rlen < sizeof(cnt) || rlen != sizeof(cnt) + (size_t)cnt.count * size ||
		    cnt.total < cnt.count || cnt.total > INT32_MAX) {
			rc = -EPROTO;
		} else {
			n = cnt.count < max ? cnt.count : max;
			if (n)
				memcpy(out, c->buf + KVP_WIRE_HDR_SIZE + sizeof(cnt), n * size);
			if (total)
				*total = cnt.total;
			rc = (int)n;
		}
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int ns_copy(char dst[KVP_NAME_MAX], const char *ns)
{
	if (!ns)
		ns = "";
	if (strlen(ns) >= KVP_NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(dst, ns, strlen(ns) + 1);
	return 0;
}

KVP_API int kvp_list_clients(kvp_client *c, struct kvp_wire_client *out, size_t max,
			     uint32_t *total)
{
	if (!c || (max && !out))
		return -EINVAL;
	return list_call(c, KVP_OP_LIST_CLIENTS, NULL, 0, out, sizeof(*out), max, total);
}

KVP_API int kvp_list_pages(kvp_client *c, const struct kvp_wire_list_pages *filter,
			   struct kvp_wire_page *out, size_t max, uint32_t *total)
{
	struct kvp_wire_list_pages f;

	if (!c || (max && !out))
		return -EINVAL;
	memset(&f, 0, sizeof(f));
	if (filter)
		f = *filter;
	f.ns[sizeof(f.ns) - 1] = '\0';
	if (!f.limit && max < UINT32_MAX)
		f.limit = (uint32_t)max;
	return list_call(c, KVP_OP_LIST_PAGES, &f, sizeof(f), out, sizeof(*out), max, total);
}

KVP_API int kvp_list_prefixes(kvp_client *c, const char *ns, size_t top,
			      struct kvp_wire_prefix *out, size_t max, uint32_t *total)
{
	struct kvp_wire_list_prefixes lp;

	if (!c || (max && !out))
		return -EINVAL;
	memset(&lp, 0, sizeof(lp));
	if (ns_copy(lp.ns, ns) < 0)
		return -ENAMETOOLONG;
	lp.top = (uint32_t)(top && top < max ? top : max);
	return list_call(c, KVP_OP_LIST_PREFIXES, &lp, sizeof(lp), out, sizeof(*out), max,
			 total);
}

KVP_API int kvp_evict(kvp_client *c, const char *ns, uint64_t max)
{
	struct kvp_wire_evict ev;
	uint32_t done = 0;
	int rc;

	if (!c)
		return -EINVAL;
	memset(&ev, 0, sizeof(ev));
	if (ns_copy(ev.ns, ns) < 0)
		return -ENAMETOOLONG;
	ev.max = max;
	rc = list_call(c, KVP_OP_EVICT, &ev, sizeof(ev), NULL, 1, 0, &done);
	return rc < 0 ? rc : (int)done;
}

KVP_API int kvp_disconnect(kvp_client *c, uint64_t id)
{
	struct kvp_wire_disconnect d = { .client = id };
	size_t len = 0;
	int rc;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	rc = call(c, KVP_OP_DISCONNECT, &d, sizeof(d), NULL, 0, &len, NULL);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_drop_namespace(kvp_client *c, const char *ns)
{
	struct kvp_wire_drop_ns d;
	size_t len = 0;
	int rc;

	if (!c || !ns || !*ns)
		return -EINVAL;
	memset(&d, 0, sizeof(d));
	if (ns_copy(d.ns, ns) < 0)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&c->mu);
	rc = call(c, KVP_OP_DROP_NS, &d, sizeof(d), NULL, 0, &len, NULL);
	pthread_mutex_unlock(&c->mu);
	return rc;
}
