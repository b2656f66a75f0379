/* SPDX-License-Identifier: MIT */
/*
 * check_events.c - integration tests of KV events (kvpoold --kv-events): a
 * real kvpoold, a ZeroMQ subscriber and a replay client built with libzmq
 * and msgpack-c, as a router in C would be. They check the frames and the
 * batches byte by byte where vLLM's format fixes them, the replay
 * protocol, drops at a full queue, and that malformed replay requests
 * change nothing. tests/python/test_events.py checks the event sequences
 * of every tier move and decodes them with vLLM's own classes. Without
 * libzmq or msgpack-c this exits 77 (SKIP), saying why.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"

#ifdef HAVE_KV_EVENTS
#include <msgpack.h>
#include <zmq.h>

#define BT 16u

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/events",
};

struct ev_env {
	struct daemon d;
	char pub[160], rep[160];
	void *ctx, *sub;
};

/* start() - kvpoold with --kv-events and --kv-events-replay on ipc://
 * endpoints in its directory, extra flags after them, and a subscriber. */
static void start(struct ev_env *e, const char *const *extra)
{
	const char *args[24] = { "--pool-size", "4M", "--slab-size", "1M", "--kv-events",
				 e->pub, "--kv-events-replay", e->rep };
	int i = 8, hwm = 100000;

	daemon_dir(&e->d);
	snprintf(e->pub, sizeof(e->pub), "ipc://%s/events", e->d.dir);
	snprintf(e->rep, sizeof(e->rep), "ipc://%s/replay", e->d.dir);
	while (extra && *extra && i < 23)
		args[i++] = *extra++;
	args[i] = NULL;
	daemon_restart(&e->d, args);
	e->ctx = zmq_ctx_new();
	e->sub = zmq_socket(e->ctx, ZMQ_SUB);
	ck_assert_ptr_nonnull(e->sub);
	zmq_setsockopt(e->sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	ck_assert_int_eq(zmq_setsockopt(e->sub, ZMQ_SUBSCRIBE, "", 0), 0);
	ck_assert_int_eq(zmq_connect(e->sub, e->pub), 0);
}

static void finish(struct ev_env *e)
{
	zmq_close(e->sub);
	zmq_ctx_term(e->ctx);
	daemon_stop(&e->d);
}

/* A message of up to 8 frames, copied out. */
struct msg {
	int n;
	size_t len[8];
	uint8_t *f[8];
};

static void msg_free(struct msg *m)
{
	while (m->n)
		free(m->f[--m->n]);
}

/* recv_msg() - the next whole message of s within ms; false on timeout. */
static bool recv_msg(void *s, struct msg *m, int ms)
{
	zmq_pollitem_t it = { .socket = s, .events = ZMQ_POLLIN };
	int more;
	size_t ml = sizeof(more);

	memset(m, 0, sizeof(*m));
	if (zmq_poll(&it, 1, ms) <= 0)
		return false;
	do {
		zmq_msg_t part;

		zmq_msg_init(&part);
		ck_assert_int_ge(zmq_msg_recv(&part, s, 0), 0);
		ck_assert_int_lt(m->n, 8);
		m->len[m->n] = zmq_msg_size(&part);
		m->f[m->n] = malloc(m->len[m->n] + 1);
		memcpy(m->f[m->n], zmq_msg_data(&part), m->len[m->n]);
		m->n++;
		zmq_msg_close(&part);
		zmq_getsockopt(s, ZMQ_RCVMORE, &more, &ml);
	} while (more);
	return true;
}

static uint64_t be64(const uint8_t *b)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v = v << 8 | b[i];
	return v;
}

/* settle() - wait until every batch made so far was sent (STATS queues
 * the open one; queued_bytes counts until the publisher sent it);
 * returns the batches sent. */
static uint64_t settle(const char *sock)
{
	struct kvp_wire_stats st;
	int i;

	for (i = 0; i < 500; i++) {
		stats_of(sock, &st);
		if (!st.events.queued_bytes)
			return st.events.batches;
		usleep(10000);
	}
	ck_abort_msg("kv events: %llu bytes still queued after 5 s",
		     (unsigned long long)st.events.queued_bytes);
	return 0;
}

/* replay() - ask for the batches from start on through a DEALER (vLLM's
 * protocol: [b"", start] out; [b"", topic, seq, payload] per batch back,
 * then [b"", b"", -1, b""]); their sequence numbers into seqs. */
static int replay(struct ev_env *e, uint64_t start, uint64_t *seqs, int max)
{
	void *d = zmq_socket(e->ctx, ZMQ_DEALER);
	uint8_t req[8];
	struct msg m;
	int i, n = 0;

	for (i = 7; i >= 0; i--, start >>= 8)
		req[i] = (uint8_t)start;
	ck_assert_int_eq(zmq_connect(d, e->rep), 0);
	zmq_send(d, "", 0, ZMQ_SNDMORE);
	zmq_send(d, req, 8, 0);
	for (;;) {
		ck_assert_msg(recv_msg(d, &m, 10000), "no replay answer");
		ck_assert_int_eq(m.n, 4);
		ck_assert_uint_eq(m.len[0], 0);
		ck_assert_uint_eq(m.len[2], 8);
		if (be64(m.f[2]) == UINT64_MAX) {
			ck_assert_uint_eq(m.len[1], 0);
			ck_assert_uint_eq(m.len[3], 0);
			msg_free(&m);
			break;
		}
		if (n < max)
			seqs[n] = be64(m.f[2]);
		n++;
		msg_free(&m);
	}
	zmq_close(d);
	return n;
}

/* replayed() - batch seq as the replay socket gives it: [topic, seq,
 * payload] into *out (the caller frees it with msg_free()). */
static void replayed(struct ev_env *e, uint64_t seq, struct msg *out)
{
	void *d = zmq_socket(e->ctx, ZMQ_DEALER);
	uint8_t req[8];
	struct msg m;
	int i;

	for (i = 7; i >= 0; i--)
		req[i] = (uint8_t)(seq >> (8 * (7 - i)));
	ck_assert_int_eq(zmq_connect(d, e->rep), 0);
	zmq_send(d, "", 0, ZMQ_SNDMORE);
	zmq_send(d, req, 8, 0);
	ck_assert_msg(recv_msg(d, &m, 10000), "no replay answer");
	ck_assert_int_eq(m.n, 4);
	ck_assert_uint_eq(be64(m.f[2]), seq);
	free(m.f[0]);
	memmove(m.f, m.f + 1, 3 * sizeof(m.f[0]));
	memmove(m.len, m.len + 1, 3 * sizeof(m.len[0]));
	m.n = 3;
	*out = m;
	zmq_close(d);
}

/* map_get() - the value under key in a msgpack map, or NULL. */
static const msgpack_object *map_get(const msgpack_object *o, const char *key)
{
	uint32_t i;

	ck_assert_int_eq(o->type, MSGPACK_OBJECT_MAP);
	for (i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];

		if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
		    !memcmp(kv->key.via.str.ptr, key, strlen(key)))
			return &kv->val;
	}
	return NULL;
}

static bool str_is(const msgpack_object *o, const char *s)
{
	return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       !memcmp(o->via.str.ptr, s, strlen(s));
}

/* the hash vLLM's events give a sha256 key: its last 8 bytes, big-endian */
static uint64_t vhash(const kvp_key *k)
{
	return be64(k->b + KVP_KEY_BYTES - 8);
}

START_TEST(test_events_a_publish_is_one_blockstored_as_vllm_sends_it)
{
	static const char *const none[] = { NULL };
	uint32_t tokens[3 * BT];
	kvp_page pages[3], canon[3];
	kvp_key keys[3];
	struct ev_env e;
	msgpack_unpacked up;
	const msgpack_object *b, *ev, *v;
	struct msg m;
	kvp_client *c;
	char topic[256], host[128];
	uint32_t i;

	start(&e, none);
	for (i = 0; i < 3 * BT; i++)
		tokens[i] = 500 + i;
	ck_assert_int_eq(kvp_connect(e.d.sock, "ev", &geo, &c), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, tokens, 3 * BT, NULL, 0, keys), 3);
	ck_assert_int_eq(kvp_alloc(c, 3, pages), 0);
	ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, pages, keys, tokens, 3,
					    KVP_PRIO_NORMAL, canon), 0);
	ck_assert_int_eq(kvp_release(c, pages, 3), 0);
	/* the same first block again (dedup): no event */
	ck_assert_int_eq(kvp_alloc(c, 1, pages), 0);
	ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, pages, keys, tokens, 1,
					    KVP_PRIO_NORMAL, canon), 0);
	ck_assert_uint_eq(canon[0] != pages[0], 1);
	ck_assert_int_eq(kvp_release(c, canon, 1), 0);
	ck_assert_int_eq(kvp_release(c, pages, 1), 0);
	ck_assert_uint_eq(settle(e.d.sock), 1);

	/* batch 0 from the replay socket (the subscriber may have joined too
	 * late for it: ZeroMQ's slow joiner) */
	replayed(&e, 0, &m);
	gethostname(host, sizeof(host));
	snprintf(topic, sizeof(topic), "kv@%s|ev@test/events", host);
	ck_assert_uint_eq(m.len[0], strlen(topic));
	ck_assert_int_eq(memcmp(m.f[0], topic, m.len[0]), 0);
	ck_assert_uint_eq(m.len[1], 8);
	ck_assert_uint_eq(be64(m.f[1]), 0);
	msgpack_unpacked_init(&up);
	ck_assert_int_eq(msgpack_unpack_next(&up, (const char *)m.f[2], m.len[2], NULL),
			 MSGPACK_UNPACK_SUCCESS);
	b = &up.data;
	ck_assert_int_eq(b->type, MSGPACK_OBJECT_ARRAY);
	ck_assert_uint_eq(b->via.array.size, 3);
	ck_assert_int_eq(b->via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
	ck_assert_int_eq(b->via.array.ptr[2].type, MSGPACK_OBJECT_NIL);
	ck_assert_uint_eq(b->via.array.ptr[1].via.array.size, 1);
	ev = &b->via.array.ptr[1].via.array.ptr[0];
	ck_assert(str_is(map_get(ev, "type"), "BlockStored"));
	ck_assert(str_is(map_get(ev, "medium"), "CPU"));
	v = map_get(ev, "block_hashes");
	ck_assert_uint_eq(v->via.array.size, 3);
	for (i = 0; i < 3; i++)
		ck_assert_uint_eq(v->via.array.ptr[i].via.u64, vhash(&keys[i]));
	ck_assert_int_eq(map_get(ev, "parent_block_hash")->type, MSGPACK_OBJECT_NIL);
	v = map_get(ev, "token_ids");
	ck_assert_uint_eq(v->via.array.size, 3 * BT);
	for (i = 0; i < 3 * BT; i++)
		ck_assert_uint_eq(v->via.array.ptr[i].via.u64, tokens[i]);
	ck_assert_uint_eq(map_get(ev, "block_size")->via.u64, BT);
	ck_assert_int_eq(map_get(ev, "lora_id")->type, MSGPACK_OBJECT_NIL);
	ck_assert_int_eq(map_get(ev, "lora_name")->type, MSGPACK_OBJECT_NIL);
	ck_assert_uint_eq(ev->via.map.size, 8);
	msgpack_unpacked_destroy(&up);
	msg_free(&m);

	/* the subscriber, long connected now, gets the next batch live:
	 * evicting the three, leaf first, is one BlockRemoved */
	ck_assert_int_eq(kvp_evict(c, "ev", 0), 3);
	do {
		ck_assert_msg(recv_msg(e.sub, &m, 5000), "no live batch");
		i = (uint32_t)be64(m.f[1]);
		if (i == 0)
			msg_free(&m);
	} while (i == 0);
	ck_assert_uint_eq(i, 1);
	msgpack_unpacked_init(&up);
	ck_assert_int_eq(msgpack_unpack_next(&up, (const char *)m.f[2], m.len[2], NULL),
			 MSGPACK_UNPACK_SUCCESS);
	ev = &up.data.via.array.ptr[1].via.array.ptr[0];
	ck_assert(str_is(map_get(ev, "type"), "BlockRemoved"));
	ck_assert(str_is(map_get(ev, "medium"), "CPU"));
	v = map_get(ev, "block_hashes");
	ck_assert_uint_eq(v->via.array.size, 3);
	ck_assert_uint_eq(v->via.array.ptr[0].via.u64, vhash(&keys[2]));
	ck_assert_uint_eq(ev->via.map.size, 3);
	msgpack_unpacked_destroy(&up);
	msg_free(&m);
	kvp_close(c);
	finish(&e);
}
END_TEST

START_TEST(test_events_a_publish_without_token_ids_has_empty_ones)
{
	static const char *const none[] = { NULL };
	uint32_t tokens[2 * BT] = { 0 };
	kvp_page pages[2], canon[2];
	const msgpack_object *ev, *v;
	msgpack_unpacked up;
	kvp_key keys[2];
	struct ev_env e;
	struct msg m;
	kvp_client *c;

	start(&e, none);
	ck_assert_int_eq(kvp_connect(e.d.sock, "ev", &geo, &c), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, tokens, 2 * BT, NULL, 0, keys), 2);
	ck_assert_int_eq(kvp_alloc(c, 2, pages), 0);
	ck_assert_int_eq(kvp_publish(c, NULL, pages, keys, 2, KVP_PRIO_NORMAL, canon), 0);
	ck_assert_int_eq(kvp_release(c, pages, 2), 0);
	ck_assert_uint_eq(settle(e.d.sock), 1);
	replayed(&e, 0, &m);
	msgpack_unpacked_init(&up);
	ck_assert_int_eq(msgpack_unpack_next(&up, (const char *)m.f[2], m.len[2], NULL),
			 MSGPACK_UNPACK_SUCCESS);
	ev = &up.data.via.array.ptr[1].via.array.ptr[0];
	ck_assert(str_is(map_get(ev, "type"), "BlockStored"));
	v = map_get(ev, "block_hashes");
	ck_assert_uint_eq(v->via.array.size, 2);
	ck_assert_uint_eq(map_get(ev, "token_ids")->via.array.size, 0);
	msgpack_unpacked_destroy(&up);
	msg_free(&m);
	kvp_close(c);
	finish(&e);
}
END_TEST

START_TEST(test_events_replay_gives_exactly_the_batches_from_n_on)
{
	static const char *const none[] = { NULL };
	uint64_t seqs[16], n, k;
	uint32_t tokens[BT];
	kvp_page page, canon;
	struct ev_env e;
	kvp_client *c;
	kvp_key key;
	int got, i;

	start(&e, none);
	ck_assert_int_eq(kvp_connect(e.d.sock, "ev", &geo, &c), 0);
	for (i = 0; i < 5; i++) {	/* one batch each: STATS closes it */
		for (k = 0; k < BT; k++)
			tokens[k] = (uint32_t)(i * 100 + k);
		ck_assert_int_eq(kvp_block_keys(c, NULL, tokens, BT, NULL, 0, &key), 1);
		ck_assert_int_eq(kvp_alloc(c, 1, &page), 0);
		ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, &page, &key, tokens, 1,
						    KVP_PRIO_NORMAL, &canon), 0);
		ck_assert_int_eq(kvp_release(c, &page, 1), 0);
		settle(e.d.sock);
	}
	n = settle(e.d.sock);
	ck_assert_uint_eq(n, 5);
	for (k = 0; k <= n + 1; k++) {
		got = replay(&e, k, seqs, 16);
		ck_assert_int_eq(got, k < n ? (int)(n - k) : 0);
		for (i = 0; i < got; i++)
			ck_assert_uint_eq(seqs[i], k + (uint64_t)i);
	}
	kvp_close(c);
	finish(&e);
}
END_TEST

START_TEST(test_events_malformed_replay_requests_change_nothing)
{
	static const char *const none[] = { NULL };
	static const char big[300] = { 0 };
	struct kvp_wire_stats st;
	uint64_t seqs[4];
	struct ev_env e;
	void *d;

	start(&e, none);
	d = zmq_socket(e.ctx, ZMQ_DEALER);
	ck_assert_int_eq(zmq_connect(d, e.rep), 0);
	zmq_send(d, "", 0, ZMQ_SNDMORE);	/* a 3-byte sequence number */
	zmq_send(d, "abc", 3, 0);
	zmq_send(d, "xyz", 3, 0);		/* no delimiter */
	zmq_send(d, "", 0, ZMQ_SNDMORE);	/* too many frames */
	zmq_send(d, "12345678", 8, ZMQ_SNDMORE);
	zmq_send(d, "more", 4, 0);
	zmq_send(d, "", 0, ZMQ_SNDMORE);	/* a frame past the buffer */
	zmq_send(d, big, sizeof(big), 0);
	zmq_close(d);
	/* the publisher still answers a good one, and the pool serves */
	ck_assert_int_eq(replay(&e, 0, seqs, 4), 0);
	stats_of(e.d.sock, &st);
	ck_assert_uint_eq(st.events.enabled, 1);
	ck_assert_uint_eq(st.events.replays, 1);
	finish(&e);
}
END_TEST

START_TEST(test_events_a_full_queue_drops_counts_and_never_blocks)
{
	static const char *const tiny[] = { "--kv-events-queue", "1", NULL };
	struct kvp_wire_stats st;
	uint32_t tokens[BT] = { 0 };
	kvp_page page, canon;
	struct ev_env e;
	kvp_client *c;
	kvp_key key;
	char log[8192];
	int i;

	start(&e, tiny);
	ck_assert_int_eq(kvp_connect(e.d.sock, "ev", &geo, &c), 0);
	for (i = 0; i < 50; i++) {
		tokens[0] = (uint32_t)i;
		ck_assert_int_eq(kvp_block_keys(c, NULL, tokens, BT, NULL, 0, &key), 1);
		ck_assert_int_eq(kvp_alloc(c, 1, &page), 0);
		ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, &page, &key, tokens, 1,
						    KVP_PRIO_NORMAL, &canon), 0);
		ck_assert_int_eq(kvp_release(c, &page, 1), 0);
	}
	stats_of(e.d.sock, &st);
	ck_assert_uint_ge(st.events.dropped_batches, 1);
	ck_assert_uint_ge(st.events.dropped_events, st.events.dropped_batches);
	ck_assert_uint_eq(st.events.batches, 0);
	ck_assert_uint_eq(st.events.queued_bytes, 0);
	read_file(e.d.log, log, sizeof(log));
	ck_assert_ptr_nonnull(strstr(log, "kv events: the queue of 1 bytes is full"));
	ck_assert_ptr_null(strstr(strstr(log, "is full") + 1, "is full"));
	kvp_close(c);
	finish(&e);
}
END_TEST

START_TEST(test_events_bad_endpoints_stop_the_start_naming_them)
{
	const char *argv[] = { harness_kvpoold(), "--foreground", "--socket",
			       "/tmp/kvpool-events-no.sock", "--kv-events", "nonsense://x",
			       NULL };
	char out[4096];
	int status;

	status = run_cmd(argv, out, sizeof(out));
	ck_assert(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
	ck_assert_msg(strstr(out, "--kv-events nonsense://x: cannot bind"), "%s", out);
	argv[4] = "--kv-events-format";
	argv[5] = "tagged";
	status = run_cmd(argv, out, sizeof(out));
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	ck_assert_msg(strstr(out, "kv-events-format"), "%s", out);
}
END_TEST

/* publish_one() - publish one block (tokens from first) into namespace ns
 * of model through sock, and let it go. */
static void publish_one(const char *sock, const char *ns, const char *model, uint32_t first)
{
	kvp_geometry g = geo;
	uint32_t tokens[BT];
	kvp_page page, canon;
	kvp_key key;
	kvp_client *c;
	uint32_t i;

	g.model = model;
	for (i = 0; i < BT; i++)
		tokens[i] = first + i;
	ck_assert_int_eq(kvp_connect(sock, ns, &g, &c), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, tokens, BT, NULL, 0, &key), 1);
	ck_assert_int_eq(kvp_alloc(c, 1, &page), 0);
	ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, &page, &key, tokens, 1,
					    KVP_PRIO_NORMAL, &canon), 0);
	ck_assert_int_eq(kvp_release(c, &page, 1), 0);
	kvp_close(c);
}

/* Replay peers that ask and never read once grew kvpoold by peers x ring
 * (60 peers: +1.5 GiB with a 13 MB ring). Batches now go out as
 * references, one replay per peer, and all replays hold the ring's budget
 * at most: 100 such peers leave kvpoold within a few MB of where it was,
 * and once they are gone a router is replayed to as before. */
START_TEST(test_events_replay_peers_that_never_read_leave_kvpoold_bounded)
{
	static const char *const extra[] = { "--kv-events-queue", "4M",
					     "--kv-events-replay-batches", "100000", NULL };
	enum { PEERS = 100, CHAIN = 64, CHAINS = 400 };
	static uint32_t tokens[CHAIN * BT];
	static kvp_page pages[CHAIN], canon[CHAIN];
	static kvp_key keys[CHAIN];
	void *peer[PEERS];
	uint64_t seqs[4];
	struct ev_env e;
	kvp_client *c;
	long before, after;
	int i, k, n, hwm = 1, linger = 0;

	start(&e, extra);
	ck_assert_int_eq(kvp_connect(e.d.sock, "ev", &geo, &c), 0);
	for (i = 0; i < CHAINS; i++) {	/* about 4 MB of batches */
		for (k = 0; k < CHAIN * (int)BT; k++)
			tokens[k] = (uint32_t)(i * 100000 + k);
		ck_assert_int_eq(kvp_block_keys(c, NULL, tokens, CHAIN * BT, NULL, 0, keys),
				 CHAIN);
		ck_assert_int_eq(kvp_alloc(c, CHAIN, pages), 0);
		ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, pages, keys, tokens, CHAIN,
						    KVP_PRIO_NORMAL, canon), 0);
		ck_assert_int_eq(kvp_release(c, pages, CHAIN), 0);
	}
	kvp_close(c);
	settle(e.d.sock);
	before = proc_kib(e.d.pid, "VmRSS");
	for (i = 0; i < PEERS; i++) {	/* ask, and never read */
		uint8_t req[8] = { 0 };

		peer[i] = zmq_socket(e.ctx, ZMQ_DEALER);
		zmq_setsockopt(peer[i], ZMQ_RCVHWM, &hwm, sizeof(hwm));
		zmq_setsockopt(peer[i], ZMQ_LINGER, &linger, sizeof(linger));
		ck_assert_int_eq(zmq_connect(peer[i], e.rep), 0);
		zmq_send(peer[i], "", 0, ZMQ_SNDMORE);
		zmq_send(peer[i], req, 8, 0);
	}
	sleep(3);
	after = proc_kib(e.d.pid, "VmRSS");
	if (getenv("KVP_TEST_VERBOSE"))
		fprintf(stderr, "kvpoold RSS %ld KiB, %ld KiB with %d replay peers\n", before,
			after, PEERS);
	ck_assert_msg(after - before < 24 * 1024, "kvpoold grew %ld KiB (from %ld) with %d "
		      "replay peers that do not read", after - before, before, PEERS);
	for (i = 0; i < PEERS; i++)
		zmq_close(peer[i]);
	sleep(1);	/* their queues go, and the budget with them */
	n = replay(&e, 0, seqs, 4);
	ck_assert_int_gt(n, 0);
	ck_assert_uint_eq(seqs[0], 0);
	finish(&e);
}
END_TEST

/* publish_tokens() - one block of tokens first.. into namespace ns of
 * model through sock; its key into *key. No assert (children call it):
 * 0, or the step that failed. */
static int publish_tokens(const char *sock, const char *ns, const char *model, uint32_t first,
			  kvp_key *key)
{
	kvp_geometry g = geo;
	uint32_t tokens[BT], i;
	kvp_page page, canon;
	kvp_client *c;

	g.model = model;
	for (i = 0; i < BT; i++)
		tokens[i] = first + i;
	if (kvp_connect(sock, ns, &g, &c) != 0)
		return 1;
	if (kvp_block_keys(c, NULL, tokens, BT, NULL, 0, key) != 1 || kvp_alloc(c, 1, &page) ||
	    kvp_publish_tokens(c, NULL, NULL, &page, key, tokens, 1, KVP_PRIO_NORMAL, &canon) ||
	    kvp_release(c, &page, 1))
		return 2;
	kvp_close(c);
	return 0;
}

/*
 * A tenant: a process of nobody's that publishes on request a block into
 * evil (model M, prod's) and one into evilx (model Mx, which extends
 * prod's). It is forked before the test makes its ZeroMQ context: a child
 * forked while the context's threads run may find a lock one of them held
 * (ASan's allocator's), and wait on it for ever; CI saw one hang so.
 */
struct tenant {
	pid_t pid;
	int req, ack;		/* struct tenant_req down, a status byte back */
};

struct tenant_req {
	uint32_t first;
	char sock[sizeof(((struct daemon *)0)->sock)];
};

static void tenant_start(struct tenant *t)
{
	int rq[2], ak[2];

	ck_assert_int_eq(pipe(rq), 0);
	ck_assert_int_eq(pipe(ak), 0);
	fflush(NULL);
	t->pid = fork();
	ck_assert_int_ge(t->pid, 0);
	if (t->pid == 0) {
		struct tenant_req r;
		kvp_key k;
		uint8_t st;

		close(rq[1]);
		close(ak[0]);
		become_nobody();
		while (read(rq[0], &r, sizeof(r)) == (ssize_t)sizeof(r)) {
			st = publish_tokens(r.sock, "evil", "org/Model-8B", r.first, &k) ? 10
			     : publish_tokens(r.sock, "evilx", "org/Model-8Bx", r.first + 1, &k)
				     ? 11 : 0;
			if (write(ak[1], &st, 1) != 1)
				_exit(2);
		}
		_exit(0);	/* the test closed its end */
	}
	close(rq[0]);
	close(ak[1]);
	t->req = rq[1];
	t->ack = ak[0];
}

/* tenant() - t publishes its two blocks through sock from tokens first on. */
static void tenant(struct tenant *t, const char *sock, uint32_t first)
{
	struct tenant_req r = { .first = first };
	uint8_t st = 0xff;

	snprintf(r.sock, sizeof(r.sock), "%s", sock);
	ck_assert_int_eq(write(t->req, &r, sizeof(r)), (ssize_t)sizeof(r));
	ck_assert_int_eq(read(t->ack, &st, 1), 1);
	ck_assert_msg(st == 0, "nobody's publish failed at step %u", st);
}

static void tenant_stop(struct tenant *t)
{
	close(t->req);
	close(t->ack);
	child_wait(t->pid);
}

/* only_prods() - every message s holds within ms is on topic and
 * announces only blocks of keys[0..n); returns how many of the keys
 * a BlockStored announced. */
static unsigned only_prods(void *s, const char *topic, const kvp_key *keys, unsigned n, int ms)
{
	msgpack_unpacked up;
	unsigned seen = 0, i, j, k;
	struct msg m;

	while (recv_msg(s, &m, ms)) {
		const msgpack_object *evs;

		ck_assert_msg(m.len[0] == strlen(topic) && !memcmp(m.f[0], topic, m.len[0]),
			      "a subscriber of '%s' got a batch of '%.*s'", topic, (int)m.len[0],
			      (const char *)m.f[0]);
		msgpack_unpacked_init(&up);
		ck_assert_int_eq(msgpack_unpack_next(&up, (const char *)m.f[2], m.len[2], NULL),
				 MSGPACK_UNPACK_SUCCESS);
		evs = &up.data.via.array.ptr[1];
		for (i = 0; i < evs->via.array.size; i++) {
			const msgpack_object *h = map_get(&evs->via.array.ptr[i], "block_hashes");

			for (j = 0; h && j < h->via.array.size; j++) {
				for (k = 0; k < n && vhash(&keys[k]) != h->via.array.ptr[j].via.u64; k++)
					;
				ck_assert_msg(k < n, "prod's topic announced a block prod never had");
				seen |= 1u << k;
			}
		}
		msgpack_unpacked_destroy(&up);
		msg_free(&m);
	}
	for (k = 0, i = 0; k < n; k++)
		i += (seen >> k) & 1;
	return i;
}

/*
 * No user may keep another from a model, and no subscriber of one
 * namespace's topic hears another namespace, whatever the models are
 * called. Before: once nobody had made namespace evil with model M, root
 * could not make prod with M (PERM: first come, first served); and with
 * its own model Mx that extends M, nobody's events reached a subscriber
 * of prod's exact topic (ZeroMQ matches by prefix). Now every topic holds
 * its namespace, delimited, and the admin's rule gives prod vLLM's
 * kv@HOST@MODEL alone. Run with the default template, then with the rule.
 */
START_TEST(test_events_no_user_keeps_another_from_a_model_or_speaks_on_its_topic)
{
	static const char *const plain[] = { "--socket-group", "nogroup", "--access",
					     "evil read,write 65534", "--access",
					     "evilx read,write 65534", NULL };
	static const char *const ruled[] = { "--socket-group", "nogroup", "--access",
					     "evil read,write 65534", "--access",
					     "evilx read,write 65534", "--kv-events-ns-topic",
					     "prod kv@{host}@{model}", NULL };
	const char *const *how[] = { plain, ruled };
	char host[256], topic[512], logged[600];
	kvp_key keys[32];
	unsigned n, t;
	struct tenant nobody;
	struct ev_env e;
	void *s;

	gethostname(host, sizeof(host));
	tenant_start(&nobody);		/* before any ZeroMQ context */
	for (t = 0; t < 2; t++) {
		start(&e, how[t]);
		ck_assert_int_eq(chmod(e.d.dir, 0711), 0);
		tenant(&nobody, e.d.sock, 100);		/* evil takes model M first */
		snprintf(topic, sizeof(topic), t ? "kv@%s@org/Model-8B" : "kv@%s|prod@org/Model-8B",
			 host);
		s = zmq_socket(e.ctx, ZMQ_SUB);
		ck_assert_int_eq(zmq_setsockopt(s, ZMQ_SUBSCRIBE, topic, strlen(topic)), 0);
		ck_assert_int_eq(zmq_connect(s, e.pub), 0);
		/* root makes prod with M, and publishes until the subscriber hears
		 * it (ZeroMQ's slow joiner) */
		for (n = 0; n < 30; n++) {
			ck_assert_int_eq(publish_tokens(e.d.sock, "prod", "org/Model-8B",
							1000 + n * BT, &keys[n]), 0);
			if (n == 0) {
				snprintf(logged, sizeof(logged), "namespace 'prod': KV events on "
					 "topic '%s'", topic);
				wait_log(&e.d, logged);
			}
			settle(e.d.sock);
			if (only_prods(s, topic, keys, n + 1, 200))
				break;
		}
		ck_assert_uint_lt(n, 30);
		tenant(&nobody, e.d.sock, 300);		/* the tenants publish again */
		ck_assert_int_eq(publish_tokens(e.d.sock, "prod", "org/Model-8B", 5000,
						&keys[++n]), 0);
		settle(e.d.sock);
		ck_assert_uint_eq(only_prods(s, topic, keys, n + 1, 500), 1);	/* the last */
		zmq_close(s);
		finish(&e);
	}
	tenant_stop(&nobody);
}
END_TEST

/* ipc:// sockets were 0600 under the daemon's umask, so a router running
 * as another user could not subscribe, as docs/events.md says it may. */
START_TEST(test_events_a_router_of_the_ipc_group_subscribes_as_another_user)
{
	char pub[160];
	const char *args[] = { "--pool-size", "4M", "--slab-size", "1M", "--kv-events", pub,
			       "--kv-events-ipc-group", "nogroup", NULL };
	struct daemon d;
	struct stat st;
	int status, i;
	pid_t pid;

	/* no ZeroMQ context in this process before the fork: the child makes
	 * the only one (a context's threads do not survive a fork, and one
	 * made after it in a child of a process that had one may never
	 * connect) */
	daemon_dir(&d);
	snprintf(pub, sizeof(pub), "ipc://%s/events", d.dir);
	daemon_restart(&d, args);
	ck_assert_int_eq(chmod(d.dir, 0711), 0);	/* the socket is its mode's */
	ck_assert_int_eq(stat(pub + 6, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0660);
	ck_assert_uint_eq(st.st_gid, harness_nogroup_gid);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		void *ctx, *sub;
		struct msg m;

		become_nobody();	/* keeps nogroup */
		ctx = zmq_ctx_new();
		sub = zmq_socket(ctx, ZMQ_SUB);
		expect(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0) == 0, 10);
		expect(zmq_connect(sub, pub) == 0, 11);
		expect(recv_msg(sub, &m, 40000), 12);	/* a batch came */
		expect(m.n == 3, 13);
		_exit(0);
	}
	/* a batch every 300 ms until the child has one: its subscription
	 * reaches the publisher some time after it connects (ZeroMQ's slow
	 * joiner), later still on a loaded machine */
	for (i = 0; i < 120; i++) {
		usleep(300000);
		publish_one(d.sock, "ev", "test/events", 1000 + i * BT);
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
	}
	if (i == 120)
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child step %d",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	daemon_stop(&d);
}
END_TEST

static Suite *events_suite(void)
{
	Suite *s = suite_create("events");
	TCase *tc = tcase_create("kv events");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_events_a_publish_is_one_blockstored_as_vllm_sends_it);
	tcase_add_test(tc, test_events_a_publish_without_token_ids_has_empty_ones);
	tcase_add_test(tc, test_events_replay_gives_exactly_the_batches_from_n_on);
	tcase_add_test(tc, test_events_malformed_replay_requests_change_nothing);
	tcase_add_test(tc, test_events_a_full_queue_drops_counts_and_never_blocks);
	tcase_add_test(tc, test_events_bad_endpoints_stop_the_start_naming_them);
	tcase_add_test(tc, test_events_replay_peers_that_never_read_leave_kvpoold_bounded);
	suite_add_tcase(s, tc);
	if (!harness_have_nobody()) {
		printf("check_events: the tests of another user need root and the users "
		       "nobody and nogroup; not run\n");
		return s;
	}
	tc = tcase_create("another user");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_events_no_user_keeps_another_from_a_model_or_speaks_on_its_topic);
	tcase_add_test(tc, test_events_a_router_of_the_ipc_group_subscribes_as_another_user);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(events_suite());
}

#else /* !HAVE_KV_EVENTS */

int main(void)
{
	printf("SKIP: kvpool was built without libzmq or msgpack-c (apt-get install "
	       "libzmq3-dev libmsgpack-dev, then configure again): no --kv-events\n");
	return 77;
}

#endif /* HAVE_KV_EVENTS */
