/* SPDX-License-Identifier: MIT */
/*
 * check_options.c - unit tests of kvpoold's option parsing
 * (daemon/options.c): defaults, flags, the config file, and the messages
 * that bad values get.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "daemon/requests/access.h"
#include "client/size.h"
#include "daemon/options.h"
#include "suites.h"

static struct options o;
static char err[8192];
static char cfg[64];

static void setup(void)
{
	options_defaults(&o);
	err[0] = '\0';
	strcpy(cfg, "/tmp/kvpool-options-XXXXXX");
	close(mkstemp(cfg));
}

static void teardown(void)
{
	unlink(cfg);
}

static void write_cfg(const char *text)
{
	FILE *f = fopen(cfg, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* parse() - run options_parse() on a NULL-terminated list of arguments. */
#define parse(...) parse_argv((const char *[]){ "kvpoold", __VA_ARGS__, NULL })
static int parse_argv(const char **argv)
{
	int argc = 0;

	while (argv[argc])
		argc++;
	return options_parse(&o, argc, (char **)argv, err, sizeof(err));
}

START_TEST(test_options_defaults)
{
	ck_assert_str_eq(o.socket_path, "/run/kvpool/kvpool.sock");
	ck_assert_uint_eq(o.max_clients, 256);
	ck_assert_uint_eq(o.max_msg_size, 256 * 1024);
	ck_assert(!o.foreground);
	ck_assert_int_eq(o.log_level, LOG_LVL_INFO);
	ck_assert_uint_eq(o.pool_size, 1ull << 30);
	ck_assert_uint_eq(o.slab_size, 64ull << 20);
	ck_assert_uint_eq(o.backend, BACKEND_AUTO);
	ck_assert_uint_eq(o.max_leases, 1u << 20);
	ck_assert_str_eq(o.socket_group, "");
	ck_assert(o.prefault);	/* a refusal, not the OOM killer */
}
END_TEST

START_TEST(test_options_backend_is_one_of_three)
{
	ck_assert_int_eq(parse("--backend", "host"), 0);
	ck_assert_uint_eq(o.backend, BACKEND_HOST);
	ck_assert_int_eq(parse("-b", "cuda"), 0);
	ck_assert_uint_eq(o.backend, BACKEND_CUDA);
	ck_assert_str_eq(options_backend_name(o.backend), "cuda");
	ck_assert_int_eq(parse("--backend", "gpu"), -EINVAL);
	ck_assert_msg(strstr(err, "--backend: 'gpu' is not one of auto, host, cuda"),
		      "message was: %s", err);
}
END_TEST

START_TEST(test_options_pool_and_slab_sizes_must_agree)
{
	ck_assert_int_eq(parse("--pool-size", "1M", "--slab-size", "2M"), -EINVAL);
	ck_assert_msg(strstr(err, "--slab-size 2.0 MiB is larger than --pool-size 1.0 MiB"),
		      "message was: %s", err);
	ck_assert_int_eq(parse("--slab-size", "100K"), -EINVAL);
	ck_assert_msg(strstr(err, "not a multiple of 64K"), "message was: %s", err);
	ck_assert_int_eq(parse("--pool-size", "1T", "--slab-size", "64K"), -EINVAL);
	ck_assert_msg(strstr(err, "more than 4096; raise --slab-size"), "message was: %s", err);
	ck_assert_int_eq(parse("--pool-size", "1T", "--slab-size", "64M"), -EINVAL);
	ck_assert_msg(strstr(err, "--pool-size 1.0 TiB needs 16384 slabs of 64.0 MiB, more "
			     "than 4096; raise --slab-size to 256.0 MiB or more"),
		      "message was: %s", err);
	ck_assert_int_eq(parse("--pool-size", "256M", "--slab-size", "64K"), 0);
}
END_TEST

START_TEST(test_options_flags_set_values)
{
	ck_assert_int_eq(parse("--socket", "/tmp/x.sock", "--max-clients=3",
			       "--max-msg-size", "128K", "-f", "--log-level=debug"), 0);
	ck_assert_str_eq(o.socket_path, "/tmp/x.sock");
	ck_assert_uint_eq(o.max_clients, 3);
	ck_assert_uint_eq(o.max_msg_size, 128 << 10);
	ck_assert(o.foreground);
	ck_assert_int_eq(o.log_level, LOG_LVL_DEBUG);
}
END_TEST

START_TEST(test_options_no_prefault_turns_the_default_off)
{
	ck_assert_int_eq(parse("--no-prefault"), 0);
	ck_assert(!o.prefault);
	ck_assert_int_eq(parse("--no-prefault", "--prefault"), 0);
	ck_assert(o.prefault);
	write_cfg("prefault = false\n");
	ck_assert_int_eq(parse("-c", cfg), 0);
	ck_assert(!o.prefault);
	write_cfg("no-prefault = true\n");
	ck_assert_int_eq(parse("-c", cfg), 0);
	ck_assert(!o.prefault);
	write_cfg("no-prefault = no\n");
	ck_assert_int_eq(parse("-c", cfg), 0);
	ck_assert(o.prefault);
}
END_TEST

START_TEST(test_options_file_is_read_and_flags_override_it)
{
	write_cfg("# kvpoold test config\n"
		  "socket = /tmp/from-file.sock   # trailing comment\n"
		  "\n"
		  "max_clients = 12\n"
		  "max-msg-size = 64K\n"
		  "foreground = yes\n");
	ck_assert_int_eq(parse("-c", cfg, "--max-clients", "5"), 0);
	ck_assert_str_eq(o.socket_path, "/tmp/from-file.sock");
	ck_assert_uint_eq(o.max_clients, 5);
	ck_assert_uint_eq(o.max_msg_size, 64 * 1024);
	ck_assert(o.foreground);
}
END_TEST

/* warned() - one of o's warnings says text. */
static bool warned(const char *text)
{
	for (unsigned i = 0; i < o.nwarnings; i++)
		if (strstr(o.warnings[i], text))
			return true;
	return false;
}

/* Secrets: --key-salt in argv shows in ps, a config file or password file
 * others can read gives them away: each is a warning; the salt may come
 * from a file of its own. */
START_TEST(test_options_secrets_exposed_are_warned_and_the_salt_may_be_a_file)
{
	char salt[64];

	ck_assert_int_eq(parse("--key-salt", "s3cret"), 0);
	ck_assert(warned("--key-salt on the command line shows in ps"));
	options_defaults(&o);
	ck_assert_int_eq(parse("--remote", "redis://:pw@127.0.0.1:6379"), 0);
	ck_assert(warned("the password in the URL shows in ps"));
	/* the config file holds the salt, and others can read it */
	write_cfg("key-salt = s3cret\n");
	ck_assert_int_eq(chmod(cfg, 0644), 0);
	options_defaults(&o);
	ck_assert_int_eq(parse("-c", cfg), 0);
	ck_assert(warned("holds a secret (key-salt, or a password in remote) and other users "
			 "can read it; chmod 640"));
	ck_assert_int_eq(chmod(cfg, 0640), 0);
	options_defaults(&o);
	ck_assert_int_eq(parse("-c", cfg), 0);
	ck_assert_uint_eq(o.nwarnings, 0);
	/* the salt from a file: its first line */
	strcpy(salt, "/tmp/kvpool-salt-XXXXXX");
	close(mkstemp(salt));
	write_cfg("");
	{
		FILE *f = fopen(salt, "w");

		ck_assert_ptr_nonnull(f);
		fputs("pepper\nnot this\n", f);
		fclose(f);
	}
	ck_assert_int_eq(chmod(salt, 0600), 0);
	options_defaults(&o);
	ck_assert_int_eq(parse("--key-salt-file", salt), 0);
	ck_assert_str_eq(o.key_salt, "pepper");
	ck_assert_uint_eq(o.nwarnings, 0);
	ck_assert_int_eq(chmod(salt, 0644), 0);
	options_defaults(&o);
	ck_assert_int_eq(parse("--key-salt-file", salt), 0);
	ck_assert(warned("other users can read the key salt"));
	options_defaults(&o);
	ck_assert_int_eq(parse("--key-salt-file", salt, "--key-salt", "x"), -EINVAL);
	ck_assert_str_eq(err, "give the key salt once: --key-salt or --key-salt-file, not both");
	unlink(salt);
	options_defaults(&o);
	ck_assert_int_eq(parse("--key-salt-file", salt), -EINVAL);
	ck_assert_msg(strstr(err, "--key-salt-file /tmp/kvpool-salt-"), "%s", err);
}
END_TEST

START_TEST(test_options_file_values_may_be_quoted)
{
	write_cfg("socket = \"/tmp/with # hash.sock\"  # a comment after it\n"
		  "key-seed = 'vllm-none-hash'\n"
		  "spill-dir = /tmp/plain\n");
	ck_assert_msg(parse("-c", cfg) == 0, "%s", err);
	ck_assert_str_eq(o.socket_path, "/tmp/with # hash.sock");
	ck_assert_str_eq(o.key_seed, "vllm-none-hash");
	ck_assert_str_eq(o.spill_dir, "/tmp/plain");
	write_cfg("socket = \"/tmp/open.sock\n");
	ck_assert_int_eq(parse("-c", cfg), -EINVAL);
	ck_assert_msg(strstr(err, ":1: socket: the quote \" is not closed"), "%s", err);
}
END_TEST

START_TEST(test_options_socket_comes_from_kvpool_socket_unless_given)
{
	setenv("KVPOOL_SOCKET", "/tmp/from-env.sock", 1);
	options_defaults(&o);
	ck_assert_int_eq(parse("--max-clients", "3"), 0);
	ck_assert_str_eq(o.socket_path, "/tmp/from-env.sock");
	options_defaults(&o);
	ck_assert_int_eq(parse("--socket", "/tmp/flag.sock"), 0);
	ck_assert_str_eq(o.socket_path, "/tmp/flag.sock");
	unsetenv("KVPOOL_SOCKET");
	options_defaults(&o);
	ck_assert_str_eq(o.socket_path, "/run/kvpool/kvpool.sock");
}
END_TEST

/* contrib/kvpoold.conf lists the options with their defaults: with every
 * "# key = value" line taken in, it parses to exactly the defaults (but
 * for the rules: access, remote-share, kv-events-ns-topic and
 * kv-events-router, whose lines are examples). */
START_TEST(test_options_sample_config_gives_the_defaults)
{
	char line[512], key[64], rest[400];
	struct options def;
	unsigned keys = 0;
	FILE *in, *out;

	in = fopen(KVP_SRCDIR "/contrib/kvpoold.conf", "r");
	ck_assert_msg(in != NULL, "contrib/kvpoold.conf: %s", strerror(errno));
	out = fopen(cfg, "w");
	ck_assert_ptr_nonnull(out);
	while (fgets(line, sizeof(line), in)) {
		/* a value, not a note: "# key = value   # note" */
		/* (the rules, which have no default, are examples) */
		if (sscanf(line, "# %63[a-z_-] = %399[^#\n]", key, rest) == 2 &&
		    strcmp(key, "access") && strcmp(key, "remote-share") &&
		    strcmp(key, "kv-events-ns-topic") && strcmp(key, "kv-events-router") &&
		    rest[0] != '#') {
			fprintf(out, "%s = %s\n", key, rest);
			keys++;
		}
	}
	fclose(in);
	fclose(out);
	ck_assert_uint_gt(keys, 20);
	ck_assert_msg(parse("-c", cfg) == 0, "%s", err);
	options_defaults(&def);
	memcpy(def.config_file, o.config_file, sizeof(def.config_file));
	ck_assert_msg(memcmp(&def, &o, sizeof(o)) == 0,
		      "a value in contrib/kvpoold.conf is not kvpoold's default");
}
END_TEST

START_TEST(test_options_unknown_key_names_file_and_line)
{
	char want[128];

	write_cfg("socket = /tmp/a.sock\nmax-clientz = 4\n");
	ck_assert_int_eq(parse("-c", cfg), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: unknown key 'max-clientz'", cfg);
	ck_assert_msg(strstr(err, want), "message was: %s", err);
}
END_TEST

START_TEST(test_options_bad_value_in_file_names_key_value_and_reason)
{
	char want[128];

	write_cfg("max-clients = many\n");
	ck_assert_int_eq(parse("-c", cfg), -EINVAL);
	snprintf(want, sizeof(want), "%s:1: max-clients: 'many' is not a whole number", cfg);
	ck_assert_msg(strstr(err, want), "message was: %s", err);
}
END_TEST

START_TEST(test_options_line_without_equals_is_refused)
{
	write_cfg("foreground\n");
	ck_assert_int_eq(parse("-c", cfg), -EINVAL);
	ck_assert_msg(strstr(err, ":1: expected `key = value`"), "message was: %s", err);
}
END_TEST

START_TEST(test_options_missing_file_is_refused)
{
	ck_assert_int_eq(parse("-c", "/nonexistent/kvpoold.conf"), -ENOENT);
	ck_assert_msg(strstr(err, "/nonexistent/kvpoold.conf"), "message was: %s", err);
}
END_TEST

START_TEST(test_options_out_of_range_is_refused_with_bounds)
{
	ck_assert_int_eq(parse("--max-clients", "0"), -EINVAL);
	ck_assert_msg(strstr(err, "--max-clients: 0 is outside 1..65536"), "message was: %s", err);
	ck_assert_int_eq(parse("--max-msg-size", "1K"), -EINVAL);
	ck_assert_msg(strstr(err, "--max-msg-size: 1.0 KiB is outside 4.0 KiB.."),
		      "message was: %s", err);
	/* sizes in the size parser's units, never raw bytes */
	ck_assert_int_eq(parse("--pool-size", "2P"), -EINVAL);
	ck_assert_msg(strstr(err, "--pool-size: 2.0 PiB is outside 64.0 KiB..1.0 PiB"),
		      "message was: %s", err);
}
END_TEST

START_TEST(test_options_sizes_take_binary_suffixes)
{
	ck_assert_int_eq(parse("--max-msg-size", "4096"), 0);
	ck_assert_uint_eq(o.max_msg_size, 4096);
	ck_assert_int_eq(parse("--max-msg-size", "8k"), 0);
	ck_assert_uint_eq(o.max_msg_size, 8192);
	ck_assert_int_eq(parse("--pool-size", "2MiB", "--slab-size", "1M"), 0);
	ck_assert_uint_eq(o.pool_size, 2 << 20);
	ck_assert_int_eq(parse("--pool-size", "3G"), 0);
	ck_assert_uint_eq(o.pool_size, 3ull << 30);
	ck_assert_int_eq(parse("--max-msg-size", "12Q"), -EINVAL);
	ck_assert_int_eq(parse("--max-msg-size", "-1"), -EINVAL);
	ck_assert_msg(strstr(err, "powers of 1024"), "message was: %s", err);
	/* one reading everywhere: case, KB, KiB and decimals */
	ck_assert_msg(parse("--pool-size", "8gb", "--slab-size", "64M") == 0, "%s", err);
	ck_assert_uint_eq(o.pool_size, 8ull << 30);
	ck_assert_int_eq(parse("--pool-size", "1.5G", "--slab-size", "64M"), 0);
	ck_assert_uint_eq(o.pool_size, 3ull << 29);
	ck_assert_int_eq(parse("--pool-size", "1PiB", "--slab-size", "1T"), 0);
	ck_assert_uint_eq(o.pool_size, 1ull << 50);
}
END_TEST

START_TEST(test_size_parse_reads_every_spelling_alike)
{
	static const struct { const char *s; uint64_t v; } ok[] = {
		{ "0", 0 }, { "512", 512 }, { "512b", 512 }, { "8k", 8192 },
		{ "8K", 8192 }, { "8KB", 8192 }, { "8kib", 8192 }, { "8KiB", 8192 },
		{ "4M", 4u << 20 }, { "4mb", 4u << 20 }, { "80GB", 80ull << 30 },
		{ "80G", 80ull << 30 }, { "1.5G", 3ull << 29 }, { "0.5k", 512 },
		{ "2T", 2ull << 40 }, { "1P", 1ull << 50 }, { "1.25m", 1310720 },
		{ "0.3k", 307 },	/* 307.2 bytes: the fraction of a byte goes */
	};
	static const char *const bad[] = {
		"", "G", ".5G", "1.", "1.2.3", "1e3", "-1", " 1", "1 G", "8XB", "8KBB",
		"8Kb2", "8bb", "16384P", "99999999999999999999",
	};
	uint64_t v;
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(size_parse(ok[i].s, &v), "'%s' was refused", ok[i].s);
		ck_assert_msg(v == ok[i].v, "'%s' read as %llu, not %llu", ok[i].s,
			      (unsigned long long)v, (unsigned long long)ok[i].v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!size_parse(bad[i], &v), "'%s' was taken as %llu", bad[i],
			      (unsigned long long)v);
}
END_TEST

START_TEST(test_options_unknown_flag_and_stray_argument_are_refused)
{
	ck_assert_int_eq(parse("--frobnicate"), -EINVAL);
	ck_assert_msg(strstr(err, "unknown option '--frobnicate'"), "message was: %s", err);
	ck_assert_int_eq(parse("-f", "extra"), -EINVAL);
	ck_assert_msg(strstr(err, "unexpected argument 'extra'"), "message was: %s", err);
	ck_assert_int_eq(parse("--socket"), -EINVAL);
	ck_assert_msg(strstr(err, "needs a value"), "message was: %s", err);
}
END_TEST

START_TEST(test_options_too_long_socket_path_is_refused)
{
	char path[200];

	memset(path, 'a', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	ck_assert_int_eq(parse("--socket", path), -EINVAL);
	ck_assert_msg(strstr(err, "longer than 107 bytes"), "message was: %s", err);
}
END_TEST

START_TEST(test_options_bad_log_level_lists_the_levels)
{
	ck_assert_int_eq(parse("--log-level", "loud"), -EINVAL);
	ck_assert_msg(strstr(err, "'loud' is not a log level (error, warn, info, debug)"),
		      "message was: %s", err);
}
END_TEST

START_TEST(test_access_rules_parse_and_grant_what_they_say)
{
	struct access_rule r[3];
	struct access_peer p = { .uid = 1234, .gid = 500, .ngroups = 1,
				 .groups = { 600 } };
	char why[256];

	ck_assert_int_eq(access_parse("llama read,write @600,77", &r[0], why,
				      sizeof(why)), 0);
	ck_assert_uint_eq(r[0].rights, ACCESS_READ | ACCESS_WRITE);
	ck_assert_uint_eq(r[0].nwho, 2);
	ck_assert_int_eq(access_parse("* read *", &r[1], why, sizeof(why)), 0);
	ck_assert_int_eq(access_parse("qwen all 1234", &r[2], why, sizeof(why)), 0);
	ck_assert_uint_eq(r[2].rights, ACCESS_ALL);
	/* no rules: read and write everywhere, admin only for admins */
	ck_assert_uint_eq(access_rights(r, 0, "llama", &p), ACCESS_READ | ACCESS_WRITE);
	/* a supplementary group, a catch-all, a uid */
	ck_assert_uint_eq(access_rights(r, 1, "llama", &p), ACCESS_READ | ACCESS_WRITE);
	ck_assert_uint_eq(access_rights(r, 1, "qwen", &p), 0);
	ck_assert_uint_eq(access_rights(r, 2, "qwen", &p), ACCESS_READ);
	ck_assert_uint_eq(access_rights(r, 3, "qwen", &p), ACCESS_ALL);
	p.ngroups = 0;
	ck_assert_uint_eq(access_rights(r, 1, "llama", &p), 0);
	p.admin = true;
	ck_assert_uint_eq(access_rights(r, 1, "llama", &p), ACCESS_ADMIN);
	p.uid = 0;	/* root: everything, whatever the rules */
	ck_assert_uint_eq(access_rights(r, 1, "other", &p), ACCESS_ALL);
	/* errors name the part that is wrong */
	ck_assert_int_eq(access_parse("llama read", &r[0], why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "NAMESPACE RIGHTS WHO"));
	ck_assert_int_eq(access_parse("llama readish 1", &r[0], why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "rights 'readish'"));
	ck_assert_int_eq(access_parse("llama read @", &r[0], why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "no group ''"));
	ck_assert_int_eq(access_parse("llama read ,", &r[0], why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "names nobody"));
}
END_TEST

/* --kv-events-router: 'NAMESPACE PUB[,REPLAY]', from flags or the file;
 * rules whose sockets could not all be bound are refused, saying which. */
START_TEST(test_options_kv_events_router_rules_are_checked)
{
	char rule[64];
	int i;

	ck_assert_int_eq(parse("--kv-events-router",
			       "llama tcp://10.0.0.1:5557,tcp://10.0.0.1:5558"), 0);
	ck_assert_uint_eq(o.nroutes, 1);
	ck_assert_str_eq(o.routes[0].ns, "llama");
	ck_assert_str_eq(o.routes[0].pub, "tcp://10.0.0.1:5557");
	ck_assert_str_eq(o.routes[0].replay, "tcp://10.0.0.1:5558");
	options_defaults(&o);
	write_cfg("kv-events-router = qwen ipc:///run/kvpool/qwen.events\n");
	ck_assert_msg(parse("-c", cfg, "--kv-events-router", "llama tcp://*:5557") == 0,
		      "%s", err);
	ck_assert_uint_eq(o.nroutes, 2);
	ck_assert_str_eq(o.routes[0].ns, "qwen");
	ck_assert_str_eq(o.routes[0].replay, "");

	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama"), -EINVAL);
	ck_assert_msg(strstr(err, "--kv-events-router: 'llama' is not NAMESPACE "
			     "PUB_ENDPOINT[,REPLAY_ENDPOINT]"), "%s", err);
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama http://h:1"), -EINVAL);
	ck_assert_msg(strstr(err, "an endpoint is tcp://ADDR:PORT or ipc://PATH"), "%s", err);
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama tcp://h:1,"), -EINVAL);
	ck_assert_msg(strstr(err, "an endpoint is tcp://ADDR:PORT or ipc://PATH"), "%s", err);
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "lla!ma tcp://h:1"), -EINVAL);
	ck_assert_msg(strstr(err, "'lla!ma' is not a namespace name"), "%s", err);
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama tcp://h:1", "--kv-events-router",
			       "llama tcp://h:2"), -EINVAL);
	ck_assert_msg(strstr(err, "namespace 'llama' is in two rules ('llama tcp://h:1' and "
			     "'llama tcp://h:2')"), "%s", err);
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama tcp://h:1,tcp://h:2",
			       "--kv-events-router", "qwen tcp://h:2"), -EINVAL);
	ck_assert_msg(strstr(err, "--kv-events-router 'qwen tcp://h:2': tcp://h:2 is bound by "
			     "--kv-events-router 'llama tcp://h:1,tcp://h:2' too"), "%s", err);
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama tcp://h:1,tcp://h:1"), -EINVAL);
	ck_assert_msg(strstr(err, "tcp://h:1 is bound by its own PUB socket too"), "%s", err);
	/* --kv-events after the rule: checked once all are read */
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama tcp://h:1,tcp://h:2",
			       "--kv-events-replay", "tcp://h:2", "--kv-events", "tcp://h:3"),
			 -EINVAL);
	ck_assert_msg(strstr(err, "tcp://h:2 is bound by --kv-events-replay too"), "%s", err);
	options_defaults(&o);
	ck_assert_int_eq(parse("--kv-events-router", "llama tcp://h:1", "--kv-events",
			       "tcp://h:1"), -EINVAL);
	ck_assert_msg(strstr(err, "tcp://h:1 is bound by --kv-events too"), "%s", err);
	/* at most 16, and the message says so */
	options_defaults(&o);
	for (i = 0; i < TOPIC_ROUTES_MAX; i++) {
		snprintf(rule, sizeof(rule), "ns%d tcp://h:%d", i, 1000 + i);
		ck_assert_msg(parse("--kv-events-router", rule) == 0, "%s", err);
	}
	ck_assert_uint_eq(o.nroutes, TOPIC_ROUTES_MAX);
	ck_assert_int_eq(parse("--kv-events-router", "one-more tcp://h:999"), -EINVAL);
	ck_assert_msg(strstr(err, "more than 16 kv-events-router rules"), "%s", err);
}
END_TEST

Suite *options_suite(void)
{
	Suite *s = suite_create("options");
	TCase *tc = tcase_create("flags");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_options_defaults);
	tcase_add_test(tc, test_options_flags_set_values);
	tcase_add_test(tc, test_options_no_prefault_turns_the_default_off);
	tcase_add_test(tc, test_options_out_of_range_is_refused_with_bounds);
	tcase_add_test(tc, test_options_sizes_take_binary_suffixes);
	tcase_add_test(tc, test_size_parse_reads_every_spelling_alike);
	tcase_add_test(tc, test_options_unknown_flag_and_stray_argument_are_refused);
	tcase_add_test(tc, test_options_too_long_socket_path_is_refused);
	tcase_add_test(tc, test_options_bad_log_level_lists_the_levels);
	tcase_add_test(tc, test_options_backend_is_one_of_three);
	tcase_add_test(tc, test_options_pool_and_slab_sizes_must_agree);
	suite_add_tcase(s, tc);

	tc = tcase_create("config file");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_options_file_is_read_and_flags_override_it);
	tcase_add_test(tc, test_options_file_values_may_be_quoted);
	tcase_add_test(tc, test_options_secrets_exposed_are_warned_and_the_salt_may_be_a_file);
	tcase_add_test(tc, test_options_sample_config_gives_the_defaults);
	tcase_add_test(tc, test_options_socket_comes_from_kvpool_socket_unless_given);
	tcase_add_test(tc, test_options_unknown_key_names_file_and_line);
	tcase_add_test(tc, test_options_bad_value_in_file_names_key_value_and_reason);
	tcase_add_test(tc, test_options_line_without_equals_is_refused);
	tcase_add_test(tc, test_options_kv_events_router_rules_are_checked);
	tcase_add_test(tc, test_options_missing_file_is_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("access rules");
	tcase_add_test(tc, test_access_rules_parse_and_grant_what_they_say);
	suite_add_tcase(s, tc);
	return s;
}
