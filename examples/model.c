/* SPDX-License-Identifier: MIT */
/*
 * model.c - the tiny transformer of the example model server: owns the
 * weights (random from a fixed seed), the scratch activations and the
 * forward pass over a batch of token rows (see model.h), on the host, or
 * handed to model_cuda.cu with the same tables and RoPE values.
 *
 * Batch invariance is the point of the arithmetic here: every output
 * element of a matmul is one mm_dot() over its row in a fixed order of 8
 * partial sums, norms likewise, attention is the kvpool reference per
 * row. So a row's results do not depend on which other rows share the
 * call, and K/V computed by one process are the bytes another would
 * compute. The compiler keeps that as long as it does not reassociate
 * floating point (no -ffast-math).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_cuda.h"

#define KV_DIM		(MODEL_KV_HEADS * MODEL_HEAD_DIM)
#define ROPE_BASE	10000.0
#define EMBED_STD	1.0f		/* input embedding: unit RMS */
#define WEIGHT_SEED	0x6b76706f6f6cull	/* "kvpool" */

struct model_layer {
	float *norm1;		/* [DIM] */
	float *wq;		/* [DIM][DIM]    rows: outputs, columns: inputs */
	float *wk;		/* [KV_DIM][DIM] */
	float *wv;		/* [KV_DIM][DIM] */
	float *wo;		/* [DIM][DIM] */
	float *norm2;		/* [DIM] */
	float *wg;		/* [FFN][DIM]    SwiGLU gate */
	float *wu;		/* [FFN][DIM]    SwiGLU up */
	float *wd;		/* [DIM][FFN]    down */
};

struct model {
	float *weights;				/* one allocation for all */
	size_t nweights;			/* floats in it */
	float *embed;				/* [VOCAB][DIM] */
	float *norm_f;				/* [DIM] */
	float *head;				/* [VOCAB][DIM] output, untied */
	struct model_layer layer[MODEL_LAYERS];
	struct kvp_kv_layout layout;

	/* scratch of one forward pass, MODEL_MAX_ROWS rows each */
	float *x, *h, *q, *k, *v, *att, *gate, *up;
	struct kvp_kv_slot *slots;		/* [rows] */
	uint32_t *ctx;				/* [rows] */
	uint64_t *tables;			/* [rows][max_blocks] */
	size_t tables_cap;			/* entries */

	/* RoPE: cos and sin of positions [0, rope_len), [pos][HEAD_DIM / 2] */
	float *rope_cos, *rope_sin;
	uint32_t rope_len;

	/* the GPU path, or NULL; then the per-row inputs it takes apart */
	struct model_cuda *gpu;
	uint32_t *tokens, *pos;			/* [rows] */
	bool *want;				/* [rows] */
	float *logits;				/* [rows][VOCAB] */
};

kvp_geometry model_geometry(void)
{
	kvp_geometry g = {
		.layers = MODEL_LAYERS, .kv_heads = MODEL_KV_HEADS,
		.head_dim = MODEL_HEAD_DIM, .block_tokens = MODEL_BLOCK_TOKENS,
		.dtype = MODEL_DTYPE, .model = MODEL_ID, .key_scheme = 0,
	};

	return g;
}

/* --- Weights ------------------------------------------------------------ */

/* xorshift64*: a fixed stream of 64-bit numbers from the seed. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* fill_uniform() - n values uniform in [-a, a) with a = std x sqrt(3), so
 * that their standard deviation is std. */
static void fill_uniform(float *w, size_t n, float std, uint64_t *s)
{
	float a = std * 1.7320508f;
	size_t i;

	for (i = 0; i < n; i++) {
		/* the top 24 bits: exact in a float */
		float u = (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f);

		w[i] = (2.0f * u - 1.0f) * a;
	}
}

static void fill_ones(float *w, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		w[i] = 1.0f;
}

/*
 * model_weights() - carve and fill every weight from one allocation.
 * Projections into the residual stream (wo, wd) are scaled down by
 * sqrt(2 x layers), as GPT-2 does, so that the stream stays near unit
 * RMS through the layers. Returns 0 or -ENOMEM.
 */
static int model_weights(struct model *m)
{
	const size_t per_layer = 2 * MODEL_DIM + 2 * (size_t)MODEL_DIM * MODEL_DIM +
				 2 * (size_t)KV_DIM * MODEL_DIM +
				 3 * (size_t)MODEL_FFN * MODEL_DIM;
	const float res = 1.0f / sqrtf(2.0f * MODEL_LAYERS);
	const float in_dim = 1.0f / sqrtf((float)MODEL_DIM);
	const float in_ffn = 1.0f / sqrtf((float)MODEL_FFN);
	uint64_t seed = WEIGHT_SEED;
	float *p;
	uint32_t l;

	m->nweights = 2 * (size_t)MODEL_VOCAB * MODEL_DIM + MODEL_DIM +
		      MODEL_LAYERS * per_layer;
	m->weights = malloc(m->nweights * sizeof(float));
	if (!m->weights)
		return -ENOMEM;
	p = m->weights;
	m->embed = p;
	p += (size_t)MODEL_VOCAB * MODEL_DIM;
	fill_uniform(m->embed, (size_t)MODEL_VOCAB * MODEL_DIM, EMBED_STD, &seed);
	m->head = p;
	p += (size_t)MODEL_VOCAB * MODEL_DIM;
	fill_uniform(m->head, (size_t)MODEL_VOCAB * MODEL_DIM, in_dim, &seed);
	m->norm_f = p;
	p += MODEL_DIM;
	fill_ones(m->norm_f, MODEL_DIM);
	for (l = 0; l < MODEL_LAYERS; l++) {
		struct model_layer *L = &m->layer[l];

		L->norm1 = p;
		p += MODEL_DIM;
		L->wq = p;
		p += (size_t)MODEL_DIM * MODEL_DIM;
		L->wk = p;
		p += (size_t)KV_DIM * MODEL_DIM;
		L->wv = p;
		p += (size_t)KV_DIM * MODEL_DIM;
		L->wo = p;
		p += (size_t)MODEL_DIM * MODEL_DIM;
		L->norm2 = p;
		p += MODEL_DIM;
		L->wg = p;
		p += (size_t)MODEL_FFN * MODEL_DIM;
		L->wu = p;
		p += (size_t)MODEL_FFN * MODEL_DIM;
		L->wd = p;
		p += (size_t)MODEL_DIM * MODEL_FFN;

		fill_ones(L->norm1, MODEL_DIM);
		fill_ones(L->norm2, MODEL_DIM);
		fill_uniform(L->wq, (size_t)MODEL_DIM * MODEL_DIM, in_dim, &seed);
		fill_uniform(L->wk, (size_t)KV_DIM * MODEL_DIM, in_dim, &seed);
		fill_uniform(L->wv, (size_t)KV_DIM * MODEL_DIM, in_dim, &seed);
		fill_uniform(L->wo, (size_t)MODEL_DIM * MODEL_DIM, in_dim * res, &seed);
		fill_uniform(L->wg, (size_t)MODEL_FFN * MODEL_DIM, in_dim, &seed);
		fill_uniform(L->wu, (size_t)MODEL_FFN * MODEL_DIM, in_dim, &seed);
		fill_uniform(L->wd, (size_t)MODEL_DIM * MODEL_FFN, in_ffn * res, &seed);
	}
	return 0;
}

/* open_cuda() - hand the weights to the GPU path, with room for the
 * per-row inputs it takes apart. */
static int open_cuda(struct model *m, char *err, size_t errlen)
{
	struct model_cuda_weights w;
	uint32_t l;

	memset(&w, 0, sizeof(w));
	w.base = m->weights;
	w.count = m->nweights;
	w.embed = (size_t)(m->embed - m->weights);
	w.head = (size_t)(m->head - m->weights);
	w.norm_f = (size_t)(m->norm_f - m->weights);
	for (l = 0; l < MODEL_LAYERS; l++) {
		const struct model_layer *L = &m->layer[l];

		w.layer[l].norm1 = (size_t)(L->norm1 - m->weights);
		w.layer[l].wq = (size_t)(L->wq - m->weights);
		w.layer[l].wk = (size_t)(L->wk - m->weights);
		w.layer[l].wv = (size_t)(L->wv - m->weights);
		w.layer[l].wo = (size_t)(L->wo - m->weights);
		w.layer[l].norm2 = (size_t)(L->norm2 - m->weights);
		w.layer[l].wg = (size_t)(L->wg - m->weights);
		w.layer[l].wu = (size_t)(L->wu - m->weights);
		w.layer[l].wd = (size_t)(L->wd - m->weights);
	}
	m->tokens = malloc(MODEL_MAX_ROWS * sizeof(*m->tokens));
	m->pos = malloc(MODEL_MAX_ROWS * sizeof(*m->pos));
	m->want = malloc(MODEL_MAX_ROWS * sizeof(*m->want));
	m->logits = malloc((size_t)MODEL_MAX_ROWS * MODEL_VOCAB * sizeof(*m->logits));
	if (!m->tokens || !m->pos || !m->want || !m->logits) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return model_cuda_open(&w, &m->gpu, err, errlen);
}

int model_open(enum model_backend backend, struct model **out, char *err, size_t errlen)
{
	const size_t R = MODEL_MAX_ROWS;
	struct model *m;
	int rc;

	snprintf(err, errlen, "out of memory");
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->layout = kvp_kv_layout_default(MODEL_LAYERS, MODEL_KV_HEADS,
					  MODEL_HEAD_DIM, MODEL_BLOCK_TOKENS);
	m->x = malloc(R * MODEL_DIM * sizeof(float));
	m->h = malloc(R * MODEL_DIM * sizeof(float));
	m->q = malloc(R * MODEL_DIM * sizeof(float));
	m->att = malloc(R * MODEL_DIM * sizeof(float));
	m->k = malloc(R * KV_DIM * sizeof(float));
	m->v = malloc(R * KV_DIM * sizeof(float));
	m->gate = malloc(R * MODEL_FFN * sizeof(float));
	m->up = malloc(R * MODEL_FFN * sizeof(float));
	m->slots = malloc(R * sizeof(*m->slots));
	m->ctx = malloc(R * sizeof(*m->ctx));
	if (!m->x || !m->h || !m->q || !m->att || !m->k || !m->v || !m->gate ||
	    !m->up || !m->slots || !m->ctx || model_weights(m) < 0) {
		model_close(m);
		return -ENOMEM;
	}
	if (backend == MODEL_CUDA) {
		rc = open_cuda(m, err, errlen);
		if (rc < 0) {
			model_close(m);
			return rc;
		}
	}
	*out = m;
	return 0;
}

void model_close(struct model *m)
{
	if (!m)
		return;
	model_cuda_close(m->gpu);
	free(m->tokens);
	free(m->pos);
	free(m->want);
	free(m->logits);
	free(m->weights);
	free(m->x);
	free(m->h);
	free(m->q);
	free(m->att);
	free(m->k);
	free(m->v);
	free(m->gate);
	free(m->up);
	free(m->slots);
	free(m->ctx);
	free(m->tables);
	free(m->rope_cos);
	free(m->rope_sin);
	free(m);
}

/* --- Row-wise operations ----------------------------------------------- */

/* mm_dot() - a . b over n (a multiple of 8) floats in 8 partial sums, a
 * fixed order the compiler may vectorize without reassociating. */
static float mm_dot(const float *a, const float *b, uint32_t n)
{
	float part[8] = { 0 };
	uint32_t i, j;

	for (i = 0; i < n; i += 8)
		for (j = 0; j < 8; j++)
			part[j] += a[i + j] * b[i + j];
	return ((part[0] + part[4]) + (part[1] + part[5])) +
	       ((part[2] + part[6]) + (part[3] + part[7]));
}

/*
 * matmul() - y[r][j] = x[r] . w[j] for r < rows, j < out.
 *
 *   y, // [rows][out]
 *   x, // [rows][in]
 *   w, // [out][in]
 *
 * Columns outside, rows inside: one weight row stays in L1 while every
 * row of x passes over it. Cost O(rows x out x in).
 */
static void matmul(float *y, const float *x, const float *w, uint32_t rows,
		   uint32_t out, uint32_t in)
{
	uint32_t r, j;

	for (j = 0; j < out; j++) {
		const float *wj = w + (size_t)j * in;

		for (r = 0; r < rows; r++)
			y[(size_t)r * out + j] = mm_dot(x + (size_t)r * in, wj, in);
	}
}

/* rmsnorm() - y = x / rms(x) x w, row by row over MODEL_DIM. */
static void rmsnorm(float *y, const float *x, const float *w, uint32_t rows)
{
	uint32_t r, i;

	for (r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * MODEL_DIM;
		float *yr = y + (size_t)r * MODEL_DIM;
		float s = 1.0f / sqrtf(mm_dot(xr, xr, MODEL_DIM) / MODEL_DIM + MODEL_NORM_EPS);

		for (i = 0; i < MODEL_DIM; i++)
			yr[i] = xr[i] * s * w[i];
	}
}

/* rope_grow() - the RoPE tables up to position len - 1. Values are a
 * pure function of (pos, i), so growing never changes old ones. Returns 0
 * or -ENOMEM. */
static int rope_grow(struct model *m, uint32_t len)
{
	const uint32_t half = MODEL_HEAD_DIM / 2;
	uint32_t cap = m->rope_len ? m->rope_len : 256, p, i;
	float *c, *s;

	if (len <= m->rope_len)
		return 0;
	while (cap < len)
		cap *= 2;
	c = realloc(m->rope_cos, (size_t)cap * half * sizeof(float));
	if (!c)
		return -ENOMEM;
	m->rope_cos = c;
	s = realloc(m->rope_sin, (size_t)cap * half * sizeof(float));
	if (!s)
		return -ENOMEM;
	m->rope_sin = s;
	for (p = m->rope_len; p < cap; p++) {
		for (i = 0; i < half; i++) {
			double a = p * pow(ROPE_BASE, -2.0 * i / MODEL_HEAD_DIM);

			c[(size_t)p * half + i] = (float)cos(a);
			s[(size_t)p * half + i] = (float)sin(a);
		}
	}
	m->rope_len = cap;
	return 0;
}

/* rope() - rotate pairs (i, i + half) of each of heads heads of a row by
 * the angles of position pos (the "rotate half" form). */
static void rope(const struct model *m, float *row, uint32_t heads, uint32_t pos)
{
	const uint32_t half = MODEL_HEAD_DIM / 2;
	const float *c = m->rope_cos + (size_t)pos * half;
	const float *s = m->rope_sin + (size_t)pos * half;
	uint32_t h, i;

	for (h = 0; h < heads; h++) {
		float *x = row + (size_t)h * MODEL_HEAD_DIM;

		for (i = 0; i < half; i++) {
			float a = x[i], b = x[i + half];

			x[i] = a * c[i] - b * s[i];
			x[i + half] = a * s[i] + b * c[i];
		}
	}
}

/* greedy() - the first printable byte (0x20 .. 0x7e) of the largest
 * logit: the example's answers are text that can be read and pasted into
 * the next prompt. */
static uint32_t greedy(const float *logits)
{
	uint32_t i, best = 0x20;

	for (i = 0x21; i < 0x7f; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* --- Forward pass -------------------------------------------------------- */

/*
 * forward_tables() - gather the rows' block tables into m->tables
 * ([rows][max_blocks], 0 past a row's context) and their slots and
 * context lengths. Returns max_blocks, or -ENOMEM.
 */
static int forward_tables(struct model *m, const struct model_row *rows, uint32_t n,
			  uint32_t *max_context)
{
	uint32_t r, b, max_blocks = 1, mc = 1;

	for (r = 0; r < n; r++) {
		m->ctx[r] = rows[r].pos + 1;
		m->slots[r] = rows[r].slot;
		if (m->ctx[r] > mc)
			mc = m->ctx[r];
	}
	max_blocks = (mc + MODEL_BLOCK_TOKENS - 1) / MODEL_BLOCK_TOKENS;
	if ((size_t)n * max_blocks > m->tables_cap) {
		uint64_t *t = realloc(m->tables, (size_t)n * max_blocks * sizeof(*t));

		if (!t)
			return -ENOMEM;
		m->tables = t;
		m->tables_cap = (size_t)n * max_blocks;
	}
	for (r = 0; r < n; r++) {
		uint64_t *row = m->tables + (size_t)r * max_blocks;
		uint32_t used = (m->ctx[r] + MODEL_BLOCK_TOKENS - 1) / MODEL_BLOCK_TOKENS;

		memcpy(row, rows[r].table, used * sizeof(*row));
		for (b = used; b < max_blocks; b++)
			row[b] = 0;
	}
	*max_context = mc;
	return (int)max_blocks;
}

/* forward_attention() - one layer's attention block for all rows: q, k, v,
 * RoPE, K/V into the pages, paged attention, output projection into the
 * residual stream. Returns 0 or the kernels' error. */
static int forward_attention(struct model *m, const struct model_row *rows,
			     uint32_t n, uint32_t l, uint32_t max_blocks,
			     uint32_t max_context)
{
	const struct model_layer *L = &m->layer[l];
	struct kvp_attention_shape shape = {
		.layout = m->layout, .dtype = MODEL_DTYPE, .layer = l,
		.batch = n, .q_heads = MODEL_Q_HEADS, .max_blocks = max_blocks,
		.max_context = max_context,
		.scale = 1.0f / sqrtf((float)MODEL_HEAD_DIM),
	};
	uint32_t r, i;
	int rc;

	rmsnorm(m->h, m->x, L->norm1, n);
	matmul(m->q, m->h, L->wq, n, MODEL_DIM, MODEL_DIM);
	matmul(m->k, m->h, L->wk, n, KV_DIM, MODEL_DIM);
	matmul(m->v, m->h, L->wv, n, KV_DIM, MODEL_DIM);
	for (r = 0; r < n; r++) {
		rope(m, m->q + (size_t)r * MODEL_DIM, MODEL_Q_HEADS, rows[r].pos);
		rope(m, m->k + (size_t)r * KV_DIM, MODEL_KV_HEADS, rows[r].pos);
	}
	/* every row's K/V first: later rows of a prefill attend to them */
	rc = kvp_write_kv_ref(&m->layout, MODEL_DTYPE, l, m->k, m->v, m->slots, n);
	if (rc < 0)
		return rc;
	rc = kvp_paged_attention_decode_ref(&shape, m->att, m->q, m->tables, m->ctx);
	if (rc < 0)
		return rc;
	matmul(m->h, m->att, L->wo, n, MODEL_DIM, MODEL_DIM);
	for (i = 0; i < n * MODEL_DIM; i++)
		m->x[i] += m->h[i];
	return 0;
}

/* forward_mlp() - one layer's SwiGLU MLP into the residual stream. */
static void forward_mlp(struct model *m, uint32_t n, uint32_t l)
{
	const struct model_layer *L = &m->layer[l];
	size_t i;

	rmsnorm(m->h, m->x, L->norm2, n);
	matmul(m->gate, m->h, L->wg, n, MODEL_FFN, MODEL_DIM);
	matmul(m->up, m->h, L->wu, n, MODEL_FFN, MODEL_DIM);
	for (i = 0; i < (size_t)n * MODEL_FFN; i++) {
		float g = m->gate[i];

		m->gate[i] = g / (1.0f + expf(-g)) * m->up[i];
	}
	matmul(m->h, m->gate, L->wd, n, MODEL_DIM, MODEL_FFN);
	for (i = 0; i < (size_t)n * MODEL_DIM; i++)
		m->x[i] += m->h[i];
}

/* forward_cuda() - the same pass on the GPU, greedy on its logits here. */
static int forward_cuda(struct model *m, const struct model_row *rows, uint32_t n,
			uint32_t max_blocks, uint32_t max_context, uint32_t *next)
{
	struct model_cuda_batch b = {
		.n = n, .tokens = m->tokens, .pos = m->pos, .ctx = m->ctx,
		.slots = m->slots, .tables = m->tables, .max_blocks = max_blocks,
		.max_context = max_context, .want_next = m->want,
		.rope_cos = m->rope_cos, .rope_sin = m->rope_sin, .rope_len = m->rope_len,
	};
	uint32_t r;
	int rc;

	for (r = 0; r < n; r++) {
		m->tokens[r] = rows[r].token;
		m->pos[r] = rows[r].pos;
		m->want[r] = rows[r].want_next;
	}
	rc = model_cuda_forward(m->gpu, &b, m->logits);
	if (rc < 0)
		return rc;
	for (r = 0; r < n; r++)
		if (rows[r].want_next)
			next[r] = greedy(m->logits + (size_t)r * MODEL_VOCAB);
	return 0;
}

int model_forward(struct model *m, const struct model_row *rows, uint32_t n,
		  uint32_t *next)
{
	uint32_t r, l, max_context = 1;
	float logits[MODEL_VOCAB];
	int max_blocks, rc;

	if (n == 0)
		return 0;
	if (n > MODEL_MAX_ROWS)
		return -EINVAL;
	for (r = 0; r < n; r++)
		if (rows[r].token >= MODEL_VOCAB)
			return -EINVAL;
	max_blocks = forward_tables(m, rows, n, &max_context);
	if (max_blocks < 0)
		return max_blocks;
	rc = rope_grow(m, max_context);
	if (rc < 0)
		return rc;
	if (m->gpu)
		return forward_cuda(m, rows, n, (uint32_t)max_blocks, max_context, next);
	for (r = 0; r < n; r++)
		memcpy(m->x + (size_t)r * MODEL_DIM,
		       m->embed + (size_t)rows[r].token * MODEL_DIM,
		       MODEL_DIM * sizeof(float));
	for (l = 0; l < MODEL_LAYERS; l++) {
		rc = forward_attention(m, rows, n, l, (uint32_t)max_blocks, max_context);
		if (rc < 0)
			return rc;
		forward_mlp(m, n, l);
	}
	rmsnorm(m->h, m->x, m->norm_f, n);
	for (r = 0; r < n; r++) {
		if (!rows[r].want_next)
			continue;
		matmul(logits, m->h + (size_t)r * MODEL_DIM, m->head, 1,
		       MODEL_VOCAB, MODEL_DIM);
		next[r] = greedy(logits);
	}
	return 0;
}
