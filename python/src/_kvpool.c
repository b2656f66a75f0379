/* SPDX-License-Identifier: MIT */
/*
 * _kvpool.c - the CPython binding of libkvpool: the module, its
 * constants and its exceptions (an errno and the library's explanation
 * become kvpool.Error or one of its subclasses). The Client type is
 * client.c's (and client_admin.c's), PageView and DLPack views.c's, the
 * kernels' C references kernels.c's, the key functions keys.c's;
 * _kvpool.h is what they share. The Python layer (kvpool/__init__.py)
 * gives them their public shape.
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

#include "_kvpool.h"
#include "blockcopy.h"
#include "kvpool.h"
#include "kvpool_kernels.h"
#include "kvpool_wire.h"

/* --- Errors -------------------------------------------------------------- */

PyObject *Error;		/* kvpool.Error, an OSError */
PyObject *NoSpace, *Stale, *PermissionDenied, *Mismatch, *Limit, *NotConnected,
	*DaemonGone, *InvalidArgument, *NotFound, *ProtocolNotSupported;

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
	case ETIMEDOUT:		/* no answer in time: the connection was closed */
		return DaemonGone;
	case ENOENT:		/* kvp_connect's: no socket there (see Client_init) */
		return NotFound;
	case EINVAL:
		return InvalidArgument;
	case EPROTONOSUPPORT:
		return ProtocolNotSupported;
	default:
		return Error;
	}
}

/*
 * raise_kvp() - raise the exception of rc for what, with the library's
 * explanation (msg, read on the failing thread) when it has one:
 * OSError(errno, "what: strerror: explanation").
 */
PyObject *raise_kvp(int rc, const char *what, const char *msg)
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

	if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&PageViewType) < 0 ||
	    PyType_Ready(&LockType) < 0 || PyType_Ready(&SaverType) < 0)
		return NULL;
	m = PyModule_Create(&mod);
	if (!m)
		return NULL;
	if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
	    PyModule_AddObjectRef(m, "PageView", (PyObject *)&PageViewType) < 0 ||
	    PyModule_AddObjectRef(m, "Lock", (PyObject *)&LockType) < 0 ||
	    PyModule_AddObjectRef(m, "Saver", (PyObject *)&SaverType) < 0)
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
			       "connection, or did not answer within the Client's timeout (ENOENT, "
			       "ECONNREFUSED, EPIPE, ETIMEDOUT).");
	InvalidArgument = add_error(m, "InvalidArgument", Error, "An argument kvpool refuses "
				    "(EINVAL).");
	NotFound = add_error(m, "NotFound", Error, "No such client or namespace (ENOENT).");
	ProtocolNotSupported = add_error(m, "ProtocolNotSupported", Error, "kvpoold speaks no "
					 "protocol version this package does, or its older one "
					 "lacks the call (EPROTONOSUPPORT).");
	if (!NoSpace || !Stale || !PermissionDenied || !Mismatch || !Limit || !NotConnected ||
	    !DaemonGone || !InvalidArgument || !NotFound || !ProtocolNotSupported)
		goto fail;
	/* the release this package was built as (setup.py: kvpool's VERSION) */
	if (PyModule_AddStringConstant(m, "__version__", KVPOOL_PY_VERSION) < 0 ||
	    PyModule_AddIntConstant(m, "PROTOCOL", KVP_WIRE_VERSION) < 0)
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
