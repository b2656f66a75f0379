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
sys.path.insert(1, os.path.join(TOP, "examples"))

import kvpool  # noqa: E402

GEO = kvpool.Geometry(layers=2, kv_heads=2, head_dim=64, block_tokens=16,
                      dtype=kvpool.DType.F16, model="test/python")


_PYTEST_PID = os.getpid()


def _stop_on_sigterm(signum, frame):
    """The suite stopped (SIGTERM: a CI time-out, make's end): as Ctrl-C,
    so that pytest stops and every fixture's end, with block's and finally
    runs, which stop what the tests started (daemons, engines, Redis,
    network namespaces, mounts); a default SIGTERM left them all behind.
    Once: a second SIGTERM does not cut those ends short. A process forked
    from this one (or one that imports conftest) dies as before."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN if os.getpid() == _PYTEST_PID
                  else signal.SIG_DFL)
    if os.getpid() != _PYTEST_PID:
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt("SIGTERM: the test suite was stopped")


signal.signal(signal.SIGTERM, _stop_on_sigterm)
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
        # a start that failed leaves nothing behind: the caller has no
        # Daemon to discard (its log is in the error)
        why = self.read_log()
        self.discard()
        raise RuntimeError("kvpoold did not become ready: " + why)

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


@contextlib.contextmanager
def spill_drive(path, size, mode=0o700):
    """A file system of size bytes at path (a new directory of mode), as a
    node's spill drive is sized for the DaemonSet's --spill-size: kvpoold
    refuses one with less free, and this machine's disk may have less
    (CI's had 12.8 GiB for 16G). ext4 in a sparse file on a loop device:
    what it costs this disk is what is written to it (tier files are
    fallocated, not written). Unmounted at the end, or by a watcher that
    outlives this process when it is killed first. Without a loop device
    (not root), the plain directory when its disk has the room, else a
    skip that says so."""
    path = str(path)
    os.mkdir(path, mode)
    img = path + ".img"
    why = "not root" if os.geteuid() != 0 else None
    if why is None:
        with open(img, "wb") as f:
            f.truncate(size)
        r = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", img],
                           capture_output=True, text=True)
        if r.returncode == 0:
            r = subprocess.run(["mount", "-o", "loop", img, path], capture_output=True,
                               text=True)
        why = (r.stderr or r.stdout).strip() if r.returncode else None
        if why is not None:
            os.unlink(img)
    if why is not None:
        vfs = os.statvfs(path)
        if vfs.f_bavail * vfs.f_frsize < size:
            pytest.skip("a spill drive of %d GiB: %s has %.1f GiB free and no loop device "
                        "can be mounted (%s)" % (size >> 30, path,
                                                 vfs.f_bavail * vfs.f_frsize / 2**30, why))
        yield path
        return
    watcher = subprocess.Popen(
        ["sh", "-c", 'tail --pid=%d -f /dev/null; umount -l "$0"; rm -f "$1"' % os.getpid(),
         path, img], start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        os.chmod(path, mode)  # the mounted root's, as made
        yield path
    finally:
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)
        watcher.kill()
        watcher.wait()
        os.unlink(img)


from vllm_engines import bind_free, free_port  # noqa: E402,F401 (KVPOOL_TEST_PORTS)


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


# hostile_pd_params() cases that are no refusal of the params (another
# connector's, a real handoff asked both ways), and the one kvpoold refuses
# (its ticket: well formed, not kvpoold's), counted in pd_tickets_refused
NOT_PARAMS_REFUSED = ("NIXL's params", "both directions", "ticket forged")
TICKET_REFUSED = ("ticket forged",)


def hostile_pd_params(good):
    """kv_transfer_params that anyone who can send an engine HTTP requests
    may put in a request body, as (what, the params' JSON text): each field
    of good (a prefill engine's real answer) made wrong in type, range or
    form, fields added or missing, other connectors' params and values that
    are no object at all. JSON text, not Python values, so that 1e400 reaches
    the engine as its JSON reader makes it (infinity)."""
    import json
    kp = good["kvpool"]

    def with_kp(**change):
        d = dict(kp, **change)
        return json.dumps(dict(good, kvpool=d))

    def raw_kp(field, text):  # a value JSON can say and Python's json.dumps cannot
        return json.dumps(dict(good, kvpool=dict(kp, **{field: "@@"}))).replace('"@@"', text)

    big = "a" * (1 << 20)
    nested = {"x": 1}
    for _ in range(50):
        nested = {"x": nested}
    cases = [("blocks 1e400", raw_kp("blocks", "1e400")),
             ("blocks -1e400", raw_kp("blocks", "-1e400")),
             ("blocks NaN", raw_kp("blocks", "NaN")),
             ("blocks 12.5", with_kp(blocks=12.5)),
             ("blocks 1.0", with_kp(blocks=1.0)),
             ("blocks -1", with_kp(blocks=-1)),
             ("blocks 0", with_kp(blocks=0)),
             ("blocks 2**70", with_kp(blocks=2 ** 70)),
             ("blocks one past the prompt", with_kp(blocks=kp["blocks"] + 1)),
             ("blocks true", with_kp(blocks=True)),
             ("blocks a string", with_kp(blocks=str(kp["blocks"]))),
             ("blocks a list", with_kp(blocks=[kp["blocks"]])),
             ("blocks an object", with_kp(blocks={"n": kp["blocks"]})),
             ("blocks a megabyte string", with_kp(blocks=big)),
             ("namespace a number", with_kp(namespace=5)),
             ("namespace null", with_kp(namespace=None)),
             ("namespace empty", with_kp(namespace="")),
             ("namespace a megabyte string", with_kp(namespace=big)),
             ("namespace another", with_kp(namespace="vllm.other.000000000000")),
             ("last_key a megabyte string", with_kp(last_key=big)),
             ("last_key not hex", with_kp(last_key="zz" * 32)),
             ("last_key upper case", with_kp(last_key=kp["last_key"].upper())),
             ("last_key odd length", with_kp(last_key=kp["last_key"][:-1])),
             ("last_key a number", with_kp(last_key=7)),
             ("last_key another block's", with_kp(last_key="00" * 32)),
             ("ticket forged", with_kp(ticket=kp["ticket"][:32] + "0" * 32)),
             ("ticket for other blocks", with_kp(ticket=kp["ticket"][:16] + "ff" * 4 +
                                                 kp["ticket"][24:])),
             ("ticket not hex", with_kp(ticket="zz" * 32)),
             ("ticket short", with_kp(ticket=kp["ticket"][:-2])),
             ("ticket a number", with_kp(ticket=12)),
             ("ticket a megabyte string", with_kp(ticket=big)),
             ("no ticket", json.dumps(dict(good, kvpool={k: v for k, v in kp.items()
                                                          if k != "ticket"}))),
             ("tokens wrong", with_kp(tokens=kp["tokens"] + 1)),
             ("tokens 1e400", raw_kp("tokens", "1e400")),
             ("an unknown field", with_kp(evil=1)),
             ("a nested object", with_kp(deep=nested)),
             ("no blocks", json.dumps(dict(good, kvpool={k: v for k, v in kp.items()
                                                          if k != "blocks"}))),
             ("no last_key", json.dumps(dict(good, kvpool={k: v for k, v in kp.items()
                                                            if k != "last_key"}))),
             ("kvpool a string", json.dumps(dict(good, kvpool="x"))),
             ("kvpool a list", json.dumps(dict(good, kvpool=[kp]))),
             ("kvpool a number", json.dumps(dict(good, kvpool=1e300))),
             ("do_remote_prefill a string", json.dumps(dict(good, do_remote_prefill="yes"))),
             ("do_remote_prefill 1", json.dumps(dict(good, do_remote_prefill=1))),
             ("do_remote_prefill a list", json.dumps(dict(good, do_remote_prefill=[True]))),
             ("params a list", json.dumps([good])),
             ("params a string", json.dumps("do_remote_prefill")),
             ("params a number", "1e400"),
             ("NIXL's params", json.dumps({
                 "do_remote_prefill": True, "do_remote_decode": False,
                 "remote_engine_id": "x", "remote_block_ids": [1, 2, 3],
                 "remote_host": "127.0.0.1", "remote_port": 5600})),
             ("both directions", json.dumps(dict(good, do_remote_decode=True)))]
    return cases


def send_hostile_pd_params(engine, prompt, good, max_tokens=2):
    """Each of hostile_pd_params(good) in a completion of prompt to engine
    (a real `vllm serve`, examples/vllm_engines.Engine), one after another:
    every one must be answered, 200 with max_tokens tokens, or 400 where
    vLLM's own API refuses the body. The statuses, by case."""
    import json
    statuses = {}
    for what, text in hostile_pd_params(good):
        body = ('{"model": %s, "prompt": %s, "max_tokens": %d, "temperature": 0, '
                '"kv_transfer_params": %s}' % (json.dumps(engine.model), json.dumps(prompt),
                                               max_tokens, text))
        status, answer = engine.post("/v1/completions", body)
        assert status in (200, 400), (what, status, answer[:500])
        if status == 200:
            assert json.loads(answer)["usage"]["completion_tokens"] == max_tokens, what
        statuses[what] = status
    return statuses
