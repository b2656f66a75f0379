/* SPDX-License-Identifier: MIT */
/*
 * check_unit.c - the unit-test runner: every module's Check suite in one
 * SRunner. Exit status 0 when all tests pass, 1 otherwise.
 */
#include <stdlib.h>

#include <check.h>

#include "suites.h"

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(kernels_suite());
	srunner_add_suite(sr, wire_suite());
	srunner_add_suite(sr, options_suite());
	srunner_add_suite(sr, hset_suite());
	srunner_add_suite(sr, pool_suite());
	srunner_add_suite(sr, prefix_suite());
	srunner_add_suite(sr, ns_suite());
	srunner_add_suite(sr, topic_suite());
	srunner_add_suite(sr, keys_sha256_suite());
	srunner_add_suite(sr, keys_suite());
	srunner_add_suite(sr, keys_request_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
