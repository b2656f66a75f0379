/* SPDX-License-Identifier: MIT */
/* blockcopy.h - kvpool._kvpool.copy_blocks() (blockcopy.c). */
#ifndef KVPOOL_PY_BLOCKCOPY_H
#define KVPOOL_PY_BLOCKCOPY_H

#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

struct bc_layer {
	uintptr_t base, lo, hi;	/* block 0's address; the bytes it may touch */
};

struct bc_side {
	struct bc_layer *layer;
	Py_ssize_t sblock, skv, shead, stoken;	/* byte strides; skv: V from K */
	Py_ssize_t shead_v, stoken_v;		/* V's, where they differ from K's */
};

/* A copy's two sides and geometry, parsed once (with the GIL) and then
 * checked against and run over pairs without it. */
struct bc_plan {
	struct bc_side dst, src;
	size_t layers, heads, tokens, run, run_v, dspan, sspan;
	unsigned int threads;
};

/*
 * copy_blocks(dst_layers, dst_strides, src_layers, src_strides, pairs,
 * heads, tokens, run, threads=1, run_v=-1) - for each (dst, src) int64
 * pair of block indexes in pairs, copy every layer's K and V of block src
 * to block dst: heads x tokens runs of run bytes each for K, of run_v
 * bytes for V (-1: run; 0: there is no V, MLA). A side's layers are
 * (base, lo, hi) address triples (block 0 of that layer, and the range
 * its bytes must fall in), its strides (block, kv, head, token) in bytes,
 * kv being V's offset from K, and (..., head_v, token_v) where V's head
 * and token strides differ from K's. Returns the number of pairs copied.
 */
PyObject *kvp_py_copy_blocks(PyObject *mod, PyObject *args, PyObject *kw);

/* bc_plan_parse() - copy_blocks()'s arguments but the pairs into *p (the
 * GIL held); -1 with a Python error. bc_plan_free() after either. */
int bc_plan_parse(struct bc_plan *p, PyObject *dst_layers, PyObject *dst_strides,
		  PyObject *src_layers, PyObject *src_strides, size_t heads, size_t tokens,
		  size_t run, Py_ssize_t run_v, unsigned int threads);
void bc_plan_free(struct bc_plan *p);

/* bc_plan_check() - 0 when every (dst, src) pair of pairs[0..n) lies
 * inside both sides' memory, else -1 with why in err; no GIL needed. */
int bc_plan_check(const struct bc_plan *p, const int64_t *pairs, size_t n, char *err,
		  size_t len);

/* bc_plan_copy() - the copy of pairs[0..n) (checked), over p->threads
 * threads; run it without the GIL. */
void bc_plan_copy(const struct bc_plan *p, const int64_t *pairs, size_t n);

#endif
