"""OTLP exporters by protocol: http/protobuf by default, grpc from the ``otel-grpc`` extra (lazy import).

The SDK exporters read endpoint, headers, timeout, compression and TLS from the standard
``OTEL_EXPORTER_OTLP_*`` variables themselves; nothing is passed here so that those keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recompprof.exporter import ExporterUnavailable
from recompprof_otel.environment import GRPC

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.trace.export import SpanExporter

_GRPC_HINT = (
    "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the 'otel-grpc' extra "
    "(pip install 'recompprof[otel-grpc]', i.e. opentelemetry-exporter-otlp-proto-grpc)"
)


def _grpc_missing(exc: ImportError) -> ExporterUnavailable:
    return ExporterUnavailable(f"recompprof exporter 'otel': {_GRPC_HINT}: {exc}")


def check_protocol(protocol: str) -> None:
    """Fail at attach, not at first export, when the chosen protocol's package is missing."""
    if protocol == GRPC:
        try:
            import opentelemetry.exporter.otlp.proto.grpc.trace_exporter  # noqa: F401
        except ImportError as exc:
            raise _grpc_missing(exc) from exc


def span_exporter(protocol: str, timeout_s: float | None = None) -> SpanExporter:
    """An OTLP span exporter for ``protocol`` configured from the environment (``timeout_s`` overrides its timeout)."""
    kwargs: dict[str, Any] = {"timeout": timeout_s} if timeout_s is not None else {}
    if protocol == GRPC:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as exc:
            raise _grpc_missing(exc) from exc
        return GrpcExporter(**kwargs)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(**kwargs)


def metric_exporter(protocol: str) -> MetricExporter:
    """An OTLP metric exporter for ``protocol`` (cumulative temporality, the Prometheus model)."""
    if protocol == GRPC:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetrics,
            )
        except ImportError as exc:
            raise _grpc_missing(exc) from exc
        return GrpcMetrics()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()
