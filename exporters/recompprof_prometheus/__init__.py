"""Prometheus exporter for recompprof (``attach(exporters=["prometheus"])``); install the ``prometheus`` extra."""

from __future__ import annotations

from recompprof_prometheus.collector import SnapshotCollector
from recompprof_prometheus.exporter import PrometheusExporter
from recompprof_prometheus.server import MetricsServer, PortInUse

__all__ = ["MetricsServer", "PortInUse", "PrometheusExporter", "SnapshotCollector"]
