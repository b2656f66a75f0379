/* SPDX-License-Identifier: MIT */
/*
 * admin.c - libkvpool's inspection and administration: kvp_stats(), the
 * listings (clients, pages, prefixes), kvp_evict(), kvp_disconnect() and
 * kvp_drop_namespace().
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvpool.h"
#include "client/cuda_ipc.h"
#include "client/errors.h"
#include "client/client_int.h"
#include "client/hset.h"
#include "client/keys.h"
#include "client/wire.h"

KVP_API int kvp_stats(kvp_client *c, kvp_stats_t *st, kvp_ns_stats_t *ns,
		      size_t max_ns)
{
	size_t len = 0;
	int rc;

	if (!c || !st || (max_ns && !ns))
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	rc = client_call(c, KVP_OP_STATS, NULL, 0, NULL, 0, &len, NULL);
	if (rc == 0) {
		rc = wire_stats_decode(c->buf + KVP_WIRE_HDR_SIZE, len, st, ns, max_ns);
		if (rc < 0)
			rc = -EPROTO;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* --- administration --------------------------------------------------------- */

/* list_call() - a request whose reply is struct kvp_wire_count and records
 * of size bytes; copies up to max into out. Returns the total or -errno. */
/* list_call() - a listing: up to max records of size bytes into out;
 * returns how many were copied, the total into *total (may be NULL). */
static int list_call(struct kvp_client *c, uint16_t op, const void *req, size_t len,
		     void *out, size_t size, size_t max, uint32_t *total)
{
	struct kvp_wire_count cnt;
	size_t rlen = 0, n;
	int rc;

	pthread_mutex_lock(&c->mu);
	rc = client_call(c, op, req, len, NULL, 0, &rlen, NULL);
	if (rc == 0) {
		memcpy(&cnt, c->buf + KVP_WIRE_HDR_SIZE, rlen < sizeof(cnt) ? 0 : sizeof(cnt));
		if (rlen < sizeof(cnt) || rlen != sizeof(cnt) + (size_t)cnt.count * size ||
		    cnt.total < cnt.count || cnt.total > INT32_MAX) {
			rc = -EPROTO;
		} else {
			n = cnt.count < max ? cnt.count : max;
			if (n)
				memcpy(out, c->buf + KVP_WIRE_HDR_SIZE + sizeof(cnt), n * size);
			if (total)
				*total = cnt.total;
			rc = (int)n;
		}
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int ns_copy(char dst[KVP_NAME_MAX], const char *ns)
{
	if (!ns)
		ns = "";
	if (strlen(ns) >= KVP_NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(dst, ns, strlen(ns) + 1);
	return 0;
}

KVP_API int kvp_list_clients(kvp_client *c, struct kvp_wire_client *out, size_t max,
			     uint32_t *total)
{
	if (!c || (max && !out))
		return -EINVAL;
	return list_call(c, KVP_OP_LIST_CLIENTS, NULL, 0, out, sizeof(*out), max, total);
}

KVP_API int kvp_list_pages(kvp_client *c, const struct kvp_wire_list_pages *filter,
			   struct kvp_wire_page *out, size_t max, uint32_t *total)
{
	struct kvp_wire_list_pages f;

	if (!c || (max && !out))
		return -EINVAL;
	memset(&f, 0, sizeof(f));
	if (filter)
		f = *filter;
	f.ns[sizeof(f.ns) - 1] = '\0';
	if (!f.limit && max < UINT32_MAX)
		f.limit = (uint32_t)max;
	return list_call(c, KVP_OP_LIST_PAGES, &f, sizeof(f), out, sizeof(*out), max, total);
}

KVP_API int kvp_list_prefixes(kvp_client *c, const char *ns, size_t top,
			      struct kvp_wire_prefix *out, size_t max, uint32_t *total)
{
	struct kvp_wire_list_prefixes lp;

	if (!c || (max && !out))
		return -EINVAL;
	memset(&lp, 0, sizeof(lp));
	if (ns_copy(lp.ns, ns) < 0)
		return -ENAMETOOLONG;
	lp.top = (uint32_t)(top && top < max ? top : max);
	return list_call(c, KVP_OP_LIST_PREFIXES, &lp, sizeof(lp), out, sizeof(*out), max,
			 total);
}

KVP_API int kvp_evict(kvp_client *c, const char *ns, uint64_t max)
{
	struct kvp_wire_evict ev;
	uint32_t done = 0;
	int rc;

	if (!c)
		return -EINVAL;
	memset(&ev, 0, sizeof(ev));
	if (ns_copy(ev.ns, ns) < 0)
		return -ENAMETOOLONG;
	ev.max = max;
	rc = list_call(c, KVP_OP_EVICT, &ev, sizeof(ev), NULL, 1, 0, &done);
	return rc < 0 ? rc : (int)done;
}

KVP_API int kvp_disconnect(kvp_client *c, uint64_t id)
{
	struct kvp_wire_disconnect d = { .client = id };
	size_t len = 0;
	int rc;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	rc = client_call(c, KVP_OP_DISCONNECT, &d, sizeof(d), NULL, 0, &len, NULL);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int drop_ns(kvp_client *c, const char *ns, uint32_t flags)
{
	struct kvp_wire_drop_ns d;
	size_t len = 0;
	int rc;

	if (!c || !ns || !*ns)
		return -EINVAL;
	memset(&d, 0, sizeof(d));
	if (ns_copy(d.ns, ns) < 0)
		return -ENAMETOOLONG;
	d.flags = flags;
	pthread_mutex_lock(&c->mu);
	rc = client_call(c, KVP_OP_DROP_NS, &d, sizeof(d), NULL, 0, &len, NULL);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_drop_namespace(kvp_client *c, const char *ns)
{
	return drop_ns(c, ns, KVP_WIRE_DROP_FORCE);
}

KVP_API int kvp_drop_unused_namespace(kvp_client *c, const char *ns)
{
	return drop_ns(c, ns, 0);
}
