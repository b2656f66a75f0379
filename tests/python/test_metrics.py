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
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import kvpool
from conftest import GEO, Daemon, bind_free, free_port, running, tool


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

    def steady(text):  # the latency histograms, waits, handoffs and the clients'
        # protocol versions are the endpoint's alone
        return [line for line in text.splitlines() if not line.startswith(moving)
                and "_seconds" not in line.split(" ")[0 if line[0] != "#" else 2]
                and "kvpool_acquire_waits" not in line and "kvpool_handoff_" not in line
                and "kvpool_clients_by_protocol" not in line]
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


def test_latency_histograms_count_each_request_and_each_restore_once():
    port = free_port()
    url = "http://127.0.0.1:%d/metrics" % port
    with running(["--metrics-listen", "127.0.0.1:%d" % port, "--host-tier-size", "4M"]) as d:
        with kvpool.Client(d.sock, "hist", GEO) as c:
            keys = c.block_keys(list(range(2 * GEO.block_tokens)))
            pages = c.alloc(2)
            c.publish(pages, keys)
            c.release(pages)
            assert c.evict(namespace="hist") == 2  # to the host tier
            got, _ = c.acquire(keys)  # read back: two restores
            assert len(got) == 2
            c.release(got)
            for _ in range(5):
                c.stats()
        _, _, body = get(url)
    rows = {}
    for line in body.splitlines():
        if not line.startswith("#") and "_seconds" in line:
            name, v = line.rsplit(" ", 1)
            rows[name] = float(v)
    assert "# TYPE kvpool_request_seconds histogram" in body
    assert rows['kvpool_request_seconds_count{op="STATS"}'] >= 5
    assert rows['kvpool_request_seconds_count{op="ACQUIRE"}'] == 1
    assert rows['kvpool_request_seconds_count{op="ALLOC"}'] == 1
    assert rows['kvpool_request_seconds_bucket{op="ACQUIRE",le="+Inf"}'] == 1
    assert rows["kvpool_tier_restore_seconds_count"] == 2
    assert 0 < rows["kvpool_tier_restore_seconds_sum"] < 10
    # cumulative buckets, ending at the count
    acq = [v for k, v in rows.items() if k.startswith('kvpool_request_seconds_bucket{op="STATS"')]
    assert acq == sorted(acq) and acq[-1] == rows['kvpool_request_seconds_count{op="STATS"}']


def test_a_port_in_use_or_a_bad_address_stops_start_up_with_the_reason():
    with socket.socket() as s:
        port = bind_free(s)
        s.listen()
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


@pytest.fixture
def scraper_host():
    """Another host for a scraper: a network namespace joined to this one
    by a veth pair, 10.213.N.2 there and 10.213.N.1 here (root and
    iproute2 needed). Yields (its address, our address, a function that
    runs argv in it)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 (ip) for a network namespace")
    n = os.getpid() % 250
    ns, here, there = "kvpm%d" % os.getpid(), "kvpm%da" % n, "kvpm%db" % n
    ip = lambda *a: subprocess.run(["ip"] + list(a), check=True, capture_output=True)
    try:
        ip("netns", "add", ns)
        ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
        ip("addr", "add", "10.213.%d.1/30" % n, "dev", here)
        ip("link", "set", here, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", "10.213.%d.2/30" % n, "dev", there)
        ip("netns", "exec", ns, "ip", "link", "set", there, "up")
        ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip("cannot make a network namespace: %s" % e.stderr.decode().strip())
    try:
        yield ("10.213.%d.2" % n, "10.213.%d.1" % n,
               lambda argv, **kw: subprocess.run(["ip", "netns", "exec", ns] + argv, **kw))
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


SCRAPES = """
import sys, time, urllib.request
ok = 0
for _ in range(15):
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
            ok += r.status == 200 and b"kvpool_up" in r.read()
    except Exception as e:
        print("scrape failed:", e, file=sys.stderr)
    time.sleep(0.2)
print(ok)
"""


def test_local_users_cannot_blind_a_scraper_elsewhere(scraper_host):
    """One local user held every slot from many loopback addresses (4 from
    each of 16 in 127.0.0.0/8 fill the 64), and a byte a second beat the
    3 s idle timeout: a Prometheus on another host failed every scrape (0
    of 15). Now this machine, loopback and its own addresses, is one source
    (4 slots), a request and its reply must be whole within 5 s, and a
    scraper elsewhere gets every scrape while 80 such connections from 20
    loopback addresses and 8 from the machine's own address try."""
    import threading
    there, here, in_ns = scraper_host
    port = free_port()
    with running(["--metrics-listen", "0.0.0.0:%d" % port]) as d:
        slow = []
        for a in range(2, 22):
            for _ in range(4):
                s = socket.socket()
                s.bind(("127.0.0.%d" % a, 0))
                s.connect(("127.0.0.1", port))
                slow.append(s)
        for _ in range(8):   # and from an address of the machine's own
            s = socket.socket()
            s.bind((here, 0))
            s.connect((here, port))
            slow.append(s)
        stop = threading.Event()

        def crawl():   # a byte a second on each, as slowloris sends
            req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" * 4
            k = 0
            while not stop.wait(1.0):
                for s in slow:
                    try:
                        s.send(req[k:k + 1])
                    except OSError:
                        pass
                k += 1
        t = threading.Thread(target=crawl)
        t.start()
        try:
            time.sleep(1.5)
            r = in_ns([sys.executable, "-c", SCRAPES, "http://%s:%d/metrics" % (here, port)],
                      capture_output=True, text=True, timeout=120)
            assert r.stdout.strip() == "15", (r.stdout, r.stderr)
            # the loopback's four got a deadline, not an idle timeout: by
            # now (4 s and more, a byte a second) every one is closed
            time.sleep(5)
            open_ = 0
            for s in slow:
                s.settimeout(0.05)
                try:
                    open_ += s.recv(1) != b""
                except (ConnectionResetError, BrokenPipeError):
                    pass
                except socket.timeout:
                    open_ += 1
            assert open_ == 0, "%d slow connections still open" % open_
            # and loopback itself still scrapes, from any of its addresses
            status, _, body = get("http://127.0.0.1:%d/metrics" % port)
            assert status == 200 and "kvpool_up" in body
        finally:
            stop.set()
            t.join()
            for s in slow:
                s.close()
        log = d.read_log()
        assert "refused a connection from this machine: 4 of 4 from there" in log
        assert "that sent no whole request and read no whole reply within 5 s" in log
        lines = [ln for ln in log.splitlines() if "metrics:" in ln and "warn" in ln]
        assert 1 <= len(lines) <= 3, lines    # a line a minute, not one a refusal
