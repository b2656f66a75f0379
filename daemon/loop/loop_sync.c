/* SPDX-License-Identifier: MIT */
/*
 * loop_sync.c - the loop without io_uring (see loop_sync.h).
 *
 * Pending operations sit on one list. Each turn waits in epoll_wait(2)
 * for the descriptors of the socket operations (and an eventfd of the
 * I/O threads), with the nearest timeout as its limit, then tries each
 * ready operation with a non-blocking call: one that would block stays
 * pending, the others complete. Interest is level-triggered and kept per
 * descriptor; a descriptor is (re)armed whenever a new operation is
 * queued on it, since a closed and reused fd number silently left the
 * epoll set. Completions are gathered first and their callbacks run
 * afterwards, so a callback may queue, cancel or close freely. File reads
 * and writes (the NVMe tier, O_DIRECT) go to LOOP_SYNC_THREADS threads,
 * which hand their results back through the eventfd. O(pending) a turn:
 * this is the fallback for machines that refuse io_uring, not the fast
 * path.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon/loop/loop_sync.h"

enum sop_kind { S_ACCEPT, S_RECVMSG, S_SENDMSG, S_READ, S_POLL, S_FILE, S_TIMEOUT,
	       S_CANCEL };

struct sop {
	struct sop *next;
	struct loop_op *op;
	enum sop_kind kind;
	int fd;
	struct msghdr *msg;		/* recvmsg, sendmsg */
	unsigned flags;			/* recvmsg, sendmsg; poll: its events */
	void *buf;			/* read, file */
	unsigned len;
	uint64_t off;			/* file */
	bool write;			/* file */
	bool armed;			/* its fd's epoll interest covers it */
	uint64_t deadline_ns;		/* timeout */
	struct loop_op *target;		/* cancel */
	int res;
};

struct loop_sync {
	struct sop *pending;		/* loop thread only */
	pthread_mutex_t mu;		/* the rest */
	pthread_cond_t cv;
	struct sop *jobs, **jobs_tail;	/* file I/O to do */
	struct sop *done;		/* file I/O done, newest first */
	bool quit;
	int efd;
	pthread_t threads[LOOP_SYNC_THREADS];
	unsigned nthreads;
	int epfd;
	uint32_t *have;		/* [nfd]: events registered per fd (loop thread) */
	uint32_t *want;		/* [nfd]: this turn's interest, then readiness */
	int nfd;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* io_thread() - do file reads and writes; report each through efd. */
static void *io_thread(void *arg)
{
	struct loop_sync *s = arg;
	uint64_t one = 1;
	ssize_t n;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct sop *j;

		while (!s->jobs && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->quit)
			break;
		j = s->jobs;
		s->jobs = j->next;
		if (!s->jobs)
			s->jobs_tail = &s->jobs;
		pthread_mutex_unlock(&s->mu);
		n = j->write ? pwrite(j->fd, j->buf, j->len, (off_t)j->off)
			     : pread(j->fd, j->buf, j->len, (off_t)j->off);
		j->res = n < 0 ? -errno : (int)n;
		pthread_mutex_lock(&s->mu);
		j->next = s->done;
		s->done = j;
		/* cannot fail short of overflowing a 64-bit counter */
		(void)!write(s->efd, &one, sizeof(one));
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int sync_init(struct loop *l, char *err, size_t errlen)
{
	struct loop_sync *s = calloc(1, sizeof(*s));
	unsigned i;

	if (!s) {
		snprintf(err, errlen, "out of memory for the epoll loop");
		return -ENOMEM;
	}
	s->epfd = -1;
	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd < 0) {
		snprintf(err, errlen, "eventfd for the I/O threads: %s", strerror(errno));
		free(s);
		return -errno;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->jobs_tail = &s->jobs;
	l->s = s;
	l->sync = true;
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->epfd >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = s->efd };

		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->efd, &ev) < 0) {
			close(s->epfd);
			s->epfd = -1;
		}
	}
	if (s->epfd < 0) {
		snprintf(err, errlen, "epoll for the fallback loop: %s", strerror(errno));
		sync_fini(l);
		return -EIO;
	}
	for (i = 0; i < LOOP_SYNC_THREADS; i++) {
		if (pthread_create(&s->threads[i], NULL, io_thread, s) != 0)
			break;
		s->nthreads++;
	}
	if (!s->nthreads) {
		snprintf(err, errlen, "cannot start an I/O thread");
		sync_fini(l);
		return -EAGAIN;
	}
	return 0;
}

static void free_list(struct sop *o)
{
	while (o) {
		struct sop *next = o->next;

		free(o);
		o = next;
	}
}

void sync_fini(struct loop *l)
{
	struct loop_sync *s = l->s;
	unsigned i;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->quit = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	for (i = 0; i < s->nthreads; i++)	/* a write in progress finishes */
		pthread_join(s->threads[i], NULL);
	free_list(s->pending);
	free_list(s->jobs);
	free_list(s->done);
	if (s->epfd >= 0)
		close(s->epfd);
	free(s->have);
	free(s->want);
	close(s->efd);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	l->s = NULL;
}

/* queue() - a new pending operation of kind for op. */
static struct sop *queue(struct loop *l, struct loop_op *op, enum sop_kind kind, int fd)
{
	struct sop *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->op = op;
	o->kind = kind;
	o->fd = fd;
	o->next = l->s->pending;
	l->s->pending = o;
	l->inflight++;
	return o;
}

int sync_accept(struct loop *l, struct loop_op *op, int fd)
{
	int fl = fcntl(fd, F_GETFL);

	/* a connection may vanish between poll and accept: never block */
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	return queue(l, op, S_ACCEPT, fd) ? 0 : -EBUSY;
}

static int queue_msg(struct loop *l, struct loop_op *op, enum sop_kind kind, int fd,
		     const struct msghdr *msg, unsigned flags)
{
	struct sop *o = queue(l, op, kind, fd);

	if (!o)
		return -EBUSY;
	o->msg = (struct msghdr *)msg;	/* sendmsg only reads it */
	o->flags = flags;
	return 0;
}

int sync_recvmsg(struct loop *l, struct loop_op *op, int fd, struct msghdr *msg,
		 unsigned flags)
{
	return queue_msg(l, op, S_RECVMSG, fd, msg, flags);
}

int sync_sendmsg(struct loop *l, struct loop_op *op, int fd, const struct msghdr *msg,
		 unsigned flags)
{
	return queue_msg(l, op, S_SENDMSG, fd, msg, flags);
}

int sync_read(struct loop *l, struct loop_op *op, int fd, void *buf, unsigned len)
{
	struct sop *o = queue(l, op, S_READ, fd);

	if (!o)
		return -EBUSY;
	o->buf = buf;
	o->len = len;
	return 0;
}

int sync_poll(struct loop *l, struct loop_op *op, int fd, unsigned events)
{
	struct sop *o = queue(l, op, S_POLL, fd);

	if (!o)
		return -EBUSY;
	o->flags = events;	/* poll(2) and epoll share POLLIN/POLLOUT values */
	return 0;
}

int sync_file(struct loop *l, struct loop_op *op, int fd, void *buf, unsigned len,
	      uint64_t off, bool write)
{
	struct loop_sync *s = l->s;
	struct sop *o = calloc(1, sizeof(*o));

	if (!o)
		return -EBUSY;
	o->op = op;
	o->kind = S_FILE;
	o->fd = fd;
	o->buf = buf;
	o->len = len;
	o->off = off;
	o->write = write;
	l->inflight++;
	pthread_mutex_lock(&s->mu);
	*s->jobs_tail = o;
	s->jobs_tail = &o->next;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int sync_timeout(struct loop *l, struct loop_op *op, uint64_t ms)
{
	struct sop *o = queue(l, op, S_TIMEOUT, -1);

	if (!o)
		return -EBUSY;
	o->deadline_ns = now_ns() + ms * 1000000u;
	return 0;
}

int sync_cancel(struct loop *l, struct loop_op *op, struct loop_op *target)
{
	struct sop *o = queue(l, op, S_CANCEL, -1);

	if (!o)
		return -EBUSY;
	o->target = target;
	return 0;
}

/* try_op() - attempt a ready socket operation (ready: what epoll said of
 * its fd; all ones when the fd cannot be watched): true when it completed
 * (o->res set), false when it would block. */
static bool try_op(struct sop *o, uint32_t ready)
{
	ssize_t n;

	switch (o->kind) {
	case S_POLL:
		ready &= o->flags | EPOLLERR | EPOLLHUP;
		o->res = (int)ready;
		return ready != 0;
	case S_ACCEPT:
		n = accept4(o->fd, NULL, NULL, SOCK_CLOEXEC);
		break;
	case S_RECVMSG:
		n = recvmsg(o->fd, o->msg, (int)o->flags | MSG_DONTWAIT);
		break;
	case S_SENDMSG:
		n = sendmsg(o->fd, o->msg, (int)o->flags | MSG_DONTWAIT);
		break;
	case S_READ:
		n = read(o->fd, o->buf, o->len);
		break;
	default:
		return false;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return false;
	o->res = n < 0 ? -errno : (int)n;
	return true;
}

/* push() - append o to the list whose tail link is *tail. */
static void push(struct sop ***tail, struct sop *o)
{
	o->next = NULL;
	**tail = o;
	*tail = &o->next;
}

/* cancel_target() - take target off the pending list, or off the I/O
 * threads' queue, onto the completions at *tail (it ends -ECANCELED).
 * -ENOENT when it is in neither: a thread has it or it is done. */
static int cancel_target(struct loop_sync *s, struct loop_op *target, struct sop ***tail)
{
	struct sop **pp, *o = NULL;

	for (pp = &s->pending; *pp; pp = &(*pp)->next)
		if ((*pp)->op == target && (*pp)->kind != S_CANCEL)
			break;
	if (*pp) {
		o = *pp;
		*pp = o->next;
	} else {
		pthread_mutex_lock(&s->mu);
		for (pp = &s->jobs; *pp && (*pp)->op != target; pp = &(*pp)->next)
			;
		if (*pp) {
			o = *pp;
			*pp = o->next;
			if (s->jobs_tail == &o->next)
				s->jobs_tail = pp;
		}
		pthread_mutex_unlock(&s->mu);
	}
	if (!o)
		return -ENOENT;
	o->res = -ECANCELED;
	push(tail, o);
	return 0;
}

/* fd_room() - the per-fd tables cover fd. */
static bool fd_room(struct loop_sync *s, int fd)
{
	uint32_t *h, *w;
	int n;

	if (fd < s->nfd)
		return true;
	n = fd < 64 ? 64 : fd * 2;
	h = realloc(s->have, (size_t)n * sizeof(*h));
	if (h)
		s->have = h;
	w = realloc(s->want, (size_t)n * sizeof(*w));
	if (w)
		s->want = w;
	if (!h || !w)
		return false;
	memset(s->have + s->nfd, 0, (size_t)(n - s->nfd) * sizeof(*h));
	memset(s->want + s->nfd, 0, (size_t)(n - s->nfd) * sizeof(*w));
	s->nfd = n;
	return true;
}

#define WANT_REARM (1u << 20)	/* not an epoll event: a new op is on this fd */

/* interest() - register what the pending operations wait for, and drop
 * what nothing waits for any more. O(pending + highest fd). */
static void interest(struct loop_sync *s)
{
	struct epoll_event ev;
	struct sop *o;
	uint32_t want;
	int fd;

	for (o = s->pending; o; o = o->next) {
		if (o->fd < 0 || !fd_room(s, o->fd))
			continue;
		s->want[o->fd] |= (o->kind == S_POLL ? o->flags & (EPOLLIN | EPOLLOUT) :
				   o->kind == S_SENDMSG ? EPOLLOUT : EPOLLIN) |
				  (o->armed ? 0 : WANT_REARM);
		o->armed = true;
	}
	for (fd = 0; fd < s->nfd; fd++) {
		want = s->want[fd] & ~WANT_REARM;
		if (want == s->have[fd] && !(s->want[fd] & WANT_REARM))
			continue;
		ev.events = want;
		ev.data.fd = fd;
		if (!want) {
			epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, &ev);	/* gone if closed */
		} else if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) < 0 &&
			   epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			want = 0;	/* cannot watch it (not a socket?) */
		}
		s->have[fd] = want;
	}
}

int sync_turn(struct loop *l, int ms)
{
	struct loop_sync *s = l->s;
	struct sop *o, **pp, *ready = NULL, **tail = &ready, *fin, *rev;
	struct epoll_event evs[64];
	uint64_t now = now_ns(), soonest = UINT64_MAX, cnt;
	unsigned handled = 0;
	bool instant = false;
	int rc, i, fd;

	for (o = s->pending; o; o = o->next) {
		if (o->kind == S_TIMEOUT && o->deadline_ns < soonest)
			soonest = o->deadline_ns;
		if (o->kind == S_CANCEL || (o->fd >= 0 && o->fd >= s->nfd))
			instant = true;
	}
	interest(s);
	if (instant)
		ms = 0;
	if (soonest != UINT64_MAX) {
		uint64_t wait = soonest > now ? (soonest - now + 999999) / 1000000 : 0;

		if (ms < 0 || wait < (uint64_t)ms)
			ms = (int)(wait > 60000 ? 60000 : wait);
	}
	rc = epoll_wait(s->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), ms);
	if (rc < 0 && errno != EINTR)
		return -errno;
	/* want[] now holds what each fd is ready for */
	for (fd = 0; fd < s->nfd; fd++)
		s->want[fd] = 0;
	for (i = 0; i < rc; i++)
		if (evs[i].data.fd != s->efd && evs[i].data.fd < s->nfd)
			s->want[evs[i].data.fd] = evs[i].events;
	now = now_ns();
	/* the socket operations that are ready, and the timers due */
	for (pp = &s->pending; (o = *pp);) {
		bool done = false;

		if (o->kind == S_TIMEOUT && o->deadline_ns <= now) {
			o->res = -ETIME;
			done = true;
		} else if (o->kind != S_TIMEOUT && o->kind != S_CANCEL &&
			   (o->fd >= s->nfd || s->want[o->fd] || !s->have[o->fd])) {
			done = try_op(o, o->fd < s->nfd && s->have[o->fd] ? s->want[o->fd]
									: UINT32_MAX);
		}
		if (done) {
			*pp = o->next;
			push(&tail, o);
		} else {
			pp = &o->next;
		}
	}
	for (fd = 0; fd < s->nfd; fd++)
		s->want[fd] = 0;
	/* cancels: their targets complete too */
	for (pp = &s->pending; (o = *pp);) {
		if (o->kind != S_CANCEL) {
			pp = &o->next;
			continue;
		}
		*pp = o->next;
		o->res = cancel_target(s, o->target, &tail);
		push(&tail, o);
		pp = &s->pending;	/* the list may have changed */
	}
	/* what the I/O threads finished, oldest first */
	pthread_mutex_lock(&s->mu);
	fin = s->done;
	s->done = NULL;
	(void)!read(s->efd, &cnt, sizeof(cnt));	/* EAGAIN: nothing counted */
	pthread_mutex_unlock(&s->mu);
	for (rev = NULL; (o = fin); rev = o) {	/* newest first: turn it */
		fin = o->next;
		o->next = rev;
	}
	*tail = rev;
	/* now the callbacks, which may queue, cancel and close as they like */
	while ((o = ready)) {
		ready = o->next;
		l->inflight--;
		handled++;
		o->op->done(o->op, o->res);
		free(o);
	}
	return (int)handled;
}
