/* SPDX-License-Identifier: MIT */
/*
 * remote_stub.c - the remote tier of a build without hiredis: --remote is
 * refused, saying what the build lacks.
 */
#include <errno.h>
#include <stdio.h>

#include "daemon/remote/remote.h"

int remote_open(struct remote **out, struct loop *l, const struct remote_config *c,
		const char **note, char *err, size_t errlen)
{
	(void)l;
	(void)c;
	*out = NULL;
	*note = NULL;
	snprintf(err, errlen, "--remote: this kvpoold was built without hiredis; install "
		 "libhiredis-dev (Debian/Ubuntu) and build again");
	return -ENOTSUP;
}

void remote_close(struct remote *r)
{
	(void)r;
}

int remote_get(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
	       remote_done_fn done, void *arg)
{
	(void)r, (void)be, (void)id, (void)key, (void)dst, (void)bytes, (void)done, (void)arg;
	return -EAGAIN;
}

int remote_put(struct remote *r, struct backend *be, const uint8_t id[RPAGE_ID_BYTES],
	       const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
	       remote_done_fn done, void *arg)
{
	(void)r, (void)be, (void)id, (void)key, (void)src, (void)bytes, (void)done, (void)arg;
	return -EAGAIN;
}

int remote_note_put(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		    const uint8_t key[KVP_KEY_BYTES], const void *src, uint64_t bytes,
		    uint32_t ttl_ms)
{
	(void)r, (void)id, (void)key, (void)src, (void)bytes, (void)ttl_ms;
	return -EAGAIN;
}

int remote_note_get(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		    const uint8_t key[KVP_KEY_BYTES], void *dst, uint64_t bytes,
		    remote_done_fn done, void *arg)
{
	(void)r, (void)id, (void)key, (void)dst, (void)bytes, (void)done, (void)arg;
	return -EAGAIN;
}

bool remote_touch(struct remote *r, const uint8_t id[RPAGE_ID_BYTES],
		  const uint8_t key[KVP_KEY_BYTES])
{
	(void)r, (void)id, (void)key;
	return false;
}

void remote_on_idle(struct remote *r, void (*fn)(void *arg), void *arg)
{
	(void)r, (void)fn, (void)arg;
}

bool remote_busy(const struct remote *r)
{
	(void)r;
	return false;
}

bool remote_up(const struct remote *r)
{
	(void)r;
	return false;
}

bool remote_serving(const struct remote *r)
{
	(void)r;
	return false;
}

uint64_t remote_fetch_ns(const struct remote *r, uint32_t n, uint64_t bytes)
{
	(void)r, (void)n, (void)bytes;
	return UINT64_MAX;
}

void remote_get_stats(const struct remote *r, struct remote_stats *st)
{
	(void)r;
	*st = (struct remote_stats){ 0 };
}

const char *remote_describe(const struct remote *r)
{
	(void)r;
	return "(none)";
}

void remote_print_libraries(FILE *f)
{
	(void)f;	/* built without the remote tier: none of its libraries */
}
