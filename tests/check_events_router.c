/* SPDX-License-Identifier: MIT */
/*
 * check_events_router.c - integration tests of the router streams of the
 * KV events (kvpoold --kv-events-router 'NAMESPACE PUB[,REPLAY]'): one
 * namespace's events for a router that reads one engine's stream, as
 * vllm-router's kv_aware policy does. A real kvpoold, a ZeroMQ subscriber
 * and replay client built with libzmq and msgpack-c check what such a
 * router needs: topic "" on every message, sequence numbers of the
 * namespace's own from 0 with no gap while other namespaces publish, no
 * block it cannot key (no token ids), no remote tier's medium, the replay
 * protocol, and the stream without --kv-events. Without libzmq or
 * msgpack-c this exits 77 (SKIP), saying why.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"

#ifdef HAVE_KV_EVENTS
#include <msgpack.h>
#include <zmq.h>

#define BT 16u
#define NS "llama"		/* the namespace with a router stream */
#define OTHER "other"		/* one without */

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/router",
};

struct rt_env {
	struct daemon d;
	char pub[160], rep[160];	/* the main stream's */
	char rpub[160], rrep[160];	/* NS's router stream's */
	char rule[400];
	void *ctx, *sub;		/* sub: the router stream's */
};

/* start() - kvpoold with NS's router stream on ipc:// endpoints in its
 * directory, the main stream too when main, extra flags after them, and
 * a subscriber of the router stream. */
static void start(struct rt_env *e, bool main_stream, const char *const *extra)
{
	const char *args[32] = { "--pool-size", "4M", "--slab-size", "1M",
				 "--kv-events-router", e->rule };
	int i = 6, hwm = 100000;

	daemon_dir(&e->d);
	snprintf(e->pub, sizeof(e->pub), "ipc://%s/events", e->d.dir);
	snprintf(e->rep, sizeof(e->rep), "ipc://%s/replay", e->d.dir);
	snprintf(e->rpub, sizeof(e->rpub), "ipc://%s/router", e->d.dir);
	snprintf(e->rrep, sizeof(e->rrep), "ipc://%s/router-replay", e->d.dir);
	snprintf(e->rule, sizeof(e->rule), NS " %s,%s", e->rpub, e->rrep);
	if (main_stream) {
		args[i++] = "--kv-events";
		args[i++] = e->pub;
		args[i++] = "--kv-events-replay";
		args[i++] = e->rep;
	}
	while (extra && *extra && i < 31)
		args[i++] = *extra++;
	args[i] = NULL;
	daemon_restart(&e->d, args);
	e->ctx = zmq_ctx_new();
	e->sub = zmq_socket(e->ctx, ZMQ_SUB);
	ck_assert_ptr_nonnull(e->sub);
	zmq_setsockopt(e->sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	ck_assert_int_eq(zmq_setsockopt(e->sub, ZMQ_SUBSCRIBE, "", 0), 0);
	ck_assert_int_eq(zmq_connect(e->sub, e->rpub), 0);
}

static void finish(struct rt_env *e)
{
	zmq_close(e->sub);
	zmq_ctx_term(e->ctx);
	daemon_stop(&e->d);
}

/* --- reading a stream ------------------------------------------------- */

static uint64_t be64(const uint8_t *b)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v = v << 8 | b[i];
	return v;
}

/* the hash vLLM's events give a sha256 key: its last 8 bytes, big-endian */
static uint64_t vhash(const kvp_key *k)
{
	return be64(k->b + KVP_KEY_BYTES - 8);
}

/* An event as a batch carried it: enough to check what a router sees. */
struct got_ev {
	char type[20];		/* BlockStored, BlockRemoved, AllBlocksCleared */
	char medium[12];	/* "" for AllBlocksCleared */
	unsigned nhashes;
	uint64_t hash[8];
	unsigned nids;		/* token ids (BlockStored) */
};

/* A batch: its topic frame's length, sequence number and events. */
struct got {
	size_t topic_len;
	uint64_t seq;
	unsigned n;
	struct got_ev ev[16];
};

/* copy_str() - msgpack string o into out (len bytes). */
static void copy_str(const msgpack_object *o, char *out, size_t len)
{
	ck_assert_int_eq(o->type, MSGPACK_OBJECT_STR);
	snprintf(out, len, "%.*s", (int)o->via.str.size, o->via.str.ptr);
}

/* decode() - payload p (len bytes), a map-encoded KVEventBatch, into g. */
static void decode(const void *p, size_t len, struct got *g)
{
	msgpack_unpacked up;
	const msgpack_object *evs;
	uint32_t i, k;

	msgpack_unpacked_init(&up);
	ck_assert_int_eq(msgpack_unpack_next(&up, p, len, NULL), MSGPACK_UNPACK_SUCCESS);
	ck_assert_int_eq(up.data.type, MSGPACK_OBJECT_ARRAY);
	ck_assert_uint_eq(up.data.via.array.size, 3);
	evs = &up.data.via.array.ptr[1];
	ck_assert_uint_le(evs->via.array.size, 16);
	g->n = evs->via.array.size;
	for (i = 0; i < g->n; i++) {
		const msgpack_object *ev = &evs->via.array.ptr[i];
		struct got_ev *x = &g->ev[i];

		memset(x, 0, sizeof(*x));
		ck_assert_int_eq(ev->type, MSGPACK_OBJECT_MAP);
		for (k = 0; k < ev->via.map.size; k++) {
			const msgpack_object_kv *kv = &ev->via.map.ptr[k];
			const char *key = kv->key.via.str.ptr;
			size_t kl = kv->key.via.str.size;
			uint32_t j;

			if (kl == 4 && !memcmp(key, "type", 4))
				copy_str(&kv->val, x->type, sizeof(x->type));
			else if (kl == 6 && !memcmp(key, "medium", 6))
				copy_str(&kv->val, x->medium, sizeof(x->medium));
			else if (kl == 9 && !memcmp(key, "token_ids", 9))
				x->nids = kv->val.via.array.size;
			else if (kl == 12 && !memcmp(key, "block_hashes", 12)) {
				ck_assert_uint_le(kv->val.via.array.size, 8);
				x->nhashes = kv->val.via.array.size;
				for (j = 0; j < x->nhashes; j++)
					x->hash[j] = kv->val.via.array.ptr[j].via.u64;
			}
		}
	}
	msgpack_unpacked_destroy(&up);
}

/* recv_frames() - the next whole message of s within ms into f (up to 5
 * frames of up to 64 KiB, lengths in len); its frame count, 0 on timeout. */
static int recv_frames(void *s, uint8_t (*f)[65536], size_t *len, int ms)
{
	zmq_pollitem_t it = { .socket = s, .events = ZMQ_POLLIN };
	int n = 0, more, got;
	size_t ml = sizeof(more);

	if (zmq_poll(&it, 1, ms) <= 0)
		return 0;
	do {
		ck_assert_int_lt(n, 5);
		got = zmq_recv(s, f[n], sizeof(f[n]), 0);
		ck_assert_int_ge(got, 0);
		ck_assert_int_le(got, (int)sizeof(f[n]));
		len[n++] = (size_t)got;
		zmq_getsockopt(s, ZMQ_RCVMORE, &more, &ml);
	} while (more);
	return n;
}

static uint8_t frames[5][65536];

/* live() - the batches subscriber s got within ms of silence, into g (at
 * most max); how many. */
static int live(void *s, struct got *g, int max, int ms)
{
	size_t len[5];
	int n = 0, k;

	while ((k = recv_frames(s, frames, len, ms)) > 0) {
		ck_assert_int_eq(k, 3);
		ck_assert_int_lt(n, max);
		ck_assert_uint_eq(len[1], 8);
		g[n].topic_len = len[0];
		g[n].seq = be64(frames[1]);
		decode(frames[2], len[2], &g[n]);
		n++;
	}
	return n;
}

/* replay() - the batches the replay socket at endpoint gives from start on
 * (vLLM's protocol: [b"", start] out; [b"", topic, seq, payload] per
 * batch back, then [b"", b"", -1, b""]), into g (at most max); how many. */
static int replay(struct rt_env *e, const char *endpoint, uint64_t start, struct got *g,
		  int max)
{
	void *d = zmq_socket(e->ctx, ZMQ_DEALER);
	uint8_t req[8];
	size_t len[5];
	int i, n = 0;

	for (i = 7; i >= 0; i--, start >>= 8)
		req[i] = (uint8_t)start;
	ck_assert_int_eq(zmq_connect(d, endpoint), 0);
	zmq_send(d, "", 0, ZMQ_SNDMORE);
	zmq_send(d, req, 8, 0);
	for (;;) {
		ck_assert_msg(recv_frames(d, frames, len, 10000) == 4, "no replay answer");
		ck_assert_uint_eq(len[0], 0);
		ck_assert_uint_eq(len[2], 8);
		if (be64(frames[2]) == UINT64_MAX) {	/* the end marker */
			ck_assert_uint_eq(len[1], 0);
			ck_assert_uint_eq(len[3], 0);
			break;
		}
		ck_assert_int_lt(n, max);
		g[n].topic_len = len[1];
		g[n].seq = be64(frames[2]);
		decode(frames[3], len[3], &g[n]);
		n++;
	}
	zmq_close(d);
	return n;
}

/* settle() - wait until every batch made so far was sent (STATS queues
 * the open one; queued_bytes counts until the publisher sent it). */
static void settle(const char *sock)
{
	struct kvp_wire_stats st;
	int i;

	for (i = 0; i < 500; i++) {
		stats_of(sock, &st);
		if (!st.events.queued_bytes)
			return;
		usleep(10000);
	}
	ck_abort_msg("kv events: %llu bytes still queued after 5 s",
		     (unsigned long long)st.events.queued_bytes);
}

/* carries() - some event of g[0..n) of type (and medium, unless NULL)
 * names hash h. */
static bool carries(const struct got *g, int n, const char *type, const char *medium,
		    uint64_t h)
{
	int i;
	unsigned k, j;

	for (i = 0; i < n; i++)
		for (k = 0; k < g[i].n; k++) {
			const struct got_ev *x = &g[i].ev[k];

			if (strcmp(x->type, type) || (medium && strcmp(x->medium, medium)))
				continue;
			for (j = 0; j < x->nhashes; j++)
				if (x->hash[j] == h)
					return true;
		}
	return false;
}

/* count_medium() - events of g[0..n) in medium. */
static unsigned count_medium(const struct got *g, int n, const char *medium)
{
	unsigned c = 0, k;
	int i;

	for (i = 0; i < n; i++)
		for (k = 0; k < g[i].n; k++)
			c += !strcmp(g[i].ev[k].medium, medium);
	return c;
}

/* --- publishing -------------------------------------------------------- */

/* publish() - one block of tokens first.. into namespace ns through sock
 * (with its token ids when tokens), let go; its key into *key. */
static void publish(const char *sock, const char *ns, uint32_t first, bool tokens,
		    kvp_key *key)
{
	uint32_t t[BT], i;
	kvp_page page, canon;
	kvp_client *c;

	for (i = 0; i < BT; i++)
		t[i] = first + i;
	ck_assert_int_eq(kvp_connect(sock, ns, &geo, &c), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, BT, NULL, 0, key), 1);
	ck_assert_int_eq(kvp_alloc(c, 1, &page), 0);
	if (tokens)
		ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, &page, key, t, 1,
						    KVP_PRIO_NORMAL, &canon), 0);
	else
		ck_assert_int_eq(kvp_publish(c, NULL, &page, key, 1, KVP_PRIO_NORMAL,
					     &canon), 0);
	ck_assert_int_eq(kvp_release(c, &page, 1), 0);
	kvp_close(c);
}

/* heard() - what the router stream's subscriber got so far, into g (at
 * most max); when nothing, blocks published into NS until it hears one
 * (ZeroMQ's slow joiner: its subscription reaches kvpoold some time after
 * it connects, later under valgrind). How many it got. */
static int heard(struct rt_env *e, struct got *g, int max)
{
	kvp_key key;
	int i, k = live(e->sub, g, max, 300);

	for (i = 0; !k && i < 100; i++) {
		publish(e->d.sock, NS, 70000 + (uint32_t)i * BT, true, &key);
		settle(e->d.sock);
		k = live(e->sub, g, max, 200);
	}
	ck_assert_msg(k > 0, "the subscriber of %s heard nothing", e->rpub);
	return k;
}

/* evict_all() - every cached page of ns leaves the pool (no tier below:
 * dropped). */
static void evict_all(const char *sock, const char *ns)
{
	kvp_client *c;

	ck_assert_int_eq(kvp_connect(sock, NULL, NULL, &c), 0);
	ck_assert_int_ge(kvp_evict(c, ns, 0), 1);
	kvp_close(c);
}

/* --- the tests --------------------------------------------------------- */

/*
 * The router stream of a namespace carries its events alone, on topic "",
 * numbered 0, 1, 2, ... with no gap while another namespace publishes
 * too (vllm-router takes a gap for a loss, and asks for a replay or wipes
 * its index); the main stream keeps its own numbers for both; the replay
 * socket answers from a given number with the end marker.
 */
START_TEST(test_events_router_carries_one_namespace_on_topic_empty_numbered_alone)
{
	static const char *const none[] = { NULL };
	static struct got g[16], m[16];
	kvp_key mine[3], theirs[3];
	struct rt_env e;
	int n, i, k;

	start(&e, true, none);
	for (i = 0; i < 3; i++) {	/* one batch each: settle()'s STATS closes it */
		publish(e.d.sock, NS, 100 + (uint32_t)i * BT, true, &mine[i]);
		settle(e.d.sock);
		publish(e.d.sock, OTHER, 900 + (uint32_t)i * BT, true, &theirs[i]);
		settle(e.d.sock);
	}
	evict_all(e.d.sock, NS);
	settle(e.d.sock);

	n = replay(&e, e.rrep, 0, g, 16);
	ck_assert_int_eq(n, 4);		/* three stores, the removal */
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(g[i].topic_len, 0);
		ck_assert_uint_eq(g[i].seq, (uint64_t)i);
	}
	for (i = 0; i < 3; i++) {
		ck_assert_uint_eq(g[i].n, 1);
		ck_assert_str_eq(g[i].ev[0].type, "BlockStored");
		ck_assert_str_eq(g[i].ev[0].medium, "CPU");
		ck_assert_uint_eq(g[i].ev[0].hash[0], vhash(&mine[i]));
		ck_assert_uint_eq(g[i].ev[0].nids, BT);
		ck_assert(carries(g, 4, "BlockRemoved", "CPU", vhash(&mine[i])));
		ck_assert(!carries(g, 4, "BlockStored", NULL, vhash(&theirs[i])));
	}
	/* from a given number on, then the end marker alone */
	ck_assert_int_eq(replay(&e, e.rrep, 2, g, 16), 2);
	ck_assert_uint_eq(g[0].seq, 2);
	ck_assert_uint_eq(g[1].seq, 3);
	ck_assert_int_eq(replay(&e, e.rrep, 4, g, 16), 0);

	/* the main stream: both namespaces, on their topics, numbered alone */
	n = replay(&e, e.rep, 0, m, 16);
	ck_assert_int_eq(n, 7);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(m[i].seq, (uint64_t)i);
		ck_assert_uint_gt(m[i].topic_len, 0);
	}
	ck_assert(carries(m, n, "BlockStored", "CPU", vhash(&theirs[2])));

	/* the subscriber, connected since the start, got them live: topic "",
	 * numbers with no gap from the first it heard */
	k = heard(&e, g, 16);
	for (i = 0; i < k; i++) {
		ck_assert_uint_eq(g[i].topic_len, 0);
		ck_assert_uint_eq(g[i].seq, g[0].seq + (uint64_t)i);
	}
	finish(&e);
}
END_TEST

/*
 * vllm-router keys a block by its token ids: a block published without
 * them (as one re-indexed from the NVMe tier at a warm restart) is not on
 * the router stream, neither stored nor removed, and its batch takes no
 * sequence number there; the main stream announces it with empty ones.
 */
START_TEST(test_events_router_leaves_out_blocks_without_token_ids)
{
	static const char *const none[] = { NULL };
	static struct got g[8], m[8];
	kvp_key bare, full;
	struct rt_env e;
	int n;

	start(&e, true, none);
	publish(e.d.sock, NS, 100, false, &bare);
	settle(e.d.sock);
	publish(e.d.sock, NS, 500, true, &full);
	settle(e.d.sock);
	evict_all(e.d.sock, NS);
	settle(e.d.sock);

	n = replay(&e, e.rrep, 0, g, 8);
	ck_assert_int_eq(n, 2);		/* full's store, its removal */
	ck_assert_uint_eq(g[0].seq, 0);
	ck_assert_uint_eq(g[1].seq, 1);
	ck_assert(carries(g, n, "BlockStored", "CPU", vhash(&full)));
	ck_assert_uint_eq(g[0].ev[0].nids, BT);
	ck_assert(carries(g, n, "BlockRemoved", "CPU", vhash(&full)));
	ck_assert(!carries(g, n, "BlockStored", NULL, vhash(&bare)));
	ck_assert(!carries(g, n, "BlockRemoved", NULL, vhash(&bare)));

	n = replay(&e, e.rep, 0, m, 8);	/* the main stream has both */
	ck_assert_int_eq(n, 3);
	ck_assert(carries(m, n, "BlockStored", "CPU", vhash(&bare)));
	ck_assert_uint_eq(m[0].ev[0].nids, 0);
	ck_assert(carries(m, n, "BlockRemoved", "CPU", vhash(&bare)));
	ck_assert(carries(m, n, "BlockRemoved", "CPU", vhash(&full)));
	finish(&e);
}
END_TEST

/*
 * Without --kv-events: the router stream alone. Dropping the namespace is
 * AllBlocksCleared on it; the namespace made again goes on with the same
 * numbers; the daemon's stop is AllBlocksCleared too.
 */
START_TEST(test_events_router_stream_without_the_main_one_outlives_its_namespace)
{
	static const char *const none[] = { NULL };
	static struct got g[8];
	struct kvp_wire_stats st;
	kvp_key a, b, other;
	struct rt_env e;
	kvp_client *c;
	uint64_t last;
	int n, k;

	start(&e, false, none);
	publish(e.d.sock, NS, 100, true, &a);
	publish(e.d.sock, OTHER, 900, true, &other);
	settle(e.d.sock);
	ck_assert_int_eq(kvp_connect(e.d.sock, NULL, NULL, &c), 0);
	ck_assert_int_eq(kvp_drop_namespace(c, NS), 0);
	kvp_close(c);
	publish(e.d.sock, NS, 300, true, &b);	/* made again */
	settle(e.d.sock);
	stats_of(e.d.sock, &st);
	ck_assert_uint_eq(st.events.enabled, 1);
	ck_assert_uint_eq(st.events.batches, 0);	/* no main stream */

	n = replay(&e, e.rrep, 0, g, 8);
	ck_assert_int_eq(n, 3);
	for (k = 0; k < n; k++) {
		ck_assert_uint_eq(g[k].topic_len, 0);
		ck_assert_uint_eq(g[k].seq, (uint64_t)k);
	}
	ck_assert(carries(g, 1, "BlockStored", "CPU", vhash(&a)));
	ck_assert_uint_eq(g[1].n, 1);
	ck_assert_str_eq(g[1].ev[0].type, "AllBlocksCleared");
	ck_assert(carries(&g[2], 1, "BlockStored", "CPU", vhash(&b)));
	ck_assert(!carries(g, n, "BlockStored", NULL, vhash(&other)));
	ck_assert_uint_eq(log_count(&e.d, "KV events on topic"), 0);

	k = heard(&e, g, 8);
	last = g[k - 1].seq;
	daemon_stop(&e.d);		/* AllBlocksCleared, sent before it ends */
	k = live(e.sub, g, 8, 2000);
	ck_assert_int_eq(k, 1);
	ck_assert_uint_eq(g[0].seq, last + 1);
	ck_assert_str_eq(g[0].ev[0].type, "AllBlocksCleared");
	zmq_close(e.sub);
	zmq_ctx_term(e.ctx);
}
END_TEST

/*
 * With a namespace that shares its topic on the main stream
 * (--kv-events-ns-topic), dropping it is BlockRemoved of its blocks there
 * (the topic's other namespace keeps its own), and still AllBlocksCleared
 * on its router stream, which is its alone; so is the stop.
 */
START_TEST(test_events_router_clears_all_even_when_its_main_topic_is_shared)
{
	static const char *const shared[] = { "--kv-events-ns-topic",
					      NS "," OTHER " kv@{host}@{model}", NULL };
	static struct got g[8], m[8];
	kvp_key a, b, other;
	struct rt_env e;
	kvp_client *c;
	uint64_t last;
	int n, k;

	start(&e, true, shared);
	publish(e.d.sock, OTHER, 900, true, &other);	/* first of the topic */
	publish(e.d.sock, NS, 100, true, &a);
	settle(e.d.sock);
	ck_assert_int_eq(kvp_connect(e.d.sock, NULL, NULL, &c), 0);
	ck_assert_int_eq(kvp_drop_namespace(c, NS), 0);
	kvp_close(c);
	publish(e.d.sock, NS, 300, true, &b);
	settle(e.d.sock);

	n = replay(&e, e.rep, 0, m, 8);
	ck_assert(carries(m, n, "BlockRemoved", "CPU", vhash(&a)));
	for (k = 0; k < n; k++)
		ck_assert_str_ne(m[k].ev[0].type, "AllBlocksCleared");
	n = replay(&e, e.rrep, 0, g, 8);
	ck_assert_int_eq(n, 3);
	ck_assert(carries(g, 1, "BlockStored", "CPU", vhash(&a)));
	ck_assert_uint_eq(g[1].n, 1);
	ck_assert_str_eq(g[1].ev[0].type, "AllBlocksCleared");
	ck_assert(carries(&g[2], 1, "BlockStored", "CPU", vhash(&b)));
	ck_assert(!carries(g, n, "BlockRemoved", NULL, vhash(&a)));

	k = heard(&e, g, 8);
	last = g[k - 1].seq;
	daemon_stop(&e.d);
	k = live(e.sub, g, 8, 2000);
	ck_assert_int_eq(k, 1);
	ck_assert_uint_eq(g[0].seq, last + 1);
	ck_assert_str_eq(g[0].ev[0].type, "AllBlocksCleared");
	zmq_close(e.sub);
	zmq_ctx_term(e.ctx);
}
END_TEST

/* The remote tier's test's Redis: one plain server, started and stopped
 * by its test case's unchecked fixture, in Check's own process, so that
 * it stops even when the test (a child) fails. */
static char redis_dir[] = "/tmp/kvpool-redis-XXXXXX";
static char redis_url[64], redis_key[128];
static bool redis_up;
static bool redis_made;	/* redis_dir exists (mkdtemp may put an X in its name) */

/* free_port() - a TCP port of loopback no one listens on now, or 0. */
static unsigned free_port(void)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int port = fd >= 0 ? harness_bind_loopback(fd, &a) : -1;

	if (fd >= 0)
		close(fd);
	return port > 0 ? (unsigned)port : 0;
}

/* redis_start() - a Redis server on a free port and a key file for
 * --remote-key-file, in redis_dir; redis_up says whether it is there. */
static void redis_start(void)
{
	char cmd[512];
	unsigned port, i;
	FILE *f;

	if (system("command -v redis-server >/dev/null 2>&1") != 0) {
		printf("check_events_router: no redis-server; the remote tier's test is not "
		       "run (Debian: apt-get install redis-server)\n");
		return;
	}
	port = free_port();
	if (!port || !mkdtemp(redis_dir))
		return;
	redis_made = true;
	snprintf(redis_url, sizeof(redis_url), "redis://127.0.0.1:%u", port);
	snprintf(redis_key, sizeof(redis_key), "%s/remote.key", redis_dir);
	f = fopen(redis_key, "w");
	if (!f)
		return;
	for (i = 0; i < 32; i++)
		fputc((int)(i * 37 + 11), f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "sh %s/tests/redis-cluster.sh single %s/redis %u",
		 KVP_SRCDIR, redis_dir, port);
	redis_up = chmod(redis_key, 0600) == 0 && system(cmd) == 0;
}

static void redis_stop(void)
{
	char cmd[512];

	if (!redis_made)
		return;
	snprintf(cmd, sizeof(cmd), "sh %s/tests/redis-cluster.sh stop %s/redis; "
		 "rm -rf %s", KVP_SRCDIR, redis_dir, redis_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "check_events_router: %s failed\n", cmd);
}

/*
 * The remote tier (Redis) is every machine's alike: its medium, which
 * vllm-router would credit as a GPU hit, is never on the router stream,
 * while the main stream announces it. A block written through to Redis,
 * evicted and fetched back: the router hears the pool's stores and
 * removal alone.
 */
START_TEST(test_events_router_has_no_remote_tier_events)
{
	const char *extra[] = { "--remote", redis_url, "--remote-key-file", redis_key,
				"--remote-write", "through", NULL };
	static struct got g[16], m[16];
	struct kvp_wire_stats st;
	uint32_t t[3 * BT], i;
	kvp_page pages[3], canon[3];
	kvp_partial partial;
	kvp_key keys[3];
	struct rt_env e;
	kvp_client *c;
	int n;

	if (!redis_up)
		return;		/* said why */
	start(&e, true, extra);
	for (i = 0; i < 3 * BT; i++)
		t[i] = 500 + i;
	ck_assert_int_eq(kvp_connect(e.d.sock, NS, &geo, &c), 0);
	ck_assert_int_eq(kvp_block_keys(c, NULL, t, 3 * BT, NULL, 0, keys), 3);
	ck_assert_int_eq(kvp_alloc(c, 3, pages), 0);
	ck_assert_int_eq(kvp_publish_tokens(c, NULL, NULL, pages, keys, t, 3, KVP_PRIO_NORMAL,
					    canon), 0);
	ck_assert_int_eq(kvp_release(c, pages, 3), 0);
	for (i = 0; i < 500; i++) {	/* Redis answered the three SETs */
		stats_of(e.d.sock, &st);
		if (st.remote.puts == 3 && !st.remote.inflight)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(st.remote.puts, 3);
	ck_assert_int_eq(kvp_evict(c, NS, 0), 3);	/* no local tier: dropped */
	ck_assert_int_eq(kvp_acquire(c, NULL, keys, 3, t, 3 * BT, pages, &partial), 3);
	ck_assert_int_eq(kvp_release(c, pages, 3), 0);
	kvp_close(c);
	settle(e.d.sock);
	stats_of(e.d.sock, &st);
	ck_assert_uint_eq(st.remote.restored, 3);

	n = replay(&e, e.rep, 0, m, 16);	/* the main stream: REMOTE too */
	ck_assert_uint_ge(count_medium(m, n, "REMOTE"), 2);
	n = replay(&e, e.rrep, 0, g, 16);
	ck_assert_int_ge(n, 2);
	ck_assert_uint_eq(count_medium(g, n, "REMOTE"), 0);
	for (i = 0; i < 3; i++) {
		ck_assert(carries(g, n, "BlockStored", "CPU", vhash(&keys[i])));
		ck_assert(carries(g, n, "BlockRemoved", "CPU", vhash(&keys[i])));
	}
	for (i = 0; i < (uint32_t)n; i++)
		ck_assert_uint_eq(g[i].seq, i);
	finish(&e);
}
END_TEST

/* refused() - kvpoold with args (after --foreground and a socket) stops
 * at start; its output into out. */
static void refused(const char *const *args, char *out, size_t len)
{
	const char *argv[16] = { harness_kvpoold(), "--foreground", "--socket",
				 "/tmp/kvpool-router-no.sock" };
	int i = 4, status;

	while (*args && i < 15)
		argv[i++] = *args++;
	argv[i] = NULL;
	status = run_cmd(argv, out, len);
	ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "kvpoold started: %s",
		      out);
}

/* A router stream's endpoint in use, a namespace in two rules, the main
 * stream's endpoint in a rule: the start stops, saying which. */
START_TEST(test_events_router_rules_that_cannot_hold_stop_the_start)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	char rule[128], want[160], out[8192];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_gt(harness_bind_loopback(fd, &a), 0);
	ck_assert_int_eq(listen(fd, 1), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	snprintf(rule, sizeof(rule), NS " tcp://127.0.0.1:%u", ntohs(a.sin_port));
	refused((const char *[]){ "--kv-events-router", rule, NULL }, out, sizeof(out));
	snprintf(want, sizeof(want), "--kv-events-router tcp://127.0.0.1:%u: cannot bind",
		 ntohs(a.sin_port));
	ck_assert_msg(strstr(out, want), "%s", out);
	close(fd);

	refused((const char *[]){ "--kv-events-router", NS " ipc:///tmp/kvp-r1",
				  "--kv-events-router", NS " ipc:///tmp/kvp-r2", NULL },
		out, sizeof(out));
	ck_assert_msg(strstr(out, "namespace '" NS "' is in two rules"), "%s", out);
	refused((const char *[]){ "--kv-events", "ipc:///tmp/kvp-r1", "--kv-events-router",
				  NS " ipc:///tmp/kvp-r2,ipc:///tmp/kvp-r1", NULL },
		out, sizeof(out));
	ck_assert_msg(strstr(out, "ipc:///tmp/kvp-r1 is bound by --kv-events too"), "%s", out);
}
END_TEST

static Suite *events_router_suite(void)
{
	Suite *s = suite_create("events_router");
	TCase *tc = tcase_create("router streams");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_events_router_carries_one_namespace_on_topic_empty_numbered_alone);
	tcase_add_test(tc, test_events_router_leaves_out_blocks_without_token_ids);
	tcase_add_test(tc, test_events_router_stream_without_the_main_one_outlives_its_namespace);
	tcase_add_test(tc, test_events_router_clears_all_even_when_its_main_topic_is_shared);
	tcase_add_test(tc, test_events_router_rules_that_cannot_hold_stop_the_start);
	suite_add_tcase(s, tc);
	tc = tcase_create("the remote tier");
	tcase_set_timeout(tc, 60);
	tcase_add_unchecked_fixture(tc, redis_start, redis_stop);
	tcase_add_test(tc, test_events_router_has_no_remote_tier_events);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(events_router_suite());
}

#else /* !HAVE_KV_EVENTS */

int main(void)
{
	printf("SKIP: kvpool was built without libzmq or msgpack-c (apt-get install "
	       "libzmq3-dev libmsgpack-dev, then configure again): no --kv-events\n");
	return 77;
}

#endif /* HAVE_KV_EVENTS */
