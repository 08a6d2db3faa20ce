"""Which cause a compile's seconds are charged to: the one rule the aggregates, the report, ingested
runs, metrics and spans all call, so they cannot disagree.

A *cause* is ``(frame, category, subject)`` of the reason that explains a recompile. A recompile's
whole duration (all phases) is charged to it, and so is the duration of its lazily compiled
backward, which shares the forward's compile id. First compiles are not lost time (the job needs
them once) and a recompile-limit hit is not a compile (``recompprof.counting``): neither has a
cause. A recompile whose reason torch did not report is charged to ``other`` / :data:`NO_REASON` so
the seconds still add up.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from recompprof.counting import counts_as_recompile, is_limit_hit
from recompprof.events import Compile, Frame, Reason

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
    for reason in reasons:  # a loop, not next(generator): the offline commands call this a million times
        if reason.explains_change:
            return reason
    return reasons[0] if reasons else None


def forward_cause(event: Compile) -> Cause | None:
    """The cause of a forward compile ``event`` (None for a first compile, a backward or a limit hit)."""
    if not counts_as_recompile(event):
        return None
    reason = explaining_reason(event.reasons)
    if reason is None:
        return _cause((event.frame, "other", NO_REASON))
    return _cause((event.frame, reason.category, reason.subject))


class CauseTracker:
    """Remembers each forward's cause (bounded) so its backward's seconds follow it."""

    def __init__(self, max_remembered: int = MAX_REMEMBERED) -> None:
        self._max = max_remembered
        # Oldest first (a plain dict keeps insertion order; re-inserting a key makes it the newest).
        self._of_compile: dict[tuple[int, str], Cause | None] = {}

    def cause_of(self, event: Compile) -> Cause | None:
        """The cause ``event``'s ``duration`` is charged to, or None if it is not lost time."""
        if is_limit_hit(event):
            return None
        key = (event.rank, event.compile_id)
        remembered = self._of_compile
        if event.backward:
            return remembered.get(key)
        cause = forward_cause(event)
        if remembered.pop(key, _ABSENT) is _ABSENT and len(remembered) >= self._max:
            del remembered[next(iter(remembered))]
        remembered[key] = cause
        return cause

    def remembers(self, event: Compile) -> bool:
        """A forward with ``event``'s rank and compile id is remembered (a backward's lookup found it)."""
        return (event.rank, event.compile_id) in self._of_compile
