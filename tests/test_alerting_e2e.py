"""End to end: real training runs -> Prometheus evaluating the generated rules -> Alertmanager -> webhook.

The rules are generated with the shipped generator but a fast configuration (threshold 2, 1m windows,
no `for`), the way a team would tune them; nothing is mocked.
"""

from __future__ import annotations

import datetime
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alerting import FAST, Webhook
from servers import REPO, alertmanager, free_port, prometheus, train_process, wait_for_line

sys.path.insert(0, str(REPO))

from needs import starts

from dashboards import DEFAULT, rules

pytestmark = [pytest.mark.servers, pytest.mark.workload]


@pytest.fixture
@starts("servers")
def stack(tmp_path: Path) -> Iterator[tuple[Any, Webhook, int]]:
    """Webhook <- Alertmanager <- Prometheus (fast rules, 1s scrapes of one port, namespace "ml")."""
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(rules.render(FAST))
    port = free_port()
    scrape = {
        "job_name": "train",
        "scrape_interval": "1s",
        "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": "ml"}}],
    }
    hook = Webhook()
    try:
        with (
            alertmanager(tmp_path, hook.url) as am,
            prometheus(
                tmp_path,
                (),
                job="unused",
                extra_scrape_configs=[scrape],
                rule_files=[rules_file],
                alertmanager=am,
            ) as prom,
        ):
            yield prom, hook, port
    finally:
        hook.server.shutdown()


def _train(tmp: Path, port: int, changes: int) -> tuple[Any, int]:
    """Start a real training run and return it (holding its endpoint) with the recompiles it reports."""
    env = {
        "RECOMPPROF_EXPORTERS": "prometheus",
        "RECOMPPROF_PROMETHEUS_PORT": str(port),
        "RECOMPPROF_RUN_DIR": str(tmp / "run"),
        "RECOMPPROF_WARMUP_STEPS": "1000",
    }
    proc = train_process(
        env, "--steps", "12", "--hold", "90", "--backend", "eager", "--changes", str(changes)
    )
    lines = wait_for_line(proc, "TRAINING DONE")
    match = re.search(r"recompiles=(\d+)", lines[-1])
    assert match, lines[-1]
    return proc, int(match.group(1))


def _recorded(prom: Any) -> float:
    result = prom.query(rules.recorded(FAST)["recompiles"])
    return float(result[0]["value"][1]) if result else -1.0


def test_recompiles_over_threshold_reach_the_webhook_with_labels_and_annotations(
    stack: tuple[Any, Webhook, int], tmp_path: Path
) -> None:
    """A run recompiling more than the threshold fires TorchCompileRecompilesHigh through Alertmanager."""
    prom, hook, port = stack
    proc, recompiles = _train(tmp_path, port, changes=4)
    try:
        assert recompiles > FAST.recompiles_threshold
        alert = hook.wait_for("TorchCompileRecompilesHigh", timeout=60)
    finally:
        proc.terminate()
        proc.wait(30)
    assert alert["labels"] == {
        "alertname": "TorchCompileRecompilesHigh",
        "severity": "warning",
        "namespace": "ml",
        "job": "train",
        "rank": "0",
    }
    # The alert fires at the first evaluation over the threshold: a scrape may have caught the job mid-way.
    described = re.fullmatch(
        r"Rank 0 of ml/train recompiled (\d+) times in the last 1m \(threshold 2\)\.",
        alert["annotations"]["description"],
    )
    assert described and FAST.recompiles_threshold < int(described.group(1)) <= recompiles, alert[
        "annotations"
    ]
    assert alert["annotations"] == {
        "summary": "torch.compile keeps recompiling.",
        "description": described.group(0),
        "runbook_url": f"{DEFAULT.runbook_url}#torchcompilerecompileshigh",
    }


def _evaluated_since(prom: Any) -> float:
    """The time (epoch seconds) by which every rule group has been evaluated: the oldest last evaluation."""
    groups = prom.api("rules")["groups"]
    return min(datetime.datetime.fromisoformat(g["lastEvaluation"]).timestamp() for g in groups)


def test_run_at_the_threshold_sends_nothing(
    stack: tuple[Any, Webhook, int], tmp_path: Path
) -> None:
    """A run recompiling exactly the threshold number of times fires no alert and Alertmanager sends nothing."""
    prom, hook, port = stack
    proc, recompiles = _train(tmp_path, port, changes=2)
    try:
        assert recompiles == FAST.recompiles_threshold
        # Prometheus has the run's final count in the recording rule the alert reads ...
        deadline = time.monotonic() + 30
        while _recorded(prom) != recompiles and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _recorded(prom) == recompiles
        # ... and has evaluated every rule group on it three times since (an absence needs a window: these
        # evaluations are it), then Alertmanager's 1 s group_wait has passed twice over.
        recorded_at = time.time()
        deadline = time.monotonic() + 30
        while _evaluated_since(prom) < recorded_at + 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _evaluated_since(prom) >= recorded_at + 3, prom.api("rules")
        time.sleep(2)  # group_wait 1 s: a notification for those evaluations would be out by now
        assert prom.query("ALERTS") == []
        assert hook.payloads == []
    finally:
        proc.terminate()
        proc.wait(30)
