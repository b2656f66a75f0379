/* SPDX-License-Identifier: MIT */
/*
 * cuda_ipc.c - libkvpool's side of the CUDA backend: a slab is opened once
 * with cudaIpcOpenMemHandle and closed with the client; publishing from
 * a GPU waits for the writer's stream first.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "client/cuda_ipc.h"

int cuda_ipc_open(const uint8_t handle[64], void **base, char *err, size_t errlen)
{
	cudaIpcMemHandle_t h;
	cudaError_t e;

	memcpy(&h, handle, sizeof(h));
	e = cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "cudaIpcOpenMemHandle of a kvpool slab: %s: %s "
			 "(is this process on the daemon's GPU, and may it see it?)",
			 cudaGetErrorName(e), cudaGetErrorString(e));
		return -EIO;
	}
	return 0;
}

void cuda_ipc_close(void *base)
{
	cudaIpcCloseMemHandle(base);
}

int cuda_stream_sync(struct CUstream_st *stream, char *err, size_t errlen)
{
	cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);

	if (e != cudaSuccess) {
		snprintf(err, errlen, "cudaStreamSynchronize before publishing: %s: %s",
			 cudaGetErrorName(e), cudaGetErrorString(e));
		return -EIO;
	}
	return 0;
}
