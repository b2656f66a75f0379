/* SPDX-License-Identifier: MIT */
/*
 * kvpoold.c - start-up and shutdown of the kvpool daemon: options,
 * signals, detaching from the terminal, readiness, the pid file.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/size.h"
#include "daemon/compose.h"
#include "daemon/log.h"
#include "daemon/loop/loop.h"
#include "daemon/meminfo.h"
#include "daemon/observe/metrics.h"
#include "daemon/options.h"
#include "daemon/serve/server.h"
#include "daemon/serve/sockfile.h"
#include "daemon/serve/systemd.h"
#include "daemon/store/pool.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Signals arrive through a signalfd read by the loop. */
struct sigwatch {
	struct loop_op op;
	struct loop *loop;
	struct server *srv;
	int fd;
	struct signalfd_siginfo si;
};

static void sigwatch_post(struct sigwatch *w)
{
	if (loop_read(w->loop, &w->op, w->fd, &w->si, sizeof(w->si)) < 0) {
		log_error("cannot queue the signal read: ring full; shutting down");
		server_shutdown(w->srv);
	}
}

static void sigwatch_done(struct loop_op *op, int res)
{
	struct sigwatch *w = container_of(op, struct sigwatch, op);

	if (res != (int)sizeof(w->si)) {
		log_error("reading signals failed: %s; shutting down",
			  res < 0 ? strerror(-res) : "short read");
		server_shutdown(w->srv);
		return;
	}
	switch (w->si.ssi_signo) {
	case SIGTERM:
	case SIGINT:
		log_info("%s from pid %u: shutting down",
			 w->si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT",
			 w->si.ssi_pid);
		server_shutdown(w->srv);
		return;	/* no more reads: the loop is draining */
	case SIGHUP:
		log_reopen();
		compose_reload(w->srv);
		break;
	}
	sigwatch_post(w);
}

/*
 * Under systemd (Type=notify): STATUS= lines with the pool's state, and
 * WATCHDOG=1 pings from the loop itself, so that a loop that stops
 * turning (wedged, or stopped) stops the pings and systemd restarts it
 * (WatchdogSec=). One timer does both: every half watchdog interval, or
 * every STATUS_MS without a watchdog.
 */
#define STATUS_MS 10000u

struct sdwatch {
	struct loop_op op, cancel_op;
	struct __kernel_timespec ts;
	struct loop *loop;
	struct server *srv;
	uint64_t period_ms, watchdog_ms, last_status_ms;
	bool armed, stopping;
};

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void sdwatch_status(struct sdwatch *w)
{
	char line[512];

	server_status(w->srv, line, sizeof(line));
	systemd_notify("STATUS=%s", line);
	w->last_status_ms = now_ms();
}

static void sdwatch_arm(struct sdwatch *w)
{
	if (w->stopping || !w->period_ms)
		return;
	if (loop_timeout(w->loop, &w->op, &w->ts, w->period_ms) == 0)
		w->armed = true;
	else
		log_error("cannot queue the systemd status timer: ring full; no more "
			  "STATUS=%s", w->watchdog_ms ? " or WATCHDOG=1 (systemd will restart "
			  "kvpoold)" : "");
}

static void sdwatch_done(struct loop_op *op, int res)
{
	struct sdwatch *w = container_of(op, struct sdwatch, op);

	w->armed = false;
	if (w->stopping || res == -ECANCELED)
		return;
	if (w->watchdog_ms)
		systemd_notify("WATCHDOG=1");
	if (now_ms() - w->last_status_ms >= STATUS_MS)
		sdwatch_status(w);
	sdwatch_arm(w);
}

static void sdwatch_cancel_done(struct loop_op *op, int res)
{
	(void)op;
	(void)res;
}

/* sdwatch_stop() - the server shuts down: say so, and let the loop drain. */
static void sdwatch_stop(void *arg)
{
	struct sdwatch *w = arg;

	systemd_notify("STOPPING=1\nSTATUS=stopping: closing the connections");
	w->stopping = true;
	if (w->armed)
		loop_cancel(w->loop, &w->cancel_op, &w->op);
}

/* What the daemon stops when its server begins to shut down. */
struct stoppers {
	struct sdwatch *sd;
	struct metrics *metrics;
};

static void stop_all(void *arg)
{
	struct stoppers *st = arg;

	sdwatch_stop(st->sd);
	metrics_stop(st->metrics);
}

static void sdwatch_start(struct sdwatch *w, struct loop *l, struct server *srv)
{
	w->op.done = sdwatch_done;
	w->cancel_op.done = sdwatch_cancel_done;
	w->loop = l;
	w->srv = srv;
	w->watchdog_ms = systemd_watchdog_ms();
	w->period_ms = w->watchdog_ms ? (w->watchdog_ms / 2 ? w->watchdog_ms / 2 : 1)
		       : getenv("NOTIFY_SOCKET") ? STATUS_MS : 0;
	if (w->period_ms > STATUS_MS)
		w->period_ms = STATUS_MS;
	if (w->watchdog_ms)
		log_info("systemd watchdog: WATCHDOG=1 every %llu ms from the loop (WatchdogSec "
			 "%llu ms)", (unsigned long long)w->period_ms,
			 (unsigned long long)w->watchdog_ms);
	sdwatch_arm(w);
}

/*
 * detach() - fork into the background. The parent waits until the child
 * reports readiness on a pipe (see ready()), so `kvpoold && kvpool status`
 * works: it exits 0 once the socket listens, 1 if start-up failed; the
 * child's start-up errors still reach the terminal. Returns the write end
 * of the pipe in the child.
 */
static int detach(void)
{
	int p[2], nul;
	char c;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		log_error("pipe: %s", strerror(errno));
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		log_error("fork: %s", strerror(errno));
		exit(1);
	}
	if (pid > 0) {
		close(p[1]);
		_exit(read(p[0], &c, 1) == 1 && c == 'R' ? 0 : 1);
	}
	close(p[0]);
	setsid();
	nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		dup2(nul, STDOUT_FILENO);
		close(nul);
	}
	return p[1];
}

/* ready() - the daemon serves: tell systemd, or release a detached
 * daemon's parent and leave the terminal for syslog. */
static void ready(int ready_fd, struct sdwatch *w)
{
	char line[512];
	int nul;

	server_status(w->srv, line, sizeof(line));
	systemd_notify("READY=1\nSTATUS=serving: %s", line);
	w->last_status_ms = now_ms();
	if (ready_fd < 0)
		return;
	if (!log_to_file())
		log_use_syslog();
	nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (nul >= 0) {
		dup2(nul, STDERR_FILENO);
		close(nul);
	}
	(void)!write(ready_fd, "R", 1);
	close(ready_fd);
}

/*
 * backend_open() - the memory backend --backend asks for: cuda when a GPU
 * answers (required with --backend cuda), else host. The log says which
 * and why.
 */
static int backend_open(const struct options *o, struct backend *be,
			char *err, size_t errlen)
{
	char why[512];
	int rc;

	if (o->backend != BACKEND_HOST) {
		rc = backend_cuda_init(be, (int)o->cuda_device, why, sizeof(why));
		if (rc == 0) {
			log_info("backend cuda: %s; slabs are GPU memory exported with "
				 "CUDA IPC handles", why);
			return 0;
		}
		if (o->backend == BACKEND_CUDA) {
			snprintf(err, errlen, "--backend cuda: %s", why);
			return rc;
		}
		if (rc == -ENODEV)
			log_info("backend auto: no CUDA device; using the host backend (%s)",
				 why);
		else
			log_info("backend auto: %s; using the host backend", why);
	}
	rc = backend_host_init(be, err, errlen);
	if (rc == 0)
		log_info("backend host: memfd slabs in shared memory");
	return rc;
}

/*
 * host_pages_open() - beside the cuda backend, host memory for the
 * namespaces that ask for host pages (the vLLM connector's): a host
 * backend in hb and a budget of --host-pool-size (default --pool-size)
 * as the pool's second memory; none with --host-pool-size 0. Returns 0,
 * or -errno with err filled (hb->ops then NULL).
 */
static int host_pages_open(const struct options *o, struct pool *pool, struct backend *hb,
			   char *err, size_t errlen)
{
	uint64_t bytes = o->host_pool_size == OPTIONS_AS_POOL ? o->pool_size : o->host_pool_size;
	int rc;

	if (!bytes) {
		log_info("host pages: none beside the cuda backend (--host-pool-size 0); "
			 "clients that ask for them are refused");
		return 0;
	}
	rc = backend_host_init(hb, err, errlen);
	if (rc < 0)
		return rc;
	hb->prefault = o->prefault;
	rc = pool_mem_add(pool, hb, bytes);
	if (rc < 0) {
		snprintf(err, errlen, "--host-pool-size %llu: %s", (unsigned long long)bytes,
			 rc == -EINVAL ? "the pool has no slab numbers left for it (4096 "
			 "slabs in all, with --pool-size's); raise --slab-size or lower "
			 "the sizes" : strerror(-rc));
		hb->ops->fini(hb);
		hb->ops = NULL;
		return rc;
	}
	log_info("host pages: up to %llu bytes of memfd slabs beside the cuda backend, "
		 "for namespaces that ask for host pages (the vLLM connector does)",
		 (unsigned long long)pool_mem_bytes(pool, (uint32_t)rc));
	return 0;
}

/* write_pid_file() - our pid into path, mode 0644, never through a link
 * or into a file that is not ours. */
static int write_pid_file(const char *path)
{
	char err[8192], pid[32];
	int fd, n, rc = 0;

	fd = sockfile_own(path, "pid file", 0644, err, sizeof(err));
	if (fd < 0) {
		log_error("%s", err);
		return fd;
	}
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || write(fd, pid, (size_t)n) != n) {
		rc = -errno;
		log_error("cannot write the pid file %s: %s", path, strerror(errno));
	}
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	static struct options opt;
	struct sigwatch sw = { .op.done = sigwatch_done };
	static struct sdwatch sdw;
	static struct stoppers stoppers = { .sd = &sdw };
	struct server *srv = NULL;
	struct pool *pool = NULL;
	struct backend be = { 0 }, host_be = { 0 };	/* host_be: host pages beside cuda */
	struct loop loop;
	const char *note;
	char err[8192];
	sigset_t mask;
	int ready_fd = -1, listen_fd = -1, rc;

	/* Files are made with the modes the code asks for, whatever umask
	 * kvpoold was started with: nothing wider than owner-only unless
	 * set explicitly (the socket 0660, its directory 0750, the pid file
	 * 0644). */
	umask(077);
	options_defaults(&opt);
	rc = options_parse(&opt, argc, argv, err, sizeof(err));
	if (rc == 1)
		return 0;
	if (rc == 2) {		/* --version --verbose */
		compose_print_libraries(stdout);
		metrics_print_library(stdout);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "kvpoold: %s\n", err);
		return 2;
	}
	log_set_level(opt.log_level);
	if (opt.log_file[0] && log_open_file(opt.log_file, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvpoold: %s\n", err);
		return 1;
	}
	for (unsigned i = 0; i < opt.nwarnings; i++)	/* secrets others may read */
		log_warn("%s", opt.warnings[i]);
	if (!opt.foreground && !opt.log_file[0]) {
		char why[256];

		/* a detached daemon logs to syslog: where there is none (a
		 * container without /dev/log) say so while a terminal listens */
		if (log_syslog_reachable(why, sizeof(why)) < 0)
			fprintf(stderr, "kvpoold: warn: syslog is not reachable (%s): once "
				"detached, the log is lost; give --log-file PATH, or run with "
				"--foreground\n", why);
	}

	/* systemd's sockets are this pid's (LISTEN_PID): take them before the
	 * fork of a detaching start, whose child then serves them */
	if (systemd_take_fds() > 0 && !opt.foreground && getenv("NOTIFY_SOCKET"))
		log_warn("kvpoold detaches under a Type=notify unit: systemd takes "
			 "READY=1 from the process it started only (NotifyAccess=main); "
			 "give --foreground");
	if (!opt.foreground)
		ready_fd = detach();

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);	/* a memfd past `ulimit -f`: an error, not death */
	sw.fd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sw.fd < 0) {
		log_error("signalfd: %s", strerror(errno));
		return 1;
	}

	rc = loop_init(&loop, 256, (enum loop_io)opt.io, &note, err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err);
		goto out_close_sig;
	}
	if (note)
		log_warn("%s", note);
	/* a socket another daemon holds: say so before probing the GPU */
	rc = sockfile_busy(opt.socket_path, err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err);
		goto out_loop;
	}
	rc = backend_open(&opt, &be, err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err);
		goto out_loop;
	}
	if (be.ops->kind == KVP_BACKEND_HOST) {
		char what[256], a[32], b[32];
		uint64_t room = mem_room(what, sizeof(what));

		be.prefault = opt.prefault;
		if (opt.pool_size > room && !opt.prefault)
			log_warn("--pool-size %s is more than the %s of memory left to "
				 "kvpoold (%s): a client that writes that many pages would be "
				 "killed by the OOM killer; lower --pool-size, or drop "
				 "--no-prefault so that a slab memory cannot hold is refused "
				 "(-ENOSPC) instead", size_text(opt.pool_size, a, sizeof(a)),
				 size_text(room, b, sizeof(b)), what);
		else if (opt.pool_size > room)	/* a pool that can never fill: say it */
			log_warn("--pool-size %s is more than the %s of memory left to "
				 "kvpoold (%s; %.1fx): allocations past that are refused "
				 "(-ENOSPC), and the pool is never as large as configured; "
				 "lower --pool-size, or give kvpoold the memory",
				 size_text(opt.pool_size, a, sizeof(a)),
				 size_text(room, b, sizeof(b)), what,
				 room ? (double)opt.pool_size / (double)room : 0.0);
	}
	rc = pool_init(&pool, &be, opt.pool_size, opt.slab_size);
	if (rc < 0) {
		log_error("cannot set up a pool of %llu bytes in slabs of %llu: %s",
			  (unsigned long long)opt.pool_size,
			  (unsigned long long)opt.slab_size, strerror(-rc));
		goto out_backend;
	}
	if (be.ops->kind == KVP_BACKEND_CUDA) {
		rc = host_pages_open(&opt, pool, &host_be, err, sizeof(err));
		if (rc < 0) {
			log_error("%s", err);
			goto out_pool;
		}
	}
	listen_fd = systemd_listen_fd(opt.socket_path, err, sizeof(err));
	if (listen_fd == -EINVAL) {
		log_error("%s", err);
		rc = -EINVAL;
		goto out_pool;
	}
	if (listen_fd >= 0)
		log_info("socket activation: listening on the socket systemd passed for %s",
			 opt.socket_path);
	rc = compose_open(&srv, &loop, &opt, &be, pool, listen_fd, err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err);
		goto out_pool;
	}
	if (opt.pid_file[0]) {
		rc = write_pid_file(opt.pid_file);
		if (rc < 0)
			goto out_server;
	}
	sw.loop = &loop;
	sw.srv = srv;
	sigwatch_post(&sw);
	sdwatch_start(&sdw, &loop, srv);
	if (opt.metrics_listen[0]) {
		rc = metrics_start(&stoppers.metrics, opt.metrics_listen, &loop, srv, err,
				   sizeof(err));
		if (rc < 0) {
			log_error("%s", err);
			goto out_server;
		}
	}
	server_on_shutdown(srv, stop_all, &stoppers);

	log_info("kvpoold %s listening on %s (pool %llu bytes in slabs of %llu, "
		 "max %llu clients, messages up to %llu bytes, I/O by %s)",
		 PACKAGE_VERSION, opt.socket_path,
		 (unsigned long long)opt.pool_size, (unsigned long long)opt.slab_size,
		 (unsigned long long)opt.max_clients,
		 (unsigned long long)opt.max_msg_size, loop_io_name(&loop));
	ready(ready_fd, &sdw);

	rc = loop_run(&loop);
	if (rc < 0)
		log_error("event loop failed: %s", strerror(-rc));
	if (opt.pid_file[0])
		unlink(opt.pid_file);
out_server:
	loop_fini(&loop);	/* cancels what is left before its owners go */
	metrics_free(stoppers.metrics);
	compose_close(srv);
	pool_free(pool);
	if (host_be.ops)
		host_be.ops->fini(&host_be);
	be.ops->fini(&be);
	goto out_close_sig;
out_pool:
	pool_free(pool);
	if (host_be.ops)
		host_be.ops->fini(&host_be);
out_backend:
	if (be.ops)
		be.ops->fini(&be);
out_loop:
	loop_fini(&loop);
out_close_sig:
	close(sw.fd);
	if (rc == 0)
		log_info("stopped");
	return rc < 0 ? 1 : 0;
}
