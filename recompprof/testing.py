"""Test helpers: capture recompprof events in memory and assert that code does not recompile.

    from recompprof.testing import assert_no_recompiles

    train_step(model, batch)                 # the first compile is expected
    with assert_no_recompiles():
        train_step(model, next_batch)        # raises RecompiledError naming the frame, reason and fix

Both helpers use the attached session if there is one, else attach one for the block (monitor mode,
no event log, no exporters) and detach it afterwards. For pytest, the ``no_recompiles`` fixture of
:mod:`recompprof.pytest_plugin` checks a whole test.

recompprof never lets its own errors reach the training job: it counts them
(``recompprof_internal_errors_total``), logs each component's first one and goes on. In a test you
want them to fail instead; :class:`raise_internal_errors` is the switch::

    from recompprof.testing import raise_internal_errors

    with raise_internal_errors():            # strict inside the block, as before after it
        train_step(model, batch)

    raise_internal_errors(True)              # or: strict from here on (e.g. in a conftest)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from recompprof import _internal
from recompprof._errors import RuleBroken
from recompprof._model.causes import explaining_reason
from recompprof._model.counting import is_limit_hit, recompile_attempt
from recompprof._model.events import Compile, Event

if TYPE_CHECKING:
    from recompprof._capture.session import Session

__all__ = [
    "RecompileWatch",
    "RecompiledError",
    "assert_no_recompiles",
    "capture_events",
    "raise_internal_errors",
]

# Enough to hold every event of one test block; a longer block still gets exact counts.
_RECENT = 10_000


class RecompiledError(RuleBroken, AssertionError):
    """Code recompiled more often than allowed; ``recompiles`` holds the offending compile events."""

    def __init__(self, message: str, recompiles: list[Compile]) -> None:
        super().__init__(message)
        self.recompiles = recompiles


class RecompileWatch:
    """The events of one watched block, filled in when it ends (or on :meth:`collect`)."""

    def __init__(self, max_recompiles: int = 0) -> None:
        self.max_recompiles = max_recompiles
        self.events: list[Event] = []
        self._session: Session | None = None
        self._own = False

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> RecompileWatch:
        import recompprof

        session = recompprof.current()
        if session is None:
            session = recompprof.attach(event_log=False, exporters=[], recent_events=_RECENT)
            self._own = True
        self._session = session
        session.add_listener(self.events.append)
        return self

    def stop(self) -> None:
        if self._session is not None:
            self._session.remove_listener(self.events.append)
            if self._own:
                self._session.detach()
        self._own = False

    def reset(self) -> None:
        """Forget what happened so far (e.g. after a deliberate warm-up with varying inputs)."""
        self.events.clear()

    def collect(self) -> list[Event]:
        """The events since :meth:`start` (or :meth:`reset`)."""
        return self.events

    # -- results --------------------------------------------------------------------------------
    @property
    def recompiles(self) -> list[Compile]:
        """Forward recompiles in the block, including ones the recompile limit refused."""
        return [e for e in self.events if isinstance(e, Compile) and recompile_attempt(e)]

    def check(self) -> None:
        """Raise :class:`RecompiledError` if the block recompiled more than ``max_recompiles`` times."""
        __tracebackhide__ = True
        self.collect()
        found = self.recompiles
        if len(found) > self.max_recompiles:
            raise RecompiledError(describe(found, self.max_recompiles), found)


def describe(recompiles: list[Compile], allowed: int) -> str:
    """A readable account of ``recompiles``: frame, compile id, step, the reason that explains each, a fix."""
    from recompprof._model.fix_hints import FIX_HINTS

    lines = [f"{len(recompiles)} recompile(s) where at most {allowed} were allowed:"]
    for event in recompiles[:20]:
        reason = explaining_reason(event.reasons)
        limit = " (refused by the recompile limit: ran eagerly)" if is_limit_hit(event) else ""
        where = f"  {event.frame.label} compile {event.compile_id}" + (
            f" at step {event.step}" if event.step else ""
        )
        if reason is None:
            lines.append(f"{where}{limit}: no guard-failure reason recorded")
            continue
        first = reason.text.strip().splitlines()[0] if reason.text.strip() else ""
        lines.append(f"{where}{limit}: {reason.category} {reason.subject}: {first}")
        lines.append(f"    fix: {FIX_HINTS.get(reason.category, '')}")
    if len(recompiles) > 20:
        lines.append(f"  ... and {len(recompiles) - 20} more")
    return "\n".join(lines)


@contextlib.contextmanager
def capture_events() -> Iterator[list[Event]]:
    """Collect the events emitted inside the block into the yielded list (filled when the block ends)."""
    watch = RecompileWatch().start()
    captured: list[Event] = []
    try:
        yield captured
    finally:
        watch.stop()
        captured.extend(watch.events)


@contextlib.contextmanager
def assert_no_recompiles(max_recompiles: int = 0) -> Iterator[RecompileWatch]:
    """Fail (``RecompiledError``, an ``AssertionError``) if code in the block recompiles more than allowed."""
    watch = RecompileWatch(max_recompiles).start()
    try:
        yield watch
    finally:
        watch.stop()
    __tracebackhide__ = True
    watch.check()


class raise_internal_errors:  # lower case: used like a function, as torch.set_grad_enabled is
    """The strict mode: recompprof's internal errors re-raise instead of being counted and swallowed.

    ``raise_internal_errors(True)`` turns it on at once and keeps it on; as a context manager it also
    puts the previous mode back when the block ends (``with raise_internal_errors():``, or
    ``with raise_internal_errors(False):`` for a block that checks the production behaviour). Errors are
    counted and logged once in both modes; only whether they propagate changes. Off by default: a
    training job never sees recompprof raise.
    """

    __slots__ = ("previous",)

    def __init__(self, enabled: bool = True) -> None:
        self.previous = _internal.raise_internal_errors(enabled)

    def __enter__(self) -> raise_internal_errors:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _internal.raise_internal_errors(self.previous)
