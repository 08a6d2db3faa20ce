"""The report model: what recompiled, why, what it cost and how to fix it, for one or many ranks.

Recompiles are counted once per recompile, not once per failing cache entry as the old CompileProfiler
did; the reason that *explains* each recompile is counted separately from the guard failures against
older entries. :mod:`recompprof._analysis.fold` builds a :class:`Report` from events and
:mod:`recompprof._analysis.text` draws it.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

from recompprof._analysis import divergence
from recompprof._analysis.completeness import Incomplete, LogGap, SessionFold
from recompprof._model.causes import CauseTracker
from recompprof._model.counting import FrameCounts
from recompprof._model.events import (
    PHASES,
    short_path,
)

# The signals a run's counts come from: when one is dark, the report says so and ``check`` refuses the run.
CAPTURE_SIGNALS = ("compile_metrics", "guard_failures", "graph_breaks", "profile_backend")
MAX_FRAMES = 10_000
MAX_GROUPS_PER_FRAME = 100
MAX_STEPS_LISTED = 50
MAX_LISTED = 50
MAX_CAUSES = 10_000  # past this, new causes of a frame fold into "(other subjects)"
MAX_FUNCTIONS = 1_000  # user functions whose Dynamo trace time is kept (profile mode, dynamo_profiler)
MAX_GUARD_SETS = 10_000  # distinct guard sets remembered per frame and rank
MAX_BREAK_GROUPS = 1_000  # distinct graph-break groups (reason x place x eager); later new ones fold into one
MAX_BREAK_HINTS = 3  # torch's hints kept per graph-break group
OTHER_BREAKS = ("(graph breaks at more places)", "", False)


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
        from recompprof._analysis.text import render_text  # the model draws itself only when printed

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
