/* SPDX-License-Identifier: MIT */
/*
 * options.h - kvpoold's configuration: defaults, the config file
 * (`key = value` lines, `#` comments) and command-line flags, which
 * override the file. One table describes every option for both.
 */
#ifndef KVP_OPTIONS_H
#define KVP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "daemon/log.h"
#include "daemon/observe/topic.h"
#include "daemon/requests/access.h"

#define OPTIONS_PATH_MAX 4096
#define OPTIONS_ACCESS_MAX 64	/* --access rules */
#define OPTIONS_SHARE_MAX 64	/* --remote-share rules */
#define OPTIONS_NS_TOPIC_MAX 64	/* --kv-events-ns-topic rules */

enum backend_choice {
	BACKEND_AUTO = 0,	/* cuda when a device answers, else host */
	BACKEND_HOST = 1,
	BACKEND_CUDA = 2,
};

/* host_pool_size when the option is not given: as --pool-size */
#define OPTIONS_AS_POOL UINT64_MAX

struct options {
	char config_file[OPTIONS_PATH_MAX];	/* "" when none */
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char socket_group[64];		/* "" keeps the daemon's group */
	char admin_group[64];		/* "" : only root and the daemon's user */
	char pid_file[OPTIONS_PATH_MAX];	/* "" when none */
	char log_file[OPTIONS_PATH_MAX];	/* "": stderr, or syslog once detached */
	char metrics_listen[160];	/* --metrics-listen [ADDR:]PORT; "": off */
	char kv_events[256];		/* --kv-events ENDPOINT; "": off */
	char kv_events_replay[256];	/* --kv-events-replay ENDPOINT; "": none */
	char kv_events_topic[256];	/* topic template */
	char ns_topic[OPTIONS_NS_TOPIC_MAX][TOPIC_RULE_MAX];	/* --kv-events-ns-topic */
	unsigned nns_topic;
	struct topic_route routes[TOPIC_ROUTES_MAX];	/* --kv-events-router */
	unsigned nroutes;
	char kv_events_ipc_group[64];	/* ipc:// sockets' group; "": the daemon's */
	unsigned kv_events_format;	/* 0 map (vLLM >= 0.24), 1 array */
	unsigned kv_events_hashes;	/* 0 int, 1 bytes */
	uint64_t kv_events_queue;	/* bytes queued (and kept for replay) at most */
	uint64_t kv_events_replay_batches;	/* batches kept for replay */
	char remote[1024];		/* --remote URL; "": no remote tier */
	char remote_password_file[256];	/* "": the URL's or $KVPOOL_REMOTE_PASSWORD */
	char remote_key_file[256];	/* seals the values; required with --remote */
	unsigned remote_write;		/* 0 back (pages leaving the pool), 1 through */
	uint64_t remote_timeout;	/* ms a node may stay silent */
	uint64_t remote_max_inflight;	/* requests per node */
	uint64_t remote_backlog;	/* bytes of pages waiting to go to Redis */
	uint64_t remote_rate;		/* bytes/s each way; 0: no cap */
	uint64_t remote_prefill_rate;	/* tokens/s recomputing costs; 0: always fetch */
	uint64_t remote_fetch_max;	/* blocks one ACQUIRE fetches */
	uint64_t pool_size;		/* bytes of page memory at most */
	uint64_t slab_size;		/* bytes per slab */
	uint64_t host_pool_size;	/* bytes of host pages beside the cuda
					 * backend; OPTIONS_AS_POOL: pool_size */
	unsigned backend;		/* enum backend_choice */
	unsigned io;			/* enum loop_io: auto, uring, sync */
	uint64_t cuda_device;		/* the GPU of the cuda backend */
	uint64_t max_clients;
	uint64_t max_clients_per_uid;	/* of one uid (root and the daemon's
					 * user: any); 0: half of max_clients */
	uint64_t max_ns_per_uid;	/* namespaces one uid may create (root and
					 * the daemon's user: any) */
	uint64_t max_waits_per_uid;	/* ACQUIREs with WAIT of one uid waiting
					 * (root and the daemon's user: any) */
	uint64_t max_leases;		/* pages one client may hold */
	uint64_t max_msg_size;		/* bytes, header included */
	uint64_t max_output;		/* bytes of replies a client leaves unread */
	uint64_t max_output_total;	/* ... all clients together */
	uint64_t idle_timeout;		/* seconds without a request; 0: none */
	unsigned key_scheme;		/* index in key_scheme names: 0 vllm, 1 fast */
	char key_seed[256];		/* root key = H(seed) */
	char key_salt[256];		/* "" or mixed into each namespace's root */
	char key_salt_file[OPTIONS_PATH_MAX];	/* key_salt is its first line */
	char warnings[4][256];		/* what options_parse() found unsafe, to log */
	unsigned nwarnings;
	uint64_t pinned_pct;		/* pinned quota per namespace, % of its pages */
	uint64_t free_watermark_pct;	/* below this % free, evict ahead ... */
	uint64_t free_watermark_high_pct;	/* ... until this % is free */
	uint64_t spill_rate;		/* bytes/s of spill writes; 0: no cap */
	char spill_dir[OPTIONS_PATH_MAX];	/* "" : no NVMe tier */
	uint64_t spill_size;		/* bytes of tier file per namespace */
	uint64_t max_spill_per_uid;	/* bytes of tier files one uid's namespaces
					 * hold (root and the daemon's user: any);
					 * 0: no bound but --max-namespaces-per-uid */
	uint64_t host_tier_size;	/* bytes of host tier per namespace; 0: none */
	bool spill_discard;		/* cold start: ignore what the files hold */
	bool prefault;			/* host: take a slab's memory when it is made */
	bool slab_ahead;		/* make the next slab off the loop (pool_set_spare_hook) */
	uint64_t save_on_stop;		/* seconds a stop may spend saving pages */
	enum log_level log_level;
	bool foreground;
	/* --access rules, as written: those of the config file first
	 * (access_file of them), then those of the flags */
	char access[OPTIONS_ACCESS_MAX][ACCESS_RULE_MAX];
	unsigned naccess, access_file;
	/* --remote-share rules, as written: the file's (share_file of
	 * them), then the flags' */
	char share[OPTIONS_SHARE_MAX][ACCESS_RULE_MAX];
	unsigned nshare, share_file;
};

/* options_defaults() - fill o with the built-in defaults. */
void options_defaults(struct options *o);

/*
 * options_parse() - apply the config file named by -c, then the flags.
 *
 * Returns 0 to run, 1 when --help or --version was printed (exit 0), or
 * -EINVAL after writing a message that names the flag or file:line, the
 * value and the reason into err (errlen bytes).
 */
int options_parse(struct options *o, int argc, char **argv,
		  char *err, size_t errlen);

/* options_backend_name() - "auto", "host" or "cuda". */
const char *options_backend_name(unsigned backend);

/*
 * options_load_file() - apply the `key = value` lines of path to o.
 * Returns 0, or -errno (unreadable file) / -EINVAL (unknown key, bad
 * value) with a message naming path:line in err.
 */
int options_load_file(struct options *o, const char *path,
		      char *err, size_t errlen);

/*
 * options_reload() - the rules SIGHUP brings into f: the access and
 * remote-share rules of the config file as it reads now, then those of
 * o's flags (f's other fields are the file's, unused). Returns 0, or
 * -errno with err naming path:line when the file does not read or its
 * rules do not hold together (then nothing should change).
 */
int options_reload(const struct options *o, struct options *f, char *err, size_t errlen);

/* options_access() - compile o's rules into rules[0..*n). */
void options_access(const struct options *o, struct access_rule *rules, unsigned *n);

/*
 * options_secret_open() - open secret file path (what: the option's name,
 * for messages) for reading, and check that no user but root and
 * kvpoold's own may change it: a regular file owned by one of them that
 * its group and others cannot write, in a directory (as written, and
 * with links resolved) owned by one of them that its group and others
 * cannot write unless it is sticky. Reading by others is the caller's to
 * judge. Returns the descriptor, or -errno with err saying which file and
 * the command that fixes it (nothing is opened then).
 */
int options_secret_open(const char *what, const char *path, char *err, size_t errlen);

/* options_usage() - print --help text to stdout. */
void options_usage(void);

#endif /* KVP_OPTIONS_H */
