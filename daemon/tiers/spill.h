/* SPDX-License-Identifier: MIT */
/*
 * spill.h - the NVMe tier of one namespace: one preallocated file of
 * fixed slots in the spill directory, written and read with O_DIRECT
 * through the daemon's io_uring loop from registered staging buffers.
 *
 * A page spills by being copied into a staging buffer behind a slot
 * header (so the pool page is free at once and never under I/O), and
 * comes back by a read into a staging buffer, a check of the header and
 * the data's checksum, and a copy into a fresh pool page. A slot whose
 * check fails is a miss, never served. docs/spill.md describes the file.
 */
#ifndef KVP_SPILL_H
#define KVP_SPILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool_wire.h"
#include "daemon/loop/loop.h"
#include "daemon/store/backend.h"

#define SPILL_FORMAT	2u	/* on-disk format version (2: spill_ns.memory) */
#define SPILL_HDR	4096u	/* bytes of the file header and of a slot header */
/* Token ids a partial page's slot header can carry. */
#define SPILL_MAX_TOKENS ((SPILL_HDR - 128u) / 4u)

/* The identity of a namespace, in the file header: a file is only
 * re-indexed for the same namespace, geometry and key root. */
struct spill_ns {
	char name[KVP_NAME_MAX];
	char model[KVP_MODEL_MAX];
	uint32_t layers, kv_heads, head_dim, block_tokens, dtype, key_scheme;
	uint64_t page_bytes;
	uint8_t root[KVP_KEY_BYTES];
	uint32_t memory;	/* KVP_MEMORY_* the namespace was made with: kept
				 * for a restart, not compared (a page's bytes
				 * are the same in either memory) */
	uint32_t head_dim_v;	/* HELLO's, canonical (ns.h); 0 in files from
				 * before it: K and V alike, which they were */
};

/* What a slot says about its page. */
struct spill_meta {
	uint8_t key[KVP_KEY_BYTES];	/* full: its key; partial: parent key */
	uint8_t parent[KVP_KEY_BYTES];	/* full: its parent's key */
	uint32_t prio;
	uint32_t ntokens;		/* partial: token count; 0 for a full block */
	const uint32_t *tokens;		/* partial: token ids */
};

/* Counters of a tier, for STATS. */
struct spill_stats {
	uint64_t slots, used;		/* capacity and slots holding pages */
	uint64_t spills, restores;	/* completed writes and good reads */
	uint64_t checksum_failures;	/* reads that failed their checks */
	uint64_t io_errors;		/* failed or short writes and reads */
	uint64_t dropped;		/* pages not spilled: no slot, no buffer */
	uint64_t restore_ns_total;	/* sum of restore latencies */
	uint64_t restore_ns_max;
	uint64_t writing;		/* writes in flight */
};

struct spill;

typedef void (*spill_done_fn)(void *arg, uint32_t slot, int res);

/*
 * spill_prepare() - open or create the tier file of namespace ns in dir,
 * bytes long, and make it ready: preallocated, its header written, and,
 * when it is warm, its valid slot headers read for spill_scan(). An
 * existing file with the same format, namespace identity and size is kept
 * (warm); anything else is started afresh (cold), every slot header wiped,
 * and spill_cold_why() says why (NULL when warm or new). discard forces a
 * cold start. This is the slow part (seconds for a large file on a busy
 * disk): it touches nothing but the new tier and logs nothing, so that it
 * runs on a worker thread (loop_work()); note (notelen bytes) gets what
 * to log ("" when nothing), on failure too. spill_attach() follows, on
 * the loop. Returns 0 and *out, or -errno with err filled; a file it made
 * is removed again.
 */
int spill_prepare(struct spill **out, const char *dir, uint64_t bytes, bool discard,
		  const struct spill_ns *ns, char *note, size_t notelen, char *err,
		  size_t errlen);

/* spill_attach() - on the loop thread, after spill_prepare(): the tier
 * does its I/O through l, and its staging buffers are registered with l as
 * one fixed buffer when it has a number free (spill_close() gives it back);
 * be moves bytes between pages and staging buffers. */
void spill_attach(struct spill *sp, struct loop *l, struct backend *be);

/* spill_cold_why() - why spill_prepare() started an existing file cold, or
 * NULL. */
const char *spill_cold_why(const struct spill *sp);

/*
 * spill_dir_check() - dir is fit to hold tier files: a directory owned by
 * root or the daemon's user that no one else may write, reached through
 * directories that only root or the daemon's user may change (or sticky
 * ones, like /tmp), both as written and with its links resolved. Else
 * another user could plant a link or a file that the daemon would follow
 * or serve. Returns 0, or -errno with err naming the directory, what is
 * wrong with it and what to do.
 */
int spill_dir_check(const char *dir, char *err, size_t errlen);

/*
 * spill_dir_probe() - dir can hold a tier file of bytes now: it is a
 * directory the daemon can create files in, and its file system has the
 * bytes free (with what the largest tier file there already holds).
 * Warns when O_DIRECT is refused (spills go through the page cache) and
 * when dir is on tmpfs or ramfs (the tier takes RAM). Returns 0, or
 * -errno with err saying what is wrong and what to do.
 */
int spill_dir_probe(const char *dir, uint64_t bytes, char *err, size_t errlen);

/* spill_read_ns() - the namespace identity in the header of the tier file
 * at path; 0, or -errno / -EBADMSG (not a valid tier file) / -EPERM (not
 * a file the daemon made: a link, another owner, open to others). */
int spill_read_ns(const char *path, struct spill_ns *ns);

/* spill_close() - close the file, unregister the staging buffers from
 * the loop (their pages are unpinned) and free them. No I/O may be in
 * flight. Takes a tier that was never attached, too. */
void spill_close(struct spill *sp);

/*
 * spill_scan() - for a warm file, call cb for every slot whose header
 * spill_prepare() found valid (the data is checked when it is read),
 * newest generation first for a key that occupies several slots. Slots cb
 * refuses (returns false) are freed; so are all of a cold file's. Reads
 * nothing from the disk: it runs on the loop. Once only.
 */
void spill_scan(struct spill *sp,
		bool (*cb)(void *arg, uint32_t slot, const struct spill_meta *m),
		void *arg);

/*
 * spill_write() - spill a page: copy page_bytes from page (a pool page, or
 * host memory when host_src: a host tier slot) with m into a staging
 * buffer and write them to a free slot. done(arg, slot, res)
 * follows when the write completed (res 0 or -errno; on error the slot is
 * free again). Returns the slot, or -ENOSPC (no free slot), -EBUSY (no
 * staging buffer), -E2BIG (too many tokens for a slot header).
 */
int spill_write(struct spill *sp, const void *page, bool host_src,
		const struct spill_meta *m, spill_done_fn done, void *arg);
/* (spill_write() also returns -EAGAIN when the rate cap says wait.) */

/*
 * spill_read() - read slot back into page (page_bytes): done(arg, slot,
 * res) with res 0 (page holds the bytes), -EBADMSG (the header or the
 * checksum did not match: the page was not touched) or -EIO. key is what
 * the slot must hold. Returns 0 or -EBUSY (no staging buffer).
 */
int spill_read(struct spill *sp, uint32_t slot, const uint8_t key[KVP_KEY_BYTES],
	       void *page, spill_done_fn done, void *arg);

/*
 * spill_set_rate() - cap spill writes at rate bytes per second (0: no
 * cap), with a burst of one second's worth. spill_rate_wait_ms() - 0 when
 * pages slots can be written now, else the milliseconds until they can.
 */
void spill_set_rate(struct spill *sp, uint64_t rate);
uint64_t spill_rate_wait_ms(struct spill *sp, uint32_t pages);

/* spill_free() - the slot holds nothing any more. */
void spill_free(struct spill *sp, uint32_t slot);

/* spill_dropped() - count a page the tier let go of to make room. */
void spill_dropped(struct spill *sp);

/* spill_busy() - slot is being written: its bytes are not on disk yet. */
bool spill_busy(const struct spill *sp, uint32_t slot);

/* spill_idle_buffers() - staging buffers free for a read or write now. */
uint32_t spill_idle_buffers(const struct spill *sp);

/* spill_free_slots() - slots holding nothing. */
uint32_t spill_free_slots(const struct spill *sp);

void spill_get_stats(const struct spill *sp, struct spill_stats *st);
uint64_t spill_get_writing(const struct spill *sp);
const char *spill_path(const struct spill *sp);

#endif /* KVP_SPILL_H */
