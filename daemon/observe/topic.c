/* SPDX-License-Identifier: MIT */
/*
 * topic.c - the KV events' topics and the rules that keep them apart
 * (see topic.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/observe/topic.h"
#include "daemon/requests/access.h"

enum part { LITERAL, HOST, MODEL, NS };

/* part_at() - what starts at t: a placeholder (and its length in *n) or a
 * literal byte (*n = 1). */
static enum part part_at(const char *t, size_t *n)
{
	if (!strncmp(t, "{host}", 6))
		return *n = 6, HOST;
	if (!strncmp(t, "{model}", 7))
		return *n = 7, MODEL;
	if (!strncmp(t, "{ns}", 4))
		return *n = 4, NS;
	return *n = 1, LITERAL;
}

/* delimiter() - c ends a value in a template: no escaped value holds it. */
static bool delimiter(char c)
{
	return c == '@' || c == '|';
}

/* escaped() - c becomes %XX in a topic. */
static bool escaped(unsigned char c)
{
	return c == '%' || delimiter((char)c) || c <= 0x20 || c == 0x7f;
}

/* put() - value v (n bytes), escaped, at out + *o; false when it does not
 * fit in len bytes with the NUL. */
static bool put(char *out, size_t len, size_t *o, const char *v, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];

		if (*o + (escaped(c) ? 3 : 1) >= len)
			return false;
		if (escaped(c)) {
			out[(*o)++] = '%';
			out[(*o)++] = hex[c >> 4];
			out[(*o)++] = hex[c & 15];
		} else {
			out[(*o)++] = (char)c;
		}
	}
	return true;
}

/* model_word() - the model's name in an identity, and its length. */
static const char *model_word(const char *model, size_t *n)
{
	if (!strncmp(model, "vllm ", 5) || !strncmp(model, "sglang ", 7))
		model = strchr(model, ' ') + 1;
	*n = strcspn(model, " ");
	return model;
}

int topic_expand(const char *t, const char *host, const char *ns, const char *model,
		 char *out, size_t len)
{
	size_t o = 0, n, mlen;
	const char *m = model_word(model, &mlen);
	bool ok = true;

	while (*t && ok) {
		switch (part_at(t, &n)) {
		case HOST:
			ok = put(out, len, &o, host, strlen(host));
			break;
		case MODEL:
			ok = put(out, len, &o, m, mlen);
			break;
		case NS:
			ok = put(out, len, &o, ns, strlen(ns));
			break;
		case LITERAL:
			ok = o + 1 < len;
			if (ok)
				out[o++] = *t;
			break;
		}
		t += n;
	}
	if (!ok) {
		out[0] = '\0';
		return -ENAMETOOLONG;
	}
	out[o] = '\0';
	return 0;
}

int topic_template_check(const char *t, char *why, size_t whylen)
{
	const char *s = t;
	size_t n;

	if (!strstr(t, "{ns}")) {
		snprintf(why, whylen, "--kv-events-topic '%s' has no {ns}: every namespace "
			 "of a model would publish on one topic, and one could speak for "
			 "another; put {ns} in it followed by @ or | (the default is "
			 "kv@{host}|{ns}@{model}), and give namespaces that should publish on "
			 "vLLM's kv@HOST@MODEL that topic by name: --kv-events-ns-topic "
			 "'NAMESPACE kv@{host}@{model}'", t);
		return -EINVAL;
	}
	while (*s) {
		enum part p = part_at(s, &n);

		s += n;
		if (p != MODEL && p != NS)
			continue;
		if (!delimiter(*s) || part_at(s, &n) != LITERAL) {
			snprintf(why, whylen, "--kv-events-topic '%s': %s is not followed by @ "
				 "or |, so two namespaces' topics could be one, or one the "
				 "start of another; write %s@ or %s|", t,
				 p == NS ? "{ns}" : "{model}", p == NS ? "{ns}" : "{model}",
				 p == NS ? "{ns}" : "{model}");
			return -EINVAL;
		}
		if (p == NS)
			break;	/* what follows tells no one apart */
	}
	return 0;
}

/* rule_split() - a rule's namespace list and template (in buf,
 * TOPIC_RULE_MAX bytes); NULL template when it is not LIST TEMPLATE. */
static const char *rule_split(const char *text, char *buf, char **list)
{
	char *sp;

	if (strlen(text) >= TOPIC_RULE_MAX)
		return NULL;
	memcpy(buf, text, strlen(text) + 1);
	*list = buf + strspn(buf, " \t");
	sp = *list + strcspn(*list, " \t");
	if (!*sp)
		return NULL;
	*sp++ = '\0';
	sp += strspn(sp, " \t");
	return *sp && !strpbrk(sp, " \t") ? sp : NULL;
}

/* rule_names() - rule text names namespace ns. */
static bool rule_names(const char *text, const char *ns)
{
	char buf[TOPIC_RULE_MAX], *list, *tok, *save = NULL;

	if (!rule_split(text, buf, &list))
		return false;
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (!strcmp(tok, ns))
			return true;
	return false;
}

int topic_rule_parse(const char *text, char *why, size_t whylen)
{
	char buf[TOPIC_RULE_MAX], *list, *tok, *save = NULL;

	if (!rule_split(text, buf, &list)) {
		snprintf(why, whylen, "'%.*s' is not NAMESPACE[,NAMESPACE...] TEMPLATE (e.g. "
			 "'llama kv@{host}@{model}'; no blanks inside the list or the "
			 "template; at most %d bytes)", TOPIC_RULE_MAX - 1, text,
			 TOPIC_RULE_MAX - 1);
		return -EINVAL;
	}
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!access_name_ok(tok)) {
			snprintf(why, whylen, "'%s' is not a namespace name", tok);
			return -EINVAL;
		}
	}
	return 0;
}

/* fixed() - the start of template t that is the same for every namespace
 * (up to its first {model} or {ns}), expanded with host, into out (len
 * bytes). */
static void fixed(const char *t, const char *host, char *out, size_t len)
{
	size_t o = 0, n;
	enum part p;

	out[0] = '\0';
	for (; *t && (p = part_at(t, &n)) != MODEL && p != NS; t += n) {
		if (p == HOST ? !put(out, len, &o, host, strlen(host)) : o + 1 >= len)
			break;
		if (p == LITERAL)
			out[o++] = *t;
	}
	out[o] = '\0';
}

/* apart() - templates a and b part before either varies: no topic of one
 * is a topic of the other or its start. */
static bool apart(const char *a, const char *b, const char *host)
{
	char fa[TOPIC_RULE_MAX * 4], fb[TOPIC_RULE_MAX * 4];
	size_t i;

	fixed(a, host, fa, sizeof(fa));
	fixed(b, host, fb, sizeof(fb));
	for (i = 0; fa[i] && fb[i]; i++)
		if (fa[i] != fb[i])
			return true;
	return false;
}

/* rule_template() - the template of a rule's text (parsed: after its last
 * blank). */
static const char *rule_template(const char *text)
{
	const char *sp = strrchr(text, ' '), *tab = strrchr(text, '\t');

	if (!sp || (tab && tab > sp))
		sp = tab;
	return sp ? sp + 1 : text;
}

/* twice() - a namespace rule i names that rule j < i names too: its name
 * into out (TOPIC_RULE_MAX bytes). */
static bool twice(const char (*r)[TOPIC_RULE_MAX], unsigned i, unsigned j, char *out)
{
	char buf[TOPIC_RULE_MAX], *list, *tok, *save = NULL;

	if (!rule_split(r[i], buf, &list))
		return false;
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (rule_names(r[j], tok)) {
			snprintf(out, TOPIC_RULE_MAX, "%s", tok);
			return true;
		}
	}
	return false;
}

int topic_rules_check(const char *t, const char (*r)[TOPIC_RULE_MAX], unsigned n,
		      const char *host, char *why, size_t whylen)
{
	char name[TOPIC_RULE_MAX];
	unsigned i, j;

	for (i = 0; i < n; i++) {
		if (!apart(rule_template(r[i]), t, host)) {
			snprintf(why, whylen, "--kv-events-ns-topic '%s': its topics could be "
				 "those of other namespaces (--kv-events-topic '%s'), or the start "
				 "of them; make the two differ before {model} or {ns} (as "
				 "kv@{host}@{model} and the default kv@{host}|{ns}@{model} do)",
				 r[i], t);
			return -EINVAL;
		}
		for (j = 0; j < i; j++) {
			if (twice(r, i, j, name)) {
				snprintf(why, whylen, "--kv-events-ns-topic: '%s' is in two rules "
					 "('%s' and '%s')", name, r[j], r[i]);
				return -EINVAL;
			}
			if (!apart(rule_template(r[i]), rule_template(r[j]), host)) {
				snprintf(why, whylen, "--kv-events-ns-topic '%s' and '%s': their "
					 "topics could meet; name the namespaces that share a topic "
					 "in one rule, or make the templates differ before {model} or "
					 "{ns}", r[j], r[i]);
				return -EINVAL;
			}
		}
	}
	return 0;
}

const char *topic_template_for(const char *t, const char (*r)[TOPIC_RULE_MAX], unsigned n,
			       const char *ns, bool *ruled)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		if (rule_names(r[i], ns)) {
			*ruled = true;
			return rule_template(r[i]);
		}
	}
	*ruled = false;
	return t;
}

/* endpoint_ok() - e is an endpoint a stream binds: tcp://... or ipc://...
 * with something after, that fits in TOPIC_ENDPOINT_MAX bytes. */
static bool endpoint_ok(const char *e, size_t n)
{
	return n < TOPIC_ENDPOINT_MAX && n > 6 &&
	       (!strncmp(e, "tcp://", 6) || !strncmp(e, "ipc://", 6));
}

int topic_route_parse(const char *text, struct topic_route *r, char *why, size_t whylen)
{
	const char *ns = text + strspn(text, " \t"), *pub, *comma, *end;
	size_t nl = strcspn(ns, " \t"), pl;

	memset(r, 0, sizeof(*r));
	pub = ns + nl + strspn(ns + nl, " \t");
	end = pub + strcspn(pub, " \t");
	if (!nl || !*pub || end[strspn(end, " \t")]) {
		snprintf(why, whylen, "'%s' is not NAMESPACE PUB_ENDPOINT[,REPLAY_ENDPOINT] "
			 "(e.g. 'llama tcp://10.0.0.1:5557,tcp://10.0.0.1:5558'; no blanks "
			 "inside an endpoint)", text);
		return -EINVAL;
	}
	if (nl >= sizeof(r->ns)) {
		snprintf(why, whylen, "'%.*s' is not a namespace name (at most %zu bytes)",
			 (int)nl, ns, sizeof(r->ns) - 1);
		return -EINVAL;
	}
	memcpy(r->ns, ns, nl);
	if (!access_name_ok(r->ns)) {
		snprintf(why, whylen, "'%s' is not a namespace name", r->ns);
		return -EINVAL;
	}
	comma = memchr(pub, ',', (size_t)(end - pub));
	pl = (size_t)((comma ? comma : end) - pub);
	if (!endpoint_ok(pub, pl) || (comma && !endpoint_ok(comma + 1,
							       (size_t)(end - comma - 1)))) {
		snprintf(why, whylen, "'%s': an endpoint is tcp://ADDR:PORT or ipc://PATH, "
			 "under %d bytes, the replay one after a comma", text,
			 TOPIC_ENDPOINT_MAX);
		return -EINVAL;
	}
	memcpy(r->pub, pub, pl);
	if (comma)
		memcpy(r->replay, comma + 1, (size_t)(end - comma - 1));
	return 0;
}

/* bytes of a route's text (route_text()), and of who binds an endpoint */
#define ROUTE_TEXT_MAX	(KVP_NAME_MAX + 2 * TOPIC_ENDPOINT_MAX + 8)
#define ROUTE_BY_MAX	(ROUTE_TEXT_MAX + 32)

/* route_text() - rule r as it was written, into out (len bytes). */
static const char *route_text(const struct topic_route *r, char *out, size_t len)
{
	snprintf(out, len, "%s %s%s%s", r->ns, r->pub, r->replay[0] ? "," : "", r->replay);
	return out;
}

/* endpoint_clash() - an endpoint of rule r (index i) that the main
 * stream, another endpoint of r, or a rule before it binds: its name in
 * *e and who binds it in by (ROUTE_BY_MAX bytes); false when none. */
static bool endpoint_clash(const struct topic_route *r, unsigned i, const char *pub,
			   const char *replay, const char **e, char *by)
{
	const char *mine[2] = { r[i].pub, r[i].replay };
	char t[ROUTE_TEXT_MAX];
	unsigned k, j;

	for (k = 0; k < 2 && mine[k][0]; k++) {
		*e = mine[k];
		if (!strcmp(mine[k], pub) || !strcmp(mine[k], replay)) {
			snprintf(by, ROUTE_BY_MAX, "%s", !strcmp(mine[k], pub) ?
				 "--kv-events" : "--kv-events-replay");
			return true;
		}
		if (k == 1 && !strcmp(mine[1], mine[0])) {
			snprintf(by, ROUTE_BY_MAX, "its own PUB socket");
			return true;
		}
		for (j = 0; j < i; j++) {
			if (!strcmp(mine[k], r[j].pub) || !strcmp(mine[k], r[j].replay)) {
				snprintf(by, ROUTE_BY_MAX, "--kv-events-router '%s'",
					 route_text(&r[j], t, sizeof(t)));
				return true;
			}
		}
	}
	return false;
}

int topic_routes_check(const struct topic_route *r, unsigned n, const char *pub,
		       const char *replay, char *why, size_t whylen)
{
	char t[ROUTE_TEXT_MAX], u[ROUTE_BY_MAX];
	const char *e;
	unsigned i, j;

	if (n > TOPIC_ROUTES_MAX) {
		snprintf(why, whylen, "--kv-events-router: %u rules, more than %d (one router "
			 "stream per namespace, %d at most)", n, TOPIC_ROUTES_MAX,
			 TOPIC_ROUTES_MAX);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		for (j = 0; j < i; j++) {
			if (!strcmp(r[i].ns, r[j].ns)) {
				snprintf(why, whylen, "--kv-events-router: namespace '%s' is in "
					 "two rules ('%s' and '%s'); a namespace has one router "
					 "stream: give it one rule", r[i].ns,
					 route_text(&r[j], t, sizeof(t)),
					 route_text(&r[i], u, sizeof(u)));
				return -EINVAL;
			}
		}
		if (endpoint_clash(r, i, pub, replay, &e, u)) {
			snprintf(why, whylen, "--kv-events-router '%s': %s is bound by %s too; "
				 "give every socket an endpoint of its own",
				 route_text(&r[i], t, sizeof(t)), e, u);
			return -EINVAL;
		}
	}
	return 0;
}
