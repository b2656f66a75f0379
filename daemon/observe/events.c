/* SPDX-License-Identifier: MIT */
/*
 * events.c - KV events in vLLM's format over ZeroMQ (see events.h).
 *
 * This file is the loop's side; events_pub.c the publisher thread's. The
 * prefix index's sink (ev_moved) turns each media change of a full block
 * into an event; consecutive events that vLLM would send as one (stores
 * of a chain in one medium, removals from one medium) are merged in
 * `pend`; closed events are appended raw (keys and token ids as they are:
 * a memcpy, no encoding) to the batch, each marked for the streams it
 * goes on and counted for each (events_int.h's raw_for_main() and
 * raw_for_router(), with which the thread packs). Once the batch is
 * WINDOW_MS old (the first loop turn after, or a timer), or when another
 * namespace's event comes, or past BATCH_BYTES, or when STATS asks, it
 * goes to the queue: a list under a mutex that the thread empties when an
 * eventfd wakes it (the loop writes it only when the list was empty). The
 * thread packs it with msgpack-c, away from the loop.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/observe/events_int.h"
#include "daemon/store/namespace.h"
#include "daemon/store/prefix.h"

#ifdef HAVE_KV_EVENTS

#define BATCH_BYTES	(256u * 1024u)	/* a batch closes past this */
#define WINDOW_MS	10u		/* ... or when it is this old */

bool events_built(void)
{
	return true;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* raw_put() - len bytes at the end of the batch's raw events; false (and
 * the event is lost) without memory. */
static bool raw_put(struct events *ev, const void *p, size_t len)
{
	size_t cap = ev->raw_cap ? ev->raw_cap : 4096;
	uint8_t *nr;

	if (!len)		/* p may be NULL then: no token ids */
		return true;
	while (cap < ev->raw_len + len)
		cap *= 2;
	if (cap != ev->raw_cap) {
		nr = realloc(ev->raw, cap);
		if (!nr)
			return false;
		ev->raw = nr;
		ev->raw_cap = cap;
	}
	memcpy(ev->raw + ev->raw_len, p, len);
	ev->raw_len += len;
	return true;
}

/* main_on() - the main stream (--kv-events) is on: else only router
 * streams publish. */
static bool main_on(const struct events *ev)
{
	return ev->main.endpoint[0] != '\0';
}

/* route_of() - the router stream of namespace name, or -1. O(rules),
 * once a batch. */
static int route_of(const struct events *ev, const char *name)
{
	unsigned i;

	for (i = 0; i < ev->nroutes; i++)
		if (!strcmp(ev->routes[i].ns, name))
			return (int)i;
	return -1;
}

/* pend_close() - the merged event, raw, to the batch. */
static void pend_close(struct events *ev)
{
	struct pend *p = &ev->pend;
	bool cleared = p->kind == EV_CLEARED;
	struct raw_ev r = { .kind = (uint8_t)p->kind,
			    .medium = (uint8_t)(cleared ? 0 : p->medium),
			    .has_parent = p->kind == EV_STORED && p->has_parent,
			    .has_ids = !cleared && p->ids, .dest = (uint8_t)p->dest,
			    .n = p->n, .nids = p->kind == EV_STORED && p->ids ? p->nids : 0 };
	size_t mark = ev->raw_len;

	if (p->kind == EV_NONE)
		return;
	if (raw_put(ev, &r, sizeof(r)) && (!r.has_parent ||
	    raw_put(ev, p->parent, KVP_KEY_BYTES)) &&
	    raw_put(ev, p->keys, (size_t)r.n * KVP_KEY_BYTES) &&
	    raw_put(ev, p->idv, (size_t)r.nids * sizeof(uint32_t))) {
		ev->braw++;
		ev->bevents += raw_for_main(&r);
		ev->brevents += ev->broute >= 0 && raw_for_router(&r);
	} else {
		ev->raw_len = mark;	/* lost: no memory */
	}
	p->kind = EV_NONE;
	p->n = p->nids = 0;
}

/* seqs_take() - m's sequence numbers: the main stream's next when it has
 * events for it, its router stream's next when it has events for that.
 * A batch dropped after leaves them unused: subscribers see the gap. */
static void seqs_take(struct events *ev, struct emsg *m)
{
	if (m->nevents)
		m->seq = ev->next_seq++;
	if (m->rnevents)
		m->rseq = ev->routes[m->route].next_seq++;
}

/* batch_dropped() - count m, dropped (its events: the larger stream's). */
static void batch_dropped(struct events *ev, const struct emsg *m)
{
	ev->dropped_batches++;
	ev->dropped_events += m->nevents > m->rnevents ? m->nevents : m->rnevents;
}

/* queue_push() - hand m to the thread unless the queue is full (then m is
 * dropped and counted; its sequence numbers stay unused, so that
 * subscribers see the gap). Never waits. */
static void queue_push(struct events *ev, struct emsg *m)
{
	bool wake = false, drop;
	uint64_t one = 1;

	pthread_mutex_lock(&ev->mu);
	drop = ev->queued_bytes + m->len > ev->cfg.queue_bytes;
	if (!drop) {
		wake = !ev->qhead;
		if (ev->qtail)
			ev->qtail->next = m;
		else
			ev->qhead = m;
		ev->qtail = m;
		ev->queued_bytes += m->len;
	}
	pthread_mutex_unlock(&ev->mu);
	if (drop) {
		if (!ev->dropped_batches)
			log_warn("kv events: the queue of %llu bytes is full: batch %llu%s%s%s "
				 "(%u events) is dropped; subscribers see the gap in the sequence "
				 "numbers (further drops are counted in STATS, not logged)",
				 (unsigned long long)ev->cfg.queue_bytes,
				 (unsigned long long)(m->nevents ? m->seq : m->rseq),
				 m->nevents ? "" : " of the router stream of '",
				 m->nevents ? "" : ev->routes[m->route].ns, m->nevents ? "" : "'",
				 m->nevents ? m->nevents : m->rnevents);
		batch_dropped(ev, m);
		free(m);
		return;
	}
	if (wake && write(ev->efd, &one, sizeof(one)) < 0)
		log_debug("kv events: waking the publisher: %s", strerror(errno));
}

/* batch_close() - the raw batch to the queue, for the thread to pack
 * for each stream it has events for (none: it goes nowhere). */
static void batch_close(struct events *ev)
{
	struct timespec ts;
	struct emsg h, *m;

	pend_close(ev);
	if (!ev->bns)
		return;
	h = (struct emsg){ .nevents = main_on(ev) ? ev->bevents : 0,
			   .rnevents = ev->broute >= 0 ? ev->brevents : 0, .nraw = ev->braw,
			   .route = ev->broute, .topic_len = ev->btopic_len,
			   .hash_len = ev->hash_len, .block_size = ev->block_size,
			   .len = ev->raw_len };
	if (h.nevents || h.rnevents) {
		clock_gettime(CLOCK_REALTIME, &ts);
		h.ts = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
		seqs_take(ev, &h);
		m = malloc(sizeof(*m) + ev->btopic_len + ev->raw_len);
		if (m) {
			*m = h;
			memcpy(m->data, ev->btopic, ev->btopic_len);
			memcpy(m->data + m->topic_len, ev->raw, ev->raw_len);
			queue_push(ev, m);
		} else {
			batch_dropped(ev, &h);
		}
	}
	ev->raw_len = 0;
	ev->braw = ev->bevents = ev->brevents = 0;
	ev->bns = NULL;
	ev->broute = -1;
}

/* batch_for() - make the open batch n's: close another's first. */
static void batch_for(struct events *ev, const struct ns *n)
{
	if (ev->bns == n && ev->raw_len < BATCH_BYTES)
		return;
	batch_close(ev);
	ev->bns = n;
	ev->broute = route_of(ev, n->name);
	ev->opened_ns = mono_ns();
	ev->btopic_len = (uint32_t)strlen(n->ev_topic);
	memcpy(ev->btopic, n->ev_topic, ev->btopic_len);
	ev->hash_len = n->key_scheme == KVP_WIRE_KEYS_VLLM_XXHASH ||
		       n->key_scheme == KVP_WIRE_KEYS_VLLM_XXHASH_CBOR ? 16 : 32;
	ev->block_size = n->block_tokens;
}

static int grow(void **v, uint32_t *cap, uint32_t want, size_t size)
{
	uint32_t c = *cap ? *cap : 16;
	void *nv;

	if (want <= *cap)
		return 0;
	while (c < want)
		c *= 2;
	nv = realloc(*v, (size_t)c * size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = c;
	return 0;
}

/* medium_of() - the raw event's medium of a PREFIX_M_* one of n: the
 * pool's is the host's ("CPU") for a namespace of host pages beside a
 * cuda backend's ("GPU"). */
static unsigned medium_of(const struct ns *n, unsigned m)
{
	if (m == PREFIX_M_POOL)
		return n->be->ops->kind == KVP_BACKEND_HOST &&
		       strcmp(n->events->cfg.pool_medium, "GPU") == 0 ? EVM_HOST : EVM_POOL;
	if (m == PREFIX_M_REMOTE)
		return EVM_REMOTE;
	return m == PREFIX_M_HOST ? EVM_HOST : EVM_NVME;
}

/* add_removed() / add_stored() - one block's event (ids: the block came
 * with token ids), merged into the pending one when vLLM would have sent
 * them as one; removals of blocks with and without token ids apart for a
 * router stream, which leaves the latter out. */
static void add_removed(struct events *ev, const struct ns *n, const uint8_t *key,
			unsigned medium, bool ids, unsigned dest)
{
	struct pend *p = &ev->pend;

	batch_for(ev, n);
	if (p->kind != EV_REMOVED || p->medium != medium || p->dest != dest ||
	    (ev->broute >= 0 && dest != EVD_MAIN && p->ids != ids))
		pend_close(ev);
	if (grow((void **)&p->keys, &p->cap, p->n + 1, KVP_KEY_BYTES) < 0)
		return;		/* lost: no memory */
	if (p->kind != EV_REMOVED) {
		p->kind = EV_REMOVED;
		p->medium = medium;
		p->dest = dest;
		p->ids = ids;
	}
	memcpy(p->keys[p->n++], key, KVP_KEY_BYTES);
}

static void add_stored(struct events *ev, const struct ns *n, const uint8_t *key,
		       const uint8_t *parent, const uint32_t *ids, uint32_t nids,
		       unsigned medium)
{
	struct pend *p = &ev->pend;
	bool has_parent = parent && memcmp(parent, n->root, KVP_KEY_BYTES) != 0;

	batch_for(ev, n);
	if (p->kind != EV_STORED || p->medium != medium || p->ids != (ids != NULL) ||
	    p->dest != EVD_ALL ||
	    !has_parent || memcmp(parent, p->keys[p->n - 1], KVP_KEY_BYTES) != 0)
		pend_close(ev);
	if (grow((void **)&p->keys, &p->cap, p->n + 1, KVP_KEY_BYTES) < 0 ||
	    grow((void **)&p->idv, &p->idcap, p->nids + nids, sizeof(uint32_t)) < 0)
		return;
	if (p->kind != EV_STORED) {
		p->kind = EV_STORED;
		p->medium = medium;
		p->dest = EVD_ALL;
		p->ids = ids != NULL;
		p->has_parent = has_parent;
		if (has_parent)
			memcpy(p->parent, parent, KVP_KEY_BYTES);
	}
	memcpy(p->keys[p->n++], key, KVP_KEY_BYTES);
	if (ids) {
		memcpy(p->idv + p->nids, ids, (size_t)nids * sizeof(uint32_t));
		p->nids += nids;
	}
}

/* ev_moved() - the prefix index's sink (see prefix.h): removals first, so
 * that a block moving down a tier is removed above before it is stored
 * below. */
static void ev_moved(void *arg, const struct prefix *x, uint32_t e, unsigned gone,
		     unsigned came)
{
	const struct ns *n = arg;
	struct events *ev = n->events;
	const uint8_t *key = prefix_key(x, e);
	const uint32_t *ids;
	uint32_t nids;
	unsigned m;

	ids = prefix_block_ids(x, e, &nids);
	for (m = PREFIX_M_POOL; m <= PREFIX_M_REMOTE; m <<= 1)
		if (gone & m)
			add_removed(ev, n, key, medium_of(n, m), ids != NULL, EVD_ALL);
	for (m = PREFIX_M_POOL; m <= PREFIX_M_REMOTE; m <<= 1)
		if (came & m)
			add_stored(ev, n, key, prefix_parent_key(x, e), ids, nids,
				   medium_of(n, m));
}

void events_ns_open(struct events *ev, struct ns *n)
{
	char topic[TOPIC_MAX];
	const char *t;
	bool ruled;
	int r;

	n->events = ev;
	if (!ev)
		return;
	r = route_of(ev, n->name);
	if (!main_on(ev) && r < 0) {	/* it publishes nowhere */
		n->events = NULL;
		return;
	}
	t = topic_template_for(ev->cfg.topic, ev->cfg.ns_topics, ev->cfg.nns_topics, n->name,
			       &ruled);
	if (topic_expand(t, ev->host, n->name, n->model, topic, sizeof(topic)) < 0) {
		log_error("namespace '%s': its KV events topic from '%s' is longer than %u "
			  "bytes; it publishes none (shorten the template or the model name)",
			  n->name, t, TOPIC_MAX - 1);
		n->events = NULL;
		return;
	}
	n->ev_topic = strdup(topic);
	if (!n->ev_topic) {
		log_error("namespace '%s': out of memory for its KV events topic; it "
			  "publishes none", n->name);
		n->events = NULL;
		return;
	}
	if (main_on(ev))
		log_info("namespace '%s': KV events on topic '%s'%s", n->name, topic,
			 ruled ? " (kv-events-ns-topic)" : "");
	if (r >= 0)
		log_info("namespace '%s': KV events for a router on %s%s%s (kv-events-router: "
			 "topic \"\", sequence number %llu next)", n->name,
			 ev->routes[r].st.endpoint, ev->routes[r].st.replay[0] ?
			 ", replay on " : "", ev->routes[r].st.replay,
			 (unsigned long long)ev->routes[r].next_seq);
	prefix_set_sink(n->idx, ev_moved, n);
}

static void add_cleared(struct events *ev, const struct ns *n, unsigned dest)
{
	batch_for(ev, n);
	pend_close(ev);
	ev->pend.kind = EV_CLEARED;
	ev->pend.dest = dest;
	pend_close(ev);
}

void events_ns_gone(struct events *ev, struct ns *n, const struct ns_table *t)
{
	uint32_t i, e;
	unsigned m;

	if (!ev || !n->events)
		return;
	for (i = 0; i < t->count; i++)
		if (t->ns[i] != n && t->ns[i]->events &&
		    !strcmp(t->ns[i]->ev_topic, n->ev_topic))
			break;
	if (i == t->count) {
		add_cleared(ev, n, EVD_ALL);
	} else {
		for (e = prefix_next(n->idx, PREFIX_NIL); e; e = prefix_next(n->idx, e))
			for (m = PREFIX_M_POOL; m <= PREFIX_M_REMOTE; m <<= 1)
				if (prefix_media(n->idx, e) & m)
					add_removed(ev, n, prefix_key(n->idx, e),
						    medium_of(n, m), false, EVD_MAIN);
		if (route_of(ev, n->name) >= 0)	/* its router stream is its own */
			add_cleared(ev, n, EVD_ROUTER);
	}
	batch_close(ev);	/* before n goes: the batch points to it */
	prefix_set_sink(n->idx, NULL, NULL);
	n->events = NULL;
}

void events_all_gone(struct events *ev, const struct ns_table *t)
{
	uint32_t i, j;

	if (!ev)
		return;
	for (i = 0; i < t->count; i++) {
		if (!t->ns[i]->events)	/* no topic: it publishes nothing */
			continue;
		for (j = 0; j < i; j++)
			if (t->ns[j]->events && !strcmp(t->ns[j]->ev_topic, t->ns[i]->ev_topic))
				break;
		if (j == i)
			add_cleared(ev, t->ns[i], EVD_ALL);
		else if (route_of(ev, t->ns[i]->name) >= 0)
			add_cleared(ev, t->ns[i], EVD_ROUTER);
	}
	batch_close(ev);
}

static void timer_done(struct loop_op *op, int res)
{
	struct events *ev = (struct events *)((char *)op - offsetof(struct events, timer_op));

	(void)res;
	ev->armed = false;
	if (ev->bns)
		batch_close(ev);
}

/* events_flush() - a batch gathers the events of WINDOW_MS (vLLM's gather
 * an engine step's), so that a busy loop does not wake the publisher for
 * every request: the turn that finds it that old closes it, else a timer
 * does. */
void events_flush(void *arg)
{
	struct events *ev = arg;

	if (!ev->bns)
		return;
	if (mono_ns() - ev->opened_ns >= WINDOW_MS * 1000000u || !ev->loop) {
		batch_close(ev);
		return;
	}
	if (!ev->armed) {
		if (loop_timeout(ev->loop, &ev->timer_op, &ev->timer_ts, WINDOW_MS) == 0)
			ev->armed = true;
		else
			batch_close(ev);	/* a full ring: now, then */
	}
}

void events_stats(struct events *ev, struct kvp_wire_events_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!ev)
		return;
	if (ev->bns)		/* what STATS reports includes what happened */
		batch_close(ev);
	st->enabled = 1;
	st->batches = atomic_load(&ev->sent_batches);
	st->events = atomic_load(&ev->sent_events);
	st->dropped_batches = ev->dropped_batches;
	st->dropped_events = ev->dropped_events;
	pthread_mutex_lock(&ev->mu);
	st->queued_bytes = ev->queued_bytes;
	pthread_mutex_unlock(&ev->mu);
	st->replays = atomic_load(&ev->replays);
	st->replayed = atomic_load(&ev->replayed);
}

/* events_log_start() - what was bound, and how events are sent. */
static void events_log_start(const struct events *ev)
{
	const char *enc = ev->cfg.format == EVENTS_FORMAT_MAP ? "map (vLLM >= 0.24)" :
			  "array (vLLM <= 0.23)";
	const char *hashes = ev->cfg.hashes == EVENTS_HASH_INT ? "64-bit integer" : "bytes";
	unsigned i;

	if (main_on(ev))
		log_info("kv events: publishing on %s%s%s (%s encoding, %s block hashes, "
			 "topic %s)", ev->main.endpoint, ev->main.router ? ", replay on " : "",
			 ev->main.router ? ev->main.replay : "", enc, hashes, ev->cfg.topic);
	for (i = 0; i < ev->nroutes; i++)
		log_info("kv events: namespace '%s' alone for a router on %s%s%s (%s encoding, "
			 "%s block hashes, topic \"\", sequence numbers of its own; no REMOTE "
			 "events, no blocks without token ids)", ev->routes[i].ns,
			 ev->routes[i].st.endpoint, ev->routes[i].st.router ? ", replay on " : "",
			 ev->routes[i].st.router ? ev->routes[i].st.replay : "", enc, hashes);
}

int events_start(struct events **out, const struct events_config *cfg, char *err,
		 size_t errlen)
{
	struct events *ev = calloc(1, sizeof(*ev));
	int rc;

	if (!ev) {
		snprintf(err, errlen, "--kv-events: out of memory");
		return -ENOMEM;
	}
	ev->cfg = *cfg;
	ev->loop = cfg->loop;
	ev->broute = -1;
	ev->main = (struct stream){ .flag = "--kv-events",
				    .endpoint = cfg->endpoint ? cfg->endpoint : "",
				    .replay = cfg->endpoint && cfg->endpoint[0] && cfg->replay ?
					      cfg->replay : "" };
	for (; ev->nroutes < cfg->nroutes && ev->nroutes < TOPIC_ROUTES_MAX; ev->nroutes++) {
		const struct topic_route *r = &cfg->routes[ev->nroutes];

		ev->routes[ev->nroutes] = (struct route){ .ns = r->ns, .st = {
			.flag = "--kv-events-router", .endpoint = r->pub, .replay = r->replay } };
	}
	ev->timer_op.done = timer_done;
	pthread_mutex_init(&ev->mu, NULL);
	pthread_cond_init(&ev->started_cv, NULL);
	if (gethostname(ev->host, sizeof(ev->host) - 1) < 0)
		snprintf(ev->host, sizeof(ev->host), "localhost");
	ev->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ev->efd < 0) {
		rc = -errno;
		snprintf(err, errlen, "--kv-events: cannot make an eventfd: %s", strerror(-rc));
		goto out_free;
	}
	if (topic_template_check(cfg->topic, err, errlen) < 0 ||
	    topic_rules_check(cfg->topic, cfg->ns_topics, cfg->nns_topics, ev->host, err,
			      errlen) < 0 ||
	    topic_routes_check(cfg->routes, cfg->nroutes, ev->main.endpoint, ev->main.replay,
			       err, errlen) < 0) {
		rc = -EINVAL;
		goto out_free;
	}
	rc = events_pub_start(ev, err, errlen);
	if (rc < 0)
		goto out_free;
	events_log_start(ev);
	*out = ev;
	return 0;

out_free:
	events_free(ev);
	return rc;
}

void events_free(struct events *ev)
{
	struct emsg *m;
	uint64_t one = 1;

	if (!ev)
		return;
	if (ev->running) {
		if (ev->bns)
			batch_close(ev);
		pthread_mutex_lock(&ev->mu);
		ev->stopping = true;
		pthread_mutex_unlock(&ev->mu);
		if (write(ev->efd, &one, sizeof(one)) < 0)
			log_debug("kv events: waking the publisher: %s", strerror(errno));
		events_pub_stop(ev);
	}
	while ((m = ev->qhead)) {
		ev->qhead = m->next;
		free(m);
	}
	events_pub_fini(ev);
	if (ev->efd >= 0)
		close(ev->efd);
	free(ev->raw);
	free(ev->pend.keys);
	free(ev->pend.idv);
	pthread_cond_destroy(&ev->started_cv);
	pthread_mutex_destroy(&ev->mu);
	free(ev);
}

#else /* !HAVE_KV_EVENTS */

bool events_built(void)
{
	return false;
}

int events_start(struct events **out, const struct events_config *cfg, char *err,
		 size_t errlen)
{
	(void)cfg;
	*out = NULL;
	snprintf(err, errlen, "--kv-events: kvpoold was built without libzmq or msgpack-c; "
		 "install libzmq3-dev and libmsgpack-dev and build it again");
	return -ENOTSUP;
}

void events_ns_open(struct events *ev, struct ns *n)
{
	(void)ev;
	n->events = NULL;
}

void events_ns_gone(struct events *ev, struct ns *n, const struct ns_table *t)
{
	(void)ev, (void)n, (void)t;
}

void events_all_gone(struct events *ev, const struct ns_table *t)
{
	(void)ev, (void)t;
}

void events_flush(void *arg)
{
	(void)arg;
}

void events_stats(struct events *ev, struct kvp_wire_events_stats *st)
{
	(void)ev;
	memset(st, 0, sizeof(*st));
}

void events_free(struct events *ev)
{
	(void)ev;
}

#endif /* HAVE_KV_EVENTS */
