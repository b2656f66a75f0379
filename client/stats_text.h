/* SPDX-License-Identifier: MIT */
/*
 * stats_text.h - STATS as text, for `kvpool` and kvpoold alike: names,
 * the conservation check, and the Prometheus exposition.
 */
#ifndef KVP_STATS_TEXT_H
#define KVP_STATS_TEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvpool.h"

/* stats_conserved() - the conservation check of a STATS reply: the states
 * add up to the total and the daemon's own recount agreed. */
bool stats_conserved(const kvp_stats_t *st);

const char *stats_backend_name(uint32_t backend);	/* "host", "cuda", "none" */
const char *stats_dtype_name(uint32_t dtype);		/* "f16", ... */
/* stats_v_dim() - V's head size in a namespace's pages: its head_dim, 0
 * (K only) or another size. stats_head_dims() - "64", "192/128" (K/V)
 * or "576 (K only)", in buf of len bytes. */
uint32_t stats_v_dim(const kvp_ns_stats_t *n);
const char *stats_head_dims(const kvp_ns_stats_t *n, char *buf, size_t len);
const char *stats_scheme_name(uint32_t scheme);		/* "vllm-sha256", ... */

/*
 * stats_metrics() - the snapshot st with its nns namespace records ns in
 * the Prometheus text exposition format (0.0.4) to out: kvpool_* for the
 * daemon, kvpool_namespace_*{namespace="..."} for each namespace
 * (docs/metrics.md lists them).
 */
void stats_metrics(FILE *out, const kvp_stats_t *st, const kvp_ns_stats_t *ns, int nns);

#endif /* KVP_STATS_TEXT_H */
