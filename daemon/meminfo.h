/* SPDX-License-Identifier: MIT */
/*
 * meminfo.h - how much memory kvpoold may still take: the machine's
 * MemAvailable, and the room left under the memory limits of its cgroup
 * and of the cgroups above it (cgroup v2 memory.max, or v1
 * memory.limit_in_bytes), whichever is least. The host backend's slabs
 * are shared memory, charged to whoever touches a page first; a pool
 * larger than this is a pool whose writers get killed.
 */
#ifndef KVP_MEMINFO_H
#define KVP_MEMINFO_H

#include <stddef.h>
#include <stdint.h>

/* mem_room() - bytes kvpoold may still take (UINT64_MAX when nothing can
 * be read); what limits it into what ("MemAvailable", "the memory limit
 * of cgroup /x"). */
uint64_t mem_room(char *what, size_t len);

#endif /* KVP_MEMINFO_H */
