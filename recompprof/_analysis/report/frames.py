"""The report's per-frame figures: a frame's counts, reason groups, recompile detail and phases.

:class:`FrameReport` is one frame's figures, with ``add`` and ``merge`` side by side; it holds its
counts (:class:`~recompprof._model.counting.FrameCounts`) and what it did on each rank
(:class:`~recompprof._analysis.report.divergence.RankFigures`). :class:`Frames` is the report's bounded
map of them (the ``frames`` family of the :class:`~recompprof._analysis.report.model.Report`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping, ValuesView

from recompprof._analysis.report import bounded
from recompprof._analysis.report.bounded import (
    MAX_FRAMES,
    MAX_GROUPS_PER_FRAME,
    MAX_STEPS_LISTED,
    MergeContext,
)
from recompprof._analysis.report.divergence import (
    Process,
    RankFigures,
    RankFold,
    fold_rank_compile,
)
from recompprof._model.causes import explaining_reason
from recompprof._model.counting import (
    COSTS,
    COUNTED,
    RECOMPILE,
    FrameCounts,
    fold_compile,
    fold_limit_hit,
)
from recompprof._model.events import Compile, Frame, GraphBreak, Reason, RecompileLimitHit
from recompprof._model.explaining import changed_subject
from recompprof._model.steady import example, zero_one
from recompprof._model.vocabulary import PHASES, Category

# The subject of the guard failures an event counted past its per-event cap but did not list (the
# report's, and the lake's guard_failures.subject of such a row).
OMITTED_SUBJECT = "(more cache entries)"


@dataclasses.dataclass
class ReasonGroup:
    """Guard failures of one frame with one category and subject."""

    category: str
    subject: str
    changes: int = 0  # recompiles this reason explains
    failures: int = 0  # guard failures, one per failing cache entry
    example: str = ""
    # The subject by the wrapped function's parameters (``Reason.parameter``), as its first reason named it.
    parameter: str = ""


@dataclasses.dataclass
class FrameReport:
    """One frame's counts (folded by :func:`recompprof._model.counting.fold_compile`), what it did on
    each rank, and the report's detail."""

    label: str  # displayed (events.Frame.label)
    name: str
    file: str
    line: int
    # the frame's identity (events.Frame.key): what the report, merges and diff match on
    key: str = ""
    counts: FrameCounts = dataclasses.field(default_factory=FrameCounts)
    ranks: RankFigures = dataclasses.field(default_factory=RankFigures)
    # Dims torch's automatic dynamic shapes made dynamic, one per expected warm-up recompile (bounded).
    automatic_dynamic: list[str] = dataclasses.field(default_factory=list)
    automatic_dynamic_recompiles: int = 0
    # Dims and scalars (recompprof._model.explaining.changed_subject) that explained a recompile that was no automatic
    # dynamic warm-up, with that recompile's reason text (bounded): one also in ``automatic_dynamic`` was
    # made dynamic and then specialised again by the traced code.
    changed_again: dict[str, str] = dataclasses.field(default_factory=dict)
    recompile_steps: list[int] = dataclasses.field(default_factory=list)
    recompile_steps_total: int = 0
    reasons: dict[tuple[str, str], ReasonGroup] = dataclasses.field(default_factory=dict)
    graph_breaks: int = 0
    failures: Counter[str] = dataclasses.field(default_factory=Counter)
    phases: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    # The frame's counts, read as the frame's own (``frame.recompiles``): what every reader asks first.
    @property
    def compiles(self) -> int:
        return self.counts.compiles

    @property
    def recompiles(self) -> int:
        return self.counts.recompiles

    @property
    def steady_state_recompiles(self) -> int:
        return self.counts.steady_state_recompiles

    @property
    def steady_state_unknown(self) -> int:
        """Recompiles whose steady-state verdict is unknown, counted apart (docs/steady-state.md)."""
        return self.counts.steady_state_unknown

    @property
    def backward_compiles(self) -> int:
        return self.counts.backward_compiles

    @property
    def compile_seconds(self) -> float:
        return self.counts.compile_seconds

    @property
    def guard_failures(self) -> Counter[str]:
        return self.counts.guard_failures

    @property
    def limit_hits(self) -> Counter[str]:
        return self.counts.limit_hits

    @property
    def variants_needed(self) -> int:
        """Compiled variants one process needed: the most cache entries torch held for the frame, or
        more distinct guard sets in one process where known (profile mode evicts entries it retraces),
        else forward compiles."""
        ranks = self.ranks
        held = max(ranks.cache_entries_by_rank.values(), default=0)
        if ranks.guard_sets_by_rank:
            most = max(len(s) for sets in ranks.guard_sets_by_rank.values() for s in sets.values())
            return max(held, most)
        return held or max(ranks.compiles_by_rank.values(), default=self.compiles)

    def top_reasons(self) -> list[ReasonGroup]:
        return sorted(
            self.reasons.values(), key=lambda g: (-g.changes, -g.failures, g.category, g.subject)
        )

    # -- fold -------------------------------------------------------------------------------------
    def add(
        self, event: Compile, detail: bool, rank_folds: dict[int, RankFold], process: Process
    ) -> tuple[int, Reason | None]:
        """Fold one compile event of this frame (``rank_folds``: the fold's per-rank state of the frame;
        ``process``: the session the compile ran in); returns its
        :func:`recompprof._model.counting.verdict` and its explaining reason
        (:func:`recompprof._model.causes.explaining_reason`, looked for once per compile)."""
        # The hottest code of the offline commands (a million events): one pass over the reasons, locals
        # over attribute lookups; tests/test_report.py and test_one_rule.py pin the result.
        counted = fold_compile(self.counts, event)
        explained: list[str] | None = None  # the categories of the reasons that explain a recompile
        explaining: Reason | None = None
        reasons = event.reasons
        if reasons:
            explaining = explaining_reason(reasons)  # once: the frame and the cause both read it
            groups = self.reasons
            changed = counted & RECOMPILE  # a refused compile (limit hit) changed nothing
            for reason in reasons:
                category = reason.category
                group = groups.get((category, reason.subject))  # the common case, without a call
                if group is None:
                    group = self._group(category, reason.subject, reason.text, reason.parameter)
                group.failures += 1
                if changed and reason.explains_change:
                    group.changes += 1
                    explained = [category] if explained is None else [*explained, category]
        if counted & COUNTED and detail:
            fold_rank_compile(rank_folds, event, explained, process)
            if event.is_recompile:
                self._add_recompile(event, explaining)
        if event.reasons_omitted:
            self._add_omitted(event.reasons_omitted)
        if event.outcome == "failed":
            self.failures[event.fail_type or "unknown"] += 1
        if (
            counted & COSTS and detail and event.phases
        ):  # the report's phases are the frames', summed at the end
            phases = self.phases
            for phase, seconds in event.phases.items():
                phases[phase] += seconds  # every Phase is a key from the start (validated input)
        return counted, explaining

    def _add_recompile(self, event: Compile, reason: Reason | None) -> None:
        """``reason``: the event's explaining reason."""
        if event.automatic_dynamic is not None:
            self.automatic_dynamic_recompiles += 1
            if len(self.automatic_dynamic) < MAX_STEPS_LISTED:
                self.automatic_dynamic.append(event.automatic_dynamic)
        elif (
            len(self.changed_again) < MAX_STEPS_LISTED
            and reason is not None
            and not zero_one(reason)  # torch's own 0/1 rule, not the traced code's specialisation
        ):
            changed = changed_subject(reason)
            if changed is not None:
                self.changed_again.setdefault(changed, reason.text[:300])
        self.recompile_steps_total += 1
        if len(self.recompile_steps) < MAX_STEPS_LISTED:
            self.recompile_steps.append(event.step or 0)

    def _add_omitted(self, omitted: dict[Category, int]) -> None:
        """Guard failures an event counted but did not list (past its per-event cap)."""
        for category, count in omitted.items():
            self._group(category, OMITTED_SUBJECT, "").failures += count

    def _group(
        self, category: str, subject: str, text: str, parameter: str | None = None
    ) -> ReasonGroup:
        key = (category, subject)
        group = self.reasons.get(key)
        if group is None:
            if len(self.reasons) >= MAX_GROUPS_PER_FRAME:
                key = (category, "(other subjects)")
                group = self.reasons.setdefault(key, ReasonGroup(*key))
            else:
                group = self.reasons[key] = ReasonGroup(
                    category, subject, example=example(text), parameter=parameter or ""
                )
        return group

    def add_graph_break(self, event: GraphBreak) -> None:
        self.graph_breaks += event.count

    def add_limit_hit(self, event: RecompileLimitHit) -> None:
        fold_limit_hit(self.counts, event)
        self.ranks.add_limit_hit(event.rank, event.step or 0)

    # -- merge ------------------------------------------------------------------------------------
    def merge(self, part: FrameReport) -> None:
        """Add ``part`` (this frame, folded from later events) as one fold would have."""
        self.counts.merge(part.counts)
        bounded.extend(self.automatic_dynamic, part.automatic_dynamic, MAX_STEPS_LISTED)
        self.automatic_dynamic_recompiles += part.automatic_dynamic_recompiles
        for changed, text in part.changed_again.items():
            if len(self.changed_again) < MAX_STEPS_LISTED:
                self.changed_again.setdefault(changed, text)
        bounded.extend(self.recompile_steps, part.recompile_steps, MAX_STEPS_LISTED)
        self.recompile_steps_total += part.recompile_steps_total
        for key in bounded.new_keys(self.reasons, part.reasons, MAX_GROUPS_PER_FRAME):
            self.reasons[key] = dataclasses.replace(
                part.reasons[key], changes=0, failures=0
            )  # the earliest example stays
        for key, group in part.reasons.items():
            self.reasons[key].changes += group.changes
            self.reasons[key].failures += group.failures
        self.graph_breaks += part.graph_breaks
        self.failures.update(part.failures)
        for phase, seconds in part.phases.items():
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        self.ranks.merge(part.ranks)


@dataclasses.dataclass
class Frames(Mapping[str, FrameReport]):
    """The report's frames, by key (events.Frame.key), bounded by ``MAX_FRAMES`` (later new frames are
    counted as dropped); read as a mapping of the frames by key."""

    by_key: dict[str, FrameReport] = dataclasses.field(default_factory=dict)
    dropped: int = 0
    # The frames' figures summed (events of dropped frames count in neither): compile seconds by phase, and
    # recompiles by the category of the reason that explains them.
    phases: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    categories: Counter[str] = dataclasses.field(default_factory=Counter)

    def __getitem__(self, key: str) -> FrameReport:
        return self.by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_key)

    def __len__(self) -> int:
        return len(self.by_key)

    def values(self) -> ValuesView[FrameReport]:
        return self.by_key.values()

    def add(self, frame: Frame) -> FrameReport | None:
        """The entry for ``frame`` (an event's Frame or its view), new if need be; None once
        ``MAX_FRAMES`` are kept (the frame is counted as dropped)."""
        key = frame.key
        found = self.by_key.get(key)
        if found is None:
            if len(self.by_key) >= MAX_FRAMES:
                self.dropped += 1
                return None
            found = self.by_key[key] = FrameReport(
                frame.label, frame.name, frame.file, frame.line, key
            )
        return found

    def finish(self, rank_folds: dict[str, dict[int, RankFold]]) -> None:
        """The per-rank figures of every frame from the fold's per-rank state, in rank order; the frames' sums."""
        for key, frame in self.by_key.items():
            frame.ranks.finish(rank_folds.get(key, {}))
        self._sum()

    def merge(self, part: Frames, ctx: MergeContext) -> None:
        bounded.check(not part.dropped)
        frames = self.by_key
        for key in bounded.new_keys(frames, part.by_key, MAX_FRAMES):
            frame = part.by_key[key]
            frames[key] = FrameReport(frame.label, frame.name, frame.file, frame.line, frame.key)
        for key, frame in part.by_key.items():
            frames[key].merge(frame)
        for frame in frames.values():
            frame.ranks.sort()
        self._sum()

    def _sum(self) -> None:
        phases = dict.fromkeys(PHASES, 0.0)
        categories: Counter[str] = Counter()
        for frame in self.by_key.values():
            for phase, seconds in frame.phases.items():
                phases[phase] += seconds
            for group in frame.reasons.values():
                if group.changes:
                    categories[group.category] += group.changes
        self.phases, self.categories = phases, categories


__all__ = ["FrameReport", "Frames", "ReasonGroup"]
