# SPDX-License-Identifier: MIT
"""contrib/kubernetes/'s manifests, as an operator applies them
(docs/deploy.md): every object valid for Kubernetes 1.37 with no field it
does not know (kubernetes-validate, strict), and the pieces agreeing where
a mismatch would only show on a cluster: the engines' pods mount the
DaemonSet's socket directory and carry its group (the image's kvpool
group), the connector's settings pass its own check with PYTHONHASHSEED
equal to kvpoold's --key-seed, the DaemonSet's memory limit holds its
pool, its spill tiers' buffers, the unread replies and kvpoold itself,
the engines run as a user kvpoold counts and may use their namespace
alone, kvpoold tolerates GPU nodes' taint and outranks the engines, only
Prometheus reaches the metrics port, the PodMonitor scrapes it, the P/D
router finds its engines by labels its own parser reads, the image is
this release's, and kvpoold accepts the DaemonSet's arguments. The image
itself runs in test_image.py."""
import json
import os
import re
import subprocess
import urllib.request

import kubernetes_validate
import yaml

from conftest import TOP, Daemon, free_port, spill_drive, tool
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


def every(kind):
    return [d for f in sorted(os.listdir(KDIR)) if f.endswith(".yaml") for d in objects(f)
            if d["kind"] == kind]


def engines():
    """The Deployments of vLLM engines (not the router's)."""
    found = [d for d in every("Deployment")
             if d["spec"]["template"]["spec"]["containers"][0]["name"] == "vllm"]
    assert len(found) == 3, [d["metadata"]["name"] for d in found]
    return found


def kvpoold_container():
    (c,) = one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    return c


def flags(args):
    """The last value of each flag (--access, repeated: access_rules())."""
    out = {}
    for a in args:
        assert a.startswith("--") and "=" in a, a  # one form, so this test reads them all
        k, v = a[2:].split("=", 1)
        out[k] = v
    return out


def access_rules():
    """(namespace, rights, who) of each of the DaemonSet's --access."""
    return [tuple(a.split("=", 1)[1].split()) for a in kvpoold_container()["args"]
            if a.startswith("--access=")]


def connector_config(engine):
    args = engine["args"]
    return json.loads(args[args.index("--kv-transfer-config") + 1])


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
    assert sorted(seen) == ["DaemonSet", "Deployment", "Deployment", "Deployment",
                            "Deployment", "Namespace", "NetworkPolicy", "PodMonitor",
                            "PriorityClass", "PrometheusRule", "Role", "RoleBinding",
                            "Service", "ServiceAccount"], seen


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
    for dep in engines():
        engine_reaches_the_socket(one("DaemonSet"), dep)


def engine_reaches_the_socket(ds, dep):
    pod = ds["spec"]["template"]["spec"]
    uid, gid = pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
    # the image's kvpool user and group
    assert (str(uid), str(gid)) == (dockerfile_arg("KVPOOL_UID"), dockerfile_arg("KVPOOL_GID"))
    (init,) = pod["initContainers"]
    assert "chown %d:%d /run/kvpool" % (uid, gid) in init["command"][-1], init
    vols = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: vols.get(m["name"]) for m in kvpoold_container()["volumeMounts"]}
    assert mounts["/run/kvpool"] == "/run/kvpool"

    epod = dep["spec"]["template"]["spec"]
    assert gid in epod["securityContext"]["supplementalGroups"]
    (engine,) = epod["containers"]
    evols = {v["name"]: v["hostPath"]["path"] for v in epod["volumes"] if "hostPath" in v}
    emounts = {m["mountPath"]: evols.get(m["name"]) for m in engine["volumeMounts"]}
    cfg = connector_config(engine)
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
    for dep in engines():
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        kvpool_uid = int(dockerfile_arg("KVPOOL_UID"))
        assert pod["securityContext"]["runAsUser"] not in (0, kvpool_uid), \
            pod["securityContext"]


def test_each_engine_may_use_its_namespace_and_no_other():
    """Without --access rules every pod that reaches the socket reads and
    writes every namespace. Each engine Deployment's user is given read
    and write in its connector's namespace, and no rule names every
    namespace or every user."""
    rules = access_rules()
    assert rules and all(ns != "*" and who != "*" for ns, _, who in rules), rules
    for dep in engines():
        uid = str(dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"])
        (engine,) = dep["spec"]["template"]["spec"]["containers"]
        ns = connector_config(engine)["kv_connector_extra_config"]["namespace"]
        granted = [set(r.split(",")) for n, r, who in rules if n == ns and uid in who.split(",")]
        assert granted and {"read", "write"} <= set().union(*granted), (ns, uid, rules)
        assert all(uid not in who.split(",") for n, _, who in rules if n != ns), (uid, rules)


def test_kvpoold_goes_on_gpu_nodes_before_the_engines_and_leaves_after_them():
    """GPU nodes are tainted: without a toleration kvpoold stays off them
    and the engine pods there wait for the socket directory for ever. Its
    priority class puts it before the engines (which have none: 0)."""
    pod = one("DaemonSet")["spec"]["template"]["spec"]
    assert any(t.get("key") == "nvidia.com/gpu" and t["operator"] == "Exists" and
               t["effect"] == "NoSchedule" for t in pod["tolerations"]), pod["tolerations"]
    pc = one("PriorityClass")
    assert pod["priorityClassName"] == pc["metadata"]["name"] and pc["value"] > 0
    assert not pc.get("globalDefault")
    for dep in engines():
        epod = dep["spec"]["template"]["spec"]
        assert "nvidia.com/gpu" in epod["containers"][0]["resources"]["limits"]
        assert "priorityClassName" not in epod
        # the engines go on those nodes too (no admission plugin adds it)
        assert [t for t in pod["tolerations"] if t.get("key") == "nvidia.com/gpu"] == \
            [t for t in epod.get("tolerations", []) if t.get("key") == "nvidia.com/gpu"], \
            dep["metadata"]["name"]


def test_only_prometheus_reaches_the_metrics_port():
    """kvpoold's /metrics is unauthenticated on every address: a
    NetworkPolicy over its pods lets in the metrics port alone, from one
    namespace (Prometheus's)."""
    np, ds = one("NetworkPolicy"), one("DaemonSet")
    assert np["metadata"]["namespace"] == ds["metadata"]["namespace"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert np["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = np["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == ["metrics"]
    assert [set(f) for f in rule["from"]] == [{"namespaceSelector"}]


def router_args(args):
    """vllm-router's own parser (.venv-router) on args: its settings."""
    py = os.path.join(TOP, ".venv-router", "bin", "python")
    if not os.path.exists(py):
        import pytest
        pytest.skip("no .venv-router (contrib/quickstart test makes it)")
    code = ("import json, sys\n"
            "from vllm_router.launch_router import parse_router_args\n"
            "a = parse_router_args(json.loads(sys.argv[1]))\n"
            "print(json.dumps({k: v for k, v in vars(a).items()"
            " if isinstance(v, (str, int, bool, dict, list, type(None)))}))")
    r = subprocess.run([py, "-c", code, json.dumps(args)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_router_finds_the_prefill_and_decode_engines_by_their_labels():
    """vllm-router's arguments, read by its own parser: P/D with
    Kubernetes service discovery in its pod's namespace, selectors that
    match the prefill and the decode engines' pods (kv_producer,
    kv_consumer) at their port; it may watch pods there; decode engines go
    where prefill engines are (the pool is the node's); clients reach the
    router through the Service."""
    router = [d for d in every("Deployment") if d["metadata"]["name"] == "vllm-router"][0]
    rpod = router["spec"]["template"]["spec"]
    (c,) = rpod["containers"]
    env = {e["name"]: e for e in c["env"]}
    args = [a.replace("$(POD_NAMESPACE)", "llm") for a in c["args"]]
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    a = router_args(args)
    assert a["vllm_pd_disaggregation"] and a["service_discovery"]
    assert a["service_discovery_namespace"] == "llm"
    pods = {}
    for dep in engines():
        (engine,) = dep["spec"]["template"]["spec"]["containers"]
        role = connector_config(engine)["kv_role"]
        pods[role] = (dep["spec"]["template"]["metadata"]["labels"],
                      engine["ports"][0]["containerPort"])
    for role, sel in (("kv_producer", a["prefill_selector"]),
                      ("kv_consumer", a["decode_selector"])):
        labels, port = pods[role]
        assert sel and sel.items() <= labels.items(), (role, sel, labels)
        assert a["service_discovery_port"] == port
        assert not any(sel.items() <= l.items() for r, (l, _) in pods.items() if r != role)
    (rule,) = one("Role")["rules"]
    assert rule["resources"] == ["pods"] and {"list", "watch"} <= set(rule["verbs"])
    rb = one("RoleBinding")
    assert rb["roleRef"]["name"] == one("Role")["metadata"]["name"]
    assert rb["subjects"][0]["name"] == rpod["serviceAccountName"] == \
        one("ServiceAccount")["metadata"]["name"]
    decode = [d for d in engines() if d["metadata"]["name"].endswith("-decode")][0]
    (term,) = decode["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"].items() <= pods["kv_producer"][0].items()
    assert term["topologyKey"] == "kubernetes.io/hostname"
    svc = one("Service")
    assert svc["spec"]["selector"].items() <= router["spec"]["template"]["metadata"][
        "labels"].items()


def test_the_manifests_name_this_releases_image():
    pod = one("DaemonSet")["spec"]["template"]["spec"]
    for c in pod["containers"] + pod["initContainers"]:
        assert c["image"] == "kvpool:%s" % version(), c["image"]


def test_kvpoold_takes_the_daemonsets_arguments(tmp_path):
    """This build's kvpoold with the DaemonSet's arguments (its spill and
    metrics on this machine's paths and a free port) starts and serves."""
    args = kvpoold_container()["args"]
    f = flags(args)
    # a drive with room for one tier file, as the node's has
    with spill_drive(tmp_path / "spill", size(f["spill-size"]) + (1 << 30)) as spill:
        port = free_port()
        here = {"spill-dir": spill, "metrics-listen": "127.0.0.1:%d" % port}
        args = [("--%s=%s" % (a[2:].split("=")[0], here[a[2:].split("=")[0]])
                 if a[2:].split("=")[0] in here else a) for a in args]
        if "slab-size" not in f:
            f["slab-size"] = "64M"  # kvpoold's default (the test daemon's is 1M)
            args.append("--slab-size=64M")
        # the image's entrypoint: kvpoold --foreground --backend host
        d = Daemon(args=["--backend=host"] + args)
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


def secret_volume(root, mode, gid):
    """The kubelet's layout of a Secret volume at root, as it makes one
    (its atomic writer on a tmpfs): the volume's root sticky and
    world-writable, owned by root and the pod's fsGroup; the files in a
    timestamped directory, reached through the ..data link and a link per
    key; each file root's, of the volume's defaultMode, group fsGroup.
    The key file's path."""
    os.mkdir(root)
    data = os.path.join(root, "..2026_12_07_20_00_00.000000001")
    os.mkdir(data)
    key = os.path.join(data, "remote.key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    for path, m in ((key, mode), (data, 0o755), (root, 0o1777)):
        os.chown(path, 0, gid)
        os.chmod(path, m | (0o2000 if os.path.isdir(path) and path == root else 0))
    os.symlink(os.path.basename(data), os.path.join(root, "..data"))
    os.symlink("..data/remote.key", os.path.join(root, "remote.key"))
    return os.path.join(root, "remote.key")


def test_kvpoold_takes_the_remote_key_from_the_daemonsets_secret_volume(tmp_path):
    """A Secret volume must pass kvpoold's checks of a secret file (root's
    or its own, no group or other write, in directories others cannot
    change): the DaemonSet mounts the key's Secret with defaultMode 0440
    and fsGroup its group, and kvpoold, given a file laid out as the
    kubelet lays that volume out, opens the remote tier with it; the
    same volume at 0660 is refused, naming the file."""
    import shutil
    ds = one("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (vol,) = [v for v in pod["volumes"] if "secret" in v]
    (mount,) = [m for m in kvpoold_container()["volumeMounts"] if m["name"] == vol["name"]]
    assert mount["readOnly"] and vol["secret"]["optional"] is True
    mode, gid = vol["secret"]["defaultMode"], pod["securityContext"]["fsGroup"]
    assert gid == pod["securityContext"]["runAsGroup"]
    redis = shutil.which("redis-server")
    if redis is None:
        import pytest
        pytest.skip("no redis-server (Debian's redis-server: contrib/quickstart test)")
    port = free_port()
    rs = subprocess.Popen([redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        for m, ok in ((mode, True), (0o660, False)):
            key = secret_volume(str(tmp_path / ("secret-%o" % m)), m, gid)
            args = ["--remote=redis://127.0.0.1:%d" % port, "--remote-key-file=" + key]
            if ok:
                d = Daemon(args=args)
                try:
                    st = d.stats()
                    assert st["remote"]["enabled"], st["remote"]
                finally:
                    d.stop()
                    d.discard()
            else:
                r = subprocess.run([os.environ.get("KVPOOLD") or tool("daemon/kvpoold"),
                                    "--foreground", "--socket", str(tmp_path / "s.sock"),
                                    "--pool-size", "8M", "--slab-size", "1M"] + args,
                                   capture_output=True, text=True, timeout=60)
                assert r.returncode != 0 and "may be written by its group" in r.stderr, \
                    r.stderr
    finally:
        rs.kill()
        rs.wait()
