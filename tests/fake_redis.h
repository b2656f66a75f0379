/* SPDX-License-Identifier: MIT */
/*
 * fake_redis.h - a hostile stand-in for a Redis node, for the remote
 * tier's tests: a child process on a loopback port that speaks RESP,
 * answers each command from a script, logs what it was sent, and does
 * what no Redis does when told to: speak first, answer twice, send
 * garbage, redirect anywhere, name hosts, send a giant CLUSTER SLOTS.
 */
#ifndef KVPOOL_TESTS_FAKE_REDIS_H
#define KVPOOL_TESTS_FAKE_REDIS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fake_redis {
	pid_t pid;
	int lfd;		/* its listening socket, until the child has it */
	uint16_t port;
	char log[160];		/* one line per connection, command and close */
};

/* What the node answers; NULL fields take the default. */
struct fake_script {
	const char *greeting;		/* sent on accept, before any command */
	const char *slots;		/* CLUSTER SLOTS; NULL: not a cluster (an error) */
	const char *slots_later;	/* CLUSTER SLOTS after the first; NULL: slots */
	size_t slots_later_len;		/* its bytes (0: strlen) */
	const char *get;		/* GET; NULL: nil */
	const char *after_get;		/* sent after each answer to a GET: a second one */
};

/* fake_listen() - bind a loopback port for f (f->port), its log in dir. */
void fake_listen(struct fake_redis *f, const char *dir);

/* fake_run() - start answering in a child process, as s says. */
void fake_run(struct fake_redis *f, const struct fake_script *s);

/* fake_stop() - kill the child and reap it. */
void fake_stop(struct fake_redis *f);

/* fake_count() - lines of f's log that start with prefix ("CONNECT",
 * "CLOSE", "AUTH", "GET", "CLUSTER SLOTS", ...). */
unsigned fake_count(const struct fake_redis *f, const char *prefix);

/* fake_slots_all() - a CLUSTER SLOTS reply giving every slot to
 * host:port, into buf. */
const char *fake_slots_all(char *buf, size_t len, const char *host, uint16_t port);

#endif /* KVPOOL_TESTS_FAKE_REDIS_H */
