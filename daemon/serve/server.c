/* SPDX-License-Identifier: MIT */
/*
 * server.c - the client connections of kvpoold: accepting them on the
 * listening socket (which sockfile.c makes), limits per daemon and per
 * uid, receiving and checking each message before it goes to the
 * dispatcher (srv->dispatch), the idle sweep, new rights when the access
 * rules change, and the stop: no more clients, what the layers above
 * finish (srv->stop_waits: the save on stop, the remote tier's last
 * writes), then the loop drains. The connection object itself (replies,
 * errors, holds, the send path, the close) is conn.c's. Nothing here
 * reaches up: requests/, tiers/, remote/ and observe/ are opened and
 * wired to the server's hooks by the composition root (daemon/compose.c).
 *
 * Each connection is a small state machine driven by loop completions:
 * one receive is always posted while the connection is open, replies are
 * queued and sent one at a time. Any protocol error moves the connection
 * to CONN_CLOSING: the socket is shut down, the operations in flight
 * complete, and the last completion frees the connection.
 */
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/serve/conn.h"
#include "daemon/serve/server.h"
#include "daemon/serve/sockfile.h"
#include "daemon/store/lease.h"
#include "daemon/store/siphash.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Connections over max-clients held at once to tell them why; past this
 * they are closed at once and see a reset. */
#define REFUSED_MAX 16

/* server_maybe_done() - when the stop has nothing left to wait for (no
 * connection, no timer, nothing above: srv->stop_waits), let the loop
 * drain and stop. */
void server_maybe_done(struct server *s)
{
	if (!s->shutting_down || s->accepting || s->conns || s->idle_armed)
		return;
	if (s->stop_waits && s->stop_waits(s))
		return;		/* it calls again when it ends */
	loop_drain(s->loop);	/* spill writes finish first */
}

/* Connections past --max-clients that only a daemon admin (root, the
 * daemon's user, --admin-group) may open: an operator's `kvpool status`
 * and a container's health probes are answered by a daemon that clients
 * have filled. */
#define ADMIN_RESERVE 4

/* --- connections by uid (--max-clients-per-uid) ---------------------- */

/* uid_counted() - uid's connections count against --max-clients-per-uid
 * (root's and the daemon's own user's do not). */
static bool uid_counted(uid_t uid)
{
	return uid != 0 && uid != geteuid();
}

static struct uid_conns *uid_find(struct server *s, uid_t uid)
{
	uint32_t i;

	for (i = 0; i < s->nuids; i++)
		if (s->uids[i].uid == uid)
			return &s->uids[i];
	return NULL;
}

/* uid_conns_of() - connections served for uid now. O(users). */
static uint32_t uid_conns_of(struct server *s, uid_t uid)
{
	struct uid_conns *u = uid_find(s, uid);

	return u ? u->n : 0;
}

/* uid_add() / uid_del() - one served connection more or less for uid.
 * uid_add() returns 0 or -ENOMEM. */
static int uid_add(struct server *s, uid_t uid)
{
	struct uid_conns *u = uid_find(s, uid);

	if (!u) {
		if (s->nuids == s->cap_uids) {
			uint32_t cap = s->cap_uids ? s->cap_uids * 2 : 8;

			u = realloc(s->uids, cap * sizeof(*u));
			if (!u)
				return -ENOMEM;
			s->uids = u;
			s->cap_uids = cap;
		}
		u = &s->uids[s->nuids++];
		u->uid = uid;
		u->n = 0;
		u->waits = 0;
	}
	u->n++;
	return 0;
}

static void uid_del(struct server *s, uid_t uid)
{
	struct uid_conns *u = uid_find(s, uid);

	if (u && --u->n == 0)
		*u = s->uids[--s->nuids];
}

uint32_t server_waits_of(struct server *s, uid_t uid)
{
	struct uid_conns *u = uid_counted(uid) ? uid_find(s, uid) : NULL;

	return u ? u->waits : 0;
}

void server_waits_add(struct server *s, uid_t uid, int delta)
{
	struct uid_conns *u = uid_find(s, uid);

	if (u)
		u->waits = (uint32_t)((int64_t)u->waits + delta);
}

/* uid_limit() - --max-clients-per-uid, or half of --max-clients. */
static uint64_t uid_limit(const struct server *s)
{
	return s->opt->max_clients_per_uid ? s->opt->max_clients_per_uid
					   : (s->opt->max_clients + 1) / 2;
}

/* --- connections' end ------------------------------------------------ */

/* server_conn_gone() - conn_gone hook of every connection: c is being
 * freed (unlinked, its replies dropped). What the layers above keep of it
 * goes (srv->forget: its leases go back), its place in the limits is
 * free, and a stop may end. */
static void server_conn_gone(struct conn *c)
{
	struct server *s = c->srv;

	if (s->forget)
		s->forget(c);
	if (c->refused) {
		s->nrefused--;
	} else {
		s->nconns--;
		if (c->proto)
			s->nproto[c->proto - KVP_WIRE_VERSION_MIN]--;
		uid_del(s, c->cred.uid);
		log_debug("client %llu (pid %d) disconnected",
			  (unsigned long long)c->id, (int)c->cred.pid);
	}
	server_maybe_done(s);
}

/* drop_fds() - close file descriptors a client attached; true if any. */
static bool drop_fds(struct conn *c)
{
	struct cmsghdr *cm;
	bool any = (c->rmsg.msg_flags & MSG_CTRUNC) != 0;

	for (cm = CMSG_FIRSTHDR(&c->rmsg); cm; cm = CMSG_NXTHDR(&c->rmsg, cm)) {
		size_t i, nfd;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < nfd; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			close(fd);
		}
		any = true;
	}
	return any;
}

static void server_idle_arm(struct server *s);

/* --- receiving -------------------------------------------------------- */

/* handle_message() - check one received packet of n bytes and serve it. */
static void handle_message(struct conn *c, size_t n)
{
	struct kvp_wire_hdr req = { 0 };
	bool fds = drop_fds(c);
	char why[128];
	int rc;

	if (n > c->srv->opt->max_msg_size) {
		/* the header arrived whole: answer with its op and id */
		if (n >= KVP_WIRE_HDR_SIZE)
			(void)wire_hdr_decode(c->rbuf, n, &req);
		snprintf(why, sizeof(why), "message of %zu bytes exceeds max-msg-size %llu",
			 n, (unsigned long long)c->srv->opt->max_msg_size);
		conn_fatal(c, &req, KVP_S_PROTO, why);
		return;
	}
	rc = wire_hdr_decode(c->rbuf, n, &req);
	if (rc == 0 && c->proto && req.version != c->proto)
		rc = -KVP_S_VERSION;
	if (rc < 0 || (req.flags & KVP_WIRE_F_REPLY)) {
		if (rc == -KVP_S_VERSION && c->proto)
			snprintf(why, sizeof(why), "protocol version %u on a connection that "
				 "began in %u", req.version, c->proto);
		else if (rc == -KVP_S_VERSION)
			snprintf(why, sizeof(why), "protocol version %u (this daemon speaks "
				 "versions %u to %u)", req.version, KVP_WIRE_VERSION_MIN,
				 KVP_WIRE_VERSION);
		else
			snprintf(why, sizeof(why), "bad header in a %zu-byte message", n);
		conn_fatal(c, &req, rc == -KVP_S_VERSION ? KVP_S_VERSION : KVP_S_PROTO, why);
		return;
	}
	/* a connection speaks the version of its first message, which it
	 * chose at HELLO (a client of the previous release speaks its own) */
	if (!c->proto) {
		c->proto = req.version;
		if (!c->refused)
			c->srv->nproto[c->proto - KVP_WIRE_VERSION_MIN]++;
	}
	if (c->state == CONN_REFUSED) {
		c->close_after_send = true;
		if (c->per_uid)
			conn_error(c, &req, KVP_S_LIMIT, "uid %u has %u connections to kvpoold, "
				   "--max-clients-per-uid is %llu; close some, or ask the "
				   "daemon's admin to raise it", (unsigned)c->cred.uid,
				   uid_conns_of(c->srv, c->cred.uid),
				   (unsigned long long)uid_limit(c->srv));
		else
			conn_error(c, &req, KVP_S_LIMIT, "kvpoold serves %llu clients "
				   "(max-clients); try again later or raise --max-clients",
				   (unsigned long long)c->srv->opt->max_clients);
		return;
	}
	if (fds) {
		conn_error(c, &req, KVP_S_INVAL, "file descriptors attached to a %s request "
			   "were closed: requests carry none", wire_op_str(req.op));
		return;
	}
	c->srv->n.requests_total++;
	c->last_ms = loop_now_ms();
	c->req_ns = hist_now_ns();
	c->srv->dispatch(c, &req, c->rbuf + KVP_WIRE_HDR_SIZE);
}

static void conn_recv_done(struct loop_op *op, int res)
{
	struct conn *c = container_of(op, struct conn, recv_op);

	if (conn_put(c))
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
	conn_hold(c);	/* a handler may close c: it is freed only after */
	handle_message(c, (size_t)res);
	if (conn_put(c))
		return;
	if (c->state != CONN_CLOSING && !c->close_after_send && !c->deferred)
		conn_post_recv(c);
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

/* conn_new() - a connection object for fd, its peer's credentials read;
 * NULL without memory. */
static struct conn *conn_new(struct server *s, int fd)
{
	socklen_t len = sizeof(struct ucred);
	struct conn *c = calloc(1, sizeof(*c));

	if (c)
		c->rbuf = malloc(s->opt->max_msg_size);
	if (!c || !c->rbuf) {
		free(c);
		return NULL;
	}
	c->srv = s;
	c->fd = fd;
	c->id = ++s->next_conn_id;
	c->state = CONN_OPEN;
	c->remote_from = UINT32_MAX;	/* no block from the remote tier yet */
	lease_set_init(&c->leases, c->id);
	c->last_ms = loop_now_ms();
	c->connected_ms = c->last_ms - s->start_ms;
	c->recv_op.done = conn_recv_done;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len) < 0) {
		c->cred.pid = -1;
		c->cred.uid = (uid_t)-1;
		c->cred.gid = (gid_t)-1;
	}
	/* admin: root, the daemon's own user, or the --admin-group (primary
	 * or supplementary) */
	access_peer_of(fd, &c->cred, &c->peer);
	c->admin = c->cred.uid == 0 || c->cred.uid == geteuid() ||
		   access_in_group(&c->peer, s->admin_gid);
	c->peer.admin = c->admin;
	return c;
}

/*
 * conn_refuse() - c is over max-clients (or its uid over
 * --max-clients-per-uid): keep it only to answer its first request with
 * LIMIT, since closing at once could reset the connection before it
 * reads why; past REFUSED_MAX of them, false: close it at once.
 */
static bool conn_refuse(struct server *s, struct conn *c, bool per_uid)
{
	s->n.connections_refused++;
	if (per_uid)
		log_warn("refusing a client of uid %u (pid %d): it has %u connections, "
			 "--max-clients-per-uid is %llu", (unsigned)c->cred.uid,
			 (int)c->cred.pid, uid_conns_of(s, c->cred.uid),
			 (unsigned long long)uid_limit(s));
	else
		log_warn("refusing a client: %u clients connected, max-clients is %llu",
			 s->nconns, (unsigned long long)s->opt->max_clients);
	if (s->nrefused >= REFUSED_MAX)
		return false;
	c->state = CONN_REFUSED;
	c->refused = true;
	c->per_uid = per_uid;
	return true;
}

static void server_accept_done(struct loop_op *op, int res)
{
	struct server *s = container_of(op, struct server, accept_op);
	int sndbuf = (int)s->opt->max_msg_size + 4096;
	bool over;
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
	c = conn_new(s, res);
	if (!c) {
		log_error("out of memory for a new client; refusing it");
		close(res);
		server_post_accept(s);
		return;
	}
	if (s->nconns >= s->opt->max_clients + (c->admin ? ADMIN_RESERVE : 0))
		over = !conn_refuse(s, c, false);
	else if (uid_counted(c->cred.uid) && uid_conns_of(s, c->cred.uid) >= uid_limit(s))
		over = !conn_refuse(s, c, true);
	else
		over = !c->refused && uid_add(s, c->cred.uid) < 0;
	if (over) {
		close(res);
		free(c->rbuf);
		free(c);
		server_post_accept(s);
		return;
	}
	/* A SEQPACKET message must fit in the sender's buffer. */
	if (setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
		log_debug("client %llu: SO_SNDBUF %d: %s", (unsigned long long)c->id,
			  sndbuf, strerror(errno));
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
	s->n.connections_total++;
	log_debug("client %llu connected (pid %d, uid %u, gid %u)",
		  (unsigned long long)c->id, (int)c->cred.pid,
		  (unsigned)c->cred.uid, (unsigned)c->cred.gid);
	conn_post_recv(c);
	server_idle_arm(s);
	server_post_accept(s);
}

/* --- idle clients ------------------------------------------------------ */

static void server_idle_done(struct loop_op *op, int res);

/* server_idle_arm() - the next sweep, a quarter of the timeout away (at
 * least 100 ms), so a client goes at most 25 % after its time. */
static void server_idle_arm(struct server *s)
{
	uint64_t ms = s->opt->idle_timeout * 1000 / 4;

	if (!s->opt->idle_timeout || s->shutting_down || s->idle_armed)
		return;
	s->idle_op.done = server_idle_done;
	if (loop_timeout(s->loop, &s->idle_op, &s->idle_ts, ms < 100 ? 100 : ms) == 0)
		s->idle_armed = true;
	else
		log_error("cannot queue the --idle-timeout sweep: ring full; retrying at "
			  "the next client's connection");
}

/* server_idle_done() - disconnect the clients that sent no request for
 * --idle-timeout seconds; one whose request waits for the tier is busy,
 * not idle. */
static void server_idle_done(struct loop_op *op, int res)
{
	struct server *s = container_of(op, struct server, idle_op);
	uint64_t now = loop_now_ms(), limit = s->opt->idle_timeout * 1000;
	struct conn *c, *next;

	(void)res;
	s->idle_armed = false;
	for (c = s->conns; c && !s->shutting_down; c = next) {
		next = c->next;
		if (c->state != CONN_OPEN || c->deferred || now - c->last_ms < limit)
			continue;
		s->n.closed_idle++;
		log_info("client %llu (%s, pid %d) sent no request for %llu s "
			 "(--idle-timeout); disconnecting it", (unsigned long long)c->id,
			 c->name, (int)c->cred.pid,
			 (unsigned long long)((now - c->last_ms) / 1000));
		conn_close(c);
	}
	server_idle_arm(s);
	server_maybe_done(s);
}

static void server_cancel_done(struct loop_op *op, int res)
{
	(void)op;
	(void)res;
}

int server_init(struct server **out, struct loop *l, const struct options *o,
		struct backend *be, struct pool *pool, char *err, size_t errlen)
{
	struct server *s;
	gid_t admin_gid;

	admin_gid = (gid_t)-1;
	if (o->admin_group[0]) {
		struct group *gr = getgrnam(o->admin_group);

		if (!gr) {
			snprintf(err, errlen, "admin-group '%s' is not a group on this "
				 "system (see getent group)", o->admin_group);
			return -EINVAL;
		}
		admin_gid = gr->gr_gid;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->listen_fd = -1;
	s->lock_fd = -1;
	s->spill_lock_fd = -1;
	s->opt = o;
	s->conn_gone = server_conn_gone;
	s->loop = l;
	s->be = be;
	s->pool = pool;
	s->admin_gid = admin_gid;
	/* a daemon of its own: tickets no other daemon takes (compose.c
	 * makes it from --remote-key-file where there is one); a key anyone
	 * could guess would let them make tickets */
	if (siphash_key(s->ticket_key) < 0 || siphash_key(s->ticket_key + 16) < 0) {
		snprintf(err, errlen, "no random bytes for the handoff ticket key: getrandom() "
			 "and /dev/urandom failed; give kvpoold access to /dev/urandom");
		explicit_bzero(s->ticket_key, sizeof(s->ticket_key));
		free(s);
		return -EIO;
	}
	*out = s;
	return 0;
}

int server_listen(struct server *s, int listen_fd, char *err, size_t errlen)
{
	const struct options *o = s->opt;
	int rc;

	if (listen_fd >= 0) {
		rc = sockfile_adopt(o->socket_path, &s->lock_fd, err, errlen);
		if (rc == 0) {
			s->activated = true;
			s->listen_fd = listen_fd;
		}
		return rc;
	}
	return sockfile_open(o->socket_path, o->socket_group, &s->lock_fd, &s->listen_fd,
			     err, errlen);
}

void server_start(struct server *s)
{
	s->start_ms = loop_now_ms();
	s->accept_op.done = server_accept_done;
	s->cancel_op.done = server_cancel_done;
	server_post_accept(s);
}

void server_on_shutdown(struct server *s, void (*fn)(void *arg), void *arg)
{
	s->on_shutdown = fn;
	s->on_shutdown_arg = arg;
}

void server_status(const struct server *s, char *buf, size_t len)
{
	struct pool_counts pc;

	pool_counts(s->pool, -1, &pc);
	snprintf(buf, len, "%u clients, %u namespaces; pages: %llu leased, %llu cached, "
		 "%llu free of %llu in %llu slabs; %llu requests served", s->nconns,
		 s->nst.count,
		 (unsigned long long)(pc.by_state[PAGE_PRIVATE] + pc.by_state[PAGE_SHARED] +
				      pc.by_state[PAGE_INFLIGHT]),
		 (unsigned long long)pc.by_state[PAGE_CACHED],
		 (unsigned long long)pc.by_state[PAGE_FREE], (unsigned long long)pc.total,
		 (unsigned long long)pc.slabs, (unsigned long long)s->n.requests_total);
}

void server_shutdown(struct server *s)
{
	struct conn *c, *next;

	if (s->shutting_down)
		return;
	s->shutting_down = true;
	if (s->on_shutdown)
		s->on_shutdown(s->on_shutdown_arg);
	if (s->accepting)
		loop_cancel(s->loop, &s->cancel_op, &s->accept_op);
	if (s->idle_armed) {
		s->idle_cancel_op.done = server_cancel_done;
		loop_cancel(s->loop, &s->idle_cancel_op, &s->idle_op);
	}
	for (c = s->conns; c; c = next) {
		next = c->next;
		conn_close(c);
	}
	server_maybe_done(s);
}

/*
 * revoked() - c, with rights from now on, may not stay: it may neither
 * read nor write its namespace any more, or it could write and may not
 * now. A mapping cannot be taken back from a process, and a writer's is
 * writable: the connection goes, and the client may connect again with
 * what it has now (a reader gets read-only slabs). Logs why.
 */
static bool revoked(const struct conn *c, unsigned rights)
{
	const char *why = NULL;

	if (!(rights & (ACCESS_READ | ACCESS_WRITE)))
		why = "may no longer read or write there";
	else if ((c->rights & ACCESS_WRITE) && !(rights & ACCESS_WRITE))
		why = "may no longer write there, and its slabs are mapped writable";
	if (!why)
		return false;
	log_warn("SIGHUP: client %llu (%s, pid %d, uid %u) of namespace '%s' %s; "
		 "disconnecting it (its leases are released; it may connect again "
		 "with the rights it has now)", (unsigned long long)c->id, c->name,
		 (int)c->cred.pid, (unsigned)c->cred.uid, c->ns->name, why);
	return true;
}

unsigned server_rights_again(struct server *s)
{
	unsigned rights, cut = 0;
	struct conn *c, *next;

	for (c = s->conns; c; c = next) {
		next = c->next;
		if (!c->ns || c->state != CONN_OPEN)
			continue;
		rights = access_rights(s->rules, s->nrules, c->ns->name, &c->peer);
		if (!revoked(c, rights)) {
			c->rights = rights;
			continue;
		}
		cut++;
		conn_close(c);
	}
	return cut;
}

void server_unlisten(struct server *s)
{
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		/* systemd's socket outlives us: it queues the next start's clients */
		if (!s->activated)
			unlink(s->opt->socket_path);
		s->listen_fd = -1;
	}
	if (s->lock_fd >= 0)
		close(s->lock_fd);	/* the file stays: unlinking it would race */
	s->lock_fd = -1;
}

void server_free(struct server *s)
{
	if (!s)
		return;
	server_unlisten(s);
	free(s->kwait_buckets);
	free(s->kwait_tbuckets);
	free(s->kwait_heap);
	free(s->uids);
	free(s);
}
