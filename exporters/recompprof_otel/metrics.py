"""Optional OpenTelemetry metrics (``otel_metrics``), named so they translate to the Prometheus names.

The OTLP-to-Prometheus translation replaces dots with underscores, appends the unit (``s`` becomes
``_seconds``; ``{...}`` annotations add nothing) and ``_total`` to monotonic sums, so
``torch_compile.recompiles`` with unit ``{recompile}`` arrives as ``torch_compile_recompiles_total``.
Everything but the duration histogram is observed from ``session.snapshot()`` at collection time;
OpenTelemetry has no asynchronous histogram, so durations are recorded as compiles happen.
Send these *or* scrape the Prometheus exporter into one Prometheus, never both (duplicate series).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, PeriodicExportingMetricReader

from recompprof.exporter import (
    DURATION_BUCKETS,
    LIMITS,
    Owner,
    contain,
    costs_seconds,
    metric_names as names,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricsData
    from opentelemetry.sdk.resources import Resource

    from recompprof.exporter import Compile, MetricName, Snapshot

# (instrument name, unit, the Prometheus name it becomes), from the table both exporters share;
# tests check the translation.
INSTRUMENTS: tuple[tuple[str, str, str], ...] = tuple(
    (m.otel, m.otel_unit, m.exposed) for m in names.ALL if m.otel
)

Obs = Iterator[Observation]


class _ParentOnly:
    """Wraps a metric exporter so a forked child (whose reader thread the SDK restarts) sends nothing."""

    def __init__(self, inner: MetricExporter) -> None:
        self._inner = inner
        self._owner = Owner()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self._owner.forked():
            return MetricExportResult.SUCCESS
        return self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        if not self._owner.forked():
            self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._owner.forked() or bool(self._inner.force_flush(timeout_millis=timeout_millis))


class OtelMetrics:
    """A MeterProvider of its own whose instruments read ``snapshot()``; ``extra_dropped`` adds span drops."""

    def __init__(
        self,
        exporter: MetricExporter,
        resource: Resource,
        snapshot: Callable[[], Snapshot],
        rank: int,
        extra_dropped: Callable[[], dict[str, int]],
        build_info: dict[str, str],
    ) -> None:
        self._snapshot = snapshot
        self._extra_dropped = extra_dropped
        self._rank = {"rank": str(rank)}
        self._build_info = {**self._rank, **build_info}
        reader = PeriodicExportingMetricReader(_ParentOnly(exporter))  # type: ignore[arg-type]
        self.provider = MeterProvider(
            resource=resource, metric_readers=[reader], shutdown_on_exit=False
        )
        meter = self.provider.get_meter("recompprof", build_info.get("version") or None)
        counters: dict[MetricName, Callable[[Snapshot], Obs]] = {
            names.COMPILES: self._per_frame("compiles"),
            names.RECOMPILES: self._per_frame("recompiles"),
            names.STEADY_STATE_RECOMPILES: self._per_frame("steady_state_recompiles"),
            names.GUARD_FAILURES: self._guard_failures,
            names.LIMIT_HITS: self._limit_hits,
            names.COMPILE_FAILURES: self._compile_failures,
            names.GRAPH_BREAKS: lambda s: iter([Observation(s.graph_breaks, self._rank)]),
            names.PHASE_SECONDS: self._phases,
            names.FRAME_COMPILE_SECONDS: self._per_frame("compile_seconds"),
            names.RECOMPILE_SECONDS: self._recompile_seconds,
            names.CACHE_LOOKUPS: self._cache_lookups,
            names.CACHE_SAVED_SECONDS: lambda s: iter(
                [Observation(s.cache_seconds_saved, self._rank)]
            ),
            names.EVENTS_DROPPED: self._dropped,
            names.INTERNAL_ERRORS: self._internal_errors,
        }
        gauges: dict[MetricName, Callable[[Snapshot], Obs]] = {
            names.CACHE_ENTRIES: self._cache_entries,
            names.RECOMPILE_LIMIT: self._limits,
            names.LAST_COMPILE: self._last_compile,
            names.TRAINING_STEP: lambda s: iter([Observation(s.step, self._rank)]),
            names.COMPILING: lambda s: iter(
                [Observation(0 if s.compiling is None else 1, self._rank)]
            ),
            names.COMPILE_RUNNING: self._compile_running,
        }
        for metric, read in counters.items():
            meter.create_observable_counter(
                metric.otel, callbacks=[self._callback(metric.otel, read)], unit=metric.otel_unit
            )
        for metric, read in gauges.items():
            meter.create_observable_gauge(
                metric.otel, callbacks=[self._callback(metric.otel, read)], unit=metric.otel_unit
            )
        meter.create_observable_gauge(
            names.BUILD_INFO.otel,
            callbacks=[lambda _o: [Observation(1, self._build_info)]],
            description="recompprof and torch versions (value 1)",
        )
        self._duration = meter.create_histogram(
            names.DURATION.otel,
            unit=names.DURATION.otel_unit,
            description="Wall time of one compile",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )

    def _callback(
        self, name: str, read: Callable[[Snapshot], Obs]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            out: list[Observation] = []
            with contain(f"otel.metrics.{name}"):
                out = list(read(self._snapshot()))
            return out

        return callback

    def record_compile(self, event: Compile, context: Context | None) -> None:
        """Observe one compile's duration (the same rule as the Prometheus histogram: limit hits excluded)."""
        if costs_seconds(event):
            self._duration.record(event.duration, self._rank, context=context)

    def shutdown(self, timeout: float) -> None:
        self.provider.shutdown(timeout_millis=max(timeout, 0.0) * 1000)

    # -- observations ---------------------------------------------------------------------------
    def _per_frame(self, field: str) -> Callable[[Snapshot], Obs]:
        def read(snap: Snapshot) -> Obs:
            for label, totals in snap.frames.items():
                yield Observation(getattr(totals, field), {**self._rank, "frame": label})

        return read

    def _guard_failures(self, snap: Snapshot) -> Obs:
        for label, totals in snap.frames.items():
            for reason, count in totals.guard_failures.items():
                yield Observation(count, {**self._rank, "frame": label, "reason": reason})

    def _recompile_seconds(self, snap: Snapshot) -> Obs:
        for label, totals in snap.frames.items():
            for reason, seconds in totals.recompile_seconds.items():
                yield Observation(seconds, {**self._rank, "frame": label, "reason": reason})

    def _cache_lookups(self, snap: Snapshot) -> Obs:
        for (cache, result), count in snap.cache_lookups.items():
            yield Observation(count, {**self._rank, "cache": cache, "result": result})

    def _limit_hits(self, snap: Snapshot) -> Obs:
        for label, totals in snap.frames.items():
            for limit in LIMITS:  # zeros too, so alerts see the series before the first hit
                yield Observation(
                    totals.limit_hits.get(limit, 0), {**self._rank, "frame": label, "limit": limit}
                )

    def _compile_failures(self, snap: Snapshot) -> Obs:
        for error_type, count in snap.compile_failures.items():
            yield Observation(count, {**self._rank, "error_type": error_type})

    def _phases(self, snap: Snapshot) -> Obs:
        for phase, seconds in snap.phase_seconds.items():
            yield Observation(seconds, {**self._rank, "phase": phase})

    def _dropped(self, snap: Snapshot) -> Obs:
        merged = dict(snap.events_dropped)
        for reason, count in self._extra_dropped().items():
            merged.setdefault(f"otel_{reason}", count)
        for reason, count in merged.items():
            yield Observation(count, {"reason": reason})

    def _internal_errors(self, snap: Snapshot) -> Obs:
        for component, count in snap.internal_errors.items():
            yield Observation(count, {"component": component})

    def _cache_entries(self, snap: Snapshot) -> Obs:
        for label, totals in snap.frames.items():
            yield Observation(totals.cache_entries, {**self._rank, "frame": label})

    def _limits(self, snap: Snapshot) -> Obs:
        for limit, value in snap.limits.items():
            if value is not None:
                yield Observation(value, {**self._rank, "limit": limit})

    def _compile_running(self, snap: Snapshot) -> Obs:
        seconds = snap.compiling_seconds(time.time())
        if snap.compiling is not None and seconds is not None:
            yield Observation(seconds, {**self._rank, "frame": snap.compiling[0]})

    def _last_compile(self, snap: Snapshot) -> Obs:
        if snap.last_compile_time is not None:
            yield Observation(snap.last_compile_time, self._rank)
