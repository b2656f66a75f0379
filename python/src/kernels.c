/* SPDX-License-Identifier: MIT */
/*
 * kernels.c - the kernels' C references for Python: paged attention
 * decode over host pages (kvpool_kernels.h).
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
PyObject *mod_attention_ref(PyObject *mod, PyObject *args, PyObject *kw)
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
