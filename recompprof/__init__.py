"""recompprof: live recompilation and guard-failure profiling for ``torch.compile``.

    with recompprof.attach():          # monitor mode: observes, changes nothing
        train()
    print(recompprof.report())
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

from recompprof._model.errors import RecompprofError
from recompprof._model.events import CATEGORIES, PHASES

if TYPE_CHECKING:
    from recompprof._capture.session import Session, attach, current, report
    from recompprof._capture.settings import ConfigError, Settings

# Imported on first use: the offline commands (report, check, diff) never start a session, and the
# session's imports (settings, exporters, torch adapters) were a third of their start-up.
_LAZY = {"Session": "recompprof._capture.session", "attach": "recompprof._capture.session", "current": "recompprof._capture.session",
         "report": "recompprof._capture.session", "ConfigError": "recompprof._capture.settings", "Settings": "recompprof._capture.settings"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'recompprof' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "CATEGORIES",
    "PHASES",
    "ConfigError",
    "RecompprofError",
    "Session",
    "Settings",
    "__version__",
    "attach",
    "current",
    "report",
]
