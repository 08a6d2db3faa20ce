"""The interface an exporter is written against (docs/exporters.md): public, like ``recompprof`` itself.

An exporter is a subclass of :class:`Exporter`, with its settings in a subclass of
:class:`ExporterSettings`, installed under two entry points of one name (``recompprof.exporters``: the
class; ``recompprof.exporter_settings``: the settings model). It reads its session through a
:class:`SessionView`, receives the events below, names its metrics from :mod:`metric_names`, and runs
whatever may fail beside the training job under :class:`contain`. The in-tree exporters
(``recompprof_prometheus``, ``recompprof_otel``) use nothing else of recompprof.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from recompprof._model.vocabulary import CACHE_RESULTS, CACHES, CATEGORIES, LIMITS, PHASES

# Public name -> its defining module. Imported on first use: an exporter's settings module, read at
# every attach() and by every recompprof command, needs only ExporterSettings.
_LAZY: dict[str, str] = {
    "Exporter": "recompprof._capture.exporting",
    "ExporterUnavailable": "recompprof._capture.exporting",
    "SessionView": "recompprof._capture.exporting",
    "Owner": "recompprof._capture.forks",
    "Identity": "recompprof._capture.identity",
    "ConfigError": "recompprof._capture.settings",
    "ExporterSettings": "recompprof._capture.settings",
    "no_booleans": "recompprof._capture.settings",
    "RecompprofError": "recompprof._errors",
    "contain": "recompprof._internal",
    "record": "recompprof._internal",
    "DURATION_BUCKETS": "recompprof._model.aggregates",
    "ERROR_TYPES": "recompprof._model.aggregates",
    "Snapshot": "recompprof._model.aggregates",
    "CauseTracker": "recompprof._model.causes",
    "costs_seconds": "recompprof._model.counting",
    "is_limit_hit": "recompprof._model.counting",
    "steady_state_recompile": "recompprof._model.counting",
    "CUDAGRAPH_SKIPS": "recompprof._model.cudagraphs",
    **dict.fromkeys(
        ["CACHE_RESULTS", "CACHES", "CATEGORIES", "LIMITS", "PHASES"],
        "recompprof._model.vocabulary",
    ),
    **dict.fromkeys(
        [
            "Compile",
            "CompileRunning",
            "CompileStart",
            "Event",
            "Frame",
            "GraphBreak",
            "Reason",
            "RecompileLimitHit",
            "Running",
            "SessionEnd",
            "SessionStart",
            "SignalChange",
        ],
        "recompprof._model.events",
    ),
    "MetricName": "recompprof._model.metric_names",
}


def __getattr__(name: str) -> Any:
    if name == "metric_names":
        value: Any = importlib.import_module("recompprof._model.metric_names")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
