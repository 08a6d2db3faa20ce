"""The generated recording rules and alerts: promtool lint and unit tests, names, annotations, runbook links."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from metric_contract import SERIES, metric_names
from servers import REPO, need

sys.path.insert(0, str(REPO))

from dashboards import DEFAULT, rules
from dashboards.generate import RULES_FILE

RULES = REPO / RULES_FILE
UNIT_TESTS = REPO / "deploy/prometheus/tests/recompprof-rules-test.yaml"
RUNBOOK = REPO / "docs/alerts.md"


def _rules(path: Path = RULES) -> list[dict]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [need("promtool", "prometheus"), *args], capture_output=True, text=True, timeout=120
    )


def test_rules_file_passes_promtool_check() -> None:
    """`promtool check rules` accepts the shipped rules file."""
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    """Every alert fires and stays silent where the promtool unit tests say, thresholds included."""
    result = _promtool("test", "rules", str(UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_unit_tests_cover_every_alert_firing_and_silent() -> None:
    """The promtool tests check each alert at least once firing and once not firing."""
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert firing == set(rules.ALERTS)
    assert silent == set(rules.ALERTS)


@pytest.mark.parametrize(
    ("change", "alert"),
    [
        ({"recompiles_threshold": DEFAULT.recompiles_threshold - 1}, "TorchCompileRecompilesHigh"),
        ({"long_compile_seconds": DEFAULT.long_compile_seconds - 1}, "TorchCompileLongCompile"),
        ({"long_compile_for": "0s"}, "TorchCompileLongCompile"),
        ({"out_of_step_for": "2m"}, "TorchCompileRanksOutOfStep"),
        ({"out_of_step_for": "4m"}, "TorchCompileRanksOutOfStep"),
    ],
)
def test_unit_tests_catch_a_threshold_off_by_one(
    tmp_path: Path, change: dict[str, object], alert: str
) -> None:
    """Rules generated with a threshold or `for` one step off fail the unit tests (the edges are tested)."""
    (tmp_path / "tests").mkdir()
    unit_tests = tmp_path / "tests" / UNIT_TESTS.name
    unit_tests.write_text(UNIT_TESTS.read_text())
    (tmp_path / RULES.name).write_text(rules.render(DEFAULT.replace(**change)))
    result = _promtool("test", "rules", str(unit_tests))
    assert result.returncode != 0
    assert alert in result.stdout + result.stderr


def test_alerts_are_named_labelled_and_annotated() -> None:
    """Each alert is TorchCompile*, has a severity and summary, description and runbook_url annotations."""
    alerts = [r for r in _rules() if "alert" in r]
    assert [a["alert"] for a in alerts] == list(rules.ALERTS)
    for alert in alerts:
        assert alert["alert"].startswith("TorchCompile")
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}
        assert set(alert["annotations"]) == {"summary", "description", "runbook_url"}
    severities = {a["alert"]: a["labels"]["severity"] for a in alerts}
    assert severities["TorchCompileGraphBreaksIncreasing"] == "info"


def test_runbook_links_point_at_sections_of_docs_alerts() -> None:
    """Every runbook_url ends in an anchor that is a section heading of docs/alerts.md."""
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("## ")
    }
    for alert in (r for r in _rules() if "alert" in r):
        url = alert["annotations"]["runbook_url"]
        assert url.startswith(DEFAULT.runbook_url + "#")
        assert url.split("#", 1)[1] in headings, (
            f"docs/alerts.md has no section for {alert['alert']}"
        )


def test_recording_rules_follow_level_metric_operations() -> None:
    """Recording rules are named level:metric:operations and alerts use only recorded or contract series."""
    recorded = [r["record"] for r in _rules() if "record" in r]
    assert recorded
    for name in recorded:
        assert re.fullmatch(r"[a-z_]+:[a-z_]+:[a-z0-9_]+", name), name
        assert not name.split(":")[1].endswith("_total")
    for rule in _rules():
        unknown = metric_names(rule["expr"]) - SERIES - set(recorded)
        assert not unknown, f"{rule.get('alert') or rule.get('record')} reads {unknown}"


def test_threshold_and_windows_come_from_the_config(tmp_path: Path) -> None:
    """A config with threshold 2 and 1m windows yields rules with exactly those, still valid for promtool."""
    fast = DEFAULT.replace(
        recompiles_threshold=2,
        recompiles_window="1m",
        recompiles_for="0s",
        event_window="1m",
        compile_time_window="1m",
        selector='cluster="a"',
    )
    path = tmp_path / "fast.yaml"
    path.write_text(rules.render(fast))
    by_name = {r.get("alert") or r["record"]: r for r in _rules(path)}
    high = by_name["TorchCompileRecompilesHigh"]
    assert high["expr"] == "namespace_job_rank:torch_compile_recompiles:increase1m > 2"
    assert "for" not in high
    assert "[1m]" in by_name["namespace_job_rank:torch_compile_recompiles:increase1m"]["expr"]
    assert (
        'torch_compile_recompiles_total{cluster="a"}'
        in by_name["namespace_job_rank:torch_compile_recompiles:increase1m"]["expr"]
    )
    assert _promtool("check", "rules", str(path)).returncode == 0


def test_prometheus_rule_object_wraps_the_plain_file() -> None:
    """The generated PrometheusRule's spec is the plain rules file, with the kube-prometheus-stack release label."""
    obj = yaml.safe_load((REPO / "deploy/kubernetes/base/prometheusrule.yaml").read_text())
    assert obj["kind"] == "PrometheusRule"
    assert obj["metadata"]["labels"]["release"] == DEFAULT.release_label
    assert obj["spec"] == yaml.safe_load(RULES.read_text())
