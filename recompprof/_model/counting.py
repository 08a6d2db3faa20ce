"""What each event counts as, and the per-frame fold: the one set of rules that live totals
(``aggregates``), ingested runs, the report, Prometheus, OTel metrics and spans all call, so they
cannot disagree.

A recompile-limit hit is not a compile: torch refused to compile the frame and ran it eagerly, so
it adds no compile, no recompile and no compile seconds; it is counted once, as a limit hit, from
its ``RecompileLimitHit`` event. A lazily compiled backward is not a compile of its own frame either
(it is counted as a backward compile) but its seconds are compile seconds.
"""

from __future__ import annotations

import collections
import dataclasses
import operator
from collections import Counter
from collections.abc import Callable, Iterable

from recompprof._model.events import Compile, RecompileLimitHit

# What a Compile event counts as, in bits (see ``verdict``).
COUNTED = 1  # a forward compile that happened: what ``compiles`` counts
COSTS = 2  # its ``duration`` is compile time (forward or backward)
RECOMPILE = 4  # a COUNTED compile of a frame that already had compiled code: what ``recompiles`` counts, and
#               the only compile whose explaining reason counts as a change (a limit hit changed nothing)
LIMIT_HIT = 8  # refused by a recompile limit: the frame ran eagerly, and nothing was compiled


def verdict(event: Compile) -> int:
    """What ``event`` counts as: the rules of this module, in one place, as bits.

    The predicates below read it; a fold that needs several of them (the offline commands fold a
    million events) asks once and tests the bits.
    """
    if event.outcome == "limit_hit":
        return LIMIT_HIT
    if event.backward or not event.installed_code:  # a skipped frame's trace compiled nothing
        return COSTS
    return COUNTED | COSTS | RECOMPILE if event.is_recompile else COUNTED | COSTS


def is_limit_hit(event: Compile) -> bool:
    """The compile was refused by a recompile limit (the frame ran eagerly)."""
    return verdict(event) == LIMIT_HIT


def counts_as_compile(event: Compile) -> bool:
    """A forward compile that happened: what ``compiles`` counts."""
    return bool(verdict(event) & COUNTED)


def counts_as_recompile(event: Compile) -> bool:
    """A compile of a frame that already had compiled code: what ``recompiles`` counts."""
    return bool(verdict(event) & RECOMPILE)


def costs_seconds(event: Compile) -> bool:
    """Its ``duration`` is compile time (forward or backward; a limit hit compiled nothing)."""
    return bool(verdict(event) & COSTS)


def steady_state_recompile(event: Compile) -> bool:
    """A recompile past the warm-up: what ``steady_state_recompiles`` counts (a limit hit or a backward is none)."""
    return event.steady_state and counts_as_recompile(event)


def recompile_attempt(event: Compile) -> bool:
    """A forward recompile, or one the recompile limit refused: what ``assert_no_recompiles`` forbids
    (a refused recompile still means the code changed what it was compiled for)."""
    return not event.backward and bool(verdict(event) & (RECOMPILE | LIMIT_HIT))


@dataclasses.dataclass(kw_only=True)
class FrameCounts:
    """The per-frame counts every consumer keeps (live totals and the report extend it)."""

    compiles: int = 0
    recompiles: int = 0
    steady_state_recompiles: int = 0
    # recompiles whose steady-state verdict is unknown (``Compile.steady_state_unknown``): counted apart,
    # never as steady state
    steady_state_unknown: int = 0
    backward_compiles: int = 0
    compile_seconds: float = 0.0  # every compile of the frame, backward included
    guard_failures: Counter[str] = dataclasses.field(
        default_factory=Counter
    )  # by category, one per failing entry
    limit_hits: Counter[str] = dataclasses.field(default_factory=Counter)  # by limit

    def merge(self, part: FrameCounts) -> None:
        """Add the counts of the same frame from other events (a later part, another rank)."""
        self.compiles += part.compiles
        self.recompiles += part.recompiles
        self.steady_state_recompiles += part.steady_state_recompiles
        self.steady_state_unknown += part.steady_state_unknown
        self.backward_compiles += part.backward_compiles
        self.compile_seconds += part.compile_seconds
        self.guard_failures.update(part.guard_failures)
        self.limit_hits.update(part.limit_hits)


_CATEGORY = operator.attrgetter("category")
# Counter.update's own counting loop (C), without update's Mapping check. Measured on the 262,196 reasons
# of 58,347 compile events (bench_scale, 2 ranks x 50,000 events): 36 ms against 50 ms with Counter.update,
# about 1.3 % of the report command's CPU time. CPython-private: where it is missing, Counter.update.
_count_elements: Callable[[Counter[str], Iterable[str]], None] = getattr(
    collections, "_count_elements", Counter.update
)


def fold_compile(counts: FrameCounts, event: Compile) -> int:
    """Add one ``Compile`` event of the frame to its counts; returns its :func:`verdict`."""
    found = verdict(event)
    if event.backward:
        counts.backward_compiles += 1
    elif found & COUNTED:
        counts.compiles += 1
        if found & RECOMPILE:
            counts.recompiles += 1
            if steady_state_recompile(event):
                counts.steady_state_recompiles += 1
            elif event.steady_state_unknown is not None:
                counts.steady_state_unknown += 1
    if event.reasons:
        _count_elements(counts.guard_failures, map(_CATEGORY, event.reasons))
    if (
        event.reasons_omitted
    ):  # rare: skip the empty update (the offline commands fold a million events)
        counts.guard_failures.update(event.reasons_omitted)
    if found & COSTS:
        counts.compile_seconds += event.duration
    return found


def fold_limit_hit(counts: FrameCounts, event: RecompileLimitHit) -> None:
    """Add one ``RecompileLimitHit`` of the frame to its counts."""
    counts.limit_hits[event.limit] += 1
