# SPDX-License-Identifier: MIT
"""kvpool's Prometheus alerting rules (contrib/prometheus/kvpool.rules.yml,
and the same groups as contrib/kubernetes/kvpool-alerts.yaml's
PrometheusRule), as an operator loads them: promtool (Debian's prometheus
package) checks them and runs their unit tests (tests/alerts.test.yml:
each alert fires on the series it is for, and not on the others), every
metric they name is one kvpoold or the vLLM connector exposes under that
name (docs/metrics.md, kvpool.vllm.stats), and the two files hold the same
rules."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import TOP

RULES = os.path.join(TOP, "contrib", "prometheus", "kvpool.rules.yml")
MANIFEST = os.path.join(TOP, "contrib", "kubernetes", "kvpool-alerts.yaml")

promtool = shutil.which("promtool")
if promtool is None:
    pytest.skip("no promtool here (Debian's prometheus package; contrib/quickstart test "
                "installs it)", allow_module_level=True)


def rules():
    with open(RULES) as f:
        return yaml.safe_load(f)


def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    subprocess.run([promtool, "check", "rules", RULES], check=True, capture_output=True)
    r = subprocess.run([promtool, "test", "rules", "alerts.test.yml"], capture_output=True,
                       text=True, cwd=os.path.join(TOP, "tests"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_unit_test():
    with open(os.path.join(TOP, "tests", "alerts.test.yml")) as f:
        tested = {t["alertname"] for case in yaml.safe_load(f)["tests"]
                  for t in case["alert_rule_test"]}
    names = {r["alert"] for g in rules()["groups"] for r in g["rules"]}
    assert names == tested, names ^ tested


def test_the_rules_name_only_metrics_that_exist():
    with open(os.path.join(TOP, "docs", "metrics.md")) as f:
        documented = set(re.findall(r"`(kvpool_[a-z_]+)`", f.read()))
    try:
        from kvpool.vllm.stats import COUNTERS
    except Exception as e:  # noqa: BLE001 - the connector needs vLLM
        pytest.skip("kvpool.vllm cannot be imported here: %s" % e)
    connector = {"vllm:kvpool_%s_total" % c for c in COUNTERS} | {"vllm:kvpool_connected",
                                                                   "vllm:kvpool_sides"}
    for g in rules()["groups"]:
        for r in g["rules"]:
            for name in re.findall(r"(?:vllm:)?kvpool_[a-z_]+", r["expr"]):
                assert name in (connector if name.startswith("vllm:") else documented), \
                    (r["alert"], name)


def test_the_prometheusrule_holds_the_same_groups():
    with open(MANIFEST) as f:
        (pr,) = [d for d in yaml.safe_load_all(f) if d]
    assert pr["kind"] == "PrometheusRule" and pr["apiVersion"] == "monitoring.coreos.com/v1"
    assert pr["spec"]["groups"] == rules()["groups"]
