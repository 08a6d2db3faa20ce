"""One rule, one place: every view of one real run counts compiles, recompiles and limit hits alike.

A real CPU job that hits its recompile limit runs once under ``attach()`` with the Prometheus
(textfile) and OpenTelemetry (spans and metrics, real OTLP over HTTP) exporters and ``TORCH_TRACE``
on. Its live totals (the ``session_end`` event), the report of its event log, the ingested trace
(totals and report), the Prometheus text, the OTel metrics and the OTel spans must agree: a
compile refused by the limit is a limit hit, never a compile or compile seconds.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from otlp_receiver import OtlpReceiver
from prometheus_client.parser import text_string_to_metric_families
from recorded_runs import WORKLOAD, clean_env

from recompprof._analysis.report.fold import build_report
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, SessionEnd

pytestmark = pytest.mark.workload


def _prometheus(textfile_dir: Path) -> dict[str, float]:
    (path,) = textfile_dir.glob("*.prom")
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def _otel_metrics(receiver: OtlpReceiver) -> dict[str, float]:
    """The last exported value of each metric, summed over its data points (sums and histogram counts)."""
    last: dict[str, float] = {}
    for request in receiver.metrics:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.HasField("sum"):
                        last[metric.name] = sum(
                            p.as_int or p.as_double for p in metric.sum.data_points
                        )
                    elif metric.HasField("histogram"):
                        last[metric.name + ".count"] = sum(
                            p.count for p in metric.histogram.data_points
                        )
    return last


def test_live_ingest_report_prometheus_and_otel_agree_on_compiles_and_limit_hits(
    tmp_path: Path,
) -> None:
    """Compiles, recompiles, limit hits and compile seconds of one limit-hitting run are the same in the
    session's totals, both reports, the ingested trace, Prometheus, OTel metrics and OTel spans."""
    run_dir, trace_dir, textfile_dir = tmp_path / "run", tmp_path / "trace", tmp_path / "prom"
    textfile_dir.mkdir()
    with OtlpReceiver() as receiver:
        env = clean_env(
            RECOMPPROF_RUN_DIR=str(run_dir),
            TORCH_TRACE=str(trace_dir),
            RECOMPPROF_EXPORTERS="prometheus,otel",
            RECOMPPROF_PROMETHEUS_MODE="textfile",
            RECOMPPROF_PROMETHEUS_TEXTFILE_DIR=str(textfile_dir),
            RECOMPPROF_OTEL_METRICS="true",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_METRIC_EXPORT_INTERVAL="600000",
        )
        proc = subprocess.run(
            [
                sys.executable,
                str(WORKLOAD),
                "--backend",
                "eager",
                "--steps",
                "12",
                "--recompile-limit",
                "2",
            ],
            check=False,
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        events = list(read_run(run_dir))
        compiles = [e for e in events if isinstance(e, Compile)]
        refused = sum(e.outcome == "limit_hit" for e in compiles)
        roots = receiver.wait_for(
            lambda s: sum(x["name"] == "torch_compile.frame" for x in s) >= len(compiles)
        )
        metrics = _otel_metrics(receiver)

    assert refused > 0, "the workload with --recompile-limit 2 must hit the limit"
    live = next(e for e in events if isinstance(e, SessionEnd)).totals
    report = build_report(events)
    traced = [e for per_file in read_trace(trace_dir).events for e in per_file]
    ingested = next(e for e in traced if isinstance(e, SessionEnd)).totals
    traced_report = build_report(traced)
    prom = _prometheus(textfile_dir)
    spans = [s["attributes"] for s in roots if s["name"] == "torch_compile.frame"]

    views: dict[str, dict[str, Any]] = {
        "live session_end": {
            k: live[k] for k in ("compiles", "recompiles", "recompile_limit_hits")
        },
        "report": {
            "compiles": report.compiles,
            "recompiles": report.recompiles,
            "recompile_limit_hits": report.limit_hits,
        },
        "ingested session_end": {
            k: ingested[k] for k in ("compiles", "recompiles", "recompile_limit_hits")
        },
        "ingested report": {
            "compiles": traced_report.compiles,
            "recompiles": traced_report.recompiles,
            "recompile_limit_hits": traced_report.limit_hits,
        },
        "prometheus": {
            "compiles": prom["torch_compile_compiles_total"],
            "recompiles": prom["torch_compile_recompiles_total"],
            "recompile_limit_hits": prom["torch_compile_recompile_limit_hits_total"],
        },
        "otel metrics": {
            "compiles": metrics["torch_compile.compiles"],
            "recompiles": metrics["torch_compile.recompiles"],
            "recompile_limit_hits": metrics["torch_compile.recompile_limit_hits"],
        },
        "otel spans": {
            "compiles": sum(
                not a["recompprof.backward"] and a["recompprof.outcome"] != "limit_hit"
                for a in spans
            ),
            "recompiles": sum(
                not a["recompprof.backward"]
                and a["recompprof.outcome"] != "limit_hit"
                and a["recompprof.is_recompile"]
                for a in spans
            ),
            "recompile_limit_hits": sum(a["recompprof.outcome"] == "limit_hit" for a in spans),
        },
    }
    expected = views["live session_end"]
    assert expected["recompile_limit_hits"] == refused and expected["compiles"] == sum(
        not e.backward and e.outcome != "limit_hit" for e in compiles
    )
    assert {name: view for name, view in views.items() if view != expected} == {}, expected

    # Compile seconds: limit hits add none, in the totals, the report, and both duration histograms.
    costed = [e for e in compiles if e.outcome != "limit_hit"]
    assert math.isclose(live["compile_seconds"], sum(e.duration for e in costed), rel_tol=1e-9)
    assert math.isclose(report.compile_seconds, live["compile_seconds"], rel_tol=1e-9)
    assert math.isclose(
        prom["torch_compile_duration_seconds_sum"], live["compile_seconds"], rel_tol=1e-6
    )
    assert (
        prom["torch_compile_duration_seconds_count"]
        == len(costed)
        == metrics["torch_compile.duration.count"]
    )
