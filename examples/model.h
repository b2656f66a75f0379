/* SPDX-License-Identifier: MIT */
/*
 * model.h - the tiny transformer of the example model server: a
 * deterministic decoder-only model whose K and V live in kvpool pages.
 *
 * The model: byte-level vocabulary (256), 4 layers, d_model 512, 8 query
 * heads and 2 KV heads (GQA) of head_dim 64, RMSNorm, RoPE, a SwiGLU MLP
 * of 1024, a separate output embedding, greedy decoding over the
 * printable bytes (so that answers are text one can paste into the next
 * prompt; a random tied model would mostly echo its last token). The
 * weights are random from a fixed seed (xorshift64*), scaled like a real
 * initialisation, so every process that opens the model has the same
 * weights bit for bit. K and V are stored in fp32 (KVP_DTYPE_F32): the C
 * references take fp32 as it is, and the example does not need a half
 * conversion (an f16 page would be half the size).
 *
 * A forward pass takes a batch of token ROWS, each with its own position,
 * block table and slot: prefill of one sequence (many rows with the same
 * block table, context lengths pos + 1) and decode of many sequences (one
 * row each) are the same call. Every row is computed with the same
 * arithmetic whatever the batch holds (row-wise matmuls, fixed summation
 * order, attention per row), so a token's K and V are the same bytes
 * whether it was computed in a prefill, a decode step, alone or in a
 * batch: what makes pages shareable between processes and requests.
 */
#ifndef KVPOOL_EXAMPLES_MODEL_H
#define KVPOOL_EXAMPLES_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvpool.h>
#include <kvpool_kernels.h>

#define MODEL_VOCAB		256u
#define MODEL_LAYERS		4u
#define MODEL_DIM		512u	/* d_model = q_heads x head_dim */
#define MODEL_Q_HEADS		8u
#define MODEL_KV_HEADS		2u
#define MODEL_HEAD_DIM		64u
#define MODEL_FFN		1024u	/* SwiGLU hidden size */
#define MODEL_BLOCK_TOKENS	16u	/* tokens per kvpool page */
#define MODEL_DTYPE		KVP_DTYPE_F32
#define MODEL_MAX_ROWS		256u	/* rows of one forward pass */
#define MODEL_ID		"kvpool-demo/tiny-4L"
#define MODEL_NAMESPACE		"demo"

/* Where the forward pass runs: the host (activations in host memory, the
 * kvpool C references on host-mapped pages), or the GPU (model_cuda.h:
 * cuBLAS and the kvpool CUDA kernels on device pages), chosen by the
 * daemon's backend, since that decides what kvp_page_ptr() returns. */
enum model_backend {
	MODEL_HOST = 0,
	MODEL_CUDA = 1,
};

#define MODEL_NORM_EPS		1e-5f	/* RMSNorm */

struct model;			/* weights and scratch; opaque */

/* One token of a forward pass. */
struct model_row {
	uint32_t token;			/* input token id, < MODEL_VOCAB */
	uint32_t pos;			/* its position in its sequence */
	const uint64_t *table;		/* the sequence's block table: page
					 * addresses of tokens 0 .. pos */
	struct kvp_kv_slot slot;	/* where its K and V go; page 0: they
					 * are in the pages already (cached) */
	bool want_next;			/* compute the next token after it */
};

/* model_geometry() - the kvpool geometry of the model's pages. */
kvp_geometry model_geometry(void);

/*
 * model_open() - build the weights (deterministic) and scratch space for
 * backend. *out is freed with model_close(). Returns 0, -ENOMEM, or for
 * MODEL_CUDA -ENOTSUP (built without CUDA), -ENODEV or -EIO, with err
 * saying why.
 */
int model_open(enum model_backend backend, struct model **out, char *err, size_t errlen);

/* model_close() - free m (may be NULL). */
void model_close(struct model *m);

/*
 * model_forward() - run rows[0..n) (n <= MODEL_MAX_ROWS) through the
 * model: writes each row's K and V of every layer into its slot, attends
 * over tokens 0 .. pos of its block table, and for rows with want_next
 * stores the greedy next token in next[i] (next has n entries; others are
 * left alone). The pages of every row's context must hold the K and V of
 * tokens before the row, or be written by an earlier row of the same
 * call. Not thread-safe on one m. Returns 0 or the kernels' -EINVAL (the
 * GPU path also -ENOMEM or -EIO).
 */
int model_forward(struct model *m, const struct model_row *rows, uint32_t n,
		  uint32_t *next);

#endif /* KVPOOL_EXAMPLES_MODEL_H */
