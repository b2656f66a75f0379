/* SPDX-License-Identifier: MIT */
/*
 * waits.c - bench/waits: what ACQUIREs that wait for keys (WAIT: a decode
 * engine's wait for its prefill engine's saves) cost everyone else.
 *
 * --waits raw connections each send one ACQUIRE with WAIT of --keys keys
 * of one chain in namespace "bench-waits", of which the pool holds all
 * but the last: each waits (for up to 10 minutes) for a key nobody
 * publishes. Then, for --seconds, this process publishes fresh one-block
 * pages into the same namespace (alloc, publish, release: three round
 * trips a page), while a thread of it asks the daemon in another
 * namespace (an ACQUIRE of one key) in a loop. One line of key=value
 * pairs: the publishes per second, and the other client's round trips
 * (p50, p99, max).
 *
 * This is a benchmark, not a test: `make bench-waits` runs it through
 * bench/run-waits.sh; `make check` never does.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvpool.h"
#include "kvpool_wire.h"
#include "client/wire.h"
#include "bench/opt.h"

#define NS "bench-waits"
#define BATCH 512	/* keys a PUBLISH of the held chain carries */

static const kvp_geometry geo = {
	.layers = 1, .kv_heads = 1, .head_dim = 64, .block_tokens = 16,
	.dtype = KVP_DTYPE_F16, .model = "bench/waits",
};

static const char *prog = "bench/waits";

struct other {
	const char *sock;
	atomic_bool stop;
	uint64_t *rt;	/* round trips, ns */
	size_t n, cap;
	int err;
};

static void key_of(kvp_key *k, uint32_t who, uint32_t i)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->b, &who, sizeof(who));
	memcpy(k->b + 4, &i, sizeof(i));
	k->b[31] = 0xb7;
}

/* send_msg() - one request on a raw connection; 0 or -errno. */
static int send_msg(int fd, uint16_t op, const void *payload, size_t len)
{
	static unsigned char buf[KVP_WIRE_HDR_SIZE + (256u << 10)];
	struct kvp_wire_hdr h = { .op = op, .req_id = 1, .len = (uint32_t)len };

	if (len > sizeof(buf) - KVP_WIRE_HDR_SIZE)
		return -EMSGSIZE;
	wire_hdr_encode(buf, &h);
	memcpy(buf + KVP_WIRE_HDR_SIZE, payload, len);
	return send(fd, buf, KVP_WIRE_HDR_SIZE + len, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* waiter() - a raw connection whose ACQUIRE of keys[0..n) waits: its fd,
 * or -errno. Its HELLO's answer is read (and must be OK); the ACQUIRE's
 * never comes. */
static int waiter(const char *sock, const kvp_key *keys, uint32_t n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvp_wire_hello h = { 0 };
	struct kvp_wire_acquire a = { 0 };
	unsigned char reply[4096], *msg;
	struct kvp_wire_hdr r;
	ssize_t got;
	int fd, rc;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	snprintf(h.ns, sizeof(h.ns), "%s", NS);
	snprintf(h.model, sizeof(h.model), "%s", geo.model);
	snprintf(h.client_name, sizeof(h.client_name), "bench waiter");
	h.layers = geo.layers;
	h.kv_heads = geo.kv_heads;
	h.head_dim = geo.head_dim;
	h.block_tokens = geo.block_tokens;
	h.dtype = geo.dtype;
	if ((rc = send_msg(fd, KVP_OP_HELLO, &h, sizeof(h))) < 0) {
		errno = -rc;
		goto fail;
	}
	got = recv(fd, reply, sizeof(reply), 0);
	if (got <= 0 || wire_hdr_decode(reply, (size_t)got, &r) < 0 || r.status != KVP_S_OK) {
		errno = EPROTO;
		goto fail;
	}
	a.nkeys = n;
	a.flags = KVP_WIRE_ACQ_WAIT;
	a.wait_ms = KVP_WIRE_WAIT_MAX_MS;
	msg = malloc(sizeof(a) + (size_t)n * KVP_KEY_BYTES);
	if (!msg) {
		errno = ENOMEM;
		goto fail;
	}
	memcpy(msg, &a, sizeof(a));
	memcpy(msg + sizeof(a), keys, (size_t)n * KVP_KEY_BYTES);
	rc = send_msg(fd, KVP_OP_ACQUIRE, msg, sizeof(a) + (size_t)n * KVP_KEY_BYTES);
	free(msg);
	if (rc < 0) {
		errno = -rc;
		goto fail;
	}
	return fd;
fail:
	rc = -errno;
	close(fd);
	return rc;
}

/* other_loop() - another client, in another namespace: an ACQUIRE of a
 * key nobody has, again and again, each round trip timed. */
static void *other_loop(void *arg)
{
	struct other *o = arg;
	kvp_client *c;
	kvp_page p;
	kvp_key k;
	uint64_t t0;

	key_of(&k, 99, 0);
	o->err = kvp_connect(o->sock, "bench-other", &geo, &c);
	if (o->err < 0)
		return NULL;
	while (!atomic_load(&o->stop)) {
		t0 = bench_now_ns();
		if ((o->err = kvp_acquire(c, NULL, &k, 1, NULL, 0, &p, NULL)) < 0)
			break;
		if (o->n == o->cap) {
			size_t cap = o->cap ? o->cap * 2 : 65536;
			uint64_t *v = realloc(o->rt, cap * sizeof(*v));

			if (!v)
				break;
			o->rt = v;
			o->cap = cap;
		}
		o->rt[o->n++] = bench_now_ns() - t0;
	}
	kvp_close(c);
	return NULL;
}

/* hold() - publish keys[0..n) as one chain, in batches. */
static int hold(kvp_client *c, const kvp_key *keys, uint32_t n)
{
	static kvp_page pages[BATCH];
	uint32_t i, m;
	int rc;

	for (i = 0; i < n; i += m) {
		m = n - i < BATCH ? n - i : BATCH;
		if ((rc = kvp_alloc(c, m, pages)) < 0 ||
		    (rc = kvp_publish(c, i ? &keys[i - 1] : NULL, pages, keys + i, m,
				      KVP_PRIO_HIGH, pages)) < 0 ||
		    (rc = kvp_release(c, pages, m)) < 0)
			return rc;
	}
	return 0;
}

/* parked() - wait until the daemon has received every waiter's ACQUIRE
 * (STATS' requests_total: from r0, n of them and our own STATS). */
static int parked(kvp_client *c, uint64_t r0, uint32_t n)
{
	kvp_stats_t st;
	unsigned polls = 0;
	int rc;

	do {
		if ((rc = kvp_stats(c, &st, NULL, 0)) < 0)
			return rc;
		polls++;
		if (st.requests_total >= r0 + polls + n)
			return 0;
		usleep(10000);
	} while (polls < 6000);
	return -ETIMEDOUT;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: %s [--socket PATH] [--waits N] [--keys K] [--seconds S]\n"
		"  --waits N    ACQUIREs that wait, each on a connection of its own (default 10000)\n"
		"  --keys K     keys each asks for; the pool holds all but the last (default 64)\n"
		"  --seconds S  how long to publish (default 5)\n", prog);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "waits", required_argument, NULL, 'w' },
		{ "keys", required_argument, NULL, 'k' },
		{ "seconds", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	size_t nwaits = 10000, nkeys = 64;
	double seconds = 5;
	struct other o = { 0 };
	struct rlimit rl;
	kvp_client *c;
	kvp_stats_t st;
	kvp_key *keys, k;
	kvp_page p;
	pthread_t t;
	uint64_t t0, end, published = 0;
	int opt, rc, *fds;

	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': o.sock = optarg; break;
		case 'w':
			if (bench_count(prog, "--waits", optarg, 0, 1000000, &nwaits) < 0)
				return 2;
			break;
		case 'k':
			if (bench_count(prog, "--keys", optarg, 1, 8000, &nkeys) < 0)
				return 2;
			break;
		case 't':
			if (bench_num(prog, "--seconds", optarg, 0.1, 3600, &seconds) < 0)
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < nwaits + 256) {
		rl.rlim_cur = rl.rlim_max = nwaits + 256;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			fprintf(stderr, "%s: cannot open %zu descriptors (RLIMIT_NOFILE): %s; run "
				"as root or lower --waits\n", prog, nwaits + 256, strerror(errno));
			return 1;
		}
	}
	keys = calloc(nkeys, sizeof(*keys));
	fds = calloc(nwaits + 1, sizeof(*fds));
	if (!keys || !fds)
		return 1;
	for (uint32_t i = 0; i < nkeys; i++)
		key_of(&keys[i], 1, i);
	if ((rc = kvp_connect(o.sock, NS, &geo, &c)) < 0 || (rc = hold(c, keys, nkeys - 1)) < 0 ||
	    (rc = kvp_stats(c, &st, NULL, 0)) < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, kvp_strerror(rc), kvp_last_error());
		return 1;
	}
	for (size_t i = 0; i < nwaits; i++)
		if ((fds[i] = waiter(o.sock, keys, (uint32_t)nkeys)) < 0) {
			fprintf(stderr, "%s: wait %zu of %zu: %s (raise kvpoold's --max-clients "
				"and its descriptors)\n", prog, i + 1, nwaits, strerror(-fds[i]));
			return 1;
		}
	if ((rc = parked(c, st.requests_total, (uint32_t)nwaits)) < 0) {
		fprintf(stderr, "%s: the waits were not all received: %s\n", prog, strerror(-rc));
		return 1;
	}
	if (pthread_create(&t, NULL, other_loop, &o) != 0)
		return 1;
	t0 = bench_now_ns();
	end = t0 + (uint64_t)(seconds * 1e9);
	while (bench_now_ns() < end) {
		key_of(&k, 2, (uint32_t)published);
		if ((rc = kvp_alloc(c, 1, &p)) < 0 ||
		    (rc = kvp_publish(c, NULL, &p, &k, 1, KVP_PRIO_LOW, &p)) < 0 ||
		    (rc = kvp_release(c, &p, 1)) < 0) {
			fprintf(stderr, "%s: publish %llu: %s: %s\n", prog,
				(unsigned long long)published, kvp_strerror(rc), kvp_last_error());
			return 1;
		}
		published++;
	}
	atomic_store(&o.stop, true);
	pthread_join(t, NULL);
	if (o.err < 0) {
		fprintf(stderr, "%s: the other client: %s\n", prog, kvp_strerror(o.err));
		return 1;
	}
	printf("waits n=%zu keys=%zu seconds=%.1f publishes_per_s=%.0f other_requests=%zu "
	       "other_p50_us=%.1f other_p99_us=%.1f other_max_ms=%.2f\n", nwaits, nkeys,
	       (double)(bench_now_ns() - t0) / 1e9,
	       (double)published * 1e9 / (double)(bench_now_ns() - t0), o.n,
	       bench_pct_us(o.rt, o.n, 50), bench_pct_us(o.rt, o.n, 99),
	       bench_pct_us(o.rt, o.n, 100) / 1000.0);
	for (size_t i = 0; i < nwaits; i++)
		close(fds[i]);
	kvp_close(c);
	free(o.rt);
	free(keys);
	free(fds);
	return 0;
}
