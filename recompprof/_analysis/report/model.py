"""The report model: what recompiled, why, what it cost and how to fix it, for one or many ranks.

Recompiles are counted once per recompile, not once per failing cache entry as the old CompileProfiler
did; the reason that *explains* each recompile is counted separately from the guard failures against
older entries. :mod:`recompprof._analysis.report.fold` builds a :class:`Report` from events and
:mod:`recompprof._analysis.text` draws it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from recompprof._analysis.report.bounded import (
    CAPTURE_SIGNALS,
    MAX_BREAK_GROUPS,
    MAX_BREAK_HINTS,
    MAX_CAUSES,
    MAX_FRAMES,
    MAX_FUNCTIONS,
    MAX_GROUPS_PER_FRAME,
    MAX_GUARD_SETS,
    MAX_LISTED,
    MAX_STEPS_LISTED,
    OTHER_BREAKS,
)
from recompprof._analysis.report.divergence import find as find_divergence
from recompprof._analysis.report.figures import (
    BreakFigures,
    BreakGroup,
    CauseFigures,
    CauseReport,
    CompileFigures,
    RunFigures,
)
from recompprof._analysis.report.frames import FrameFigures, FrameReport, ReasonGroup
from recompprof._analysis.report.sessions import Incomplete, LogGap, SessionFigures, SessionFold
from recompprof._model.causes import CauseTracker


@dataclasses.dataclass
class Report(RunFigures, FrameFigures, CompileFigures, BreakFigures, CauseFigures, SessionFigures):
    """Everything the terminal and HTML reports show; built by :func:`recompprof._analysis.report.fold.build_report`.

    Its figures come in families (the bases), each a fold state with ``add`` and ``merge`` side by
    side; :meth:`merge` adds a part folded from later events, family by family.
    """

    # The caller's, about how the events were read (not folded).
    notes: list[str] = dataclasses.field(default_factory=list, metadata={"figure": False})
    # False: only the figures ``diff`` compares were folded (see build_report's ``detail``); not for rendering.
    detail: bool = dataclasses.field(default=True, metadata={"figure": False})  # how it was folded
    # How ``str(report)`` draws the report: given by whoever hands it to a user who prints it (the session's
    # ``report()`` gives the terminal renderer), so the model imports no renderer. None: the dataclass repr.
    renderer: Callable[[Report], str] | None = dataclasses.field(
        default=None, repr=False, compare=False, metadata={"figure": False}
    )

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
        return sorted(
            self.causes.values(), key=lambda c: (c.tier, -c.seconds, -c.recompiles, c.key)
        )

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
        """Frames whose recompiles, limit hits or reason categories differ across ranks (see recompprof._analysis.report.divergence)."""
        return [self.frames[d.frame.key] for d in find_divergence(self)]

    def __str__(self) -> str:
        return self.renderer(self) if self.renderer is not None else repr(self)

    def merge(self, part: Report) -> None:
        """Add ``part``, folded from the events right after those folded here, as one fold over both would
        have; raises :class:`~recompprof._analysis.report.bounded.Unmergeable` where the parts cannot say."""
        earlier_ranks = {rank for frame in self.frames.values() for rank in frame.compiles_by_rank}
        self.merge_sessions(part, started=self.ranks, touched=part.ranks | part.sessions_unopened)
        self.merge_causes(part, earlier_ranks)
        self.merge_run(part)
        self.merge_compile_figures(part)
        self.merge_breaks(part)
        self.merge_frames(part)
        self.detail = self.detail and part.detail

    def finish(self) -> None:
        """The figures the fold kept in its own form, once every event is folded."""
        self.finish_sessions()
        self.finish_frames()

    def require_detail(self) -> None:
        """Raise ValueError for a report folded with ``detail=False``: rendered, it would show zeros it never counted."""
        if not self.detail:
            raise ValueError(
                "a report folded with detail=False lacks the per-rank and phase figures it would show"
            )

    def drop_fold_state(self) -> None:
        """Forget what only folding more events needs: it holds the events' views, which do not pickle."""
        self.tracker = CauseTracker()
        self.frame_cache = {}
        self.session_fold = SessionFold()


__all__ = [
    "CAPTURE_SIGNALS",
    "MAX_BREAK_GROUPS",
    "MAX_BREAK_HINTS",
    "MAX_CAUSES",
    "MAX_FRAMES",
    "MAX_FUNCTIONS",
    "MAX_GROUPS_PER_FRAME",
    "MAX_GUARD_SETS",
    "MAX_LISTED",
    "MAX_STEPS_LISTED",
    "OTHER_BREAKS",
    "BreakGroup",
    "CauseReport",
    "FrameReport",
    "Incomplete",
    "LogGap",
    "ReasonGroup",
    "Report",
]
