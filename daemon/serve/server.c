/* SPDX-License-Identifier: MIT */
/*
 * server.c - the client connections of kvpoold: accepting them on the
 * listening socket (which sockfile.c makes), limits per daemon and per
 * uid, receiving and checking each message before it goes to the
 * dispatcher (requests/requests.c), the idle sweep, SIGHUP's new rights,
 * and the stop: no more clients, the save on stop (tiers/save.c), the
 * remote tier's last writes, then the loop drains. The connection object
 * itself (replies, errors, holds, the send path, the close) is conn.c's.
 *
 * Each connection is a small state machine driven by loop completions:
 * one receive is always posted while the connection is open, replies are
 * queued and sent one at a time. Any protocol error moves the connection
 * to CONN_CLOSING: the socket is shut down, the operations in flight
 * complete, and the last completion frees the connection.
 *
 * Past 800 lines on purpose: accepting, the limits, the idle sweep, the
 * reload and the stop all read and change the server's one connection
 * list and counters; a file each would share them through a header made
 * only for that.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/wire.h"
#include "daemon/log.h"
#include "daemon/observe/events.h"
#include "daemon/remote/remote.h"
#include "daemon/remote/rvalue.h"
#include "daemon/requests/ns.h"
#include "daemon/requests/requests.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/conn.h"
#include "daemon/serve/server.h"
#include "daemon/serve/sockfile.h"
#include "daemon/store/lease.h"
#include "daemon/tiers/spill.h"
#include "daemon/tiers/tier.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Connections over max-clients held at once to tell them why; past this
 * they are closed at once and see a reset. */
#define REFUSED_MAX 16

/*
 * read_key_file() - the bytes of --remote-key-file into buf (at most
 * RVALUE_FILE_MAX): a regular file of 32 bytes or more that other users
 * cannot read. Returns its length, or -EINVAL with err saying what to do.
 */
static ssize_t read_key_file(const char *path, uint8_t *buf, size_t cap, char *err,
			     size_t errlen)
{
	struct stat st;
	ssize_t n;
	int fd = options_secret_open("remote-key-file", path, err, errlen);

	if (fd < 0)
		return -EINVAL;
	if (fstat(fd, &st) < 0 || (st.st_mode & S_IROTH)) {
		snprintf(err, errlen, "--remote-key-file %s: other users can read the key; "
			 "chmod 600 it (or 640, group kvpool)", path);
		close(fd);
		return -EINVAL;
	}
	n = read(fd, buf, cap);
	close(fd);
	if (n < RVALUE_FILE_MIN) {
		snprintf(err, errlen, "--remote-key-file %s: %zd bytes; it needs %u or more "
			 "of random (head -c 32 /dev/urandom)", path, n < 0 ? (ssize_t)0 : n,
			 RVALUE_FILE_MIN);
		return -EINVAL;
	}
	return n;
}

/*
 * server_remote_open() - the remote tier of --remote, its values sealed
 * with --remote-key-file (required: without it anyone who may write to
 * Redis could make this pool serve bytes of their choosing), its password
 * from --remote-password-file, $KVPOOL_REMOTE_PASSWORD or the URL. A bad
 * URL or key file, a server of the wrong kind or a refused password stop
 * the start; no server answering does not.
 */
static int server_remote_open(struct server *s, const struct options *o, char *err,
			      size_t errlen)
{
	struct remote_config rc = {
		.url = o->remote, .timeout_ms = (uint32_t)o->remote_timeout,
		.max_inflight = (uint32_t)o->remote_max_inflight, .max_rate = o->remote_rate,
		.max_backlog = o->remote_backlog,
		.password = getenv("KVPOOL_REMOTE_PASSWORD"),
	};
	uint8_t key[RVALUE_FILE_MAX];
	char pw[256];
	const char *note;
	ssize_t kl;
	FILE *f;
	int r;

	if (!o->remote_key_file[0]) {
		snprintf(err, errlen, "--remote needs --remote-key-file: pages in Redis are "
			 "sealed with a key that only pools holding it can open (else whoever "
			 "may write to Redis chooses what this pool serves). Make one, and "
			 "give the same file to every machine that shares: (umask 077; "
			 "head -c 32 /dev/urandom > /etc/kvpool/remote.key)");
		return -EINVAL;
	}
	kl = read_key_file(o->remote_key_file, key, sizeof(key), err, errlen);
	if (kl < 0)
		return (int)kl;
	rc.key = key;
	rc.key_len = (size_t)kl;
	pw[0] = '\0';
	if (o->remote_password_file[0]) {
		int fd = options_secret_open("remote-password-file", o->remote_password_file,
					     err, errlen);

		f = fd < 0 ? NULL : fdopen(fd, "r");
		if (!f || !fgets(pw, sizeof(pw), f)) {
			if (fd >= 0)
				snprintf(err, errlen, "--remote-password-file %s: %s",
					 o->remote_password_file, f ? "empty" : strerror(errno));
			if (f)
				fclose(f);
			else if (fd >= 0)
				close(fd);
			explicit_bzero(key, sizeof(key));
			return -EINVAL;
		}
		fclose(f);
		pw[strcspn(pw, "\r\n")] = '\0';
		rc.password = pw;
	}
	r = remote_open(&s->remote, s->loop, &rc, &note, err, errlen);
	explicit_bzero(pw, sizeof(pw));
	explicit_bzero(key, sizeof(key));
	if (r < 0)
		return r;
	if (note)
		log_warn("%s", note);
	log_info("remote tier %s: write-%s, timeout %llu ms, %llu requests in flight "
		 "per node, values sealed%s", remote_describe(s->remote),
		 o->remote_write ? "through" : "back",
		 (unsigned long long)o->remote_timeout,
		 (unsigned long long)o->remote_max_inflight,
		 o->remote_prefill_rate ? ", fetched only when faster than prefill" : "");
	s->keys.remote = s->remote;
	s->keys.remote_through = o->remote_write == 1;
	s->keys.remote_prefill_rate = o->remote_prefill_rate;
	s->keys.remote_fetch_max = (uint32_t)o->remote_fetch_max;
	return 0;
}

static void server_maybe_done(struct server *s);

/* server_goes_on() - the continuation of the remote tier's last writes
 * and of the stop's save: the stop goes on. */
static void server_goes_on(void *arg)
{
	server_maybe_done(arg);
}

/* server_maybe_done() - when the stop has nothing left to wait for (no
 * connection, no save, no timer), let the loop drain and stop. */
static void server_maybe_done(struct server *s)
{
	if (!s->shutting_down || s->accepting || s->conns || s->idle_armed)
		return;
	if (!s->save.started &&
	    save_start(&s->save, s->loop, s->pool, &s->nst,
			s->opt->spill_dir[0] ? s->opt->save_on_stop : 0, server_goes_on, s))
		return;		/* it calls again when it ends */
	if (save_busy(&s->save))
		return;
	if (remote_busy(s->remote)) {	/* its writes end first (or time out) */
		remote_on_idle(s->remote, server_goes_on, s);
		return;
	}
	for (uint32_t i = 0; i < s->nst.count; i++)
		s->nst.ns[i]->remote = NULL;	/* nothing is sent from here on */
	s->keys.remote = NULL;
	remote_close(s->remote);	/* its connections would keep the loop busy */
	s->remote = NULL;
	loop_drain(s->loop);	/* spill writes finish first */
}

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

/* uid_limit() - --max-clients-per-uid, or half of --max-clients. */
static uint64_t uid_limit(const struct server *s)
{
	return s->opt->max_clients_per_uid ? s->opt->max_clients_per_uid
					   : (s->opt->max_clients + 1) / 2;
}

/* --- connections' end ------------------------------------------------ */

/* server_conn_gone() - conn_gone hook of every connection: c is being
 * freed (unlinked, its replies dropped). Its leases go back, its place
 * in the limits is free, and a stop may end. */
static void server_conn_gone(struct conn *c)
{
	struct server *s = c->srv;

	requests_conn_gone(c);
	if (c->refused) {
		s->nrefused--;
	} else {
		s->nconns--;
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
	requests_handle(c, &req, c->rbuf + KVP_WIRE_HDR_SIZE);
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
	if (s->nconns >= s->opt->max_clients)
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

/*
 * lock_spill_dir() - take DIR/kvpool.lock for the daemon's life: a second
 * daemon on the same --spill-dir would write its slots over this one's
 * (and serve its pages back as checksum failures). Returns the lock's fd,
 * or -EADDRINUSE (err names the pid that holds it) or another -errno.
 */
static int lock_spill_dir(const char *dir, char *err, size_t errlen)
{
	char lock[4200], pid[32];
	int fd;

	snprintf(lock, sizeof(lock), "%s/kvpool.lock", dir);
	fd = sockfile_lock(lock, "spill directory's lock file", pid, sizeof(pid), err, errlen);
	if (fd != -EWOULDBLOCK)
		return fd;
	snprintf(err, errlen, "another kvpoold (pid %s) uses the spill directory %s (it "
		 "holds %s): two daemons there write over each other's tier files; give "
		 "each daemon its own --spill-dir", pid, dir, lock);
	return -EADDRINUSE;
}

/* A slab made ahead, off the loop (pool_set_spare_hook()). */
struct spare_job {
	struct loop_op op;		/* first: loop_work()'s */
	struct server *s;
	struct backend *be;
	size_t bytes;
	uint32_t mem;
	int rc;				/* fn's: the slab is made when 0 */
	struct backend_slab slab;
	char err[256];
};

static int spare_run(struct loop_op *op)
{
	struct spare_job *j = (struct spare_job *)op;

	j->rc = j->be->ops->slab_create(j->be, j->bytes, &j->slab, j->err, sizeof(j->err));
	return j->rc;
}

static void spare_done(struct loop_op *op, int res)
{
	struct spare_job *j = (struct spare_job *)op;
	struct server *s = j->s;

	s->spare_jobs[j->mem] = NULL;
	pool_spare_made(s->pool, j->mem, &j->slab, res);
	free(j);
}

/* spare_make() - the pool's hook: make its next slab on a worker. */
static int spare_make(void *arg, struct backend *be, size_t bytes, uint32_t mem)
{
	struct server *s = arg;
	struct spare_job *j;
	int rc;

	if (mem >= POOL_MAX_MEM || s->spare_jobs[mem])
		return -EBUSY;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct spare_job){ .op.done = spare_done, .s = s, .be = be, .bytes = bytes,
				 .mem = mem, .rc = -ECANCELED };
	/* a queue of its own (no uid is -1): it waits behind no user's
	 * tier files, and none waits behind it */
	rc = loop_work(s->loop, &j->op, spare_run, UINT32_MAX);
	if (rc < 0) {
		free(j);
		return rc;
	}
	s->spare_jobs[mem] = j;
	return 0;
}

int server_init(struct server **out, struct loop *l, const struct options *o,
		struct backend *be, struct pool *pool, int listen_fd, char *err,
		size_t errlen)
{
	struct server *s;
	gid_t admin_gid;
	int rc, spill_lock = -1;

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
	if (o->spill_dir[0]) {
		rc = spill_dir_check(o->spill_dir, err, errlen);
		if (rc == 0)
			rc = spill_dir_probe(o->spill_dir, o->spill_size, err, errlen);
		if (rc == 0)	/* last: a refused start leaves no file there */
			rc = spill_lock = lock_spill_dir(o->spill_dir, err, errlen);
		if (rc < 0)
			return rc;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		if (spill_lock >= 0)
			close(spill_lock);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->spill_lock_fd = spill_lock;
	s->opt = o;
	s->conn_gone = server_conn_gone;
	s->dispatch = requests_handle;
	if (listen_fd >= 0) {
		s->activated = true;
		s->listen_fd = listen_fd;
		rc = sockfile_adopt(o->socket_path, &s->lock_fd, err, errlen);
	} else {
		rc = sockfile_open(o->socket_path, o->socket_group, &s->lock_fd,
				   &s->listen_fd, err, errlen);
	}
	if (rc < 0) {
		free(s);
		return rc;
	}
	s->loop = l;
	s->be = be;
	s->pool = pool;
	s->admin_gid = admin_gid;
	/* the option's choices are the schemes from 1, then "fast" */
	s->keys.scheme = o->key_scheme == 4 ? KVP_WIRE_KEYS_FAST : o->key_scheme + 1;
	s->keys.seed = o->key_seed;
	s->keys.salt = o->key_salt;
	s->keys.pinned_pct = (unsigned)o->pinned_pct;
	s->keys.max_per_uid = (unsigned)o->max_ns_per_uid;
	s->keys.spill_dir = o->spill_dir;
	s->keys.spill_bytes = o->spill_size;
	s->keys.max_spill_per_uid = o->max_spill_per_uid;
	s->keys.host_bytes = o->host_tier_size;
	s->keys.spill_discard = o->spill_discard;
	s->keys.spill_rate = o->spill_rate;
	s->keys.loop = l;
	s->keys.wake = wait_wake;
	memcpy(s->shares, o->share, sizeof(s->shares));
	s->keys.shares = s->shares;
	s->keys.nshares = o->nshare;
	/* host pages: the pool's own with the host backend; beside cuda, the
	 * pool's second memory when kvpoold made one (--host-pool-size) */
	s->keys.host_memory = be->ops->kind == KVP_BACKEND_HOST ? 0 :
			      pool_mem_bytes(pool, 1) ? 1 : -1;
	if (o->kv_events[0]) {
		struct events_config ec = {
			.endpoint = o->kv_events, .replay = o->kv_events_replay,
			.topic = o->kv_events_topic, .format = o->kv_events_format,
			.ns_topics = o->ns_topic, .nns_topics = o->nns_topic,
			.hashes = o->kv_events_hashes, .queue_bytes = o->kv_events_queue,
			.replay_batches = o->kv_events_replay_batches,
			.pool_medium = be->ops->kind == KVP_BACKEND_CUDA ? "GPU" : "CPU",
			.loop = l, .ipc_gid = (gid_t)-1,
		};

		if (o->kv_events_ipc_group[0]) {
			struct group *gr = getgrnam(o->kv_events_ipc_group);

			if (!gr) {
				snprintf(err, errlen, "--kv-events-ipc-group '%s' is not a group "
					 "on this system (see getent group)",
					 o->kv_events_ipc_group);
				rc = -EINVAL;
				goto out_socket;
			}
			ec.ipc_gid = gr->gr_gid;
		}

		rc = events_start(&s->events, &ec, err, errlen);
		if (rc < 0)
			goto out_socket;
		s->keys.events = s->events;
		loop_on_turn(l, events_flush, s->events);
	}
	if (o->remote[0]) {
		rc = server_remote_open(s, o, err, errlen);
		if (rc < 0)
			goto out_events;
	}
	options_access(o, s->rules, &s->nrules);
	if (s->nrules)
		log_info("access: %u rules; clients have only the rights they grant",
			 s->nrules);
	tier_room_hook = wait_retry;
	if (o->host_tier_size)
		log_info("host tier: %llu bytes per namespace of %s memory", (unsigned long long)
			 o->host_tier_size, be->ops->kind == KVP_BACKEND_CUDA ? "pinned" : "private");
	if (o->spill_dir[0]) {
		uint64_t pages = ns_restore_all(&s->nst, pool, &s->keys);

		log_info("spill tier in %s: %llu pages of %u namespaces re-indexed%s",
			 o->spill_dir, (unsigned long long)pages, s->nst.count,
			 o->spill_discard ? " (--spill-discard: cold start)" : "");
	}
	s->start_ms = loop_now_ms();
	s->accept_op.done = server_accept_done;
	s->cancel_op.done = server_cancel_done;
	server_post_accept(s);
	if (o->slab_ahead && o->prefault)	/* without prefault a slab costs nothing */
		pool_set_spare_hook(pool, spare_make, s);
	*out = s;
	return 0;
out_events:
	if (s->events) {
		loop_on_turn(l, NULL, NULL);
		events_free(s->events);
	}
out_socket:
	if (!s->activated) {
		close(s->listen_fd);
		unlink(o->socket_path);
	}
	close(s->lock_fd);
	if (s->spill_lock_fd >= 0)
		close(s->spill_lock_fd);
	free(s);
	return rc;
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

void server_reload(struct server *s)
{
	struct options *f;
	unsigned rights, cut = 0, reshared;
	struct conn *c, *next;
	char err[512];

	if (!s->opt->config_file[0]) {
		log_info("SIGHUP: no --config file to read again; the access rules stay "
			 "as they are (%u)", s->nrules);
		return;
	}
	f = malloc(sizeof(*f));
	if (!f) {
		log_error("SIGHUP: out of memory; the access rules stay as they are");
		return;
	}
	if (options_reload(s->opt, f, err, sizeof(err)) < 0) {
		log_error("SIGHUP: %s; the access rules stay as they are (%u), and the "
			  "remote-share rules (%u)", err, s->nrules, s->keys.nshares);
		free(f);
		return;
	}
	options_access(f, s->rules, &s->nrules);
	memcpy(s->shares, f->share, sizeof(s->shares));
	s->keys.nshares = f->nshare;
	free(f);
	reshared = ns_remote_reshare(&s->nst, &s->keys);
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
	log_info("SIGHUP: %u access rules and %u remote-share rules from %s and the "
		 "flags; the rights of %u clients recomputed, %u disconnected; %u "
		 "namespaces share remote pages under another name now (other settings "
		 "need a restart)", s->nrules, s->keys.nshares, s->opt->config_file,
		 s->nconns, cut, reshared);
}

void server_free(struct server *s)
{
	if (!s)
		return;
	close(s->listen_fd);
	if (!s->activated)	/* systemd's socket outlives us: it queues the next start's clients */
		unlink(s->opt->socket_path);
	close(s->lock_fd);	/* the file stays: unlinking it would race */
	if (s->spill_lock_fd >= 0)	/* after the loop: no tier job is left */
		close(s->spill_lock_fd);
	if (s->events) {
		events_all_gone(s->events, &s->nst);
		loop_on_turn(s->loop, NULL, NULL);
		events_free(s->events);
	}
	ns_table_fini(&s->nst);
	remote_close(s->remote);
	for (unsigned i = 0; i < POOL_MAX_MEM; i++) {
		struct spare_job *j = s->spare_jobs[i];

		/* made by a worker after the loop stopped: never completed */
		if (j && j->rc == 0)
			j->be->ops->slab_destroy(j->be, &j->slab);
		free(j);
	}
	free(s->uids);
	free(s);
}
