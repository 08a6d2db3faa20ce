"""The reset generation reaches what leaves the process and what is read back from a trace.

``torch._dynamo.reset()`` restarts compile ids at ``0/0``; events carry ``generation`` so that ``0/0``
after a reset is not the ``0/0`` before it. OpenTelemetry spans carry it as ``recompprof.generation``
(and on their ``recompile_of`` links), and ``ingest`` of the job's ``TORCH_TRACE`` infers it from the
compile ids restarting, so live capture and ingest agree on the same run (real torch.compile, real
resets, a real OTLP/HTTP receiver, a real job process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from otlp_receiver import OtlpReceiver, clear_otel_env
from recordings import clean_env

import recompprof
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_file
from recompprof._model.events import Compile, Event, GraphBreak

REPO = Path(__file__).resolve().parents[1]


def _sine(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def test_spans_carry_the_reset_generation_of_their_compile(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiles 0/0 and 0/1 before a reset and 0/0 and 0/1 after it give four root spans: those after
    carry ``recompprof.generation = 1`` (those before none, as their events), each span has the
    generation and compile id of its own compile (same trace id), and the recompile after the reset
    links the compile 0/0 of generation 1."""
    clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    with recompprof.attach(exporters=["otel"]) as session:
        for _ in range(2):
            compiled = torch.compile(_sine, backend="eager", dynamic=False)
            compiled(torch.ones(3))
            compiled(torch.ones(4))
            torch._dynamo.reset()
    compiles = {
        (e.compile_id, e.generation): e for e in session.recent_events() if isinstance(e, Compile)
    }
    spans = receiver.wait_for(
        lambda s: len([x for x in s if x["name"] == "torch_compile.frame"]) == 4
    )
    roots = {
        (s["attributes"]["recompprof.compile_id"], s["attributes"].get("recompprof.generation")): s
        for s in spans
        if s["name"] == "torch_compile.frame"
    }
    assert sorted(roots, key=str) == sorted(compiles, key=str)
    assert set(roots) == {("0/0", None), ("0/1", None), ("0/0", 1), ("0/1", 1)}
    assert all(compiles[key].trace_id == roots[key]["trace_id"] for key in roots)
    (link,) = roots[("0/1", 1)]["links"]
    assert link["attributes"]["recompprof.compile_id"] == "0/0"
    assert link["attributes"]["recompprof.generation"] == 1
    assert link["span_id"] == roots[("0/0", 1)]["span_id"]


_JOB = textwrap.dedent("""
    import torch

    import recompprof

    def sine(x):
        return x.sin() + 1

    def broken(x):
        y = x.cos()
        torch._dynamo.graph_break()
        return y * 2

    session = recompprof.attach()
    f = torch.compile(sine, backend="eager", dynamic=False)
    f(torch.ones(3))
    f(torch.ones(4))
    torch._dynamo.reset()
    torch.compile(broken, backend="eager")(torch.ones(3))
    torch._dynamo.reset()
    f = torch.compile(sine, backend="eager", dynamic=False)
    f(torch.ones(3))
    f(torch.ones(5))
    session.detach()
""")


def _named(events: list[Event]) -> list[tuple[Any, ...]]:
    """Each compile and graph break as (kind, generation, compile id, frame name), in order."""
    return [
        (e.kind, e.generation, e.compile_id, e.frame.name)
        for e in events
        if isinstance(e, (Compile, GraphBreak)) and e.frame is not None
    ]


@pytest.mark.workload
def test_ingest_of_a_trace_with_resets_gives_the_generations_live_capture_gave(
    tmp_path: Path,
) -> None:
    """A job attached live and writing a TORCH_TRACE compiles 0/0 and 0/1, resets, compiles a frame
    with a graph break (0/0 and 1/0), resets, compiles 0/0 and 0/1 again: ingest of its trace gives
    every compile and graph break the same generation (none, 1, 2), compile id and frame as the live
    event log, so the graph break after the first reset is filed under the frame compiled then."""
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    env = clean_env(
        TORCH_TRACE=str(tmp_path / "trace"),
        RECOMPPROF_RUN_DIR=str(tmp_path / "run"),
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (log,) = (tmp_path / "run").glob("*.jsonl")
    live = _named(list(read_file(log)))
    (ingested,) = read_trace(tmp_path / "trace").events
    print("\nlive:    ", live, "\ningested:", _named(ingested))
    assert [g for _, g, _, _ in live] == [None, None, 1, 1, 1, 2, 2]
    assert sorted(_named(ingested), key=str) == sorted(live, key=str)
