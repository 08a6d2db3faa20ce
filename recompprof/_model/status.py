"""What a session is doing now: :meth:`recompprof.Session.status`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from recompprof._model.events import (
    Compile,
    CompileRunning,
    CompileStart,
    Event,
    Reason,
    Running,
    SessionEnd,
)
from recompprof._model.explaining import changed_subject


@dataclasses.dataclass(frozen=True)
class Status:
    """One rank's state at the moment it was asked: its step and the compile running on it, if any."""

    rank: int
    step: int
    compiling: Running | None  # None: no compile is running on this rank, as far as torch marks one
    # True where torch marks no lazily compiled backward's start (torch < 2.8): ``compiling`` None then
    # does not rule out a backward compile (:func:`unseen_backward`).
    backward_unknown: bool = False


def unseen_backward(signals: Mapping[str, bool]) -> bool:
    """Whether a session with these ``signals`` (its ``session_start``'s) may compile a backward unseen: its
    torch marks no lazily compiled backward's start. Logs written before that signal existed say nothing
    of it, and are taken as they read."""
    return signals.get("backward_compile_start") is False


def running(start: CompileStart | None, now: float) -> Running | None:
    """The running compile that began with ``start`` (the model, or a fast-read view of it), as of ``now``."""
    if start is None:
        return None
    return Running.model_validate(
        {
            "frame": start.frame,
            "compile_id": start.compile_id,
            "generation": start.generation,
            "started": start.time,
            "seconds": max(0.0, now - start.time),
            "reason": start.reason,
            "is_recompile": start.is_recompile,
            "backward": start.backward,
        },
        from_attributes=True,
    )


class OpenCompile:
    """Which compile one session's log leaves running, read event by event in log order.

    A session's compiles run one at a time, so only its latest ``compile_start`` can be open: it closes
    with the ``compile`` of the same compile id, generation (ids restart after a reset) and direction (a
    lazily compiled backward shares its forward's compile id: its start and compile say ``backward``). A
    ``session_end`` is authoritative: its ``compiling`` is the compile that was running when the session
    ended (or none). A log without a ``session_end``
    (the process was killed outright) leaves its last unmatched ``compile_start`` open; how long it ran
    is then known only up to the last moment the log shows it alive: ``ended_at``, or the compile's
    latest ``compile_running`` (written every ``HEARTBEAT_SECONDS`` while a compile runs long).
    """

    def __init__(self) -> None:
        # the latest compile_start not yet matched by its compile
        self.start: CompileStart | None = None
        self.ended: SessionEnd | None = None  # the session_end, once read
        # the latest time a compile_running says the open compile was still running
        self.alive = 0.0

    def add(self, event: Event) -> None:
        """Read the next event of the session (any kind; only these three matter)."""
        # not isinstance: the offline commands' fast-read views are not the models
        kind = event.kind
        if kind == "compile_start":
            self.started(event)  # type: ignore[arg-type]
        elif kind == "compile":
            self.finished(event)  # type: ignore[arg-type]
        elif kind == "compile_running":
            self.still_running(event)  # type: ignore[arg-type]
        elif kind == "session_end":
            self.session_ended(event)  # type: ignore[arg-type]

    def started(self, event: CompileStart) -> None:
        self.start, self.alive = event, event.time

    def still_running(self, event: CompileRunning) -> None:
        if self.start is not None and _same(event, self.start):
            self.alive = max(self.alive, event.time)

    def finished(self, event: Compile) -> None:
        if self.start is not None and _same(event, self.start):
            self.start = None

    def session_ended(self, event: SessionEnd) -> None:
        self.ended = event
        self.start = None

    def left_running(self, now: float) -> Running | None:
        """The compile the session leaves running as of ``now`` (its log's last event, or the clock while
        it is followed): the ``session_end``'s, else the open start's, run until ``now`` or its last
        ``compile_running``, whichever is later (a lower bound on how long it ran when its log ended
        without a ``session_end``: the process may have lived on after it)."""
        if self.ended is not None:
            return self.ended.compiling
        return running(self.start, max(now, self.alive))


def _same(event: Compile | CompileRunning, start: CompileStart) -> bool:
    """Whether ``event`` is of the compile ``start`` began (a backward shares its forward's compile id)."""
    return (event.compile_id, event.generation, event.backward) == (
        start.compile_id,
        start.generation,
        start.backward,
    )


def describe(rank: int, compiling: Running) -> str:
    """One line for people: ``rank 1 compiling `Model.forward` (recompile: size of `L['x']` dim 0 changed), 42 s``."""
    return f"rank {rank} compiling {_what(compiling)}{_why(compiling)}, {compiling.seconds:.0f} s"


def describe_at_end(
    rank: int, compiling: Running, *, lower_bound: bool = False, ended: str = "the run"
) -> str:
    """The same for a compile a run ended with: ``rank 1 was compiling `Model.forward` (recompile: size of
    `L['x']` dim 0 changed) for 612 s when the run ended``; ``lower_bound``: the log ended without its
    ``session_end`` (the process was killed outright), so it ran "for at least" that long; ``ended``: what
    ended then ("its log", for a session that may not be the rank's last)."""
    at_least = "at least " if lower_bound else ""
    return (
        f"rank {rank} was compiling {_what(compiling)}{_why(compiling)} for {at_least}"
        f"{compiling.seconds:.0f} s when {ended} ended"
    )


_NO_BACKWARD_START = "its torch marks no backward compile's start"


def describe_unseen_backward(rank: int, *, ended: str | None = None) -> str:
    """What is known of a rank with no compile known running whose torch marks no backward compile's start:
    ``rank 0: a backward compile may be running (...)``; ``ended``: what ended ("its log", "the run")."""
    if ended is None:
        return f"rank {rank}: a backward compile may be running ({_NO_BACKWARD_START})"
    return (
        f"rank {rank}: a backward compile may have been running when {ended} ended "
        f"({_NO_BACKWARD_START})"
    )


def _what(compiling: Running) -> str:
    """The frame compiling, or "the backward of" it for a lazily compiled backward."""
    name = f"`{compiling.frame.name}`"
    return f"the backward of {name}" if compiling.backward else name


def _why(compiling: Running) -> str:
    """What triggered it: the guard failure of a recompile; "recompile" alone when torch named none then."""
    if compiling.reason is not None:
        return f" (recompile: {_trigger(compiling.reason)})"
    return " (recompile)" if compiling.is_recompile else ""


def _trigger(reason: Reason) -> str:
    """What the guard failure says changed, in words."""
    changed = changed_subject(reason)
    if changed is not None and changed.startswith("dim "):
        dim, _, subject = changed[4:].partition(" of ")
        return f"{reason.category} of `{subject}` dim {dim} changed"
    if changed is not None:
        return f"{changed.replace(' of ', ' of `', 1)}` changed"
    return f"{reason.category} of `{reason.subject}`" if reason.subject else reason.category
