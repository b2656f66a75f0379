/* SPDX-License-Identifier: MIT */
/*
 * options.c - parsing of kvpoold's config file and command line.
 *
 * Every option is one row of opt_table: its long flag (also its key in the
 * config file, where '_' may stand for '-'), its type, where it lands in
 * struct options, its bounds and its help line. Values are checked the
 * same way from both sources.
 *
 * Past 800 lines on purpose: the table is most of it, one row per option,
 * and the two readers and the checks must see every row.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvpool_wire.h"
#include "client/size.h"
#include "daemon/options.h"

enum opt_type {
	OPT_STRING,	/* copied into a char array of size bytes */
	OPT_UINT,	/* decimal unsigned within [min, max] */
	OPT_SIZE,	/* bytes: client/size.h */
	OPT_BOOL,	/* flag: no argument; file: true/false/yes/no/1/0 */
	OPT_NOT,	/* the same, storing the opposite (--no-X of a bool X) */
	OPT_LOG_LEVEL,	/* error, warn, info, debug */
	OPT_CHOICE,	/* one of choices[], stored as its index (unsigned) */
	OPT_RULE,	/* an --access rule, appended (repeatable) */
	OPT_SHARE,	/* a --remote-share rule, appended (repeatable) */
	OPT_NS_TOPIC,	/* a --kv-events-ns-topic rule, appended (repeatable) */
	OPT_ROUTE,	/* a --kv-events-router rule, appended (repeatable) */
};

struct opt_def {
	const char *name;
	int short_name;		/* 0 when none */
	enum opt_type type;
	size_t offset;
	size_t size;		/* OPT_STRING: capacity */
	uint64_t min, max;
	const char *arg;	/* argument name in --help */
	const char *help;
	const char *const *choices;	/* OPT_CHOICE: NULL-terminated */
};

static const char *const backend_names[] = { "auto", "host", "cuda", NULL };
static const char *const io_names[] = { "auto", "uring", "sync", NULL };
/* KVP_WIRE_KEYS_* n is choice n - 1; "fast" is another name for 2 */
static const char *const scheme_names[] = {
	"vllm-sha256-cbor", "vllm-xxhash-cbor", "vllm-sha256", "vllm-xxhash", "fast", NULL,
};

static const char *const events_format_names[] = { "map", "array", NULL };
static const char *const remote_write_names[] = { "back", "through", NULL };
static const char *const events_hash_names[] = { "int", "bytes", NULL };

const char *options_backend_name(unsigned backend)
{
	return backend < 3 ? backend_names[backend] : "?";
}

/* getopt's value of --verbose (with --version): no short option's */
#define OPT_VERBOSE	2
#define OFF(f) offsetof(struct options, f)
#define SZ(f) sizeof(((struct options *)0)->f)

static const struct opt_def opt_table[] = {
	{ "socket", 's', OPT_STRING, OFF(socket_path), SZ(socket_path), 0, 0,
	  "PATH", "Unix socket to listen on (default $KVPOOL_SOCKET, else /run/kvpool/kvpool.sock)", NULL },
	{ "socket-group", 'g', OPT_STRING, OFF(socket_group), SZ(socket_group), 0, 0,
	  "GROUP", "group that may use the socket (mode 0660; default: the daemon's)", NULL },
	{ "admin-group", 0, OPT_STRING, OFF(admin_group), SZ(admin_group), 0, 0,
	  "GROUP", "members may evict, disconnect and drop (root and the daemon's user may)",
	  NULL },
	{ "pid-file", 'p', OPT_STRING, OFF(pid_file), SZ(pid_file), 0, 0,
	  "PATH", "write the daemon's pid to PATH once it is listening", NULL },
	{ "pool-size", 'P', OPT_SIZE, OFF(pool_size), 0, 64u << 10, 1ull << 50,
	  "SIZE", "most memory for pages, e.g. 8G (default 1G)", NULL },
	{ "slab-size", 'S', OPT_SIZE, OFF(slab_size), 0, 64u << 10, 1ull << 40,
	  "SIZE", "memory per slab, a multiple of 64K (default 64M)", NULL },
	{ "host-pool-size", 0, OPT_SIZE, OFF(host_pool_size), 0, 0, 1ull << 50,
	  "SIZE", "with the cuda backend, host memory for the namespaces that ask for "
	  "host pages, as the vLLM connector does (default: --pool-size; 0: none)", NULL },
	{ "backend", 'b', OPT_CHOICE, OFF(backend), 0, 0, 0,
	  "KIND", "auto, host or cuda (default auto: cuda if a GPU answers)",
	  backend_names },
	{ "prefault", 0, OPT_BOOL, OFF(prefault), 0, 0, 0,
	  NULL, "host backend: take each slab's memory when the slab is made, so that "
	  "an allocation memory cannot hold fails instead of a client being killed "
	  "(the default)", NULL },
	{ "no-prefault", 0, OPT_NOT, OFF(prefault), 0, 0, 0,
	  NULL, "host backend: take a slab's memory only as clients write its pages "
	  "(a client that writes past the memory left may be killed by the OOM killer)",
	  NULL },
	{ "slab-ahead", 0, OPT_BOOL, OFF(slab_ahead), 0, 0, 0,
	  NULL, "host memory with --prefault: make the pool's next slab ahead, on a "
	  "worker thread, so that no client waits while the pool grows (the default; "
	  "one slab more of memory while the budget has room)", NULL },
	{ "no-slab-ahead", 0, OPT_NOT, OFF(slab_ahead), 0, 0, 0,
	  NULL, "make each slab when the pool needs it, on the loop: every client waits "
	  "while it is made (about 16 ms for 64 MiB with --prefault)", NULL },
	{ "io", 0, OPT_CHOICE, OFF(io), 0, 0, 0,
	  "HOW", "auto, uring or sync (default auto: io_uring, else epoll and I/O "
	  "threads; KVPOOL_IO=sync forces the latter)", io_names },
	{ "cuda-device", 0, OPT_UINT, OFF(cuda_device), 0, 0, 1023,
	  "N", "the GPU of the cuda backend (default 0)", NULL },
	{ "max-clients", 0, OPT_UINT, OFF(max_clients), 0, 1, 65536,
	  "N", "most client connections at once (default 256); a daemon admin may "
	  "open 4 more", NULL },
	{ "max-clients-per-uid", 0, OPT_UINT, OFF(max_clients_per_uid), 0, 1, 65536,
	  "N", "most connections of one user; root and the daemon's user are not "
	  "counted (default: half of --max-clients)", NULL },
	{ "max-namespaces-per-uid", 0, OPT_UINT, OFF(max_ns_per_uid), 0, 1, 256,
	  "N", "most namespaces one user may create; root and the daemon's user "
	  "are not counted (default 16)", NULL },
	{ "max-waits-per-uid", 0, OPT_UINT, OFF(max_waits_per_uid), 0, 0, 65536,
	  "N", "most ACQUIREs of one user that wait for keys at once (a decode "
	  "engine's wait for its prefill engine's blocks); past it an ACQUIRE with "
	  "WAIT is refused; root and the daemon's user are not counted (default 256)",
	  NULL },
	{ "max-leases", 0, OPT_UINT, OFF(max_leases), 0, 1, 1ull << 32,
	  "N", "most pages one client may hold (default 1048576)", NULL },
	{ "max-msg-size", 0, OPT_SIZE, OFF(max_msg_size), 0, 4096, 256u << 10,
	  "SIZE", "largest message, 4K to 256K (default 256K)", NULL },
	{ "max-output", 0, OPT_SIZE, OFF(max_output), 0, 256u << 10, 1ull << 40,
	  "SIZE", "replies a client may leave unread before it is disconnected "
	  "(default 16M)", NULL },
	{ "max-output-total", 0, OPT_SIZE, OFF(max_output_total), 0, 256u << 10, 1ull << 50,
	  "SIZE", "replies all clients together may leave unread; past it the one "
	  "with the most is disconnected (default 256M)", NULL },
	{ "idle-timeout", 0, OPT_UINT, OFF(idle_timeout), 0, 0, 1u << 30,
	  "SECONDS", "disconnect a client that sent no request for SECONDS (default 0: "
	  "never)", NULL },
	{ "key-scheme", 0, OPT_CHOICE, OFF(key_scheme), 0, 0, 0,
	  "SCHEME", "prefix keys of new namespaces, vLLM's algorithms: vllm-sha256 "
	  "(default, as vLLM's), vllm-sha256-cbor, vllm-xxhash, vllm-xxhash-cbor (also "
	  "called fast)",
	  scheme_names },
	{ "key-seed", 0, OPT_STRING, OFF(key_seed), SZ(key_seed), 0, 0,
	  "SEED", "root key seed, vLLM's NONE_HASH seed (default: $PYTHONHASHSEED, else "
	  "vllm-none-hash, as vLLM)", NULL },
	{ "key-salt", 0, OPT_STRING, OFF(key_salt), SZ(key_salt), 0, 0,
	  "SALT", "secret mixed with each namespace's name into its root key (on the "
	  "command line it shows in ps: prefer --key-salt-file)", NULL },
	{ "key-salt-file", 0, OPT_STRING, OFF(key_salt_file), SZ(key_salt_file), 0, 0,
	  "PATH", "the key salt is the first line of PATH (a file only kvpoold's user "
	  "may read)", NULL },
	{ "pinned-quota", 0, OPT_UINT, OFF(pinned_pct), 0, 0, 100,
	  "PCT", "pinned pages per namespace, % of its pages (default 10)", NULL },
	{ "free-watermark", 0, OPT_UINT, OFF(free_watermark_pct), 0, 0, 50,
	  "PCT", "when under PCT % of a namespace's pages are free, evict cached "
	  "pages ahead (default 1)", NULL },
	{ "free-watermark-high", 0, OPT_UINT, OFF(free_watermark_high_pct), 0, 0, 50,
	  "PCT", "... until PCT % are free (default 2; at least --free-watermark)", NULL },
	{ "spill-rate", 0, OPT_SIZE, OFF(spill_rate), 0, 0, 1ull << 40,
	  "SIZE", "cap the tier's writes at SIZE bytes a second (default 0: no cap)", NULL },
	{ "host-tier-size", 0, OPT_SIZE, OFF(host_tier_size), 0, 0, 1ull << 50,
	  "SIZE", "host memory per namespace for cold pages, between the pool and "
	  "the spill files (pinned with cuda; default 0: none)", NULL },
	{ "spill-dir", 0, OPT_STRING, OFF(spill_dir), SZ(spill_dir), 0, 0,
	  "DIR", "spill cold pages to a file per namespace in DIR (NVMe)", NULL },
	{ "spill-size", 0, OPT_SIZE, OFF(spill_size), 0, 1u << 20, 1ull << 50,
	  "SIZE", "bytes of spill file per namespace (default 1G)", NULL },
	{ "max-spill-per-uid", 0, OPT_SIZE, OFF(max_spill_per_uid), 0, 0, 1ull << 50,
	  "SIZE", "the most disk the tier files of one user's namespaces hold (each "
	  "--spill-size); root and the daemon's user are not counted (default 0: no "
	  "bound but --max-namespaces-per-uid)", NULL },
	{ "save-on-stop", 0, OPT_UINT, OFF(save_on_stop), 0, 0, 3600,
	  "SECONDS", "a clean stop writes the cached pool and host tier pages to the "
	  "spill files for at most SECONDS (default 5; 0: not at all)", NULL },
	{ "spill-discard", 0, OPT_BOOL, OFF(spill_discard), 0, 0, 0,
	  NULL, "start cold: ignore the pages the spill files hold", NULL },
	{ "access", 'a', OPT_RULE, 0, 0, 0, 0,
	  "RULE", "'NAMESPACE RIGHTS WHO,...': who may read, write or admin a "
	  "namespace (repeatable; none: everyone may read and write)", NULL },
	{ "metrics-listen", 0, OPT_STRING, OFF(metrics_listen), SZ(metrics_listen), 0, 0,
	  "[ADDR:]PORT", "serve Prometheus metrics over HTTP at /metrics on ADDR "
	  "(default 127.0.0.1; [::1] for IPv6) and PORT (default: off)", NULL },
	{ "kv-events", 0, OPT_STRING, OFF(kv_events), SZ(kv_events), 0, 0,
	  "ENDPOINT", "publish KV events in vLLM's format on a ZeroMQ PUB socket "
	  "bound to ENDPOINT (tcp://ADDR:PORT or ipc://PATH; default: off)", NULL },
	{ "kv-events-replay", 0, OPT_STRING, OFF(kv_events_replay), SZ(kv_events_replay),
	  0, 0, "ENDPOINT", "answer replay requests (\"batches since sequence N\") on a "
	  "ZeroMQ ROUTER socket bound to ENDPOINT (default: none)", NULL },
	{ "kv-events-topic", 0, OPT_STRING, OFF(kv_events_topic), SZ(kv_events_topic), 0, 0,
	  "TEMPLATE", "the topic of a namespace's batches: {host} the machine, {model} "
	  "the model, {ns} the namespace, which it must hold, followed by @ or | "
	  "(default kv@{host}|{ns}@{model})", NULL },
	{ "kv-events-ns-topic", 0, OPT_NS_TOPIC, 0, 0, 0, 0,
	  "RULE", "'NAMESPACE,... TEMPLATE': these namespaces publish on TEMPLATE's "
	  "topics instead, such as vLLM's and llm-d's kv@{host}@{model} (repeatable)",
	  NULL },
	{ "kv-events-router", 0, OPT_ROUTE, 0, 0, 0, 0,
	  "RULE", "'NAMESPACE PUB[,REPLAY]': this namespace's events alone, on topic \"\", "
	  "with sequence numbers of their own, on a PUB socket (and a replay ROUTER "
	  "socket) of their own, for a router that reads one engine's stream such as "
	  "vllm-router's kv_aware; without remote-tier events and blocks without token "
	  "ids (repeatable, 16 at most)", NULL },
	{ "kv-events-format", 0, OPT_CHOICE, OFF(kv_events_format), 0, 0, 0,
	  "FORMAT", "map: events as tagged maps (vLLM 0.24 and later, default); array: "
	  "positional arrays (vLLM 0.23 and earlier)", events_format_names },
	{ "kv-events-hashes", 0, OPT_CHOICE, OFF(kv_events_hashes), 0, 0, 0,
	  "HOW", "int: block hashes as vLLM's default 64-bit integers; bytes: the whole "
	  "digest (vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)", events_hash_names },
	{ "kv-events-queue", 0, OPT_SIZE, OFF(kv_events_queue), 0, 0, 1ull << 40,
	  "SIZE", "bytes of batches waiting for the socket, and of batches kept for "
	  "replay, at most each; past it batches are dropped and counted (default 64M)",
	  NULL },
	{ "kv-events-replay-batches", 0, OPT_UINT, OFF(kv_events_replay_batches), 0, 1,
	  10000000, "N", "batches kept for replay, at most (default 10000)", NULL },
	{ "kv-events-ipc-group", 0, OPT_STRING, OFF(kv_events_ipc_group),
	  SZ(kv_events_ipc_group), 0, 0, "GROUP", "ipc:// event sockets are mode 0660, "
	  "this group's: a router in it may connect (default: the daemon's group)", NULL },
	{ "remote", 0, OPT_STRING, OFF(remote), SZ(remote), 0, 0,
	  "URL", "keep pages in Redis too, below the local tiers: redis-cluster://"
	  "HOST:PORT[,HOST:PORT...] or redis://HOST:PORT (default: off; docs/remote.md)",
	  NULL },
	{ "remote-password-file", 0, OPT_STRING, OFF(remote_password_file),
	  SZ(remote_password_file), 0, 0, "PATH", "the Redis password (AUTH) is the "
	  "first line of PATH (default: the URL's, or $KVPOOL_REMOTE_PASSWORD)", NULL },
	{ "remote-key-file", 0, OPT_STRING, OFF(remote_key_file), SZ(remote_key_file), 0, 0,
	  "PATH", "seal the pages kept in Redis (encrypted, authenticated) with the key "
	  "in PATH (32 bytes or more, the same file on every machine that shares; not "
	  "readable by others); required with --remote", NULL },
	{ "remote-share", 0, OPT_SHARE, 0, 0, 0, 0,
	  "RULE", "'NAME NAMESPACE,...': these namespaces (or *: every other one) keep "
	  "their pages in Redis under NAME, where namespaces of that name or share "
	  "find them (repeatable; default: each under its own name)", NULL },
	{ "remote-write", 0, OPT_CHOICE, OFF(remote_write), 0, 0, 0,
	  "WHEN", "back: a page goes to Redis when it leaves the pool (default); "
	  "through: also when it is published", remote_write_names },
	{ "remote-timeout", 0, OPT_UINT, OFF(remote_timeout), 0, 10, 600000,
	  "MS", "a Redis node silent this long is dropped: its requests are misses, "
	  "and it is reconnected with back-off (default 1000)", NULL },
	{ "remote-backlog", 0, OPT_SIZE, OFF(remote_backlog), 0, 1u << 20, 1ull << 40,
	  "SIZE", "bytes of pages kept for Redis while their masters cannot take them "
	  "(in-flight cap, rate cap, a node down); past it a page is not written, "
	  "counted and logged (default 256M)", NULL },
	{ "remote-max-inflight", 0, OPT_UINT, OFF(remote_max_inflight), 0, 1, 100000,
	  "N", "requests in flight per Redis node, at most; past it pages wait "
	  "(--remote-backlog) and blocks are not fetched (default 256)", NULL },
	{ "remote-rate", 0, OPT_SIZE, OFF(remote_rate), 0, 0, 1ull << 40,
	  "SIZE", "bytes per second to and from Redis, at most (default 0: no cap)", NULL },
	{ "remote-prefill-rate", 0, OPT_UINT, OFF(remote_prefill_rate), 0, 0, 1ull << 32,
	  "TOKENS", "tokens per second the engines prefill: an ACQUIRE fetches from "
	  "Redis only when the measured fetch is faster (default 0: always fetch)", NULL },
	{ "remote-fetch-max", 0, OPT_UINT, OFF(remote_fetch_max), 0, 1, 65536,
	  "N", "blocks one ACQUIRE fetches from Redis, at most (default 512)", NULL },
	{ "log-file", 0, OPT_STRING, OFF(log_file), SZ(log_file), 0, 0,
	  "PATH", "append the log to PATH (reopened on SIGHUP, for logrotate) instead "
	  "of stderr, or syslog once detached", NULL },
	{ "log-level", 'l', OPT_LOG_LEVEL, OFF(log_level), 0, 0, 0,
	  "LEVEL", "error, warn, info or debug (default info)", NULL },
	{ "foreground", 'f', OPT_BOOL, OFF(foreground), 0, 0, 0,
	  NULL, "stay in the foreground (systemd, containers, tests)", NULL },
};
#define N_OPTS (sizeof(opt_table) / sizeof(opt_table[0]))

void options_defaults(struct options *o)
{
	memset(o, 0, sizeof(*o));
	/* as the library and the CLI: KVPOOL_SOCKET names the socket when
	 * neither --socket nor the config file does */
	snprintf(o->socket_path, sizeof(o->socket_path), "%s",
		 getenv("KVPOOL_SOCKET") && *getenv("KVPOOL_SOCKET") ?
		 getenv("KVPOOL_SOCKET") : "/run/kvpool/kvpool.sock");
	o->pool_size = 1ull << 30;
	o->slab_size = 64ull << 20;
	o->host_pool_size = OPTIONS_AS_POOL;
	o->backend = BACKEND_AUTO;
	o->prefault = true;	/* a refusal, not the OOM killer (--no-prefault) */
	o->slab_ahead = true;	/* no client waits for a slab (--no-slab-ahead) */
	o->max_clients = 256;
	o->max_ns_per_uid = 16;
	o->max_waits_per_uid = 256;
	o->max_leases = 1u << 20;
	/* vLLM's defaults, so that a kvpoold and a vLLM that configure
	 * nothing agree: its default algorithm, sha256, and its NONE_HASH
	 * seed, PYTHONHASHSEED or else "vllm-none-hash" */
	o->key_scheme = 2;	/* vllm-sha256: choice 2 of scheme_names */
	snprintf(o->key_seed, sizeof(o->key_seed), "%s",
		 getenv("PYTHONHASHSEED") ? getenv("PYTHONHASHSEED") : "vllm-none-hash");
	o->pinned_pct = 10;
	o->free_watermark_pct = 1;
	o->free_watermark_high_pct = 2;
	o->spill_size = 1ull << 30;
	o->save_on_stop = 5;
	o->max_msg_size = 256u * 1024u;
	o->max_output = 16u << 20;
	o->max_output_total = 256u << 20;
	snprintf(o->kv_events_topic, sizeof(o->kv_events_topic), "kv@{host}|{ns}@{model}");
	o->kv_events_queue = 64ull << 20;
	o->kv_events_replay_batches = 10000;
	o->remote_timeout = 1000;
	o->remote_max_inflight = 256;
	o->remote_backlog = 256ull << 20;
	o->remote_fetch_max = 512;
	o->log_level = LOG_LVL_INFO;
	o->foreground = false;
}

void options_usage(void)
{
	size_t i;

	printf("Usage: kvpoold [OPTION]...\n"
	       "Serve a pool of KV-cache pages to model-server processes over a Unix socket.\n"
	       "\n"
	       "  -c, --config=FILE        read `key = value` settings from FILE first;\n"
	       "                           flags given on the command line override them\n");
	for (i = 0; i < N_OPTS; i++) {
		const struct opt_def *d = &opt_table[i];
		char flag[64];

		if (d->short_name)
			snprintf(flag, sizeof(flag), "-%c, --%s%s%s", d->short_name,
				 d->name, d->arg ? "=" : "", d->arg ? d->arg : "");
		else
			snprintf(flag, sizeof(flag), "    --%s%s%s", d->name,
				 d->arg ? "=" : "", d->arg ? d->arg : "");
		printf("  %-24s %s\n", flag, d->help);
	}
	printf("  -h, --help               show this help and exit\n"
	       "  -V, --version            show the version and exit (with --verbose: and\n"
	       "                           the libraries kvpoold runs with, their versions)\n"
	       "\n"
	       "Every long option is also a config-file key (e.g. `max-clients = 64`).\n"
	       "SIGTERM or SIGINT shuts the daemon down cleanly. See kvpoold(8).\n");
}

static const struct opt_def *opt_find(const char *key)
{
	size_t i, j;

	for (i = 0; i < N_OPTS; i++) {
		const char *n = opt_table[i].name;

		for (j = 0; n[j] && key[j]; j++)
			if (!(n[j] == key[j] || (n[j] == '-' && key[j] == '_')))
				break;
		if (!n[j] && !key[j])
			return &opt_table[i];
	}
	return NULL;
}


/*
 * opt_set() - check value against d and store it in o. On failure writes
 * "VALUE: REASON" into why.
 */
static int opt_set(struct options *o, const struct opt_def *d,
		   const char *value, char *why, size_t whylen)
{
	char *dst = (char *)o + d->offset;
	uint64_t v;
	char *end;

	switch (d->type) {
	case OPT_STRING:
		if (!*value) {
			snprintf(why, whylen, "empty value");
			return -EINVAL;
		}
		if (strlen(value) >= d->size) {
			snprintf(why, whylen, "'%s' is longer than %zu bytes",
				 value, d->size - 1);
			return -EINVAL;
		}
		memcpy(dst, value, strlen(value) + 1);
		return 0;
	case OPT_UINT:
		errno = 0;
		v = strtoull(value, &end, 10);
		if (!isdigit((unsigned char)*value) || *end || errno) {
			snprintf(why, whylen, "'%s' is not a whole number", value);
			return -EINVAL;
		}
		goto check_range;
	case OPT_SIZE:
		if (!size_parse(value, &v)) {
			snprintf(why, whylen,
				 "'%s' is not a size (" SIZE_HELP ")",
				 value);
			return -EINVAL;
		}
		goto check_range;
	case OPT_BOOL:
	case OPT_NOT:
		if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "1")) {
			*(bool *)dst = d->type == OPT_BOOL;
		} else if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "0")) {
			*(bool *)dst = d->type == OPT_NOT;
		} else {
			snprintf(why, whylen, "'%s' is not true or false", value);
			return -EINVAL;
		}
		return 0;
	case OPT_CHOICE:
		for (v = 0; d->choices[v]; v++) {
			if (strcmp(value, d->choices[v]) == 0) {
				*(unsigned *)dst = (unsigned)v;
				return 0;
			}
		}
		{
			size_t at = (size_t)snprintf(why, whylen, "'%s' is not one of", value);

			for (v = 0; d->choices[v] && at < whylen; v++)
				at += (size_t)snprintf(why + at, whylen - at, "%s %s",
						       v ? "," : "", d->choices[v]);
		}
		return -EINVAL;
	case OPT_RULE: {
		struct access_rule r;

		if (o->naccess == OPTIONS_ACCESS_MAX) {
			snprintf(why, whylen, "more than %d access rules", OPTIONS_ACCESS_MAX);
			return -EINVAL;
		}
		if (access_parse(value, &r, why, whylen) < 0)
			return -EINVAL;
		memcpy(o->access[o->naccess++], value, strlen(value) + 1);
		return 0;
	}
	case OPT_NS_TOPIC:
		if (o->nns_topic == OPTIONS_NS_TOPIC_MAX) {
			snprintf(why, whylen, "more than %d kv-events-ns-topic rules",
				 OPTIONS_NS_TOPIC_MAX);
			return -EINVAL;
		}
		if (strlen(value) >= TOPIC_RULE_MAX) {
			snprintf(why, whylen, "a rule is at most %d bytes", TOPIC_RULE_MAX - 1);
			return -EINVAL;
		}
		if (topic_rule_parse(value, why, whylen) < 0)
			return -EINVAL;
		memcpy(o->ns_topic[o->nns_topic++], value, strlen(value) + 1);
		return 0;
	case OPT_ROUTE:
		if (o->nroutes == TOPIC_ROUTES_MAX) {
			snprintf(why, whylen, "more than %d kv-events-router rules (one router "
				 "stream per namespace, %d at most)", TOPIC_ROUTES_MAX,
				 TOPIC_ROUTES_MAX);
			return -EINVAL;
		}
		if (topic_route_parse(value, &o->routes[o->nroutes], why, whylen) < 0)
			return -EINVAL;
		o->nroutes++;
		return 0;
	case OPT_SHARE:
		if (o->nshare == OPTIONS_SHARE_MAX) {
			snprintf(why, whylen, "more than %d remote-share rules", OPTIONS_SHARE_MAX);
			return -EINVAL;
		}
		if (access_share_parse(value, why, whylen) < 0)
			return -EINVAL;
		memcpy(o->share[o->nshare++], value, strlen(value) + 1);
		return 0;
	case OPT_LOG_LEVEL:
		if (log_level_parse(value, (enum log_level *)dst) < 0) {
			snprintf(why, whylen,
				 "'%s' is not a log level (error, warn, info, debug)",
				 value);
			return -EINVAL;
		}
		return 0;
	}
	return -EINVAL;

check_range:
	if ((v < d->min || v > d->max) && d->type == OPT_SIZE) {
		char a[32], b[32], c[32];

		snprintf(why, whylen, "%s is outside %s..%s", size_text(v, a, sizeof(a)),
			 size_text(d->min, b, sizeof(b)), size_text(d->max, c, sizeof(c)));
		return -EINVAL;
	}
	if (v < d->min || v > d->max) {
		snprintf(why, whylen, "%" PRIu64 " is outside %" PRIu64 "..%" PRIu64,
			 v, d->min, d->max);
		return -EINVAL;
	}
	*(uint64_t *)dst = v;
	return 0;
}

/* trim() - strip leading and trailing blanks in place. */
static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int options_load_file(struct options *o, const char *path,
		      char *err, size_t errlen)
{
	char line[OPTIONS_PATH_MAX + 128], why[OPTIONS_PATH_MAX + 128];
	unsigned lineno = 0;
	FILE *f;
	int rc = 0;

	f = fopen(path, "re");
	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "config file %s: %s", path, strerror(-rc));
		return rc;
	}
	while (fgets(line, sizeof(line), f)) {
		const struct opt_def *d;
		char *key, *value, *eq, *hash, quote;
		size_t n;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, errlen, "%s:%u: line longer than %zu bytes",
				 path, lineno, sizeof(line) - 2);
			rc = -EINVAL;
			break;
		}
		/* a comment starts at a # outside quotes */
		for (hash = line, quote = 0; *hash; hash++) {
			if (quote ? *hash == quote : *hash == '"' || *hash == '\'')
				quote = quote ? 0 : *hash;
			else if (!quote && *hash == '#')
				break;
		}
		*hash = '\0';
		key = trim(line);
		if (!*key)
			continue;
		eq = strchr(key, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%u: expected `key = value`, got '%s'",
				 path, lineno, key);
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		value = trim(eq + 1);
		key = trim(key);
		/* "value" or 'value': the quotes are not part of it */
		n = strlen(value);
		if (n >= 2 && (value[0] == '"' || value[0] == '\'') && value[n - 1] == value[0]) {
			value[n - 1] = '\0';
			value++;
		} else if (value[0] == '"' || value[0] == '\'') {
			snprintf(err, errlen, "%s:%u: %s: the quote %c is not closed", path,
				 lineno, key, value[0]);
			rc = -EINVAL;
			break;
		}
		d = opt_find(key);
		if (!d) {
			snprintf(err, errlen,
				 "%s:%u: unknown key '%s' (kvpoold --help lists the keys)",
				 path, lineno, key);
			rc = -EINVAL;
			break;
		}
		if (opt_set(o, d, value, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s:%u: %s: %s", path, lineno, d->name, why);
			rc = -EINVAL;
			break;
		}
	}
	if (!rc && ferror(f)) {
		rc = -EIO;
		snprintf(err, errlen, "config file %s: read error", path);
	}
	fclose(f);
	return rc;
}

/* warn() - keep a warning for kvpoold to log once its log is set up. */
static void warn(struct options *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void warn(struct options *o, const char *fmt, ...)
{
	va_list ap;

	if (o->nwarnings >= sizeof(o->warnings) / sizeof(o->warnings[0]))
		return;
	va_start(ap, fmt);
	vsnprintf(o->warnings[o->nwarnings++], sizeof(o->warnings[0]), fmt, ap);
	va_end(ap);
}

/* others_read() - path is a file that users other than its owner and
 * group may read. */
static bool others_read(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && (st.st_mode & S_IROTH);
}

/* owner_ok() - uid is root or kvpoold's own user. */
static bool owner_ok(uid_t uid)
{
	return uid == 0 || uid == geteuid();
}

/* secret_dir_ok() - directory dir, on the way to secret file path, is one
 * only root or kvpoold's user can change (others may write a sticky one:
 * they cannot replace what is ours in it). */
static int secret_dir_ok(const char *what, const char *path, const char *dir, char *err,
			 size_t errlen)
{
	struct stat st;

	if (stat(dir, &st) < 0) {
		int e = errno;

		snprintf(err, errlen, "--%s %s: its directory %s: %s", what, path, dir,
			 strerror(e));
		return -e;
	}
	if (!owner_ok(st.st_uid)) {
		snprintf(err, errlen, "--%s %s: its directory %s is owned by uid %u, who could "
			 "put a key of their own in its place; keep secrets in a directory of "
			 "root or kvpoold's user (chown root: %s)", what, path, dir,
			 (unsigned)st.st_uid, dir);
		return -EPERM;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
		snprintf(err, errlen, "--%s %s: its directory %s may be written by others "
			 "(mode %04o), who could put a file of their own in its place; chmod "
			 "go-w %s", what, path, dir, (unsigned)(st.st_mode & 07777), dir);
		return -EPERM;
	}
	return 0;
}

/* secret_path_ok() - the directory path is named in (a link in it is a
 * name too), and every directory from / down to the file it resolves to
 * (real), are secret_dir_ok(); a link there is no one else's. */
static int secret_path_ok(const char *what, const char *path, const char *real, char *err,
			  size_t errlen)
{
	char dir[OPTIONS_PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;
	size_t i;
	int rc;

	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && !owner_ok(st.st_uid)) {
		snprintf(err, errlen, "--%s %s is a link of uid %u, who could point it at a "
			 "secret they know; name the file itself", what, path,
			 (unsigned)st.st_uid);
		return -EPERM;
	}
	snprintf(dir, sizeof(dir), "%.*s", !slash ? 1 : (int)(slash == path ? 1 : slash - path),
		 !slash ? "." : path);
	rc = secret_dir_ok(what, path, dir, err, errlen);
	for (i = 1; rc == 0 && real[i]; i++) {	/* real is absolute */
		if (real[i] != '/')
			continue;
		snprintf(dir, sizeof(dir), "%.*s", (int)i, real);
		rc = secret_dir_ok(what, path, dir, err, errlen);
	}
	return rc == 0 ? secret_dir_ok(what, path, "/", err, errlen) : rc;
}

int options_secret_open(const char *what, const char *path, char *err, size_t errlen)
{
	char real[PATH_MAX];
	struct stat st;
	int fd, rc;

	if (!realpath(path, real)) {
		rc = -errno;
		snprintf(err, errlen, "--%s %s: %s", what, path, strerror(-rc));
		return rc;
	}
	rc = secret_path_ok(what, path, real, err, errlen);
	if (rc < 0)
		return rc;
	fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);	/* what was checked */
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "--%s %s: %s", what, path, strerror(-rc));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "--%s %s: not a regular file", what, path);
		rc = -EINVAL;
	} else if (!owner_ok(st.st_uid)) {
		snprintf(err, errlen, "--%s %s is owned by uid %u, who could change it to a "
			 "secret they know; chown root: %s", what, path, (unsigned)st.st_uid,
			 path);
		rc = -EPERM;
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen, "--%s %s may be written by %s (mode %04o), who could "
			 "change it to a secret they know; chmod go-w %s", what, path,
			 st.st_mode & S_IWOTH ? "every user" : "its group",
			 (unsigned)(st.st_mode & 07777), path);
		rc = -EPERM;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* url_has_password() - a --remote URL with PASSWORD@ in it. */
static bool url_has_password(const char *url)
{
	const char *p = strstr(url, "://");

	return p && strchr(p + 3, '@');
}

/*
 * options_secrets() - read --key-salt-file, and say where secrets are
 * exposed: on the command line (every user sees argv in ps), or in a
 * file other users may read. argv_salt / argv_url: pass 2 set them.
 */
static int options_secrets(struct options *o, bool argv_salt, bool argv_url, char *err,
			   size_t errlen)
{
	if (o->key_salt_file[0]) {
		FILE *f;
		char line[sizeof(o->key_salt) + 2];
		int fd;

		if (o->key_salt[0]) {
			snprintf(err, errlen, "give the key salt once: --key-salt or "
				 "--key-salt-file, not both");
			return -EINVAL;
		}
		fd = options_secret_open("key-salt-file", o->key_salt_file, err, errlen);
		if (fd < 0)
			return -EINVAL;
		f = fdopen(fd, "r");
		if (!f) {
			snprintf(err, errlen, "--key-salt-file %s: %s", o->key_salt_file,
				 strerror(errno));
			close(fd);
			return -EINVAL;
		}
		if (!fgets(line, sizeof(line), f)) {
			fclose(f);
			snprintf(err, errlen, "--key-salt-file %s: empty; its first line is the "
				 "salt", o->key_salt_file);
			return -EINVAL;
		}
		fclose(f);
		line[strcspn(line, "\r\n")] = '\0';
		if (!line[0] || strlen(line) >= sizeof(o->key_salt)) {
			snprintf(err, errlen, "--key-salt-file %s: its first line is %s",
				 o->key_salt_file, line[0] ? "longer than 255 bytes" : "empty");
			explicit_bzero(line, sizeof(line));
			return -EINVAL;
		}
		memcpy(o->key_salt, line, strlen(line) + 1);
		explicit_bzero(line, sizeof(line));
		if (others_read(o->key_salt_file))
			warn(o, "--key-salt-file %s: other users can read the key salt; "
			     "chmod 600 it (or 640, group kvpool)", o->key_salt_file);
	}
	if (argv_salt)
		warn(o, "--key-salt on the command line shows in ps to every user; put it "
		     "in a file only kvpoold's user may read (--key-salt-file)");
	if (argv_url && url_has_password(o->remote))
		warn(o, "--remote: the password in the URL shows in ps to every user; use "
		     "--remote-password-file or KVPOOL_REMOTE_PASSWORD");
	if (o->config_file[0] && others_read(o->config_file) &&
	    ((!argv_salt && o->key_salt[0] && !o->key_salt_file[0]) ||
	     (!argv_url && url_has_password(o->remote))))
		warn(o, "config file %s holds a secret (key-salt, or a password in remote) "
		     "and other users can read it; chmod 640 it, group kvpool (the "
		     "package installs it so)", o->config_file);
	if (o->remote_password_file[0] && others_read(o->remote_password_file))
		warn(o, "--remote-password-file %s: other users can read the password; "
		     "chmod 600 it (or 640, group kvpool)", o->remote_password_file);
	return 0;
}

/* options_check() - rules that tie options together. */
static int options_check(const struct options *o, char *err, size_t errlen)
{
	char a[32], b[32], c[32];
	uint64_t need;

	if (o->slab_size % (64u << 10)) {
		snprintf(err, errlen, "--slab-size %s (%llu bytes) is not a multiple of 64K",
			 size_text(o->slab_size, a, sizeof(a)),
			 (unsigned long long)o->slab_size);
		return -EINVAL;
	}
	if (o->slab_size > o->pool_size) {
		snprintf(err, errlen, "--slab-size %s is larger than --pool-size %s; lower "
			 "--slab-size or raise --pool-size", size_text(o->slab_size, a, sizeof(a)),
			 size_text(o->pool_size, b, sizeof(b)));
		return -EINVAL;
	}
	if (o->free_watermark_high_pct < o->free_watermark_pct) {
		snprintf(err, errlen, "free-watermark-high %llu is below free-watermark %llu",
			 (unsigned long long)o->free_watermark_high_pct,
			 (unsigned long long)o->free_watermark_pct);
		return -EINVAL;
	}
	if (o->host_pool_size != OPTIONS_AS_POOL && o->host_pool_size &&
	    o->host_pool_size < o->slab_size) {
		snprintf(err, errlen, "--host-pool-size %s holds no slab of %s; raise it, or "
			 "give 0 for no host pages", size_text(o->host_pool_size, a, sizeof(a)),
			 size_text(o->slab_size, b, sizeof(b)));
		return -EINVAL;
	}
	if (o->pool_size / o->slab_size > KVP_MAX_SLABS) {
		/* the smallest slab size, in 64K steps, that makes few enough */
		need = (o->pool_size + KVP_MAX_SLABS - 1) / KVP_MAX_SLABS;
		need = (need + (64u << 10) - 1) / (64u << 10) * (64u << 10);
		snprintf(err, errlen, "--pool-size %s needs %llu slabs of %s, more than %u; "
			 "raise --slab-size to %s or more", size_text(o->pool_size, a, sizeof(a)),
			 (unsigned long long)(o->pool_size / o->slab_size),
			 size_text(o->slab_size, b, sizeof(b)), KVP_MAX_SLABS,
			 size_text(need, c, sizeof(c)));
		return -EINVAL;
	}
	/* flags and the file together: --kv-events may come after the rules */
	return topic_routes_check(o->routes, o->nroutes, o->kv_events, o->kv_events_replay,
				  err, errlen);
}

int options_parse(struct options *o, int argc, char **argv,
		  char *err, size_t errlen)
{
	struct option longopts[N_OPTS + 5];
	char shortopts[3 * N_OPTS + 16], why[OPTIONS_PATH_MAX + 128];
	char *sp = shortopts;
	bool argv_salt, argv_url;
	size_t i;
	int c, idx, rc;

	*sp++ = ':';	/* report a missing argument as ':' */
	for (i = 0; i < N_OPTS; i++) {
		const struct opt_def *d = &opt_table[i];

		longopts[i] = (struct option){ d->name,
			d->type == OPT_BOOL || d->type == OPT_NOT ? no_argument : required_argument,
			NULL, d->short_name ? d->short_name : 256 + (int)i };
		if (d->short_name) {
			*sp++ = (char)d->short_name;
			if (d->type != OPT_BOOL && d->type != OPT_NOT)
				*sp++ = ':';
		}
	}
	longopts[N_OPTS + 0] = (struct option){ "config", required_argument, NULL, 'c' };
	longopts[N_OPTS + 1] = (struct option){ "help", no_argument, NULL, 'h' };
	longopts[N_OPTS + 2] = (struct option){ "version", no_argument, NULL, 'V' };
	longopts[N_OPTS + 3] = (struct option){ "verbose", no_argument, NULL, OPT_VERBOSE };
	longopts[N_OPTS + 4] = (struct option){ NULL, 0, NULL, 0 };
	strcpy(sp, "c:hV");

	/* Pass 1: --help, --version and the config file. */
	opterr = 0;
	optind = 0;	/* 0: glibc starts over, GNU extensions included */
	while ((c = getopt_long(argc, argv, shortopts, longopts, &idx)) != -1) {
		switch (c) {
		case 'h':
			options_usage();
			return 1;
		case 'V':
			printf("kvpoold (kvpool) %s\n", PACKAGE_VERSION);
#ifdef HAVE_LIBSYSTEMD
			printf("built with libsystemd: socket activation, notify, watchdog\n");
#else
			printf("built without libsystemd: no socket activation or notify\n");
#endif
#ifdef HAVE_LIBMICROHTTPD
			printf("built with libmicrohttpd: --metrics-listen\n");
#else
			printf("built without libmicrohttpd: no --metrics-listen\n");
#endif
#ifdef HAVE_KV_EVENTS
			printf("built with libzmq and msgpack-c: --kv-events\n");
#else
			printf("built without libzmq or msgpack-c: no --kv-events\n");
#endif
#ifdef HAVE_REMOTE
			printf("built with hiredis: --remote\n");
#else
			printf("built without hiredis: no --remote\n");
#endif
			/* --version --verbose: and the libraries it runs with
			 * (kvpoold.c prints them) */
			for (idx = 1; idx < argc; idx++)
				if (!strcmp(argv[idx], "--verbose"))
					return 2;
			return 1;
		case OPT_VERBOSE:	/* --version's, before or after it */
			break;
		case 'c':
			if (strlen(optarg) >= sizeof(o->config_file)) {
				snprintf(err, errlen, "--config: path too long");
				return -EINVAL;
			}
			strcpy(o->config_file, optarg);
			break;
		case ':':
			snprintf(err, errlen, "option '%s' needs a value",
				 argv[optind - 1]);
			return -EINVAL;
		case '?':
			snprintf(err, errlen,
				 "unknown option '%s' (kvpoold --help lists them)",
				 argv[optind - 1]);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s' (kvpoold takes options only)",
			 argv[optind]);
		return -EINVAL;
	}
	if (o->config_file[0]) {
		rc = options_load_file(o, o->config_file, err, errlen);
		if (rc < 0)
			return rc;
	}
	o->access_file = o->naccess;
	o->share_file = o->nshare;

	/* Pass 2: the flags, which override the file. */
	optind = 0;	/* 0: glibc starts over, GNU extensions included */
	argv_salt = argv_url = false;
	while ((c = getopt_long(argc, argv, shortopts, longopts, &idx)) != -1) {
		const struct opt_def *d = NULL;

		if (c == OPT_VERBOSE) {
			snprintf(err, errlen, "--verbose goes with --version (kvpoold --version "
				 "--verbose: the libraries it runs with)");
			return -EINVAL;
		}
		if (c >= 256)
			d = &opt_table[c - 256];
		for (i = 0; !d && i < N_OPTS; i++)
			if (opt_table[i].short_name == c)
				d = &opt_table[i];
		if (!d)
			continue;	/* -c, handled above */
		if (opt_set(o, d, d->type == OPT_BOOL || d->type == OPT_NOT ? "true" : optarg,
			    why, sizeof(why)) < 0) {
			snprintf(err, errlen, "--%s: %s", d->name, why);
			return -EINVAL;
		}
		argv_salt = argv_salt || d->offset == OFF(key_salt);
		argv_url = argv_url || d->offset == OFF(remote);
	}
	rc = options_secrets(o, argv_salt, argv_url, err, errlen);
	if (rc < 0)
		return rc;
	rc = access_shares_check(o->share, o->nshare, err, errlen);
	if (rc < 0)
		return rc;
	return options_check(o, err, errlen);
}

void options_access(const struct options *o, struct access_rule *rules, unsigned *n)
{
	char why[256];
	unsigned i;

	*n = 0;
	for (i = 0; i < o->naccess; i++)	/* checked when they were read */
		if (access_parse(o->access[i], &rules[*n], why, sizeof(why)) == 0)
			(*n)++;
}

/* append() - copy rules from[first..n) after to[0..*tn), at most max. */
static int append(char (*to)[ACCESS_RULE_MAX], unsigned *tn,
		  const char (*from)[ACCESS_RULE_MAX], unsigned first, unsigned n, unsigned max)
{
	for (; first < n; first++) {
		if (*tn == max)
			return -EINVAL;
		memcpy(to[(*tn)++], from[first], ACCESS_RULE_MAX);
	}
	return 0;
}

int options_reload(const struct options *o, struct options *f, char *err, size_t errlen)
{
	int rc;

	options_defaults(f);
	rc = options_load_file(f, o->config_file, err, errlen);
	if (rc < 0)
		return rc;
	if (append(f->access, &f->naccess, o->access, o->access_file, o->naccess,
		   OPTIONS_ACCESS_MAX) < 0 ||
	    append(f->share, &f->nshare, o->share, o->share_file, o->nshare,
		   OPTIONS_SHARE_MAX) < 0) {
		snprintf(err, errlen, "%s and the flags hold more than %d rules of a kind",
			 o->config_file, OPTIONS_ACCESS_MAX);
		return -EINVAL;
	}
	return access_shares_check(f->share, f->nshare, err, errlen);
}
