/* SPDX-License-Identifier: MIT */
/*
 * check_share.c - integration tests of prefix sharing: a real kvpoold and
 * real client processes publishing, acquiring, deduplicating, copying on
 * write and evicting. Every test ends with daemon_stop(), which checks
 * the conservation invariant and a clean shutdown.
 *
 * Past 800 lines on purpose: one suite for requests/share.c, whose
 * requests (PUBLISH, ACQUIRE, COW) are tested together through the
 * chains they build.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"
#include "kvpool_wire.h"

#define BT 16u			/* tokens per page */
#define PAGE_BYTES 16384u	/* 2 x 2 layers x 2 heads x 64 dims x 16 tokens x 2 bytes */

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/share",
};

/* 4 MiB in 1 MiB slabs: 256 pages of 16 KiB */
static const char *const small_pool[] = { "--pool-size", "4M", "--slab-size", "1M", NULL };
static const char *const no_watermark[] = {
	"--pool-size", "4M", "--slab-size", "1M", "--free-watermark", "0", NULL,
};

static kvp_client *join(const char *sock)
{
	kvp_client *c;
	int rc = kvp_connect(sock, "share", &geo, &c);

	ck_assert_msg(rc == 0, "kvp_connect: %s: %s", kvp_strerror(rc), kvp_last_error());
	return c;
}

/* fill_for() / holds_for() with this file's page size */
#define fill_for(page, k) harness_fill(page, PAGE_BYTES, k)
#define holds_for(page, k) harness_holds(page, PAGE_BYTES, k)
#define tokens_of harness_tokens
#define serve harness_serve

START_TEST(test_share_four_processes_share_one_copy_of_a_prompt)
{
	enum { PROCS = 4, PROMPT = 1000, SUFFIX = 200 };
	const size_t n = PROMPT + SUFFIX, nb = n / BT, shared_blocks = PROMPT / BT;
	static kvp_page seen[PROCS][(PROMPT + SUFFIX) / BT];
	static kvp_stats_t st;
	static kvp_ns_stats_t ns[2];
	pid_t pids[PROCS];
	struct daemon d;
	int to_parent[2], go[2], i, status;
	size_t b;

	daemon_start(&d, NULL);
	ck_assert_int_eq(pipe(to_parent), 0);
	ck_assert_int_eq(pipe(go), 0);
	for (i = 0; i < PROCS; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			uint32_t t[PROMPT + SUFFIX];
			kvp_page out[(PROMPT + SUFFIX) / BT];
			kvp_client *c;
			char x;

			close(go[1]);
			/* start together */
			if (read(go[0], &x, 1) != 0)
				_exit(3);
			c = join(d.sock);
			tokens_of(t, n, PROMPT, (uint32_t)i);
			serve(c, t, n, out);
			if (write(to_parent[1], out, sizeof(out)) != (ssize_t)sizeof(out))
				_exit(2);
			/* hold the pages until the parent has counted */
			pause();
			_exit(0);
		}
	}
	close(go[0]);
	close(go[1]);	/* go */
	close(to_parent[1]);
	for (i = 0; i < PROCS; i++)
		ck_assert_int_eq(read(to_parent[0], seen[i], sizeof(seen[i])),
				 (ssize_t)sizeof(seen[i]));
	/* Every process holds the same canonical page for each prompt block
	 * and its own pages for its suffix. */
	for (b = 0; b < nb; b++)
		for (i = 1; i < PROCS; i++) {
			if (b < shared_blocks)
				ck_assert_uint_eq(seen[i][b], seen[0][b]);
			else
				ck_assert_uint_ne(seen[i][b], seen[0][b]);
		}
	/* The prompt's pages exist once: 62 shared + 4 x 13 own blocks. */
	{
		kvp_client *c = join(d.sock);

		ck_assert_int_eq(kvp_stats(c, &st, ns, 2), 1);
		kvp_close(c);
	}
	ck_assert_uint_eq(ns[0].pages_shared, shared_blocks + PROCS * (nb - shared_blocks));
	ck_assert_uint_eq(ns[0].prefix.publishes, shared_blocks + PROCS * (nb - shared_blocks));
	/* the duplicates were released: nothing private is left */
	ck_assert_uint_eq(ns[0].pages_private, 0);

	/* the servers go away as a crash would: their leases with them */
	for (i = 0; i < PROCS; i++) {
		ck_assert_int_eq(kill(pids[i], SIGKILL), 0);
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
	}
	close(to_parent[0]);
	daemon_stop(&d);
}
END_TEST

enum { ROUNDS = 1000 };

/*
 * publishers() - two processes publish the same ROUNDS keys, one block
 * each, at the same moment (they start together on a pipe), each checking
 * that the canonical page holds the key's bytes and releasing both its
 * pages; got[i][r] is what process i was told is canonical for key r.
 */
static void publishers(const char *sock, kvp_page got[2][ROUNDS])
{
	int p[2][2], go[2], i, status;

	ck_assert_int_eq(pipe(go), 0);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(pipe(p[i]), 0);
		if (fork() == 0) {
			kvp_client *c = join(sock);
			kvp_key root, k;
			kvp_page mine, canon;
			uint32_t tok[BT];
			int r, j;
			char x;

			close(go[1]);
			if (read(go[0], &x, 1) != 0)
				_exit(7);
			kvp_root_key(c, &root);
			for (r = 0; r < ROUNDS; r++) {
				for (j = 0; j < (int)BT; j++)
					tok[j] = (uint32_t)(r * BT + (unsigned)j);
				if (kvp_block_keys(c, &root, tok, BT, NULL, 0, &k) < 0 || kvp_alloc(c, 1, &mine) < 0)
					_exit(1);
				fill_for(kvp_page_ptr(c, mine), &k);
				if (kvp_publish(c, NULL, &mine, &k, 1, KVP_PRIO_NORMAL, &canon) < 0)
					_exit(2);
				if (!holds_for(kvp_page_ptr(c, canon), &k))
					_exit(3);
				got[i][r] = canon;
				if (canon != mine && kvp_release(c, &mine, 1) < 0)
					_exit(4);
				if (kvp_release(c, &canon, 1) < 0)
					_exit(5);
			}
			if (write(p[i][1], got[i], sizeof(got[i])) != (ssize_t)sizeof(got[i]))
				_exit(6);
			kvp_close(c);
			_exit(0);
		}
		close(p[i][1]);
	}
	close(go[0]);
	close(go[1]);	/* go */
	for (i = 0; i < 2; i++) {
		size_t have = 0;
		ssize_t n;

		while (have < sizeof(got[i]) &&
		       (n = read(p[i][0], (char *)got[i] + have, sizeof(got[i]) - have)) > 0)
			have += (size_t)n;
		ck_assert_uint_eq(have, sizeof(got[i]));
		close(p[i][0]);
	}
	for (i = 0; i < 2; i++) {
		ck_assert_int_gt(wait(&status), 0);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "a publisher failed: status 0x%x", status);
	}
}

START_TEST(test_share_concurrent_publishes_of_the_same_keys_keep_one_page)
{
	static kvp_page got[2][ROUNDS];
	kvp_stats_t st;
	struct daemon d;

	daemon_start(&d, small_pool);	/* 256 pages: eviction in between */
	publishers(d.sock, got);
	/* One canonical page per key, unless eviction made room in between:
	 * then both saw a page with the key's bytes (checked in the child). */
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_private, 0);
	ck_assert_uint_eq(st.pages_shared, 0);
	ck_assert_uint_eq(st.prefix.publishes + st.prefix.dedups, 2 * ROUNDS);
	ck_assert_uint_eq(st.pages_cached + st.prefix.evictions, st.prefix.publishes);
	ck_assert_uint_ge(st.prefix.dedups, 1);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_same_keys_at_once_without_eviction_keep_one_page_each)
{
	static const char *const roomy[] = { "--pool-size", "64M", "--slab-size", "4M", NULL };
	static kvp_page got[2][ROUNDS];
	kvp_stats_t st;
	struct daemon d;
	int r;

	daemon_start(&d, roomy);	/* 4,096 pages: no eviction */
	publishers(d.sock, got);
	for (r = 0; r < ROUNDS; r++)
		ck_assert_uint_eq(got[0][r], got[1][r]);	/* one canonical page */
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.prefix.publishes, ROUNDS);
	ck_assert_uint_eq(st.prefix.dedups, ROUNDS);
	ck_assert_uint_eq(st.pages_cached, ROUNDS);	/* no leak: one page a key */
	ck_assert_uint_eq(st.pages_private + st.pages_shared, 0);
	ck_assert_uint_eq(st.prefix.evictions, 0);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_cow_copies_exactly_and_independently)
{
	kvp_page mine, canon, got[1], copy;
	kvp_partial part;
	kvp_key root, k;
	uint32_t tok[BT] = { 0 };
	struct daemon d;
	kvp_client *a, *b;
	unsigned char *src, *dst;

	daemon_start(&d, small_pool);
	a = join(d.sock);
	b = join(d.sock);
	ck_assert_int_eq(kvp_root_key(a, &root), 0);
	ck_assert_int_eq(kvp_block_keys(a, &root, tok, BT, NULL, 0, &k), 1);
	ck_assert_int_eq(kvp_alloc(a, 1, &mine), 0);
	fill_for(kvp_page_ptr(a, mine), &k);
	ck_assert_int_eq(kvp_publish(a, NULL, &mine, &k, 1, KVP_PRIO_NORMAL, &canon), 0);
	ck_assert_uint_eq(canon, mine);

	ck_assert_int_eq(kvp_acquire(b, NULL, &k, 1, NULL, 0, got, &part), 1);
	ck_assert_uint_eq(got[0], mine);
	ck_assert_int_eq(kvp_cow(b, got, 1, &copy), 0);
	ck_assert_uint_ne(copy, got[0]);
	src = kvp_page_ptr(b, got[0]);
	dst = kvp_page_ptr(b, copy);
	ck_assert_ptr_ne(src, dst);
	ck_assert_mem_eq(src, dst, PAGE_BYTES);
	memset(dst, 0x5a, PAGE_BYTES);		/* the copy is b's own */
	ck_assert(holds_for(kvp_page_ptr(a, mine), &k));
	ck_assert(holds_for(src, &k));
	/* COW of a page b does not hold */
	ck_assert_int_eq(kvp_release(b, got, 1), 0);
	ck_assert_int_eq(kvp_cow(b, got, 1, &copy), -ESTALE);
	kvp_close(a);
	kvp_close(b);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_eviction_spares_leased_pages_and_shortens_hits)
{
	enum { CHAIN = 40 };
	uint32_t t[CHAIN * BT];
	kvp_key keys[CHAIN];
	kvp_page out[CHAIN], held[CHAIN], fill[256], got[CHAIN];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *a, *b;
	int hits, i;

	daemon_start(&d, small_pool);	/* 256 pages */
	a = join(d.sock);
	b = join(d.sock);
	/* a chain of 40 published blocks, released: all cached */
	tokens_of(t, CHAIN * BT, CHAIN * BT, 0);
	ck_assert_int_eq(serve(a, t, CHAIN * BT, out), 0);
	ck_assert_int_eq(kvp_release(a, out, CHAIN), 0);
	/* b leases the first 10 blocks of the chain */
	ck_assert_int_eq(kvp_block_keys(b, NULL, t, CHAIN * BT, NULL, 0, keys), CHAIN);
	ck_assert_int_eq(kvp_acquire(b, NULL, keys, 10, NULL, 0, held, NULL), 10);

	/* pressure: a allocates everything that is not leased */
	ck_assert_int_eq(kvp_alloc(a, 246, fill), 0);
	ck_assert_int_eq(kvp_alloc(a, 1, fill + 246), -ENOSPC);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.prefix.evictions, 30);
	ck_assert_uint_eq(st.pages_cached, 0);

	/* the leased blocks were spared, bytes intact */
	for (i = 0; i < 10; i++)
		ck_assert(holds_for(kvp_page_ptr(b, held[i]), &keys[i]));
	/* a later ACQUIRE of the whole chain: a shorter hit, true bytes */
	hits = kvp_acquire(a, NULL, keys, CHAIN, NULL, 0, got, NULL);
	ck_assert_int_eq(hits, 10);
	for (i = 0; i < hits; i++) {
		ck_assert_uint_eq(got[i], held[i]);
		ck_assert(holds_for(kvp_page_ptr(a, got[i]), &keys[i]));
	}
	kvp_close(a);
	kvp_close(b);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_a_request_that_cannot_be_met_evicts_nothing)
{
	static const char *const pool128[] = { "--pool-size", "2M", "--slab-size", "2M",
					       "--free-watermark", "0", NULL };
	enum { N = 100 };
	uint32_t t[N * BT];
	kvp_key keys[N];
	kvp_page out[N + 1], mine[128];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *a;

	daemon_start(&d, pool128);	/* 128 pages of 16 KiB */
	a = join(d.sock);
	tokens_of(t, N * BT, N * BT, 0);
	ck_assert_int_eq(serve(a, t, N * BT, out), 0);
	ck_assert_int_eq(kvp_release(a, out, N), 0);	/* 100 cached */
	/* ALLOC of more than the pool: refused, nothing evicted */
	ck_assert_int_eq(kvp_alloc(a, 129, mine), -ENOSPC);
	ck_assert_msg(strstr(kvp_last_error(), "100 cached, of which 100 could be evicted") &&
		      strstr(kvp_last_error(), "nothing was evicted"), "%s", kvp_last_error());
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_cached, N);
	ck_assert_uint_eq(st.prefix.evictions, 0);
	/* COW that the cache cannot make room for: the same */
	ck_assert_int_eq(kvp_block_keys(a, NULL, t, N * BT, NULL, 0, keys), N);
	ck_assert_int_eq(kvp_acquire(a, NULL, keys, 50, NULL, 0, out, NULL), 50);
	ck_assert_int_eq(kvp_alloc(a, 28, mine), 0);	/* 50 leased + 28 private + 50 cached */
	out[50] = mine[0];
	ck_assert_int_eq(kvp_cow(a, out, 51, mine + 28), -ENOSPC);	/* 51 of 50 */
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_cached, 50);
	ck_assert_uint_eq(st.prefix.evictions, 0);
	ck_assert_int_eq(kvp_release(a, out, 50), 0);
	ck_assert_int_eq(kvp_release(a, mine, 28), 0);
	/* every page is still there */
	ck_assert_int_eq(kvp_acquire(a, NULL, keys, N, NULL, 0, out, NULL), N);
	kvp_close(a);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_eviction_takes_leaves_before_parents)
{
	enum { CHAIN = 8 };
	uint32_t t[CHAIN * BT];
	kvp_key keys[CHAIN];
	kvp_page out[CHAIN], fill[256], got[CHAIN];
	struct daemon d;
	kvp_client *a;
	int k;

	daemon_start(&d, no_watermark);
	a = join(d.sock);
	tokens_of(t, CHAIN * BT, CHAIN * BT, 0);
	ck_assert_int_eq(serve(a, t, CHAIN * BT, out), 0);
	ck_assert_int_eq(kvp_release(a, out, CHAIN), 0);
	ck_assert_int_eq(kvp_block_keys(a, NULL, t, CHAIN * BT, NULL, 0, keys), CHAIN);
	/* evict k pages at a time: the chain must shrink from its end */
	ck_assert_int_eq(kvp_alloc(a, 248, fill), 0);
	for (k = CHAIN - 1; k >= 0; k--) {
		ck_assert_int_eq(kvp_alloc(a, 1, fill + 248 + (CHAIN - 1 - k)), 0);
		ck_assert_int_eq(kvp_acquire(a, NULL, keys, CHAIN, NULL, 0, got, NULL), k);
		ck_assert_int_eq(kvp_release(a, got, (size_t)k), 0);
	}
	kvp_close(a);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_watermark_keeps_free_pages_ready)
{
	enum { CHAIN = 8 };
	uint32_t t[CHAIN * BT];
	kvp_page out[CHAIN], fill[248];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *a;

	daemon_start(&d, small_pool);	/* under 1% of 256 pages free: evict to 2% */
	a = join(d.sock);
	tokens_of(t, CHAIN * BT, CHAIN * BT, 0);
	ck_assert_int_eq(serve(a, t, CHAIN * BT, out), 0);
	ck_assert_int_eq(kvp_release(a, out, CHAIN), 0);
	ck_assert_int_eq(kvp_alloc(a, 248, fill), 0);	/* every free page */
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_free, 5);
	ck_assert_uint_eq(st.prefix.evictions, 5);
	ck_assert_uint_eq(st.pages_cached, CHAIN - 5);
	kvp_close(a);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_turn_two_extends_turn_one_partial_page)
{
	enum { TURN1 = 40, TURN2 = 60 };
	uint32_t t[TURN2];
	kvp_key keys[TURN2 / BT];
	kvp_page pages[TURN2 / BT], tail, canon, copy;
	kvp_partial part;
	kvp_stats_t st;
	struct daemon d;
	kvp_client *a, *b;
	unsigned char *p;
	int i;

	daemon_start(&d, small_pool);
	a = join(d.sock);
	b = join(d.sock);
	tokens_of(t, TURN2, TURN2, 0);

	/* turn 1: 2 full blocks and a page of 8 tokens */
	ck_assert_int_eq(kvp_block_keys(a, NULL, t, TURN1, NULL, 0, keys), 2);
	ck_assert_int_eq(kvp_alloc(a, 2, pages), 0);
	for (i = 0; i < 2; i++)
		fill_for(kvp_page_ptr(a, pages[i]), &keys[i]);
	ck_assert_int_eq(kvp_publish(a, NULL, pages, keys, 2, KVP_PRIO_NORMAL, pages), 0);
	ck_assert_int_eq(kvp_alloc(a, 1, &tail), 0);
	memset(kvp_page_ptr(a, tail), 0xab, PAGE_BYTES / 2);	/* 8 tokens' worth */
	ck_assert_int_eq(kvp_publish_partial(a, &keys[1], tail, t + 32, TURN1 - 32,
					     KVP_PRIO_NORMAL, &canon), 0);
	ck_assert_uint_eq(canon, tail);
	ck_assert_int_eq(kvp_release(a, pages, 2), 0);
	ck_assert_int_eq(kvp_release(a, &tail, 1), 0);

	/* turn 2, another process: 3 full blocks (the third extends the
	 * partial page) and 12 more tokens */
	ck_assert_int_eq(kvp_block_keys(b, NULL, t, TURN2, NULL, 0, keys), 3);
	ck_assert_int_eq(kvp_acquire(b, NULL, keys, 3, t, TURN2, pages, &part), 2);
	ck_assert_uint_eq(part.tokens, 8);
	ck_assert_uint_eq(part.page, tail);
	ck_assert_int_eq(kvp_cow(b, &part.page, 1, &copy), 0);
	p = kvp_page_ptr(b, copy);
	for (i = 0; i < (int)PAGE_BYTES / 2; i++)
		ck_assert_uint_eq(p[i], 0xab);
	memset(p + PAGE_BYTES / 2, 0xcd, PAGE_BYTES / 2);	/* append 8 tokens */
	p = kvp_page_ptr(b, part.page);
	ck_assert_uint_ne(p[PAGE_BYTES / 2], 0xcd);		/* the original is intact */
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.prefix.hit_tokens, 2 * BT + 8);
	ck_assert_uint_eq(st.prefix.cows, 1);

	/* a tail that disagrees with the partial page's tokens finds none */
	t[33] ^= 1;
	ck_assert_int_eq(kvp_block_keys(b, NULL, t, 32, NULL, 0, keys), 2);
	ck_assert_int_eq(kvp_acquire(b, NULL, keys, 2, t, 40, pages, &part), 2);
	ck_assert_uint_eq(part.tokens, 0);
	kvp_close(a);
	kvp_close(b);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_retain_takes_a_second_lease)
{
	kvp_page pg, canon;
	kvp_key root, k;
	uint32_t tok[BT] = { 9 };
	kvp_stats_t st;
	struct daemon d;
	kvp_client *a;

	daemon_start(&d, small_pool);
	a = join(d.sock);
	kvp_root_key(a, &root);
	ck_assert_int_eq(kvp_block_keys(a, &root, tok, BT, NULL, 0, &k), 1);
	ck_assert_int_eq(kvp_alloc(a, 1, &pg), 0);
	ck_assert_int_eq(kvp_publish(a, NULL, &pg, &k, 1, KVP_PRIO_NORMAL, &canon), 0);
	ck_assert_int_eq(kvp_retain(a, &pg, 1), 0);	/* a fork of the sequence */
	ck_assert_int_eq(kvp_release(a, &pg, 1), 0);
	ck_assert_ptr_nonnull(kvp_page_ptr(a, pg));	/* still held once */
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_shared, 1);
	ck_assert_int_eq(kvp_release(a, &pg, 1), 0);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_cached, 1);
	ck_assert_int_eq(kvp_release(a, &pg, 1), -ESTALE);
	ck_assert_int_eq(kvp_retain(a, &pg, 1), -ESTALE);
	kvp_close(a);
	daemon_stop(&d);
}
END_TEST

/* acquire_raw() - one ACQUIRE of nkeys keys (and ntokens tokens of 0)
 * with flags and wait_ms, through fd: its status, its text into why. */
static int acquire_raw(int fd, const kvp_key *keys, uint32_t nkeys, uint32_t ntokens,
		       uint32_t flags, uint32_t wait_ms, char *why, size_t whylen)
{
	static uint8_t msg[sizeof(struct kvp_wire_acquire) + 8 * KVP_KEY_BYTES + 64];
	struct kvp_wire_acquire a = { .nkeys = nkeys, .ntokens = ntokens, .flags = flags,
				      .wait_ms = wait_ms };
	size_t len = sizeof(a) + (size_t)nkeys * KVP_KEY_BYTES + ntokens * sizeof(uint32_t);

	ck_assert_uint_le(len, sizeof(msg));
	memset(msg, 0, sizeof(msg));
	memcpy(msg, &a, sizeof(a));
	memcpy(msg + sizeof(a), keys, (size_t)nkeys * KVP_KEY_BYTES);
	ck_assert_int_eq(raw_send(fd, KVP_OP_ACQUIRE, 2, msg, len), 0);
	return raw_recv(fd, 2, why, whylen, NULL);
}

START_TEST(test_share_a_probe_leases_nothing_and_a_load_is_not_a_second_lookup)
{
	kvp_page pg[4], canon[4], got[5], mine[5];
	kvp_key keys[5];
	uint32_t t[5 * BT];
	kvp_stats_t st0, st;
	struct daemon d;
	kvp_client *a, *b;
	char why[600];
	int fd;

	daemon_start(&d, small_pool);
	a = join(d.sock);
	b = join(d.sock);
	tokens_of(t, 5 * BT, 5 * BT, 0);
	ck_assert_int_eq(kvp_block_keys(a, NULL, t, 5 * BT, NULL, 0, keys), 5);
	ck_assert_int_eq(kvp_alloc(a, 4, pg), 0);
	ck_assert_int_eq(kvp_publish(a, NULL, pg, keys, 4, KVP_PRIO_NORMAL, canon), 0);
	ck_assert_int_eq(kvp_release(a, pg, 4), 0);
	stats_of(d.sock, &st0);
	/* a probe: how much is there, nothing leased, nothing counted */
	ck_assert_int_eq(kvp_contains(b, NULL, keys, 5), 4);
	ck_assert_int_eq(kvp_contains(b, &keys[1], &keys[2], 3), 2);
	ck_assert_int_eq(kvp_contains(b, NULL, &keys[4], 1), 0);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_shared + st.pages_private, 0);
	ck_assert_uint_eq(st.pages_cached, 4);
	ck_assert_uint_eq(st.prefix.acquires, st0.prefix.acquires);
	ck_assert_uint_eq(st.prefix.hits, st0.prefix.hits);
	ck_assert_uint_eq(st.prefix.misses, st0.prefix.misses);
	/* a LOAD of what a lookup found: leased, not counted again */
	ck_assert_int_eq(kvp_acquire(a, NULL, keys, 5, NULL, 0, mine, NULL), 4);	/* lookup */
	ck_assert_int_eq(kvp_set_lookups_counted(b, 0), 0);
	ck_assert_int_eq(kvp_acquire(b, NULL, keys, 4, NULL, 0, got, NULL), 4);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.prefix.acquires, st0.prefix.acquires + 1);
	ck_assert_uint_eq(st.prefix.hits, st0.prefix.hits + 4);
	ck_assert_uint_eq(st.prefix.misses, st0.prefix.misses + 1);
	ck_assert_uint_eq(st.pages_shared, 4);
	ck_assert_int_eq(kvp_release(b, got, 4), 0);
	ck_assert_int_eq(kvp_set_lookups_counted(b, 1), 0);
	ck_assert_int_eq(kvp_acquire(b, NULL, keys, 4, NULL, 0, got, NULL), 4);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.prefix.hits, st0.prefix.hits + 8);
	ck_assert_int_eq(kvp_release(b, got, 4), 0);
	/* flags it does not know, a wait without WAIT, a WAIT of no time, of
	 * more than 600 s or with PROBE, a probe with tokens: INVAL, said,
	 * and nothing leased */
	fd = raw_connect(d.sock);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(raw_hello(fd, "share", &geo, why, sizeof(why)), KVP_S_OK);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 0, 0x20, 0, why, sizeof(why)), KVP_S_INVAL);
	ck_assert_msg(strstr(why, "ACQUIRE flags 0x20"), "%s", why);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 0, KVP_WIRE_ACQ_PROBE | KVP_WIRE_ACQ_SOURCES, 0,
				     why, sizeof(why)), KVP_S_INVAL);
	ck_assert_msg(strstr(why, "nothing to name the sources of"), "%s", why);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 0, 0, 1, why, sizeof(why)), KVP_S_INVAL);
	ck_assert_msg(strstr(why, "without WAIT, wait_ms is 0"), "%s", why);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 0, KVP_WIRE_ACQ_WAIT, 0, why, sizeof(why)),
			 KVP_S_INVAL);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 0, KVP_WIRE_ACQ_WAIT, KVP_WIRE_WAIT_MAX_MS + 1,
				     why, sizeof(why)), KVP_S_INVAL);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 0, KVP_WIRE_ACQ_WAIT | KVP_WIRE_ACQ_PROBE, 5,
				     why, sizeof(why)), KVP_S_INVAL);
	ck_assert_msg(strstr(why, "waits 1 to 600000 ms and is no PROBE"), "%s", why);
	ck_assert_int_eq(kvp_set_acquire_wait(a, KVP_WIRE_WAIT_MAX_MS + 1), -EINVAL);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 3, KVP_WIRE_ACQ_PROBE, 0, why, sizeof(why)),
			 KVP_S_INVAL);
	ck_assert_msg(strstr(why, "PROBE with 3 tokens"), "%s", why);
	ck_assert_int_eq(acquire_raw(fd, keys, 4, 0, KVP_WIRE_ACQ_PROBE, 0, why, sizeof(why)),
			 KVP_S_OK);
	close(fd);
	ck_assert_int_eq(kvp_release(a, mine, 4), 0);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_shared + st.pages_private, 0);
	kvp_close(a);
	kvp_close(b);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_publish_refuses_what_it_must)
{
	static const char *const args[] = {
		"--pool-size", "4M", "--slab-size", "1M", "--pinned-quota", "1", NULL,
	};
	kvp_page pg[4], canon[4];
	kvp_key keys[4];
	uint32_t t[4 * BT];
	struct daemon d;
	kvp_client *a, *b;

	daemon_start(&d, args);	/* pinned quota: 1% of 256 pages = 2 */
	a = join(d.sock);
	b = join(d.sock);
	tokens_of(t, 4 * BT, 4 * BT, 0);
	ck_assert_int_eq(kvp_block_keys(a, NULL, t, 4 * BT, NULL, 0, keys), 4);
	ck_assert_int_eq(kvp_alloc(a, 4, pg), 0);
	/* a page held twice is not private to the publisher */
	ck_assert_int_eq(kvp_retain(a, pg, 1), 0);
	ck_assert_int_eq(kvp_publish(a, NULL, pg, keys, 1, KVP_PRIO_NORMAL, canon), -EINVAL);
	ck_assert_int_eq(kvp_release(a, pg, 1), 0);
	/* priority out of range */
	ck_assert_int_eq(kvp_publish(a, NULL, pg, keys, 1, 9, canon), -EINVAL);
	/* the same page twice in one batch */
	{
		kvp_page twice[2] = { pg[0], pg[0] };

		ck_assert_int_eq(kvp_publish(a, NULL, twice, keys, 2, KVP_PRIO_NORMAL, canon),
				 -EINVAL);
	}
	/* three pinned pages do not fit a quota of two: nothing published */
	ck_assert_int_eq(kvp_publish(a, NULL, pg, keys, 3, KVP_PRIO_PINNED, canon), -EDQUOT);
	ck_assert_msg(strstr(kvp_last_error(), "pinned quota"), "%s", kvp_last_error());
	ck_assert_int_eq(kvp_acquire(b, NULL, keys, 4, NULL, 0, canon, NULL), 0);
	ck_assert_int_eq(kvp_publish(a, NULL, pg, keys, 2, KVP_PRIO_PINNED, canon), 0);
	/* someone else's page is not ours to publish */
	ck_assert_int_eq(kvp_publish(b, &keys[1], &pg[2], &keys[2], 1, KVP_PRIO_NORMAL,
				     canon), -ESTALE);
	kvp_close(a);
	kvp_close(b);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_prefix_listing_ranks_by_hits_and_keeps_order_in_ties)
{
	enum { KEYS = 40, TOP = 10 };
	struct kvp_wire_prefix r[KEYS];
	uint32_t total = 0;
	kvp_key k[KEYS];
	struct daemon d;
	kvp_client *c;
	kvp_page p;
	int i, j, n;

	daemon_start(&d, small_pool);
	c = join(d.sock);
	/* 40 one-block chains; key i served i % 7 times */
	for (i = 0; i < KEYS; i++) {
		memset(&k[i], 0, sizeof(k[i]));
		k[i].b[0] = (uint8_t)(i + 1);
		ck_assert_int_eq(kvp_alloc(c, 1, &p), 0);
		ck_assert_int_eq(kvp_publish(c, NULL, &p, &k[i], 1, KVP_PRIO_NORMAL, &p), 0);
		ck_assert_int_eq(kvp_release(c, &p, 1), 0);
		for (j = 0; j < i % 7; j++) {
			ck_assert_int_eq(kvp_acquire(c, NULL, &k[i], 1, NULL, 0, &p, NULL), 1);
			ck_assert_int_eq(kvp_release(c, &p, 1), 0);
		}
	}
	n = kvp_list_prefixes(c, "share", TOP, r, KEYS, &total);
	ck_assert_int_eq(n, TOP);	/* copied */
	ck_assert_uint_eq(total, KEYS);	/* indexed */
	/* 6 hits: keys 6, 13, 20, 27, 34; then 5 hits: 5, 12, 19, 26, 33 */
	for (i = 0; i < TOP; i++) {
		int want = i < 5 ? 6 + 7 * i : 5 + 7 * (i - 5);

		ck_assert_uint_eq(r[i].hits, i < 5 ? 6 : 5);
		ck_assert_msg(memcmp(r[i].key, k[want].b, sizeof(r[i].key)) == 0,
			      "place %d holds another key than key %d", i, want);
	}
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_info_gives_the_namespace_facts_and_alloc_splits_big_batches)
{
	static const char *const opts[] = {
		"--pool-size", "16M", "--slab-size", "1M", "--max-msg-size", "4K",
		"--max-leases", "600", "--key-seed", "info-seed", NULL,
	};
	kvp_page pg[600];
	kvp_key root, key;
	kvp_ns_stats_t ns[4];
	kvp_stats_t st;
	kvp_info_t in;
	struct daemon d;
	kvp_client *c;
	uint32_t tok[BT];
	int n;

	daemon_start(&d, opts);
	c = join(d.sock);
	ck_assert_int_eq(kvp_info(c, &in), 0);
	ck_assert_uint_eq(in.backend, KVP_BACKEND_HOST);
	ck_assert_uint_eq(in.page_bytes, PAGE_BYTES);
	ck_assert_uint_eq(in.page_bytes, kvp_page_bytes(c));
	ck_assert_uint_ge(in.page_stride, PAGE_BYTES);
	ck_assert_uint_eq(in.slab_bytes, 1u << 20);
	ck_assert_uint_eq(in.pages_per_slab, (1u << 20) / in.page_stride);
	ck_assert_uint_eq(in.block_tokens, BT);
	ck_assert_uint_eq(in.key_scheme, KVP_KEYS_VLLM_SHA256);	/* vLLM's default */
	ck_assert_uint_eq(in.max_leases, 600);
	ck_assert_uint_eq(in.max_msg, 4096);
	ck_assert_uint_gt(in.max_batch, 0);
	ck_assert_uint_lt(in.max_batch, 600);	/* a 4 KiB message holds fewer */
	ck_assert_int_eq(kvp_key_root(in.key_scheme, "info-seed", &root), 0);
	ck_assert_msg(memcmp(in.root.b, root.b, sizeof(root.b)) == 0,
		      "kvp_info's root is not H(--key-seed)");
	n = kvp_stats(c, &st, ns, 4);
	ck_assert_int_ge(n, 1);
	ck_assert_uint_eq(ns[0].id, in.ns_id);

	/* the root is the parent a first block is published under */
	tokens_of(tok, BT, BT, 7);
	ck_assert_int_eq(kvp_block_keys(c, &in.root, tok, BT, NULL, 0, &key), 1);
	ck_assert_int_eq(kvp_alloc(c, 1, pg), 0);
	ck_assert_int_eq(kvp_publish(c, &in.root, pg, &key, 1, KVP_PRIO_NORMAL, pg), 0);
	ck_assert_int_eq(kvp_release(c, pg, 1), 0);
	ck_assert_int_eq(kvp_acquire(c, &in.root, &key, 1, NULL, 0, pg, NULL), 1);
	ck_assert_int_eq(kvp_release(c, pg, 1), 0);

	/* more than one message holds: the library splits, as documented */
	ck_assert_int_eq(kvp_alloc(c, 600, pg), 0);
	ck_assert_int_eq(kvp_stats(c, &st, ns, 4), n);
	ck_assert_uint_eq(ns[0].pages_private, 600);
	ck_assert_int_eq(kvp_release(c, pg, 600), 0);
	/* over the lease limit: refused whole, nothing kept */
	ck_assert_int_eq(kvp_alloc(c, 599, pg), 0);
	ck_assert_int_eq(kvp_alloc(c, 2, pg + 599), -EDQUOT);
	ck_assert_int_eq(kvp_release(c, pg, 599), 0);
	ck_assert_int_eq(kvp_stats(c, &st, ns, 4), n);
	ck_assert_uint_eq(ns[0].pages_private, 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_share_every_vllm_key_scheme_serves_its_own_keys)
{
	static const struct { const char *name; uint32_t scheme; } sch[] = {
		{ "vllm-sha256", KVP_KEYS_VLLM_SHA256 },
		{ "vllm-xxhash", KVP_KEYS_VLLM_XXHASH },
		{ "vllm-xxhash-cbor", KVP_KEYS_VLLM_XXHASH_CBOR },
		{ "fast", KVP_KEYS_VLLM_XXHASH_CBOR },	/* another name for it */
	};
	uint32_t tok[3 * BT];
	kvp_key root, keys[3];
	kvp_page out[3], got[3];
	kvp_info_t in;
	struct daemon d;
	kvp_client *c;
	size_t i;
	int b;

	for (i = 0; i < sizeof(sch) / sizeof(sch[0]); i++) {
		const char *opts[] = { "--pool-size", "4M", "--slab-size", "1M", "--key-scheme",
				       sch[i].name, "--key-seed", "42", NULL };

		daemon_start(&d, opts);
		c = join(d.sock);
		ck_assert_int_eq(kvp_info(c, &in), 0);
		ck_assert_uint_eq(in.key_scheme, sch[i].scheme);
		ck_assert_int_eq(kvp_key_root(sch[i].scheme, "42", &root), 0);
		ck_assert_msg(!memcmp(root.b, in.root.b, sizeof(root.b)), "%s: another root",
			      sch[i].name);
		tokens_of(tok, 3 * BT, 3 * BT, (uint32_t)i);
		ck_assert_int_eq(serve(c, tok, 3 * BT, out), 0);
		ck_assert_int_eq(kvp_block_keys(c, NULL, tok, 3 * BT, NULL, 0, keys), 3);
		ck_assert_int_eq(kvp_key_chain(sch[i].scheme, &root, tok, 3 * BT, BT, NULL, 0,
					       keys), 3);
		ck_assert_int_eq(kvp_release(c, out, 3), 0);
		ck_assert_int_eq(kvp_acquire(c, NULL, keys, 3, NULL, 0, got, NULL), 3);
		for (b = 0; b < 3; b++)
			ck_assert(holds_for(kvp_page_ptr(c, got[b]), &keys[b]));
		ck_assert_int_eq(kvp_release(c, got, 3), 0);
		kvp_close(c);
		daemon_stop(&d);
	}
}
END_TEST

/* A kvpoold and a vLLM that configure nothing agree: vLLM's default
 * algorithm (sha256) and NONE_HASH seed ("vllm-none-hash", or
 * PYTHONHASHSEED when set). The root below is vLLM 0.33.0's NONE_HASH
 * (tests/golden/keys_vllm_algos.txt). */
START_TEST(test_share_the_defaults_are_vllms)
{
	static const uint8_t vllm_none_hash[32] = {
		0x06, 0x6b, 0x1e, 0x89, 0x87, 0xe0, 0x27, 0x13, 0x8e, 0x98, 0x70, 0x1c,
		0x46, 0x12, 0x89, 0x29, 0x37, 0x89, 0x35, 0xf9, 0xb6, 0xcd, 0x15, 0x49,
		0x10, 0x5a, 0xe6, 0xb4, 0xf0, 0xd7, 0x11, 0x98,
	};
	kvp_key root;
	kvp_info_t in;
	struct daemon d;
	kvp_client *c;

	unsetenv("PYTHONHASHSEED");
	daemon_start(&d, small_pool);
	c = join(d.sock);
	ck_assert_int_eq(kvp_info(c, &in), 0);
	ck_assert_uint_eq(in.key_scheme, KVP_KEYS_VLLM_SHA256);
	ck_assert_msg(!memcmp(in.root.b, vllm_none_hash, 32), "the root is not vLLM's NONE_HASH");
	kvp_close(c);
	daemon_stop(&d);
	/* PYTHONHASHSEED, as vLLM reads it */
	setenv("PYTHONHASHSEED", "42", 1);
	daemon_start(&d, small_pool);
	unsetenv("PYTHONHASHSEED");
	c = join(d.sock);
	ck_assert_int_eq(kvp_info(c, &in), 0);
	ck_assert_int_eq(kvp_key_root(KVP_KEYS_VLLM_SHA256, "42", &root), 0);
	ck_assert(!memcmp(in.root.b, root.b, 32));
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* A client that keys from a seed of its own (as an engine computing
 * vLLM's hashes does) is refused unless kvpoold's is the same: its keys
 * would never meet the namespace's. So is one naming another scheme.
 * Neither refusal creates anything, nor tells the daemon's seed. */
START_TEST(test_share_a_client_keyed_from_another_seed_or_scheme_is_refused)
{
	const char *opts[] = { "--pool-size", "4M", "--slab-size", "1M", "--key-seed", "s3cr3t",
			       NULL, NULL };
	kvp_geometry g = geo;
	kvp_ns_stats_t ns[4];
	kvp_stats_t st;
	kvp_info_t in;
	kvp_key root;
	struct daemon d;
	kvp_client *c, *probe;

	daemon_start(&d, opts);
	probe = join(d.sock);
	g.key_seed = "7";
	ck_assert_int_eq(kvp_connect(d.sock, "seeded", &g, &c), -EBADE);
	ck_assert_msg(strstr(kvp_last_error(), "key_seed") &&
		      strstr(kvp_last_error(), "PYTHONHASHSEED") &&
		      strstr(kvp_last_error(), "'7'") && !strstr(kvp_last_error(), "s3cr3t"),
		      "%s", kvp_last_error());
	ck_assert_int_eq(kvp_stats(probe, &st, ns, 4), 1);	/* only "share" */
	/* the same seed: joined, and the root is H(seed) of the scheme */
	g.key_seed = "s3cr3t";
	ck_assert_int_eq(kvp_connect(d.sock, "seeded", &g, &c), 0);
	ck_assert_int_eq(kvp_info(c, &in), 0);
	ck_assert_int_eq(kvp_key_root(in.key_scheme, "s3cr3t", &root), 0);
	ck_assert(!memcmp(in.root.b, root.b, sizeof(root.b)));
	kvp_close(c);
	/* another scheme than the namespace's: the field, both values */
	g.key_seed = NULL;
	g.key_scheme = KVP_KEYS_VLLM_XXHASH;
	ck_assert_int_eq(kvp_connect(d.sock, "share", &g, &c), -EBADE);
	ck_assert_msg(strstr(kvp_last_error(), "key_scheme 3, this client sent 4"), "%s",
		      kvp_last_error());
	/* the daemon's log says each refusal, under the client's name, once
	 * per cause however often it tries (before: a counter alone) */
	ck_assert_int_eq(kvp_connect_as(d.sock, "share", &g, "engine 7", &c), -EBADE);
	ck_assert_int_eq(kvp_connect(d.sock, "share", &g, &c), -EBADE);
	kvp_close(probe);
	ck_assert_uint_eq(log_count(&d, "refused the HELLO"), 2);	/* seed, scheme */
	ck_assert_uint_eq(log_count(&d, "key_scheme 3, this client sent 4"), 1);
	ck_assert_uint_eq(log_count(&d, "'check_share'): namespace 'share' has key_scheme"), 1);
	daemon_stop(&d);

	/* salted roots never equal H(seed): a seeded client cannot match */
	opts[6] = "--key-salt=pepper";
	daemon_start(&d, opts);
	g.key_scheme = 0;
	g.key_seed = "s3cr3t";
	ck_assert_int_eq(kvp_connect(d.sock, "seeded", &g, &c), -EBADE);
	ck_assert_msg(strstr(kvp_last_error(), "--key-salt"), "%s", kvp_last_error());
	g.key_seed = NULL;
	ck_assert_int_eq(kvp_connect(d.sock, "seeded", &g, &c), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

static Suite *share_suite(void)
{
	Suite *s = suite_create("share");
	TCase *tc;

	tc = tcase_create("processes");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_share_four_processes_share_one_copy_of_a_prompt);
	tcase_add_test(tc, test_share_same_keys_at_once_without_eviction_keep_one_page_each);
	tcase_add_test(tc, test_share_concurrent_publishes_of_the_same_keys_keep_one_page);
	suite_add_tcase(s, tc);

	tc = tcase_create("operations");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_share_cow_copies_exactly_and_independently);
	tcase_add_test(tc, test_share_turn_two_extends_turn_one_partial_page);
	tcase_add_test(tc, test_share_retain_takes_a_second_lease);
	tcase_add_test(tc, test_share_a_probe_leases_nothing_and_a_load_is_not_a_second_lookup);
	tcase_add_test(tc, test_share_publish_refuses_what_it_must);
	tcase_add_test(tc, test_share_prefix_listing_ranks_by_hits_and_keeps_order_in_ties);
	tcase_add_test(tc, test_share_info_gives_the_namespace_facts_and_alloc_splits_big_batches);
	tcase_add_test(tc, test_share_every_vllm_key_scheme_serves_its_own_keys);
	tcase_add_test(tc, test_share_the_defaults_are_vllms);
	tcase_add_test(tc, test_share_a_client_keyed_from_another_seed_or_scheme_is_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("eviction");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_share_eviction_spares_leased_pages_and_shortens_hits);
	tcase_add_test(tc, test_share_eviction_takes_leaves_before_parents);
	tcase_add_test(tc, test_share_a_request_that_cannot_be_met_evicts_nothing);
	tcase_add_test(tc, test_share_watermark_keeps_free_pages_ready);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(share_suite());
}
