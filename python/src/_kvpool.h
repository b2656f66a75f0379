/* SPDX-License-Identifier: MIT */
/*
 * _kvpool.h - what the files of the CPython binding share (and, built
 * with -fvisibility=hidden, no one else sees): the Client and PageView
 * objects, the exceptions, and the functions one file offers another.
 * _kvpool.c holds the module and its errors, client.c the Client type and
 * its page and sharing methods, client_admin.c its inspection and admin
 * methods, args.c the parsing of handles, keys and token ids, views.c
 * PageView and DLPack, kernels.c the C references, keys.c the key
 * functions, transfer.c whole loads and saves, saver.c the Lock and the
 * Saver. Each function's comment is at its definition.
 */
#ifndef KVP_PY_KVPOOL_H
#define KVP_PY_KVPOOL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvpool.h"

/* The exceptions (PyInit__kvpool() makes them). */
extern PyObject *Error, *NoSpace, *Stale, *PermissionDenied, *Mismatch, *Limit,
	*NotConnected, *DaemonGone, *InvalidArgument, *NotFound, *ProtocolNotSupported;

/* Bumped in every child after fork(): a Client remembers the value it was
 * made under. */
extern volatile unsigned long fork_gen;

extern PyTypeObject ClientType, PageViewType, LockType, SaverType;

/* A copy of kvp_last_error() taken on the calling thread. */
#define ERRBUF 640
#define SAVE_ERROR(buf) snprintf((buf), ERRBUF, "%s", kvp_last_error())

/* CALL(rc, expr) - rc = expr (an int) without the GIL, saving the error
 * text into err (a char[ERRBUF] of the caller) when it fails. */
#define CALL(rc, expr)                                                        \
	do {                                                                  \
		Py_BEGIN_ALLOW_THREADS                                        \
		(rc) = (expr);                                                \
		if ((rc) < 0)                                                 \
			SAVE_ERROR(err);                                      \
		Py_END_ALLOW_THREADS                                          \
	} while (0)

typedef struct {
	PyObject_HEAD
	kvp_client *c;
	kvp_info_t info;
	unsigned long gen;	/* fork_gen when connected */
	Py_ssize_t views;	/* PageView objects alive (arrays keep theirs) */
	bool readonly;		/* views are read-only */
} ClientObject;

/* kvpool._kvpool.Lock: a recursive mutex (saver.c). */
typedef struct {
	PyObject_HEAD
	pthread_mutex_t mu;
} LockObject;

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

/* --- _kvpool.c: errors, the module ----------------------------------------- */
PyObject *raise_kvp(int rc, const char *what, const char *msg);

/* --- client.c: the Client type --------------------------------------------- */
bool client_ok(ClientObject *self);
int Client_init(ClientObject *self, PyObject *args, PyObject *kw);
void *held_address(ClientObject *self, PyObject *arg, unsigned long long *h);
void in_child(void);

/* --- args.c: handles, keys and token ids as arguments ---------------------- */
kvp_page *handles_from(PyObject *seq, Py_ssize_t *n);
PyObject *handles_to_list(const kvp_page *p, Py_ssize_t n);
int key_from(PyObject *o, kvp_key *k, const char *what);
int opt_key(PyObject *o, kvp_key *k, const kvp_key **out, const char *what);
kvp_key *keys_from(PyObject *o, Py_ssize_t *n);
PyObject *keys_to_list(const kvp_key *k, Py_ssize_t n, bool short16);
int tokens_get(PyObject *o, struct tokens *t);
void tokens_release(struct tokens *t);
bool short_keys(uint32_t scheme);

/* --- client_admin.c: inspection and admin ---------------------------------- */
PyObject *Client_info(ClientObject *self, PyObject *unused);
PyObject *Client_stats(ClientObject *self, PyObject *unused);
PyObject *Client_set_remote_policy(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_evict(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_list_clients(ClientObject *self, PyObject *unused);
PyObject *Client_list_pages(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_list_prefixes(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_disconnect(ClientObject *self, PyObject *arg);
PyObject *Client_drop_namespace(ClientObject *self, PyObject *args, PyObject *kw);

/* --- views.c: PageView and DLPack ------------------------------------------ */
PyObject *Client_page(ClientObject *self, PyObject *arg);
PyObject *Client_load_blocks(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *Client_save_blocks(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *error_object(int rc, const char *what, const char *msg);
int64_t *int64s(PyObject *o, Py_ssize_t *n, const char *what);
int page_pairs(kvp_client *c, const kvp_page *pages, const int64_t *blocks, size_t n,
	       bool to_pool, int64_t *pairs);
PyObject *make_view(ClientObject *self, kvp_page h, void *addr, Py_ssize_t len);
PyObject *mod_dlpack(PyObject *mod, PyObject *args);

/* --- kernels.c: the C references ------------------------------------------- */
PyObject *mod_attention_ref(PyObject *mod, PyObject *args, PyObject *kw);

/* --- keys.c: key functions ------------------------------------------------- */
PyObject *mod_key_root(PyObject *m, PyObject *args);
PyObject *mod_key_chain(PyObject *m, PyObject *args, PyObject *kw);
PyObject *mod_version(PyObject *m, PyObject *unused);

#endif /* KVP_PY_KVPOOL_H */
