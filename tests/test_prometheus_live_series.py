"""A finished compile's live series are gone in every Prometheus mode, so TorchCompileLongCompile resolves.

A real job (``workloads/slow_compile.py``) recompiles for ``COMPILE_SECONDS`` and then stays attached
between compiles. Its metrics are scraped where each mode publishes them (its own endpoint in pull and
multiprocess modes, node_exporter's textfile collector, the Pushgateway) and by a real Prometheus
evaluating the generated rules with a low long-compile threshold.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from alerting import FAST
from prometheus_client.parser import text_string_to_metric_families
from recorded_runs import clean_env
from servers import (
    REPO,
    WORKLOADS,
    free_port,
    http_get,
    node_exporter,
    prometheus,
    pushgateway,
    wait_for_line,
)

sys.path.insert(0, str(REPO))

from dashboards import rules

pytestmark = [pytest.mark.servers, pytest.mark.workload]

COMPILE_SECONDS = 8
RULES = FAST.replace(long_compile_seconds=2, long_compile_for="1s")
RUNNING = "torch_compile_compile_running_seconds"
# seconds after the compile for the last write, scrape and rule evaluation to catch up
SETTLE = 15.0


@contextlib.contextmanager
def published(mode: str, tmp: Path) -> Iterator[tuple[dict[str, str], str, bool]]:
    """The job's settings for ``mode``, the URL its metrics are scraped from, and whether labels are honoured."""
    env = {
        "RECOMPPROF_EXPORTERS": "prometheus",
        "RECOMPPROF_PROMETHEUS_MODE": mode,
        "RECOMPPROF_PROMETHEUS_PUSH_INTERVAL": "1",
        "RECOMPPROF_RUN_DIR": str(tmp / "run"),
    }
    if mode in ("pull", "multiprocess"):
        port = free_port()
        env |= {
            "RECOMPPROF_PROMETHEUS_PORT": str(port),
            "PROMETHEUS_MULTIPROC_DIR": str(tmp / "multiproc"),
        }
        yield env, f"http://127.0.0.1:{port}/metrics", False
    elif mode == "textfile":
        textdir = tmp / "textfile"
        textdir.mkdir()
        with node_exporter(tmp, textdir) as url:
            yield (
                env | {"RECOMPPROF_PROMETHEUS_TEXTFILE_DIR": str(textdir)},
                f"{url}/metrics",
                False,
            )
    else:
        with pushgateway(tmp) as url:
            yield env | {"RECOMPPROF_PROMETHEUS_PUSHGATEWAY_URL": url}, f"{url}/metrics", True


def gauge(url: str, name: str, label: str = "rank") -> dict[str, float]:
    """The gauge ``name`` as ``url`` serves it now, by the value of ``label``."""
    text = http_get(url).decode()
    return {
        s.labels[label]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == name
        for s in f.samples
    }


def running_series(url: str) -> dict[str, float]:
    """The running-compile age by frame label."""
    return gauge(url, RUNNING, "frame")


def long_compile_alerts(prom: object) -> list[str]:
    """The states of the TorchCompileLongCompile alerts Prometheus holds now (pending or firing)."""
    return [
        a["state"]
        for a in prom.api("alerts")["alerts"]  # type: ignore[attr-defined]
        if a["labels"]["alertname"] == "TorchCompileLongCompile"
    ]


@pytest.mark.parametrize("mode", ["pull", "multiprocess", "textfile", "pushgateway"])
def test_a_finished_compiles_running_series_is_gone_and_its_alert_resolves(
    mode: str, tmp_path: Path
) -> None:
    """During a long compile the running-seconds series is published and TorchCompileLongCompile becomes active;
    once the compile has ended (the job still attached) the series is gone and the alert resolves, in every mode."""
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(rules.render(RULES))
    release = tmp_path / "release"
    with (
        published(mode, tmp_path) as (env, url, honor),
        prometheus(
            tmp_path, [url.split("/")[2]], rule_files=[rules_file], honor_labels=honor
        ) as prom,
    ):
        proc = subprocess.Popen(
            [
                sys.executable,
                str(WORKLOADS / "slow_compile.py"),
                str(COMPILE_SECONDS),
                str(release),
            ],
            env=clean_env(PYTHONUNBUFFERED="1", **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for_line(proc, "FIRST")
            during, active, deadline = 0.0, False, time.monotonic() + COMPILE_SECONDS + 5
            while time.monotonic() < deadline and not (
                during > RULES.long_compile_seconds and active
            ):
                during = max([during, *running_series(url).values()])
                active = active or bool(long_compile_alerts(prom))
                time.sleep(0.25)
            assert during > RULES.long_compile_seconds and active, (mode, during, active)
            wait_for_line(proc, "DONE")
            ended = time.monotonic()
            series, alerts = running_series(url), long_compile_alerts(prom)
            while (series or alerts) and time.monotonic() < ended + SETTLE:
                time.sleep(0.5)
                series, alerts = running_series(url), long_compile_alerts(prom)
            lingered = f"{time.monotonic() - ended:.0f} s after the compile ended"
            assert series == {}, f"{mode}: {RUNNING} still {series} {lingered}"
            assert alerts == [], f"{mode}: TorchCompileLongCompile still {alerts} {lingered}"
            assert prom.query(RUNNING) == [], (
                mode
            )  # gone from Prometheus too, not only from the scrape
            assert gauge(url, "torch_compile_compiling") == {"0": 0.0}, mode
        finally:
            release.touch()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
