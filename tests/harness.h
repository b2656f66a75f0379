/* SPDX-License-Identifier: MIT */
/*
 * harness.h - integration-test helpers: start a real kvpoold on a
 * temporary socket, run the CLI, check the pool's invariants, stop it.
 */
#ifndef KVPOOL_TESTS_HARNESS_H
#define KVPOOL_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include <check.h>

#include "kvpool.h"

struct daemon {
	pid_t pid;
	int pidfd;		/* readable once the daemon exits */
	char dir[64];		/* temporary directory, removed by daemon_stop */
	char sock[108];		/* dir/kvpool.sock */
	char log[128];		/* dir/kvpoold.log: the daemon's stderr */
};

/* The programs under test: $KVPOOLD and $KVPOOL_CLI (set by make check). */
const char *harness_kvpoold(void);
const char *harness_cli(void);

/*
 * daemon_start() - start `kvpoold --foreground --socket DIR/kvpool.sock
 * ARGS...` and wait for its READY=1 (sd_notify). args is NULL-terminated
 * and may be NULL. Fails the test if it does not become ready.
 */
void daemon_start(struct daemon *d, const char *const *args);

/* daemon_dir() - make d's temporary directory and paths without starting
 * a daemon (for flags that name files in it); then daemon_restart(). */
void daemon_dir(struct daemon *d);

/* daemon_restart() - start kvpoold again in d's directory, on the same
 * socket path, after the last one exited (warm restarts, stale sockets). */
void daemon_restart(struct daemon *d, const char *const *args);

/* harness_pidfd_open() - a pidfd for pid (readable once it exits). */
int harness_pidfd_open(pid_t pid);

/*
 * daemon_stop() - check the conservation invariant over STATS, send
 * SIGTERM, wait for the exit, check it was clean (status 0, socket file
 * gone) and remove the directory.
 */
void daemon_stop(struct daemon *d);

/* daemon_halt() - daemon_stop() without removing the directory, for a
 * daemon_restart() in it. */
void daemon_halt(struct daemon *d);

/* daemon_cleanup() - remove d's directory and what the daemon left in it. */
void daemon_cleanup(struct daemon *d);

/* daemon_wait_exit() - wait up to ms for the daemon to exit; returns its
 * wait status, or -1 on timeout. */
int daemon_wait_exit(struct daemon *d, int ms);

/* check_conservation() - free + private + shared + cached + spilled +
 * in flight must equal total, as the daemon reports it. */
void check_conservation(const char *sock);

/* stats_of() - STATS over a fresh connection; fails the test on error. */
void stats_of(const char *sock, struct kvp_wire_stats *st);

/*
 * run_cmd() - run argv (NULL-terminated) to completion with its stdout and
 * stderr captured into out (NUL-terminated, truncated to outlen). Returns
 * the wait status.
 */
int run_cmd(const char *const argv[], char *out, size_t outlen);

/* harness_fill() / harness_holds() - the K/V a model would compute for a
 * block follows from its key: bytes derived from the key, so that any
 * page can be checked against the key it is served for. */
void harness_fill(void *page, size_t bytes, const kvp_key *k);
bool harness_holds(const void *page, size_t bytes, const kvp_key *k);

/* harness_tokens() - a deterministic sequence: a prompt of prompt_len
 * tokens shared by all, then a suffix that depends on who. */
void harness_tokens(uint32_t *t, size_t n, size_t prompt_len, uint32_t who);

/*
 * harness_serve() - what a model server does with a prompt of n tokens:
 * keys, ACQUIRE the cached prefix, compute (fill) and PUBLISH the rest,
 * check every page's bytes. The canonical pages of all full blocks go to
 * out (leased); returns the hits.
 */
int harness_serve(kvp_client *c, const uint32_t *t, size_t n, kvp_page *out);

/* harness_run() - run suite s with Check's normal output; the exit
 * status for main(): EXIT_SUCCESS when every test passed. */
int harness_run(Suite *s);

/* read_file() - the start of a file into buf, NUL-terminated. */
void read_file(const char *path, char *buf, size_t len);

/* log_count() - how many times d's log (its first 128 KiB) says text. */
unsigned log_count(const struct daemon *d, const char *text);

/* proc_kib() - field (e.g. "VmRSS", "RssAnon") of /proc/PID/status, in
 * KiB; fails the test when there is none. */
long proc_kib(pid_t pid, const char *field);

/* wait_log() - until d's log holds text (the daemon acted on something a
 * test cannot otherwise see, such as a signal); fails the test after 5 s. */
void wait_log(const struct daemon *d, const char *text);

/* --- the raw protocol, for what the library would never send ----------------
 *
 * None of these asserts, so that child processes (which report by their
 * exit status) use them as well as tests.
 */

/* raw_connect() - a plain SEQPACKET connection to sock: the fd or -errno. */
int raw_connect(const char *sock);

/* raw_send() - one request with a well-formed header: 0 or -errno. */
int raw_send(int fd, uint16_t op, uint64_t id, const void *payload, size_t len);

/*
 * raw_recv() - the next reply, which must answer request id: its status,
 * the payload into out (at most outlen bytes, NUL-terminated when it is
 * shorter: error replies are text), a passed fd into *rfd when rfd is
 * not NULL (else it is closed; -1 when none). -1 when the daemon closed
 * the connection, -2 when the message is not a reply to id.
 */
int raw_recv(int fd, uint64_t id, void *out, size_t outlen, int *rfd);

/* raw_hello() - HELLO into namespace ns (NULL: none) with geometry g as
 * request id 1: the reply's status (-1: closed); its text into why. */
int raw_hello(int fd, const char *ns, const kvp_geometry *g, char *why, size_t whylen);

/* --- another uid ---------------------------------------------------------- */

/* The unprivileged identity the children of access tests take. */
extern uid_t harness_nobody_uid;
extern gid_t harness_nogroup_gid;

/* harness_now_ns() - CLOCK_MONOTONIC in nanoseconds. */
uint64_t harness_now_ns(void);

/* --- ports ---------------------------------------------------------------
 *
 * KVPOOL_TEST_PORTS=LO-HI confines the TCP ports the tests take (README's
 * test section); unset, the kernel picks free ones.
 */

struct sockaddr_in;

/* harness_bind_loopback() - bind fd (a TCP socket) on loopback to a port
 * nothing listens on now (KVPOOL_TEST_PORTS's lower half), into *a: the
 * port, or -errno. */
int harness_bind_loopback(int fd, struct sockaddr_in *a);

/* harness_port_base() - with KVPOOL_TEST_PORTS, the first of span ports
 * of its upper half for this process (pid), else 0: the caller's own
 * choice. */
unsigned harness_port_base(unsigned span);

/* harness_have_nobody() - true when the tests run as root and the users
 * nobody and nogroup exist (harness_nobody_uid and _gid are set then). */
bool harness_have_nobody(void);

/* become_nobody() - in a child: drop every privilege, keep nogroup; exit
 * 90 when that fails. */
void become_nobody(void);

/* expect() - in a child: exit with code when cond is false, saying why. */
#define expect(cond, code)                                                   \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s child: %s failed (%s)\n",       \
				__FILE__, #cond, kvp_last_error());          \
			_exit(code);                                         \
		}                                                            \
	} while (0)

/* child_wait() - wait for child pid; fails the test unless it exited 0,
 * naming the step (its exit status) it failed at. */
void child_wait(pid_t pid);

#endif /* KVPOOL_TESTS_HARNESS_H */
