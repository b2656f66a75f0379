/* SPDX-License-Identifier: MIT */
/*
 * save.c - a clean stop keeps the hot pages: once every client is gone,
 * each namespace with an NVMe tier writes its cached pool pages (leaves
 * first) and then its host tier pages to the tier, as many as it takes
 * (making room as eviction does: copies first, then the oldest leaves)
 * and --save-on-stop seconds allow. A warm restart re-indexes them with
 * the rest. The writes go through the loop like any spill; each one that
 * ends lets the next go (tier_save_hook), and a timeout ends the save
 * when the time is up. Then the loop drains and the daemon exits.
 */
#include <errno.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/store/lease.h"
#include "daemon/tiers/hosttier.h"
#include "daemon/tiers/save.h"
#include "daemon/tiers/spill.h"
#include "daemon/tiers/tier.h"

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* The save going on: one per process, and the hook has only ns. */
static struct save *stopping;

/* left() - pages of n the stop has not saved yet. */
static uint64_t left(const struct save *s, const struct ns *n)
{
	struct pool_counts pc;
	struct spill_stats hs;

	pool_counts(s->pool, n->pool_ns, &pc);
	if (n->host)
		hosttier_get_stats(n->host, &hs);
	return pc.by_state[PAGE_CACHED] + (n->host ? hs.used : 0);
}

/* ns_done() - n's save is over (all saved, the tier full, or no time). */
static void ns_done(struct save *s, struct ns *n, const char *why)
{
	uint64_t rest = left(s, n);

	n->saving = false;
	if (rest)
		log_warn("namespace '%s': %llu pages saved to %s; %llu not (%s)", n->name,
			 (unsigned long long)n->saved, spill_path(n->tier),
			 (unsigned long long)rest, why);
	else if (n->saved)
		log_info("namespace '%s': %llu pages saved to %s", n->name,
			 (unsigned long long)n->saved, spill_path(n->tier));
}

/* all_done() - no namespace saves any more: stop the clock, go on. */
static void all_done(struct save *s)
{
	uint32_t i;

	for (i = 0; i < s->nst->count; i++)
		if (s->nst->ns[i]->saving)
			return;
	s->saving = false;
	if (s->armed)
		loop_cancel(s->loop, &s->cancel_op, &s->op);
	log_info("stop: saving took %llu ms", (unsigned long long)(loop_now_ms() - s->t0));
	s->done(s->arg);
}

/* save_more() - write what n's tier can take now; done when nothing is
 * left, or the tier can take no more at all. */
static void save_more(struct ns *n)
{
	struct save *s = stopping;
	int rc;

	if (!s || !n->saving)
		return;
	while ((rc = tier_save_one(s->pool, n)) > 0)
		n->saved++;
	if (rc == -EAGAIN && spill_get_writing(n->tier))
		return;		/* a write ends: this runs again */
	ns_done(s, n, rc == -ENOSPC ? "the tier is full of blocks it may not drop" :
		      "the tier cannot take them now");
	all_done(s);
}

static void save_timeout(struct loop_op *op, int res)
{
	struct save *s = container_of(op, struct save, op);
	uint32_t i;

	s->armed = false;
	if (res == -ECANCELED || !s->saving) {
		s->done(s->arg);
		return;
	}
	for (i = 0; i < s->nst->count; i++)
		if (s->nst->ns[i]->saving)
			ns_done(s, s->nst->ns[i], "--save-on-stop ran out");
	all_done(s);
}

static void save_cancelled(struct loop_op *op, int res)
{
	(void)op;
	(void)res;
}

bool save_start(struct save *s, struct loop *l, struct pool *p, struct ns_table *nst,
		uint64_t seconds, void (*done)(void *arg), void *arg)
{
	uint32_t i, busy = 0;

	*s = (struct save){ .loop = l, .pool = p, .nst = nst, .started = true,
			    .done = done, .arg = arg };
	if (!seconds)
		return false;
	stopping = s;
	tier_save_hook = save_more;
	for (i = 0; i < nst->count; i++) {
		struct ns *n = nst->ns[i];

		if (n->tier && left(s, n)) {
			n->saving = true;
			busy++;
		}
	}
	if (!busy)
		return false;
	s->saving = true;
	s->t0 = loop_now_ms();
	s->op.done = save_timeout;
	s->cancel_op.done = save_cancelled;
	if (loop_timeout(l, &s->op, &s->ts, seconds * 1000) == 0)
		s->armed = true;
	log_info("stop: saving the cached pages of %u namespaces to their NVMe tiers "
		 "(at most %llu s, --save-on-stop)", busy, (unsigned long long)seconds);
	for (i = 0; i < nst->count; i++)
		save_more(nst->ns[i]);	/* may end it all at once */
	return true;
}
