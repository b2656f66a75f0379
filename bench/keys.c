/* SPDX-License-Identifier: MIT */
/*
 * keys.c - bench/keys: throughput of the prefix keys, kvp_key_chain() of
 * every scheme over one long token sequence, against vLLM computing the
 * same keys in Python, measured in the same run on the same tokens: with
 * --vllm, vLLM's own hash functions (vllm/utils/hashing.py of an installed
 * vLLM or its wheel) for each of its four algorithms; without, vLLM's
 * sha256_cbor as cbor2 + hashlib.
 *
 * The tokens are --tokens pseudo-random ids below 152064 (a Qwen2-size
 * vocabulary, so most take 3 CBOR bytes and some 5). For block sizes 16
 * and 128 and each scheme, one untimed run and then --runs timed runs of
 * kvp_key_root() + kvp_key_chain() over all tokens, one thread; the
 * median run gives tokens/s. The Python reference runs the loop of vLLM's
 * hash_block_tokens() for each algorithm, --py-runs times, from a file of
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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* cpu_has() - what libkvpool's key code picks up on this CPU, for the
 * report: the SHA extensions (CPUID 7.0 EBX 29) and AVX-512 VBMI2 with
 * BW and VL (ECX 6, EBX 30, EBX 31), as client/keys_sha256.c checks them. */
static void cpu_has(bool *sha, bool *vbmi2)
{
	unsigned a, b, c, d;

	*sha = *vbmi2 = false;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return;
	*sha = b & (1u << 29);
	__builtin_cpu_init();
	*vbmi2 = __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512bw") &&
		 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi2");
}
#else
static void cpu_has(bool *sha, bool *vbmi2)
{
	*sha = *vbmi2 = false;
}
#endif

#define KEYS_VOCAB	152064
#define KEYS_NBLOCKS	2
#define KEYS_NALGOS	4	/* vLLM's algorithms */
#define KEYS_NSCHEMES	4	/* their schemes (fast is xxhash_cbor) */
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
	const char *vllm;	/* vLLM's wheel or tree; NULL: sha256_cbor by hand */
	const char *output;	/* NULL: stdout only */
};

/* One scheme at one block size. */
struct keys_result {
	uint32_t scheme;
	uint32_t block;
	double median_s, min_s;
	kvp_key last;		/* key of the last full block */
};

/* vLLM's algorithms and their schemes, in the order of the tables. */
static const char *const algo_names[KEYS_NALGOS] = {
	"sha256_cbor", "sha256", "xxhash", "xxhash_cbor",
};
static const uint32_t schemes[KEYS_NSCHEMES] = {
	KVP_KEYS_VLLM_SHA256_CBOR, KVP_KEYS_VLLM_SHA256, KVP_KEYS_VLLM_XXHASH,
	KVP_KEYS_VLLM_XXHASH_CBOR,
};

/* The Python reference, one entry per algorithm and block size (an
 * algorithm it did not run has median_s 0). */
struct keys_pyref {
	bool ok;
	char why[256];		/* when !ok: what is missing */
	char version[256];	/* "Python 3.11.2, vLLM 0.33.0, cbor2 5.4.6 (C), ..." */
	double median_s[KEYS_NALGOS][KEYS_NBLOCKS], min_s[KEYS_NALGOS][KEYS_NBLOCKS];
	char last[KEYS_NALGOS][KEYS_NBLOCKS][2 * KVP_KEY_BYTES + 1];
};

/* vLLM's way, as vllm/v1/core/kv_cache_utils.py hashes a request's full
 * blocks: h = hash_fn(seed), then h = hash_fn((h, tuple(block), None));
 * argv: token file, runs, seed, vLLM path ("" for sha256_cbor by hand),
 * block sizes. */
static const char py_reference[] =
	"import array, hashlib, importlib.metadata, importlib.util, platform, ssl\n"
	"import statistics, sys, time, zipfile\n"
	"try:\n"
	"    import cbor2\n"
	"except ImportError:\n"
	"    print('error=no-cbor2')\n"
	"    sys.exit(0)\n"
	"path = sys.argv[4]\n"
	"if path:\n"
	"    if path.endswith('.whl'):\n"
	"        z = zipfile.ZipFile(path)\n"
	"        src = z.read('vllm/utils/hashing.py').decode()\n"
	"        ver = next(n.split('.dist-info')[0].split('-', 1)[1] for n in z.namelist()\n"
	"                   if n.endswith('.dist-info/METADATA'))\n"
	"    else:\n"
	"        f = path if path.endswith('.py') else path + '/vllm/utils/hashing.py'\n"
	"        src, ver = open(f).read(), '?'\n"
	"    m = importlib.util.module_from_spec(importlib.util.spec_from_loader('h', None))\n"
	"    exec(compile(src, 'vllm/utils/hashing.py', 'exec'), m.__dict__)\n"
	"    algos = ['sha256_cbor', 'sha256', 'xxhash', 'xxhash_cbor']\n"
	"    fns = {a: m.get_hash_fn_by_name(a) for a in algos}\n"
	"    who = 'vLLM %s hash functions' % ver\n"
	"else:\n"
	"    fns = {'sha256_cbor': lambda x: hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()}\n"
	"    who = 'cbor2 + hashlib'\n"
	"a = array.array('I')\n"
	"with open(sys.argv[1], 'rb') as f:\n"
	"    a.frombytes(f.read())\n"
	"if sys.byteorder != 'little':\n"
	"    a.byteswap()\n"
	"toks = a.tolist()\n"
	"runs, seed = int(sys.argv[2]), sys.argv[3]\n"
	"cext = 'C' if cbor2.dumps.__module__ in ('_cbor2', 'cbor2._cbor2') else 'pure Python'\n"
	"print('version=Python %s, %s, cbor2 %s (%s), %s' % (platform.python_version(), who,\n"
	"      importlib.metadata.version('cbor2'), cext, ssl.OPENSSL_VERSION))\n"
	"for algo, fn in fns.items():\n"
	"    for bt in map(int, sys.argv[5:]):\n"
	"        n = len(toks) // bt * bt\n"
	"        times = []\n"
	"        for r in range(runs):\n"
	"            t0 = time.perf_counter()\n"
	"            h = fn(seed)\n"
	"            for i in range(0, n, bt):\n"
	"                h = fn((h, tuple(toks[i:i + bt]), None))\n"
	"            times.append(time.perf_counter() - t0)\n"
	"        print('algo=%s block=%d median_s=%.9f min_s=%.9f last=%s' % (algo, bt,\n"
	"              statistics.median(times), min(times), h.hex()))\n";

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
	return scheme == KVP_KEYS_VLLM_SHA256 ? "sha256" :
	       scheme == KVP_KEYS_VLLM_XXHASH ? "xxhash" :
	       scheme == KVP_KEYS_VLLM_XXHASH_CBOR ? "xxhash_cbor (fast)" : "sha256_cbor";
}

/* scheme_algo() - the index of a vLLM algorithm's scheme, -1 for fast. */
static int scheme_algo(uint32_t scheme)
{
	int i;

	for (i = 0; i < KEYS_NALGOS; i++)
		if (schemes[i] == scheme)
			return i;
	return -1;
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
		      seed, o->vllm ? o->vllm : "", b0, b1, (char *)NULL);
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
	char last[2 * KVP_KEY_BYTES + 1], algo[32];
	int i, a;

	line[strcspn(line, "\n")] = 0;
	if (strncmp(line, "version=", 8) == 0) {
		snprintf(py->version, sizeof(py->version), "%.200s", line + 8);
	} else if (strcmp(line, "error=no-cbor2") == 0) {
		snprintf(py->why, sizeof(py->why),
			 "Python module cbor2 is missing (Debian: apt-get install python3-cbor2)");
	} else if (sscanf(line, "algo=%31s block=%u median_s=%lf min_s=%lf last=%64s",
			  algo, &bt, &med, &min, last) == 5) {
		for (a = 0; a < KEYS_NALGOS; a++) {
			if (strcmp(algo, algo_names[a]))
				continue;
			for (i = 0; i < KEYS_NBLOCKS; i++) {
				if (block_sizes[i] != bt)
					continue;
				py->median_s[a][i] = med;
				py->min_s[a][i] = min;
				memcpy(py->last[a][i], last, sizeof(last));
			}
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
	fprintf(stderr, "  %s -c <vLLM's hash_block_tokens loop> TOKENS %zu %s %s %u %u\n",
		o->python, o->py_runs, seed, o->vllm ? o->vllm : "''", block_sizes[0],
		block_sizes[1]);
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
		if (py->median_s[0][i] <= 0) {
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
			  const struct keys_pyref *py, bool agree[KEYS_NALGOS][KEYS_NBLOCKS])
{
	char cpu[256], when[64], load[64], rev[128];
	double tps16[KEYS_NSCHEMES] = { 0 }, worst = 1e300;
	bool all_agree = true, measured = false, sha, vbmi2;
	struct utsname u;
	time_t t = time(NULL);
	size_t i;
	int a, b, k, worst_a = 0;

	cpu_has(&sha, &vbmi2);

	shell_line("sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1",
		   cpu, sizeof(cpu));
	shell_line("cut -d' ' -f1-3 /proc/loadavg", load, sizeof(load));
	shell_line("cd \"$KEYS_SRCDIR\" 2>/dev/null && r=$(git rev-parse --short HEAD 2>/dev/null)"
		   " && if [ -n \"$(git status --porcelain 2>/dev/null)\" ];"
		   " then echo \"$r + uncommitted changes\"; else echo \"$r\"; fi",
		   rev, sizeof(rev));
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime(&t));
	uname(&u);
	for (i = 0; i < nr; i++)
		for (k = 0; k < KEYS_NSCHEMES; k++)
			if (r[i].block == 16 && r[i].scheme == schemes[k])
				tps16[k] = (double)o->tokens / r[i].median_s;

	fprintf(f, SECTION_BEGIN "\n");
	fprintf(f, "## Prefix keys: kvp_key_chain() throughput (bench/keys)\n\n");
	fprintf(f, "Measured %s by `make bench` (bench/keys) on %ld CPUs (%s),\n",
		when, sysconf(_SC_NPROCESSORS_ONLN), cpu[0] ? cpu : "unknown");
	fprintf(f, "%s %s, load average %s before the run; libkvpool %s (%s).\n",
		u.sysname, u.release, load[0] ? load : "unknown", kvp_version(),
		rev[0] ? rev : "no git");
	if (py->ok)
		fprintf(f, "Reference: vLLM's Python, %s, measured in the same run on the same "
			   "tokens.\n", py->version);
	else
		fprintf(f, "**Reference missing:** %s. Only kvpool's figures are below.\n",
			py->why);
	fprintf(f, "\n%zu pseudo-random token ids below %u, keyed from the root of seed \"%s\"\n"
		   "with no extra keys, one thread. kvpool: one untimed run, then the median\n"
		   "of %zu runs of kvp_key_root() + kvp_key_chain() over all of them. Python:\n"
		   "the median of %zu runs of vLLM's loop, `h = hash_fn((h, tuple(block),\n"
		   "None))` block after block, with vLLM's own hash functions when `--vllm`\n"
		   "names an installed vLLM or its wheel (else sha256_cbor as cbor2 + hashlib).\n"
		   "Ratios are tokens/s ÷ the reference's tokens/s for the same algorithm at\n"
		   "the same block size. kvpool's SHA-256 uses the x86 SHA extensions, and its\n"
		   "token encoders AVX-512 VBMI2, where the CPU has them (this one: %s, %s);\n"
		   "hashlib's SHA-256 is OpenSSL's, which uses the SHA extensions too.\n\n",
		o->tokens, KEYS_VOCAB, seed, o->runs, o->py_runs,
		sha ? "SHA yes" : "SHA no", vbmi2 ? "VBMI2 yes" : "VBMI2 no");

	for (a = 0; a < KEYS_NALGOS; a++) {
		for (b = 0; b < KEYS_NBLOCKS; b++) {
			if (py->ok && py->median_s[a][b] > 0) {
				measured = true;
				all_agree = all_agree && agree[a][b];
			}
		}
		if (py->ok && py->median_s[a][0] > 0 &&
		    tps16[a] * py->median_s[a][0] / (double)o->tokens < worst) {
			worst = tps16[a] * py->median_s[a][0] / (double)o->tokens;
			worst_a = a;
		}
	}
	fprintf(f, "| goal | measured | result |\n| --- | --- | --- |\n");
	if (measured) {
		double x = py->median_s[3][0] > 0 ?
			   tps16[3] * py->median_s[3][0] / (double)o->tokens : 0;

		fprintf(f, "| every vLLM algorithm ≥ 10x vLLM's own tokens/s (16-token blocks) | "
			   "slowest: %s at ×%.1f | %s |\n", algo_names[worst_a], worst,
			worst >= 10 ? "**met**" : "**not met**");
		if (x > 0)
			fprintf(f, "| xxhash_cbor ≥ 100x vLLM's (16-token blocks) | ×%.1f | %s |\n",
				x, x >= 100 ? "**met**" : "**not met**");
		fprintf(f, "| every key byte-identical to vLLM's (last key of every run) | %s | %s |\n",
			all_agree ? "equal for every algorithm and block size" : "**differs**",
			all_agree ? "**met**" : "**not met**");
	}

	fprintf(f, "\n| block tokens | scheme | median ms / run | tokens/s | blocks/s | ns/block | ÷ vLLM's |\n");
	fprintf(f, "| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
	for (i = 0; i < nr; i++) {
		double tps = (double)o->tokens / r[i].median_s;
		double nb = (double)(o->tokens / r[i].block);

		b = r[i].block == block_sizes[0] ? 0 : 1;
		a = scheme_algo(r[i].scheme);
		fprintf(f, "| %u | %s | %.2f | %.2fM | %.2fM | %.0f | ", r[i].block,
			scheme_name(r[i].scheme), r[i].median_s * 1e3, tps / 1e6,
			nb / r[i].median_s / 1e6, r[i].median_s / nb * 1e9);
		if (py->ok && a >= 0 && py->median_s[a][b] > 0)
			fprintf(f, "%.1f |\n", py->median_s[a][b] / r[i].median_s);
		else
			fprintf(f, "– |\n");
	}
	for (a = 0; py->ok && a < KEYS_NALGOS; a++) {
		for (b = 0; b < KEYS_NBLOCKS; b++) {
			double nb = (double)(o->tokens / block_sizes[b]);

			if (py->median_s[a][b] <= 0)
				continue;
			fprintf(f, "| %u | vLLM's Python %s | %.2f | %.2fM | %.2fM | %.0f | 1.0 |\n",
				block_sizes[b], algo_names[a], py->median_s[a][b] * 1e3,
				(double)o->tokens / py->median_s[a][b] / 1e6,
				nb / py->median_s[a][b] / 1e6, py->median_s[a][b] / nb * 1e9);
		}
	}
	fprintf(f, "\nCommand (`make bench` runs it, with `VLLM=` a vLLM wheel or tree for\n"
		   "`--vllm`; `--output` rewrites this section):\n\n```\n");
	fprintf(f, "bench/keys --tokens %zu --runs %zu --py-runs %zu --python %s%s%s --output BENCHMARKS.md\n",
		o->tokens, o->runs, o->py_runs, o->python ? o->python : "none",
		o->vllm ? " --vllm " : "", o->vllm ? o->vllm : "");
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
		"Measure kvp_key_chain() of every key scheme in tokens/s against vLLM's\n"
		"Python on the same tokens: its own hash functions with --vllm, else\n"
		"sha256_cbor as cbor2 + hashlib.\n\n"
		"  -n, --tokens=N     token ids in the sequence (default 1048576)\n"
		"  -r, --runs=N       timed runs per scheme and block size (default 101)\n"
		"  -p, --py-runs=N    timed runs of the Python reference (default 5)\n"
		"  -P, --python=PATH  interpreter with cbor2 (and xxhash for --vllm;\n"
		"                     default /usr/bin/python3; 'none' skips the reference)\n"
		"  -V, --vllm=PATH    a vLLM wheel, install tree or vllm/utils/hashing.py:\n"
		"                     its hash functions are the reference\n"
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
		{ "vllm", required_argument, NULL, 'V' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch, rc = 0;

	*o = (struct keys_opts){ .tokens = 1u << 20, .runs = 101, .py_runs = 5,
				 .python = "/usr/bin/python3" };
	while (rc == 0 && (ch = getopt_long(argc, argv, "n:r:p:P:V:o:h", longopts, NULL)) != -1) {
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
		case 'V':
			o->vllm = optarg;
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
			     size_t nr, const struct keys_pyref *py,
			     bool agree[KEYS_NALGOS][KEYS_NBLOCKS])
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
	struct keys_result r[KEYS_NBLOCKS * KEYS_NSCHEMES];
	bool agree[KEYS_NALGOS][KEYS_NBLOCKS] = { { false } }, bad = false;
	struct keys_pyref py;
	struct keys_opts o;
	uint32_t *tok;
	kvp_key *keys;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	size_t i, s, nr = 0;
	int rc, b, a;

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
		for (s = 0; s < KEYS_NSCHEMES; s++) {
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
		for (a = 0; a < KEYS_NALGOS; a++) {
			for (b = 0; b < KEYS_NBLOCKS; b++) {
				char hex[2 * KVP_KEY_BYTES + 1];
				size_t n = strlen(py.last[a][b]);

				if (py.median_s[a][b] <= 0)
					continue;
				/* r holds block 0's schemes, then block 1's */
				key_hex(&r[b * KEYS_NSCHEMES + a].last, hex);
				agree[a][b] = n && strncmp(hex, py.last[a][b], n) == 0;
				bad = bad || !agree[a][b];
				printf("scheme=python-%s block=%u tokens=%zu runs=%zu median_ms=%.3f min_ms=%.3f tokens_per_s=%.0f same_last_key=%s\n",
				       algo_names[a], block_sizes[b], o.tokens, o.py_runs,
				       py.median_s[a][b] * 1e3, py.min_s[a][b] * 1e3,
				       (double)o.tokens / py.median_s[a][b],
				       agree[a][b] ? "yes" : "no");
			}
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
	if (bad) {
		fprintf(stderr, "keys: a vLLM scheme's keys differ from vLLM's Python\n");
		return EXIT_FAILURE;
	}
	return rc ? EXIT_FAILURE : EXIT_SUCCESS;
}
