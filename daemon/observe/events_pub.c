/* SPDX-License-Identifier: MIT */
/*
 * events_pub.c - the publisher thread of the KV events (see events.h and
 * events_int.h): it packs the loop's raw batches with msgpack-c into
 * vLLM's KVEventBatch, sends each as [topic, sequence number (8 bytes,
 * big-endian), payload] on the PUB socket (ZeroMQ drops at its
 * high-water mark for a slow subscriber; sending never blocks), keeps the
 * last ones for the ROUTER socket's replay requests, and answers those.
 * It runs below the loop's priority, and only it touches the sockets
 * while it runs. A batch of a namespace with a router stream
 * (--kv-events-router) is packed a second time, of the events
 * raw_for_router() lets through, and sent on topic "" with the router
 * stream's own sequence number on that stream's sockets, which keep and
 * replay their own batches as the main stream's do.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/observe/events_int.h"

#ifdef HAVE_KV_EVENTS
#include <msgpack.h>
#include <zmq.h>

#define PUB_HWM		100000		/* as vLLM's publisher */
#define LINGER_MS	1000
/* Replays: peers that ask and never read must not grow kvpoold by peers x
 * ring. Batches go out without copies (references to the ring's), one
 * replay at a time per peer, REPLAY_PEERS at once, and all of them hold
 * at most the ring's own budget (--kv-events-queue) of batches; a replay
 * beyond that gets the end marker alone, as if nothing were kept. */
#define REPLAY_PEERS	16
#define MAX_REQUEST	1024		/* bytes of a message a peer may send us */
#define PUBLISHER_NICE	10		/* below the loop and the clients */

/* --- packing: raw events into vLLM's KVEventBatch ---------------------- */

struct packer {
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const struct events *ev;
	uint32_t hash_len;
	uint32_t block_size;
};

static void pack_cstr(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

/* pack_hash() - a block hash as vLLM sends it: the digest's last 8 bytes
 * as a big-endian integer (vLLM's default), or the digest. */
static void pack_hash(struct packer *p, const uint8_t *key)
{
	uint64_t v = 0;
	unsigned i;

	if (p->ev->cfg.hashes == EVENTS_HASH_BYTES) {
		msgpack_pack_bin(&p->pk, p->hash_len);
		msgpack_pack_bin_body(&p->pk, key, p->hash_len);
		return;
	}
	for (i = p->hash_len - 8; i < p->hash_len; i++)
		v = v << 8 | key[i];
	msgpack_pack_uint64(&p->pk, v);
}

/* pack_field() - a field's name in the map encoding; nothing in arrays. */
static void pack_field(struct packer *p, const char *name)
{
	if (p->ev->cfg.format == EVENTS_FORMAT_MAP)
		pack_cstr(&p->pk, name);
}

/* pack_open() - an event's head: its tag and nfields more fields. */
static void pack_open(struct packer *p, const char *tag, unsigned nfields)
{
	if (p->ev->cfg.format == EVENTS_FORMAT_MAP) {
		msgpack_pack_map(&p->pk, nfields + 1);
		pack_cstr(&p->pk, "type");
	} else {
		msgpack_pack_array(&p->pk, nfields + 1);
	}
	pack_cstr(&p->pk, tag);
}

static const char *medium_name(const struct events *ev, unsigned m)
{
	static const char *const names[] = { [EVM_HOST] = "CPU", [EVM_NVME] = "STORAGE",
					     [EVM_REMOTE] = "REMOTE" };

	return m == EVM_POOL ? ev->cfg.pool_medium : names[m];
}

/* pack_event() - raw event r, whose parent key, keys and token ids follow
 * it at at. */
static void pack_event(struct packer *p, const struct raw_ev *r, const uint8_t *at)
{
	const uint8_t *parent = NULL, *keys, *ids;
	uint32_t i, id;

	at += sizeof(*r);
	if (r->has_parent) {
		parent = at;
		at += KVP_KEY_BYTES;
	}
	keys = at;
	ids = at + (size_t)r->n * KVP_KEY_BYTES;
	switch (r->kind) {
	case EV_STORED:
		/* BlockStored: block_hashes, parent_block_hash, token_ids,
		 * block_size, lora_id, medium, lora_name */
		pack_open(p, "BlockStored", 7);
		pack_field(p, "block_hashes");
		msgpack_pack_array(&p->pk, r->n);
		for (i = 0; i < r->n; i++)
			pack_hash(p, keys + (size_t)i * KVP_KEY_BYTES);
		pack_field(p, "parent_block_hash");
		if (parent)
			pack_hash(p, parent);
		else
			msgpack_pack_nil(&p->pk);
		pack_field(p, "token_ids");
		msgpack_pack_array(&p->pk, r->nids);
		for (i = 0; i < r->nids; i++) {
			memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
			msgpack_pack_uint32(&p->pk, id);
		}
		pack_field(p, "block_size");
		msgpack_pack_uint32(&p->pk, p->block_size);
		pack_field(p, "lora_id");
		msgpack_pack_nil(&p->pk);
		pack_field(p, "medium");
		pack_cstr(&p->pk, medium_name(p->ev, r->medium));
		pack_field(p, "lora_name");
		msgpack_pack_nil(&p->pk);
		break;
	case EV_REMOVED:
		pack_open(p, "BlockRemoved", 2);
		pack_field(p, "block_hashes");
		msgpack_pack_array(&p->pk, r->n);
		for (i = 0; i < r->n; i++)
			pack_hash(p, keys + (size_t)i * KVP_KEY_BYTES);
		pack_field(p, "medium");
		pack_cstr(&p->pk, medium_name(p->ev, r->medium));
		break;
	default:
		pack_open(p, "AllBlocksCleared", 0);
		break;
	}
}

/*
 * pack_batch() - raw batch m as [ts, [events], data_parallel_rank] (the
 * rank nil: any instance of the machine may use the pool), in a new emsg:
 * for the main stream, with m's topic and sequence number, or (routed)
 * for m's router stream, of the events raw_for_router() lets through, on
 * topic "" with the router stream's sequence number. NULL without memory.
 * m stays the caller's.
 */
static struct emsg *pack_batch(struct events *ev, const struct emsg *m, bool routed)
{
	struct packer p = { .ev = ev, .hash_len = m->hash_len, .block_size = m->block_size };
	const uint8_t *at = m->data + m->topic_len;
	uint32_t topic_len = routed ? 0 : m->topic_len;
	struct emsg *out = NULL;
	struct raw_ev r;
	uint32_t i;

	msgpack_sbuffer_init(&p.sb);
	msgpack_packer_init(&p.pk, &p.sb, msgpack_sbuffer_write);
	msgpack_pack_array(&p.pk, 3);
	msgpack_pack_double(&p.pk, m->ts);
	msgpack_pack_array(&p.pk, routed ? m->rnevents : m->nevents);
	for (i = 0; i < m->nraw; i++, at += raw_size(&r)) {
		memcpy(&r, at, sizeof(r));
		if (routed ? raw_for_router(&r) : raw_for_main(&r))
			pack_event(&p, &r, at);
	}
	msgpack_pack_nil(&p.pk);
	if (p.sb.data)
		out = malloc(sizeof(*out) + topic_len + p.sb.size);
	if (out) {
		*out = *m;
		out->next = NULL;
		out->packed = true;
		atomic_init(&out->refs, 1);
		out->topic_len = topic_len;
		out->len = p.sb.size;
		if (routed) {
			out->seq = m->rseq;
			out->nevents = m->rnevents;
		}
		memcpy(out->data, m->data, topic_len);
		memcpy(out->data + topic_len, p.sb.data, p.sb.size);
	}
	msgpack_sbuffer_destroy(&p.sb);
	return out;
}

/* --- sending and replay ----------------------------------------------- */

static void seq_bytes(uint64_t seq, uint8_t out[8])
{
	int i;

	for (i = 7; i >= 0; i--, seq >>= 8)
		out[i] = (uint8_t)seq;
}

/* send_parts() - frames[0..n) as one message; false when the socket
 * would block (a full peer: the rest is dropped by ZeroMQ's rules). */
static bool send_parts(void *sock, const void *const *buf, const size_t *len, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (zmq_send(sock, buf[i], len[i], ZMQ_DONTWAIT |
			     (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
			return false;
	return true;
}

static bool send_batch(void *sock, const struct emsg *m, const void *id, size_t id_len)
{
	uint8_t seq[8];
	const void *buf[5];
	size_t len[5];
	int k = 0;

	seq_bytes(m->seq, seq);
	if (id) {
		buf[k] = id, len[k++] = id_len;
		buf[k] = "", len[k++] = 0;
	}
	buf[k] = m->data, len[k++] = m->topic_len;
	buf[k] = seq, len[k++] = 8;
	buf[k] = m->data + m->topic_len, len[k++] = m->len;
	return send_parts(sock, buf, len, k);
}

/* emsg_put() - drop a reference to packed batch m: the last frees it. */
static void emsg_put(struct emsg *m)
{
	if (atomic_fetch_sub(&m->refs, 1) == 1)
		free(m);
}

/* ring_keep() - m joins stream st's replay ring (freed when it has none
 * and no replay holds it), the oldest leaving while the ring is over its
 * count or bytes (--kv-events-replay-batches, --kv-events-queue). */
static void ring_keep(struct events *ev, struct stream *st, struct emsg *m)
{
	struct emsg *old;

	if (!st->router) {
		free(m);
		return;
	}
	while (st->ring_count && (st->ring_count == st->ring_cap ||
				  st->ring_bytes + m->len > ev->cfg.queue_bytes)) {
		old = st->ring[st->ring_head];
		st->ring_head = (st->ring_head + 1) % st->ring_cap;
		st->ring_count--;
		st->ring_bytes -= old->len;
		emsg_put(old);
	}
	st->ring[(st->ring_head + st->ring_count++) % st->ring_cap] = m;
	st->ring_bytes += m->len;
}

/* A replayed batch's payload in ZeroMQ's queue: what its free needs. */
struct rref {
	struct stream *st;
	struct emsg *m;
	struct replay *r;
};

/* rref_free() - ZeroMQ (its I/O thread) is done with a replayed batch:
 * written to the peer, or dropped with it. r is last: once its count is
 * 0 the publisher thread may free it. */
static void rref_free(void *data, void *hint)
{
	struct rref *f = hint;
	struct replay *r = f->r;

	(void)data;
	atomic_fetch_sub(&f->st->replay_bytes, f->m->len);
	emsg_put(f->m);
	free(f);
	atomic_fetch_sub(&r->out, 1);
}

/* replays_prune() - free stream st's replays ZeroMQ has written out; the
 * one of peer id (id_len bytes) still in progress, or NULL. */
static struct replay *replays_prune(struct stream *st, const uint8_t *id, size_t id_len)
{
	struct replay **pp = &st->replaying, *r, *found = NULL;

	while ((r = *pp)) {
		if (!atomic_load(&r->out)) {
			*pp = r->next;
			st->nreplaying--;
			free(r);
			continue;
		}
		if (r->id_len == id_len && !memcmp(r->id, id, id_len))
			found = r;
		pp = &r->next;
	}
	return found;
}

/* send_ref() - batch m to the peer of r on stream st as [id, "", topic,
 * seq, payload], the payload a reference to m. False when the peer's
 * queue is full. */
static bool send_ref(struct stream *st, struct replay *r, struct emsg *m)
{
	struct rref *f = malloc(sizeof(*f));
	uint8_t seq[8];
	zmq_msg_t part;
	const void *buf[4];
	size_t len[4];
	int i;

	if (!f)
		return false;
	/* the payload first: once a frame went, the message must end */
	*f = (struct rref){ st, m, r };
	atomic_fetch_add(&m->refs, 1);
	atomic_fetch_add(&r->out, 1);
	atomic_fetch_add(&st->replay_bytes, m->len);
	if (zmq_msg_init_data(&part, m->data + m->topic_len, m->len, rref_free, f) < 0) {
		rref_free(NULL, f);
		return false;
	}
	seq_bytes(m->seq, seq);
	buf[0] = r->id, len[0] = r->id_len;
	buf[1] = "", len[1] = 0;
	buf[2] = m->data, len[2] = m->topic_len;
	buf[3] = seq, len[3] = 8;
	for (i = 0; i < 4; i++)
		if (zmq_send(st->router, buf[i], len[i], ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0) {
			zmq_msg_close(&part);	/* rref_free(); ZeroMQ drops the frames sent */
			return false;
		}
	if (zmq_msg_send(&part, st->router, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&part);	/* rref_free() */
		return false;
	}
	return true;
}

/* refused() - say (once a minute at most, per stream) why a replay got
 * nothing. */
static void refused(struct stream *st, const char *why)
{
	if (!log_every(&st->refused_ns, 60))
		return;
	log_warn("kv events: a replay on %s got the end marker alone: %s (at most one "
		 "replay in progress per peer, %d at once, holding --kv-events-queue bytes "
		 "in all)", st->replay, why, REPLAY_PEERS);
}

/* serve_replay() - one request on stream st's ROUTER socket, [identity,
 * "", start (8 bytes, big-endian)], gets every batch st kept from start
 * on, then [identity, "", "", -1, ""], as vLLM's publisher answers; a
 * replay the limits above refuse gets the end marker alone. Anything else
 * is ignored. */
static void serve_replay(struct events *ev, struct stream *st)
{
	uint8_t frames[3][256], end[8];
	size_t flen[3];
	const void *buf[5];
	size_t len[5];
	uint64_t start = 0, i, need = 0;
	int n = 0, more, got;
	size_t ml = sizeof(more);
	struct replay *r;

	do {
		got = zmq_recv(st->router, n < 3 ? frames[n] : frames[2], sizeof(frames[0]),
			       ZMQ_DONTWAIT);
		if (got < 0)
			return;
		if (n < 3)
			flen[n] = (size_t)got;
		n++;
		if (zmq_getsockopt(st->router, ZMQ_RCVMORE, &more, &ml) < 0)
			return;
	} while (more);
	if (n != 3 || flen[1] != 0 || flen[2] != 8 || flen[0] > sizeof(frames[0])) {
		log_debug("kv events: a replay request of %d frames is not [identity, \"\", "
			  "8-byte sequence number]; ignored", n);
		return;
	}
	for (i = 0; i < 8; i++)
		start = start << 8 | frames[2][i];
	for (i = 0; i < st->ring_count; i++) {
		const struct emsg *m = st->ring[(st->ring_head + i) % st->ring_cap];

		need += m->seq >= start ? m->len : 0;
	}
	r = replays_prune(st, frames[0], flen[0]);
	if (r) {
		refused(st, "its peer has not read the last one");
	} else if (need && st->nreplaying >= REPLAY_PEERS) {
		refused(st, "too many peers are being replayed to");
	} else if (need && atomic_load(&st->replay_bytes) + need > ev->cfg.queue_bytes) {
		refused(st, "the replays in progress hold the byte budget");
	} else if (need && (r = calloc(1, sizeof(*r)))) {
		memcpy(r->id, frames[0], flen[0]);
		r->id_len = flen[0];
		r->next = st->replaying;
		st->replaying = r;
		st->nreplaying++;
		atomic_fetch_add(&ev->replays, 1);
		for (i = 0; i < st->ring_count; i++) {
			struct emsg *m = st->ring[(st->ring_head + i) % st->ring_cap];

			if (m->seq < start)
				continue;
			if (!send_ref(st, r, m))
				return;
			atomic_fetch_add(&ev->replayed, 1);
		}
	} else if (!need) {
		atomic_fetch_add(&ev->replays, 1);	/* nothing to give: the marker */
	}
	memset(end, 0xff, sizeof(end));
	buf[0] = frames[0], len[0] = flen[0];
	buf[1] = "", len[1] = 0;
	buf[2] = "", len[2] = 0;
	buf[3] = end, len[3] = 8;
	buf[4] = "", len[4] = 0;
	send_parts(st->router, buf, len, 5);
}

/* send_one() - packed batch out (NULL: no memory, lost) on stream st,
 * kept for its replays; counted in STATS when counted (the main
 * stream's). */
static void send_one(struct events *ev, struct stream *st, struct emsg *out, bool counted)
{
	if (!out) {
		log_debug("kv events: out of memory packing a batch for %s %s; it is lost",
			  st->flag, st->endpoint);
		return;
	}
	if (send_batch(st->pub, out, NULL, 0) && counted) {
		atomic_fetch_add(&ev->sent_batches, 1);
		atomic_fetch_add(&ev->sent_events, out->nevents);
	}
	ring_keep(ev, st, out);
}

/* drain() - pack and send everything queued now; true when stopping and
 * done. */
static bool drain(struct events *ev)
{
	struct emsg *m, *next;
	uint64_t bytes = 0;
	bool stop;

	pthread_mutex_lock(&ev->mu);
	m = ev->qhead;
	ev->qhead = ev->qtail = NULL;
	stop = ev->stopping;
	pthread_mutex_unlock(&ev->mu);
	for (; m; m = next) {
		next = m->next;
		bytes += m->len;
		if (m->nevents && ev->main.pub)
			send_one(ev, &ev->main, pack_batch(ev, m, false), true);
		if (m->rnevents)
			send_one(ev, &ev->routes[m->route].st, pack_batch(ev, m, true), false);
		free(m);
	}
	/* queued until sent: 0 then means every batch so far went out */
	pthread_mutex_lock(&ev->mu);
	ev->queued_bytes -= bytes;
	pthread_mutex_unlock(&ev->mu);
	return stop;
}

static int open_sockets(struct events *ev, char *err, size_t errlen);

/* stream_at() - stream i of ev: 0 the main one, then the router streams;
 * NULL past them. */
static struct stream *stream_at(struct events *ev, unsigned i)
{
	if (i == 0)
		return &ev->main;
	return i <= ev->nroutes ? &ev->routes[i - 1].st : NULL;
}

/*
 * publisher() - the thread: at a lower priority (nice PUBLISHER_NICE,
 * which ZeroMQ's I/O thread, started by the first socket, inherits), so
 * that sending events never takes a CPU from the loop or the clients; it
 * makes and binds the sockets, tells events_start() how that went, then
 * sends and replays until told to stop.
 */
static void *publisher(void *arg)
{
	struct events *ev = arg;
	zmq_pollitem_t it[1 + 1 + TOPIC_ROUTES_MAX];
	struct stream *who[1 + 1 + TOPIC_ROUTES_MAX], *st;
	unsigned i, n = 1;
	uint64_t v;
	int rc;

	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PUBLISHER_NICE) < 0)
		log_debug("kv events: the publisher keeps its priority: %s", strerror(errno));
	rc = open_sockets(ev, ev->start_err, sizeof(ev->start_err));
	pthread_mutex_lock(&ev->mu);
	ev->start_rc = rc;
	ev->started = true;
	pthread_cond_signal(&ev->started_cv);
	pthread_mutex_unlock(&ev->mu);
	if (rc < 0)
		return NULL;
	it[0] = (zmq_pollitem_t){ .socket = NULL, .fd = ev->efd, .events = ZMQ_POLLIN };
	for (i = 0; (st = stream_at(ev, i)); i++) {	/* the replay sockets */
		if (!st->router)
			continue;
		who[n] = st;
		it[n++] = (zmq_pollitem_t){ .socket = st->router, .events = ZMQ_POLLIN };
	}
	for (;;) {
		if (zmq_poll(it, (int)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_error("kv events: zmq_poll: %s; no more events are sent",
				  zmq_strerror(errno));
			return NULL;
		}
		if (it[0].revents & ZMQ_POLLIN) {
			if (read(ev->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				log_debug("kv events: eventfd: %s", strerror(errno));
			if (drain(ev))
				return NULL;
		}
		for (i = 1; i < n; i++)
			if (it[i].revents & ZMQ_POLLIN)
				serve_replay(ev, who[i]);
	}
}

/*
 * ipc_share() - an ipc:// socket file is mode 0660, of --kv-events-ipc-group
 * (else the daemon's group): under the daemon's umask it would be 0600,
 * and a router running as another user could not connect. Who may reach
 * it is also who may enter its directory. Abstract sockets (ipc://@NAME)
 * have no file. 0, or -errno with err.
 */
static int ipc_share(const struct events *ev, const char *flag, const char *endpoint,
		     char *err, size_t errlen)
{
	const char *path = endpoint + 6;

	if (strncmp(endpoint, "ipc://", 6) || path[0] == '@')
		return 0;
	if ((ev->cfg.ipc_gid != (gid_t)-1 && chown(path, (uid_t)-1, ev->cfg.ipc_gid) < 0) ||
	    chmod(path, 0660) < 0) {
		int rc = -errno;

		snprintf(err, errlen, "%s %s: cannot give the socket mode 0660 and its group: "
			 "%s", flag, endpoint, strerror(-rc));
		return rc;
	}
	return 0;
}

/* open_socket() - a socket of type bound to endpoint, or NULL with err. */
static void *open_socket(struct events *ev, int type, const char *flag,
			 const char *endpoint, char *err, size_t errlen)
{
	void *s = zmq_socket(ev->ctx, type);
	int hwm = PUB_HWM, linger = LINGER_MS, on = 1, rcvhwm = 64;
	int64_t maxmsg = MAX_REQUEST;

	if (!s) {
		snprintf(err, errlen, "%s: cannot make a ZeroMQ socket: %s", flag,
			 zmq_strerror(errno));
		return NULL;
	}
	if (type == ZMQ_ROUTER)		/* a whole replay and its end marker fit */
		hwm = (int)(2 * (ev->cfg.replay_batches + 1) < PUB_HWM * 100 ?
			    2 * (ev->cfg.replay_batches + 1) : PUB_HWM * 100);
	zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	/* what peers send (subscriptions, replay requests) is small: a larger
	 * message drops its peer; few wait at once */
	zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
	zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
	if (strchr(endpoint, '['))
		zmq_setsockopt(s, ZMQ_IPV6, &on, sizeof(on));
	if (zmq_bind(s, endpoint) < 0) {
		snprintf(err, errlen, "%s %s: cannot bind: %s; give tcp://ADDR:PORT with a "
			 "free port, or ipc://PATH", flag, endpoint, zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	if (ipc_share(ev, flag, endpoint, err, errlen) < 0) {
		zmq_close(s);
		return NULL;
	}
	return s;
}

/* open_sockets() - the context and every stream's bound sockets (the
 * main stream's when it is on); 0, or -EINVAL or -ENOMEM with err. */
static int open_sockets(struct events *ev, char *err, size_t errlen)
{
	struct stream *st;
	unsigned i;

	ev->ctx = zmq_ctx_new();
	if (!ev->ctx) {
		snprintf(err, errlen, "--kv-events: cannot make a ZeroMQ context: %s",
			 zmq_strerror(errno));
		return -ENOMEM;
	}
	for (i = 0; (st = stream_at(ev, i)); i++) {
		if (!st->endpoint[0])
			continue;	/* the main stream, off */
		st->pub = open_socket(ev, ZMQ_PUB, st->flag, st->endpoint, err, errlen);
		if (!st->pub)
			return -EINVAL;
		if (!st->replay[0])
			continue;
		st->router = open_socket(ev, ZMQ_ROUTER, i ? st->flag : "--kv-events-replay",
					 st->replay, err, errlen);
		if (!st->router)
			return -EINVAL;
	}
	return 0;
}

int events_pub_start(struct events *ev, char *err, size_t errlen)
{
	struct stream *st;
	unsigned i;
	int rc;

	for (i = 0; (st = stream_at(ev, i)); i++) {	/* a ring for each replay socket */
		if (!st->endpoint[0] || !st->replay[0])
			continue;
		st->ring_cap = ev->cfg.replay_batches ? ev->cfg.replay_batches : 1;
		st->ring = calloc(st->ring_cap, sizeof(*st->ring));
		if (!st->ring) {
			snprintf(err, errlen, "%s: no memory for a replay ring of %llu batches",
				 st->flag, (unsigned long long)st->ring_cap);
			return -ENOMEM;
		}
	}
	rc = -pthread_create(&ev->thread, NULL, publisher, ev);
	if (rc < 0) {
		snprintf(err, errlen, "--kv-events: cannot start its thread: %s",
			 strerror(-rc));
		return rc;
	}
	pthread_mutex_lock(&ev->mu);
	while (!ev->started)
		pthread_cond_wait(&ev->started_cv, &ev->mu);
	pthread_mutex_unlock(&ev->mu);
	if (ev->start_rc < 0) {
		pthread_join(ev->thread, NULL);
		snprintf(err, errlen, "%s", ev->start_err);
		return ev->start_rc;
	}
	ev->running = true;
	return 0;
}

void events_pub_stop(struct events *ev)
{
	if (ev->running)
		pthread_join(ev->thread, NULL);
	ev->running = false;
}

void events_pub_fini(struct events *ev)
{
	struct replay *r;
	struct stream *st;
	uint64_t k;
	unsigned i;

	for (i = 0; (st = stream_at(ev, i)); i++) {
		if (st->pub)
			zmq_close(st->pub);
		if (st->router)
			zmq_close(st->router);
		st->pub = st->router = NULL;
	}
	if (ev->ctx)
		zmq_ctx_term(ev->ctx);	/* ZeroMQ lets go of every replayed batch */
	ev->ctx = NULL;
	for (i = 0; (st = stream_at(ev, i)); i++) {
		for (k = 0; st->ring && k < st->ring_count; k++)
			emsg_put(st->ring[(st->ring_head + k) % st->ring_cap]);
		free(st->ring);
		st->ring = NULL;
		while ((r = st->replaying)) {
			st->replaying = r->next;
			free(r);
		}
	}
}

#endif /* HAVE_KV_EVENTS */
