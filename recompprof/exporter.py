"""The interface an exporter is written against (docs/exporters.md): public, like ``recompprof`` itself.

An exporter is a subclass of :class:`Exporter`, with its settings in a subclass of
:class:`ExporterSettings`, installed under two entry points of one name (``recompprof.exporters``: the
class; ``recompprof.exporter_settings``: the settings model). It reads its session through a
:class:`SessionView`, receives the events below, names its metrics from :mod:`metric_names`, and runs
whatever may fail beside the training job under :class:`contain`. The in-tree exporters
(``recompprof_prometheus``, ``recompprof_otel``) use nothing else of recompprof.
"""

from __future__ import annotations

from recompprof._capture.exporting import Exporter, ExporterUnavailable, SessionView
from recompprof._capture.forks import Owner
from recompprof._capture.identity import Identity
from recompprof._capture.settings import ConfigError, ExporterSettings, no_booleans
from recompprof._errors import RecompprofError
from recompprof._internal import contain, record
from recompprof._model import metric_names
from recompprof._model.aggregates import DURATION_BUCKETS, ERROR_TYPES, Snapshot
from recompprof._model.causes import CauseTracker
from recompprof._model.counting import costs_seconds, is_limit_hit, steady_state_recompile
from recompprof._model.cudagraphs import CUDAGRAPH_SKIPS
from recompprof._model.events import (
    CACHE_RESULTS,
    CACHES,
    CATEGORIES,
    LIMITS,
    PHASES,
    Compile,
    CompileRunning,
    CompileStart,
    Event,
    Frame,
    GraphBreak,
    Reason,
    RecompileLimitHit,
    Running,
    SessionEnd,
    SessionStart,
    SignalChange,
)
from recompprof._model.metric_names import MetricName

__all__ = [
    # the interface
    "Exporter",
    "ExporterSettings",
    "SessionView",
    "Identity",
    "Snapshot",
    "no_booleans",
    # errors: a bad setting, an exporter that cannot load
    "ConfigError",
    "ExporterUnavailable",
    "RecompprofError",
    # the internal-error guard, and fork safety
    "Owner",
    "contain",
    "record",
    # metric names and the running totals' vocabularies
    "DURATION_BUCKETS",
    "ERROR_TYPES",
    "MetricName",
    "metric_names",
    # the events and their vocabularies
    "CACHES",
    "CACHE_RESULTS",
    "CATEGORIES",
    "CUDAGRAPH_SKIPS",
    "Compile",
    "CompileRunning",
    "CompileStart",
    "Event",
    "Frame",
    "GraphBreak",
    "LIMITS",
    "PHASES",
    "Reason",
    "RecompileLimitHit",
    "Running",
    "SessionEnd",
    "SessionStart",
    "SignalChange",
    # what an event counts as, and which cause a recompile is charged to
    "CauseTracker",
    "costs_seconds",
    "is_limit_hit",
    "steady_state_recompile",
]
