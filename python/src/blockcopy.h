/* SPDX-License-Identifier: MIT */
/* blockcopy.h - kvpool._kvpool.copy_blocks() (blockcopy.c). */
#ifndef KVPOOL_PY_BLOCKCOPY_H
#define KVPOOL_PY_BLOCKCOPY_H

#include <Python.h>

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

#endif
