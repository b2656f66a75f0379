/* SPDX-License-Identifier: MIT */
/*
 * cuda_ipc.h - libkvpool's use of CUDA: opening the daemon's GPU slabs
 * through their IPC handles, and waiting for a writer's stream. Builds
 * without CUDA get stubs that return -ENOTSUP (cuda_ipc_stub.c).
 */
#ifndef KVP_CUDA_IPC_H
#define KVP_CUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

struct CUstream_st;

/* cuda_ipc_open() - map a slab from its 64-byte IPC handle into this
 * process; *base is a device pointer. Returns 0 or -errno with err. */
int cuda_ipc_open(const uint8_t handle[64], void **base, char *err, size_t errlen);

/* cuda_ipc_close() - unmap a slab cuda_ipc_open() mapped. */
void cuda_ipc_close(void *base);

/* cuda_stream_sync() - wait until the work queued on stream is done. */
int cuda_stream_sync(struct CUstream_st *stream, char *err, size_t errlen);

#endif /* KVP_CUDA_IPC_H */
