"""Whether a rank's log holds its whole session: sessions without ``session_end``, and gaps.

A session's log begins with ``session_start`` and ends with ``session_end``, whose totals the live
session folded from every event it emitted (``recompprof._model.aggregates``). So:

- a session whose ``session_end`` never came (the next ``session_start`` of its rank, or the end of
  the log, came first) was killed, crashed or is still running: its figures stop at its last event;
- a session whose ``session_end`` counts more than its logged events do, by the live totals' own
  rules (``recompprof._model.counting``), or whose writer counted events it could not write
  (``events_dropped["event_log"]``), has a gap: a full disk, a deleted log, lines lost. (A log holding
  *more* than its totals is no gap, and no verdict is given on it: the totals may have missed an
  event through an internal error, which ``session_end.internal_errors`` shows.)

The counts compared are compiles, recompiles, graph breaks and recompile-limit hits, as far as the
``session_end`` carries them (older logs carry fewer). Compile seconds and failures are not: a failed
forward compile is a compile, and summing per session costs the fold on every event; a gap that loses
only backward compiles (the one loss these counts miss) shows in the writer's own count. Events of a rank
before any ``session_start`` of it (a log started again after it was deleted) form a session of their
own, reconciled at its end; with no end they get no verdict, since nothing says a session began.
The report's fold (``recompprof._analysis.report.fold.build_report``) counts each session as it reads (a list
increment per compile, no second pass); ``check --after-step`` counts the events it leaves out of the
figures through :meth:`SessionFold.tally`.

Each rank's latest session also says whether it ended with a compile running
(:class:`~recompprof._model.status.OpenCompile`): its ``session_end.compiling``, or, for a session
without ``session_end``, its last ``compile_start`` without its ``compile``, run until the session's
last logged event (a lower bound: only that process's own events show it was still alive; another
rank's later events do not). A session without ``session_end``, with no compile known running, whose
``session_start`` says its torch marks no backward compile's start (signal ``backward_compile_start`` off)
may have been compiling a backward: it is neither compiling nor "not compiling" (``unseen_backward``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from recompprof._analysis.report import bounded
from recompprof._analysis.report.bounded import MergeContext
from recompprof._analysis.report.divergence import Process
from recompprof._eventlog.fastread import by_type
from recompprof._eventlog.writer import (
    DROPPED as WRITER_DROPPED,
)  # events the writer could not write
from recompprof._model.counting import COUNTED, LIMIT_HIT, RECOMPILE, verdict
from recompprof._model.events import (
    Compile,
    CompileRunning,
    CompileStart,
    Event,
    GraphBreak,
    RecompileLimitHit,
    Running,
    SessionEnd,
    SessionStart,
    SignalChange,
)
from recompprof._model.status import OpenCompile, unseen_backward

# The session_end totals a log gap compares with the session's logged events.
GAP_COUNTS = ("compiles", "recompiles", "graph_breaks", "recompile_limit_hits")


@dataclasses.dataclass
class Incomplete:
    """A rank's sessions that ended without ``session_end``, and the last event of the latest one."""

    sessions: int
    time: float
    step: int | None
    # the compile the latest one left running (how long: up to its last event)
    compiling: Running | None = None


@dataclasses.dataclass(frozen=True)
class RunningAtEnd:
    """The compile a rank's latest session ended with: ``lower_bound`` when the session has no
    ``session_end`` (killed outright), so ``running.seconds`` only counts up to its last logged event."""

    running: Running
    lower_bound: bool = False


@dataclasses.dataclass
class LogGap:
    """A rank's sessions whose log misses events, and what the latest one's ``session_end`` says."""

    sessions: int
    # Each total of GAP_COUNTS the latest session_end counts beyond its logged events: (total, value, logged).
    missing: tuple[tuple[str, float, int], ...]
    writer_dropped: int  # events the writer counted but could not write


class _Session:
    """The counts of one session's logged events, by the live totals' rules."""

    __slots__ = (
        "compiling",
        "graph_breaks",
        "last",
        "limit_hits",
        "process",
        "started",
        "unseen_backward",
        "verdicts",
    )

    def __init__(self, started: bool, last: Any) -> None:
        self.started = started  # opened by a session_start (else by the rank's first event after none or an end)
        self.last = last  # the latest event
        # Which process it is (its pid and first time): what is compared within one process only (guard
        # sets) is kept apart per session. A session without session_start has no pid here (-1).
        self.process: Process = (last.pid if started else -1, last.time)
        # Compile events by verdict bits: one list increment per compile on the fold's hot path; what
        # each total counts is read from the bits once, at session_end.
        self.verdicts = [0] * (LIMIT_HIT << 1)
        self.graph_breaks = 0
        self.limit_hits = 0
        # from its first compile_start (older logs have none)
        self.compiling: OpenCompile | None = None
        # its torch marks no backward compile's start (its session_start says so)
        self.unseen_backward = False

    def compiles(self, bit: int) -> int:
        """Compile events whose verdict has ``bit``."""
        return sum(n for bits, n in enumerate(self.verdicts) if bits & bit)


class SessionFold:
    """The open session of each rank while a fold reads, and the verdicts on those it closed."""

    def __init__(self) -> None:
        self.open: dict[int, _Session] = {}
        self.incomplete: dict[int, Incomplete] = {}
        self.gaps: dict[int, LogGap] = {}
        self.seen: set[int] = set()
        self.unopened: set[int] = set()  # ranks whose first event here is not a session_start
        self.ends: dict[
            int, RunningAtEnd | None
        ] = {}  # what each rank's latest closed session left compiling
        # ranks whose log records compile starts (so "not compiling" is known)
        self.records_starts: set[int] = set()
        # ranks whose latest session ended without session_end, no compile known running, on a torch that
        # marks no backward compile's start: a backward compile may have been running
        self.unseen_backward: set[int] = set()

    def unstarted(self, event: Any) -> _Session:
        """A session opened by ``event``, for a rank with none open: its events before any
        ``session_start``, or after a ``session_end`` (a fold's slow path)."""
        rank = event.rank
        if rank not in self.seen:
            self.seen.add(rank)
            self.unopened.add(rank)
        session = self.open[rank] = _Session(False, event)
        return session

    def start(self, event: Any) -> None:
        rank = event.rank
        self.seen.add(rank)
        self._close_unended(self.open.get(rank), rank)
        session = self.open[rank] = _Session(True, event)
        session.unseen_backward = unseen_backward(event.signals)

    def compile_start(self, event: Any) -> None:
        """A compile began; it counts nothing, and is not the session's latest event (its figures stop at
        the events that count), but the session leaves it running until its ``compile`` comes."""
        rank = event.rank
        session = self.open.get(rank) or self.unstarted(event)
        if session.compiling is None:
            session.compiling = OpenCompile()
        session.compiling.started(event)
        self.records_starts.add(rank)

    def compile_running(self, event: Any) -> None:
        """A compile was still running at ``event.time``; like its start, it counts nothing."""
        session = self.open.get(event.rank)
        if session is not None and session.compiling is not None:
            session.compiling.still_running(event)

    def end(self, event: Any) -> None:
        """Close the rank's session; a ``session_end`` with none open closes an empty one."""
        rank = event.rank
        session = self.open.pop(rank, None)
        compiling = event.compiling
        self.ends[rank] = RunningAtEnd(_model(compiling)) if compiling is not None else None
        self.unseen_backward.discard(rank)
        if compiling is not None:
            self.records_starts.add(rank)
        if session is None:
            if rank not in self.seen:
                self.seen.add(rank)
                self.unopened.add(rank)
            session = _Session(False, event)
        dropped = event.events_dropped.get(WRITER_DROPPED, 0)
        missing = _missing(session, event.totals, dropped)
        if missing or dropped:
            gap = self.gaps.get(rank)
            self.gaps[rank] = LogGap((gap.sessions if gap else 0) + 1, missing, dropped)

    def session_of(self, event: Any) -> _Session:
        """The open session of ``event``'s rank (one opened by it, if none), with ``event`` its latest."""
        session = self.open.get(event.rank) or self.unstarted(event)
        session.last = event
        return session

    def tally(self, event: Event) -> None:
        """Count an event the figures leave out (``check --after-step``) in its session."""
        _TALLY[type(event)](self, event)

    def finish(self) -> set[int]:
        """Give a verdict on each session still open; returns the ranks that had one open."""
        for rank, session in self.open.items():
            self._close_unended(session, rank)
        return set(self.open)

    def _close_unended(self, session: _Session | None, rank: int) -> None:
        if session is None:
            return
        left = _left_running(session)
        self.ends[rank] = RunningAtEnd(left, lower_bound=True) if left is not None else None
        if left is None and session.unseen_backward:
            self.unseen_backward.add(rank)
        else:
            self.unseen_backward.discard(rank)
        if not session.started:
            return
        known = self.incomplete.get(rank)
        self.incomplete[rank] = Incomplete(
            (known.sessions if known else 0) + 1, session.last.time, session.last.step, left
        )


def _left_running(session: _Session) -> Running | None:
    """The compile a session without ``session_end`` leaves running, as of its last logged event."""
    return (
        session.compiling.left_running(session.last.time) if session.compiling is not None else None
    )


def _model(value: Any) -> Running:
    """A ``Running`` model of a fast-read view (which does not pickle: a worker hands reports back)."""
    return (
        value if isinstance(value, Running) else Running.model_validate(value, from_attributes=True)
    )


def _missing(
    session: _Session, totals: dict[str, float], dropped: int
) -> tuple[tuple[str, float, int], ...]:
    """What ``totals`` count beyond the session's logged events: ``(total, its value, logged)`` each."""
    logged = {
        "compiles": session.compiles(COUNTED),
        "recompiles": session.compiles(RECOMPILE),
        "graph_breaks": session.graph_breaks,
        "recompile_limit_hits": session.limit_hits,
    }
    return tuple(
        (key, totals[key], logged[key])
        for key in GAP_COUNTS
        if key in totals and totals[key] > logged[key]
    )


def _tally_compile(fold: SessionFold, event: Compile) -> None:
    session = fold.session_of(event)
    session.verdicts[verdict(event)] += 1
    if session.compiling is not None:  # a compile left out of the figures still ends its start
        session.compiling.finished(event)


def _tally_break(fold: SessionFold, event: GraphBreak) -> None:
    fold.session_of(event).graph_breaks += event.count


def _tally_limit_hit(fold: SessionFold, event: RecompileLimitHit) -> None:
    fold.session_of(event).limit_hits += 1


def _tally_start(fold: SessionFold, event: CompileStart) -> None:
    fold.compile_start(event)


def _tally_running(fold: SessionFold, event: CompileRunning) -> None:
    fold.compile_running(event)


def _tally_other(fold: SessionFold, event: Event) -> None:
    fold.session_of(event)


_TALLY: dict[type, Callable[[SessionFold, Any], None]] = by_type(
    {
        Compile: _tally_compile,
        GraphBreak: _tally_break,
        RecompileLimitHit: _tally_limit_hit,
        SessionStart: _tally_other,
        SignalChange: _tally_other,
        SessionEnd: _tally_other,
        CompileStart: _tally_start,
        CompileRunning: _tally_running,
    }
)


@dataclasses.dataclass
class Sessions:
    """Ranks whose log cannot vouch for their whole session, in rank order: sessions that ended without
    ``session_end``, and sessions whose ``session_end`` counts events the log lacks; and what each
    rank's latest session ended with."""

    incomplete: dict[int, Incomplete] = dataclasses.field(default_factory=dict)
    log_gaps: dict[int, LogGap] = dataclasses.field(default_factory=dict)
    # What merging needs: ranks with a session open at the end of the fold, and ranks whose first
    # event here is not a session_start (it may continue an earlier part's session).
    open: set[int] = dataclasses.field(default_factory=set, repr=False)
    unopened: set[int] = dataclasses.field(default_factory=set, repr=False)
    # What each rank's latest session ended with: the compile it left running (RunningAtEnd), or None;
    # and the ranks whose log records compile starts (the others' "not compiling" is not known).
    ends: dict[int, RunningAtEnd | None] = dataclasses.field(default_factory=dict)
    records_starts: set[int] = dataclasses.field(default_factory=set)
    # Ranks whose latest session ended without session_end and no compile known running, on a torch that
    # marks no backward compile's start: a backward compile may have been running (not "not compiling").
    unseen_backward: set[int] = dataclasses.field(default_factory=set)

    @classmethod
    def of(cls, fold: SessionFold) -> Sessions:
        """The verdicts, once every event is folded (sessions still open ended without ``session_end``)."""
        still_open = fold.finish()
        return cls(
            incomplete=dict(sorted(fold.incomplete.items())),
            log_gaps=dict(sorted(fold.gaps.items())),
            open=still_open,
            unopened=set(fold.unopened),
            ends=dict(sorted(fold.ends.items())),
            records_starts=set(fold.records_starts),
            unseen_backward=set(fold.unseen_backward),
        )

    @property
    def compiling_at_end(self) -> dict[int, RunningAtEnd]:
        """The ranks whose run ended with a compile running, and that compile, in rank order."""
        return {rank: end for rank, end in self.ends.items() if end is not None}

    @property
    def not_compiling_at_end(self) -> list[int]:
        """The ranks whose run ended with no compile running, as far as their log can say."""
        return [
            rank
            for rank, end in self.ends.items()
            if end is None and rank in self.records_starts and rank not in self.unseen_backward
        ]

    def merge(self, part: Sessions, ctx: MergeContext) -> None:
        """Add ``part``'s verdicts (``ctx.started``: ranks with a ``session_start`` before it;
        ``ctx.touched``: every rank with an event in it)."""
        bounded.check(not part.unopened & self.open)  # later events of an earlier part's session
        merge_verdicts(self.incomplete, part.incomplete)
        merge_verdicts(self.log_gaps, part.log_gaps)
        self.unopened |= part.unopened - ctx.started - self.unopened
        self.open = (self.open - ctx.touched) | part.open
        self.incomplete = dict(sorted(self.incomplete.items()))
        self.log_gaps = dict(sorted(self.log_gaps.items()))
        self.ends = dict(sorted({**self.ends, **part.ends}.items()))  # its sessions are later
        self.unseen_backward = (self.unseen_backward - part.ends.keys()) | part.unseen_backward
        self.records_starts |= part.records_starts


def merge_verdicts(into: dict[int, Any], part: dict[int, Any]) -> None:
    """Add a later part's per-rank verdicts (:class:`Incomplete` or :class:`LogGap`): its sessions
    count too, and its latest one is the latest."""
    for rank, verdict_ in part.items():
        known = into.get(rank)
        into[rank] = dataclasses.replace(
            verdict_, sessions=verdict_.sessions + (known.sessions if known else 0)
        )
