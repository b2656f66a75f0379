/* SPDX-License-Identifier: MIT */
/*
 * check_pool.c - unit tests of the page pool (daemon/store/pool.c) on the real
 * host backend (daemon/store/backend_host.c, memfd slabs): allocation and
 * addresses, shared and sealed slabs, release and stale handles, the
 * budget, forged handles, references, conservation of counts,
 * namespaces, and two memories (host pages beside a device's).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "daemon/store/backend.h"
#include "daemon/store/pool.h"
#include "suites.h"

#define SLAB (64u * 1024u)	/* 64 KiB slabs */
#define PAGE 1000u		/* stride 1024: 64 pages a slab */
#define STRIDE 1024u
#define PPS (SLAB / STRIDE)

static struct backend be;
static struct pool *p;
static char err[512];

static void setup(void)
{
	ck_assert_int_eq(backend_host_init(&be, err, sizeof(err)), 0);
	ck_assert_str_eq(be.ops->name, "host");
	ck_assert_int_eq(be.ops->kind, KVP_BACKEND_HOST);
	p = NULL;
	err[0] = '\0';
}

static void teardown(void)
{
	pool_free(p);
	p = NULL;
	be.ops->fini(&be);
}

/* pool_make() - p with a budget of slabs slabs and one namespace (0) of
 * PAGE-byte pages. */
static void pool_make(unsigned int slabs)
{
	ck_assert_int_eq(pool_init(&p, &be, (uint64_t)slabs * SLAB, SLAB), 0);
	ck_assert_int_eq(pool_ns_add(p, PAGE), 0);
}

/* rng() - xorshift64*: the same sequence on every machine. */
static uint64_t rng_state;
static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* assert_conserved() - every state's count adds up to the total, for
 * each of nns namespaces and for the pool, the namespaces add up to the
 * pool, and pool_audit() recounts the same. */
static void assert_conserved(int nns)
{
	struct pool_counts c, all;
	uint64_t total = 0, slabs = 0, sum;
	int ns, s;

	for (ns = 0; ns < nns; ns++) {
		pool_counts(p, ns, &c);
		for (sum = 0, s = 0; s < PAGE_STATE_COUNT; s++)
			sum += c.by_state[s];
		ck_assert_uint_eq(sum, c.total);
		ck_assert_uint_eq(c.by_state[PAGE_FREE] + c.by_state[PAGE_PRIVATE], c.total);
		total += c.total;
		slabs += c.slabs;
	}
	pool_counts(p, -1, &all);
	for (sum = 0, s = 0; s < PAGE_STATE_COUNT; s++)
		sum += all.by_state[s];
	ck_assert_uint_eq(sum, all.total);
	ck_assert_uint_eq(all.by_state[PAGE_FREE] + all.by_state[PAGE_PRIVATE], all.total);
	ck_assert_uint_eq(all.total, total);
	/* and a recount from the page metadata and free lists agrees */
	ck_assert(pool_audit(p));
	ck_assert_uint_eq(all.slabs, slabs);
	ck_assert_uint_eq(all.slabs, pool_slabs_used(p));
}

/* ---- alloc: handles and addresses ---------------------------------- */

START_TEST(test_pool_alloc_gives_distinct_handles_and_addresses)
{
	const struct backend_slab *slab;
	uint64_t h[16];
	char *a[16];
	int i, j, ns = -1;

	pool_make(2);
	ck_assert_uint_eq(pool_ns_page_stride(p, 0), STRIDE);
	ck_assert_uint_eq(pool_ns_pages_per_slab(p, 0), PPS);
	ck_assert_int_eq(pool_alloc(p, 0, 16, h, err, sizeof(err)), 0);
	slab = pool_slab(p, 0, &ns);
	ck_assert_ptr_nonnull(slab);
	ck_assert_int_eq(ns, 0);
	ck_assert_uint_eq(slab->bytes, SLAB);
	for (i = 0; i < 16; i++) {
		ck_assert_uint_ne(h[i], 0);
		ck_assert_int_eq(pool_lookup(p, 0, h[i]), 0);
		ck_assert_uint_eq(pool_refs(p, h[i]), 1);
		a[i] = pool_page_addr(p, h[i]);
		ck_assert_ptr_eq(a[i], (char *)slab->base +
				 (size_t)KVP_HANDLE_INDEX(h[i]) * STRIDE);
		for (j = 0; j < i; j++) {
			ck_assert_uint_ne(h[i], h[j]);
			ck_assert_ptr_ne(a[i], a[j]);
		}
	}
	/* A fresh slab hands out its pages in order, one stride apart. */
	for (i = 1; i < 16; i++)
		ck_assert_int_eq(a[i] - a[i - 1], STRIDE);
	assert_conserved(1);
}
END_TEST

START_TEST(test_pool_pages_are_shared_through_the_slab_fd)
{
	const struct backend_slab *slab;
	uint64_t h[3];
	unsigned char *view;
	size_t off;
	int i;

	pool_make(1);
	ck_assert_int_eq(pool_alloc(p, 0, 3, h, err, sizeof(err)), 0);
	for (i = 0; i < 3; i++)
		memset(pool_page_addr(p, h[i]), 0xa0 + i, PAGE);
	slab = pool_slab(p, KVP_HANDLE_SLAB(h[0]), NULL);
	ck_assert_int_ge(slab->fd, 0);
	view = mmap(NULL, slab->bytes, PROT_READ, MAP_SHARED, slab->fd, 0);
	ck_assert_ptr_ne(view, MAP_FAILED);
	for (i = 0; i < 3; i++) {
		off = (size_t)KVP_HANDLE_INDEX(h[i]) * STRIDE;
		ck_assert_uint_eq(view[off], 0xa0 + i);
		ck_assert_uint_eq(view[off + PAGE - 1], 0xa0 + i);
	}
	/* Writes after the second mapping exists show through too. */
	((unsigned char *)pool_page_addr(p, h[0]))[7] = 0x5c;
	ck_assert_uint_eq(view[KVP_HANDLE_INDEX(h[0]) * STRIDE + 7], 0x5c);
	munmap(view, slab->bytes);
}
END_TEST

START_TEST(test_pool_slab_memfd_is_sealed)
{
	const struct backend_slab *slab;
	uint64_t h;

	pool_make(1);
	ck_assert_int_eq(pool_alloc(p, 0, 1, &h, err, sizeof(err)), 0);
	slab = pool_slab(p, 0, NULL);
	ck_assert_int_eq(fcntl(slab->fd, F_GET_SEALS),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	ck_assert_int_eq(ftruncate(slab->fd, SLAB / 2), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(ftruncate(slab->fd, 2 * SLAB), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(fcntl(slab->fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(fcntl(slab->fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}
END_TEST

START_TEST(test_pool_slab_memfd_only_its_owner_may_open)
{
	const struct backend_slab *slab;
	struct stat st;
	uint64_t h;

	pool_make(1);
	ck_assert_int_eq(pool_alloc(p, 0, 1, &h, err, sizeof(err)), 0);
	slab = pool_slab(p, 0, NULL);
	ck_assert_int_eq(fstat(slab->fd, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_int_eq(fstat(slab->ro_fd, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_int_eq(fcntl(slab->ro_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
}
END_TEST

/* A backend made on the stack holds whatever was there before: init sets
 * every field, so a slab is not prefaulted (or refused for want of
 * memory) because of a stale byte. */
START_TEST(test_pool_backend_init_sets_every_field)
{
	struct backend junk;
	unsigned char prefault;

	memset(&junk, 0x50, sizeof(junk));
	ck_assert_int_eq(backend_host_init(&junk, err, sizeof(err)), 0);
	ck_assert_ptr_eq(junk.ops, be.ops);
	ck_assert_ptr_null(junk.priv);
	memcpy(&prefault, &junk.prefault, 1);	/* the byte, not a bool's value */
	ck_assert_uint_eq(prefault, 0);
	junk.ops->fini(&junk);
}
END_TEST

START_TEST(test_pool_backend_failed_slab_says_size_and_why)
{
	struct backend_slab s;
	int fd0 = fcntl(0, F_GETFD);

	/* No address space holds 4 EiB: mmap fails (ENOMEM; EINVAL under
	 * valgrind). */
	memset(&s, 0xff, sizeof(s));
	ck_assert_int_lt(be.ops->slab_create(&be, (size_t)1 << 62, &s, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "4611686018427387904-byte slab") &&
		      strstr(err, "lower --pool-size"), "%s", err);
	ck_assert_ptr_null(s.base);
	ck_assert_int_eq(s.fd, -1);
	ck_assert_int_eq(be.ops->slab_create(&be, 0, &s, err, sizeof(err)), -EINVAL);
	/* Destroying a zeroed slab closes nothing, not even fd 0. */
	memset(&s, 0, sizeof(s));
	be.ops->slab_destroy(&be, &s);
	ck_assert_int_eq(fcntl(0, F_GETFD), fd0);
}
END_TEST

/* ---- release and references ---------------------------------------- */

START_TEST(test_pool_release_makes_the_handle_stale)
{
	uint64_t h, again;

	pool_make(1);
	ck_assert_int_eq(pool_alloc(p, 0, 1, &h, err, sizeof(err)), 0);
	ck_assert_uint_eq(KVP_HANDLE_GEN(h), 1);
	pool_unref(p, h);
	ck_assert_int_eq(pool_lookup(p, 0, h), -ESTALE);
	ck_assert_ptr_null(pool_page_addr(p, h));
	/* The free list is LIFO: the same page comes back, one generation on. */
	ck_assert_int_eq(pool_alloc(p, 0, 1, &again, err, sizeof(err)), 0);
	ck_assert_uint_eq(KVP_HANDLE_SLAB(again), KVP_HANDLE_SLAB(h));
	ck_assert_uint_eq(KVP_HANDLE_INDEX(again), KVP_HANDLE_INDEX(h));
	ck_assert_uint_eq(KVP_HANDLE_GEN(again), KVP_HANDLE_GEN(h) + 1);
	ck_assert_int_eq(pool_lookup(p, 0, h), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 0, again), 0);
	/* A stale handle's unref does not touch the page's new owner. */
	pool_unref(p, h);
	ck_assert_int_eq(pool_lookup(p, 0, again), 0);
	ck_assert_uint_eq(pool_refs(p, again), 1);
	assert_conserved(1);
}
END_TEST

START_TEST(test_pool_refs_free_only_at_the_last_unref)
{
	struct pool_counts c;
	uint64_t h;

	pool_make(1);
	ck_assert_int_eq(pool_alloc(p, 0, 1, &h, err, sizeof(err)), 0);
	pool_ref(p, h);
	pool_ref(p, h);
	ck_assert_uint_eq(pool_refs(p, h), 3);
	pool_unref(p, h);
	pool_unref(p, h);
	ck_assert_int_eq(pool_lookup(p, 0, h), 0);
	ck_assert_uint_eq(pool_refs(p, h), 1);
	pool_counts(p, 0, &c);
	ck_assert_uint_eq(c.by_state[PAGE_PRIVATE], 1);
	pool_unref(p, h);
	ck_assert_int_eq(pool_lookup(p, 0, h), -ESTALE);
	pool_counts(p, 0, &c);
	ck_assert_uint_eq(c.by_state[PAGE_PRIVATE], 0);
	ck_assert_uint_eq(c.by_state[PAGE_FREE], PPS);
}
END_TEST

/* ---- the budget ---------------------------------------------------- */

START_TEST(test_pool_exhaustion_is_enospc_and_changes_nothing)
{
	struct pool_counts before, after, nbefore, nafter;
	uint64_t h[2 * PPS + 1];

	pool_make(2);
	ck_assert_int_eq(pool_alloc(p, 0, 2 * PPS, h, err, sizeof(err)), 0);
	pool_counts(p, -1, &before);
	pool_counts(p, 0, &nbefore);
	ck_assert_uint_eq(before.slabs, 2);
	ck_assert_uint_eq(before.total, 2 * PPS);
	ck_assert_uint_eq(before.by_state[PAGE_FREE], 0);
	ck_assert_int_eq(pool_alloc(p, 0, 1, &h[2 * PPS], err, sizeof(err)), -ENOSPC);
	ck_assert_msg(err[0] != '\0', "-ENOSPC without a message");
	pool_counts(p, -1, &after);
	pool_counts(p, 0, &nafter);
	ck_assert_mem_eq(&before, &after, sizeof(before));
	ck_assert_mem_eq(&nbefore, &nafter, sizeof(nbefore));
	ck_assert_ptr_null(pool_slab(p, 2, NULL));
}
END_TEST

START_TEST(test_pool_alloc_is_all_or_none)
{
	struct pool_counts c;
	uint64_t *h = calloc(2 * PPS + 1, sizeof(*h));

	pool_make(2);
	ck_assert_int_eq(pool_alloc(p, 0, 2 * PPS + 1, h, err, sizeof(err)), -ENOSPC);
	pool_counts(p, -1, &c);
	ck_assert_uint_eq(c.slabs, 0);
	ck_assert_uint_eq(c.total, 0);
	/* With one slab made and half used, the rest must still fit at once. */
	ck_assert_int_eq(pool_alloc(p, 0, PPS / 2, h, err, sizeof(err)), 0);
	ck_assert_int_eq(pool_alloc(p, 0, PPS + PPS / 2 + 1, h + PPS / 2, err, sizeof(err)),
			 -ENOSPC);
	pool_counts(p, 0, &c);
	ck_assert_uint_eq(c.slabs, 1);
	ck_assert_uint_eq(c.by_state[PAGE_PRIVATE], PPS / 2);
	ck_assert_int_eq(pool_alloc(p, 0, PPS + PPS / 2, h + PPS / 2, err, sizeof(err)), 0);
	pool_counts(p, 0, &c);
	ck_assert_uint_eq(c.slabs, 2);
	ck_assert_uint_eq(c.by_state[PAGE_PRIVATE], 2 * PPS);
	assert_conserved(1);
	free(h);
}
END_TEST

/* A backend that fails every slab after the first `budget`. */
static const struct backend_ops *real_ops;
static struct backend_ops failing_ops;
static int budget;

static int failing_slab_create(struct backend *b, size_t bytes,
			       struct backend_slab *s, char *e, size_t elen)
{
	if (budget-- <= 0) {
		snprintf(e, elen, "test: no more slabs");
		return -ENOMEM;
	}
	return real_ops->slab_create(b, bytes, s, e, elen);
}

START_TEST(test_pool_backend_failure_keeps_counts_consistent)
{
	struct pool_counts c;
	uint64_t h[3 * PPS];

	real_ops = be.ops;
	failing_ops = *be.ops;
	failing_ops.slab_create = failing_slab_create;
	be.ops = &failing_ops;
	budget = 1;
	pool_make(3);
	ck_assert_int_eq(pool_alloc(p, 0, 3 * PPS, h, err, sizeof(err)), -ENOMEM);
	ck_assert_str_eq(err, "test: no more slabs");
	pool_counts(p, 0, &c);
	ck_assert_uint_eq(c.slabs, 1);
	ck_assert_uint_eq(c.total, PPS);
	ck_assert_uint_eq(c.by_state[PAGE_FREE], PPS);
	assert_conserved(1);
	/* The slab that was made serves later allocations. */
	ck_assert_int_eq(pool_alloc(p, 0, PPS, h, err, sizeof(err)), 0);
	assert_conserved(1);
	be.ops = real_ops;
}
END_TEST

START_TEST(test_pool_init_rejects_a_slab_larger_than_the_pool)
{
	ck_assert_int_eq(pool_init(&p, &be, SLAB, SLAB + 1), -EINVAL);
	ck_assert_int_eq(pool_init(&p, &be, SLAB, 0), -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(pool_init(&p, &be, SLAB, SLAB), 0);
	ck_assert_uint_eq(pool_bytes(p), SLAB);
	ck_assert_uint_eq(pool_slab_bytes(p), SLAB);
	ck_assert_uint_eq(pool_slabs_used(p), 0);
}
END_TEST

/* ---- forged handles ------------------------------------------------ */

START_TEST(test_pool_forged_handles_are_stale)
{
	struct pool_counts before, after;
	uint64_t h[4], other, forged;
	int i, j, ns1;

	pool_make(4);
	ns1 = pool_ns_add(p, 4096);
	ck_assert_int_eq(ns1, 1);
	ck_assert_int_eq(pool_alloc(p, 0, 4, h, err, sizeof(err)), 0);
	ck_assert_int_eq(pool_alloc(p, ns1, 1, &other, err, sizeof(err)), 0);
	pool_counts(p, -1, &before);

	ck_assert_int_eq(pool_lookup(p, 0, 0), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 0, UINT64_MAX), -ESTALE);
	/* slab out of range, index out of range, wrong generation */
	ck_assert_int_eq(pool_lookup(p, 0, KVP_HANDLE(1, 2, 0)), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 0, KVP_HANDLE(1, KVP_MAX_SLABS - 1, 0)), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 0, KVP_HANDLE(1, 0, PPS)), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 0, KVP_HANDLE(1, 0, KVP_MAX_SLAB_PAGES - 1)), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 0, h[0] + (1ull << 32)), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 0, KVP_HANDLE(0, KVP_HANDLE_SLAB(h[0]),
						      KVP_HANDLE_INDEX(h[0]))), -ESTALE);
	/* a FREE page's handle at its current generation */
	ck_assert_int_eq(pool_lookup(p, 0, KVP_HANDLE(1, 0, PPS - 1)), -ESTALE);
	/* another namespace's page, and ours asked for in its namespace */
	ck_assert_int_eq(pool_lookup(p, 0, other), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, ns1, h[0]), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, ns1, other), 0);
	/* namespaces that do not exist */
	ck_assert_int_eq(pool_lookup(p, -1, h[0]), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, 2, h[0]), -ESTALE);
	ck_assert_int_eq(pool_lookup(p, INT32_MAX, h[0]), -ESTALE);

	rng_state = 0x6b76706f6f6c2121ull;
	for (i = 0; i < 100000; i++) {
		forged = rng();
		if (i & 1)	/* now and then aim at real slabs and pages ... */
			forged &= ~((uint64_t)(KVP_MAX_SLABS - 4) << KVP_HANDLE_INDEX_BITS |
				    (KVP_MAX_SLAB_PAGES - 128));
		if ((i & 3) == 3)	/* ... at the generation they have */
			forged = KVP_HANDLE(1, KVP_HANDLE_SLAB(forged), KVP_HANDLE_INDEX(forged));
		for (j = 0; j < 4 && forged != h[j]; j++)
			;
		if (j < 4 || forged == other)
			continue;
		ck_assert_int_eq(pool_lookup(p, 0, forged), -ESTALE);
		ck_assert_int_eq(pool_lookup(p, ns1, forged), -ESTALE);
		/* Calls that expect a valid handle leave the pool alone. */
		pool_unref(p, forged);
		pool_ref(p, forged);
		ck_assert_uint_eq(pool_refs(p, forged), 0);
		ck_assert_ptr_null(pool_page_addr(p, forged));
	}
	pool_counts(p, -1, &after);
	ck_assert_mem_eq(&before, &after, sizeof(before));
	for (i = 0; i < 4; i++)
		ck_assert_uint_eq(pool_refs(p, h[i]), 1);
}
END_TEST

/* ---- counts -------------------------------------------------------- */

#define RANDOM_STEPS 10000
#define RANDOM_SLABS 4

START_TEST(test_pool_counts_are_conserved_over_random_steps)
{
	/* Namespace 0: 64 pages a slab; namespace 1: 16 pages a slab. */
	uint64_t live[RANDOM_SLABS * PPS], got[8];
	int live_ns[RANDOM_SLABS * PPS];
	size_t nlive = 0, k, want;
	struct pool_counts before, after, c;
	int step, ns, rc, nprivate[2] = { 0, 0 };

	pool_make(RANDOM_SLABS);
	ck_assert_int_eq(pool_ns_add(p, 4000), 1);
	ck_assert_uint_eq(pool_ns_pages_per_slab(p, 1), SLAB / 4096);
	rng_state = 0x9e3779b97f4a7c15ull;
	for (step = 0; step < RANDOM_STEPS; step++) {
		ns = (int)(rng() & 1);
		if (nlive && rng() % 100 < 48) {
			k = rng() % nlive;
			ck_assert_int_eq(pool_lookup(p, live_ns[k], live[k]), 0);
			pool_unref(p, live[k]);
			ck_assert_int_eq(pool_lookup(p, live_ns[k], live[k]), -ESTALE);
			nprivate[live_ns[k]]--;
			live[k] = live[--nlive];
			live_ns[k] = live_ns[nlive];
		} else {
			want = 1 + rng() % 8;
			pool_counts(p, -1, &before);
			rc = pool_alloc(p, ns, want, got, err, sizeof(err));
			if (rc == -ENOSPC) {
				pool_counts(p, -1, &after);
				ck_assert_mem_eq(&before, &after, sizeof(before));
			} else {
				ck_assert_int_eq(rc, 0);
				for (k = 0; k < want; k++) {
					live[nlive] = got[k];
					live_ns[nlive++] = ns;
				}
				nprivate[ns] += (int)want;
			}
		}
		assert_conserved(2);
		for (ns = 0; ns < 2; ns++) {
			pool_counts(p, ns, &c);
			ck_assert_uint_eq(c.by_state[PAGE_PRIVATE], (uint64_t)nprivate[ns]);
		}
	}
	for (k = 0; k < nlive; k++)
		ck_assert_int_eq(pool_lookup(p, live_ns[k], live[k]), 0);
}
END_TEST

/* ---- namespaces ---------------------------------------------------- */

START_TEST(test_pool_ns_add_checks_page_sizes)
{
	ck_assert_int_eq(pool_init(&p, &be, 4 * SLAB, SLAB), 0);
	ck_assert_int_eq(pool_ns_add(p, 0), -EINVAL);
	ck_assert_int_eq(pool_ns_add(p, SLAB + 1), -EINVAL);
	ck_assert_int_eq(pool_ns_add(p, UINT64_MAX), -EINVAL);
	ck_assert_int_eq(pool_ns_add(p, 1), 0);
	ck_assert_uint_eq(pool_ns_page_stride(p, 0), POOL_PAGE_ALIGN);
	ck_assert_int_eq(pool_ns_add(p, POOL_PAGE_ALIGN), 1);
	ck_assert_uint_eq(pool_ns_page_stride(p, 1), POOL_PAGE_ALIGN);
	ck_assert_int_eq(pool_ns_add(p, POOL_PAGE_ALIGN + 1), 2);
	ck_assert_uint_eq(pool_ns_page_stride(p, 2), 2 * POOL_PAGE_ALIGN);
	/* A page just under the slab rounds up to exactly one page a slab. */
	ck_assert_int_eq(pool_ns_add(p, SLAB - 1), 3);
	ck_assert_uint_eq(pool_ns_page_stride(p, 3), SLAB);
	ck_assert_uint_eq(pool_ns_pages_per_slab(p, 3), 1);
}
END_TEST

START_TEST(test_pool_ns_add_stops_at_the_most_namespaces)
{
	unsigned int i;

	ck_assert_int_eq(pool_init(&p, &be, SLAB, SLAB), 0);
	for (i = 0; i < POOL_MAX_NS; i++)
		ck_assert_int_eq(pool_ns_add(p, PAGE), (int)i);
	ck_assert_int_eq(pool_ns_add(p, PAGE), -ENOSPC);
}
END_TEST

START_TEST(test_pool_released_namespace_numbers_are_reused)
{
	uint64_t h, h2;
	unsigned int i;
	int ns;

	ck_assert_int_eq(pool_init(&p, &be, 2 * SLAB, SLAB), 0);
	for (i = 0; i < POOL_MAX_NS; i++)
		ck_assert_int_eq(pool_ns_add(p, PAGE), (int)i);
	ck_assert_int_eq(pool_alloc(p, 17, 1, &h, err, sizeof(err)), 0);
	ck_assert_int_eq(pool_ns_release(p, 17), -EBUSY);	/* a page in use */
	ck_assert_int_eq(pool_unref(p, h), PAGE_FREE);
	ck_assert_int_eq(pool_ns_release(p, 17), 0);
	ck_assert_int_eq(pool_alloc(p, 17, 1, &h2, err, sizeof(err)), -EINVAL);
	/* its number, and its slab, serve the next namespace; old handles
	 * stay stale */
	ns = pool_ns_add(p, 2 * PAGE);
	ck_assert_int_eq(ns, 17);
	ck_assert_int_eq(pool_ns_add(p, PAGE), -ENOSPC);
	ck_assert_int_eq(pool_alloc(p, ns, 1, &h2, err, sizeof(err)), 0);
	ck_assert_uint_eq(KVP_HANDLE_SLAB(h2), KVP_HANDLE_SLAB(h));
	ck_assert_int_eq(pool_lookup(p, ns, h), -ESTALE);
	ck_assert_uint_eq(pool_ns_page_stride(p, ns),
			  (2 * PAGE + POOL_PAGE_ALIGN - 1) / POOL_PAGE_ALIGN * POOL_PAGE_ALIGN);
	ck_assert(pool_audit(p));
}
END_TEST

START_TEST(test_pool_namespaces_never_share_a_slab)
{
	static uint64_t more[PPS];
	struct pool_counts c0, c1;
	uint64_t a[2], b;
	uint32_t s;
	int owner, ns1;

	pool_make(3);
	ns1 = pool_ns_add(p, 8192);
	ck_assert_int_eq(ns1, 1);
	ck_assert_int_eq(pool_alloc(p, 0, 1, &a[0], err, sizeof(err)), 0);
	ck_assert_int_eq(pool_alloc(p, ns1, 1, &b, err, sizeof(err)), 0);
	ck_assert_int_eq(pool_alloc(p, 0, 1, &a[1], err, sizeof(err)), 0);
	/* ns 0 has free pages in its own slab: ns 1 got a slab of its own. */
	ck_assert_uint_ne(KVP_HANDLE_SLAB(b), KVP_HANDLE_SLAB(a[0]));
	ck_assert_uint_eq(KVP_HANDLE_SLAB(a[1]), KVP_HANDLE_SLAB(a[0]));
	for (s = 0; pool_slab(p, s, &owner); s++)
		ck_assert_int_eq(owner, s == KVP_HANDLE_SLAB(b) ? ns1 : 0);
	ck_assert_uint_eq(s, 2);
	pool_counts(p, 0, &c0);
	pool_counts(p, ns1, &c1);
	ck_assert_uint_eq(c0.slabs, 1);
	ck_assert_uint_eq(c0.total, PPS);
	ck_assert_uint_eq(c0.by_state[PAGE_PRIVATE], 2);
	ck_assert_uint_eq(c1.slabs, 1);
	ck_assert_uint_eq(c1.total, SLAB / 8192);
	ck_assert_uint_eq(c1.by_state[PAGE_PRIVATE], 1);
	/* The third slab goes to whoever needs it first; then ns 1 is full. */
	ck_assert_int_eq(pool_alloc(p, 0, PPS, more, err, sizeof(err)), 0);
	ck_assert_int_eq(pool_alloc(p, ns1, SLAB / 8192, more, err, sizeof(err)), -ENOSPC);
	assert_conserved(2);
}
END_TEST

/* ---- memories: host pages beside the device's ----------------------- */

/* A second backend: the host backend's memory under another kind, as the
 * cuda backend's slabs would be, counting the slabs it makes. */
static struct backend dev;
static struct backend_ops dev_ops;
static int dev_slabs;

static int dev_slab_create(struct backend *b, size_t bytes, struct backend_slab *sl,
			   char *e, size_t elen)
{
	dev_slabs++;
	return real_ops->slab_create(b, bytes, sl, e, elen);
}

/* pool_make_two() - device memory of dslabs slabs (memory 0, namespace 0)
 * and host memory of hslabs (memory 1, namespace 1), both of PAGE bytes. */
static void pool_make_two(unsigned int dslabs, unsigned int hslabs)
{
	ck_assert_int_eq(backend_host_init(&dev, err, sizeof(err)), 0);
	real_ops = dev.ops;
	dev_ops = *dev.ops;
	dev_ops.name = "test-device";
	dev_ops.kind = KVP_BACKEND_CUDA;
	dev_ops.slab_create = dev_slab_create;
	dev.ops = &dev_ops;
	dev_slabs = 0;
	ck_assert_int_eq(pool_init(&p, &dev, (uint64_t)dslabs * SLAB, SLAB), 0);
	ck_assert_int_eq(pool_mem_add(p, &be, (uint64_t)hslabs * SLAB), 1);
	ck_assert_int_eq(pool_ns_add(p, PAGE), 0);
	ck_assert_int_eq(pool_ns_add_mem(p, PAGE, 1), 1);
}

static void pool_free_two(void)
{
	pool_free(p);
	p = NULL;
	dev.ops = real_ops;
	dev.ops->fini(&dev);
}

START_TEST(test_pool_memories_have_budgets_of_their_own)
{
	static uint64_t h[5 * PPS];
	struct pool_counts c;

	pool_make_two(2, 3);
	ck_assert_ptr_eq(pool_ns_backend(p, 0), &dev);
	ck_assert_ptr_eq(pool_ns_backend(p, 1), &be);
	ck_assert_uint_eq(pool_slabs_max(p), 5);
	ck_assert_uint_eq(pool_mem_bytes(p, 1), 3 * SLAB);
	ck_assert_uint_eq(pool_available(p, 0), 2 * PPS);
	ck_assert_uint_eq(pool_available(p, 1), 3 * PPS);
	/* the device's budget holds 2 slabs, whatever the host's has left */
	ck_assert_int_eq(pool_alloc(p, 0, 3 * PPS, h, err, sizeof(err)), -ENOSPC);
	ck_assert_int_eq(pool_alloc(p, 0, 2 * PPS, h, err, sizeof(err)), 0);
	ck_assert_int_eq(dev_slabs, 2);
	ck_assert_uint_eq(pool_available(p, 1), 3 * PPS);
	/* host pages come from the host backend, all 3 slabs of them */
	ck_assert_int_eq(pool_alloc(p, 1, 3 * PPS, h + 2 * PPS, err, sizeof(err)), 0);
	ck_assert_int_eq(dev_slabs, 2);
	ck_assert_uint_eq(pool_mem_slabs(p, 0), 2);
	ck_assert_uint_eq(pool_mem_slabs(p, 1), 3);
	ck_assert_ptr_nonnull(pool_page_addr(p, h[2 * PPS]));
	ck_assert_int_eq(pool_alloc(p, 1, 1, h, err, sizeof(err)), -ENOSPC);
	pool_counts(p, 1, &c);
	ck_assert_uint_eq(c.slabs, 3);
	assert_conserved(2);
	/* a namespace released gives its slabs back to its own memory */
	for (unsigned i = 0; i < 3 * PPS; i++)
		ck_assert_int_eq(pool_unref(p, h[2 * PPS + i]), PAGE_FREE);
	ck_assert_int_eq(pool_ns_release(p, 1), 0);
	ck_assert_uint_eq(pool_mem_slabs(p, 1), 0);
	ck_assert_int_eq(pool_ns_add_mem(p, PAGE, 1), 1);
	ck_assert_uint_eq(pool_available(p, 1), 3 * PPS);
	ck_assert_uint_eq(pool_available(p, 0), 0);
	pool_free_two();
}
END_TEST

START_TEST(test_pool_mem_add_only_before_the_first_slab)
{
	uint64_t h;

	pool_make(2);
	ck_assert_int_eq(pool_ns_add_mem(p, PAGE, 1), -EINVAL);	/* no memory 1 */
	ck_assert_int_eq(pool_mem_add(p, &be, SLAB - 1), -EINVAL);	/* not a slab */
	ck_assert_int_eq(pool_alloc(p, 0, 1, &h, err, sizeof(err)), 0);
	ck_assert_int_eq(pool_mem_add(p, &be, 2 * SLAB), -EINVAL);	/* slabs exist */
	ck_assert_uint_eq(pool_slabs_max(p), 2);
	ck_assert_uint_eq(pool_mem_bytes(p, 1), 0);
	assert_conserved(1);
}
END_TEST

Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc;

	tc = tcase_create("alloc");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pool_alloc_gives_distinct_handles_and_addresses);
	tcase_add_test(tc, test_pool_pages_are_shared_through_the_slab_fd);
	tcase_add_test(tc, test_pool_slab_memfd_is_sealed);
	tcase_add_test(tc, test_pool_slab_memfd_only_its_owner_may_open);
	tcase_add_test(tc, test_pool_backend_failed_slab_says_size_and_why);
	tcase_add_test(tc, test_pool_backend_init_sets_every_field);
	suite_add_tcase(s, tc);

	tc = tcase_create("release");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pool_release_makes_the_handle_stale);
	tcase_add_test(tc, test_pool_refs_free_only_at_the_last_unref);
	suite_add_tcase(s, tc);

	tc = tcase_create("budget");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pool_exhaustion_is_enospc_and_changes_nothing);
	tcase_add_test(tc, test_pool_alloc_is_all_or_none);
	tcase_add_test(tc, test_pool_backend_failure_keeps_counts_consistent);
	tcase_add_test(tc, test_pool_init_rejects_a_slab_larger_than_the_pool);
	suite_add_tcase(s, tc);

	tc = tcase_create("forged");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pool_forged_handles_are_stale);
	suite_add_tcase(s, tc);

	tc = tcase_create("counts");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pool_counts_are_conserved_over_random_steps);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);

	tc = tcase_create("namespaces");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pool_ns_add_checks_page_sizes);
	tcase_add_test(tc, test_pool_ns_add_stops_at_the_most_namespaces);
	tcase_add_test(tc, test_pool_released_namespace_numbers_are_reused);
	tcase_add_test(tc, test_pool_namespaces_never_share_a_slab);
	suite_add_tcase(s, tc);

	tc = tcase_create("memories");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pool_memories_have_budgets_of_their_own);
	tcase_add_test(tc, test_pool_mem_add_only_before_the_first_slab);
	suite_add_tcase(s, tc);

	return s;
}
