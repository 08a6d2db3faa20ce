"""Rank divergence: frames that compile differently on some ranks of a job than on the others.

A rank that recompiles (or hits the recompile limit and falls back to eager) while its peers have
already entered the next collective is the classic cause of NCCL timeouts and hangs; after the fact
it shows as a frame whose per-rank behaviour differs. This module reads the per-rank fields of a
:class:`~recompprof._analysis.report.model.Report` (so it costs one pass over the events, however many ranks),
finds the frames whose recompile count, limit hits or set of reason categories differ across ranks,
and names the odd ranks out and the step at which each first went its own way
(:mod:`recompprof._analysis.render.divergence` draws that as a per-rank matrix and a "diverging" table).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from recompprof._analysis.report import bounded
from recompprof._analysis.report.bounded import MAX_GUARD_SETS, MAX_STEPS_LISTED
from recompprof._model.events import Compile

ASPECTS = ("recompiles", "limit hits", "reason categories")
# A process as a fold tells it apart: its session's pid (-1 where no session_start said) and first
# time (``sessions._Session.process``).
Process = tuple[int, float]


class RankFold:
    """A frame's compiles on one rank while the fold runs (the fold's state, not a figure): attributes,
    not a lookup per figure in the per-rank dicts, which :meth:`RankFigures.finish` fills from it."""

    __slots__ = (
        "category_first_step",
        "categories",
        "compiles",
        "entries",
        "first_recompile_step",
        "guard_sets",
        "recompiles",
        "steps",
    )

    def __init__(self) -> None:
        self.compiles = 0
        self.entries = 0
        self.recompiles = 0
        self.first_recompile_step: int | None = None
        self.steps: list[int] = []
        # The guard sets of each process's compiles (keyed by its session: ``_Session.process``), as a
        # fingerprint names objects by their ids in that process alone; None: no compile had one.
        self.guard_sets: dict[Process, set[str]] | None = None
        self.categories: dict[str, int] = {}
        self.category_first_step: dict[str, int] = {}


_BY_RANK = (
    "compiles_by_rank",
    "cache_entries_by_rank",
    "guard_sets_by_rank",
    "recompiles_by_rank",
    "first_recompile_step_by_rank",
    "recompile_steps_by_rank",
    "categories_by_rank",
    "category_first_step_by_rank",
    "limit_hits_by_rank",
    "first_limit_hit_step_by_rank",
)


@dataclasses.dataclass
class RankFigures:
    """What one frame did on each rank: the figures this module compares (a part of each frame's report)."""

    compiles_by_rank: Counter[int] = dataclasses.field(default_factory=Counter)
    # Each rank's distinct guard sets, per process (a restarted rank has one per process): a guard
    # set's fingerprint holds the ids of the objects its guards check, so it is compared within one
    # process only, and a process's count is what a frame needed (FrameReport.variants_needed).
    guard_sets_by_rank: dict[int, dict[Process, set[str]]] = dataclasses.field(default_factory=dict)
    # The most cache entries torch held for the frame after one of its compiles (the entries it was
    # counted against, plus the one it installed): entries that differ only by a guard the guard-set
    # fingerprint does not see (an ``is`` guard) are still entries, and the limit counts them.
    cache_entries_by_rank: dict[int, int] = dataclasses.field(default_factory=dict)
    recompiles_by_rank: Counter[int] = dataclasses.field(default_factory=Counter)
    first_recompile_step_by_rank: dict[int, int] = dataclasses.field(default_factory=dict)
    # Steps bounded by MAX_STEPS_LISTED per rank.
    recompile_steps_by_rank: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    categories_by_rank: dict[int, Counter[str]] = dataclasses.field(default_factory=dict)
    category_first_step_by_rank: dict[int, dict[str, int]] = dataclasses.field(default_factory=dict)
    limit_hits_by_rank: Counter[int] = dataclasses.field(default_factory=Counter)
    first_limit_hit_step_by_rank: dict[int, int] = dataclasses.field(default_factory=dict)

    def add_limit_hit(self, rank: int, step: int) -> None:
        self.limit_hits_by_rank[rank] += 1
        self.first_limit_hit_step_by_rank.setdefault(rank, step)

    def finish(self, folds: dict[int, RankFold]) -> None:
        """Fill the per-rank figures from the fold's per-rank state (ranks in order)."""
        for rank in sorted(folds):
            fold = folds[rank]
            self.compiles_by_rank[rank] += fold.compiles
            if fold.guard_sets is not None:
                self.guard_sets_by_rank[rank] = fold.guard_sets
            if fold.entries:
                self.cache_entries_by_rank[rank] = max(
                    fold.entries, self.cache_entries_by_rank.get(rank, 0)
                )
            if fold.recompiles:
                self.recompiles_by_rank[rank] += fold.recompiles
                self.first_recompile_step_by_rank[rank] = fold.first_recompile_step or 0
                self.recompile_steps_by_rank[rank] = fold.steps
            if fold.categories:
                self.categories_by_rank[rank] = Counter(fold.categories)
                self.category_first_step_by_rank[rank] = fold.category_first_step
        self.sort()

    def sort(self) -> None:
        """Each per-rank dict in rank order (so a report does not depend on which rank came first)."""
        for field in _BY_RANK:
            by_rank = getattr(self, field)
            if len(by_rank) > 1:
                setattr(
                    self, field, type(by_rank)(dict(sorted(by_rank.items())))
                )  # a Counter takes a mapping

    def merge(self, part: RankFigures) -> None:
        """Add the per-rank figures of the same frame folded from later events."""
        self.compiles_by_rank.update(part.compiles_by_rank)
        for rank, processes in part.guard_sets_by_rank.items():
            held = self.guard_sets_by_rank.setdefault(rank, {})
            for process, sets in processes.items():
                seen = held.setdefault(process, set())
                bounded.check(len(sets) < MAX_GUARD_SETS and len(seen | sets) <= MAX_GUARD_SETS)
                seen |= sets
        for rank, entries in part.cache_entries_by_rank.items():
            self.cache_entries_by_rank[rank] = max(entries, self.cache_entries_by_rank.get(rank, 0))
        self.recompiles_by_rank.update(part.recompiles_by_rank)
        for rank, step in part.first_recompile_step_by_rank.items():
            self.first_recompile_step_by_rank.setdefault(rank, step)
        for rank, steps in part.recompile_steps_by_rank.items():
            bounded.extend(
                self.recompile_steps_by_rank.setdefault(rank, []), steps, MAX_STEPS_LISTED
            )
        for rank, categories in part.categories_by_rank.items():
            self.categories_by_rank.setdefault(rank, Counter()).update(categories)
        for rank, firsts in part.category_first_step_by_rank.items():
            known = self.category_first_step_by_rank.setdefault(rank, {})
            for category, step in firsts.items():
                known.setdefault(category, step)
        self.limit_hits_by_rank.update(part.limit_hits_by_rank)
        for rank, step in part.first_limit_hit_step_by_rank.items():
            self.first_limit_hit_step_by_rank.setdefault(rank, step)


def fold_rank_compile(
    folds: dict[int, RankFold], event: Compile, explained: list[str] | None, process: Process
) -> None:
    """Fold a counted compile (a report folded with detail) into its rank's fold state; ``explained``:
    the categories of its reasons that explain a recompile; ``process``: the session it ran in."""
    fold = folds.get(event.rank)
    if fold is None:
        fold = folds[event.rank] = RankFold()
    fold.compiles += 1
    if event.cache_entries is not None and event.installed_code and event.outcome == "ok":
        fold.entries = max(fold.entries, event.cache_entries + 1)
    if event.guard_set is not None:
        if fold.guard_sets is None:
            fold.guard_sets = {}
        sets = fold.guard_sets.get(process)
        if sets is None:
            sets = fold.guard_sets[process] = set()
        if len(sets) < MAX_GUARD_SETS:
            sets.add(event.guard_set)
    if not event.is_recompile:
        return
    step = event.step or 0
    fold.recompiles += 1
    if fold.first_recompile_step is None:
        fold.first_recompile_step = step
    if len(fold.steps) < MAX_STEPS_LISTED:
        fold.steps.append(step)
    for category in (
        explained or ()
    ):  # what the rank's recompiles were explained by, and from which step
        fold.categories[category] = fold.categories.get(category, 0) + 1
        fold.category_first_step.setdefault(category, step)


if TYPE_CHECKING:  # what this module reads of a report, as types only

    class RankedFrame(Protocol):
        """What this module reads of a frame's report: its identity, totals and :class:`RankFigures`."""

        @property
        def label(self) -> str: ...
        @property
        def key(self) -> str: ...
        @property
        def compiles(self) -> int: ...
        @property
        def recompiles(self) -> int: ...
        @property
        def ranks(self) -> RankFigures: ...

    class RankedRun(Protocol):
        """What this module reads of a report's run figures: the ranks that started a session."""

        @property
        def ranks(self) -> set[int]: ...

    class RankedReport(Protocol):
        """What this module reads of a report: its ranks and frames."""

        @property
        def run(self) -> RankedRun: ...
        @property
        def frames(self) -> Mapping[str, RankedFrame]: ...


@dataclasses.dataclass(frozen=True)
class RankCell:
    """What one frame did on one rank."""

    compiles: int = 0
    recompiles: int = 0
    limit_hits: int = 0
    categories: frozenset[str] = frozenset()

    @property
    def behaviour(self) -> tuple[int, int, frozenset[str]]:
        """The part of a cell that must agree across ranks (compiles may differ benignly, e.g. an eval-only rank)."""
        return self.recompiles, self.limit_hits, self.categories


@dataclasses.dataclass
class Divergence:
    """One frame whose behaviour differs across ranks."""

    frame: RankedFrame
    ranks: list[int]  # the odd ranks out
    baseline_ranks: list[int]  # the ranks that behaved like the majority
    baseline: RankCell
    aspects: list[str]  # subset of ASPECTS that differ
    first_steps: dict[
        int, int | None
    ]  # odd rank -> first step of its divergent recompile or limit hit
    cells: dict[int, RankCell]


def all_ranks(report: RankedReport) -> list[int]:
    """Ranks that started a session or recorded a compile in ``report``."""
    ranks = set(report.run.ranks)
    for frame in report.frames.values():
        ranks.update(frame.ranks.compiles_by_rank)
        ranks.update(frame.ranks.limit_hits_by_rank)
    return sorted(ranks)


def cell(frame: RankedFrame, rank: int) -> RankCell:
    """The cell of ``frame`` on ``rank`` (zeros when the rank never compiled it)."""
    return RankCell(
        compiles=frame.ranks.compiles_by_rank.get(rank, 0),
        recompiles=frame.ranks.recompiles_by_rank.get(rank, 0),
        limit_hits=frame.ranks.limit_hits_by_rank.get(rank, 0),
        categories=frozenset(frame.ranks.categories_by_rank.get(rank, ())),
    )


def find(report: RankedReport) -> list[Divergence]:
    """Diverging frames of ``report`` (fold events with ``recompprof._analysis.report.fold.build_report`` first), most recompiles first."""
    ranks = all_ranks(report)
    if len(ranks) < 2:
        return []
    found = [d for f in report.frames.values() if (d := _diverges(f, ranks)) is not None]
    return sorted(
        found,
        key=lambda d: (-sum(c.recompiles + c.limit_hits for c in d.cells.values()), d.frame.label),
    )


def _diverges(frame: RankedFrame, ranks: Sequence[int]) -> Divergence | None:
    cells = {r: cell(frame, r) for r in ranks}
    behaviours = Counter(c.behaviour for c in cells.values())
    if len(behaviours) < 2:
        return None
    # The majority is the baseline; on a tie the quietest behaviour is, so the ranks that recompiled are named.
    baseline_behaviour = min(
        behaviours, key=lambda b: (-behaviours[b], b[0] + b[1], len(b[2]), sorted(b[2]))
    )
    baseline_ranks = [r for r in ranks if cells[r].behaviour == baseline_behaviour]
    baseline = cells[baseline_ranks[0]]
    odd = [r for r in ranks if cells[r].behaviour != baseline_behaviour]
    aspects = [
        name
        for name, index in zip(ASPECTS, range(3))
        if any(cells[r].behaviour[index] != baseline_behaviour[index] for r in odd)
    ]
    return Divergence(
        frame,
        odd,
        baseline_ranks,
        baseline,
        aspects,
        {r: _first_divergent_step(frame, r, baseline_ranks[0]) for r in odd},
        cells,
    )


def _first_divergent_step(frame: RankedFrame, rank: int, baseline_rank: int) -> int | None:
    """The earliest step at which ``rank`` did something the baseline rank did not do."""
    candidates: list[int] = []
    mine, theirs = (
        Counter(frame.ranks.recompile_steps_by_rank.get(rank, [])),
        Counter(frame.ranks.recompile_steps_by_rank.get(baseline_rank, [])),
    )
    extra = mine - theirs
    if extra:
        candidates.append(min(extra))
    if frame.ranks.limit_hits_by_rank.get(rank, 0) > frame.ranks.limit_hits_by_rank.get(
        baseline_rank, 0
    ):
        step = frame.ranks.first_limit_hit_step_by_rank.get(rank)
        if step is not None:
            candidates.append(step)
    theirs_categories = frame.ranks.categories_by_rank.get(baseline_rank, Counter())
    for category, step in frame.ranks.category_first_step_by_rank.get(rank, {}).items():
        if category not in theirs_categories:
            candidates.append(step)
    if not candidates and mine != theirs:
        # Fewer recompiles than the baseline: the step where the baseline recompiled and this rank did not.
        missing = theirs - mine
        if missing:
            candidates.append(min(missing))
    return min(candidates) if candidates else None
