/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - kvpoold's Prometheus endpoint (--metrics-listen): GET
 * /metrics over HTTP, answered by a thread of its own that runs
 * libmicrohttpd, with the text `kvpool metrics` prints (client/stats_text.c). The text is a
 * snapshot the event loop renders when a scrape asks for one (an eventfd
 * the loop reads), so that a scrape never blocks the loop and the loop
 * never waits for a scraper: they share a pointer swap under a mutex,
 * nothing else. Built without libmicrohttpd, metrics_start() refuses,
 * saying so.
 */
#ifndef KVP_METRICS_H
#define KVP_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "daemon/loop/loop.h"
#include "daemon/serve/server.h"

struct metrics;

/* metrics_built() - whether kvpoold was built with libmicrohttpd. */
bool metrics_built(void);

/*
 * metrics_start() - listen on listen ("PORT", "HOST:PORT" or
 * "[V6ADDR]:PORT"; a bare port is 127.0.0.1's) and serve /metrics of s,
 * rendered on l. Returns 0 and *out, or -errno with the reason in err.
 */
int metrics_start(struct metrics **out, const char *listen, struct loop *l, struct server *s,
		  char *err, size_t errlen);

/* metrics_stop() - the server shuts down: no more snapshots from the loop
 * (its read is cancelled, so the loop may drain); scrapes get 503. */
void metrics_stop(struct metrics *m);

/* metrics_free() - stop the HTTP thread and free m (after the loop
 * stopped); m may be NULL. */
void metrics_free(struct metrics *m);

/* metrics_print_library() - "  libmicrohttpd VERSION" (kvpoold --version
 * --verbose), as the library reports it; nothing when built without. */
void metrics_print_library(FILE *f);

#endif /* KVP_METRICS_H */
