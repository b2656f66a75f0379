/* SPDX-License-Identifier: MIT */
/*
 * access.h - who may do what in which namespace: the --access rules.
 *
 * A rule is one line of text:
 *
 *     NAMESPACE RIGHTS WHO[,WHO...]
 *
 * NAMESPACE is a namespace's name or * (every namespace); RIGHTS is
 * read, write, admin or all, or several joined by commas; WHO is a user
 * name or uid, @group or @gid, or * (anyone who can reach the socket).
 * Names are resolved when the rule is read, so a rule that names an
 * unknown user or group is refused then, not ignored later.
 *
 * With no rule at all, every client has read and write everywhere (the
 * socket's permissions are the only gate). With rules, a client has the
 * rights of every rule that matches the namespace and names it (by uid,
 * primary gid or a supplementary group): nothing else. Whatever the
 * rules say, root and the daemon's own user have every right, and the
 * --admin-group has admin on every namespace.
 *
 *     read    ACQUIRE (find and lease cached pages), RETAIN
 *     write   ALLOC, COW, PUBLISH, PUBLISH_PARTIAL
 *     admin   EVICT, DROP_NS, DISCONNECT of the namespace's clients
 *
 * Joining a namespace (HELLO) needs read or write; RELEASE, STATS and
 * the listings need nothing more than a connection.
 *
 * The remote tier's sharing rules (--remote-share) are here too, since
 * they say which namespaces trust each other's writers:
 *
 *     NAME NAMESPACE[,NAMESPACE...]
 *
 * The namespaces listed (or *: every namespace no other rule lists) keep
 * their pages in the remote tier under NAME, where every namespace of that
 * name or share, on every machine with the same key, finds them. A
 * namespace no rule lists keeps them under its own name.
 */
#ifndef KVP_ACCESS_H
#define KVP_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "kvpool_wire.h"

#define ACCESS_READ	0x1u
#define ACCESS_WRITE	0x2u
#define ACCESS_ADMIN	0x4u
#define ACCESS_ALL	(ACCESS_READ | ACCESS_WRITE | ACCESS_ADMIN)

#define ACCESS_RULE_MAX	256	/* bytes of one rule's text */
#define ACCESS_WHO_MAX	32	/* principals in one rule */
#define ACCESS_GROUPS_MAX 64	/* a peer's groups that are looked at */

struct access_who {
	enum { WHO_ANY, WHO_UID, WHO_GID } kind;
	uint32_t id;
};

struct access_rule {
	char ns[KVP_NAME_MAX];		/* "*" for every namespace */
	unsigned rights;		/* ACCESS_* */
	unsigned nwho;
	struct access_who who[ACCESS_WHO_MAX];
};

/* A peer, from SO_PEERCRED and SO_PEERGROUPS. */
struct access_peer {
	uid_t uid;
	gid_t gid;
	unsigned ngroups;
	gid_t groups[ACCESS_GROUPS_MAX];
	bool admin;		/* root, the daemon's user or --admin-group */
};

/*
 * access_parse() - one rule's text into *r, names resolved. Returns 0 or
 * -EINVAL with why (whylen bytes) naming the part that is wrong.
 */
int access_parse(const char *text, struct access_rule *r, char *why, size_t whylen);

/*
 * access_rights() - the rights of peer p in namespace ns under rules
 * r[0..n): see the top of this file.
 */
unsigned access_rights(const struct access_rule *r, unsigned n, const char *ns,
		       const struct access_peer *p);

/* access_in_group() - p's primary or a supplementary group is gid (never
 * for (gid_t)-1). */
bool access_in_group(const struct access_peer *p, gid_t gid);

/* access_peer_of() - fill *p from the peer's credentials (SO_PEERCRED,
 * read by the caller) and the supplementary groups the kernel reports for
 * the connected socket fd; admin is left false. */
void access_peer_of(int fd, const struct ucred *cred, struct access_peer *p);

/* access_name_ok() - s is a namespace name: 1..63 bytes of letters,
 * digits and . _ - : / @ */
bool access_name_ok(const char *s);

/*
 * access_share_parse() - check one --remote-share rule's text. Returns 0
 * or -EINVAL with why (whylen bytes) naming the part that is wrong.
 */
int access_share_parse(const char *text, char *why, size_t whylen);

/*
 * access_shares_check() - rules r[0..n) (each parsed alone already) list
 * no namespace twice and * once at most. Returns 0 or -EINVAL with why.
 */
int access_shares_check(const char (*r)[ACCESS_RULE_MAX], unsigned n, char *why,
			size_t whylen);

/*
 * access_share_name() - the name namespace ns shares remote pages under,
 * by rules r[0..n) (checked): its rule's NAME, else its own name. out has
 * KVP_NAME_MAX bytes.
 */
void access_share_name(const char (*r)[ACCESS_RULE_MAX], unsigned n, const char *ns,
		       char *out);

/* access_rights_str() - "read,write" and the like, for messages. */
const char *access_rights_str(unsigned rights);

#endif /* KVP_ACCESS_H */
