/* SPDX-License-Identifier: MIT */
/*
 * backend.h - where slab memory comes from: one vtable, one
 * implementation per kind of memory (host: memfd; cuda: cudaMalloc).
 *
 * The pool asks a backend for slabs and never touches memfd or CUDA
 * itself; only backends do. A slab is exported to clients as an fd
 * (host, passed with SCM_RIGHTS) or as an opaque handle (cuda IPC).
 */
#ifndef KVP_BACKEND_H
#define KVP_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"

#define BACKEND_HANDLE_BYTES 64	/* size of an exported opaque handle */

/* One slab's memory, filled by backend->slab_create(). */
struct backend_slab {
	void *base;		/* the daemon's own mapping (host) or device pointer (cuda) */
	size_t bytes;
	int fd;			/* host: the sealed memfd; -1 for cuda */
	int ro_fd;		/* host: the same memfd opened read-only, for
				 * clients that may only read; -1 otherwise */
	uint8_t handle[BACKEND_HANDLE_BYTES];	/* cuda: IPC handle; zero for host */
};

struct backend;

struct backend_ops {
	const char *name;		/* "host", "cuda" */
	enum kvp_backend_kind kind;
	/* slab_create() may run on another thread than the loop's (it
	 * touches nothing the loop does): the pool's next slab is then made
	 * ahead, off the loop (pool_set_spare_hook()) */
	bool slabs_off_loop;
	/*
	 * slab_create() - allocate bytes of slab memory into *s.
	 * Returns 0, or -errno with a message naming the cause in err.
	 */
	int (*slab_create)(struct backend *be, size_t bytes,
			   struct backend_slab *s, char *err, size_t errlen);
	/* slab_destroy() - free what slab_create() made; s may be zeroed. */
	void (*slab_destroy)(struct backend *be, struct backend_slab *s);
	/* page_copy() - copy bytes between two pages (daemon addresses),
	 * done when it returns. Returns 0 or -errno. */
	int (*page_copy)(struct backend *be, void *dst, const void *src, size_t bytes);
	/* to_host() / from_host() - copy a page's bytes into host memory, or
	 * host memory into a page, for the tier's staging buffers; done when
	 * they return. Return 0 or -errno. */
	int (*to_host)(struct backend *be, void *host, const void *page, size_t bytes);
	int (*from_host)(struct backend *be, void *page, const void *host, size_t bytes);
	/* host_alloc() / host_free() - bytes of host memory for the host
	 * tier, made for fast to_host()/from_host() copies (cuda: pinned).
	 * host_alloc() returns 0 and *out, or -errno with err filled. */
	int (*host_alloc)(struct backend *be, size_t bytes, void **out,
			  char *err, size_t errlen);
	void (*host_free)(struct backend *be, void *mem, size_t bytes);
	/* fini() - release the backend itself. */
	void (*fini)(struct backend *be);
};

struct backend {
	const struct backend_ops *ops;
	void *priv;
	bool prefault;		/* host: a slab's memory is taken when it is made */
};

/*
 * backend_host_init() - the memfd backend. Each slab is a memfd of the
 * given size, sealed against shrinking and growing (F_SEAL_SHRINK |
 * F_SEAL_GROW | F_SEAL_SEAL, verified with F_GET_SEALS) and mapped
 * MAP_SHARED into the daemon. Every field of be is set (prefault false:
 * the caller sets it after). Returns 0 or -errno with err filled.
 */
int backend_host_init(struct backend *be, char *err, size_t errlen);

/*
 * backend_host_bytes() - a backend for plain host memory that is no
 * pool's: to_host() and from_host() are memcpy, nothing else may be
 * called. What a tier moves that is not a page (the remote tier's small
 * values) goes through it, whatever the pool's backend.
 */
struct backend *backend_host_bytes(void);

/*
 * backend_cuda_init() - the CUDA backend on device: each slab is one
 * cudaMalloc, exported to clients with one cudaIpcGetMemHandle. Returns 0,
 * or -ENODEV (no device answers) / -ENOTSUP (built without CUDA) / -errno
 * with err saying why.
 */
int backend_cuda_init(struct backend *be, int device, char *err, size_t errlen);

#endif /* KVP_BACKEND_H */
