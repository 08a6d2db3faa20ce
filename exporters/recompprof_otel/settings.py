"""The OpenTelemetry exporter's settings: ``otel_*``, each also read from ``RECOMPPROF_OTEL_*``.

Imported by recompprof at every ``attach()`` (entry point ``recompprof.exporter_settings``), with or
without the ``otel`` extra. Where the traces go is read from the standard ``OTEL_*`` variables
(``recompprof_otel.environment``), not from these.
"""

from __future__ import annotations

from recompprof.exporter import ExporterSettings


class OtelSettings(ExporterSettings):
    """What the OpenTelemetry exporter sends besides traces (docs/opentelemetry.md)."""

    otel_metrics: bool = False
