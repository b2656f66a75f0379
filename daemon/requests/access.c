/* SPDX-License-Identifier: MIT */
/*
 * access.c - parsing and evaluating the --access rules and the remote
 * tier's sharing rules (see access.h).
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/requests/access.h"

/* number() - s is a decimal id: true and *v. */
static bool number(const char *s, uint32_t *v)
{
	char *end;
	unsigned long n;

	if (!isdigit((unsigned char)*s))
		return false;
	errno = 0;
	n = strtoul(s, &end, 10);
	if (*end || errno || n > UINT32_MAX - 1)
		return false;
	*v = (uint32_t)n;
	return true;
}

/* parse_rights() - "read,write" into ACCESS_* bits, 0 when wrong. */
static unsigned parse_rights(char *s)
{
	unsigned rights = 0;
	char *tok, *save = NULL;

	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "read"))
			rights |= ACCESS_READ;
		else if (!strcmp(tok, "write"))
			rights |= ACCESS_WRITE;
		else if (!strcmp(tok, "admin"))
			rights |= ACCESS_ADMIN;
		else if (!strcmp(tok, "all"))
			rights |= ACCESS_ALL;
		else
			return 0;
	}
	return rights;
}

/* parse_who() - one principal; false with why when it names nobody. */
static bool parse_who(const char *s, struct access_who *w, char *why, size_t whylen)
{
	if (!strcmp(s, "*")) {
		w->kind = WHO_ANY;
		return true;
	}
	if (s[0] == '@') {
		struct group *g;

		w->kind = WHO_GID;
		if (number(s + 1, &w->id))
			return true;
		g = s[1] ? getgrnam(s + 1) : NULL;
		if (!g) {
			snprintf(why, whylen, "no group '%s' on this system", s + 1);
			return false;
		}
		w->id = (uint32_t)g->gr_gid;
		return true;
	}
	w->kind = WHO_UID;
	if (number(s, &w->id))
		return true;
	{
		struct passwd *pw = getpwnam(s);

		if (!pw) {
			snprintf(why, whylen, "no user '%s' on this system (a group is "
				 "written @%s)", s, s);
			return false;
		}
		w->id = (uint32_t)pw->pw_uid;
	}
	return true;
}

int access_parse(const char *text, struct access_rule *r, char *why, size_t whylen)
{
	char buf[ACCESS_RULE_MAX], *ns, *rights, *who, *extra, *tok, *save = NULL;

	memset(r, 0, sizeof(*r));
	if (strlen(text) >= sizeof(buf)) {
		snprintf(why, whylen, "a rule is at most %zu bytes", sizeof(buf) - 1);
		return -EINVAL;
	}
	memcpy(buf, text, strlen(text) + 1);
	ns = strtok_r(buf, " \t", &save);
	rights = ns ? strtok_r(NULL, " \t", &save) : NULL;
	who = rights ? strtok_r(NULL, " \t", &save) : NULL;
	extra = who ? strtok_r(NULL, "", &save) : NULL;
	while (extra && isspace((unsigned char)*extra))
		extra++;
	if (!who || (extra && *extra)) {
		snprintf(why, whylen, "'%s' is not NAMESPACE RIGHTS WHO[,WHO...] (e.g. "
			 "'llama read,write @inference,alice'; no blanks inside a list)", text);
		return -EINVAL;
	}
	if (strlen(ns) >= sizeof(r->ns)) {
		snprintf(why, whylen, "namespace '%s' is longer than %zu bytes", ns,
			 sizeof(r->ns) - 1);
		return -EINVAL;
	}
	memcpy(r->ns, ns, strlen(ns) + 1);
	r->rights = parse_rights(rights);
	if (!r->rights) {
		snprintf(why, whylen, "rights '%s' are not read, write, admin or all "
			 "(joined by commas)", rights);
		return -EINVAL;
	}
	save = NULL;
	for (tok = strtok_r(who, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (r->nwho == ACCESS_WHO_MAX) {
			snprintf(why, whylen, "more than %d users and groups in one rule; "
				 "write several rules", ACCESS_WHO_MAX);
			return -EINVAL;
		}
		if (!parse_who(tok, &r->who[r->nwho], why, whylen))
			return -EINVAL;
		r->nwho++;
	}
	if (!r->nwho) {
		snprintf(why, whylen, "rule '%s' names nobody", text);
		return -EINVAL;
	}
	return 0;
}

bool access_in_group(const struct access_peer *p, gid_t gid)
{
	unsigned i;

	if (gid == (gid_t)-1)
		return false;
	if (p->gid == gid)
		return true;
	for (i = 0; i < p->ngroups; i++)
		if (p->groups[i] == gid)
			return true;
	return false;
}

/* names() - rule r names peer p. */
static bool names(const struct access_rule *r, const struct access_peer *p)
{
	unsigned i;

	for (i = 0; i < r->nwho; i++) {
		const struct access_who *w = &r->who[i];

		if (w->kind == WHO_ANY ||
		    (w->kind == WHO_UID && w->id == (uint32_t)p->uid) ||
		    (w->kind == WHO_GID && access_in_group(p, (gid_t)w->id)))
			return true;
	}
	return false;
}

unsigned access_rights(const struct access_rule *r, unsigned n, const char *ns,
		       const struct access_peer *p)
{
	unsigned rights = 0, i;

	if (p->uid == 0 || p->uid == geteuid())
		return ACCESS_ALL;
	if (!n)
		rights = ACCESS_READ | ACCESS_WRITE;
	for (i = 0; i < n; i++)
		if ((!strcmp(r[i].ns, "*") || !strcmp(r[i].ns, ns)) && names(&r[i], p))
			rights |= r[i].rights;
	if (p->admin)
		rights |= ACCESS_ADMIN;
	return rights;
}

void access_peer_of(int fd, const struct ucred *cred, struct access_peer *p)
{
	socklen_t len;

	memset(p, 0, sizeof(*p));
	p->uid = cred->uid;
	p->gid = cred->gid;
#ifdef SO_PEERGROUPS
	len = sizeof(p->groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, p->groups, &len) == 0)
		p->ngroups = len / sizeof(gid_t);
	/* more groups than fit (ERANGE): the first ones are not returned
	 * either; the uid and primary gid still count */
#endif
}

bool access_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n >= KVP_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-:/@", *s))
			return false;
	return true;
}

/* share_split() - a share rule's text into its NAME and its list (in buf,
 * ACCESS_RULE_MAX bytes); NULL list when it is not NAME LIST. */
static char *share_split(const char *text, char *buf, char **name)
{
	char *list, *extra, *save = NULL;

	if (strlen(text) >= ACCESS_RULE_MAX)
		return NULL;
	memcpy(buf, text, strlen(text) + 1);
	*name = strtok_r(buf, " \t", &save);
	list = *name ? strtok_r(NULL, " \t", &save) : NULL;
	extra = list ? strtok_r(NULL, " \t", &save) : NULL;
	return extra ? NULL : list;
}

int access_share_parse(const char *text, char *why, size_t whylen)
{
	char buf[ACCESS_RULE_MAX], *name, *list, *tok, *save = NULL;

	list = share_split(text, buf, &name);
	if (!list) {
		snprintf(why, whylen, "'%.*s' is not NAME NAMESPACE[,NAMESPACE...] (e.g. "
			 "'llama prod-a,prod-b'; no blanks inside the list; at most %d bytes)",
			 ACCESS_RULE_MAX - 1, text, ACCESS_RULE_MAX - 1);
		return -EINVAL;
	}
	if (!access_name_ok(name)) {
		snprintf(why, whylen, "share name '%s' is not 1 to 63 letters, digits or "
			 ". _ - : / @ (it is a namespace name in the remote tier)", name);
		return -EINVAL;
	}
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (strcmp(tok, "*") && !access_name_ok(tok)) {
			snprintf(why, whylen, "'%s' is not a namespace name or *", tok);
			return -EINVAL;
		}
	}
	return 0;
}

/* share_lists() - rule text lists namespace ns (exactly, or as * when
 * star); its NAME into name (KVP_NAME_MAX bytes) when it does. */
static bool share_lists(const char *text, const char *ns, bool star, char *name)
{
	char buf[ACCESS_RULE_MAX], *nm, *list, *tok, *save = NULL;

	list = share_split(text, buf, &nm);
	for (tok = list ? strtok_r(list, ",", &save) : NULL; tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (star ? !strcmp(tok, "*") : !strcmp(tok, ns)) {
			snprintf(name, KVP_NAME_MAX, "%s", nm);
			return true;
		}
	}
	return false;
}

int access_shares_check(const char (*r)[ACCESS_RULE_MAX], unsigned n, char *why,
			size_t whylen)
{
	char buf[ACCESS_RULE_MAX], name[KVP_NAME_MAX], *nm, *list, *tok, *save;
	unsigned i, j;

	for (i = 0; i < n; i++) {
		save = NULL;
		list = share_split(r[i], buf, &nm);
		for (tok = list ? strtok_r(list, ",", &save) : NULL; tok;
		     tok = strtok_r(NULL, ",", &save)) {
			for (j = 0; j < i; j++) {
				if (!share_lists(r[j], tok, !strcmp(tok, "*"), name))
					continue;
				snprintf(why, whylen, "remote-share: '%s' is in two rules ('%s' "
					 "and '%s'); a namespace shares under one name", tok,
					 name, nm);
				return -EINVAL;
			}
		}
	}
	return 0;
}

void access_share_name(const char (*r)[ACCESS_RULE_MAX], unsigned n, const char *ns,
		       char *out)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (share_lists(r[i], ns, false, out))
			return;
	for (i = 0; i < n; i++)
		if (share_lists(r[i], ns, true, out))
			return;
	snprintf(out, KVP_NAME_MAX, "%s", ns);
}

const char *access_rights_str(unsigned rights)
{
	static const char *const names[8] = {
		"none", "read", "write", "read,write", "admin", "read,admin",
		"write,admin", "read,write,admin",
	};

	return names[rights & ACCESS_ALL];
}
