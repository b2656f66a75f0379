/* SPDX-License-Identifier: MIT */
/*
 * topic.h - the KV events' topics: a namespace's topic from a template
 * ({host}, {model}, {ns}), and the rules that keep one namespace's topic
 * from being another's or a prefix of another's (ZeroMQ subscribers match
 * topics by prefix). No I/O; docs/events.md says what a router subscribes
 * to.
 *
 * A value put into a topic is escaped: '%', '@', '|', blanks and control
 * bytes become %XX, so that '@' and '|' in a template are delimiters no
 * value contains. A template for every namespace (--kv-events-topic) must
 * hold {ns}, and {ns} (and a {model} before it) must be followed by '@'
 * or '|': then two namespaces' topics differ before either ends, and no
 * topic is another's prefix, whatever the names and models. The admin
 * may give named namespaces a topic of their own (--kv-events-ns-topic
 * 'NAMESPACE[,NAMESPACE...] TEMPLATE', any template, such as vLLM's and
 * llm-d's kv@{host}@{model}): the namespaces of one such rule may share
 * topics, and its template must part from every other template before
 * either holds a value that varies ({model} or {ns}).
 *
 * A router that reads one engine's stream (vllm-router's kv_aware policy)
 * gets one namespace's events on sockets of their own, all on topic ""
 * (--kv-events-router 'NAMESPACE PUB[,REPLAY]'): those rules are parsed
 * and kept apart here too (topic_route_*).
 */
#ifndef KVP_TOPIC_H
#define KVP_TOPIC_H

#include <stdbool.h>
#include <stddef.h>

#include "kvpool_wire.h"

#define TOPIC_RULE_MAX	256	/* bytes of one --kv-events-ns-topic rule */
#define TOPIC_ROUTES_MAX	16	/* --kv-events-router rules */
#define TOPIC_ENDPOINT_MAX	256	/* bytes of an endpoint, with its NUL */

/* A --kv-events-router rule: namespace ns's events, on topic "", go to a
 * PUB socket of their own, and replays to a ROUTER socket ("" for none). */
struct topic_route {
	char ns[KVP_NAME_MAX];
	char pub[TOPIC_ENDPOINT_MAX];
	char replay[TOPIC_ENDPOINT_MAX];
};

/*
 * topic_expand() - template t with {host}, {model} and {ns} filled in,
 * each value escaped, into out (len bytes, NUL-terminated). model is the
 * namespace's model identity: its first word, or its second when the
 * first names the engine ("vllm MODEL ...", "sglang MODEL ..."). Returns
 * 0, or -ENAMETOOLONG when the topic does not fit (out is then "").
 */
int topic_expand(const char *t, const char *host, const char *ns, const char *model,
		 char *out, size_t len);

/*
 * topic_template_check() - t may be every namespace's template: it holds
 * {ns}, and {ns} and a {model} before it are each followed by '@' or '|'.
 * Returns 0, or -EINVAL with why (whylen bytes) saying what to write.
 */
int topic_template_check(const char *t, char *why, size_t whylen);

/*
 * topic_rule_parse() - check one --kv-events-ns-topic rule's text,
 * 'NAMESPACE[,NAMESPACE...] TEMPLATE'. Returns 0 or -EINVAL with why.
 */
int topic_rule_parse(const char *text, char *why, size_t whylen);

/*
 * topic_rules_check() - the general template t and the rules r[0..n)
 * (each parsed alone already) keep every namespace's topic apart: no
 * namespace in two rules, and every rule's template parts from t and from
 * every other rule's before either holds {model} or {ns} (host is the
 * {host} they are expanded with). Returns 0 or -EINVAL with why.
 */
int topic_rules_check(const char *t, const char (*r)[TOPIC_RULE_MAX], unsigned n,
		      const char *host, char *why, size_t whylen);

/*
 * topic_template_for() - the template of namespace ns: that of the rule
 * of r[0..n) that names it, else t. The pointer is into r or t.
 * *ruled says whether a rule named it.
 */
const char *topic_template_for(const char *t, const char (*r)[TOPIC_RULE_MAX], unsigned n,
			       const char *ns, bool *ruled);

/*
 * topic_route_parse() - one --kv-events-router rule's text,
 * 'NAMESPACE PUB_ENDPOINT[,REPLAY_ENDPOINT]' (each endpoint tcp://... or
 * ipc://...), into *r. Returns 0 or -EINVAL with why.
 */
int topic_route_parse(const char *text, struct topic_route *r, char *why, size_t whylen);

/*
 * topic_routes_check() - rules r[0..n) (each parsed already) and the main
 * stream's endpoints (pub, replay: --kv-events and --kv-events-replay,
 * "" when not given) can all be bound: no namespace in two rules, no
 * endpoint twice. Returns 0 or -EINVAL with why.
 */
int topic_routes_check(const struct topic_route *r, unsigned n, const char *pub,
		       const char *replay, char *why, size_t whylen);

#endif /* KVP_TOPIC_H */
