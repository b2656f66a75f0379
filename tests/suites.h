/* SPDX-License-Identifier: MIT */
/*
 * suites.h - the Check suites of the unit-test runner (tests/check_unit.c).
 *
 * Each tests/check_<module>.c exports one <module>_suite(); the runner adds
 * them all to one SRunner.
 */
#ifndef KVPOOL_TESTS_SUITES_H
#define KVPOOL_TESTS_SUITES_H

#include <check.h>

Suite *hset_suite(void);
Suite *kernels_suite(void);
Suite *keys_suite(void);
Suite *keys_request_suite(void);
Suite *keys_sha256_suite(void);
Suite *ns_suite(void);
Suite *options_suite(void);
Suite *pool_suite(void);
Suite *prefix_suite(void);
Suite *topic_suite(void);
Suite *wire_suite(void);

#endif /* KVPOOL_TESTS_SUITES_H */
