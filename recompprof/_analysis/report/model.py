"""The report model: what recompiled, why, what it cost and how to fix it, for one or many ranks.

Recompiles are counted once per recompile, not once per failing cache entry as the old CompileProfiler
did; the reason that *explains* each recompile is counted separately from the guard failures against
older entries. A :class:`Report` is plain data: its figure families are its attributes, each with
``add`` and ``merge`` side by side. :class:`recompprof._analysis.report.fold.Folder` builds one from
events; the layouts under :mod:`recompprof._analysis.render` draw it.
"""

from __future__ import annotations

import dataclasses

from recompprof._analysis.report.bounded import MergeContext
from recompprof._analysis.report.divergence import find as find_divergence
from recompprof._analysis.report.figures import (
    Breaks,
    CauseReport,
    Causes,
    Compilation,
    RunFigures,
)
from recompprof._analysis.report.frames import FrameReport, Frames
from recompprof._analysis.report.sessions import Sessions
from recompprof._model.steady import settled


@dataclasses.dataclass
class Report:
    """Everything the terminal and HTML reports show; built by :func:`recompprof._analysis.report.fold.build_report`.

    Its figures come in families, one attribute each; :meth:`merge` adds a part folded from later
    events, family by family, as one fold over both would have.
    """

    run: RunFigures = dataclasses.field(default_factory=RunFigures)
    frames: Frames = dataclasses.field(default_factory=Frames)
    compilation: Compilation = dataclasses.field(default_factory=Compilation)
    breaks: Breaks = dataclasses.field(default_factory=Breaks)
    causes: Causes = dataclasses.field(default_factory=Causes)
    sessions: Sessions = dataclasses.field(default_factory=Sessions)
    # The caller's, about how the events were read (not folded).
    notes: list[str] = dataclasses.field(default_factory=list, metadata={"figure": False})
    # False: only the figures ``diff`` compares were folded (see build_report's ``detail``); not for rendering.
    detail: bool = dataclasses.field(default=True, metadata={"figure": False})  # how it was folded

    @property
    def steps_known(self) -> bool:
        """Whether recompiles carry training steps (an ingested trace has them only from an attached run)."""
        return not self.run.from_torch_trace or self.run.steps_from_trace

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

    def settled(self, cause: CauseReport) -> bool:
        """In hindsight, the run went on without the cause compiling again
        (:func:`recompprof._model.steady.settled`): what the live verdict could not know."""
        if not cause.recompiles:
            return False
        last = max((c.last_time for c in self.causes.values()), default=0.0)
        return settled(cause.first_time, cause.last_time, max(self.run.ended, last))

    def cache_hit_rate(self, cache: str) -> float | None:
        """Hits over lookups that hit or missed (bypasses never could hit); None without lookups."""
        lookups = self.compilation.cache_lookups
        hits, misses = lookups[(cache, "hit")], lookups[(cache, "miss")]
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

    def merge(self, part: Report) -> None:
        """Add ``part``, folded from the events right after those folded here, as one fold over both would
        have; raises :class:`~recompprof._analysis.report.bounded.Unmergeable` where the parts cannot say."""
        ctx = MergeContext(
            earlier_ranks=frozenset(
                rank for frame in self.frames.values() for rank in frame.ranks.compiles_by_rank
            ),
            started=frozenset(self.run.ranks),
            touched=frozenset(part.run.ranks | part.sessions.unopened),
        )
        self.sessions.merge(part.sessions, ctx)
        self.causes.merge(part.causes, ctx)
        self.run.merge(part.run, ctx)
        self.compilation.merge(part.compilation, ctx)
        self.breaks.merge(part.breaks, ctx)
        self.frames.merge(part.frames, ctx)
        self.detail = self.detail and part.detail

    def require_detail(self) -> None:
        """Raise ValueError for a report folded with ``detail=False``: rendered, it would show zeros it never counted."""
        if not self.detail:
            raise ValueError(
                "a report folded with detail=False lacks the per-rank and phase figures it would show"
            )
