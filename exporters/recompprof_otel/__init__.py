"""recompprof's OpenTelemetry exporter: one trace per torch.compile compile, sent over OTLP.

Enable it with ``recompprof.attach(exporters=["otel"])`` or ``RECOMPPROF_EXPORTERS=otel``; configure
the destination with the standard ``OTEL_*`` variables. See docs/opentelemetry.md.

Importing the package imports nothing of OpenTelemetry: recompprof reads its settings
(``recompprof_otel.settings``) at every ``attach()``, extra installed or not; the names below are
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recompprof_otel.exporter import OtelExporter
    from recompprof_otel.processor import BoundedBatchProcessor
    from recompprof_otel.spans import PHASE_SPAN, ROOT_SPAN, SpanBuilder, phase_intervals

_LAZY = {
    "OtelExporter": "recompprof_otel.exporter",
    "BoundedBatchProcessor": "recompprof_otel.processor",
    "PHASE_SPAN": "recompprof_otel.spans",
    "ROOT_SPAN": "recompprof_otel.spans",
    "SpanBuilder": "recompprof_otel.spans",
    "phase_intervals": "recompprof_otel.spans",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "PHASE_SPAN",
    "ROOT_SPAN",
    "BoundedBatchProcessor",
    "OtelExporter",
    "SpanBuilder",
    "phase_intervals",
]
