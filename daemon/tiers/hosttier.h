/* SPDX-License-Identifier: MIT */
/*
 * hosttier.h - the host-memory tier of one namespace: a fixed array of
 * page-sized slots in host memory from the backend (pinned with CUDA),
 * between the pool and the NVMe tier.
 *
 * A page moves in by one synchronous copy (device or memfd to host) and
 * out by another; nothing is in flight, so a slot is either free or holds
 * one page. Which page, and which slot is evicted next, is the prefix
 * index's business: this module only keeps the memory, the free slots and
 * the counters.
 */
#ifndef KVP_HOSTTIER_H
#define KVP_HOSTTIER_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/store/backend.h"
#include "daemon/tiers/spill.h"

struct hosttier;

/*
 * hosttier_open() - slots of page_bytes in bytes of host memory from be
 * (at least one slot). Returns 0 and *out, or -errno with err filled.
 */
int hosttier_open(struct hosttier **out, struct backend *be, uint64_t bytes,
		  uint64_t page_bytes, char *err, size_t errlen);

/* hosttier_close() - free the memory; h may be NULL. */
void hosttier_close(struct hosttier *h);

/*
 * hosttier_put() - copy the pool page at page into a free slot. Returns
 * the slot, -ENOSPC (every slot holds a page) or -EIO (the copy failed;
 * the slot stays free).
 */
int hosttier_put(struct hosttier *h, const void *page);

/*
 * hosttier_get() - copy slot back into the pool page at page and free the
 * slot (the copy's time counts as the restore latency). Returns 0, or -EIO (the copy failed; the slot is freed all the same:
 * its page is lost).
 */
int hosttier_get(struct hosttier *h, uint32_t slot, void *page);

/* hosttier_addr() - the bytes of a slot that holds a page. */
const void *hosttier_addr(const struct hosttier *h, uint32_t slot);

/* hosttier_free() - slot holds nothing any more (moved down or dropped). */
void hosttier_free(struct hosttier *h, uint32_t slot);

/* hosttier_dropped() - count a page the tier had to let go of. */
void hosttier_dropped(struct hosttier *h);

uint32_t hosttier_slots(const struct hosttier *h);
uint32_t hosttier_free_slots(const struct hosttier *h);

/* hosttier_get_stats() - the counters, in the NVMe tier's form (no
 * checksums and nothing in flight: those stay 0). */
void hosttier_get_stats(const struct hosttier *h, struct spill_stats *st);

#endif /* KVP_HOSTTIER_H */
