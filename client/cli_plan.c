/* SPDX-License-Identifier: MIT */
/*
 * cli_plan.c - `kvpool plan`: the KV-cache capacity planner. It needs no
 * daemon: from a model's geometry it works out the K/V bytes per token,
 * per page, per sequence and for all users, and how many sequences fit
 * in a GPU's memory with paging (each sequence rounded up to whole pages
 * of its mean length) against contiguous max-length reservation.
 *
 * K/V bytes per token = 2 (K and V) x layers x KV heads x head dim x
 * bytes per element; every figure below follows from it exactly (integer
 * arithmetic, overflow checked).
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/cli.h"
#include "client/size.h"

/*
 * Built-in models. Every figure is the one in the model's config.json on
 * its Hugging Face model card (huggingface.co/<repo>/blob/main/config.json):
 * layers = num_hidden_layers, kv_heads = num_key_value_heads, and head dim
 * = hidden_size / num_attention_heads (Llama-3.2-1B's config.json also
 * states head_dim 64 outright).
 */
struct model {
	const char *name;	/* what --model takes (case-insensitive) */
	const char *repo;	/* the Hugging Face repository of its config.json */
	uint32_t layers;	/* num_hidden_layers */
	uint32_t kv_heads;	/* num_key_value_heads */
	uint32_t hidden;	/* hidden_size */
	uint32_t heads;		/* num_attention_heads */
};

static const struct model models[] = {
	{ "Llama-3.1-8B", "meta-llama/Llama-3.1-8B", 32, 8, 4096, 32 },
	{ "Llama-3.1-70B", "meta-llama/Llama-3.1-70B", 80, 8, 8192, 64 },
	{ "Llama-3.1-405B", "meta-llama/Llama-3.1-405B", 126, 8, 16384, 128 },
	{ "Llama-3.2-1B", "meta-llama/Llama-3.2-1B", 16, 8, 2048, 32 },
	{ "Llama-3.2-3B", "meta-llama/Llama-3.2-3B", 28, 8, 3072, 24 },
	{ "Mistral-7B", "mistralai/Mistral-7B-v0.1", 32, 8, 4096, 32 },
	{ "Mixtral-8x7B", "mistralai/Mixtral-8x7B-v0.1", 32, 8, 4096, 32 },
	{ "Qwen2.5-7B", "Qwen/Qwen2.5-7B", 28, 4, 3584, 28 },
	{ "Qwen2.5-72B", "Qwen/Qwen2.5-72B", 80, 8, 8192, 64 },
};
#define NMODELS (sizeof(models) / sizeof(models[0]))

struct dtype {
	const char *name, *alias;
	uint32_t bytes;
};

static const struct dtype dtypes[] = {
	{ "f16", "fp16", 2 }, { "bf16", "bfloat16", 2 }, { "f32", "fp32", 4 },
	{ "fp8", "f8", 1 },
};

/* What the user asked for, and the geometry it comes to. */
struct plan {
	const struct model *model;	/* NULL: --layers/--kv-heads/--head-dim */
	uint64_t layers, kv_heads, head_dim;
	const struct dtype *dtype;
	uint64_t tokens, users, block_tokens, mean_tokens, gpu_mem;
	bool have_gpu, have_mean;
};

/* The figures, all exact. */
struct figures {
	uint64_t per_token, per_page, pages_per_seq, per_seq, all_users;
	uint64_t mean_pages, mean_paged;	/* a mean sequence in whole pages */
	uint64_t contiguous_fit, paged_fit, gpus_needed;
};

/* variant_word() - a part of a model name that fine-tunes and quantized
 * releases add without changing the geometry: -Instruct, -Chat, -hf,
 * -it, -Base, -v0.3, -2407, -AWQ, -FP8 and the like. */
static bool variant_word(const char *w, size_t n)
{
	static const char *const words[] = { "instruct", "chat", "hf", "it", "base",
					     "awq", "gptq", "fp8", "int4", "int8", "bnb",
					     "4bit", "8bit" };
	size_t i;

	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (n == strlen(words[i]) && strncasecmp(w, words[i], n) == 0)
			return true;
	if (n >= 2 && (w[0] == 'v' || w[0] == 'V') && isdigit((unsigned char)w[1]))
		return true;	/* v0.3 */
	for (i = 0; i < n && isdigit((unsigned char)w[i]); i++)
		;
	return n && i == n;	/* 2407 */
}

/* model_find() - the built-in model name is (its short name or its
 * repository, any case), or the one it is a variant of: the name then
 * goes on with variant words only (Llama-3.1-8B-Instruct is Llama-3.1-8B;
 * a repository's owner may be left out or changed). *variant says so. */
static const struct model *model_find(const char *name, bool *variant)
{
	const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
	size_t i, n;

	*variant = false;
	for (i = 0; i < NMODELS; i++)
		if (strcasecmp(name, models[i].name) == 0 ||
		    strcasecmp(name, models[i].repo) == 0)
			return &models[i];
	for (i = 0; i < NMODELS; i++) {
		const char *cand[2] = { models[i].name, strrchr(models[i].repo, '/') + 1 };
		int k;

		for (k = 0; k < 2; k++) {
			const char *rest, *end;

			n = strlen(cand[k]);
			if (strncasecmp(base, cand[k], n) || (base[n] && base[n] != '-'))
				continue;
			for (rest = base + n; *rest; rest = end) {
				rest++;
				end = strchr(rest, '-') ? strchr(rest, '-') : rest + strlen(rest);
				if (!variant_word(rest, (size_t)(end - rest)))
					break;
			}
			if (!*rest) {
				*variant = base[n] != '\0' || base != name;
				return &models[i];
			}
		}
	}
	return NULL;
}

static const struct dtype *dtype_find(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (strcasecmp(name, dtypes[i].name) == 0 ||
		    strcasecmp(name, dtypes[i].alias) == 0)
			return &dtypes[i];
	return NULL;
}

static bool mul(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

/* plan_compute() - every figure of p; false when one overflows 64 bits. */
static bool plan_compute(const struct plan *p, struct figures *f)
{
	memset(f, 0, sizeof(*f));
	if (!mul(2 * p->layers, p->kv_heads, &f->per_token) ||
	    !mul(f->per_token, p->head_dim, &f->per_token) ||
	    !mul(f->per_token, p->dtype->bytes, &f->per_token) ||
	    !mul(f->per_token, p->block_tokens, &f->per_page) ||
	    !mul(f->per_token, p->tokens, &f->per_seq) ||
	    !mul(f->per_seq, p->users, &f->all_users))
		return false;
	f->pages_per_seq = (p->tokens + p->block_tokens - 1) / p->block_tokens;
	f->mean_pages = (p->mean_tokens + p->block_tokens - 1) / p->block_tokens;
	if (!mul(f->mean_pages, f->per_page, &f->mean_paged))
		return false;
	if (p->have_gpu) {
		f->contiguous_fit = p->gpu_mem / f->per_seq;
		f->paged_fit = f->mean_paged ? p->gpu_mem / f->mean_paged : 0;
		f->gpus_needed = f->all_users / p->gpu_mem +
				 (f->all_users % p->gpu_mem ? 1 : 0);
	}
	return true;
}

/* bytes_line() - "1,342,177,280 bytes (1.34 GB, 1.25 GiB)" */
static const char *bytes_line(char *buf, size_t len, uint64_t v)
{
	char g[CLI_FMT_MAX], si[CLI_FMT_MAX], iec[CLI_FMT_MAX];

	snprintf(buf, len, "%s bytes (%s, %s)", cli_fmt_grouped(g, v), cli_fmt_si(si, v),
		 cli_fmt_iec(iec, v));
	return buf;
}

static void plan_text(const struct plan *p, const struct figures *f)
{
	char b[160], n1[CLI_FMT_MAX], n2[CLI_FMT_MAX];
	char s1[CLI_FMT_MAX], s2[CLI_FMT_MAX], s3[CLI_FMT_MAX];

	if (p->model)
		printf("model         %s: %" PRIu64 " layers, %" PRIu64 " KV heads, head dim %"
		       PRIu64 " (%s config.json: num_hidden_layers %" PRIu32
		       ", num_key_value_heads %" PRIu32 ", hidden_size %" PRIu32
		       " / num_attention_heads %" PRIu32 ")\n", p->model->name, p->layers,
		       p->kv_heads, p->head_dim, p->model->repo, p->model->layers,
		       p->model->kv_heads, p->model->hidden, p->model->heads);
	else
		printf("model         %" PRIu64 " layers, %" PRIu64 " KV heads, head dim %"
		       PRIu64 "\n", p->layers, p->kv_heads, p->head_dim);
	printf("dtype         %s, %" PRIu32 " byte%s per element\n", p->dtype->name,
	       p->dtype->bytes, p->dtype->bytes == 1 ? "" : "s");
	printf("per token     %s = 2 (K and V) x %" PRIu64 " layers x %" PRIu64
	       " KV heads x %" PRIu64 " head dim x %" PRIu32 " byte%s\n",
	       bytes_line(b, sizeof(b), f->per_token), p->layers, p->kv_heads,
	       p->head_dim, p->dtype->bytes, p->dtype->bytes == 1 ? "" : "s");
	printf("per page      %s: %" PRIu64 " tokens\n", bytes_line(b, sizeof(b), f->per_page),
	       p->block_tokens);
	printf("per sequence  %s: %s tokens, %s pages\n",
	       bytes_line(b, sizeof(b), f->per_seq), cli_fmt_grouped(n1, p->tokens),
	       cli_fmt_grouped(n2, f->pages_per_seq));
	printf("all users     %s: %s user%s x %s tokens\n",
	       bytes_line(b, sizeof(b), f->all_users), cli_fmt_grouped(n1, p->users),
	       p->users == 1 ? "" : "s", cli_fmt_grouped(n2, p->tokens));
	if (!p->have_gpu)
		return;
	printf("GPU memory    %s\n", bytes_line(b, sizeof(b), p->gpu_mem));
	cli_fmt_si(s1, p->gpu_mem);
	if (f->gpus_needed <= 1)
		printf("  all users   fit in one GPU of %s (%s of it)\n", s1,
		       cli_fmt_si(s2, f->all_users));
	else
		printf("  all users   need %s: more than %" PRIu64 " GPU%s of %s hold%s "
		       "(%s); %" PRIu64 " are needed for the KV cache alone\n",
		       cli_fmt_si(s2, f->all_users), f->gpus_needed - 1,
		       f->gpus_needed == 2 ? "" : "s", s1, f->gpus_needed == 2 ? "s" : "",
		       cli_fmt_si(s3, (f->gpus_needed - 1) * p->gpu_mem), f->gpus_needed);
	printf("  contiguous  %s sequences fit, each reserving %s tokens (%s)\n",
	       cli_fmt_grouped(n1, f->contiguous_fit), cli_fmt_grouped(n2, p->tokens),
	       cli_fmt_si(s2, f->per_seq));
	printf("  paged       %s sequences fit at a mean of %s tokens: %" PRIu64
	       " pages (%s) each", cli_fmt_grouped(n1, f->paged_fit),
	       cli_fmt_grouped(n2, p->mean_tokens), f->mean_pages,
	       cli_fmt_si(s2, f->mean_paged));
	if (f->contiguous_fit)
		printf(", %.2fx contiguous\n", (double)f->paged_fit / (double)f->contiguous_fit);
	else
		printf("\n");
}

static void plan_json(const struct plan *p, const struct figures *f)
{
	printf("{\"model\":");
	if (p->model) {
		cli_json_str(stdout, p->model->name);
		printf(",\"source\":");
		cli_json_str(stdout, p->model->repo);
	} else {
		printf("null,\"source\":null");
	}
	printf(",\"layers\":%" PRIu64 ",\"kv_heads\":%" PRIu64 ",\"head_dim\":%" PRIu64
	       ",\"dtype\":\"%s\",\"dtype_bytes\":%" PRIu32 ",\"block_tokens\":%" PRIu64
	       ",\"tokens\":%" PRIu64 ",\"users\":%" PRIu64 ",\"bytes_per_token\":%" PRIu64
	       ",\"bytes_per_page\":%" PRIu64 ",\"pages_per_sequence\":%" PRIu64
	       ",\"bytes_per_sequence\":%" PRIu64 ",\"bytes_all_users\":%" PRIu64,
	       p->layers, p->kv_heads, p->head_dim, p->dtype->name, p->dtype->bytes,
	       p->block_tokens, p->tokens, p->users, f->per_token, f->per_page,
	       f->pages_per_seq, f->per_seq, f->all_users);
	if (p->have_gpu)
		printf(",\"gpu_mem\":%" PRIu64 ",\"gpus_needed\":%" PRIu64 ",\"mean_tokens\":%"
		       PRIu64 ",\"pages_per_mean_sequence\":%" PRIu64
		       ",\"contiguous_sequences\":%" PRIu64 ",\"paged_sequences\":%" PRIu64,
		       p->gpu_mem, f->gpus_needed, p->mean_tokens, f->mean_pages,
		       f->contiguous_fit, f->paged_fit);
	printf("}\n");
}

static void plan_list(const struct cli *cli)
{
	struct table *t;
	char a[CLI_FMT_MAX];
	size_t i;

	if (cli->json) {
		printf("{\"models\":[");
		for (i = 0; i < NMODELS; i++) {
			const struct model *m = &models[i];

			printf("%s{\"name\":\"%s\",\"source\":\"%s\",\"layers\":%" PRIu32
			       ",\"kv_heads\":%" PRIu32 ",\"head_dim\":%" PRIu32
			       ",\"hidden_size\":%" PRIu32 ",\"num_attention_heads\":%" PRIu32
			       ",\"bytes_per_token_f16\":%" PRIu64 "}", i ? "," : "", m->name,
			       m->repo, m->layers, m->kv_heads, m->hidden / m->heads, m->hidden,
			       m->heads, (uint64_t)4 * m->layers * m->kv_heads *
			       (m->hidden / m->heads));
		}
		printf("]}\n");
		return;
	}
	t = table_new(6, "lrrrrl");
	if (!t)
		return;
	table_add(t, "MODEL");
	table_add(t, "LAYERS");
	table_add(t, "KV HEADS");
	table_add(t, "HEAD DIM");
	table_add(t, "F16/TOKEN");
	table_add(t, "SOURCE (config.json on the Hugging Face model card)");
	for (i = 0; i < NMODELS; i++) {
		const struct model *m = &models[i];
		uint64_t tok = (uint64_t)4 * m->layers * m->kv_heads * (m->hidden / m->heads);

		table_add(t, "%s", m->name);
		table_add(t, "%" PRIu32, m->layers);
		table_add(t, "%" PRIu32, m->kv_heads);
		table_add(t, "%" PRIu32, m->hidden / m->heads);
		table_add(t, "%s", cli_fmt_size(cli, a, tok));
		table_add(t, "%s: num_hidden_layers %" PRIu32 ", num_key_value_heads %" PRIu32
			  ", hidden_size %" PRIu32 " / num_attention_heads %" PRIu32, m->repo,
			  m->layers, m->kv_heads, m->hidden, m->heads);
	}
	table_print(t, stdout);
	table_free(t);
}

static const char plan_help[] =
	"Usage: kvpool plan (--model NAME | --layers N --kv-heads N --head-dim N)\n"
	"                   [--dtype f16|bf16|f32|fp8] [--tokens N] [--users N]\n"
	"                   [--block-tokens N] [--gpu-mem SIZE [--mean-tokens N]]\n"
	"       kvpool plan --list\n"
	"Plan KV-cache capacity without a daemon: K/V bytes per token, per page,\n"
	"per sequence and for all users; with --gpu-mem, how many sequences fit\n"
	"with paging (the mean length rounded up to pages) against contiguous\n"
	"max-length reservation. Figures are shown in GB (10^9 bytes) and GiB\n"
	"(2^30 bytes); a SIZE given reads as all of kvpool's sizes do: 80G, 80GB\n"
	"and 80GiB are all 80 x 2^30 bytes.\n"
	"  -m, --model=NAME        a built-in model (--list shows them)\n"
	"      --layers=N          num_hidden_layers\n"
	"      --kv-heads=N        num_key_value_heads\n"
	"      --head-dim=N        hidden_size / num_attention_heads\n"
	"  -d, --dtype=TYPE        element type (default f16)\n"
	"  -t, --tokens=N          tokens per sequence, its maximum (default 4096)\n"
	"  -u, --users=N           sequences at once (default 1)\n"
	"      --block-tokens=N    tokens per page (default 16)\n"
	"  -g, --gpu-mem=SIZE      memory of one GPU for K/V, e.g. 80G or 79.6GiB\n"
	"      --mean-tokens=N     mean sequence length (default --tokens)\n"
	"      --list              the built-in models and where their figures\n"
	"                          come from\n";

enum { OPT_LAYERS = 256, OPT_KV_HEADS, OPT_HEAD_DIM, OPT_BLOCK, OPT_MEAN };

/* plan_count() - a count option from 1 to max; false after a usage error. */
static bool plan_count(const char *opt, const char *arg, uint64_t max, uint64_t *out)
{
	if (cli_parse_u64(arg, out) && *out >= 1 && *out <= max)
		return true;
	cli_usage_error("plan", "--%s: '%s' is not a whole number from 1 to %" PRIu64,
			opt, arg, max);
	return false;
}

int cmd_plan(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_LONGOPTS,
		{ "model", required_argument, NULL, 'm' },
		{ "layers", required_argument, NULL, OPT_LAYERS },
		{ "kv-heads", required_argument, NULL, OPT_KV_HEADS },
		{ "head-dim", required_argument, NULL, OPT_HEAD_DIM },
		{ "dtype", required_argument, NULL, 'd' },
		{ "tokens", required_argument, NULL, 't' },
		{ "users", required_argument, NULL, 'u' },
		{ "block-tokens", required_argument, NULL, OPT_BLOCK },
		{ "gpu-mem", required_argument, NULL, 'g' },
		{ "mean-tokens", required_argument, NULL, OPT_MEAN },
		{ "list", no_argument, NULL, 'l' },
		{ NULL, 0, NULL, 0 },
	};
	struct plan p = { .tokens = 4096, .users = 1, .block_tokens = 16,
			  .dtype = &dtypes[0] };
	const uint64_t big = 1ull << 32;
	struct figures f;
	bool list = false, geo = false, variant;
	int o;

	optind = 0;
	while ((o = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS "m:d:t:u:g:", longopts,
				NULL)) != -1) {
		switch (o) {
		case 'm':
			p.model = model_find(optarg, &variant);
			if (!p.model)
				return cli_usage_error(argv[0], "no built-in model '%s' "
						       "(kvpool plan --list shows them; or give "
						       "--layers, --kv-heads and --head-dim)", optarg);
			if (variant)
				fprintf(stderr, "kvpool: plan: '%s' taken as %s (a fine-tune or "
					"quantized release keeps its base model's KV geometry)\n",
					optarg, p.model->name);
			break;
		case OPT_LAYERS:
			if (!plan_count("layers", optarg, 1024, &p.layers))
				return CLI_USAGE;
			geo = true;
			break;
		case OPT_KV_HEADS:
			if (!plan_count("kv-heads", optarg, 1024, &p.kv_heads))
				return CLI_USAGE;
			geo = true;
			break;
		case OPT_HEAD_DIM:
			if (!plan_count("head-dim", optarg, 4096, &p.head_dim))
				return CLI_USAGE;
			geo = true;
			break;
		case 'd':
			p.dtype = dtype_find(optarg);
			if (!p.dtype)
				return cli_usage_error(argv[0], "--dtype: '%s' is not f16, bf16, "
						       "f32 or fp8", optarg);
			break;
		case 't':
			if (!plan_count("tokens", optarg, big, &p.tokens))
				return CLI_USAGE;
			break;
		case 'u':
			if (!plan_count("users", optarg, big, &p.users))
				return CLI_USAGE;
			break;
		case OPT_BLOCK:
			if (!plan_count("block-tokens", optarg, 4096, &p.block_tokens))
				return CLI_USAGE;
			break;
		case OPT_MEAN:
			if (!plan_count("mean-tokens", optarg, big, &p.mean_tokens))
				return CLI_USAGE;
			p.have_mean = true;
			break;
		case 'g':
			if (!size_parse(optarg, &p.gpu_mem))
				return cli_usage_error(argv[0], "--gpu-mem: '%s' is not a size "
						       "(" SIZE_HELP ": 80G, 80GB, 81920M)", optarg);
			if (p.gpu_mem < (1ull << 20) || p.gpu_mem > (1ull << 50))
				return cli_usage_error(argv[0], "--gpu-mem: '%s' is %" PRIu64
						       " bytes, which no GPU has: give its memory "
						       "with a unit (80G)", optarg, p.gpu_mem);
			p.have_gpu = true;
			break;
		case 'l':
			list = true;
			break;
		default:
			switch (cli_common_opt(cli, o, optarg)) {
			case 1:
				fputs(plan_help, stdout);
				return CLI_OK;
			case -1:
				return cli_usage_error(argv[0], "bad option");
			}
		}
	}
	if (optind < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind]);
	if (list) {
		plan_list(cli);
		return CLI_OK;
	}
	if (p.model && geo)
		return cli_usage_error(argv[0], "--model and --layers/--kv-heads/--head-dim "
				       "exclude each other");
	if (p.model) {
		p.layers = p.model->layers;
		p.kv_heads = p.model->kv_heads;
		p.head_dim = p.model->hidden / p.model->heads;
	} else if (!p.layers || !p.kv_heads || !p.head_dim) {
		return cli_usage_error(argv[0], "give --model NAME, or all of --layers, "
				       "--kv-heads and --head-dim");
	}
	if (!p.have_mean)
		p.mean_tokens = p.tokens;
	if (p.mean_tokens > p.tokens)
		return cli_usage_error(argv[0], "--mean-tokens %" PRIu64 " is more than "
				       "--tokens %" PRIu64 " (the maximum)", p.mean_tokens,
				       p.tokens);
	if (p.have_mean && !p.have_gpu)
		return cli_usage_error(argv[0], "--mean-tokens compares paging with "
				       "contiguous reservation in --gpu-mem: give --gpu-mem");
	if (!plan_compute(&p, &f)) {
		fprintf(stderr, "kvpool: plan: the figures do not fit in 64 bits; use "
			"fewer --tokens or --users\n");
		return CLI_USAGE;
	}
	if (cli->json)
		plan_json(&p, &f);
	else
		plan_text(&p, &f);
	return CLI_OK;
}
