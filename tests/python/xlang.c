/* SPDX-License-Identifier: MIT */
/*
 * xlang.c - the C side of the Python package's cross-language tests
 * (tests/python/test_xlang.py): a plain libkvpool client of namespace
 * "py" (geometry below, as the tests' Python side) that publishes the
 * blocks of a sequence or acquires them and checks every byte.
 *
 * usage: kvpool-xlang SOCKET publish|check NBLOCKS
 * The sequence's tokens are harness_tokens()' shared prompt; a page
 * holds harness_fill()'s bytes for its key. check prints "hits N" and
 * exits 0 when all N hit and hold their bytes, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "tests/harness.h"

#define BT 16u

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/python",
};

int main(int argc, char **argv)
{
	kvp_page *pages, *canon;
	size_t nb, i, pb;
	kvp_client *c;
	uint32_t *t;
	kvp_key *keys;
	int rc, hits;

	if (argc != 4 || (strcmp(argv[2], "publish") && strcmp(argv[2], "check"))) {
		fprintf(stderr, "usage: kvpool-xlang SOCKET publish|check NBLOCKS\n");
		return 2;
	}
	nb = strtoul(argv[3], NULL, 10);
	rc = kvp_connect(argv[1], "py", &geo, &c);
	if (rc < 0) {
		fprintf(stderr, "kvp_connect: %s: %s\n", kvp_strerror(rc), kvp_last_error());
		return 1;
	}
	pb = kvp_page_bytes(c);
	t = calloc(nb * BT, sizeof(*t));
	keys = calloc(nb, sizeof(*keys));
	pages = calloc(nb, sizeof(*pages));
	canon = calloc(nb, sizeof(*canon));
	if (!t || !keys || !pages || !canon)
		return 1;
	harness_tokens(t, nb * BT, nb * BT, 0);
	if (kvp_block_keys(c, NULL, t, nb * BT, NULL, 0, keys) != (int)nb)
		return 1;
	if (!strcmp(argv[2], "publish")) {
		if (kvp_alloc(c, nb, pages) < 0)
			return 1;
		for (i = 0; i < nb; i++)
			harness_fill(kvp_page_ptr(c, pages[i]), pb, &keys[i]);
		rc = kvp_publish(c, NULL, pages, keys, nb, KVP_PRIO_NORMAL, canon);
		if (rc < 0) {
			fprintf(stderr, "publish: %s: %s\n", kvp_strerror(rc), kvp_last_error());
			return 1;
		}
		printf("published %zu\n", nb);
		kvp_close(c);	/* the pages stay, cached */
		return 0;
	}
	hits = kvp_acquire(c, NULL, keys, nb, NULL, 0, pages, NULL);
	if (hits < 0) {
		fprintf(stderr, "acquire: %s: %s\n", kvp_strerror(hits), kvp_last_error());
		return 1;
	}
	printf("hits %d\n", hits);
	for (i = 0; i < (size_t)hits; i++)
		if (!harness_holds(kvp_page_ptr(c, pages[i]), pb, &keys[i])) {
			printf("block %zu does not hold its bytes\n", i);
			return 1;
		}
	kvp_close(c);
	return (size_t)hits == nb ? 0 : 1;
}
