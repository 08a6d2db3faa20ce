"""Internal errors never reach the training job: they are counted and logged once per component.

A condition of the machine (an ``OSError``: a taken port, an unwritable or full directory) or a
recompprof error that names what to change (a ``RecompprofError``) is logged as one line with its
message; its traceback goes to DEBUG. Anything else is a bug in recompprof and keeps its traceback.

In strict mode they re-raise, so a bug in recompprof fails the test instead of hiding in a counter.
Users (and recompprof's own test suite) turn it on with the public switch
:class:`recompprof.testing.raise_internal_errors`; code here reads it with :func:`raising`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from types import TracebackType

from recompprof._errors import RecompprofError

log = logging.getLogger("recompprof")

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_logged: set[str] = set()
_raise = False


def raise_internal_errors(enabled: bool) -> bool:
    """Make internal errors re-raise (tests) or be swallowed (production); returns the old value.

    The write side behind the public switch ``recompprof.testing.raise_internal_errors``.
    """
    global _raise
    old, _raise = _raise, enabled
    return old


def raising() -> bool:
    """Whether internal errors re-raise (the strict mode tests run in)."""
    return _raise


def record(component: str, exc: BaseException, hint: str = "") -> None:
    """Count an internal error of ``component`` and log it the first time it happens."""
    with _lock:
        _counts[component] += 1
        first = component not in _logged
        _logged.add(component)
    if not first:
        return
    if isinstance(exc, (OSError, RecompprofError)):  # expected: the message says what to do
        detail = "; ".join(part for part in (hint, str(exc).removeprefix("recompprof: ")) if part)
        log.warning(
            "recompprof: internal error in %s (counted in recompprof_internal_errors_total; "
            "later ones are only counted): %s",
            component,
            detail,
        )
        log.debug("recompprof: traceback of the error in %s", component, exc_info=exc)
    else:
        log.warning(
            "recompprof: internal error in %s (counted in recompprof_internal_errors_total; "
            "later ones are only counted)%s",
            component,
            f": {hint}" if hint else "",
            exc_info=exc,
        )


def caught(component: str, exc: Exception, hint: str = "") -> None:
    """What :class:`contain` does with an error, for a ``try``/``except`` on a path where a context
    manager per call costs too much (the session's fan-out, once per sink and event): counted and
    logged, raised again only under the tests."""
    record(component, exc, hint)
    if _raise:
        raise exc


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

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is None or not isinstance(
            exc, Exception
        ):  # the whole point is to contain errors, not exits
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
