/* SPDX-License-Identifier: MIT */
/*
 * args.c - the binding's arguments and results: page handles and keys
 * from Python sequences and buffers and back into lists, token ids from
 * any buffer or sequence of ints.
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

/* --- Arguments: handles and keys ---------------------------------------- */

/* handles_from() - a sequence of ints as kvp_page[]; *n its length.
 * PyMem_Free() the result. */
kvp_page *handles_from(PyObject *seq, Py_ssize_t *n)
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

PyObject *handles_to_list(const kvp_page *p, Py_ssize_t n)
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
int key_from(PyObject *o, kvp_key *k, const char *what)
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
int opt_key(PyObject *o, kvp_key *k, const kvp_key **out, const char *what)
{
	*out = NULL;
	if (!o || o == Py_None)
		return 0;
	if (key_from(o, k, what) < 0)
		return -1;
	*out = k;
	return 0;
}

kvp_key *keys_from(PyObject *o, Py_ssize_t *n)
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

PyObject *keys_to_list(const kvp_key *k, Py_ssize_t n, bool short16)
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

int tokens_get(PyObject *o, struct tokens *t)
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

void tokens_release(struct tokens *t)
{
	if (t->view)
		PyBuffer_Release(&t->b);
	PyMem_Free(t->copy);
	memset(t, 0, sizeof(*t));
}

bool short_keys(uint32_t scheme)
{
	return scheme == KVP_KEYS_VLLM_XXHASH || scheme == KVP_KEYS_VLLM_XXHASH_CBOR;
}
