/* SPDX-License-Identifier: MIT */
/*
 * cli_top.c - `kvpool top`: a live view of the daemon, redrawn every
 * second: pages by state, request and sharing rates since the last frame,
 * the namespaces and the clients holding the most pages.
 *
 * On a terminal it draws on the alternate screen with the terminal in raw
 * mode (no echo, no line buffering) and stops on q or Ctrl-C, restoring
 * the terminal. Without one (a pipe, a log) it prints a frame per second
 * (--json: one JSON object per line) until --count frames or a signal.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "client/cli.h"

#define TOP_CLIENTS 10		/* rows of the client table */
#define TOP_INTERVAL_MS 1000

static volatile sig_atomic_t top_stop;

static void top_on_signal(int sig)
{
	(void)sig;
	top_stop = 1;
}

/* One frame's data, kept for the next frame's rates. */
struct snap {
	kvp_stats_t st;
	kvp_ns_stats_t *ns;
	int nns;
	struct kvp_wire_client *cl;
	int ncl;
};

static void snap_free(struct snap *s)
{
	free(s->ns);
	free(s->cl);
	memset(s, 0, sizeof(*s));
}

static int by_leases(const void *a, const void *b)
{
	const struct kvp_wire_client *x = a, *y = b;

	return x->leases < y->leases ? 1 : x->leases > y->leases ? -1 :
	       x->id < y->id ? -1 : x->id > y->id;
}

/* snap_take() - STATS and the clients, sorted by leases. Returns 0 or -errno. */
static int snap_take(kvp_client *c, struct snap *s)
{
	int n;

	memset(s, 0, sizeof(*s));
	s->nns = cli_stats(c, &s->st, &s->ns);
	if (s->nns < 0)
		return s->nns;
	s->cl = calloc((size_t)s->st.max_clients + 1, sizeof(*s->cl));
	if (!s->cl)
		return -ENOMEM;
	n = kvp_list_clients(c, s->cl, (size_t)s->st.max_clients + 1, NULL);
	if (n < 0)
		return n;
	s->ncl = n;
	qsort(s->cl, (size_t)s->ncl, sizeof(*s->cl), by_leases);
	return 0;
}

/* rate() - per second of field growth between two frames (0 on the first). */
static double rate(uint64_t now, uint64_t before, uint64_t dt_ms)
{
	return dt_ms && now >= before ? (double)(now - before) * 1000.0 / (double)dt_ms : 0.0;
}

static void frame_json(const struct snap *s, const struct snap *prev)
{
	uint64_t dt = prev ? s->st.uptime_ms - prev->st.uptime_ms : 0;
	const kvp_stats_t *p = prev ? &prev->st : &s->st;
	int i;

	printf("{\"uptime_ms\":%" PRIu64 ",\"clients\":%" PRIu32 ",\"pages\":{\"total\":%"
	       PRIu64 ",\"free\":%" PRIu64 ",\"private\":%" PRIu64 ",\"shared\":%" PRIu64
	       ",\"cached\":%" PRIu64 ",\"inflight\":%" PRIu64 ",\"spilled\":%" PRIu64 "}"
	       ",\"requests_per_s\":%.1f,\"allocs_per_s\":%.1f,\"hits_per_s\":%.1f"
	       ",\"namespaces\":[", s->st.uptime_ms, s->st.clients, s->st.pages_total,
	       s->st.pages_free, s->st.pages_private, s->st.pages_shared,
	       s->st.pages_cached, s->st.pages_inflight, s->st.pages_spilled,
	       rate(s->st.requests_total, p->requests_total, dt),
	       rate(s->st.allocs, p->allocs, dt),
	       rate(s->st.prefix.hits, p->prefix.hits, dt));
	for (i = 0; i < s->nns; i++) {
		printf("%s{\"name\":", i ? "," : "");
		cli_json_str(stdout, s->ns[i].name);
		printf(",\"pages_total\":%" PRIu64 ",\"pages_free\":%" PRIu64 ",\"clients\":%"
		       PRIu32 "}", s->ns[i].pages_total, s->ns[i].pages_free, s->ns[i].clients);
	}
	printf("]}\n");
}

static void frame_text(const struct cli *cli, const struct snap *s, const struct snap *prev,
		       bool tty)
{
	uint64_t dt = prev ? s->st.uptime_ms - prev->st.uptime_ms : 0, up = s->st.uptime_ms / 1000;
	const kvp_stats_t *st = &s->st, *p = prev ? &prev->st : &s->st;
	char a[CLI_FMT_MAX], b[CLI_FMT_MAX], clock[16];
	struct table *t;
	time_t now = time(NULL);
	int i;

	strftime(clock, sizeof(clock), "%H:%M:%S", localtime(&now));
	/* every line fits 80 columns (the tables aside) */
	printf("kvpool top %s  kvpoold %s, pid %" PRIu32 ", up %" PRIu64 "h%02" PRIu64 "m%02"
	       PRIu64 "s, %s%s\n", clock, st->version, st->pid, up / 3600, up / 60 % 60,
	       up % 60, stats_backend_name(st->backend), tty ? " (q quits)" : "");
	printf("clients   %" PRIu32 " of %" PRIu32 ", %.1f requests/s\n", cli_others(st),
	       st->max_clients, rate(st->requests_total, p->requests_total, dt));
	printf("rates     %.1f pages/s allocated, %.1f leases/s released\n",
	       rate(st->allocs, p->allocs, dt), rate(st->releases, p->releases, dt));
	printf("pool      %s of %s in use (%" PRIu64 " slab%s)\n",
	       cli_fmt_size(cli, a, st->slabs * st->slab_bytes),
	       cli_fmt_size(cli, b, st->pool_bytes), st->slabs, st->slabs == 1 ? "" : "s");
	printf("pages     %" PRIu64 " total: %" PRIu64 " free, %" PRIu64 " private, %" PRIu64
	       " shared,\n          %" PRIu64 " cached, %" PRIu64 " in flight, %" PRIu64
	       " spilled to a tier\n", st->pages_total, st->pages_free, st->pages_private,
	       st->pages_shared, st->pages_cached, st->pages_inflight, st->pages_spilled);
	printf("sharing   hit rate %s, blocks/s %.1f hit, %.1f missed, %.1f evicted\n",
	       cli_fmt_rate(a, st->prefix.hits, st->prefix.hits + st->prefix.misses),
	       rate(st->prefix.hits, p->prefix.hits, dt),
	       rate(st->prefix.misses, p->prefix.misses, dt),
	       rate(st->prefix.evictions, p->prefix.evictions, dt));
	if (st->host.slots)
		printf("host      %" PRIu64 " of %" PRIu64 " slots, %.1f spills/s, %.1f "
		       "restores/s\n", st->host.used, st->host.slots,
		       rate(st->host.spills, p->host.spills, dt),
		       rate(st->host.restores, p->host.restores, dt));
	if (st->nvme.slots)
		printf("nvme      %" PRIu64 " of %" PRIu64 " slots, %.1f spills/s, %.1f "
		       "restores/s, %" PRIu64 " writes in flight\n", st->nvme.used,
		       st->nvme.slots, rate(st->nvme.spills, p->nvme.spills, dt),
		       rate(st->nvme.restores, p->nvme.restores, dt), st->nvme.writing);
	printf("\n");
	t = table_new(8, "lrrrrrrr");
	if (t && s->nns) {
		table_add(t, "NAMESPACE");
		table_add(t, "PAGES");
		table_add(t, "FREE");
		table_add(t, "PRIVATE");
		table_add(t, "SHARED");
		table_add(t, "CACHED");
		table_add(t, "HIT%%");
		table_add(t, "CLIENTS");
		for (i = 0; i < s->nns; i++) {
			const kvp_ns_stats_t *n = &s->ns[i];

			table_add(t, "%s", n->name);
			table_add(t, "%" PRIu64, n->pages_total);
			table_add(t, "%" PRIu64, n->pages_free);
			table_add(t, "%" PRIu64, n->pages_private);
			table_add(t, "%" PRIu64, n->pages_shared);
			table_add(t, "%" PRIu64, n->pages_cached);
			table_add(t, "%s", cli_fmt_rate(a, n->prefix.hits,
							 n->prefix.hits + n->prefix.misses));
			table_add(t, "%" PRIu32, n->clients);
		}
		table_print(t, stdout);
		printf("\n");
	}
	table_free(t);
	t = table_new(5, "rrllr");
	if (t) {
		table_add(t, "CLIENT");
		table_add(t, "PID");
		table_add(t, "NAME");
		table_add(t, "NAMESPACE");
		table_add(t, "LEASES");
		for (i = 0; i < s->ncl && i < TOP_CLIENTS; i++) {
			table_add(t, "%" PRIu64, s->cl[i].id);
			table_add(t, "%" PRIu32, s->cl[i].pid);
			table_add(t, "%s", s->cl[i].name[0] ? s->cl[i].name : "-");
			table_add(t, "%s", s->cl[i].ns[0] ? s->cl[i].ns : "(inspection)");
			table_add(t, "%" PRIu64, s->cl[i].leases);
		}
		table_print(t, stdout);
	}
	table_free(t);
}

/* wait_key() - wait up to ms for a key on a raw terminal (or just wait,
 * tty false). Returns true when the user asked to quit. */
static bool wait_key(bool tty, int ms)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	struct timespec t0, t1;
	char ch;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!top_stop) {
		int left, rc;

		clock_gettime(CLOCK_MONOTONIC, &t1);
		left = ms - (int)((t1.tv_sec - t0.tv_sec) * 1000 +
				  (t1.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0)
			return false;
		rc = poll(tty ? &pfd : NULL, tty ? 1 : 0, left);
		if (rc > 0 && read(STDIN_FILENO, &ch, 1) == 1 &&
		    (ch == 'q' || ch == 'Q' || ch == 3 /* Ctrl-C without ISIG */))
			return true;
	}
	return true;
}

static const char top_help[] =
	"Usage: kvpool [OPTIONS] top [--count N]\n"
	"A live view redrawn every second until q or Ctrl-C: pages by state,\n"
	"rates, namespaces, the clients holding the most pages. Without a\n"
	"terminal it prints a frame per second (--json: a JSON object a line).\n"
	"  -n, --count=N   stop after N frames (default: run until stopped)\n";

int cmd_top(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		CLI_COMMON_LONGOPTS,
		{ "count", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa = { .sa_handler = top_on_signal };
	struct snap cur = { 0 }, prev = { 0 };
	struct termios saved, raw;
	uint64_t count = 0, i;
	kvp_client *c;
	bool tty, have_prev = false;
	int o, rc = 0;

	optind = 0;
	while ((o = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS "n:", longopts, NULL)) != -1) {
		if (o == 'n') {
			if (!cli_parse_u64(optarg, &count) || count == 0)
				return cli_usage_error(argv[0], "--count: '%s' is not a count of "
						       "1 or more", optarg);
			continue;
		}
		switch (cli_common_opt(cli, o, optarg)) {
		case 1:
			fputs(top_help, stdout);
			return CLI_OK;
		case -1:
			return cli_usage_error(argv[0], "bad option");
		}
	}
	if (optind < argc)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind]);
	if (cli_connect(cli, &c) < 0)
		return CLI_ERR;

	sigaction(SIGINT, &sa, NULL);	/* no SA_RESTART: poll() wakes up */
	sigaction(SIGTERM, &sa, NULL);
	tty = !cli->json && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO) &&
	      tcgetattr(STDIN_FILENO, &saved) == 0;
	if (tty) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
		printf("\033[?1049h\033[?25l");	/* alternate screen, cursor hidden */
	}
	for (i = 0; !top_stop && (!count || i < count); i++) {
		rc = snap_take(c, &cur);
		if (rc < 0)
			break;
		if (tty)
			printf("\033[H\033[2J");
		if (cli->json)
			frame_json(&cur, have_prev ? &prev : NULL);
		else
			frame_text(cli, &cur, have_prev ? &prev : NULL, tty);
		if (!tty && !cli->json && (!count || i + 1 < count))
			printf("\n");
		fflush(stdout);
		snap_free(&prev);
		prev = cur;
		memset(&cur, 0, sizeof(cur));
		have_prev = true;
		if ((!count || i + 1 < count) && wait_key(tty, TOP_INTERVAL_MS))
			break;
	}
	if (tty) {
		printf("\033[?25h\033[?1049l");
		fflush(stdout);
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
	}
	snap_free(&cur);
	snap_free(&prev);
	kvp_close(c);
	return rc < 0 ? cli_fail("top", rc) : CLI_OK;
}
