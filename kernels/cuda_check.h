/* SPDX-License-Identifier: MIT */
/*
 * cuda_check.h - turn CUDA runtime errors into kvpool's -errno convention.
 *
 * Internal to the kernel launchers (the .cu files); nvcc compiles it as
 * C++, a C compiler with the CUDA include path accepts it too. A failure
 * is logged to stderr as
 *     kvpool: <op>: CUDA error <name>: <string>
 * and becomes -EIO, since a caller can do nothing more specific with it.
 */
#ifndef KVPOOL_CUDA_CHECK_H
#define KVPOOL_CUDA_CHECK_H

#include <errno.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

/* cuda_check() - 0 if err is cudaSuccess, else log it for op and -EIO. */
static inline int cuda_check(cudaError_t err, const char *op)
{
	if (err == cudaSuccess)
		return 0;
	fprintf(stderr, "kvpool: %s: CUDA error %s: %s\n", op,
		cudaGetErrorName(err), cudaGetErrorString(err));
	return -EIO;
}

/*
 * cuda_check_launch() - check the kernel launch just made on this thread.
 *
 * Call it right after the <<<...>>> launch. It sees configuration errors
 * (bad grid, too many resources, no kernel image for the device) but not
 * faults while the kernel runs: those surface at the next synchronizing
 * call on the stream. Returns 0 or -EIO.
 */
static inline int cuda_check_launch(const char *op)
{
	return cuda_check(cudaGetLastError(), op);
}

#endif /* KVPOOL_CUDA_CHECK_H */
