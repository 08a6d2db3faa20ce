"""A float the traced code specialises again in the compile that was to make it dynamic (docs/steady-state.md).

``F.cross_entropy(x, y, label_smoothing=cfg.ls)`` needs a concrete float: after the first change torch
tries the value dynamic, and the same compile installs ``cfg.ls == 0.2`` again, so every new value
recompiles (torch's truth: one compile per value). That first change is no warm-up, and the fix never
offers a 0-dim tensor or dynamic=True, which cannot help there.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from agreement import record

import recompprof
from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.trace.ingest import read_trace
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, Event

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "float_respecialised.py"


@dataclasses.dataclass
class _Config:
    ls: float = 0.1


CFG = _Config()


def _loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x, y, label_smoothing=CFG.ls)


def _scaled(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * k


def _recompiles(session: recompprof.Session) -> list[Compile]:
    return [
        e
        for e in session.recent_events()
        if isinstance(e, Compile) and e.is_recompile and not e.backward
    ]


def test_label_smoothing_float_is_specialised_in_its_own_compile() -> None:
    """Four label_smoothing values compile four times (torch); the first change's compile holds the new value
    in its installed guards, so it is marked specialised, not automatic dynamic, and the report's fix for the
    cause names neither a 0-dim tensor nor "will not recur"."""
    torch._dynamo.reset()
    compiled = torch.compile(_loss, backend="eager")
    x, y = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])
    with recompprof.attach(event_log=False) as session:
        for value in (0.1, 0.2, 0.3, 0.4):
            CFG.ls = value
            compiled(x, y)
    recompiles = _recompiles(session)
    assert len(recompiles) == 3  # every new value recompiled
    first = recompiles[0]
    assert first.automatic_dynamic is None
    assert first.specialised == "value of G['CFG'].ls"
    # four values: variants a bounded set explains, so none is steady state (docs/steady-state.md)
    assert [e.steady_state for e in recompiles] == [False, False, False]
    report = recompprof.report(session)
    assert report.automatic_dynamic_recompiles == 0
    text = " ".join(render_text(report, width=200).split())
    fix_first = text[text.index("Fix these first") : text.index("Frames")]
    for shown in (fix_first, render_html(report)):
        assert "as a Python number (torch tried it dynamic" in shown
        assert "0-dim tensor" not in shown and "will not recur" not in shown


def test_a_float_torch_keeps_dynamic_is_still_warmup() -> None:
    """A float argument the traced code only multiplies by stays dynamic after its first change (no further
    compile for the third value): its recompile is automatic dynamic warm-up, not specialised."""
    torch._dynamo.reset()
    compiled = torch.compile(_scaled, backend="eager")
    with recompprof.attach(event_log=False) as session:
        for value in (2.0, 3.0, 4.0):
            compiled(torch.ones(2), value)
    (recompile,) = _recompiles(session)
    assert (recompile.automatic_dynamic, recompile.specialised) == ("value of L['k']", None)


def _verdicts(events: list[Event]) -> dict[str, dict[str, tuple[str | None, str | None, str]]]:
    """(automatic dynamic, specialised, the explaining reason's category) of each forward recompile, by
    function and compile id."""
    out: dict[str, dict[str, tuple[str | None, str | None, str]]] = {}
    for e in events:
        if isinstance(e, Compile) and e.is_recompile and not e.backward:
            explaining = next(r for r in e.reasons if r.explains_change)
            out.setdefault(e.frame.name, {})[str(e.compile_id)] = (
                e.automatic_dynamic,
                e.specialised,
                explaining.category,
            )
    return out


@pytest.mark.workload
def test_ingest_reads_the_installed_guards_of_a_trace_as_live_does(tmp_path: Path) -> None:
    """A real run with TORCH_TRACE (torch writes each compile's guard tree, ``dynamo_cpp_guards_str``): ingest
    reads the installed ``ls == 0.2`` of the first change's compile, so the float argument is specialised, not
    automatic dynamic, as live says, and the ingested report offers no 0-dim tensor. The config object's
    field, whose holder the text cannot tell from an nn.Module, is the documented unknown category ("other"),
    yet still a scalar whose value changed: specialised as live says, never automatic dynamic."""
    run = record(WORKLOAD, [], tmp_path)
    assert run.returncode == 0 and "WORKLOAD DONE" in run.stdout, run.stderr[-4000:]
    live = _verdicts(list(read_run(run.run_dir)))
    traced = read_trace(run.trace_dir)
    ingested = _verdicts([e for per in traced.events for e in per])
    specialised = (None, "value of L['ls']", "python_constant")
    assert list(live["by_argument"].values()) == [specialised] * 3, live
    assert ingested["by_argument"] == live["by_argument"], (live, ingested)
    assert list(live["by_config"].values()) == [(None, "value of G['CFG'].ls", "global")] * 3
    assert list(ingested["by_config"].values()) == [(None, "value of G['CFG'].ls", "other")] * 3, (
        ingested
    )
    text = " ".join(render_text(build_report(traced.events[0]), width=200).split())
    fix_first = text[text.index("Fix these first") : text.index("Frames")]
    assert "as a Python number (torch tried it dynamic" in fix_first
    assert "0-dim tensor" not in fix_first and "will not recur" not in fix_first
