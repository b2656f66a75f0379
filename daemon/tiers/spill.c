/* SPDX-License-Identifier: MIT */
/*
 * spill.c - the NVMe tier of one namespace (see spill.h): the tier file
 * and its header, the free slots, the staging buffers, and the writes and
 * reads through the loop, with short transfers resubmitted and every
 * read checked before a byte of it is served.
 *
 * Layout (docs/spill.md): a header area (SPILL_HDR bytes rounded up to
 * the direct-I/O alignment), then nslots slots of slot_bytes: a slot
 * header of SPILL_HDR bytes (with a partial page's token ids), then the
 * page's bytes, then padding to the alignment.
 *
 * Past 800 lines on purpose: the file's format, its scan at start and its
 * reads and writes share the slot layout and the staging buffers; the
 * format is written and read in one place.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "client/size.h"
#include "daemon/log.h"
#include "daemon/tiers/spill.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

static const char file_magic[8] = { 'K', 'V', 'P', 'S', 'P', 'I', 'L', 'L' };
static const char slot_magic[8] = { 'K', 'V', 'P', 'S', 'L', 'O', 'T', '1' };

/* The file header, little-endian, at offset 0. */
struct file_hdr {
	char magic[8];
	uint32_t format;
	uint32_t align;
	uint64_t slot_bytes;
	uint64_t nslots;
	uint64_t file_bytes;
	struct spill_ns ns;
	uint64_t checksum;	/* XXH3-64 of the bytes before it */
};

/* A slot's header, little-endian, at the slot's start; token ids follow
 * at offset sizeof(struct slot_hdr). */
struct slot_hdr {
	char magic[8];
	uint32_t format;
	uint32_t prio;
	uint64_t generation;	/* order of writes: the newest copy of a key wins */
	uint64_t ns_hash;	/* XXH3-64 of the namespace's name */
	uint8_t key[KVP_KEY_BYTES];
	uint8_t parent[KVP_KEY_BYTES];
	uint64_t data_len;
	uint64_t data_checksum;	/* XXH3-64 of the page's bytes */
	uint32_t ntokens;
	uint32_t reserved;
	uint64_t hdr_checksum;	/* XXH3-64 of the header before it and the tokens */
};
_Static_assert(sizeof(struct slot_hdr) == 128, "slot header is 128 bytes");

/* One I/O in flight, with its staging buffer. */
struct sio {
	struct loop_op op;
	struct spill *sp;
	uint8_t *buf;		/* slot_bytes, aligned, in the registered arena */
	uint32_t slot;
	size_t done;		/* bytes transferred so far */
	bool write;
	bool busy;
	void *page;		/* read: where the bytes go */
	uint8_t key[KVP_KEY_BYTES];	/* read: what the slot must hold */
	uint64_t t0;		/* read: start, for the latency */
	spill_done_fn fn;
	void *arg;
};

struct spill {
	struct loop *loop;
	struct backend *be;	/* pages <-> staging buffers */
	char path[4096];
	int fd;
	uint64_t align;		/* direct-I/O alignment of offsets, lengths, memory */
	uint64_t hdr_area;	/* bytes before slot 0 */
	uint64_t slot_bytes;
	uint32_t nslots;
	uint64_t page_bytes;
	uint64_t ns_hash;
	uint64_t gen;		/* next write's generation */
	int buf_index;		/* loop fixed buffer, or -1 */
	uint8_t *arena;
	struct sio *ios;	/* [nios] */
	uint32_t nios;
	uint32_t *idle;		/* stack of idle ios */
	uint32_t nidle;
	uint8_t *writing;	/* [nslots]: a write to the slot is in flight */
	uint32_t *free_slots;	/* stack of free slot numbers */
	uint32_t nfree;
	struct spill_stats st;
	uint64_t rate;		/* bytes per second; 0: no cap */
	double tokens;		/* bytes that may be written now */
	uint64_t tokens_ns;	/* when tokens was last refilled */
	const char *why;	/* spill_prepare(): why it started cold, or NULL */
	struct found *found;	/* spill_prepare(): valid slots, newest first */
	uint32_t nfound;
};

/* A valid slot header that spill_prepare() read, for spill_scan(). */
struct found {
	uint32_t slot;
	struct spill_meta m;	/* m.tokens: a copy (owned), or NULL */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static uint64_t slot_off(const struct spill *sp, uint32_t slot)
{
	return sp->hdr_area + (uint64_t)slot * sp->slot_bytes;
}

/* dio_align() - the direct-I/O alignment of fd: statx STATX_DIOALIGN,
 * else the file system's block size, at least 512. */
static uint64_t dio_align(int fd)
{
	struct statx stx;
	struct stat st;
	uint64_t a = 0;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
		a = stx.stx_dio_offset_align;
		if (stx.stx_dio_mem_align > a)
			a = stx.stx_dio_mem_align;
	} else if (fstat(fd, &st) == 0) {
		a = (uint64_t)st.st_blksize;
	}
	return a < 512 ? 512 : a;
}

/* dir_trusted() - one directory of the spill path: owned by root or by
 * us, and writable by no one else (an ancestor may instead be sticky:
 * others cannot rename or remove what is ours in it). */
static int dir_trusted(const char *path, bool last, char *err, size_t errlen)
{
	struct stat st;

	if (lstat(path, &st) < 0) {
		int e = errno;

		snprintf(err, errlen, "spill directory %s: %s%s", path, strerror(e),
			 e == ENOENT ? " (create it, mode 0700, owned by kvpoold's user)" : "");
		return -e;
	}
	if (S_ISLNK(st.st_mode))
		return 0;	/* its target is checked on the resolved path */
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "spill directory %s: not a directory", path);
		return -ENOTDIR;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(err, errlen, "spill directory %s is owned by uid %u, not by root or "
			 "kvpoold's user (uid %u): its owner could replace what kvpoold "
			 "writes there; use a directory of kvpoold's user", path,
			 (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (last || !(st.st_mode & S_ISVTX))) {
		snprintf(err, errlen, "spill directory %s is writable by others (mode %04o): "
			 "another user could plant links or files there that kvpoold would "
			 "follow or serve; use a directory only kvpoold's user can write "
			 "(chmod go-w, or a subdirectory made with mkdir -m 0700)", path,
			 (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* path_trusted() - every directory from / down to path (see dir_trusted()). */
static int path_trusted(const char *path, char *err, size_t errlen)
{
	char buf[4096];
	size_t i, n = strlen(path);
	int rc;

	if (n >= sizeof(buf)) {
		snprintf(err, errlen, "spill directory '%.64s...': the path is longer than "
			 "%zu bytes", path, sizeof(buf) - 1);
		return -ENAMETOOLONG;
	}
	rc = dir_trusted("/", n == 1, err, errlen);
	for (i = 2; rc == 0 && i <= n; i++) {
		if (i < n && path[i] != '/')
			continue;
		memcpy(buf, path, i);
		buf[i] = '\0';
		rc = dir_trusted(buf, i == n, err, errlen);
	}
	return rc;
}

int spill_dir_check(const char *dir, char *err, size_t errlen)
{
	char real[PATH_MAX];
	int rc;

	if (!realpath(dir, real)) {
		rc = -errno;
		snprintf(err, errlen, "spill directory %s: %s%s", dir, strerror(-rc),
			 rc == -ENOENT ? " (create it, mode 0700, owned by kvpoold's user)" : "");
		return rc;
	}
	/* as written (its links sit in directories that must be safe too)
	 * and as resolved */
	rc = dir[0] == '/' ? path_trusted(dir, err, errlen) : 0;
	return rc == 0 && strcmp(real, dir) ? path_trusted(real, err, errlen) : rc;
}

/* tier_files_bytes() - the most disk any one tier file in dir holds now
 * (a warm restart reuses its blocks). */
static uint64_t tier_files_bytes(const char *dir)
{
	uint64_t most = 0;
	struct dirent *de;
	struct stat st;
	DIR *d = opendir(dir);
	size_t n;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		n = strlen(de->d_name);
		if (n < 8 || strcmp(de->d_name + n - 8, ".kvspill"))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && (uint64_t)st.st_blocks * 512 > most)
			most = (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return most;
}

int spill_dir_probe(const char *dir, uint64_t bytes, char *err, size_t errlen)
{
	char a[32], b[32];
	struct statvfs vfs;
	struct statfs fs;
	struct stat st;
	uint64_t avail, have;
	int fd, rc;

	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "--spill-dir %s is not a directory; make one (mode "
			 "0700, owned by kvpoold's user) or name another", dir);
		return -ENOTDIR;
	}
	/* a file the daemon may write there, gone when closed */
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR) {
		rc = -errno;
		snprintf(err, errlen, "--spill-dir %s: cannot create a file there: %s%s", dir,
			 strerror(-rc), rc == -EACCES || rc == -EPERM ? " (make it writable by "
			 "kvpoold's user)" : rc == -EROFS ? " (the file system is read-only: "
			 "name a directory on a writable one)" : "");
		return rc;
	}
	if (fd >= 0)
		close(fd);
	fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	else if (errno == EINVAL)
		log_warn("--spill-dir %s: the file system refuses O_DIRECT: spills go through "
			 "the page cache, which takes memory and evicts other files", dir);
	if (statfs(dir, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC))
		log_warn("--spill-dir %s is on %s: the NVMe tier's files live in RAM (up to "
			 "%s per namespace), not on a disk; name a directory on an NVMe "
			 "drive, or use --host-tier-size for a tier in memory", dir,
			 fs.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs", size_text(bytes, a, sizeof(a)));
	if (statvfs(dir, &vfs) < 0) {
		rc = -errno;
		snprintf(err, errlen, "--spill-dir %s: statvfs: %s", dir, strerror(-rc));
		return rc;
	}
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	have = tier_files_bytes(dir);
	if (avail + have < bytes) {
		snprintf(err, errlen, "--spill-size %s does not fit in %s: it has %s free%s; "
			 "free disk space or lower --spill-size (each namespace has a tier "
			 "file of that size)", size_text(bytes, a, sizeof(a)), dir,
			 size_text(avail, b, sizeof(b)), have ? " besides its tier files" : "");
		return -ENOSPC;
	}
	log_info("spill directory %s: %s free, room for %llu tier files of %s", dir,
		 size_text(avail + have, a, sizeof(a)),
		 (unsigned long long)((avail + have) / bytes), size_text(bytes, b, sizeof(b)));
	return 0;
}

/* file_ours() - fd is a tier file the daemon made: a plain file of its
 * user, open to no one else, with one name. Else err says why. */
static bool file_ours(int fd, const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return false;
	}
	if (S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077) &&
	    st.st_nlink == 1)
		return true;
	snprintf(err, errlen, "%s is not a tier file kvpoold made (%s, uid %u, mode %04o, "
		 "%u links; kvpoold makes plain files of uid %u, mode 0600): it is not "
		 "used; remove it", path, S_ISREG(st.st_mode) ? "a file" : "not a file",
		 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
		 (unsigned)st.st_nlink, (unsigned)geteuid());
	return false;
}

/* open_tier() - open the tier file at path, or create it (never through a
 * link, never a file someone else made); O_DIRECT where the file system
 * takes it. Returns the fd (*created says whether it is new), or -errno
 * with err filled. */
static int open_tier(const char *path, bool *created, char *note, size_t notelen,
		     char *err, size_t errlen)
{
	int flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC, fd, rc;
	bool direct = true;

	for (;;) {
		*created = false;
		fd = open(path, flags | (direct ? O_DIRECT : 0));
		if (fd < 0 && errno == ENOENT) {
			*created = true;
			fd = open(path, flags | O_CREAT | O_EXCL | (direct ? O_DIRECT : 0), 0600);
		}
		if (fd >= 0 || errno != EINVAL || !direct)
			break;
		snprintf(note, notelen, "%s: the file system refuses O_DIRECT; spilling "
			 "through the page cache", path);
		direct = false;
	}
	if (fd < 0) {
		rc = -errno;
		if (rc == -ELOOP)
			snprintf(err, errlen, "%s is a symbolic link: kvpoold never follows "
				 "one to its tier file; remove it", path);
		else
			snprintf(err, errlen, "cannot open the spill file %s: %s (check "
				 "--spill-dir)", path, strerror(-rc));
		return rc;
	}
	if (!file_ours(fd, path, err, errlen)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

static uint64_t file_hdr_sum(const struct file_hdr *h)
{
	return XXH3_64bits(h, offsetof(struct file_hdr, checksum));
}

/* slot_hdr_sum() - over the header's fields and its token ids; the
 * caller checked ntokens against SPILL_MAX_TOKENS. */
static uint64_t slot_hdr_sum(const struct slot_hdr *h)
{
	return XXH3_64bits(h, offsetof(struct slot_hdr, hdr_checksum)) ^
	       XXH3_64bits((const uint8_t *)h + sizeof(*h), h->ntokens * sizeof(uint32_t));
}

int spill_read_ns(const char *path, struct spill_ns *ns)
{
	char why[512];
	struct file_hdr h;
	ssize_t n;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? -EPERM : -errno;
	if (!file_ours(fd, path, why, sizeof(why))) {
		close(fd);
		return -EPERM;
	}
	n = pread(fd, &h, sizeof(h), 0);
	if (n != (ssize_t)sizeof(h) || memcmp(h.magic, file_magic, 8) ||
	    h.checksum != file_hdr_sum(&h))
		rc = -EBADMSG;
	else
		*ns = h.ns;
	ns->name[sizeof(ns->name) - 1] = '\0';
	ns->model[sizeof(ns->model) - 1] = '\0';
	close(fd);
	return rc;
}

/* same_ns() - the file was made for namespace ns, in whichever memory. */
static bool same_ns(const struct spill_ns *file, const struct spill_ns *ns)
{
	struct spill_ns f = *file;

	f.memory = ns->memory;	/* not compared: see struct spill_ns */
	return !memcmp(&f, ns, sizeof(f));
}

/* check_warm() - NULL when the file's header fits this tier exactly,
 * else why it does not; *moved when it fits but names another memory
 * (the header is then written again; the slots stay). */
static const char *check_warm(struct spill *sp, const struct spill_ns *ns, uint64_t bytes,
			      bool *moved)
{
	struct file_hdr *h;
	const char *why = NULL;

	if (posix_memalign((void **)&h, sp->align, sp->hdr_area))
		return "no memory to read the header";
	if (pread(sp->fd, h, sp->hdr_area, 0) != (ssize_t)sp->hdr_area)
		why = "the file is shorter than its header";
	else if (memcmp(h->magic, file_magic, 8) || h->checksum != file_hdr_sum(h))
		why = "the file header is not a valid kvpool tier header";
	else if (h->format != SPILL_FORMAT)
		why = "the file has another format version";
	else if (!same_ns(&h->ns, ns))
		why = "the namespace's geometry, model or key root changed";
	else if (h->slot_bytes != sp->slot_bytes || h->nslots != sp->nslots ||
		 h->file_bytes != bytes || h->align != sp->align)
		why = "the spill size or the slot layout changed";
	else
		*moved = h->ns.memory != ns->memory;
	free(h);
	return why;
}

static int write_header(struct spill *sp, const struct spill_ns *ns, uint64_t bytes)
{
	struct file_hdr *h;
	int rc = 0;

	if (posix_memalign((void **)&h, sp->align, sp->hdr_area))
		return -ENOMEM;
	memset(h, 0, sp->hdr_area);
	memcpy(h->magic, file_magic, 8);
	h->format = SPILL_FORMAT;
	h->align = (uint32_t)sp->align;
	h->slot_bytes = sp->slot_bytes;
	h->nslots = sp->nslots;
	h->file_bytes = bytes;
	h->ns = *ns;
	h->checksum = file_hdr_sum(h);
	if (pwrite(sp->fd, h, sp->hdr_area, 0) != (ssize_t)sp->hdr_area)
		rc = errno ? -errno : -EIO;
	free(h);
	return rc;
}

/* wipe_slots() - invalidate every slot header of a cold file, so that a
 * later warm start cannot find pages of an earlier life. */
static int wipe_slots(struct spill *sp)
{
	uint8_t *zero;
	uint32_t i;
	int rc = 0;

	if (posix_memalign((void **)&zero, sp->align, SPILL_HDR))
		return -ENOMEM;
	memset(zero, 0, SPILL_HDR);
	for (i = 0; i < sp->nslots && rc == 0; i++)
		if (pwrite(sp->fd, zero, SPILL_HDR, (off_t)slot_off(sp, i)) != SPILL_HDR)
			rc = errno ? -errno : -EIO;
	free(zero);
	return rc;
}

/* preallocate() - give sp's file its bytes, after checking that the file
 * system has them; a failure leaves an old file cut back to its length
 * (one made for it the caller removes). The check and the preallocation
 * are one step under prealloc_lock: tier files made at once on several
 * worker threads would each pass the check, then all fail halfway. */
static pthread_mutex_t prealloc_lock = PTHREAD_MUTEX_INITIALIZER;

static int preallocate(struct spill *sp, uint64_t bytes, const char *dir, bool created,
		       char *note, size_t notelen, char *err, size_t errlen)
{
	uint64_t had = 0, avail;
	char a[32], b[32];
	struct statvfs vfs;
	struct stat st;
	bool known;
	int rc;

	known = fstat(sp->fd, &st) == 0;
	if (known)
		had = (uint64_t)st.st_blocks * 512;
	if (fstatvfs(sp->fd, &vfs) == 0) {
		avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		if (had < bytes && avail < bytes - had) {
			snprintf(err, errlen, "cannot make the spill file %s of %s: %s has %s "
				 "free; free disk space or lower --spill-size", sp->path,
				 size_text(bytes, a, sizeof(a)), dir, size_text(avail, b, sizeof(b)));
			rc = -ENOSPC;
			goto undo;
		}
	}
	if (fallocate(sp->fd, 0, 0, (off_t)bytes) == 0)
		return 0;
	rc = -errno;
	snprintf(err, errlen, "cannot preallocate %s for %s: %s%s", size_text(bytes, a, sizeof(a)),
		 sp->path, strerror(-rc),
		 rc == -ENOSPC ? " (free disk space or lower --spill-size)" : "");
undo:	/* a file made for it is removed by the caller */
	if (!created && known && ftruncate(sp->fd, st.st_size) < 0)
		snprintf(note, notelen, "cannot cut %s back to %lld bytes: %s", sp->path,
			 (long long)st.st_size, strerror(errno));
	return rc;
}

/* valid_header() - the slot header in buf belongs to this tier and is
 * intact (the data is not checked here). */
static bool valid_header(const struct spill *sp, const struct slot_hdr *h)
{
	return !memcmp(h->magic, slot_magic, 8) && h->format == SPILL_FORMAT &&
	       h->ns_hash == sp->ns_hash && h->data_len == sp->page_bytes &&
	       h->ntokens <= SPILL_MAX_TOKENS && h->hdr_checksum == slot_hdr_sum(h);
}

/* read_slots() - the valid slot headers of a warm file into sp->found,
 * newest generation first (a key written twice keeps its latest copy, which
 * spill_scan() offers first); sp->gen follows the newest. -ENOMEM or 0. */
static int read_slots(struct spill *sp)
{
	struct slot_hdr *h;
	uint64_t *gens = NULL;
	uint32_t i, *used = NULL, nused = 0;
	uint8_t *buf = NULL;
	int rc = -ENOMEM;

	used = malloc(sp->nslots * sizeof(*used));
	gens = malloc(sp->nslots * sizeof(*gens));
	if (!used || !gens || posix_memalign((void **)&buf, sp->align, SPILL_HDR))
		goto out;
	h = (struct slot_hdr *)buf;
	for (i = 0; i < sp->nslots; i++) {
		gens[i] = 0;
		if (pread(sp->fd, buf, SPILL_HDR, (off_t)slot_off(sp, i)) == SPILL_HDR &&
		    valid_header(sp, h)) {
			gens[i] = h->generation;
			used[nused++] = i;
			if (h->generation >= sp->gen)
				sp->gen = h->generation + 1;
		}
	}
	for (uint32_t a = 1; a < nused; a++) {	/* insertion sort by generation */
		uint32_t s = used[a], b = a;

		while (b > 0 && gens[used[b - 1]] < gens[s]) {
			used[b] = used[b - 1];
			b--;
		}
		used[b] = s;
	}
	sp->found = calloc(nused ? nused : 1, sizeof(*sp->found));
	if (!sp->found)
		goto out;
	for (i = 0; i < nused; i++) {
		struct found *f = &sp->found[sp->nfound];

		if (pread(sp->fd, buf, SPILL_HDR, (off_t)slot_off(sp, used[i])) != SPILL_HDR ||
		    !valid_header(sp, h))
			continue;
		f->slot = used[i];
		memcpy(f->m.key, h->key, sizeof(f->m.key));
		memcpy(f->m.parent, h->parent, sizeof(f->m.parent));
		f->m.prio = h->prio;
		f->m.ntokens = h->ntokens;
		if (h->ntokens) {
			uint32_t *t = malloc(h->ntokens * sizeof(*t));

			if (!t)
				goto out;
			memcpy(t, buf + sizeof(*h), h->ntokens * sizeof(*t));
			f->m.tokens = t;
		}
		sp->nfound++;
	}
	rc = 0;
out:
	free(buf);
	free(used);
	free(gens);
	return rc;
}

/* free_found() - what read_slots() kept. */
static void free_found(struct spill *sp)
{
	uint32_t i;

	for (i = 0; sp->found && i < sp->nfound; i++)
		free((void *)sp->found[i].m.tokens);
	free(sp->found);
	sp->found = NULL;
	sp->nfound = 0;
}

/* staging() - the staging buffers and slot tables of sp; -ENOMEM or 0. */
static int staging(struct spill *sp)
{
	uint64_t arena;
	uint32_t i;

	/* about 64 MiB, 8 to 4096 buffers: as many writes and reads in
	 * flight; never more than the file has slots (a small tier would
	 * pin memory it cannot use) */
	sp->nios = (uint32_t)((64ull << 20) / sp->slot_bytes);
	if (sp->nios > sp->nslots)
		sp->nios = sp->nslots;
	sp->nios = sp->nios < 8 ? 8 : sp->nios > 4096 ? 4096 : sp->nios;
	arena = (uint64_t)sp->nios * sp->slot_bytes;
	sp->ios = calloc(sp->nios, sizeof(*sp->ios));
	sp->idle = calloc(sp->nios, sizeof(*sp->idle));
	sp->writing = calloc(sp->nslots, 1);
	sp->free_slots = malloc(sp->nslots * sizeof(*sp->free_slots));
	if (!sp->ios || !sp->idle || !sp->writing || !sp->free_slots ||
	    posix_memalign((void **)&sp->arena, sp->align, arena))
		return -ENOMEM;
	/* faulted in here, on a worker thread: registering it with the loop
	 * (spill_attach()) then pins pages that are there (a few ms for 64
	 * MiB) instead of faulting them in on the loop (tens of ms) */
	memset(sp->arena, 0, arena);
	for (i = 0; i < sp->nios; i++) {
		sp->ios[i].sp = sp;
		sp->ios[i].buf = sp->arena + (uint64_t)i * sp->slot_bytes;
		sp->idle[sp->nidle++] = sp->nios - 1 - i;
	}
	for (i = 0; i < sp->nslots; i++)
		sp->free_slots[i] = sp->nslots - 1 - i;
	sp->nfree = sp->nslots;
	sp->st.slots = sp->nslots;
	return 0;
}

int spill_prepare(struct spill **out, const char *dir, uint64_t bytes, bool discard,
		  const struct spill_ns *ns, char *note, size_t notelen, char *err,
		  size_t errlen)
{
	struct spill *sp;
	uint32_t i;
	bool existed, created = false, moved = false;
	int rc;

	note[0] = '\0';
	sp = calloc(1, sizeof(*sp));
	if (!sp) {
		snprintf(err, errlen, "no memory for a tier");
		return -ENOMEM;
	}
	sp->fd = -1;
	sp->buf_index = -1;
	sp->gen = 1;
	sp->page_bytes = ns->page_bytes;
	sp->ns_hash = XXH3_64bits(ns->name, strlen(ns->name));
	snprintf(sp->path, sizeof(sp->path), "%s/%s.kvspill", dir, ns->name);
	for (i = (uint32_t)strlen(dir) + 1; sp->path[i]; i++)
		if (sp->path[i] == '/')
			sp->path[i] = '%';	/* names may hold '/': one file each */
	sp->fd = open_tier(sp->path, &created, note, notelen, err, errlen);
	if (sp->fd < 0) {
		rc = sp->fd;
		goto out_free;
	}
	existed = !created;
	sp->align = dio_align(sp->fd);
	sp->hdr_area = round_up(SPILL_HDR, sp->align);
	sp->slot_bytes = round_up(SPILL_HDR + ns->page_bytes, sp->align);
	if (bytes < sp->hdr_area + sp->slot_bytes) {
		snprintf(err, errlen, "--spill-size %llu holds no slot of %llu bytes for "
			 "namespace '%s'; raise it", (unsigned long long)bytes,
			 (unsigned long long)sp->slot_bytes, ns->name);
		rc = -EINVAL;
		goto out_free;
	}
	sp->nslots = (uint32_t)((bytes - sp->hdr_area) / sp->slot_bytes);
	pthread_mutex_lock(&prealloc_lock);
	rc = preallocate(sp, bytes, dir, created, note, notelen, err, errlen);
	pthread_mutex_unlock(&prealloc_lock);
	if (rc < 0)
		goto out_free;
	if (existed && !discard)
		sp->why = check_warm(sp, ns, bytes, &moved);
	else if (existed)
		sp->why = "--spill-discard";
	if (!existed || sp->why || moved) {
		rc = (existed && !sp->why) ? 0 : wipe_slots(sp);
		if (rc == 0)
			rc = write_header(sp, ns, bytes);
		if (rc < 0) {
			snprintf(err, errlen, "cannot initialize %s: %s", sp->path, strerror(-rc));
			goto out_free;
		}
	}
	rc = staging(sp);
	if (rc == 0 && existed && !sp->why)
		rc = read_slots(sp);
	if (rc < 0) {
		snprintf(err, errlen, "no memory for the slots and %u staging buffers of "
			 "%llu bytes of %s", sp->nios, (unsigned long long)sp->slot_bytes,
			 sp->path);
		goto out_free;
	}
	*out = sp;
	return 0;

out_free:
	if (created && unlink(sp->path) < 0)	/* nothing is left behind */
		snprintf(note, notelen, "cannot remove %s after a failed start: %s; remove "
			 "it", sp->path, strerror(errno));
	spill_close(sp);
	return rc;
}

void spill_attach(struct spill *sp, struct loop *l, struct backend *be)
{
	int rc;

	sp->loop = l;
	sp->be = be;
	rc = loop_buffer_add(l, sp->arena, (uint64_t)sp->nios * sp->slot_bytes);
	sp->buf_index = rc >= 0 ? rc : -1;
}

const char *spill_cold_why(const struct spill *sp)
{
	return sp->why;
}


void spill_close(struct spill *sp)
{
	if (!sp)
		return;
	if (sp->loop)
		loop_buffer_remove(sp->loop, sp->buf_index);	/* before the arena goes */
	if (sp->fd >= 0)
		close(sp->fd);
	free_found(sp);
	free(sp->ios);
	free(sp->idle);
	free(sp->writing);
	free(sp->free_slots);
	free(sp->arena);
	free(sp);
}

bool spill_busy(const struct spill *sp, uint32_t slot)
{
	return slot < sp->nslots && sp->writing[slot];
}

void spill_scan(struct spill *sp,
		bool (*cb)(void *arg, uint32_t slot, const struct spill_meta *m),
		void *arg)
{
	uint8_t *kept = calloc(sp->nslots, 1);
	uint32_t i;

	if (!kept) {
		log_error("%s: no memory to re-index the slots; starting it empty", sp->path);
		free_found(sp);
		return;
	}
	for (i = 0; i < sp->nfound; i++)
		if (cb(arg, sp->found[i].slot, &sp->found[i].m))
			kept[sp->found[i].slot] = 1;
	sp->nfree = 0;
	for (i = sp->nslots; i-- > 0;)
		if (!kept[i])
			sp->free_slots[sp->nfree++] = i;
	sp->st.used = sp->nslots - sp->nfree;
	free(kept);
	free_found(sp);
}

static struct sio *sio_get(struct spill *sp)
{
	struct sio *io;

	if (!sp->nidle)
		return NULL;
	io = &sp->ios[sp->idle[--sp->nidle]];
	io->busy = true;
	return io;
}

static void sio_put(struct sio *io)
{
	struct spill *sp = io->sp;

	io->busy = false;
	sp->idle[sp->nidle++] = (uint32_t)(io - sp->ios);
}

static void sio_done(struct loop_op *op, int res);

/* sio_submit() - (re)submit the rest of an I/O. */
static int sio_submit(struct sio *io)
{
	struct spill *sp = io->sp;
	size_t len = sp->slot_bytes - io->done;
	uint64_t off = slot_off(sp, io->slot) + io->done;

	io->op.done = sio_done;
	if (io->write)
		return loop_pwrite(sp->loop, &io->op, sp->fd, io->buf + io->done,
				   (unsigned)len, off, sp->buf_index);
	return loop_pread(sp->loop, &io->op, sp->fd, io->buf + io->done, (unsigned)len,
			  off, sp->buf_index);
}

/* sio_finish() - end an I/O: hand the result to its owner. */
static void sio_finish(struct sio *io, int res)
{
	struct spill *sp = io->sp;
	const struct slot_hdr *h = (const struct slot_hdr *)io->buf;
	uint64_t ns;

	sio_put(io);
	if (io->write) {
		sp->writing[io->slot] = 0;
		sp->st.writing--;
		if (res < 0) {
			sp->st.io_errors++;
			spill_free(sp, io->slot);
		} else {
			sp->st.spills++;
		}
		io->fn(io->arg, io->slot, res);
		return;
	}
	if (res == 0 && (!valid_header(sp, h) || memcmp(h->key, io->key, KVP_KEY_BYTES) ||
			 XXH3_64bits(io->buf + SPILL_HDR, sp->page_bytes) != h->data_checksum)) {
		sp->st.checksum_failures++;
		res = -EBADMSG;
	} else if (res < 0) {
		sp->st.io_errors++;
	}
	if (res == 0 && sp->be->ops->from_host(sp->be, io->page, io->buf + SPILL_HDR,
						 sp->page_bytes) < 0) {
		sp->st.io_errors++;
		res = -EIO;
	}
	if (res == 0) {
		sp->st.restores++;
		ns = now_ns() - io->t0;
		sp->st.restore_ns_total += ns;
		if (ns > sp->st.restore_ns_max)
			sp->st.restore_ns_max = ns;
	}
	io->fn(io->arg, io->slot, res);
}

static void sio_done(struct loop_op *op, int res)
{
	struct sio *io = container_of(op, struct sio, op);

	if (res == -EINTR || res == -EAGAIN)
		res = 0;	/* nothing moved: try again */
	else if (res == 0)
		res = -EIO;	/* end of file: the file was truncated */
	if (res < 0) {
		sio_finish(io, res);
		return;
	}
	io->done += (size_t)res;
	if (io->done < io->sp->slot_bytes) {	/* short: the rest */
		if (sio_submit(io) < 0)
			sio_finish(io, -EIO);
		return;
	}
	sio_finish(io, 0);
}

void spill_set_rate(struct spill *sp, uint64_t rate)
{
	sp->rate = rate;
	sp->tokens = (double)rate;
	sp->tokens_ns = now_ns();
}

/* refill() - the token bucket: rate bytes a second, one second's burst. */
static void refill(struct spill *sp)
{
	uint64_t t = now_ns();

	sp->tokens += (double)sp->rate * (double)(t - sp->tokens_ns) / 1e9;
	if (sp->tokens > (double)sp->rate)
		sp->tokens = (double)sp->rate;
	sp->tokens_ns = t;
}

uint64_t spill_rate_wait_ms(struct spill *sp, uint32_t pages)
{
	double want = (double)sp->slot_bytes * pages;

	if (!sp->rate)
		return 0;
	refill(sp);
	if (want > (double)sp->rate)
		want = (double)sp->rate;	/* never more than a burst */
	if (sp->tokens >= want)
		return 0;
	return (uint64_t)((want - sp->tokens) * 1000.0 / (double)sp->rate) + 1;
}

int spill_write(struct spill *sp, const void *page, bool host_src,
		const struct spill_meta *m, spill_done_fn done, void *arg)
{
	struct slot_hdr *h;
	struct sio *io;

	if (m->ntokens > SPILL_MAX_TOKENS)
		return -E2BIG;
	if (sp->rate && spill_rate_wait_ms(sp, 1))
		return -EAGAIN;
	if (!sp->nfree) {
		sp->st.dropped++;
		return -ENOSPC;
	}
	io = sio_get(sp);
	if (!io) {
		sp->st.dropped++;
		return -EBUSY;
	}
	h = (struct slot_hdr *)io->buf;
	memset(io->buf, 0, SPILL_HDR);
	memcpy(h->magic, slot_magic, 8);
	h->format = SPILL_FORMAT;
	h->prio = m->prio;
	h->generation = sp->gen++;
	h->ns_hash = sp->ns_hash;
	memcpy(h->key, m->key, KVP_KEY_BYTES);
	memcpy(h->parent, m->parent, KVP_KEY_BYTES);
	h->data_len = sp->page_bytes;
	h->ntokens = m->ntokens;
	if (m->ntokens)
		memcpy(io->buf + sizeof(*h), m->tokens, m->ntokens * sizeof(uint32_t));
	if (host_src)
		memcpy(io->buf + SPILL_HDR, page, sp->page_bytes);
	else if (sp->be->ops->to_host(sp->be, io->buf + SPILL_HDR, page, sp->page_bytes) < 0) {
		sio_put(io);
		sp->st.dropped++;
		return -EIO;
	}
	h->data_checksum = XXH3_64bits(io->buf + SPILL_HDR, sp->page_bytes);
	memset(io->buf + SPILL_HDR + sp->page_bytes, 0,
	       sp->slot_bytes - SPILL_HDR - sp->page_bytes);
	/* the header checksum covers data_checksum: compute it last */
	h->hdr_checksum = slot_hdr_sum(h);

	io->slot = sp->free_slots[--sp->nfree];
	sp->st.used++;
	io->write = true;
	io->done = 0;
	io->fn = done;
	io->arg = arg;
	if (sio_submit(io) < 0) {
		sio_put(io);
		spill_free(sp, io->slot);
		sp->st.dropped++;
		return -EBUSY;
	}
	sp->writing[io->slot] = 1;
	sp->st.writing++;
	if (sp->rate)
		sp->tokens -= (double)sp->slot_bytes;
	return (int)io->slot;
}

int spill_read(struct spill *sp, uint32_t slot, const uint8_t key[KVP_KEY_BYTES],
	       void *page, spill_done_fn done, void *arg)
{
	struct sio *io = sio_get(sp);

	if (!io)
		return -EBUSY;
	io->slot = slot;
	io->write = false;
	io->done = 0;
	io->page = page;
	memcpy(io->key, key, KVP_KEY_BYTES);
	io->t0 = now_ns();
	io->fn = done;
	io->arg = arg;
	if (sio_submit(io) < 0) {
		sio_put(io);
		return -EBUSY;
	}
	return 0;
}

void spill_free(struct spill *sp, uint32_t slot)
{
	if (slot >= sp->nslots || sp->nfree >= sp->nslots)
		return;
	sp->free_slots[sp->nfree++] = slot;
	sp->st.used--;
}

void spill_dropped(struct spill *sp)
{
	sp->st.dropped++;
}

uint32_t spill_idle_buffers(const struct spill *sp)
{
	return sp->nidle;
}

uint32_t spill_free_slots(const struct spill *sp)
{
	return sp->nfree;
}

void spill_get_stats(const struct spill *sp, struct spill_stats *st)
{
	*st = sp->st;
}

const char *spill_path(const struct spill *sp)
{
	return sp->path;
}

uint64_t spill_get_writing(const struct spill *sp)
{
	return sp->st.writing;
}
