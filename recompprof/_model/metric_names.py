"""The names of the metrics both exporters publish, in one table (docs/prometheus.md is the contract).

The Prometheus collector uses ``family``; the OpenTelemetry metrics use ``otel`` and ``otel_unit``,
chosen so that the OTLP-to-Prometheus translation (dots to underscores, unit ``s`` appends
``_seconds``, ``{...}`` annotations add nothing, monotonic sums get ``_total``) arrives at ``exposed``,
the name Prometheus stores. Sending both into one Prometheus would duplicate every series.
"""

from __future__ import annotations

import dataclasses
from typing import Literal


@dataclasses.dataclass(frozen=True)
class MetricName:
    family: str  # prometheus_client family name; a counter is exposed with "_total" appended
    kind: Literal["counter", "gauge", "histogram"]
    otel: str = ""  # OpenTelemetry instrument name; "": Prometheus only
    otel_unit: str = ""

    @property
    def exposed(self) -> str:
        """The name of the series in Prometheus (histograms add _bucket/_sum/_count to it)."""
        return self.family + "_total" if self.kind == "counter" else self.family


COMPILES = MetricName("torch_compile_compiles", "counter", "torch_compile.compiles", "{compile}")
RECOMPILES = MetricName(
    "torch_compile_recompiles", "counter", "torch_compile.recompiles", "{recompile}"
)
STEADY_STATE_RECOMPILES = MetricName(
    "torch_compile_steady_state_recompiles",
    "counter",
    "torch_compile.steady_state_recompiles",
    "{recompile}",
)
GUARD_FAILURES = MetricName(
    "torch_compile_guard_failures", "counter", "torch_compile.guard_failures", "{failure}"
)
LIMIT_HITS = MetricName(
    "torch_compile_recompile_limit_hits", "counter", "torch_compile.recompile_limit_hits", "{hit}"
)
COMPILE_FAILURES = MetricName(
    "torch_compile_compile_failures", "counter", "torch_compile.compile_failures", "{failure}"
)
GRAPH_BREAKS = MetricName(
    "torch_compile_graph_breaks", "counter", "torch_compile.graph_breaks", "{break}"
)
PHASE_SECONDS = MetricName("torch_compile_phase_seconds", "counter", "torch_compile.phase", "s")
DURATION = MetricName("torch_compile_duration_seconds", "histogram", "torch_compile.duration", "s")
FRAME_COMPILE_SECONDS = MetricName(
    "torch_compile_frame_compile_seconds", "counter", "torch_compile.frame_compile", "s"
)
RECOMPILE_SECONDS = MetricName(
    "torch_compile_recompile_seconds", "counter", "torch_compile.recompile", "s"
)
CACHE_LOOKUPS = MetricName(
    "torch_compile_cache_lookups", "counter", "torch_compile.cache_lookups", "{lookup}"
)
CACHE_SAVED_SECONDS = MetricName(
    "torch_compile_cache_saved_seconds", "counter", "torch_compile.cache_saved", "s"
)
CUDAGRAPH_SKIPS = MetricName("torch_compile_cudagraph_skips", "counter")
CACHE_ENTRIES = MetricName(
    "torch_compile_cache_entries", "gauge", "torch_compile.cache_entries", "{entry}"
)
RECOMPILE_LIMIT = MetricName(
    "torch_compile_recompile_limit", "gauge", "torch_compile.recompile_limit", "{recompile}"
)
LAST_COMPILE = MetricName(
    "torch_compile_last_compile_timestamp_seconds",
    "gauge",
    "torch_compile.last_compile_timestamp",
    "s",
)
COMPILING = MetricName("torch_compile_compiling", "gauge", "torch_compile.compiling", "{compile}")
COMPILE_RUNNING = MetricName(
    "torch_compile_compile_running_seconds", "gauge", "torch_compile.compile_running", "s"
)
TRAINING_STEP = MetricName(
    "torch_compile_training_step", "gauge", "torch_compile.training_step", "{step}"
)
BUILD_INFO = MetricName("recompprof_build_info", "gauge", "recompprof.build_info")
PROCESS_INFO = MetricName("recompprof_process_info", "gauge")
EVENTS_DROPPED = MetricName(
    "recompprof_events_dropped", "counter", "recompprof.events_dropped", "{event}"
)
INTERNAL_ERRORS = MetricName(
    "recompprof_internal_errors", "counter", "recompprof.internal_errors", "{error}"
)

ALL: tuple[MetricName, ...] = (
    COMPILES,
    RECOMPILES,
    STEADY_STATE_RECOMPILES,
    GUARD_FAILURES,
    LIMIT_HITS,
    COMPILE_FAILURES,
    GRAPH_BREAKS,
    PHASE_SECONDS,
    DURATION,
    FRAME_COMPILE_SECONDS,
    RECOMPILE_SECONDS,
    CACHE_LOOKUPS,
    CACHE_SAVED_SECONDS,
    CUDAGRAPH_SKIPS,
    CACHE_ENTRIES,
    RECOMPILE_LIMIT,
    LAST_COMPILE,
    COMPILING,
    COMPILE_RUNNING,
    TRAINING_STEP,
    BUILD_INFO,
    PROCESS_INFO,
    EVENTS_DROPPED,
    INTERNAL_ERRORS,
)
