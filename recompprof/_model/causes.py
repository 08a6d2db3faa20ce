"""Which cause a compile's seconds are charged to: the one rule the aggregates, the report, ingested
runs, metrics and spans all call, so they cannot disagree.

A *cause* is ``(frame, category, subject)`` of the reason that explains a recompile. A recompile's
whole duration (all phases) is charged to it, and so is the duration of its lazily compiled
backward, which shares the forward's compile id. First compiles are not lost time (the job needs
them once) and a recompile-limit hit is not a compile (``recompprof._model.counting``): neither has a
cause. A recompile whose reason torch did not report is charged to ``other`` / :data:`NO_REASON` so
the seconds still add up.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import NamedTuple

from recompprof._model.counting import COSTS, RECOMPILE, verdict
from recompprof._model.events import Compile, Frame, Reason

NO_REASON = "(no reason recorded)"
MAX_REMEMBERED = 4096  # forward compile ids remembered for their backward
_ABSENT = object()


class Cause(NamedTuple):
    frame: Frame
    category: str
    subject: str


# Cause(frame, category, subject) without NamedTuple's keyword-handling __new__: 2x cheaper, same tuple.
_cause = functools.partial(tuple.__new__, Cause)


def explaining_reason(reasons: Sequence[Reason]) -> Reason | None:
    """The reason that explains a recompile; events written without one marked (by hand, old tools)
    fall back to the first, and None when there are none."""
    for (
        reason
    ) in reasons:  # a loop, not next(generator): the offline commands call this a million times
        if reason.explains_change:
            return reason
    return reasons[0] if reasons else None


def forward_cause(event: Compile) -> Cause | None:
    """The cause of a forward compile ``event`` (None for a first compile, a backward or a limit hit)."""
    return _forward_cause(event) if verdict(event) & RECOMPILE else None


def _forward_cause(recompile: Compile) -> Cause:
    reason = explaining_reason(recompile.reasons)
    if reason is None:
        return _cause((recompile.frame, "other", NO_REASON))
    return _cause((recompile.frame, reason.category, reason.subject))


class CauseTracker:
    """Remembers each forward's cause so its backward's seconds follow it: the newest ``max_remembered``
    forwards at most, and never fewer than the newest three quarters of that."""

    def __init__(self, max_remembered: int = MAX_REMEMBERED) -> None:
        if max_remembered < 1:
            raise ValueError(f"max_remembered must be at least 1, got {max_remembered}")
        self._max = max_remembered
        # Oldest first (a plain dict keeps insertion order; re-inserting a key makes it the newest).
        self._of_compile: dict[tuple[int, str], Cause | None] = {}
        self._pids: dict[int, int] = {}  # each rank's process, from its latest session_start

    def start(self, rank: int, pid: int) -> None:
        """A session of ``rank`` starts in process ``pid``. A backward runs in its forward's process,
        and a new process numbers its compiles afresh: its backwards never take the causes of an
        earlier process's forwards (a restarted rank's logs read together, or its own log alone,
        give it the same causes)."""
        if self._pids.get(rank, pid) != pid:
            self._of_compile = {k: v for k, v in self._of_compile.items() if k[0] != rank}
        self._pids[rank] = pid

    def cause_of(self, event: Compile, found: int | None = None) -> Cause | None:
        """The cause ``event``'s ``duration`` is charged to, or None if it is not lost time.

        ``found``: the event's :func:`recompprof._model.counting.verdict`, where the caller has it already.
        """
        if found is None:
            found = verdict(event)
        if not found & COSTS:  # a limit hit compiled nothing
            return None
        key = (event.rank, event.compile_id)
        remembered = self._of_compile
        if event.backward:
            return remembered.get(key)
        cause = _forward_cause(event) if found & RECOMPILE else None
        if remembered.pop(key, _ABSENT) is _ABSENT and len(remembered) >= self._max:
            # Forget the oldest quarter at once: deleting a dict's first key one compile at a time leaves
            # holes that finding the next first key walks past (microseconds a compile, once full).
            self._of_compile = remembered = dict(
                itertools.islice(remembered.items(), max(1, self._max // 4), None)
            )
        remembered[key] = cause
        return cause

    def remembers(self, event: Compile) -> bool:
        """A forward with ``event``'s rank and compile id is remembered (a backward's lookup found it)."""
        return (event.rank, event.compile_id) in self._of_compile
