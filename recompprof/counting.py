"""What each event counts as, and the per-frame fold: the one set of rules that live totals
(``aggregates``), ingested runs, the report, Prometheus, OTel metrics and spans all call, so they
cannot disagree.

A recompile-limit hit is not a compile: torch refused to compile the frame and ran it eagerly, so
it adds no compile, no recompile and no compile seconds; it is counted once, as a limit hit, from
its ``RecompileLimitHit`` event. A lazily compiled backward is not a compile of its own frame either
(it is counted as a backward compile) but its seconds are compile seconds.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from recompprof.events import Compile, RecompileLimitHit


def is_limit_hit(event: Compile) -> bool:
    """The compile was refused by a recompile limit (the frame ran eagerly)."""
    return event.outcome == "limit_hit"


def counts_as_compile(event: Compile) -> bool:
    """A forward compile that happened: what ``compiles`` counts."""
    return not event.backward and not is_limit_hit(event)


def counts_as_recompile(event: Compile) -> bool:
    """A compile of a frame that already had compiled code: what ``recompiles`` counts."""
    return counts_as_compile(event) and event.is_recompile


def costs_seconds(event: Compile) -> bool:
    """Its ``duration`` is compile time (forward or backward; a limit hit compiled nothing)."""
    return not is_limit_hit(event)


def recompile_attempt(event: Compile) -> bool:
    """A forward recompile, or one the recompile limit refused: what ``assert_no_recompiles`` forbids
    (a refused recompile still means the code changed what it was compiled for)."""
    return not event.backward and (event.is_recompile or is_limit_hit(event))


@dataclasses.dataclass(kw_only=True)
class FrameCounts:
    """The per-frame counts every consumer keeps (live totals and the report extend it)."""

    compiles: int = 0
    recompiles: int = 0
    steady_state_recompiles: int = 0
    backward_compiles: int = 0
    compile_seconds: float = 0.0  # every compile of the frame, backward included
    guard_failures: Counter[str] = dataclasses.field(default_factory=Counter)  # by category, one per failing entry
    limit_hits: Counter[str] = dataclasses.field(default_factory=Counter)  # by limit


# What fold_compile found an event counts as (bits), so a caller folding more of it asks nothing twice.
COUNTED = 1  # counts_as_compile
COSTS = 2  # costs_seconds


def fold_compile(counts: FrameCounts, event: Compile) -> int:
    """Add one ``Compile`` event of the frame to its counts; returns :data:`COUNTED` | :data:`COSTS` bits."""
    found = 0
    if event.backward:
        counts.backward_compiles += 1
    elif counts_as_compile(event):
        found = COUNTED
        counts.compiles += 1
        if event.is_recompile:
            counts.recompiles += 1
            if event.steady_state:
                counts.steady_state_recompiles += 1
    reasons = event.reasons
    if reasons:  # the offline commands fold a million events: locals, and no loop set-up for none
        by_category = counts.guard_failures
        for reason in reasons:
            category = reason.category
            by_category[category] = by_category.get(category, 0) + 1  # a third faster than Counter's +=, same count
    if event.reasons_omitted:  # rare: skip the empty update (the offline commands fold a million events)
        counts.guard_failures.update(event.reasons_omitted)
    if costs_seconds(event):
        found |= COSTS
        counts.compile_seconds += event.duration
    return found


def fold_limit_hit(counts: FrameCounts, event: RecompileLimitHit) -> None:
    """Add one ``RecompileLimitHit`` of the frame to its counts."""
    counts.limit_hits[event.limit] += 1
