/* SPDX-License-Identifier: MIT */
/*
 * check_topic.c - the KV events' topics (daemon/observe/topic.c): values
 * escaped, templates that keep topics apart, the admin's rules.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <check.h>

#include "daemon/observe/topic.h"
#include "suites.h"

/* topic() - t expanded on host "node-1" for ns and model (a static buffer). */
static const char *topic(const char *t, const char *ns, const char *model)
{
	static char out[512];

	ck_assert_int_eq(topic_expand(t, "node-1", ns, model, out, sizeof(out)), 0);
	return out;
}

/* prefix_related() - a subscriber of one topic receives the other's. */
static bool prefix_related(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	return !strncmp(a, b, la < lb ? la : lb);
}

START_TEST(test_topic_default_keeps_namespaces_apart)
{
	static const char *const t = "kv@{host}|{ns}@{model}";
	/* pairs an attacker would choose: the same model, a model that
	 * extends the victim's, names that extend or contain delimiters */
	static const char *const who[][2] = {
		{ "prod", "meta-llama/Llama-3.1-8B" }, { "evil", "meta-llama/Llama-3.1-8B" },
		{ "evil", "meta-llama/Llama-3.1-8Bx" }, { "prodx", "meta-llama/Llama-3.1-8B" },
		{ "prod@meta-llama", "x" }, { "pr", "od@meta-llama/Llama-3.1-8B" },
		{ "prod", "meta-llama/Llama-3.1-8B|x" }, { "p|rod", "m" },
	};
	char a[512];
	size_t i, j;
	char why[512];

	ck_assert_int_eq(topic_template_check(t, why, sizeof(why)), 0);
	ck_assert_str_eq(topic(t, "prod", "vllm meta-llama/Llama-3.1-8B bfloat16 sha256 b16 "
			       "tp0/1"), "kv@node-1|prod@meta-llama/Llama-3.1-8B");
	for (i = 0; i < sizeof(who) / sizeof(who[0]); i++) {
		snprintf(a, sizeof(a), "%s", topic(t, who[i][0], who[i][1]));
		for (j = 0; j < sizeof(who) / sizeof(who[0]); j++) {
			if (i == j || !strcmp(who[i][0], who[j][0]))
				continue;
			ck_assert_msg(!prefix_related(a, topic(t, who[j][0], who[j][1])),
				      "'%s' and '%s' meet", a, topic(t, who[j][0], who[j][1]));
		}
	}
}
END_TEST

START_TEST(test_topic_values_are_escaped)
{
	ck_assert_str_eq(topic("{ns}|{model}", "a@b", "m|x%y z"), "a%40b|m%7Cx%25y");
	ck_assert_str_eq(topic("t@{host}@{ns}@", "n", "m"), "t@node-1@n@");
}
END_TEST

START_TEST(test_topic_templates_that_let_topics_meet_are_refused)
{
	static const char *const bad[] = {
		"kv@{host}@{model}",		/* no {ns}: the old default */
		"kv@{host}@{model}@{ns}",	/* {ns} last: prod is evil's start */
		"kv@{host}@{model}-{ns}|",	/* model x-y ns z = model x ns y-z */
		"kv@{ns}{model}",
	};
	char why[512];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(topic_template_check(bad[i], why, sizeof(why)) == -EINVAL,
			      "'%s' taken", bad[i]);
	ck_assert_ptr_nonnull(strstr(why, "{ns} is not followed by @ or |"));
	ck_assert_int_eq(topic_template_check("kv@{host}@{model}@{ns}|", why, sizeof(why)), 0);
	ck_assert_int_eq(topic_template_check("{ns}@{model}", why, sizeof(why)), 0);
	ck_assert_int_eq(topic_template_check("kv@{host}@{model}", why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "--kv-events-ns-topic 'NAMESPACE kv@{host}@{model}'"));
}
END_TEST

START_TEST(test_topic_rules_name_namespaces_and_stay_apart)
{
	static const char t[] = "kv@{host}|{ns}@{model}";
	char r[4][TOPIC_RULE_MAX], why[512];
	const char *got;
	bool ruled;

	ck_assert_int_eq(topic_rule_parse("llama.tp0,llama.tp1 kv@{host}@{model}", why,
					  sizeof(why)), 0);
	ck_assert_int_eq(topic_rule_parse("llama", why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(topic_rule_parse("bad!name kv", why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(topic_rule_parse("a kv@{host} x", why, sizeof(why)), -EINVAL);
	snprintf(r[0], sizeof(r[0]), "llama.tp0,llama.tp1 kv@{host}@{model}");
	ck_assert_int_eq(topic_rules_check(t, r, 1, "node-1", why, sizeof(why)), 0);
	got = topic_template_for(t, r, 1, "llama.tp1", &ruled);
	ck_assert(ruled);
	ck_assert_str_eq(got, "kv@{host}@{model}");
	ck_assert_str_eq(topic(got, "llama.tp1", "vllm meta-llama/Llama-3.1-8B x"),
			 "kv@node-1@meta-llama/Llama-3.1-8B");
	got = topic_template_for(t, r, 1, "llama", &ruled);
	ck_assert(!ruled);
	ck_assert_str_eq(got, t);
	/* a rule whose topics could start another namespace's */
	snprintf(r[1], sizeof(r[1]), "x kv@{host}|y");
	ck_assert_int_eq(topic_rules_check(t, r, 2, "node-1", why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "could be those of other namespaces"));
	/* two rules of one template: their topics could meet */
	snprintf(r[1], sizeof(r[1]), "qwen kv@{host}@{model}");
	ck_assert_int_eq(topic_rules_check(t, r, 2, "node-1", why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "could meet"));
	/* one namespace in two rules */
	snprintf(r[1], sizeof(r[1]), "llama.tp1 other@{model}");
	ck_assert_int_eq(topic_rules_check(t, r, 2, "node-1", why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "'llama.tp1' is in two rules"));
}
END_TEST

START_TEST(test_topic_too_long_is_refused_not_cut)
{
	char out[16];

	ck_assert_int_eq(topic_expand("kv@{host}|{ns}@{model}", "node-1", "prod",
				      "meta-llama/Llama-3.1-8B", out, sizeof(out)), -ENAMETOOLONG);
	ck_assert_str_eq(out, "");
}
END_TEST

Suite *topic_suite(void)
{
	Suite *s = suite_create("topic");
	TCase *tc = tcase_create("topics");

	tcase_add_test(tc, test_topic_default_keeps_namespaces_apart);
	tcase_add_test(tc, test_topic_values_are_escaped);
	tcase_add_test(tc, test_topic_templates_that_let_topics_meet_are_refused);
	tcase_add_test(tc, test_topic_rules_name_namespaces_and_stay_apart);
	tcase_add_test(tc, test_topic_too_long_is_refused_not_cut);
	suite_add_tcase(s, tc);
	return s;
}
