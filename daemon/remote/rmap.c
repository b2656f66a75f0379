/* SPDX-License-Identifier: MIT */
/*
 * rmap.c - the remote tier's view of the cluster (see remote_int.h): the
 * URL's seeds, resolved and checked once at the start, and the slot map,
 * read from a seed or a master while it is wanted, replaced whole, and
 * the nodes no map names any more retired once idle.
 */
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/log.h"
#include "daemon/remote/remote_int.h"
#include "daemon/remote/rloop.h"

/* rmap_is_seed() - a is one of the URL's seeds (resolved at the start). */
bool rmap_is_seed(const struct remote *r, const struct rc_addr *a)
{
	unsigned i;

	for (i = 0; i < r->url.nseeds; i++)
		if (r->url.seeds[i].port == a->port && !strcmp(r->url.seeds[i].host, a->host))
			return true;
	return false;
}

/* rmap_want() - read the slot map again, at the next tick that the
 * MAP_EVERY_MS limit allows. */
void rmap_want(struct remote *r)
{
	if (!r->url.cluster || r->closing)
		return;
	r->map_wanted = true;
	remote_tick_arm(r);
}

/* --- the slot map ------------------------------------------------------ */

/*
 * keep_live_owners() - a slot that the new map nm gives to no one, or to a
 * node that failed, stays with its old owner when that one is connected
 * and answered its last request. Nodes learn of a failover by gossip, one
 * after another: a map read from one that has not heard yet names the
 * dead master again, and its slots would be misses until the next read.
 * A live node is never a wrong place to ask: one that no longer owns the
 * slot answers MOVED, and the request follows. was[] is scratch space of
 * RC_NODES_MAX entries.
 */
static void keep_live_owners(struct remote *r, struct rc_map *nm, struct rnode **was)
{
	unsigned i, j, s;
	int idx;

	for (i = 0; i < nm->nnodes; i++) {	/* the node behind each new index */
		was[i] = NULL;
		for (j = 0; j < r->nnodes && !was[i]; j++)
			if (r->nodes[j] && r->nodes[j]->addr.port == nm->nodes[i].port &&
			    !strcmp(r->nodes[j]->addr.host, nm->nodes[i].host))
				was[i] = r->nodes[j];
	}
	for (s = 0; s < RC_SLOTS; s++) {
		uint16_t o = r->map.owner[s], n = nm->owner[s];
		struct rnode *old = o != RC_NONE && o < r->nnodes ? r->nodes[o] : NULL;

		if (!old || old->state != RN_UP || old->erred || (n != RC_NONE && was[n] == old))
			continue;
		if (n != RC_NONE && !(was[n] && was[n]->state == RN_DOWN && was[n]->failed))
			continue;
		idx = rc_map_node(nm, old->addr.host, old->addr.port);
		if (idx < 0)
			continue;
		was[idx] = old;
		nm->covered += n == RC_NONE;
		nm->owner[s] = (uint16_t)idx;
	}
}

/* node_retire() - nd is named by no map: drop its connection quietly (its
 * requests end as misses); the tick frees it once nothing is in flight. */
static void node_retire(struct remote *r, struct rnode *nd)
{
	redisAsyncContext *ac = nd->ac;

	nd->ac = NULL;		/* on_disconnect() finds another: nothing more */
	nd->state = RN_DOWN;
	if (r->map_node == nd)
		r->map_node = NULL;	/* its answer comes as NULL, or not at all */
	nd->next_retired = r->retired;
	r->retired = nd;
	if (ac)
		redisAsyncFree(ac);	/* deferred by hiredis when inside its callback */
}

/*
 * map_replace() - nm becomes r's map: nodes it names keep their
 * connections (under their new index), the others are retired, so that
 * no node outlives the maps that name it and nothing from a reply stays
 * longer than the next one. nm's nodes move into r. -ENOMEM: r unchanged.
 */
static int map_replace(struct remote *r, struct rc_map *nm)
{
	struct rnode **v = calloc(nm->nnodes ? nm->nnodes : 1, sizeof(*v)), **old = r->nodes;
	unsigned i, j, nold = r->nnodes;

	if (!v)
		return -ENOMEM;
	for (i = 0; i < nm->nnodes; i++)
		for (j = 0; j < nold && !v[i]; j++)
			if (old[j] && old[j]->addr.port == nm->nodes[i].port &&
			    !strcmp(old[j]->addr.host, nm->nodes[i].host)) {
				v[i] = old[j];
				old[j] = NULL;
			}
	free(r->map.nodes);
	r->map = *nm;
	r->nodes = v;
	r->nnodes = nm->nnodes;
	/* retired last: their requests end now, and whatever their callers
	 * send next sees the new map */
	for (j = 0; j < nold; j++)
		if (old[j])
			node_retire(r, old[j]);
	free(old);
	return 0;
}

/* rmap_free_retired() - free the retired nodes that nothing points to. */
void rmap_free_retired(struct remote *r, bool all)
{
	struct rnode **pp = &r->retired, *nd;

	while ((nd = *pp)) {
		if (all || (!nd->inflight && !nd->ac)) {
			*pp = nd->next_retired;
			free(nd);
		} else {
			pp = &nd->next_retired;
		}
	}
}

/* say_named() - log that the map m read from a names masters by host name. */
static void say_named(const struct remote *r, const struct rc_map *m, const struct rc_addr *a)
{
	if (m->nnamed)
		log_warn("remote tier %s: the slot map from %s:%u names %u masters by host "
			 "name (such as '%s'), not by address; their slots are misses (set "
			 "cluster-preferred-endpoint-type ip on the cluster)", r->desc,
			 a->host, a->port, m->nnamed, rnode_clean(m->named, strlen(m->named)));
}

static void slots_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct remote *r = priv;
	struct rnode *nd = ac->data, **was;
	struct rc_map *nm;
	char err[256];
	unsigned i, s;
	int rc;

	r->map_inflight = false;
	r->map_node = NULL;
	if (!reply || r->closing || !nd)
		return;
	nm = malloc(sizeof(*nm));
	was = calloc(RC_NODES_MAX, sizeof(*was));
	if (!nm || !was) {
		free(nm);
		free(was);
		return;		/* the next tick reads it again */
	}
	rc_map_init(nm);
	rc = rc_map_load(nm, reply, &nd->addr, err, sizeof(err));
	if (rc < 0) {
		rc_map_fini(nm);
		free(nm);
		free(was);
		log_warn("remote tier %s: slot map from %s:%u: %s", r->desc, nd->addr.host,
			 nd->addr.port, rnode_clean(err, strlen(err)));
		return;
	}
	say_named(r, nm, &nd->addr);
	if (!nm->covered && r->map.covered) {
		/* a node being set up, or reset, knows no slot: not a map to take
		 * over one that has slots; the next read asks another node */
		nd->erred = true;
		r->map_wanted = true;
		rc_map_fini(nm);
		free(nm);
		free(was);
		remote_tick_arm(r);
		return;
	}
	keep_live_owners(r, nm, was);
	free(was);
	for (i = 0; i < r->nnodes; i++)		/* who served before this map */
		if (r->nodes[i])
			r->nodes[i]->owned = false;
	for (s = 0; s < RC_SLOTS; s++)
		if (r->map.owner[s] != RC_NONE && r->map.owner[s] < r->nnodes &&
		    r->nodes[r->map.owner[s]])
			r->nodes[r->map.owner[s]]->owned = true;
	if (map_replace(r, nm) < 0) {
		rc_map_fini(nm);
		free(nm);
		return;
	}
	free(nm);
	rreq_reroute(r);	/* waiting SETs go where the map says now */
	r->st.map_loads++;
	r->map_wanted = r->map.covered < RC_SLOTS;	/* keep reading until whole */
	/* a master this map names and the last did not (a promoted replica)
	 * is tried at once; one that served before keeps its back-off: a map
	 * that still names a node that does not answer is no news */
	for (s = 0; s < RC_SLOTS; s++) {
		struct rnode *m = r->map.owner[s] == RC_NONE ? NULL : rnode_of(r, r->map.owner[s]);

		if (m && !m->owned && m->state == RN_DOWN && !m->auth_refused && m->retry_ns) {
			m->retry_ns = 0;
			m->backoff_ms = BACKOFF_MIN_MS;
		}
	}
	remote_tick_arm(r);
	rnode_count(r);
	remote_note_state(r);
}

/* seed_node() - the node of the next seed that did not just answer with an
 * error, connected or connecting; NULL when none can be asked now. */
static struct rnode *seed_node(struct remote *r)
{
	struct rnode *nd;
	unsigned i, k;
	int idx;

	for (i = 0; i < r->url.nseeds; i++) {
		k = r->seed_next++ % r->url.nseeds;
		idx = rc_map_node(&r->map, r->url.seeds[k].host, r->url.seeds[k].port);
		nd = idx < 0 ? NULL : rnode_of(r, (unsigned)idx);
		if (!nd || nd->erred)
			continue;
		if (nd->state == RN_DOWN) {
			if (now_ns() < nd->retry_ns)
				continue;
			rnode_connect(nd);
		}
		if (nd->ac)
			return nd;
	}
	return NULL;
}

/* rmap_read() - ask for the map: a connected master that did not just
 * answer with an error, else a seed that did not, else anyone connected
 * (a map from a node whose own is stale would only keep it stale). */
void rmap_read(struct remote *r)
{
	struct rnode *nd = NULL;
	unsigned i;

	for (i = 0; i < r->nnodes && !nd; i++)
		if (r->nodes[i] && r->nodes[i]->state == RN_UP && !r->nodes[i]->erred)
			nd = r->nodes[i];
	if (!nd)
		nd = seed_node(r);
	for (i = 0; i < r->nnodes && !nd; i++)
		if (r->nodes[i] && r->nodes[i]->state == RN_UP)
			nd = r->nodes[i];
	if (!nd)
		return;
	if (redisAsyncCommand(nd->ac, slots_reply, r, "CLUSTER SLOTS") == REDIS_OK) {
		r->map_inflight = true;
		r->map_node = nd;
		r->map_sent_ns = now_ns();
	}
}

/*
 * rmap_check_seed() - ask one seed synchronously what it is. Returns 1 when it
 * answered as it should (the map is loaded from it for a cluster), 0 when
 * it did not answer, or -errno for a server that is not what the URL says
 * or refuses AUTH (err says so).
 */
int rmap_check_seed(struct remote *r, const struct rc_addr *a, char *err, size_t errlen)
{
	struct timeval tv = { r->c.check_ms / 1000, (r->c.check_ms % 1000) * 1000 };
	const char *pw = r->c.password ? r->c.password : r->url.password;
	redisContext *c = redisConnectWithTimeout(a->host, a->port, tv);
	redisReply *rep = NULL;
	int rc = 0;

	if (!c || c->err)
		goto out;
	redisSetTimeout(c, tv);
	if (pw[0]) {
		rep = r->url.user[0] ? redisCommand(c, "AUTH %s %s", r->url.user, pw)
				     : redisCommand(c, "AUTH %s", pw);
		if (!rep)
			goto out;
		if (rep->type == REDIS_REPLY_ERROR) {
			snprintf(err, errlen, "remote tier: %s:%u refused AUTH: %s; check the "
				 "password and the user's ACL", a->host, a->port,
				 rnode_clean(rep->str, rep->len));
			rc = -EACCES;
			goto out;
		}
		freeReplyObject(rep);
	}
	rep = redisCommand(c, r->url.cluster ? "CLUSTER SLOTS" : "INFO cluster");
	if (!rep)
		goto out;
	if (rep->type == REDIS_REPLY_ERROR && (strstr(rep->str, "NOAUTH") ||
					       strstr(rep->str, "NOPERM"))) {
		snprintf(err, errlen, "remote tier: %s:%u wants a password or a user with "
			 "more rights: %s", a->host, a->port, rnode_clean(rep->str, rep->len));
		rc = -EACCES;
	} else if (r->url.cluster && rep->type == REDIS_REPLY_ERROR) {
		snprintf(err, errlen, "remote tier: %s:%u is not a Redis Cluster node (%s); "
			 "give a cluster's nodes, or redis://%s:%u for one server",
			 a->host, a->port, rnode_clean(rep->str, rep->len), a->host, a->port);
		rc = -EPROTO;
	} else if (r->url.cluster) {
		rc = rc_map_load(&r->map, rep, a, err, errlen);
		if (rc == 0)
			say_named(r, &r->map, a);
		rc = rc < 0 ? rc : 1;
	} else if (rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_enabled:1")) {
		snprintf(err, errlen, "remote tier: %s:%u is a Redis Cluster node: give "
			 "redis-cluster://%s:%u so that keys go to the nodes that own them",
			 a->host, a->port, a->host, a->port);
		rc = -EPROTO;
	} else {
		rc = rc_map_single(&r->map, a->host, a->port);
		rc = rc < 0 ? rc : 1;
	}
out:
	if (rep)
		freeReplyObject(rep);
	if (c)
		redisFree(c);
	return rc;
}

/*
 * rmap_resolve_seeds() - the URL's host names as addresses, once, at the start
 * (the one place where waiting for a resolver stalls no one): from then
 * on every connection goes to a numeric address. IPv4 first, as Redis
 * Cluster announces. Returns 0 or -EINVAL (err says which name).
 */
int rmap_resolve_seeds(struct remote *r, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *p, *pick;
	unsigned i;
	int rc;

	for (i = 0; i < r->url.nseeds; i++) {
		struct rc_addr *a = &r->url.seeds[i];

		if (rc_numeric(a->host))
			continue;
		rc = getaddrinfo(a->host, NULL, &hints, &ai);
		if (rc != 0) {
			snprintf(err, errlen, "remote tier: cannot resolve '%s' of --remote: "
				 "%s; give an address, or a name the resolver knows when "
				 "kvpoold starts", a->host, gai_strerror(rc));
			return -EINVAL;
		}
		for (pick = ai, p = ai; p; p = p->ai_next)
			if (p->ai_family == AF_INET) {
				pick = p;
				break;
			}
		rc = getnameinfo(pick->ai_addr, pick->ai_addrlen, a->host, sizeof(a->host),
				 NULL, 0, NI_NUMERICHOST);
		freeaddrinfo(ai);
		if (rc != 0) {
			snprintf(err, errlen, "remote tier: '%s' of --remote: %s", a->host,
				 gai_strerror(rc));
			return -EINVAL;
		}
	}
	return 0;
}
