/* SPDX-License-Identifier: MIT */
/*
 * saver.c - kvpool._kvpool.Lock and kvpool._kvpool.Saver: a connector's
 * saves on a thread that never takes the GIL.
 *
 * Client.save_blocks() lets the GIL go once a batch, but the thread that
 * calls it must take the GIL back after each, and a model runner that lets
 * it go and takes it again often (each torch call) keeps it from that
 * thread for seconds: CPython's waiter asks the holder to let go only
 * after 5 ms without a hand-over, and each hand-over it loses restarts
 * that wait. In an engine with 8 streams decoding 5,000 tokens, saves of
 * a few blocks took seconds so, the queue filled and blocks went unsaved.
 *
 * Saver.run() is the saving thread's loop, in C without the GIL: the model
 * runner's thread submits jobs (parsed while it holds the GIL) and reaps
 * their results; around each batch the loop takes the pool's Lock, a
 * recursive mutex that Python's `with` takes too (waiting without the
 * GIL), so a batch never runs beside another user of the connection. A
 * Client a Saver saves through is closed only under that Lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_kvpool.h"
#include "blockcopy.h"

/* --- Lock ----------------------------------------------------------------- */

static PyObject *Lock_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { NULL };
	pthread_mutexattr_t a;
	LockObject *self;

	if (!PyArg_ParseTupleAndKeywords(args, kw, ":Lock", kwlist))
		return NULL;
	self = (LockObject *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&self->mu, &a);
	pthread_mutexattr_destroy(&a);
	return (PyObject *)self;
}

static void Lock_dealloc(LockObject *self)
{
	pthread_mutex_destroy(&self->mu);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Lock_acquire(LockObject *self, PyObject *unused)
{
	(void)unused;
	if (pthread_mutex_trylock(&self->mu) != 0) {
		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&self->mu);
		Py_END_ALLOW_THREADS
	}
	Py_RETURN_TRUE;
}

static PyObject *Lock_release(LockObject *self, PyObject *unused)
{
	(void)unused;
	if (pthread_mutex_unlock(&self->mu) != 0) {
		PyErr_SetString(PyExc_RuntimeError, "kvpool Lock: released by a thread that "
				"does not hold it");
		return NULL;
	}
	Py_RETURN_NONE;
}

static PyObject *Lock_exit(LockObject *self, PyObject *args)
{
	(void)args;
	if (!Lock_release(self, NULL))
		return NULL;
	Py_RETURN_FALSE;
}

static PyMethodDef Lock_methods[] = {
	{ "acquire", (PyCFunction)Lock_acquire, METH_NOARGS,
	  "acquire() - wait (without the GIL) until this thread holds the lock; True." },
	{ "release", (PyCFunction)Lock_release, METH_NOARGS,
	  "release() - let go of it once (RuntimeError if this thread does not hold it)." },
	{ "__enter__", (PyCFunction)Lock_acquire, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Lock_exit, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

PyTypeObject LockType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool._kvpool.Lock",
	.tp_basicsize = sizeof(LockObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Lock() - a recursive lock that Python threads take with `with` and a "
		  "Saver's thread takes without the GIL.",
	.tp_new = Lock_new,
	.tp_dealloc = (destructor)Lock_dealloc,
	.tp_methods = Lock_methods,
};

/* --- Saver ---------------------------------------------------------------- */

/* What became of a job (Saver.reap()'s status). */
enum {
	SV_SAVED,	/* published: saved and deduplicated blocks */
	SV_SKIPPED,	/* an earlier job of its chain is not in the pool */
	SV_FAILED,	/* its batch or its publish failed: what, rc, err */
	SV_GONE,	/* the Client was closed */
	SV_PARTIAL,	/* its leading blocks published (saved, dups), the rest found
			 * no room in the pool: what, rc, err as SV_FAILED's */
};

/* One submit(): the connection and the copy its jobs share. */
struct sv_group {
	PyObject *client;	/* a ClientObject */
	struct bc_plan plan;
	unsigned int prio;
	size_t jobs;		/* not reaped yet */
};

struct sv_job {
	struct sv_job *next;
	struct sv_group *g;
	long long id;		/* the caller's */
	int64_t chain;		/* one request's jobs, in order */
	kvp_key parent_key;
	const kvp_key *parent;
	size_t n;
	size_t keep;		/* the leading blocks it publishes (n, or fewer
				 * when the pool had room for fewer) */
	kvp_key *keys;
	int64_t *blocks;
	struct tokens tok;
	bool has_tok;
	/* set by the saving thread */
	int status, rc;
	const char *what;	/* where it failed: "alloc", "page_index", "copy", "publish" */
	size_t saved, dups;
	char err[ERRBUF];
};

/* One batch the saving thread ran. */
struct sv_batch {
	long long first;	/* its first job's id */
	double seconds;
	int rel_rc;		/* its RELEASE */
	char rel_err[ERRBUF];
};

struct sv_list {
	struct sv_job *head, *tail;
};

typedef struct {
	PyObject_HEAD
	LockObject *lock;	/* the pool's: held around each batch */
	size_t batch;		/* blocks a batch takes (one job of more, alone) */
	double delay;		/* seconds each batch waits before it runs (tests) */
	pthread_mutex_t mu;	/* what follows */
	pthread_cond_t cv;
	struct sv_list queue, running, done;
	int64_t *broken;	/* chains with a job failed or skipped (malloc) */
	size_t nbroken, capbroken;
	struct sv_batch *batches;	/* ran since reap() (malloc) */
	size_t nbatches, capbatches;
	bool stop, in_run;
} SaverObject;

static void list_add(struct sv_list *l, struct sv_job *j)
{
	j->next = NULL;
	if (l->tail)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
}

static void list_cat(struct sv_list *l, struct sv_list *m)
{
	if (!m->head)
		return;
	if (l->tail)
		l->tail->next = m->head;
	else
		l->head = m->head;
	l->tail = m->tail;
	m->head = m->tail = NULL;
}

/* broken_at() - chain's place in the broken set (mu held), or -1. */
static ssize_t broken_at(SaverObject *s, int64_t chain)
{
	size_t i;

	for (i = 0; i < s->nbroken; i++)
		if (s->broken[i] == chain)
			return (ssize_t)i;
	return -1;
}

/* break_chain() - its later jobs are skipped (mu held). Without memory
 * for it, its later jobs still run, and their parent is missing: kvpoold
 * refuses them and they fail in turn. */
static void break_chain(SaverObject *s, int64_t chain)
{
	if (broken_at(s, chain) >= 0)
		return;
	if (s->nbroken == s->capbroken) {
		size_t cap = s->capbroken ? 2 * s->capbroken : 16;
		int64_t *b = realloc(s->broken, cap * sizeof(*b));

		if (!b)
			return;
		s->broken = b;
		s->capbroken = cap;
	}
	s->broken[s->nbroken++] = chain;
}

static void forget_chain(SaverObject *s, int64_t chain)
{
	ssize_t i = broken_at(s, chain);

	if (i >= 0)
		s->broken[i] = s->broken[--s->nbroken];
}

/* job_free() - a job reaped or dropped, and its group after its last (the
 * GIL held). */
static void job_free(struct sv_job *j)
{
	struct sv_group *g = j->g;

	tokens_release(&j->tok);
	PyMem_Free(j->keys);
	PyMem_Free(j->blocks);
	PyMem_Free(j);
	if (g && --g->jobs == 0) {
		bc_plan_free(&g->plan);
		Py_DECREF(g->client);
		PyMem_Free(g);
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* deadline() - seconds from now on the clock pthread_cond_timedwait() uses. */
static struct timespec deadline(double seconds)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)seconds;
	ts.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* fail_all() - every job of the batch that is not done yet. */
static void fail_all(struct sv_job *j, int status, int rc, const char *what, const char *err)
{
	for (; j; j = j->next) {
		if (j->status != -1)
			continue;
		j->status = status;
		j->rc = rc;
		j->what = what;
		snprintf(j->err, sizeof(j->err), "%s", err);
	}
}

/*
 * alloc_fit() - n fresh pages did not fit: as many as do, in ALLOCs of
 * halving sizes (the daemon's are all or none), at least half of what
 * fits. How many (into out), 0 when not one does.
 */
static size_t alloc_fit(kvp_client *c, size_t n, kvp_page *out)
{
	size_t got = 0, step = n / 2;

	while (step && got < n) {
		if (step > n - got)
			step = n - got;
		if (kvp_alloc(c, step, out + got) == 0)
			got += step;
		else
			step /= 2;
	}
	return got;
}

/* keep_fit() - got pages of the batch's total: the jobs that fit whole
 * keep theirs, the one across the line its leading blocks, those past it
 * none (failed: no room, err). The pages they keep, in order. */
static void keep_fit(struct sv_job *first, size_t got, int rc, const char *err)
{
	struct sv_job *j;
	size_t at = 0;

	for (j = first; j; j = j->next) {
		if (j->status != -1)
			continue;
		j->keep = at >= got ? 0 : got - at < j->n ? got - at : j->n;
		at += j->keep;
		if (j->keep < j->n) {	/* SV_PARTIAL once its leading ones are in */
			j->rc = rc;
			j->what = "alloc";
			snprintf(j->err, sizeof(j->err), "%s", err);
		}
		if (!j->keep)
			j->status = SV_FAILED;
	}
}

/*
 * run_batch() - ALLOC the batch's pages, copy its blocks in, PUBLISH each
 * job (a job whose chain broke is skipped), RELEASE: the pool's Lock held,
 * no GIL. Its jobs' results and the batch's record are set. When the pool
 * has room for fewer pages than the batch's, the leading blocks that fit
 * are saved (a decode engine loads them, and computes the rest).
 */
static void run_batch(SaverObject *s, struct sv_job *first, struct sv_batch *rec)
{
	ClientObject *co = (ClientObject *)first->g->client;
	const struct bc_plan *plan = &first->g->plan;
	size_t total = 0, at, nrel = 0, i;
	kvp_page *fresh = NULL, *canon = NULL, *rel = NULL;
	int64_t *pairs = NULL;
	char err[ERRBUF], cerr[256];
	struct sv_job *j;
	kvp_client *c;
	int rc;

	rec->rel_rc = 0;
	pthread_mutex_lock(&s->lock->mu);
	c = co->c;
	if (!c || co->gen != fork_gen) {
		fail_all(first, SV_GONE, -ENOTCONN, "save", "the Client is closed");
		goto out;
	}
	pthread_mutex_lock(&s->mu);
	for (j = first; j; j = j->next)
		if (broken_at(s, j->chain) >= 0) {
			j->status = SV_SKIPPED;
		} else {
			j->keep = j->n;
			total += j->n;
		}
	pthread_mutex_unlock(&s->mu);
	if (!total)
		goto out;
	fresh = malloc(total * sizeof(*fresh));
	canon = malloc(total * sizeof(*canon));
	rel = malloc(2 * total * sizeof(*rel));
	pairs = malloc(2 * total * sizeof(*pairs));
	if (!fresh || !canon || !rel || !pairs) {
		fail_all(first, SV_FAILED, -ENOMEM, "alloc", "no memory for the batch's pages");
		goto out;
	}
	rc = kvp_alloc(c, total, fresh);
	if (rc < 0) {
		size_t got;

		SAVE_ERROR(err);
		got = rc == -ENOSPC && total > 1 ? alloc_fit(c, total, fresh) : 0;
		if (!got) {
			fail_all(first, SV_FAILED, rc, "alloc", err);
			goto out;
		}
		keep_fit(first, got, rc, err);
		total = got;
	}
	for (j = first, at = 0; j; j = j->next) {
		if (j->status != -1)
			continue;
		rc = page_pairs(c, fresh + at, j->blocks, j->keep, true, pairs + 2 * at);
		if (rc < 0) {
			SAVE_ERROR(err);
			fail_all(first, SV_FAILED, rc, "page_index", err);
			break;
		}
		at += j->keep;
	}
	if (at == total && bc_plan_check(plan, pairs, total, cerr, sizeof(cerr)) < 0) {
		fail_all(first, SV_FAILED, -EINVAL, "copy", cerr);
		at = 0;
	}
	if (at == total) {
		bc_plan_copy(plan, pairs, total);
		for (j = first, at = 0; j; j = j->next) {
			if (j->status != -1)
				continue;
			pthread_mutex_lock(&s->mu);
			if (broken_at(s, j->chain) >= 0)	/* an earlier job of this batch */
				j->status = SV_SKIPPED;
			pthread_mutex_unlock(&s->mu);
			if (j->status == -1) {
				/* a partial one's first keep blocks and their tokens */
				rc = kvp_publish_tokens(c, NULL, j->parent, fresh + at, j->keys,
							j->has_tok ? j->tok.v : NULL, j->keep,
							first->g->prio, canon + at);
				if (rc < 0) {
					SAVE_ERROR(j->err);
					j->status = SV_FAILED;
					j->rc = rc;
					j->what = "publish";
				} else {
					j->status = j->keep < j->n ? SV_PARTIAL : SV_SAVED;
					for (i = at; i < at + j->keep; i++)
						if (canon[i] != fresh[i])
							rel[total + nrel++] = canon[i];
						else
							j->saved++;
					j->dups = j->keep - j->saved;
				}
			}
			if (j->status != SV_SAVED) {
				pthread_mutex_lock(&s->mu);
				break_chain(s, j->chain);
				pthread_mutex_unlock(&s->mu);
			}
			at += j->keep;
		}
	}
	/* every fresh page goes (a published one stays in the index), and
	 * the canonical pages of the blocks another client had */
	memcpy(rel, fresh, total * sizeof(*rel));
	rc = kvp_release(c, rel, total + nrel);
	if (rc < 0) {
		rec->rel_rc = rc;
		SAVE_ERROR(rec->rel_err);
	}
out:
	pthread_mutex_unlock(&s->lock->mu);
	free(fresh);
	free(canon);
	free(rel);
	free(pairs);
	pthread_mutex_lock(&s->mu);
	for (j = first; j; j = j->next)
		if (j->status != SV_SAVED)
			break_chain(s, j->chain);
	pthread_mutex_unlock(&s->mu);
}

static PyObject *Saver_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "lock", "batch", NULL };
	Py_ssize_t batch = 32;
	SaverObject *self;
	PyObject *lock;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|n:Saver", kwlist, &LockType, &lock,
					 &batch))
		return NULL;
	if (batch < 1) {
		PyErr_Format(PyExc_ValueError, "Saver: batch %zd; give 1 or more blocks", batch);
		return NULL;
	}
	self = (SaverObject *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	Py_INCREF(lock);
	self->lock = (LockObject *)lock;
	self->batch = (size_t)batch;
	pthread_mutex_init(&self->mu, NULL);
	pthread_cond_init(&self->cv, NULL);
	return (PyObject *)self;
}

static void Saver_dealloc(SaverObject *self)
{
	struct sv_list *l[] = { &self->queue, &self->done };
	struct sv_job *j, *next;
	size_t i;

	/* no thread runs: run() holds a reference */
	for (i = 0; i < 2; i++)
		for (j = l[i]->head; j; j = next) {
			next = j->next;
			job_free(j);
		}
	free(self->broken);
	free(self->batches);
	pthread_cond_destroy(&self->cv);
	pthread_mutex_destroy(&self->mu);
	Py_XDECREF(self->lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* job_parse() - (id, chain, keys, parent, blocks, tokens) into a new job
 * of g; NULL with a Python error. */
static struct sv_job *job_parse(PyObject *o, struct sv_group *g, unsigned int block_tokens)
{
	PyObject *okeys, *oparent, *oblocks, *otok;
	struct sv_job *j = PyMem_Calloc(1, sizeof(*j));
	Py_ssize_t n;
	long long chain;

	if (!j)
		return (struct sv_job *)PyErr_NoMemory();
	if (!PyArg_ParseTuple(o, "LLOOOO;Saver.submit: a job is (id, chain, keys, parent, "
			      "blocks, tokens)", &j->id, &chain, &okeys, &oparent, &oblocks,
			      &otok) ||
	    opt_key(oparent, &j->parent_key, &j->parent, "parent") < 0)
		goto fail;
	j->keys = keys_from(okeys, &n);
	if (!j->keys)
		goto fail;
	j->chain = chain;
	j->n = (size_t)n;
	j->blocks = int64s(oblocks, &n, "Saver.submit: blocks");
	if (!j->blocks)
		goto fail;
	if (tokens_get(otok, &j->tok) < 0)
		goto fail;
	j->has_tok = otok != Py_None;
	if (j->has_tok && (size_t)j->tok.n != j->n * block_tokens) {
		PyErr_Format(PyExc_ValueError, "Saver.submit: job %lld has %zd token ids for %zu "
			     "blocks of %u tokens: give each block's, or None", j->id, j->tok.n,
			     j->n, block_tokens);
		goto fail;
	}
	j->status = -1;
	j->g = g;
	return j;
fail:
	j->g = NULL;
	job_free(j);
	return NULL;
}

static PyObject *Saver_submit(SaverObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "client", "jobs", "dst_layers", "dst_strides", "src_layers",
				  "src_strides", "heads", "tokens", "run", "threads", "run_v",
				  "priority", NULL };
	PyObject *client, *ojobs, *odl, *ods, *osl, *oss, *fast;
	size_t heads, tokens, run;
	Py_ssize_t run_v = -1, njobs, i;
	unsigned int threads = 1, prio = KVP_PRIO_NORMAL;
	struct sv_list add = { 0 };
	struct sv_group *g;
	struct sv_job *j;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OOOOOnnn|InI:submit", kwlist, &ClientType,
					 &client, &ojobs, &odl, &ods, &osl, &oss, &heads, &tokens,
					 &run, &threads, &run_v, &prio))
		return NULL;
	if (!client_ok((ClientObject *)client))
		return NULL;
	fast = PySequence_Fast(ojobs, "Saver.submit: jobs must be a sequence");
	if (!fast)
		return NULL;
	njobs = PySequence_Fast_GET_SIZE(fast);
	g = PyMem_Calloc(1, sizeof(*g));
	if (!g) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	Py_INCREF(client);
	g->client = client;
	g->prio = prio;
	g->jobs = 1;	/* this call's, until its jobs are queued */
	if (bc_plan_parse(&g->plan, odl, ods, osl, oss, heads, tokens, run, run_v, threads) < 0)
		goto fail;
	for (i = 0; i < njobs; i++) {
		j = job_parse(PySequence_Fast_GET_ITEM(fast, i), g,
			      kvp_block_tokens(((ClientObject *)client)->c));
		if (!j)
			goto fail;
		g->jobs++;
		list_add(&add, j);
	}
	Py_DECREF(fast);
	pthread_mutex_lock(&self->mu);
	list_cat(&self->queue, &add);
	pthread_cond_broadcast(&self->cv);
	pthread_mutex_unlock(&self->mu);
	if (--g->jobs == 0) {	/* no jobs */
		bc_plan_free(&g->plan);
		Py_DECREF(g->client);
		PyMem_Free(g);
	}
	Py_RETURN_NONE;
fail:
	Py_DECREF(fast);
	while ((j = add.head)) {
		add.head = j->next;
		job_free(j);
	}
	if (--g->jobs == 0) {
		bc_plan_free(&g->plan);
		Py_DECREF(g->client);
		PyMem_Free(g);
	}
	return NULL;
}

/* take() - the next batch off the queue into running (mu held): jobs of
 * one submit, up to batch blocks (a first job of more, alone). */
static void take(SaverObject *s)
{
	struct sv_job *j = s->queue.head;
	size_t n = 0;

	while (j && (!s->running.head || (j->g == s->running.head->g && n + j->n <= s->batch))) {
		s->queue.head = j->next;
		if (!s->queue.head)
			s->queue.tail = NULL;
		n += j->n;
		list_add(&s->running, j);
		j = s->queue.head;
	}
}

static PyObject *Saver_run(SaverObject *self, PyObject *unused)
{
	struct sv_batch rec;
	double t0;

	(void)unused;
	pthread_mutex_lock(&self->mu);
	if (self->in_run || self->stop) {
		pthread_mutex_unlock(&self->mu);
		PyErr_SetString(PyExc_RuntimeError, self->in_run ? "Saver.run: another thread runs "
				"it" : "Saver.run: the Saver was stopped");
		return NULL;
	}
	self->in_run = true;
	Py_BEGIN_ALLOW_THREADS
	for (;;) {
		while (!self->queue.head && !self->stop)
			pthread_cond_wait(&self->cv, &self->mu);
		if (self->stop)
			break;
		take(self);
		t0 = now_s();
		while (self->delay > 0 && !self->stop && now_s() - t0 < self->delay) {
			struct timespec ts = deadline(0.005);	/* tests: delay may change */

			pthread_cond_timedwait(&self->cv, &self->mu, &ts);
		}
		pthread_mutex_unlock(&self->mu);
		t0 = now_s();
		rec.first = self->running.head->id;
		run_batch(self, self->running.head, &rec);
		rec.seconds = now_s() - t0;
		pthread_mutex_lock(&self->mu);
		if (self->nbatches == self->capbatches) {
			size_t cap = self->capbatches ? 2 * self->capbatches : 64;
			struct sv_batch *b = realloc(self->batches, cap * sizeof(*b));

			if (b) {
				self->batches = b;
				self->capbatches = cap;
			}
		}
		if (self->nbatches < self->capbatches)
			self->batches[self->nbatches++] = rec;
		list_cat(&self->done, &self->running);
		pthread_cond_broadcast(&self->cv);
	}
	self->in_run = false;
	pthread_cond_broadcast(&self->cv);
	pthread_mutex_unlock(&self->mu);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

/* job_result() - (id, status, saved, dups, what, error) of a reaped job. */
static PyObject *job_result(struct sv_job *j)
{
	PyObject *e;
	char what[32];

	if (j->status != SV_FAILED && j->status != SV_PARTIAL)
		return Py_BuildValue("(Linnss)", j->id, j->status, (Py_ssize_t)j->saved,
				     (Py_ssize_t)j->dups, NULL, NULL);
	snprintf(what, sizeof(what), "save: %s", j->what);
	if (!strcmp(j->what, "copy"))
		e = PyObject_CallFunction(PyExc_ValueError, "s", j->err);
	else
		e = error_object(j->rc, what, j->err);
	if (!e)
		return NULL;
	return Py_BuildValue("(LinnsN)", j->id, j->status, (Py_ssize_t)j->saved,
			     (Py_ssize_t)j->dups, j->what, e);
}

static PyObject *Saver_reap(SaverObject *self, PyObject *unused)
{
	struct sv_list done;
	struct sv_batch *b;
	size_t nb, i;
	PyObject *jobs = NULL, *batches = NULL, *r;
	struct sv_job *j;

	(void)unused;
	pthread_mutex_lock(&self->mu);
	done = self->done;
	self->done.head = self->done.tail = NULL;
	b = self->batches;
	nb = self->nbatches;
	self->batches = NULL;
	self->nbatches = self->capbatches = 0;
	pthread_mutex_unlock(&self->mu);
	jobs = PyList_New(0);
	batches = PyList_New(0);
	for (j = done.head; j; j = done.head) {
		done.head = j->next;
		r = jobs && batches ? job_result(j) : NULL;
		if (!r || PyList_Append(jobs, r) < 0)
			Py_CLEAR(jobs);
		Py_XDECREF(r);
		job_free(j);
	}
	for (i = 0; i < nb && jobs && batches; i++) {
		PyObject *e = Py_None;

		if (b[i].rel_rc < 0)
			e = error_object(b[i].rel_rc, "save: release", b[i].rel_err);
		else
			Py_INCREF(e);
		r = e ? Py_BuildValue("(dNL)", b[i].seconds, e, b[i].first) : NULL;
		if (!r || PyList_Append(batches, r) < 0)
			Py_CLEAR(batches);
		Py_XDECREF(r);
	}
	free(b);
	if (!jobs || !batches) {
		Py_XDECREF(jobs);
		Py_XDECREF(batches);
		if (!PyErr_Occurred())
			PyErr_NoMemory();
		return NULL;
	}
	return Py_BuildValue("(NN)", jobs, batches);
}

static bool in(const int64_t *v, Py_ssize_t n, int64_t x)
{
	Py_ssize_t i;

	for (i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/* unqueue() - the queued jobs of chains (all with all) off the queue
 * (mu held), into out. */
static void unqueue(SaverObject *s, const int64_t *chains, Py_ssize_t n, bool all,
		    struct sv_list *out)
{
	struct sv_list keep = { 0 };
	struct sv_job *j, *next;

	for (j = s->queue.head; j; j = next) {
		next = j->next;
		list_add(all || in(chains, n, j->chain) ? out : &keep, j);
	}
	s->queue = keep;
}

/* dropped_ids() - the ids of out's jobs, freed (the GIL held). */
static PyObject *dropped_ids(struct sv_list *out)
{
	PyObject *ids = PyList_New(0), *v;
	struct sv_job *j;

	while ((j = out->head)) {
		out->head = j->next;
		v = ids ? PyLong_FromLongLong(j->id) : NULL;
		if (!v || PyList_Append(ids, v) < 0)
			Py_CLEAR(ids);
		Py_XDECREF(v);
		job_free(j);
	}
	return ids;
}

static bool running_any(SaverObject *s, const int64_t *chains, Py_ssize_t n)
{
	struct sv_job *j;

	for (j = s->running.head; j; j = j->next)
		if (in(chains, n, j->chain))
			return true;
	return false;
}

static PyObject *Saver_drop(SaverObject *self, PyObject *arg)
{
	struct sv_list out = { 0 };
	Py_ssize_t n = -1, i;
	int64_t *chains = int64s(arg, &n, "Saver.drop: chains");

	if (!chains)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	unqueue(self, chains, n, false, &out);
	while (running_any(self, chains, n))
		pthread_cond_wait(&self->cv, &self->mu);
	for (i = 0; i < n; i++)
		forget_chain(self, chains[i]);
	pthread_mutex_unlock(&self->mu);
	Py_END_ALLOW_THREADS
	PyMem_Free(chains);
	return dropped_ids(&out);
}

static PyObject *Saver_forget(SaverObject *self, PyObject *arg)
{
	Py_ssize_t n = -1, i;
	int64_t *chains = int64s(arg, &n, "Saver.forget: chains");

	if (!chains)
		return NULL;
	pthread_mutex_lock(&self->mu);
	for (i = 0; i < n; i++)
		forget_chain(self, chains[i]);
	pthread_mutex_unlock(&self->mu);
	PyMem_Free(chains);
	Py_RETURN_NONE;
}

static PyObject *Saver_wait_idle(SaverObject *self, PyObject *arg)
{
	double timeout = PyFloat_AsDouble(arg);
	struct timespec until;
	bool idle;

	if (timeout == -1.0 && PyErr_Occurred())
		return NULL;
	until = deadline(timeout > 1e6 ? 1e6 : timeout > 0 ? timeout : 0);
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	while ((self->queue.head && self->in_run) || self->running.head)
		if (timeout <= 0 || pthread_cond_timedwait(&self->cv, &self->mu, &until) != 0)
			break;
	idle = !self->queue.head && !self->running.head;
	pthread_mutex_unlock(&self->mu);
	Py_END_ALLOW_THREADS
	return PyBool_FromLong(idle);
}

static PyObject *Saver_stop(SaverObject *self, PyObject *unused)
{
	struct sv_list out = { 0 };

	(void)unused;
	pthread_mutex_lock(&self->mu);
	unqueue(self, NULL, 0, true, &out);
	self->stop = true;
	pthread_cond_broadcast(&self->cv);
	pthread_mutex_unlock(&self->mu);
	return dropped_ids(&out);
}

static PyMethodDef Saver_methods[] = {
	{ "submit", (PyCFunction)(void (*)(void))Saver_submit, METH_VARARGS | METH_KEYWORDS,
	  "submit(client, jobs, dst_layers, dst_strides, src_layers, src_strides, heads, "
	  "tokens, run, threads=1, run_v=-1, priority=NORMAL) - queue jobs (id, chain, keys, "
	  "parent, blocks, tokens): each is saved as Client.save_blocks() saves one, through "
	  "client, by the thread in run(). A job after one of its chain that failed or was "
	  "skipped is skipped." },
	{ "run", (PyCFunction)Saver_run, METH_NOARGS,
	  "run() - the saving thread's loop, without the GIL, until stop()." },
	{ "reap", (PyCFunction)Saver_reap, METH_NOARGS,
	  "reap() -> ([(id, status, saved, dups, what, error)], [(seconds, release error, "
	  "first job's id)]): "
	  "the jobs and batches done since the last call. status: 0 saved, 1 skipped (its "
	  "chain broke), 2 failed (what: alloc, page_index, copy, publish; error: the "
	  "exception), 3 the Client was closed, 4 partial (saved and dups of its leading "
	  "blocks; the rest found no room: what alloc, error NoSpace)." },
	{ "drop", (PyCFunction)Saver_drop, METH_O,
	  "drop(chains) -> [id]: the queued jobs of these chains are dropped (their ids); "
	  "waits for the batch that runs, if it holds some; the chains are forgotten." },
	{ "forget", (PyCFunction)Saver_forget, METH_O,
	  "forget(chains) - these chains will have no more jobs: their failures are "
	  "forgotten." },
	{ "wait_idle", (PyCFunction)Saver_wait_idle, METH_O,
	  "wait_idle(timeout) -> bool: until nothing is queued or running (True), or "
	  "timeout seconds." },
	{ "stop", (PyCFunction)Saver_stop, METH_NOARGS,
	  "stop() -> [id]: run() returns after its batch; the queued jobs are dropped (their "
	  "ids)." },
	{ NULL, NULL, 0, NULL },
};

static PyObject *Saver_get_delay(SaverObject *self, void *unused)
{
	double d;

	(void)unused;
	pthread_mutex_lock(&self->mu);
	d = self->delay;
	pthread_mutex_unlock(&self->mu);
	return PyFloat_FromDouble(d);
}

static int Saver_set_delay(SaverObject *self, PyObject *v, void *unused)
{
	double d = v ? PyFloat_AsDouble(v) : 0.0;

	(void)unused;
	if (d == -1.0 && PyErr_Occurred())
		return -1;
	pthread_mutex_lock(&self->mu);
	self->delay = d;
	pthread_cond_broadcast(&self->cv);	/* a batch waiting goes at once */
	pthread_mutex_unlock(&self->mu);
	return 0;
}

static PyGetSetDef Saver_getset[] = {
	{ "delay", (getter)Saver_get_delay, (setter)Saver_set_delay,
	  "seconds each batch waits, out of the queue, before it runs: a slow pool, for "
	  "tests (0); a change reaches a batch that waits", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject SaverType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool._kvpool.Saver",
	.tp_basicsize = sizeof(SaverObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Saver(lock, batch=32) - saves through Clients on a thread that never takes "
		  "the GIL (saver.c).",
	.tp_new = Saver_new,
	.tp_dealloc = (destructor)Saver_dealloc,
	.tp_methods = Saver_methods,
	.tp_getset = Saver_getset,
};
