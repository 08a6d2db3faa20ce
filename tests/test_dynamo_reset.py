"""``torch._dynamo.reset()`` in a live job: the compile after it is seen from its start, compile ids of
different resets are told apart, and a compile's start and its record agree on ``is_recompile`` (real
torch.compile, real resets, real processes)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from held_compiles import HeldBackend, Model

import recompprof
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, CompileStart, Event, GraphBreak

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"


def _events(session: recompprof.Session) -> list[Event]:
    assert session.event_log_path is not None
    return list(read_file(session.event_log_path))


def _broken(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


def test_the_first_compile_after_a_reset_is_running_in_status() -> None:
    """While the first compile after ``torch._dynamo.reset()`` runs, ``status().compiling`` names it
    (compile id ``0/0`` of generation 1), and it is gone once the compile ends."""
    session = recompprof.attach()
    torch.compile(Model(), backend="eager")(torch.ones(4))
    torch._dynamo.reset()
    backend = HeldBackend()
    backend.calls = 1  # hold the very first compile after the reset
    worker = threading.Thread(target=torch.compile(Model(), backend=backend), args=(torch.ones(4),))
    worker.start()
    try:
        assert backend.entered.wait(60)
        compiling = session.status().compiling
    finally:
        backend.release.set()
        worker.join(60)
    assert compiling is not None
    assert (compiling.frame.name, compiling.compile_id, compiling.generation) == (
        "Model.forward",
        "0/0",
        1,
    )
    assert session.status().compiling is None


def test_every_compile_across_resets_has_its_start_in_its_generation() -> None:
    """Across two resets every compile has a ``compile_start`` before it with the same generation,
    compile id and frame, and a graph break after a reset is filed under the frame compiled then."""
    session = recompprof.attach()
    model = torch.compile(Model(), backend="eager", dynamic=False)
    model(torch.ones(4))
    model(torch.ones(6))
    torch._dynamo.reset()
    torch.compile(_broken, backend="eager")(torch.ones(3))
    torch._dynamo.reset()
    torch.compile(Model(), backend="eager")(torch.ones(4))
    session.detach()
    events = _events(session)
    starts = [e for e in events if isinstance(e, CompileStart)]
    compiles = [e for e in events if isinstance(e, Compile)]
    key = [(e.generation or 0, e.compile_id, e.frame.name) for e in compiles]
    assert key == [
        (0, "0/0", "Model.forward"),
        (0, "0/1", "Model.forward"),
        (1, "0/0", "_broken"),
        (1, "1/0", key[3][2]),
        (2, "0/0", "Model.forward"),
    ]
    assert [(e.generation or 0, e.compile_id, e.frame.name) for e in starts] == key
    for start, done in zip(starts, compiles, strict=True):
        assert events.index(start) < events.index(done) and start.is_recompile == done.is_recompile
    breaks = [e for e in events if isinstance(e, GraphBreak)]
    assert [(b.generation or 0, b.compile_id, b.frame and b.frame.name) for b in breaks] == [
        (1, "0/0", "_broken")
    ]


@pytest.mark.workload
def test_dynamo_testcases_give_a_start_for_every_compile(tmp_path: Path) -> None:
    """torch's own Dynamo ``TestCase`` resets before and after every test; with recompprof attached every
    compile of such a test file has its ``compile_start`` (same generation and compile id; a refusal at the
    recompile limit is no compile and has none), and its graph break names the frame that broke."""
    run = tmp_path / "run"
    env = {
        **os.environ,
        "RECOMPPROF_RUN_DIR": str(run),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    }
    done = subprocess.run(
        [sys.executable, str(WORKLOADS / "dynamo_testcases.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout.strip().endswith("OK"), done.stdout + done.stderr
    (log,) = run.glob("*.jsonl")
    events = list(read_file(log))
    starts = sorted(
        (e.generation or 0, e.compile_id) for e in events if isinstance(e, CompileStart)
    )
    compiles = sorted(
        (e.generation or 0, e.compile_id)
        for e in events
        if isinstance(e, Compile) and e.outcome != "limit_hit"
    )
    assert len(compiles) == 12 and starts == compiles
    assert len(set(compiles)) == 12  # 0/0 of one test is not 0/0 of another
    # torch refuses a compile at the recompile limit before its compile callbacks run: no start, not a compile
    assert [
        e.compile_id for e in events if isinstance(e, Compile) and e.outcome == "limit_hit"
    ] == ["0/1"]
    breaks = [e for e in events if isinstance(e, GraphBreak)]
    assert [b.frame and b.frame.name for b in breaks] == ["broken"]


@pytest.mark.skipif(
    "isolate_recompiles" not in inspect.signature(torch.compile).parameters,
    reason="this torch has no torch.compile(isolate_recompiles=...)",
)
def test_start_and_compile_agree_on_is_recompile_with_isolated_regions() -> None:
    """A function compiled again in a new ``isolate_recompiles`` region is a first compile there for both
    its ``compile_start`` and its ``compile`` (torch counts cache entries per region), and a recompile inside
    a region is a recompile for both."""
    session = recompprof.attach()
    for _ in range(2):
        region = torch.compile(Model(), backend="eager", dynamic=False, isolate_recompiles=True)
        region(torch.ones(4))
        region(torch.ones(6))
    session.detach()
    events = _events(session)
    starts = {e.compile_id: e.is_recompile for e in events if isinstance(e, CompileStart)}
    compiles = {e.compile_id: e.is_recompile for e in events if isinstance(e, Compile)}
    assert starts == compiles
    assert [compiles[i] for i in ("0/0", "0/1", "0/2", "0/3")] == [False, True, False, True]


def test_reset_keeps_the_callbacks_only_while_attached() -> None:
    """After ``detach()`` a reset leaves torch's compile callbacks empty of recompprof's, as before attach."""
    from torch._dynamo.callback import callback_handler

    before = (list(callback_handler.start_callbacks), list(callback_handler.end_callbacks))
    session = recompprof.attach()
    torch._dynamo.reset()
    assert len(callback_handler.start_callbacks) == 1 and len(callback_handler.end_callbacks) == 1
    session.detach()
    torch._dynamo.reset()
    assert (callback_handler.start_callbacks, callback_handler.end_callbacks) == ([], [])
    assert before == ([], [])


@pytest.mark.skipif(
    "isolate_recompiles" not in inspect.signature(torch.compile).parameters,
    reason="this torch has no torch.compile(isolate_recompiles=...)",
)
def test_an_isolated_regions_first_compile_links_no_recompile_of(receiver, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The OpenTelemetry root span of a new ``isolate_recompiles`` region's first compile (opened at its
    ``compile_start``) has no ``recompile_of`` link; a recompile inside a region links the compile before it."""
    from otlp_receiver import clear_otel_env

    clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    with recompprof.attach(exporters=["otel"]) as session:
        for _ in range(2):
            region = torch.compile(Model(), backend="eager", dynamic=False, isolate_recompiles=True)
            region(torch.ones(4))
            region(torch.ones(6))
    compiles = {e.compile_id: e for e in session.recent_events() if isinstance(e, Compile)}
    spans = receiver.wait_for(
        lambda s: len([x for x in s if x["name"] == "torch_compile.frame"]) == 4
    )
    roots = {
        s["attributes"]["recompprof.compile_id"]: s
        for s in spans
        if s["name"] == "torch_compile.frame"
    }
    linked = {
        i: [link["attributes"]["recompprof.compile_id"] for link in roots[i]["links"]]
        for i in sorted(roots)
    }
    assert linked == {"0/0": [], "0/1": ["0/0"], "0/2": [], "0/3": ["0/2"]}
    assert all(compiles[i].trace_id == roots[i]["trace_id"] for i in roots)
