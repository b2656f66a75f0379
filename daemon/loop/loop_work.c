/* SPDX-License-Identifier: MIT */
/*
 * loop_work.c - jobs off the loop (see loop_work() in loop.h): file-system
 * calls that can take milliseconds or minutes (preallocating, wiping and
 * scanning a tier file, unlinking one) run on a few worker threads, so
 * that no client waits for another's disk work.
 *
 * A job is queued under a mutex, on the queue of whom it is for, and taken
 * by the first idle thread (up to LOOP_WORKERS, started when first
 * needed). The threads serve the queues in turn, one job each time round,
 * passing over a queue with LOOP_WORKERS_PER_WHO jobs running: one uid's
 * sixteen tier files wait for each other, not another uid's one. A thread
 * that finishes a job puts it on the done list and counts it on an
 * eventfd; the loop polls the eventfd (with its own operations, io_uring
 * or epoll) only while a job is out, and completes each finished job's
 * operation on the loop thread, oldest first. A job counts as in flight, so loop_drain() waits
 * for it. io_uring would run FALLOCATE and UNLINKAT in its own worker
 * threads too (neither call has an asynchronous path in the file
 * systems), and a tier file's preparation is a sequence of dependent
 * calls: one job per sequence is simpler and costs the same.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon/loop/loop.h"

struct who_q;

struct job {
	struct job *next;
	struct loop_op *op;
	loop_work_fn fn;
	struct who_q *q;	/* whose queue it came from */
	int res;
};

/* The jobs of one who, in the round while it has some queued or running. */
struct who_q {
	struct who_q *next;	/* in the round (circular) */
	uint32_t who;
	unsigned running;	/* taken by a thread, not yet finished */
	struct job *head, **tail;
};

struct loop_workers {
	struct loop *loop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct who_q *turn;			/* the round, from the next to serve */
	unsigned queued;			/* jobs in every queue */
	struct job *done;			/* run, newest first */
	unsigned idle;				/* threads waiting for a job */
	bool quit;
	pthread_t threads[LOOP_WORKERS];
	unsigned nthreads;
	int efd;
	unsigned out;				/* queued or done, not completed */
	struct loop_op poll_op;			/* on efd while out > 0 */
	bool polling;
};

/* take() - under w->mu, the next job in turn: the first queue of the
 * round, from w->turn on, with one queued and fewer than
 * LOOP_WORKERS_PER_WHO running (any queue once told to quit); NULL when
 * none may run now. */
static struct job *take(struct loop_workers *w)
{
	struct who_q *q = w->turn;
	struct job *j;

	if (!q)
		return NULL;
	do {
		if (q->head && (q->running < LOOP_WORKERS_PER_WHO || w->quit)) {
			j = q->head;
			q->head = j->next;
			if (!q->head)
				q->tail = &q->head;
			q->running++;
			w->queued--;
			w->turn = q->next;	/* the others first, next time */
			return j;
		}
		q = q->next;
	} while (q != w->turn);
	return NULL;
}

/* finished() - under w->mu, j's queue runs one job fewer; a queue with
 * nothing queued or running leaves the round. */
static void finished(struct loop_workers *w, struct job *j)
{
	struct who_q *q = j->q, *p;

	q->running--;
	if (q->head || q->running)
		return;
	for (p = q; p->next != q; p = p->next)
		;
	if (p == q) {
		w->turn = NULL;
	} else {
		p->next = q->next;
		if (w->turn == q)
			w->turn = q->next;
	}
	free(q);
}

/* worker() - run jobs until told to quit; the queues are emptied first, so
 * that a job queued before the loop stopped (a drop's unlink) still runs. */
static void *worker(void *arg)
{
	struct loop_workers *w = arg;
	uint64_t one = 1;
	struct job *j;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!(j = take(w)) && !(w->quit && !w->queued)) {
			w->idle++;
			pthread_cond_wait(&w->cv, &w->mu);
			w->idle--;
		}
		if (!j)
			break;
		pthread_mutex_unlock(&w->mu);
		j->res = j->fn(j->op);
		pthread_mutex_lock(&w->mu);
		finished(w, j);
		j->next = w->done;
		w->done = j;
		/* a job of its queue may run now */
		pthread_cond_broadcast(&w->cv);
		/* cannot fail short of overflowing a 64-bit counter */
		(void)!write(w->efd, &one, sizeof(one));
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* queue_of() - under w->mu, who's queue, put in the round just before the
 * next to serve (so it is served last in this round); NULL on ENOMEM. */
static struct who_q *queue_of(struct loop_workers *w, uint32_t who)
{
	struct who_q *q = w->turn, *p;

	if (q) {
		do {
			if (q->who == who)
				return q;
			q = q->next;
		} while (q != w->turn);
	}
	q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->who = who;
	q->tail = &q->head;
	if (!w->turn) {
		q->next = q;
		w->turn = q;
		return q;
	}
	for (p = w->turn; p->next != w->turn; p = p->next)
		;
	p->next = q;
	q->next = w->turn;
	return q;
}

static void workers_polled(struct loop_op *op, int res);

/* workers_poll() - wait on the eventfd while a job is out. */
static void workers_poll(struct loop_workers *w)
{
	if (w->polling || !w->out)
		return;
	w->poll_op.done = workers_polled;
	w->polling = loop_poll(w->loop, &w->poll_op, w->efd, POLLIN) == 0;
}

/* workers_polled() - complete the jobs the threads finished. */
static void workers_polled(struct loop_op *op, int res)
{
	struct loop_workers *w = (struct loop_workers *)((char *)op -
						offsetof(struct loop_workers, poll_op));
	struct job *fin, *rev = NULL, *j;
	uint64_t cnt;

	(void)res;
	w->polling = false;
	pthread_mutex_lock(&w->mu);
	fin = w->done;
	w->done = NULL;
	(void)!read(w->efd, &cnt, sizeof(cnt));	/* EAGAIN: nothing counted */
	pthread_mutex_unlock(&w->mu);
	while ((j = fin)) {	/* newest first: turn it */
		fin = j->next;
		j->next = rev;
		rev = j;
		w->out--;
	}
	workers_poll(w);	/* for the jobs still out; a callback may add more */
	while ((j = rev)) {
		rev = j->next;
		w->loop->inflight--;
		j->op->done(j->op, j->res);
		free(j);
	}
}

/* workers_new() - the loop's worker state, no thread yet; NULL on ENOMEM. */
static struct loop_workers *workers_new(struct loop *l)
{
	struct loop_workers *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		free(w);
		return NULL;
	}
	w->loop = l;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	return w;
}

int loop_work(struct loop *l, struct loop_op *op, loop_work_fn fn, uint32_t who)
{
	struct loop_workers *w = l->w;
	struct job *j;

	if (!w && !(w = l->w = workers_new(l)))
		return -ENOMEM;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->op = op;
	j->fn = fn;
	pthread_mutex_lock(&w->mu);
	if (!w->idle && w->nthreads < LOOP_WORKERS &&
	    pthread_create(&w->threads[w->nthreads], NULL, worker, w) == 0)
		w->nthreads++;
	j->q = w->nthreads ? queue_of(w, who) : NULL;
	if (!j->q) {
		pthread_mutex_unlock(&w->mu);
		free(j);
		return w->nthreads ? -ENOMEM : -EAGAIN;
	}
	*j->q->tail = j;
	j->q->tail = &j->next;
	w->queued++;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	w->out++;
	l->inflight++;
	workers_poll(w);
	return 0;
}

void loop_work_turn(struct loop *l)
{
	if (l->w)
		workers_poll(l->w);	/* a poll the ring could not take, again */
}

void loop_work_fini(struct loop *l)
{
	struct loop_workers *w = l->w;
	struct job *j;
	unsigned i;

	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->quit = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	for (i = 0; i < w->nthreads; i++)	/* the queue is run first */
		pthread_join(w->threads[i], NULL);
	while ((j = w->done)) {	/* never completed: see loop_work() */
		w->done = j->next;
		free(j);
	}
	close(w->efd);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w);
	l->w = NULL;
}
