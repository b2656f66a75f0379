/* SPDX-License-Identifier: MIT */
/*
 * redis_fixture.h - the Redis Cluster the remote tier's tests run
 * against: check_remote (remote/: the client) and check_remote_tier
 * (tiers/tier_remote.c: the tier in a real kvpoold). Each test gets a
 * directory and a range of ports of its own (rf_setup()), starts what it
 * needs with cluster(), and rf_teardown() stops it.
 */
#ifndef KVP_TEST_REDIS_FIXTURE_H
#define KVP_TEST_REDIS_FIXTURE_H

#include <stdint.h>

#include <check.h>

extern char root[64];		/* every test's cluster under it */
extern char keyfile[96];	/* root/remote.key: every daemon's, so they share */
extern char dir[96];		/* this test's cluster */
extern unsigned port;		/* its first node's */
extern char url[256];		/* cluster_url()'s, once it was called */

/* sh() - run a shell command (printf-formatted); its status. */
int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* sh_line() - the first line a shell command prints, into out (len
 * bytes, no newline; "" when none). */
void sh_line(char *out, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* cluster() - tests/redis-cluster.sh WHAT for this test's cluster. */
void cluster(const char *what, const char *more);

/* now_ms() - the monotonic clock in milliseconds. */
uint64_t now_ms(void);

/* cluster_url() - the --remote URL of this test's cluster (two seeds). */
const char *cluster_url(void);

/* setrange_one() - change one byte of key k's value (to another byte),
 * following a redirect, retried while the cluster answers with an error. */
void setrange_one(const char *k);

/* kill_first_master() - SIGKILL the cluster's first master. */
void kill_first_master(void);

/* replica_in_sync() - the first master's replica has all it was sent. */
void replica_in_sync(void);

void rf_setup(void);
void rf_teardown(void);

/* rf_main() - run suite() (SKIP, 77, without redis-server), with root
 * and keyfile made for it, and stop whatever a failed test left. */
int rf_main(Suite *(*suite)(void), const char *prog);

#endif /* KVP_TEST_REDIS_FIXTURE_H */
