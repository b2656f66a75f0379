/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - the Prometheus endpoint of kvpoold (see metrics.h).
 *
 * A scrape (libmicrohttpd's thread) asks by bumping `asked` and writing
 * the eventfd; the loop's read of it completes, the loop renders STATS as
 * text, swaps it in and bumps `gen`; the scrape, waiting on the condition
 * (at most METRICS_WAIT_MS, then it serves the last text), copies it out.
 * Scrapes that come together share one rendering.
 *
 * The HTTP thread is kvpoold's (serve()): it runs libmicrohttpd on its
 * epoll descriptor and, between runs, closes connections past their
 * deadline, which libmicrohttpd's idle timeout alone never would for a
 * client that sends a byte a second. Who may connect, and how many, is
 * accept_ok()'s.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/stats_text.h"
#include "daemon/log.h"
#include "client/wire.h"
#include "daemon/observe/hist.h"
#include "daemon/observe/metrics.h"
#include "daemon/remote/remote.h"
#include "daemon/requests/requests.h"
#include "daemon/serve/conn.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

#ifdef HAVE_LIBMICROHTTPD
#include <microhttpd.h>

#define METRICS_WAIT_MS 2000
/* A scrape takes milliseconds: connections are few, short and per source,
 * so that idle or slow connections from one place cannot take every slot
 * and blind the alerts of the others. A source is this machine (loopback,
 * 127.0.0.0/8 and ::1, and every address of its own: every local user
 * shares them), one IPv4 address, or one IPv6 address, and an IPv6 /64
 * (one network, or one host's many addresses) holds a few sources. */
#define METRICS_CONNS		64u	/* connections in all */
#define METRICS_CONNS_PER_SRC	4u	/* from one source (Prometheus: 1 each) */
#define METRICS_CONNS_PER_NET	16u	/* from one IPv6 /64 */
#define METRICS_ADDRS_EVERY_NS	1000000000ull	/* the machine's addresses, read again */
#define METRICS_IDLE_S		3u	/* a connection silent this long is closed */
#define METRICS_DEADLINE_S	5u	/* a request and its reply, whole, within */
#define METRICS_SWEEP_MS	250	/* how often deadlines are looked at */
#define METRICS_SAY_EVERY_S	60u	/* libmicrohttpd's errors: a line a minute */

/* Where a connection comes from, as the limits count it: kind 0 for this
 * machine (the address all zero), 4 an IPv4 address (as ::ffff:a.b.c.d),
 * 6 an IPv6 address. */
struct msrc {
	uint8_t kind;
	uint8_t addr[16];
};

/* A connection libmicrohttpd holds (its socket context), from its start
 * to its close, on the thread that runs libmicrohttpd. */
struct mconn {
	struct mconn *prev, *next;
	struct msrc src;
	int fd;
	uint64_t deadline_ns;	/* the request under way must be answered by */
};

/* What is logged a line a minute at most: when last, and what was not. */
struct said {
	uint64_t ns;
	unsigned unsaid;
};

struct metrics {
	struct loop *loop;
	struct server *srv;
	struct MHD_Daemon *mhd;
	int efd, lfd;
	uint64_t ebuf;
	struct loop_op read_op, cancel_op;
	bool reading;

	/* the HTTP thread's: libmicrohttpd run on its epoll fd, the
	 * connections it holds, and their deadlines */
	pthread_t thread;
	bool thread_started;
	int stopfd;		/* written to stop the thread */
	struct mconn *conns;
	unsigned nconns;
	uint8_t (*mine)[16];	/* the machine's addresses (as in struct msrc) */
	unsigned nmine;
	uint64_t mine_ns;	/* when they were read */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *text;		/* the last snapshot, or NULL */
	size_t len;
	uint64_t asked, gen;	/* snapshots asked for, and the one text is */
	bool stopping;
	struct said said_mhd;	/* libmicrohttpd's errors */
	struct said said_refused;	/* connections refused over the limits */
	struct said said_cut;	/* connections closed at their deadline */
};

bool metrics_built(void)
{
	return true;
}

static void metrics_post(struct metrics *m);

/*
 * vsay() - one line for the log at most every METRICS_SAY_EVERY_S of
 * kind *k, with a count of the others: a flood of connections must not
 * flood the log too. Any thread.
 */
static void vsay(struct metrics *m, struct said *k, const char *fmt, va_list ap)
{
	char line[256];
	unsigned unsaid;

	pthread_mutex_lock(&m->mu);
	if (!log_every(&k->ns, METRICS_SAY_EVERY_S)) {
		k->unsaid++;
		pthread_mutex_unlock(&m->mu);
		return;
	}
	unsaid = k->unsaid;
	k->unsaid = 0;
	pthread_mutex_unlock(&m->mu);
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_warn("metrics: %s (%u more such in the last minute not logged; at most %u "
		 "connections, %u from one source (this machine is one), each request "
		 "answered within %u s, closed after %u s idle)", line, unsaid, METRICS_CONNS,
		 METRICS_CONNS_PER_SRC, METRICS_DEADLINE_S, METRICS_IDLE_S);
}

/* mhd_log() - libmicrohttpd's errors (a refused connection, a timeout). */
static void mhd_log(void *arg, const char *fmt, va_list ap)
{
	struct metrics *m = arg;

	vsay(m, &m->said_mhd, fmt, ap);
}

/* say() - what kvpoold itself refuses or cuts, a line a minute of each. */
static void say(struct metrics *m, struct said *k, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(struct metrics *m, struct said *k, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(m, k, fmt, ap);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The start of an IPv4 address in IPv6 (::ffff:a.b.c.d), as struct msrc
 * holds one. */
static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* mine_read() - the machine's own addresses, read again once a second at
 * most (a flood of connections costs one read a second). */
static void mine_read(struct metrics *m)
{
	struct ifaddrs *ifs, *i;
	uint8_t (*v)[16];
	unsigned n = 0;

	if (m->mine_ns && now_ns() - m->mine_ns < METRICS_ADDRS_EVERY_NS)
		return;
	m->mine_ns = now_ns();
	if (getifaddrs(&ifs) < 0)
		return;		/* the last ones stay */
	for (i = ifs; i; i = i->ifa_next)
		n += i->ifa_addr && (i->ifa_addr->sa_family == AF_INET ||
				     i->ifa_addr->sa_family == AF_INET6);
	v = calloc(n ? n : 1, sizeof(*v));
	if (v) {
		n = 0;
		for (i = ifs; i; i = i->ifa_next) {
			if (!i->ifa_addr)
				continue;
			if (i->ifa_addr->sa_family == AF_INET) {
				memcpy(v[n], mapped, sizeof(mapped));
				memcpy(v[n++] + 12, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
			} else if (i->ifa_addr->sa_family == AF_INET6) {
				memcpy(v[n++], &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
			}
		}
		free(m->mine);
		m->mine = v;
		m->nmine = n;
	}
	freeifaddrs(ifs);
}

/* source_of() - the source address sa counts as (see struct msrc). */
static void source_of(struct metrics *m, const struct sockaddr *sa, struct msrc *s)
{
	static const uint8_t one[16] = { [15] = 1 };
	unsigned i;

	memset(s, 0, sizeof(*s));
	if (sa->sa_family == AF_INET) {
		memcpy(s->addr, mapped, sizeof(mapped));
		memcpy(s->addr + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(s->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	} else {
		return;		/* not an IP: this machine's */
	}
	s->kind = memcmp(s->addr, mapped, sizeof(mapped)) ? 6 : 4;
	if ((s->kind == 4 && s->addr[12] == 127) || !memcmp(s->addr, one, sizeof(one)))
		goto mine;
	mine_read(m);
	for (i = 0; i < m->nmine; i++)
		if (!memcmp(m->mine[i], s->addr, 16))
			goto mine;
	return;
mine:
	memset(s, 0, sizeof(*s));
}

/* source_text() - s for the log. */
static const char *source_text(const struct msrc *s, char *buf, size_t len)
{
	if (s->kind == 0)
		return "this machine";
	inet_ntop(s->kind == 4 ? AF_INET : AF_INET6, s->kind == 4 ? s->addr + 12 : s->addr,
		  buf, (socklen_t)len);
	return buf;
}

/*
 * accept_ok() - libmicrohttpd's accept policy: a connection is taken while
 * fewer than METRICS_CONNS are open, fewer than METRICS_CONNS_PER_SRC
 * from its source and METRICS_CONNS_PER_NET from its IPv6 /64. Since this
 * machine (loopback and its own addresses) is one source, local users
 * together hold a few slots at most, and the others stay for the
 * scrapers elsewhere.
 */
static enum MHD_Result accept_ok(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct metrics *m = cls;
	unsigned same = 0, net = 0;
	struct mconn *c;
	struct msrc s;
	char b[64];

	(void)len;
	source_of(m, addr, &s);
	for (c = m->conns; c; c = c->next) {
		same += !memcmp(&c->src, &s, sizeof(s));
		net += s.kind == 6 && c->src.kind == 6 && !memcmp(c->src.addr, s.addr, 8);
	}
	if (m->nconns < METRICS_CONNS && same < METRICS_CONNS_PER_SRC &&
	    net < METRICS_CONNS_PER_NET)
		return MHD_YES;
	say(m, &m->said_refused, "refused a connection from %s: %u of %u from there (%u of "
	    "%u from its /64), %u of %u in all", source_text(&s, b, sizeof(b)), same,
	    METRICS_CONNS_PER_SRC, net, METRICS_CONNS_PER_NET, m->nconns, METRICS_CONNS);
	return MHD_NO;
}

/* notify_conn() - a connection starts (it is counted, with the deadline of
 * its first request) or ends. */
static void notify_conn(void *cls, struct MHD_Connection *conn, void **ctx,
			enum MHD_ConnectionNotificationCode toe)
{
	struct metrics *m = cls;
	struct mconn *c = *ctx;
	const union MHD_ConnectionInfo *fd, *addr;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		c = fd && addr ? calloc(1, sizeof(*c)) : NULL;
		*ctx = c;
		if (!c)
			return;	/* not counted: libmicrohttpd's own limit holds */
		source_of(m, addr->client_addr, &c->src);
		c->fd = fd->connect_fd;
		c->deadline_ns = now_ns() + METRICS_DEADLINE_S * 1000000000ull;
		c->next = m->conns;
		if (m->conns)
			m->conns->prev = c;
		m->conns = c;
		m->nconns++;
		return;
	}
	if (!c)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		m->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	m->nconns--;
	free(c);
	*ctx = NULL;
}

/* request_done() - a reply went out: the connection's next request has a
 * deadline of its own. */
static void request_done(void *cls, struct MHD_Connection *conn, void **state,
			 enum MHD_RequestTerminationCode toe)
{
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct mconn *c = i ? i->socket_context : NULL;

	(void)cls;
	(void)state;
	(void)toe;
	if (c)
		c->deadline_ns = now_ns() + METRICS_DEADLINE_S * 1000000000ull;
}

/*
 * sweep() - a connection past its deadline (a request that crawls in a
 * byte a second, a reply read as slowly) is shut down; libmicrohttpd
 * sees it end and closes it. On the HTTP thread, between runs, so the
 * descriptor is still the connection's.
 */
static void sweep(struct metrics *m)
{
	uint64_t now = now_ns();
	const char *one = NULL;
	unsigned cut = 0;
	struct mconn *c;
	char b[64];

	for (c = m->conns; c; c = c->next) {
		if (now < c->deadline_ns)
			continue;
		shutdown(c->fd, SHUT_RDWR);
		c->deadline_ns = UINT64_MAX;
		if (!cut++)
			one = source_text(&c->src, b, sizeof(b));
	}
	if (cut)
		say(m, &m->said_cut, "closed %u connections that sent no whole request and "
		    "read no whole reply within %u s (one from %s)", cut, METRICS_DEADLINE_S,
		    one);
}

/* serve() - the HTTP thread: libmicrohttpd on its epoll descriptor, and
 * the deadlines, until stopfd is written. */
static void *serve(void *arg)
{
	struct metrics *m = arg;
	const union MHD_DaemonInfo *i = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	struct pollfd p[2] = { { .fd = i ? i->epoll_fd : -1, .events = POLLIN },
			       { .fd = m->stopfd, .events = POLLIN } };
	MHD_UNSIGNED_LONG_LONG to;
	int ms;

	while (!(p[1].revents & POLLIN)) {
		ms = METRICS_SWEEP_MS;
		if (MHD_get_timeout(m->mhd, &to) == MHD_YES && to < (MHD_UNSIGNED_LONG_LONG)ms)
			ms = (int)to;
		if (poll(p, 2, ms) < 0 && errno != EINTR)
			break;
		MHD_run(m->mhd);
		sweep(m);
	}
	return NULL;
}

/* waits() - the ACQUIREs that wait for keys (requests/wait.c), after
 * STATS' figures: the server's own counts, not on the wire. */
static void waits(FILE *f, const struct server *s)
{
	fprintf(f, "# HELP kvpool_acquire_waits ACQUIREs waiting now for keys another client "
		"is saving (WAIT: a decode engine's wait for its prefill engine's blocks).\n"
		"# TYPE kvpool_acquire_waits gauge\nkvpool_acquire_waits %u\n"
		"# HELP kvpool_acquire_waits_expired_total Waits that ended at their deadline "
		"with keys still lacking (answered with what was held).\n"
		"# TYPE kvpool_acquire_waits_expired_total counter\n"
		"kvpool_acquire_waits_expired_total %llu\n"
		"# HELP kvpool_acquire_waits_refused_total ACQUIREs with WAIT refused at "
		"--max-waits-per-uid.\n# TYPE kvpool_acquire_waits_refused_total counter\n"
		"kvpool_acquire_waits_refused_total %llu\n"
		"# HELP kvpool_acquire_waits_abandoned_total Waits answered at once because "
		"a key they lacked was abandoned (its prefill engine skipped or failed its "
		"save).\n# TYPE kvpool_acquire_waits_abandoned_total counter\n"
		"kvpool_acquire_waits_abandoned_total %llu\n"
		"# HELP kvpool_handoff_tickets_issued_total Handoff tickets issued to prefill "
		"engines.\n# TYPE kvpool_handoff_tickets_issued_total counter\n"
		"kvpool_handoff_tickets_issued_total %llu\n"
		"# HELP kvpool_handoff_tickets_refused_total Handoff tickets a decode engine "
		"showed that were refused: forged, for other blocks, or expired.\n"
		"# TYPE kvpool_handoff_tickets_refused_total counter\n"
		"kvpool_handoff_tickets_refused_total %llu\n"
		"# HELP kvpool_handoff_keys_abandoned_total Blocks a prefill engine said it "
		"will not save (its save skipped or failed).\n"
		"# TYPE kvpool_handoff_keys_abandoned_total counter\n"
		"kvpool_handoff_keys_abandoned_total %llu\n"
		"# HELP kvpool_handoff_orphaned_total Handoffs whose prefill engine's "
		"connection ended before their last block was published (an engine that "
		"died): their last keys abandoned.\n"
		"# TYPE kvpool_handoff_orphaned_total counter\n"
		"kvpool_handoff_orphaned_total %llu\n", s->kwait_n,
		(unsigned long long)s->n.kwaits_expired, (unsigned long long)s->n.kwaits_refused,
		(unsigned long long)s->n.kwaits_abandoned, (unsigned long long)s->n.tickets_issued,
		(unsigned long long)s->n.tickets_refused, (unsigned long long)s->n.keys_abandoned,
		(unsigned long long)s->n.handoffs_orphaned);
}

/* protocols() - the clients by the protocol version they speak: during
 * a rolling upgrade, how many still speak the previous release's. */
static void protocols(FILE *f, const struct server *s)
{
	unsigned v;

	fputs("# HELP kvpool_clients_by_protocol Client connections served now, by the "
	      "protocol version they speak (the previous release's: engines not upgraded "
	      "yet).\n# TYPE kvpool_clients_by_protocol gauge\n", f);
	for (v = KVP_WIRE_VERSION_MIN; v <= KVP_WIRE_VERSION; v++)
		fprintf(f, "kvpool_clients_by_protocol{version=\"%u\"} %u\n", v,
			s->nproto[v - KVP_WIRE_VERSION_MIN]);
}

/* histograms() - the latency histograms, after STATS' figures. */
static void histograms(FILE *f, const struct server *s)
{
	struct remote_stats rs;
	char label[64];
	unsigned op;

	fputs("# HELP kvpool_request_seconds Requests, from arrival to reply, by operation "
	      "(one that waits, for a tier, the remote tier or a namespace being made, with "
	      "its wait).\n# TYPE kvpool_request_seconds histogram\n", f);
	for (op = 1; op < sizeof(s->n.rt) / sizeof(s->n.rt[0]); op++) {
		snprintf(label, sizeof(label), "op=\"%s\"", wire_op_str(op));
		hist_print(f, "kvpool_request_seconds", label, &s->n.rt[op]);
	}
	fputs("# HELP kvpool_tier_restore_seconds Blocks read back from a local tier (host "
	      "or NVMe) for an ACQUIRE, from the read's start to the page in the pool.\n"
	      "# TYPE kvpool_tier_restore_seconds histogram\n", f);
	hist_print(f, "kvpool_tier_restore_seconds", "", &s->n.restores);
	if (s->remote) {
		remote_get_stats(s->remote, &rs);
		fputs("# HELP kvpool_remote_get_seconds GETs of the remote tier that Redis "
		      "answered, from sending to the answer.\n"
		      "# TYPE kvpool_remote_get_seconds histogram\n", f);
		hist_print(f, "kvpool_remote_get_seconds", "", &rs.gets_hist);
	}
}

/* metrics_render() - the loop's side: STATS as text, swapped in. */
static void metrics_render(struct metrics *m)
{
	char *text = NULL, *old;
	size_t tlen = 0, len;
	uint8_t *buf;
	FILE *f;

	buf = requests_stats(m->srv, &len);
	f = buf ? open_memstream(&text, &tlen) : NULL;
	if (f) {
		const struct kvp_wire_stats *st = (const void *)buf;

		stats_metrics(f, st, (const void *)(buf + sizeof(*st)),
			      (int)((len - sizeof(*st)) / sizeof(struct kvp_wire_ns_stats)));
		waits(f, m->srv);
		protocols(f, m->srv);
		histograms(f, m->srv);
		if (fclose(f) != 0) {
			free(text);
			text = NULL;
		}
	}
	free(buf);
	if (!text)
		log_error("--metrics-listen: out of memory for a snapshot; the scrape gets "
			  "the last one");
	pthread_mutex_lock(&m->mu);
	old = text ? m->text : NULL;
	if (text) {
		m->text = text;
		m->len = tlen;
	}
	m->gen = m->asked;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	free(old);
}

static void metrics_read_done(struct loop_op *op, int res)
{
	struct metrics *m = container_of(op, struct metrics, read_op);

	m->reading = false;
	if (m->stopping || res == -ECANCELED)
		return;
	if (res < 0 && res != -EAGAIN && res != -EINTR) {
		log_error("--metrics-listen: reading its eventfd failed: %s; no more "
			  "snapshots", strerror(-res));
		return;
	}
	metrics_render(m);
	metrics_post(m);
}

static void metrics_post(struct metrics *m)
{
	if (m->stopping)
		return;
	if (loop_read(m->loop, &m->read_op, m->efd, &m->ebuf, sizeof(m->ebuf)) < 0) {
		log_error("--metrics-listen: cannot queue its read: ring full; no more "
			  "snapshots");
		return;
	}
	m->reading = true;
}

static void cancel_done(struct loop_op *op, int res)
{
	(void)op;
	(void)res;
}

/* snapshot() - the scrape's side: a fresh text, or the last one after
 * METRICS_WAIT_MS (a loop that busy). Returns a copy to free, or NULL. */
static char *snapshot(struct metrics *m, size_t *len)
{
	uint64_t one = 1, want;
	struct timespec until;
	char *copy = NULL;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += METRICS_WAIT_MS / 1000;
	pthread_mutex_lock(&m->mu);
	if (!m->stopping) {
		want = ++m->asked;
		(void)!write(m->efd, &one, sizeof(one));
		while (m->gen < want && !m->stopping &&
		       pthread_cond_timedwait(&m->cv, &m->mu, &until) == 0)
			;
	}
	if (m->text && !m->stopping) {
		copy = malloc(m->len ? m->len : 1);
		if (copy) {
			memcpy(copy, m->text, m->len);
			*len = m->len;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return copy;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body,
			     size_t len, const char *type)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result text_reply(struct MHD_Connection *conn, unsigned status,
				  const char *msg)
{
	char *body = strdup(msg);

	return body ? reply(conn, status, body, strlen(body), "text/plain; charset=utf-8")
		    : MHD_NO;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **state)
{
	struct metrics *m = cls;
	size_t len = 0;
	char *text;

	(void)version;
	(void)upload;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return text_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
				  "kvpoold serves GET /metrics only\n");
	if (*upload_size) {
		*upload_size = 0;	/* a GET with a body: ignored */
		return MHD_YES;
	}
	(void)state;
	if (strcmp(url, "/metrics"))
		return text_reply(conn, MHD_HTTP_NOT_FOUND,
				  "kvpoold serves its Prometheus metrics at /metrics\n");
	text = snapshot(m, &len);
	if (!text)
		return text_reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
				  "kvpoold is stopping, or has no snapshot yet\n");
	return reply(conn, MHD_HTTP_OK, text, len, "text/plain; version=0.0.4; charset=utf-8");
}

/* listen_on() - bind and listen on spec, saying what failed and why; the
 * address as it is bound into where. */
static int listen_on(const char *spec, char *where, size_t wlen, char *err, size_t errlen)
{
	char host[256] = "127.0.0.1", port[16];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
	const char *colon = strrchr(spec, ':'), *given = spec;
	int fd, rc, one = 1;
	unsigned long pn;
	char *end;
	size_t hl;

	if (!colon) {
		snprintf(port, sizeof(port), "%s", spec);
	} else {
		hl = (size_t)(colon - spec);
		if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
			spec++;
			hl -= 2;
		}
		if (hl == 0 || hl >= sizeof(host) || strlen(colon + 1) >= sizeof(port)) {
			snprintf(err, errlen, "--metrics-listen %s: give PORT, HOST:PORT or "
				 "[IPV6]:PORT", spec);
			return -EINVAL;
		}
		memcpy(host, spec, hl);
		host[hl] = '\0';
		snprintf(port, sizeof(port), "%s", colon + 1);
	}
	pn = strtoul(port, &end, 10);
	if (!port[0] || *end || port[0] == '-' || port[0] == '+' || pn < 1 || pn > 65535) {
		snprintf(err, errlen, "--metrics-listen %s: port '%s' is not 1..65535", given,
			 port);
		return -EINVAL;
	}
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		snprintf(err, errlen, "--metrics-listen: %s port %s: %s", host, port,
			 gai_strerror(rc));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
		rc = -errno;
		snprintf(err, errlen, "--metrics-listen: cannot listen on %s port %s: %s%s",
			 host, port, strerror(-rc), rc == -EADDRINUSE ? " (another program "
			 "has that port: choose another)" : "");
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return rc;
	}
	freeaddrinfo(ai);
	snprintf(where, wlen, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
	return fd;
}

int metrics_start(struct metrics **out, const char *listen, struct loop *l, struct server *s,
		  char *err, size_t errlen)
{
	struct metrics *m = calloc(1, sizeof(*m));
	char where[300];

	if (!m) {
		snprintf(err, errlen, "--metrics-listen: out of memory");
		return -ENOMEM;
	}
	m->loop = l;
	m->srv = s;
	m->efd = m->lfd = m->stopfd = -1;
	m->read_op.done = metrics_read_done;
	m->cancel_op.done = cancel_done;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	m->lfd = listen_on(listen, where, sizeof(where), err, errlen);
	if (m->lfd < 0) {
		int rc = m->lfd;

		m->lfd = -1;
		metrics_free(m);
		return rc;
	}
	m->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->efd < 0) {
		int rc = -errno;

		snprintf(err, errlen, "--metrics-listen: eventfd: %s", strerror(-rc));
		metrics_free(m);
		return rc;
	}
	metrics_render(m);	/* a first snapshot, before any scrape */
	m->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	m->mhd = m->stopfd < 0 ? NULL :
		 MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, accept_ok, m, handle, m,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m,
				  MHD_OPTION_LISTEN_SOCKET, m->lfd,
				  MHD_OPTION_CONNECTION_LIMIT, METRICS_CONNS + 1,
				  MHD_OPTION_CONNECTION_TIMEOUT, METRICS_IDLE_S,
				  MHD_OPTION_NOTIFY_CONNECTION, notify_conn, m,
				  MHD_OPTION_NOTIFY_COMPLETED, request_done, m, MHD_OPTION_END);
	if (!m->mhd) {
		snprintf(err, errlen, "--metrics-listen: libmicrohttpd would not start on %s",
			 listen);
		metrics_free(m);
		return -EIO;
	}
	m->lfd = -1;	/* libmicrohttpd's now */
	if (pthread_create(&m->thread, NULL, serve, m) != 0) {
		snprintf(err, errlen, "--metrics-listen: cannot start its thread");
		metrics_free(m);
		return -EAGAIN;
	}
	m->thread_started = true;
	metrics_post(m);
	log_info("metrics: Prometheus text at http://%s/metrics", where);
	*out = m;
	return 0;
}

void metrics_stop(struct metrics *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->stopping = true;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	if (m->reading)
		loop_cancel(m->loop, &m->cancel_op, &m->read_op);
}

void metrics_free(struct metrics *m)
{
	uint64_t one = 1;

	if (!m)
		return;
	if (m->thread_started) {
		(void)!write(m->stopfd, &one, sizeof(one));
		pthread_join(m->thread, NULL);
	}
	if (m->mhd)
		MHD_stop_daemon(m->mhd);	/* closes the listening socket */
	if (m->stopfd >= 0)
		close(m->stopfd);
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->efd >= 0)
		close(m->efd);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m->text);
	free(m->mine);
	free(m);
}

void metrics_print_library(FILE *f)
{
	fprintf(f, "  libmicrohttpd %s\n", MHD_get_version());
}

#else /* !HAVE_LIBMICROHTTPD */

void metrics_print_library(FILE *f)
{
	(void)f;
}

bool metrics_built(void)
{
	return false;
}

int metrics_start(struct metrics **out, const char *listen, struct loop *l, struct server *s,
		  char *err, size_t errlen)
{
	(void)out;
	(void)l;
	(void)s;
	snprintf(err, errlen, "--metrics-listen %s: this kvpoold was built without "
		 "libmicrohttpd (apt-get install libmicrohttpd-dev, then configure again); "
		 "`kvpool metrics` prints the same text", listen);
	return -ENOTSUP;
}

void metrics_stop(struct metrics *m)
{
	(void)m;
}

void metrics_free(struct metrics *m)
{
	(void)m;
}

#endif
