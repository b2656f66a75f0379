/* SPDX-License-Identifier: MIT */
/* meminfo.c - see meminfo.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meminfo.h"

/* read_u64() - the number that starts file path ("max": UINT64_MAX);
 * false when it cannot be read. */
static int read_u64(const char *path, uint64_t *v)
{
	char buf[64];
	FILE *f = fopen(path, "re");
	int ok;

	if (!f)
		return 0;
	ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	if (!ok)
		return 0;
	*v = strncmp(buf, "max", 3) == 0 ? UINT64_MAX : strtoull(buf, NULL, 10);
	return 1;
}

/* reclaimable() - the page cache (less shared memory, which cannot be
 * dropped) that cgroup dir's usage counts: stat keys file/shmem (v2) or
 * total_cache/total_shmem (v1). */
static uint64_t reclaimable(const char *dir, int v2)
{
	uint64_t cache = 0, shmem = 0, v;
	char path[8300], key[64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/memory.stat", dir);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fscanf(f, "%63s %" SCNu64, key, &v) == 2) {
		if (!strcmp(key, v2 ? "file" : "total_cache"))
			cache = v;
		else if (!strcmp(key, v2 ? "shmem" : "total_shmem"))
			shmem = v;
	}
	fclose(f);
	return cache > shmem ? cache - shmem : 0;
}

/* cgroup_room() - the least room under the limits of cgroup dir (a path
 * below root) and of every cgroup above it, into *room. */
static void cgroup_room(const char *root, const char *limit, const char *usage,
			const char *cg, uint64_t *room, char *what, size_t len)
{
	char path[8192], dir[4096];
	uint64_t lim, use, drop;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", cg);
	for (;;) {
		snprintf(path, sizeof(path), "%s%s/%s", root, dir, limit);
		if (read_u64(path, &lim) && lim < (1ull << 62)) {
			snprintf(path, sizeof(path), "%s%s/%s", root, dir, usage);
			if (!read_u64(path, &use))
				use = 0;
			snprintf(path, sizeof(path), "%s%s", root, dir);
			drop = reclaimable(path, strcmp(limit, "memory.max") == 0);
			use = use > drop ? use - drop : 0;
			if ((use < lim ? lim - use : 0) < *room) {
				*room = use < lim ? lim - use : 0;
				snprintf(what, len, "the memory limit of cgroup %s (%" PRIu64
					 " bytes, %" PRIu64 " in use besides page cache)", dir[0] ? dir : "/",
					 lim, use);
			}
		}
		slash = strrchr(dir, '/');
		if (!slash || !dir[0])
			break;
		*slash = '\0';
	}
}

uint64_t mem_room(char *what, size_t len)
{
	uint64_t room = UINT64_MAX, kb;
	char line[4096], *path;
	FILE *f;

	snprintf(what, len, "nothing (no /proc/meminfo)");
	f = fopen("/proc/meminfo", "re");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1) {
				room = kb * 1024;
				snprintf(what, len, "MemAvailable of /proc/meminfo");
			}
		fclose(f);
	}
	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return room;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "0::", 3) == 0) {		/* v2 */
			path = line + 3;
			cgroup_room("/sys/fs/cgroup", "memory.max", "memory.current", path,
				    &room, what, len);
			cgroup_room("/sys/fs/cgroup/unified", "memory.max", "memory.current",
				    path, &room, what, len);
		} else if ((path = strstr(line, ":memory:"))) {	/* v1 */
			cgroup_room("/sys/fs/cgroup/memory", "memory.limit_in_bytes",
				    "memory.usage_in_bytes", path + 8, &room, what, len);
		}
	}
	fclose(f);
	return room;
}
