/* SPDX-License-Identifier: MIT */
/*
 * views.c - a page's bytes without a copy: PageView (the buffer protocol;
 * it keeps its Client and the mapping alive), and DLPack capsules over
 * kvpool's memory for torch and NumPy.
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

/* --- PageView ------------------------------------------------------------ */

PyObject *make_view(ClientObject *self, kvp_page h, void *addr, Py_ssize_t len)
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

PyObject *Client_page(ClientObject *self, PyObject *arg)
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

PyTypeObject PageViewType = {
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
PyObject *mod_dlpack(PyObject *mod, PyObject *args)
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
