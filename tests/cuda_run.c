/* SPDX-License-Identifier: MIT */
/*
 * cuda_run.c - the main() of the CUDA test programs.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_run.h"

#define EXIT_SKIP	77

int cuda_run_suite(Suite *(*make)(void))
{
	cudaError_t err;
	SRunner *sr;
	int count = 0, failed;

	err = cudaGetDeviceCount(&count);
	if (err != cudaSuccess || count == 0) {
		printf("SKIP: no CUDA device answers (cudaGetDeviceCount: %s)\n",
		       err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
		return EXIT_SKIP;
	}

	sr = srunner_create(make());
	/* CUDA is initialized now and does not survive fork(): run the
	 * tests in this process whatever CK_FORK says. */
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
