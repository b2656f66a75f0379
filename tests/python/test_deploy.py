# SPDX-License-Identifier: MIT
"""A model server in a container against the host's kvpoold (docs/deploy.md):
a client process in user, mount and PID namespaces of its own (unshare, as
a container runtime makes them) reaches the daemon through its socket
directory bind-mounted at another path, leases and writes pages, publishes
them, and a host client reads the same bytes; the daemon knows the
container's client by its host pid, and its leases go when it dies."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import kvpool
from conftest import GEO, TOP

CLIENT = r"""
import os, sys
import kvpool
from conftest import GEO
c = kvpool.Client(os.environ["KVPOOL_SOCKET"], "deploy", GEO)
toks = list(range(2 * GEO.block_tokens))
keys = c.block_keys(toks)
pages = c.alloc(len(keys))
for i, p in enumerate(pages):
    v = c.page_view(p)
    v[:] = bytes([0x40 + i]) * len(v)
    del v
c.publish(pages, keys)
held = c.alloc(3)  # leases the container keeps until it dies
print("pid-inside", os.getpid(), flush=True)
sys.stdin.readline()
"""


def unshare_ok():
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
                        "true"], capture_output=True, text=True)
    return None if r.returncode == 0 else "unshare refused: " + r.stderr.strip()


def test_a_client_in_its_own_namespaces_shares_pages_with_the_host(daemon):
    why = unshare_ok()
    if why:
        pytest.skip(why + " (user namespaces disabled on this machine)")
    inside = tempfile.mkdtemp(prefix="kvpool-ns-")
    here = os.path.dirname(os.path.abspath(__file__))
    # the container sees the daemon's socket directory at $inside/run/kvpool
    script = ('mkdir -p "$1/run/kvpool" && mount --bind "$2" "$1/run/kvpool" && '
              'KVPOOL_SOCKET="$1/run/kvpool/kvpool.sock" exec "$3" -c "$4"')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(TOP, "python"), here]))
    p = subprocess.Popen(["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
                          "sh", "-c", script, "sh", inside, os.path.dirname(daemon.sock),
                          sys.executable, CLIENT],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=here)
    try:
        line = p.stdout.readline()
        assert line.startswith("pid-inside"), p.stderr.read()
        assert line.split()[1] == "1" or int(line.split()[1]) < 10  # its own PID namespace
        clients = [c for c in kvpool.Client(daemon.sock).list_clients()
                   if c["namespace"] == "deploy"]
        assert len(clients) == 1
        host_pid = clients[0]["pid"]
        assert host_pid > 1 and os.path.exists("/proc/%d" % host_pid)  # the host's pid
        assert clients[0]["leases"] == 2 + 3  # the published pages and the private ones
        with kvpool.Client(daemon.sock, "deploy", GEO) as c:
            got = c.acquire(c.block_keys(list(range(2 * GEO.block_tokens))))
            assert len(got.pages) == 2
            for i, pg in enumerate(got.pages):
                v = c.page_view(pg)
                assert bytes(v) == bytes([0x40 + i]) * len(v)
                del v
            c.release(got.pages)
        os.kill(host_pid, 9)  # the container's server dies (kill -9 from the host)
        p.wait(10)
        daemon.wait_for(lambda st: st["pages_private"] == 0 and
                        st["namespaces"][0]["clients"] == 0,
                        "the container's leases released")
        assert daemon.stats()["pages_cached"] == 2
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(inside, ignore_errors=True)
