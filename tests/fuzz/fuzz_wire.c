/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire.c - libFuzzer harness of the wire codec (client/wire.c): any
 * bytes through every decoder the daemon and the library use on input
 * from the other side. A decoder must refuse what does not fit, and what
 * it accepts must be self-consistent: counts that match the length, names
 * that end inside their fields. ASan and UBSan catch the rest.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/wire.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvp_wire_hdr h;
	struct kvp_wire_hello hello;
	struct kvp_wire_acquire a;
	struct kvp_wire_publish pb;
	struct kvp_wire_publish_partial pp;
	struct kvp_wire_stats st;
	struct kvp_wire_ns_stats ns[4];
	const uint8_t *keys, *handoff;
	const void *raw, *ents, *handles;
	size_t nraw;
	uint8_t out[KVP_WIRE_HDR_SIZE];
	uint32_t n;
	uint16_t v;
	int rc;

	if (wire_hdr_decode(data, size, &h) == 0) {
		CHECK(size >= KVP_WIRE_HDR_SIZE);
		CHECK((size_t)h.len == size - KVP_WIRE_HDR_SIZE);
		wire_hdr_encode(out, &h);	/* what decodes encodes the same */
		CHECK(memcmp(out, data, KVP_WIRE_HDR_SIZE) == 0);
	}
	if (size < 1)
		return 0;
	/* the first byte picks the payload decoder, the rest is the payload */
	data++;
	size--;
	switch (data[-1] % 6) {
	case 0:
		if (wire_hello_decode(data, size, &hello) == 0) {
			CHECK(memchr(hello.ns, 0, sizeof(hello.ns)));
			CHECK(memchr(hello.model, 0, sizeof(hello.model)));
			CHECK(memchr(hello.client_name, 0, sizeof(hello.client_name)));
		}
		break;
	case 1:
		if (wire_pages_decode(data, size, &n, &handles) == 0)
			CHECK(size == sizeof(struct kvp_wire_pages) + (size_t)n * 8);
		break;
	case 2:
		/* the selector's top bit: a connection of the previous version */
		v = data[-1] & 0x80 ? KVP_WIRE_VERSION_MIN : KVP_WIRE_VERSION;
		if (wire_acquire_decode(v, data, size, &a, &keys, &raw, &handoff) == 0) {
			CHECK(size == sizeof(a) + (size_t)a.nkeys * KVP_KEY_BYTES +
				      (size_t)a.ntokens * 4 + (handoff ? KVP_KEY_BYTES : 0));
			CHECK(!handoff == !(a.flags & wire_acq_flags(v) & KVP_WIRE_ACQ_HANDOFF));
			CHECK(!handoff || handoff + KVP_KEY_BYTES == data + size);
		}
		break;
	case 3:
		if (wire_publish_decode(data, size, &pb, &ents, &raw, &nraw) == 0)
			CHECK(size == sizeof(pb) + (size_t)pb.n *
				      sizeof(struct kvp_wire_publish_ent) + nraw * 4);
		break;
	case 4:
		if (wire_partial_decode(data, size, &pp, &raw) == 0)
			CHECK(size == sizeof(pp) + (size_t)pp.ntokens * 4);
		break;
	case 5:
		rc = wire_stats_decode(data, size, &st, ns, 4);
		if (rc >= 0)
			CHECK(size == wire_stats_size(st.namespaces));
		break;
	}
	return 0;
}
