/* SPDX-License-Identifier: MIT */
/*
 * check_cli.c - integration tests of the admin CLI `kvpool`: every command
 * run as a real process against a real kvpoold whose state the test builds
 * with libkvpool (two namespaces; published, shared, cached and private
 * pages; clients holding them), its --json output parsed and checked
 * field by field; the capacity planner's figures; the Prometheus output
 * through promtool; and the error paths (no daemon, a bad socket, not
 * admin, a protocol version mismatch, unknown ids, busy namespaces).
 *
 * Past 800 lines on purpose: every command is checked against the one
 * pool state the fixture builds, so they stay in one program.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"
#include "json.h"

#define BT 16u			/* tokens per page */
#define PAGE_BYTES 16384u	/* 2 x 2 layers x 2 heads x 64 dims x 16 tokens x 2 bytes */
#define PROMPT_BLOCKS 10u
#define OUT_MAX (256u * 1024u)

static const kvp_geometry llama = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/llama",
};
static const kvp_geometry qwen = {
	.layers = 4, .kv_heads = 1, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_BF16, .model = "test/qwen",
};

/* 4 MiB in 1 MiB slabs, no eviction ahead of need: counts stay exact */
static const char *const pool_args[] = {
	"--pool-size", "4M", "--slab-size", "1M", "--free-watermark", "0", NULL,
};

/* --- running the CLI ---------------------------------------------------------- */

static char out[OUT_MAX];

/* cli() - run kvpool with args (NULL-terminated) into out; returns its exit
 * code (-1 when it did not exit normally). */
static int cli_v(const char *const *args)
{
	const char *argv[32];
	int n = 0, status;

	argv[n++] = harness_cli();
	for (; *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	status = run_cmd(argv, out, sizeof(out));
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
#define cli(...) cli_v((const char *const[]){ __VA_ARGS__, NULL })

/* cli_json() - cli() that must exit 0 and print one valid JSON document. */
#define cli_json(...) do { \
	int rc_ = cli(__VA_ARGS__); \
	ck_assert_msg(rc_ == 0, "exit %d: %s", rc_, out); \
	ck_assert_msg(json_valid(out), "not JSON: %s", out); \
} while (0)

/*
 * cli_as() - run kvpool as uid/gid (no supplementary groups) with args;
 * returns its exit code. Needs root.
 */
static int cli_as(uid_t uid, gid_t gid, const char *const *args)
{
	const char *argv[32];
	int p[2], n = 0, status;
	size_t used = 0;
	ssize_t r;
	pid_t pid;

	argv[n++] = harness_cli();
	for (; *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0) {
			fprintf(stderr, "cannot become uid %u: %s\n", (unsigned)uid,
				strerror(errno));
			_exit(126);
		}
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	while (used + 1 < sizeof(out) && (r = read(p[0], out + used, sizeof(out) - 1 - used)) > 0)
		used += (size_t)r;
	out[used] = '\0';
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
#define cli_as_nobody(gid, ...) \
	cli_as(65534, gid, (const char *const[]){ __VA_ARGS__, NULL })

/* line_with() - a malloc'd copy of the first line of s that contains
 * needle, or NULL. */
static char *line_with(const char *s, const char *needle)
{
	const char *hit = strstr(s, needle), *start, *end;

	if (!hit)
		return NULL;
	for (start = hit; start > s && start[-1] != '\n'; start--)
		;
	end = strchr(hit, '\n');
	return strndup(start, end ? (size_t)(end - start) : strlen(start));
}

/* --- a daemon in a known state -------------------------------------------------- */

/*
 * The world every inspection test starts from:
 *   llama (2 layers x 2 heads x 64 dims, f16): client a published a prompt
 *   of 10 blocks (10 misses) and released it, then acquired its first 2
 *   blocks again (2 hits); client b acquired the first 6 (6 hits) and
 *   allocated 3 private pages. So: 6 shared pages (blocks 1-2 with 2
 *   leases each), 4 cached, 3 private; 8 of 18 blocks hit.
 *   qwen (4 layers x 1 head x 64 dims, bf16): client q holds 5 private.
 */
struct world {
	struct daemon d;
	kvp_client *a, *b, *q;
	kvp_page a_pages[2], b_pages[6], b_private[3], q_pages[5];
	uint64_t a_id, b_id, q_id;
};

static kvp_client *join(const char *sock, const char *ns, const kvp_geometry *g)
{
	kvp_client *c;
	int rc = kvp_connect(sock, ns, g, &c);

	ck_assert_msg(rc == 0, "kvp_connect %s: %s: %s", ns, kvp_strerror(rc), kvp_last_error());
	return c;
}

/* client_ids() - the ids of w's clients, told apart by namespace and leases. */
static void client_ids(struct world *w)
{
	struct kvp_wire_client r[16];
	kvp_client *c = join(w->d.sock, NULL, NULL);
	int n, i;

	n = kvp_list_clients(c, r, 16, NULL);
	ck_assert_int_ge(n, 4);
	for (i = 0; i < n; i++) {
		if (strcmp(r[i].ns, "llama") == 0 && r[i].leases == 2)
			w->a_id = r[i].id;
		else if (strcmp(r[i].ns, "llama") == 0 && r[i].leases == 9)
			w->b_id = r[i].id;
		else if (strcmp(r[i].ns, "qwen") == 0)
			w->q_id = r[i].id;
	}
	kvp_close(c);
	ck_assert(w->a_id && w->b_id && w->q_id);
}

static void world_start(struct world *w)
{
	uint32_t t[PROMPT_BLOCKS * BT];
	kvp_page all[PROMPT_BLOCKS];

	memset(w, 0, sizeof(*w));
	daemon_start(&w->d, pool_args);
	harness_tokens(t, PROMPT_BLOCKS * BT, PROMPT_BLOCKS * BT, 0);

	w->a = join(w->d.sock, "llama", &llama);
	ck_assert_int_eq(harness_serve(w->a, t, PROMPT_BLOCKS * BT, all), 0);
	ck_assert_int_eq(kvp_release(w->a, all, PROMPT_BLOCKS), 0);
	ck_assert_int_eq(harness_serve(w->a, t, 2 * BT, w->a_pages), 2);

	w->b = join(w->d.sock, "llama", &llama);
	ck_assert_int_eq(harness_serve(w->b, t, 6 * BT, w->b_pages), 6);
	ck_assert_int_eq(kvp_alloc(w->b, 3, w->b_private), 0);

	w->q = join(w->d.sock, "qwen", &qwen);
	ck_assert_int_eq(kvp_alloc(w->q, 5, w->q_pages), 0);
	client_ids(w);
}

static void world_stop(struct world *w)
{
	kvp_close(w->a);
	kvp_close(w->b);
	kvp_close(w->q);
	daemon_stop(&w->d);
}

/* ns_clients() - clients of namespace ns now, as STATS says. */
static uint32_t ns_clients(const char *sock, const char *ns)
{
	kvp_ns_stats_t n[8];
	kvp_stats_t st;
	kvp_client *c = join(sock, NULL, NULL);
	int k, i;
	uint32_t r = 0;

	k = kvp_stats(c, &st, n, 8);
	kvp_close(c);
	for (i = 0; i < k && i < 8; i++)
		if (strcmp(n[i].name, ns) == 0)
			r = n[i].clients;
	return r;
}

/* wait_ns_clients() - until namespace ns has want clients (the daemon
 * learns of a closed connection asynchronously); polls STATS, 5 s at most. */
static void wait_ns_clients(const char *sock, const char *ns, uint32_t want)
{
	struct timespec ms10 = { 0, 10 * 1000 * 1000 };
	int i;

	for (i = 0; i < 500 && ns_clients(sock, ns) != want; i++)
		nanosleep(&ms10, NULL);
	ck_assert_uint_eq(ns_clients(sock, ns), want);
}

/* --- status, namespaces, clients ---------------------------------------------- */

START_TEST(test_cli_status_counts_pages_in_human_units_and_json)
{
	struct world w;

	world_start(&w);
	ck_assert_int_eq(cli("--socket", w.d.sock, "status"), 0);
	ck_assert_msg(strstr(out, "conservation  ok"), "%s", out);
	ck_assert_msg(strstr(out, "pool 4 MiB in slabs of 1 MiB"), "%s", out);
	ck_assert_msg(strstr(out, "16 KiB per page"), "%s", out);
	ck_assert_msg(strstr(out, "hit rate 44.4% (8 of 18 blocks"), "%s", out);

	ck_assert_int_eq(cli("--socket", w.d.sock, "--bytes", "status"), 0);
	ck_assert_msg(strstr(out, "pool 4194304 B in slabs of 1048576 B"), "%s", out);
	ck_assert_msg(strstr(out, "16384 B per page"), "%s", out);

	/* options after the command work too */
	cli_json("status", "--socket", w.d.sock, "--json");
	ck_assert_uint_eq(json_u64(out, "pages.private"), 3 + 5);
	ck_assert_uint_eq(json_u64(out, "pages.shared"), 6);
	ck_assert_uint_eq(json_u64(out, "pages.cached"), 4);
	ck_assert_uint_eq(json_u64(out, "pool_bytes"), 4u << 20);
	ck_assert_uint_eq(json_u64(out, "prefix.hits"), 8);
	ck_assert_uint_eq(json_u64(out, "prefix.misses"), 10);
	ck_assert_uint_eq(json_u64(out, "clients"), 3);	/* a, b, q: not kvpool's own */
	ck_assert(strncmp(json_at(out, "conservation_ok"), "true", 4) == 0);
	ck_assert_int_eq(json_len(out, "namespaces"), 2);
	world_stop(&w);
}
END_TEST

START_TEST(test_cli_namespaces_shows_geometry_states_hit_rate_and_quota)
{
	struct world w;
	const char *ll;

	world_start(&w);
	cli_json("--socket", w.d.sock, "--json", "namespaces");
	ck_assert_int_eq(json_len(out, "namespaces"), 2);
	/* the namespaces come in creation order */
	ck_assert(json_str_is(out, "namespaces[0].name", "llama"));
	ck_assert(json_str_is(out, "namespaces[0].model", "test/llama"));
	ck_assert_uint_eq(json_u64(out, "namespaces[0].layers"), 2);
	ck_assert_uint_eq(json_u64(out, "namespaces[0].kv_heads"), 2);
	ck_assert_uint_eq(json_u64(out, "namespaces[0].head_dim"), 64);
	ck_assert_uint_eq(json_u64(out, "namespaces[0].block_tokens"), BT);
	ck_assert(json_str_is(out, "namespaces[0].dtype", "f16"));
	ck_assert_uint_eq(json_u64(out, "namespaces[0].page_bytes"), PAGE_BYTES);
	ck_assert_uint_eq(json_u64(out, "namespaces[0].pages.shared"), 6);
	ck_assert_uint_eq(json_u64(out, "namespaces[0].pages.cached"), 4);
	ck_assert_uint_eq(json_u64(out, "namespaces[0].pages.private"), 3);
	ck_assert_uint_eq(json_u64(out, "namespaces[0].clients"), 2);
	ck_assert_double_eq_tol(json_num(out, "namespaces[0].hit_rate"), 8.0 / 18.0, 1e-4);
	ck_assert_uint_gt(json_u64(out, "namespaces[0].pinned_quota"), 0);
	ck_assert(json_str_is(out, "namespaces[0].key_scheme", "vllm-sha256"));
	ck_assert_uint_eq(json_u64(out, "namespaces[0].nvme.slots"), 0);
	ck_assert(json_str_is(out, "namespaces[1].name", "qwen"));
	ck_assert(json_str_is(out, "namespaces[1].dtype", "bf16"));
	ck_assert_uint_eq(json_u64(out, "namespaces[1].pages.private"), 5);
	ck_assert(strncmp(json_at(out, "namespaces[1].hit_rate"), "null", 4) == 0);

	ck_assert_int_eq(cli("--socket", w.d.sock, "namespaces"), 0);
	ck_assert_msg(strstr(out, "NAME ") && strstr(out, "HIT%") && strstr(out, "PINNED"),
		      "%s", out);
	ll = strstr(out, "\nllama ");
	ck_assert_msg(ll && strstr(ll, "2x2x64/16t f16") && strstr(ll, "16 KiB") &&
		      strstr(ll, "44.4%") && strstr(ll, " vllm-sha256 "), "%s", out);
	ck_assert_msg(strstr(out, "4x1x64/16t bf16"), "%s", out);
	world_stop(&w);
}
END_TEST

START_TEST(test_cli_clients_lists_each_connection_with_its_leases)
{
	struct world w;
	unsigned long long id;
	char *row;
	int i, n, seen = 0;

	world_start(&w);
	cli_json("-s", w.d.sock, "-j", "clients");
	n = json_len(out, "clients");
	ck_assert_int_eq(n, 4);
	ck_assert_uint_eq(json_u64(out, "total"), 4);
	for (i = 0; i < n; i++) {
		char path[64];
		unsigned long long cid, leases;

		snprintf(path, sizeof(path), "clients[%d].id", i);
		cid = json_u64(out, path);
		snprintf(path, sizeof(path), "clients[%d].leases", i);
		leases = json_u64(out, path);
		snprintf(path, sizeof(path), "clients[%d].pid", i);
		if (cid == w.b_id) {
			ck_assert_uint_eq(leases, 9);
			ck_assert_uint_eq(json_u64(out, path), (unsigned long long)getpid());
			seen++;
		} else if (cid == w.q_id) {
			ck_assert_uint_eq(leases, 5);
			snprintf(path, sizeof(path), "clients[%d].namespace", i);
			ck_assert(json_str_is(out, path, "qwen"));
			seen++;
		}
		snprintf(path, sizeof(path), "clients[%d].uid", i);
		ck_assert_uint_eq(json_u64(out, path), (unsigned long long)getuid());
	}
	ck_assert_int_eq(seen, 2);

	ck_assert_int_eq(cli("-s", w.d.sock, "clients"), 0);
	ck_assert_msg(strstr(out, "LEASES") && strstr(out, "CONNECTED") &&
		      strstr(out, "(inspection)"), "%s", out);
	row = line_with(out, "qwen");
	ck_assert_msg(row && sscanf(row, "%llu", &id) == 1 && id == w.q_id &&
		      strstr(row, " 5  ") && strstr(row, " ago"), "%s", out);
	free(row);
	world_stop(&w);
}
END_TEST

/* --- pages and prefixes --------------------------------------------------------- */

START_TEST(test_cli_pages_filters_by_state_namespace_and_client)
{
	struct world w;
	char idbuf[24];
	int i, n;

	world_start(&w);
	cli_json("-s", w.d.sock, "--json", "pages");
	ck_assert_uint_eq(json_u64(out, "total"), 6 + 4 + 3 + 5);
	ck_assert_int_eq(json_len(out, "pages"), 18);

	cli_json("-s", w.d.sock, "--json", "pages", "--state", "cached");
	n = json_len(out, "pages");
	ck_assert_int_eq(n, 4);
	for (i = 0; i < n; i++) {
		char path[64];

		snprintf(path, sizeof(path), "pages[%d].state", i);
		ck_assert(json_str_is(out, path, "cached"));
		snprintf(path, sizeof(path), "pages[%d].tier", i);
		ck_assert(json_str_is(out, path, "pool"));
		snprintf(path, sizeof(path), "pages[%d].refs", i);
		ck_assert_uint_eq(json_u64(out, path), 0);
		snprintf(path, sizeof(path), "pages[%d].tokens", i);
		ck_assert_uint_eq(json_u64(out, path), BT);
		snprintf(path, sizeof(path), "pages[%d].key", i);
		ck_assert_msg(json_at(out, path) && strlen(json_at(out, path)) > 18 &&
			      json_at(out, path)[17] == '"', "%s", out);
	}

	/* the two blocks a and b both hold: two leases, two holders */
	cli_json("-s", w.d.sock, "--json", "pages", "--state", "shared");
	ck_assert_int_eq(json_len(out, "pages"), 6);
	n = 0;
	for (i = 0; i < 6; i++) {
		char path[64];

		snprintf(path, sizeof(path), "pages[%d].refs", i);
		if (json_u64(out, path) == 2) {
			snprintf(path, sizeof(path), "pages[%d].holders", i);
			ck_assert_uint_eq(json_u64(out, path), 2);
			n++;
		}
	}
	ck_assert_int_eq(n, 2);

	cli_json("-s", w.d.sock, "--json", "pages", "--ns", "qwen");
	ck_assert_int_eq(json_len(out, "pages"), 5);
	ck_assert(json_str_is(out, "pages[0].namespace", "qwen"));
	ck_assert(json_str_is(out, "pages[0].state", "private"));
	ck_assert(strncmp(json_at(out, "pages[0].key"), "null", 4) == 0);
	ck_assert_uint_eq(json_u64(out, "pages[0].holder"), w.q_id);

	snprintf(idbuf, sizeof(idbuf), "%llu", (unsigned long long)w.b_id);
	cli_json("-s", w.d.sock, "--json", "pages", "--client", idbuf);
	ck_assert_uint_eq(json_u64(out, "total"), 9);

	cli_json("-s", w.d.sock, "--json", "pages", "--limit", "2");
	ck_assert_int_eq(json_len(out, "pages"), 2);
	ck_assert_uint_eq(json_u64(out, "total"), 18);

	ck_assert_int_eq(cli("-s", w.d.sock, "pages", "--limit", "2"), 0);
	ck_assert_msg(strstr(out, "STATE") && strstr(out, "TIER") && strstr(out, "AGE") &&
		      strstr(out, "(2 of 18 pages shown"), "%s", out);
	ck_assert_int_eq(cli("-s", w.d.sock, "pages", "--state", "private", "--ns", "llama"), 0);
	ck_assert_msg(strstr(out, "private  pool"), "%s", out);

	ck_assert_int_eq(cli("-s", w.d.sock, "pages", "--state", "hot"), 2);
	ck_assert_msg(strstr(out, "'hot' is not private, shared, cached"), "%s", out);
	ck_assert_int_eq(cli("-s", w.d.sock, "pages", "--ns", "nope"), 1);
	ck_assert_msg(strstr(out, "no namespace 'nope'"), "%s", out);
	ck_assert_int_eq(cli("-s", w.d.sock, "pages", "--client", "424242"), 1);
	ck_assert_msg(strstr(out, "no client 424242"), "%s", out);
	world_stop(&w);
}
END_TEST

START_TEST(test_cli_prefixes_ranks_blocks_by_hits)
{
	struct world w;
	unsigned long long d0, d1;

	world_start(&w);
	cli_json("-s", w.d.sock, "--json", "prefixes", "--top", "3");
	ck_assert_uint_eq(json_u64(out, "total"), PROMPT_BLOCKS);
	ck_assert_int_eq(json_len(out, "prefixes"), 3);
	/* blocks 1 and 2 served a and b: 2 hits; blocks 3-6 b only: 1 */
	ck_assert_uint_eq(json_u64(out, "prefixes[0].hits"), 2);
	ck_assert_uint_eq(json_u64(out, "prefixes[1].hits"), 2);
	ck_assert_uint_eq(json_u64(out, "prefixes[2].hits"), 1);
	d0 = json_u64(out, "prefixes[0].depth");
	d1 = json_u64(out, "prefixes[1].depth");
	ck_assert_uint_eq(d0 + d1, 3);	/* depths 1 and 2 */
	ck_assert_uint_eq(json_u64(out, "prefixes[0].bytes"), d0 * PAGE_BYTES);
	ck_assert_uint_eq(json_u64(out, "prefixes[0].refs"), 2);
	ck_assert(json_str_is(out, "prefixes[0].state", "shared"));
	ck_assert(json_str_is(out, "prefixes[0].namespace", "llama"));

	ck_assert_int_eq(cli("-s", w.d.sock, "prefixes", "--ns", "llama"), 0);
	ck_assert_msg(strstr(out, "DEPTH") && strstr(out, "HITS") && strstr(out, "BYTES") &&
		      strstr(out, "160 KiB"), "%s", out);	/* depth 10 x 16 KiB */
	ck_assert_int_eq(cli("-s", w.d.sock, "--bytes", "prefixes", "--top", "1"), 0);
	ck_assert_msg(strstr(out, " 16384 B") || strstr(out, " 32768 B"), "%s", out);
	ck_assert_msg(strstr(out, "(top 1 of 10 indexed blocks"), "%s", out);
	world_stop(&w);
}
END_TEST

/* --- admin ------------------------------------------------------------------------ */

START_TEST(test_cli_evict_pushes_cached_pages_out)
{
	struct world w;

	world_start(&w);
	cli_json("-s", w.d.sock, "--json", "evict", "--ns", "llama", "--max", "3");
	ck_assert_uint_eq(json_u64(out, "evicted"), 3);
	cli_json("-s", w.d.sock, "--json", "status");
	ck_assert_uint_eq(json_u64(out, "pages.cached"), 1);
	ck_assert_uint_eq(json_u64(out, "prefix.evictions"), 3);
	ck_assert_int_eq(cli("-s", w.d.sock, "evict"), 0);
	ck_assert_msg(strstr(out, "evicted 1 cached page\n"), "%s", out);
	ck_assert_int_eq(cli("-s", w.d.sock, "evict", "--max", "zero"), 2);
	world_stop(&w);
}
END_TEST

START_TEST(test_cli_disconnect_closes_a_client_and_refuses_unknown_ids)
{
	struct world w;
	char idbuf[24];

	world_start(&w);
	snprintf(idbuf, sizeof(idbuf), "%llu", (unsigned long long)w.q_id);
	ck_assert_int_eq(cli("-s", w.d.sock, "disconnect", idbuf), 0);
	ck_assert_msg(strstr(out, "disconnected client"), "%s", out);
	wait_ns_clients(w.d.sock, "qwen", 0);
	cli_json("-s", w.d.sock, "--json", "namespaces");
	ck_assert_uint_eq(json_u64(out, "namespaces[1].pages.private"), 0);

	ck_assert_int_eq(cli("-s", w.d.sock, "disconnect", "999999"), 1);
	ck_assert_msg(strstr(out, "kvpool: disconnect 999999: ") &&
		      strstr(out, "no client 999999"), "%s", out);
	ck_assert_int_eq(cli("-s", w.d.sock, "disconnect", "q"), 2);
	ck_assert_int_eq(cli("-s", w.d.sock, "disconnect"), 2);
	world_stop(&w);
}
END_TEST

START_TEST(test_cli_drop_refuses_a_used_namespace_unless_forced)
{
	struct world w;
	kvp_stats_t st;

	world_start(&w);
	ck_assert_int_eq(cli("-s", w.d.sock, "drop", "nope"), 1);
	ck_assert_msg(strstr(out, "kvpool: drop nope: ") && strstr(out, "no namespace 'nope'"),
		      "%s", out);
	/* qwen has a client: refused, nothing changed (before: dropped) */
	ck_assert_int_eq(cli("-s", w.d.sock, "drop", "qwen"), 1);
	ck_assert_msg(strstr(out, "namespace 'qwen' has 1 client") &&
		      strstr(out, "kvpool drop --force qwen"), "%s", out);
	ck_assert_int_eq(kvp_stats(w.q, &st, NULL, 0), 2);	/* still connected */
	/* forced: its client is disconnected, told why, its leases go */
	cli_json("-s", w.d.sock, "--json", "drop", "--force", "qwen");
	ck_assert(json_str_is(out, "dropped", "qwen"));
	ck_assert_int_eq(kvp_stats(w.q, &st, NULL, 0), -EPIPE);
	ck_assert_msg(strstr(kvp_last_error(), "namespace 'qwen' was dropped by an admin"),
		      "%s", kvp_last_error());
	cli_json("-s", w.d.sock, "--json", "namespaces");
	ck_assert_int_eq(json_len(out, "namespaces"), 1);
	ck_assert(json_str_is(out, "namespaces[0].name", "llama"));
	world_stop(&w);
}
END_TEST

/* nobody_gid() - nogroup's gid, or -1 (the test skips) */
static gid_t nobody_gid(void)
{
	struct group *g = getgrgid(65534);

	return g ? g->gr_gid : (gid_t)-1;
}

START_TEST(test_cli_admin_commands_refused_without_admin_rights)
{
	static const char *const args[] = {
		"--pool-size", "4M", "--slab-size", "1M", "--socket-group", "nogroup", NULL,
	};
	struct daemon d;
	char idbuf[24];
	kvp_client *c;

	if (geteuid() != 0 || nobody_gid() == (gid_t)-1) {
		fprintf(stderr, "check_cli: skipping the not-admin checks: they need root "
			"(to run kvpool as nobody, uid 65534) and a group 65534\n");
		return;
	}
	if (cli_as_nobody(65534, "--version") != 0) {
		fprintf(stderr, "check_cli: skipping the not-admin checks: nobody cannot run "
			"%s (is a directory above it closed to others?): %s\n",
			harness_cli(), out);
		return;
	}
	daemon_start(&d, args);
	ck_assert_int_eq(chmod(d.dir, 0755), 0);	/* nobody may reach the socket */
	c = join(d.sock, "llama", &llama);

	/* a member of the socket's group may look ... */
	ck_assert_int_eq(cli_as_nobody(65534, "-s", d.sock, "status"), 0);
	ck_assert_msg(strstr(out, "conservation  ok"), "%s", out);
	/* ... but not steer: the daemon's own words */
	ck_assert_int_eq(cli_as_nobody(65534, "-s", d.sock, "evict"), 1);
	ck_assert_msg(strstr(out, "kvpool: evict: refused by kvpoold: ") &&
		      strstr(out, "needs admin rights"), "%s", out);
	ck_assert_int_eq(cli_as_nobody(65534, "-s", d.sock, "drop", "llama"), 1);
	ck_assert_msg(strstr(out, "refused by kvpoold") && strstr(out, "--admin-group"),
		      "%s", out);
	snprintf(idbuf, sizeof(idbuf), "%d", 1);
	ck_assert_int_eq(cli_as_nobody(65534, "-s", d.sock, "disconnect", idbuf), 1);
	ck_assert_msg(strstr(out, "needs admin rights"), "%s", out);
	ck_assert_int_eq(ns_clients(d.sock, "llama"), 1);	/* nothing happened */

	/* outside the group: the socket's mode says no, and which group to join */
	ck_assert_int_eq(cli_as_nobody(65533, "-s", d.sock, "status"), 1);
	ck_assert_msg(strstr(out, "permission denied") && strstr(out, "mode 0660") &&
		      strstr(out, "group nogroup, and user nobody") &&
		      strstr(out, "add the user to group nogroup") &&
		      strstr(out, "--socket-group=GROUP"), "%s", out);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* --- metrics and top ---------------------------------------------------------------- */

static bool have_promtool(void)
{
	return system("command -v promtool >/dev/null 2>&1") == 0;
}

/*
 * ensure_promtool() - promtool on PATH, installing the Debian package
 * prometheus with apt-get only when it is missing. false (why says why)
 * when it cannot be had: the caller skips the promtool check.
 */
static bool ensure_promtool(char *why, size_t len)
{
	int rc;

	if (have_promtool())
		return true;
	if (geteuid() != 0 || system("command -v apt-get >/dev/null 2>&1") != 0) {
		snprintf(why, len, "promtool is missing and installing the Debian package "
			 "prometheus needs root and apt-get");
		return false;
	}
	fprintf(stderr, "check_cli: promtool is missing: apt-get install prometheus\n");
	rc = system("export DEBIAN_FRONTEND=noninteractive; "
		    "apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || "
		    "{ apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "
		    "--no-install-recommends prometheus >/dev/null 2>&1; }");
	if (rc != 0 || !have_promtool()) {
		snprintf(why, len, "apt-get install prometheus failed (status %d): no "
			 "package index or no network?", rc);
		return false;
	}
	return true;
}

START_TEST(test_cli_metrics_expose_every_counter_and_pass_promtool)
{
	struct world w;
	char path[160], cmd[256], why[160];
	FILE *f;

	world_start(&w);
	ck_assert_int_eq(cli("-s", w.d.sock, "metrics"), 0);
	ck_assert_msg(strstr(out, "# HELP kvpool_requests_total ") &&
		      strstr(out, "# TYPE kvpool_requests_total counter\n"), "%s", out);
	ck_assert_msg(strstr(out, "kvpool_pages{state=\"shared\",tier=\"pool\"} 6\n") &&
		      strstr(out, "kvpool_pages{state=\"cached\",tier=\"pool\"} 4\n") &&
		      strstr(out, "kvpool_pages{state=\"private\",tier=\"pool\"} 8\n") &&
		      strstr(out, "kvpool_pages{state=\"spilled\",tier=\"nvme\"} 0\n"), "%s", out);
	ck_assert_msg(strstr(out, "kvpool_namespace_pages{namespace=\"qwen\",state=\"private\","
			     "tier=\"pool\"} 5\n"), "%s", out);
	ck_assert_msg(strstr(out, "kvpool_namespace_prefix_hit_blocks_total{namespace=\"llama\"} 8\n") &&
		      strstr(out, "kvpool_prefix_miss_blocks_total 10\n") &&
		      strstr(out, "kvpool_namespace_page_bytes{namespace=\"llama\"} 16384\n") &&
		      strstr(out, "kvpool_tier_slots{tier=\"nvme\"} 0\n") &&
		      strstr(out, "kvpool_namespace_tier_slots{namespace=\"qwen\",tier=\"nvme\"} 0\n") &&
		      strstr(out, "kvpool_clients 4\n") &&
		      strstr(out, "kvpool_conservation_ok 1\n") &&
		      strstr(out, "kvpool_request_errors_total{kind=\"stale\"} 0\n") &&
		      strstr(out, "dtype=\"bf16\""), "%s", out);

	if (!ensure_promtool(why, sizeof(why))) {
		fprintf(stderr, "check_cli: skipping `promtool check metrics`: %s\n", why);
		world_stop(&w);
		return;
	}
	snprintf(path, sizeof(path), "%s/metrics.prom", w.d.dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(out, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
	ck_assert_msg(WEXITSTATUS(run_cmd((const char *[]){ "/bin/sh", "-c", cmd, NULL }, out,
					  sizeof(out))) == 0 && !strstr(out, "kvpool_"),
		      "promtool check metrics: %s", out);
	world_stop(&w);
}
END_TEST

START_TEST(test_cli_top_prints_a_frame_a_second_without_a_tty)
{
	struct world w;
	const char *p, *second;

	world_start(&w);
	ck_assert_int_eq(cli("-s", w.d.sock, "top", "--count", "2"), 0);
	p = strstr(out, "kvpool top ");
	ck_assert_msg(p && strstr(p, "  kvpoold "), "%s", out);
	second = strstr(p + 1, "kvpool top ");
	ck_assert_msg(second && !strstr(second + 1, "kvpool top "), "two frames: %s", out);
	/* the lines above the tables fit 80 columns */
	for (p = out; *p && *p != '\n'; p = strchr(p, '\n') + 1) {
		const char *nl = strchr(p, '\n');

		ck_assert_ptr_nonnull(nl);
		ck_assert_msg(nl - p <= 80, "a line of %d columns: %.*s", (int)(nl - p),
			      (int)(nl - p), p);
	}
	ck_assert_msg(strstr(out, "pages     ") && strstr(out, "6 shared,\n          4 cached") &&
		      strstr(out, "NAMESPACE") && strstr(out, "LEASES") &&
		      !strstr(out, "q quits") && !strstr(out, "\033["), "%s", out);

	ck_assert_int_eq(cli("-s", w.d.sock, "--json", "top", "-n", "2"), 0);
	{
		char *nl = strchr(out, '\n'), *line2;

		ck_assert_ptr_nonnull(nl);
		*nl = '\0';
		line2 = nl + 1;
		ck_assert_msg(json_valid(out) && json_valid(line2), "%s\n%s", out, line2);
		ck_assert_uint_eq(json_u64(line2, "pages.shared"), 6);
		ck_assert(json_str_is(line2, "namespaces[1].name", "qwen"));
	}
	ck_assert_int_eq(cli("-s", w.d.sock, "top", "--count", "0"), 2);
	world_stop(&w);
}
END_TEST

/* --- plan --------------------------------------------------------------------------- */

START_TEST(test_cli_plan_reproduces_llama_70b_figures)
{
	ck_assert_int_eq(cli("plan", "--model", "Llama-3.1-70B", "--dtype", "f16",
			     "--tokens", "4096", "--users", "256", "--gpu-mem", "80GB"), 0);
	ck_assert_msg(strstr(out, "per token     327,680 bytes (327.7 kB, 320 KiB)"), "%s", out);
	ck_assert_msg(strstr(out, "per sequence  1,342,177,280 bytes (1.34 GB, 1.25 GiB): "
			     "4,096 tokens, 256 pages"), "%s", out);
	ck_assert_msg(strstr(out, "all users     343,597,383,680 bytes (343.6 GB, 320 GiB): "
			     "256 users"), "%s", out);
	/* 80GB is 80 GiB, as every size kvpool reads */
	ck_assert_msg(strstr(out, "GPU memory    85,899,345,920 bytes (85.9 GB, 80 GiB)"),
		      "%s", out);
	ck_assert_msg(strstr(out, "more than 3 GPUs of 85.9 GB hold (257.7 GB); 4 are needed"),
		      "%s", out);
	ck_assert_msg(strstr(out, "per page      5,242,880 bytes (5.24 MB, 5 MiB): 16 tokens"),
		      "%s", out);

	cli_json("--json", "plan", "-m", "llama-3.1-70b", "-u", "256", "-g", "80GB");
	ck_assert_uint_eq(json_u64(out, "bytes_per_token"), 327680);
	ck_assert_uint_eq(json_u64(out, "bytes_per_sequence"), 1342177280ull);
	ck_assert_uint_eq(json_u64(out, "bytes_all_users"), 343597383680ull);
	ck_assert_uint_eq(json_u64(out, "gpus_needed"), 4);
	ck_assert_uint_eq(json_u64(out, "contiguous_sequences"), 64);	/* 80 GiB / 1.25 GiB */
	ck_assert(json_str_is(out, "source", "meta-llama/Llama-3.1-70B"));
}
END_TEST

START_TEST(test_cli_plan_pages_fit_more_than_contiguous_reservations)
{
	/* 2 x 2 x 2 x 64 x 2 = 1,024 bytes a token; a 16-token page 16 KiB */
	cli_json("--json", "plan", "--layers", "2", "--kv-heads", "2", "--head-dim", "64",
		 "--tokens", "1000", "--mean-tokens", "100", "--gpu-mem", "1MiB");
	ck_assert_uint_eq(json_u64(out, "bytes_per_token"), 1024);
	ck_assert_uint_eq(json_u64(out, "bytes_per_page"), 16384);
	ck_assert_uint_eq(json_u64(out, "pages_per_sequence"), 63);	/* 1000 / 16 up */
	/* contiguous: 1,048,576 / 1,024,000 = 1; paged: 100 tokens = 7 pages */
	ck_assert_uint_eq(json_u64(out, "contiguous_sequences"), 1);
	ck_assert_uint_eq(json_u64(out, "pages_per_mean_sequence"), 7);
	ck_assert_uint_eq(json_u64(out, "paged_sequences"), 1048576 / (7 * 16384));
	ck_assert(strncmp(json_at(out, "model"), "null", 4) == 0);

	ck_assert_int_eq(cli("plan", "-m", "Qwen2.5-7B", "--dtype", "fp8", "--block-tokens", "32"), 0);
	/* 2 x 28 x 4 x 128 x 1 */
	ck_assert_msg(strstr(out, "per token     28,672 bytes (28.7 kB, 28 KiB)") &&
		      strstr(out, "per page      917,504 bytes (917.5 kB, 896 KiB): 32 tokens"),
		      "%s", out);
}
END_TEST

START_TEST(test_cli_plan_lists_models_and_their_sources)
{
	static const struct { const char *name; unsigned long long per_token; } want[] = {
		{ "Llama-3.1-8B", 131072 }, { "Llama-3.1-70B", 327680 },
		{ "Llama-3.1-405B", 516096 }, { "Llama-3.2-1B", 32768 },
		{ "Llama-3.2-3B", 114688 }, { "Mistral-7B", 131072 },
		{ "Mixtral-8x7B", 131072 }, { "Qwen2.5-7B", 57344 },
		{ "Qwen2.5-72B", 327680 },
	};
	size_t i;

	ck_assert_int_eq(cli("plan", "--list"), 0);
	ck_assert_msg(strstr(out, "Qwen/Qwen2.5-7B: num_hidden_layers 28, num_key_value_heads 4, "
			     "hidden_size 3584 / num_attention_heads 28") &&
		      strstr(out, "config.json"), "%s", out);
	cli_json("--json", "plan", "--list");
	ck_assert_int_eq(json_len(out, "models"), 9);
	for (i = 0; i < 9; i++) {
		char path[64];

		snprintf(path, sizeof(path), "models[%zu].name", i);
		ck_assert_msg(json_str_is(out, path, want[i].name), "%s", path);
		snprintf(path, sizeof(path), "models[%zu].bytes_per_token_f16", i);
		ck_assert_uint_eq(json_u64(out, path), want[i].per_token);
	}
}
END_TEST

START_TEST(test_cli_plan_rejects_what_it_cannot_plan)
{
	ck_assert_int_eq(cli("plan", "--model", "GPT-5"), 2);
	ck_assert_msg(strstr(out, "no built-in model 'GPT-5'"), "%s", out);
	ck_assert_int_eq(cli("plan"), 2);
	ck_assert_int_eq(cli("plan", "--layers", "2", "--kv-heads", "2"), 2);
	ck_assert_int_eq(cli("plan", "-m", "Mistral-7B", "--tokens", "100", "--mean-tokens",
			     "200", "--gpu-mem", "1G"), 2);
	ck_assert_int_eq(cli("plan", "-m", "Mistral-7B", "--gpu-mem", "lots"), 2);
	/* 80 is 80 bytes: no GPU has that little, so it is a mistake */
	ck_assert_int_eq(cli("plan", "-m", "Mistral-7B", "--gpu-mem", "80"), 2);
	ck_assert_msg(strstr(out, "'80' is 80 bytes, which no GPU has"), "%s", out);
	ck_assert_int_eq(cli("plan", "-m", "Mistral-7B", "--gpu-mem", "79.5gib"), 0);
	/* a fine-tune keeps its base model's geometry: taken, and said */
	ck_assert_int_eq(cli("plan", "-m", "meta-llama/Llama-3.1-8B-Instruct"), 0);
	ck_assert_msg(strstr(out, "'meta-llama/Llama-3.1-8B-Instruct' taken as Llama-3.1-8B") &&
		      strstr(out, "32 layers, 8 KV heads, head dim 128"), "%s", out);
	ck_assert_int_eq(cli("plan", "-m", "mistralai/Mistral-7B-Instruct-v0.3"), 0);
	ck_assert_int_eq(cli("plan", "-m", "Llama-3.1-8B-Foo"), 2);
	ck_assert_int_eq(cli("plan", "-m", "Llama-3.1-8"), 2);
	ck_assert_int_eq(cli("plan", "-m", "Mistral-7B", "--dtype", "int4"), 2);
	ck_assert_int_eq(cli("plan", "-m", "Mistral-7B", "--layers", "2"), 2);
}
END_TEST

/* --- errors --------------------------------------------------------------------------- */

START_TEST(test_cli_explains_a_missing_daemon)
{
	ck_assert_int_eq(cli("--socket", "/tmp/kvpool-none/kvpool.sock", "status"), 1);
	ck_assert_msg(strstr(out, "cannot connect to kvpoold at /tmp/kvpool-none/kvpool.sock: "
			     "no such file") && strstr(out, "is kvpoold running?") &&
		      strstr(out, "KVPOOL_SOCKET, or kvpool --socket"), "%s", out);
	/* KVPOOL_SOCKET names the socket when --socket does not */
	setenv("KVPOOL_SOCKET", "/tmp/kvpool-none/env.sock", 1);
	ck_assert_int_eq(cli("clients"), 1);
	ck_assert_msg(strstr(out, "/tmp/kvpool-none/env.sock"), "%s", out);
	unsetenv("KVPOOL_SOCKET");
	ck_assert_int_eq(cli("frobnicate"), 2);
	ck_assert_msg(strstr(out, "unknown command 'frobnicate'"), "%s", out);
	ck_assert_int_eq(cli_v((const char *const[]){ NULL }), 2);
	ck_assert_int_eq(cli("--help"), 0);
	ck_assert_msg(strstr(out, "Usage: kvpool") && strstr(out, "metrics") &&
		      strstr(out, "plan") && strstr(out, "--bytes"), "%s", out);
	/* each description under its command, indented alike, in 80 columns */
	ck_assert_msg(strstr(out, "  namespaces\n      geometry, page size, pages by state, "
			     "hit rate,\n      pinned quota, key scheme, tier\n"), "%s", out);
	for (const char *l = out, *e; *l; l = e + 1) {
		e = strchr(l, '\n');
		if (!e)
			break;
		ck_assert_msg(e - l <= 79, "a --help line of %d columns: %.*s", (int)(e - l),
			      (int)(e - l), l);
	}
	ck_assert_int_eq(cli("pages", "--help"), 0);
	ck_assert_msg(strstr(out, "--state=STATE"), "%s", out);
}
END_TEST

START_TEST(test_cli_explains_a_bad_socket_path)
{
	char dir[] = "/tmp/kvpool-cli-XXXXXX", file[64], longp[200];
	int fd;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/not-a-socket", dir);
	fd = open(file, O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(cli("--socket", file, "status"), 1);
	ck_assert_msg(strstr(out, "nothing listens there") &&
		      strstr(out, "is kvpoold running?"), "%s", out);
	memset(longp, 'x', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	ck_assert_int_eq(cli("--socket", longp, "status"), 1);
	ck_assert_msg(strstr(out, "is too long (199 bytes; at most 107)"), "%s", out);
	unlink(file);
	rmdir(dir);
}
END_TEST

/*
 * fake_daemon() - a socket at path whose one connection gets, to its
 * first request, an error reply of status VERSION with header version
 * `version` and the text why. Returns the server's pid.
 */
static pid_t fake_daemon(const char *path, uint16_t version, const char *why)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int ls, cs;
	pid_t pid;

	ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(ls, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ck_assert_int_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(ls, 1), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct kvp_wire_hdr req, rep;
		uint8_t buf[4096];
		ssize_t n;

		cs = accept(ls, NULL, NULL);
		n = cs < 0 ? -1 : recv(cs, buf, sizeof(buf), 0);
		if (n < (ssize_t)sizeof(req))
			_exit(1);
		memcpy(&req, buf, sizeof(req));
		rep = (struct kvp_wire_hdr){
			.magic = KVP_WIRE_MAGIC, .version = version, .op = req.op,
			.flags = KVP_WIRE_F_REPLY, .status = KVP_S_VERSION,
			.req_id = req.req_id, .len = (uint32_t)strlen(why),
		};
		memcpy(buf, &rep, sizeof(rep));
		memcpy(buf + sizeof(rep), why, strlen(why));
		_exit(send(cs, buf, sizeof(rep) + strlen(why), 0) < 0);
	}
	close(ls);
	return pid;
}

START_TEST(test_cli_explains_a_protocol_version_mismatch)
{
	char dir[] = "/tmp/kvpool-cli-XXXXXX", path[64], speaks[64];
	int status;
	pid_t pid;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/old.sock", dir);
	snprintf(speaks, sizeof(speaks), "the daemon speaks protocol version %u",
		 KVP_WIRE_VERSION + 1);
	/* a daemon that refuses our version in a header we can read */
	pid = fake_daemon(path, KVP_WIRE_VERSION, "protocol version 1 is not supported: "
			  "this kvpoold speaks 2");
	ck_assert_int_eq(cli("--socket", path, "status"), 1);
	ck_assert_msg(strstr(out, "protocol version mismatch") &&
		      strstr(out, "this kvpoold speaks 2"), "%s", out);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	unlink(path);

	/* one that answers in a header of another version */
	pid = fake_daemon(path, KVP_WIRE_VERSION + 1, "");
	ck_assert_int_eq(cli("--socket", path, "namespaces"), 1);
	ck_assert_msg(strstr(out, "protocol version mismatch") &&
		      strstr(out, speaks), "%s", out);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	unlink(path);
	rmdir(dir);
}
END_TEST

static Suite *cli_suite(void)
{
	Suite *s = suite_create("cli");
	TCase *tc;

	tc = tcase_create("inspect");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cli_status_counts_pages_in_human_units_and_json);
	tcase_add_test(tc, test_cli_namespaces_shows_geometry_states_hit_rate_and_quota);
	tcase_add_test(tc, test_cli_clients_lists_each_connection_with_its_leases);
	tcase_add_test(tc, test_cli_pages_filters_by_state_namespace_and_client);
	tcase_add_test(tc, test_cli_prefixes_ranks_blocks_by_hits);
	tcase_add_test(tc, test_cli_top_prints_a_frame_a_second_without_a_tty);
	suite_add_tcase(s, tc);

	tc = tcase_create("admin");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cli_evict_pushes_cached_pages_out);
	tcase_add_test(tc, test_cli_disconnect_closes_a_client_and_refuses_unknown_ids);
	tcase_add_test(tc, test_cli_drop_refuses_a_used_namespace_unless_forced);
	tcase_add_test(tc, test_cli_admin_commands_refused_without_admin_rights);
	suite_add_tcase(s, tc);

	/* may install promtool with apt-get: minutes on a slow mirror */
	tc = tcase_create("metrics");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_cli_metrics_expose_every_counter_and_pass_promtool);
	suite_add_tcase(s, tc);

	tc = tcase_create("plan");
	tcase_add_test(tc, test_cli_plan_reproduces_llama_70b_figures);
	tcase_add_test(tc, test_cli_plan_pages_fit_more_than_contiguous_reservations);
	tcase_add_test(tc, test_cli_plan_lists_models_and_their_sources);
	tcase_add_test(tc, test_cli_plan_rejects_what_it_cannot_plan);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_cli_explains_a_missing_daemon);
	tcase_add_test(tc, test_cli_explains_a_bad_socket_path);
	tcase_add_test(tc, test_cli_explains_a_protocol_version_mismatch);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(cli_suite());
}
