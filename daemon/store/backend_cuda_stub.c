/* SPDX-License-Identifier: MIT */
/*
 * backend_cuda_stub.c - the CUDA backend of a build without CUDA: it
 * says so, and --backend auto takes the host backend.
 */
#include <errno.h>
#include <stdio.h>

#include "daemon/store/backend.h"

int backend_cuda_init(struct backend *be, int device, char *err, size_t errlen)
{
	(void)be;
	(void)device;
	snprintf(err, errlen, "this kvpoold was built without CUDA (configure found "
		 "no CUDA toolkit; rebuild with --with-cuda)");
	return -ENOTSUP;
}
