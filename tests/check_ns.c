/* SPDX-License-Identifier: MIT */
/*
 * check_ns.c - unit tests of the namespace table (daemon/requests/ns.c): where a
 * namespace's pages live. Beside a device backend (here the host
 * backend's memory under the cuda kind, as no GPU answers in the tests),
 * a client that asks for host pages gets a namespace of host memory with
 * a budget of its own, one that asks nothing gets the device's, and a
 * client that asks for host pages in a namespace of device pages is
 * refused saying so.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "client/stats_text.h"
#include "client/utf8.h"
#include "daemon/requests/ns.h"
#include "daemon/store/backend.h"
#include "daemon/store/pool.h"
#include "suites.h"

#define SLAB (1u << 20)

static struct backend host, dev;
static struct backend_ops dev_ops;
static struct pool *p;
static struct ns_table t;
static struct ns_config k;
static const struct ns_joiner writer = { .uid = 1000, .may_create = true, .unlimited = true };
static char err[512];

static void setup(void)
{
	ck_assert_int_eq(backend_host_init(&host, err, sizeof(err)), 0);
	ck_assert_int_eq(backend_host_init(&dev, err, sizeof(err)), 0);
	dev_ops = *dev.ops;
	dev_ops.name = "test-device";
	dev_ops.kind = KVP_BACKEND_CUDA;
	dev.ops = &dev_ops;
	ck_assert_int_eq(pool_init(&p, &dev, 4 * SLAB, SLAB), 0);
	ck_assert_int_eq(pool_mem_add(p, &host, 2 * SLAB), 1);
	memset(&t, 0, sizeof(t));
	memset(&k, 0, sizeof(k));
	k.scheme = KVP_WIRE_KEYS_VLLM_SHA256;
	k.seed = "0";
	k.salt = "";
	k.pinned_pct = 10;
	k.max_per_uid = 16;
	k.host_memory = 1;
	err[0] = '\0';
}

static void teardown(void)
{
	ns_table_fini(&t);
	pool_free(p);
	host.ops->fini(&host);
	dev.ops->fini(&dev);
}

static struct kvp_wire_hello hello(const char *name, uint32_t memory)
{
	struct kvp_wire_hello h;

	memset(&h, 0, sizeof(h));
	strcpy(h.ns, name);
	strcpy(h.model, "test/model");
	h.layers = 2;
	h.kv_heads = 2;
	h.head_dim = 64;
	h.block_tokens = 16;
	h.dtype = KVP_WIRE_DTYPE_F16;
	h.memory = memory;
	return h;
}

START_TEST(test_ns_host_pages_beside_a_device_come_from_host_memory)
{
	struct kvp_wire_hello h = hello("engine", KVP_MEMORY_HOST);
	struct pool_counts c;
	uint64_t pages[8];
	struct ns *n;

	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)), 0);
	ck_assert_ptr_eq(n->be, &host);
	ck_assert_int_eq(n->be->ops->kind, KVP_BACKEND_HOST);
	ck_assert_ptr_eq(pool_ns_backend(p, n->pool_ns), &host);
	ck_assert_int_eq(pool_alloc(p, n->pool_ns, 8, pages, err, sizeof(err)), 0);
	ck_assert_uint_eq(pool_mem_slabs(p, 1), 1);
	ck_assert_uint_eq(pool_mem_slabs(p, 0), 0);
	/* its budget is the host memory's: 2 slabs */
	ck_assert_uint_eq(pool_ns_capacity(p, n->pool_ns), 2 * (SLAB / n->page_bytes));
	pool_counts(p, n->pool_ns, &c);
	ck_assert_uint_eq(c.by_state[PAGE_PRIVATE], 8);
	for (int i = 0; i < 8; i++)
		pool_unref(p, pages[i]);
}
END_TEST

START_TEST(test_ns_without_asking_a_namespace_has_the_backends_pages)
{
	struct kvp_wire_hello h = hello("server", KVP_MEMORY_DEFAULT);
	struct ns *n;

	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)), 0);
	ck_assert_ptr_eq(n->be, &dev);
	ck_assert_uint_eq(pool_ns_capacity(p, n->pool_ns), 4 * (SLAB / n->page_bytes));
}
END_TEST

START_TEST(test_ns_host_pages_in_a_namespace_of_device_pages_are_refused)
{
	struct kvp_wire_hello h = hello("server", KVP_MEMORY_DEFAULT);
	struct ns *n, *m = NULL;

	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)), 0);
	n->clients++;
	h.memory = KVP_MEMORY_HOST;
	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &m, err, sizeof(err)),
			 -KVP_S_MISMATCH);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(err, "namespace 'server' holds GPU pages (kvpoold's test-device "
			      "backend), this client asks for host pages"), "%s", err);
	ck_assert_uint_eq(t.count, 1);
	/* asking nothing joins it, whatever memory it has */
	h.memory = KVP_MEMORY_DEFAULT;
	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &m, err, sizeof(err)), 0);
	ck_assert_ptr_eq(m, n);
	n->clients--;
}
END_TEST

START_TEST(test_ns_a_client_asking_nothing_joins_a_namespace_of_host_pages)
{
	struct kvp_wire_hello h = hello("engine", KVP_MEMORY_HOST);
	struct ns *n, *m;

	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)), 0);
	h.memory = KVP_MEMORY_DEFAULT;
	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &m, err, sizeof(err)), 0);
	ck_assert_ptr_eq(m, n);
	ck_assert_ptr_eq(m->be, &host);
}
END_TEST

START_TEST(test_ns_bad_memory_and_no_host_pages_are_refused_saying_so)
{
	struct kvp_wire_hello h = hello("engine", 7);
	struct ns *n = NULL;

	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)), -KVP_S_INVAL);
	ck_assert_str_eq(err, "namespace 'engine': memory 7 is not 0 (the daemon's backend) "
			 "or 1 (host pages)");
	k.host_memory = -1;	/* --host-pool-size 0 */
	h.memory = KVP_MEMORY_HOST;
	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)), -KVP_S_INVAL);
	ck_assert_msg(strstr(err, "kvpoold serves none beside its cuda backend "
			      "(--host-pool-size 0)"), "%s", err);
	ck_assert_ptr_null(n);
	ck_assert_uint_eq(t.count, 0);
	ck_assert_uint_eq(pool_mem_slabs(p, 0) + pool_mem_slabs(p, 1), 0);
}
END_TEST

START_TEST(test_ns_a_model_identity_that_is_not_printable_utf8_is_refused)
{
	static const char *const bad[] = {
		"caf\xe9",		/* Latin-1, not UTF-8 */
		"org/\xc0\xaf" "model",	/* an overlong '/' */
		"a\xed\xa0\x80" "b",	/* a surrogate */
		"line\nbreak",		/* a control character */
		"c1\xc2\x85",		/* a C1 control (NEL) */
		"end\xe2\x82",	/* cut short */
	};
	struct kvp_wire_hello h = hello("engine", 0);
	struct ns *n = NULL;
	unsigned i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(h.model, sizeof(h.model), "%s", bad[i]);
		ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)),
				 -KVP_S_INVAL);
		ck_assert_msg(strstr(err, "the model identity is not printable UTF-8"), "%s", err);
		ck_assert_ptr_null(n);
		ck_assert_uint_eq(t.count, 0);
	}
	/* names in any script are fine */
	snprintf(h.model, sizeof(h.model), "%s", "\xe6\xa8\xa1\xe5\x9e\x8b/caf\xc3\xa9-\xf0\x9f\xa6\x99");
	ck_assert_int_eq(ns_join(&t, p, &k, &h, &writer, &n, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(n);
}
END_TEST

/* A name or model read back from an old tier file is printed, escaped:
 * bytes that are not UTF-8 and control characters as U+FFFD, quotes and
 * backslashes as the exposition format says. */
START_TEST(test_ns_metrics_labels_are_valid_utf8_whatever_the_model)
{
	kvp_stats_t st;
	kvp_ns_stats_t ns;
	char *text = NULL, *line;
	size_t len = 0;
	FILE *out;

	memset(&st, 0, sizeof(st));
	memset(&ns, 0, sizeof(ns));
	strcpy(ns.name, "engine");
	strcpy(ns.model, "caf\xe9 \"q\" \\ \x01\xf0\x9f\xa6\x99");
	out = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(out);
	stats_metrics(out, &st, &ns, 1);
	fclose(out);
	line = strstr(text, "kvpool_namespace_info{");
	ck_assert_ptr_nonnull(line);
	ck_assert_msg(strstr(line, "model=\"caf\xef\xbf\xbd \\\"q\\\" \\\\ \xef\xbf\xbd\xf0\x9f\xa6\x99\""),
		      "%.200s", line);
	for (size_t i = 0, n; text[i]; i += n) {	/* the whole page is UTF-8 */
		n = utf8_char(text + i, strlen(text + i));
		ck_assert_msg(n, "byte %zu of the page is not UTF-8", i);
	}
	free(text);
}
END_TEST

Suite *ns_suite(void)
{
	Suite *s = suite_create("ns");
	TCase *tc;

	tc = tcase_create("memory");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_ns_host_pages_beside_a_device_come_from_host_memory);
	tcase_add_test(tc, test_ns_without_asking_a_namespace_has_the_backends_pages);
	tcase_add_test(tc, test_ns_host_pages_in_a_namespace_of_device_pages_are_refused);
	tcase_add_test(tc, test_ns_a_client_asking_nothing_joins_a_namespace_of_host_pages);
	tcase_add_test(tc, test_ns_bad_memory_and_no_host_pages_are_refused_saying_so);
	tcase_add_test(tc, test_ns_a_model_identity_that_is_not_printable_utf8_is_refused);
	tcase_add_test(tc, test_ns_metrics_labels_are_valid_utf8_whatever_the_model);
	suite_add_tcase(s, tc);
	return s;
}
