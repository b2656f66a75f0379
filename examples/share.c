/* SPDX-License-Identifier: MIT */
/*
 * share.c - prefix sharing as a model server does it, without the model:
 * tokenize a prompt (bytes as token ids), compute its block keys, ACQUIRE
 * the cached prefix, fill and PUBLISH the blocks that were missing, then
 * release. Run it twice with the same system prompt: the second run finds
 * the prompt's pages in the pool, and checks that they hold what the first
 * run wrote (block i: bytes of value i).
 *
 * usage: kvpool-example-share [--socket PATH] SYSTEM-PROMPT USER-TEXT
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvpool.h>

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char usage[] =
		"usage: %s [--socket PATH] SYSTEM-PROMPT USER-TEXT\n"
		"Serve one prompt as a model server would: find the system prompt's\n"
		"pages in the pool (published by an earlier run), publish the rest.\n"
		"Run it twice with the same SYSTEM-PROMPT: the second run hits.\n"
		"  -s, --socket PATH  kvpoold's socket (default $KVPOOL_SOCKET, else\n"
		"                     /run/kvpool/kvpool.sock)\n";
	const kvp_geometry geo = {
		.layers = 32, .kv_heads = 8, .head_dim = 128, .block_tokens = 16,
		.dtype = KVP_DTYPE_F16, .model = "meta-llama/Llama-3.1-8B",
	};
	const char *sock = NULL;
	size_t n, nb, i, fresh = 0;
	kvp_page *pages, *mine, *canon;
	uint32_t *tokens;
	kvp_client *c;
	kvp_key *keys;
	int hits, rc, opt;

	while ((opt = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
		if (opt == 'h') {
			printf(usage, argv[0]);
			return 0;
		}
		if (opt != 's') {
			fprintf(stderr, usage, argv[0]);
			return 2;
		}
		sock = optarg;
	}
	if (argc - optind != 2) {
		fprintf(stderr, usage, argv[0]);
		return 2;
	}
	/* a byte-level tokenizer: one token per byte */
	n = strlen(argv[optind]) + strlen(argv[optind + 1]);
	tokens = malloc((n + 1) * sizeof(*tokens));
	keys = calloc(n / 16 + 1, sizeof(*keys));
	pages = calloc(n / 16 + 1, sizeof(*pages));
	mine = calloc(n / 16 + 1, sizeof(*mine));
	canon = calloc(n / 16 + 1, sizeof(*canon));
	if (!tokens || !keys || !pages || !mine || !canon)
		return 1;
	for (i = 0; i < n; i++)
		tokens[i] = (unsigned char)(i < strlen(argv[optind]) ? argv[optind][i] :
					    argv[optind + 1][i - strlen(argv[optind])]);

	rc = kvp_connect(sock, "llama-3.1-8b", &geo, &c);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", argv[0], kvp_last_error());
		return 1;
	}
	nb = (size_t)kvp_block_keys(c, NULL, tokens, n, NULL, 0, keys);
	hits = kvp_acquire(c, NULL, keys, nb, NULL, 0, pages, NULL);
	if (hits < 0) {
		fprintf(stderr, "acquire: %s %s\n", kvp_strerror(hits), kvp_last_error());
		return 1;
	}
	/* the pages found hold what the run that published them wrote */
	for (i = 0; i < (size_t)hits; i++) {
		const unsigned char *b = kvp_page_ptr(c, pages[i]);
		size_t off;

		for (off = 0; off < kvp_page_bytes(c); off++)
			if (b[off] != (unsigned char)i)
				break;
		if (off < kvp_page_bytes(c)) {
			fprintf(stderr, "%s: block %zu from the cache holds %u at byte %zu, "
				"not %u: its page is not what was published\n", argv[0], i,
				(unsigned)b[off], off, (unsigned)(unsigned char)i);
			return 1;
		}
	}
	if ((size_t)hits < nb) {
		/* "prefill" the missing blocks and publish them */
		rc = kvp_alloc(c, nb - (size_t)hits, mine);
		if (rc == 0) {
			for (i = 0; i < nb - (size_t)hits; i++)
				memset(kvp_page_ptr(c, mine[i]), (int)(hits + (int)i), kvp_page_bytes(c));
			rc = kvp_publish(c, hits ? &keys[hits - 1] : NULL, mine, keys + hits,
					 nb - (size_t)hits, KVP_PRIO_NORMAL, canon);
		}
		if (rc < 0) {
			fprintf(stderr, "alloc/publish: %s %s\n", kvp_strerror(rc), kvp_last_error());
			return 1;
		}
		for (i = 0; i < nb - (size_t)hits; i++) {
			fresh += canon[i] == mine[i];
			if (canon[i] != mine[i])	/* published first by another */
				kvp_release(c, &mine[i], 1);
			pages[(size_t)hits + i] = canon[i];
		}
	}
	printf("%zu tokens, %zu full blocks: %d from the cache (%d tokens, their bytes as "
	       "published), %zu computed and published\n", n, nb, hits, hits * 16, fresh);
	kvp_release(c, pages, nb);
	kvp_close(c);
	free(tokens);
	free(keys);
	free(pages);
	free(mine);
	free(canon);
	return 0;
}
