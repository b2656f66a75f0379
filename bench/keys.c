/* SPDX-License-Identifier: MIT */
/*
 * keys.c - bench/keys: throughput of the prefix keys, kvp_key_chain() of
 * both schemes over one long token sequence, against vLLM's own way of
 * computing the sha256_cbor keys in Python (cbor2 + hashlib) measured in
 * the same run on the same tokens.
 *
 * The tokens are --tokens pseudo-random ids below 152064 (a Qwen2-size
 * vocabulary, so most take 3 CBOR bytes and some 5). For block sizes 16
 * and 128 and each scheme, one untimed run and then --runs timed runs of
 * kvp_key_root() + kvp_key_chain() over all tokens, one thread; the
 * median run gives tokens/s. The Python reference runs the loop of vLLM's
 * hash_block_tokens() with sha256_cbor, --py-runs times, from a file of
 * the same tokens, and prints its last key, which must equal ours.
 *
 * Prints one key=value line per measurement; with --output FILE it also
 * replaces the section between <!-- bench:keys:begin --> and
 * <!-- bench:keys:end --> of that Markdown file (appending it the first
 * time). `make bench` runs it; `make check` never does.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "bench/opt.h"

#define KEYS_VOCAB	152064
#define KEYS_NBLOCKS	2
#define KEYS_MAX_RUNS	1000
#define SECTION_BEGIN	"<!-- bench:keys:begin -->"
#define SECTION_END	"<!-- bench:keys:end -->"

static const uint32_t block_sizes[KEYS_NBLOCKS] = { 16, 128 };
static const char *const seed = "0";

struct keys_opts {
	size_t tokens;
	size_t runs;
	size_t py_runs;
	const char *python;	/* NULL: no reference */
	const char *output;	/* NULL: stdout only */
};

/* One scheme at one block size. */
struct keys_result {
	uint32_t scheme;
	uint32_t block;
	double median_s, min_s;
	kvp_key last;		/* key of the last full block */
};

/* The Python reference, one entry per block size. */
struct keys_pyref {
	bool ok;
	char why[256];		/* when !ok: what is missing */
	char version[256];	/* "Python 3.11.2, cbor2 5.4.6 (C), OpenSSL ..." */
	double median_s[KEYS_NBLOCKS], min_s[KEYS_NBLOCKS];
	char last[KEYS_NBLOCKS][2 * KVP_KEY_BYTES + 1];
};

/* vLLM's way, as vllm/v1/core/kv_cache_utils.py hashes a request's full
 * blocks with sha256_cbor; argv: token file, runs, seed, block sizes. */
static const char py_reference[] =
	"import array, hashlib, importlib.metadata, platform, ssl, statistics, sys, time\n"
	"try:\n"
	"    import cbor2\n"
	"except ImportError:\n"
	"    print('error=no-cbor2')\n"
	"    sys.exit(0)\n"
	"def sha256_cbor(x):\n"
	"    return hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()\n"
	"a = array.array('I')\n"
	"with open(sys.argv[1], 'rb') as f:\n"
	"    a.frombytes(f.read())\n"
	"if sys.byteorder != 'little':\n"
	"    a.byteswap()\n"
	"toks = a.tolist()\n"
	"runs, seed = int(sys.argv[2]), sys.argv[3]\n"
	"cext = 'C' if cbor2.dumps.__module__ == '_cbor2' else 'pure Python'\n"
	"print('version=Python %s, cbor2 %s (%s), %s' % (platform.python_version(),\n"
	"      importlib.metadata.version('cbor2'), cext, ssl.OPENSSL_VERSION))\n"
	"for bt in map(int, sys.argv[4:]):\n"
	"    n = len(toks) // bt * bt\n"
	"    times = []\n"
	"    for r in range(runs):\n"
	"        t0 = time.perf_counter()\n"
	"        h = sha256_cbor(seed)\n"
	"        for i in range(0, n, bt):\n"
	"            h = sha256_cbor((h, tuple(toks[i:i + bt]), None))\n"
	"        times.append(time.perf_counter() - t0)\n"
	"    print('block=%d median_s=%.9f min_s=%.9f last=%s' % (bt,\n"
	"          statistics.median(times), min(times), h.hex()))\n";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static const char *scheme_name(uint32_t scheme)
{
	return scheme == KVP_KEYS_FAST ? "fast" : "vllm";
}

/* measure() - time root + chain over tok[0..n), 1 untimed + runs timed. */
static int measure(uint32_t scheme, uint32_t block, const uint32_t *tok,
		   size_t n, kvp_key *keys, size_t runs, struct keys_result *r)
{
	double t[KEYS_MAX_RUNS];
	size_t i;
	int rc = 0;

	for (i = 0; i <= runs; i++) {
		double t0 = now_s();
		kvp_key root;

		rc = kvp_key_root(scheme, seed, &root);
		if (rc == 0)
			rc = kvp_key_chain(scheme, &root, tok, n, block, NULL, 0, keys);
		if (rc < 0) {
			fprintf(stderr, "keys: kvp_key_chain(%s, block %u): %s\n",
				scheme_name(scheme), block, kvp_strerror(rc));
			return rc;
		}
		if (i > 0)
			t[i - 1] = now_s() - t0;
	}
	qsort(t, runs, sizeof(t[0]), cmp_double);
	r->scheme = scheme;
	r->block = block;
	r->median_s = runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2;
	r->min_s = t[0];
	r->last = keys[n / block - 1];
	return 0;
}

/* --- The Python reference ---------------------------------------------- */

/* py_spawn() - start the reference on the token file. Returns the read
 * end of its stdout (the caller fcloses it, then waits for *pid), or NULL
 * with errno set. */
static FILE *py_spawn(const struct keys_opts *o, const char *path, pid_t *pid)
{
	char runs[32], b0[16], b1[16];
	int fd[2];

	snprintf(runs, sizeof(runs), "%zu", o->py_runs);
	snprintf(b0, sizeof(b0), "%u", block_sizes[0]);
	snprintf(b1, sizeof(b1), "%u", block_sizes[1]);
	if (pipe(fd) < 0)
		return NULL;
	*pid = fork();
	if (*pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return NULL;
	}
	if (*pid == 0) {
		dup2(fd[1], STDOUT_FILENO);
		close(fd[0]);
		close(fd[1]);
		execl(o->python, o->python, "-c", py_reference, path, runs,
		      seed, b0, b1, (char *)NULL);
		fprintf(stderr, "keys: cannot run %s: %s\n", o->python, strerror(errno));
		_exit(127);
	}
	close(fd[1]);
	return fdopen(fd[0], "r");
}

/* py_parse() - one line of the reference's output into *py. */
static void py_parse(char *line, struct keys_pyref *py)
{
	unsigned int bt;
	double med, min;
	char last[2 * KVP_KEY_BYTES + 1];
	int i;

	line[strcspn(line, "\n")] = 0;
	if (strncmp(line, "version=", 8) == 0) {
		snprintf(py->version, sizeof(py->version), "%.200s", line + 8);
	} else if (strcmp(line, "error=no-cbor2") == 0) {
		snprintf(py->why, sizeof(py->why),
			 "Python module cbor2 is missing (Debian: apt-get install python3-cbor2)");
	} else if (sscanf(line, "block=%u median_s=%lf min_s=%lf last=%64s",
			  &bt, &med, &min, last) == 4) {
		for (i = 0; i < KEYS_NBLOCKS; i++) {
			if (block_sizes[i] != bt)
				continue;
			py->median_s[i] = med;
			py->min_s[i] = min;
			memcpy(py->last[i], last, sizeof(last));
		}
	}
}

/* run_python() - measure the reference; py->ok says whether it ran. */
static void run_python(const struct keys_opts *o, const uint32_t *tok, size_t n,
		       struct keys_pyref *py)
{
	char path[] = "/tmp/kvpool-bench-keys.XXXXXX", line[512];
	FILE *tf, *out;
	pid_t pid;
	int fd, status, i;

	memset(py, 0, sizeof(*py));
	if (!o->python) {
		snprintf(py->why, sizeof(py->why), "not run (--python none)");
		return;
	}
	if (access(o->python, X_OK) != 0) {
		snprintf(py->why, sizeof(py->why), "%s: %s", o->python, strerror(errno));
		return;
	}
	fd = mkstemp(path);
	tf = fd < 0 ? NULL : fdopen(fd, "wb");
	/* the ids as native uint32: the script byte-swaps on big-endian hosts */
	if (!tf || fwrite(tok, sizeof(*tok), n, tf) != n || fclose(tf) != 0) {
		snprintf(py->why, sizeof(py->why), "cannot write %s: %s", path,
			 strerror(errno));
		unlink(path);
		return;
	}
	fprintf(stderr, "  %s -c <vLLM's sha256_cbor loop> TOKENS %zu %s %u %u\n",
		o->python, o->py_runs, seed, block_sizes[0], block_sizes[1]);
	out = py_spawn(o, path, &pid);
	if (!out) {
		snprintf(py->why, sizeof(py->why), "cannot start %s: %s", o->python,
			 strerror(errno));
		unlink(path);
		return;
	}
	while (fgets(line, sizeof(line), out))
		py_parse(line, py);
	fclose(out);
	waitpid(pid, &status, 0);
	unlink(path);
	if (py->why[0])
		return;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		snprintf(py->why, sizeof(py->why), "%s failed (status %d)", o->python,
			 status);
		return;
	}
	for (i = 0; i < KEYS_NBLOCKS; i++) {
		if (py->median_s[i] <= 0) {
			snprintf(py->why, sizeof(py->why), "%s printed no result for block %u",
				 o->python, block_sizes[i]);
			return;
		}
	}
	py->ok = true;
}

/* --- Output ----------------------------------------------------------------- */

static void key_hex(const kvp_key *k, char out[2 * KVP_KEY_BYTES + 1])
{
	int i;

	for (i = 0; i < KVP_KEY_BYTES; i++)
		sprintf(out + 2 * i, "%02x", k->b[i]);
}

/* shell_line() - the first line of a shell command's output ("" if none). */
static void shell_line(const char *cmd, char *buf, size_t len)
{
	FILE *p = popen(cmd, "r");

	buf[0] = 0;
	if (!p)
		return;
	if (!fgets(buf, (int)len, p))
		buf[0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	pclose(p);
}

static void write_section(FILE *f, const struct keys_opts *o,
			  const struct keys_result *r, size_t nr,
			  const struct keys_pyref *py, const bool *agree)
{
	char cpu[256], when[64], load[64], rev[128];
	double fast16 = 0, vllm16 = 0, ratio;
	struct utsname u;
	time_t t = time(NULL);
	size_t i;

	shell_line("sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1",
		   cpu, sizeof(cpu));
	shell_line("cut -d' ' -f1-3 /proc/loadavg", load, sizeof(load));
	shell_line("cd \"$KEYS_SRCDIR\" 2>/dev/null && r=$(git rev-parse --short HEAD 2>/dev/null)"
		   " && if [ -n \"$(git status --porcelain 2>/dev/null)\" ];"
		   " then echo \"$r + uncommitted changes\"; else echo \"$r\"; fi",
		   rev, sizeof(rev));
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime(&t));
	uname(&u);
	for (i = 0; i < nr; i++) {
		if (r[i].block != 16)
			continue;
		if (r[i].scheme == KVP_KEYS_FAST)
			fast16 = (double)o->tokens / r[i].median_s;
		else
			vllm16 = (double)o->tokens / r[i].median_s;
	}
	ratio = fast16 / vllm16;

	fprintf(f, SECTION_BEGIN "\n");
	fprintf(f, "## Prefix keys: kvp_key_chain() throughput (bench/keys)\n\n");
	fprintf(f, "Measured %s by `make bench` (bench/keys) on %ld CPUs (%s),\n",
		when, sysconf(_SC_NPROCESSORS_ONLN), cpu[0] ? cpu : "unknown");
	fprintf(f, "%s %s, load average %s before the run; libkvpool %s (%s).\n",
		u.sysname, u.release, load[0] ? load : "unknown", kvp_version(),
		rev[0] ? rev : "no git");
	if (py->ok)
		fprintf(f, "Reference: vLLM's sha256_cbor in %s, measured in the same run on the same tokens.\n",
			py->version);
	else
		fprintf(f, "**Reference missing:** %s. Only kvpool's figures are below.\n",
			py->why);
	fprintf(f, "\n%zu pseudo-random token ids below %u, keyed from the root of seed \"%s\"\n"
		   "with no extra keys, one thread. kvpool: one untimed run, then the median\n"
		   "of %zu runs of kvp_key_root() + kvp_key_chain() over all of them. Python:\n"
		   "the median of %zu runs of vLLM's loop, `h = sha256(cbor2.dumps((h,\n"
		   "tuple(block), None), canonical=True)).digest()` block after block.\n"
		   "Ratios are tokens/s ÷ the reference's tokens/s at the same block size.\n"
		   "kvpool's SHA-256 is portable C (FIPS 180-4, no SHA CPU extensions);\n"
		   "hashlib's is OpenSSL's, which uses them where the CPU has them.\n\n",
		o->tokens, KEYS_VOCAB, seed, o->runs, o->py_runs);

	fprintf(f, "| goal | measured | result |\n| --- | --- | --- |\n");
	fprintf(f, "| fast scheme several (≥ 3) times faster than the vLLM scheme (16-token blocks) | %.1fM vs %.1fM tokens/s | %s (×%.1f) |\n",
		fast16 / 1e6, vllm16 / 1e6, ratio >= 3 ? "**met**" : "**not met**", ratio);
	if (py->ok)
		fprintf(f, "| vLLM scheme byte-identical to vLLM's Python (last key of every run compared) | %s | %s |\n",
			agree[0] && agree[1] ? "equal at 16 and 128 tokens a block" : "**differs**",
			agree[0] && agree[1] ? "**met**" : "**not met**");
	fprintf(f, "\n| block tokens | scheme | median ms / run | tokens/s | blocks/s | ns/block | ÷ Python |\n");
	fprintf(f, "| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
	for (i = 0; i < nr; i++) {
		double tps = (double)o->tokens / r[i].median_s;
		double nb = (double)(o->tokens / r[i].block);
		int b = r[i].block == block_sizes[0] ? 0 : 1;

		fprintf(f, "| %u | %s | %.2f | %.2fM | %.2fM | %.0f | ",
			r[i].block, r[i].scheme == KVP_KEYS_FAST ?
			"KVP_KEYS_FAST (XXH3-128)" : "KVP_KEYS_VLLM_SHA256_CBOR",
			r[i].median_s * 1e3, tps / 1e6, nb / r[i].median_s / 1e6,
			r[i].median_s / nb * 1e9);
		if (py->ok)
			fprintf(f, "%.1f |\n", py->median_s[b] / r[i].median_s);
		else
			fprintf(f, "– |\n");
	}
	for (i = 0; py->ok && i < KEYS_NBLOCKS; i++) {
		double nb = (double)(o->tokens / block_sizes[i]);

		fprintf(f, "| %u | Python cbor2 + hashlib (vLLM) | %.2f | %.2fM | %.2fM | %.0f | 1.0 |\n",
			block_sizes[i], py->median_s[i] * 1e3,
			(double)o->tokens / py->median_s[i] / 1e6,
			nb / py->median_s[i] / 1e6, py->median_s[i] / nb * 1e9);
	}
	fprintf(f, "\nCommand (`make bench` runs it; `--output` rewrites this section):\n\n```\n");
	fprintf(f, "bench/keys --tokens %zu --runs %zu --py-runs %zu --python %s --output BENCHMARKS.md\n",
		o->tokens, o->runs, o->py_runs, o->python ? o->python : "none");
	fprintf(f, "```\n" SECTION_END "\n");
}

/* slurp() - a whole file into a new NUL-terminated buffer ("" if it does
 * not exist); NULL on another error. Caller frees. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		return errno == ENOENT ? calloc(1, 1) : NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || !(buf = malloc((size_t)n + 1))) {
		fclose(f);
		return NULL;
	}
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return NULL;
	}
	buf[n] = 0;
	fclose(f);
	return buf;
}

/* replace_section() - put the section into path between the markers,
 * keeping everything else; appended when the markers are not there. */
static int replace_section(const char *path, const char *section)
{
	char *old = slurp(path), *b, *e;
	FILE *f;

	if (!old) {
		fprintf(stderr, "keys: cannot read %s: %s\n", path, strerror(errno));
		return -errno;
	}
	f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "keys: cannot write %s: %s\n", path, strerror(errno));
		free(old);
		return -errno;
	}
	b = strstr(old, SECTION_BEGIN);
	e = b ? strstr(b, SECTION_END) : NULL;
	if (b && e) {
		e += strlen(SECTION_END);
		if (*e == '\n')
			e++;
		fwrite(old, 1, (size_t)(b - old), f);
		fputs(section, f);
		fputs(e, f);
	} else {
		fputs(old[0] ? old : "# kvpool benchmarks\n", f);
		fprintf(f, "\n%s", section);
	}
	free(old);
	if (fclose(f) != 0) {
		fprintf(stderr, "keys: cannot write %s: %s\n", path, strerror(errno));
		return -EIO;
	}
	fprintf(stderr, "keys: wrote the keys section of %s\n", path);
	return 0;
}

/* --- Options and main ---------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: keys [OPTION]...\n"
		"Measure kvp_key_chain() of both key schemes in tokens/s against vLLM's\n"
		"Python sha256_cbor (cbor2 + hashlib) on the same tokens.\n\n"
		"  -n, --tokens=N     token ids in the sequence (default 1048576)\n"
		"  -r, --runs=N       timed runs per scheme and block size (default 15)\n"
		"  -p, --py-runs=N    timed runs of the Python reference (default 3)\n"
		"  -P, --python=PATH  interpreter with cbor2 (default /usr/bin/python3;\n"
		"                     'none' skips the reference)\n"
		"  -o, --output=FILE  replace the keys section of this Markdown file\n"
		"  -h, --help         show this help and exit\n");
}

/* parse_opts() - fill *o from argv. Returns 0, 1 (help shown) or -EINVAL. */
static int parse_opts(int argc, char **argv, struct keys_opts *o)
{
	static const struct option longopts[] = {
		{ "tokens", required_argument, NULL, 'n' },
		{ "runs", required_argument, NULL, 'r' },
		{ "py-runs", required_argument, NULL, 'p' },
		{ "python", required_argument, NULL, 'P' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch, rc = 0;

	*o = (struct keys_opts){ .tokens = 1u << 20, .runs = 15, .py_runs = 3,
				 .python = "/usr/bin/python3" };
	while (rc == 0 && (ch = getopt_long(argc, argv, "n:r:p:P:o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			rc = bench_count("keys", "tokens", optarg, 128, 1u << 28, &o->tokens);
			break;
		case 'r':
			rc = bench_count("keys", "runs", optarg, 1, KEYS_MAX_RUNS, &o->runs);
			break;
		case 'p':
			rc = bench_count("keys", "py-runs", optarg, 1, KEYS_MAX_RUNS, &o->py_runs);
			break;
		case 'P':
			o->python = strcmp(optarg, "none") ? optarg : NULL;
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (rc == 0 && optind < argc) {
		fprintf(stderr, "keys: unexpected argument '%s'; see keys --help\n", argv[optind]);
		rc = -EINVAL;
	}
	return rc;
}

/* section_to_output() - render the section and put it into o->output. */
static int section_to_output(const struct keys_opts *o, const struct keys_result *r,
			     size_t nr, const struct keys_pyref *py, const bool *agree)
{
	char *text = NULL, *dir, *slash;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	int rc;

	if (!m)
		return -ENOMEM;
	/* git describes the tree the output file lives in */
	dir = strdup(o->output);
	if (dir) {
		slash = strrchr(dir, '/');
		if (slash)
			*slash = 0;
		setenv("KEYS_SRCDIR", slash ? dir : ".", 1);
		free(dir);
	}
	write_section(m, o, r, nr, py, agree);
	fclose(m);
	rc = replace_section(o->output, text);
	free(text);
	return rc;
}

int main(int argc, char **argv)
{
	static const uint32_t schemes[] = { KVP_KEYS_VLLM_SHA256_CBOR, KVP_KEYS_FAST };
	struct keys_result r[KEYS_NBLOCKS * 2];
	bool agree[KEYS_NBLOCKS] = { false, false };
	struct keys_pyref py;
	struct keys_opts o;
	uint32_t *tok;
	kvp_key *keys;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	size_t i, s, nr = 0;
	int rc, b;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? EXIT_SUCCESS : 2;
	tok = malloc(o.tokens * sizeof(*tok));
	keys = malloc((o.tokens / block_sizes[0] + 1) * sizeof(*keys));
	if (!tok || !keys) {
		fprintf(stderr, "keys: out of memory for %zu tokens\n", o.tokens);
		return EXIT_FAILURE;
	}
	for (i = 0; i < o.tokens; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		tok[i] = (uint32_t)((x >> 11) % KEYS_VOCAB);
	}
	for (b = 0; b < KEYS_NBLOCKS; b++) {
		for (s = 0; s < 2; s++) {
			rc = measure(schemes[s], block_sizes[b], tok, o.tokens, keys,
				     o.runs, &r[nr]);
			if (rc)
				return EXIT_FAILURE;
			printf("scheme=%s block=%u tokens=%zu runs=%zu median_ms=%.3f min_ms=%.3f tokens_per_s=%.0f\n",
			       scheme_name(schemes[s]), block_sizes[b], o.tokens, o.runs,
			       r[nr].median_s * 1e3, r[nr].min_s * 1e3,
			       (double)o.tokens / r[nr].median_s);
			nr++;
		}
	}
	run_python(&o, tok, o.tokens, &py);
	if (py.ok) {
		for (b = 0; b < KEYS_NBLOCKS; b++) {
			char hex[2 * KVP_KEY_BYTES + 1];

			key_hex(&r[2 * b].last, hex);
			agree[b] = strcmp(hex, py.last[b]) == 0;
			printf("scheme=python block=%u tokens=%zu runs=%zu median_ms=%.3f min_ms=%.3f tokens_per_s=%.0f same_last_key=%s\n",
			       block_sizes[b], o.tokens, o.py_runs, py.median_s[b] * 1e3,
			       py.min_s[b] * 1e3, (double)o.tokens / py.median_s[b],
			       agree[b] ? "yes" : "no");
		}
		printf("# %s\n", py.version);
	} else {
		printf("# python reference missing: %s\n", py.why);
	}
	rc = 0;
	if (o.output)
		rc = section_to_output(&o, r, nr, &py, agree);
	free(keys);
	free(tok);
	if (py.ok && !(agree[0] && agree[1])) {
		fprintf(stderr, "keys: the vLLM scheme's keys differ from vLLM's Python\n");
		return EXIT_FAILURE;
	}
	return rc ? EXIT_FAILURE : EXIT_SUCCESS;
}
