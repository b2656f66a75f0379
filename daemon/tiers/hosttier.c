/* SPDX-License-Identifier: MIT */
/*
 * hosttier.c - the host-memory tier (see hosttier.h): slots in one block
 * of backend host memory, free slots on a stack.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/tiers/hosttier.h"

#define HOSTTIER_ALIGN 256u	/* slot stride: keeps copies aligned */

struct hosttier {
	struct backend *be;
	uint8_t *mem;
	size_t bytes;		/* of mem */
	uint64_t page_bytes, stride;
	uint32_t slots;
	uint32_t nfree;
	uint32_t *free;		/* [slots]: stack of free slots */
	struct spill_stats st;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int hosttier_open(struct hosttier **out, struct backend *be, uint64_t bytes,
		  uint64_t page_bytes, char *err, size_t errlen)
{
	uint64_t stride = (page_bytes + HOSTTIER_ALIGN - 1) / HOSTTIER_ALIGN * HOSTTIER_ALIGN;
	uint64_t slots = stride ? bytes / stride : 0;
	struct hosttier *h;
	void *mem = NULL;
	uint32_t i;
	int rc;

	if (!slots || slots > UINT32_MAX - 1) {
		snprintf(err, errlen, "--host-tier-size %llu holds %llu pages of %llu bytes; "
			 "it must hold 1 to %u", (unsigned long long)bytes,
			 (unsigned long long)slots, (unsigned long long)page_bytes,
			 UINT32_MAX - 1);
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (h)
		h->free = malloc(slots * sizeof(*h->free));
	if (!h || !h->free) {
		if (h)
			free(h->free);
		free(h);
		snprintf(err, errlen, "no memory for %llu host tier slots",
			 (unsigned long long)slots);
		return -ENOMEM;
	}
	rc = be->ops->host_alloc(be, (size_t)(slots * stride), &mem, err, errlen);
	if (rc < 0) {
		free(h->free);
		free(h);
		return rc;
	}
	h->be = be;
	h->mem = mem;
	h->bytes = (size_t)(slots * stride);
	h->page_bytes = page_bytes;
	h->stride = stride;
	h->slots = (uint32_t)slots;
	for (i = 0; i < h->slots; i++)	/* slot 0 on top: filled first */
		h->free[i] = h->slots - 1 - i;
	h->nfree = h->slots;
	h->st.slots = h->slots;
	*out = h;
	return 0;
}

void hosttier_close(struct hosttier *h)
{
	if (!h)
		return;
	h->be->ops->host_free(h->be, h->mem, h->bytes);
	free(h->free);
	free(h);
}

int hosttier_put(struct hosttier *h, const void *page)
{
	uint32_t slot;

	if (!h->nfree)
		return -ENOSPC;
	slot = h->free[h->nfree - 1];
	if (h->be->ops->to_host(h->be, h->mem + slot * h->stride, page,
				(size_t)h->page_bytes) < 0) {
		h->st.io_errors++;
		return -EIO;
	}
	h->nfree--;
	h->st.used++;
	h->st.spills++;
	return (int)slot;
}

int hosttier_get(struct hosttier *h, uint32_t slot, void *page)
{
	uint64_t start_ns = now_ns();
	int rc = h->be->ops->from_host(h->be, page, h->mem + slot * h->stride,
				       (size_t)h->page_bytes);
	uint64_t ns;

	hosttier_free(h, slot);
	if (rc < 0) {
		h->st.io_errors++;
		return -EIO;
	}
	ns = now_ns() - start_ns;
	h->st.restores++;
	h->st.restore_ns_total += ns;
	if (ns > h->st.restore_ns_max)
		h->st.restore_ns_max = ns;
	return 0;
}

const void *hosttier_addr(const struct hosttier *h, uint32_t slot)
{
	return h->mem + slot * h->stride;
}

void hosttier_free(struct hosttier *h, uint32_t slot)
{
	h->free[h->nfree++] = slot;
	h->st.used--;
}

void hosttier_dropped(struct hosttier *h)
{
	h->st.dropped++;
}

uint32_t hosttier_slots(const struct hosttier *h)
{
	return h->slots;
}

uint32_t hosttier_free_slots(const struct hosttier *h)
{
	return h->nfree;
}

void hosttier_get_stats(const struct hosttier *h, struct spill_stats *st)
{
	*st = h->st;
}
