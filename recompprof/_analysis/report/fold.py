"""Folding events into a :class:`~recompprof._analysis.report.model.Report`.

``build_report`` folds a stream of events into a bounded report (streaming, so a million events need no
more memory than a few hundred frames). A :class:`Folder` holds what only folding needs (the frame
cache, each forward compile's cause for its backward, each rank's open session, each frame's per-rank
state) and hands each event, by the handler of its type (one table for the event models and their
fast-read views, :func:`recompprof._eventlog.fastread.by_type`), to the report's figure families: the
rules of each figure live with its merge, in the family. The report it returns holds figures only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from recompprof._analysis.report.bounded import MAX_FRAMES
from recompprof._analysis.report.divergence import RankFold
from recompprof._analysis.report.frames import FrameReport
from recompprof._analysis.report.model import Report
from recompprof._analysis.report.sessions import SessionFold, Sessions
from recompprof._eventlog.fastread import by_type
from recompprof._model.causes import CauseTracker
from recompprof._model.counting import COSTS, verdict
from recompprof._model.events import (
    Compile,
    CompileRunning,
    CompileStart,
    Event,
    Frame,
    GraphBreak,
    Reason,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
    SignalChange,
)

# A kept frame while folding: its report and its per-rank fold state (by rank).
_FrameFold = tuple[FrameReport, dict[int, RankFold]]


def build_report(
    events: Iterable[Event], *, detail: bool = True, sessions: SessionFold | None = None
) -> Report:
    """Fold ``events`` (any order of ranks, one pass) into a :class:`Report`.

    ``detail=False`` leaves out what only the rendered report shows (per-rank figures, recompile steps,
    automatic-dynamic dims, compile seconds by phase): every count, reason group and cause is the same,
    at about four fifths of the cost. ``diff`` folds its two runs so. ``sessions`` is the fold of the
    runs' sessions to count in, when the caller counts events the figures leave out there too.
    """
    return Folder(detail=detail, sessions=sessions).fold(events)


class Folder:
    """One fold of events into a report: the dispatch, and every state only folding needs."""

    def __init__(self, *, detail: bool = True, sessions: SessionFold | None = None) -> None:
        self.report = Report(detail=detail)
        self.detail = detail
        self.sessions = sessions if sessions is not None else SessionFold()
        self.tracker = CauseTracker()  # each forward's cause, for its backward
        # Kept frames by event frame (hashed by value: one lookup for every event of a known frame)
        # and by key.
        self.frame_cache: dict[Frame, _FrameFold] = {}
        self.by_key: dict[str, _FrameFold] = {}

    def fold(self, events: Iterable[Event]) -> Report:
        """Fold ``events`` and finish: the report, with the figures the fold kept in its own form."""
        handlers = _HANDLERS
        compile_start: Callable[[Folder, Any], None] = Folder._compile_start
        compile_running: Callable[[Folder, Any], None] = Folder._compile_running
        folded, last_step = 0, 0
        for event in events:
            handler = handlers[type(event)]
            if (
                handler is compile_start or handler is compile_running
            ):  # count nothing (the compile counts)
                handler(self, event)
                continue
            folded += 1
            step = event.step
            if step is not None and step > last_step:
                last_step = step
            handler(self, event)
        report = self.report
        report.run.add_read(folded, last_step)
        report.sessions = Sessions.of(self.sessions)
        report.frames.finish({key: folds for key, (_, folds) in self.by_key.items()})
        return report

    def _frame_of(self, frame: Frame) -> _FrameFold | None:
        """The kept frame of ``frame`` (an event's Frame or its view), or None once MAX_FRAMES are kept."""
        found = self.frame_cache.get(frame)
        if found is not None:
            return found
        found = self.by_key.get(frame.key)
        if found is None:
            kept = self.report.frames.add(frame)
            if kept is None:
                return None
            found = self.by_key[kept.key] = (kept, {})
        if len(self.frame_cache) < 2 * MAX_FRAMES:  # one Frame and one view per frame, as a rule
            self.frame_cache[frame] = found
        return found

    def _compile(self, event: Compile) -> None:
        """Fold one compile event into its frame's figures, the run's, its cause's and its session's."""
        # The hottest code of the offline commands (a million events): the frame cache is looked up inline,
        # and each family is asked once. tests/test_report.py and test_one_rule.py pin the result.
        sessions = self.sessions  # SessionFold.session_of, inline
        session = sessions.open.get(event.rank) or sessions.unstarted(event)
        kept = self.frame_cache.get(event.frame) or self._frame_of(event.frame)
        if kept is None:
            counted = verdict(event)
        else:
            frame, rank_folds = kept
            counted, reason = frame.add(event, self.detail, rank_folds, session.process)
            self.report.compilation.add(event, frame.label)
            if counted & COSTS:
                self._cost(event, frame, counted, reason)
        session.last = event
        session.verdicts[counted] += 1  # what it counts as (recompprof._analysis.report.sessions)
        if session.compiling is not None:  # the compile it finishes is no longer running
            session.compiling.finished(event)

    def _cost(
        self, event: Compile, frame: FrameReport, counted: int, reason: Reason | None
    ) -> None:
        """Charge a compile that cost seconds (verdict ``counted``, explaining reason ``reason``) of
        ``frame`` to its cause, if it has one."""
        causes = self.report.causes
        found = self.tracker.cause_of(event, counted)
        if found is None:
            if event.backward and not self.tracker.remembers(event):
                causes.add_orphan(event)  # its forward is in no event folded here
            return
        cause_frame, category, subject = found
        label, frame_key = frame.label, frame.key
        if (
            event.backward
        ):  # its forward's frame: the same one, as a rule, but the forward's cause decides
            forward = self.frame_cache.get(cause_frame)
            label, frame_key = (
                (forward[0].label, forward[0].key)
                if forward is not None
                else (cause_frame.label, cause_frame.key)
            )
        causes.add(event, label, (frame_key, category, subject), reason)

    def _compile_start(self, event: CompileStart) -> None:
        """Only which compile a session leaves running, should its log end before the compile's does."""
        self.sessions.compile_start(event)

    def _compile_running(self, event: CompileRunning) -> None:
        """Only that the compile was still running then (how long it ran, should its log end during it)."""
        self.sessions.compile_running(event)

    def _session_start(self, event: SessionStart) -> None:
        self.sessions.start(event)
        self.tracker.start(event.rank, event.pid)
        self.report.run.add_start(event)

    def _signal(self, event: SignalChange) -> None:
        self.sessions.session_of(event)
        self.report.run.add_signal(event)

    def _limit_hit(self, event: RecompileLimitHit) -> None:
        self.sessions.session_of(event).limit_hits += 1
        kept = self._frame_of(event.frame)
        if kept is not None:
            kept[0].add_limit_hit(event)

    def _graph_break(self, event: GraphBreak) -> None:
        self.sessions.session_of(event).graph_breaks += event.count
        kept = self._frame_of(event.frame) if event.frame is not None else None
        label = ""
        if kept is not None:
            kept[0].add_graph_break(event)
            label = kept[0].label
        self.report.breaks.add(event, label)

    def _session_end(self, event: SessionEnd) -> None:
        self.sessions.end(event)
        self.report.run.add_end(event)


# Handlers take the event their type names; the table is keyed by the event's class (model or view).
_HANDLERS: dict[type, Callable[[Folder, Any], None]] = by_type(
    {
        CompileStart: Folder._compile_start,
        CompileRunning: Folder._compile_running,
        Compile: Folder._compile,
        SessionStart: Folder._session_start,
        SignalChange: Folder._signal,
        RecompileLimitHit: Folder._limit_hit,
        GraphBreak: Folder._graph_break,
        SessionEnd: Folder._session_end,
    }
)
