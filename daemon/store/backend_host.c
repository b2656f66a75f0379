/* SPDX-License-Identifier: MIT */
/*
 * backend_host.c - the host memory backend: each slab is one memfd,
 * sized once, sealed against shrinking and growing, and mapped
 * MAP_SHARED into the daemon. Clients get the fd over SCM_RIGHTS and map
 * the same pages. The kernel backs pages lazily: creating a slab touches
 * none of its memory, so an idle slab costs address space, not RAM.
 *
 * A memfd's inode is created with mode 0777, and /proc/self/fd/N opens
 * a new file description of it with whatever the inode's mode allows: a
 * client holding only the read-only descriptor could open it again for
 * writing. Each memfd is therefore made 0600 at once, so only the
 * daemon's own user (and root) can reopen it; clients keep exactly the
 * access of the descriptor they were passed.
 *
 * This module owns every memfd and daemon mapping of a host slab; only
 * slab_destroy() closes or unmaps them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/size.h"
#include "daemon/meminfo.h"
#include "daemon/store/backend.h"

#define HOST_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static void host_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* host_err() - format a message into err, which may be NULL. */
static void host_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* host_hint_size() - what to do when memory for a slab of a size fails. */
static const char *host_hint_size(int e)
{
	switch (e) {
	case ENOMEM:
	case ENOSPC:
	case EFBIG:
		return "raise the memory limit or lower --pool-size";
	case EMFILE:
	case ENFILE:
		return "raise the open-file limit (ulimit -n) or lower --pool-size";
	case EINVAL:
		return "the size is larger than a file may be; lower the slab size";
	case ENOSYS:
		return "the host backend needs memfd_create (Linux >= 3.17)";
	default:
		return "check the daemon's memory limits";
	}
}

/* host_seal() - add HOST_SEALS to fd and check that all of them are
 * set. Returns 0 or -errno with err filled. */
static int host_seal(int fd, size_t bytes, char *err, size_t errlen)
{
	int seals;

	if (fcntl(fd, F_ADD_SEALS, HOST_SEALS) < 0) {
		int e = errno;

		host_err(err, errlen,
			 "sealing the memfd of a %zu-byte slab failed: %s; "
			 "the kernel must support memfd seals (Linux >= 3.17)",
			 bytes, strerror(e));
		return -e;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		int e = errno;

		host_err(err, errlen,
			 "reading the seals of a %zu-byte slab's memfd failed: %s",
			 bytes, strerror(e));
		return -e;
	}
	if ((seals & HOST_SEALS) != HOST_SEALS) {
		host_err(err, errlen,
			 "a %zu-byte slab's memfd has seals 0x%x, want 0x%x "
			 "(shrink, grow, seal); clients could resize it, so it is "
			 "not used; check the kernel's memfd sealing",
			 bytes, (unsigned int)seals, (unsigned int)HOST_SEALS);
		return -EIO;
	}
	return 0;
}

/*
 * reopen_ro() - a read-only file description of the memfd fd (through
 * /proc/self/fd: a memfd has no other name), so that a client which may
 * only read cannot map the slab writable. -1 when /proc is missing: such
 * clients are then refused the slab.
 */
static int reopen_ro(int fd)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* What a slab leaves spare under the memory limit (--prefault): 16 MiB
 * and 1/64 of it (a mapping's page tables are 1/512 per process). */
#define HOST_SLAB_SPARE(bytes) ((16ull << 20) + (bytes) / 64)

/*
 * host_slab_create() - one sealed memfd of bytes, mapped read-write and
 * shared into s->base. Costs one memfd, one mapping; with be->prefault
 * (the default) the memfd's memory is taken too, about 20 ms for 64 MiB;
 * else no page is touched. Returns 0 or -errno with err saying what
 * failed and what to do.
 */

static int host_slab_create(struct backend *be, size_t bytes,
			    struct backend_slab *s, char *err, size_t errlen)
{
	void *base;
	int fd, e, rc;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->ro_fd = -1;
	if (bytes == 0) {
		host_err(err, errlen, "a slab of 0 bytes was asked for; "
			 "set a slab size above 0");
		return -EINVAL;
	}
	fd = memfd_create("kvpool-slab", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		e = errno;
		host_err(err, errlen,
			 "memfd_create for a %zu-byte slab failed: %s; %s",
			 bytes, strerror(e), host_hint_size(e));
		return -e;
	}
	if (fchmod(fd, 0600) < 0) {
		e = errno;
		host_err(err, errlen, "making a slab's memfd mode 0600 failed: %s; "
			 "without it a reader could reopen the slab writable, so it "
			 "is not used", strerror(e));
		rc = -e;
		goto out_close_fd;
	}
	if (ftruncate(fd, (off_t)bytes) < 0) {
		e = errno;
		host_err(err, errlen,
			 "sizing a slab's memfd to %zu bytes failed: %s; %s",
			 bytes, strerror(e), host_hint_size(e));
		rc = -e;
		goto out_close_fd;
	}
	if (be->prefault) {
		/* the memory now, charged to the daemon: a slab that memory
		 * cannot hold is refused here, not by the OOM killer later */
		char what[256];
		uint64_t room = mem_room(what, sizeof(what));

		/* fallocate() past a cgroup's limit is not refused: the OOM
		 * killer is called (the daemon may be its victim). So the slab
		 * must fit with room to spare, for the page tables and kernel
		 * memory that mapping and writing it charge too. */
		if (bytes + HOST_SLAB_SPARE(bytes) > room) {
			char a[32], b[32];

			host_err(err, errlen, "no memory for another slab of %s: %s left "
				 "under %s; lower --pool-size or raise the limit",
				 size_text(bytes, a, sizeof(a)), size_text(room, b, sizeof(b)),
				 what);
			rc = -ENOSPC;
			goto out_close_fd;
		}
		if (fallocate(fd, 0, 0, (off_t)bytes) < 0) {
			e = errno;
			host_err(err, errlen, "cannot take the memory of a %zu-byte slab: %s; "
				 "lower --pool-size", bytes, strerror(e));
			rc = e == ENOMEM ? -ENOSPC : -e;
			goto out_close_fd;
		}
	}
	base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		e = errno;
		host_err(err, errlen,
			 "mapping a %zu-byte slab failed: %s; raise the "
			 "address-space limit (ulimit -v) or vm.max_map_count, "
			 "or lower --pool-size",
			 bytes, strerror(e));
		rc = -e;
		goto out_close_fd;
	}
	rc = host_seal(fd, bytes, err, errlen);
	if (rc < 0)
		goto out_unmap;
	s->base = base;
	s->bytes = bytes;
	s->fd = fd;
	s->ro_fd = reopen_ro(fd);
	return 0;

out_unmap:
	munmap(base, bytes);
out_close_fd:
	close(fd);
	return rc;
}

/* host_slab_destroy() - unmap and close what host_slab_create() made;
 * a zeroed s (base NULL: never created, or destroyed) is left alone,
 * so fd 0 of a zeroed struct is never closed. Clients' mappings stay valid
 * until they unmap: the memory goes when the last mapping and fd go. */
static void host_slab_destroy(struct backend *be, struct backend_slab *s)
{
	if (!s->base)
		return;
	munmap(s->base, s->bytes);
	if (s->fd >= 0)
		close(s->fd);
	if (s->ro_fd >= 0)
		close(s->ro_fd);
	s->base = NULL;
	s->bytes = 0;
	s->fd = -1;
	s->ro_fd = -1;
}

static void host_fini(struct backend *be)
{
	be->ops = NULL;
	be->priv = NULL;
}

/* host_page_copy() - a page copy in shared memory is a memcpy. */
static int host_page_copy(struct backend *be, void *dst, const void *src, size_t bytes)
{
	(void)be;
	memcpy(dst, src, bytes);
	return 0;
}

/* host_to_host() - the pool is host memory: a memcpy either way. */
static int host_to_host(struct backend *be, void *dst, const void *src, size_t bytes)
{
	(void)be;
	memcpy(dst, src, bytes);
	return 0;
}

/* host_mem_alloc() - the host tier of the host backend is private
 * anonymous memory: clients never map it, and it is committed as pages
 * arrive (the pool itself stays the only shared memory). */
static int host_mem_alloc(struct backend *be, size_t bytes, void **out, char *err,
			  size_t errlen)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	(void)be;
	if (p == MAP_FAILED) {
		int e = errno;

		host_err(err, errlen, "mapping %zu bytes for the host tier: %s; lower "
			 "--host-tier-size", bytes, strerror(e));
		return -e;
	}
	*out = p;
	return 0;
}

static void host_mem_free(struct backend *be, void *mem, size_t bytes)
{
	(void)be;
	if (mem)
		munmap(mem, bytes);
}

static const struct backend_ops host_ops = {
	.name = "host",
	.kind = KVP_BACKEND_HOST,
	.slabs_off_loop = true,		/* memfd, fallocate, mmap: no shared state */
	.slab_create = host_slab_create,
	.slab_destroy = host_slab_destroy,
	.page_copy = host_page_copy,
	.to_host = host_to_host,
	.from_host = host_to_host,
	.host_alloc = host_mem_alloc,
	.host_free = host_mem_free,
	.fini = host_fini,
};

struct backend *backend_host_bytes(void)
{
	static const struct backend_ops bytes_ops = {
		.name = "host bytes",
		.kind = KVP_BACKEND_HOST,
		.to_host = host_to_host,
		.from_host = host_to_host,
	};
	static struct backend be = { .ops = &bytes_ops };

	return &be;
}

/*
 * backend_host_init() - see backend.h. Probes memfd_create once so that a
 * kernel without it fails at start-up, not at the first allocation.
 */
int backend_host_init(struct backend *be, char *err, size_t errlen)
{
	int fd = memfd_create("kvpool-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0) {
		int e = errno;

		host_err(err, errlen, "the host backend cannot create a memfd: %s; %s",
			 strerror(e), host_hint_size(e));
		return -e;
	}
	close(fd);
	*be = (struct backend){ .ops = &host_ops };	/* prefault off: the caller's */
	return 0;
}
