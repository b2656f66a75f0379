/* SPDX-License-Identifier: MIT */
/*
 * blockcopy.c - kvpool._kvpool.copy_blocks(): many KV blocks between two
 * strided layouts in one call, for the engine connectors (kvpool.vllm):
 * pool pages (per layer K's kv_heads x block_tokens x head_dim, then V's)
 * on one side, an engine's per-layer KV tensors on the other (vLLM's
 * [block, head, token, K|V], MLA's [block, token, latent]), with the GIL
 * released and the blocks split over threads. K and V may differ in size
 * (run and run_v), and V may be absent (run_v 0: MLA).
 *
 * Every address is checked against the range of its side's layer before
 * anything is copied, with every sum and product of strides and counts
 * checked for overflow: a bad block index or stride is a ValueError,
 * never a stray write.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "blockcopy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define BC_MAX_LAYERS	1024u
#define BC_MAX_THREADS	16u

struct bc_job {
	const struct bc_side *dst, *src;
	const int64_t *pairs;	/* [n][2]: dst block, src block */
	size_t from, to, layers, heads, tokens, run, run_v;	/* run_v 0: no V */
	bool stream;		/* non-temporal stores (a copy far larger than the caches) */
};

/* Copies of at least this many bytes in all bypass the caches on the way
 * out: the destination is not read soon by this CPU (a GPU, or a later
 * step), and streaming stores skip the read-for-ownership of every line. */
#define BC_STREAM_BYTES	(32u << 20)

/* bc_run() - one contiguous run: streamed when asked and 16-byte aligned. */
static inline void bc_run(char *d, const char *s, size_t n, bool stream)
{
#if defined(__SSE2__)
	if (stream && !((uintptr_t)d & 15) && !(n & 63)) {
		size_t i;

		for (i = 0; i < n; i += 64) {
			__m128i a = _mm_loadu_si128((const __m128i *)(s + i));
			__m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
			__m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
			__m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));

			_mm_stream_si128((__m128i *)(d + i), a);
			_mm_stream_si128((__m128i *)(d + i + 16), b);
			_mm_stream_si128((__m128i *)(d + i + 32), c);
			_mm_stream_si128((__m128i *)(d + i + 48), e);
		}
		return;
	}
#else
	(void)stream;
#endif
	memcpy(d, s, n);
}

/* bc_half() - K (v false) or V of one block of one layer, head by head:
 * one run per head where both sides keep a head's tokens contiguous. */
static void bc_half(const struct bc_job *j, char *dl, const char *sl, bool v)
{
	const struct bc_side *d = j->dst, *s = j->src;
	size_t run = v ? j->run_v : j->run, h, t;
	Py_ssize_t dh = v ? d->shead_v : d->shead, dt = v ? d->stoken_v : d->stoken;
	Py_ssize_t sh = v ? s->shead_v : s->shead, st = v ? s->stoken_v : s->stoken;
	bool rows = dt == (Py_ssize_t)run && st == (Py_ssize_t)run;

	if (v) {
		dl += d->skv;
		sl += s->skv;
	}
	for (h = 0; h < j->heads; h++) {
		char *dr = dl + h * dh;
		const char *sr = sl + h * sh;

		if (rows) {
			bc_run(dr, sr, run * j->tokens, j->stream);
			continue;
		}
		for (t = 0; t < j->tokens; t++)
			bc_run(dr + t * dt, sr + t * st, run, j->stream);
	}
}

static void bc_copy(const struct bc_job *j)
{
	const struct bc_side *d = j->dst, *s = j->src;
	/* K and V interleaved in each token on the destination (vLLM's K|V
	 * cells): write it in order, token by token, both halves at once */
	bool cells = j->run_v && d->skv < d->stoken && d->stoken != (Py_ssize_t)j->run;
	size_t p, l, h, t;

	for (p = j->from; p < j->to; p++) {
		int64_t db = j->pairs[2 * p], sb = j->pairs[2 * p + 1];

		for (l = 0; l < j->layers; l++) {
			char *dl = (char *)(d->layer[l].base + (uintptr_t)(db * d->sblock));
			const char *sl = (const char *)(s->layer[l].base +
							(uintptr_t)(sb * s->sblock));

			if (!cells) {
				bc_half(j, dl, sl, false);
				if (j->run_v)
					bc_half(j, dl, sl, true);
				continue;
			}
			for (h = 0; h < j->heads; h++)
				for (t = 0; t < j->tokens; t++) {
					bc_run(dl + h * d->shead + t * d->stoken,
					       sl + h * s->shead + t * s->stoken, j->run, j->stream);
					bc_run(dl + d->skv + h * d->shead_v + t * d->stoken_v,
					       sl + s->skv + h * s->shead_v + t * s->stoken_v,
					       j->run_v, j->stream);
				}
		}
	}
}

static void *bc_thread(void *arg)
{
	bc_copy(arg);
#if defined(__SSE2__)
	_mm_sfence();	/* the streamed stores are visible before the join */
#endif
	return NULL;
}

/* side_parse() - (layers, strides) of one side: layers a sequence of
 * (base, lo, hi) address triples, strides (block, kv, head, token) and,
 * where V's differ from K's, (..., head_v, token_v). */
static int side_parse(PyObject *layers, PyObject *strides, const char *what,
		      struct bc_side *s, size_t *nlayers)
{
	PyObject *seq;
	Py_ssize_t i, n;

	s->shead_v = s->stoken_v = -1;
	if (!PyArg_ParseTuple(strides, "nnnn|nn", &s->sblock, &s->skv, &s->shead, &s->stoken,
			      &s->shead_v, &s->stoken_v)) {
		PyErr_Format(PyExc_TypeError, "%s strides must be 4 ints (block, kv, head, "
			     "token bytes) or 6 (V's head and token after them)", what);
		return -1;
	}
	if (s->shead_v == -1 && s->stoken_v == -1) {
		s->shead_v = s->shead;
		s->stoken_v = s->stoken;
	}
	if (s->sblock < 0 || s->skv < 0 || s->shead < 0 || s->stoken < 0 ||
	    s->shead_v < 0 || s->stoken_v < 0) {
		PyErr_Format(PyExc_ValueError, "%s strides must not be negative", what);
		return -1;
	}
	seq = PySequence_Fast(layers, "layers must be a sequence of (base, lo, hi)");
	if (!seq)
		return -1;
	n = PySequence_Fast_GET_SIZE(seq);
	if (n < 1 || (size_t)n > BC_MAX_LAYERS || (*nlayers && (size_t)n != *nlayers)) {
		PyErr_Format(PyExc_ValueError, "%s has %zd layers (1..%u, and both sides the "
			     "same)", what, n, BC_MAX_LAYERS);
		Py_DECREF(seq);
		return -1;
	}
	s->layer = PyMem_Calloc((size_t)n, sizeof(*s->layer));
	if (!s->layer) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (i = 0; i < n; i++) {
		unsigned long long b, lo, hi;

		if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "KKK", &b, &lo, &hi)) {
			Py_DECREF(seq);
			return -1;
		}
		s->layer[i] = (struct bc_layer){ (uintptr_t)b, (uintptr_t)lo, (uintptr_t)hi };
	}
	*nlayers = (size_t)n;
	Py_DECREF(seq);
	return 0;
}

/* half_end() - one past the last byte of K's (or V's) heads x tokens runs
 * of run bytes, from off; false when that does not fit in a size_t
 * (strides or counts made to wrap). */
static bool half_end(size_t off, Py_ssize_t shead, Py_ssize_t stoken, size_t heads,
		     size_t tokens, size_t run, size_t *end)
{
	size_t h, t;

	return !__builtin_mul_overflow(heads - 1, (size_t)shead, &h) &&
	       !__builtin_mul_overflow(tokens - 1, (size_t)stoken, &t) &&
	       !__builtin_add_overflow(h, t, end) &&
	       !__builtin_add_overflow(*end, off, end) &&
	       !__builtin_add_overflow(*end, run, end);
}

/* side_span() - the bytes one block of one layer of s touches from its
 * first address: K's runs, and V's (run_v of them, from skv) if any. */
static bool side_span(const struct bc_side *s, size_t heads, size_t tokens, size_t run,
		      size_t run_v, size_t *span)
{
	size_t v;

	if (!half_end(0, s->shead, s->stoken, heads, tokens, run, span))
		return false;
	if (!run_v)
		return true;
	if (!half_end((size_t)s->skv, s->shead_v, s->stoken_v, heads, tokens, run_v, &v))
		return false;
	if (v > *span)
		*span = v;
	return true;
}

/* side_check() - whether block b of some layer of s lies outside that
 * layer's range (or its address wraps). Needs no GIL. */
static bool side_check(const struct bc_side *s, size_t layers, size_t span, int64_t b)
{
	uintptr_t off, a, end;
	size_t l;

	if (b < 0 || __builtin_mul_overflow((uintptr_t)b, (uintptr_t)s->sblock, &off))
		return true;
	for (l = 0; l < layers; l++) {
		if (__builtin_add_overflow(s->layer[l].base, off, &a) ||
		    __builtin_add_overflow(a, span, &end) || a < s->layer[l].lo ||
		    end > s->layer[l].hi)
			return true;
	}
	return false;
}

void bc_plan_free(struct bc_plan *p)
{
	PyMem_Free(p->dst.layer);
	PyMem_Free(p->src.layer);
	p->dst.layer = p->src.layer = NULL;
}

int bc_plan_parse(struct bc_plan *p, PyObject *dl, PyObject *ds, PyObject *sl, PyObject *ss,
		  size_t heads, size_t tokens, size_t run, Py_ssize_t run_v, unsigned int threads)
{
	*p = (struct bc_plan){ .threads = threads };
	if (run_v == -1)
		run_v = (Py_ssize_t)run;	/* V as big as K */
	if ((Py_ssize_t)heads < 1 || (Py_ssize_t)tokens < 1 || (Py_ssize_t)run < 1 ||
	    run_v < 0) {
		PyErr_SetString(PyExc_ValueError, "copy_blocks: heads, tokens and run must be "
				"positive, run_v positive or 0 (no V)");
		return -1;
	}
	p->heads = heads;
	p->tokens = tokens;
	p->run = run;
	p->run_v = (size_t)run_v;
	if (side_parse(dl, ds, "destination", &p->dst, &p->layers) < 0 ||
	    side_parse(sl, ss, "source", &p->src, &p->layers) < 0)
		goto bad;
	if (!side_span(&p->dst, heads, tokens, run, p->run_v, &p->dspan) ||
	    !side_span(&p->src, heads, tokens, run, p->run_v, &p->sspan)) {
		PyErr_Format(PyExc_ValueError, "copy_blocks: strides x (heads %zu, tokens %zu) "
			     "+ run %zu overflow the address space; nothing was copied", heads,
			     tokens, run);
		goto bad;
	}
	return 0;
bad:
	bc_plan_free(p);
	return -1;
}

int bc_plan_check(const struct bc_plan *p, const int64_t *pairs, size_t n, char *err,
		  size_t len)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const char *what = side_check(&p->dst, p->layers, p->dspan, pairs[2 * i]) ?
				   "destination" :
				   side_check(&p->src, p->layers, p->sspan, pairs[2 * i + 1]) ?
				   "source" : NULL;

		if (what) {
			snprintf(err, len, "copy_blocks: %s block %lld (pair %zu) is outside the "
				 "%s's memory; nothing was copied", what,
				 (long long)pairs[2 * i + (what[0] == 's')], i, what);
			return -1;
		}
	}
	return 0;
}

void bc_plan_copy(const struct bc_plan *p, const int64_t *pairs, size_t n)
{
	struct bc_job job[BC_MAX_THREADS];
	pthread_t tid[BC_MAX_THREADS];
	size_t i, nt, started = 0;
	bool stream;

	nt = p->threads < 1 ? 1 : p->threads > BC_MAX_THREADS ? BC_MAX_THREADS : p->threads;
	if (nt > n)
		nt = n ? n : 1;
	stream = (double)n * (double)p->layers * (double)p->heads * (double)p->tokens *
		 (double)(p->run + p->run_v) >= (double)BC_STREAM_BYTES;
	for (i = 0; i < nt; i++)
		job[i] = (struct bc_job){ &p->dst, &p->src, pairs, n * i / nt, n * (i + 1) / nt,
					  p->layers, p->heads, p->tokens, p->run, p->run_v,
					  stream };
	for (i = 1; i < nt; i++) {
		if (pthread_create(&tid[i], NULL, bc_thread, &job[i]) != 0)
			break;
		started = i;
	}
	/* slices whose thread did not start are copied here */
	for (i = started + 1; i < nt; i++)
		bc_thread(&job[i]);
	bc_thread(&job[0]);
	for (i = 1; i <= started; i++)
		pthread_join(tid[i], NULL);
}

PyObject *kvp_py_copy_blocks(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "dst_layers", "dst_strides", "src_layers", "src_strides",
				  "pairs", "heads", "tokens", "run", "threads", "run_v", NULL };
	PyObject *odl, *ods, *osl, *oss, *opairs, *ret = NULL;
	struct bc_plan plan;
	size_t heads, tokens, run, n;
	Py_ssize_t run_v = -1;
	unsigned int threads = 1;
	char err[256];
	Py_buffer pb;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOnnn|In", kwlist, &odl, &ods, &osl,
					 &oss, &opairs, &heads, &tokens, &run, &threads, &run_v))
		return NULL;
	if (bc_plan_parse(&plan, odl, ods, osl, oss, heads, tokens, run, run_v, threads) < 0)
		return NULL;
	if (PyObject_GetBuffer(opairs, &pb, PyBUF_C_CONTIGUOUS) < 0)
		goto out_plan;
	if (pb.len % 16 || (pb.itemsize != 8 && pb.itemsize != 1)) {
		PyErr_Format(PyExc_ValueError, "copy_blocks: pairs must be int64 (dst, src) "
			     "pairs, got %zd bytes of %zd-byte items", pb.len, pb.itemsize);
		goto out;
	}
	n = (size_t)pb.len / 16;
	if (bc_plan_check(&plan, pb.buf, n, err, sizeof(err)) < 0) {
		PyErr_SetString(PyExc_ValueError, err);
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	bc_plan_copy(&plan, pb.buf, n);
	Py_END_ALLOW_THREADS
	ret = PyLong_FromSize_t(n);
out:
	PyBuffer_Release(&pb);
out_plan:
	bc_plan_free(&plan);
	return ret;
}
