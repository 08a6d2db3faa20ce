"""The report: what recompiled, why, what it cost and how to fix it, for one or many ranks.

``build_report`` folds a stream of events into a bounded :class:`Report` (streaming, so a million
events need no more memory than a few hundred frames); ``render_text`` draws it as terminal tables.
Recompiles are counted once per recompile, not once per failing cache entry as the old
CompileProfiler did; the reason that *explains* each recompile is counted separately from the guard
failures against older entries.
"""

from __future__ import annotations

import dataclasses
import textwrap
import time
from collections import Counter
from collections.abc import Iterable

from rich import box
from rich.console import Console
from rich.table import Table

from recompprof._analysis import divergence, plaintext
from recompprof._analysis.completeness import Incomplete, LogGap, SessionFold
from recompprof._model.causes import Cause, CauseTracker, explaining_reason
from recompprof._model.compiles import changed_subject
from recompprof._model.counting import COSTS, COUNTED, RECOMPILE, FrameCounts, fold_compile, fold_limit_hit, verdict
from recompprof._model.cudagraphs import SKIP_HINTS
from recompprof._model.events import (
    CACHE_RESULTS,
    CACHES,
    PHASES,
    Category,
    Compile,
    Event,
    GraphBreak,
    short_path,
)

# The signals a run's counts come from: when one is dark, the report says so and ``check`` refuses the run.
CAPTURE_SIGNALS = ("compile_metrics", "guard_failures", "graph_breaks", "profile_backend")

MAX_FRAMES = 10_000
MAX_GROUPS_PER_FRAME = 100
MAX_STEPS_LISTED = 50
MAX_LISTED = 50
MAX_CAUSES = 10_000  # past this, new causes of a frame fold into "(other subjects)"
FIX_FIRST = 10  # causes shown in the "fix these first" list
MAX_FUNCTIONS = 1_000  # user functions whose Dynamo trace time is kept (profile mode, dynamo_profiler)
MAX_GUARD_SETS = 10_000  # distinct guard sets remembered per frame and rank
EXAMPLE_CHARS = 160  # of a reason's example text in the terminal "why" table
WHY_ROWS_PER_FRAME = 5  # reason groups per frame in the terminal report's "why" table, then one row for the rest
MAX_BREAK_GROUPS = 1_000  # distinct graph-break groups (reason x place x eager); later new ones fold into one
MAX_BREAK_HINTS = 3  # torch's hints kept per graph-break group
BREAK_ROWS = 20  # graph-break groups in the terminal table (the HTML report lists more)
OTHER_BREAKS = ("(graph breaks at more places)", "", False)


def _hints() -> dict[str, str]:
    from recompprof._model.reasons import FIX_HINTS

    return FIX_HINTS


@dataclasses.dataclass
class ReasonGroup:
    """Guard failures of one frame with one category and subject."""

    category: str
    subject: str
    changes: int = 0  # recompiles this reason explains
    failures: int = 0  # guard failures, one per failing cache entry
    example: str = ""


@dataclasses.dataclass
class BreakGroup:
    """Graph breaks with one reason at one place of the user's code."""

    reason: str  # torch's graph-break type
    location: str  # the user's file:line ("" where torch gave none)
    skipped_frame: bool  # torch could not resume after the break: the whole frame ran eagerly
    count: int = 0
    frame: str = ""  # label of the first frame seen breaking here
    hints: list[str] = dataclasses.field(default_factory=list)  # torch's, bounded

    @property
    def where(self) -> str:
        """The location with its file shortened to the last two path parts, as frame labels have it."""
        return short_path(self.location) if self.location else "-"


@dataclasses.dataclass
class CauseReport:
    """Recompiles one cause (frame x category x subject) explains, and the compile seconds they cost."""

    frame: str
    category: str
    subject: str
    recompiles: int = 0
    seconds: float = 0.0  # recompiles and their backward compiles, all phases
    steps: list[int] = dataclasses.field(default_factory=list)
    steps_total: int = 0
    example: str = ""  # a reason text
    call_site: list[str] = dataclasses.field(default_factory=list)  # innermost last
    steady_state: int = 0  # of its recompiles, those counted as steady state
    warmup: int = 0  # of its recompiles, automatic dynamic warming up (one-time)
    made_dynamic: str = ""  # what torch made dynamic with the first of those ("dim 0 of L['x']")
    frame_key: str = ""  # the frame's identity (``frame`` is its label): causes are keyed by it

    @property
    def key(self) -> tuple[str, str, str]:
        """The cause's identity (its key in ``Report.causes``): frame key, category, subject."""
        return (self.frame_key or self.frame, self.category, self.subject)

    @property
    def tier(self) -> int:
        """Where it ranks in "fix these first": 0 it recompiled in steady state, 1 only in declared warm-up
        (before ``warmup_steps``, or steps unknown), 2 only as automatic dynamic warming up (fixed itself)."""
        if self.steady_state:
            return 0
        return 2 if self.warmup >= self.recompiles else 1


class _RankFold:
    """A frame's compiles on one rank while the fold runs: attributes, not a lookup per figure in the
    per-rank dicts, which :func:`_finish` fills from it."""

    __slots__ = ("category_first_step", "categories", "compiles", "first_recompile_step", "guard_sets", "recompiles", "steps")

    def __init__(self) -> None:
        self.compiles = 0
        self.recompiles = 0
        self.first_recompile_step: int | None = None
        self.steps: list[int] = []
        self.guard_sets: set[str] | None = None
        self.categories: dict[str, int] = {}
        self.category_first_step: dict[str, int] = {}


@dataclasses.dataclass
class FrameReport(FrameCounts):
    """One frame's counts (folded by :func:`recompprof._model.counting.fold_compile`) and the report's detail."""

    label: str  # displayed (events.Frame.label)
    name: str
    file: str
    line: int
    key: str = ""  # the frame's identity (events.Frame.key): what the report, merges and diff match on
    # Dims torch's automatic dynamic shapes made dynamic, one per expected warm-up recompile (bounded).
    automatic_dynamic: list[str] = dataclasses.field(default_factory=list)
    automatic_dynamic_recompiles: int = 0
    # Dims and scalars (recompprof._model.compiles.changed_subject) that explained a recompile that was no automatic
    # dynamic warm-up, with that recompile's reason text (bounded): one also in ``automatic_dynamic`` was
    # made dynamic and then specialised again by the traced code.
    changed_again: dict[str, str] = dataclasses.field(default_factory=dict)
    recompile_steps: list[int] = dataclasses.field(default_factory=list)
    recompile_steps_total: int = 0
    reasons: dict[tuple[str, str], ReasonGroup] = dataclasses.field(default_factory=dict)
    graph_breaks: int = 0
    failures: Counter[str] = dataclasses.field(default_factory=Counter)
    phases: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    compiles_by_rank: Counter[int] = dataclasses.field(default_factory=Counter)
    guard_sets_by_rank: dict[int, set[str]] = dataclasses.field(default_factory=dict)
    recompiles_by_rank: Counter[int] = dataclasses.field(default_factory=Counter)
    first_recompile_step_by_rank: dict[int, int] = dataclasses.field(default_factory=dict)
    # Per-rank detail for recompprof._analysis.divergence (steps bounded by MAX_STEPS_LISTED per rank).
    recompile_steps_by_rank: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    categories_by_rank: dict[int, Counter[str]] = dataclasses.field(default_factory=dict)
    category_first_step_by_rank: dict[int, dict[str, int]] = dataclasses.field(default_factory=dict)
    limit_hits_by_rank: Counter[int] = dataclasses.field(default_factory=Counter)
    first_limit_hit_step_by_rank: dict[int, int] = dataclasses.field(default_factory=dict)
    rank_folds: dict[int, _RankFold] = dataclasses.field(default_factory=dict, repr=False, compare=False,
                                                         metadata={"fold_state": True})

    @property
    def variants_needed(self) -> int:
        """Compiled variants one process needed: distinct guard sets where known, else forward compiles."""
        if self.guard_sets_by_rank:
            return max(len(sets) for sets in self.guard_sets_by_rank.values())
        return max(self.compiles_by_rank.values(), default=self.compiles)

    def top_reasons(self) -> list[ReasonGroup]:
        return sorted(self.reasons.values(), key=lambda g: (-g.changes, -g.failures, g.category, g.subject))


@dataclasses.dataclass
class Report:
    """Everything the terminal and HTML reports show; built by :func:`build_report`."""

    runs: list[str] = dataclasses.field(default_factory=list)
    ranks: set[int] = dataclasses.field(default_factory=set)
    modes: set[str] = dataclasses.field(default_factory=set)
    profile_mechanisms: set[str] = dataclasses.field(default_factory=set)
    recompile_limit: int | None = None
    warmup_steps: int = 0
    frames: dict[str, FrameReport] = dataclasses.field(default_factory=dict)  # by frame key (events.Frame.key)
    frames_dropped: int = 0
    categories: Counter[str] = dataclasses.field(default_factory=Counter)
    graph_break_groups: dict[tuple[str, str, bool], BreakGroup] = dataclasses.field(default_factory=dict)
    cudagraph_skips: Counter[tuple[str, str]] = dataclasses.field(default_factory=Counter)  # (frame, reason)
    failure_messages: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # frame, type, message
    phases: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    events: int = 0
    last_step: int = 0
    wall_seconds: float = 0.0
    internal_errors: Counter[str] = dataclasses.field(default_factory=Counter)
    # Capture signals that were off from the start or went dark mid-run, with why: the counts above miss them.
    signals_dark: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    # Read from TORCH_TRACE logs (recompprof ingest): no mode and no warm-up setting were recorded, and training
    # steps only for forward compiles of a run recompprof was attached to (steps_from_trace).
    from_torch_trace: bool = False
    steps_from_trace: bool = False
    frame_cache: dict[object, FrameReport] = dataclasses.field(default_factory=dict, repr=False, metadata={"fold_state": True})
    causes: dict[tuple[str, str, str], CauseReport] = dataclasses.field(default_factory=dict)  # (frame key, category, subject)
    cache_lookups: Counter[tuple[str, str]] = dataclasses.field(default_factory=Counter)  # (cache, result)
    cache_seconds_saved: float = 0.0
    trace_seconds_by_function: Counter[str] = dataclasses.field(default_factory=Counter)
    # False: only the figures ``diff`` compares were folded (see build_report's ``detail``); not for rendering.
    detail: bool = True
    # What only the fold needs (see drop_fold_state): no figure of the report.
    tracker: CauseTracker = dataclasses.field(default_factory=CauseTracker, repr=False, metadata={"fold_state": True})
    # What merging partial reports needs (recompprof._analysis.merging): each signal's last why from a session end,
    # and the ranks of backward compiles whose forward this report never saw.
    signals_off_last: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)
    orphan_backward_ranks: set[int] = dataclasses.field(default_factory=set, repr=False)
    # Ranks whose log cannot vouch for their whole session (recompprof._analysis.completeness), in rank order:
    # sessions that ended without session_end, and sessions whose session_end counts events the log lacks.
    incomplete: dict[int, Incomplete] = dataclasses.field(default_factory=dict)
    log_gaps: dict[int, LogGap] = dataclasses.field(default_factory=dict)
    # What merging needs of them: ranks with a session open at the end of the fold, and ranks whose first
    # event here is not a session_start (it may continue an earlier part's session).
    sessions_open: set[int] = dataclasses.field(default_factory=set, repr=False)
    sessions_unopened: set[int] = dataclasses.field(default_factory=set, repr=False)
    session_fold: SessionFold = dataclasses.field(default_factory=SessionFold, repr=False, metadata={"fold_state": True})

    @property
    def steps_known(self) -> bool:
        """Whether recompiles carry training steps (an ingested trace has them only from an attached run)."""
        return not self.from_torch_trace or self.steps_from_trace

    @property
    def compiles(self) -> int:
        return sum(f.compiles for f in self.frames.values())

    @property
    def recompiles(self) -> int:
        return sum(f.recompiles for f in self.frames.values())

    @property
    def compile_seconds(self) -> float:
        return sum(f.compile_seconds for f in self.frames.values())

    @property
    def automatic_dynamic_recompiles(self) -> int:
        return sum(f.automatic_dynamic_recompiles for f in self.frames.values())

    @property
    def recompile_seconds(self) -> float:
        """Compile seconds lost to recompiles (their backward compiles included)."""
        return sum(c.seconds for c in self.causes.values())

    def ranked_causes(self) -> list[CauseReport]:
        """The order to fix causes in: those that recompiled in steady state first, then those seen only in
        declared warm-up, then automatic dynamic warm-up (it fixed itself); each by compile seconds lost,
        then recompiles."""
        return sorted(self.causes.values(), key=lambda c: (c.tier, -c.seconds, -c.recompiles, c.key))

    def cache_hit_rate(self, cache: str) -> float | None:
        """Hits over lookups that hit or missed (bypasses never could hit); None without lookups."""
        hits, misses = self.cache_lookups[(cache, "hit")], self.cache_lookups[(cache, "miss")]
        return hits / (hits + misses) if hits + misses else None

    @property
    def limit_hits(self) -> int:
        return sum(sum(f.limit_hits.values()) for f in self.frames.values())

    @property
    def graph_breaks(self) -> int:
        return sum(f.graph_breaks for f in self.frames.values())

    @property
    def failures(self) -> int:
        return sum(sum(f.failures.values()) for f in self.frames.values())

    def diverging_frames(self) -> list[FrameReport]:
        """Frames whose recompiles, limit hits or reason categories differ across ranks (see recompprof._analysis.divergence)."""
        return [d.frame for d in divergence.find(self)]

    def __str__(self) -> str:
        return render_text(self)

    def require_detail(self) -> None:
        """Raise ValueError for a report folded with ``detail=False``: rendered, it would show zeros it never counted."""
        if not self.detail:
            raise ValueError("a report folded with detail=False lacks the per-rank and phase figures it would show")

    def drop_fold_state(self) -> None:
        """Forget what only folding more events needs: it holds the events' views, which do not pickle."""
        self.tracker = CauseTracker()
        self.frame_cache = {}
        self.session_fold = SessionFold()


def build_report(events: Iterable[Event], *, detail: bool = True, sessions: SessionFold | None = None) -> Report:
    """Fold ``events`` (any order of ranks, one pass) into a :class:`Report`.

    ``detail=False`` leaves out what only the rendered report shows (per-rank figures, recompile steps,
    automatic-dynamic dims, compile seconds by phase): every count, reason group and cause is the same,
    at about four fifths of the cost. ``diff`` folds its two runs so. ``sessions`` is the fold of the
    runs' sessions to count in, when the caller counts events the figures leave out there too.
    """
    report = Report(detail=detail)
    if sessions is not None:
        report.session_fold = sessions
    fold = report.session_fold
    open_sessions = fold.open
    folded, last_step = 0, 0
    for event in events:  # by kind, not class: the offline commands fold msgspec views (recompprof._eventlog.fastread)
        folded += 1
        step = event.step
        if step is not None and step > last_step:
            last_step = step
        if event.kind == "compile":  # nearly every event: tested first (event.kind each time: mypy narrows on it)
            counted = _add_compile(report, event)
            session = open_sessions.get(event.rank) or fold.unstarted(event)
            session.last = event
            session.verdicts[counted] += 1  # what it counts as (recompprof._analysis.completeness)
        elif event.kind == "session_start":
            fold.start(event)
            report.ranks.add(event.rank)
            if event.signals.get("torch_trace"):  # ingested: the event's mode is a placeholder
                report.from_torch_trace = True
                report.steps_from_trace = report.steps_from_trace or bool(event.signals.get("step_in_trace"))
            else:
                report.modes.add(event.mode)
            if event.profile_mechanism:
                report.profile_mechanisms.add(event.profile_mechanism)
            report.recompile_limit = event.recompile_limit
            report.warmup_steps = event.warmup_steps
            if event.run_id not in report.runs and len(report.runs) < MAX_LISTED:
                report.runs.append(event.run_id)
            for name in CAPTURE_SIGNALS:
                if event.signals.get(name) is False:
                    report.signals_dark.setdefault(name, "off from the start")
        elif event.kind == "signal":
            (open_sessions.get(event.rank) or fold.unstarted(event)).last = event
            if not event.live:
                report.signals_dark.setdefault(event.signal, event.reason or "went dark")
        elif event.kind == "recompile_limit_hit":
            session = open_sessions.get(event.rank) or fold.unstarted(event)
            session.last = event
            session.limit_hits += 1
            frame = _frame(report, event.frame)
            if frame is not None:
                fold_limit_hit(frame, event)
                frame.limit_hits_by_rank[event.rank] += 1
                frame.first_limit_hit_step_by_rank.setdefault(event.rank, event.step or 0)
        elif event.kind == "graph_break":
            session = open_sessions.get(event.rank) or fold.unstarted(event)
            session.last = event
            session.graph_breaks += event.count
            frame = _frame(report, event.frame) if event.frame is not None else None
            if frame is not None:
                frame.graph_breaks += event.count
            _add_break(report, event, frame.label if frame is not None else "")
        elif event.kind == "session_end":
            fold.end(event)
            for name in report.signals_dark.keys() & event.signals_off.keys():  # the why, as the session saw it
                report.signals_dark[name] = event.signals_off[name]
            report.signals_off_last.update(event.signals_off)
            report.wall_seconds = max(report.wall_seconds, event.totals.get("wall_seconds", 0.0))
            report.internal_errors.update(event.internal_errors)
    report.events, report.last_step = folded, last_step
    _finish(report)
    return report


def _finish(report: Report) -> None:
    """The figures the fold kept in its own form: per-rank dicts (ranks in order), phase totals, and
    the verdicts on sessions still open."""
    sessions = report.session_fold
    report.sessions_open = sessions.finish()
    report.sessions_unopened = set(sessions.unopened)
    report.incomplete = dict(sorted(sessions.incomplete.items()))
    report.log_gaps = dict(sorted(sessions.gaps.items()))
    for frame in report.frames.values():
        for rank in sorted(frame.rank_folds):
            fold = frame.rank_folds[rank]
            frame.compiles_by_rank[rank] += fold.compiles
            if fold.guard_sets is not None:
                frame.guard_sets_by_rank[rank] = fold.guard_sets
            if fold.recompiles:
                frame.recompiles_by_rank[rank] += fold.recompiles
                frame.first_recompile_step_by_rank[rank] = fold.first_recompile_step or 0
                frame.recompile_steps_by_rank[rank] = fold.steps
            if fold.categories:
                frame.categories_by_rank[rank] = Counter(fold.categories)
                frame.category_first_step_by_rank[rank] = fold.category_first_step
        frame.rank_folds = {}
        sort_ranks(frame)
    sum_phases(report)


def sort_ranks(frame: FrameReport) -> None:
    """Each per-rank dict of ``frame`` in rank order (so a report does not depend on which rank came first)."""
    for field in ("compiles_by_rank", "guard_sets_by_rank", "recompiles_by_rank", "first_recompile_step_by_rank",
                  "recompile_steps_by_rank", "categories_by_rank", "category_first_step_by_rank", "limit_hits_by_rank",
                  "first_limit_hit_step_by_rank"):
        by_rank = getattr(frame, field)
        if len(by_rank) > 1:
            setattr(frame, field, type(by_rank)(dict(sorted(by_rank.items()))))  # a Counter takes a mapping


def sum_phases(report: Report) -> None:
    """The report's compile seconds by phase: its frames' (events of dropped frames count in neither)."""
    phases = report.phases = dict.fromkeys(PHASES, 0.0)
    for frame in report.frames.values():
        for phase, seconds in frame.phases.items():
            phases[phase] += seconds


def _add_omitted(frame: FrameReport, omitted: dict[Category, int]) -> None:
    """Guard failures an event counted but did not list (past its per-event cap)."""
    for category, count in omitted.items():
        _group(frame, category, "(more cache entries)", "").failures += count


def _frame(report: Report, frame: object) -> FrameReport | None:
    """The report's entry for ``frame`` (an event's Frame or its view), or None once MAX_FRAMES are kept."""
    found = report.frame_cache.get(frame)  # hashed by value: one lookup for every event of a known frame
    if found is not None:
        return found
    key = frame.key  # type: ignore[attr-defined]
    found = report.frames.get(key)
    if found is None:
        if len(report.frames) >= MAX_FRAMES:
            report.frames_dropped += 1
            return None
        found = report.frames[key] = FrameReport(frame.label, frame.name, frame.file, frame.line, key)  # type: ignore[attr-defined]
    if len(report.frame_cache) < 2 * MAX_FRAMES:  # one Frame and one view per frame, as a rule
        report.frame_cache[frame] = found
    return found


def _add_break(report: Report, event: GraphBreak, label: str) -> None:
    """Count a graph break in its group (reason, place, eager), new groups past MAX_BREAK_GROUPS in one for the rest."""
    reason = event.reason.strip().splitlines()[0][:200] if event.reason.strip() else "graph break"
    key = (reason, event.user_location or "", event.skipped_frame)
    groups = report.graph_break_groups
    group = groups.get(key)
    if group is None:
        if len(groups) >= MAX_BREAK_GROUPS:
            group = groups.setdefault(OTHER_BREAKS, BreakGroup(*OTHER_BREAKS))
        else:
            group = groups[key] = BreakGroup(*key, frame=label, hints=[h[:300] for h in event.hints[:MAX_BREAK_HINTS]])
    group.count += event.count


def ranked_breaks(report: Report) -> list[BreakGroup]:
    """Graph-break groups, most breaks first (frames that ran eagerly first among equals)."""
    return sorted(report.graph_break_groups.values(), key=lambda g: (-g.count, not g.skipped_frame, g.reason, g.location))


def _group(frame: FrameReport, category: str, subject: str, text: str) -> ReasonGroup:
    key = (category, subject)
    group = frame.reasons.get(key)
    if group is None:
        if len(frame.reasons) >= MAX_GROUPS_PER_FRAME:
            key = (category, "(other subjects)")
            group = frame.reasons.setdefault(key, ReasonGroup(*key))
        else:
            group = frame.reasons[key] = ReasonGroup(category, subject, example=text[:300])
    return group


def _add_compile(report: Report, event: Compile) -> int:
    """Fold one compile event; returns its :func:`recompprof._model.counting.verdict`."""
    # The hottest code of the offline commands (a million events): locals over attribute lookups, dict.get
    # over Counter's slower item access; the counting rules stay recompprof._model.counting's (one place).
    # tests/test_report.py and test_one_rule.py pin the result.
    frame = report.frame_cache.get(event.frame) or _frame(report, event.frame)  # _frame's own first lookup, inline
    if frame is None:
        return verdict(event)
    if event.cudagraph_skip is not None:
        key = (frame.label, event.cudagraph_skip)
        if key in report.cudagraph_skips or len(report.cudagraph_skips) < MAX_LISTED:
            report.cudagraph_skips[key] += 1
    recompiled = None  # the rank's fold, for a recompile
    counted = fold_compile(frame, event)
    if counted & COUNTED and report.detail:
        rank = event.rank
        fold = frame.rank_folds.get(rank)
        if fold is None:
            fold = frame.rank_folds[rank] = _RankFold()
        fold.compiles += 1
        if event.guard_set is not None:
            if fold.guard_sets is None:
                fold.guard_sets = set()
            if len(fold.guard_sets) < MAX_GUARD_SETS:
                fold.guard_sets.add(event.guard_set)
        if event.is_recompile:
            recompiled = fold
            step = event.step or 0
            fold.recompiles += 1
            if fold.first_recompile_step is None:
                fold.first_recompile_step = step
            if len(fold.steps) < MAX_STEPS_LISTED:
                fold.steps.append(step)
            if event.automatic_dynamic is not None:
                frame.automatic_dynamic_recompiles += 1
                if len(frame.automatic_dynamic) < MAX_STEPS_LISTED:
                    frame.automatic_dynamic.append(event.automatic_dynamic)
            elif len(frame.changed_again) < MAX_STEPS_LISTED and (reason := explaining_reason(event.reasons)) is not None:
                changed = changed_subject(reason)
                if changed is not None:
                    frame.changed_again.setdefault(changed, reason.text[:300])
            frame.recompile_steps_total += 1
            if len(frame.recompile_steps) < MAX_STEPS_LISTED:
                frame.recompile_steps.append(step)
    reasons = event.reasons
    if reasons:
        groups = frame.reasons
        for reason in reasons:
            category = reason.category
            group = groups.get((category, reason.subject))  # the common case, without a call
            if group is None:
                group = _group(frame, category, reason.subject, reason.text)
            group.failures += 1
            if reason.explains_change and counted & RECOMPILE:  # a refused compile (limit hit) changed nothing
                group.changes += 1
                categories: dict[str, int] = report.categories
                categories[category] = categories.get(category, 0) + 1
                if recompiled is not None:  # what a rank's recompiles were explained by, and from which step
                    by_category = recompiled.categories
                    by_category[category] = by_category.get(category, 0) + 1
                    if category not in recompiled.category_first_step:
                        recompiled.category_first_step[category] = step
    if event.reasons_omitted:
        _add_omitted(frame, event.reasons_omitted)
    if event.outcome == "failed":
        frame.failures[event.fail_type or "unknown"] += 1
        if len(report.failure_messages) < MAX_LISTED:
            message = (event.fail_reason or "").strip().splitlines()
            report.failure_messages.append((frame.label, event.fail_type or "unknown", message[0][:200] if message else ""))
    if counted & COSTS:
        phases = event.phases
        if phases and report.detail:  # the report's own phases are the frames' summed once, at the end (sum_phases)
            frame_phases = frame.phases
            for phase, seconds in phases.items():
                frame_phases[phase] += seconds  # every Phase is a key from the start (validated input)
        found = report.tracker.cause_of(event, counted)
        if found is not None:
            _add_cause(report, event, frame, found)
        elif event.backward and not report.tracker.remembers(event):  # its forward is in no event folded here
            report.orphan_backward_ranks.add(event.rank)
    if event.cache_lookups:
        for cache, results in event.cache_lookups.items():
            for result, count in results.items():
                report.cache_lookups[(cache, result)] += count
    report.cache_seconds_saved += event.cache_seconds_saved or 0.0
    if event.trace_seconds_by_function:
        for function, seconds in event.trace_seconds_by_function.items():
            if function in report.trace_seconds_by_function or len(report.trace_seconds_by_function) < MAX_FUNCTIONS:
                report.trace_seconds_by_function[function] += seconds  # type: ignore[assignment]  # float seconds in a Counter
    return counted


def _add_cause(report: Report, event: Compile, frame: FrameReport, found: Cause) -> None:
    """Charge ``event`` (of ``frame``) to ``found``, the cause the tracker gave it."""
    cause_frame, category, subject = found
    backward = event.backward
    label, frame_key = frame.label, frame.key
    if backward:  # its forward's frame: the same one, as a rule, but the forward's cause decides
        known = report.frame_cache.get(cause_frame)
        label, frame_key = (known.label, known.key) if known is not None else (cause_frame.label, cause_frame.key)
    key = (frame_key, category, subject)
    cause = report.causes.get(key)
    if cause is None:
        if len(report.causes) >= MAX_CAUSES:
            key = (frame_key, category, "(other subjects)")
            cause = report.causes.setdefault(key, CauseReport(label, category, key[2], frame_key=frame_key))
        else:
            cause = report.causes[key] = CauseReport(label, category, subject, frame_key=frame_key)
    cause.seconds += event.duration
    if backward:
        return
    cause.recompiles += 1
    cause.steps_total += 1
    if event.steady_state:
        cause.steady_state += 1
    if event.automatic_dynamic is not None:
        cause.warmup += 1
        cause.made_dynamic = cause.made_dynamic or event.automatic_dynamic
    step = event.step
    if step is not None:
        steps = cause.steps
        if len(steps) < MAX_STEPS_LISTED:
            steps.append(step)
    if not cause.example:
        reason = explaining_reason(event.reasons)
        cause.example = reason.text[:300] if reason is not None else ""
    if not cause.call_site and event.call_site:
        cause.call_site = list(event.call_site[-5:])


# -- rendering ---------------------------------------------------------------------------------------

def cause_steps(cause: CauseReport, shown: int = 8) -> str:
    listed = ", ".join(str(s) for s in cause.steps[:shown])
    more = cause.steps_total - min(shown, len(cause.steps))
    return (listed + (f" (+{more})" if more > 0 else "")) if cause.steps else "-"


def share(seconds: float, total: float) -> str:
    return f"{100 * seconds / total:.1f} %" if total > 0 else "-"


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]], *, right: Iterable[str] = (),
           fold: Iterable[str] = ()) -> plaintext.Fitted:
    """A table whose headers never break inside a word, at any width.

    Short columns (counts, categories) get a fixed width: their longest header word or cell. Only the
    ``fold`` columns (frame labels, reason texts, hints) share the rest; their cells wrap between words and
    after a path's ``/`` (:class:`plaintext.Wrapped`), and only a part wider than the whole column is cut.
    They are never narrower than their longest header word. Where even that does not fit the width, each row
    prints as a record instead (:class:`plaintext.Fitted`).
    """
    # At least as wide as the title (within the console), so a narrow table does not wrap its title.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, min_width=len(title))
    right, fold = set(right), set(fold)
    needed = 2 + 3 * len(columns) - 1  # the table's edges, each cell's padding and the gaps between columns
    wrapping: dict[int, tuple[int, int]] = {}
    for i, col in enumerate(columns):
        word = max(len(w) for w in col.split())
        if col in fold:
            table.add_column(col, justify="right" if col in right else "left", overflow="fold", min_width=word)
            least = max([word, *(len(p) for row in rows for w in row[i].split() for p in plaintext.units(w))])
            wrapping[i] = (least, max([least, len(col), *(len(line) for row in rows for line in row[i].splitlines())]))
            needed += least
        else:
            cells = max((len(line) for row in rows for line in row[i].splitlines()), default=0)
            table.add_column(col, justify="right" if col in right else "left", width=max(word, cells))
            needed += max(word, cells)
    folded = [i for i, col in enumerate(columns) if col in fold]
    for row in rows:
        table.add_row(*(plaintext.Wrapped(cell) if i in folded else cell for i, cell in enumerate(row)))
    return plaintext.Fitted(table, columns, rows, needed, wrapping)


def _clip(text: str, limit: int = EXAMPLE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying so (the HTML report keeps the whole example)."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _print_fix_first(console: Console, report: Report, hints: dict[str, str], *, steps: bool = True) -> None:
    ranked = report.ranked_causes()
    total = report.compile_seconds
    if not ranked:
        console.line()
        console.print("Fix these first: nothing - no recompiles, so no compile time was lost to them.")
        return
    console.line()
    console.print(f"Recompiles cost {report.recompile_seconds:.2f} s of {total:.2f} s compile time "
                  f"({share(report.recompile_seconds, total)}), {len(ranked)} cause(s).")
    # A list, not a table: the reason text and the call site stay readable at any width.
    console.print("Fix these first: compile time lost per cause")
    for rank, cause in enumerate(ranked[:FIX_FIRST], start=1):
        console.print(f"{rank:>2}. {cause.frame} · {cause.category} · {cause.subject or '-'}: "
                      f"{cause.recompiles} recompile(s), {cause.seconds:.3f} s lost ({share(cause.seconds, total)})"
                      + (f", steps {cause_steps(cause)}" if steps else ""))
        for line in (f"why: {cause.example}" if cause.example else "",
                     f"at {cause.call_site[-1]}" if cause.call_site else "",
                     f"fix: {fix}" if (fix := fix_text(cause, hints, report)) else ""):
            # Wrapped here, between words, so continuation lines keep the indent; one print per line (the console
            # shows a newline inside a text escaped), escaped first (textwrap would turn a newline into a space).
            for part in textwrap.wrap(plaintext.escape(line), max(console.width, 40), initial_indent="    ", subsequent_indent="    ",
                                      break_long_words=False, break_on_hyphens=False):
                console.print(part, soft_wrap=True)
    if len(ranked) > FIX_FIRST:
        rest = sum(c.seconds for c in ranked[FIX_FIRST:])
        console.print(f"  ... {len(ranked) - FIX_FIRST} more cause(s), {rest:.3f} s")


def fix_text(cause: CauseReport, hints: dict[str, str], report: Report | None = None) -> str:
    """The fix a "fix these first" entry gives: the category's hint, except for a cause that was only
    automatic dynamic warming up, which fixed itself: it says so, and what would avoid even that. When the
    traced code specialised that dim or scalar again (``report``'s frame knows), it never says "will not recur"."""
    if cause.tier != 2 or not cause.made_dynamic:
        return hints.get(cause.category, "")
    frame = report.frames.get(cause.frame_key) if report is not None else None
    guard = frame.changed_again.get(cause.made_dynamic) if frame is not None else None
    if guard is not None:
        guard = guard.split("  # ", 1)[0].strip()  # the guard, without torch's source comment
        return (f"this first change was a one-time warm-up: torch made {cause.made_dynamic} dynamic, but the traced "
                f"code specialised it again (guard: {guard}) and it recompiled again: those later recompiles are steady state, listed as "
                "their own cause; find what the code does with that size (a branch, an assert, a reshape to a fixed "
                f"shape). To avoid even this first recompile, {warmup_avoidance(cause.made_dynamic)}.")
    return (f"nothing to fix: one-time warm-up, torch made {cause.made_dynamic} dynamic after its first change and "
            f"it will not recur. To avoid even this recompile, {warmup_avoidance(cause.made_dynamic)}.")


def warmup_avoidance(made_dynamic: str) -> str:
    """How to start with a dim or scalar dynamic, so torch's automatic dynamic has nothing to warm up."""
    if made_dynamic.startswith("value of "):
        return "pass it as a 0-dim tensor (e.g. lr=torch.tensor(0.01)) or compile with dynamic=True"
    return "mark the dim dynamic before the first call (torch._dynamo.mark_dynamic(tensor, dim))"


def _print_breaks(console: Console, report: Report) -> None:
    ranked = ranked_breaks(report)
    rows: list[tuple[str, ...]] = [(g.reason, g.where, g.frame or "-", "ran eagerly" if g.skipped_frame else "resumed", str(g.count))
            for g in ranked[:BREAK_ROWS]]
    rest = ranked[BREAK_ROWS:]
    if rest:
        rows.append(("...", f"{len(rest)} more place(s)", "-", "-", str(sum(g.count for g in rest))))
    console.print(_table("Graph breaks (where: the user's code that broke the graph; ran eagerly: torch could not resume "
                         "after the break and ran the whole frame without compiling it)",
                         ("Reason", "Where", "Frame", "Then", "Count"), rows, right=("Count",),
                         fold=("Reason", "Where", "Frame")))
    hints: dict[str, list[str]] = {}  # once per reason shown, torch's own hints
    for group in ranked[:BREAK_ROWS]:
        if group.hints and group.reason not in hints:
            hints[group.reason] = group.hints
    if hints:
        console.print(_table("Graph-break hints (torch's)", ("Reason", "Hint"),
                             [(reason, hint) for reason, listed in hints.items() for hint in listed],
                             fold=("Reason", "Hint")))


def _print_caches(console: Console, report: Report) -> None:
    if not any(report.cache_lookups.values()):
        return
    rows = []
    for cache in CACHES:
        counts = [report.cache_lookups[(cache, r)] for r in CACHE_RESULTS]
        rate = report.cache_hit_rate(cache)
        rows.append((cache, *(str(n) for n in counts), "-" if rate is None else f"{100 * rate:.0f} %"))
    console.print(_table(f"Compile caches (seconds saved by hits: {report.cache_seconds_saved:.2f} s)",
                         ("Cache", *CACHE_RESULTS, "Hit rate"), rows, right=(*CACHE_RESULTS, "Hit rate")))


def _steps(frame: FrameReport) -> str:
    shown = ", ".join(str(s) for s in frame.recompile_steps[:12])
    more = frame.recompile_steps_total - min(12, len(frame.recompile_steps))
    return shown + (f" (+{more})" if more > 0 else "")


def describe_source(report: Report) -> str:
    """``mode monitor | steps 12``, or what an ingested run can say instead (it has neither)."""
    if report.from_torch_trace and not report.modes:
        steps = f"recompile steps up to {report.last_step}" if report.steps_from_trace else "steps unknown"
        return f"from TORCH_TRACE (no mode) | {steps}"
    return f"mode {', '.join(sorted(report.modes)) or '?'} | steps {steps_seen(report)}"


def steps_seen(report: Report) -> str:
    """The training steps of the run, or the last one seen when a rank's session ended without saying."""
    return f">= {report.last_step} (last seen)" if report.incomplete else str(report.last_step)


def _when(seconds: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):  # no date: a time far outside any run
        return f"time {seconds:g}"


def completeness_warnings(report: Report) -> list[tuple[str, str]]:
    """What the log cannot vouch for, one line per rank and verdict: ``("incomplete", line)`` for
    sessions without session_end, ``("log_gap", line)`` for gaps."""
    lines = []
    for rank, ended in report.incomplete.items():
        step = "unknown" if ended.step is None else ended.step
        more = f"; {ended.sessions} of its sessions ended so" if ended.sessions > 1 else ""
        lines.append(("incomplete", f"rank {rank} ended without session_end: killed, crashed or still running "
                                    f"(last event at {_when(ended.time)}, step {step}{more})"))
    for rank, gap in report.log_gaps.items():
        more = f" ({gap.sessions} sessions have gaps; the latest shown)" if gap.sessions > 1 else ""
        lines.append(("log_gap", f"rank {rank}: the event log has a gap: {gap.detail}{more}; "
                                 "the figures miss what the log lacks"))
    return lines


def automatic_dynamic_notes(report: Report) -> list[str]:
    """The one-time recompiles of automatic dynamic, explained; and each dim or scalar torch made dynamic
    that recompiled again (the traced code specialised it), with the guard that did, never "will not recur"."""
    made = [(f, dim) for f in report.frames.values() for dim in dict.fromkeys(f.automatic_dynamic)]
    if not made:
        return []
    settled = [(f.label, dim) for f, dim in made if dim not in f.changed_again]
    again = [(f.label, dim, f.changed_again[dim]) for f, dim in made if dim in f.changed_again]
    notes = [f"{report.automatic_dynamic_recompiles} recompile(s) were automatic dynamic warming up: after the first "
             "change of a tensor dim or an int/float argument torch made it dynamic and recompiled once; these are "
             "not counted as steady state (docs/steady-state.md)."]
    if settled:
        shown = "; ".join(f"{label}: {dim}" for label, dim in settled[:5])
        notes[0] += f" This will not recur for {shown}" + (f"; +{len(settled) - 5} more" if len(settled) > 5 else "") + "."
    for label, dim, guard in again[:5]:
        notes.append(f"{label}: torch made {dim} dynamic, but the traced code specialised it again and it recompiled "
                     f"again (guard: {guard}); its later recompiles are no warm-up and count as steady state once past "
                     "warmup_steps.")
    if len(again) > 5:
        notes.append(f"{len(again) - 5} more dim(s) or scalar(s) made dynamic were specialised again.")
    return notes


def counts_line(report: Report) -> str:
    """``compiles 8 (+8 bwd) | recompiles 7 | limit hits 1 | graph breaks 0 | failures 0``: the report's header
    counts, in the words every command uses for them."""
    backward = sum(f.backward_compiles for f in report.frames.values())
    return (f"compiles {report.compiles}" + (f" (+{backward} bwd)" if backward else "")
            + f" | recompiles {report.recompiles} | limit hits {report.limit_hits} | graph breaks {report.graph_breaks}"
            f" | failures {report.failures}")


def render_summary(report: Report, width: int = 100) -> str:
    """A few lines for the end of ``recompprof run``: the counts and the costliest cause."""
    console, out = plaintext.console(width)
    steady = sum(f.steady_state_recompiles for f in report.frames.values())
    console.print(f"recompprof: {report.compiles} compile(s), {report.recompiles} recompile(s) "
                  f"({steady} steady-state, {report.automatic_dynamic_recompiles} automatic dynamic), "
                  f"{report.limit_hits} limit hit(s), {report.graph_breaks} graph break(s), {report.failures} failure(s); "
                  f"{report.compile_seconds:.2f} s compiling, {report.recompile_seconds:.2f} s lost to recompiles")
    for name, why in report.signals_dark.items():
        console.print(f"WARNING: signal {name} was dark ({why}): what it records is incomplete in this run")
    for _, line in completeness_warnings(report):
        console.print(f"WARNING: {line}", soft_wrap=True)
    ranked = report.ranked_causes()
    if ranked:
        top = ranked[0]
        console.print(f"top cause: {top.frame} · {top.category} · {top.subject or '-'}: {top.recompiles} recompile(s), "
                      f"{top.seconds:.3f} s" + (f" - {top.example}" if top.example else ""))
    return out.getvalue()


def render_text(report: Report, width: int = 160) -> str:
    """The report as plain text tables (no colour codes), for terminals and logs."""
    report.require_detail()
    console, out = plaintext.console(width)
    hints = _hints()
    ranks = ", ".join(str(r) for r in sorted(report.ranks)) or "0"
    steps_known = report.steps_known
    console.print("recompprof report")
    console.print("=================")
    console.print(
        f"run {', '.join(report.runs) or '?'} | ranks {ranks} | {describe_source(report)} | {counts_line(report)} | "
        f"compile time {report.compile_seconds:.2f} s"
        + (f" of {report.wall_seconds:.1f} s wall" if report.wall_seconds and len(report.ranks) <= 1
           else " summed over ranks" if len(report.ranks) > 1 else "")
    )
    for name, why in report.signals_dark.items():
        console.print(f"WARNING: signal {name} was dark ({why}): what it records is incomplete in this run")
    for _, line in completeness_warnings(report):
        console.print(f"WARNING: {line}", soft_wrap=True)
    if report.profile_mechanisms:
        console.print(f"profile mode mechanism: {', '.join(sorted(report.profile_mechanisms))} "
                      "(evict: each frame held at recompile_limit live entries; unlimited: limit lifted)")
    notes = list(report.notes)
    if report.frames_dropped:
        notes.append(f"{report.frames_dropped} event(s) of frames past the first {MAX_FRAMES} are not shown")
    notes += automatic_dynamic_notes(report)
    for note in notes:
        console.print(f"note: {note}")

    frames = sorted(report.frames.values(), key=lambda f: (-f.recompiles, -f.compile_seconds, f.label))
    if not frames:
        console.line()
        console.print("No compiles recorded.")
        return out.getvalue()
    _print_fix_first(console, report, hints, steps=steps_known)

    counts = ("Compiles", "Recompiles", "Steady-state", "Limit hits", "Graph breaks", "Failures", "Compile s")
    rows: list[tuple[str, ...]] = [
        (
            f.label, str(f.compiles) + (f" (+{f.backward_compiles} bwd)" if f.backward_compiles else ""),
            str(f.recompiles), str(f.steady_state_recompiles) if not report.from_torch_trace else "-",
            (_steps(f) or "-") if steps_known else "-",
            ", ".join(f"{k} x{v}" for k, v in f.limit_hits.items()) or "0", str(f.graph_breaks),
            str(sum(f.failures.values())), f"{f.compile_seconds:.3f}",
        )
        for f in frames
    ]
    console.print(_table("Frames", ("Frame", "Compiles", "Recompiles", "Steady-state", "Recompile steps", "Limit hits",
                                    "Graph breaks", "Failures", "Compile s"), rows, right=counts,
                         fold=("Frame", "Recompile steps")))

    why_rows: list[tuple[str, ...]] = []
    shown: dict[str, None] = {}  # categories in the table, in order, for the hints under it
    for f in frames:
        groups = f.top_reasons()
        why_rows += [(f.label, g.category, g.subject or "-", str(g.changes), str(g.failures), _clip(g.example) or "-")
                     for g in groups[:WHY_ROWS_PER_FRAME]]
        shown.update(dict.fromkeys(g.category for g in groups[:WHY_ROWS_PER_FRAME]))
        rest = groups[WHY_ROWS_PER_FRAME:]
        if rest:  # a long tail here would bury every other frame (the HTML report lists more)
            why_rows.append((f.label, "...", f"{len(rest)} more group(s)", str(sum(g.changes for g in rest)),
                             str(sum(g.failures for g in rest)), "-"))
    if why_rows:
        console.print(_table("Why they recompiled (changes = recompiles explained; guard failures = one per failing "
                             "cache entry; example = one reason text torch gave)",
                             ("Frame", "Category", "Subject", "Changes", "Guard failures", "Example"), why_rows,
                             right=("Changes", "Guard failures"), fold=("Frame", "Subject", "Example")))
        # Once per category, not on every row: the same advice repeated per frame only made the table long.
        console.print(_table("Fix hints", ("Category", "Fix hint"),
                             [(category, hints[category]) for category in shown if hints.get(category)], fold=("Fix hint",)))
    else:
        console.line()
        console.print("No guard failures recorded.")

    total = sum(report.phases.values()) or 1.0
    console.print(_table("Compile time by phase (exclusive, seconds)", ("Phase", "Seconds", "Share"),
                         [(phase, f"{report.phases.get(phase, 0.0):.3f}", f"{100 * report.phases.get(phase, 0.0) / total:.1f} %")
                          for phase in PHASES], right=("Seconds", "Share")))

    _print_caches(console, report)
    if report.trace_seconds_by_function:
        console.print(_table("Dynamo trace time by user function (exclusive; profile mode, dynamo_profiler)",
                             ("Function", "Seconds"),
                             [(function, f"{seconds:.3f}")
                              for function, seconds in report.trace_seconds_by_function.most_common(15)],
                             right=("Seconds",), fold=("Function",)))
    if report.cudagraph_skips:
        console.print(_table("CUDA graphs skipped", ("Frame", "Reason", "Compiles", "Fix"),
                             [(label, reason, str(count), SKIP_HINTS.get(reason, ""))
                              for (label, reason), count in report.cudagraph_skips.most_common(20)],
                             right=("Compiles",), fold=("Frame", "Fix")))
    if report.graph_break_groups:
        _print_breaks(console, report)
    if report.failure_messages:
        console.print(_table("Compile failures", ("Frame", "Type", "Message"), list(report.failure_messages),
                             fold=("Frame", "Type", "Message")))

    divergence.print_divergence(console, report)

    busy = [f for f in frames if f.compiles > 1 or f.limit_hits]
    if busy:
        console.line()
        console.print("Limits: each frame needed this many compiled variants "
                      f"(torch.compile falls back to eager past recompile_limit, {report.recompile_limit} here):")
        for f in busy:
            cut = " - the limit cut in" if f.limit_hits else ""
            needed = f.variants_needed
            console.print(f"  {f.label}: {needed} variants{cut}")
    if report.internal_errors:
        console.line()
        console.print("recompprof internal errors: " + ", ".join(f"{k} x{v}" for k, v in report.internal_errors.items()))
    return out.getvalue()
