/* SPDX-License-Identifier: MIT */
/* errors.h - wire status codes to errno values, inside libkvpool. */
#ifndef KVP_ERRORS_H
#define KVP_ERRORS_H

#include <stdint.h>

/* errors_from_status() - the negative errno value for a wire status
 * (0 for KVP_S_OK, -EPROTO for a status this library does not know). */
int errors_from_status(uint32_t status);

#endif /* KVP_ERRORS_H */
