"""recompprof: live recompilation and guard-failure profiling for ``torch.compile``.

    with recompprof.attach():          # monitor mode: observes, changes nothing
        train()
    print(recompprof.report())

This module is the public API: every name in ``__all__`` (plus the public modules
``recompprof.testing``, ``recompprof.pytest_plugin``, ``recompprof.integrations`` and
``recompprof.exporter``, the interface exporters are written against). Everything under a
``recompprof._name`` path is private and may move between releases.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from recompprof._errors import CommandError, RecompprofError, RuleBroken
from recompprof._version import __version__

if TYPE_CHECKING:
    from recompprof._analysis.check import CheckInputError
    from recompprof._analysis.render.divergence import (
        DescribedDivergence as Divergence,
        find_divergence,
    )
    from recompprof._analysis.report.model import Report
    from recompprof._analysis.runs import RunError
    from recompprof._analysis.trace.ingest import IngestError
    from recompprof._capture.exporting import ExporterUnavailable
    from recompprof._capture.session import Session, attach, current
    from recompprof._capture.settings import ConfigError, Settings
    from recompprof._eventlog.reader import EventLogError, read_run
    from recompprof._model.cudagraphs import CUDAGRAPH_SKIPS, SKIP_HINTS as CUDAGRAPH_SKIP_HINTS
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
    from recompprof._model.fix_hints import FIX_HINTS
    from recompprof._model.status import Status
    from recompprof._model.vocabulary import CATEGORIES, PHASES

# Public name -> (private module, name there). Imported on first use: the offline commands (report,
# check, diff) never start a session, and the session's imports (settings, exporters, torch adapters)
# were a third of their start-up; nothing here imports torch.
_LAZY: dict[str, tuple[str, str]] = {
    # The event model builds its pydantic validators on import (~0.3 s): loaded on first use, so
    # commands that never read an event (history) do not pay for it.
    "CATEGORIES": ("recompprof._model.vocabulary", "CATEGORIES"),
    "PHASES": ("recompprof._model.vocabulary", "PHASES"),
    "Compile": ("recompprof._model.events", "Compile"),
    "CompileRunning": ("recompprof._model.events", "CompileRunning"),
    "CompileStart": ("recompprof._model.events", "CompileStart"),
    "Event": ("recompprof._model.events", "Event"),
    "Frame": ("recompprof._model.events", "Frame"),
    "GraphBreak": ("recompprof._model.events", "GraphBreak"),
    "Reason": ("recompprof._model.events", "Reason"),
    "RecompileLimitHit": ("recompprof._model.events", "RecompileLimitHit"),
    "Running": ("recompprof._model.events", "Running"),
    "SessionEnd": ("recompprof._model.events", "SessionEnd"),
    "SessionStart": ("recompprof._model.events", "SessionStart"),
    "SignalChange": ("recompprof._model.events", "SignalChange"),
    "Status": ("recompprof._model.status", "Status"),
    "Session": ("recompprof._capture.session", "Session"),
    "attach": ("recompprof._capture.session", "attach"),
    "current": ("recompprof._capture.session", "current"),
    "Settings": ("recompprof._capture.settings", "Settings"),
    "ConfigError": ("recompprof._capture.settings", "ConfigError"),
    "ExporterUnavailable": ("recompprof._capture.exporting", "ExporterUnavailable"),
    "EventLogError": ("recompprof._eventlog.reader", "EventLogError"),
    "read_run": ("recompprof._eventlog.reader", "read_run"),
    "RunError": ("recompprof._analysis.runs", "RunError"),
    "IngestError": ("recompprof._analysis.trace.ingest", "IngestError"),
    "CheckInputError": ("recompprof._analysis.check", "CheckInputError"),
    "Report": ("recompprof._analysis.report.model", "Report"),
    "find_divergence": ("recompprof._analysis.render.divergence", "find_divergence"),
    "Divergence": ("recompprof._analysis.render.divergence", "DescribedDivergence"),
    "FIX_HINTS": ("recompprof._model.fix_hints", "FIX_HINTS"),
    "CUDAGRAPH_SKIPS": ("recompprof._model.cudagraphs", "CUDAGRAPH_SKIPS"),
    "CUDAGRAPH_SKIP_HINTS": ("recompprof._model.cudagraphs", "SKIP_HINTS"),
}


def build_report(events: Iterable[Event], *, detail: bool = True) -> Report:
    """Fold events (any order of ranks, one pass) into a :class:`Report`; ``str(report)`` draws the terminal report."""
    from recompprof._analysis.render.printed import printed
    from recompprof._analysis.report.fold import build_report as fold

    return printed(fold(events, detail=detail))


def report(session: Session | None = None) -> Report:
    """The report of ``session`` (default: the attached session, or the last one that detached), streamed
    from its event log (or its recent events if it has none); ``print(recompprof.report())`` draws it."""
    from recompprof._capture.session import reported

    return build_report((session if session is not None else reported()).events())


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'recompprof' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # capture
    "Session",
    "Settings",
    "Status",
    "__version__",
    "attach",
    "current",
    "report",
    # the event model (docs/events.md) and its vocabularies
    "CATEGORIES",
    "CUDAGRAPH_SKIPS",
    "CUDAGRAPH_SKIP_HINTS",
    "Compile",
    "CompileRunning",
    "CompileStart",
    "Event",
    "FIX_HINTS",
    "Frame",
    "GraphBreak",
    "PHASES",
    "Reason",
    "RecompileLimitHit",
    "Running",
    "SessionEnd",
    "SessionStart",
    "SignalChange",
    # offline analysis of a run (docs/multi-rank.md)
    "Divergence",
    "Report",
    "build_report",
    "find_divergence",
    "read_run",
    # errors (docs/cli.md)
    "CheckInputError",
    "CommandError",
    "ConfigError",
    "EventLogError",
    "ExporterUnavailable",
    "IngestError",
    "RecompprofError",
    "RuleBroken",
    "RunError",
]
