/* SPDX-License-Identifier: MIT */
/*
 * errors.c - the library's error vocabulary: wire status codes map to
 * errno values, and kvp_strerror() describes them in kvpool's terms.
 */
#include <errno.h>
#include <string.h>

#include "kvpool.h"
#include "client/errors.h"
#include "client/wire.h"

static const int status_errno[KVP_S__COUNT] = {
	[KVP_S_OK] = 0,
	[KVP_S_PROTO] = EPROTO,
	[KVP_S_VERSION] = EPROTONOSUPPORT,
	[KVP_S_OP] = EOPNOTSUPP,
	[KVP_S_INVAL] = EINVAL,
	[KVP_S_NOSPC] = ENOSPC,
	[KVP_S_STALE] = ESTALE,
	[KVP_S_PERM] = EACCES,
	[KVP_S_LIMIT] = EDQUOT,
	[KVP_S_NOENT] = ENOENT,
	[KVP_S_MISMATCH] = EBADE,
	[KVP_S_INTERNAL] = EIO,
	[KVP_S_STATE] = ENOTCONN,
	[KVP_S_BUSY] = EBUSY,
};

int errors_from_status(uint32_t status)
{
	if (status >= KVP_S__COUNT)
		return -EPROTO;
	return -status_errno[status];
}

KVP_API const char *kvp_strerror(int err)
{
	uint32_t s;

	if (err > 0)
		err = -err;
	/* The errno values that carry a kvpool meaning read in its terms. */
	for (s = 1; s < KVP_S__COUNT; s++)
		if (status_errno[s] == -err)
			return wire_status_str(s);
	if (err == 0)
		return "success";
	return strerror(-err);
}

KVP_API const char *kvp_version(void)
{
	return PACKAGE_VERSION;
}
