/* SPDX-License-Identifier: MIT */
/*
 * compose.c - kvpoold's composition root (see compose.h): opens the
 * server (serve/), checks and locks the spill directory (tiers/), starts
 * KV events (observe/) and the remote tier (remote/), gives the namespaces
 * (requests/ns) their settings, and sets the hooks that go up: the
 * server's dispatch (requests_handle), forget (requests_conn_gone) and
 * stop_waits (the save on stop, the remote tier's last writes), the
 * namespaces' wake (wait_wake) and the tiers' room hook (wait_retry).
 * SIGHUP's new rules and the pool's slabs made ahead are wired here too.
 * Nothing below includes this file.
 */
#include <errno.h>
#include <grp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#ifdef HAVE_KV_EVENTS
#include <zmq.h>
#endif

#include "client/wire.h"
#include "daemon/compose.h"
#include "daemon/log.h"
#include "daemon/observe/events.h"
#include "daemon/remote/remote.h"
#include "daemon/remote/rvalue.h"
#include "daemon/requests/ns.h"
#include "daemon/requests/requests.h"
#include "daemon/requests/wait.h"
#include "daemon/serve/conn.h"
#include "daemon/serve/sockfile.h"
#include "daemon/tiers/save.h"
#include "daemon/tiers/spill.h"
#include "daemon/tiers/tier.h"

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
 * compose_remote_open() - the remote tier of --remote, its values sealed
 * with --remote-key-file (required: without it anyone who may write to
 * Redis could make this pool serve bytes of their choosing), its password
 * from --remote-password-file, $KVPOOL_REMOTE_PASSWORD or the URL. A bad
 * URL or key file, a server of the wrong kind or a refused password stop
 * the start; no server answering does not.
 */
static int compose_remote_open(struct server *s, const struct options *o, char *err,
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
	/* every daemon that shares the tier takes the others' handoff tickets */
	handoff_key_from(key, (size_t)kl, s->ticket_key);
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

/* compose_goes_on() - the continuation of the remote tier's last writes
 * and of the stop's save: the stop goes on. */
static void compose_goes_on(void *arg)
{
	server_maybe_done(arg);
}

/*
 * compose_stop_waits() - the server's stop_waits hook: once no client is
 * left, the save on stop (tiers/save.c), then the remote tier's last
 * writes; true while one goes on (each calls server_maybe_done() when it
 * ends). Then nothing more is sent to the remote tier, and it closes: its
 * connections would keep the loop busy.
 */
static bool compose_stop_waits(struct server *s)
{
	if (!s->save.started &&
	    save_start(&s->save, s->loop, s->pool, &s->nst,
		       s->opt->spill_dir[0] ? s->opt->save_on_stop : 0, compose_goes_on, s))
		return true;	/* it calls again when it ends */
	if (save_busy(&s->save))
		return true;
	if (remote_busy(s->remote)) {	/* its writes end first (or time out) */
		remote_on_idle(s->remote, compose_goes_on, s);
		return true;
	}
	for (uint32_t i = 0; i < s->nst.count; i++)
		s->nst.ns[i]->remote = NULL;	/* nothing is sent from here on */
	s->keys.remote = NULL;
	remote_close(s->remote);
	s->remote = NULL;
	return false;
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

/* compose_spill_open() - --spill-dir checked, probed and locked (last: a
 * refused start leaves no file there); the lock's fd in *lock_fd, -1
 * without a spill directory. Returns 0, or -errno with err saying why. */
static int compose_spill_open(const struct options *o, int *lock_fd, char *err,
			      size_t errlen)
{
	int rc;

	*lock_fd = -1;
	if (!o->spill_dir[0])
		return 0;
	rc = spill_dir_check(o->spill_dir, err, errlen);
	if (rc == 0)
		rc = spill_dir_probe(o->spill_dir, o->spill_size, err, errlen);
	if (rc == 0)
		rc = lock_spill_dir(o->spill_dir, err, errlen);
	if (rc < 0)
		return rc;
	*lock_fd = rc;
	return 0;
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

/* compose_keys() - the settings of the namespaces clients make, from o. */
static void compose_keys(struct server *s, const struct options *o)
{
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
	s->keys.loop = s->loop;
	s->keys.wake = wait_wake;
	memcpy(s->shares, o->share, sizeof(s->shares));
	s->keys.shares = s->shares;
	s->keys.nshares = o->nshare;
	/* host pages: the pool's own with the host backend; beside cuda, the
	 * pool's second memory when kvpoold made one (--host-pool-size) */
	s->keys.host_memory = s->be->ops->kind == KVP_BACKEND_HOST ? 0 :
			      pool_mem_bytes(s->pool, 1) ? 1 : -1;
}

/* compose_events_open() - --kv-events and --kv-events-router: the
 * publisher, flushed once a turn of the loop. Returns 0 or -errno with
 * err saying why. */
static int compose_events_open(struct server *s, const struct options *o, char *err,
			       size_t errlen)
{
	struct events_config ec = {
		.endpoint = o->kv_events, .replay = o->kv_events_replay,
		.topic = o->kv_events_topic, .format = o->kv_events_format,
		.ns_topics = o->ns_topic, .nns_topics = o->nns_topic,
		.routes = o->routes, .nroutes = o->nroutes,
		.hashes = o->kv_events_hashes, .queue_bytes = o->kv_events_queue,
		.replay_batches = o->kv_events_replay_batches,
		.pool_medium = s->be->ops->kind == KVP_BACKEND_CUDA ? "GPU" : "CPU",
		.loop = s->loop, .ipc_gid = (gid_t)-1,
	};
	int rc;

	if (o->kv_events_ipc_group[0]) {
		struct group *gr = getgrnam(o->kv_events_ipc_group);

		if (!gr) {
			snprintf(err, errlen, "--kv-events-ipc-group '%s' is not a group "
				 "on this system (see getent group)", o->kv_events_ipc_group);
			return -EINVAL;
		}
		ec.ipc_gid = gr->gr_gid;
	}
	rc = events_start(&s->events, &ec, err, errlen);
	if (rc < 0)
		return rc;
	s->keys.events = s->events;
	loop_on_turn(s->loop, events_flush, s->events);
	return 0;
}

int compose_open(struct server **out, struct loop *l, const struct options *o,
		 struct backend *be, struct pool *pool, int listen_fd, char *err,
		 size_t errlen)
{
	struct server *s;
	int rc;

	rc = server_init(&s, l, o, be, pool, err, errlen);
	if (rc < 0)
		return rc;
	rc = compose_spill_open(o, &s->spill_lock_fd, err, errlen);
	if (rc < 0)
		goto out_server;
	s->dispatch = requests_handle;
	s->forget = requests_conn_gone;
	s->stop_waits = compose_stop_waits;
	rc = server_listen(s, listen_fd, err, errlen);
	if (rc < 0)
		goto out_server;
	compose_keys(s, o);
	if (o->kv_events[0] || o->nroutes) {
		rc = compose_events_open(s, o, err, errlen);
		if (rc < 0)
			goto out_server;
	}
	if (o->remote[0]) {
		rc = compose_remote_open(s, o, err, errlen);
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
	server_start(s);
	if (o->slab_ahead && o->prefault)	/* without prefault a slab costs nothing */
		pool_set_spare_hook(pool, spare_make, s);
	*out = s;
	return 0;
out_events:
	if (s->events) {
		loop_on_turn(l, NULL, NULL);
		events_free(s->events);
	}
out_server:
	server_unlisten(s);
	if (s->spill_lock_fd >= 0)
		close(s->spill_lock_fd);
	server_free(s);
	return rc;
}

void compose_reload(struct server *s)
{
	struct options *f;
	unsigned cut, reshared;
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
	cut = server_rights_again(s);
	log_info("SIGHUP: %u access rules and %u remote-share rules from %s and the "
		 "flags; the rights of %u clients recomputed, %u disconnected; %u "
		 "namespaces share remote pages under another name now (other settings "
		 "need a restart)", s->nrules, s->keys.nshares, s->opt->config_file,
		 s->nconns, cut, reshared);
}

void compose_print_libraries(FILE *f)
{
	unsigned x = XXH_versionNumber();

	fprintf(f, "libraries, as they report themselves now:\n");
	fprintf(f, "  xxHash %u.%u.%u\n", x / 10000, x / 100 % 100, x % 100);
#ifdef HAVE_KV_EVENTS
	{
		int a, b, c;

		zmq_version(&a, &b, &c);
		fprintf(f, "  libzmq %d.%d.%d\n", a, b, c);
	}
#endif
	remote_print_libraries(f);
}

void compose_close(struct server *s)
{
	if (!s)
		return;
	server_unlisten(s);
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
	server_free(s);
}
