"""The report counts true recompiles, names the reason that explains each, and stays readable."""

from __future__ import annotations

from pathlib import Path

import torch

import recompprof
from recompprof.reporting import build_report, render_text

SCALE = 1.0


def test_true_recompiles_not_one_per_cache_entry(tmp_path: Path) -> None:
    """Five recompiles of one frame are reported as 5 (the old CompileProfiler said 15: one per failing cache entry)."""

    def f(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    compiled = torch.compile(f, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        for tag in ("a", "bb", "ccc", "dddd", "eeeee", "ffffff"):
            compiled(torch.ones(2), tag)
    report = session.report()
    frame = next(fr for fr in report.frames.values() if fr.name == "f")
    assert (frame.compiles, frame.recompiles) == (6, 5)
    group = frame.reasons[("python_constant", "L['tag']")]
    assert group.changes == 5 and group.failures == 1 + 2 + 3 + 4 + 5


def test_explaining_reason_is_the_new_change_not_the_newest_entry(tmp_path: Path) -> None:
    """When a global changes after a requires_grad variant was compiled, the recompile is explained by the global."""
    global SCALE
    SCALE = 1.0

    def g(x: torch.Tensor) -> torch.Tensor:
        return x * SCALE

    compiled = torch.compile(g, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        compiled(torch.ones(3))
        compiled(torch.ones(3, requires_grad=True))  # new variant: requires_grad
        compiled(torch.ones(3))  # cache hit on the first entry (it becomes most recently used)
        SCALE = 2.0
        compiled(torch.ones(3, requires_grad=True))
    recompiles = [e for e in session.recent_events() if e.kind == "compile" and e.is_recompile]
    explained = [next(r for r in e.reasons if r.explains_change) for e in recompiles]
    assert [r.category for r in explained] == ["requires_grad", "global"]
    assert explained[1].subject == "G['SCALE']"


def test_rendered_report_has_tables_hints_and_phases(tmp_path: Path) -> None:
    """The text report lists frames, compiles, recompile steps, reason categories with fix hints and phases."""
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="eager")
    with recompprof.attach(run_dir=tmp_path) as session:
        for batch in (2, 3, 5):
            compiled(torch.randn(batch, 4)).sum().backward()
            opt.step()
    text = str(recompprof.report())
    assert "Linear.forward (modules/linear.py:" in text
    assert "size" in text and "mark_dynamic" in text
    assert "dynamo_trace" in text and "Recompile steps" in text
    assert render_text(build_report(session.recent_events())) == text


def test_empty_report_says_no_compiles() -> None:
    """A session that compiled nothing reports that plainly."""
    with recompprof.attach():
        pass
    assert "No compiles recorded." in str(recompprof.report())


def test_reasons_capped_per_event_with_exact_totals(tmp_path: Path) -> None:
    """A frame with 80 variants keeps at most 64 reasons per event, yet counts every guard failure exactly."""
    from recompprof.compiles import MAX_REASONS_PER_EVENT

    def h(x: torch.Tensor, tag: str) -> torch.Tensor:
        return x * len(tag)

    compiled = torch.compile(h, backend="eager")
    with torch._dynamo.config.patch(recompile_limit=100), recompprof.attach(run_dir=tmp_path) as session:
        for i in range(80):
            compiled(torch.ones(2), f"t{i}")
    events = [e for e in session.recent_events() if e.kind == "compile"]
    assert max(len(e.reasons) for e in events) == MAX_REASONS_PER_EVENT
    assert all(e.reasons[0].explains_change for e in events if e.reasons)
    expected = sum(range(80))  # recompile k fails against each of the k entries before it
    assert sum(len(e.reasons) + sum(e.reasons_omitted.values()) for e in events) == expected
    snap = session.snapshot()
    assert snap.frames[events[0].frame.label].guard_failures["python_constant"] == expected
    report = session.report()
    frame = report.frames[events[0].frame.label]
    assert sum(g.failures for g in frame.reasons.values()) == expected
    assert frame.recompiles == 79
