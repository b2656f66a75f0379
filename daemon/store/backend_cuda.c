/* SPDX-License-Identifier: MIT */
/*
 * backend_cuda.c - slabs in GPU memory: one cudaMalloc each on the
 * configured device, exported to clients with one cudaIpcGetMemHandle
 * (a slab belongs to one namespace, so a handle never exposes another
 * namespace's pages). The daemon's own copies (copy-on-write, the host
 * tier, staging for the NVMe tier) are cudaMemcpy calls on its device;
 * the host tier is pinned memory from cudaHostAlloc.
 *
 * Built only when configure found CUDA; backend_cuda_stub.c stands in
 * otherwise.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "daemon/store/backend.h"

struct cuda_priv {
	int device;
};

static struct cuda_priv cuda_priv;

static int cuda_err(char *err, size_t errlen, cudaError_t e, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* cuda_err() - "WHAT: CUDA error NAME: TEXT" into err; -EIO, or -ENOMEM
 * when the device ran out of memory. */
static int cuda_err(char *err, size_t errlen, cudaError_t e, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (err)
		snprintf(err, errlen, "%s: CUDA error %s: %s", what, cudaGetErrorName(e),
			 cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static int cuda_slab_create(struct backend *be, size_t bytes, struct backend_slab *s,
			    char *err, size_t errlen)
{
	struct cuda_priv *cp = be->priv;
	cudaIpcMemHandle_t h;
	cudaError_t e;
	void *p = NULL;

	_Static_assert(sizeof(h) <= BACKEND_HANDLE_BYTES, "an IPC handle fits the slab record");
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->ro_fd = -1;
	e = cudaSetDevice(cp->device);
	if (e == cudaSuccess)
		e = cudaMalloc(&p, bytes);
	if (e != cudaSuccess)
		return cuda_err(err, errlen, e, "cudaMalloc of a %zu-byte slab on device %d "
				"(lower --pool-size or --slab-size)", bytes, cp->device);
	e = cudaIpcGetMemHandle(&h, p);
	if (e != cudaSuccess) {
		cudaFree(p);
		return cuda_err(err, errlen, e, "cudaIpcGetMemHandle of a slab on device %d",
				cp->device);
	}
	s->base = p;
	s->bytes = bytes;
	memcpy(s->handle, &h, sizeof(h));
	return 0;
}

static void cuda_slab_destroy(struct backend *be, struct backend_slab *s)
{
	(void)be;
	if (s->base)
		cudaFree(s->base);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->ro_fd = -1;
}

static int cuda_copy(struct backend *be, void *dst, const void *src, size_t bytes,
		     enum cudaMemcpyKind kind)
{
	cudaError_t e = cudaMemcpy(dst, src, bytes, kind);

	(void)be;
	return e == cudaSuccess ? 0 : cuda_err(NULL, 0, e, "cudaMemcpy");
}

static int cuda_page_copy(struct backend *be, void *dst, const void *src, size_t bytes)
{
	return cuda_copy(be, dst, src, bytes, cudaMemcpyDeviceToDevice);
}

static int cuda_to_host(struct backend *be, void *host, const void *page, size_t bytes)
{
	return cuda_copy(be, host, page, bytes, cudaMemcpyDeviceToHost);
}

static int cuda_from_host(struct backend *be, void *page, const void *host, size_t bytes)
{
	return cuda_copy(be, page, host, bytes, cudaMemcpyHostToDevice);
}

/* cuda_host_alloc() - the host tier is pinned memory: page copies to and
 * from the device run at PCIe speed without a bounce buffer. */
static int cuda_host_alloc(struct backend *be, size_t bytes, void **out, char *err,
			   size_t errlen)
{
	struct cuda_priv *cp = be->priv;
	cudaError_t e = cudaSetDevice(cp->device);

	if (e == cudaSuccess)
		e = cudaHostAlloc(out, bytes, cudaHostAllocDefault);
	if (e != cudaSuccess)
		return cuda_err(err, errlen, e, "cudaHostAlloc of %zu bytes of pinned host "
				"memory for the host tier (lower --host-tier-size)", bytes);
	return 0;
}

static void cuda_host_free(struct backend *be, void *mem, size_t bytes)
{
	(void)be;
	(void)bytes;
	if (mem)
		cudaFreeHost(mem);
}

static void cuda_fini(struct backend *be)
{
	be->ops = NULL;
	be->priv = NULL;
}

static const struct backend_ops cuda_ops = {
	.name = "cuda",
	.kind = KVP_BACKEND_CUDA,
	.slab_create = cuda_slab_create,
	.slab_destroy = cuda_slab_destroy,
	.page_copy = cuda_page_copy,
	.to_host = cuda_to_host,
	.from_host = cuda_from_host,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.fini = cuda_fini,
};

int backend_cuda_init(struct backend *be, int device, char *err, size_t errlen)
{
	struct cudaDeviceProp prop;
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		snprintf(err, errlen, "no CUDA device answers (cudaGetDeviceCount: %s)",
			 n == 0 && e == cudaSuccess ? "0 devices" :
			 e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older "
			 "than this CUDA runtime" :
			 e == cudaErrorNoDevice ? "no device" : cudaGetErrorString(e));
		return -ENODEV;
	}
	if (device < 0 || device >= n) {
		snprintf(err, errlen, "--cuda-device %d: this machine has devices 0..%d",
			 device, n - 1);
		return -ENODEV;
	}
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaGetDeviceProperties(&prop, device);
	if (e != cudaSuccess)
		return cuda_err(err, errlen, e, "setting up CUDA device %d", device);
	snprintf(err, errlen, "%s (device %d, %zu MiB)", prop.name, device,
		 prop.totalGlobalMem >> 20);
	cuda_priv.device = device;
	*be = (struct backend){ .ops = &cuda_ops, .priv = &cuda_priv };
	return 0;
}
