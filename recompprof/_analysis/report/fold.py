"""Folding events into a :class:`~recompprof._analysis.report.model.Report`.

``build_report`` folds a stream of events into a bounded report (streaming, so a million events need no
more memory than a few hundred frames). Each event goes to the handler of its type (one table for the
event models and their fast-read views, :func:`recompprof._eventlog.fastread.by_type`), which hands it to
the report's figure families: the rules of each figure live with its merge, in the family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from recompprof._analysis.report.figures import BreakGroup
from recompprof._analysis.report.model import Report
from recompprof._analysis.report.sessions import SessionFold
from recompprof._eventlog.fastread import by_type
from recompprof._model.counting import COSTS, verdict
from recompprof._model.events import (
    Compile,
    CompileRunning,
    CompileStart,
    Event,
    GraphBreak,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
    SignalChange,
)


def build_report(
    events: Iterable[Event], *, detail: bool = True, sessions: SessionFold | None = None
) -> Report:
    """Fold ``events`` (any order of ranks, one pass) into a :class:`Report`.

    ``detail=False`` leaves out what only the rendered report shows (per-rank figures, recompile steps,
    automatic-dynamic dims, compile seconds by phase): every count, reason group and cause is the same,
    at about four fifths of the cost. ``diff`` folds its two runs so. ``sessions`` is the fold of the
    runs' sessions to count in, when the caller counts events the figures leave out there too.
    """
    report = Report(detail=detail)
    if sessions is not None:
        report.session_fold = sessions
    handlers = _HANDLERS
    compile_start: Callable[[Report, Any], None] = _add_compile_start
    compile_running: Callable[[Report, Any], None] = _add_compile_running
    folded, last_step = 0, 0
    for event in events:
        handler = handlers[type(event)]
        if (
            handler is compile_start or handler is compile_running
        ):  # count nothing (the compile counts)
            handler(report, event)
            continue
        folded += 1
        step = event.step
        if step is not None and step > last_step:
            last_step = step
        handler(report, event)
    report.events, report.last_step = folded, last_step
    report.finish()
    return report


def _add_compile(report: Report, event: Compile) -> None:
    """Fold one compile event into its frame's figures, the run's, its cause's and its session's."""
    # The hottest code of the offline commands (a million events): the frame cache is looked up inline,
    # and each family is asked once. tests/test_report.py and test_one_rule.py pin the result.
    frame = report.frame_cache.get(event.frame) or report.frame_of(event.frame)
    if frame is None:
        counted = verdict(event)
    else:
        counted = frame.add_compile(event, report.detail)
        report.add_compile_figures(event, frame.label)
        if counted & COSTS:
            report.add_cost(event, frame, counted, report.frame_cache)
    sessions = report.session_fold  # SessionFold.session_of, inline
    session = sessions.open.get(event.rank) or sessions.unstarted(event)
    session.last = event
    session.verdicts[counted] += 1  # what it counts as (recompprof._analysis.report.sessions)
    if session.compiling is not None:  # the compile it finishes is no longer running
        session.compiling.finished(event)


def _add_compile_start(report: Report, event: CompileStart) -> None:
    """Only which compile a session leaves running, should its log end before the compile's does."""
    report.session_fold.compile_start(event)


def _add_compile_running(report: Report, event: CompileRunning) -> None:
    """Only that the compile was still running then (how long it ran, should its log end during it)."""
    report.session_fold.compile_running(event)


def _add_session_start(report: Report, event: SessionStart) -> None:
    report.session_fold.start(event)
    report.add_session_start(event)


def _add_signal(report: Report, event: SignalChange) -> None:
    report.session_fold.session_of(event)
    report.add_signal(event)


def _add_limit_hit(report: Report, event: RecompileLimitHit) -> None:
    report.session_fold.session_of(event).limit_hits += 1
    frame = report.frame_of(event.frame)
    if frame is not None:
        frame.add_limit_hit(event)


def _add_graph_break(report: Report, event: GraphBreak) -> None:
    report.session_fold.session_of(event).graph_breaks += event.count
    frame = report.frame_of(event.frame) if event.frame is not None else None
    if frame is not None:
        frame.graph_breaks += event.count
    report.add_graph_break(event, frame.label if frame is not None else "")


def _add_session_end(report: Report, event: SessionEnd) -> None:
    report.session_fold.end(event)
    report.add_session_end(event)


# Handlers take the event their type names; the table is keyed by the event's class (model or view).
_HANDLERS: dict[type, Callable[[Report, Any], None]] = by_type(
    {
        CompileStart: _add_compile_start,
        CompileRunning: _add_compile_running,
        Compile: _add_compile,
        SessionStart: _add_session_start,
        SignalChange: _add_signal,
        RecompileLimitHit: _add_limit_hit,
        GraphBreak: _add_graph_break,
        SessionEnd: _add_session_end,
    }
)


def ranked_breaks(report: Report) -> list[BreakGroup]:
    """Graph-break groups, most breaks first (frames that ran eagerly first among equals)."""
    return report.ranked_breaks()
