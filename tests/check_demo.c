/* SPDX-License-Identifier: MIT */
/*
 * check_demo.c - integration test of the example model server
 * (examples/kvpool-model-server): two servers at once on one daemon share
 * a system prompt and multi-turn chats through the pool, and every token
 * they generate equals what a server with --no-cache computes alone. The
 * daemon is real, the servers are real processes; daemon_stop() checks
 * conservation and a clean exit at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"
#include "json.h"

#ifndef KVP_MODEL_SERVER
#define KVP_MODEL_SERVER "../examples/kvpool-model-server"
#endif

#define BT 16u			/* tokens per page of the demo model */
#define MAX_TOKENS "12"		/* generated per request */
#define NGEN 12u
#define CONVS 3			/* conversations of two turns */
#define NREQ (2 * CONVS + 3)	/* + the system prompt alone + "hi" twice */
#define OUT_BYTES (64u << 10)

/* 64 bytes: exactly 4 pages (asserted) */
static const char system_prompt[] =
	"You are the kvpool demo model. Answer in one short line.  User: ";
static const char *const question[CONVS] = {
	"what is a KV cache?", "name a prime number", "how do pages get shared?",
};
static const char *const follow_up[CONVS] = {
	" User: say more.", " User: and another one?", " User: why is that safe?",
};

/* One server's --json document and the fields the tests read. */
struct run {
	char out[OUT_BYTES];
	unsigned prompt[NREQ], cached[NREQ], computed[NREQ], saved[NREQ];
	unsigned gen[NREQ][NGEN];
};

/* parse_run() - check r->out is the JSON of NREQ results and pick it up. */
static void parse_run(struct run *r)
{
	char path[64];
	const char *p;
	int i;
	unsigned j;

	ck_assert_msg(json_valid(r->out), "not JSON: %s", r->out);
	ck_assert_uint_eq(json_u64(r->out, "requests"), NREQ);
	ck_assert_int_eq(json_len(r->out, "results"), NREQ);
	for (i = 0; i < NREQ; i++) {
		snprintf(path, sizeof(path), "results[%d].index", i);
		ck_assert_uint_eq(json_u64(r->out, path), (unsigned)i);
		snprintf(path, sizeof(path), "results[%d].prompt_tokens", i);
		r->prompt[i] = (unsigned)json_u64(r->out, path);
		snprintf(path, sizeof(path), "results[%d].cached_tokens", i);
		r->cached[i] = (unsigned)json_u64(r->out, path);
		snprintf(path, sizeof(path), "results[%d].computed_tokens", i);
		r->computed[i] = (unsigned)json_u64(r->out, path);
		snprintf(path, sizeof(path), "results[%d].pages_saved", i);
		r->saved[i] = (unsigned)json_u64(r->out, path);
		snprintf(path, sizeof(path), "results[%d].generated", i);
		ck_assert_int_eq(json_len(r->out, path), (int)NGEN);
		p = json_at(r->out, path);
		for (j = 0; j < NGEN; j++) {
			char *end;

			p += strspn(p, "[, ");
			r->gen[i][j] = (unsigned)strtoul(p, &end, 10);
			ck_assert_ptr_ne(end, p);
			p = end;
		}
	}
}

/* spawn() - start the model server with args (NULL-terminated) on d,
 * its stdout and stderr into path. Returns its pid. */
static pid_t spawn(const struct daemon *d, const char *path, const char *const *args)
{
	const char *argv[16] = { KVP_MODEL_SERVER, "--socket", d->sock, "--json" };
	pid_t pid;
	int i, fd;

	for (i = 0; args[i]; i++)
		argv[4 + i] = args[i];
	argv[4 + i] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(126);
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

/* finish() - wait for pid, which must exit 0, and read what it printed. */
static void finish(pid_t pid, const char *path, struct run *r)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	read_file(path, r->out, sizeof(r->out));
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "model server failed (status %d): %s", status, r->out);
	parse_run(r);
}

/* run_one() - one server to completion. */
static void run_one(const struct daemon *d, const char *name,
		    const char *const *args, struct run *r)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%s.out", d->dir, name);
	finish(spawn(d, path, args), path, r);
}

/* write_requests() - the requests file: turn 1 of every conversation,
 * then turn 2 (turn 1 + its answer ans[c] + a follow-up; NULL ans: turn 2
 * is left out and turn 1 is repeated instead, to keep NREQ lines), the
 * system prompt alone and "hi" twice. */
static void write_requests(const char *path, unsigned ans[CONVS][NGEN], bool turn2)
{
	FILE *f = fopen(path, "w");
	int c;
	unsigned j;

	ck_assert_ptr_nonnull(f);
	for (c = 0; c < CONVS; c++)
		fprintf(f, "%s%s\n", system_prompt, question[c]);
	for (c = 0; c < CONVS; c++) {
		fprintf(f, "%s%s", system_prompt, question[c]);
		for (j = 0; turn2 && j < NGEN; j++) {
			/* answers are printable; a backslash is escaped */
			if (ans[c][j] == '\\')
				fputc('\\', f);
			fputc((int)ans[c][j], f);
		}
		fprintf(f, "%s\n", turn2 ? follow_up[c] : "");
	}
	fprintf(f, "%s\nhi\nhi\n", system_prompt);
	ck_assert_int_eq(fclose(f), 0);
}

/* same_tokens() - every answer of a equals b's. */
static void same_tokens(const struct run *a, const struct run *b, const char *what)
{
	int i;

	for (i = 0; i < NREQ; i++)
		ck_assert_msg(memcmp(a->gen[i], b->gen[i], sizeof(a->gen[i])) == 0,
			      "%s: request %d generated other tokens than --no-cache", what, i);
}

START_TEST(test_demo_two_servers_share_and_match_no_cache)
{
	static struct run first, a, b, ref, solo;
	const char *args_a[] = { "--requests", NULL, "--max-tokens", MAX_TOKENS,
				 "--batch", "2", NULL };
	const char *args_b[] = { "--requests", NULL, "--max-tokens", MAX_TOKENS,
				 "--batch", "3", NULL };
	const char *args_ref[] = { "--requests", NULL, "--max-tokens", MAX_TOKENS,
				   "--batch", "1", "--no-cache", NULL };
	char turn1[128], chat[128], pa[128], pb[128];
	const char *args_t1[] = { "--requests", NULL, "--max-tokens", MAX_TOKENS,
				  "--batch", "1", "--no-cache", NULL };
	struct daemon d;
	pid_t pida, pidb;
	int i, c;

	ck_assert_uint_eq(strlen(system_prompt), 64);
	daemon_start(&d, NULL);
	snprintf(turn1, sizeof(turn1), "%s/turn1.txt", d.dir);
	snprintf(chat, sizeof(chat), "%s/chat.txt", d.dir);

	/* the turn-1 answers, privately: turn 2 quotes them */
	write_requests(turn1, NULL, false);
	args_t1[1] = turn1;
	run_one(&d, "turn1", args_t1, &first);

	/* two servers at once on the whole chat, then the reference */
	write_requests(chat, first.gen, true);
	args_a[1] = args_b[1] = args_ref[1] = chat;
	snprintf(pa, sizeof(pa), "%s/a.out", d.dir);
	snprintf(pb, sizeof(pb), "%s/b.out", d.dir);
	pida = spawn(&d, pa, args_a);
	pidb = spawn(&d, pb, args_b);
	finish(pida, pa, &a);
	finish(pidb, pb, &b);
	run_one(&d, "ref", args_ref, &ref);

	same_tokens(&a, &ref, "server A (batch 2)");
	same_tokens(&b, &ref, "server B (batch 3)");
	for (c = 0; c < CONVS; c++)
		ck_assert(memcmp(first.gen[c], ref.gen[c], sizeof(ref.gen[c])) == 0);
	for (i = 0; i < NREQ; i++) {
		ck_assert_uint_eq(ref.cached[i], 0);
		ck_assert_uint_eq(ref.saved[i], 0);
		ck_assert_uint_eq(ref.computed[i], ref.prompt[i]);
	}

	/* What each server found in the cache, whatever the other did: the
	 * system prompt's 4 pages from its own first request; turn 2 all of
	 * turn 1 but its last answer token (published when turn 1 ended); the
	 * system prompt alone whole (its last token is run again, for the
	 * next one); the second "hi" the first one's partial page. */
	for (i = 0; i < 2; i++) {
		const struct run *r = i ? &b : &a;

		for (c = 1; c < CONVS; c++)
			ck_assert_uint_ge(r->cached[c], 64);
		for (c = 0; c < CONVS; c++)
			ck_assert_uint_ge(r->cached[CONVS + c], r->prompt[c] + NGEN - 1);
		ck_assert_uint_eq(r->prompt[2 * CONVS], 64);
		ck_assert_uint_eq(r->cached[2 * CONVS], 64);
		ck_assert_uint_eq(r->saved[2 * CONVS], 64 / BT);
		ck_assert_uint_eq(r->computed[2 * CONVS], 1);
		ck_assert_uint_eq(r->cached[2 * CONVS + 2], 2);
		ck_assert_uint_eq(r->computed[2 * CONVS + 2], 1);
		for (c = 0; c < NREQ; c++)
			ck_assert_uint_le(r->cached[c], r->prompt[c]);
	}

	/* a third server after them finds every prompt whole */
	run_one(&d, "solo", args_a, &solo);
	same_tokens(&solo, &ref, "server C (solo, after)");
	for (i = 0; i < NREQ; i++) {
		ck_assert_uint_eq(solo.cached[i], solo.prompt[i]);
		ck_assert_uint_eq(solo.saved[i], solo.prompt[i] / BT);
		ck_assert_uint_eq(solo.computed[i], 1);
	}
	daemon_stop(&d);
}
END_TEST

static Suite *demo_suite(void)
{
	Suite *s = suite_create("demo");
	TCase *tc = tcase_create("model_server");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_demo_two_servers_share_and_match_no_cache);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(demo_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
