/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the page pool: owns every slab (made and destroyed through the
 * backend), the metadata of every page (generation, state, references,
 * free-list link), each namespace's free list, and the page counts by
 * state of each namespace and of the whole pool.
 *
 * Costs: every per-page operation (alloc of one page, lookup, ref, unref,
 * free) is O(1); pool_alloc() of n pages is O(n) plus O(pages per slab)
 * for each slab it creates; pool_counts() is O(1). Counts are kept
 * incrementally by page_set_state(), the one place a page changes state,
 * so adding a state to enum page_state needs no change here beyond the
 * transitions that use it.
 *
 * Slabs are created lazily and live until pool_free(); a slab belongs to
 * the namespace that first needed it. A pool has one memory (pool_init())
 * or two (pool_mem_add(): host pages beside the GPU's), each a backend
 * with a budget of slabs of its own; a namespace takes its slabs from
 * one of them, and slab numbers are shared. Each namespace's free pages form
 * one LIFO list threaded through the page metadata of its slabs, so a
 * page freed last is reused first (warm in caches and TLBs).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/store/pool.h"

/* End of a free list: no slab has this number (KVP_MAX_SLABS <= 4096). */
#define POOL_NIL_SLAB UINT16_MAX
_Static_assert(KVP_MAX_SLABS <= POOL_NIL_SLAB, "slab numbers fit in uint16_t below the nil mark");

/* Metadata of one page: 32 bytes. */
struct pool_page {
	uint32_t gen;		/* >= 1; moves on each time the page is freed */
	uint32_t refs;		/* references (leases); 0 when FREE or CACHED */
	uint32_t next_index;	/* FREE: next free page's index ... */
	uint32_t tag;		/* not FREE: the owner's tag (prefix entry) */
	uint32_t holders;	/* distinct holders of the references */
	uint16_t next_slab;	/* ... and slab; POOL_NIL_SLAB ends the list */
	uint8_t state;		/* enum page_state */
	uint64_t holder_x;	/* XOR of the holders' ids: the holder's id
				 * when there is one */
};

struct pool_slab {
	struct backend_slab mem;	/* from be->ops->slab_create() */
	uint32_t memory;		/* the pool memory it came from */
	struct pool_page *pages;	/* [npages], owned */
	uint32_t npages;
	int ns;				/* owning namespace; -1: released */
	uint32_t next_gen;		/* released: the generation its pages
					 * start at when the number is reused */
};

struct pool_ns {
	bool used;			/* added and not released */
	uint64_t page_bytes;
	uint64_t stride;		/* page_bytes rounded up to POOL_PAGE_ALIGN */
	uint32_t pages_per_slab;
	uint16_t free_slab;		/* head of the LIFO free list, or POOL_NIL_SLAB */
	uint32_t free_index;
	uint32_t memory;		/* where its slabs come from */
	struct pool_counts counts;
};

/* A memory: a backend and its budget. */
struct pool_mem {
	struct backend *be;		/* borrowed */
	uint64_t bytes;
	uint32_t max_slabs;		/* min(bytes / slab_bytes, KVP_MAX_SLABS) */
	uint32_t live;			/* its slabs that exist now */
	/* the next slab, made ahead off the loop (pool_set_spare_hook()):
	 * memory of one more slab, within max_slabs with the live ones */
	struct backend_slab spare;
	bool spare_ready;		/* spare holds a slab */
	bool spare_asked;		/* the hook is making one */
};

struct pool {
	struct pool_mem mem[POOL_MAX_MEM];
	uint32_t nmem;
	uint64_t slab_bytes;
	uint32_t max_slabs;		/* the memories' max_slabs, at most KVP_MAX_SLABS */
	uint32_t nslabs;		/* slabs[0..nslabs) were made */
	uint32_t released;		/* of them released (ns -1), to reuse */
	struct pool_slab *slabs;	/* [max_slabs], owned */
	uint32_t nns;
	struct pool_counts counts;	/* the whole pool */
	struct pool_ns ns[POOL_MAX_NS];
	pool_spare_fn spare_fn;		/* pool_set_spare_hook() */
	void *spare_arg;
	uint64_t spares_used;		/* slabs that were ready when wanted */
};

static void pool_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* pool_err() - format a message into err, which may be NULL. */
static void pool_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static bool pool_ns_valid(const struct pool *p, int ns)
{
	return ns >= 0 && (uint32_t)ns < p->nns && p->ns[ns].used;
}

/* mem_room() - slabs the budget of namespace ns's memory still allows. */
static uint32_t mem_room(const struct pool *p, int ns)
{
	const struct pool_mem *m = &p->mem[p->ns[ns].memory];

	return m->max_slabs - m->live;
}

/*
 * page_find() - the metadata of the page h names, or NULL when h is out of
 * range, its generation does not match, or the page is FREE. Bounds are
 * checked before any array is indexed, so any 64-bit h is safe. O(1).
 */
static struct pool_page *page_find(const struct pool *p, uint64_t h,
				   struct pool_slab **slabp)
{
	uint32_t slab = KVP_HANDLE_SLAB(h), index = KVP_HANDLE_INDEX(h);
	struct pool_slab *s;
	struct pool_page *pg;

	if (slab >= p->nslabs)
		return NULL;
	s = &p->slabs[slab];
	if (index >= s->npages)
		return NULL;
	pg = &s->pages[index];
	if (pg->gen != KVP_HANDLE_GEN(h) || pg->state == PAGE_FREE)
		return NULL;
	if (slabp)
		*slabp = s;
	return pg;
}

/* page_set_state() - move pg to state, keeping the counts of its
 * namespace and of the pool. The only place a page changes state. O(1). */
static void page_set_state(struct pool *p, int ns, struct pool_page *pg,
			   enum page_state state)
{
	struct pool_counts *nc = &p->ns[ns].counts;

	nc->by_state[pg->state]--;
	p->counts.by_state[pg->state]--;
	pg->state = (uint8_t)state;
	nc->by_state[state]++;
	p->counts.by_state[state]++;
}

/* free_push() - put page (slab, index) on top of its namespace's free
 * list. O(1). */
static void free_push(struct pool_ns *n, struct pool_page *pg, uint32_t slab,
		      uint32_t index)
{
	pg->next_slab = n->free_slab;
	pg->next_index = n->free_index;
	n->free_slab = (uint16_t)slab;
	n->free_index = index;
}

/* free_pop() - take the top of a namespace's free list, which must not be
 * empty; its slab and index into *slab, *index. O(1). */
static struct pool_page *free_pop(struct pool *p, struct pool_ns *n,
				  uint32_t *slab, uint32_t *index)
{
	struct pool_page *pg;

	*slab = n->free_slab;
	*index = n->free_index;
	pg = &p->slabs[*slab].pages[*index];
	n->free_slab = pg->next_slab;
	n->free_index = pg->next_index;
	pg->next_slab = POOL_NIL_SLAB;
	pg->next_index = 0;
	return pg;
}

/*
 * spare_want() - ask the hook for memory mem's next slab, made ahead off
 * the loop, unless one is ready or being made, or the budget has no room
 * for it beside the live slabs and the one it will be.
 */
static void spare_want(struct pool *p, uint32_t mem)
{
	struct pool_mem *m = &p->mem[mem];

	if (!p->spare_fn || !m->be->ops->slabs_off_loop || m->spare_ready || m->spare_asked ||
	    m->live + 1 >= m->max_slabs)
		return;
	m->spare_asked = true;
	if (p->spare_fn(p->spare_arg, m->be, (size_t)p->slab_bytes, mem) < 0)
		m->spare_asked = false;	/* the next slab is made on the spot */
}

/* spare_drop() - let memory mem's spare go (its pool has no slab left). */
static void spare_drop(struct pool *p, uint32_t mem)
{
	struct pool_mem *m = &p->mem[mem];

	if (!m->spare_ready)
		return;
	m->be->ops->slab_destroy(m->be, &m->spare);
	memset(&m->spare, 0, sizeof(m->spare));
	m->spare_ready = false;
}

void pool_set_spare_hook(struct pool *p, pool_spare_fn fn, void *arg)
{
	p->spare_fn = fn;	/* the first spare once the pool first grows: a
				 * daemon nobody uses takes no memory */
	p->spare_arg = arg;
}

void pool_spare_made(struct pool *p, uint32_t mem, struct backend_slab *s, int rc)
{
	struct pool_mem *m = &p->mem[mem];

	m->spare_asked = false;
	if (rc < 0)
		return;		/* the slab is made when wanted, and says why not */
	if (m->spare_ready || m->live >= m->max_slabs || m->live == 0) {
		m->be->ops->slab_destroy(m->be, s);
		return;
	}
	m->spare = *s;
	m->spare_ready = true;
}

uint64_t pool_spares_used(const struct pool *p)
{
	return p->spares_used;
}

/*
 * slab_add() - create slab number p->nslabs for namespace ns: backend
 * memory of slab_bytes and pages_per_slab FREE pages of generation 1,
 * pushed so that index 0 is allocated first. The caller checked the
 * budget. O(pages per slab); the slab's memory is not touched. Returns 0,
 * -ENOMEM, or the backend's -errno, with err filled.
 */
static int slab_add(struct pool *p, int ns, char *err, size_t errlen)
{
	struct pool_ns *n = &p->ns[ns];
	struct pool_mem *m = &p->mem[n->memory];
	uint32_t slab = p->nslabs, i, gen = 1;
	struct pool_slab *s;
	int rc;

	/* A released slab number first: its pages' generations go on from
	 * where they were, so no old handle names a new page. O(slabs). */
	for (i = 0; p->released && i < p->nslabs; i++) {
		if (p->slabs[i].ns < 0) {
			slab = i;
			gen = p->slabs[i].next_gen;
			break;
		}
	}
	s = &p->slabs[slab];

	if (m->spare_ready) {	/* made ahead: nothing to wait for */
		s->mem = m->spare;
		memset(&m->spare, 0, sizeof(m->spare));
		m->spare_ready = false;
		p->spares_used++;
	} else {
		rc = m->be->ops->slab_create(m->be, (size_t)p->slab_bytes, &s->mem,
					     err, errlen);
		if (rc < 0)
			return rc;
	}
	s->memory = n->memory;
	s->pages = calloc(n->pages_per_slab, sizeof(*s->pages));
	if (!s->pages) {
		pool_err(err, errlen, "no memory for the metadata of %u pages "
			 "of slab %u; lower --pool-size", n->pages_per_slab, slab);
		rc = -ENOMEM;
		goto out_destroy_slab;
	}
	s->npages = n->pages_per_slab;
	s->ns = ns;
	for (i = s->npages; i-- > 0;) {
		s->pages[i].gen = gen;
		s->pages[i].state = PAGE_FREE;
		free_push(n, &s->pages[i], slab, i);
	}
	n->counts.total += s->npages;
	n->counts.by_state[PAGE_FREE] += s->npages;
	n->counts.slabs++;
	p->counts.total += s->npages;
	p->counts.by_state[PAGE_FREE] += s->npages;
	p->counts.slabs++;
	m->live++;
	if (slab == p->nslabs)
		p->nslabs++;
	else
		p->released--;
	spare_want(p, n->memory);	/* the next one, off the loop */
	return 0;

out_destroy_slab:
	m->be->ops->slab_destroy(m->be, &s->mem);
	s->pages = NULL;
	s->npages = 0;
	if (slab < p->nslabs)
		s->ns = -1;	/* still released, next_gen kept */
	else
		memset(s, 0, sizeof(*s));
	return rc;
}

/* pool_init() - see pool.h. O(1) apart from zeroing the slab table. */
int pool_init(struct pool **out, struct backend *be, uint64_t pool_bytes,
	      uint64_t slab_bytes)
{
	uint64_t max_slabs;
	struct pool *p;

	if (slab_bytes == 0 || slab_bytes > pool_bytes || slab_bytes > SIZE_MAX)
		return -EINVAL;
	max_slabs = pool_bytes / slab_bytes;
	if (max_slabs > KVP_MAX_SLABS)
		max_slabs = KVP_MAX_SLABS;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->slabs = calloc((size_t)max_slabs, sizeof(*p->slabs));
	if (!p->slabs) {
		free(p);
		return -ENOMEM;
	}
	p->mem[0].be = be;
	p->mem[0].bytes = pool_bytes;
	p->mem[0].max_slabs = (uint32_t)max_slabs;
	p->nmem = 1;
	p->slab_bytes = slab_bytes;
	p->max_slabs = (uint32_t)max_slabs;
	*out = p;
	return 0;
}

/*
 * pool_mem_add() - see pool.h. Grows the slab table by the new memory's
 * slabs (the total stays within KVP_MAX_SLABS, what a handle can name).
 * O(slabs).
 */
int pool_mem_add(struct pool *p, struct backend *be, uint64_t bytes)
{
	struct pool_slab *slabs;
	uint64_t max;

	if (p->nmem >= POOL_MAX_MEM || p->nslabs || p->slab_bytes > bytes)
		return -EINVAL;
	max = bytes / p->slab_bytes;
	if (max > KVP_MAX_SLABS - p->max_slabs)
		max = KVP_MAX_SLABS - p->max_slabs;
	if (!max)
		return -EINVAL;
	slabs = calloc((size_t)(p->max_slabs + max), sizeof(*slabs));
	if (!slabs)
		return -ENOMEM;
	free(p->slabs);
	p->slabs = slabs;
	p->max_slabs += (uint32_t)max;
	p->mem[p->nmem].be = be;
	p->mem[p->nmem].bytes = bytes;
	p->mem[p->nmem].max_slabs = (uint32_t)max;
	return (int)p->nmem++;
}

/* pool_free() - see pool.h. O(slabs). */
void pool_free(struct pool *p)
{
	uint32_t i;

	if (!p)
		return;
	for (i = 0; i < p->nslabs; i++) {
		struct backend *be = p->mem[p->slabs[i].memory].be;

		if (p->slabs[i].ns >= 0)
			be->ops->slab_destroy(be, &p->slabs[i].mem);
		free(p->slabs[i].pages);
	}
	for (i = 0; i < p->nmem; i++)
		if (p->mem[i].spare_ready)
			p->mem[i].be->ops->slab_destroy(p->mem[i].be, &p->mem[i].spare);
	free(p->slabs);
	free(p);
}

int pool_ns_add(struct pool *p, uint64_t page_bytes)
{
	return pool_ns_add_mem(p, page_bytes, 0);
}

/*
 * pool_ns_add_mem() - see pool.h. Pages per slab are slab_bytes / stride,
 * capped at KVP_MAX_SLAB_PAGES (what a handle can index); past the cap a
 * slab's tail is unused address space, never touched. A number released
 * by pool_ns_release() is reused first. O(namespaces).
 */
int pool_ns_add_mem(struct pool *p, uint64_t page_bytes, uint32_t memory)
{
	uint64_t stride, pages;
	struct pool_ns *n;
	uint32_t i;

	if (page_bytes == 0 || page_bytes > UINT64_MAX - (POOL_PAGE_ALIGN - 1) ||
	    memory >= p->nmem)
		return -EINVAL;
	stride = (page_bytes + POOL_PAGE_ALIGN - 1) / POOL_PAGE_ALIGN * POOL_PAGE_ALIGN;
	if (stride > p->slab_bytes)
		return -EINVAL;
	for (i = 0; i < p->nns && p->ns[i].used; i++)
		;
	if (i >= POOL_MAX_NS)
		return -ENOSPC;
	pages = p->slab_bytes / stride;
	if (pages > KVP_MAX_SLAB_PAGES)
		pages = KVP_MAX_SLAB_PAGES;
	n = &p->ns[i];
	memset(n, 0, sizeof(*n));
	n->used = true;
	n->page_bytes = page_bytes;
	n->stride = stride;
	n->pages_per_slab = (uint32_t)pages;
	n->free_slab = POOL_NIL_SLAB;
	n->memory = memory;
	if (i == p->nns)
		p->nns++;
	return (int)i;
}

uint64_t pool_ns_page_stride(const struct pool *p, int ns)
{
	return pool_ns_valid(p, ns) ? p->ns[ns].stride : 0;
}

uint32_t pool_ns_pages_per_slab(const struct pool *p, int ns)
{
	return pool_ns_valid(p, ns) ? p->ns[ns].pages_per_slab : 0;
}

/*
 * pool_alloc() - see pool.h. First checks that ns's free pages plus the
 * pages of every slab the budget still allows cover n, so a refusal
 * creates nothing; then creates slabs until the free list holds n and
 * pops n pages. O(n) plus O(pages per slab) per slab created. When the
 * backend fails on a later slab, the slabs made before it stay as free
 * pages of ns and nothing is allocated.
 */
int pool_alloc(struct pool *p, int ns, size_t n, uint64_t *handles,
	       char *err, size_t errlen)
{
	struct pool_ns *nsp;
	uint64_t have, can;
	size_t i;
	int rc;

	if (!pool_ns_valid(p, ns) || (n && !handles)) {
		pool_err(err, errlen, "pool_alloc: bad namespace %d or no handle array", ns);
		return -EINVAL;
	}
	nsp = &p->ns[ns];
	have = nsp->counts.by_state[PAGE_FREE];
	can = have + (uint64_t)mem_room(p, ns) * nsp->pages_per_slab;
	if (n > can) {
		pool_err(err, errlen, "%zu pages wanted, at most %llu can be "
			 "free in namespace %d; the pool is full", n,
			 (unsigned long long)can, ns);
		return -ENOSPC;
	}
	while (nsp->counts.by_state[PAGE_FREE] < n) {
		rc = slab_add(p, ns, err, errlen);
		if (rc < 0)
			return rc;
	}
	for (i = 0; i < n; i++) {
		uint32_t slab, index;
		struct pool_page *pg = free_pop(p, nsp, &slab, &index);

		page_set_state(p, ns, pg, PAGE_PRIVATE);
		pg->refs = 1;
		handles[i] = KVP_HANDLE(pg->gen, slab, index);
	}
	return 0;
}

/* pool_lookup() - see pool.h. O(1); safe for any h. */
int pool_lookup(const struct pool *p, int ns, uint64_t h)
{
	struct pool_slab *s;

	if (!pool_ns_valid(p, ns) || !page_find(p, h, &s) || s->ns != ns)
		return -ESTALE;
	return 0;
}

/* pool_ref() - see pool.h. O(1); an invalid h is ignored. */
void pool_ref(struct pool *p, uint64_t h)
{
	struct pool_slab *s;
	struct pool_page *pg = page_find(p, h, &s);

	if (!pg)
		return;
	if (pg->state == PAGE_CACHED)
		page_set_state(p, s->ns, pg, PAGE_SHARED);
	pg->refs++;
}

/* page_free() - FREE, generation + 1 (0 skipped, so a handle is never 0),
 * and on top of its namespace's free list. O(1). */
static void page_free(struct pool *p, struct pool_slab *s, struct pool_page *pg,
		      uint64_t h)
{
	page_set_state(p, s->ns, pg, PAGE_FREE);
	pg->tag = 0;
	pg->holders = 0;
	pg->holder_x = 0;
	if (++pg->gen == 0)
		pg->gen = 1;
	free_push(&p->ns[s->ns], pg, KVP_HANDLE_SLAB(h), KVP_HANDLE_INDEX(h));
}

/* pool_unref() - see pool.h. O(1). */
int pool_unref(struct pool *p, uint64_t h)
{
	struct pool_slab *s;
	struct pool_page *pg = page_find(p, h, &s);

	if (!pg || pg->refs == 0)
		return -ESTALE;
	if (--pg->refs > 0)
		return pg->state;
	if (pg->state == PAGE_PRIVATE || pg->state == PAGE_INFLIGHT)
		page_free(p, s, pg, h);
	else
		page_set_state(p, s->ns, pg, PAGE_CACHED);
	return pg->state;
}

int pool_state(const struct pool *p, uint64_t h)
{
	const struct pool_page *pg = page_find(p, h, NULL);

	return pg ? pg->state : -ESTALE;
}

int pool_publish(struct pool *p, uint64_t h)
{
	struct pool_slab *s;
	struct pool_page *pg = page_find(p, h, &s);

	if (!pg || pg->state != PAGE_PRIVATE || pg->refs != 1)
		return -EINVAL;
	page_set_state(p, s->ns, pg, PAGE_SHARED);
	return 0;
}

int pool_inflight(struct pool *p, uint64_t h)
{
	struct pool_slab *s;
	struct pool_page *pg = page_find(p, h, &s);

	if (!pg || pg->state != PAGE_PRIVATE || pg->refs != 1)
		return -EINVAL;
	page_set_state(p, s->ns, pg, PAGE_INFLIGHT);
	return 0;
}

int pool_restored(struct pool *p, uint64_t h)
{
	struct pool_slab *s;
	struct pool_page *pg = page_find(p, h, &s);

	if (!pg || pg->state != PAGE_INFLIGHT)
		return -EINVAL;
	page_set_state(p, s->ns, pg, PAGE_SHARED);
	return 0;
}

int pool_evict(struct pool *p, uint64_t h)
{
	struct pool_slab *s;
	struct pool_page *pg = page_find(p, h, &s);

	if (!pg || pg->state != PAGE_CACHED)
		return -EINVAL;
	page_free(p, s, pg, h);
	return 0;
}

void pool_set_tag(struct pool *p, uint64_t h, uint32_t tag)
{
	struct pool_page *pg = page_find(p, h, NULL);

	if (pg)
		pg->tag = tag;
}

uint32_t pool_tag(const struct pool *p, uint64_t h)
{
	const struct pool_page *pg = page_find(p, h, NULL);

	return pg ? pg->tag : 0;
}

void pool_holder(struct pool *p, uint64_t h, uint64_t id, bool add)
{
	struct pool_page *pg = page_find(p, h, NULL);

	if (!pg || (!add && !pg->holders))
		return;
	pg->holders += add ? 1 : (uint32_t)-1;
	pg->holder_x ^= id;
}

uint32_t pool_holders(const struct pool *p, uint64_t h, uint64_t *one)
{
	const struct pool_page *pg = page_find(p, h, NULL);

	*one = pg && pg->holders == 1 ? pg->holder_x : 0;
	return pg ? pg->holders : 0;
}

uint64_t pool_available(const struct pool *p, int ns)
{
	if (!pool_ns_valid(p, ns))
		return 0;
	return p->ns[ns].counts.by_state[PAGE_FREE] +
	       (uint64_t)mem_room(p, ns) * p->ns[ns].pages_per_slab;
}

uint64_t pool_ns_capacity(const struct pool *p, int ns)
{
	if (!pool_ns_valid(p, ns))
		return 0;
	return p->ns[ns].counts.total +
	       (uint64_t)mem_room(p, ns) * p->ns[ns].pages_per_slab;
}

/* pool_refs() - see pool.h. O(1); 0 for an invalid h. */
uint32_t pool_refs(const struct pool *p, uint64_t h)
{
	const struct pool_page *pg = page_find(p, h, NULL);

	return pg ? pg->refs : 0;
}

/* pool_counts() - see pool.h. O(1): counts are kept as pages move; an
 * unknown namespace reads as all zero. */
void pool_counts(const struct pool *p, int ns, struct pool_counts *c)
{
	if (ns < 0)
		*c = p->counts;
	else if (pool_ns_valid(p, ns))
		*c = p->ns[ns].counts;
	else
		memset(c, 0, sizeof(*c));
}

/* pool_slab() - see pool.h. O(1); ns may be NULL. */
const struct backend_slab *pool_slab(const struct pool *p, uint32_t slab, int *ns)
{
	if (slab >= p->nslabs || p->slabs[slab].ns < 0)
		return NULL;
	if (ns)
		*ns = p->slabs[slab].ns;
	return &p->slabs[slab].mem;
}

/* pool_page_addr() - see pool.h. O(1); NULL for an invalid h. */
void *pool_page_addr(const struct pool *p, uint64_t h)
{
	struct pool_slab *s;

	if (!page_find(p, h, &s))
		return NULL;
	return (char *)s->mem.base + (uint64_t)KVP_HANDLE_INDEX(h) * p->ns[s->ns].stride;
}

uint64_t pool_bytes(const struct pool *p)
{
	return p->mem[0].bytes;
}

uint32_t pool_slabs_max(const struct pool *p)
{
	return p->max_slabs;
}

uint64_t pool_mem_bytes(const struct pool *p, uint32_t memory)
{
	return memory < p->nmem ? p->mem[memory].bytes : 0;
}

uint32_t pool_mem_slabs(const struct pool *p, uint32_t memory)
{
	return memory < p->nmem ? p->mem[memory].live : 0;
}

struct backend *pool_ns_backend(const struct pool *p, int ns)
{
	return pool_ns_valid(p, ns) ? p->mem[p->ns[ns].memory].be : NULL;
}

uint64_t pool_slab_bytes(const struct pool *p)
{
	return p->slab_bytes;
}

uint32_t pool_slabs_used(const struct pool *p)
{
	return p->nslabs;
}

/*
 * pool_audit() - recount every page from its metadata and compare with
 * the incremental counts; walk every free list. O(pages): for STATS and
 * tests, not for the hot path. Returns true when all agree: each state's
 * count, each free list's length, references on exactly the PRIVATE,
 * SHARED and INFLIGHT pages, never more holders than references.
 */
bool pool_audit(const struct pool *p)
{
	uint64_t pool_by[PAGE_STATE_COUNT] = { 0 }, total = 0, free_len;
	uint32_t s, i, ns, slab, index;

	for (ns = 0; ns < p->nns; ns++) {
		const struct pool_ns *n = &p->ns[ns];
		uint64_t by[PAGE_STATE_COUNT] = { 0 }, ntotal = 0;

		if (!n->used)
			continue;
		for (s = 0; s < p->nslabs; s++) {
			if (p->slabs[s].ns != (int)ns)
				continue;
			for (i = 0; i < p->slabs[s].npages; i++) {
				const struct pool_page *pg = &p->slabs[s].pages[i];

				bool leased = pg->state == PAGE_PRIVATE ||
					      pg->state == PAGE_SHARED ||
					      pg->state == PAGE_INFLIGHT;

				if (pg->state >= PAGE_STATE_COUNT || leased != (pg->refs > 0) ||
				    pg->holders > pg->refs)
					return false;
				by[pg->state]++;
				ntotal++;
			}
		}
		for (i = 0; i < PAGE_STATE_COUNT; i++) {
			if (by[i] != n->counts.by_state[i])
				return false;
			pool_by[i] += by[i];
		}
		if (ntotal != n->counts.total)
			return false;
		total += ntotal;

		/* the free list holds exactly the FREE pages (bounded walk) */
		free_len = 0;
		for (slab = n->free_slab, index = n->free_index;
		     slab != POOL_NIL_SLAB && free_len <= ntotal; free_len++) {
			const struct pool_page *pg;

			if (slab >= p->nslabs || index >= p->slabs[slab].npages ||
			    p->slabs[slab].ns != (int)ns)
				return false;
			pg = &p->slabs[slab].pages[index];
			if (pg->state != PAGE_FREE)
				return false;
			slab = pg->next_slab;
			index = pg->next_index;
		}
		if (free_len != by[PAGE_FREE])
			return false;
	}
	for (i = 0; i < PAGE_STATE_COUNT; i++)
		if (pool_by[i] != p->counts.by_state[i])
			return false;
	return total == p->counts.total;
}

/*
 * pool_ns_release() - give every slab of namespace ns back to the budget,
 * and the namespace's number to pool_ns_add(). All its pages must be
 * FREE. The slab numbers are reused later with generations that go on,
 * so handles of the released pages stay stale. Returns 0 or -EBUSY (a
 * page is not free). O(pages of ns).
 */
int pool_ns_release(struct pool *p, int ns)
{
	struct pool_ns *n;
	uint32_t s, i, maxgen;

	if (!pool_ns_valid(p, ns))
		return -EINVAL;
	n = &p->ns[ns];
	if (n->counts.by_state[PAGE_FREE] != n->counts.total)
		return -EBUSY;
	for (s = 0; s < p->nslabs; s++) {
		struct pool_slab *sl = &p->slabs[s];

		if (sl->ns != ns)
			continue;
		for (i = 0, maxgen = 0; i < sl->npages; i++)
			if (sl->pages[i].gen > maxgen)
				maxgen = sl->pages[i].gen;
		p->mem[sl->memory].be->ops->slab_destroy(p->mem[sl->memory].be, &sl->mem);
		if (--p->mem[sl->memory].live == 0)
			spare_drop(p, sl->memory);	/* nobody uses the pool: no memory */
		p->counts.total -= sl->npages;
		p->counts.by_state[PAGE_FREE] -= sl->npages;
		p->counts.slabs--;
		free(sl->pages);
		sl->pages = NULL;
		sl->npages = 0;
		sl->ns = -1;
		sl->next_gen = maxgen + 1 ? maxgen + 1 : 1;
		p->released++;
	}
	memset(n, 0, sizeof(*n));
	n->free_slab = POOL_NIL_SLAB;
	return 0;
}

/*
 * pool_next() - iterate the pages of namespace ns that are not FREE:
 * *cursor starts at 0; each call puts the next page's handle in *h and
 * returns true, false at the end. O(pages) in all.
 */
bool pool_next(const struct pool *p, int ns, uint64_t *cursor, uint64_t *h)
{
	uint32_t s = (uint32_t)(*cursor >> 32), i = (uint32_t)*cursor;

	for (; s < p->nslabs; s++, i = 0) {
		const struct pool_slab *sl = &p->slabs[s];

		if (sl->ns != ns)
			continue;
		for (; i < sl->npages; i++) {
			if (sl->pages[i].state == PAGE_FREE)
				continue;
			*h = KVP_HANDLE(sl->pages[i].gen, s, i);
			*cursor = (uint64_t)s << 32 | (i + 1);
			return true;
		}
	}
	*cursor = (uint64_t)s << 32;
	return false;
}
