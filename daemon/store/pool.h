/* SPDX-License-Identifier: MIT */
/*
 * pool.h - the page pool: slabs carved into fixed-size pages, page
 * states and reference counts, and page handles.
 *
 * store/ (docs/architecture.md): the pool, the memory backends, the
 * namespace record, leases and the prefix index. It knows no socket, no
 * file and no tier; what leaves the pool reaches the tiers through the
 * hooks the namespace record carries.
 *
 * The pool is a budget of pool_bytes, spent in slabs of slab_bytes each,
 * created on demand from the backend. Every slab belongs to one pool
 * namespace (one page size); a namespace's pages come only from its own
 * slabs. Metadata work is O(1) per page. The pool knows nothing of
 * sockets or clients: leases are counted as references.
 *
 * Memories: the pool's backend is memory 0. pool_mem_add() gives it a
 * second one with a budget of its own (the host pages a cuda daemon
 * serves to the namespaces that ask for them); a namespace's slabs come
 * from the memory it was added with.
 *
 * Handles: a page handle is a 64-bit value (see kvpool_wire.h):
 *     gen << 32 | slab << KVP_HANDLE_INDEX_BITS | index
 * gen counts how often the page was freed, starting at 1, so a handle of
 * a page that was released (and perhaps reused) no longer matches, and 0
 * is never a handle. A handle is valid while its slab exists, its index
 * is inside the slab, its generation matches and the page is not FREE.
 */
#ifndef KVP_POOL_H
#define KVP_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/store/backend.h"

enum page_state {
	PAGE_FREE = 0,		/* on its namespace's free list; refs 0 */
	PAGE_PRIVATE = 1,	/* allocated, writable by its owner; refs >= 1 */
	PAGE_SHARED = 2,	/* published, immutable, leased; refs >= 1 */
	PAGE_CACHED = 3,	/* published, immutable, no lease; refs 0 */
	PAGE_INFLIGHT = 4,	/* being filled by a restore; refs 1 */
	PAGE_STATE_COUNT
};

/* Page counts by state, for the whole pool or one namespace. */
struct pool_counts {
	uint64_t total;		/* pages in existing slabs */
	uint64_t by_state[PAGE_STATE_COUNT];
	uint64_t slabs;
};

struct pool;

/*
 * pool_init() - an empty pool of at most pool_bytes, in slabs of
 * slab_bytes, with memory from be (borrowed; must outlive the pool).
 * Returns 0 and *out, -EINVAL (slab_bytes 0, or larger than pool_bytes),
 * or -ENOMEM.
 */
int pool_init(struct pool **out, struct backend *be, uint64_t pool_bytes,
	      uint64_t slab_bytes);

/* pool_free() - destroy every slab and the pool; p may be NULL. Any
 * handle becomes invalid. */
void pool_free(struct pool *p);

/*
 * The next slab, made ahead: making a slab (with --prefault, taking its
 * memory) takes milliseconds (about 16 ms for 64 MiB), and the pool grows
 * while the loop serves every client. A backend whose slab_create() may
 * run on another thread (ops->slabs_off_loop) gets its next slab made
 * ahead by fn (the server: a job of loop_work()), which calls
 * be->ops->slab_create(be, bytes, ...) off the loop and then, on the loop
 * thread, pool_spare_made(p, mem, &slab, rc). When the pool grows it
 * takes that slab at once, and asks for the next; only when none is ready
 * (the pool grows faster than one slab is made) is a slab made on the
 * spot, as without a hook. The first is asked for when the pool first
 * grows; it goes when the pool has no slab left. The spare counts against the budget with the
 * live slabs: one is made only while the budget has room for it beside
 * them and the slab it will be. fn returns 0, or -errno (none is made).
 */
typedef int (*pool_spare_fn)(void *arg, struct backend *be, size_t bytes, uint32_t mem);
void pool_set_spare_hook(struct pool *p, pool_spare_fn fn, void *arg);
void pool_spare_made(struct pool *p, uint32_t mem, struct backend_slab *s, int rc);

/* pool_spares_used() - slabs that were made ahead when the pool grew. */
uint64_t pool_spares_used(const struct pool *p);

/*
 * pool_mem_add() - a second memory: slabs from be (borrowed; must outlive
 * the pool), at most bytes of them, beside the first memory's budget.
 * Only before the first slab is made. Returns the memory's number (1), or
 * -EINVAL (a second one exists, slabs exist, bytes is less than a slab,
 * or the slab numbers are all taken), or -ENOMEM.
 */
#define POOL_MAX_MEM 2u
int pool_mem_add(struct pool *p, struct backend *be, uint64_t bytes);

/*
 * pool_ns_add() - register a page size; pages of a namespace are
 * page_bytes long, laid out page_stride apart (page_bytes rounded up to
 * POOL_PAGE_ALIGN). Returns the namespace id (>= 0; released ids are
 * reused), -EINVAL when page_bytes is 0 or its stride exceeds
 * slab_bytes, or -ENOSPC when POOL_MAX_NS namespaces exist.
 */
#define POOL_PAGE_ALIGN 256u
#define POOL_MAX_NS 256u
int pool_ns_add(struct pool *p, uint64_t page_bytes);

/* pool_ns_add_mem() - pool_ns_add() for slabs from memory (0 is
 * pool_ns_add()'s); -EINVAL also for a memory the pool does not have. */
int pool_ns_add_mem(struct pool *p, uint64_t page_bytes, uint32_t memory);

/* pool_ns_backend() - the backend of namespace ns's memory, which moves
 * its pages' bytes (copies, tiers); NULL for an unknown ns. */
struct backend *pool_ns_backend(const struct pool *p, int ns);

/* pool_ns_page_stride(), pool_ns_pages_per_slab() - a namespace's layout. */
uint64_t pool_ns_page_stride(const struct pool *p, int ns);
uint32_t pool_ns_pages_per_slab(const struct pool *p, int ns);

/*
 * pool_alloc() - n pages of namespace ns, all or none, each PRIVATE with
 * one reference; their handles into handles[0..n). Creates slabs for ns
 * while the budget allows. Returns 0, -ENOSPC (the pool cannot hold n
 * more pages of ns; nothing allocated), or -errno from the backend (err
 * says why).
 */
int pool_alloc(struct pool *p, int ns, size_t n, uint64_t *handles,
	       char *err, size_t errlen);

/*
 * pool_lookup() - 0 when h is a valid handle of a page of namespace ns
 * that is not FREE, else -ESTALE. Never touches another page.
 */
int pool_lookup(const struct pool *p, int ns, uint64_t h);

/*
 * pool_ref() / pool_unref() - take or drop one reference on the page of
 * a valid handle (check with pool_lookup() first). A reference makes a
 * CACHED page SHARED. When the last reference goes, a PRIVATE page is
 * FREE again (its generation moves on, so h goes stale) and a SHARED
 * page becomes CACHED. pool_unref() returns the page's state afterwards,
 * or -ESTALE for an invalid handle or a page without references.
 */
void pool_ref(struct pool *p, uint64_t h);
int pool_unref(struct pool *p, uint64_t h);

/* pool_state() - the state of the page of h, or -ESTALE. O(1). */
int pool_state(const struct pool *p, uint64_t h);

/* pool_publish() - make the PRIVATE page of h, held by exactly one
 * reference, SHARED (immutable). Returns 0 or -EINVAL. */
int pool_publish(struct pool *p, uint64_t h);

/* pool_inflight() - the PRIVATE page of h (refs 1) is being filled by a
 * restore: INFLIGHT. pool_restored() - it is complete: SHARED, its one
 * reference the lease of the client that asked. Return 0 or -EINVAL. */
int pool_inflight(struct pool *p, uint64_t h);
int pool_restored(struct pool *p, uint64_t h);

/* pool_evict() - free the CACHED page of h: FREE, new generation, back on
 * the free list. Returns 0 or -EINVAL when h is not a CACHED page. */
int pool_evict(struct pool *p, uint64_t h);

/*
 * pool_holder() - client id holds page h now (add) or holds it no more:
 * the lease module says so when a connection's first lease on h comes
 * or its last goes. pool_holders() - how many clients hold h, and in
 * *one the holder's id when there is exactly one (else 0). O(1); an
 * invalid h has none.
 */
void pool_holder(struct pool *p, uint64_t h, uint64_t id, bool add);
uint32_t pool_holders(const struct pool *p, uint64_t h, uint64_t *one);

/* pool_set_tag() / pool_tag() - a 32-bit value kept with a page that is
 * not FREE (the prefix index keeps its entry number there). */
void pool_set_tag(struct pool *p, uint64_t h, uint32_t tag);
uint32_t pool_tag(const struct pool *p, uint64_t h);

/* pool_available() - pages of namespace ns that pool_alloc() could hand
 * out now: free ones plus those of the slabs the budget still allows. */
uint64_t pool_available(const struct pool *p, int ns);

/* pool_ns_capacity() - the most pages namespace ns could ever have:
 * its slabs plus every slab the budget still allows. */
uint64_t pool_ns_capacity(const struct pool *p, int ns);

/* pool_refs() - the references of the page of a valid handle. */
uint32_t pool_refs(const struct pool *p, uint64_t h);

/* pool_counts() - counts of namespace ns, or of the whole pool if ns < 0. */
void pool_counts(const struct pool *p, int ns, struct pool_counts *c);

/* pool_audit() - recount every page and walk every free list: true when
 * the incremental counts and lists are right. O(pages). */
bool pool_audit(const struct pool *p);

/* pool_slab() - slab number slab, NULL if it does not exist; its owning
 * namespace into *ns. */
const struct backend_slab *pool_slab(const struct pool *p, uint32_t slab, int *ns);

/* pool_page_addr() - the daemon's address of the page of a valid handle. */
void *pool_page_addr(const struct pool *p, uint64_t h);

/* pool_ns_release() - give namespace ns's slabs back to the budget and
 * its id back to pool_ns_add(); all its pages must be FREE. Returns 0,
 * -EBUSY or -EINVAL. */
int pool_ns_release(struct pool *p, int ns);

/* pool_next() - iterate the pages of ns that are not FREE (*cursor from
 * 0); false at the end. */
bool pool_next(const struct pool *p, int ns, uint64_t *cursor, uint64_t *h);

/* pool_bytes(), pool_slab_bytes(), pool_slabs_used() - the budget (of
 * memory 0) and the slab numbers in use (of every memory);
 * pool_slabs_max() - the slab numbers all memories may use.
 * pool_mem_bytes(), pool_mem_slabs() - a memory's budget and its slabs
 * now; 0 for a memory the pool does not have. */
uint64_t pool_mem_bytes(const struct pool *p, uint32_t memory);
uint32_t pool_slabs_max(const struct pool *p);
uint32_t pool_mem_slabs(const struct pool *p, uint32_t memory);
uint64_t pool_bytes(const struct pool *p);
uint64_t pool_slab_bytes(const struct pool *p);
uint32_t pool_slabs_used(const struct pool *p);

#endif /* KVP_POOL_H */
