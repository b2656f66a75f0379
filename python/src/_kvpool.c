/* SPDX-License-Identifier: MIT */
/*
 * _kvpool.c - the CPython binding of libkvpool: the Client type (one
 * kvp_client), PageView (a page's bytes, exported through the buffer
 * protocol without a copy) and the key functions. The Python layer
 * (kvpool/__init__.py) gives them their public shape.
 *
 * Every call that waits on the daemon releases the GIL; kvp_client is
 * thread-safe, and kvp_last_error() is per thread, so it is read before
 * the GIL is taken back by another call on this thread. A client made
 * before fork() is refused in the child: its socket and mappings are the
 * parent's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "blockcopy.h"
#include "kvpool.h"
#include "kvpool_kernels.h"
#include "kvpool_wire.h"

/* --- Errors -------------------------------------------------------------- */

static PyObject *Error;		/* kvpool.Error, an OSError */
static PyObject *NoSpace, *Stale, *PermissionDenied, *Mismatch, *Limit, *NotConnected,
	*DaemonGone, *InvalidArgument, *NotFound;

/* error_class() - the exception class of a negative errno. */
static PyObject *error_class(int rc)
{
	switch (-rc) {
	case ENOSPC:
		return NoSpace;
	case ESTALE:
		return Stale;
	case EACCES:
	case EPERM:
		return PermissionDenied;
	case EBADE:
		return Mismatch;
	case EDQUOT:
		return Limit;
	case ENOTCONN:
		return NotConnected;
	case EPIPE:
	case ECONNREFUSED:
	case ECONNRESET:
		return DaemonGone;
	case ENOENT:		/* kvp_connect's: no socket there (see Client_init) */
		return NotFound;
	case EINVAL:
		return InvalidArgument;
	default:
		return Error;
	}
}

/*
 * raise_kvp() - raise the exception of rc for what, with the library's
 * explanation (msg, read on the failing thread) when it has one:
 * OSError(errno, "what: strerror: explanation").
 */
static PyObject *raise_kvp(int rc, const char *what, const char *msg)
{
	PyObject *text, *args;

	if (msg && msg[0])
		text = PyUnicode_FromFormat("%s: %s: %s", what, kvp_strerror(rc), msg);
	else
		text = PyUnicode_FromFormat("%s: %s", what, kvp_strerror(rc));
	if (!text)
		return NULL;
	args = Py_BuildValue("(iN)", -rc, text);
	if (!args)
		return NULL;
	PyErr_SetObject(error_class(rc), args);
	Py_DECREF(args);
	return NULL;
}

/* A copy of kvp_last_error() taken on the calling thread. */
#define ERRBUF 640
#define SAVE_ERROR(buf) snprintf((buf), ERRBUF, "%s", kvp_last_error())

/* --- fork ---------------------------------------------------------------- */

/* Bumped in every child: a Client remembers the value it was made under. */
static volatile unsigned long fork_gen;

static void in_child(void)
{
	fork_gen++;
}

/* --- Client -------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	kvp_client *c;
	kvp_info_t info;
	unsigned long gen;	/* fork_gen when connected */
	Py_ssize_t views;	/* PageView objects alive (arrays keep theirs) */
	bool readonly;		/* views are read-only */
} ClientObject;

static PyTypeObject ClientType;
static PyTypeObject PageViewType;

/* client_ok() - true when c may be used; else raises. */
static bool client_ok(ClientObject *self)
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

static int Client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "socket", "namespace", "layers", "kv_heads", "head_dim",
				  "block_tokens", "dtype", "model", "key_scheme", "key_seed",
				  "readonly", "memory", "head_dim_v", NULL };
	const char *sock = NULL, *ns = NULL, *model = NULL, *seed = NULL;
	unsigned int layers = 0, kv_heads = 0, head_dim = 0, block_tokens = 0, dtype = 0,
		     scheme = 0, memory = 0, head_dim_v = 0;
	int readonly = 0, rc;
	char err[ERRBUF];
	kvp_geometry g;
	kvp_client *c = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zz$IIIIIzIzpII", kwlist, &sock, &ns,
					 &layers, &kv_heads, &head_dim, &block_tokens, &dtype,
					 &model, &scheme, &seed, &readonly, &memory, &head_dim_v))
		return -1;
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
	rc = kvp_connect(sock, ns, ns ? &g : NULL, &c);
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

/* --- Arguments: handles and keys ---------------------------------------- */

/* handles_from() - a sequence of ints as kvp_page[]; *n its length.
 * PyMem_Free() the result. */
static kvp_page *handles_from(PyObject *seq, Py_ssize_t *n)
{
	PyObject *fast = PySequence_Fast(seq, "page handles must be a sequence of ints");
	kvp_page *out;
	Py_ssize_t i;

	if (!fast)
		return NULL;
	*n = PySequence_Fast_GET_SIZE(fast);
	out = PyMem_Malloc(((size_t)*n + 1) * sizeof(*out));
	if (!out) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (i = 0; i < *n; i++) {
		out[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
		if (out[i] == (kvp_page)-1 && PyErr_Occurred()) {
			PyErr_Format(PyExc_TypeError, "page handle %zd is not an int in 1..2**64-1",
				     i);
			Py_DECREF(fast);
			PyMem_Free(out);
			return NULL;
		}
	}
	Py_DECREF(fast);
	return out;
}

static PyObject *handles_to_list(const kvp_page *p, Py_ssize_t n)
{
	PyObject *l = PyList_New(n);
	Py_ssize_t i;

	if (!l)
		return NULL;
	for (i = 0; i < n; i++) {
		PyObject *v = PyLong_FromUnsignedLongLong(p[i]);

		if (!v) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SET_ITEM(l, i, v);
	}
	return l;
}

/*
 * A key argument: bytes-like of 32 bytes, or 16 (an XXH3-128 digest as
 * vLLM gives it, padded with zeros). keys_from() takes one bytes-like of
 * n x 32 bytes or a sequence of keys.
 */
static int key_from(PyObject *o, kvp_key *k, const char *what)
{
	Py_buffer b;

	if (PyObject_GetBuffer(o, &b, PyBUF_SIMPLE) < 0) {
		PyErr_Format(PyExc_TypeError, "%s must be bytes (a key of 32 bytes, or 16 for "
			     "the XXH3 schemes), not %.80s", what, Py_TYPE(o)->tp_name);
		return -1;
	}
	if (b.len != KVP_KEY_BYTES && b.len != 16) {
		PyErr_Format(PyExc_ValueError, "%s is %zd bytes: a key is 32 bytes (or 16 for "
			     "the XXH3 schemes)", what, b.len);
		PyBuffer_Release(&b);
		return -1;
	}
	memset(k, 0, sizeof(*k));
	memcpy(k->b, b.buf, (size_t)b.len);
	PyBuffer_Release(&b);
	return 0;
}

/* opt_key() - NULL for None (the root), else k filled from o. */
static int opt_key(PyObject *o, kvp_key *k, const kvp_key **out, const char *what)
{
	*out = NULL;
	if (!o || o == Py_None)
		return 0;
	if (key_from(o, k, what) < 0)
		return -1;
	*out = k;
	return 0;
}

static kvp_key *keys_from(PyObject *o, Py_ssize_t *n)
{
	PyObject *fast;
	kvp_key *out;
	Py_ssize_t i;

	if (PyObject_CheckBuffer(o) && !PyList_Check(o) && !PyTuple_Check(o)) {
		Py_buffer b;

		if (PyObject_GetBuffer(o, &b, PyBUF_SIMPLE) < 0)
			return NULL;
		if (b.len % KVP_KEY_BYTES) {
			PyErr_Format(PyExc_ValueError, "keys as one bytes object must be a "
				     "multiple of 32 bytes long, not %zd", b.len);
			PyBuffer_Release(&b);
			return NULL;
		}
		*n = b.len / KVP_KEY_BYTES;
		out = PyMem_Malloc(((size_t)*n + 1) * sizeof(*out));
		if (out)
			memcpy(out, b.buf, (size_t)b.len);
		PyBuffer_Release(&b);
		if (!out)
			PyErr_NoMemory();
		return out;
	}
	fast = PySequence_Fast(o, "keys must be bytes or a sequence of bytes");
	if (!fast)
		return NULL;
	*n = PySequence_Fast_GET_SIZE(fast);
	out = PyMem_Malloc(((size_t)*n + 1) * sizeof(*out));
	if (!out) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (i = 0; i < *n; i++) {
		char what[32];

		snprintf(what, sizeof(what), "key %zd", i);
		if (key_from(PySequence_Fast_GET_ITEM(fast, i), &out[i], what) < 0) {
			Py_DECREF(fast);
			PyMem_Free(out);
			return NULL;
		}
	}
	Py_DECREF(fast);
	return out;
}

static PyObject *keys_to_list(const kvp_key *k, Py_ssize_t n, bool short16)
{
	PyObject *l = PyList_New(n);
	Py_ssize_t i;

	if (!l)
		return NULL;
	for (i = 0; i < n; i++) {
		PyObject *v = PyBytes_FromStringAndSize((const char *)k[i].b,
							short16 ? 16 : KVP_KEY_BYTES);

		if (!v) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SET_ITEM(l, i, v);
	}
	return l;
}

/*
 * Token ids: a buffer of uint32 (array('I'), a NumPy uint32 array: no
 * copy), else a sequence of ints (copied). tokens_release() undoes it.
 */
struct tokens {
	Py_buffer b;
	bool view;
	uint32_t *copy;
	const uint32_t *v;
	Py_ssize_t n;
};

static int tokens_get(PyObject *o, struct tokens *t)
{
	PyObject *fast;
	Py_ssize_t i;

	memset(t, 0, sizeof(*t));
	if (!o || o == Py_None)
		return 0;
	if (PyObject_CheckBuffer(o) && !PyBytes_Check(o) && !PyByteArray_Check(o)) {
		if (PyObject_GetBuffer(o, &t->b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
			return -1;
		t->view = true;
		if (t->b.itemsize != 4 || !t->b.format ||
		    !strchr("IL", t->b.format[strspn(t->b.format, "@=<")]) ||
		    (t->b.format[0] == '<' && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)) {
			PyErr_Format(PyExc_TypeError, "token ids as a buffer must be uint32 "
				     "(format 'I'), not format '%s' of %zd-byte items",
				     t->b.format ? t->b.format : "B", t->b.itemsize);
			PyBuffer_Release(&t->b);
			t->view = false;
			return -1;
		}
		t->v = t->b.buf;
		t->n = t->b.len / 4;
		return 0;
	}
	fast = PySequence_Fast(o, "token ids must be a uint32 array or a sequence of ints");
	if (!fast)
		return -1;
	t->n = PySequence_Fast_GET_SIZE(fast);
	t->copy = PyMem_Malloc(((size_t)t->n + 1) * sizeof(uint32_t));
	if (!t->copy) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return -1;
	}
	for (i = 0; i < t->n; i++) {
		unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, i));

		if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "token id %zd is not an int in 0..2**32-1",
				     i);
			Py_DECREF(fast);
			PyMem_Free(t->copy);
			t->copy = NULL;
			return -1;
		}
		t->copy[i] = (uint32_t)v;
	}
	Py_DECREF(fast);
	t->v = t->copy;
	return 0;
}

static void tokens_release(struct tokens *t)
{
	if (t->view)
		PyBuffer_Release(&t->b);
	PyMem_Free(t->copy);
	memset(t, 0, sizeof(*t));
}

static bool short_keys(uint32_t scheme)
{
	return scheme == KVP_KEYS_VLLM_XXHASH || scheme == KVP_KEYS_VLLM_XXHASH_CBOR;
}

/* --- Client methods ------------------------------------------------------ */

/* CALL(expr) - run expr (an int) without the GIL, saving the error text. */
#define CALL(rc, expr)                                                        \
	do {                                                                  \
		Py_BEGIN_ALLOW_THREADS                                        \
		(rc) = (expr);                                                \
		if ((rc) < 0)                                                 \
			SAVE_ERROR(err);                                      \
		Py_END_ALLOW_THREADS                                          \
	} while (0)

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

static PyObject *Client_acquire(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "tokens", "parent", NULL };
	PyObject *okeys, *otok = NULL, *oparent = NULL, *pages = NULL, *res = NULL;
	const kvp_key *parent;
	kvp_partial partial = { 0, 0 };
	struct tokens t;
	char err[ERRBUF];
	kvp_key pk, *keys;
	kvp_page *out;
	Py_ssize_t n;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", kwlist, &okeys, &otok, &oparent))
		return NULL;
	if (!client_ok(self) || opt_key(oparent, &pk, &parent, "parent") < 0)
		return NULL;
	keys = keys_from(okeys, &n);
	if (!keys)
		return NULL;
	if (tokens_get(otok, &t) < 0) {
		PyMem_Free(keys);
		return NULL;
	}
	out = PyMem_Malloc(((size_t)n + 1) * sizeof(*out));
	if (!out) {
		PyErr_NoMemory();
		goto done;
	}
	CALL(rc, kvp_acquire(self->c, parent, keys, (size_t)n, t.v, (size_t)t.n, out,
			     t.n ? &partial : NULL));
	if (rc < 0) {
		raise_kvp(rc, "acquire", err);
		goto done;
	}
	pages = handles_to_list(out, rc);
	if (!pages)
		goto done;
	if (partial.tokens)
		res = Py_BuildValue("(N(KI))", pages, (unsigned long long)partial.page,
				    partial.tokens);
	else
		res = Py_BuildValue("(NO)", pages, Py_None);
done:
	PyMem_Free(out);
	PyMem_Free(keys);
	tokens_release(&t);
	return res;
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

static PyObject *Client_info(ClientObject *self, PyObject *unused)
{
	const kvp_info_t *i = &self->info;

	(void)unused;
	if (!client_ok(self))
		return NULL;
	return Py_BuildValue("{sKsIsIsKsKsKsIsIsIsIsKsKsy#}", "client_id",
			     (unsigned long long)i->client_id, "ns_id", i->ns_id, "backend",
			     i->backend, "page_bytes", (unsigned long long)i->page_bytes,
			     "page_stride", (unsigned long long)i->page_stride, "slab_bytes",
			     (unsigned long long)i->slab_bytes, "pages_per_slab", i->pages_per_slab,
			     "block_tokens", i->block_tokens, "key_scheme", i->key_scheme,
			     "max_batch", i->max_batch, "max_leases",
			     (unsigned long long)i->max_leases, "max_msg",
			     (unsigned long long)i->max_msg, "root", (const char *)i->root.b,
			     (Py_ssize_t)(short_keys(i->key_scheme) ? 16 : KVP_KEY_BYTES));
}

/* stats: the daemon's counters and each namespace's, as dicts. */
#define U(d, s, f)                                                              \
	do {                                                                    \
		PyObject *v_ = PyLong_FromUnsignedLongLong((unsigned long long)(s)->f); \
		if (!v_ || PyDict_SetItemString((d), #f, v_) < 0) {             \
			Py_XDECREF(v_);                                         \
			goto fail;                                              \
		}                                                               \
		Py_DECREF(v_);                                                  \
	} while (0)

static PyObject *tier_dict(const struct kvp_wire_tier_stats *t)
{
	PyObject *d = PyDict_New();

	if (!d)
		return NULL;
	U(d, t, spills);
	U(d, t, restores);
	U(d, t, dropped);
	U(d, t, checksum_failures);
	U(d, t, io_errors);
	U(d, t, used);
	U(d, t, slots);
	U(d, t, writing);
	return d;
fail:
	Py_DECREF(d);
	return NULL;
}

static PyObject *events_dict(const struct kvp_wire_events_stats *e)
{
	PyObject *d = PyDict_New();

	if (!d)
		return NULL;
	U(d, e, enabled);
	U(d, e, batches);
	U(d, e, events);
	U(d, e, dropped_batches);
	U(d, e, dropped_events);
	U(d, e, queued_bytes);
	U(d, e, replays);
	U(d, e, replayed);
	return d;
fail:
	Py_DECREF(d);
	return NULL;
}

static PyObject *remote_dict(const struct kvp_wire_remote_stats *r)
{
	PyObject *d = PyDict_New();

	if (!d)
		return NULL;
	U(d, r, enabled);
	U(d, r, up);
	U(d, r, nodes);
	U(d, r, nodes_up);
	U(d, r, slots);
	U(d, r, gets);
	U(d, r, hits);
	U(d, r, misses);
	U(d, r, corrupt);
	U(d, r, forged);
	U(d, r, errors);
	U(d, r, skipped);
	U(d, r, puts);
	U(d, r, put_errors);
	U(d, r, put_skipped);
	U(d, r, bytes_in);
	U(d, r, bytes_out);
	U(d, r, redirects);
	U(d, r, inflight);
	U(d, r, latency_us);
	U(d, r, bandwidth);
	U(d, r, fetches);
	U(d, r, restored);
	U(d, r, sent);
	U(d, r, skipped_slow);
	return d;
fail:
	Py_DECREF(d);
	return NULL;
}

static PyObject *Client_stats(ClientObject *self, PyObject *unused)
{
	kvp_ns_stats_t ns[64];
	PyObject *d = NULL, *l = NULL, *t;
	char err[ERRBUF];
	kvp_stats_t st;
	int rc, i;

	(void)unused;
	if (!client_ok(self))
		return NULL;
	CALL(rc, kvp_stats(self->c, &st, ns, 64));
	if (rc < 0)
		return raise_kvp(rc, "stats", err);
	d = PyDict_New();
	if (!d)
		return NULL;
	U(d, &st, pages_total);
	U(d, &st, pages_free);
	U(d, &st, pages_private);
	U(d, &st, pages_shared);
	U(d, &st, pages_cached);
	U(d, &st, pages_spilled);
	U(d, &st, pages_inflight);
	U(d, &st, backend);
	U(d, &st, host_pool_bytes);
	U(d, &st, host_slabs);
	U(d, &st, max_slabs);
	U(d, &st, clients);
	U(d, &st, allocs);
	U(d, &st, releases);
	U(d, &st, requests_total);
	U(d, &st.prefix, acquires);
	U(d, &st.prefix, hits);
	U(d, &st.prefix, misses);
	U(d, &st.prefix, hit_tokens);
	U(d, &st.prefix, publishes);
	U(d, &st.prefix, dedups);
	U(d, &st.prefix, cows);
	U(d, &st.prefix, evictions);
	t = PyBool_FromLong(!!(st.flags & KVP_STATS_F_CONSERVED));
	if (!t || PyDict_SetItemString(d, "conserved", t) < 0)
		goto fail_t;
	Py_DECREF(t);
	t = tier_dict(&st.nvme);
	if (!t || PyDict_SetItemString(d, "nvme", t) < 0)
		goto fail_t;
	Py_DECREF(t);
	t = tier_dict(&st.host);
	if (!t || PyDict_SetItemString(d, "host", t) < 0)
		goto fail_t;
	Py_DECREF(t);
	t = events_dict(&st.events);
	if (!t || PyDict_SetItemString(d, "events", t) < 0)
		goto fail_t;
	Py_DECREF(t);
	t = remote_dict(&st.remote);
	if (!t || PyDict_SetItemString(d, "remote", t) < 0)
		goto fail_t;
	Py_DECREF(t);
	l = PyList_New(0);
	if (!l)
		goto fail;
	for (i = 0; i < rc && i < 64; i++) {
		PyObject *n = Py_BuildValue("{sssIsIsIsssKsKsKsKsKsKsKsK}", "name", ns[i].name,
					    "id", ns[i].id, "clients", ns[i].clients, "backend",
					    ns[i].backend, "state", ns[i].state == KVP_WIRE_NS_PREPARING ?
					    "preparing" : "ready", "pages_total",
					    (unsigned long long)ns[i].pages_total, "pages_free",
					    (unsigned long long)ns[i].pages_free, "pages_private",
					    (unsigned long long)ns[i].pages_private, "pages_shared",
					    (unsigned long long)ns[i].pages_shared, "pages_cached",
					    (unsigned long long)ns[i].pages_cached, "pages_spilled",
					    (unsigned long long)ns[i].pages_spilled, "hits",
					    (unsigned long long)ns[i].prefix.hits, "misses",
					    (unsigned long long)ns[i].prefix.misses);

		if (!n || PyList_Append(l, n) < 0) {
			Py_XDECREF(n);
			goto fail;
		}
		Py_DECREF(n);
	}
	if (PyDict_SetItemString(d, "namespaces", l) < 0)
		goto fail;
	Py_DECREF(l);
	return d;
fail_t:
	Py_XDECREF(t);
fail:
	Py_XDECREF(l);
	Py_XDECREF(d);
	return NULL;
}
#undef U

static PyObject *Client_set_remote_policy(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "prefill_rate", "max_us", NULL };
	long long rate = 0, max_us = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|LL", kwlist, &rate, &max_us))
		return NULL;
	if (rate < 0 || rate > UINT32_MAX || max_us < 0 || max_us > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError, "set_remote_policy: prefill_rate %lld and max_us "
			     "%lld must each be 0 .. %u (max_us=kvpool.REMOTE_NEVER: never)",
			     rate, max_us, UINT32_MAX);
		return NULL;
	}
	if (!client_ok(self))
		return NULL;
	kvp_set_remote_policy(self->c, (uint32_t)rate, (uint32_t)max_us);
	Py_RETURN_NONE;
}

static PyObject *Client_evict(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "namespace", "max", NULL };
	unsigned long long max = 0;
	const char *ns = NULL;
	char err[ERRBUF];
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zK", kwlist, &ns, &max))
		return NULL;
	if (!client_ok(self))
		return NULL;
	CALL(rc, kvp_evict(self->c, ns, max));
	if (rc < 0)
		return raise_kvp(rc, "evict", err);
	return PyLong_FromLong(rc);
}

static PyObject *Client_page(ClientObject *self, PyObject *arg);

/* The listings: up to max records (the library asks once; what one reply
 * holds), as dicts. */
#define LIST_MAX 8192

/* records_to_list() - n records of size bytes at r, each made a dict by
 * one(). */
static PyObject *records_to_list(const void *r, int n, size_t size,
				 PyObject *(*one)(const void *rec))
{
	PyObject *l = PyList_New(0), *d;
	int i;

	for (i = 0; l && i < n; i++) {
		d = one((const char *)r + (size_t)i * size);
		if (!d || PyList_Append(l, d) < 0) {
			Py_XDECREF(d);
			Py_CLEAR(l);
		}
		Py_XDECREF(d);
	}
	return l;
}

static PyObject *client_dict(const void *rec)
{
	const struct kvp_wire_client *r = rec;

	return Py_BuildValue("{sKsIsIsIsIsKsKssss}", "id", (unsigned long long)r->id, "pid",
			     r->pid, "uid", r->uid, "gid", r->gid, "rights", r->rights, "leases",
			     (unsigned long long)r->leases, "connected_ms",
			     (unsigned long long)r->connected_ms, "name", r->name, "namespace",
			     r->ns);
}

static PyObject *page_dict(const void *rec)
{
	const struct kvp_wire_page *r = rec;

	return Py_BuildValue("{sKsIsIsIsIsKsIsIsKsy#}", "handle", (unsigned long long)r->handle,
			     "ns_id", r->ns_id, "state", r->state, "refs", r->refs, "holders",
			     r->holders, "holder", (unsigned long long)r->holder, "priority",
			     r->prio, "tokens", r->tokens, "age_ms", (unsigned long long)r->age_ms,
			     "key", (const char *)r->key, (Py_ssize_t)sizeof(r->key));
}

static PyObject *prefix_dict(const void *rec)
{
	const struct kvp_wire_prefix *r = rec;

	return Py_BuildValue("{sy#sIsIsIsIsKsK}", "key", (const char *)r->key,
			     (Py_ssize_t)sizeof(r->key), "ns_id", r->ns_id, "depth", r->depth,
			     "refs", r->refs, "state", r->state, "hits",
			     (unsigned long long)r->hits, "bytes", (unsigned long long)r->bytes);
}

/* The three listings' arguments, and which one. */
struct list_args {
	int which;			/* 0 clients, 1 pages, 2 prefixes */
	struct kvp_wire_list_pages f;	/* pages */
	const char *ns;			/* prefixes */
	unsigned int top;
};

static PyObject *list_call(ClientObject *self, const struct list_args *a)
{
	static const size_t size[3] = { sizeof(struct kvp_wire_client),
					sizeof(struct kvp_wire_page),
					sizeof(struct kvp_wire_prefix) };
	static PyObject *(*const one[3])(const void *) = { client_dict, page_dict, prefix_dict };
	static const char *const what[3] = { "list_clients", "list_pages", "list_prefixes" };
	char err[ERRBUF];
	PyObject *l;
	uint32_t total;
	void *r;
	int rc;

	if (!client_ok(self))
		return NULL;
	r = PyMem_Malloc(LIST_MAX * size[a->which]);
	if (!r)
		return PyErr_NoMemory();
	CALL(rc, a->which == 0 ? kvp_list_clients(self->c, r, LIST_MAX, &total) :
		 a->which == 1 ? kvp_list_pages(self->c, &a->f, r, LIST_MAX, &total) :
		 kvp_list_prefixes(self->c, a->ns, a->top, r, LIST_MAX, &total));
	l = rc < 0 ? raise_kvp(rc, what[a->which], err) :
		     records_to_list(r, rc, size[a->which], one[a->which]);
	PyMem_Free(r);
	return l;
}

static PyObject *Client_list_clients(ClientObject *self, PyObject *unused)
{
	struct list_args a = { .which = 0 };

	(void)unused;
	return list_call(self, &a);
}

static PyObject *Client_list_pages(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "namespace", "state", "client", "limit", NULL };
	struct list_args a = { .which = 1 };
	unsigned long long client = 0;
	const char *ns = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zIKI", kwlist, &ns, &a.f.state, &client,
					 &a.f.limit))
		return NULL;
	if (ns && strlen(ns) >= sizeof(a.f.ns)) {
		PyErr_Format(InvalidArgument, "namespace name '%.80s' is longer than 63 bytes", ns);
		return NULL;
	}
	if (ns)
		memcpy(a.f.ns, ns, strlen(ns));
	a.f.client = client;
	return list_call(self, &a);
}

static PyObject *Client_list_prefixes(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "namespace", "top", NULL };
	struct list_args a = { .which = 2 };

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zI", kwlist, &a.ns, &a.top))
		return NULL;
	return list_call(self, &a);
}

static PyObject *Client_disconnect(ClientObject *self, PyObject *arg)
{
	unsigned long long id = PyLong_AsUnsignedLongLong(arg);
	char err[ERRBUF];
	int rc;

	if (id == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!client_ok(self))
		return NULL;
	CALL(rc, kvp_disconnect(self->c, id));
	if (rc < 0)
		return raise_kvp(rc, "disconnect", err);
	Py_RETURN_NONE;
}

static PyObject *Client_drop_namespace(ClientObject *self, PyObject *arg)
{
	const char *ns = PyUnicode_AsUTF8(arg);
	char err[ERRBUF];
	int rc;

	if (!ns)
		return NULL;
	if (!client_ok(self))
		return NULL;
	CALL(rc, kvp_drop_namespace(self->c, ns));
	if (rc < 0)
		return raise_kvp(rc, "drop_namespace", err);
	Py_RETURN_NONE;
}

/* make_view() - a PageView of len bytes at addr for handle h (0: the
 * whole view). */
static PyObject *make_view(ClientObject *self, kvp_page h, void *addr, Py_ssize_t len);

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
static void *held_address(ClientObject *self, PyObject *arg, unsigned long long *h)
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
	  "acquire(keys, tokens=None, parent=None) -> (pages, partial): the longest cached "
	  "prefix, and with tokens the partial page after it as (page, tokens) or None." },
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
	{ "drop_namespace", (PyCFunction)Client_drop_namespace, METH_O,
	  "drop_namespace(name) - forget a namespace (admin)." },
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
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject ClientType = {
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

/* --- PageView ------------------------------------------------------------ */

/*
 * One page's bytes, exported in place through the buffer protocol. It
 * holds its Client, and counts in the Client's views while it lives:
 * what is made from it (a memoryview, a NumPy array, a torch tensor)
 * keeps it, and with it the mapping, alive; the Client refuses to close
 * under it.
 */
typedef struct {
	PyObject_HEAD
	ClientObject *client;
	kvp_page page;
	void *addr;
	Py_ssize_t len;
	Py_ssize_t exports;
} PageViewObject;

static PyObject *make_view(ClientObject *self, kvp_page h, void *addr, Py_ssize_t len)
{
	PageViewObject *v = PyObject_New(PageViewObject, &PageViewType);

	if (!v)
		return NULL;
	Py_INCREF(self);
	v->client = self;
	v->page = h;
	v->addr = addr;
	v->len = len;
	v->exports = 0;
	self->views++;
	return (PyObject *)v;
}

static PyObject *Client_page(ClientObject *self, PyObject *arg)
{
	unsigned long long h;
	void *addr;

	if (self->c && self->info.backend != KVP_BACKEND_HOST) {
		PyErr_SetString(PyExc_NotImplementedError, "page(): the pool is GPU memory; "
				"use page_cuda() or page_dlpack()");
		return NULL;
	}
	addr = held_address(self, arg, &h);
	return addr ? make_view(self, h, addr, (Py_ssize_t)self->info.page_bytes) : NULL;
}

static int PageView_getbuffer(PageViewObject *self, Py_buffer *view, int flags)
{
	int rc;

	if (!self->client->c) {
		PyErr_SetString(NotConnected, "the Client of this page is closed");
		view->obj = NULL;
		return -1;
	}
	rc = PyBuffer_FillInfo(view, (PyObject *)self, self->addr, self->len,
			       self->client->readonly, flags);
	if (rc == 0)
		self->exports++;
	return rc;
}

static void PageView_releasebuffer(PageViewObject *self, Py_buffer *view)
{
	(void)view;
	self->exports--;
}

static void PageView_dealloc(PageViewObject *self)
{
	if (self->client)
		self->client->views--;
	Py_XDECREF(self->client);
	PyObject_Free(self);
}

static PyObject *PageView_handle(PageViewObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(self->page);
}

static PyObject *PageView_address(PageViewObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromVoidPtr(self->addr);
}

static Py_ssize_t PageView_len(PageViewObject *self)
{
	return self->len;
}

static PyBufferProcs PageView_as_buffer = {
	.bf_getbuffer = (getbufferproc)PageView_getbuffer,
	.bf_releasebuffer = (releasebufferproc)PageView_releasebuffer,
};

static PySequenceMethods PageView_as_sequence = {
	.sq_length = (lenfunc)PageView_len,
};

static PyGetSetDef PageView_getset[] = {
	{ "handle", (getter)PageView_handle, NULL, "the page handle", NULL },
	{ "address", (getter)PageView_address, NULL, "the page's address in this process", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject PageViewType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool._kvpool.PageView",
	.tp_basicsize = sizeof(PageViewObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A page's bytes in the shared mapping (use memoryview() or numpy).",
	.tp_dealloc = (destructor)PageView_dealloc,
	.tp_as_buffer = &PageView_as_buffer,
	.tp_as_sequence = &PageView_as_sequence,
	.tp_getset = PageView_getset,
};

/* --- DLPack ------------------------------------------------------------- *
 *
 * The DLPack exchange ABI (dmlc/dlpack, the unversioned DLManagedTensor of
 * the "dltensor" capsule that torch.from_dlpack() and numpy.from_dlpack()
 * take): a tensor over memory kvpool owns, whose deleter lets go of the
 * Python object that keeps the memory mapped.
 */
typedef struct {
	int32_t device_type;	/* 1 CPU, 2 CUDA */
	int32_t device_id;
} dl_device;

typedef struct {
	uint8_t code;		/* 0 int, 1 uint, 2 float, 4 bfloat */
	uint8_t bits;
	uint16_t lanes;
} dl_dtype;

typedef struct {
	void *data;
	dl_device device;
	int32_t ndim;
	dl_dtype dtype;
	int64_t *shape;
	int64_t *strides;	/* in elements; NULL: compact row-major */
	uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
	dl_tensor t;
	void *ctx;
	void (*deleter)(struct dl_managed *self);
} dl_managed;

/* DLPack 1.0's versioned form ("dltensor_versioned"): it can say
 * read-only, which the unversioned one cannot (NumPy takes those as
 * read-only). */
typedef struct dl_managed_v {
	struct {
		uint32_t major, minor;
	} version;
	void *ctx;
	void (*deleter)(struct dl_managed_v *self);
	uint64_t flags;		/* bit 0: read-only */
	dl_tensor t;
} dl_managed_v;

#define DL_MAX_DIMS 8

/* What a capsule carries: one of the two forms, the owner, and room for
 * shape and strides. m or mv comes first, so either pointer is the
 * holder's. */
struct dl_holder {
	union {
		dl_managed m;
		dl_managed_v mv;
	} u;
	PyObject *owner;
	int64_t shape[DL_MAX_DIMS], strides[DL_MAX_DIMS];
};

static void dl_free(struct dl_holder *h)
{
	PyGILState_STATE g = PyGILState_Ensure();	/* consumers may free off-thread */

	Py_XDECREF(h->owner);
	PyMem_RawFree(h);
	PyGILState_Release(g);
}

static void dl_delete(dl_managed *m)
{
	dl_free((struct dl_holder *)(void *)m);
}

static void dl_delete_v(dl_managed_v *m)
{
	dl_free((struct dl_holder *)(void *)m);
}

/* A capsule nobody consumed deletes its tensor; a consumed one was
 * renamed "used_..." and the consumer calls the deleter. */
static void dl_capsule_destructor(PyObject *cap)
{
	if (PyCapsule_IsValid(cap, "dltensor"))
		dl_delete(PyCapsule_GetPointer(cap, "dltensor"));
	else if (PyCapsule_IsValid(cap, "dltensor_versioned"))
		dl_delete_v(PyCapsule_GetPointer(cap, "dltensor_versioned"));
}

/* dlpack(owner, address, shape, strides, code, bits, device_type, device_id,
 * versioned, readonly) -> a DLPack capsule (versioned: DLPack 1.0's);
 * owner stays alive as long as the tensor. */
static PyObject *mod_dlpack(PyObject *mod, PyObject *args)
{
	PyObject *owner, *oshape, *ostrides, *cap;
	int dev_type, dev_id, versioned = 0, readonly = 0;
	unsigned long long addr;
	unsigned int code, bits;
	struct dl_holder *h;
	dl_tensor *t;
	Py_ssize_t n, i;

	(void)mod;
	if (!PyArg_ParseTuple(args, "OKO!O!IIii|pp", &owner, &addr, &PyTuple_Type, &oshape,
			      &PyTuple_Type, &ostrides, &code, &bits, &dev_type, &dev_id,
			      &versioned, &readonly))
		return NULL;
	n = PyTuple_GET_SIZE(oshape);
	if (n > DL_MAX_DIMS || PyTuple_GET_SIZE(ostrides) != n) {
		PyErr_SetString(PyExc_ValueError, "dlpack: at most 8 dimensions, one stride each");
		return NULL;
	}
	h = PyMem_RawCalloc(1, sizeof(*h));
	if (!h)
		return PyErr_NoMemory();
	for (i = 0; i < n; i++) {
		h->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(oshape, i));
		h->strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(ostrides, i));
	}
	if (PyErr_Occurred()) {
		PyMem_RawFree(h);
		return NULL;
	}
	if (versioned) {
		h->u.mv.version.major = 1;
		h->u.mv.version.minor = 0;
		h->u.mv.ctx = h;
		h->u.mv.deleter = dl_delete_v;
		h->u.mv.flags = readonly ? 1 : 0;
		t = &h->u.mv.t;
	} else {
		h->u.m.ctx = h;
		h->u.m.deleter = dl_delete;
		t = &h->u.m.t;
	}
	t->data = (void *)(uintptr_t)addr;
	t->device.device_type = dev_type;
	t->device.device_id = dev_id;
	t->ndim = (int32_t)n;
	t->dtype.code = (uint8_t)code;
	t->dtype.bits = (uint8_t)bits;
	t->dtype.lanes = 1;
	t->shape = h->shape;
	t->strides = h->strides;
	Py_INCREF(owner);
	h->owner = owner;
	cap = PyCapsule_New(h, versioned ? "dltensor_versioned" : "dltensor",
			    dl_capsule_destructor);
	if (!cap) {
		Py_DECREF(owner);
		PyMem_RawFree(h);
	}
	return cap;
}

/* --- Kernels: the C references ------------------------------------------ */

/* buf_get() - a C-contiguous buffer of o with at least min bytes, for
 * what (writable when write). */
static int buf_get(PyObject *o, Py_buffer *b, Py_ssize_t min, bool write, const char *what)
{
	if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | (write ? PyBUF_WRITABLE : 0)) < 0)
		return -1;
	if (b->len < min) {
		PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", what, b->len, min);
		PyBuffer_Release(b);
		return -1;
	}
	return 0;
}

/*
 * paged_attention_decode_ref(out, q, block_tables, context_lens, *, layers,
 * kv_heads, head_dim, block_tokens, dtype, layer, q_heads, scale) - the
 * kernels' C reference (kvp_paged_attention_decode_ref()) over host
 * pages: out and q [batch][q_heads][head_dim] of dtype, block_tables
 * [batch][max_blocks] uint64 page addresses, context_lens [batch] uint32.
 */
static PyObject *mod_attention_ref(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "out", "q", "block_tables", "context_lens", "layers",
				  "kv_heads", "head_dim", "block_tokens", "dtype", "layer",
				  "q_heads", "scale", NULL };
	PyObject *oout, *oq, *otab, *octx;
	struct kvp_attention_shape sh;
	unsigned int layers, kvh, hd, bt, dtype, layer, qh;
	Py_buffer out, q, tab, ctx;
	size_t esize, batch, i;
	uint32_t maxc = 0;
	float scale;
	int rc;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO$IIIIIIIf", kwlist, &oout, &oq, &otab,
					 &octx, &layers, &kvh, &hd, &bt, &dtype, &layer, &qh,
					 &scale))
		return NULL;
	esize = dtype == KVP_DTYPE_F32 ? 4 : 2;
	if (buf_get(octx, &ctx, 0, false, "context_lens") < 0)
		return NULL;
	batch = (size_t)ctx.len / 4;
	if (buf_get(oq, &q, (Py_ssize_t)(batch * qh * hd * esize), false, "q") < 0)
		goto out_ctx;
	if (buf_get(oout, &out, (Py_ssize_t)(batch * qh * hd * esize), true, "out") < 0)
		goto out_q;
	if (buf_get(otab, &tab, 0, false, "block_tables") < 0)
		goto out_out;
	memset(&sh, 0, sizeof(sh));
	sh.layout = kvp_kv_layout_default(layers, kvh, hd, bt);
	sh.dtype = dtype;
	sh.layer = layer;
	sh.batch = (uint32_t)batch;
	sh.q_heads = qh;
	sh.max_blocks = batch ? (uint32_t)((size_t)tab.len / 8 / batch) : 0;
	for (i = 0; i < batch; i++)
		if (((const uint32_t *)ctx.buf)[i] > maxc)
			maxc = ((const uint32_t *)ctx.buf)[i];
	sh.max_context = maxc;
	sh.scale = scale;
	Py_BEGIN_ALLOW_THREADS
	rc = kvp_paged_attention_decode_ref(&sh, out.buf, q.buf, tab.buf, ctx.buf);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&tab);
	PyBuffer_Release(&out);
	PyBuffer_Release(&q);
	PyBuffer_Release(&ctx);
	if (rc < 0)
		return raise_kvp(rc, "paged_attention_decode_ref", "a shape, table or context "
				 "length the kernels refuse (see kvpool_kernels.h)");
	Py_RETURN_NONE;
out_out:
	PyBuffer_Release(&out);
out_q:
	PyBuffer_Release(&q);
out_ctx:
	PyBuffer_Release(&ctx);
	return NULL;
}

/* --- Key functions (no daemon) ------------------------------------------- */

static PyObject *mod_key_root(PyObject *m, PyObject *args)
{
	unsigned int scheme;
	const char *seed;
	kvp_key root;
	int rc;

	(void)m;
	if (!PyArg_ParseTuple(args, "Is", &scheme, &seed))
		return NULL;
	rc = kvp_key_root(scheme, seed, &root);
	if (rc < 0)
		return raise_kvp(rc, "key_root", kvp_last_error());
	return PyBytes_FromStringAndSize((const char *)root.b,
					 short_keys(scheme) ? 16 : KVP_KEY_BYTES);
}

static PyObject *mod_key_chain(PyObject *m, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "scheme", "parent", "tokens", "block_tokens", NULL };
	PyObject *oparent, *otok, *l;
	unsigned int scheme, bt;
	struct tokens t;
	kvp_key parent, *keys;
	int rc;

	(void)m;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "IOOI", kwlist, &scheme, &oparent, &otok,
					 &bt))
		return NULL;
	if (key_from(oparent, &parent, "parent") < 0 || tokens_get(otok, &t) < 0)
		return NULL;
	if (bt == 0) {
		tokens_release(&t);
		PyErr_SetString(InvalidArgument, "key_chain: block_tokens must be 1 or more");
		return NULL;
	}
	keys = PyMem_Malloc(((size_t)t.n / bt + 1) * sizeof(*keys));
	if (!keys) {
		tokens_release(&t);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	rc = kvp_key_chain(scheme, &parent, t.v, (size_t)t.n, bt, NULL, 0, keys);
	Py_END_ALLOW_THREADS
	tokens_release(&t);
	if (rc < 0) {
		PyMem_Free(keys);
		return raise_kvp(rc, "key_chain", kvp_last_error());
	}
	l = keys_to_list(keys, rc, short_keys(scheme));
	PyMem_Free(keys);
	return l;
}

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
	(void)m;
	(void)unused;
	return PyUnicode_FromString(kvp_version());
}

static PyMethodDef mod_methods[] = {
	{ "key_root", mod_key_root, METH_VARARGS,
	  "key_root(scheme, seed) -> the root key (vLLM's NONE_HASH for PYTHONHASHSEED=seed)." },
	{ "key_chain", (PyCFunction)(void (*)(void))mod_key_chain, METH_VARARGS | METH_KEYWORDS,
	  "key_chain(scheme, parent, tokens, block_tokens) -> the keys of the full blocks." },
	{ "library_version", mod_version, METH_NOARGS, "libkvpool's version string." },
	{ "paged_attention_decode_ref", (PyCFunction)(void (*)(void))mod_attention_ref,
	  METH_VARARGS | METH_KEYWORDS,
	  "paged_attention_decode_ref(out, q, block_tables, context_lens, *, layers, kv_heads, "
	  "head_dim, block_tokens, dtype, layer, q_heads, scale) - kvpool's paged attention "
	  "(the C reference) over host pages." },
	{ "copy_blocks", (PyCFunction)(void (*)(void))kvp_py_copy_blocks,
	  METH_VARARGS | METH_KEYWORDS,
	  "copy_blocks(dst_layers, dst_strides, src_layers, src_strides, pairs, heads, tokens, "
	  "run, threads=1, run_v=-1) - copy KV blocks between strided layouts (see "
	  "blockcopy.h)." },
	{ "dlpack", mod_dlpack, METH_VARARGS,
	  "dlpack(owner, address, shape, strides, code, bits, device_type, device_id) -> a "
	  "DLPack capsule over kvpool's memory that keeps owner alive." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef mod = {
	PyModuleDef_HEAD_INIT, "_kvpool", "The C binding of libkvpool (see kvpool).", -1,
	mod_methods, NULL, NULL, NULL, NULL,
};

/* add_error() - a subclass of base called name, with a docstring. */
static PyObject *add_error(PyObject *m, const char *name, PyObject *base, const char *doc)
{
	char full[64];
	PyObject *e;

	snprintf(full, sizeof(full), "kvpool.%s", name);
	e = PyErr_NewExceptionWithDoc(full, doc, base, NULL);
	if (!e || PyModule_AddObjectRef(m, name, e) < 0)
		return NULL;
	return e;
}

PyMODINIT_FUNC PyInit__kvpool(void)
{
	PyObject *m;

	if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&PageViewType) < 0)
		return NULL;
	m = PyModule_Create(&mod);
	if (!m)
		return NULL;
	if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
	    PyModule_AddObjectRef(m, "PageView", (PyObject *)&PageViewType) < 0)
		goto fail;
	Error = add_error(m, "Error", PyExc_OSError,
			  "A kvpool call failed: errno, and the daemon's explanation.");
	if (!Error)
		goto fail;
	NoSpace = add_error(m, "NoSpace", Error, "The pool cannot hold the request (ENOSPC).");
	Stale = add_error(m, "Stale", Error, "A page handle is not leased by this client "
			  "(ESTALE).");
	PermissionDenied = add_error(m, "PermissionDenied", Error, "The access rules or the "
				     "socket's permissions refused (EACCES, EPERM).");
	Mismatch = add_error(m, "Mismatch", Error, "The namespace has another geometry, "
			     "model, key scheme or key seed (EBADE).");
	Limit = add_error(m, "Limit", Error, "A per-client limit (EDQUOT).");
	NotConnected = add_error(m, "NotConnected", Error, "The client is closed, or an "
				 "inspection session was asked for pages (ENOTCONN).");
	DaemonGone = add_error(m, "DaemonGone", Error, "No daemon answers, or it closed the "
			       "connection (ENOENT, ECONNREFUSED, EPIPE).");
	InvalidArgument = add_error(m, "InvalidArgument", Error, "An argument kvpool refuses "
				    "(EINVAL).");
	NotFound = add_error(m, "NotFound", Error, "No such client or namespace (ENOENT).");
	if (!NoSpace || !Stale || !PermissionDenied || !Mismatch || !Limit || !NotConnected ||
	    !DaemonGone || !InvalidArgument || !NotFound)
		goto fail;
	if (PyModule_AddIntConstant(m, "KEYS_VLLM_SHA256_CBOR", KVP_KEYS_VLLM_SHA256_CBOR) < 0 ||
	    PyModule_AddIntConstant(m, "KEYS_VLLM_XXHASH_CBOR", KVP_KEYS_VLLM_XXHASH_CBOR) < 0 ||
	    PyModule_AddIntConstant(m, "KEYS_VLLM_SHA256", KVP_KEYS_VLLM_SHA256) < 0 ||
	    PyModule_AddIntConstant(m, "KEYS_VLLM_XXHASH", KVP_KEYS_VLLM_XXHASH) < 0 ||
	    PyModule_AddIntConstant(m, "BACKEND_HOST", KVP_BACKEND_HOST) < 0 ||
	    PyModule_AddIntConstant(m, "BACKEND_CUDA", KVP_BACKEND_CUDA) < 0 ||
	    PyModule_AddIntConstant(m, "MEMORY_DEFAULT", KVP_MEMORY_DEFAULT) < 0 ||
	    PyModule_AddIntConstant(m, "MEMORY_HOST", KVP_MEMORY_HOST) < 0 ||
	    PyModule_AddIntConstant(m, "K_ONLY", (long)KVP_K_ONLY) < 0 ||
	    PyModule_AddIntConstant(m, "REMOTE_NEVER", (long)KVP_REMOTE_NEVER) < 0)
		goto fail;
	if (pthread_atfork(NULL, NULL, in_child) != 0) {
		PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
		goto fail;
	}
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
