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
The report's fold (``recompprof._analysis.fold.build_report``) counts each session as it reads (a list
increment per compile, no second pass); ``check --after-step`` counts the events it leaves out of the
figures through :meth:`SessionFold.tally`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from recompprof._analysis import bounded
from recompprof._eventlog.fastread import by_type
from recompprof._eventlog.writer import DROPPED as WRITER_DROPPED  # events the writer could not write
from recompprof._model.counting import COUNTED, LIMIT_HIT, RECOMPILE, verdict
from recompprof._model.events import (
    Compile,
    CompileStart,
    Event,
    GraphBreak,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
    SignalChange,
)

# session_end totals -> what they count, as the report says it.
_COUNTS = (("compiles", "compile(s)"), ("recompiles", "recompile(s)"), ("graph_breaks", "graph break(s)"),
           ("recompile_limit_hits", "recompile-limit hit(s)"))


@dataclasses.dataclass
class Incomplete:
    """A rank's sessions that ended without ``session_end``, and the last event of the latest one."""

    sessions: int
    time: float
    step: int | None


@dataclasses.dataclass
class LogGap:
    """A rank's sessions whose log misses events, and what the latest one's ``session_end`` says."""

    sessions: int
    detail: str


class _Session:
    """The counts of one session's logged events, by the live totals' rules."""

    __slots__ = ("graph_breaks", "last", "limit_hits", "started", "verdicts")

    def __init__(self, started: bool, last: Any) -> None:
        self.started = started  # opened by a session_start (else by the rank's first event after none or an end)
        self.last = last  # the latest event
        # Compile events by verdict bits: one list increment per compile on the fold's hot path; what
        # each total counts is read from the bits once, at session_end.
        self.verdicts = [0] * (LIMIT_HIT << 1)
        self.graph_breaks = 0
        self.limit_hits = 0

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
        self.open[rank] = _Session(True, event)

    def end(self, event: Any) -> None:
        """Close the rank's session; a ``session_end`` with none open closes an empty one."""
        rank = event.rank
        session = self.open.pop(rank, None)
        if session is None:
            if rank not in self.seen:
                self.seen.add(rank)
                self.unopened.add(rank)
            session = _Session(False, event)
        missing = _missing(session, event.totals, event.events_dropped.get(WRITER_DROPPED, 0))
        if missing:
            gap = self.gaps.get(rank)
            self.gaps[rank] = LogGap((gap.sessions if gap else 0) + 1, missing)

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
        if session is None or not session.started:
            return
        known = self.incomplete.get(rank)
        self.incomplete[rank] = Incomplete((known.sessions if known else 0) + 1, session.last.time, session.last.step)


def _missing(session: _Session, totals: dict[str, float], dropped: int) -> str:
    """What ``totals`` count beyond the session's logged events, said in words ("" when nothing)."""
    logged = {"compiles": session.compiles(COUNTED), "recompiles": session.compiles(RECOMPILE),
              "graph_breaks": session.graph_breaks, "recompile_limit_hits": session.limit_hits}
    parts = [f"{_number(totals[key])} {what}, the log holds {logged[key]}"
             for key, what in _COUNTS if key in totals and totals[key] > logged[key]]
    said = ["session_end counts " + "; ".join(parts)] if parts else []
    if dropped:
        said.append(f"the writer could not write {dropped} event(s)")
    return "; ".join(said)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _tally_compile(fold: SessionFold, event: Compile) -> None:
    fold.session_of(event).verdicts[verdict(event)] += 1


def _tally_break(fold: SessionFold, event: GraphBreak) -> None:
    fold.session_of(event).graph_breaks += event.count


def _tally_limit_hit(fold: SessionFold, event: RecompileLimitHit) -> None:
    fold.session_of(event).limit_hits += 1


def _tally_other(fold: SessionFold, event: Event) -> None:
    fold.session_of(event)


_TALLY: dict[type, Callable[[SessionFold, Any], None]] = by_type({Compile: _tally_compile, GraphBreak: _tally_break, RecompileLimitHit: _tally_limit_hit,
                  SessionStart: _tally_other, SignalChange: _tally_other, SessionEnd: _tally_other,
                  CompileStart: _tally_other})


# Fields only: the dataclass it is a part of makes __init__, __repr__ and __eq__ (less to build at import).
@dataclasses.dataclass(kw_only=True, init=False, repr=False, eq=False)
class SessionFigures:
    """Ranks whose log cannot vouch for their whole session, in rank order: sessions that ended without
    ``session_end``, and sessions whose ``session_end`` counts events the log lacks."""

    incomplete: dict[int, Incomplete] = dataclasses.field(default_factory=dict)
    log_gaps: dict[int, LogGap] = dataclasses.field(default_factory=dict)
    # What merging needs: ranks with a session open at the end of the fold, and ranks whose first
    # event here is not a session_start (it may continue an earlier part's session).
    sessions_open: set[int] = dataclasses.field(default_factory=set, repr=False)
    sessions_unopened: set[int] = dataclasses.field(default_factory=set, repr=False)
    session_fold: SessionFold = dataclasses.field(default_factory=SessionFold, repr=False, metadata={"fold_state": True})

    def finish_sessions(self) -> None:
        """The verdicts, once every event is folded (sessions still open ended without ``session_end``)."""
        sessions = self.session_fold
        self.sessions_open = sessions.finish()
        self.sessions_unopened = set(sessions.unopened)
        self.incomplete = dict(sorted(sessions.incomplete.items()))
        self.log_gaps = dict(sorted(sessions.gaps.items()))

    def merge_sessions(self, part: SessionFigures, started: set[int], touched: set[int]) -> None:
        """``started``: ranks with a ``session_start`` before ``part``; ``touched``: every rank with an event in it."""
        bounded.check(not part.sessions_unopened & self.sessions_open)  # later events of an earlier part's session
        merge_verdicts(self.incomplete, part.incomplete)
        merge_verdicts(self.log_gaps, part.log_gaps)
        self.sessions_unopened |= part.sessions_unopened - started - self.sessions_unopened
        self.sessions_open = (self.sessions_open - touched) | part.sessions_open
        self.incomplete = dict(sorted(self.incomplete.items()))
        self.log_gaps = dict(sorted(self.log_gaps.items()))


def merge_verdicts(into: dict[int, Any], part: dict[int, Any]) -> None:
    """Add a later part's per-rank verdicts (:class:`Incomplete` or :class:`LogGap`): its sessions
    count too, and its latest one is the latest."""
    for rank, verdict_ in part.items():
        known = into.get(rank)
        into[rank] = dataclasses.replace(verdict_, sessions=verdict_.sessions + (known.sessions if known else 0))
