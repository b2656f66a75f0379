/* SPDX-License-Identifier: MIT */
/*
 * model_cuda_stub.c - the GPU path of a build without CUDA: it says so,
 * and the model server takes the host path only.
 */
#include <errno.h>
#include <stdio.h>

#include "model_cuda.h"

int model_cuda_open(const struct model_cuda_weights *w, struct model_cuda **out,
		    char *err, size_t errlen)
{
	(void)w;
	(void)out;
	snprintf(err, errlen, "this build has no CUDA (configure found no CUDA "
		 "toolkit; rebuild with --with-cuda)");
	return -ENOTSUP;
}

void model_cuda_close(struct model_cuda *g)
{
	(void)g;
}

int model_cuda_forward(struct model_cuda *g, const struct model_cuda_batch *b,
		       float *logits)
{
	(void)g;
	(void)b;
	(void)logits;
	return -ENOTSUP;
}
