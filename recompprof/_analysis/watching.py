"""What each rank of a running job is doing, folded from its event logs as they grow (``recompprof watch``).

Events come in log order per log, from any number of logs (one per rank and process; a restarted rank
writes a new one). Per rank the fold keeps its counts (the rules of :mod:`recompprof._model.counting`,
which the report folds by too) and its latest session, read with :class:`~recompprof._model.status.OpenCompile`,
which says whether a compile runs now. Memory is bounded whatever the run's length: per log its current
session, per rank its counts, and at most :data:`MAX_CAUSES` steady-state causes. Nothing here reads files
or draws: :mod:`recompprof._eventlog.tail` reads, :mod:`recompprof._analysis.render.watch` renders, the CLI draws.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Literal

from recompprof._model.causes import explaining_reason, forward_cause
from recompprof._model.counting import (
    FrameCounts,
    fold_compile,
    fold_limit_hit,
    steady_state_recompile,
)
from recompprof._model.events import (
    Compile,
    Event,
    RecompileLimitHit,
    Running,
    SessionEnd,
    SessionStart,
)
from recompprof._model.status import OpenCompile, unseen_backward
from recompprof._model.steady import example

MAX_CAUSES = (
    1000  # distinct steady-state causes kept; later new ones are summed in one "other causes" entry
)
MAX_RANKS_LISTED = 64  # ranks named per cause
OTHER_CAUSES = ("", "other", "")  # the key of the causes past MAX_CAUSES, summed


@dataclasses.dataclass
class Session:
    """One session of a rank (``session_start`` to ``session_end``), as far as its log has been read."""

    start: SessionStart | None  # None: its log began without one (not written by a session start)
    open: OpenCompile = dataclasses.field(default_factory=OpenCompile)

    @property
    def ended(self) -> SessionEnd | None:
        return self.open.ended


@dataclasses.dataclass(frozen=True)
class Now:
    """A rank's state at one moment: ``compiling`` (the compile running now), ``idle`` (running, no
    compile open) or ``ended`` (its latest session has its ``session_end``; ``compiling`` is then the
    compile that session_end says was still running, if any)."""

    state: Literal["compiling", "idle", "ended"]
    compiling: Running | None = None
    ended_at: float | None = None
    # idle as far as torch marks compiles, on a torch that marks no backward compile's start
    backward_unknown: bool = False


@dataclasses.dataclass
class RankState:
    """One rank: its counts over all its sessions, and its latest session."""

    rank: int
    session: Session
    counts: FrameCounts = dataclasses.field(default_factory=FrameCounts)
    sessions: int = 0  # sessions started (a restart adds one)
    last_time: float = 0.0  # the time of its last event
    # the step of its last event that had one (steps are not logged one by one)
    last_step: int | None = None

    @property
    def limit_hits(self) -> int:
        return sum(self.counts.limit_hits.values())

    def now(self, now: float) -> Now:
        """Its state at ``now`` (Unix seconds)."""
        ended = self.session.ended
        if ended is not None:
            return Now("ended", ended.compiling, ended.time)
        compiling = self.session.open.left_running(now)
        if compiling is not None:
            return Now("compiling", compiling)
        start = self.session.start
        return Now("idle", backward_unknown=start is not None and unseen_backward(start.signals))


@dataclasses.dataclass
class SteadyCause:
    """Steady-state recompiles of one cause (frame x category x subject of the reason that explains them)."""

    frame: str  # the frame's label
    category: str
    subject: str
    recompiles: int = 0
    ranks: set[int] = dataclasses.field(default_factory=set)  # at most MAX_RANKS_LISTED of them
    example: str = ""  # a reason text
    parameter: str = ""  # its subject by the wrapped function's parameters (Reason.parameter)


class Watch:
    """The fold of a run's events for ``recompprof watch``: :meth:`add` each event with the log it came from."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankState] = {}
        self.causes: dict[tuple[str, str, str], SteadyCause] = {}
        self.world_size = 0  # the largest world size a session_start announced
        self.run_ids: list[str] = []  # at most 4, in the order seen
        self._current: dict[
            Hashable, Session
        ] = {}  # per log: the session its next events belong to

    def add(self, log: Hashable, event: Event) -> None:
        """Fold one event read from ``log`` (any key naming the log, a path); each log's events in order."""
        if isinstance(event, SessionStart):
            self._start(log, event)
        session = self._current.get(log)
        if session is None:
            session = self._current[log] = Session(None)
        rank = self.ranks.get(event.rank)
        if rank is None:
            rank = self.ranks[event.rank] = RankState(event.rank, session)
        session.open.add(event)
        rank.last_time = max(rank.last_time, event.time)
        if event.step is not None:
            rank.last_step = event.step
        if isinstance(event, Compile):
            fold_compile(rank.counts, event)
            if steady_state_recompile(event):
                self._steady(event)
        elif isinstance(event, RecompileLimitHit):
            fold_limit_hit(rank.counts, event)

    def _start(self, log: Hashable, event: SessionStart) -> None:
        session = self._current[log] = Session(event)
        self.world_size = max(self.world_size, event.world_size)
        if event.run_id not in self.run_ids and len(self.run_ids) < 4:
            self.run_ids.append(event.run_id)
        rank = self.ranks.get(event.rank)
        if rank is None:
            rank = self.ranks[event.rank] = RankState(event.rank, session)
        latest = rank.session.start
        if (
            latest is None or latest.time <= event.time
        ):  # a restarted rank: its newest session is what it does now
            rank.session = session
        rank.sessions += 1

    def _steady(self, event: Compile) -> None:
        found = forward_cause(event)
        if found is None:
            return
        key = (found.frame.key, found.category, found.subject)
        cause = self.causes.get(key)
        if cause is None:
            if len(self.causes) >= MAX_CAUSES:
                key = OTHER_CAUSES
                cause = self.causes.setdefault(
                    key, SteadyCause(f"(causes past the first {MAX_CAUSES})", "other", "")
                )
            else:
                cause = self.causes[key] = SteadyCause(
                    found.frame.label, found.category, found.subject
                )
        cause.recompiles += 1
        if len(cause.ranks) < MAX_RANKS_LISTED:
            cause.ranks.add(event.rank)
        if not cause.example and key != OTHER_CAUSES:
            reason = explaining_reason(event.reasons)
            cause.example = example(reason.text) if reason is not None else ""
            cause.parameter = (reason.parameter if reason is not None else None) or ""

    def top_causes(self, count: int) -> list[SteadyCause]:
        """The ``count`` causes with the most steady-state recompiles."""
        return sorted(
            self.causes.values(), key=lambda c: (-c.recompiles, c.frame, c.category, c.subject)
        )[:count]

    def all_ended(self) -> bool:
        """Every rank the job announced has a log, and each one's latest session has its ``session_end``."""
        return (
            bool(self.ranks)
            and len(self.ranks) >= self.world_size
            and all(rank.session.ended is not None for rank in self.ranks.values())
        )

    def totals(self) -> FrameCounts:
        """The counts of every rank together."""
        total = FrameCounts()
        for rank in self.ranks.values():
            total.compiles += rank.counts.compiles
            total.recompiles += rank.counts.recompiles
            total.steady_state_recompiles += rank.counts.steady_state_recompiles
            total.limit_hits.update(rank.counts.limit_hits)
        return total
