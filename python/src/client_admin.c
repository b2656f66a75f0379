/* SPDX-License-Identifier: MIT */
/*
 * client_admin.c - kvpool.Client's inspection and admin methods: info,
 * stats, the remote policy, evict, the listings (clients, pages,
 * prefixes), disconnect and drop_namespace.
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

PyObject *Client_info(ClientObject *self, PyObject *unused)
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

PyObject *Client_stats(ClientObject *self, PyObject *unused)
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

PyObject *Client_set_remote_policy(ClientObject *self, PyObject *args, PyObject *kw)
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

PyObject *Client_evict(ClientObject *self, PyObject *args, PyObject *kw)
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

PyObject *Client_list_clients(ClientObject *self, PyObject *unused)
{
	struct list_args a = { .which = 0 };

	(void)unused;
	return list_call(self, &a);
}

PyObject *Client_list_pages(ClientObject *self, PyObject *args, PyObject *kw)
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

PyObject *Client_list_prefixes(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "namespace", "top", NULL };
	struct list_args a = { .which = 2 };

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zI", kwlist, &a.ns, &a.top))
		return NULL;
	return list_call(self, &a);
}

PyObject *Client_disconnect(ClientObject *self, PyObject *arg)
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

PyObject *Client_drop_namespace(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "force", NULL };
	const char *ns;
	int force = 0, rc;
	char err[ERRBUF];

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$p", kwlist, &ns, &force))
		return NULL;
	if (!client_ok(self))
		return NULL;
	CALL(rc, force ? kvp_drop_namespace(self->c, ns) : kvp_drop_unused_namespace(self->c, ns));
	if (rc < 0)
		return raise_kvp(rc, "drop_namespace", err);
	Py_RETURN_NONE;
}
