"""Prometheus exporter for recompprof (``attach(exporters=["prometheus"])``); install the ``prometheus`` extra.

Importing the package imports nothing of ``prometheus_client``: recompprof reads its settings
(``recompprof_prometheus.settings``) at every ``attach()``, extra installed or not; the names below are
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recompprof_prometheus.collector import SnapshotCollector
    from recompprof_prometheus.exporter import PrometheusExporter
    from recompprof_prometheus.server import MetricsServer, PortInUse

_LAZY = {
    "MetricsServer": "recompprof_prometheus.server",
    "PortInUse": "recompprof_prometheus.server",
    "PrometheusExporter": "recompprof_prometheus.exporter",
    "SnapshotCollector": "recompprof_prometheus.collector",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["MetricsServer", "PortInUse", "PrometheusExporter", "SnapshotCollector"]
