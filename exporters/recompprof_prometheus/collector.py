"""A prometheus_client collector that builds every recompprof metric family at scrape time.

Nothing is counted on the compile path: each scrape (or textfile write, push, multiprocess mirror)
reads one consistent ``Snapshot`` and turns it into metric families. Label values come only from
closed sets (rank, capped frame labels with ``other``, reason category, phase, limit, error type).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar as PromExemplar
from prometheus_client.utils import floatToGoString

from recompprof.exporter import (
    CACHE_RESULTS,
    CACHES,
    CATEGORIES,
    CUDAGRAPH_SKIPS,
    DURATION_BUCKETS,
    ERROR_TYPES,
    LIMITS,
    PHASES,
    metric_names as names,
)

if TYPE_CHECKING:
    from recompprof.exporter import Identity, Snapshot

# Internal-error components of this exporter, exported at 0 from the start so the first error
# shows up in increase(); other components appear when the session reports them.
COMPONENTS: tuple[str, ...] = (
    "prometheus.collector",
    "prometheus.server",
    "prometheus.multiprocess",
    "prometheus.textfile",
    "prometheus.pushgateway",
)
DROP_REASONS: tuple[str, ...] = ("frame_cap",)

_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")


class SnapshotCollector(Collector):
    """Yields the metric families of docs/prometheus.md from ``snapshot()`` for the process ``identity``."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        identity: Identity,
        versions: Mapping[str, str | None] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._identity = identity
        self._rank = str(identity.rank)
        self._build_labels = _build_labels(versions or {})
        # The per-frame families (~95% of the series at the cap) change only when a compile does; the
        # same objects are returned until then so writers can reuse their rendered text.
        self._frame_memo: tuple[dict[str, Any], list[Metric]] | None = None

    def describe(self) -> list[Metric]:
        # Registering must not take a snapshot (the session may not be started yet).
        return []

    def collect(self) -> Iterator[Metric]:
        return iter(self.families(self._snapshot()))

    def families(self, snap: Snapshot) -> list[Metric]:
        """All families for one snapshot, in a stable order."""
        rank = self._rank
        memo = self._frame_memo
        if memo is not None and memo[0] == snap.frames:
            per_frame = memo[1]
        else:
            per_frame = self._frame_families(snap)
            self._frame_memo = (snap.frames, per_frame)
        compiles, recompiles, steady, guards, limit_hits, cache_entries, frame_seconds, lost = (
            per_frame
        )

        failures = CounterMetricFamily(
            names.COMPILE_FAILURES.family,
            "Compiles that raised, by exception class (closed list, else other).",
            labels=("rank", "error_type"),
        )
        for error_type in ERROR_TYPES:
            failures.add_metric((rank, error_type), snap.compile_failures.get(error_type, 0))

        graph_breaks = CounterMetricFamily(
            names.GRAPH_BREAKS.family, "Graph breaks seen by compiles.", labels=("rank",)
        )
        graph_breaks.add_metric((rank,), snap.graph_breaks)

        phases = CounterMetricFamily(
            names.PHASE_SECONDS.family,
            "Compile time by exclusive phase; phases sum to the total compile time.",
            labels=("rank", "phase"),
            unit="seconds",
        )
        for phase in PHASES:
            phases.add_metric((rank, phase), snap.phase_seconds.get(phase, 0.0))

        limits = GaugeMetricFamily(
            names.RECOMPILE_LIMIT.family,
            "Recompile limits in force, so alerts can warn before the fallback.",
            labels=("rank", "limit"),
        )
        for limit in LIMITS:
            value = snap.limits.get(limit)
            if value is not None:  # None: not read from torch yet (before the session starts)
                limits.add_metric((rank, limit), value)

        step = GaugeMetricFamily(
            names.TRAINING_STEP.family, "The training step the process is at.", labels=("rank",)
        )
        step.add_metric((rank,), snap.step)

        lookups = CounterMetricFamily(
            names.CACHE_LOOKUPS.family,
            "Compile-cache lookups (FX graph, AOTAutograd) by result, as torch counts them.",
            labels=("rank", "cache", "result"),
        )
        for cache in CACHES:
            for result in CACHE_RESULTS:
                lookups.add_metric(
                    (rank, cache, result), snap.cache_lookups.get((cache, result), 0)
                )
        saved = CounterMetricFamily(
            names.CACHE_SAVED_SECONDS.family,
            "Compile time that compile-cache hits saved, as torch reports it.",
            labels=("rank",),
            unit="seconds",
        )
        saved.add_metric((rank,), snap.cache_seconds_saved)
        skips = CounterMetricFamily(
            names.CUDAGRAPH_SKIPS.family,
            "Compiles that run without CUDA graphs, by reason (closed list).",
            labels=("rank", "reason"),
        )
        for reason in CUDAGRAPH_SKIPS:
            skips.add_metric((rank, reason), snap.cudagraph_skips.get(reason, 0))

        fams: list[Metric] = [
            compiles,
            recompiles,
            steady,
            guards,
            limit_hits,
            failures,
            graph_breaks,
            self._duration(snap),
            phases,
            cache_entries,
            limits,
            frame_seconds,
            lost,
            lookups,
            saved,
            skips,
        ]
        if snap.last_compile_time is not None:
            # No series before the first compile: a 0 timestamp would make time() - x alerts fire.
            last = GaugeMetricFamily(
                names.LAST_COMPILE.family, "Unix time the last compile finished.", labels=("rank",)
            )
            last.add_metric((rank,), snap.last_compile_time)
            fams.append(last)
        fams.extend(self._compiling(snap))
        fams.append(step)
        fams.extend(self._self_metrics(snap))
        return fams

    def _frame_families(self, snap: Snapshot) -> list[Metric]:
        rank = self._rank
        frames = sorted(snap.frames.items())
        compiles = CounterMetricFamily(
            names.COMPILES.family,
            "Frame compiles (attempts, forward graphs), by frame.",
            labels=("rank", "frame"),
        )
        recompiles = CounterMetricFamily(
            names.RECOMPILES.family,
            "Recompiles: compiles of a frame that already had a compiled entry.",
            labels=("rank", "frame"),
        )
        steady = CounterMetricFamily(
            names.STEADY_STATE_RECOMPILES.family,
            "Recompiles after the configured warm-up steps.",
            labels=("rank", "frame"),
        )
        guards = CounterMetricFamily(
            names.GUARD_FAILURES.family,
            "Guard failures by reason category (one compile can have several).",
            labels=("rank", "frame", "reason"),
        )
        limit_hits = CounterMetricFamily(
            names.LIMIT_HITS.family,
            "Times a frame hit a recompile limit and fell back.",
            labels=("rank", "frame", "limit"),
        )
        cache_entries = GaugeMetricFamily(
            names.CACHE_ENTRIES.family,
            "Compiled entries the frame holds now.",
            labels=("rank", "frame"),
        )
        frame_seconds = CounterMetricFamily(
            names.FRAME_COMPILE_SECONDS.family,
            "Compile time of a frame (all compiles and phases, backward included).",
            labels=("rank", "frame"),
            unit="seconds",
        )
        lost = CounterMetricFamily(
            names.RECOMPILE_SECONDS.family,
            "Compile time lost to recompiles (and their backward compiles), by frame and the reason category "
            "that explains each recompile.",
            labels=("rank", "frame", "reason"),
            unit="seconds",
        )
        for label, totals in frames:
            compiles.add_metric((rank, label), totals.compiles)
            recompiles.add_metric((rank, label), totals.recompiles)
            steady.add_metric((rank, label), totals.steady_state_recompiles)
            # Every category exists at 0 once the frame is known, so a frame's first failure of a
            # kind is visible to rate()/increase(); the frame cap bounds this at (cap+1) x 23.
            for category in CATEGORIES:
                guards.add_metric((rank, label, category), totals.guard_failures.get(category, 0))
            for limit in LIMITS:
                limit_hits.add_metric((rank, label, limit), totals.limit_hits.get(limit, 0))
            cache_entries.add_metric((rank, label), totals.cache_entries)
            frame_seconds.add_metric((rank, label), totals.compile_seconds)
            # Only categories that cost time: a series per category per frame would double the series at the cap.
            for category, seconds in sorted(totals.recompile_seconds.items()):
                lost.add_metric((rank, label, category), seconds)

        return [
            compiles,
            recompiles,
            steady,
            guards,
            limit_hits,
            cache_entries,
            frame_seconds,
            lost,
        ]

    def _compiling(self, snap: Snapshot) -> list[Metric]:
        """Whether a compile runs now (a 0 series between compiles) and, while one does, its age at this scrape."""
        compiling = GaugeMetricFamily(
            names.COMPILING.family, "1 while a compile runs on this rank, else 0.", labels=("rank",)
        )
        compiling.add_metric((self._rank,), 0 if snap.compiling is None else 1)
        running = GaugeMetricFamily(
            names.COMPILE_RUNNING.family,
            "How long the running compile has run, by frame (no series between compiles).",
            labels=("rank", "frame"),
            unit="seconds",
        )
        seconds = snap.compiling_seconds(time.time())
        if snap.compiling is not None and seconds is not None:
            running.add_metric((self._rank, snap.compiling[0]), seconds)
        return [compiling, running]

    def _duration(self, snap: Snapshot) -> HistogramMetricFamily:
        buckets: list[tuple[str, float] | tuple[str, float, PromExemplar]] = []
        cumulative = 0
        bounds = [*(floatToGoString(b) for b in DURATION_BUCKETS), "+Inf"]
        for index, (bound, count) in enumerate(zip(bounds, snap.duration_bucket_counts)):
            cumulative += count
            ex = snap.duration_exemplars.get(index)
            if ex is not None:
                buckets.append(
                    (
                        bound,
                        cumulative,
                        PromExemplar({"trace_id": ex.trace_id}, ex.value, ex.timestamp),
                    )
                )
            else:
                buckets.append((bound, cumulative))
        hist = HistogramMetricFamily(
            names.DURATION.family,
            "Wall time of one frame compile.",
            labels=("rank",),
            unit="seconds",
        )
        hist.add_metric((self._rank,), buckets, snap.duration_sum)
        return hist

    def _self_metrics(self, snap: Snapshot) -> list[Metric]:
        rank = self._rank
        ident = self._identity
        build = GaugeMetricFamily(
            names.BUILD_INFO.family,
            "recompprof and library versions (value 1).",
            labels=("rank", *self._build_labels),
        )
        build.add_metric((rank, *self._build_labels.values()), 1)
        process = GaugeMetricFamily(
            names.PROCESS_INFO.family,
            "This process's place in the job (value 1).",
            labels=("rank", "local_rank", "world_size", "local_world_size", "launcher"),
        )
        process.add_metric(
            (
                rank,
                str(ident.local_rank),
                str(ident.world_size),
                str(ident.local_world_size),
                ident.launcher,
            ),
            1,
        )
        dropped = CounterMetricFamily(
            names.EVENTS_DROPPED.family,
            "Events recompprof dropped or folded, by reason.",
            labels=("rank", "reason"),
        )
        for reason, n in sorted({**dict.fromkeys(DROP_REASONS, 0), **snap.events_dropped}.items()):
            dropped.add_metric((rank, reason), n)
        errors = CounterMetricFamily(
            names.INTERNAL_ERRORS.family,
            "Internal recompprof errors (contained), by component.",
            labels=("rank", "component"),
        )
        for component, n in sorted(
            {**dict.fromkeys(COMPONENTS, 0), **snap.internal_errors}.items()
        ):
            errors.add_metric((rank, component), n)
        return [build, process, dropped, errors]


def _build_labels(versions: Mapping[str, str | None]) -> dict[str, str]:
    """``{"recompprof": "0.1"}`` -> ``{"version": "0.1"}``; other keys become ``<key>_version``."""
    labels: dict[str, str] = {"version": str(versions.get("recompprof") or "")}
    for key in ("torch", "triton", "python"):
        labels[f"{key}_version"] = str(versions.get(key) or "")
    for key, value in sorted(versions.items()):
        name = _LABEL_NAME.sub("_", key.lower()) + "_version"
        if key != "recompprof" and name not in labels:
            labels[name] = str(value or "")
    return labels
