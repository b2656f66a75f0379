/* SPDX-License-Identifier: MIT */
/*
 * check_model.c - the model-based test: a real kvpoold with a tiny pool, a
 * tiny host tier and a tiny NVMe tier, several client processes, and a
 * reference model of pool, index and tiers kept here.
 *
 * The driver (this process) draws each step from a seeded generator and
 * has one worker process carry it out over its own kvp_client: allocs
 * (that fit and that cannot), publishes and partial publishes, acquires
 * of full and partial prefixes, copies on write, retains, releases (of
 * handles held and of stale ones), evictions, damaged NVMe tier slots
 * (a flipped byte of a header or a page), kill -9 of a worker (idle
 * or in the middle of a request), SIGKILL of the daemon and clean stops,
 * each followed by a warm restart on the same spill files. The rates of
 * the kinds of step are drawn from the seed too.
 *
 * After every step:
 *   - conservation holds and the daemon's recount agrees;
 *   - private and shared pages, and the prefix counters (acquires, hits,
 *     misses, publishes, dedups, copies), are what the model says;
 *   - every indexed block is one the model published, at its depth, with
 *     its parent indexed and not in a lower tier (no holes);
 *   - every byte served (acquire, dedup, copy) is what its publisher
 *     wrote (each block's bytes follow from its key, in every process).
 * And per kind of step: an acquire serves no less than the leading blocks
 * someone holds and no more than was ever published; an alloc or a copy
 * that fits succeeds, one that does not returns -ENOSPC and changes
 * nothing (counts, tiers, index); a stale release returns -ESTALE and
 * changes nothing; a warm restart after SIGKILL keeps every chain that
 * was wholly in the NVMe tier (when its writes had ended) and has no
 * damaged slot, and one after
 * a clean stop keeps all that was indexed when it fits the tier, else
 * all the pool and the host tier held when that fits.
 *
 * The steps are replayable from the seed (KVPOOL_MODEL_SEED; printed at
 * the start and on failure); the daemon's timing (writes in flight) is
 * not, so a replay takes the same steps, not always the same daemon
 * states. KVPOOL_MODEL_SECONDS sets each loop's run (default 10: about
 * 20 s for both in `make check`). Both loops: io_uring (where the kernel
 * has it) and KVPOOL_IO=sync, a test case each (CK_RUN_CASE=sync).
 *
 * Past 800 lines on purpose: the model of pool, index and tiers and the
 * driver that holds the daemon to it are one program.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"

#define BT	16u		/* tokens a block */
#define PAGE	16384u		/* 2 x 2 layers x 2 heads x 64 x 16 tokens x f16 */
#define NW	3		/* workers */
#define NCH	40		/* chains */
#define LEN	10		/* full blocks a chain */
#define MAXP	160		/* pages in one command */
#define MAXH	1024		/* handles the model tracks */
#define NS	"model"

static const kvp_geometry geo = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = BT,
	.dtype = KVP_DTYPE_F16, .model = "test/model",
};

/* --- what is common to driver and workers ---------------------------------- */

/* partial_key() - the identity a partial page's bytes follow from: its
 * parent's key and its tokens. */
static kvp_key partial_key(const kvp_key *parent, const uint32_t *tok, uint32_t n)
{
	kvp_key k = *parent;
	uint64_t h = 1469598103934665603ull;
	uint32_t i;

	for (i = 0; i < n; i++)
		h = (h ^ tok[i]) * 1099511628211ull;
	h ^= n;
	for (i = 0; i < 8; i++)
		k.b[i] ^= (uint8_t)(h >> (8 * i));
	k.b[31] ^= 0xa5;
	return k;
}

enum wop { W_ALLOC = 1, W_PUBLISH, W_PARTIAL, W_ACQUIRE, W_COW, W_RETAIN, W_RELEASE };

struct cmd {
	uint32_t op;
	uint32_t n;		/* pages or keys */
	uint32_t ntok;
	uint32_t has_parent;
	kvp_key parent;
	kvp_key keys[LEN];
	kvp_page pages[MAXP];
	uint32_t tokens[(LEN + 1) * BT];
};

struct res {
	int32_t rc;
	int32_t bad;		/* a page with other bytes than its key's: index + 1 */
	kvp_partial partial;
	kvp_page pages[MAXP];
	char why[256];
};

/* worker() - carry out commands on fd until it closes. */
static void worker(const char *sock, int fd)
{
	static struct cmd m;
	static struct res r;
	kvp_client *c;
	kvp_key root, pk;
	const kvp_key *up;
	uint32_t i;
	void *p;
	int rc;

	rc = kvp_connect(sock, NS, &geo, &c);
	if (rc < 0) {
		fprintf(stderr, "model worker: connect: %s: %s\n", kvp_strerror(rc),
			kvp_last_error());
		_exit(10);
	}
	kvp_root_key(c, &root);
	if (write(fd, &rc, sizeof(rc)) != sizeof(rc))	/* connected */
		_exit(11);
	while (read(fd, &m, sizeof(m)) == (ssize_t)sizeof(m)) {
		memset(&r, 0, sizeof(r));
		up = m.has_parent ? &m.parent : NULL;
		switch (m.op) {
		case W_ALLOC:
			r.rc = kvp_alloc(c, m.n, r.pages);
			break;
		case W_PUBLISH:
			for (i = 0; i < m.n; i++)
				harness_fill(kvp_page_ptr(c, m.pages[i]), PAGE, &m.keys[i]);
			r.rc = kvp_publish(c, up, m.pages, m.keys, m.n, KVP_PRIO_NORMAL, r.pages);
			for (i = 0; r.rc == 0 && i < m.n && !r.bad; i++)
				if (!harness_holds(kvp_page_ptr(c, r.pages[i]), PAGE, &m.keys[i]))
					r.bad = (int32_t)i + 1;
			break;
		case W_PARTIAL:
			pk = partial_key(up ? up : &root, m.tokens, m.ntok);
			harness_fill(kvp_page_ptr(c, m.pages[0]), PAGE, &pk);
			r.rc = kvp_publish_partial(c, up, m.pages[0], m.tokens, m.ntok,
						   KVP_PRIO_NORMAL, r.pages);
			if (r.rc == 0 && !harness_holds(kvp_page_ptr(c, r.pages[0]), PAGE, &pk))
				r.bad = 1;
			break;
		case W_ACQUIRE:
			r.rc = kvp_acquire(c, up, m.keys, m.n, m.tokens, m.ntok, r.pages,
					   &r.partial);
			for (i = 0; r.rc > 0 && i < (uint32_t)r.rc && !r.bad; i++)
				if (!harness_holds(kvp_page_ptr(c, r.pages[i]), PAGE, &m.keys[i]))
					r.bad = (int32_t)i + 1;
			if (r.rc >= 0 && r.partial.tokens && !r.bad) {
				const kvp_key *pp = r.rc ? &m.keys[r.rc - 1] : up ? up : &root;

				pk = partial_key(pp, m.tokens + (size_t)r.rc * BT, r.partial.tokens);
				if (!harness_holds(kvp_page_ptr(c, r.partial.page), PAGE, &pk))
					r.bad = (int32_t)r.rc + 1;
			}
			break;
		case W_COW:
			r.rc = kvp_cow(c, m.pages, m.n, r.pages);
			for (i = 0; r.rc == 0 && i < m.n && !r.bad; i++) {
				p = kvp_page_ptr(c, r.pages[i]);
				if (!p || memcmp(p, kvp_page_ptr(c, m.pages[i]), PAGE))
					r.bad = (int32_t)i + 1;
			}
			break;
		case W_RETAIN:
			r.rc = kvp_retain(c, m.pages, m.n);
			break;
		case W_RELEASE:
			r.rc = kvp_release(c, m.pages, m.n);
			break;
		default:
			_exit(12);
		}
		snprintf(r.why, sizeof(r.why), "%s", kvp_last_error());
		if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(11);
	}
	kvp_close(c);
	_exit(0);
}

/* --- the model ------------------------------------------------------------ */

struct blk {
	kvp_key key;
	int depth;		/* 1: a first block */
	int parent;		/* -1: the root */
	bool ever;		/* published at some time (or maybe: a killed request) */
	bool partial_ever;	/* a partial page published under it */
	bool damaged;		/* a tier slot of it was damaged (see damage()) */
};

/* A page someone holds: its leases by worker. */
struct hp {
	kvp_page h;
	bool used;
	bool published;
	int blk;		/* the block it holds: -1 none (private), -2 a partial page */
	int pblk;		/* a partial page's parent block, -1 the root */
	uint32_t leases[NW];
};

struct wk {
	pid_t pid;
	int fd;
};

struct counters {
	uint64_t acquires, hits, misses, publishes, dedups, cows;
};

struct model {
	struct daemon d;
	const char **args;
	uint64_t seed, rng;
	kvp_client *c;			/* the driver's own session */
	kvp_key root;
	uint64_t pool_pages;
	uint64_t nvme_slots;
	struct blk blk[NCH * LEN];
	int nblk;
	int chain[NCH][LEN];		/* block index of chain c's block j */
	uint32_t tok[NCH][(LEN + 1) * BT];
	bool root_partial_ever;
	struct hp hp[MAXH];
	struct wk w[NW];
	kvp_page stale[64];		/* handles released, for stale releases */
	int nstale;
	struct counters want;
	unsigned weight[16];
	unsigned long long kept;	/* entries a restart had to keep, and kept */
	unsigned steps, kills, mid_kills, crashes, stops, nospc, stales, evicted, damaged;
	unsigned long long served, acquired;
	/* tier counters summed over the daemon's lives */
	uint64_t nvme_spills, nvme_restores, nvme_dropped, host_spills, host_restores;
	char last[160];			/* the step being checked */
};

static struct cmd cmd;
static struct res res;

static uint64_t rnd(struct model *m)
{
	/* splitmix64 */
	uint64_t z = (m->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned below(struct model *m, unsigned n)
{
	return n ? (unsigned)(rnd(m) % n) : 0;
}

#define model_fail(m, ...)                                                          \
	ck_abort_msg("seed %" PRIu64 ", step %u (%s): %s", (m)->seed, (m)->steps,  \
		     (m)->last, (snprintf(msgbuf, sizeof(msgbuf), __VA_ARGS__), msgbuf))
#define need(m, cond, ...)                                                    \
	do {                                                                  \
		if (!(cond))                                                  \
			model_fail(m, __VA_ARGS__);                                 \
	} while (0)
static char msgbuf[1024];

static int blk_find8(const struct model *m, const uint8_t *k8)
{
	int i;

	for (i = 0; i < m->nblk; i++)
		if (!memcmp(m->blk[i].key.b, k8, 8))
			return i;
	return -1;
}

/* chains() - NCH chains of LEN blocks and a tail block; a chain shares its
 * first blocks with an earlier one two times in three (a tree of
 * prefixes, as system prompts and chat turns make). */
static void chains(struct model *m)
{
	kvp_key keys[LEN];
	int c, j, s, b;

	m->nblk = 0;
	for (c = 0; c < NCH; c++) {
		uint32_t *t = m->tok[c];

		s = 0;
		if (c && below(m, 3)) {
			s = 1 + (int)below(m, LEN - 1);
			memcpy(t, m->tok[below(m, (unsigned)c)], (size_t)s * BT * sizeof(*t));
		}
		for (j = s * (int)BT; j < (LEN + 1) * (int)BT; j++)
			t[j] = (uint32_t)(1000 + c * 1000 + j);
		ck_assert_int_eq(kvp_block_keys(m->c, NULL, t, LEN * BT, NULL, 0, keys), LEN);
		for (j = 0; j < LEN; j++) {
			b = blk_find8(m, keys[j].b);
			if (b < 0) {
				b = m->nblk++;
				m->blk[b] = (struct blk){ .key = keys[j], .depth = j + 1,
							  .parent = j ? m->chain[c][j - 1] : -1 };
			}
			ck_assert_msg(!memcmp(m->blk[b].key.b, keys[j].b, sizeof(keys[j].b)),
				      "two keys with the same first 8 bytes");
			m->chain[c][j] = b;
		}
	}
}

static struct hp *hp_find(struct model *m, kvp_page h)
{
	int i;

	for (i = 0; i < MAXH; i++)
		if (m->hp[i].used && m->hp[i].h == h)
			return &m->hp[i];
	return NULL;
}

static struct hp *hp_get(struct model *m, kvp_page h)
{
	struct hp *p = hp_find(m, h);
	int i;

	if (p)
		return p;
	for (i = 0; i < MAXH; i++)
		if (!m->hp[i].used) {
			m->hp[i] = (struct hp){ .h = h, .used = true, .blk = -1 };
			return &m->hp[i];
		}
	ck_abort_msg("the model tracks more than %d pages", MAXH);
	return NULL;
}

static uint32_t hp_total(const struct hp *p)
{
	uint32_t n = 0;
	int i;

	for (i = 0; i < NW; i++)
		n += p->leases[i];
	return n;
}

static void lease(struct model *m, int w, kvp_page h, int blk, int pblk)
{
	struct hp *p = hp_get(m, h);

	p->leases[w]++;
	if (blk != -1) {
		p->published = true;
		p->blk = blk;
		p->pblk = pblk;
	}
}

/* someone_holds() - a live worker leases block b's page. */
static bool someone_holds(const struct model *m, int b)
{
	int i;

	for (i = 0; i < MAXH; i++)
		if (m->hp[i].used && m->hp[i].published && m->hp[i].blk == b &&
		    hp_total(&m->hp[i]))
			return true;
	return false;
}

static void unlease(struct model *m, int w, kvp_page h)
{
	struct hp *p = hp_find(m, h);

	ck_assert_ptr_nonnull(p);
	ck_assert_uint_gt(p->leases[w], 0);
	p->leases[w]--;
	if (!hp_total(p)) {
		p->used = false;
		m->stale[m->nstale++ % 64] = h;
	}
}

/* leased() - distinct pages someone holds; private ones into *priv. */
static uint64_t leased(const struct model *m, uint64_t *priv)
{
	uint64_t n = 0, pr = 0;
	int i;

	for (i = 0; i < MAXH; i++)
		if (m->hp[i].used && hp_total(&m->hp[i])) {
			n++;
			pr += !m->hp[i].published;
		}
	if (priv)
		*priv = pr;
	return n;
}

/* held() - worker w's leased handles (one entry per lease) into out. */
static uint32_t held(const struct model *m, int w, kvp_page *out, uint32_t max)
{
	uint32_t n = 0, k;
	int i;

	for (i = 0; i < MAXH; i++)
		for (k = 0; m->hp[i].used && k < m->hp[i].leases[w] && n < max; k++)
			out[n++] = m->hp[i].h;
	return n;
}

/* --- workers -------------------------------------------------------------- */

static void spawn(struct model *m, int w)
{
	int sv[2], rc;
	pid_t pid;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(sv[0]);
		worker(m->d.sock, sv[1]);
	}
	close(sv[1]);
	m->w[w] = (struct wk){ .pid = pid, .fd = sv[0] };
	ck_assert_msg(read(sv[0], &rc, sizeof(rc)) == sizeof(rc), "worker %d did not connect", w);
}

static void forget_worker(struct model *m, int w)
{
	int i;

	for (i = 0; i < MAXH; i++) {
		if (!m->hp[i].used)
			continue;
		m->hp[i].leases[w] = 0;
		if (!hp_total(&m->hp[i]))
			m->hp[i].used = false;
	}
}

static void reap(struct model *m, int w)
{
	int st;

	kill(m->w[w].pid, SIGKILL);
	ck_assert_int_eq(waitpid(m->w[w].pid, &st, 0), m->w[w].pid);
	close(m->w[w].fd);
	m->w[w].pid = 0;
	forget_worker(m, w);
}

/* send_cmd() / call() - one command to worker w; call() waits for it. */
static void send_cmd(struct model *m, int w)
{
	ck_assert_int_eq(write(m->w[w].fd, &cmd, sizeof(cmd)), (ssize_t)sizeof(cmd));
	(void)m;
}

static int call(struct model *m, int w)
{
	ssize_t n;

	send_cmd(m, w);
	n = read(m->w[w].fd, &res, sizeof(res));
	need(m, n == (ssize_t)sizeof(res), "worker %d died", w);
	need(m, !res.bad, "worker %d was served other bytes than were published, page %d",
	     w, res.bad - 1);
	need(m, res.rc != -EPIPE && res.rc != -ECONNRESET, "the daemon closed worker %d: %s",
	     w, res.why);
	return res.rc;
}

/* --- what the daemon says -------------------------------------------------- */

struct snap {
	kvp_stats_t st;
	kvp_ns_stats_t ns;
	uint64_t index;		/* a digest of the index: keys, depths, states */
	uint32_t entries;
};

static struct kvp_wire_prefix pfx[8192];

static void snap_of(struct model *m, struct snap *s)
{
	int n, i;

	memset(s, 0, sizeof(*s));
	n = kvp_stats(m->c, &s->st, &s->ns, 1);
	need(m, n == 1, "STATS: %d namespaces (%s)", n, kvp_last_error());
	n = kvp_list_prefixes(m->c, NS, 0, pfx, 8192, &s->entries);
	need(m, n >= 0 && (uint32_t)n == s->entries, "LIST_PREFIXES: %d of %u", n, s->entries);
	for (i = 0; i < n; i++) {
		uint64_t k;

		memcpy(&k, pfx[i].key, 8);
		s->index += (k ^ ((uint64_t)pfx[i].depth << 48) ^ pfx[i].state) *
			    0x9e3779b97f4a7c15ull;
	}
}

/* tier() - 0 the pool, 1 the host tier, 2 the NVMe tier (or on its way) */
static int tier(uint32_t state)
{
	return state == KVP_PAGE_HOST ? 1 :
	       state == KVP_PAGE_SPILLED || state == KVP_PAGE_INFLIGHT ? 2 : 0;
}

static const char *state_name(uint32_t s)
{
	static const char *const n[] = { "?", "private", "shared", "cached",
					 "in flight", "spilled", "host" };

	return s < 7 ? n[s] : "?";
}

/* check() - the invariants of every step. */
static void check(struct model *m, struct snap *s)
{
	static int at[NCH * LEN];	/* entry of a block's full page, -1 none */
	uint64_t sum, priv, lsd;
	int i, b, n;

	snap_of(m, s);
	sum = s->st.pages_free + s->st.pages_private + s->st.pages_shared +
	      s->st.pages_cached + s->st.pages_spilled + s->st.pages_inflight;
	need(m, sum == s->st.pages_total, "conservation: %" PRIu64 " != total %" PRIu64,
	     sum, s->st.pages_total);
	need(m, s->st.flags & KVP_STATS_F_CONSERVED, "the daemon's recount disagrees");
	lsd = leased(m, &priv);
	need(m, s->ns.pages_private == priv && s->ns.pages_shared == lsd - priv,
	     "private %" PRIu64 ", shared %" PRIu64 "; the model: %" PRIu64 ", %" PRIu64,
	     s->ns.pages_private, s->ns.pages_shared, priv, lsd - priv);
	need(m, s->ns.prefix.acquires == m->want.acquires && s->ns.prefix.hits == m->want.hits &&
	     s->ns.prefix.misses == m->want.misses && s->ns.prefix.publishes == m->want.publishes &&
	     s->ns.prefix.dedups == m->want.dedups && s->ns.prefix.cows == m->want.cows,
	     "counters acquires %" PRIu64 " hits %" PRIu64 " misses %" PRIu64 " publishes %"
	     PRIu64 " dedups %" PRIu64 " cows %" PRIu64 "; the model: %" PRIu64 " %" PRIu64
	     " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
	     s->ns.prefix.acquires, s->ns.prefix.hits, s->ns.prefix.misses,
	     s->ns.prefix.publishes, s->ns.prefix.dedups, s->ns.prefix.cows,
	     m->want.acquires, m->want.hits, m->want.misses, m->want.publishes,
	     m->want.dedups, m->want.cows);

	/* the index: each entry a block (or a partial page) the model
	 * published, at its depth, behind its parent in a tier no lower */
	n = (int)s->entries;
	for (b = 0; b < m->nblk; b++)
		at[b] = -1;
	for (i = 0; i < n; i++) {
		b = blk_find8(m, pfx[i].key);
		if (b >= 0 && (int)pfx[i].depth == m->blk[b].depth) {
			need(m, m->blk[b].ever, "block %d (depth %d) is indexed but was never "
			     "published", b, m->blk[b].depth);
			need(m, at[b] < 0, "block %d is indexed twice", b);
			at[b] = i;
		}
	}
	for (i = 0; i < n; i++) {
		int parent, pe;
		bool partial;

		b = blk_find8(m, pfx[i].key);
		if (b >= 0 && at[b] == i) {
			partial = false;
			parent = m->blk[b].parent;
		} else if (b >= 0 && (int)pfx[i].depth == m->blk[b].depth + 1) {
			partial = true;		/* keyed by its parent */
			parent = b;
			need(m, m->blk[b].partial_ever, "a partial page under block %d that "
			     "was never published", b);
		} else if (!memcmp(pfx[i].key, m->root.b, 8) && pfx[i].depth == 1) {
			partial = true;
			parent = -1;
			need(m, m->root_partial_ever, "a partial page under the root that "
			     "was never published");
		} else {
			model_fail(m, "entry %d (depth %u, %s) is no block the model published at "
			     "its depth%s", i, pfx[i].depth, state_name(pfx[i].state),
			     b >= 0 ? ": a block before it is gone (a hole)" : "");
		}
		if (parent < 0)
			continue;
		pe = at[parent];
		need(m, pe >= 0, "%s %d (depth %u, %s) sits behind block %d, which is not "
		     "indexed (a hole)", partial ? "a partial page under block" : "block",
		     partial ? parent : b, pfx[i].depth, state_name(pfx[i].state), parent);
		need(m, tier(pfx[pe].state) <= tier(pfx[i].state),
		     "%s %d is %s but its parent %d is %s: a parent in a lower tier",
		     partial ? "a partial page under block" : "block", partial ? parent : b,
		     state_name(pfx[i].state), parent, state_name(pfx[pe].state));
	}
}

/* settle() - until nothing is being written and two looks agree. */
static void settle(struct model *m, struct snap *s)
{
	struct snap t;
	int i;

	for (i = 0; i < 2000; i++) {
		snap_of(m, s);
		if (!s->ns.pages_inflight && !s->ns.nvme.writing) {
			usleep(1000);
			snap_of(m, &t);
			if (!memcmp(&t.ns, &s->ns, sizeof(t.ns)) && t.index == s->index)
				return;
		}
		usleep(1000);
	}
	model_fail(m, "the daemon did not settle in 4 s");
}

/* same() - a failed request changed nothing. */
static void same(struct model *m, const struct snap *a, const char *what)
{
	struct snap b;

	usleep(2000);	/* what it might have set going */
	snap_of(m, &b);
	need(m, b.ns.pages_free == a->ns.pages_free && b.ns.pages_cached == a->ns.pages_cached &&
	     b.ns.pages_spilled == a->ns.pages_spilled &&
	     b.ns.pages_inflight == a->ns.pages_inflight &&
	     b.ns.pages_private == a->ns.pages_private &&
	     b.ns.pages_shared == a->ns.pages_shared && b.ns.host.used == a->ns.host.used &&
	     b.ns.nvme.used == a->ns.nvme.used && b.ns.prefix.evictions == a->ns.prefix.evictions &&
	     b.entries == a->entries && b.index == a->index,
	     "%s changed the pool: free %" PRIu64 "->%" PRIu64 ", cached %" PRIu64 "->%" PRIu64
	     ", spilled %" PRIu64 "->%" PRIu64 ", host %" PRIu64 "->%" PRIu64 ", nvme %" PRIu64
	     "->%" PRIu64 ", evictions %" PRIu64 "->%" PRIu64 ", entries %u->%u", what,
	     a->ns.pages_free, b.ns.pages_free, a->ns.pages_cached, b.ns.pages_cached,
	     a->ns.pages_spilled, b.ns.pages_spilled, a->ns.host.used, b.ns.host.used,
	     a->ns.nvme.used, b.ns.nvme.used, a->ns.prefix.evictions, b.ns.prefix.evictions,
	     a->entries, b.entries);
}

/* room() - pages an alloc may have: the pool less what is leased and
 * less the cached blocks before a leased one (they stay in the pool:
 * eviction takes leaves, and a parent never goes below its child). */
static uint64_t room(const struct model *m)
{
	static bool held_b[NCH * LEN], before[NCH * LEN];
	uint64_t n = 0;
	int i, b;

	memset(held_b, 0, sizeof(held_b));
	memset(before, 0, sizeof(before));
	for (i = 0; i < MAXH; i++) {
		const struct hp *p = &m->hp[i];

		if (!p->used || !p->published || !hp_total(p))
			continue;
		if (p->blk >= 0)
			held_b[p->blk] = true;
		for (b = p->blk >= 0 ? m->blk[p->blk].parent : p->pblk; b >= 0 && !before[b];
		     b = m->blk[b].parent)
			before[b] = true;
	}
	for (b = 0; b < m->nblk; b++)
		n += before[b] && !held_b[b];
	return m->pool_pages - leased(m, NULL) - n;
}

/* --- steps ---------------------------------------------------------------- */

static void release_some(struct model *m, int w, bool all)
{
	kvp_page h[MAXP];
	uint32_t n = held(m, w, h, MAXP), k = 0, i;

	memset(&cmd, 0, sizeof(cmd));
	for (i = 0; i < n; i++)
		if (all || below(m, 2))
			cmd.pages[k++] = h[i];
	if (!k)
		return;
	cmd.op = W_RELEASE;
	cmd.n = k;
	need(m, call(m, w) == 0, "release of %u held pages: %s", k, res.why);
	for (i = 0; i < k; i++)
		unlease(m, w, cmd.pages[i]);
}

/* alloc() - n pages for w: succeeds when they fit, else -ENOSPC and
 * nothing changes. Returns true with the handles in res.pages. */
static bool alloc(struct model *m, int w, uint32_t n)
{
	bool fits = n <= room(m);
	struct snap a;
	uint32_t i;
	int rc;

	if (!fits)
		settle(m, &a);
	memset(&cmd, 0, sizeof(cmd));
	cmd.op = W_ALLOC;
	cmd.n = n;
	rc = call(m, w);
	if (!fits) {
		need(m, rc == -ENOSPC, "alloc of %u with room for %" PRIu64 ": %d (%s)", n,
		     room(m), rc, res.why);
		same(m, &a, "a failed alloc");
		m->nospc++;
		return false;
	}
	need(m, rc == 0, "alloc of %u with room for %" PRIu64 ": %s (%s)", n, room(m),
	     kvp_strerror(rc), res.why);
	for (i = 0; i < n; i++)
		lease(m, w, res.pages[i], -1, 0);
	return true;
}

/* serve() - what a model server does with chain c's first n blocks and t
 * tokens of the next: acquire, compute and publish what missed, publish
 * the partial block. */
static void serve(struct model *m, int w, int c, uint32_t n, uint32_t t)
{
	kvp_page got[LEN], mine[LEN];
	uint32_t h, lead = 0, ever = 0, i, miss;
	kvp_partial part;
	int rc, b;

	/* what must hit: the leading blocks someone holds; what may: those
	 * ever published */
	for (i = 0; i < n; i++) {
		b = m->chain[c][i];
		if (lead == i && someone_holds(m, b))
			lead++;
		if (ever == i && m->blk[b].ever)
			ever++;
	}
	memset(&cmd, 0, sizeof(cmd));
	cmd.op = W_ACQUIRE;
	cmd.n = n;
	for (i = 0; i < n; i++)
		cmd.keys[i] = m->blk[m->chain[c][i]].key;
	cmd.ntok = n * BT + t;
	memcpy(cmd.tokens, m->tok[c], cmd.ntok * sizeof(uint32_t));
	rc = call(m, w);
	need(m, rc >= 0, "acquire of %u blocks: %s (%s)", n, kvp_strerror(rc), res.why);
	h = (uint32_t)rc;
	part = res.partial;
	memcpy(got, res.pages, h * sizeof(*got));
	m->want.acquires++;
	m->want.hits += h + (part.tokens != 0);
	m->want.misses += n - h;
	m->acquired += n;
	m->served += h;
	need(m, h <= ever, "acquire served %u blocks, only %u were ever published", h, ever);
	need(m, h >= lead, "acquire served %u blocks, but the first %u are held", h, lead);
	for (i = 0; i < h; i++) {
		struct hp *p = hp_find(m, got[i]);

		need(m, !p || (p->published && p->blk == m->chain[c][i]),
		     "acquire served block %u with a page that holds %s", i,
		     p && p->published ? "another block" : "no block (private)");
		lease(m, w, got[i], m->chain[c][i], 0);
	}
	if (part.tokens) {
		/* after the last block that hit, a prefix of the tokens after it */
		need(m, part.tokens < BT && h * BT + part.tokens <= n * BT + t,
		     "a partial page of %u tokens after %u hits of %u blocks + %u tokens",
		     part.tokens, h, n, t);
		lease(m, w, part.page, -2, h ? m->chain[c][h - 1] : -1);
	}
	if (h < n) {
		miss = n - h;
		if (!alloc(m, w, miss))
			return;
		memcpy(mine, res.pages, miss * sizeof(*mine));
		memset(&cmd, 0, sizeof(cmd));
		cmd.op = W_PUBLISH;
		cmd.n = miss;
		cmd.has_parent = h > 0;
		if (h)
			cmd.parent = m->blk[m->chain[c][h - 1]].key;
		for (i = 0; i < miss; i++) {
			cmd.pages[i] = mine[i];
			cmd.keys[i] = m->blk[m->chain[c][h + i]].key;
			m->blk[m->chain[c][h + i]].ever = true;
		}
		rc = call(m, w);
		need(m, rc == 0, "publish of %u blocks after %u: %s (%s)", miss, h,
		     kvp_strerror(rc), res.why);
		for (i = 0; i < miss; i++) {
			b = m->chain[c][h + i];
			if (res.pages[i] == mine[i]) {
				hp_find(m, mine[i])->published = true;
				hp_find(m, mine[i])->blk = b;
				m->want.publishes++;
			} else {
				lease(m, w, res.pages[i], b, 0);
				m->want.dedups++;
			}
		}
	}
	if (t && !(h == n && part.tokens >= t)) {
		if (!alloc(m, w, 1))
			return;
		mine[0] = res.pages[0];
		memset(&cmd, 0, sizeof(cmd));
		cmd.op = W_PARTIAL;
		cmd.pages[0] = mine[0];
		cmd.has_parent = n > 0;
		if (n)
			cmd.parent = m->blk[m->chain[c][n - 1]].key;
		cmd.ntok = t;
		memcpy(cmd.tokens, m->tok[c] + n * BT, t * sizeof(uint32_t));
		if (n)
			m->blk[m->chain[c][n - 1]].partial_ever = true;
		else
			m->root_partial_ever = true;
		rc = call(m, w);
		need(m, rc == 0, "partial publish of %u tokens: %s (%s)", t, kvp_strerror(rc),
		     res.why);
		if (res.pages[0] == mine[0]) {
			hp_find(m, mine[0])->published = true;
			hp_find(m, mine[0])->blk = -2;
			hp_find(m, mine[0])->pblk = n ? m->chain[c][n - 1] : -1;
			m->want.publishes++;
		} else {
			lease(m, w, res.pages[0], -2, n ? m->chain[c][n - 1] : -1);
			m->want.dedups++;
		}
	}
}

/* cow() - copies of up to k held pages: fits or -ENOSPC, changing nothing. */
static void cow(struct model *m, int w, uint32_t k)
{
	kvp_page h[MAXP];
	uint32_t n = held(m, w, h, MAXP), i;
	bool fits;
	struct snap a;
	int rc;

	if (!n)
		return;
	k = k < n ? k : n;
	fits = k <= room(m);
	if (!fits)
		settle(m, &a);
	memset(&cmd, 0, sizeof(cmd));
	cmd.op = W_COW;
	cmd.n = k;
	for (i = 0; i < k; i++)
		cmd.pages[i] = h[below(m, n)];
	rc = call(m, w);
	if (!fits) {
		need(m, rc == -ENOSPC, "copy of %u with room for %" PRIu64 ": %d (%s)", k,
		     room(m), rc, res.why);
		same(m, &a, "a failed copy");
		m->nospc++;
		return;
	}
	need(m, rc == 0, "copy of %u with room for %" PRIu64 ": %s (%s)", k, room(m),
	     kvp_strerror(rc), res.why);
	for (i = 0; i < k; i++)
		lease(m, w, res.pages[i], -1, 0);
	m->want.cows += k;
}

static void retain(struct model *m, int w)
{
	kvp_page h[MAXP];
	uint32_t n = held(m, w, h, MAXP), k, i;
	int rc;

	if (!n)
		return;
	k = 1 + below(m, 3);
	memset(&cmd, 0, sizeof(cmd));
	cmd.op = W_RETAIN;
	cmd.n = k;
	for (i = 0; i < k; i++)
		cmd.pages[i] = h[below(m, n)];
	rc = call(m, w);
	need(m, rc == 0, "retain of %u: %s (%s)", k, kvp_strerror(rc), res.why);
	for (i = 0; i < k; i++)
		lease(m, w, cmd.pages[i], hp_find(m, cmd.pages[i])->blk,
		      hp_find(m, cmd.pages[i])->pblk);
}

/* stale() - a release of a handle w does not hold: -ESTALE, nothing else. */
static void stale(struct model *m, int w)
{
	struct snap a;
	kvp_page h;
	struct hp *p;
	int rc;

	if (!m->nstale)
		return;
	h = m->stale[below(m, m->nstale < 64 ? (unsigned)m->nstale : 64)];
	p = hp_find(m, h);
	if (p && p->leases[w])
		return;
	settle(m, &a);
	memset(&cmd, 0, sizeof(cmd));
	cmd.op = W_RELEASE;
	cmd.n = 1;
	cmd.pages[0] = h;
	rc = call(m, w);
	need(m, rc == -ESTALE, "release of a handle not held: %d (%s)", rc, res.why);
	same(m, &a, "a stale release");
	m->stales++;
}

/* hog() - w takes every page there is room for; then an alloc and a copy
 * cannot be met; then it gives them back. */
static void hog(struct model *m, int w)
{
	uint64_t r = room(m);
	kvp_page h[MAXP];
	uint32_t i, n;

	if (!r || r > MAXP)
		return;
	if (!alloc(m, w, (uint32_t)r))
		return;
	n = (uint32_t)r;
	memcpy(h, res.pages, n * sizeof(*h));
	alloc(m, w, 1 + below(m, 4));
	cow(m, w, 1);
	memset(&cmd, 0, sizeof(cmd));
	cmd.op = W_RELEASE;
	cmd.n = n;
	memcpy(cmd.pages, h, n * sizeof(*h));
	need(m, call(m, w) == 0, "release of the hog's pages: %s", res.why);
	for (i = 0; i < n; i++)
		unlease(m, w, h[i]);
}

/* wait_clients() - until the daemon has dropped the connections it lost. */
static void wait_clients(struct model *m, uint32_t want)
{
	kvp_ns_stats_t ns;
	kvp_stats_t st;
	int i;

	for (i = 0; i < 4000; i++) {
		need(m, kvp_stats(m->c, &st, &ns, 1) == 1, "STATS: %s", kvp_last_error());
		if (ns.clients == want)
			return;
		usleep(500);
	}
	model_fail(m, "the daemon still has %u clients in the namespace, not %u", ns.clients, want);
}

/* chain_damaged() - block b or one before it had a tier slot damaged. */
static bool chain_damaged(const struct model *m, int b)
{
	for (; b >= 0; b = m->blk[b].parent)
		if (m->blk[b].damaged)
			return true;
	return false;
}

/*
 * damage() - flip a byte of one full block's slot in the NVMe tier file,
 * behind the daemon's back: in its header (the slot no longer says what it
 * holds) or in its page (the checksum no longer matches). Reading it back
 * is a miss, and the blocks below it must leave the index with it (the
 * no-holes check of every step); a restart keeps no chain through it.
 */
static void damage(struct model *m)
{
	static off_t cand[4096];
	static uint8_t hdr[128];
	char path[256];
	uint32_t ntok, n = 0;
	off_t off, size;
	uint8_t byte;
	int fd, b;

	snprintf(path, sizeof(path), "%.64s/spill/" NS ".kvspill", m->d.dir);
	fd = open(path, O_RDWR);
	need(m, fd >= 0, "%s: %s", path, strerror(errno));
	size = lseek(fd, 0, SEEK_END);
	/* slots start at 4096-byte boundaries (a 4 KiB header area, slots of
	 * 4 KiB of header and 16 KiB of page) */
	for (off = 4096; off + 4096 + PAGE <= size && n < 4096; off += 4096) {
		if (pread(fd, hdr, sizeof(hdr), off) != (ssize_t)sizeof(hdr) ||
		    memcmp(hdr, "KVPSLOT1", 8))
			continue;
		memcpy(&ntok, hdr + 112, sizeof(ntok));
		if (!ntok && blk_find8(m, hdr + 32) >= 0)
			cand[n++] = off;
	}
	if (!n) {
		close(fd);
		return;
	}
	off = cand[below(m, n)];
	need(m, pread(fd, hdr, sizeof(hdr), off) == (ssize_t)sizeof(hdr), "read %s", path);
	b = blk_find8(m, hdr + 32);
	/* header: a byte of the key; page: any byte of it */
	off += below(m, 2) ? 40 : 4096 + below(m, PAGE);
	need(m, pread(fd, &byte, 1, off) == 1, "read %s", path);
	byte ^= 0x5a;
	need(m, pwrite(fd, &byte, 1, off) == 1, "write %s", path);
	close(fd);
	if (b >= 0)
		m->blk[b].damaged = true;
	m->damaged++;
}

/* kill9() - SIGKILL worker w, idle or in the middle of a request; its
 * leases go; another takes its place. */
static void kill9(struct model *m, int w)
{
	if (below(m, 2)) {
		uint32_t c = below(m, NCH), n = 1 + below(m, LEN), i;
		kvp_page h[MAXP];
		uint32_t k = held(m, w, h, MAXP);

		/* a request on its way: a publish of what it holds, or an acquire */
		memset(&cmd, 0, sizeof(cmd));
		cmd.op = W_ACQUIRE;
		cmd.n = n;
		for (i = 0; i < n; i++)
			cmd.keys[i] = m->blk[m->chain[c][i]].key;
		if (k && below(m, 2)) {
			cmd.op = W_RETAIN;
			cmd.n = k;
			memcpy(cmd.pages, h, k * sizeof(*h));
		}
		send_cmd(m, w);
		usleep(below(m, 2000));
		m->mid_kills++;
	}
	reap(m, w);
	m->kills++;
	wait_clients(m, 0 + NW);	/* the others and this driver */
	/* the request may or may not have been carried out: count as the
	 * daemon did */
	{
		kvp_ns_stats_t ns;
		kvp_stats_t st;

		ck_assert_int_eq(kvp_stats(m->c, &st, &ns, 1), 1);
		m->want.acquires = ns.prefix.acquires;
		m->want.hits = ns.prefix.hits;
		m->want.misses = ns.prefix.misses;
	}
	spawn(m, w);
}

static void evict(struct model *m)
{
	uint64_t max = below(m, 3) ? 1 + below(m, 40) : 0;
	int rc = kvp_evict(m->c, NS, max);

	need(m, rc >= 0, "evict %" PRIu64 ": %s (%s)", max, kvp_strerror(rc), kvp_last_error());
	need(m, !max || (uint64_t)rc <= max, "evict %" PRIu64 " moved %d", max, rc);
	m->evicted += (unsigned)rc;
}

/* connect_driver() - the driver's session after a (re)start. */
static void connect_driver(struct model *m)
{
	kvp_info_t in;
	kvp_ns_stats_t ns;
	kvp_stats_t st;
	int rc;

	rc = kvp_connect(m->d.sock, NS, &geo, &m->c);
	ck_assert_msg(rc == 0, "connect: %s", kvp_last_error());
	ck_assert_int_eq(kvp_info(m->c, &in), 0);
	m->root = in.root;
	m->pool_pages = in.slab_bytes ? (2u << 20) / in.slab_bytes * in.pages_per_slab : 0;
	ck_assert_int_eq(kvp_stats(m->c, &st, &ns, 1), 1);
	m->nvme_slots = ns.nvme.slots;
	memset(&m->want, 0, sizeof(m->want));
}

static void add_tiers(struct model *m, const struct snap *s)
{
	m->nvme_spills += s->ns.nvme.spills;
	m->nvme_restores += s->ns.nvme.restores;
	m->nvme_dropped += s->ns.nvme.dropped;
	m->host_spills += s->ns.host.spills;
	m->host_restores += s->ns.host.restores;
}

/* restart() - SIGKILL the daemon (crash) or stop it cleanly, then a warm
 * restart on the same spill files, and check what came back. */
static void restart(struct model *m, bool crash)
{
	static uint8_t before_k[8192][8];
	static uint32_t before_d[8192];
	static bool keep[8192];
	struct snap s;
	uint32_t nb, i, j, kept = 0;
	bool settled = false;
	int w;

	/* what must come back: after a crash once the tier's writes are done,
	 * the chains wholly in the NVMe tier (a crash during writes may lose
	 * what they were writing); after a clean stop, all of it when it
	 * fits the tier */
	if (!crash) {
		for (w = 0; w < NW; w++)
			reap(m, w);
		wait_clients(m, 1);
	}
	if (crash && below(m, 2)) {
		settle(m, &s);
		settled = true;
	}
	snap_of(m, &s);
	add_tiers(m, &s);
	nb = s.entries;
	for (i = 0; i < nb; i++) {
		memcpy(before_k[i], pfx[i].key, 8);
		before_d[i] = pfx[i].depth;
		keep[i] = !crash || (settled && pfx[i].state == KVP_PAGE_SPILLED);
	}
	if (crash) {
		/* a block is kept when it and all before it are spilled */
		for (i = 0; i < nb; i++) {
			int b = blk_find8(m, before_k[i]);

			if (!keep[i] || b < 0 || (int)before_d[i] != m->blk[b].depth)
				{ keep[i] = false; continue; }
			for (b = m->blk[b].parent; b >= 0 && keep[i]; b = m->blk[b].parent) {
				for (j = 0; j < nb; j++)
					if (!memcmp(before_k[j], m->blk[b].key.b, 8) &&
					    (int)before_d[j] == m->blk[b].depth)
						break;
				keep[i] = j < nb && pfx[j].state == KVP_PAGE_SPILLED;
			}
		}
	} else if (nb > m->nvme_slots) {
		/* it does not all fit: the hot part, the pool's and the host
		 * tier's pages, goes first, making room by dropping the tier's
		 * oldest; it must come back whole when it fits */
		uint32_t hot = 0;

		for (i = 0; i < nb; i++) {
			keep[i] = tier(pfx[i].state) < 2;
			hot += keep[i];
		}
		if (hot > m->nvme_slots)
			memset(keep, 0, sizeof(keep));
	}
	for (i = 0; i < nb; i++) {	/* nothing comes back through a damaged slot */
		int b = blk_find8(m, before_k[i]);

		if (b >= 0 && chain_damaged(m, b))
			keep[i] = false;
	}
	kvp_close(m->c);
	m->c = NULL;
	if (crash) {
		kill(m->d.pid, SIGKILL);
		ck_assert_int_eq(daemon_wait_exit(&m->d, 5000) >= 0, 1);
		for (w = 0; w < NW; w++)
			reap(m, w);
		m->crashes++;
	} else {
		daemon_halt(&m->d);
		m->stops++;
	}
	daemon_restart(&m->d, m->args);
	connect_driver(m);
	snap_of(m, &s);
	for (i = 0; i < nb; i++) {
		if (!keep[i])
			continue;
		kept++;
		for (j = 0; j < s.entries; j++)
			if (!memcmp(pfx[j].key, before_k[i], 8) && pfx[j].depth == before_d[i])
				break;
		need(m, j < s.entries, "a %s restart lost the entry %u of depth %u (%u of %u "
		     "entries came back)", crash ? "crash" : "clean", i, before_d[i],
		     s.entries, nb);
	}
	m->kept += kept;
	for (w = 0; w < NW; w++)
		spawn(m, w);
}

/* --- the run -------------------------------------------------------------- */

enum { S_SERVE, S_COW, S_RETAIN, S_RELEASE, S_STALE, S_NOSPC, S_HOG, S_EVICT, S_KILL,
       S_CRASH, S_STOP, S_DAMAGE, S_N };

static const char *const step_name[S_N] = {
	"serve", "copy", "retain", "release", "stale release", "alloc that cannot fit",
	"hog", "evict", "kill -9 a client", "SIGKILL the daemon", "clean stop",
	"damage a tier slot",
};

static unsigned env_uint(const char *name, unsigned def)
{
	const char *v = getenv(name);

	return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

static void run(const char *io)
{
	static struct model mm;
	struct model *m = &mm;
	static const unsigned base[S_N] = { 400, 40, 30, 120, 25, 25, 8, 25, 12, 2, 2, 10 };
	unsigned seconds = env_uint("KVPOOL_MODEL_SECONDS", 10), total = 0, i, s, w;
	const char *seedv = getenv("KVPOOL_MODEL_SEED");
	static const char *args[16];
	char dir[128];
	static kvp_page scratch[MAXP];
	struct timespec t0, t;
	struct snap sn;

	memset(m, 0, sizeof(*m));
	m->seed = seedv && *seedv ? strtoull(seedv, NULL, 0) :
		  (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	m->rng = m->seed;
	fprintf(stderr, "model (%s loop): seed %" PRIu64 " (KVPOOL_MODEL_SEED=%" PRIu64
		" replays it), %u s\n", io, m->seed, m->seed, seconds);
	if (!strcmp(io, "sync"))
		setenv("KVPOOL_IO", "sync", 1);
	else
		unsetenv("KVPOOL_IO");
	/* the rates of the kinds of step, drawn too */
	for (i = 0; i < S_N; i++) {
		m->weight[i] = base[i] / 2 + below(m, base[i] + 1);
		total += m->weight[i];
	}
	daemon_dir(&m->d);
	snprintf(dir, sizeof(dir), "%.64s/spill", m->d.dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	/* 128 pool pages, 32 host tier pages, about 100 NVMe slots */
	i = 0;
	args[i++] = "--pool-size"; args[i++] = "2M"; args[i++] = "--slab-size"; args[i++] = "1M";
	args[i++] = "--host-tier-size"; args[i++] = "512K";
	args[i++] = "--spill-dir"; args[i++] = dir; args[i++] = "--spill-size"; args[i++] = "2M";
	args[i] = NULL;
	m->args = args;
	daemon_restart(&m->d, args);
	connect_driver(m);
	chains(m);
	for (w = 0; w < NW; w++)
		spawn(m, w);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		unsigned r = below(m, total);

		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec >= (time_t)seconds)
			break;
		for (s = 0; s < S_N && r >= m->weight[s]; s++)
			r -= m->weight[s];
		w = below(m, NW);
		m->steps++;
		snprintf(m->last, sizeof(m->last), "%s by worker %u", step_name[s], w);
		switch (s) {
		case S_SERVE: {
			unsigned c = below(m, NCH), n = 1 + below(m, LEN);
			unsigned tl = below(m, 2) ? below(m, BT) : 0;

			snprintf(m->last, sizeof(m->last), "serve chain %u, %u blocks + %u "
				 "tokens, by worker %u", c, n, tl, w);
			serve(m, (int)w, (int)c, n, tl);
			break;
		}
		case S_COW:
			cow(m, (int)w, 1 + below(m, 3));
			break;
		case S_RETAIN:
			retain(m, (int)w);
			break;
		case S_RELEASE:
			release_some(m, (int)w, below(m, 4) == 0);
			break;
		case S_STALE:
			stale(m, (int)w);
			break;
		case S_NOSPC: {
			uint64_t r2 = room(m);

			if (r2 < MAXP - 8)
				alloc(m, (int)w, (uint32_t)r2 + 1 + below(m, 8));
			break;
		}
		case S_HOG:
			hog(m, (int)w);
			break;
		case S_EVICT:
			evict(m);
			break;
		case S_KILL:
			kill9(m, (int)w);
			break;
		case S_CRASH:
			restart(m, true);
			break;
		case S_STOP:
			restart(m, false);
			break;
		case S_DAMAGE:
			damage(m);
			break;
		}
		/* a worker that holds much gives some back */
		if (held(m, (int)w, scratch, MAXP) > 48)
			release_some(m, (int)w, false);
		check(m, &sn);
	}
	add_tiers(m, &sn);
	fprintf(stderr, "model (%s loop): seed %" PRIu64 ": %u steps in %u s; %llu blocks "
		"asked for, %llu served; %u refused for room, %u stale releases, %u pages "
		"evicted by EVICT; %u tier slots damaged; %u clients killed (%u mid-request), "
		"%u daemon crashes, %u "
		"clean restarts (%llu entries they had to keep, kept); NVMe tier: %" PRIu64 " spills, %" PRIu64 " restores, %" PRIu64
		" dropped; host tier: %" PRIu64 " spills, %" PRIu64 " restores\n", io, m->seed,
		m->steps, seconds, m->acquired, m->served, m->nospc, m->stales, m->evicted,
		m->damaged, m->kills, m->mid_kills, m->crashes, m->stops, m->kept, m->nvme_spills,
		m->nvme_restores, m->nvme_dropped, m->host_spills, m->host_restores);
	for (w = 0; w < NW; w++)
		reap(m, (int)w);
	kvp_close(m->c);
	daemon_stop(&m->d);
}

START_TEST(test_model_io_uring_loop)
{
	run("io_uring");
}
END_TEST

START_TEST(test_model_sync_loop)
{
	run("sync");
}
END_TEST

static Suite *model_suite(void)
{
	Suite *s = suite_create("model");
	unsigned seconds = env_uint("KVPOOL_MODEL_SECONDS", 10);
	TCase *tc;

	/* a case per loop: CK_RUN_CASE=sync runs one */
	tc = tcase_create("io_uring");
	tcase_set_timeout(tc, seconds * 3 + 60);
	tcase_add_test(tc, test_model_io_uring_loop);
	suite_add_tcase(s, tc);
	tc = tcase_create("sync");
	tcase_set_timeout(tc, seconds * 3 + 60);
	tcase_add_test(tc, test_model_sync_loop);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(model_suite());
}
