/* SPDX-License-Identifier: MIT */
/*
 * tier_host.c - the host-memory tier as a tier (see tier.h): slots of
 * hosttier.c, entries in the index's host list. A page moves in and out
 * by synchronous copies, so nothing is ever in flight here.
 */
#include <errno.h>

#include "daemon/log.h"
#include "daemon/store/prefix.h"
#include "daemon/tiers/hosttier.h"
#include "daemon/tiers/tier.h"

static bool host_in_tier(const struct ns *n, uint32_t e)
{
	return prefix_where(n->idx, e) == PREFIX_HOST;
}

static uint32_t host_free_slots(const struct ns *n)
{
	return hosttier_free_slots(n->host);
}

static int host_take(struct ns *n, uint32_t e, const void *src, bool host_src)
{
	int slot;

	(void)host_src;		/* nothing above it holds host memory */
	slot = hosttier_put(n->host, src);
	if (slot < 0)
		return slot;
	prefix_hosted(n->idx, e, (uint32_t)slot);
	return 0;
}

/* host_victim() - the oldest entry with no child in the pool or here. */
static uint32_t host_victim(struct ns *n, bool *busy)
{
	*busy = false;
	return prefix_host_victim(n->idx);
}

static const void *host_bytes(const struct ns *n, uint32_t e)
{
	return hosttier_addr(n->host, prefix_slot(n->idx, e));
}

static void host_moved(struct ns *n, uint32_t e, uint32_t slot)
{
	(void)e;
	hosttier_free(n->host, slot);
}

static bool host_drop(struct ns *n, uint32_t e)
{
	hosttier_free(n->host, prefix_slot(n->idx, e));
	hosttier_dropped(n->host);
	return true;
}

static void host_not_taken(struct ns *n)
{
	hosttier_dropped(n->host);
}

static int host_readable(const struct ns *n, uint32_t e)
{
	(void)n;
	(void)e;
	return 1;
}

static uint32_t host_read_budget(const struct ns *n)
{
	(void)n;
	return UINT32_MAX;
}

/* host_read() - one copy back; the slot is free either way. */
static int host_read(struct ns *n, uint32_t e, void *page, struct tier_read *r)
{
	uint32_t slot = prefix_slot(n->idx, e);

	(void)r;
	if (hosttier_get(n->host, slot, page) == 0)
		return 0;
	if (ns_fault_first(n, NS_FAULT_READ))
		log_warn("namespace '%s': copying host tier slot %u back failed; a miss "
			 "(further ones are counted in STATS, not logged)", n->name, slot);
	return -EIO;
}

static bool host_publish_over(struct ns *n, uint32_t e, uint64_t page)
{
	hosttier_free(n->host, prefix_slot(n->idx, e));
	prefix_restoring(n->idx, e, page);
	prefix_restored(n->idx, e);
	return true;
}

const struct tier_ops tier_host_ops = {
	.name = "host",
	.in_tier = host_in_tier,
	.free_slots = host_free_slots,
	.take = host_take,
	.victim = host_victim,
	.bytes = host_bytes,
	.moved = host_moved,
	.drop = host_drop,
	.not_taken = host_not_taken,
	.readable = host_readable,
	.read_budget = host_read_budget,
	.read = host_read,
	.publish_over = host_publish_over,
};
