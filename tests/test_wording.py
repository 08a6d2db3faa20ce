"""The shared wording, pinned where it was written several ways: each list cut to its first few says how many
more in the words that list has always used, and a cause is named the same in every view."""

from __future__ import annotations

from pathlib import Path

import pytest

from recompprof._analysis.check import Rules, check
from recompprof._analysis.render.html import render_html
from recompprof._analysis.render.text import render_text
from recompprof._analysis.render.watch import render
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.model import Report
from recompprof._analysis.watching import Watch
from recompprof._eventlog.tail import RunTail
from recompprof._eventlog.writer import write_events
from recompprof._model.events import Compile, Event, Frame, Reason, SessionEnd, SessionStart

HOT = Frame(name="hot", file="/job/model.py", line=1)  # recompiles at 15 steps
BARE = Frame(name="bare", file="/job/model.py", line=2)  # a cause without a subject
WARM = [Frame(name=f"warm{i}", file="/job/model.py", line=10 + i) for i in range(7)]
SIZE = Reason(
    text="tensor 'x' size mismatch at index 0. expected 2, actual 3",
    category="size",
    subject="L['x']",
    explains_change=True,
)
GRAD = Reason(text="GRAD_MODE changed", category="grad_mode", subject="", explains_change=True)
STEPS = 15
RANKS = 10


def _compile(rank: int, frame: Frame, n: int, step: int, **fields: object) -> Compile:
    return Compile.model_validate(
        {
            "time": 1.0 + step,
            "rank": rank,
            "step": step,
            "frame": frame,
            "compile_id": f"{frame.line}/{n}",
            "is_recompile": n > 0,
            "duration": 0.25,
            **fields,
        }
    )


def _rank(rank: int) -> list[Event]:
    """One rank's session: ``hot`` recompiles at steps 1..15, ``bare`` once without a subject; rank 0 also
    warms up automatic dynamic in seven frames."""
    events: list[Event] = [
        SessionStart(
            time=0.0,
            rank=rank,
            step=0,
            run_id="r",
            host="h",
            pid=100 + rank,
            versions={},
            mode="monitor",
            recompile_limit=8,
        ),
        _compile(rank, HOT, 0, 0),
        _compile(rank, BARE, 0, 0),
    ]
    events += [
        _compile(rank, HOT, step, step, reasons=[SIZE], steady_state=True)
        for step in range(1, STEPS + 1)
    ]
    events.append(_compile(rank, BARE, 1, STEPS, reasons=[GRAD], steady_state=True))
    if rank == 0:
        for frame in WARM:
            events.append(_compile(rank, frame, 0, 0))
            events.append(
                _compile(rank, frame, 1, 1, reasons=[SIZE], automatic_dynamic="dim 0 of L['x']")
            )
    compiles = sum(1 for e in events if isinstance(e, Compile))
    recompiles = sum(1 for e in events if isinstance(e, Compile) and e.is_recompile)
    events.append(
        SessionEnd(
            time=100.0,
            rank=rank,
            step=STEPS,
            totals={"compiles": compiles, "recompiles": recompiles},
        )
    )
    return events


@pytest.fixture(scope="module")
def report() -> Report:
    return build_report(_rank(0))


def test_steps_lists_say_how_many_more_as_they_always_did(report: Report) -> None:
    """The terminal's cause and frame steps, the HTML's, and ``check``'s: the first 8 or 12, then ``(+k)`` or ``...``."""
    text = render_text(report, width=400)
    assert ", steps 1, 2, 3, 4, 5, 6, 7, 8 (+7)" in text
    assert " 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 (+3) " in text
    html = render_html(report)
    assert "<td>1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 (+3)</td>" in html
    assert "<td>1, 2, 3, 4, 5, 6, 7, 8 (+7)</td>" in html
    messages = [v.message for v in check(_rank(0), Rules(max_recompiles=0)).findings()]
    assert messages[0] == (
        f"rank 0 {HOT.label}: 15 recompile(s) > max 0 at step(s) 1, 2, 3, 4, 5, 6, 7, 8 ... "
        "(size L['x'] x15)"
    ), messages


def test_short_lists_say_no_more(report: Report) -> None:
    """A list no longer than its cut is shown whole, with no tail."""
    (short,) = [
        v.message
        for v in check(_rank(0), Rules(max_recompiles=0)).findings()
        if v.frame == BARE.label
    ]
    assert short == f"rank 0 {BARE.label}: 1 recompile(s) > max 0 at step(s) 15 (grad_mode x1)"
    assert ", steps 15\n" in render_text(report, width=400)


def test_automatic_dynamic_note_names_five_frames_and_counts_the_rest(report: Report) -> None:
    """The warm-up note names the first five dims made dynamic, then ``; +k more``."""
    shown = "; ".join(f"{frame.label}: dim 0 of L['x']" for frame in WARM[:5])
    assert f" This will not recur for {shown}; +2 more." in render_text(report, width=2000)


def test_watch_names_eight_ranks_of_a_cause_then_dots(tmp_path: Path) -> None:
    """Watch lists the first eight ranks of a steady-state cause, then ``...``; a cause without a subject
    is its frame alone."""
    for rank in range(RANKS):
        write_events(tmp_path / f"rank{rank:05d}-{100 + rank}.jsonl", _rank(rank))
    tail, watch = RunTail(tmp_path), Watch()
    for log, event in tail.poll():
        watch.add(log, event)
    view = render(watch, tail, 200.0, 400)
    assert f"  150  {HOT.label} · size · L['x'] (ranks 0, 1, 2, 3, 4, 5, 6, 7 ...): " in view
    assert f"   10  {BARE.label} (ranks 0, 1, 2, 3, 4, 5, 6, 7 ...): GRAD_MODE changed" in view


def test_a_cause_is_named_alike_in_the_report_and_in_check(report: Report) -> None:
    """``frame · category · subject`` (``-`` without one) in the report; ``frame category subject`` in check,
    the subject said once."""
    text = render_text(report, width=400)
    assert f" {HOT.label} · size · L['x']: 15 recompile(s)," in text
    assert f" {BARE.label} · grad_mode · -: 1 recompile(s)," in text
    (lost,) = [
        v.message
        for v in check(_rank(0), Rules(max_recompile_seconds=0)).findings()
        if v.rule == "max_recompile_seconds"
    ]
    assert f"(fix first: {HOT.label} size L['x']: 3.75 s x15; " in lost
    assert f"; {BARE.label} grad_mode: 0.25 s x1" in lost
