"""Internal errors never reach the training job: they are counted and logged once per component.

Under the test suite (``raise_internal_errors(True)``, set by an autouse fixture) they re-raise, so a
bug in recompprof fails the test instead of hiding in a counter.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterator

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


@contextlib.contextmanager
def guard(component: str, hint: str = "") -> Iterator[None]:
    """Run a block whose failure must not propagate into torch or the training loop."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the whole point is to contain it
        record(component, exc, hint)
        if _raise:
            raise


def counts() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset() -> None:
    """Forget counts and once-logged components (tests)."""
    with _lock:
        _counts.clear()
        _logged.clear()
