# SPDX-License-Identifier: MIT
"""Fixtures of the Python package's tests: a real kvpoold on a temporary
socket (the build tree's, or $KVPOOLD), started in the foreground and
awaited through NOTIFY_SOCKET as the C harness does. After every test it
checks the conservation invariant (free + private + shared + cached +
spilled + in flight = total, and the daemon's own recount), stops it with
SIGTERM and requires a clean exit."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "python"))

import kvpool  # noqa: E402

GEO = kvpool.Geometry(layers=2, kv_heads=2, head_dim=64, block_tokens=16,
                      dtype=kvpool.DType.F16, model="test/python")
BUILD = os.environ.get("KVPOOL_BUILDDIR", TOP)


def tool(name):
    """A program of the build tree."""
    return os.path.join(BUILD, name)


class Daemon:
    """kvpoold with args; sock: its socket's path (else one in its own
    temporary folder); wrap: what its command runs under (["ip", "netns",
    "exec", NAME]: on another "machine", examples/machines.py); exe: the
    program (else $KVPOOLD, else the build tree's)."""

    def __init__(self, args=(), sock=None, wrap=(), exe=None):
        self.dir = tempfile.mkdtemp(prefix="kvpool-py-")
        self.sock = sock or os.path.join(self.dir, "kvpool.sock")
        self.log = os.path.join(self.dir, "kvpoold.log")
        notify = os.path.join(self.dir, "notify")
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(notify)
        exe = exe or os.environ.get("KVPOOLD") or tool("daemon/kvpoold")
        env = dict(os.environ, NOTIFY_SOCKET=notify)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [*wrap, exe, "--foreground", "--socket", self.sock, "--pool-size", "8M",
                 "--slab-size", "1M", *args], stderr=log, env=env)
        try:
            self._wait_ready(ns)
        finally:
            ns.close()

    def _wait_ready(self, ns):
        """READY=1 on the notify socket, or the log line that says it listens
        (written just before; a kvpoold built without libsystemd sends no
        READY=1)."""
        ns.settimeout(0.05)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                if b"READY=1" in ns.recv(256):
                    return
            except socket.timeout:
                pass
            if self.proc.poll() is not None:
                break
            if " listening on " in self.read_log():
                return  # it listens (built without libsystemd: no READY=1)
        self.proc.kill()
        raise RuntimeError("kvpoold did not become ready: " + self.read_log())

    def read_log(self):
        with open(self.log) as f:
            return f.read()

    def stats(self):
        with kvpool.Client(self.sock) as c:
            return c.stats()

    def wait_for(self, cond, what, seconds=10):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            st = self.stats()
            if cond(st):
                return st
            time.sleep(0.02)
        raise AssertionError("%s did not happen in %d s: %s" % (what, seconds, st))

    def connections(self, prefix="vllm"):
        """The connections whose name at HELLO starts with prefix (the
        engines' connectors), as sorted (pid, name)."""
        with kvpool.Client(self.sock) as c:
            return sorted((x["pid"], x["name"]) for x in c.list_clients()
                          if x["name"].startswith(prefix))

    def wait_reconnected(self, had, seconds=30):
        """Every connection of had (connections() of the daemon this one
        replaced) back: the connectors' watchers connect again in the
        background, and a request before that runs without the pool."""
        end = time.monotonic() + seconds
        while True:
            now = self.connections()
            if all(now.count(c) >= had.count(c) for c in had):
                return
            assert time.monotonic() < end, \
                "the engines did not connect again in %d s: had %s, now %s" % (seconds, had, now)
            time.sleep(0.05)

    def stop(self):
        st = self.stats()
        total = sum(st[k] for k in ("pages_free", "pages_private", "pages_shared",
                                    "pages_cached", "pages_spilled", "pages_inflight"))
        assert total == st["pages_total"], "conservation: %s" % st
        assert st["conserved"], "the daemon's recount disagrees: %s" % st
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(20)
        assert rc == 0, "kvpoold exited with %d; log:\n%s" % (rc, self.read_log())
        assert not os.path.exists(self.sock)


    def discard(self):
        """Kill it if it still runs (a failed test), remove its directory."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(["rm", "-rf", self.dir], check=False)


@contextlib.contextmanager
def running(args=()):
    """A Daemon for a with block: stopped cleanly (and checked) at its end
    when the block succeeded, discarded either way."""
    d = Daemon(args)
    try:
        yield d
        d.stop()
    finally:
        d.discard()


@pytest.fixture
def daemon():
    with running() as d:
        yield d


@pytest.fixture
def client(daemon):
    with kvpool.Client(daemon.sock, "py", GEO) as c:
        yield c


def free_port():
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def doc_blocks(name):
    """The code blocks of docs/NAME in order, as (language, text): fenced
    ones with their language ("" without), indented ones as "sh"."""
    blocks, fence, lang, indented = [], None, "", []
    with open(os.path.join(TOP, "docs", name)) as f:
        for line in f.read().splitlines() + [""]:
            if fence is not None:
                if line.startswith("```"):
                    blocks.append((lang, "\n".join(fence) + "\n"))
                    fence = None
                else:
                    fence.append(line)
                continue
            if line.startswith("```"):
                fence, lang = [], line[3:].strip()
                continue
            if line.startswith("    ") and (indented or not line.strip() == ""):
                indented.append(line[4:])
                continue
            if indented:
                blocks.append(("sh", "\n".join(indented) + "\n"))
                indented = []
    return blocks
