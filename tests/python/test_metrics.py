# SPDX-License-Identifier: MIT
"""kvpoold --metrics-listen scraped by a real Prometheus server (Debian's
prometheus) on loopback: what Prometheus stored, asked through its HTTP
API, is what `kvpool --json status` says; the endpoint's text is the
CLI's; wrong paths, methods and addresses are refused with a reason."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import kvpool
from conftest import GEO, Daemon, running, tool


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def cli_json(sock):
    out = subprocess.run([tool("client/kvpool"), "--socket", sock, "--json", "status"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def built_with_microhttpd():
    exe = os.environ.get("KVPOOLD") or tool("daemon/kvpoold")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return "built with libmicrohttpd" in out


pytestmark = pytest.mark.skipif(not built_with_microhttpd(),
                                reason="kvpoold was built without libmicrohttpd "
                                "(apt-get install libmicrohttpd-dev, configure again)")


@pytest.fixture
def metrics_daemon():
    port = free_port()
    with running(["--metrics-listen", "127.0.0.1:%d" % port]) as d:
        d.metrics = "http://127.0.0.1:%d/metrics" % port
        yield d


def test_prometheus_scrapes_the_page_counts_kvpool_status_shows(metrics_daemon):
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("no prometheus binary (apt-get install prometheus; contrib/quickstart "
                    "test does)")
    d = metrics_daemon
    work = tempfile.mkdtemp(prefix="kvpool-prom-")
    web = free_port()
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 200ms\n  scrape_timeout: 150ms\n"
                "scrape_configs:\n  - job_name: kvpool\n    static_configs:\n"
                "      - targets: ['%s']\n" % d.metrics.split("/")[2])
    p = subprocess.Popen([prom, "--config.file", os.path.join(work, "prometheus.yml"),
                          "--storage.tsdb.path", os.path.join(work, "data"),
                          "--web.listen-address", "127.0.0.1:%d" % web],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "log"), "w"))
    api = "http://127.0.0.1:%d/api/v1/query?query=" % web
    try:
        with kvpool.Client(d.sock, "prom", GEO) as c:
            held = c.alloc(7)  # private, leased
            shared = c.alloc(3)
            keys = c.block_keys(list(range(3 * GEO.block_tokens)))
            c.publish(shared, keys)
            c.release(shared)  # cached
            want = cli_json(d.sock)["pages"]
            assert want["private"] == 7 and want["cached"] == 3

            def series(q):
                try:
                    _, _, body = get(api + urllib.parse.quote(q))
                except (urllib.error.URLError, ConnectionError):
                    return None
                r = json.loads(body)["data"]["result"]
                return {tuple(sorted(x["metric"].items())): float(x["value"][1]) for x in r}

            end = time.monotonic() + 60
            got = None
            while time.monotonic() < end:
                got = series('kvpool_pages{tier="pool"}')
                if got and {dict(k)["state"]: v for k, v in got.items()}.get("private") == 7:
                    break
                time.sleep(0.2)
            else:
                with open(os.path.join(work, "log")) as f:
                    pytest.fail("Prometheus never stored kvpool_pages: %s\n%s" % (got, f.read()))
            states = {dict(k)["state"]: v for k, v in got.items()}
            for state in ("free", "private", "shared", "cached", "inflight"):
                assert states[state] == want[state], (state, states, want)
            ns = series('kvpool_namespace_pages{namespace="prom",state="cached"}')
            assert list(ns.values()) == [3.0]
            up = series('up{job="kvpool"}')
            assert list(up.values()) == [1.0]
            c.release(held)
    finally:
        p.terminate()
        p.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def test_the_endpoint_serves_the_text_kvpool_metrics_prints(metrics_daemon):
    d = metrics_daemon
    with kvpool.Client(d.sock, "text", GEO) as c:
        c.release(c.alloc(2))
        status, ctype, body = get(d.metrics)
        cli = subprocess.run([tool("client/kvpool"), "--socket", d.sock, "metrics"],
                             capture_output=True, text=True, check=True).stdout
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    moving = ("kvpool_uptime_seconds", "kvpool_requests_total", "kvpool_connections_total",
              "kvpool_clients ", "kvpool_namespace_clients", "kvpool_lease_releases_total",
              "kvpool_page_allocations_total")

    def steady(text):
        return [line for line in text.splitlines() if not line.startswith(moving)]
    assert steady(body) == steady(cli)
    promtool = shutil.which("promtool")
    if promtool:
        r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    for path, code in (("/", 404), ("/metrics/x", 404)):
        with pytest.raises(urllib.error.HTTPError) as e:
            get(d.metrics.replace("/metrics", path))
        assert e.value.code == code
    req = urllib.request.Request(d.metrics, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 405


def test_a_port_in_use_or_a_bad_address_stops_start_up_with_the_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RuntimeError) as e:
            Daemon(["--metrics-listen", "127.0.0.1:%d" % port])
        assert "cannot listen on 127.0.0.1 port %d: Address already in use" % port in \
            str(e.value)
    with pytest.raises(RuntimeError) as e:
        Daemon(["--metrics-listen", "no.such.host.invalid:9"])
    assert "--metrics-listen: no.such.host.invalid port 9" in str(e.value)


@pytest.mark.parametrize("spec", ["99999", "127.0.0.1:65536", "[::1]:0", "127.0.0.1:-1",
                                  "127.0.0.1:80x"])
def test_a_port_outside_1_to_65535_stops_start_up(spec):
    """Once, 99999 was taken mod 65536 and kvpoold listened on 34463."""
    with pytest.raises(RuntimeError) as e:
        Daemon(["--metrics-listen", spec])
    assert "--metrics-listen %s: port '%s' is not 1..65535" % (spec, spec.rsplit(":", 1)[-1]) \
        in str(e.value)


def test_idle_connections_from_one_host_do_not_blind_the_scrapes(metrics_daemon):
    """40 idle connections (32 took every slot once, and every refusal was
    a line on stderr): one address holds a few slots at most, a scrape
    from another still gets its page, idle ones are closed within
    seconds, and the log says so once, not 40 times."""
    import http.client
    d = metrics_daemon
    port = int(d.metrics.split(":")[2].split("/")[0])
    idle = []
    for _ in range(40):
        s = socket.socket()
        s.connect(("127.0.0.1", port))   # from 127.0.0.1, and silent
        idle.append(s)
    try:
        time.sleep(0.3)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5,
                                       source_address=("127.0.0.2", 0))
        c.request("GET", "/metrics")
        r = c.getresponse()
        assert r.status == 200 and b"kvpool_up" in r.read()
        c.close()
        # the idle ones are closed after 3 s: the same address scrapes again
        time.sleep(4)
        status, _, body = get(d.metrics)
        assert status == 200
        closed = 0
        for s in idle:
            s.settimeout(0.1)
            try:
                closed += s.recv(1) == b""
            except ConnectionResetError:
                closed += 1
            except socket.timeout:
                pass
        assert closed == 40
    finally:
        for s in idle:
            s.close()
    lines = [ln for ln in d.read_log().splitlines() if "metrics:" in ln and "warn" in ln]
    assert 1 <= len(lines) <= 2, lines
