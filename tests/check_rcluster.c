/* SPDX-License-Identifier: MIT */
/*
 * check_rcluster.c - unit tests of the remote tier's pure parts: Redis
 * Cluster routing (URLs, key slots, the slot map from CLUSTER SLOTS
 * replies, MOVED and ASK) and the value format of a page. Replies are
 * parsed from RESP bytes by hiredis's own reader, as the daemon gets them.
 * The slot numbers are the ones `redis-cli CLUSTER KEYSLOT` gives.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "daemon/remote/rcluster.h"
#include "daemon/remote/rpage.h"
#include "daemon/remote/rvalue.h"

/* resp() - the reply that the RESP bytes s encode; caller frees it with
 * freeReplyObject(). */
static redisReply *resp(const char *s)
{
	redisReader *r = redisReaderCreate();
	void *reply = NULL;

	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(redisReaderFeed(r, s, strlen(s)), REDIS_OK);
	ck_assert_int_eq(redisReaderGetReply(r, &reply), REDIS_OK);
	ck_assert_ptr_nonnull(reply);
	redisReaderFree(r);
	return reply;
}

START_TEST(test_rcluster_crc16_is_xmodem)
{
	ck_assert_uint_eq(rc_crc16("123456789", 9), 0x31c3);
	ck_assert_uint_eq(rc_crc16("", 0), 0);
}
END_TEST

START_TEST(test_rcluster_slots_are_the_servers)
{
	ck_assert_uint_eq(rc_slot("foo", 3), 12182);
	ck_assert_uint_eq(rc_slot("bar", 3), 5061);
	ck_assert_uint_eq(rc_slot("123456789", 9), 12739);
}
END_TEST

START_TEST(test_rcluster_hash_tags)
{
	/* the bytes between the first '{' and the next '}' */
	ck_assert_uint_eq(rc_slot("{user1000}.following", 20), 3443);
	ck_assert_uint_eq(rc_slot("{user1000}.followers", 20), 3443);
	ck_assert_uint_eq(rc_slot("foo{{bar}}zap", 13), 4015);	/* "{bar" */
	ck_assert_uint_eq(rc_slot("{bar", 4), 4015);		/* no '}': all */
	ck_assert_uint_eq(rc_slot("foo{}{bar}", 10), 8363);	/* empty: all */
	/* our keys have no braces: each block its own slot */
	ck_assert_ptr_null(memchr("kvp1:", '{', 5));
}
END_TEST

START_TEST(test_rcluster_url_cluster_seeds)
{
	struct rc_url u;
	char err[256];

	ck_assert_int_eq(rc_url_parse("redis-cluster://10.0.0.1:7000,host-b,[::1]:7002",
				      &u, err, sizeof(err)), 0);
	ck_assert(u.cluster);
	ck_assert_uint_eq(u.nseeds, 3);
	ck_assert_str_eq(u.seeds[0].host, "10.0.0.1");
	ck_assert_uint_eq(u.seeds[0].port, 7000);
	ck_assert_str_eq(u.seeds[1].host, "host-b");
	ck_assert_uint_eq(u.seeds[1].port, 6379);
	ck_assert_str_eq(u.seeds[2].host, "::1");
	ck_assert_uint_eq(u.seeds[2].port, 7002);
	ck_assert_str_eq(u.password, "");
}
END_TEST

START_TEST(test_rcluster_url_auth_and_db)
{
	struct rc_url u;
	char err[256];

	ck_assert_int_eq(rc_url_parse("redis://kvpool:s3cr@t@127.0.0.1:6380/2", &u, err,
				      sizeof(err)), 0);
	ck_assert(!u.cluster);
	ck_assert_str_eq(u.user, "kvpool");
	ck_assert_str_eq(u.password, "s3cr@t");	/* the last '@' ends it */
	ck_assert_str_eq(u.seeds[0].host, "127.0.0.1");
	ck_assert_uint_eq(u.seeds[0].port, 6380);
	ck_assert_uint_eq(u.db, 2);
	ck_assert_int_eq(rc_url_parse("redis://:pw@h", &u, err, sizeof(err)), 0);
	ck_assert_str_eq(u.user, "");
	ck_assert_str_eq(u.password, "pw");
}
END_TEST

START_TEST(test_rcluster_url_refuses_what_it_cannot_serve)
{
	static const char *bad[] = {
		"", "127.0.0.1:7000", "rediss://h:1", "http://h:1", "redis-cluster://",
		"redis-cluster://h:0", "redis-cluster://h:65536", "redis-cluster://h:x",
		"redis-cluster://h:1,", "redis-cluster://h:1,,h:2", "redis://a:1,b:2",
		"redis-cluster://h:1/3", "redis://h:1/x", "redis://[::1:1", "redis://h h:1",
	};
	struct rc_url u;
	char err[256];
	unsigned i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_msg(rc_url_parse(bad[i], &u, err, sizeof(err)) == -EINVAL,
			      "'%s' was accepted", bad[i]);
		ck_assert_msg(err[0], "no message for '%s'", bad[i]);
	}
	ck_assert_int_eq(rc_url_parse("rediss://h:1", &u, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "TLS"));
}
END_TEST

/* Two masters, the second given as "" (the node that answered) with a
 * replica, and a third range whose endpoint is unknown. */
static const char three_ranges[] =
	"*3\r\n"
	"*4\r\n:0\r\n:8000\r\n"
	"*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$3\r\nid0\r\n"
	"*3\r\n$9\r\n127.0.0.1\r\n:7003\r\n$3\r\nid3\r\n"
	"*3\r\n:8001\r\n:16000\r\n"
	"*2\r\n$0\r\n\r\n:7001\r\n"
	"*3\r\n:16001\r\n:16383\r\n"
	"*2\r\n$1\r\n?\r\n:7002\r\n";

START_TEST(test_rcluster_map_from_cluster_slots)
{
	struct rc_addr from = { "10.1.1.1", 7001 };
	struct rc_map m;
	redisReply *r = resp(three_ranges);
	char err[256];
	uint16_t a, b;

	rc_map_init(&m);
	ck_assert_int_eq(rc_map_load(&m, r, &from, err, sizeof(err)), 0);
	a = rc_map_owner(&m, 0);
	b = rc_map_owner(&m, 8001);
	ck_assert_uint_ne(a, RC_NONE);
	ck_assert_uint_eq(rc_map_owner(&m, 8000), a);
	ck_assert_str_eq(m.nodes[a].host, "127.0.0.1");
	ck_assert_uint_eq(m.nodes[a].port, 7000);
	ck_assert_str_eq(m.nodes[b].host, "10.1.1.1");	/* "" is who answered */
	ck_assert_uint_eq(m.nodes[b].port, 7001);
	ck_assert_uint_eq(rc_map_owner(&m, 16000), b);
	ck_assert_uint_eq(rc_map_owner(&m, 16001), RC_NONE);	/* "?" */
	ck_assert_uint_eq(rc_map_owner(&m, 16383), RC_NONE);
	ck_assert_uint_eq(m.covered, 16001);
	ck_assert_uint_eq(m.nnodes, 2);	/* replicas serve no slot */
	freeReplyObject(r);
	rc_map_fini(&m);
}
END_TEST

START_TEST(test_rcluster_map_reload_keeps_node_numbers)
{
	struct rc_addr from = { "127.0.0.1", 7000 };
	struct rc_map m;
	redisReply *r = resp(three_ranges);
	/* after a failover: 7003 took 0..8000 */
	redisReply *r2 = resp("*1\r\n*3\r\n:0\r\n:8000\r\n"
			      "*2\r\n$9\r\n127.0.0.1\r\n:7003\r\n");
	char err[256];
	uint16_t old;

	rc_map_init(&m);
	ck_assert_int_eq(rc_map_load(&m, r, &from, err, sizeof(err)), 0);
	old = rc_map_owner(&m, 100);
	ck_assert_int_eq(rc_map_load(&m, r2, &from, err, sizeof(err)), 0);
	ck_assert_uint_ne(rc_map_owner(&m, 100), old);
	ck_assert_uint_eq(m.nodes[rc_map_owner(&m, 100)].port, 7003);
	ck_assert_uint_eq(m.nodes[old].port, 7000);	/* still there, same number */
	ck_assert_uint_eq(rc_map_owner(&m, 9000), RC_NONE);	/* not in the new map */
	ck_assert_uint_eq(m.covered, 8001);
	freeReplyObject(r);
	freeReplyObject(r2);
	rc_map_fini(&m);
}
END_TEST

START_TEST(test_rcluster_map_refuses_a_bad_reply_unchanged)
{
	static const char *bad[] = {
		"-ERR This instance has cluster support disabled\r\n",
		"+OK\r\n",
		"*1\r\n*2\r\n:0\r\n:10\r\n",				/* no master */
		"*1\r\n*3\r\n:10\r\n:0\r\n*2\r\n$1\r\nh\r\n:1\r\n",	/* start > end */
		"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",	/* past the last slot */
		"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n",	/* port 0 */
		"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:1\r\n",		/* host not a string */
		/* ranges that overlap, also with an unknown endpoint */
		"*2\r\n*3\r\n:0\r\n:100\r\n*2\r\n$1\r\nh\r\n:1\r\n"
		"*3\r\n:100\r\n:200\r\n*2\r\n$1\r\nh\r\n:2\r\n",
		"*2\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$1\r\n?\r\n:1\r\n"
		"*3\r\n:5\r\n:5\r\n*2\r\n$9\r\n127.0.0.1\r\n:2\r\n",
	};
	struct rc_addr from = { "127.0.0.1", 7000 };
	struct rc_map m;
	char err[256];
	unsigned i;

	rc_map_init(&m);
	ck_assert_int_eq(rc_map_single(&m, "127.0.0.1", 7000), 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		redisReply *r = resp(bad[i]);

		err[0] = '\0';
		ck_assert_msg(rc_map_load(&m, r, &from, err, sizeof(err)) == -EPROTO,
			      "bad reply %u was taken", i);
		ck_assert(err[0]);
		ck_assert_uint_eq(m.covered, RC_SLOTS);
		ck_assert_uint_eq(rc_map_owner(&m, 5), 0);
		freeReplyObject(r);
	}
	rc_map_fini(&m);
}
END_TEST

/* More entries than slots is no cluster's map: refused before any slot
 * is looked at (300,000 full ranges once cost the loop seconds). */
START_TEST(test_rcluster_map_refuses_more_entries_than_slots)
{
	static const char entry[] = "*3\r\n:0\r\n:0\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n";
	struct rc_addr from = { "127.0.0.1", 7000 };
	size_t el = sizeof(entry) - 1, len;
	struct rc_map m;
	redisReply *r;
	char err[256], *s;

	s = malloc(32 + el * (RC_SLOTS + 1));
	ck_assert_ptr_nonnull(s);
	len = (size_t)sprintf(s, "*%u\r\n", RC_SLOTS + 1);
	for (unsigned i = 0; i <= RC_SLOTS; i++, len += el)
		memcpy(s + len, entry, el);
	s[len] = '\0';
	r = resp(s);
	rc_map_init(&m);
	ck_assert_int_eq(rc_map_load(&m, r, &from, err, sizeof(err)), -EPROTO);
	ck_assert_str_eq(err, "CLUSTER SLOTS has 16385 entries, more than the 16384 slots of a "
			 "cluster: not a cluster's map");
	ck_assert_uint_eq(m.covered, 0);
	rc_map_fini(&m);
	freeReplyObject(r);
	free(s);
}
END_TEST

/* A master given by host name owns nothing: connecting to it would ask a
 * resolver on the daemon's loop. */
START_TEST(test_rcluster_map_takes_addresses_not_names)
{
	static const char named[] =
		"*3\r\n"
		"*3\r\n:0\r\n:99\r\n*2\r\n$8\r\nredis-a1\r\n:7000\r\n"
		"*3\r\n:100\r\n:199\r\n*2\r\n$7\r\nfe80::1\r\n:7001\r\n"
		"*3\r\n:200\r\n:16383\r\n*2\r\n$8\r\n10.0.0.2\r\n:7002\r\n";
	struct rc_addr from = { "10.0.0.2", 7002 };
	struct rc_map m;
	redisReply *r = resp(named);
	char err[256];

	rc_map_init(&m);
	ck_assert_int_eq(rc_map_load(&m, r, &from, err, sizeof(err)), 0);
	ck_assert_uint_eq(rc_map_owner(&m, 50), RC_NONE);
	ck_assert_uint_ne(rc_map_owner(&m, 150), RC_NONE);
	ck_assert_uint_ne(rc_map_owner(&m, 300), RC_NONE);
	ck_assert_uint_eq(m.covered, RC_SLOTS - 100);
	ck_assert_uint_eq(m.nnamed, 1);
	ck_assert_str_eq(m.named, "redis-a1");
	ck_assert(rc_numeric("127.0.0.1") && rc_numeric("::1") && !rc_numeric("localhost"));
	rc_map_fini(&m);
	freeReplyObject(r);
}
END_TEST

START_TEST(test_rcluster_redirects)
{
	struct rc_addr from = { "10.0.0.9", 7005 }, to;
	uint16_t slot = 0;
	const char *s;

	s = "MOVED 3999 127.0.0.1:6381";
	ck_assert_int_eq(rc_redirect_parse(s, strlen(s), &from, &slot, &to), RC_MOVED);
	ck_assert_uint_eq(slot, 3999);
	ck_assert_str_eq(to.host, "127.0.0.1");
	ck_assert_uint_eq(to.port, 6381);
	s = "ASK 16383 host-c:7002";
	ck_assert_int_eq(rc_redirect_parse(s, strlen(s), &from, &slot, &to), RC_ASK);
	ck_assert_uint_eq(slot, 16383);
	ck_assert_str_eq(to.host, "host-c");
	s = "MOVED 1 :7001";			/* the node that answered */
	ck_assert_int_eq(rc_redirect_parse(s, strlen(s), &from, &slot, &to), RC_MOVED);
	ck_assert_str_eq(to.host, "10.0.0.9");
	ck_assert_uint_eq(to.port, 7001);
	s = "MOVED 2 fe80::1:7001";		/* IPv6: the port after the last ':' */
	ck_assert_int_eq(rc_redirect_parse(s, strlen(s), &from, &slot, &to), RC_MOVED);
	ck_assert_str_eq(to.host, "fe80::1");
	ck_assert_uint_eq(to.port, 7001);
}
END_TEST

START_TEST(test_rcluster_other_errors_are_not_redirects)
{
	static const char *no[] = {
		"ERR unknown command", "MOVED", "MOVED 16384 h:1", "MOVED x h:1",
		"MOVED 1 h", "MOVED 1 h:0", "ASK 1", "CLUSTERDOWN The cluster is down",
		"TRYAGAIN Multiple keys request during rehashing of slot",
	};
	struct rc_addr from = { "h", 1 }, to;
	uint16_t slot;
	unsigned i;

	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		ck_assert_msg(rc_redirect_parse(no[i], strlen(no[i]), &from, &slot, &to) ==
			      RC_NO_REDIRECT, "'%s' taken for a redirect", no[i]);
}
END_TEST

/* A namespace identity for the value tests. */
static void test_ns(struct spill_ns *ns)
{
	memset(ns, 0, sizeof(*ns));
	strcpy(ns->name, "default");
	strcpy(ns->model, "llama-3.1-8b");
	ns->layers = 32;
	ns->kv_heads = 8;
	ns->head_dim = 128;
	ns->block_tokens = 16;
	ns->dtype = 1;
	ns->key_scheme = 1;
	ns->page_bytes = 4096;
	memset(ns->root, 0x5a, sizeof(ns->root));
}

START_TEST(test_rpage_identity_is_name_model_geometry_and_salt)
{
	struct spill_ns a, b;
	uint8_t ia[RPAGE_ID_BYTES], ib[RPAGE_ID_BYTES];

	test_ns(&a);
	strcpy(a.name, "prod");
	rpage_ns_id(&a, ia);
	b = a;
	rpage_ns_id(&b, ib);			/* prod on another machine */
	ck_assert_mem_eq(ia, ib, RPAGE_ID_BYTES);
	strcpy(b.name, "evil");			/* another tenant, same model */
	rpage_ns_id(&b, ib);
	ck_assert(memcmp(ia, ib, RPAGE_ID_BYTES));
	strcpy(b.name, "prodl");		/* the name ends where it ends */
	strcpy(b.model, "lama-3.1-8b");
	rpage_ns_id(&b, ib);
	ck_assert(memcmp(ia, ib, RPAGE_ID_BYTES));
	b = a;
	b.head_dim = 64;
	rpage_ns_id(&b, ib);
	ck_assert(memcmp(ia, ib, RPAGE_ID_BYTES));
	b = a;
	b.root[31] ^= 1;			/* another salt */
	rpage_ns_id(&b, ib);
	ck_assert(memcmp(ia, ib, RPAGE_ID_BYTES));
	b = a;
	b.key_scheme = 2;
	rpage_ns_id(&b, ib);
	ck_assert(memcmp(ia, ib, RPAGE_ID_BYTES));
	b = a;
	strcpy(b.model, "llama-3.1-70b");
	rpage_ns_id(&b, ib);
	ck_assert(memcmp(ia, ib, RPAGE_ID_BYTES));
}
END_TEST

START_TEST(test_rpage_key_names_identity_and_block)
{
	uint8_t id[RPAGE_ID_BYTES], key[KVP_KEY_BYTES];
	char k[RPAGE_KEY_LEN + 1];
	unsigned i;

	for (i = 0; i < RPAGE_ID_BYTES; i++)
		id[i] = (uint8_t)i;
	for (i = 0; i < KVP_KEY_BYTES; i++)
		key[i] = (uint8_t)(0xff - i);
	rpage_key(id, key, k);
	k[RPAGE_KEY_LEN] = '\0';
	ck_assert_str_eq(k, "kvp1:0001020304050607:"
			    "fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0efeeedecebeae9e8e7e6e5e4e3e2e1e0");
}
END_TEST

/* open_copy() - rvalue_open() of a copy of v (opening decrypts in place). */
static int open_copy(const uint8_t *v, size_t len, const uint8_t *sk, const uint8_t *id,
		     const uint8_t *key, uint64_t bytes)
{
	static uint8_t w[RPAGE_HDR + 8192];

	ck_assert_uint_le(len, sizeof(w));
	memcpy(w, v, len);
	return rvalue_open(w, len, w + RPAGE_HDR, sk, id, key, bytes);
}

START_TEST(test_rvalue_round_trip_and_every_mismatch_is_a_miss)
{
	enum { BYTES = 4096 };
	uint8_t id[RPAGE_ID_BYTES], key[KVP_KEY_BYTES], other[KVP_KEY_BYTES];
	uint8_t sk[RVALUE_KEY_BYTES], sk2[RVALUE_KEY_BYTES], page[BYTES];
	uint8_t *v = malloc(RPAGE_HDR + BYTES + 1), *w = malloc(RPAGE_HDR + BYTES + 1);
	struct spill_ns ns;
	unsigned i;

	ck_assert_int_eq(rvalue_init(), 0);
	rvalue_key("the same file on every machine, 32+ bytes", 41, sk);
	rvalue_key("another machine's file, 32 bytes or more", 41, sk2);
	test_ns(&ns);
	rpage_ns_id(&ns, id);
	memset(key, 7, sizeof(key));
	memset(other, 8, sizeof(other));
	for (i = 0; i < BYTES; i++)
		page[i] = (uint8_t)(i * 31 + 1);
	memcpy(v + RPAGE_HDR, page, BYTES);
	ck_assert_int_eq(rvalue_seal(v, sk, id, key, BYTES), 0);
	/* sealed: no 16 bytes of the page are left in the clear */
	for (i = 0; i + 16 <= BYTES; i += 16)
		ck_assert_msg(!memmem(v, RPAGE_HDR + BYTES, page + i, 16),
			      "page bytes %u.. are readable in the value", i);
	memcpy(w, v, RPAGE_HDR + BYTES);
	ck_assert_int_eq(rvalue_open(w, RPAGE_HDR + BYTES, w + RPAGE_HDR, sk, id, key, BYTES), 0);
	ck_assert_mem_eq(w + RPAGE_HDR, page, BYTES);
	/* the same page sealed again: another nonce, other bytes */
	memcpy(w + RPAGE_HDR, page, BYTES);
	ck_assert_int_eq(rvalue_seal(w, sk, id, key, BYTES), 0);
	ck_assert(memcmp(w, v, RPAGE_HDR + BYTES));
	/* another key or namespace, or another page size */
	ck_assert_int_eq(open_copy(v, RPAGE_HDR + BYTES, sk, id, other, BYTES), -ESTALE);
	id[0] ^= 1;
	ck_assert_int_eq(open_copy(v, RPAGE_HDR + BYTES, sk, id, key, BYTES), -ESTALE);
	id[0] ^= 1;
	/* cut short, grown, or nothing but a header */
	ck_assert_int_eq(open_copy(v, RPAGE_HDR + BYTES - 1, sk, id, key, BYTES), -EBADMSG);
	ck_assert_int_eq(open_copy(v, RPAGE_HDR + BYTES + 1, sk, id, key, BYTES), -EBADMSG);
	ck_assert_int_eq(open_copy(v, 10, sk, id, key, BYTES), -EBADMSG);
	/* a pool with another key file: the seal does not open */
	ck_assert_int_eq(open_copy(v, RPAGE_HDR + BYTES, sk2, id, key, BYTES), -EKEYREJECTED);
	/* one bit anywhere */
	for (i = 0; i < RPAGE_HDR + BYTES; i += 97) {
		memcpy(w, v, RPAGE_HDR + BYTES);
		w[i] ^= 0x10;
		ck_assert_msg(open_copy(w, RPAGE_HDR + BYTES, sk, id, key, BYTES) < 0,
			      "a flipped bit at byte %u was served", i);
	}
	memcpy(w, v, RPAGE_HDR + BYTES);
	w[RPAGE_HDR + 5] ^= 0x10;
	ck_assert_int_eq(open_copy(w, RPAGE_HDR + BYTES, sk, id, key, BYTES), -EKEYREJECTED);
	memcpy(w, v, RPAGE_HDR + BYTES);
	w[100] ^= 0x10;		/* in the nonce: authenticated too */
	ck_assert_int_eq(open_copy(w, RPAGE_HDR + BYTES, sk, id, key, BYTES), -EKEYREJECTED);
	free(v);
	free(w);
}
END_TEST

/* What a writer to Redis without the key can make: the old format (its
 * checksums were unkeyed: anyone could recompute them), or this one with
 * chosen bytes and any tag. Neither opens. */
START_TEST(test_rvalue_a_writer_without_the_key_cannot_forge_a_page)
{
	enum { BYTES = 1024 };
	uint8_t id[RPAGE_ID_BYTES], key[KVP_KEY_BYTES], sk[RVALUE_KEY_BYTES];
	uint8_t v[RPAGE_HDR + BYTES], w[RPAGE_HDR + BYTES];
	uint32_t one = 1;
	unsigned t;

	ck_assert_int_eq(rvalue_init(), 0);
	rvalue_key("a key file of thirty-two bytes or more", 38, sk);
	memset(id, 3, sizeof(id));
	memset(key, 4, sizeof(key));
	memset(v + RPAGE_HDR, 0x5a, BYTES);
	ck_assert_int_eq(rvalue_seal(v, sk, id, key, BYTES), 0);
	/* the old format: the header as it was, format 1 */
	memcpy(w, v, sizeof(w));
	memcpy(w + 8, &one, 4);
	ck_assert_int_eq(open_copy(w, sizeof(w), sk, id, key, BYTES), -EBADMSG);
	/* this format, its header copied from a real value, the data chosen,
	 * tags tried at random */
	for (t = 0; t < 64; t++) {
		memcpy(w, v, RPAGE_HDR);
		memset(w + RPAGE_HDR, 0x66, BYTES);
		for (unsigned k = 0; k < 16; k++)
			w[RPAGE_HDR - 16 + k] = (uint8_t)(rand() >> 7);
		ck_assert_int_eq(open_copy(w, sizeof(w), sk, id, key, BYTES), -EKEYREJECTED);
	}
	/* and the real value's tag over chosen data */
	memcpy(w, v, RPAGE_HDR);
	memset(w + RPAGE_HDR, 0x66, BYTES);
	ck_assert_int_eq(open_copy(w, sizeof(w), sk, id, key, BYTES), -EKEYREJECTED);
}
END_TEST

/* OpenSSL's ChaCha20-Poly1305 under HChaCha20's subkey (where kvpoold was
 * built with libcrypto) and libsodium's XChaCha20-Poly1305 make the same
 * values: each opens what the other sealed, and both refuse a forgery,
 * leaving zeros. */
START_TEST(test_rvalue_openssl_and_libsodium_seal_alike)
{
	enum { BYTES = 8192 };
	static uint8_t v[RPAGE_HDR + BYTES], w[RPAGE_HDR + BYTES], page[BYTES];
	uint8_t id[RPAGE_ID_BYTES], key[KVP_KEY_BYTES], sk[RVALUE_KEY_BYTES];
	unsigned i, by;

	ck_assert_int_eq(rvalue_init(), 0);
	rvalue_key("the same file on every machine, 32+ bytes", 41, sk);
	memset(id, 9, sizeof(id));
	memset(key, 10, sizeof(key));
	for (i = 0; i < BYTES; i++)
		page[i] = (uint8_t)(i * 7 + 3);
	for (by = 0; by < 2; by++) {
		rvalue_use_sodium = by;	/* seal with one, open with the other */
		memcpy(v + RPAGE_HDR, page, BYTES);
		ck_assert_int_eq(rvalue_seal(v, sk, id, key, BYTES), 0);
		rvalue_use_sodium = !by;
		memcpy(w, v, sizeof(v));
		ck_assert_int_eq(rvalue_open(w, sizeof(w), w + RPAGE_HDR, sk, id, key, BYTES), 0);
		ck_assert_mem_eq(w + RPAGE_HDR, page, BYTES);
		memcpy(w, v, sizeof(v));
		w[RPAGE_HDR + 100] ^= 1;
		ck_assert_int_eq(rvalue_open(w, sizeof(w), w + RPAGE_HDR, sk, id, key, BYTES),
				 -EKEYREJECTED);
		for (i = 0; i < BYTES; i++)
			ck_assert_msg(!w[RPAGE_HDR + i], "byte %u of a forged page is left", i);
	}
	rvalue_use_sodium = false;
}
END_TEST

static Suite *rcluster_suite(void)
{
	Suite *s = suite_create("rcluster");
	TCase *tc;

	tc = tcase_create("slots");
	tcase_add_test(tc, test_rcluster_crc16_is_xmodem);
	tcase_add_test(tc, test_rcluster_slots_are_the_servers);
	tcase_add_test(tc, test_rcluster_hash_tags);
	suite_add_tcase(s, tc);
	tc = tcase_create("url");
	tcase_add_test(tc, test_rcluster_url_cluster_seeds);
	tcase_add_test(tc, test_rcluster_url_auth_and_db);
	tcase_add_test(tc, test_rcluster_url_refuses_what_it_cannot_serve);
	suite_add_tcase(s, tc);
	tc = tcase_create("map");
	tcase_add_test(tc, test_rcluster_map_from_cluster_slots);
	tcase_add_test(tc, test_rcluster_map_reload_keeps_node_numbers);
	tcase_add_test(tc, test_rcluster_map_refuses_a_bad_reply_unchanged);
	tcase_add_test(tc, test_rcluster_map_refuses_more_entries_than_slots);
	tcase_add_test(tc, test_rcluster_map_takes_addresses_not_names);
	suite_add_tcase(s, tc);
	tc = tcase_create("redirects");
	tcase_add_test(tc, test_rcluster_redirects);
	tcase_add_test(tc, test_rcluster_other_errors_are_not_redirects);
	suite_add_tcase(s, tc);
	return s;
}

static Suite *rpage_suite(void)
{
	Suite *s = suite_create("rpage");
	TCase *tc = tcase_create("format");

	tcase_add_test(tc, test_rpage_identity_is_name_model_geometry_and_salt);
	tcase_add_test(tc, test_rpage_key_names_identity_and_block);
	tcase_add_test(tc, test_rvalue_round_trip_and_every_mismatch_is_a_miss);
	tcase_add_test(tc, test_rvalue_a_writer_without_the_key_cannot_forge_a_page);
	tcase_add_test(tc, test_rvalue_openssl_and_libsodium_seal_alike);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(rcluster_suite());
	int failed;

	srunner_add_suite(sr, rpage_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
