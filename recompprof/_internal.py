"""Internal errors never reach the training job: they are counted and logged once per component.

Under the test suite (``raise_internal_errors(True)``, set by an autouse fixture) they re-raise, so a
bug in recompprof fails the test instead of hiding in a counter.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from types import TracebackType

log = logging.getLogger("recompprof")

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_logged: set[str] = set()
_raise = False


def raise_internal_errors(enabled: bool) -> bool:
    """Make internal errors re-raise (tests) or be swallowed (production); returns the old value."""
    global _raise
    old, _raise = _raise, enabled
    return old


def record(component: str, exc: BaseException, hint: str = "") -> None:
    """Count an internal error of ``component`` and log it the first time it happens."""
    with _lock:
        _counts[component] += 1
        first = component not in _logged
        _logged.add(component)
    if first:
        log.warning("recompprof: internal error in %s (counted in recompprof_internal_errors_total; "
                    "later ones are only counted)%s", component, f": {hint}" if hint else "", exc_info=exc)


class contain:
    """``with contain(component, hint):`` runs a block whose failure must not propagate into torch or the training loop.

    A class rather than a ``contextlib.contextmanager`` generator: it sits on the compile path dozens of times
    per compile (torch's trace hook), and entering a generator-based one costs several times more.
    """

    __slots__ = ("component", "hint")

    def __init__(self, component: str, hint: str = "") -> None:
        self.component = component
        self.hint = hint

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if exc is None or not isinstance(exc, Exception):  # the whole point is to contain errors, not exits
            return False
        record(self.component, exc, self.hint)
        return not _raise


def counts() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset() -> None:
    """Forget counts and once-logged components (tests)."""
    with _lock:
        _counts.clear()
        _logged.clear()
