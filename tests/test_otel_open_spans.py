"""The compile's root span is open while the compile runs: started at ``compile_start`` (its time), ended at
the ``compile`` under the trace id that compile carries, or with ERROR when the run ends first (real
torch.compile, real OTLP over HTTP)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from otel_helpers import FRAME, StandInSession
from otlp_receiver import OtlpReceiver, clear_otel_env, tree
from slow_jobs import stop_during_recompile

import recompprof
from recompprof._model.events import Compile, CompileStart, Event, Reason, SessionEnd
from recompprof._torch.versions import torch_info
from recompprof_otel import OtelExporter
from recompprof_otel.open_spans import MAX_OPEN_SPANS

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"
ROOT = "torch_compile.frame"


@pytest.fixture(autouse=True)
def otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


def _roots(spans: list[dict]) -> dict[str, dict]:
    return {s["trace_id"]: s for s in spans if s["name"] == ROOT}


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _end_ns(event: Compile) -> int:
    assert event.start_time is not None
    return _ns(event.start_time) + _ns(event.duration)


def test_root_span_starts_at_compile_start_and_ends_at_the_compile(receiver: OtlpReceiver) -> None:
    """A slow recompile: its root span is in the trace its ``compile`` names (the ``compile_start``'s trace
    id), starts at the ``compile_start`` time, before the compile's record, and ends at the compile's end;
    while it runs nothing of it has been exported (a span is sent when it ends)."""
    seconds, calls = 1.0, []
    arrived_while_compiling: list[int] = []

    def slow_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) > 1:
            time.sleep(seconds)
            arrived_while_compiling.append(len(_roots(receiver.spans)))
        return gm.forward

    with recompprof.attach(exporters=["otel"]) as session:
        model = torch.compile(Model(), backend=slow_backend, dynamic=False)
        model(torch.ones(4))
        receiver.wait_for(lambda s: len(_roots(s)) == 1)
        model(torch.ones(6))
    events = session.recent_events()
    starts = {e.compile_id: e for e in events if isinstance(e, CompileStart)}
    compiles = {e.compile_id: e for e in events if isinstance(e, Compile)}
    assert sorted(starts) == sorted(compiles) == ["0/0", "0/1"]
    spans = receiver.wait_for(
        lambda s: len(_roots(s)) == 2 and all(r["span_id"] in tree(s) for r in _roots(s).values())
    )
    roots = _roots(spans)
    assert arrived_while_compiling == [
        1
    ]  # only the first compile's span had arrived during the recompile
    for compile_id, done in compiles.items():
        start = starts[compile_id]
        assert done.trace_id is not None and start.trace_id == done.trace_id
        root = roots[done.trace_id]
        assert root["attributes"]["recompprof.compile_id"] == compile_id
        assert root["start_ns"] == _ns(start.time) < _ns(done.time)
        assert root["end_ns"] == _end_ns(done)
        assert root["status"] == "UNSET" and root["attributes"]["recompprof.outcome"] == "ok"
        phases = tree(spans)[root["span_id"]]
        assert phases and min(p["start_ns"] for p in phases) == root["start_ns"]
        assert max(p["end_ns"] for p in phases) <= root["end_ns"]
    recompile = roots[compiles["0/1"].trace_id or ""]
    assert recompile["end_ns"] - recompile["start_ns"] >= seconds * 1e9
    assert recompile["links"] and recompile["links"][0]["trace_id"] == compiles["0/0"].trace_id
    assert recompile["attributes"]["recompprof.guard_failure.subject"] == "L['x']"


def test_a_failed_compile_ends_its_open_span_with_error(receiver: OtlpReceiver) -> None:
    """A recompile whose backend raises: the span opened at its start ends at the failed compile with
    ERROR, torch's exception type and the failure text, in the trace the failed compile names."""
    calls = []

    def failing_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("backend gave up")
        return gm.forward

    with recompprof.attach(exporters=["otel"]) as session:
        model = torch.compile(Model(), backend=failing_backend, dynamic=False)
        model(torch.ones(4))
        with pytest.raises(Exception, match="backend gave up"):
            model(torch.ones(6))
    events = session.recent_events()
    start = next(e for e in events if isinstance(e, CompileStart) and e.compile_id == "0/1")
    failed = next(e for e in events if isinstance(e, Compile) and e.compile_id == "0/1")
    assert failed.outcome == "failed" and failed.trace_id == start.trace_id is not None
    root = _roots(receiver.wait_for(lambda s: failed.trace_id in _roots(s)))[failed.trace_id]
    assert root["start_ns"] == _ns(start.time) and root["end_ns"] == _end_ns(failed)
    assert root["status"] == "ERROR" and "backend gave up" in root["status_message"]
    assert (
        root["attributes"]["error.type"] == failed.fail_type
        and root["attributes"]["recompprof.outcome"] == "failed"
    )


@pytest.mark.skipif(
    not torch_info().has("backward_compile_start"), reason="this torch marks no backward's start"
)
def test_a_backward_compile_opens_a_trace_of_its_own_at_its_start(receiver: OtlpReceiver) -> None:
    """A lazily compiled backward (same compile id as its forward) has its own ``compile_start``
    (``backward``, torch 2.8 on) and its own trace: its root span opens at that start and ends at its
    ``compile``, while its forward's span opened at the forward's start."""
    with recompprof.attach(exporters=["otel"]) as session:
        model = torch.compile(torch.nn.Linear(4, 1), backend="aot_eager", dynamic=False)
        model(torch.ones(2, 4)).sum().backward()
    events = session.recent_events()
    start, back_start = sorted(
        (e for e in events if isinstance(e, CompileStart)), key=lambda e: e.backward
    )
    forward, backward = sorted(
        (e for e in events if isinstance(e, Compile)), key=lambda e: e.backward
    )
    assert backward.backward and backward.compile_id == forward.compile_id == start.compile_id
    assert back_start.backward and back_start.compile_id == start.compile_id
    assert forward.trace_id == start.trace_id and backward.trace_id == back_start.trace_id
    assert backward.trace_id not in (None, forward.trace_id)
    roots = _roots(receiver.wait_for(lambda s: len(_roots(s)) == 2))
    assert roots[forward.trace_id or ""]["start_ns"] == _ns(start.time)
    back = roots[backward.trace_id or ""]
    assert back["attributes"]["recompprof.backward"] is True and back["status"] == "UNSET"
    assert (back["start_ns"], back["end_ns"]) == (_ns(back_start.time), _end_ns(backward))


def test_profile_mode_reuses_get_their_own_span(receiver: OtlpReceiver, tmp_path: Path) -> None:
    """Profile mode at limit 1 with inputs alternating A, B: every compile event becomes one root span; the
    compiles that ran open their span at their start, a re-enabled parked variant (no ``compile_start``,
    no trace id) gets its own zero-length span at its event."""

    def pick(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x + (1 if tag == "A" else 2)

    fn = torch.compile(pick, backend="eager")
    with recompprof.attach(
        exporters=["otel"], mode="profile", recompile_limit=1, run_dir=tmp_path
    ) as session:
        for tag in ["A", "B"] * 3:
            fn(torch.zeros(2), tag)
    events = session.recent_events()
    starts = {e.trace_id: e for e in events if isinstance(e, CompileStart)}
    compiles = [e for e in events if isinstance(e, Compile)]
    reuses = [e for e in compiles if e.trace_id is None]
    if not reuses:
        pytest.skip("this torch has no parked variants in profile mode (profile_evict off)")
    roots = receiver.wait_for(lambda s: sum(x["name"] == ROOT for x in s) == len(compiles))
    by_trace = _roots(roots)
    for event in compiles:
        if event.trace_id is not None:
            assert by_trace[event.trace_id]["start_ns"] == _ns(starts[event.trace_id].time)
    zero = [r for r in by_trace.values() if r["trace_id"] not in starts]
    assert len(zero) == len(reuses)
    assert (
        sorted(r["start_ns"] for r in zero)
        == sorted(r["end_ns"] for r in zero)
        == sorted(_ns(e.time) for e in reuses)
    )


def test_a_compile_start_has_no_trace_id_while_no_exporter_sends_traces(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the otel exporter, or with it disabled (``OTEL_SDK_DISABLED``), neither ``compile_start`` nor
    ``compile`` carries a trace id and nothing is sent; with it, both carry the same one."""

    def run(**settings: object) -> list[Event]:
        torch._dynamo.reset()
        with recompprof.attach(**settings) as session:
            torch.compile(Model(), backend="eager")(torch.ones(2))
        return session.recent_events()

    for events in (run(), run(exporters=["prometheus"], prometheus_port=0)):
        assert [e.trace_id for e in events if isinstance(e, (CompileStart, Compile))] == [
            None,
            None,
        ]
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert [
        e.trace_id for e in run(exporters=["otel"]) if isinstance(e, (CompileStart, Compile))
    ] == [None, None]
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    ids = [e.trace_id for e in run(exporters=["otel"]) if isinstance(e, (CompileStart, Compile))]
    assert len(ids) == 2 and ids[0] == ids[1] is not None
    assert list(_roots(receiver.wait_for(lambda s: len(_roots(s)) == 1))) == [ids[0]]


@pytest.mark.workload
def test_a_run_that_ends_during_a_compile_sends_its_span_with_error(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """A job killed with SIGTERM during a slow recompile: the span opened at its ``compile_start`` is sent at
    the session's end, from the start's time to the end ``session_end.compiling`` gives, with ERROR saying
    the run ended while it compiled and the guard failure that triggered it."""
    run = tmp_path / "run"
    env = {
        **os.environ,
        "RECOMPPROF_RUN_DIR": str(run),
        "RECOMPPROF_EXPORTERS": "otel",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    }
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOADS / "slow_compile.py"), "300"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    start = stop_during_recompile(proc, run, held=1.0)
    lines = [line for p in run.glob("*.jsonl") for line in p.read_text().splitlines()]
    end = next(SessionEnd.model_validate_json(x) for x in lines if '"session_end"' in x)
    assert (
        end.compiling is not None
        and end.compiling.compile_id == "0/1"
        and start.trace_id is not None
    )
    root = _roots(receiver.wait_for(lambda s: start.trace_id in _roots(s), timeout=20))[
        start.trace_id
    ]
    assert root["start_ns"] == _ns(start.time)
    assert (
        root["end_ns"]
        == _ns(end.compiling.started + end.compiling.seconds)
        >= root["start_ns"] + 1e9
    )
    assert (
        root["status"] == "ERROR"
        and "the run ended while this compile was running" in root["status_message"]
    )
    attrs = root["attributes"]  # what its start said: the frame, the compile and what triggered it
    assert (
        attrs["code.function.name"],
        attrs["recompprof.compile_id"],
        attrs["recompprof.outcome"],
    ) == ("Model.forward", "0/1", "running_at_end")
    assert (
        attrs["error.type"] == "run_ended_while_compiling"
        and attrs["recompprof.guard_failure.subject"] == "L['x']"
    )
    attrs = root["attributes"]
    assert (
        attrs["error.type"] == "run_ended_while_compiling"
        and attrs["recompprof.outcome"] == "running_at_end"
    )
    assert (
        attrs["recompprof.compile_id"] == "0/1" and attrs["code.function.name"] == "Model.forward"
    )
    assert attrs["recompprof.guard_failure.subject"] == "L['x']"


def _start(n: int, at: float) -> CompileStart:
    reason = Reason(
        text="tensor 'x' size mismatch", category="size", subject="L['x']", explains_change=True
    )
    return CompileStart(
        time=at,
        rank=3,
        step=1,
        frame=FRAME,
        compile_id=f"0/{n}",
        is_recompile=n > 0,
        reason=reason if n else None,
        trace_id=f"{n + 1:032x}",
    )


def _built(exporter: OtelExporter) -> None:
    """Wait until the export thread has built the spans of every event handed to ``exporter`` so far."""
    assert exporter.processor is not None and exporter.processor.force_flush(10_000)


def test_open_spans_are_bounded_and_a_lost_end_is_ended_by_the_next_start(
    receiver: OtlpReceiver,
) -> None:
    """A start whose compile never reports is ended, with ERROR saying no end was recorded, at the next start
    on its thread; starts on many threads at once hold at most ``MAX_OPEN_SPANS`` spans (the oldest is
    ended); the session's end ends the rest. Nothing stays open."""
    session = StandInSession()
    exporter = OtelExporter(session.settings)
    exporter.start(session)  # type: ignore[arg-type]
    t0 = time.time() - 100
    exporter.on_event(_start(0, t0))
    exporter.on_event(_start(1, t0 + 1))  # same thread: 0/0's end was lost
    lost = _roots(receiver.wait_for(lambda s: len(_roots(s)) == 1))[f"{1:032x}"]
    assert (lost["start_ns"], lost["end_ns"]) == (_ns(t0), _ns(t0 + 1))
    assert (
        lost["status"] == "ERROR"
        and "no compile record came before compile 0/1 started" in lost["status_message"]
    )
    assert lost["attributes"]["error.type"] == "compile_end_not_recorded"
    assert lost["attributes"]["recompprof.outcome"] == "unknown"
    numbers = range(2, 2 + 2 * MAX_OPEN_SPANS)
    turns = [threading.Event() for _ in range(len(numbers) + 1)]
    done = threading.Event()

    def compiling(
        i: int, n: int
    ) -> None:  # starts in turn, on threads that all live on (compiles on each)
        turns[i].wait(30)
        exporter.on_event(_start(n, t0 + n))
        turns[i + 1].set()
        done.wait(30)

    threads = [threading.Thread(target=compiling, args=(i, n)) for i, n in enumerate(numbers)]
    for thread in threads:
        thread.start()
    turns[0].set()
    assert turns[-1].wait(30)
    _built(exporter)
    assert len(exporter._builder._open) == MAX_OPEN_SPANS  # type: ignore[union-attr]
    roots = _roots(receiver.wait_for(lambda s: len(_roots(s)) == 2 + MAX_OPEN_SPANS))
    assert sorted(roots) == [
        f"{n + 1:032x}" for n in range(MAX_OPEN_SPANS + 2)
    ]  # 0/0, 0/1 and the oldest
    done.set()
    for thread in threads:
        thread.join(30)
    exporter.on_event(SessionEnd(time=t0 + 50, rank=3, totals={}))
    _built(exporter)
    assert len(exporter._builder._open) == 0  # type: ignore[union-attr]
    exporter.shutdown(5.0)
    roots = _roots(receiver.wait_for(lambda s: len(_roots(s)) == 2 + 2 * MAX_OPEN_SPANS))
    assert all(
        r["status"] == "ERROR" and r["attributes"]["error.type"] == "compile_end_not_recorded"
        for r in roots.values()
    )
    assert all(
        r["end_ns"] == _ns(t0 + 50) for t, r in roots.items() if int(t, 16) > MAX_OPEN_SPANS + 2
    )
