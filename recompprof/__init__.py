"""recompprof: live recompilation and guard-failure profiling for ``torch.compile``.

    with recompprof.attach():          # monitor mode: observes, changes nothing
        train()
    print(recompprof.report())
"""

from __future__ import annotations

__version__ = "0.1.0"

from recompprof.errors import RecompprofError
from recompprof.events import CATEGORIES, PHASES
from recompprof.session import Session, attach, current, report
from recompprof.settings import ConfigError, Settings

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
