/* SPDX-License-Identifier: MIT */
/*
 * pages.c - a small libkvpool client: join a namespace, lease pages,
 * write and read them through the shared mapping, show what the daemon
 * sees, give the pages back.
 *
 * usage: kvpool-example-pages [--socket PATH] [--pages N] [--hold]
 *   --hold   keep the pages until stdin closes (to watch `kvpool status`)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvpool.h>

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "pages", required_argument, NULL, 'n' },
		{ "hold", no_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char usage[] =
		"usage: %s [--socket PATH] [--pages N] [--hold]\n"
		"Lease N pages (default 8) of a Llama-3.1-8B namespace, write and read\n"
		"them through the shared mapping, show the daemon's counts, give them\n"
		"back.\n"
		"  -s, --socket PATH  kvpoold's socket (default $KVPOOL_SOCKET, else\n"
		"                     /run/kvpool/kvpool.sock)\n"
		"  -n, --pages N      pages to lease\n"
		"  -H, --hold         keep them until stdin closes (watch kvpool status)\n";
	/* Llama-3.1-8B: 32 layers, 8 KV heads of 128, fp16, 16-token pages */
	const kvp_geometry geo = {
		.layers = 32, .kv_heads = 8, .head_dim = 128, .block_tokens = 16,
		.dtype = KVP_DTYPE_F16, .model = "meta-llama/Llama-3.1-8B",
	};
	const char *sock = NULL;
	size_t n = 8, i, bad = 0;
	int hold = 0, c, rc;
	kvp_page *pages;
	kvp_stats_t st;
	kvp_client *cl;

	while ((c = getopt_long(argc, argv, "s:n:Hh", longopts, NULL)) != -1) {
		switch (c) {
		case 's': sock = optarg; break;
		case 'n': n = strtoul(optarg, NULL, 10); break;
		case 'H': hold = 1; break;
		case 'h': printf(usage, argv[0]); return 0;
		default:
			fprintf(stderr, usage, argv[0]);
			return 2;
		}
	}
	rc = kvp_connect(sock, "llama-3.1-8b", &geo, &cl);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", argv[0], kvp_last_error());
		return 1;
	}
	printf("joined namespace llama-3.1-8b: %zu bytes per page (16 tokens)\n",
	       kvp_page_bytes(cl));

	pages = calloc(n, sizeof(*pages));
	rc = pages ? kvp_alloc(cl, n, pages) : -ENOMEM;
	if (rc < 0) {
		fprintf(stderr, "alloc %zu pages: %s %s\n", n, kvp_strerror(rc), kvp_last_error());
		kvp_close(cl);
		return 1;
	}
	for (i = 0; i < n; i++)
		memset(kvp_page_ptr(cl, pages[i]), (int)(i & 0xff), kvp_page_bytes(cl));
	for (i = 0; i < n; i++) {
		const unsigned char *p = kvp_page_ptr(cl, pages[i]);

		bad += p[0] != (i & 0xff) || p[kvp_page_bytes(cl) - 1] != (i & 0xff);
	}
	printf("leased %zu pages, wrote and read them back: %s\n", n,
	       bad ? "MISMATCH" : "ok");

	if (kvp_stats(cl, &st, NULL, 0) >= 0)
		printf("the daemon counts %" PRIu64 " private pages of %" PRIu64 "\n",
		       st.pages_private, st.pages_total);
	if (hold) {
		printf("holding them until stdin closes\n");
		fflush(stdout);
		while (getchar() != EOF)
			;
	}
	rc = kvp_release(cl, pages, n);
	printf("released them: %s\n", rc < 0 ? kvp_strerror(rc) : "ok");
	free(pages);
	kvp_close(cl);
	return bad || rc < 0;
}
