# SPDX-License-Identifier: MIT
"""machines.py - machines of their own on this one, for what must cross a
network: network namespaces (ip netns) linked by veth pairs through a
bridge, each link shaped to a stated bandwidth (tc tbf), and a Redis
Cluster on a machine of its own. Used by the cross-machine P/D test
(tests/python/test_machines.py) and `make bench-pd` (bench/pd.py).

    with Machines(["a", "b"], gbit=1) as m:
        m.ip("a")                      # the address of machine a
        m.run("a", ["kvpoold", ...])   # argv run on machine a
        m.redis_cluster(masters=3)     # kvpoold's --remote URL of a cluster
                                       # on machine redis

The layout: every machine's one link (a veth pair) ends in a bridge on
machine "redis", which holds the cluster; this process's own namespace
gets a link to the bridge too (not shaped), so that it can reach the
machines' servers. A machine's link is shaped both ways, to gbit Gbit/s:
a transfer from a to b crosses two shaped hops (a to the bridge, the
bridge to b), as it would a switch. This machine's kernel has tbf but no
netem: no latency is added, only the bandwidth is limited.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for ip netns) and iproute2;
missing() says why not.
"""
import os
import random
import shutil
import subprocess
import time
from typing import Dict, List, Optional, Sequence

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def missing() -> Optional[str]:
    """Why machines cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add), and this runs as uid %d" % \
            os.geteuid()
    for tool in ("ip", "tc", "redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            return "%s is not installed (Debian: iproute2, redis-server, redis-tools)" % tool
    r = subprocess.run(["ip", "netns", "add", "kvpprobe%d" % os.getpid()],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns add failed: %s" % r.stderr.strip()
    subprocess.run(["ip", "netns", "del", "kvpprobe%d" % os.getpid()], check=False)
    return None


def sh(*argv: str, ns: Optional[str] = None) -> None:
    cmd = list(argv) if ns is None else ["ip", "netns", "exec", ns, *argv]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))


class Machines:
    """Machines named names (and "redis"), linked at gbit Gbit/s (None:
    not shaped). Tears all of it down on close (the namespaces, their
    links, the servers started on them)."""

    def __init__(self, names: Sequence[str], gbit: Optional[float] = None):
        self.tag = "kvp%04d" % (os.getpid() % 10000)
        self.net = "10.%d.%d" % (200 + random.randrange(50), random.randrange(1, 250))
        self.names = list(names) + ["redis"]
        self.ns: Dict[str, str] = {}
        self.addr: Dict[str, str] = {}
        self.gbit = gbit
        self.procs: List[subprocess.Popen] = []
        self.redis_dir: Optional[str] = None
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        for i, name in enumerate(self.names):
            self.ns[name] = self.tag + name[0] + str(i)
            sh("ip", "netns", "add", self.ns[name])
            sh("ip", "link", "set", "lo", "up", ns=self.ns[name])
        hub = self.ns["redis"]
        sh("ip", "link", "add", "br0", "type", "bridge", ns=hub)
        sh("ip", "link", "set", "br0", "up", ns=hub)
        self.addr["redis"] = self.net + ".250"
        sh("ip", "addr", "add", self.addr["redis"] + "/24", "dev", "br0", ns=hub)
        for i, name in enumerate(self.names[:-1] + ["host"]):
            near, far = "%s%dm" % (self.tag, i), "%s%db" % (self.tag, i)
            sh("ip", "link", "add", near, "type", "veth", "peer", "name", far)
            sh("ip", "link", "set", far, "netns", hub)
            sh("ip", "link", "set", far, "master", "br0", ns=hub)
            sh("ip", "link", "set", far, "up", ns=hub)
            ip = self.net + (".254" if name == "host" else ".%d" % (i + 1))
            where = None
            if name != "host":
                sh("ip", "link", "set", near, "netns", self.ns[name])
                where = self.ns[name]
                self.addr[name] = ip
            else:
                self.host_link = near
            sh("ip", "addr", "add", ip + "/24", "dev", near, ns=where)
            sh("ip", "link", "set", near, "up", ns=where)
            if self.gbit is not None and name != "host":
                self._shape(near, where)
                self._shape(far, hub)

    def _shape(self, dev: str, ns: Optional[str]) -> None:
        """tbf on dev's egress: gbit Gbit/s, a burst of 10 ms of it."""
        rate = int(self.gbit * 1e9)
        burst = max(rate // 8 // 100, 256 * 1024)
        sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", "%dbit" % rate,
           "burst", str(burst), "latency", "100ms", ns=ns)

    def ip(self, name: str) -> str:
        return self.addr[name]

    def wrap(self, name: str, argv: Sequence[str]) -> List[str]:
        """argv as run on machine name."""
        return ["ip", "netns", "exec", self.ns[name], *argv]

    def run(self, name: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        """A process on machine name, stopped by close()."""
        p = subprocess.Popen(self.wrap(name, argv), **kw)
        self.procs.append(p)
        return p

    def redis_cluster(self, port: int = 7000, masters: int = 3) -> str:
        """A Redis Cluster of masters nodes (no replicas) on machine redis
        (tests/redis-cluster.sh): kvpoold's --remote URL for it."""
        import tempfile
        self.redis_dir = tempfile.mkdtemp(prefix="kvpool-machines-redis-")
        env = dict(os.environ, REDIS_HOST=self.addr["redis"])
        r = subprocess.run(self.wrap("redis", ["sh", os.path.join(SRC, "tests",
                                                                   "redis-cluster.sh"),
                                               "start", self.redis_dir, str(port),
                                               str(masters), "0"]),
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError("the Redis Cluster did not start: %s" % r.stderr[-2000:])
        return "redis-cluster://" + ",".join("%s:%d" % (self.addr["redis"], port + i)
                                             for i in range(masters))

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.redis_dir is not None:
            subprocess.run(self.wrap("redis", ["sh", os.path.join(SRC, "tests",
                                                                  "redis-cluster.sh"),
                                               "stop", self.redis_dir]),
                           capture_output=True, check=False)
            shutil.rmtree(self.redis_dir, ignore_errors=True)
            self.redis_dir = None
        for ns in self.ns.values():
            # what still runs there (an engine a test left) goes with it
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            for _ in range(50):
                if subprocess.run(["ip", "netns", "del", ns], capture_output=True).returncode \
                        == 0:
                    break
                time.sleep(0.1)
        self.ns = {}
        link = getattr(self, "host_link", None)
        if link is not None:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)

    def __enter__(self) -> "Machines":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
