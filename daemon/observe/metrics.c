/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - the Prometheus endpoint of kvpoold (see metrics.h).
 *
 * A scrape (libmicrohttpd's thread) asks by bumping `asked` and writing
 * the eventfd; the loop's read of it completes, the loop renders STATS as
 * text, swaps it in and bumps `gen`; the scrape, waiting on the condition
 * (at most METRICS_WAIT_MS, then it serves the last text), copies it out.
 * Scrapes that come together share one rendering.
 */
#include <errno.h>
#include <netdb.h>
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
#include "daemon/observe/metrics.h"
#include "daemon/requests/requests.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

#ifdef HAVE_LIBMICROHTTPD
#include <microhttpd.h>

#define METRICS_WAIT_MS 2000
/* A scrape takes milliseconds: connections are few, short and per host,
 * so that idle or slow connections from one host cannot take every slot
 * and blind the alerts of the others. */
#define METRICS_CONNS		64u	/* connections in all */
#define METRICS_CONNS_PER_IP	4u	/* from one address (Prometheus: 1 each) */
#define METRICS_IDLE_S		3u	/* a connection silent this long is closed */
#define METRICS_SAY_EVERY_S	60u	/* libmicrohttpd's errors: a line a minute */

struct metrics {
	struct loop *loop;
	struct server *srv;
	struct MHD_Daemon *mhd;
	int efd, lfd;
	uint64_t ebuf;
	struct loop_op read_op, cancel_op;
	bool reading;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *text;		/* the last snapshot, or NULL */
	size_t len;
	uint64_t asked, gen;	/* snapshots asked for, and the one text is */
	bool stopping;
	uint64_t said_ns;	/* libmicrohttpd's last error logged */
	unsigned unsaid;	/* its errors since, not logged */
};

bool metrics_built(void)
{
	return true;
}

static void metrics_post(struct metrics *m);

/*
 * mhd_log() - libmicrohttpd's errors (a refused connection, a timeout)
 * go to the daemon's log, one line a minute at most with a count of the
 * others: a flood of connections must not flood the log too.
 */
static void mhd_log(void *arg, const char *fmt, va_list ap)
{
	struct metrics *m = arg;
	char line[256];
	unsigned unsaid;

	pthread_mutex_lock(&m->mu);
	if (!log_every(&m->said_ns, METRICS_SAY_EVERY_S)) {
		m->unsaid++;
		pthread_mutex_unlock(&m->mu);
		return;
	}
	unsaid = m->unsaid;
	m->unsaid = 0;
	pthread_mutex_unlock(&m->mu);
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_warn("metrics: %s (%u more such in the last minute not logged; at most %u "
		 "connections, %u from one address, closed after %u s idle)", line, unsaid,
		 METRICS_CONNS, METRICS_CONNS_PER_IP, METRICS_IDLE_S);
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
	m->efd = m->lfd = -1;
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
	m->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
				  NULL, handle, m, MHD_OPTION_LISTEN_SOCKET, m->lfd,
				  MHD_OPTION_CONNECTION_LIMIT, METRICS_CONNS,
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT, METRICS_CONNS_PER_IP,
				  MHD_OPTION_CONNECTION_TIMEOUT, METRICS_IDLE_S,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m, MHD_OPTION_END);
	if (!m->mhd) {
		snprintf(err, errlen, "--metrics-listen: libmicrohttpd would not start on %s",
			 listen);
		metrics_free(m);
		return -EIO;
	}
	m->lfd = -1;	/* libmicrohttpd's now */
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
	if (!m)
		return;
	if (m->mhd)
		MHD_stop_daemon(m->mhd);	/* closes the listening socket */
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->efd >= 0)
		close(m->efd);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m->text);
	free(m);
}

#else /* !HAVE_LIBMICROHTTPD */

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
