"""Bounded running totals of a session, read by exporters at scrape time.

Updated only on the compile path (one call per event, under the session lock). Memory is bounded by
the frame cap: frames past ``max_frames`` are folded into the ``other`` frame, and every other label
set is a closed vocabulary.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

from recompprof._model.causes import CauseTracker
from recompprof._model.counting import (
    COSTS,
    COUNTED,
    RECOMPILE,
    FrameCounts,
    fold_compile,
    fold_limit_hit,
)
from recompprof._model.cudagraphs import CUDAGRAPH_SKIPS
from recompprof._model.events import Compile, Event, Frame, GraphBreak, RecompileLimitHit
from recompprof._model.vocabulary import CACHE_RESULTS, CACHES, CATEGORIES, LIMITS, PHASES

DURATION_BUCKETS: tuple[float, ...] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
    1800.0,
    3600.0,
)
OTHER_FRAME = "other"
# Exception class names torch raises out of a compile; anything else is reported as "other".
ERROR_TYPES: tuple[str, ...] = (
    "BackendCompilerFailed",
    "Unsupported",
    "InternalTorchDynamoError",
    "TorchRuntimeError",
    "RecompileError",
    "FailOnRecompileLimitHit",
    "UserError",
    "InductorError",
    "LoweringException",
    "CppCompileError",
    "RuntimeError",
    "other",
)


@dataclasses.dataclass
class FrameTotals(FrameCounts):
    """Per-frame counters (folded by :func:`recompprof._model.counting.fold_compile`); ``label`` is the
    closed-set metric label (or ``other``)."""

    label: str
    cache_entries: int = 0
    # Seconds of recompiles (and their backward) by the category of the reason that explains them.
    recompile_seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    def copy(self) -> FrameTotals:
        return dataclasses.replace(
            self,
            guard_failures=Counter(self.guard_failures),
            limit_hits=Counter(self.limit_hits),
            recompile_seconds=dict(self.recompile_seconds),
        )


@dataclasses.dataclass(frozen=True)
class Exemplar:
    trace_id: str
    value: float
    timestamp: float


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A consistent copy of the totals, safe to read without the lock."""

    frames: dict[str, FrameTotals]
    compile_failures: dict[str, int]
    graph_breaks: int
    duration_bucket_counts: tuple[
        int, ...
    ]  # non-cumulative, one per DURATION_BUCKETS bound plus +Inf
    duration_sum: float
    duration_count: int
    duration_exemplars: dict[int, Exemplar]  # bucket index -> latest exemplar
    phase_seconds: dict[str, float]
    limits: dict[str, int | None]
    last_compile_time: float | None
    step: int
    events_dropped: dict[str, int]
    internal_errors: dict[str, int]
    compiles_total: int
    recompiles_total: int
    cache_lookups: dict[tuple[str, str], int] = dataclasses.field(
        default_factory=dict
    )  # (cache, result)
    cache_seconds_saved: float = 0.0
    cudagraph_skips: dict[str, int] = dataclasses.field(default_factory=dict)  # reason -> compiles
    # The compile running now: its bounded frame label and its start (Unix seconds); None between compiles.
    compiling: tuple[str, float] | None = None

    def compiling_seconds(self, now: float) -> float | None:
        """How long the running compile has run at ``now`` (None between compiles)."""
        return None if self.compiling is None else max(0.0, now - self.compiling[1])

    def totals(self) -> dict[str, float]:
        """The run totals a ``SessionEnd`` carries (live and ingested runs both take them from here)."""
        return {
            "compiles": self.compiles_total,
            "recompiles": self.recompiles_total,
            "graph_breaks": self.graph_breaks,
            "compile_seconds": self.duration_sum,
            "compile_failures": sum(self.compile_failures.values()),
            "recompile_limit_hits": sum(sum(f.limit_hits.values()) for f in self.frames.values()),
        }


class Aggregates:
    """Running totals; not thread-safe by itself (the session serialises updates)."""

    def __init__(self, max_frames: int = 50) -> None:
        self.max_frames = max_frames
        self._frames: dict[str, FrameTotals] = {}
        self._frame_keys: dict[str, str] = {}  # frame key -> its label (or OTHER_FRAME)
        self.compile_failures: Counter[str] = Counter({t: 0 for t in ERROR_TYPES})
        self.graph_breaks = 0
        self._buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self._exemplars: dict[int, Exemplar] = {}
        self.duration_sum = 0.0
        self.duration_count = 0
        self.phase_seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.limits: dict[str, int | None] = dict.fromkeys(LIMITS)
        self.last_compile_time: float | None = None
        self.events_dropped: Counter[str] = Counter()
        self.compiles_total = 0
        self.recompiles_total = 0
        self.causes = CauseTracker()
        self._last_label: tuple[Frame, str] | None = None  # the last frame labelled, and its label
        self.cache_lookups: Counter[tuple[str, str]] = Counter(
            {(c, r): 0 for c in CACHES for r in CACHE_RESULTS}
        )
        self.cache_seconds_saved = 0.0
        self.cudagraph_skips: Counter[str] = Counter(dict.fromkeys(CUDAGRAPH_SKIPS, 0))

    # -- labels ---------------------------------------------------------------------------
    def frame_label(self, frame: Frame) -> str:
        """The bounded label for ``frame``: its own until ``max_frames`` are known, then ``other``."""
        # One compile's events share one Frame object (the assembler names each compile's frame once):
        # its label is not built again from its key for each of them.
        last = self._last_label
        if last is not None and last[0] is frame:
            return last[1]
        label = self._label(frame)
        self._last_label = (frame, label)
        return label

    def _label(self, frame: Frame) -> str:
        key = frame.key
        label = self._frame_keys.get(key)
        if label is None:
            if len(self._frame_keys) < self.max_frames:
                label = frame.label
            else:
                label = OTHER_FRAME
                self.events_dropped["frame_cap"] += 1
            self._frame_keys[key] = label
        return label

    def _totals(self, frame: Frame) -> FrameTotals:
        label = self.frame_label(frame)
        totals = self._frames.get(label)
        if totals is None:
            totals = self._frames[label] = FrameTotals(label)
        return totals

    # -- updates --------------------------------------------------------------------------
    def add(self, event: Event) -> None:
        """Fold one event of any kind (the ones that count nothing are ignored)."""
        if isinstance(event, Compile):
            self.add_compile(event)
        elif isinstance(event, RecompileLimitHit):
            self.add_limit_hit(event)
        elif isinstance(event, GraphBreak):
            self.add_graph_break(event)

    def add_compile(self, event: Compile) -> None:
        totals = self._totals(event.frame)
        counted = fold_compile(totals, event)
        if counted & COUNTED:
            self.compiles_total += 1
            self.recompiles_total += bool(counted & RECOMPILE)
        if event.cache_entries is not None and not event.backward:
            totals.cache_entries = event.cache_entries + (
                1 if event.outcome == "ok" and event.installed_code else 0
            )
        if event.outcome == "failed":
            fail = event.fail_type if event.fail_type in ERROR_TYPES else "other"
            self.compile_failures[fail] += 1
        if counted & COSTS:
            self._observe_duration(event.duration)
            if event.trace_id is not None:
                self.add_exemplar(event.duration, event.trace_id, event.time)
            for phase, seconds in event.phases.items():
                self.phase_seconds[phase] += seconds
        cause = self.causes.cause_of(event, counted)
        if cause is not None:
            # The cause's frame is the forward's; a backward of an unknown frame still lands on it.
            by_category = self._totals(cause.frame).recompile_seconds
            by_category[cause.category] = by_category.get(cause.category, 0.0) + event.duration
        for cache, results in event.cache_lookups.items():
            for result, count in results.items():
                self.cache_lookups[(cache, result)] += count
        self.cache_seconds_saved += event.cache_seconds_saved or 0.0
        if event.cudagraph_skip is not None:
            self.cudagraph_skips[
                event.cudagraph_skip if event.cudagraph_skip in CUDAGRAPH_SKIPS else "other"
            ] += 1
        self.last_compile_time = event.time

    def add_limit_hit(self, event: RecompileLimitHit) -> None:
        fold_limit_hit(self._totals(event.frame), event)

    def add_graph_break(self, event: GraphBreak) -> None:
        # Counted from the break itself: a break torch cannot resume from arrives after its compile's record.
        self.graph_breaks += event.count
        if event.frame is not None:
            self._totals(event.frame)

    def _observe_duration(self, seconds: float) -> None:
        index = self.bucket_index(seconds)
        self._buckets[index] += 1
        self.duration_sum += seconds
        self.duration_count += 1

    @staticmethod
    def bucket_index(seconds: float) -> int:
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                return i
        return len(DURATION_BUCKETS)

    def add_exemplar(self, seconds: float, trace_id: str, at: float | None = None) -> None:
        """Remember ``trace_id`` as the exemplar of the bucket ``seconds`` fell in."""
        self._exemplars[self.bucket_index(seconds)] = Exemplar(
            trace_id, seconds, time.time() if at is None else at
        )

    # -- reads ----------------------------------------------------------------------------
    def snapshot(self, *, step: int = 0, internal_errors: dict[str, int] | None = None) -> Snapshot:
        """A copy of the totals; ``step`` and ``internal_errors`` are the session's, read at the same time."""
        return Snapshot(
            frames={label: totals.copy() for label, totals in self._frames.items()},
            compile_failures=dict(self.compile_failures),
            graph_breaks=self.graph_breaks,
            duration_bucket_counts=tuple(self._buckets),
            duration_sum=self.duration_sum,
            duration_count=self.duration_count,
            duration_exemplars=dict(self._exemplars),
            phase_seconds=dict(self.phase_seconds),
            limits=dict(self.limits),
            last_compile_time=self.last_compile_time,
            step=step,
            events_dropped=dict(self.events_dropped),
            internal_errors=dict(internal_errors or {}),
            compiles_total=self.compiles_total,
            recompiles_total=self.recompiles_total,
            cache_lookups=dict(self.cache_lookups),
            cache_seconds_saved=self.cache_seconds_saved,
            cudagraph_skips=dict(self.cudagraph_skips),
        )


__all__ = [
    "CATEGORIES",
    "DURATION_BUCKETS",
    "ERROR_TYPES",
    "OTHER_FRAME",
    "Aggregates",
    "Exemplar",
    "FrameTotals",
    "Snapshot",
]
