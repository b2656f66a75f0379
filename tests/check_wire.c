/* SPDX-License-Identifier: MIT */
/*
 * check_wire.c - unit tests of the wire codec (client/wire.c): exact bytes
 * on the wire, and refusal of every malformed header.
 */
#include <stddef.h>
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
		KVP_WIRE_VERSION, 0,		/* version */
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
	buf[4] = KVP_WIRE_VERSION + 1;
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), -KVP_S_VERSION);
	ck_assert_uint_eq(h.version, KVP_WIRE_VERSION + 1);
	ck_assert_uint_eq(h.req_id, sample.req_id);
	buf[4] = KVP_WIRE_VERSION_MIN - 1;	/* older than the previous release's */
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), -KVP_S_VERSION);
}
END_TEST

START_TEST(test_wire_speaks_this_version_and_the_previous_one)
{
	unsigned char buf[KVP_WIRE_HDR_SIZE + 4] = { 0 };
	struct kvp_wire_hdr h, v = sample;

	wire_hdr_encode(buf, &sample);	/* version 0: this build's */
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), 0);
	ck_assert_uint_eq(h.version, KVP_WIRE_VERSION);
	v.version = KVP_WIRE_VERSION_MIN;
	wire_hdr_encode(buf, &v);
	ck_assert_int_eq(wire_hdr_decode(buf, sizeof(buf), &h), 0);
	ck_assert_uint_eq(h.version, KVP_WIRE_VERSION_MIN);
	/* what each version has: HANDOFF and its ACQUIRE flag came in 9 */
	ck_assert_uint_eq(wire_op_since(KVP_OP_HANDOFF), 9);
	ck_assert_uint_eq(wire_op_since(KVP_OP_ACQUIRE), 0);
	ck_assert_uint_eq(wire_acq_flags(8) & KVP_WIRE_ACQ_HANDOFF, 0);
	ck_assert_uint_eq(wire_acq_flags(9), KVP_WIRE_ACQ_ALL);
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

START_TEST(test_wire_stats_decode_reads_namespace_records)
{
	struct kvp_wire_ns_stats in[2], out[2];
	struct kvp_wire_stats st, got;
	unsigned char buf[sizeof(struct kvp_wire_stats) + 2 * sizeof(struct kvp_wire_ns_stats)];

	memset(&st, 0, sizeof(st));
	strcpy(st.version, "9.8.7");
	st.namespaces = 2;
	st.pages_total = 0x500000005ull;
	memset(in, 0, sizeof(in));
	strcpy(in[0].name, "a");
	strcpy(in[1].name, "b");
	in[1].pages_free = 0x700000007ull;
	memcpy(buf, &st, sizeof(st));
	memcpy(buf + sizeof(st), in, sizeof(in));

	ck_assert_int_eq(wire_stats_decode(buf, sizeof(buf), &got, out, 2), 2);
	ck_assert_mem_eq(&got, &st, sizeof(st));
	ck_assert_str_eq(out[1].name, "b");
	ck_assert_uint_eq(out[1].pages_free, 0x700000007ull);
	/* fewer slots than records: the count still says how many exist */
	ck_assert_int_eq(wire_stats_decode(buf, sizeof(buf), &got, out, 1), 2);
	ck_assert_int_eq(wire_stats_decode(buf, sizeof(buf) - 1, &got, out, 2), -KVP_S_PROTO);
	ck_assert_int_eq(wire_stats_decode(buf, sizeof(st) - 1, &got, out, 2), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_stats_strings_are_always_terminated)
{
	struct kvp_wire_stats out;
	struct kvp_wire_ns_stats ns;
	unsigned char buf[sizeof(struct kvp_wire_stats) + sizeof(struct kvp_wire_ns_stats)];

	memset(buf, 'x', sizeof(buf));
	memset(buf + offsetof(struct kvp_wire_stats, namespaces), 0, 4);
	buf[offsetof(struct kvp_wire_stats, namespaces)] = 1;
	ck_assert_int_eq(wire_stats_decode(buf, sizeof(buf), &out, &ns, 1), 1);
	ck_assert_uint_eq(strlen(out.version), sizeof(out.version) - 1);
	ck_assert_uint_eq(strlen(ns.name), sizeof(ns.name) - 1);
	ck_assert_uint_eq(strlen(ns.model), sizeof(ns.model) - 1);
}
END_TEST

static struct kvp_wire_hello good_hello(void)
{
	struct kvp_wire_hello h;

	memset(&h, 0, sizeof(h));
	strcpy(h.ns, "llama");
	strcpy(h.model, "meta-llama/Llama-3.1-8B");
	strcpy(h.client_name, "test");
	h.layers = 32;
	h.kv_heads = 8;
	h.head_dim = 128;
	h.block_tokens = 16;
	h.dtype = KVP_WIRE_DTYPE_F16;
	return h;
}

START_TEST(test_wire_hello_round_trips)
{
	struct kvp_wire_hello h = good_hello(), out;

	ck_assert_int_eq(wire_hello_decode(&h, sizeof(h), &out), 0);
	ck_assert_mem_eq(&h, &out, sizeof(h));
}
END_TEST

START_TEST(test_wire_hello_of_wrong_size_is_proto)
{
	struct kvp_wire_hello h = good_hello(), out;
	unsigned char big[sizeof(h) + 1] = { 0 };

	ck_assert_int_eq(wire_hello_decode(&h, sizeof(h) - 1, &out), -KVP_S_PROTO);
	memcpy(big, &h, sizeof(h));
	ck_assert_int_eq(wire_hello_decode(big, sizeof(big), &out), -KVP_S_PROTO);
	ck_assert_int_eq(wire_hello_decode(&h, 0, &out), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_hello_unterminated_strings_are_inval)
{
	struct kvp_wire_hello h = good_hello(), out;

	memset(h.ns, 'n', sizeof(h.ns));
	ck_assert_int_eq(wire_hello_decode(&h, sizeof(h), &out), -KVP_S_INVAL);
	h = good_hello();
	memset(h.model, 'm', sizeof(h.model));
	ck_assert_int_eq(wire_hello_decode(&h, sizeof(h), &out), -KVP_S_INVAL);
	h = good_hello();
	memset(h.client_name, 'c', sizeof(h.client_name));
	ck_assert_int_eq(wire_hello_decode(&h, sizeof(h), &out), -KVP_S_INVAL);
	/* the last 8 bytes are the key seed id now: any value decodes */
	h = good_hello();
	memset(h.key_seed_id, 0xff, sizeof(h.key_seed_id));
	ck_assert_int_eq(wire_hello_decode(&h, sizeof(h), &out), 0);
	ck_assert(!memcmp(out.key_seed_id, h.key_seed_id, sizeof(h.key_seed_id)));
}
END_TEST

START_TEST(test_wire_pages_count_must_match_payload)
{
	unsigned char buf[8 + 3 * 8];
	struct kvp_wire_pages pl = { .n = 3 };
	const void *handles;
	uint64_t h[3] = { 1, 0x0102030405060708ull, UINT64_MAX };
	uint32_t n;

	memcpy(buf, &pl, sizeof(pl));
	memcpy(buf + 8, h, sizeof(h));
	ck_assert_int_eq(wire_pages_decode(buf, sizeof(buf), &n, &handles), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(wire_handle_at(handles, 1), 0x0102030405060708ull);
	ck_assert_uint_eq(wire_handle_at(handles, 2), UINT64_MAX);
	/* count larger than the payload, smaller, truncated struct */
	ck_assert_int_eq(wire_pages_decode(buf, sizeof(buf) - 8, &n, &handles), -KVP_S_PROTO);
	ck_assert_int_eq(wire_pages_decode(buf, sizeof(buf) - 1, &n, &handles), -KVP_S_PROTO);
	ck_assert_int_eq(wire_pages_decode(buf, 7, &n, &handles), -KVP_S_PROTO);
	pl.n = 2;
	memcpy(buf, &pl, sizeof(pl));
	ck_assert_int_eq(wire_pages_decode(buf, sizeof(buf), &n, &handles), -KVP_S_PROTO);
	/* a count that would overflow 32-bit arithmetic */
	pl.n = UINT32_MAX;
	memcpy(buf, &pl, sizeof(pl));
	ck_assert_int_eq(wire_pages_decode(buf, sizeof(buf), &n, &handles), -KVP_S_PROTO);
	/* reserved must be 0 */
	pl.n = 3;
	pl.reserved = 1;
	memcpy(buf, &pl, sizeof(pl));
	ck_assert_int_eq(wire_pages_decode(buf, sizeof(buf), &n, &handles), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_fixed_payload_needs_exact_length)
{
	struct kvp_wire_map_slab m = { .slab = 7 }, out;

	ck_assert_int_eq(wire_fixed_decode(&m, sizeof(m), &out, sizeof(out)), 0);
	ck_assert_uint_eq(out.slab, 7);
	ck_assert_int_eq(wire_fixed_decode(&m, sizeof(m) - 1, &out, sizeof(out)), -KVP_S_PROTO);
	ck_assert_int_eq(wire_fixed_decode(&m, 0, &out, sizeof(out)), -KVP_S_PROTO);
}
END_TEST

START_TEST(test_wire_batch_limit_fits_the_message)
{
	uint32_t n = wire_max_pages(KVP_WIRE_MAX_MSG_DEFAULT);

	ck_assert_uint_le(KVP_WIRE_HDR_SIZE + wire_pages_size(n), KVP_WIRE_MAX_MSG_DEFAULT);
	ck_assert_uint_gt(KVP_WIRE_HDR_SIZE + wire_pages_size(n + 1), KVP_WIRE_MAX_MSG_DEFAULT);
}
END_TEST

START_TEST(test_wire_handle_fields_round_trip)
{
	uint64_t h = KVP_HANDLE(0xdeadbeefu, KVP_MAX_SLABS - 1, KVP_MAX_SLAB_PAGES - 1);

	ck_assert_uint_eq(KVP_HANDLE_GEN(h), 0xdeadbeefu);
	ck_assert_uint_eq(KVP_HANDLE_SLAB(h), KVP_MAX_SLABS - 1);
	ck_assert_uint_eq(KVP_HANDLE_INDEX(h), KVP_MAX_SLAB_PAGES - 1);
	h = KVP_HANDLE(1, 5, 9);
	ck_assert_uint_eq(KVP_HANDLE_SLAB(h), 5);
	ck_assert_uint_eq(KVP_HANDLE_INDEX(h), 9);
	ck_assert_uint_eq(KVP_HANDLE_GEN(h), 1);
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
	tcase_add_test(tc, test_wire_speaks_this_version_and_the_previous_one);
	tcase_add_test(tc, test_wire_length_must_match_the_packet);
	tcase_add_test(tc, test_wire_reserved_bits_are_proto);
	suite_add_tcase(s, tc);

	tc = tcase_create("payloads");
	tcase_add_test(tc, test_wire_stats_decode_reads_namespace_records);
	tcase_add_test(tc, test_wire_stats_strings_are_always_terminated);
	tcase_add_test(tc, test_wire_hello_round_trips);
	tcase_add_test(tc, test_wire_hello_of_wrong_size_is_proto);
	tcase_add_test(tc, test_wire_hello_unterminated_strings_are_inval);
	tcase_add_test(tc, test_wire_pages_count_must_match_payload);
	tcase_add_test(tc, test_wire_fixed_payload_needs_exact_length);
	tcase_add_test(tc, test_wire_batch_limit_fits_the_message);
	tcase_add_test(tc, test_wire_handle_fields_round_trip);
	tcase_add_test(tc, test_wire_every_status_has_a_description);
	suite_add_tcase(s, tc);
	return s;
}
