"""The shipped alert rules and Grafana dashboard (docs/ops/, docs/health.md): valid for promtool, firing when
they should, and naming only metrics a coordinator's /metrics exposes, every health reason with an alert."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from server.core.health import CODES

OPS = Path(__file__).resolve().parent.parent / "docs" / "ops"
RULES, RULE_TESTS, DASHBOARD = OPS / "alerts.yml", OPS / "alerts.test.yml", OPS / "grafana-dashboard.json"
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); the rules are unchecked")
    return subprocess.run([tool, *args], capture_output=True, text=True, cwd=OPS, timeout=120)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: what is left once strings, label matchers, ranges,
    grouping clauses, function names, keywords and numbers are taken out."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\b[a-zA-Z_]\w*\s*\(", "(", expr)
    return set(re.findall(r"(?<![\w.])[a-zA-Z_:][\w:]*", expr)) - KEYWORDS


def rule_exprs() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for t in panel["targets"]]


def exposed(make_api) -> set[str]:
    """Every series name a coordinator's /metrics can answer with (a labelled counter that has not been
    counted yet shows only its HELP and TYPE: its names follow from its type)."""
    api = make_api(initial_model="logreg")
    text = api.http.get("/metrics").text
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def test_promtool_accepts_the_rules():
    answer = promtool("check", "rules", RULES.name)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "SUCCESS" in answer.stdout


def test_the_alerts_fire_when_they_should_and_only_then():
    answer = promtool("test", "rules", RULE_TESTS.name)
    assert answer.returncode == 0, answer.stdout + answer.stderr


def test_the_metric_name_reader_finds_names_and_only_names():
    expr = 'histogram_quantile(0.99, sum by (le) (rate(fleet_push_seconds_bucket{job="x"}[5m]))) > bool up'
    assert metric_names(expr) == {"fleet_push_seconds_bucket", "up"}
    assert metric_names("absent(fleet_health_state) or max by (code) (fleet_health_reason) == 1") == {
        "fleet_health_state",
        "fleet_health_reason",
    }


def test_every_metric_the_rules_and_the_dashboard_read_is_exposed(make_api):
    names = exposed(make_api)
    assert {"fleet_health_state", "fleet_health_reason", "fleet_gradients_received_total"} <= names
    read = set().union(*map(metric_names, rule_exprs() + dashboard_exprs()))
    assert read and not read - names, sorted(read - names)
    # and any fleet_ name anywhere in the files (annotation queries, descriptions)
    mentioned = set(re.findall(r"\bfleet_[a-z0-9_]+", RULES.read_text() + DASHBOARD.read_text()))
    assert not mentioned - names, sorted(mentioned - names)
    assert len(dashboard_exprs()) >= 10


def test_every_health_reason_has_an_alert():
    exprs = " ".join(rule_exprs())
    assert not [code for code in CODES if f'code="{code}"' not in exprs]
    assert "fleet_health_state" in exprs
