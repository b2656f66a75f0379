/* SPDX-License-Identifier: MIT */
/*
 * model_cuda.h - the GPU path of the example model (model.c calls it
 * when the daemon's backend is cuda): the same forward pass with the
 * weights and activations in device memory, cuBLAS for the projections,
 * the kvpool CUDA kernels (kvp_write_kv_cuda,
 * kvp_paged_attention_decode_cuda) on the pool's device pages, and small
 * kernels of its own for the norms, RoPE and SwiGLU.
 *
 * Like the host path it is batch invariant: every projection of a row is
 * one cublasSgemv of the same shape whatever else the batch holds (a
 * batched GEMM would pick its algorithm, and its summation order, by the
 * batch's size), the norm of a row is one fixed-order block reduction,
 * and attention splits a sequence by its own length. So K and V computed
 * in one process are the bytes another computes. The GPU's results are
 * not the CPU's bit for bit (another summation order); a namespace is
 * served by one backend, so they never meet.
 */
#ifndef KVPOOL_EXAMPLES_MODEL_CUDA_H
#define KVPOOL_EXAMPLES_MODEL_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool_kernels.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where each weight is in the host's one allocation, in floats from base
 * (model.c's layout, shapes as documented there). */
struct model_cuda_weights {
	const float *base;
	size_t count;
	size_t embed, head, norm_f;
	struct {
		size_t norm1, wq, wk, wv, wo, norm2, wg, wu, wd;
	} layer[MODEL_LAYERS];
};

/* One forward pass, everything in host memory: model.c's rows taken
 * apart, with the block tables already padded to max_blocks. */
struct model_cuda_batch {
	uint32_t n;
	const uint32_t *tokens;		/* [n] */
	const uint32_t *pos;		/* [n] */
	const uint32_t *ctx;		/* [n]: pos + 1 */
	const struct kvp_kv_slot *slots;	/* [n], device page addresses */
	const uint64_t *tables;		/* [n][max_blocks], device page addresses */
	uint32_t max_blocks, max_context;
	const bool *want_next;		/* [n] */
	const float *rope_cos, *rope_sin;	/* [rope_len][HEAD_DIM / 2] */
	uint32_t rope_len;
};

struct model_cuda;

/*
 * model_cuda_open() - copy the weights to the current device and set up
 * cuBLAS, a stream and scratch for MODEL_MAX_ROWS rows. Returns 0 and
 * *out, -ENOTSUP (built without CUDA), -ENODEV (no device) or -ENOMEM,
 * with err saying why.
 */
int model_cuda_open(const struct model_cuda_weights *w, struct model_cuda **out,
		    char *err, size_t errlen);

/* model_cuda_close() - free g (may be NULL). */
void model_cuda_close(struct model_cuda *g);

/*
 * model_cuda_forward() - run b on the GPU: K/V of every row into its
 * slot, attention over its table, and for rows with want_next the logits
 * into logits[r][MODEL_VOCAB] (host memory). Returns when they are there
 * (so the pages are written before the caller publishes them): 0,
 * -EINVAL from the kernels, -ENOMEM, or -EIO (a CUDA or cuBLAS error,
 * reported on stderr).
 */
int model_cuda_forward(struct model_cuda *g, const struct model_cuda_batch *b,
		       float *logits);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_EXAMPLES_MODEL_CUDA_H */
