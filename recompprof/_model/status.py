"""What a session is doing now: :meth:`recompprof.Session.status`."""

from __future__ import annotations

import dataclasses

from recompprof._model.events import CompileStart, Reason, Running
from recompprof._model.explaining import changed_subject


@dataclasses.dataclass(frozen=True)
class Status:
    """One rank's state at the moment it was asked: its step and the compile running on it, if any."""

    rank: int
    step: int
    compiling: Running | None  # None: no compile is running on this rank


def running(start: CompileStart | None, now: float) -> Running | None:
    """The running compile that began with ``start``, as of ``now``."""
    if start is None:
        return None
    return Running(frame=start.frame, compile_id=start.compile_id, started=start.time,
                   seconds=max(0.0, now - start.time), reason=start.reason)


def describe(rank: int, compiling: Running) -> str:
    """One line for people: ``rank 1 compiling `Model.forward` (recompile: size of `L['x']` dim 0 changed), 42 s``."""
    why = f" (recompile: {_trigger(compiling.reason)})" if compiling.reason is not None else ""
    return f"rank {rank} compiling `{compiling.frame.name}`{why}, {compiling.seconds:.0f} s"


def _trigger(reason: Reason) -> str:
    """What the guard failure says changed, in words."""
    changed = changed_subject(reason)
    if changed is not None and changed.startswith("dim "):
        dim, _, subject = changed[4:].partition(" of ")
        return f"{reason.category} of `{subject}` dim {dim} changed"
    if changed is not None:
        return f"{changed.replace(' of ', ' of `', 1)}` changed"
    return f"{reason.category} of `{reason.subject}`" if reason.subject else reason.category
