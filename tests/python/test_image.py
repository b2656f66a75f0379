# SPDX-License-Identifier: MIT
"""The container image (contrib/container/Dockerfile, `make image`) run as
contrib/kubernetes/kvpoold.yaml runs it, with podman: kvpoold in one
container (the DaemonSet's arguments, user, read-only root and no
capabilities), clients in others that share only the socket directory.

What an operator depends on: the image runs kvpoold as its kvpool user
with the socket, spill and metrics where docs/deploy.md says; its health
check answers; a client in another container, as another user holding
the socket's group, maps pages that a third container's client then finds
holding the bytes the first wrote; a user without the group is refused
with the reason; a client container killed with SIGKILL loses its leases
at once; the daemon's page counts add up; `podman stop` stops it cleanly.

It needs root, podman, runc and debootstrap (contrib/quickstart test
installs them from Debian); the base image is made from Debian's archive
with debootstrap and podman import (no image registry is reachable here),
once per machine. Without them it skips and says why.
"""
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest
import yaml

from conftest import TOP, free_port, spill_drive
from test_kubernetes import flags, size

BUILD = os.environ.get("KVPOOL_BUILDDIR", TOP)
# Debian's podman on this kind of machine: runc (crun refuses its hybrid
# cgroups), cgroupfs (no systemd session), limits no higher than the host's
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
BASE = "localhost/kvpool-base:bookworm"
IMAGE = "localhost/kvpool:test"
KVPOOL_ID = 10001  # the image's kvpool user and group (its Dockerfile's default)
SYSTEM = "You are a helpful assistant. Answer briefly and cite sources. " * 4


def missing():
    if os.geteuid() != 0:
        return "podman here builds and runs images as root only"
    for tool in ("podman", "runc", "debootstrap"):
        if not shutil.which(tool):
            return "no %s (Debian's podman, runc, debootstrap: contrib/quickstart test)" % tool
    return None


pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))


def podman(*args, check=True, timeout=600, **kw):
    r = subprocess.run(PODMAN + list(args), capture_output=True, text=True, timeout=timeout,
                       **kw)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def debian_mirror():
    """The Debian archive this machine's apt uses."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            with open(path) as f:
                m = re.search(r"(?:URIs:|^deb)\s+(https?://\S+/debian)\b", f.read(), re.M)
        except OSError:
            continue
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="module")
def image():
    if podman("image", "exists", BASE, check=False).returncode != 0:
        root = tempfile.mkdtemp(prefix="kvpool-base-")
        try:
            r = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", root,
                                debian_mirror()], capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
            podman("import", "-", BASE, stdin=tar.stdout)
            assert tar.wait() == 0
        finally:
            shutil.rmtree(root, ignore_errors=True)
    r = subprocess.run(["make", "-C", BUILD, "image", "PODMAN=" + " ".join(PODMAN),
                        "IMAGE=" + IMAGE, "IMAGE_ARGS=--network host --build-arg BASE=%s %s"
                        % (BASE, " ".join(LIMITS))],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, "make image failed:\n" + r.stdout[-6000:] + r.stderr[-3000:]
    return IMAGE


def daemonset():
    """contrib/kubernetes/kvpoold.yaml's pod: (its init container, its
    kvpoold container)."""
    with open(os.path.join(TOP, "contrib", "kubernetes", "kvpoold.yaml")) as f:
        ds = next(d for d in yaml.safe_load_all(f) if d and d["kind"] == "DaemonSet")
    (init,) = ds["spec"]["template"]["spec"]["initContainers"]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return init, c


def caps(container):
    """podman's flags for a manifest container's capabilities."""
    sc = container.get("securityContext", {}).get("capabilities", {})
    out = ["--cap-drop", "ALL"] if sc.get("drop") == ["ALL"] else []
    for cap in sc.get("add", []):
        out += ["--cap-add", cap]
    return out


def client(image, name, *args, user, groups=(KVPOOL_ID,), sockdir):
    """One of the image's example clients in a container of its own: no
    network, read-only, no capabilities, only the socket directory."""
    opts = ["run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL",
            *LIMITS, "--user", "%d:%d" % (user, user), "-v", "%s:/run/kvpool" % sockdir,
            "--entrypoint", name]
    for g in groups:
        opts += ["--group-add", str(g)]
    return podman(*opts, image, *args, check=False, timeout=120)


def status(sock):
    r = subprocess.run([os.environ.get("KVPOOL_CLI") or os.path.join(BUILD, "client", "kvpool"),
                        "--socket", sock, "--json", "status"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr  # 3: the page counts do not add up
    return json.loads(r.stdout)


@pytest.fixture
def node_spill(tmp_path):
    """The node's /var/lib/kvpool as the kubelet makes a hostPath (root's,
    0755), on a drive with room for the DaemonSet's --spill-size (one tier
    file), as the node's is."""
    _, c = daemonset()
    with spill_drive(tmp_path / "var-lib-kvpool", size(flags(c["args"])["spill-size"])
                     + (1 << 30), mode=0o755) as d:
        yield d


def test_the_image_serves_clients_in_other_containers_as_the_daemonset_runs_it(image, tmp_path,
                                                                              node_spill):
    info = json.loads(podman("image", "inspect", image).stdout)[0]
    cfg = info["Config"]
    assert cfg["User"] == "kvpool"
    assert set(cfg["Volumes"]) == {"/run/kvpool", "/var/lib/kvpool"}
    assert "9464/tcp" in cfg["ExposedPorts"]
    assert info["Healthcheck"]["Test"] == ["CMD", "kvpool", "status"]  # docker format

    # the node's directories as the kubelet makes hostPaths (root's, 0755),
    # then the DaemonSet's init container's command on them, with its
    # capabilities only
    init, kvpoold = daemonset()
    sockdir, spill = tmp_path / "run-kvpool", node_spill
    sockdir.mkdir(mode=0o755)
    podman("run", "--rm", "--network", "none", "--user", "0:0", *caps(init), *LIMITS,
           "-v", "%s:/run/kvpool" % sockdir, "-v", "%s:/var/lib/kvpool" % spill,
           "--entrypoint", init["command"][0], image, *init["command"][1:])
    for d, mode in ((sockdir, 0o750), (spill, 0o700)):
        st = os.stat(str(d))
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (KVPOOL_ID, KVPOOL_ID, mode), d
    sock = str(sockdir / "kvpool.sock")
    port = free_port()
    args = [a if not a.startswith("--metrics-listen=") else "--metrics-listen=127.0.0.1:%d" % port
            for a in kvpoold["args"]]
    # the DaemonSet's rules name its engines' users; this test's clients
    # (the examples' namespace) are given theirs the same way
    args.append("--access=llama-3.1-8b read,write 20000,20001,20003")
    name = "kvpool-test-%d" % os.getpid()
    podman("run", "-d", "--name", name, "--network", "host", "--user", "%d:%d"
           % (KVPOOL_ID, KVPOOL_ID), "--read-only", *caps(kvpoold), "--security-opt",
           "no-new-privileges", *LIMITS, "-v", "%s:/run/kvpool" % sockdir,
           "-v", "%s:/var/lib/kvpool" % spill, image, *args)
    holder = None
    try:
        end = time.monotonic() + 60
        while podman("healthcheck", "run", name, check=False).returncode != 0:
            assert time.monotonic() < end, podman("logs", name, check=False).stderr
            time.sleep(0.5)
        # the DaemonSet's probes, run in the container as the kubelet runs them
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            podman("exec", name, *kvpoold[probe]["exec"]["command"])
        st = os.stat(sock)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (KVPOOL_ID, KVPOOL_ID, 0o660)
        log = podman("logs", name).stderr
        assert "spill directory /var/lib/kvpool" in log, log

        # one container publishes a prompt's pages, another finds them
        # holding what the first wrote
        r = client(image, "kvpool-example-share", SYSTEM, "first question", user=20000,
                   sockdir=sockdir)
        assert r.returncode == 0 and " 0 from the cache" in r.stdout, r.stdout + r.stderr
        m = re.search(r"(\d+) full blocks: 0 from the cache .*?, (\d+) computed", r.stdout)
        assert m and m.group(1) == m.group(2) and int(m.group(1)) > 1, r.stdout
        blocks = int(m.group(1))
        r = client(image, "kvpool-example-share", SYSTEM, "another question", user=20001,
                   sockdir=sockdir)
        assert r.returncode == 0, r.stdout + r.stderr
        m = re.search(r"(\d+) from the cache \(\d+ tokens, their bytes as published\)", r.stdout)
        assert m and int(m.group(1)) >= len(SYSTEM) // 16, r.stdout
        assert int(m.group(1)) <= blocks

        # a user without the socket's group is refused, and told why
        r = client(image, "kvpool-example-share", SYSTEM, "x", user=20002, groups=(),
                   sockdir=sockdir)
        assert r.returncode == 1 and "permission denied" in r.stderr, r.stdout + r.stderr
        assert "not in group kvpool" in r.stderr, r.stderr

        # a client container killed with SIGKILL loses its leases at once
        hname = name + "-holder"
        holder = subprocess.Popen(PODMAN + [
            "run", "-i", "--name", hname, "--network", "none", "--read-only", "--cap-drop",
            "ALL", *LIMITS, "--user", "20003:20003", "--group-add", str(KVPOOL_ID),
            "-v", "%s:/run/kvpool" % sockdir, "--entrypoint", "kvpool-example-pages", image,
            "--pages", "4", "--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL)
        end, said = time.monotonic() + 60, b""
        while b"holding them" not in said:
            assert time.monotonic() < end and holder.poll() is None, said
            if select.select([holder.stdout], [], [], 1)[0]:
                said += os.read(holder.stdout.fileno(), 4096)
        assert status(sock)["pages"]["private"] >= 4
        podman("kill", "-s", "KILL", hname)
        end = time.monotonic() + 30
        while status(sock)["pages"]["private"]:
            assert time.monotonic() < end, status(sock)
            time.sleep(0.1)
        holder.wait(30)

        st = status(sock)
        assert st["pages"]["cached"] >= blocks and st["pages"]["shared"] == 0, st
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            assert b"kvpool_pages" in r.read()
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        podman("rm", "-f", name + "-holder", check=False)
        stop = podman("stop", "-t", "20", name, check=False)
        code = podman("inspect", name, "--format", "{{.State.ExitCode}}", check=False)
        logs = podman("logs", name, check=False).stderr
        podman("rm", "-f", name, check=False)
    assert stop.returncode == 0 and code.stdout.strip() == "0", (code.stdout, logs[-3000:])
    assert logs.rstrip().endswith("kvpoold: info: stopped"), logs[-3000:]
