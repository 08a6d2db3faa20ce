"""End to end: a real CPU training process with RECOMPPROF_EXPORTERS=prometheus, scraped by a real Prometheus."""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from servers import (
    free_port,
    http_get,
    need,
    occupied,
    prometheus,
    read_summary,
    train_process,
    wait_for_line,
)

from recompprof._model.events import Frame

pytestmark = [pytest.mark.servers, pytest.mark.workload]


def expected_totals(event_log: Path) -> dict[str, Any]:
    """The metric values the event log implies (the same rules as recompprof._model.aggregates)."""
    compiles: Counter[str] = Counter()
    recompiles: Counter[str] = Counter()
    guards: Counter[str] = Counter()
    limits: Counter[tuple[str, str]] = Counter()
    phases: defaultdict[str, float] = defaultdict(float)
    end: dict[str, Any] = {}
    for line in event_log.read_text().splitlines():
        ev = json.loads(line)
        if ev["kind"] == "compile":
            guards.update(r["category"] for r in ev.get("reasons", []))
        if ev["kind"] == "compile":
            label = Frame(**ev["frame"]).label
            counted = not ev.get("backward") and ev.get("outcome", "ok") != "limit_hit"
            compiles[label] += counted
            recompiles[label] += counted and ev["is_recompile"]
            if ev.get("outcome", "ok") != "limit_hit":
                for phase, seconds in ev.get("phases", {}).items():
                    phases[phase] += seconds
        elif ev["kind"] == "recompile_limit_hit":
            limits[(Frame(**ev["frame"]).label, ev["limit"])] += 1
        elif ev["kind"] == "session_end":
            end = ev
    return {
        "compiles": compiles,
        "recompiles": recompiles,
        "guards": guards,
        "limits": limits,
        "phases": dict(phases),
        "end": end,
    }


def by(result: list[dict[str, Any]], *labels: str) -> dict[Any, float]:
    key = (lambda m: m[labels[0]]) if len(labels) == 1 else (lambda m: tuple(m[x] for x in labels))
    return {key(r["metric"]): float(r["value"][1]) for r in result}


def test_prometheus_sees_exactly_the_event_log(tmp_path: Path) -> None:
    """Prometheus, scraping a real training job, returns exactly the event log's compiles and recompiles per frame, guard failures per category, limit hits and phase seconds; promtool accepts the exposition."""
    port, summary = free_port(), tmp_path / "summary.json"
    proc = train_process(
        {
            "RECOMPPROF_EXPORTERS": "prometheus",
            "RECOMPPROF_PROMETHEUS_PORT": str(port),
            "RECOMPPROF_RUN_DIR": str(tmp_path / "run"),
        },
        "--steps",
        "12",
        "--recompile-limit",
        "3",
        "--hold",
        "60",
        "--summary",
        str(summary),
    )
    try:
        wait_for_line(proc, "TRAINING DONE", timeout=300)
        info = read_summary(summary)
        want = expected_totals(Path(info["event_log"]))
        assert (
            sum(want["compiles"].values()) == info["compiles"] >= 3
            and sum(want["limits"].values()) >= 1
        )
        exposition = http_get(f"http://127.0.0.1:{port}/metrics").decode()
        promtool = need("promtool", "prometheus")
        check = subprocess.run(
            [promtool, "check", "metrics"],
            input=exposition,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        with prometheus(tmp_path, [f"127.0.0.1:{port}"]) as prom:
            prom.wait_for(f"sum(torch_compile_compiles_total) == {info['compiles']}", timeout=60)
            assert by(prom.query("sum by (frame) (torch_compile_compiles_total) > 0"), "frame") == {
                k: v for k, v in want["compiles"].items() if v
            }
            assert by(
                prom.query("sum by (frame) (torch_compile_recompiles_total) > 0"), "frame"
            ) == {k: v for k, v in want["recompiles"].items() if v}
            assert by(
                prom.query("sum by (reason) (torch_compile_guard_failures_total) > 0"), "reason"
            ) == dict(want["guards"])
            assert by(
                prom.query("torch_compile_recompile_limit_hits_total > 0"), "frame", "limit"
            ) == dict(want["limits"])
            phases = by(prom.query("torch_compile_phase_seconds_total"), "phase")
            assert phases == pytest.approx(want["phases"], abs=1e-6)
            assert prom.scalar("torch_compile_recompile_limit{limit='recompile_limit'}") == 3
            assert prom.scalar("sum(recompprof_internal_errors_total)") == 0
            target = prom.targets_up()
            assert len(target) == 1 and target[0]["labels"]["instance"] == f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(60)


def _bad_run(tmp_path: Path, env: dict[str, str]) -> tuple[str, dict[str, Any]]:
    proc = train_process(
        {
            "RECOMPPROF_EXPORTERS": "prometheus",
            "RECOMPPROF_RUN_DIR": str(tmp_path / "run"),
            "RECOMPPROF_PROMETHEUS_PUSH_INTERVAL": "0.2",
            **env,
        },
        "--steps",
        "6",
        "--changes",
        "1",
        "--hold",
        "1",
        "--summary",
        str(tmp_path / "s.json"),
    )
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    assert "TRAINING DONE" in out and "DETACHED" in out
    info = read_summary(tmp_path / "s.json")
    return out, expected_totals(Path(info["event_log"]))["end"]


@pytest.mark.parametrize("case", ["port_taken", "textfile_unwritable", "pushgateway_unreachable"])
def test_bad_exporter_input_never_stops_training(tmp_path: Path, case: str) -> None:
    """A taken port, an unwritable textfile dir or an unreachable Pushgateway: the job trains to the end, the error is logged once and counted."""
    port = free_port()
    if case == "port_taken":
        component, env = "prometheus.server", {"RECOMPPROF_PROMETHEUS_PORT": str(port)}
        with occupied(port):
            out, end = _bad_run(tmp_path, env)
        assert f"Prometheus port {port}" in out and "RECOMPPROF_PROMETHEUS_PORT" in out
    elif case == "textfile_unwritable":
        blocker = tmp_path / "file"
        blocker.write_text("")
        component = "prometheus.textfile"
        out, end = _bad_run(
            tmp_path,
            {
                "RECOMPPROF_PROMETHEUS_MODE": "textfile",
                "RECOMPPROF_PROMETHEUS_TEXTFILE_DIR": str(blocker / "prom"),
            },
        )
    else:
        component = "prometheus.pushgateway"
        out, end = _bad_run(
            tmp_path,
            {
                "RECOMPPROF_PROMETHEUS_MODE": "pushgateway",
                "RECOMPPROF_PROMETHEUS_PUSHGATEWAY_URL": f"http://127.0.0.1:{port}",
            },
        )
    assert out.count(f"internal error in {component}") == 1, out[-4000:]
    assert end["internal_errors"].get(component, 0) >= 1, end
