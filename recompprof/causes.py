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

import collections
from typing import NamedTuple

from recompprof.counting import counts_as_recompile, is_limit_hit
from recompprof.events import Compile, Frame, Reason

NO_REASON = "(no reason recorded)"
MAX_REMEMBERED = 4096  # forward compile ids remembered for their backward


class Cause(NamedTuple):
    frame: Frame
    category: str
    subject: str


def forward_cause(event: Compile) -> Cause | None:
    """The cause of a forward compile ``event`` (None for a first compile, a backward or a limit hit)."""
    if not counts_as_recompile(event):
        return None
    # The explaining reason; events written without one marked (by hand, old tools) fall back to the first.
    reasons = event.reasons
    reason: Reason | None = reasons[0] if reasons else None
    for candidate in reasons:  # a loop, not next(generator): the offline commands call this a million times
        if candidate.explains_change:
            reason = candidate
            break
    if reason is None:
        return Cause(event.frame, "other", NO_REASON)
    return Cause(event.frame, reason.category, reason.subject)


class CauseTracker:
    """Remembers each forward's cause (bounded) so its backward's seconds follow it."""

    def __init__(self, max_remembered: int = MAX_REMEMBERED) -> None:
        self._max = max_remembered
        self._of_compile: collections.OrderedDict[tuple[int, str], Cause | None] = collections.OrderedDict()

    def cause_of(self, event: Compile) -> Cause | None:
        """The cause ``event``'s ``duration`` is charged to, or None if it is not lost time."""
        if is_limit_hit(event):
            return None
        key = (event.rank, event.compile_id)
        if event.backward:
            return self._of_compile.get(key)
        cause = forward_cause(event)
        remembered = self._of_compile
        remembered[key] = cause
        remembered.move_to_end(key)
        if len(remembered) > self._max:
            remembered.popitem(last=False)
        return cause
