/* SPDX-License-Identifier: MIT */
/*
 * tier_nvme.c - the NVMe tier as a tier (see tier.h): slots of spill.c's
 * file, written through staging buffers from the loop. A slot is being
 * written until its write ends (spilled_done()); a block read back from
 * its slot keeps the slot as a copy while it is in the pool, so that
 * evicting it again writes nothing and a full tier gives that slot back
 * first, losing nothing.
 */
#include <errno.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/spill.h"
#include "daemon/tiers/tier.h"

static bool nvme_in_tier(const struct ns *n, uint32_t e)
{
	unsigned where = prefix_where(n->idx, e);

	return where == PREFIX_SPILLED || where == PREFIX_SPILLING;
}

/* spilled_done() - a spill write ended; a failed one loses the page, and
 * the blocks below it with it (no block may stay behind a lost parent).
 * A slot whose entry was dropped while it was written is free now.
 * Either way its staging buffer is free: requests waiting for one go on. */
static void spilled_done(void *arg, uint32_t slot, int res)
{
	struct ns *n = arg;
	uint32_t e = n->slot_entry[slot];

	if (res < 0) {
		if (ns_fault_first(n, NS_FAULT_WRITE))
			log_warn("namespace '%s': writing slot %u of %s failed: %s; the page "
				 "and the blocks after it are dropped (further write errors "
				 "are counted in STATS, not logged)", n->name, slot,
				 spill_path(n->tier), strerror(-res));
		n->slot_entry[slot] = PREFIX_NIL;
		if (e != PREFIX_NIL)
			tier_lose_below(n, e);	/* its slot is free already */
	} else if (e == PREFIX_NIL) {
		spill_free(n->tier, slot);
	}
	if (n->saving && tier_save_hook)
		tier_save_hook(n);
	/* last: a waiting DROP_NS may free n */
	if (n->wait_head && tier_room_hook)
		tier_room_hook(n);
}

/* nvme_reuse() - e goes back to its copy's slot, no write: unless a child
 * of it is in the host tier, above (then the copy's slot is given back). */
static int nvme_reuse(struct ns *n, uint32_t e, bool above_ok)
{
	uint32_t slot;

	if (!prefix_copy(n->idx, e, &slot))
		return 0;
	if (above_ok || !prefix_host_children(n->idx, e)) {
		prefix_spilling(n->idx, e, slot);
		prefix_spilled(n->idx, e);
		return 1;
	}
	prefix_copy_clear(n->idx, e);
	n->slot_entry[slot] = PREFIX_NIL;
	spill_free(n->tier, slot);
	return 0;
}

static bool nvme_ready(const struct ns *n)
{
	return spill_idle_buffers(n->tier) > 0;
}

static uint32_t nvme_free_slots(const struct ns *n)
{
	return spill_free_slots(n->tier);
}

/* nvme_take() - write e's bytes with its slot header: key, parent,
 * priority, and a partial page's tokens. src is free to reuse as soon
 * as the bytes are in a staging buffer. */
static int nvme_take(struct ns *n, uint32_t e, const void *src, bool host_src)
{
	struct spill_meta m;
	uint32_t parent = prefix_parent(n->idx, e);
	int slot;

	memset(&m, 0, sizeof(m));
	memcpy(m.key, prefix_key(n->idx, e), KVP_KEY_BYTES);
	if (parent != PREFIX_NIL && !prefix_tokens(n->idx, e))
		memcpy(m.parent, prefix_key(n->idx, parent), KVP_KEY_BYTES);
	m.prio = prefix_prio(n->idx, e);
	m.ntokens = prefix_tokens(n->idx, e);
	m.tokens = prefix_token_ids(n->idx, e);
	slot = spill_write(n->tier, src, host_src, &m, spilled_done, n);
	if (slot < 0)
		return slot;
	prefix_spilling(n->idx, e, (uint32_t)slot);
	prefix_spilled(n->idx, e);
	n->slot_entry[slot] = e;
	return 0;
}

/* nvme_reclaim() - give back the oldest copy of a block in the pool. */
static int nvme_reclaim(struct ns *n)
{
	uint32_t e = prefix_copy_oldest(n->idx), slot;

	if (e == PREFIX_NIL || !prefix_copy(n->idx, e, &slot))
		return -ENOSPC;
	prefix_copy_clear(n->idx, e);
	n->slot_entry[slot] = PREFIX_NIL;
	spill_free(n->tier, slot);
	return 0;
}

/* nvme_victim() - the oldest leaf not being written. */
static uint32_t nvme_victim(struct ns *n, bool *busy)
{
	uint32_t e;

	*busy = false;
	for (e = prefix_tier_next_leaf(n->idx, PREFIX_NIL); e;
	     e = prefix_tier_next_leaf(n->idx, e)) {
		if (!spill_busy(n->tier, prefix_slot(n->idx, e)))
			return e;
		*busy = true;
	}
	return PREFIX_NIL;
}

static const void *nvme_bytes(const struct ns *n, uint32_t e)
{
	(void)n;
	(void)e;
	return NULL;	/* on disk: nothing below takes it from here */
}

static void nvme_moved(struct ns *n, uint32_t e, uint32_t slot)
{
	(void)n;
	(void)e;
	(void)slot;	/* never: nvme_bytes() gives nothing to move */
}

/* nvme_drop() - its slot goes; one being written goes when the write ends
 * (spilled_done() finds no entry). */
static bool nvme_drop(struct ns *n, uint32_t e)
{
	uint32_t slot = prefix_slot(n->idx, e);

	if (prefix_where(n->idx, e) != PREFIX_SPILLED)
		return false;
	n->slot_entry[slot] = PREFIX_NIL;
	if (!spill_busy(n->tier, slot))
		spill_free(n->tier, slot);
	spill_dropped(n->tier);
	return true;
}

static void nvme_forget_copy(struct ns *n, uint32_t e)
{
	uint32_t slot;

	if (prefix_copy(n->idx, e, &slot)) {
		n->slot_entry[slot] = PREFIX_NIL;
		spill_free(n->tier, slot);
	}
}

static int nvme_readable(const struct ns *n, uint32_t e)
{
	if (prefix_where(n->idx, e) != PREFIX_SPILLED)
		return 0;
	return spill_busy(n->tier, prefix_slot(n->idx, e)) ? -EBUSY : 1;
}

static uint32_t nvme_read_budget(const struct ns *n)
{
	return spill_idle_buffers(n->tier);
}

/* nvme_read_done() - the slot stays, a copy of the page (published pages
 * never change): evicting it again writes nothing. A failed read or a
 * check that did not pass frees it. */
static void nvme_read_done(void *arg, uint32_t slot, int res)
{
	struct tier_read *r = arg;
	struct ns *n = r->n;

	if (res == 0) {
		prefix_copy_set(n->idx, r->e, slot);
	} else {
		n->slot_entry[slot] = PREFIX_NIL;
		spill_free(n->tier, slot);
		if (ns_fault_first(n, res == -EBADMSG ? NS_FAULT_CHECKSUM : NS_FAULT_READ))
			log_warn("namespace '%s': slot %u of %s: %s; a miss, the slot is "
				 "freed (further ones are counted in STATS, not logged)",
				 n->name, slot, spill_path(n->tier),
				 res == -EBADMSG ? "its checksum or header does not match"
						 : strerror(-res));
	}
	r->done(r, res);
}

/* nvme_read() - start reading the slot back through a staging buffer. */
static int nvme_read(struct ns *n, uint32_t e, void *page, struct tier_read *r)
{
	uint32_t slot = prefix_slot(n->idx, e);

	if (spill_read(n->tier, slot, prefix_key(n->idx, e), page, nvme_read_done, r) == 0)
		return 1;
	/* the ring is full: the block is lost */
	n->slot_entry[slot] = PREFIX_NIL;
	spill_free(n->tier, slot);
	return -EBUSY;
}

static uint64_t nvme_write_wait_ms(const struct ns *n, uint32_t pages)
{
	return spill_rate_wait_ms(n->tier, pages);
}

static bool nvme_writing(const struct ns *n)
{
	return spill_get_writing(n->tier) > 0;
}

/* nvme_publish_over() - the slot holds the same bytes: it stays, a copy. */
static bool nvme_publish_over(struct ns *n, uint32_t e, uint64_t page)
{
	uint32_t slot = prefix_slot(n->idx, e);

	if (prefix_where(n->idx, e) != PREFIX_SPILLED || spill_busy(n->tier, slot))
		return false;
	prefix_restoring(n->idx, e, page);
	prefix_restored(n->idx, e);
	prefix_copy_set(n->idx, e, slot);
	return true;
}

const struct tier_ops tier_nvme_ops = {
	.name = "nvme",
	.async = true,
	.persistent = true,
	.in_tier = nvme_in_tier,
	.reuse = nvme_reuse,
	.ready = nvme_ready,
	.free_slots = nvme_free_slots,
	.take = nvme_take,
	.reclaim = nvme_reclaim,
	.victim = nvme_victim,
	.bytes = nvme_bytes,
	.moved = nvme_moved,
	.drop = nvme_drop,
	.forget_copy = nvme_forget_copy,
	.readable = nvme_readable,
	.read_budget = nvme_read_budget,
	.read = nvme_read,
	.write_budget = nvme_read_budget,	/* the same staging buffers */
	.write_wait_ms = nvme_write_wait_ms,
	.writing = nvme_writing,
	.publish_over = nvme_publish_over,
};
