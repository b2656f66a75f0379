/* SPDX-License-Identifier: MIT */
/*
 * conn.h - kvpoold's server and connection objects: the connection's
 * state, its replies and its life (conn.c), shared by the socket server
 * above it (server.c accepts and receives) and the request handlers
 * (requests/), which answer through it and never through server.c.
 */
#ifndef KVP_CONN_H
#define KVP_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "client/hset.h"
#include "daemon/loop/loop.h"
#include "daemon/observe/hist.h"
#include "daemon/options.h"
#include "daemon/requests/access.h"
#include "daemon/store/backend.h"
#include "daemon/store/lease.h"
#include "daemon/store/namespace.h"
#include "daemon/store/pool.h"
#include "daemon/tiers/save.h"

enum conn_state {
	CONN_OPEN,	/* a receive is posted; requests are served */
	CONN_REFUSED,	/* over max-clients: the first request gets LIMIT */
	CONN_CLOSING,	/* shut down; freed when its last operation completes */
};

/* One queued reply, with an fd to pass along (SCM_RIGHTS) or -1. The fd
 * is borrowed (a slab's memfd), never closed by the send. */
struct outbuf {
	struct outbuf *next;
	size_t len;
	int fd;
	uint8_t data[];
};

struct conn {
	struct server *srv;
	struct conn *prev, *next;	/* srv->conns */
	enum conn_state state;
	int fd;
	uint64_t id;			/* 1, 2, ... in order of arrival */
	struct ucred cred;		/* peer's pid, uid, gid at connect */
	unsigned ops;			/* loop operations in flight */
	char name[KVP_CLIENT_NAME_MAX];	/* from HELLO */
	/* the protocol version of its first message, which every reply
	 * carries and every request must: KVP_WIRE_VERSION_MIN ..
	 * KVP_WIRE_VERSION; 0 before it */
	uint16_t proto;

	bool hello_done;		/* HELLO answered; ns set if it named one */
	struct ns *ns;			/* joined namespace or NULL */
	struct lease_set leases;	/* page handle -> leases held */

	struct loop_op recv_op;
	struct msghdr rmsg;
	struct iovec riov;
	uint8_t *rbuf;			/* srv->opt->max_msg_size bytes */
	union {				/* ancillary data a client sent */
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 8)];
	} rctl;

	struct loop_op send_op;
	struct msghdr smsg;
	struct iovec siov;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} sctl;
	struct outbuf *out_head, *out_tail;
	size_t out_bytes;		/* queued, not yet sent (--max-output) */
	uint64_t last_ms;		/* last request received (--idle-timeout) */
	uint64_t req_ns;		/* when the request being served arrived */
	bool sending;
	bool close_after_send;		/* a fatal error reply is queued */
	bool refused;			/* counted in nrefused, not nconns */
	bool per_uid;			/* refused at --max-clients-per-uid */
	bool deferred;			/* a request waits for I/O: no receive */
	bool remote_tried;		/* the waiting ACQUIRE asked the remote tier */
	/* the ACQUIRE's blocks from this one on came back from the remote
	 * tier (SOURCES), until its reply; UINT32_MAX: none */
	uint32_t remote_from;
	bool admin;			/* admin of every namespace */
	struct access_peer peer;	/* uid, gid and groups, for the rules */
	unsigned rights;		/* ACCESS_* in its namespace */
	struct conn *wait_next;		/* ns->wait_head list */
	struct kvp_wire_hdr wait_req;	/* the request that waits (payload in rbuf) */
	/* an ACQUIRE that waits for keys (requests/wait.c): indexed by the
	 * first key it lacks (srv->kwait_buckets) and queued by when it is
	 * next due (srv->kwait_heap) until its deadline (0: none; a reply ends
	 * it), with a poll of the socket in flight that hears the client hang
	 * up meanwhile */
	struct conn *kwait_hnext, **kwait_hprev;	/* its bucket's chain */
	uint32_t kwait_hidx;		/* its place in the heap */
	uint32_t kwait_from;		/* its keys found in order before... */
	uint8_t kwait_key[KVP_KEY_BYTES];	/* ...this one, which it lacks */
	/* a wait for a handoff (KVP_WIRE_ACQ_HANDOFF) is indexed by the
	 * handoff's key too (srv->kwait_tbuckets) */
	struct conn *kwait_tnext, **kwait_tprev;
	uint8_t kwait_handoff[KVP_KEY_BYTES];
	bool kwait_has_handoff;
	bool kwait_handoff_gone;	/* its handoff was abandoned (until the reply) */
	uint64_t kwait_deadline;
	uint64_t kwait_poll_at;		/* when it is served again to look (0: never) */
	uint32_t kwait_poll_ms;		/* the interval it is asked again at */
	bool kwait;
	bool kwait_polling;
	struct loop_op kwait_poll_op;
	/* the handoffs it was issued tickets for (requests/handoff.c): when
	 * it hangs up before publishing one's last key, that key is
	 * abandoned; its last CONN_TICKETS, allocated at its first ISSUE */
	struct conn_ticket *tickets;
	uint32_t ticket_next;
	uint64_t evicted;		/* pages an EVICT moved before it waited */
	uint64_t connected_ms;		/* server uptime when it connected */
};

/* Connections of one uid, for --max-clients-per-uid, and its ACQUIREs
 * that wait for keys, for --max-waits-per-uid. */
struct uid_conns {
	uid_t uid;
	uint32_t n;
	uint32_t waits;
};

/* Counters of STATS, kept where the events happen. */
struct server_counters {
	uint64_t connections_total;
	uint64_t connections_refused;
	uint64_t requests_total;
	uint64_t protocol_errors;
	uint64_t allocs;
	uint64_t releases;
	uint64_t retains;
	uint64_t closed_output;		/* disconnected at --max-output */
	uint64_t closed_idle;		/* disconnected at --idle-timeout */
	uint64_t kwaits_expired;	/* ACQUIREs whose wait for keys ended at its
					 * deadline, keys lacking (/metrics) */
	uint64_t kwaits_refused;	/* ... refused at --max-waits-per-uid */
	uint64_t kwaits_abandoned;	/* ... answered at once: a key it lacked
					 * was abandoned (HANDOFF ABANDON) */
	uint64_t tickets_issued;	/* HANDOFF ISSUEs answered */
	uint64_t tickets_refused;	/* HANDOFF CHECKs refused (forged, expired) */
	uint64_t keys_abandoned;	/* HANDOFF ABANDONs */
	uint64_t handoffs_orphaned;	/* handoffs abandoned because the client
					 * issued their ticket hung up first */
	uint64_t errors_by_status[KVP_S__COUNT];
	/* /metrics' latency histograms: each request, arrival to reply (a
	 * request that waits, for a tier, the remote tier or a namespace, with
	 * its wait), by op; each block read back from a tier, read to lease */
	struct hist rt[KVP_OP_HANDOFF + 1];
	struct hist restores;
};

struct server {
	struct loop *loop;
	const struct options *opt;
	struct backend *be;
	struct pool *pool;
	struct ns_table nst;
	struct ns_config keys;		/* key settings for new namespaces */
	struct events *events;		/* --kv-events, or NULL */
	struct remote *remote;		/* --remote, or NULL */
	gid_t admin_gid;		/* --admin-group, or -1 */
	struct access_rule rules[OPTIONS_ACCESS_MAX];	/* --access */
	unsigned nrules;
	char shares[OPTIONS_SHARE_MAX][ACCESS_RULE_MAX];	/* --remote-share */
	int listen_fd;
	int lock_fd;			/* flock on SOCKET.lock, held for life */
	int spill_lock_fd;		/* flock on SPILL_DIR/kvpool.lock, or -1
					 * (compose.c's) */
	bool activated;			/* listen_fd came from systemd: not ours to unlink */
	void (*on_shutdown)(void *);	/* server_on_shutdown() */
	void *on_shutdown_arg;
	bool accepting;			/* accept_op is in flight */
	bool shutting_down;
	struct loop_op accept_op;
	struct loop_op cancel_op;
	struct loop_op idle_op;		/* the --idle-timeout sweep */
	struct loop_op idle_cancel_op;
	struct __kernel_timespec idle_ts;
	bool idle_armed;
	/* ACQUIREs that wait for keys (requests/wait.c): by the key each
	 * lacks (a hash table under a secret key), by when each is next due
	 * (a heap), and the timer of the first (armed while there is one) */
	struct conn **kwait_buckets;	/* [kwait_nbuckets], a power of two */
	struct conn **kwait_tbuckets;	/* [kwait_nbuckets], by handoff key */
	uint32_t kwait_nbuckets;
	uint8_t kwait_seed[16];
	struct conn **kwait_heap;	/* [kwait_n] of [kwait_cap] */
	uint32_t kwait_n, kwait_cap;
	uint64_t kwait_poll_sec;	/* the second the polls below were in */
	uint32_t kwait_polls;
	struct loop_op kwait_op;
	struct loop_op kwait_cancel_op;
	struct __kernel_timespec kwait_ts;
	uint64_t kwait_at;
	bool kwait_armed;
	bool kwait_cancelling;
	/* the key of handoff tickets (requests/handoff.c): random, or
	 * made from --remote-key-file (compose.c) */
	uint8_t ticket_key[32];
	struct save save;		/* the stop's save (tiers/save.c) */
	struct conn *conns;
	uint32_t nconns;		/* served clients, CONN_OPEN or closing */
	/* served clients by the protocol version they speak, from
	 * KVP_WIRE_VERSION_MIN (a rolling upgrade's progress) */
	uint32_t nproto[KVP_WIRE_VERSION - KVP_WIRE_VERSION_MIN + 1];
	struct uid_conns *uids;		/* [nuids] served clients by uid; a few
					 * users, so searched in order */
	uint32_t nuids, cap_uids;
	size_t out_total;		/* replies queued, all clients (--max-output-total) */
	uint32_t nrefused;		/* CONN_REFUSED or closing after it */
	uint64_t next_conn_id;
	uint64_t start_ms;
	/* refused HELLOs said in the log: each cause (its text) once, and at
	 * most REFUSALS_PER_MIN new ones a minute (requests.c) */
	uint64_t refusals_said[64];
	unsigned refusals_next, refusals_in_min;
	uint64_t refusals_min_ns;
	struct spare_job *spare_jobs[2];	/* [POOL_MAX_MEM]: slabs being made
						 * ahead (compose.c) */
	struct server_counters n;
	/* Hooks that go up, set by the module above (server_init() sets
	 * conn_gone; the composition root, daemon/compose.c, the others). */
	/* dispatch() - serve one request of c (requests_handle()): how
	 * server.c hands over each request it received, and the continuation
	 * a request that waited is served again through (requests/wait.c) */
	void (*dispatch)(struct conn *c, const struct kvp_wire_hdr *req,
			 const uint8_t *payload);
	/* conn_gone(c) - c is being freed (unlinked, its replies dropped):
	 * how conn.c tells server.c, which frees its place in the limits */
	void (*conn_gone)(struct conn *c);
	/* forget(c) - what requests/ keeps of c goes: its leases, its
	 * namespace (requests_conn_gone()); called first by conn_gone */
	void (*forget)(struct conn *c);
	/* stop_waits(s) - the stop's last steps above the server, once no
	 * connection, accept or timer is left (the save on stop, the remote
	 * tier's last writes): true while one still goes on, and it calls
	 * server_maybe_done() when it ends; false lets the loop drain */
	bool (*stop_waits)(struct server *s);
};

/* --- conn.c -------------------------------------------------------------- */

/*
 * conn_reply() - queue a reply to req with status and payload (copied),
 * passing fd (borrowed, -1 for none). A failed allocation closes the
 * connection: the client sees EPIPE rather than no answer.
 */
void conn_reply(struct conn *c, const struct kvp_wire_hdr *req, uint32_t status,
		const void *payload, size_t len, int fd);

/* conn_error() - reply with an error status and a message (also logged
 * at debug level); the connection stays open. Counts the error. */
void conn_error(struct conn *c, const struct kvp_wire_hdr *req, uint32_t status,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* conn_fatal() - reply with status and why, then close the connection. */
void conn_fatal(struct conn *c, const struct kvp_wire_hdr *req, uint32_t status,
		const char *why);

/* conn_hold() / conn_put() - keep c alive across an operation or an I/O
 * that will answer one of its requests; conn_put() returns true when c
 * was freed (and must not be touched again). */
void conn_hold(struct conn *c);
bool conn_put(struct conn *c);

/* conn_closing() - c is shutting down: answer nothing more. */
bool conn_closing(const struct conn *c);

/* conn_post_recv() - post c's one receive (its completion is recv_op's,
 * set by whoever made c). A full ring closes c. */
void conn_post_recv(struct conn *c);

/* conn_resume() - the deferred request was answered: receive the next. */
void conn_resume(struct conn *c);

/*
 * conn_close() - move c to CONN_CLOSING. The shutdown makes the posted
 * receive (and any send) complete; the last completion frees c (after
 * srv->conn_gone(c)). Its unsent replies go at once.
 */
void conn_close(struct conn *c);

/* conn_kick() - close c (an admin's DISCONNECT, a dropped namespace),
 * telling it why (a notice, KVP_WIRE_NOTICE_ID); its leases go back. */
void conn_kick(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KVP_CONN_H */
