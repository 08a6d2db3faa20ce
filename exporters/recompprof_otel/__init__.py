"""recompprof's OpenTelemetry exporter: one trace per torch.compile compile, sent over OTLP.

Enable it with ``recompprof.attach(exporters=["otel"])`` or ``RECOMPPROF_EXPORTERS=otel``; configure
the destination with the standard ``OTEL_*`` variables. See docs/opentelemetry.md.
"""

from __future__ import annotations

from recompprof_otel.exporter import OtelExporter
from recompprof_otel.processor import BoundedBatchProcessor
from recompprof_otel.spans import PHASE_SPAN, ROOT_SPAN, SpanBuilder, phase_intervals

__all__ = [
    "PHASE_SPAN",
    "ROOT_SPAN",
    "BoundedBatchProcessor",
    "OtelExporter",
    "SpanBuilder",
    "phase_intervals",
]
