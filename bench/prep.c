/* SPDX-License-Identifier: MIT */
/*
 * prep.c - bench/prep: how long a new namespace waits for its tier file
 * while another user has many queued. A namespace's HELLO returns once its
 * tier file (--spill-size in the daemon's --spill-dir) is prepared on one
 * of kvpoold's worker threads. This program, run as root, times root's
 * HELLO into a new namespace twice: alone (its own time, the reference),
 * then right after --queued processes of another user (--as, default
 * nobody) asked for a new namespace each. It drops what it made after
 * each, so that rounds start alike.
 *
 * One line of key=value pairs: the two times in milliseconds, their
 * ratio, and how many of the other user's namespaces were ready first.
 *
 * This is a benchmark, not a test: bench/run-prep.sh runs it.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvpool.h"
#include "bench/opt.h"

#define PREP_MAX_QUEUED 256

/* 16 KiB pages. */
static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "bench/prep",
};

struct prep_opts {
	const char *socket;
	const char *as;
	size_t queued;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: prep [OPTION]...\n"
		"Time root's new namespace alone, then behind another user's queued ones.\n\n"
		"  -s, --socket=PATH  the daemon's socket (default: $KVPOOL_SOCKET, else %s)\n"
		"  -q, --queued=N     the other user's new namespaces (default 16)\n"
		"  -u, --as=USER      the other user (default nobody)\n"
		"  -h, --help         show this help and exit\n\n"
		"Run as root, against a kvpoold with --spill-dir whose socket USER may\n"
		"reach and whose --max-namespaces-per-uid is N or more.\n", KVP_SOCKET_DEFAULT);
}

static int parse_opts(int argc, char **argv, struct prep_opts *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "queued", required_argument, NULL, 'q' },
		{ "as", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc = 0;

	*o = (struct prep_opts){ .queued = 16, .as = "nobody" };
	while ((c = getopt_long(argc, argv, "s:q:u:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket = optarg;
			break;
		case 'q':
			rc = bench_count("prep", "--queued", optarg, 1, PREP_MAX_QUEUED,
					 &o->queued);
			break;
		case 'u':
			o->as = optarg;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* hello_ms() - HELLO into a new namespace ns: milliseconds until it is
 * ready, or a negative errno. */
static double hello_ms(const char *sock, const char *ns, uint64_t *done)
{
	uint64_t t0 = bench_now_ns();
	kvp_client *c;
	int rc = kvp_connect(sock, ns, &geo, &c);

	*done = bench_now_ns();
	if (rc < 0) {
		fprintf(stderr, "prep: HELLO %s: %s (%s)\n", ns, kvp_strerror(rc),
			kvp_last_error());
		return rc;
	}
	kvp_close(c);
	return (double)(*done - t0) / 1e6;
}

/* drop() - drop namespace ns (waits for its tier file to go). */
static int drop(const char *sock, const char *ns)
{
	kvp_client *c;
	int rc = kvp_connect(sock, NULL, NULL, &c);

	if (rc == 0) {
		rc = kvp_drop_namespace(c, ns);
		kvp_close(c);
	}
	if (rc < 0)
		fprintf(stderr, "prep: drop %s: %s (%s)\n", ns, kvp_strerror(rc), kvp_last_error());
	return rc;
}

/* namespaces() - the daemon's namespaces now, or a negative errno. */
static int namespaces(const char *sock)
{
	kvp_stats_t st;
	kvp_client *c;
	int rc = kvp_connect(sock, NULL, NULL, &c);

	if (rc == 0) {
		rc = kvp_stats(c, &st, NULL, 0);
		kvp_close(c);
	}
	return rc;
}

int main(int argc, char **argv)
{
	uint64_t *ready, mine;
	struct prep_opts o;
	struct passwd *pw;
	char ns[64];
	double alone, queued;
	size_t i, before = 0;
	int rc, status, base;
	pid_t pids[PREP_MAX_QUEUED];

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	pw = getpwnam(o.as);
	if (geteuid() != 0 || !pw) {
		fprintf(stderr, "prep: needs root and the user %s\n", o.as);
		return 1;
	}
	ready = mmap(NULL, o.queued * sizeof(*ready), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ready == MAP_FAILED)
		return 1;
	alone = hello_ms(o.socket, "prep-alone", &mine);
	if (alone < 0 || drop(o.socket, "prep-alone") < 0)
		return 1;
	base = namespaces(o.socket);
	for (i = 0; i < o.queued; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 ||
			    setuid(pw->pw_uid) < 0)
				_exit(3);
			snprintf(ns, sizeof(ns), "prep-q%zu", i);
			_exit(hello_ms(o.socket, ns, &ready[i]) < 0);
		}
	}
	while ((rc = namespaces(o.socket)) >= 0 && rc < base + (int)o.queued)
		usleep(1000);	/* every one asked for first */
	queued = hello_ms(o.socket, "prep-mine", &mine);
	for (i = 0; i < o.queued; i++) {
		waitpid(pids[i], &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "prep: the other user's HELLO %zu failed\n", i);
			return 1;
		}
		before += ready[i] < mine;
	}
	if (queued < 0 || drop(o.socket, "prep-mine") < 0)
		return 1;
	for (i = 0; i < o.queued; i++) {
		snprintf(ns, sizeof(ns), "prep-q%zu", i);
		if (drop(o.socket, ns) < 0)
			return 1;
	}
	printf("prep queued=%zu alone_ms=%.1f queued_ms=%.1f queued_over_alone=%.2f "
	       "ready_before=%zu\n", o.queued, alone, queued, queued / alone, before);
	return 0;
}
