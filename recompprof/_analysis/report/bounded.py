"""The report's bounds, and the two rules a merge of bounded figures follows.

Every figure keyed by something the input chooses (frames, reason groups, causes, graph-break places,
traced functions, guard sets) is bounded, so one pathological run cannot exhaust memory. The fold
states of the report (:mod:`recompprof._analysis.report.model` and the modules it composes) keep the bounds
while they fold, and merge with :func:`new_keys` and :func:`extend` so that a merge of parts gives
what one fold over them gives, or declines (:class:`Unmergeable`) where the parts cannot say.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The signals a run's counts come from: when one is dark, the report says so and ``check`` refuses the run.
CAPTURE_SIGNALS = ("compile_metrics", "guard_failures", "graph_breaks", "profile_backend")
MAX_FRAMES = 10_000
MAX_GROUPS_PER_FRAME = 100
MAX_STEPS_LISTED = 50
MAX_LISTED = 50
MAX_CAUSES = 10_000  # past this, new causes of a frame fold into "(other subjects)"
# user functions whose Dynamo trace time is kept (profile mode, dynamo_profiler)
MAX_FUNCTIONS = 1_000
MAX_GUARD_SETS = 10_000  # distinct guard sets remembered per frame and rank
# distinct graph-break groups (reason x place x eager); later new ones fold into one
MAX_BREAK_GROUPS = 1_000
MAX_BREAK_HINTS = 3  # torch's hints kept per graph-break group
OTHER_BREAKS = ("(graph breaks at more places)", "", False)


class Unmergeable(Exception):
    """The parts do not determine what one fold over them would give."""


def check(ok: bool) -> None:
    """Decline the merge unless ``ok``."""
    if not ok:
        raise Unmergeable


def new_keys(into: dict[Any, Any], part: dict[Any, Any], bound: int) -> list[Any]:
    """The keys of ``part`` new to ``into``, after checking that one fold would have kept them all.

    A part holding ``bound`` keys may have dropped some; a union past ``bound`` would.
    """
    check(len(part) < bound)
    new = [key for key in part if key not in into]
    check(len(into) + len(new) <= bound)
    return new


def extend(into: list[Any], part: list[Any], bound: int) -> None:
    """A later part's list after an earlier one's, cut at ``bound``: what one fold appends."""
    into.extend(part[: max(0, bound - len(into))])


@dataclasses.dataclass(frozen=True)
class MergeContext:
    """What every family's ``merge`` may need to know of the report folded so far and the part added
    to it, computed once per merge (:meth:`recompprof._analysis.report.model.Report.merge`)."""

    # Ranks that compiled in the events before the part's (where a backward's forward may be).
    earlier_ranks: frozenset[int]
    # Ranks with a ``session_start`` before the part.
    started: frozenset[int]
    # Every rank with an event in the part.
    touched: frozenset[int]
