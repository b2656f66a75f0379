/* SPDX-License-Identifier: MIT */
/*
 * client.c - kvpool.Client (one kvp_client): connecting, closing (not
 * under a live view), fork's guard, and the methods of pages and sharing
 * (alloc, release, retain, cow, acquire, publish, block_keys), the views
 * of the pool (view, page_index, page_at, page_address) and the type
 * itself. Inspection and admin are client_admin.c's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "_kvpool.h"
#include "blockcopy.h"
#include "kvpool.h"
#include "kvpool_kernels.h"
#include "kvpool_wire.h"

/* --- fork ---------------------------------------------------------------- */

/* Bumped in every child: a Client remembers the value it was made under. */
volatile unsigned long fork_gen;

void in_child(void)
{
	fork_gen++;
}

/* --- Client -------------------------------------------------------------- */

/* client_ok() - true when c may be used; else raises. */
bool client_ok(ClientObject *self)
{
	if (!self->c) {
		PyErr_SetString(NotConnected, "the Client is closed");
		return false;
	}
	if (self->gen != fork_gen) {
		PyErr_SetString(PyExc_RuntimeError, "this Client was made before fork(): its "
				"connection and mappings belong to the parent; make a new Client "
				"in the child");
		return false;
	}
	return true;
}

int Client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "socket", "namespace", "layers", "kv_heads", "head_dim",
				  "block_tokens", "dtype", "model", "key_scheme", "key_seed",
				  "readonly", "memory", "head_dim_v", "name", "timeout", NULL };
	const char *sock = NULL, *ns = NULL, *model = NULL, *seed = NULL, *name = NULL;
	unsigned int layers = 0, kv_heads = 0, head_dim = 0, block_tokens = 0, dtype = 0,
		     scheme = 0, memory = 0, head_dim_v = 0;
	int readonly = 0, rc;
	double timeout = 0.0;
	uint32_t ms;
	char err[ERRBUF];
	kvp_geometry g;
	kvp_client *c = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zz$IIIIIzIzpIIzd", kwlist, &sock, &ns,
					 &layers, &kv_heads, &head_dim, &block_tokens, &dtype,
					 &model, &scheme, &seed, &readonly, &memory, &head_dim_v,
					 &name, &timeout))
		return -1;
	if (!(timeout >= 0.0 && timeout <= KVP_TIMEOUT_MAX_MS / 1000.0)) {
		PyObject *v = PyFloat_FromDouble(timeout);

		if (v)
			PyErr_Format(PyExc_ValueError, "Client(timeout=%R): the limit is 0 (none) "
				     "to %u seconds", v, KVP_TIMEOUT_MAX_MS / 1000);
		Py_XDECREF(v);
		return -1;
	}
	/* a limit shorter than a millisecond is one, not none */
	ms = timeout > 0.0 && timeout < 0.001 ? 1 : (uint32_t)(timeout * 1000.0);
	if (self->c) {
		PyErr_SetString(PyExc_RuntimeError, "Client.__init__ called twice");
		return -1;
	}
	if (ns && !model) {
		PyErr_SetString(InvalidArgument, "a namespace needs its geometry: model, "
				"layers, kv_heads, head_dim, block_tokens and dtype");
		return -1;
	}
	memset(&g, 0, sizeof(g));
	g.layers = layers;
	g.kv_heads = kv_heads;
	g.head_dim = head_dim;
	g.block_tokens = block_tokens;
	g.dtype = dtype;
	g.model = model;
	g.key_scheme = scheme;
	g.key_seed = seed;
	g.memory = memory;
	g.head_dim_v = head_dim_v;
	Py_BEGIN_ALLOW_THREADS
	rc = kvp_connect_timeout(sock, ns, ns ? &g : NULL, name, ms, &c);
	if (rc < 0)
		SAVE_ERROR(err);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		if (rc == -ENOENT) {	/* no socket: no daemon there */
			PyObject *a = Py_BuildValue("(iN)", ENOENT, PyUnicode_FromFormat(
							    "kvp_connect: %s: %s", kvp_strerror(rc), err));

			if (a)
				PyErr_SetObject(DaemonGone, a);
			Py_XDECREF(a);
			return -1;
		}
		raise_kvp(rc, "kvp_connect", err);
		return -1;
	}
	self->c = c;
	self->gen = fork_gen;
	self->readonly = readonly;
	kvp_info(c, &self->info);
	return 0;
}

/* client_close() - kvp_close() unless views are alive (BufferError, as
 * mmap.close() does). */
static int client_close(ClientObject *self)
{
	kvp_client *c = self->c;

	if (!c)
		return 0;
	if (self->views) {
		PyErr_Format(PyExc_BufferError, "cannot close the Client: %zd page view%s still "
			     "alive, the page's memory would go under %s (del the arrays, tensors "
			     "and memoryviews made from %s first)", self->views,
			     self->views == 1 ? " is" : "s are", self->views == 1 ? "it" : "them",
			     self->views == 1 ? "it" : "them");
		return -1;
	}
	self->c = NULL;
	if (self->gen != fork_gen)
		return 0;	/* the parent's: leave its socket alone */
	Py_BEGIN_ALLOW_THREADS
	kvp_close(c);
	Py_END_ALLOW_THREADS
	return 0;
}

static void Client_dealloc(ClientObject *self)
{
	/* no view can be alive: each holds a reference */
	if (self->c && self->gen == fork_gen)
		kvp_close(self->c);
	self->c = NULL;
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Client_close(ClientObject *self, PyObject *unused)
{
	(void)unused;
	if (client_close(self) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* --- Client methods ------------------------------------------------------ */

static PyObject *Client_alloc(ClientObject *self, PyObject *arg)
{
	Py_ssize_t n = PyLong_AsSsize_t(arg);
	char err[ERRBUF];
	kvp_page *p;
	PyObject *l;
	int rc;

	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (!client_ok(self))
		return NULL;
	if (n < 0) {
		PyErr_Format(InvalidArgument, "alloc(%zd): the count must be 0 or more", n);
		return NULL;
	}
	p = PyMem_Malloc(((size_t)n + 1) * sizeof(*p));
	if (!p)
		return PyErr_NoMemory();
	CALL(rc, kvp_alloc(self->c, (size_t)n, p));
	if (rc < 0) {
		PyMem_Free(p);
		return raise_kvp(rc, "alloc", err);
	}
	l = handles_to_list(p, n);
	PyMem_Free(p);
	return l;
}

/* pages_call() - release / retain: a sequence of handles in, nothing out. */
static PyObject *pages_call(ClientObject *self, PyObject *arg,
			    int (*fn)(kvp_client *, const kvp_page *, size_t), const char *what)
{
	char err[ERRBUF];
	Py_ssize_t n;
	kvp_page *p;
	int rc;

	if (!client_ok(self))
		return NULL;
	p = handles_from(arg, &n);
	if (!p)
		return NULL;
	CALL(rc, fn(self->c, p, (size_t)n));
	PyMem_Free(p);
	if (rc < 0)
		return raise_kvp(rc, what, err);
	Py_RETURN_NONE;
}

static PyObject *Client_release(ClientObject *self, PyObject *arg)
{
	return pages_call(self, arg, kvp_release, "release");
}

static PyObject *Client_retain(ClientObject *self, PyObject *arg)
{
	return pages_call(self, arg, kvp_retain, "retain");
}

static PyObject *Client_cow(ClientObject *self, PyObject *arg)
{
	char err[ERRBUF];
	kvp_page *p, *out;
	PyObject *l = NULL;
	Py_ssize_t n;
	int rc;

	if (!client_ok(self))
		return NULL;
	p = handles_from(arg, &n);
	if (!p)
		return NULL;
	out = PyMem_Malloc(((size_t)n + 1) * sizeof(*out));
	if (!out) {
		PyMem_Free(p);
		return PyErr_NoMemory();
	}
	CALL(rc, kvp_cow(self->c, p, (size_t)n, out));
	if (rc < 0)
		raise_kvp(rc, "cow", err);
	else
		l = handles_to_list(out, n);
	PyMem_Free(p);
	PyMem_Free(out);
	return l;
}

/* acquire_opts() - this call's options: the client's, changed by the
 * keywords given (None: as the client's). 1 when any was, 0 when none,
 * -1 with an exception. */
static int acquire_opts(ClientObject *self, kvp_acquire_opts *o, PyObject *owait,
			PyObject *ohandoff, PyObject *oload, PyObject *orate, PyObject *omax,
			PyObject *osrc)
{
	const kvp_key *hk;
	kvp_key k;
	double secs;

	if (owait == Py_None && ohandoff == Py_None && oload == Py_None &&
	    orate == Py_None && omax == Py_None && osrc == Py_None)
		return 0;
	/* the client's lock, which a waiting acquire on another thread holds
	 * (for up to its wait): not with the GIL */
	Py_BEGIN_ALLOW_THREADS
	kvp_acquire_defaults(self->c, o, sizeof(*o));
	Py_END_ALLOW_THREADS
	if (owait != Py_None) {
		secs = PyFloat_AsDouble(owait);
		if (secs == -1.0 && PyErr_Occurred())
			return -1;
		if (!(secs >= 0.0 && secs <= KVP_WIRE_WAIT_MAX_MS / 1000.0)) {
			PyErr_Format(PyExc_ValueError, "acquire(wait=%R): the wait is 0 to %u "
				     "seconds", owait, KVP_WIRE_WAIT_MAX_MS / 1000);
			return -1;
		}
		/* a wait shorter than a millisecond is one, not none */
		o->wait_ms = secs > 0.0 && secs < 0.001 ? 1 : (uint32_t)(secs * 1000.0);
		o->flags = o->wait_ms ? o->flags | KVP_ACQUIRE_WAIT : o->flags & ~KVP_ACQUIRE_WAIT;
	}
	if (ohandoff != Py_None) {
		if (opt_key(ohandoff, &k, &hk, "handoff") < 0)
			return -1;
		if (!(o->flags & KVP_ACQUIRE_WAIT)) {
			PyErr_SetString(PyExc_ValueError, "acquire(handoff=...): a handoff is "
					"what a wait is for: give wait=SECONDS, more than 0");
			return -1;
		}
		o->flags |= KVP_ACQUIRE_HANDOFF;
		o->handoff = k;
	}
	if (oload != Py_None) {
		int load = PyObject_IsTrue(oload);

		if (load < 0)
			return -1;
		o->flags = load ? o->flags | KVP_ACQUIRE_LOAD : o->flags & ~KVP_ACQUIRE_LOAD;
	}
	if (orate != Py_None) {
		unsigned long v = PyLong_AsUnsignedLong(orate);

		if (PyErr_Occurred() || v > UINT32_MAX) {
			PyErr_Format(PyExc_ValueError, "acquire(prefill_rate=%R): tokens per "
				     "second, 0 to %u", orate, UINT32_MAX);
			return -1;
		}
		o->prefill_rate = (uint32_t)v;
	}
	if (omax != Py_None) {
		unsigned long v = PyLong_AsUnsignedLong(omax);

		if (PyErr_Occurred() || v > UINT32_MAX) {
			PyErr_Format(PyExc_ValueError, "acquire(remote_max_us=%R): 0 to %u",
				     omax, UINT32_MAX);
			return -1;
		}
		o->remote_max_us = (uint32_t)v;
	}
	return 1;
}

static PyObject *Client_acquire(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "tokens", "parent", "wait", "handoff", "load",
				  "prefill_rate", "remote_max_us", "sources", NULL };
	PyObject *okeys, *otok = NULL, *oparent = NULL, *pages = NULL, *res = NULL;
	PyObject *owait = Py_None, *ohandoff = Py_None, *oload = Py_None;
	PyObject *orate = Py_None, *omax = Py_None, *osrc = Py_None;
	uint8_t *src = NULL;
	int want_src = 0;
	const kvp_key *parent;
	kvp_partial partial = { 0, 0 };
	kvp_acquire_opts o;
	struct tokens t;
	char err[ERRBUF];
	kvp_key pk, *keys;
	kvp_page *out;
	Py_ssize_t n;
	int rc, with;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO$OOOOOO", kwlist, &okeys, &otok,
					 &oparent, &owait, &ohandoff, &oload, &orate, &omax,
					 &osrc))
		return NULL;
	if (!client_ok(self) || opt_key(oparent, &pk, &parent, "parent") < 0)
		return NULL;
	if (osrc != Py_None && (want_src = PyObject_IsTrue(osrc)) < 0)
		return NULL;
	/* sources: a per-call option too (the client's others with it) */
	with = acquire_opts(self, &o, owait, ohandoff, oload, orate, omax,
			    want_src ? Py_True : Py_None);
	if (with < 0)
		return NULL;
	keys = keys_from(okeys, &n);
	if (!keys)
		return NULL;
	if (tokens_get(otok, &t) < 0) {
		PyMem_Free(keys);
		return NULL;
	}
	out = PyMem_Malloc(((size_t)n + 1) * sizeof(*out));
	src = want_src ? PyMem_Malloc((size_t)n + 1) : NULL;
	if (!out || (want_src && !src)) {
		PyErr_NoMemory();
		goto done;
	}
	if (want_src) {
		o.flags |= KVP_ACQUIRE_SOURCES;
		o.sources = src;
	}
	if (with)
		CALL(rc, kvp_acquire_with(self->c, parent, keys, (size_t)n, t.v, (size_t)t.n,
					  out, t.n ? &partial : NULL, &o, sizeof(o)));
	else
		CALL(rc, kvp_acquire(self->c, parent, keys, (size_t)n, t.v, (size_t)t.n, out,
				     t.n ? &partial : NULL));
	if (rc < 0) {
		raise_kvp(rc, "acquire", err);
		goto done;
	}
	pages = handles_to_list(out, rc);
	if (!pages)
		goto done;
	if (want_src && partial.tokens)
		res = Py_BuildValue("(N(KI)y#)", pages, (unsigned long long)partial.page,
				    partial.tokens, (const char *)src, (Py_ssize_t)rc);
	else if (want_src)
		res = Py_BuildValue("(NOy#)", pages, Py_None, (const char *)src, (Py_ssize_t)rc);
	else if (partial.tokens)
		res = Py_BuildValue("(N(KI))", pages, (unsigned long long)partial.page,
				    partial.tokens);
	else
		res = Py_BuildValue("(NO)", pages, Py_None);
done:
	PyMem_Free(src);
	PyMem_Free(out);
	PyMem_Free(keys);
	tokens_release(&t);
	return res;
}

static PyObject *Client_contains(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "parent", NULL };
	PyObject *okeys, *oparent = NULL;
	const kvp_key *parent;
	char err[ERRBUF];
	kvp_key pk, *keys;
	Py_ssize_t n;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &okeys, &oparent))
		return NULL;
	if (!client_ok(self) || opt_key(oparent, &pk, &parent, "parent") < 0)
		return NULL;
	keys = keys_from(okeys, &n);
	if (!keys)
		return NULL;
	CALL(rc, kvp_contains(self->c, parent, keys, (size_t)n));
	PyMem_Free(keys);
	if (rc < 0)
		return raise_kvp(rc, "contains", err);
	return PyLong_FromLong(rc);
}

static PyObject *Client_handoff_issue(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "last_key", "blocks", "ttl", NULL };
	PyObject *okey;
	unsigned int blocks;
	double ttl;
	char err[ERRBUF];
	kvp_ticket t;
	kvp_key k;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OId", kwlist, &okey, &blocks, &ttl))
		return NULL;
	if (!(ttl >= 0.001 && ttl <= KVP_WIRE_WAIT_MAX_MS / 1000.0) || !blocks) {
		PyObject *t = PyFloat_FromDouble(ttl);

		if (t)
			PyErr_Format(PyExc_ValueError, "handoff_issue(blocks=%u, ttl=%R): a ticket "
				     "is for 1 block or more and holds 0.001 to %u seconds",
				     blocks, t, KVP_WIRE_WAIT_MAX_MS / 1000);
		Py_XDECREF(t);
		return NULL;
	}
	if (!client_ok(self) || key_from(okey, &k, "last_key") < 0)
		return NULL;
	CALL(rc, kvp_handoff_issue(self->c, &k, blocks, (uint32_t)(ttl * 1000.0), &t));
	if (rc < 0)
		return raise_kvp(rc, "handoff_issue", err);
	return PyBytes_FromStringAndSize((const char *)t.b, sizeof(t.b));
}

static PyObject *Client_handoff_check(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "ticket", "last_key", NULL };
	PyObject *okey;
	Py_buffer b;
	char err[ERRBUF];
	uint32_t blocks = 0;
	kvp_ticket t;
	kvp_key k;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*O", kwlist, &b, &okey))
		return NULL;
	if (b.len != KVP_TICKET_BYTES) {
		PyErr_Format(PyExc_ValueError, "handoff_check(): a ticket is %u bytes, not %zd",
			     KVP_TICKET_BYTES, b.len);
		PyBuffer_Release(&b);
		return NULL;
	}
	memcpy(t.b, b.buf, sizeof(t.b));
	PyBuffer_Release(&b);
	if (!client_ok(self) || key_from(okey, &k, "last_key") < 0)
		return NULL;
	CALL(rc, kvp_handoff_check(self->c, &t, &k, &blocks));
	if (rc < 0)
		return raise_kvp(rc, "handoff_check", err);
	return Py_BuildValue("(dI)", rc / 1000.0, blocks);
}

static PyObject *Client_handoff_abandon(ClientObject *self, PyObject *arg)
{
	char err[ERRBUF];
	kvp_key k;
	int rc;

	if (!client_ok(self) || key_from(arg, &k, "key") < 0)
		return NULL;
	CALL(rc, kvp_handoff_abandon(self->c, &k));
	if (rc < 0)
		return raise_kvp(rc, "handoff_abandon", err);
	Py_RETURN_NONE;
}

static PyObject *Client_fileno(ClientObject *self, PyObject *unused)
{
	(void)unused;
	if (!client_ok(self))
		return NULL;
	return PyLong_FromLong(kvp_fd(self->c));
}

static PyObject *Client_set_lookups_counted(ClientObject *self, PyObject *arg)
{
	int counted = PyObject_IsTrue(arg);

	if (counted < 0 || !client_ok(self))
		return NULL;
	kvp_set_lookups_counted(self->c, counted);
	Py_RETURN_NONE;
}

static PyObject *Client_set_acquire_wait(ClientObject *self, PyObject *arg)
{
	double secs = PyFloat_AsDouble(arg);

	if (secs == -1.0 && PyErr_Occurred())
		return NULL;
	if (!(secs >= 0.0 && secs <= KVP_WIRE_WAIT_MAX_MS / 1000.0)) {
		PyErr_Format(PyExc_ValueError, "set_acquire_wait(%R): the wait is 0 to %u "
			     "seconds", arg, KVP_WIRE_WAIT_MAX_MS / 1000);
		return NULL;
	}
	if (!client_ok(self))
		return NULL;
	/* a wait shorter than a millisecond is one, not none */
	kvp_set_acquire_wait(self->c, secs > 0.0 && secs < 0.001 ? 1 : (uint32_t)(secs * 1000.0));
	Py_RETURN_NONE;
}

static PyObject *Client_set_timeout(ClientObject *self, PyObject *arg)
{
	double secs = PyFloat_AsDouble(arg);

	if (secs == -1.0 && PyErr_Occurred())
		return NULL;
	if (!(secs >= 0.0 && secs <= KVP_TIMEOUT_MAX_MS / 1000.0)) {
		PyErr_Format(PyExc_ValueError, "set_timeout(%R): the limit is 0 (none) to %u "
			     "seconds", arg, KVP_TIMEOUT_MAX_MS / 1000);
		return NULL;
	}
	if (!client_ok(self))
		return NULL;
	/* a limit shorter than a millisecond is one, not none */
	kvp_set_timeout(self->c, secs > 0.0 && secs < 0.001 ? 1 : (uint32_t)(secs * 1000.0));
	Py_RETURN_NONE;
}

static PyObject *Client_publish(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "pages", "keys", "parent", "priority", "tokens", NULL };
	PyObject *opages, *okeys, *oparent = NULL, *otok = NULL, *res = NULL;
	unsigned int prio = KVP_PRIO_NORMAL;
	const kvp_key *parent;
	Py_ssize_t n, nk;
	kvp_page *p, *canon = NULL;
	kvp_key pk, *keys = NULL;
	struct tokens t;
	char err[ERRBUF];
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OIO", kwlist, &opages, &okeys, &oparent,
					 &prio, &otok))
		return NULL;
	if (!client_ok(self) || opt_key(oparent, &pk, &parent, "parent") < 0 ||
	    tokens_get(otok, &t) < 0)
		return NULL;
	p = handles_from(opages, &n);
	if (!p) {
		tokens_release(&t);
		return NULL;
	}
	keys = keys_from(okeys, &nk);
	if (!keys)
		goto done;
	if (nk != n) {
		PyErr_Format(PyExc_ValueError, "publish: %zd pages but %zd keys", n, nk);
		goto done;
	}
	if (otok && otok != Py_None &&
	    (size_t)t.n != (size_t)n * kvp_block_tokens(self->c)) {
		PyErr_Format(PyExc_ValueError, "publish: %zd token ids for %zd blocks of %u "
			     "tokens: give each block's (%zu), or none", t.n, n,
			     kvp_block_tokens(self->c),
			     (size_t)n * kvp_block_tokens(self->c));
		goto done;
	}
	canon = PyMem_Malloc(((size_t)n + 1) * sizeof(*canon));
	if (!canon) {
		PyErr_NoMemory();
		goto done;
	}
	CALL(rc, kvp_publish_tokens(self->c, NULL, parent, p, keys,
				    otok && otok != Py_None ? t.v : NULL, (size_t)n, prio,
				    canon));
	if (rc < 0)
		raise_kvp(rc, "publish", err);
	else
		res = handles_to_list(canon, n);
done:
	tokens_release(&t);
	PyMem_Free(p);
	PyMem_Free(keys);
	PyMem_Free(canon);
	return res;
}

static PyObject *Client_publish_partial(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "page", "tokens", "parent", "priority", NULL };
	unsigned long long page;
	unsigned int prio = KVP_PRIO_NORMAL;
	PyObject *otok, *oparent = NULL;
	const kvp_key *parent;
	kvp_page canon = 0;
	struct tokens t;
	char err[ERRBUF];
	kvp_key pk;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "KO|OI", kwlist, &page, &otok, &oparent,
					 &prio))
		return NULL;
	if (!client_ok(self) || opt_key(oparent, &pk, &parent, "parent") < 0 ||
	    tokens_get(otok, &t) < 0)
		return NULL;
	CALL(rc, kvp_publish_partial(self->c, parent, page, t.v, (size_t)t.n, prio, &canon));
	tokens_release(&t);
	if (rc < 0)
		return raise_kvp(rc, "publish_partial", err);
	return PyLong_FromUnsignedLongLong(canon);
}

static PyObject *Client_block_keys(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens", "parent", NULL };
	PyObject *otok, *oparent = NULL, *l;
	const kvp_key *parent;
	struct tokens t;
	kvp_key pk, *keys;
	size_t nblocks;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &otok, &oparent))
		return NULL;
	if (!client_ok(self) || opt_key(oparent, &pk, &parent, "parent") < 0 ||
	    tokens_get(otok, &t) < 0)
		return NULL;
	if (!self->info.block_tokens) {
		tokens_release(&t);
		PyErr_SetString(NotConnected, "block_keys: an inspection session has no "
				"namespace");
		return NULL;
	}
	nblocks = (size_t)t.n / self->info.block_tokens;
	keys = PyMem_Malloc((nblocks + 1) * sizeof(*keys));
	if (!keys) {
		tokens_release(&t);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	rc = kvp_block_keys(self->c, parent, t.v, (size_t)t.n, NULL, 0, keys);
	Py_END_ALLOW_THREADS
	tokens_release(&t);
	if (rc < 0) {
		PyMem_Free(keys);
		return raise_kvp(rc, "block_keys", kvp_last_error());
	}
	l = keys_to_list(keys, rc, false);
	PyMem_Free(keys);
	return l;
}

/* make_view() - a PageView of len bytes at addr for handle h (0: the
 * whole view). */

static PyObject *Client_view(ClientObject *self, PyObject *unused)
{
	kvp_view_t v;
	int rc;

	(void)unused;
	if (!client_ok(self))
		return NULL;
	rc = kvp_view(self->c, &v);
	if (rc < 0)
		return raise_kvp(rc, "view", rc == -ENOTSUP ? "the pool is GPU memory: each "
				 "page's device pointer comes on its own" : NULL);
	return Py_BuildValue("(NKKI)", make_view(self, 0, v.base, (Py_ssize_t)(v.pages * v.stride)),
			     (unsigned long long)v.stride, (unsigned long long)v.pages, v.per_slab);
}

static PyObject *Client_page_index(ClientObject *self, PyObject *arg)
{
	unsigned long long h = PyLong_AsUnsignedLongLong(arg);
	int64_t idx;

	if (h == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!client_ok(self))
		return NULL;
	idx = kvp_page_index(self->c, h);
	if (idx < 0) {
		if (idx == -ESTALE) {
			PyErr_Format(Stale, "page_index: page handle %#llx is not leased by this "
				     "client", h);
			return NULL;
		}
		return raise_kvp((int)idx, "page_index", NULL);
	}
	return PyLong_FromLongLong(idx);
}

static PyObject *Client_page_at(ClientObject *self, PyObject *arg)
{
	unsigned long long i = PyLong_AsUnsignedLongLong(arg);
	kvp_page h;

	if (i == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!client_ok(self))
		return NULL;
	h = kvp_page_at(self->c, i);
	if (!h)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(h);
}

/* held_address() - the address of the page of handle arg, which this
 * client holds (*h its handle); NULL with an exception when not. */
void *held_address(ClientObject *self, PyObject *arg, unsigned long long *h)
{
	void *addr;

	*h = PyLong_AsUnsignedLongLong(arg);
	if ((*h == (unsigned long long)-1 && PyErr_Occurred()) || !client_ok(self))
		return NULL;
	addr = kvp_page_ptr(self->c, *h);
	if (!addr)
		PyErr_Format(Stale, "page handle %#llx is not leased by this client (stale, "
			     "forged or released)", *h);
	return addr;
}

static PyObject *Client_page_address(ClientObject *self, PyObject *arg)
{
	unsigned long long h;
	void *addr = held_address(self, arg, &h);

	return addr ? PyLong_FromVoidPtr(addr) : NULL;
}

static PyObject *Client_enter(ClientObject *self, PyObject *unused)
{
	(void)unused;
	if (!client_ok(self))
		return NULL;
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *Client_exit(ClientObject *self, PyObject *args)
{
	(void)args;
	if (client_close(self) < 0)
		return NULL;
	Py_RETURN_FALSE;
}

static PyObject *Client_closed(ClientObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->c == NULL);
}

static PyObject *Client_protocol(ClientObject *self, void *unused)
{
	(void)unused;
	if (!client_ok(self))
		return NULL;
	return PyLong_FromLong(kvp_protocol(self->c));
}

static PyMethodDef Client_methods[] = {
	{ "close", (PyCFunction)Client_close, METH_NOARGS,
	  "close() - close the connection; the daemon drops every lease. BufferError while "
	  "page views are exported." },
	{ "alloc", (PyCFunction)Client_alloc, METH_O,
	  "alloc(n) -> list of n new private page handles (all or none)." },
	{ "release", (PyCFunction)Client_release, METH_O,
	  "release(pages) - drop one lease on each page (all or none)." },
	{ "retain", (PyCFunction)Client_retain, METH_O,
	  "retain(pages) - one more lease on each page this client holds." },
	{ "cow", (PyCFunction)Client_cow, METH_O,
	  "cow(pages) -> private copies of pages this client holds." },
	{ "acquire", (PyCFunction)(void (*)(void))Client_acquire, METH_VARARGS | METH_KEYWORDS,
	  "acquire(keys, tokens=None, parent=None, *, wait=None, handoff=None, load=None, "
	  "prefill_rate=None, remote_max_us=None) -> (pages, partial): the longest cached "
	  "prefix, and with tokens the partial page after it as (page, tokens) or None. The "
	  "keywords are this call's options (None: the client's, as set_acquire_wait(), "
	  "set_lookups_counted() and set_remote_policy() set them): wait, seconds to wait "
	  "for keys not held yet; handoff, the last key of the handoff the wait is for "
	  "(it ends when the handoff's prefill engine abandons it or hangs up first); "
	  "load, True when the keys were looked up already (not counted as lookups)." },
	{ "publish", (PyCFunction)(void (*)(void))Client_publish, METH_VARARGS | METH_KEYWORDS,
	  "publish(pages, keys, parent=None, priority=1, tokens=None) -> canonical pages; "
	  "tokens: the blocks' token ids (block_tokens each), for KV events." },
	{ "publish_partial", (PyCFunction)(void (*)(void))Client_publish_partial,
	  METH_VARARGS | METH_KEYWORDS,
	  "publish_partial(page, tokens, parent=None, priority=1) -> canonical page." },
	{ "block_keys", (PyCFunction)(void (*)(void))Client_block_keys,
	  METH_VARARGS | METH_KEYWORDS,
	  "block_keys(tokens, parent=None) -> keys (32 bytes each) of the full blocks." },
	{ "info", (PyCFunction)Client_info, METH_NOARGS, "info() -> the session's facts." },
	{ "stats", (PyCFunction)Client_stats, METH_NOARGS, "stats() -> the daemon's counters." },
	{ "contains", (PyCFunction)(void (*)(void))Client_contains, METH_VARARGS | METH_KEYWORDS,
	  "contains(keys, parent=None) -> how many leading keys the daemon holds (pool or "
	  "local tier): nothing leased, no lookup counted." },
	{ "handoff_issue", (PyCFunction)(void (*)(void))Client_handoff_issue,
	  METH_VARARGS | METH_KEYWORDS,
	  "handoff_issue(last_key, blocks, ttl) -> ticket (32 bytes): kvpoold's proof that "
	  "this writer announced a handoff of blocks blocks ending under last_key, for ttl "
	  "seconds (disaggregated prefill: the decode engine checks it before it waits)." },
	{ "handoff_check", (PyCFunction)(void (*)(void))Client_handoff_check,
	  METH_VARARGS | METH_KEYWORDS,
	  "handoff_check(ticket, last_key) -> (seconds_left, blocks): the ticket was issued "
	  "in this namespace for the handoff ending under last_key and holds; else Stale "
	  "(forged, another prompt's or daemon's, expired)." },
	{ "handoff_abandon", (PyCFunction)Client_handoff_abandon, METH_O,
	  "handoff_abandon(key) - the block under key will not be published (its save was "
	  "skipped or failed): waits that lack it end at once, now and for 10 minutes "
	  "(until it is published after all)." },
	{ "fileno", (PyCFunction)Client_fileno, METH_NOARGS,
	  "fileno() -> the connection's socket, for poll() alone: POLLRDHUP/POLLHUP once "
	  "the daemon closed the connection. Never read, write or close it." },
	{ "load_blocks", (PyCFunction)(void (*)(void))Client_load_blocks,
	  METH_VARARGS | METH_KEYWORDS,
	  "load_blocks(keys, parent, blocks, dst_layers, dst_strides, src_layers, src_strides, "
	  "heads, tokens, run, threads=1, run_v=-1) -> (loaded, release_error): acquire keys, "
	  "copy the pages found into blocks (copy_blocks()'s layouts, the pool the source), "
	  "release them, all without the GIL." },
	{ "save_blocks", (PyCFunction)(void (*)(void))Client_save_blocks,
	  METH_VARARGS | METH_KEYWORDS,
	  "save_blocks(jobs, dst_layers, dst_strides, src_layers, src_strides, heads, tokens, "
	  "run, threads=1, run_v=-1, priority=1) -> (results, release_error): alloc pages, copy "
	  "each job's (chain, keys, parent, blocks, tokens) blocks into them, publish each "
	  "job, release, all without the GIL; a result is (saved, deduplicated), the "
	  "publish's exception, or None (skipped: an earlier job of its chain failed)." },
	{ "set_acquire_wait", (PyCFunction)Client_set_acquire_wait, METH_O,
	  "set_acquire_wait(seconds) - acquire() and load_blocks() wait up to seconds for "
	  "keys the daemon does not hold yet (another client is saving them): the answer "
	  "comes once all are held, or at the deadline with what is held then. 0: no wait." },
	{ "set_timeout", (PyCFunction)Client_set_timeout, METH_O,
	  "set_timeout(seconds) - each call waits at most seconds for kvpoold's answer (an "
	  "acquire: plus its wait); one that waits longer closes the connection and raises "
	  "DaemonGone (ETIMEDOUT), its leases dropped by the daemon. 0: no limit." },
	{ "set_lookups_counted", (PyCFunction)Client_set_lookups_counted, METH_O,
	  "set_lookups_counted(counted) - False: acquire() leases what another client of "
	  "the engine looked up already, and is not counted as a lookup." },
	{ "set_remote_policy", (PyCFunction)(void (*)(void))Client_set_remote_policy,
	  METH_VARARGS | METH_KEYWORDS,
	  "set_remote_policy(prefill_rate=0, max_us=0) - when acquire() lets the daemon ask "
	  "its remote tier: prefill_rate tokens/s (0: the daemon's), max_us a cut-off "
	  "(0: none, REMOTE_NEVER: never)." },
	{ "evict", (PyCFunction)(void (*)(void))Client_evict, METH_VARARGS | METH_KEYWORDS,
	  "evict(namespace=None, max=0) -> pages evicted (admin)." },
	{ "list_clients", (PyCFunction)Client_list_clients, METH_NOARGS,
	  "list_clients() -> the daemon's connections, as dicts." },
	{ "list_pages", (PyCFunction)(void (*)(void))Client_list_pages,
	  METH_VARARGS | METH_KEYWORDS,
	  "list_pages(namespace=None, state=0, client=0, limit=0) -> pages, as dicts." },
	{ "list_prefixes", (PyCFunction)(void (*)(void))Client_list_prefixes,
	  METH_VARARGS | METH_KEYWORDS,
	  "list_prefixes(namespace=None, top=0) -> indexed blocks, most hits first." },
	{ "disconnect", (PyCFunction)Client_disconnect, METH_O,
	  "disconnect(client_id) - close another client's connection (admin)." },
	{ "drop_namespace", (PyCFunction)(void (*)(void))Client_drop_namespace,
	  METH_VARARGS | METH_KEYWORDS,
	  "drop_namespace(name, *, force=False) - forget a namespace no client uses (admin); "
	  "force: disconnect its clients first, each told why." },
	{ "page", (PyCFunction)Client_page, METH_O,
	  "page(handle) -> PageView: the page's bytes in place (buffer protocol)." },
	{ "view", (PyCFunction)Client_view, METH_NOARGS,
	  "view() -> (PageView of every page, stride, pages, per_slab): the namespace's "
	  "pages as one array indexed by page number (host backend)." },
	{ "page_index", (PyCFunction)Client_page_index, METH_O,
	  "page_index(handle) -> the page's index in view()." },
	{ "page_address", (PyCFunction)Client_page_address, METH_O,
	  "page_address(handle) -> the page's address: a host pointer, or with the CUDA "
	  "backend a device pointer." },
	{ "page_at", (PyCFunction)Client_page_at, METH_O,
	  "page_at(index) -> the handle this client holds at index, or None." },
	{ "__enter__", (PyCFunction)Client_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Client_exit, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Client_getset[] = {
	{ "closed", (getter)Client_closed, NULL, "True once closed.", NULL },
	{ "protocol", (getter)Client_protocol, NULL, "The protocol version this connection "
	  "speaks: this release's, or the previous one's with a kvpoold of that release, "
	  "which lacks what came later (handoffs: ProtocolNotSupported).", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject ClientType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool._kvpool.Client",
	.tp_basicsize = sizeof(ClientObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "A connection to kvpoold (libkvpool's kvp_client).",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Client_init,
	.tp_dealloc = (destructor)Client_dealloc,
	.tp_methods = Client_methods,
	.tp_getset = Client_getset,
};
