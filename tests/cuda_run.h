/* SPDX-License-Identifier: MIT */
/*
 * cuda_run.h - what the CUDA test programs share: the check of a CUDA
 * call, and a main() that skips when no device answers.
 */
#ifndef KVPOOL_TESTS_CUDA_RUN_H
#define KVPOOL_TESTS_CUDA_RUN_H

#include <check.h>
#include <cuda_runtime_api.h>

/* Fails the test with the CUDA error if the call did not succeed. */
#define CUDA_OK(call)							\
	do {								\
		cudaError_t err_ = (call);				\
		ck_assert_msg(err_ == cudaSuccess, "%s: %s", #call,	\
			      cudaGetErrorString(err_));		\
	} while (0)

/*
 * cuda_run_suite() - the program's exit status: 77 (skip, saying why)
 * when no CUDA device answers, else the result of running the suite
 * that make() builds, in this process (CUDA does not survive fork()).
 */
int cuda_run_suite(Suite *(*make)(void));

#endif
