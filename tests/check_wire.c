/* SPDX-License-Identifier: MIT */
/*
 * check_wire.c - unit tests of the wire codec (client/wire.c): exact bytes
 * on the wire, and refusal of every malformed header.
 */
#include <string.h>

#include <check.h>

#include "client/wire.h"
#include "suites.h"

static const struct kvp_wire_hdr sample = {
	.op = KVP_OP_STATS, .flags = KVP_WIRE_F_REPLY, .status = KVP_S_NOSPC,
	.req_id = 0x0102030405060708ull, .len = 4,
};

START_TEST(test_wire_header_is_little_endian_at_fixed_offsets)
{
	static const unsigned char want[KVP_WIRE_HDR_SIZE] = {
		'K', 'V', 'P', '1',		/* magic */
		1, 0,				/* version */
		KVP_OP_STATS, 0,		/* op */
		1, 0, 0, 0,			/* flags */
		KVP_S_NOSPC, 0, 0, 0,		/* status */
		8, 7, 6, 5, 4, 3, 2, 1,		/* req_id */
		4, 0, 0, 0,			/* len */
		0, 0, 0, 0,			/* reserved */
	};
	unsigned char buf[KVP_WIRE_HDR_SIZE];

	wire_hdr_encode(buf, &sample);
	ck_assert_mem_eq(buf, want, sizeof(want));
}
END_TEST

START_TEST(test_wire_header_round_trips)
{
	unsigned char buf[KVP_WIRE_HDR_SIZE + 4] = { 0 };
	struct kvp_wire_hdr h;

	wire_hdr_encode(buf, &sample);
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), 0);
	ck_assert_uint_eq(h.op, sample.op);
	ck_assert_uint_eq(h.flags, sample.flags);
	ck_assert_uint_eq(h.status, sample.status);
	ck_assert_uint_eq(h.req_id, sample.req_id);
	ck_assert_uint_eq(h.len, 4);
}
END_TEST

START_TEST(test_wire_short_message_is_proto)
{
	unsigned char buf[KVP_WIRE_HDR_SIZE] = { 0 };
	struct kvp_wire_hdr h;

	wire_hdr_encode(buf, &sample);
	ck_assert_int_eq(wire_hdr_decode(buf, KVP_WIRE_HDR_SIZE - 1, &h), -KVP_S_PROTO);
	ck_assert_int_eq(wire_hdr_decode(buf, 0, &h), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_bad_magic_is_proto)
{
	unsigned char buf[KVP_WIRE_HDR_SIZE + 4] = { 0 };
	struct kvp_wire_hdr h;

	wire_hdr_encode(buf, &sample);
	buf[0] ^= 0xff;
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_other_version_is_reported_with_its_request_id)
{
	unsigned char buf[KVP_WIRE_HDR_SIZE + 4] = { 0 };
	struct kvp_wire_hdr h;

	wire_hdr_encode(buf, &sample);
	buf[4] = 2;
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), -KVP_S_VERSION);
	ck_assert_uint_eq(h.version, 2);
	ck_assert_uint_eq(h.req_id, sample.req_id);
}
END_TEST

START_TEST(test_wire_length_must_match_the_packet)
{
	unsigned char buf[KVP_WIRE_HDR_SIZE + 8] = { 0 };
	struct kvp_wire_hdr h;

	wire_hdr_encode(buf, &sample);	/* says 4 payload bytes */
	ck_assert_int_eq(wire_hdr_decode(buf, KVP_WIRE_HDR_SIZE + 8, &h), -KVP_S_PROTO);
	ck_assert_int_eq(wire_hdr_decode(buf, KVP_WIRE_HDR_SIZE + 3, &h), -KVP_S_PROTO);
	ck_assert_int_eq(wire_hdr_decode(buf, KVP_WIRE_HDR_SIZE + 4, &h), 0);
}
END_TEST

START_TEST(test_wire_reserved_bits_are_proto)
{
	unsigned char buf[KVP_WIRE_HDR_SIZE + 4] = { 0 };
	struct kvp_wire_hdr h;

	wire_hdr_encode(buf, &sample);
	buf[28] = 1;			/* reserved word */
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), -KVP_S_PROTO);
	wire_hdr_encode(buf, &sample);
	buf[9] = 0x80;			/* unknown flag */
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_stats_round_trip_every_field)
{
	struct kvp_wire_stats in, out;
	unsigned char buf[sizeof(in)];

	memset(&in, 0, sizeof(in));
	strcpy(in.version, "9.8.7");
	in.pid = 4242;
	in.backend = KVP_BACKEND_HOST;
	in.uptime_ms = 123456789;
	in.clients = 7;
	in.max_clients = 256;
	/* distinct values, wider than 32 bits, in every counter */
	in.connections_total = 0x100000001ull;
	in.connections_refused = 0x200000002ull;
	in.requests_total = 0x300000003ull;
	in.protocol_errors = 0x400000004ull;
	in.pages_total = 0x500000005ull;
	in.pages_free = 0x600000006ull;
	in.pages_leased = 0x700000007ull;
	in.pages_cached = 0x800000008ull;
	in.pages_spilled = 0x900000009ull;
	in.pages_inflight = 0xa0000000aull;
	in.page_size = 0xb0000000bull;
	wire_stats_encode(buf, &in);
	ck_assert_int_eq(wire_stats_decode(buf, sizeof(buf), &out), 0);
	ck_assert_mem_eq(&in, &out, sizeof(in));
	ck_assert_int_eq(wire_stats_decode(buf, sizeof(buf) - 1, &out), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_stats_version_is_always_terminated)
{
	struct kvp_wire_stats out;
	unsigned char buf[sizeof(out)];

	memset(buf, 'x', sizeof(buf));
	ck_assert_int_eq(wire_stats_decode(buf, sizeof(buf), &out), 0);
	ck_assert_uint_eq(strlen(out.version), sizeof(out.version) - 1);
}
END_TEST

START_TEST(test_wire_every_status_has_a_description)
{
	uint32_t s;

	for (s = 0; s < KVP_S__COUNT; s++)
		ck_assert_str_ne(wire_status_str(s), "unknown status");
	ck_assert_str_eq(wire_status_str(KVP_S__COUNT), "unknown status");
	ck_assert_str_eq(wire_op_str(KVP_OP_STATS), "STATS");
	ck_assert_str_eq(wire_op_str(0xffff), "?");
}
END_TEST

Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("header");

	tcase_add_test(tc, test_wire_header_is_little_endian_at_fixed_offsets);
	tcase_add_test(tc, test_wire_header_round_trips);
	tcase_add_test(tc, test_wire_short_message_is_proto);
	tcase_add_test(tc, test_wire_bad_magic_is_proto);
	tcase_add_test(tc, test_wire_other_version_is_reported_with_its_request_id);
	tcase_add_test(tc, test_wire_length_must_match_the_packet);
	tcase_add_test(tc, test_wire_reserved_bits_are_proto);
	suite_add_tcase(s, tc);

	tc = tcase_create("payloads");
	tcase_add_test(tc, test_wire_stats_round_trip_every_field);
	tcase_add_test(tc, test_wire_stats_version_is_always_terminated);
	tcase_add_test(tc, test_wire_every_status_has_a_description);
	suite_add_tcase(s, tc);
	return s;
}
