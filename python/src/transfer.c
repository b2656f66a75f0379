/* SPDX-License-Identifier: MIT */
/*
 * transfer.c - Client.load_blocks() and Client.save_blocks(): a connector's
 * whole load (ACQUIRE, copy into the engine's blocks, RELEASE) or save
 * (ALLOC, copy out of them, PUBLISH of each request's blocks, RELEASE) in
 * one call that lets the GIL go once. Between the round trips and the copy
 * no Python runs, so a thread doing it never waits for the GIL while the
 * model runner's thread holds it (Python hands it over every 5 ms), and
 * the model runner never waits for that thread's Python in between.
 *
 * The copies are blockcopy.c's, checked before anything is written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "_kvpool.h"
#include "blockcopy.h"

/* error_object() - the exception raise_kvp() would raise, as a value. */
PyObject *error_object(int rc, const char *what, const char *msg)
{
	PyObject *type, *value, *tb;

	raise_kvp(rc, what, msg);
	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	Py_XDECREF(type);
	Py_XDECREF(tb);
	return value;
}

/* int64s() - a sequence of *n ints (any number with *n < 0, then set)
 * into a new array (PyMem_Free it). */
int64_t *int64s(PyObject *o, Py_ssize_t *np, const char *what)
{
	PyObject *fast = PySequence_Fast(o, what);
	Py_ssize_t i, n;
	int64_t *out;

	if (!fast)
		return NULL;
	n = PySequence_Fast_GET_SIZE(fast);
	if (*np >= 0 && n != *np) {
		PyErr_Format(PyExc_ValueError, "%s: %zd of them for %zd keys", what, n, *np);
		Py_DECREF(fast);
		return NULL;
	}
	*np = n;
	out = PyMem_Malloc(((size_t)n + 1) * sizeof(*out));
	if (!out) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (i = 0; i < n; i++) {
		out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
		if (out[i] == -1 && PyErr_Occurred()) {
			PyMem_Free(out);
			Py_DECREF(fast);
			return NULL;
		}
	}
	Py_DECREF(fast);
	return out;
}

/* page_pairs() - pairs[i] = (blocks[i], index of pages[i]) (or swapped
 * with to_pool): 0, or a negative errno. */
int page_pairs(kvp_client *c, const kvp_page *pages, const int64_t *blocks, size_t n,
	       bool to_pool, int64_t *pairs)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int64_t idx = kvp_page_index(c, pages[i]);

		if (idx < 0)
			return (int)idx;
		pairs[2 * i + to_pool] = blocks[i];
		pairs[2 * i + !to_pool] = idx;
	}
	return 0;
}

PyObject *Client_load_blocks(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "parent", "blocks", "dst_layers", "dst_strides",
				  "src_layers", "src_strides", "heads", "tokens", "run",
				  "threads", "run_v", NULL };
	PyObject *okeys, *oparent, *oblocks, *odl, *ods, *osl, *oss, *res = NULL;
	size_t heads, tokens, run;
	Py_ssize_t run_v = -1, n;
	unsigned int threads = 1;
	int64_t *blocks = NULL, *pairs = NULL;
	kvp_page *pages = NULL;
	kvp_key pk, *keys = NULL;
	const kvp_key *parent;
	char err[ERRBUF], cerr[256] = "", rerr[ERRBUF] = "";
	int rc, prc = 0, rrc = 0, bad = 0;
	struct bc_plan plan = { 0 };

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOnnn|In", kwlist, &okeys, &oparent,
					 &oblocks, &odl, &ods, &osl, &oss, &heads, &tokens,
					 &run, &threads, &run_v))
		return NULL;
	if (!client_ok(self) || opt_key(oparent, &pk, &parent, "parent") < 0)
		return NULL;
	keys = keys_from(okeys, &n);
	if (!keys)
		return NULL;
	blocks = int64s(oblocks, &n, "load_blocks: blocks");
	if (!blocks)
		goto done;
	if (bc_plan_parse(&plan, odl, ods, osl, oss, heads, tokens, run, run_v, threads) < 0)
		goto done;
	pages = PyMem_Malloc(((size_t)n + 1) * sizeof(*pages));
	pairs = PyMem_Malloc(((size_t)n + 1) * 2 * sizeof(*pairs));
	if (!pages || !pairs) {
		PyErr_NoMemory();
		goto done;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = kvp_acquire(self->c, parent, keys, (size_t)n, NULL, 0, pages, NULL);
	if (rc < 0) {
		SAVE_ERROR(err);
	} else if (rc > 0) {
		prc = page_pairs(self->c, pages, blocks, (size_t)rc, false, pairs);
		if (prc < 0)
			SAVE_ERROR(err);
		else if (bc_plan_check(&plan, pairs, (size_t)rc, cerr, sizeof(cerr)) < 0)
			bad = 1;
		else
			bc_plan_copy(&plan, pairs, (size_t)rc);
		rrc = kvp_release(self->c, pages, (size_t)rc);
		if (rrc < 0)
			snprintf(rerr, sizeof(rerr), "%s", kvp_last_error());
	}
	Py_END_ALLOW_THREADS
	if (rc < 0)
		raise_kvp(rc, "load_blocks: acquire", err);
	else if (prc < 0)
		raise_kvp(prc, "load_blocks: page_index", err);
	else if (bad)
		PyErr_SetString(PyExc_ValueError, cerr);
	else if (rrc < 0)
		res = Py_BuildValue("(iN)", rc, error_object(rrc, "load_blocks: release", rerr));
	else
		res = Py_BuildValue("(iO)", rc, Py_None);
done:
	bc_plan_free(&plan);
	PyMem_Free(keys);
	PyMem_Free(blocks);
	PyMem_Free(pages);
	PyMem_Free(pairs);
	return res;
}

/* One request's blocks in save_blocks(). */
struct save_job {
	long chain;		/* jobs of one chain after a failed one are skipped */
	kvp_key parent_key;
	const kvp_key *parent;
	size_t first, n;	/* its keys, pages and blocks: [first, first + n) */
	struct tokens tok;
	bool has_tok;
	int rc;			/* its PUBLISH: 0, a negative errno, 1 skipped */
	char err[ERRBUF];
};

/* save_jobs_parse() - the jobs' keys and blocks into keys[] and blocks[]
 * (grown as they come) and the rest into j[]; -1 with a Python error. */
static int save_jobs_parse(PyObject *fast, Py_ssize_t njobs, struct save_job *j,
			   kvp_key **keys, int64_t **blocks, size_t *total)
{
	Py_ssize_t i;

	for (i = 0; i < njobs; i++) {
		PyObject *okeys, *oparent, *oblocks, *otok;
		Py_ssize_t n;
		kvp_key *k, *nk;
		int64_t *b, *nb;

		if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "lOOOO;save_blocks: a job "
				      "is (chain, keys, parent, blocks, tokens)", &j[i].chain,
				      &okeys, &oparent, &oblocks, &otok))
			return -1;
		if (opt_key(oparent, &j[i].parent_key, &j[i].parent, "parent") < 0)
			return -1;
		k = keys_from(okeys, &n);
		if (!k)
			return -1;
		b = int64s(oblocks, &n, "save_blocks: blocks");
		if (!b) {
			PyMem_Free(k);
			return -1;
		}
		nk = PyMem_Realloc(*keys, (*total + (size_t)n + 1) * sizeof(**keys));
		if (nk)
			*keys = nk;
		nb = nk ? PyMem_Realloc(*blocks, (*total + (size_t)n + 1) * sizeof(**blocks)) :
			  NULL;
		if (nb)
			*blocks = nb;
		if (!nk || !nb) {
			PyMem_Free(k);
			PyMem_Free(b);
			PyErr_NoMemory();
			return -1;
		}
		memcpy(*keys + *total, k, (size_t)n * sizeof(*k));
		memcpy(*blocks + *total, b, (size_t)n * sizeof(*b));
		PyMem_Free(k);
		PyMem_Free(b);
		j[i].first = *total;
		j[i].n = (size_t)n;
		*total += (size_t)n;
		if (tokens_get(otok, &j[i].tok) < 0)
			return -1;
		j[i].has_tok = otok != Py_None;
	}
	return 0;
}

/* save_publish() - PUBLISH each job's pages (GIL released): canon[] gets
 * the canonical pages of the jobs published. */
static void save_publish(kvp_client *c, struct save_job *j, Py_ssize_t njobs,
			 const kvp_page *fresh, const kvp_key *keys, unsigned int prio,
			 kvp_page *canon)
{
	Py_ssize_t i, k;

	for (i = 0; i < njobs; i++) {
		for (k = 0; k < i; k++)
			if (j[k].chain == j[i].chain && j[k].rc != 0)
				break;
		if (k < i) {	/* an earlier job of its chain is not in the pool */
			j[i].rc = 1;
			continue;
		}
		j[i].rc = kvp_publish_tokens(c, NULL, j[i].parent, fresh + j[i].first,
					     keys + j[i].first, j[i].has_tok ? j[i].tok.v : NULL,
					     j[i].n, prio, canon + j[i].first);
		if (j[i].rc < 0)
			SAVE_ERROR(j[i].err);
	}
}

PyObject *Client_save_blocks(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "jobs", "dst_layers", "dst_strides", "src_layers",
				  "src_strides", "heads", "tokens", "run", "threads", "run_v",
				  "priority", NULL };
	PyObject *ojobs, *odl, *ods, *osl, *oss, *fast, *out = NULL, *res = NULL;
	size_t heads, tokens, run, total = 0, nrel = 0, i;
	Py_ssize_t run_v = -1, njobs, k;
	unsigned int threads = 1, prio = KVP_PRIO_NORMAL;
	struct save_job *j = NULL;
	int64_t *blocks = NULL, *pairs = NULL;
	kvp_page *fresh = NULL, *canon = NULL, *rel = NULL;
	kvp_key *keys = NULL;
	char err[ERRBUF], cerr[256] = "", rerr[ERRBUF] = "";
	int rc = 0, prc = 0, rrc = 0, bad = 0;
	struct bc_plan plan = { 0 };

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOnnn|InI", kwlist, &ojobs, &odl, &ods,
					 &osl, &oss, &heads, &tokens, &run, &threads, &run_v,
					 &prio))
		return NULL;
	if (!client_ok(self))
		return NULL;
	fast = PySequence_Fast(ojobs, "save_blocks: jobs must be a sequence");
	if (!fast)
		return NULL;
	njobs = PySequence_Fast_GET_SIZE(fast);
	j = PyMem_Calloc((size_t)njobs + 1, sizeof(*j));
	if (!j) {
		PyErr_NoMemory();
		goto done;
	}
	if (save_jobs_parse(fast, njobs, j, &keys, &blocks, &total) < 0)
		goto done;
	for (k = 0; k < njobs; k++)
		if (j[k].has_tok && (size_t)j[k].tok.n != j[k].n * kvp_block_tokens(self->c)) {
			PyErr_Format(PyExc_ValueError, "save_blocks: job %zd has %zd token ids for "
				     "%zu blocks of %u tokens: give each block's, or None", k,
				     j[k].tok.n, j[k].n, kvp_block_tokens(self->c));
			goto done;
		}
	if (bc_plan_parse(&plan, odl, ods, osl, oss, heads, tokens, run, run_v, threads) < 0)
		goto done;
	fresh = PyMem_Malloc((total + 1) * sizeof(*fresh));
	canon = PyMem_Malloc((total + 1) * sizeof(*canon));
	rel = PyMem_Malloc((2 * total + 1) * sizeof(*rel));
	pairs = PyMem_Malloc((total + 1) * 2 * sizeof(*pairs));
	if (!fresh || !canon || !rel || !pairs) {
		PyErr_NoMemory();
		goto done;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = total ? kvp_alloc(self->c, total, fresh) : 0;
	if (rc < 0) {
		SAVE_ERROR(err);
	} else if (total) {
		prc = page_pairs(self->c, fresh, blocks, total, true, pairs);
		if (prc < 0)
			SAVE_ERROR(err);
		else if (bc_plan_check(&plan, pairs, total, cerr, sizeof(cerr)) < 0)
			bad = 1;
		if (prc == 0 && !bad) {
			bc_plan_copy(&plan, pairs, total);
			save_publish(self->c, j, njobs, fresh, keys, prio, canon);
		}
		/* every fresh page goes (a published one stays in the index),
		 * and the canonical pages of the blocks another client had */
		memcpy(rel, fresh, total * sizeof(*rel));
		nrel = total;
		for (k = 0; prc == 0 && !bad && k < njobs; k++)
			for (i = j[k].first; j[k].rc == 0 && i < j[k].first + j[k].n; i++)
				if (canon[i] != fresh[i])
					rel[nrel++] = canon[i];
		rrc = kvp_release(self->c, rel, nrel);
		if (rrc < 0)
			snprintf(rerr, sizeof(rerr), "%s", kvp_last_error());
	}
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		raise_kvp(rc, "save_blocks: alloc", err);
		goto done;
	}
	if (prc < 0) {
		raise_kvp(prc, "save_blocks: page_index", err);
		goto done;
	}
	if (bad) {
		PyErr_SetString(PyExc_ValueError, cerr);
		goto done;
	}
	out = PyList_New(njobs);
	if (!out)
		goto done;
	for (k = 0; k < njobs; k++) {
		PyObject *r;

		if (j[k].rc == 1) {
			Py_INCREF(Py_None);
			r = Py_None;
		} else if (j[k].rc < 0) {
			r = error_object(j[k].rc, "save_blocks: publish", j[k].err);
		} else {
			size_t dups = 0;

			for (i = j[k].first; i < j[k].first + j[k].n; i++)
				dups += canon[i] != fresh[i];
			r = Py_BuildValue("(nn)", (Py_ssize_t)(j[k].n - dups), (Py_ssize_t)dups);
		}
		if (!r) {
			Py_CLEAR(out);
			goto done;
		}
		PyList_SET_ITEM(out, k, r);
	}
	if (rrc < 0)
		res = Py_BuildValue("(NN)", out, error_object(rrc, "save_blocks: release", rerr));
	else
		res = Py_BuildValue("(NO)", out, Py_None);
done:
	for (k = 0; j && k < njobs; k++)
		tokens_release(&j[k].tok);
	bc_plan_free(&plan);
	PyMem_Free(j);
	PyMem_Free(keys);
	PyMem_Free(blocks);
	PyMem_Free(fresh);
	PyMem_Free(canon);
	PyMem_Free(rel);
	PyMem_Free(pairs);
	Py_DECREF(fast);
	return res;
}
