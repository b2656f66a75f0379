/* SPDX-License-Identifier: MIT */
/*
 * keys.c - the key functions that need no daemon: key_root, key_chain,
 * and libkvpool's version.
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

/* --- Key functions (no daemon) ------------------------------------------- */

PyObject *mod_key_root(PyObject *m, PyObject *args)
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

PyObject *mod_key_chain(PyObject *m, PyObject *args, PyObject *kw)
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

PyObject *mod_version(PyObject *m, PyObject *unused)
{
	(void)m;
	(void)unused;
	return PyUnicode_FromString(kvp_version());
}
