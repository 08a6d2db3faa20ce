"""End to end: real CPU training under attach(exporters=["otel"]) sending to real OTLP receivers."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from otlp_receiver import OtlpReceiver, clear_otel_env, tree
from servers import WORKLOADS, free_port

torch = pytest.importorskip("torch")

import recompprof  # noqa: E402
from recompprof._model.events import Compile  # noqa: E402
from recompprof_otel.metrics import INSTRUMENTS  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_otel_env(monkeypatch)
    # Long delay: spans must arrive through the flush at detach/exit/SIGTERM, not a lucky timer.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, factor: float) -> torch.Tensor:
        return self.fc(x) * factor


def _train(steps: int = 6, workers: int = 0) -> recompprof.Session:
    """A real training loop whose batch size and Python-float factor change (two recompile causes)."""
    torch.manual_seed(0)
    model = _Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    compiled = torch.compile(model, backend="eager")
    data = torch.utils.data.TensorDataset(torch.randn(64, 8))
    loader = torch.utils.data.DataLoader(
        data, batch_size=8, num_workers=workers, multiprocessing_context="fork" if workers else None
    )
    with recompprof.attach(exporters=["otel"]) as session:
        batches = iter(loader)
        for step in range(steps):
            x = next(batches)[0][: 8 - 2 * (step % 2)]  # batch 8, 6, 8, 6, ...
            loss = compiled(x, 1.0 if step < steps // 2 else 0.5).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    return session


def test_training_run_exports_the_span_tree(receiver: OtlpReceiver) -> None:
    """Every compile of a real run (DataLoader fork workers included) arrives as a linked trace with phases and resource."""
    session = _train(workers=2)
    compiles = [e for e in session.recent_events() if isinstance(e, Compile)]
    assert sum(e.is_recompile for e in compiles) >= 1
    spans = receiver.wait_for(
        lambda s: sum(x["name"] == "torch_compile.frame" for x in s) >= len(compiles)
    )
    roots = [s for s in spans if s["name"] == "torch_compile.frame"]
    assert len(roots) == len(compiles)
    assert len({r["trace_id"] for r in roots}) == len(roots)  # one trace per compile
    by_id = {
        (r["attributes"]["recompprof.compile_id"], r["attributes"]["recompprof.backward"]): r
        for r in roots
    }
    children = tree(spans)
    for event in compiles:
        root = by_id[(event.compile_id, event.backward)]
        attrs = root["attributes"]
        assert attrs["code.function.name"] == event.frame.name == "_Net.forward"
        assert attrs["code.file.path"] == __file__ and attrs["code.line.number"] == event.frame.line
        assert attrs["recompprof.rank"] == 0 and attrs["recompprof.step"] == event.step
        assert attrs["recompprof.is_recompile"] is event.is_recompile
        assert root["status"] == "UNSET"
        phases = sorted(children.get(root["span_id"], []), key=lambda s: s["start_ns"])
        assert [p["name"].split(" ", 1)[1] for p in phases] == [
            p for p in recompprof.PHASES if event.phases.get(p)
        ]
        if phases:
            assert (
                phases[0]["start_ns"] == root["start_ns"] and phases[-1]["end_ns"] <= root["end_ns"]
            )
            assert sum(p["end_ns"] - p["start_ns"] for p in phases) == pytest.approx(
                root["end_ns"] - root["start_ns"], abs=1_000 * len(phases)
            )
        if event.is_recompile and not event.backward:
            assert (
                len(root["links"]) == 1
                and root["links"][0]["attributes"]["recompprof.link.reason"] == "recompile_of"
            )
            linked = next(r for r in roots if r["span_id"] == root["links"][0]["span_id"])
            assert linked["attributes"]["code.function.name"] == "_Net.forward"
            assert attrs["recompprof.guard_failure.categories"]
    recompile = next(r for r in roots if r["attributes"]["recompprof.is_recompile"])
    assert set(recompile["attributes"]["recompprof.guard_failure.categories"]) <= set(
        recompprof.CATEGORIES
    )
    resources = {tuple(sorted(s["resource"].items())) for s in spans}
    assert len(resources) == 1  # one process: no span came from a DataLoader worker
    resource = spans[0]["resource"]
    assert resource["service.name"] == "recompprof" and resource["process.pid"] == os.getpid()
    assert (
        resource["recompprof.world_size"] == 1
        and resource["recompprof.run_id"] == session.identity.run_id
    )
    exemplars = {e.trace_id for e in session.snapshot().duration_exemplars.values()}
    assert exemplars and exemplars <= {r["trace_id"] for r in roots}


def test_otel_metrics_arrive_with_prometheus_compatible_names(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With otel_metrics on, the instruments reach the receiver under names that translate to the Prometheus ones."""
    monkeypatch.setenv("RECOMPPROF_OTEL_METRICS", "true")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    _train(steps=4)
    deadline = time.monotonic() + 20
    while not receiver.metric_names() and time.monotonic() < deadline:
        time.sleep(0.1)
    names = receiver.metric_names()
    expected = {name for name, _, _ in INSTRUMENTS}
    # Counters with nothing to count yet (no drop, no internal error), unset limits and the age of a running
    # compile (none runs at the export) send no point.
    assert (
        expected
        - {
            "torch_compile.recompile_limit",
            "recompprof.events_dropped",
            "recompprof.internal_errors",
            "torch_compile.compile_running",
        }
        <= names
    )
    assert names <= expected | {"recompprof.build_info"}
    units = {
        m.name: (m.unit, m.WhichOneof("data"))
        for req in receiver.metrics
        for rm in req.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    for name, unit, prometheus in INSTRUMENTS:
        if name not in units:
            continue
        got_unit, kind = units[name]
        assert got_unit == unit
        # The OTLP -> Prometheus rule: dots to underscores, unit suffix for "s", _total for monotonic sums.
        translated = (
            name.replace(".", "_")
            + ("_seconds" if unit == "s" else "")
            + ("_total" if kind == "sum" else "")
        )
        assert translated == prometheus, name


@pytest.mark.workload
def test_sigterm_flushes_spans_of_a_subprocess_job(receiver: OtlpReceiver, tmp_path: Path) -> None:
    """A training job killed with SIGTERM still delivers every compile span (flush on SIGTERM)."""
    env = {
        **os.environ,
        "RECOMPPROF_EXPORTERS": "otel",
        "RECOMPPROF_RUN_DIR": str(tmp_path / "run"),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    }
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOADS / "train_recompiles.py"), "--steps", "6", "--hold", "120"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 180
        while "TRAINING DONE" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        match = re.search(r"compiles=(\d+) recompiles=(\d+)", line)
        assert match, f"job did not finish training: {line!r}"
        assert receiver.spans == []  # nothing flushed yet: the schedule delay is 10 minutes
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    spans = receiver.wait_for(
        lambda s: any(x["name"] == "torch_compile.frame" for x in s), timeout=10
    )
    forward_roots = [
        s
        for s in spans
        if s["name"] == "torch_compile.frame" and not s["attributes"]["recompprof.backward"]
    ]
    assert len(forward_roots) >= int(match.group(1))
    assert sum(r["attributes"]["recompprof.is_recompile"] for r in forward_roots) >= int(
        match.group(2)
    )


def _rotel() -> str:
    try:
        import rotel
    except ImportError:
        pytest.skip("rotel is not installed (pip install rotel: a real OTLP collector, alpha)")
    binary = Path(rotel.__file__).parent / "rotel-agent"
    if not binary.exists() and shutil.which("rotel-agent") is None:
        pytest.skip("the rotel wheel has no rotel-agent binary for this platform")
    return str(binary if binary.exists() else shutil.which("rotel-agent"))


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_rotel_collector_receives_compile_spans(
    protocol: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real OTLP collector (rotel) receives and decodes the compile traces over http/protobuf and grpc."""
    if protocol == "grpc":
        pytest.importorskip(
            "opentelemetry.exporter.otlp.proto.grpc",
            reason="grpc needs the otel-grpc extra (opentelemetry-exporter-otlp-proto-grpc)",
        )
    agent = _rotel()
    http_port, grpc_port = free_port(), free_port()
    log = tmp_path / "rotel.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                agent,
                "start",
                "--otlp-http-endpoint",
                f"127.0.0.1:{http_port}",
                "--otlp-grpc-endpoint",
                f"127.0.0.1:{grpc_port}",
                "--exporter",
                "blackhole",
                "--debug-log",
                "traces",
                "--debug-log-verbosity",
                "detailed",
                "--pid-file",
                str(tmp_path / "rotel.pid"),
                "--log-file",
                str(tmp_path / "rotel.log"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while "Starting Rotel" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"rotel did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        port = grpc_port if protocol == "grpc" else http_port
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        session = _train(steps=4)
        compiles = [e for e in session.recent_events() if isinstance(e, Compile)]
        deadline = time.monotonic() + 20
        while log.read_text(errors="replace").count("Name           : torch_compile.frame") < len(
            compiles
        ):
            assert time.monotonic() < deadline, (
                f"rotel printed too few spans:\n{log.read_text(errors='replace')[-3000:]}"
            )
            time.sleep(0.2)
        text = log.read_text(errors="replace")
        assert "service.name: Str(recompprof)" in text and "recompprof.rank: Int(0)" in text
        assert (
            "torch_compile.phase dynamo_trace" in text and "recompprof.compile_id: Str(0/1)" in text
        )
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.workload
def test_spans_are_flushed_at_interpreter_exit(receiver: OtlpReceiver, tmp_path: Path) -> None:
    """A script that attaches and never detaches still delivers its compile spans when the interpreter exits."""
    script = (
        "import torch, recompprof\n"
        "recompprof.attach(exporters=['otel'])\n"
        "f = torch.compile(lambda x: x * 2, backend='eager', dynamic=False)\n"
        "f(torch.ones(2)); f(torch.ones(3))\n"
    )
    env = {
        **os.environ,
        "RECOMPPROF_RUN_DIR": str(tmp_path / "run"),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    }
    subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, timeout=120, capture_output=True
    )
    spans = receiver.wait_for(
        lambda s: sum(x["name"] == "torch_compile.frame" for x in s) >= 2, timeout=10
    )
    assert any(
        s["attributes"].get("recompprof.is_recompile")
        for s in spans
        if s["name"] == "torch_compile.frame"
    )
