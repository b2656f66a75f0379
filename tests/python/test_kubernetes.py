# SPDX-License-Identifier: MIT
"""contrib/kubernetes/'s manifests, as an operator applies them
(docs/deploy.md): every object valid for Kubernetes 1.37 with no field it
does not know (kubernetes-validate, strict), and the pieces agreeing where
a mismatch would only show on a cluster: the engines' pods mount the
DaemonSet's socket directory and carry its group (the image's kvpool
group), the connector's settings pass its own check with PYTHONHASHSEED
equal to kvpoold's --key-seed, the DaemonSet's memory limit holds its
pool, its spill tiers' buffers, the unread replies and kvpoold itself,
the engines run as a user kvpoold counts, the PodMonitor scrapes the
metrics port, the image is this release's, and kvpoold accepts the
DaemonSet's arguments. The image itself runs in test_image.py."""
import json
import os
import re
import urllib.request

import kubernetes_validate
import yaml

from conftest import TOP, Daemon, free_port, spill_drive
from kvpool.vllm.settings import check_settings

KDIR = os.path.join(TOP, "contrib", "kubernetes")
MI = 1 << 20


def objects(name):
    with open(os.path.join(KDIR, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(kind):
    found = [d for f in sorted(os.listdir(KDIR)) if f.endswith(".yaml") for d in objects(f)
             if d["kind"] == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


def dockerfile_arg(name):
    with open(os.path.join(TOP, "contrib", "container", "Dockerfile")) as f:
        m = re.search(r"^ARG %s=(\S+)$" % name, f.read(), re.M)
    assert m, name
    return m.group(1)


def size(text):
    """kvpoold's SIZE (8G) or a Kubernetes quantity (8448Mi), in bytes."""
    m = re.fullmatch(r"(\d+)([KMGT])(i?)", text)
    assert m, text
    return int(m.group(1)) << (10 * "KMGT".index(m.group(2)) + 10)


def kvpoold_container():
    (c,) = one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    return c


def flags(args):
    out = {}
    for a in args:
        assert a.startswith("--") and "=" in a, a  # one form, so this test reads them all
        k, v = a[2:].split("=", 1)
        out[k] = v
    return out


def version():
    with open(os.path.join(TOP, "VERSION")) as f:
        return f.read().strip()


def test_every_object_is_valid_for_kubernetes_1_37_with_no_unknown_field():
    seen = []
    for f in sorted(os.listdir(KDIR)):
        for d in objects(f):
            seen.append(d["kind"])
            if d["apiVersion"].startswith("monitoring.coreos.com/"):
                continue  # no schema in kubernetes-validate: the next test reads it
            kubernetes_validate.validate(d, "1.37", strict=True)
    assert sorted(seen) == ["DaemonSet", "Deployment", "Namespace", "PodMonitor",
                            "PrometheusRule"], seen


def test_the_podmonitor_scrapes_each_kvpoolds_metrics_port():
    pm, ds = one("PodMonitor"), one("DaemonSet")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in kvpoold_container()["ports"]}
    assert ep["port"] in ports and ep["path"] == "/metrics", (ep, ports)
    listen = flags(kvpoold_container()["args"])["metrics-listen"]
    assert listen == "0.0.0.0:%d" % ports[ep["port"]], listen


def test_engine_pods_reach_the_daemonsets_socket_with_its_group():
    ds, dep = one("DaemonSet"), one("Deployment")
    pod = ds["spec"]["template"]["spec"]
    uid, gid = pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
    # the image's kvpool user and group
    assert (str(uid), str(gid)) == (dockerfile_arg("KVPOOL_UID"), dockerfile_arg("KVPOOL_GID"))
    (init,) = pod["initContainers"]
    assert "chown %d:%d /run/kvpool" % (uid, gid) in init["command"][-1], init
    vols = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    mounts = {m["mountPath"]: vols[m["name"]] for m in kvpoold_container()["volumeMounts"]}
    assert mounts["/run/kvpool"] == "/run/kvpool"

    epod = dep["spec"]["template"]["spec"]
    assert gid in epod["securityContext"]["supplementalGroups"]
    (engine,) = epod["containers"]
    evols = {v["name"]: v["hostPath"]["path"] for v in epod["volumes"] if "hostPath" in v}
    emounts = {m["mountPath"]: evols.get(m["name"]) for m in engine["volumeMounts"]}
    cfg = json.loads(engine["args"][engine["args"].index("--kv-transfer-config") + 1])
    assert cfg["kv_connector"] == "KVPoolConnector"
    assert cfg["kv_connector_module_path"] == "kvpool.vllm"
    extra = check_settings(cfg["kv_connector_extra_config"])  # what the engine checks at start
    sockdir = os.path.dirname(extra["socket"])
    assert emounts.get(sockdir) == mounts["/run/kvpool"], (extra["socket"], emounts, mounts)
    # vLLM's block hashes start from PYTHONHASHSEED; kvpoold's keys from --key-seed
    env = {e["name"]: e["value"] for e in engine["env"]}
    assert env["PYTHONHASHSEED"] == flags(kvpoold_container()["args"])["key-seed"]


def test_the_memory_limit_holds_the_pool_the_spill_buffers_and_the_replies():
    """kvpoold's memory past its pool (which holds the slab made ahead):
    each namespace's spill tier stages I/O in about 64 MiB, the replies
    waiting for clients may take --max-output-total, and kvpoold's own
    (page tables and the rest) stays under 128 MiB."""
    c = kvpoold_container()
    f = flags(c["args"])
    pool = size(f["pool-size"])
    spill = 64 * MI * int(f["max-namespaces-per-uid"]) if "spill-dir" in f else 0
    need = pool + spill + size(f.get("max-output-total", "256M")) + 128 * MI
    limit = size(c["resources"]["limits"]["memory"])
    assert limit >= need, (limit, need)
    assert limit <= need + 512 * MI, "a limit far past the need wastes the node's memory"
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"]


def test_the_engines_run_as_a_user_kvpoold_counts():
    """Not root: kvpoold gives root admin rights and counts none of its
    per-user limits (the DaemonSet's memory limit counts on them)."""
    pod = one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    kvpool_uid = int(dockerfile_arg("KVPOOL_UID"))
    assert pod["securityContext"]["runAsUser"] not in (0, kvpool_uid), pod["securityContext"]


def test_the_manifests_name_this_releases_image():
    pod = one("DaemonSet")["spec"]["template"]["spec"]
    for c in pod["containers"] + pod["initContainers"]:
        assert c["image"] == "kvpool:%s" % version(), c["image"]


def test_kvpoold_takes_the_daemonsets_arguments(tmp_path):
    """This build's kvpoold with the DaemonSet's arguments (its spill and
    metrics on this machine's paths and a free port) starts and serves."""
    f = flags(kvpoold_container()["args"])
    # a drive with room for one tier file, as the node's has
    with spill_drive(tmp_path / "spill", size(f["spill-size"]) + (1 << 30)) as spill:
        port = free_port()
        f.update({"spill-dir": spill, "metrics-listen": "127.0.0.1:%d" % port})
        f.setdefault("slab-size", "64M")  # kvpoold's default (the test daemon's is 1M)
        # the image's entrypoint: kvpoold --foreground --backend host
        d = Daemon(args=["--backend=host"] + ["--%s=%s" % kv for kv in f.items()])
        try:
            st = d.stats()
            assert st["max_slabs"] * size(f["slab-size"]) == size(f["pool-size"]), st
            assert "spill directory %s" % spill in d.read_log()
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                        timeout=10) as r:
                assert b"kvpool_" in r.read()
        finally:
            d.stop()
            d.discard()
