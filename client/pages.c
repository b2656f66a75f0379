/* SPDX-License-Identifier: MIT */
/*
 * pages.c - libkvpool's pages: the namespace's view (slabs mapped at
 * view + slab x span, so that a page's address is view + index x
 * stride), slabs mapped as their pages come, and the pages this client
 * holds: kvp_alloc(), kvp_release(), kvp_cow(), kvp_retain(),
 * kvp_page_ptr(), kvp_view(), kvp_page_index(), kvp_page_at().
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

/*
 * client_reserve_view() - reserve the namespace's view: as many slab spans as the
 * pool may have slabs (STATS: max_slabs, the slab numbers of all its
 * memories), PROT_NONE until client_map_slab() maps a slab into its span. A span is the slab rounded up to
 * a multiple of both the page stride and the system page, so that every
 * page of every slab is at view + index x page_stride. Without the room
 * (or the STATS), no view: slabs are mapped wherever mmap puts them.
 */
void client_reserve_view(struct kvp_client *c)
{
	uint64_t stride = c->hello.page_stride, sys = (uint64_t)sysconf(_SC_PAGESIZE), unit, a, b,
		 t, nslabs;
	struct kvp_wire_stats st;
	size_t len = 0;
	void *v;

	if (!stride || !c->hello.slab_bytes ||
	    client_call(c, KVP_OP_STATS, NULL, 0, NULL, 0, &len, NULL) < 0 ||
	    wire_stats_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &st, NULL, 0) < 0 ||
	    !st.slab_bytes)
		return;
	for (a = stride, b = sys; b; t = a % b, a = b, b = t)
		;
	unit = stride / a * sys;	/* lcm(stride, system page) */
	nslabs = st.max_slabs;	/* slab numbers are shared by the pool's memories */
	if (nslabs > KVP_MAX_SLABS)
		nslabs = KVP_MAX_SLABS;
	c->span = (c->hello.slab_bytes + unit - 1) / unit * unit;
	if (!nslabs || c->span / stride > KVP_MAX_SLAB_PAGES || nslabs > SIZE_MAX / c->span)
		return;
	c->gens = calloc(KVP_MAX_SLABS, sizeof(*c->gens));
	if (!c->gens)
		return;
	v = mmap(NULL, (size_t)(nslabs * c->span), PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (v == MAP_FAILED) {
		free(c->gens);
		c->gens = NULL;
		return;
	}
	c->view = v;
	c->view_slabs = (uint32_t)nslabs;
	c->per_slab = (uint32_t)(c->span / stride);
}

/* client_map_slab() - map slab number slab of this namespace, once. */
int client_map_slab(struct kvp_client *c, uint32_t slab)
{
	struct kvp_wire_map_slab req = { .slab = slab };
	struct kvp_wire_map_slab_reply rep;
	size_t len = 0;
	void *base, *at;
	int fd = -1, rc, fixed;

	if (c->slabs[slab].base)
		return 0;
	rc = client_call(c, KVP_OP_MAP_SLAB, &req, sizeof(req), NULL, 0, &len, &fd);
	if (rc < 0)
		return rc;
	rc = -EPROTO;
	if (wire_fixed_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &rep, sizeof(rep)) < 0 ||
	    rep.slab != slab)
		goto out_close;
	if (c->hello.backend == KVP_BACKEND_CUDA) {
		/* GPU memory: the reply carries the slab's IPC handle */
		rc = cuda_ipc_open(rep.ipc_handle, &base, last_error, sizeof(last_error));
		if (rc < 0)
			goto out_close;
		c->slabs[slab].base = base;
		c->slabs[slab].bytes = rep.bytes;
		rc = 0;
		goto out_close;
	}
	if (fd < 0)
		goto out_close;
	if (c->view && (slab >= c->view_slabs || rep.bytes > c->span)) {
		client_set_error("slab %u (%llu bytes) does not fit the view of %u slabs of %llu "
			  "bytes", slab, (unsigned long long)rep.bytes, c->view_slabs,
			  (unsigned long long)c->span);
		goto out_close;
	}
	at = c->view ? c->view + (size_t)slab * c->span : NULL;
	fixed = c->view ? MAP_FIXED : 0;
	base = mmap(at, rep.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | fixed, fd, 0);
	if (base == MAP_FAILED && errno == EACCES)	/* read rights only */
		base = mmap(at, rep.bytes, PROT_READ, MAP_SHARED | fixed, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		client_set_error("cannot map slab %u (%llu bytes): %s", slab,
			  (unsigned long long)rep.bytes, strerror(-rc));
		goto out_close;
	}
	c->slabs[slab].base = base;
	c->slabs[slab].bytes = rep.bytes;
	rc = 0;
out_close:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* client_send_release() - RELEASE pages[0..n) (n <= max_batch) at the daemon. */
int client_send_release(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	struct kvp_wire_pages pl = { .n = (uint32_t)n };
	size_t len;

	return client_call(c, KVP_OP_RELEASE, &pl, sizeof(pl), pages, n * sizeof(*pages),
		    &len, NULL);
}

/* client_release_batch() - release pages this client holds and forget them. */
int client_release_batch(struct kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i;
	int rc;

	rc = client_send_release(c, pages, n);
	if (rc < 0)
		return rc;
	for (i = 0; i < n; i++)
		client_held_sub(c, pages[i]);
	return 0;
}

/* alloc_batch() - ALLOC n (<= max_batch) pages into pages, remember them
 * and map their slabs. On failure nothing stays allocated. */
static int alloc_batch(struct kvp_client *c, size_t n, kvp_page *pages)
{
	struct kvp_wire_pages req = { .n = (uint32_t)n };
	const void *handles;
	uint32_t got;
	size_t len = 0, i, j;
	int rc;

	rc = client_call(c, KVP_OP_ALLOC, &req, sizeof(req), NULL, 0, &len, NULL);
	if (rc < 0)
		return rc;
	if (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got, &handles) < 0 ||
	    got != n)
		return -EPROTO;
	for (i = 0; i < n; i++)
		pages[i] = wire_handle_at(handles, i);
	for (i = 0; i < n; i++) {
		rc = client_held_add(c, pages[i]);
		if (rc < 0) {
			for (j = 0; j < i; j++)
				client_held_sub(c, pages[j]);
			client_send_release(c, pages, n);
			return rc;
		}
	}
	for (i = 0; i < n; i++) {
		rc = client_map_slab(c, KVP_HANDLE_SLAB(pages[i]));
		if (rc < 0) {
			client_release_batch(c, pages, n);
			return rc;
		}
	}
	return 0;
}

KVP_API int kvp_alloc(kvp_client *c, size_t n, kvp_page *pages)
{
	size_t done = 0, k;
	int rc = 0;

	if (!c || (n && !pages))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pthread_mutex_lock(&c->mu);
	while (done < n) {
		k = n - done < c->hello.max_batch ? n - done : c->hello.max_batch;
		rc = alloc_batch(c, k, pages + done);
		if (rc < 0)
			break;
		done += k;
	}
	if (rc < 0) {	/* all or none: return the earlier batches */
		for (k = 0; k < done; k += c->hello.max_batch)
			client_release_batch(c, pages + k, done - k < c->hello.max_batch ?
				      done - k : c->hello.max_batch);
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_release(kvp_client *c, const kvp_page *pages, size_t n)
{
	size_t i, k;
	int rc = 0;

	if (!c || (n && !pages))
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	last_error[0] = '\0';
	rc = client_dead(c);	/* the daemon dropped every lease */
	if (rc < 0)
		goto out;
	/* All or none: take each lease off our own set first (a repeat
	 * takes a second lease), and put them back on the first one we do
	 * not hold; nothing has reached the daemon then. */
	for (i = 0; i < n; i++) {
		if (client_held_sub(c, pages[i]) < 0) {
			client_set_error("page handle %#llx (entry %zu) is not leased by this client",
				  (unsigned long long)pages[i], i);
			while (i--)
				client_held_add(c, pages[i]);
			rc = -ESTALE;
			goto out;
		}
	}
	for (i = 0; i < n; i += k) {
		k = n - i < c->hello.max_batch ? n - i : c->hello.max_batch;
		rc = client_send_release(c, pages + i, k);
		if (rc < 0) {
			/* the daemon kept these and the ones after them, unless
			 * the connection is gone with all of them */
			for (; i < n && !c->dead; i++)
				client_held_add(c, pages[i]);
			goto out;
		}
	}
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API void *kvp_page_ptr(kvp_client *c, kvp_page p)
{
	struct slab_map *m;
	void *ptr = NULL;
	uint64_t off;

	if (!c || !c->has_ns)
		return NULL;
	pthread_mutex_lock(&c->mu);
	m = &c->slabs[KVP_HANDLE_SLAB(p)];
	off = (uint64_t)KVP_HANDLE_INDEX(p) * c->hello.page_stride;
	if (hset_count(&c->held, p) && m->base && off + c->hello.page_bytes <= m->bytes)
		ptr = m->base + off;
	pthread_mutex_unlock(&c->mu);
	return ptr;
}

KVP_API int kvp_view(const kvp_client *c, kvp_view_t *out)
{
	if (!c || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (!c->has_ns)
		return -ENOTCONN;
	if (c->hello.backend != KVP_BACKEND_HOST)
		return -ENOTSUP;
	if (!c->view)
		return -ENOMEM;
	out->base = c->view;
	out->stride = c->hello.page_stride;
	out->pages = (uint64_t)c->view_slabs * c->per_slab;
	out->per_slab = c->per_slab;
	return 0;
}

KVP_API int64_t kvp_page_index(kvp_client *c, kvp_page p)
{
	int64_t idx = -ESTALE;

	if (!c || !c->has_ns)
		return -ENOTCONN;
	if (!c->view)
		return c->hello.backend == KVP_BACKEND_HOST ? -ENOMEM : -ENOTSUP;
	pthread_mutex_lock(&c->mu);
	if (hset_count(&c->held, p) && KVP_HANDLE_SLAB(p) < c->view_slabs &&
	    KVP_HANDLE_INDEX(p) < c->per_slab)
		idx = (int64_t)KVP_HANDLE_SLAB(p) * c->per_slab + KVP_HANDLE_INDEX(p);
	pthread_mutex_unlock(&c->mu);
	return idx;
}

KVP_API kvp_page kvp_page_at(kvp_client *c, uint64_t index)
{
	uint64_t slab, idx;
	kvp_page h = 0;

	if (!c || !c->view || !c->per_slab)
		return 0;
	slab = index / c->per_slab;
	idx = index % c->per_slab;
	if (slab >= c->view_slabs)
		return 0;
	pthread_mutex_lock(&c->mu);
	if (c->gens[slab] && c->gens[slab][idx])
		h = KVP_HANDLE(c->gens[slab][idx], slab, idx);
	pthread_mutex_unlock(&c->mu);
	return h;
}

/* pages_call() - send a page list (COW or RETAIN) in batches, this
 * client's copies of the handles checked first. out (COW) receives the
 * reply's handles, which become held. */
static int pages_call(struct kvp_client *c, uint16_t op, const kvp_page *pages,
		      size_t n, kvp_page *out)
{
	size_t i, k, done = 0, len = 0;
	const void *handles;
	uint32_t got;
	int rc = client_dead(c);

	if (rc < 0)
		return rc;
	for (i = 0; i < n; i++) {
		if (!hset_count(&c->held, pages[i])) {
			client_set_error("page handle %#llx (entry %zu) is not leased by this client",
				  (unsigned long long)pages[i], i);
			return -ESTALE;
		}
	}
	while (done < n) {
		struct kvp_wire_pages pl;

		k = n - done < c->hello.max_batch ? n - done : c->hello.max_batch;
		pl = (struct kvp_wire_pages){ .n = (uint32_t)k };
		rc = client_call(c, op, &pl, sizeof(pl), pages + done, k * sizeof(*pages), &len, NULL);
		if (rc < 0)
			break;
		if (out) {
			if (wire_pages_decode(c->buf + KVP_WIRE_HDR_SIZE, len, &got, &handles) < 0 ||
			    got != k) {
				rc = -EPROTO;
				break;
			}
			for (i = 0; i < k; i++)
				out[done + i] = wire_handle_at(handles, i);
			rc = client_remember(c, out + done, k);
			if (rc == 0)
				rc = client_map_all(c, out + done, k);
		} else {
			rc = client_remember(c, pages + done, k);
		}
		if (rc < 0)
			break;
		done += k;
	}
	return rc;
}

KVP_API int kvp_cow(kvp_client *c, const kvp_page *src, size_t n, kvp_page *copies)
{
	int rc;

	if (!c || (n && (!src || !copies)))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pthread_mutex_lock(&c->mu);
	last_error[0] = '\0';
	rc = pages_call(c, KVP_OP_COW, src, n, copies);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

KVP_API int kvp_retain(kvp_client *c, const kvp_page *pages, size_t n)
{
	int rc;

	if (!c || (n && !pages))
		return -EINVAL;
	if (!c->has_ns)
		return -ENOTCONN;
	pthread_mutex_lock(&c->mu);
	last_error[0] = '\0';
	rc = pages_call(c, KVP_OP_RETAIN, pages, n, NULL);
	pthread_mutex_unlock(&c->mu);
	return rc;
}
