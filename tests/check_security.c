/* SPDX-License-Identifier: MIT */
/*
 * check_security.c - integration tests of what a local user who is not
 * trusted with a namespace can do (docs/security.md): a real kvpoold run
 * by root, and client processes that drop to nobody before they connect
 * and then try what an attacker would, over the library or raw sockets.
 * Each test is named for the promise it checks; the tests that change
 * uid need root and are not run without it (the runner says so).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "client/wire.h"
#include "harness.h"

#define PAGE 4096u	/* 2 x 1 layer x 1 head x 64 x 16 tokens x f16 */

static const kvp_geometry geo = {
	.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "test/security",
};

/* start() - kvpoold as root with a config file of these lines (after
 * `socket-group = nogroup`) in a directory nobody may reach the socket
 * of; extra flags may follow. conf receives the file's path. */
static void start(struct daemon *d, char *conf, size_t conflen, const char *lines,
		  const char *const *extra)
{
	const char *args[32] = { "-c", conf };
	FILE *f;
	int n = 2;

	daemon_dir(d);
	ck_assert_int_eq(chmod(d->dir, 0711), 0);
	snprintf(conf, conflen, "%s/kvpoold.conf", d->dir);
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "socket-group = nogroup\n%s", lines);
	ck_assert_int_eq(fclose(f), 0);
	while (extra && *extra && n < 31)
		args[n++] = *extra++;
	args[n] = NULL;
	daemon_restart(d, args);
}

/* publish_key() - as root, publish one page of ns filled for key. */
static void publish_key(const char *sock, const char *ns, const kvp_key *key)
{
	kvp_client *c;
	kvp_page p;

	ck_assert_int_eq(kvp_connect(sock, ns, &geo, &c), 0);
	ck_assert_int_eq(kvp_alloc(c, 1, &p), 0);
	harness_fill(kvp_page_ptr(c, p), PAGE, key);
	ck_assert_int_eq(kvp_publish(c, NULL, &p, key, 1, KVP_PRIO_NORMAL, &p), 0);
	ck_assert_int_eq(kvp_release(c, &p, 1), 0);
	kvp_close(c);
}

/* still_holds() - as root, ns still serves key's page with its bytes. */
static void still_holds(const char *sock, const char *ns, const kvp_key *key)
{
	kvp_client *c;
	kvp_page p;

	ck_assert_int_eq(kvp_connect(sock, ns, &geo, &c), 0);
	ck_assert_int_eq(kvp_acquire(c, NULL, key, 1, NULL, 0, &p, NULL), 1);
	ck_assert_msg(harness_holds(kvp_page_ptr(c, p), PAGE, key),
		      "the page of '%s' no longer holds its bytes", ns);
	ck_assert_int_eq(kvp_release(c, &p, 1), 0);
	kvp_close(c);
}

/* map_slab() - MAP_SLAB slab over a raw connection: the fd passed, or -1. */
static int map_slab(int fd, uint32_t slab, uint64_t id)
{
	struct kvp_wire_map_slab m = { .slab = slab };
	int mfd = -1;

	if (raw_send(fd, KVP_OP_MAP_SLAB, id, &m, sizeof(m)) < 0 ||
	    raw_recv(fd, id, NULL, 0, &mfd) != KVP_S_OK)
		return -1;
	return mfd;
}

/* --- finding 1: a reader's slab fd never leads to write access ------------- */

START_TEST(test_security_reader_cannot_reopen_its_slab_writable)
{
	char conf[128], path[64];
	kvp_key key = { { 7 } };
	struct daemon d;
	pid_t pid;

	start(&d, conf, sizeof(conf), "access = shared read @nogroup\n", NULL);
	publish_key(d.sock, "shared", &key);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd, mfd;
		void *p;

		become_nobody();
		fd = raw_connect(d.sock);
		expect(fd >= 0, 10);
		expect(raw_hello(fd, "shared", &geo, NULL, 0) == KVP_S_OK, 11);
		mfd = map_slab(fd, 0, 2);
		expect(mfd >= 0, 12);
		/* the descriptor itself is read-only ... */
		expect(mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0) ==
		       MAP_FAILED, 13);
		expect(fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, PAGE) < 0,
		       14);
		/* ... and so is every way back to its inode */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
		expect(open(path, O_RDWR) < 0 && errno == EACCES, 15);
		expect(open(path, O_WRONLY) < 0 && errno == EACCES, 16);
		expect(fchmod(mfd, 0666) < 0, 17);
		/* reading is what it may do */
		p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, mfd, 0);
		expect(p != MAP_FAILED && harness_holds(p, PAGE, &key), 18);
		_exit(0);
	}
	child_wait(pid);
	still_holds(d.sock, "shared", &key);
	daemon_stop(&d);
}
END_TEST

static Suite *security_suite(void)
{
	Suite *s = suite_create("security");
	TCase *tc;

	if (!harness_have_nobody()) {
		printf("check_security: the tests need root and the users nobody and "
		       "nogroup; not run\n");
		return s;
	}
	tc = tcase_create("memory");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_security_reader_cannot_reopen_its_slab_writable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(security_suite());
}
