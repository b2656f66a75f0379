/* SPDX-License-Identifier: MIT */
/*
 * cuda_ipc_stub.c - libkvpool built without CUDA: a daemon whose pool is
 * GPU memory cannot be mapped here, and there is no stream to wait for.
 */
#include <errno.h>
#include <stdio.h>

#include "client/cuda_ipc.h"

int cuda_ipc_open(const uint8_t handle[64], void **base, char *err, size_t errlen)
{
	(void)handle;
	*base = NULL;
	snprintf(err, errlen, "the daemon's pool is GPU memory, and this libkvpool "
		 "was built without CUDA (rebuild it with --with-cuda)");
	return -ENOTSUP;
}

void cuda_ipc_close(void *base)
{
	(void)base;
}

int cuda_stream_sync(struct CUstream_st *stream, char *err, size_t errlen)
{
	(void)stream;
	snprintf(err, errlen, "a CUDA stream was given, and this libkvpool was built "
		 "without CUDA");
	return -ENOTSUP;
}
