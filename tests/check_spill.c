/* SPDX-License-Identifier: MIT */
/*
 * check_spill.c - integration tests of the tiers with the host backend
 * and real files: spill and restore, the host tier between the pool and
 * the NVMe tier, warm and cold restarts, damaged and short files, dying
 * clients and a dying daemon. Every test
 * that stops its daemon cleanly checks the conservation invariant.
 *
 * Past 800 lines on purpose: the tiers' walk, files and restarts are
 * tested together, since each test drives pages down and back up through
 * all of them.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "client/wire.h"
#include "harness.h"

#define BT 16u
#define PAGE_BYTES 16384u
#define CHAIN 32u		/* blocks a "sequence" */

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/spill",
};

/* args() - a daemon with a 256-page pool and a tier of spill bytes in
 * d's directory; extra may add more flags. */
static const char *const *args(const struct daemon *d, const char *spill,
			       const char *extra)
{
	static char dir[128];
	static const char *a[16];
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/spill", d->dir);
	mkdir(dir, 0700);
	a[n++] = "--pool-size";
	a[n++] = "4M";
	a[n++] = "--slab-size";
	a[n++] = "1M";
	a[n++] = "--free-watermark";
	a[n++] = "0";
	a[n++] = "--spill-dir";
	a[n++] = dir;
	a[n++] = "--spill-size";
	a[n++] = spill;
	if (extra)
		a[n++] = extra;
	a[n] = NULL;
	return a;
}

static kvp_client *join(const char *sock)
{
	kvp_client *c;
	int rc = kvp_connect(sock, "spill", &geo, &c);

	ck_assert_msg(rc == 0, "kvp_connect: %s: %s", kvp_strerror(rc), kvp_last_error());
	return c;
}

/* seq() - the tokens of sequence s: CHAIN blocks of its own. */
static void seq(uint32_t *t, uint32_t s)
{
	uint32_t i;

	for (i = 0; i < CHAIN * BT; i++)
		t[i] = s * 100003u + i;
}

/* publish_seqs() - serve sequences first..first+n-1 and release them: all
 * cached, the older ones pushed to the tier as the pool fills. */
static void publish_seqs(kvp_client *c, uint32_t first, uint32_t n)
{
	uint32_t t[CHAIN * BT], s;
	kvp_page out[CHAIN];

	for (s = first; s < first + n; s++) {
		seq(t, s);
		harness_serve(c, t, CHAIN * BT, out);
		ck_assert_int_eq(kvp_release(c, out, CHAIN), 0);
	}
}

/* publish_settled() - publish_seqs() and wait for the tier's writes. */
#define publish_settled(c, d, first, n) \
	do { publish_seqs(c, first, n); settle((d)->sock); } while (0)

/* settle() - wait until the tier has no write in flight. */
static void settle(const char *sock)
{
	kvp_stats_t st;

	do
		stats_of(sock, &st);
	while (st.nvme.writing);
}

/* check_seq() - acquire sequence s: returns its hits, every one of them
 * holding its key's bytes (never stale or corrupt). */
static int check_seq(kvp_client *c, uint32_t s)
{
	uint32_t t[CHAIN * BT];
	kvp_key keys[CHAIN];
	kvp_page got[CHAIN];
	int hits, i;

	seq(t, s);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys), CHAIN);
	hits = kvp_acquire(c, NULL, keys, CHAIN, NULL, 0, got, NULL);
	ck_assert_msg(hits >= 0, "acquire: %s %s", kvp_strerror(hits), kvp_last_error());
	for (i = 0; i < hits; i++)
		ck_assert_msg(harness_holds(kvp_page_ptr(c, got[i]), PAGE_BYTES, &keys[i]),
			      "sequence %u block %d was served with wrong bytes", s, i);
	ck_assert_int_eq(kvp_release(c, got, (size_t)hits), 0);
	return hits;
}

START_TEST(test_spill_round_trip_is_byte_exact)
{
	enum { SEQS = 100 };	/* 3,200 pages through a 256-page pool */
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	uint32_t s;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));	/* 3,968 slots */
	c = join(d.sock);
	publish_settled(c, &d, 0, SEQS);
	stats_of(d.sock, &st);
	ck_assert_msg(st.pages_spilled >= SEQS * CHAIN - 256, "spilled %llu, spills %llu, "
		      "dropped %llu, used %llu of %llu slots, evictions %llu, io errors %llu",
		      (unsigned long long)st.pages_spilled, (unsigned long long)st.nvme.spills,
		      (unsigned long long)st.nvme.dropped, (unsigned long long)st.nvme.used,
		      (unsigned long long)st.nvme.slots, (unsigned long long)st.prefix.evictions,
		      (unsigned long long)st.nvme.io_errors);
	ck_assert_uint_ge(st.nvme.spills, SEQS * CHAIN - 256);
	for (s = 0; s < SEQS; s++)
		ck_assert_int_eq(check_seq(c, s), CHAIN);
	stats_of(d.sock, &st);
	ck_assert_uint_ge(st.nvme.restores, SEQS * CHAIN - 512);
	ck_assert_uint_eq(st.nvme.checksum_failures, 0);
	ck_assert_uint_eq(st.nvme.io_errors, 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_warm_restart_keeps_prefixes)
{
	enum { SEQS = 20 };
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	char log[8192];
	uint32_t s;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	publish_seqs(c, 0, SEQS);
	kvp_close(c);
	stats_of(d.sock, &st);
	ck_assert_uint_gt(st.pages_spilled, 0);
	daemon_halt(&d);

	/* same spill configuration: what the tier held is found again */
	daemon_restart(&d, args(&d, "64M", NULL));
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "pages re-indexed"), "%s", log);
	stats_of(d.sock, &st);
	ck_assert_uint_gt(st.pages_spilled, 0);
	c = join(d.sock);
	for (s = 0; s < SEQS - 8; s++)	/* the oldest were in the tier */
		ck_assert_int_eq(check_seq(c, s), CHAIN);
	kvp_close(c);
	daemon_halt(&d);

	/* --spill-discard: a cold start, nothing found */
	daemon_restart(&d, args(&d, "64M", "--spill-discard"));
	c = join(d.sock);
	ck_assert_int_eq(check_seq(c, 0), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_changed_geometry_starts_cold_and_says_why)
{
	kvp_geometry other = geo;
	struct daemon d;
	kvp_client *c;
	char log[8192];

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	publish_seqs(c, 0, 12);
	kvp_close(c);
	daemon_halt(&d);

	daemon_restart(&d, args(&d, "64M", NULL));
	other.layers = 4;
	ck_assert_int_eq(kvp_connect(d.sock, "spill", &other, &c), 0);
	kvp_close(c);
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "another layers; cold start"), "%s", log);
	daemon_halt(&d);

	/* and a changed spill size is a cold start of the file */
	daemon_restart(&d, args(&d, "32M", NULL));
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "cold start") && strstr(log, "spill size"), "%s", log);
	daemon_stop(&d);
}
END_TEST

/* spill_file() - the path of the namespace's tier file. */
static void spill_file(const struct daemon *d, char *path, size_t len)
{
	snprintf(path, len, "%s/spill/spill.kvspill", d->dir);
}

/* served_after() - acquire the blocks of sequence s after block lost,
 * under lost's key: how many are served (0 once lost left the index with
 * everything below it). */
static int served_after(kvp_client *c, uint32_t s, uint32_t lost)
{
	uint32_t t[CHAIN * BT];
	kvp_key keys[CHAIN];
	kvp_page got[CHAIN];
	int hits;

	seq(t, s);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys), CHAIN);
	hits = kvp_acquire(c, &keys[lost], &keys[lost + 1], CHAIN - lost - 1, NULL, 0, got,
			   NULL);
	ck_assert_msg(hits >= 0, "acquire: %s %s", kvp_strerror(hits), kvp_last_error());
	ck_assert_int_eq(kvp_release(c, got, (size_t)hits), 0);
	return hits;
}

START_TEST(test_spill_flipped_bytes_are_a_miss)
{
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	char path[256];
	int fd, hits, s, misses = 0;
	off_t size, off;
	unsigned char b;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	publish_seqs(c, 0, 20);
	kvp_close(c);
	daemon_halt(&d);

	/* flip one byte in the data of many slots */
	spill_file(&d, path, sizeof(path));
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	size = lseek(fd, 0, SEEK_END);
	for (off = 4096 + 4096 + 100; off < size; off += 3 * (4096 + PAGE_BYTES)) {
		ck_assert_int_eq(pread(fd, &b, 1, off), 1);
		b ^= 0x40;
		ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
	}
	close(fd);

	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	for (s = 0; s < 20; s++) {
		hits = check_seq(c, (uint32_t)s);	/* never a wrong byte */
		misses += hits < (int)CHAIN;
		/* the blocks after a lost one left the index with it: not even
		 * asked for by their own keys are they served */
		if (hits + 1 < (int)CHAIN)
			ck_assert_msg(served_after(c, (uint32_t)s, (uint32_t)hits) == 0,
				      "sequence %d lost block %d, and blocks after it are "
				      "still served (a hole)", s, hits);
	}
	ck_assert_int_gt(misses, 0);
	stats_of(d.sock, &st);
	ck_assert_uint_gt(st.nvme.checksum_failures, 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* unmake_slot() - make the slot whose header holds key k invalid in the
 * tier file at path (its magic zeroed), as if it had been reused. */
static void unmake_slot(const char *path, const kvp_key *k)
{
	static unsigned char buf[1u << 20];
	off_t base = 0;
	ssize_t n, i;
	int fd = open(path, O_RDWR), done = 0;

	ck_assert_int_ge(fd, 0);
	while ((n = pread(fd, buf, sizeof(buf), base)) > 0) {
		for (i = 32; i + 32 <= n; i += 4)	/* a header's key is at 32 */
			if (!memcmp(buf + i, k->b, 32) && !memcmp(buf + i - 32, "KVPSLOT1", 8)) {
				ck_assert_int_eq(pwrite(fd, "XXXXXXXX", 8, base + i - 32), 8);
				done++;
			}
		base += n;
	}
	close(fd);
	ck_assert_int_eq(done, 1);
}

START_TEST(test_spill_a_restored_block_keeps_its_slot_and_goes_back_without_a_write)
{
	uint32_t t[CHAIN * BT];
	kvp_key keys[4];
	kvp_page out[4];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	int i;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	seq(t, 700);
	ck_assert_int_eq(harness_serve(c, t, 4 * BT, out), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, 4 * BT, NULL, 0, keys), 4);
	ck_assert_int_eq(kvp_release(c, out, 4), 0);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 4);
	settle(d.sock);
	for (i = 0; i < 3; i++) {
		/* back in the pool, with its bytes; its slot still holds it */
		ck_assert_int_eq(kvp_acquire(c, NULL, keys, 4, NULL, 0, out, NULL), 4);
		for (int b = 0; b < 4; b++)
			ck_assert(harness_holds(kvp_page_ptr(c, out[b]), PAGE_BYTES, &keys[b]));
		ck_assert_int_eq(kvp_release(c, out, 4), 0);
		stats_of(d.sock, &st);
		ck_assert_uint_eq(st.nvme.used, 4);
		ck_assert_uint_eq(st.nvme.restores, 4 * (uint64_t)(i + 1));
		/* out again: no write */
		ck_assert_int_eq(kvp_evict(c, "spill", 0), 4);
		stats_of(d.sock, &st);
		ck_assert_uint_eq(st.nvme.spills, 4);
		ck_assert_uint_eq(st.nvme.writing, 0);
		ck_assert_uint_eq(st.pages_spilled, 4);
	}
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_restart_drops_blocks_whose_parent_is_gone)
{
	uint32_t t[CHAIN * BT];
	kvp_key keys[4];
	kvp_page out[4];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	char path[256], log[16384];

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	seq(t, 600);
	ck_assert_int_eq(harness_serve(c, t, 4 * BT, out), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, 4 * BT, NULL, 0, keys), 4);
	ck_assert_int_eq(kvp_release(c, out, 4), 0);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 4);
	kvp_close(c);
	daemon_halt(&d);
	/* the first block's slot no longer holds it */
	spill_file(&d, path, sizeof(path));
	unmake_slot(path, &keys[0]);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_spilled, 0);	/* 1..3 would be out of reach */
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "3 blocks of") && strstr(log, "a block before them is not there"),
		      "%s", log);
	ck_assert_int_eq(kvp_acquire(c, NULL, keys + 1, 3, NULL, 0, out, NULL), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_truncated_file_loses_only_cache)
{
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	char path[256];
	uint32_t s;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	/* settled: a write still in flight would land after the truncate
	 * and give back the slot it writes */
	publish_settled(c, &d, 0, 20);
	spill_file(&d, path, sizeof(path));
	ck_assert_int_eq(truncate(path, 8192), 0);	/* behind the daemon's back */
	for (s = 0; s < 20; s++)
		check_seq(c, s);	/* misses, never wrong bytes */
	stats_of(d.sock, &st);
	ck_assert_uint_gt(st.nvme.io_errors + st.nvme.checksum_failures, 0);
	/* and the daemon goes on serving */
	publish_seqs(c, 100, 4);
	ck_assert_int_eq(check_seq(c, 103), CHAIN);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_small_file_fills_up_and_drops)
{
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "2M", NULL));	/* 99 slots */
	c = join(d.sock);
	publish_seqs(c, 0, 30);	/* 960 pages */
	stats_of(d.sock, &st);
	ck_assert_uint_le(st.nvme.used, st.nvme.slots);
	ck_assert_uint_le(st.pages_spilled, st.nvme.slots);
	ck_assert_int_eq(check_seq(c, 29), CHAIN);	/* the newest are fine */
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_client_killed_during_restore)
{
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	int round;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	publish_seqs(c, 0, 20);
	for (round = 0; round < 10; round++) {
		pid_t pid = fork();

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			/* ask for a spilled chain, die before the answer */
			kvp_client *k;
			uint32_t t[CHAIN * BT];
			kvp_key keys[CHAIN];
			struct kvp_wire_acquire a = { .nkeys = CHAIN };
			struct kvp_wire_hdr h = { .op = KVP_OP_ACQUIRE, .req_id = 1,
						  .len = sizeof(a) + sizeof(keys) };
			static unsigned char buf[KVP_WIRE_HDR_SIZE + sizeof(a) + CHAIN * 32];
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			struct kvp_wire_hello hello;
			int fd;

			if (kvp_connect(d.sock, "spill", &geo, &k) < 0)
				_exit(1);
			seq(t, (uint32_t)round);
			kvp_block_keys(k, NULL, t, CHAIN * BT, NULL, 0, keys);
			kvp_root_key(k, (kvp_key *)a.parent);
			kvp_close(k);
			fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
			strcpy(sa.sun_path, d.sock);
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
				_exit(2);
			memset(&hello, 0, sizeof(hello));
			strcpy(hello.ns, "spill");
			strcpy(hello.model, geo.model);
			hello.layers = geo.layers;
			hello.kv_heads = geo.kv_heads;
			hello.head_dim = geo.head_dim;
			hello.block_tokens = geo.block_tokens;
			hello.dtype = geo.dtype;
			{
				unsigned char hb[KVP_WIRE_HDR_SIZE + sizeof(hello)];
				struct kvp_wire_hdr hh = { .op = KVP_OP_HELLO, .req_id = 0,
							   .len = sizeof(hello) };

				wire_hdr_encode(hb, &hh);
				memcpy(hb + KVP_WIRE_HDR_SIZE, &hello, sizeof(hello));
				if (send(fd, hb, sizeof(hb), 0) < 0 || recv(fd, hb, sizeof(hb), 0) <= 0)
					_exit(3);
			}
			wire_hdr_encode(buf, &h);
			memcpy(buf + KVP_WIRE_HDR_SIZE, &a, sizeof(a));
			memcpy(buf + KVP_WIRE_HDR_SIZE + sizeof(a), keys, sizeof(keys));
			if (send(fd, buf, sizeof(buf), 0) < 0)
				_exit(4);
			raise(SIGKILL);
		}
		ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	}
	/* everything the dead clients asked for comes back to the pool,
	 * unleased, once their restores completed (the daemon holds a dead
	 * client's connection until then) */
	for (round = 0; round < 20; round++)
		check_seq(c, (uint32_t)round);
	for (round = 0; round < 100000; round++) {
		stats_of(d.sock, &st);
		if (st.clients == 2 && st.pages_shared + st.pages_private +
		    st.pages_inflight == 0)
			break;
	}
	ck_assert_msg(st.pages_shared + st.pages_private + st.pages_inflight == 0,
		      "%llu pages still leased or in flight, %u clients",
		      (unsigned long long)(st.pages_shared + st.pages_private +
					   st.pages_inflight), st.clients);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_daemon_killed_during_heavy_spill_serves_nothing_corrupt)
{
	struct daemon d;
	kvp_client *c;
	pid_t writer;
	int status, s, total = 0;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	writer = fork();
	ck_assert_int_ge(writer, 0);
	if (writer == 0) {
		kvp_client *w;
		uint32_t t[CHAIN * BT];
		kvp_page out[CHAIN];
		uint32_t q;

		if (kvp_connect(d.sock, "spill", &geo, &w) < 0)
			_exit(1);
		for (q = 0; q < 1000; q++) {	/* until the daemon dies */
			seq(t, q);
			if (harness_serve(w, t, CHAIN * BT, out) < 0 ||
			    kvp_release(w, out, CHAIN) < 0)
				_exit(0);
		}
		_exit(0);
	}
	/* let it spill for a while, then kill the daemon mid-write */
	{
		kvp_stats_t st;

		do
			stats_of(d.sock, &st);
		while (st.nvme.spills < 1500);
	}
	ck_assert_int_eq(kill(d.pid, SIGKILL), 0);
	ck_assert_int_ge(daemon_wait_exit(&d, 20000), 0);
	close(d.pidfd);
	ck_assert_int_eq(waitpid(writer, &status, 0), writer);

	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	for (s = 0; s < 100; s++)
		total += check_seq(c, (uint32_t)s);	/* right bytes or a miss */
	ck_assert_int_gt(total, 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_rate_cap_slows_evictions_without_losing_pages)
{
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	uint32_t s;

	daemon_dir(&d);
	/* 1 MiB/s of 20 KiB slots: a burst of about 50 writes, then about 50
	 * a second; 12 chains need 128 evictions past the pool */
	daemon_restart(&d, args(&d, "64M", "--spill-rate=1M"));
	c = join(d.sock);
	publish_settled(c, &d, 0, 12);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.nvme.dropped, 0);
	ck_assert_uint_eq(st.nvme.spills, st.prefix.evictions);
	ck_assert_uint_ge(st.nvme.spills, 128);
	for (s = 0; s < 12; s++)
		ck_assert_int_eq(check_seq(c, s), CHAIN);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/*
 * An ACQUIRE whose chain is half in the pool and half in the tier, when
 * the pool is full and --spill-rate holds writes back: the back-pressure
 * that frees pages ahead of the read must not take the chain's own pool
 * pages (a clean copy goes back to its slot at once), or the daemon read
 * past its restore plan and died.
 */
START_TEST(test_spill_rate_wait_never_evicts_the_prefix_being_acquired)
{
	uint32_t t[CHAIN * BT], u[CHAIN * BT];
	kvp_key keys[2];
	kvp_page a[2], b, fill[255], got[2];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c, *other;
	uint32_t i;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	seq(t, 900);
	ck_assert_int_eq(harness_serve(c, t, 2 * BT, a), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, 2 * BT, NULL, 0, keys), 2);
	ck_assert_int_eq(kvp_release(c, a, 2), 0);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 2);
	settle(d.sock);
	kvp_close(c);
	daemon_halt(&d);

	/* 2 KiB/s of 20 KiB slots: after one write, none for about 9 s */
	daemon_restart(&d, args(&d, "64M", "--spill-rate=2K"));
	c = join(d.sock);
	seq(u, 901);
	ck_assert_int_eq(harness_serve(c, u, BT, &b), 0);
	ck_assert_int_eq(kvp_release(c, &b, 1), 0);
	/* both blocks back from the tier, each keeping its slot */
	ck_assert_int_eq(kvp_acquire(c, NULL, keys, 2, NULL, 0, a, NULL), 2);
	ck_assert_int_eq(kvp_release(c, a, 2), 0);
	/* the oldest (the other block) is written, spending the rate; then
	 * block 1 goes back to its slot without a write */
	ck_assert_int_eq(kvp_evict(c, "spill", 2), 2);
	settle(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_cached, 1);
	ck_assert_uint_eq(st.nvme.spills, 1);
	/* every other page leased */
	for (i = 0; i < 255; i += 51)
		ck_assert_int_eq(kvp_alloc(c, 51, fill + i), 0);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_free, 0);

	/* block 0 in the pool, block 1 in the tier, no free page and no
	 * write allowed: block 0 is served, block 1 waits for room */
	other = join(d.sock);
	ck_assert_int_eq(kvp_acquire(other, NULL, keys, 2, NULL, 0, got, NULL), 1);
	ck_assert(harness_holds(kvp_page_ptr(other, got[0]), PAGE_BYTES, &keys[0]));
	ck_assert_int_eq(kvp_release(other, got, 1), 0);
	/* with room, both come back */
	ck_assert_int_eq(kvp_release(c, fill, 255), 0);
	ck_assert_int_eq(kvp_acquire(other, NULL, keys, 2, NULL, 0, got, NULL), 2);
	for (i = 0; i < 2; i++)
		ck_assert(harness_holds(kvp_page_ptr(other, got[i]), PAGE_BYTES, &keys[i]));
	ck_assert_int_eq(kvp_release(other, got, 2), 0);
	kvp_close(other);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* A forged ACQUIRE that names one key in the tier twice: one read, one
 * hit, no page left behind in flight (daemon_stop() checks the counts). */
START_TEST(test_spill_a_key_named_twice_is_read_back_once)
{
	uint32_t t[CHAIN * BT];
	kvp_key keys[2];
	kvp_page a[2], got[2];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	seq(t, 910);
	ck_assert_int_eq(harness_serve(c, t, BT, a), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, BT, NULL, 0, keys), 1);
	ck_assert_int_eq(kvp_release(c, a, 1), 0);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 1);
	settle(d.sock);
	keys[1] = keys[0];
	ck_assert_int_eq(kvp_acquire(c, NULL, keys, 2, NULL, 0, got, NULL), 1);
	ck_assert(harness_holds(kvp_page_ptr(c, got[0]), PAGE_BYTES, &keys[0]));
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.nvme.restores, 1);
	ck_assert_uint_eq(st.pages_inflight, 0);
	ck_assert_uint_eq(st.pages_shared, 1);
	ck_assert_int_eq(kvp_release(c, got, 1), 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_rate_evict_waits_for_the_rate_and_moves_every_page)
{
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	uint64_t cached;
	uint32_t s;
	int n;

	daemon_dir(&d);
	/* 2 MiB/s of 16 KiB pages: a burst of about 120 writes; 8 chains
	 * leave all 256 pool pages cached, twice the burst */
	daemon_restart(&d, args(&d, "64M", "--spill-rate=2M"));
	c = join(d.sock);
	publish_settled(c, &d, 0, 8);
	stats_of(d.sock, &st);
	cached = st.pages_cached;
	ck_assert_uint_eq(cached, 256);
	/* the call waits for the rate instead of stopping at the burst */
	n = kvp_evict(c, "spill", 0);
	ck_assert_msg(n == (int)cached, "kvp_evict moved %d of %llu cached pages: %s", n,
		      (unsigned long long)cached, kvp_last_error());
	settle(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_cached, 0);
	ck_assert_uint_eq(st.nvme.dropped, 0);
	ck_assert_uint_eq(st.nvme.spills, st.prefix.evictions);
	for (s = 0; s < 8; s++)
		ck_assert_int_eq(check_seq(c, s), CHAIN);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* host_args() - a daemon with a 256-page pool, a host tier of host bytes
 * (64 pages a MiB) and, unless spill is NULL, an NVMe tier of spill
 * bytes. */
static const char *const *host_args(const struct daemon *d, const char *host,
				    const char *spill)
{
	static char opt[64];
	static const char *none[] = { "--pool-size", "4M", "--slab-size", "1M",
				      "--free-watermark", "0", NULL, NULL };

	snprintf(opt, sizeof(opt), "--host-tier-size=%s", host);
	if (spill)
		return args(d, spill, opt);
	none[6] = opt;
	return none;
}

/* pages_in() - how many pages LIST_PAGES reports in state (KVP_PAGE_*). */
static int pages_in(kvp_client *c, uint32_t state)
{
	struct kvp_wire_list_pages f = { .state = state };
	struct kvp_wire_page one;
	uint32_t total = 0;

	ck_assert_int_ge(kvp_list_pages(c, &f, &one, 1, &total), 0);
	return (int)total;
}

START_TEST(test_host_tier_sits_between_pool_and_nvme)
{
	enum { SEQS = 30 };	/* 960 pages: 256 in the pool, 64 in the host tier */
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;
	uint32_t s;

	daemon_dir(&d);
	daemon_restart(&d, host_args(&d, "1M", "64M"));
	c = join(d.sock);
	publish_settled(c, &d, 0, SEQS);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.host.slots, 64);
	ck_assert_uint_eq(st.host.used, 64);
	ck_assert_uint_eq(st.host.spills, SEQS * CHAIN - 256);	/* every eviction */
	ck_assert_uint_eq(st.nvme.spills, SEQS * CHAIN - 256 - 64);	/* moved on down */
	ck_assert_uint_eq(st.pages_spilled, SEQS * CHAIN - 256);
	ck_assert_uint_eq(st.host.dropped + st.nvme.dropped, 0);
	ck_assert_int_eq(pages_in(c, KVP_PAGE_HOST), 64);
	ck_assert_int_eq(pages_in(c, KVP_PAGE_SPILLED), SEQS * CHAIN - 256 - 64);
	/* the host tier holds the most recently evicted chains: 20 and 21 */
	ck_assert_int_eq(check_seq(c, 21), CHAIN);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.host.restores, CHAIN);
	ck_assert_uint_eq(st.nvme.restores, 0);
	/* and every other chain comes back byte-exact from wherever it is */
	for (s = 0; s < SEQS; s++)
		ck_assert_int_eq(check_seq(c, s), CHAIN);
	settle(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_gt(st.nvme.restores, 0);
	ck_assert_uint_eq(st.host.io_errors + st.nvme.checksum_failures + st.nvme.io_errors, 0);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_host_tier_alone_keeps_the_newest_and_drops_the_oldest)
{
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_dir(&d);
	daemon_restart(&d, host_args(&d, "1M", NULL));
	c = join(d.sock);
	publish_seqs(c, 0, 20);	/* 640 pages: 8 chains in the pool, 2 hosted */
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.nvme.slots, 0);
	ck_assert_uint_eq(st.host.used, 64);
	ck_assert_uint_eq(st.host.dropped, 640 - 256 - 64);
	ck_assert_uint_eq(st.pages_spilled, 64);
	ck_assert_int_eq(check_seq(c, 0), 0);	/* dropped long ago */
	/* a hosted chain comes back whole, though bringing it in pushes the
	 * pool's oldest chain (12) into the full host tier: chain 11's own
	 * pages are held, so chain 10 makes way */
	ck_assert_int_eq(check_seq(c, 11), CHAIN);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.host.restores, CHAIN);
	ck_assert_uint_eq(st.host.used, CHAIN);
	ck_assert_uint_eq(st.host.dropped, 640 - 256 - 64 + CHAIN);
	ck_assert_int_eq(check_seq(c, 10), 0);
	ck_assert_int_eq(check_seq(c, 12), CHAIN);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.host.restores, 2 * CHAIN);
	ck_assert_int_eq(check_seq(c, 19), CHAIN);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_host_tier_restore_without_room_changes_nothing)
{
	uint32_t t[CHAIN * BT];
	kvp_key keys[CHAIN];
	kvp_page held[8 * CHAIN], got[CHAIN];
	kvp_stats_t st0, st1;
	struct daemon d;
	kvp_client *c;
	int s;

	daemon_dir(&d);
	daemon_restart(&d, host_args(&d, "1M", NULL));
	c = join(d.sock);
	publish_seqs(c, 0, 9);	/* 288 pages: chain 0 hosted, 1..8 in the pool */
	/* chains 1..7 and the first block of chain 8 leased: 31 evictable */
	for (s = 1; s <= 8; s++) {
		seq(t, (uint32_t)s);
		ck_assert_int_eq(kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys), CHAIN);
		ck_assert_int_eq(kvp_acquire(c, NULL, keys, s < 8 ? CHAIN : 1, NULL, 0,
					     held + (s - 1) * CHAIN, NULL), s < 8 ? CHAIN : 1);
	}
	stats_of(d.sock, &st0);
	ck_assert_uint_eq(st0.pages_cached, CHAIN - 1);
	ck_assert_uint_eq(st0.host.used, CHAIN);
	/* chain 0 needs 32 pages to come back, the cache can free 31: no
	 * restore, and nothing is evicted for it */
	seq(t, 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, CHAIN * BT, NULL, 0, keys), CHAIN);
	ck_assert_int_eq(kvp_acquire(c, NULL, keys, CHAIN, NULL, 0, got, NULL), 0);
	stats_of(d.sock, &st1);
	ck_assert_uint_eq(st1.pages_cached, CHAIN - 1);
	ck_assert_uint_eq(st1.host.used, CHAIN);
	ck_assert_uint_eq(st1.prefix.evictions, st0.prefix.evictions);
	ck_assert_uint_eq(st1.host.dropped, st0.host.dropped);
	/* with room, it does come back */
	ck_assert_int_eq(kvp_release(c, held, 7 * CHAIN + 1), 0);
	ck_assert_int_eq(check_seq(c, 0), CHAIN);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* partial_publish() - blocks 0..1 of sequence 500 and a partial page of
 * 5 tokens after them, released: all cached. Their keys into keys[],
 * the tokens into t[]. */
static void partial_publish(kvp_client *c, uint32_t *t, kvp_key *keys)
{
	kvp_page out[3], canon;
	kvp_key pk;

	seq(t, 500);
	ck_assert_int_eq(harness_serve(c, t, 2 * BT, out), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, 2 * BT, NULL, 0, keys), 2);
	ck_assert_int_eq(kvp_alloc(c, 1, &out[2]), 0);
	memset(&pk, 0, sizeof(pk));
	pk.b[0] = 0x77;		/* the partial page's bytes follow from this */
	harness_fill(kvp_page_ptr(c, out[2]), PAGE_BYTES, &pk);
	ck_assert_int_eq(kvp_publish_partial(c, &keys[1], out[2], t + 2 * BT, 5,
					     KVP_PRIO_NORMAL, &canon), 0);
	ck_assert_int_eq(kvp_release(c, out, 3), 0);
}

/* partial_back() - ACQUIRE of the two blocks and 7 tokens after them
 * finds the partial page of 5 with its bytes. */
static void partial_back(kvp_client *c, const uint32_t *t, const kvp_key *keys)
{
	kvp_partial part = { 0 };
	kvp_page got[2];
	kvp_key pk;

	memset(&pk, 0, sizeof(pk));
	pk.b[0] = 0x77;
	ck_assert_int_eq(kvp_acquire(c, NULL, keys, 2, t, 2 * BT + 7, got, &part), 2);
	ck_assert_uint_eq(part.tokens, 5);
	ck_assert(harness_holds(kvp_page_ptr(c, part.page), PAGE_BYTES, &pk));
	ck_assert_int_eq(kvp_release(c, got, 2), 0);
	ck_assert_int_eq(kvp_release(c, &part.page, 1), 0);
}

START_TEST(test_partial_page_comes_back_from_either_tier_and_a_restart)
{
	uint32_t t[CHAIN * BT];
	kvp_key keys[2];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_dir(&d);
	/* the host tier */
	daemon_restart(&d, host_args(&d, "1M", NULL));
	c = join(d.sock);
	partial_publish(c, t, keys);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 3);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.host.used, 3);
	partial_back(c, t, keys);
	kvp_close(c);
	daemon_stop(&d);
	/* the NVMe tier, then a warm restart */
	daemon_dir(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	partial_publish(c, t, keys);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 3);
	settle(d.sock);
	partial_back(c, t, keys);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 3);
	kvp_close(c);
	daemon_halt(&d);
	daemon_restart(&d, args(&d, "64M", NULL));
	c = join(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_spilled, 3);
	partial_back(c, t, keys);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_host_tier_a_clean_stop_saves_the_pool_and_the_host_tier)
{
	uint32_t t[CHAIN * BT], s;
	char log[16384];
	kvp_key keys[2];
	kvp_stats_t st;
	struct daemon d;
	kvp_client *c;

	daemon_dir(&d);
	daemon_restart(&d, host_args(&d, "1M", "64M"));
	c = join(d.sock);
	publish_seqs(c, 0, 10);		/* 320 pages: 256 in the pool, 64 hosted */
	partial_publish(c, t, keys);	/* 3 more, the oldest go down */
	settle(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.nvme.spills, 3);
	kvp_close(c);
	daemon_halt(&d);	/* a clean stop */
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "320 pages saved to"), "%s", log);
	daemon_restart(&d, host_args(&d, "1M", "64M"));
	c = join(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_eq(st.pages_spilled, 323);	/* all of them came back */
	for (s = 0; s < 10; s++)
		ck_assert_int_eq(check_seq(c, s), CHAIN);
	partial_back(c, t, keys);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* state_of() - the KVP_PAGE_* state LIST_PREFIXES gives the block of key k
 * at depth, 0 when it is not indexed. */
static uint32_t state_of(kvp_client *c, const kvp_key *k, uint32_t depth)
{
	static struct kvp_wire_prefix r[1024];
	int n, i;

	n = kvp_list_prefixes(c, "spill", 0, r, 1024, NULL);
	ck_assert_int_ge(n, 0);
	for (i = 0; i < n; i++)
		if (!memcmp(r[i].key, k->b, sizeof(r[i].key)) && r[i].depth == depth)
			return r[i].state;
	return 0;
}

START_TEST(test_host_tier_a_restored_parent_never_goes_below_its_child)
{
	uint32_t t[CHAIN * BT], s;
	kvp_key keys[2];
	kvp_page out[2];
	struct daemon d;
	kvp_client *c;

	daemon_dir(&d);
	daemon_restart(&d, host_args(&d, "64K", "64M"));	/* 4 host tier slots */
	c = join(d.sock);
	seq(t, 800);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, 2 * BT, NULL, 0, keys), 2);
	/* block 1 of sequence 800 goes to the host tier, then on to the NVMe
	 * tier as four newer pages follow it */
	ck_assert_int_eq(harness_serve(c, t, BT, out), 0);
	ck_assert_int_eq(kvp_release(c, out, 1), 0);
	ck_assert_int_eq(kvp_evict(c, "spill", 0), 1);
	for (s = 801; s <= 804; s++) {
		uint32_t u[CHAIN * BT];

		seq(u, s);
		ck_assert_int_eq(harness_serve(c, u, BT, out), 0);
		ck_assert_int_eq(kvp_release(c, out, 1), 0);
		ck_assert_int_eq(kvp_evict(c, "spill", 0), 1);
	}
	settle(d.sock);
	ck_assert_uint_eq(state_of(c, &keys[0], 1), KVP_PAGE_SPILLED);
	/* read back (its NVMe slot stays a clean copy), a second block
	 * published after it, both released */
	ck_assert_int_eq(harness_serve(c, t, 2 * BT, out), 1);
	ck_assert_int_eq(kvp_release(c, out, 2), 0);
	/* the child leaves first, for the host tier; then the parent, which
	 * must not go back to its slot below the child: it follows it */
	ck_assert_int_eq(kvp_evict(c, "spill", 1), 1);
	ck_assert_uint_eq(state_of(c, &keys[1], 2), KVP_PAGE_HOST);
	ck_assert_int_eq(kvp_evict(c, "spill", 1), 1);
	settle(d.sock);
	ck_assert_msg(state_of(c, &keys[0], 1) == KVP_PAGE_HOST,
		      "the parent is in state %u, its child in the host tier",
		      state_of(c, &keys[0], 1));
	ck_assert_uint_eq(state_of(c, &keys[1], 2), KVP_PAGE_HOST);
	ck_assert_int_eq(check_seq(c, 800), 2);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_host_tier_size_errors_are_clear)
{
	struct daemon d;

	daemon_dir(&d);
	/* one slot less than a page: the first namespace cannot be made */
	daemon_restart(&d, host_args(&d, "8K", NULL));
	{
		kvp_client *c;
		int rc = kvp_connect(d.sock, "spill", &geo, &c);

		ck_assert_int_lt(rc, 0);
		ck_assert_msg(strstr(kvp_last_error(), "--host-tier-size 8192 holds 0 pages"),
			      "%s", kvp_last_error());
	}
	daemon_stop(&d);
}
END_TEST

/* --- pressure: a full tier never leaves a hole in a chain ------------------- */

/* 2 x 4 layers x 4 heads x 64 x 16 tokens x f16 = 64 KiB pages */
static const kvp_geometry geo64 = {
	.layers = 4, .kv_heads = 4, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/spill64",
};

/* chain_keys() - the keys of the first 16 blocks of sequence s. */
static void chain_keys(kvp_client *c, uint32_t s, kvp_key *keys)
{
	uint32_t t[CHAIN * BT];

	seq(t, s);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, 16 * BT, NULL, 0, keys), 16);
}

/* indexed_blocks() - every indexed block of the chains[0..nchains) of 16
 * blocks (sequence s's first 16) sits at its place: its depth is its
 * position, so its parent is indexed too. Their counts by chain into
 * count[]. */
static void indexed_blocks(kvp_client *c, uint32_t nchains, uint32_t *count)
{
	static struct kvp_wire_prefix r[8192];
	static kvp_key keys[64][16];
	uint32_t s, j;
	int n, i;

	ck_assert_uint_le(nchains, 64);
	for (s = 0; s < nchains; s++) {
		chain_keys(c, s, keys[s]);
		count[s] = 0;
	}
	n = kvp_list_prefixes(c, "spill64", 0, r, 8192, NULL);
	ck_assert_int_ge(n, 0);
	for (i = 0; i < n && i < 8192; i++) {
		bool found = false;

		for (s = 0; s < nchains && !found; s++) {
			for (j = 0; j < 16 && !found; j++) {
				if (memcmp(r[i].key, keys[s][j].b, 8))
					continue;
				found = true;
				count[s]++;
				ck_assert_msg(r[i].depth == j + 1, "chain %u block %u is indexed "
					      "at depth %u: a block before it is gone", s, j,
					      r[i].depth);
			}
		}
		ck_assert_msg(found, "an indexed key of no chain");
	}
}

/* no_holes() - no chain has a hole, and an ACQUIRE from the root serves
 * each chain as far as it is indexed then, with its bytes. */
static void no_holes(const char *sock, kvp_client *c, uint32_t nchains)
{
	uint32_t count[64], s;
	kvp_key keys[16];
	kvp_page got[16];
	int i, hits;

	for (s = 0; s < nchains; s++) {
		settle(sock);	/* every staging buffer free: nothing cut short */
		indexed_blocks(c, nchains, count);
		chain_keys(c, s, keys);
		hits = kvp_acquire(c, NULL, keys, 16, NULL, 0, got, NULL);
		ck_assert_int_eq(hits, (int)count[s]);
		for (i = 0; i < hits; i++)
			ck_assert_msg(harness_holds(kvp_page_ptr(c, got[i]), 65536, &keys[i]),
				      "chain %u block %d (of %d hits) was served with other bytes",
				      s, i, hits);
		ck_assert_int_eq(kvp_release(c, got, (size_t)hits), 0);
	}
	indexed_blocks(c, nchains, count);
}

START_TEST(test_pressure_fast_publishing_into_a_full_tier_leaves_no_holes)
{
	static const char *a[12];
	uint32_t t[CHAIN * BT], s, count[64];
	kvp_page out[16];
	kvp_stats_t st;
	char dir[128];
	struct daemon d;
	kvp_client *c;
	int rc;

	daemon_dir(&d);
	snprintf(dir, sizeof(dir), "%s/spill", d.dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	a[0] = "--pool-size"; a[1] = "16M"; a[2] = "--slab-size"; a[3] = "4M";
	a[4] = "--spill-dir"; a[5] = dir; a[6] = "--spill-size"; a[7] = "16M";
	a[8] = NULL;
	daemon_restart(&d, a);
	rc = kvp_connect(d.sock, "spill64", &geo64, &c);
	ck_assert_msg(rc == 0, "%s", kvp_last_error());
	/* 48 chains of 16 blocks, back to back: 768 pages through a pool of
	 * 256 and a tier of 240 */
	for (s = 0; s < 48; s++) {
		seq(t, s);
		harness_serve(c, t, 16 * BT, out);
		ck_assert_int_eq(kvp_release(c, out, 16), 0);
	}
	settle(d.sock);
	stats_of(d.sock, &st);
	ck_assert_uint_gt(st.nvme.spills, 0);
	ck_assert_uint_gt(st.nvme.dropped, 0);	/* 768 pages, room for 496 */
	/* what made way was the oldest, whole chains first */
	indexed_blocks(c, 48, count);
	ck_assert_uint_eq(count[0], 0);
	ck_assert_uint_eq(count[47], 16);
	no_holes(d.sock, c, 48);
	kvp_close(c);
	daemon_stop(&d);
}
END_TEST

/* --- the loop never waits for the disk ------------------------------------ */

/* churn_args() - a daemon whose namespaces each get a 1 GiB tier file. */
static const char *const *churn_args(struct daemon *d, char *dir, size_t len)
{
	static const char *a[12];

	daemon_dir(d);
	snprintf(dir, len, "%s/spill", d->dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	a[0] = "--pool-size"; a[1] = "16M"; a[2] = "--slab-size"; a[3] = "4M";
	a[4] = "--spill-dir"; a[5] = dir; a[6] = "--spill-size"; a[7] = "1G";
	a[8] = NULL;
	return a;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* churn() - a child: make and drop two namespaces, each with a 1 GiB tier
 * file; each drop returns once the file is gone. *create_ns: the slower
 * HELLO. Exits 0, or the step that failed. */
static void churn(const char *sock, const char *dir, volatile uint64_t *create_ns)
{
	char name[32], path[256];
	kvp_client *admin, *c;
	struct stat st;
	uint64_t t0;
	int i;

	if (kvp_connect(sock, NULL, NULL, &admin) < 0)
		_exit(2);
	for (i = 0; i < 2; i++) {
		snprintf(name, sizeof(name), "churn-%d", i);
		t0 = harness_now_ns();
		if (kvp_connect(sock, name, &geo, &c) < 0)
			_exit(3);
		if (harness_now_ns() - t0 > *create_ns)
			*create_ns = harness_now_ns() - t0;
		kvp_close(c);
		if (kvp_drop_namespace(admin, name) < 0)
			_exit(4);
		snprintf(path, sizeof(path), "%s/%s.kvspill", dir, name);
		if (stat(path, &st) == 0)
			_exit(5);	/* the drop said OK before the file was gone */
	}
	kvp_close(admin);
	_exit(0);
}

START_TEST(test_spill_namespace_churn_never_stalls_other_clients)
{
	enum { MAX = 200000 };
	static uint64_t rt[MAX];
	volatile uint64_t *create_ns;
	char dir[128];
	struct daemon d;
	kvp_stats_t st;
	kvp_client *c;
	size_t n = 0;
	uint64_t t0, p99, worst;
	pid_t pid;
	int status = -1, rc;

	daemon_restart(&d, churn_args(&d, dir, sizeof(dir)));
	rc = kvp_connect(d.sock, "steady", &geo, &c);
	ck_assert_msg(rc == 0, "%s", kvp_last_error());
	create_ns = mmap(NULL, sizeof(*create_ns), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne((void *)create_ns, MAP_FAILED);
	*create_ns = 0;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		churn(d.sock, dir, create_ns);
	/* round trips for as long as namespaces are made and dropped */
	while (n < MAX && waitpid(pid, &status, WNOHANG) == 0) {
		t0 = harness_now_ns();
		rc = kvp_stats(c, &st, NULL, 0);
		ck_assert_msg(rc >= 0, "STATS: %s", kvp_last_error());
		rt[n++] = harness_now_ns() - t0;
	}
	if (n == MAX)
		waitpid(pid, &status, 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the namespace churner failed at step %d", WEXITSTATUS(status));
	qsort(rt, n, sizeof(rt[0]), cmp_u64);
	p99 = rt[(n - 1) * 99 / 100];
	worst = rt[n - 1];
	/* generous bounds for a shared machine and valgrind; the daemon that
	 * made and removed tier files on its loop kept STATS waiting for the
	 * whole of each (seconds) */
	ck_assert_msg(p99 < 100000000u && worst < 1000000000u, "STATS round trips while "
		      "namespaces with 1 GiB tier files were made (slowest HELLO %.0f ms) and "
		      "dropped: p99 %.1f ms, max %.1f ms over %zu", (double)*create_ns / 1e6,
		      (double)p99 / 1e6, (double)worst / 1e6, n);
	kvp_close(c);
	munmap((void *)create_ns, sizeof(*create_ns));
	daemon_stop(&d);
}
END_TEST

START_TEST(test_spill_a_drop_waits_for_the_namespace_being_made)
{
	char dir[128], path[256];
	struct daemon d;
	kvp_client *admin, *c;
	struct stat st;
	pid_t pid;
	int i, rc;

	daemon_restart(&d, churn_args(&d, dir, sizeof(dir)));
	snprintf(path, sizeof(path), "%s/racing.kvspill", dir);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {	/* makes the namespace; refused once a drop waits too */
		rc = kvp_connect(d.sock, "racing", &geo, &c);
		if (rc == 0 || !strstr(kvp_last_error(), "is being dropped by an admin")) {
			fprintf(stderr, "HELLO: %d %s\n", rc, kvp_last_error());
			_exit(1);
		}
		_exit(0);
	}
	/* its tier file exists while it is being made (a 1 GiB file takes a
	 * while): the drop arrives then */
	for (i = 0; i < 20000 && stat(path, &st) < 0; i++)
		usleep(500);
	ck_assert_msg(i < 20000, "%s never appeared", path);
	rc = kvp_connect(d.sock, NULL, NULL, &admin);
	ck_assert_int_eq(rc, 0);
	/* STATS shows it being made (1 GiB takes far longer than this) */
	{
		kvp_ns_stats_t ns[4];
		kvp_stats_t all;
		int k, cnt = kvp_stats(admin, &all, ns, 4);

		for (k = 0; k < cnt && strcmp(ns[k].name, "racing"); k++)
			;
		ck_assert_msg(k < cnt && ns[k].state == KVP_WIRE_NS_PREPARING &&
			      ns[k].clients == 0, "namespace 'racing' is not listed as "
			      "preparing while its tier file is made");
	}
	rc = kvp_drop_namespace(admin, "racing");
	ck_assert_msg(rc == 0, "DROP_NS of a namespace being made: %s", kvp_last_error());
	ck_assert_msg(stat(path, &st) < 0 && errno == ENOENT, "%s is still there after the "
		      "drop returned", path);
	child_wait(pid);	/* its HELLO was answered, not left waiting */
	/* once dropped, a HELLO makes it anew, with a new tier file */
	rc = kvp_connect(d.sock, "racing", &geo, &c);
	ck_assert_msg(rc == 0, "%s", kvp_last_error());
	ck_assert_int_eq(stat(path, &st), 0);
	kvp_close(c);
	kvp_close(admin);
	daemon_stop(&d);
}
END_TEST

/* --- start-up: a tier that cannot be had is refused before serving -------- */

/* refused() - kvpoold with --spill-dir dir and --spill-size size exits 1
 * at start-up with a message holding want. */
static void refused(const struct daemon *d, const char *dir, const char *size,
		    const char *want)
{
	char out[4096];
	int st;

	st = run_cmd((const char *[]){ harness_kvpoold(), "--foreground", "--socket", d->sock,
				      "--pool-size", "4M", "--slab-size", "1M", "--spill-dir",
				      dir, "--spill-size", size, NULL }, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "kvpoold with --spill-dir %s "
		      "--spill-size %s started (status %d): %s", dir, size, st, out);
	ck_assert_msg(strstr(out, want), "for --spill-dir %s --spill-size %s: %s", dir, size, out);
}

/* small_fs() - a tmpfs of 8 MiB at path, in a mount namespace of this
 * test's process (and of the daemons it starts), so that it goes with
 * the process however the test ends; false (the test skips) where the
 * tests may not mount. */
static bool small_fs(const char *path, const char *opts)
{
	static bool own_ns;

	mkdir(path, 0700);
	if (!own_ns && unshare(CLONE_NEWNS) == 0 &&
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0)
		own_ns = true;
	if (own_ns && mount("tmpfs", path, "tmpfs", 0, opts) == 0)
		return true;
	fprintf(stderr, "%s: skipped: cannot mount a tmpfs at %s (%s): the test needs root "
		"and a mount namespace it may change\n", __FILE__, path, strerror(errno));
	return false;
}

START_TEST(test_startup_a_second_daemon_on_the_spill_dir_is_refused)
{
	struct daemon d, d2;
	char dir[128], want[256];

	daemon_dir(&d);
	daemon_restart(&d, args(&d, "8M", NULL));
	snprintf(dir, sizeof(dir), "%s/spill", d.dir);
	daemon_dir(&d2);	/* a socket of its own: only the directory is shared */
	snprintf(want, sizeof(want), "another kvpoold (pid %d) uses the spill directory %s",
		 (int)d.pid, dir);
	refused(&d2, dir, "8M", want);
	/* the first one goes on; once it is gone, the directory is free */
	check_conservation(d.sock);
	daemon_halt(&d);
	daemon_restart(&d2, (const char *[]){ "--pool-size", "4M", "--slab-size", "1M",
					      "--spill-dir", dir, "--spill-size", "8M", NULL });
	daemon_stop(&d2);
	daemon_cleanup(&d);
}
END_TEST

START_TEST(test_startup_refuses_a_spill_dir_it_cannot_use)
{
	char dir[128], file[128];
	struct daemon d;

	daemon_dir(&d);
	snprintf(dir, sizeof(dir), "%s/nonexistent", d.dir);
	refused(&d, dir, "16M", "No such file or directory (create it");
	snprintf(file, sizeof(file), "%s/afile", d.dir);
	ck_assert_int_eq(close(open(file, O_CREAT | O_WRONLY, 0600)), 0);
	refused(&d, file, "16M", "not a directory");
	/* no file system has a petabyte free here: refused, nothing made */
	snprintf(dir, sizeof(dir), "%s/spill", d.dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	refused(&d, dir, "1P", "--spill-size 1.0 PiB does not fit in");
	refused(&d, dir, "1P", "free disk space or lower --spill-size");
	ck_assert_int_eq(rmdir(dir), 0);	/* empty: nothing was left */
	/* a read-only file system */
	if (small_fs(dir, "size=8M,mode=0700")) {
		ck_assert_int_eq(mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
		refused(&d, dir, "1M", "the file system is read-only");
		ck_assert_int_eq(umount(dir), 0);
	}
	daemon_cleanup(&d);
}
END_TEST

START_TEST(test_startup_a_tier_file_that_does_not_fit_leaves_nothing_behind)
{
	static const char *a[10];
	char dir[128], path[256], log[8192];
	struct statvfs before, after;
	struct daemon d;
	kvp_client *c, *c2;
	kvp_page pg;
	int rc;

	daemon_dir(&d);
	snprintf(dir, sizeof(dir), "%s/spill", d.dir);
	if (!small_fs(dir, "size=8M,mode=0700")) {
		daemon_cleanup(&d);
		return;
	}
	a[0] = "--pool-size"; a[1] = "4M"; a[2] = "--slab-size"; a[3] = "1M";
	a[4] = "--spill-dir"; a[5] = dir; a[6] = "--spill-size"; a[7] = "5M"; a[8] = NULL;
	daemon_restart(&d, a);
	/* tmpfs is memory, not a disk: said at start-up */
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "is on tmpfs: the NVMe tier's files live in RAM"), "%s", log);
	ck_assert_msg(strstr(log, "room for 1 tier files of 5.0 MiB"), "%s", log);
	c = join(d.sock);			/* takes 5 of the 8 MiB */
	ck_assert_int_eq(statvfs(dir, &before), 0);
	/* a second namespace's file does not fit: refused, nothing left */
	rc = kvp_connect(d.sock, "second", &geo, &c2);
	ck_assert_int_lt(rc, 0);
	ck_assert_msg(strstr(kvp_last_error(), "its NVMe tier cannot be used"), "%s",
		      kvp_last_error());
	snprintf(path, sizeof(path), "%s/second.kvspill", dir);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(statvfs(dir, &after), 0);
	ck_assert_uint_eq(after.f_bfree, before.f_bfree);
	wait_log(&d, "cannot make the spill file");
	read_file(d.log, log, sizeof(log));
	ck_assert_msg(strstr(log, "has 3.0 MiB free; free disk space or lower --spill-size"),
		      "%s", log);
	/* the first namespace is served as before */
	ck_assert_int_eq(kvp_alloc(c, 1, &pg), 0);
	ck_assert_int_eq(kvp_release(c, &pg, 1), 0);
	kvp_close(c);
	daemon_halt(&d);
	ck_assert_int_eq(umount(dir), 0);
	daemon_cleanup(&d);
}
END_TEST

static Suite *spill_suite(void)
{
	Suite *s = suite_create("spill");
	TCase *tc;

	tc = tcase_create("round trip");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_spill_round_trip_is_byte_exact);
	tcase_add_test(tc, test_spill_warm_restart_keeps_prefixes);
	tcase_add_test(tc, test_spill_changed_geometry_starts_cold_and_says_why);
	suite_add_tcase(s, tc);

	tc = tcase_create("start-up");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_startup_refuses_a_spill_dir_it_cannot_use);
	tcase_add_test(tc, test_startup_a_second_daemon_on_the_spill_dir_is_refused);
	tcase_add_test(tc, test_startup_a_tier_file_that_does_not_fit_leaves_nothing_behind);
	suite_add_tcase(s, tc);

	tc = tcase_create("host tier");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_host_tier_sits_between_pool_and_nvme);
	tcase_add_test(tc, test_host_tier_alone_keeps_the_newest_and_drops_the_oldest);
	tcase_add_test(tc, test_host_tier_size_errors_are_clear);
	tcase_add_test(tc, test_host_tier_restore_without_room_changes_nothing);
	tcase_add_test(tc, test_partial_page_comes_back_from_either_tier_and_a_restart);
	tcase_add_test(tc, test_host_tier_a_clean_stop_saves_the_pool_and_the_host_tier);
	tcase_add_test(tc, test_host_tier_a_restored_parent_never_goes_below_its_child);
	suite_add_tcase(s, tc);

	tc = tcase_create("faults");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_spill_flipped_bytes_are_a_miss);
	tcase_add_test(tc, test_spill_truncated_file_loses_only_cache);
	tcase_add_test(tc, test_spill_restart_drops_blocks_whose_parent_is_gone);
	tcase_add_test(tc, test_spill_a_restored_block_keeps_its_slot_and_goes_back_without_a_write);
	tcase_add_test(tc, test_spill_small_file_fills_up_and_drops);
	tcase_add_test(tc, test_spill_rate_cap_slows_evictions_without_losing_pages);
	tcase_add_test(tc, test_spill_rate_evict_waits_for_the_rate_and_moves_every_page);
	tcase_add_test(tc, test_spill_rate_wait_never_evicts_the_prefix_being_acquired);
	tcase_add_test(tc, test_spill_a_key_named_twice_is_read_back_once);
	tcase_add_test(tc, test_spill_client_killed_during_restore);
	tcase_add_test(tc, test_spill_daemon_killed_during_heavy_spill_serves_nothing_corrupt);
	suite_add_tcase(s, tc);
	tc = tcase_create("loop");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_spill_namespace_churn_never_stalls_other_clients);
	tcase_add_test(tc, test_spill_a_drop_waits_for_the_namespace_being_made);
	suite_add_tcase(s, tc);
	tc = tcase_create("pressure");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_pressure_fast_publishing_into_a_full_tier_leaves_no_holes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(spill_suite());
}
