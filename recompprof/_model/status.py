"""What a session is doing now: :meth:`recompprof.Session.status`."""

from __future__ import annotations

import dataclasses

from recompprof._model.events import CompileStart, Running


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
