"""The torch settings profile mode changes for its session, each with its undo: the recompile limits and
the stance that forces the observer backend; and the job's own stance changes, followed while it runs.

Without the forced observer the job's backend compiles its frames, and profile mode's low limit would
make fullgraph code raise: while the stance is not profile mode's, the job gets its own limits back;
when it is profile mode's again, the limit is re-applied (docs/profile-mode.md, "The job changing the stance").

What is whose is known by ownership, never by comparing values: a limit recompprof sets is a
:class:`Held` object, so a value the job sets (a ``config.patch``, even of the same number) is another
object and stays the job's, while a ``config.patch`` ending puts recompprof's own object back. The stance
is recompprof's while it is the very ``DynamoStance`` object it set. recompprof changes or restores only
what it still holds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from recompprof._internal import contain
from recompprof._torch.patching import replace

log = logging.getLogger("recompprof")


class Held(int):
    """A limit recompprof put into ``torch._dynamo.config``: an ``int`` to torch, and an object of its own to
    recompprof, which holds the setting for as long as this very object is the value. A copy is the same
    object (a copied config still holds it); pickled, it is a plain ``int`` (other processes hold nothing)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)

    __str__ = __repr__

    def __copy__(self) -> Held:
        return self

    def __deepcopy__(self, memo: object) -> Held:
        return self

    def __reduce__(self) -> tuple[type[int], tuple[int]]:
        return int, (int(self),)


def _held(value: Any) -> Any:
    """``value`` as an object recompprof can tell apart from the same value set by the job."""
    return Held(value) if isinstance(value, int) and not isinstance(value, bool) else value


@dataclasses.dataclass
class _Limit:
    """One limit of the session: the job's value at attach, what recompprof set, and the job's value as
    recompprof puts it back while the stance is not its own (None until it first did; then the same object
    each time, so a write of it, a ``config.patch`` ending, is known for recompprof's)."""

    job: Any
    ours: Held
    lent: Any = None

    def holds(self, current: Any) -> bool:
        """Whether ``current``, the value in force, is one recompprof set (else the job set it since)."""
        return current is self.ours or (self.lent is not None and current is self.lent)


class SessionSettings:
    """Changes torch's settings and appends each change's undo to ``undo`` (run last to first by the owner).

    ``on_change(ours)`` is called when the job moves the stance away from profile mode's (False) or back (True).
    """

    def __init__(self, undo: list[Callable[[], None]], on_change: Callable[[bool], None]) -> None:
        self._undo = undo
        self._on_change = on_change
        self._stance: Any = None
        self._ours = True  # the stance in force is profile mode's
        self._limits: dict[str, _Limit] = {}  # by config name

    def set_limit(self, config: Any, name: str, value: int) -> None:
        """Set ``torch._dynamo.config.<name>`` for the session; undone if recompprof still holds it then."""
        limit = self._limits[name] = _Limit(getattr(config, name), Held(value))
        setattr(config, name, limit.ours)

        def restore() -> None:
            current = getattr(config, name)
            if limit.holds(current):
                setattr(config, name, limit.job)
            else:  # the job set its own value during the session (a config.patch still open, say)
                log.info(
                    "recompprof: torch._dynamo.config.%s was set by the job during the profile "
                    "session; leaving its value %r",
                    name,
                    current,
                )

        self._undo.append(restore)

    def force_backend(self, eval_frame: Any, observer: Any) -> Callable[[], None]:
        """Force ``observer`` as every compile's backend; returns the undo that puts the prior stance back
        (the owner appends it to ``undo`` once what must run after it is there)."""
        import torch._dynamo

        handle = torch._dynamo.set_stance("default", force_backend=observer)
        ours = self._stance = eval_frame._stance

        def restore() -> None:
            if eval_frame._stance is ours:
                eval_frame._set_stance(handle.prev)
            else:  # the job set a stance of its own that is still in force: it stays
                log.info(
                    "recompprof: the job set its own torch.compile stance during the profile "
                    "session; leaving it in force"
                )

        return restore

    def follow_stance(self, eval_frame: Any, active: Callable[[], bool]) -> None:
        """Follow stance changes the job makes (``torch.compiler.set_stance``) while ``active()``."""
        import torch._dynamo.decorators as decorators

        original = getattr(decorators, "_set_stance", None)
        if not callable(original):
            return

        def watched(stance: Any) -> Any:
            prev = original(stance)
            if active():
                with contain("profile.stance"):
                    self._changed(eval_frame._stance is self._stance)
            return prev

        self._undo.append(replace(decorators, "_set_stance", watched))

    def follow_limits(self, config: Any, active: Callable[[], bool]) -> str:
        """Follow what is written into the limits while ``active()``: a job's ``config.patch`` ending puts
        back the value in force when it began, which may be recompprof's own limit while the stance is now
        the job's (or the job's value recompprof lent it, while the stance is profile mode's again). Such a
        write is made the value recompprof holds for the stance now in force; any other is the job's.
        Returns why it cannot follow them ("" when it can): the session says so."""
        cls = type(
            config
        )  # torch makes one ConfigModule subclass per config module: only this one's
        original = getattr(cls, "__setattr__", None)
        if not callable(original) or not cls.__module__.endswith("_config_module"):
            return f"torch._dynamo.config is a {cls.__qualname__}, whose writes cannot be followed"

        def watched(module: Any, name: str, value: Any) -> None:
            if module is config and name in self._limits and active():
                with contain("profile.limits"):
                    value = self._in_force(self._limits[name], value)
            original(module, name, value)

        self._undo.append(replace(cls, "__setattr__", watched))
        return ""

    def _in_force(self, limit: _Limit, value: Any) -> Any:
        """What of recompprof's stands for ``value`` under the stance in force: its own limit under its
        own stance, the job's value lent back under the job's; a value the job set is the job's."""
        if not self._ours and value is limit.ours:
            if limit.lent is None:
                limit.lent = _held(limit.job)
            return limit.lent
        if self._ours and value is limit.lent:
            return limit.ours
        return value

    def _changed(self, ours: bool) -> None:
        import torch._dynamo.config as config

        if ours == self._ours:
            return
        self._ours = ours
        for name, limit in self._limits.items():
            if not limit.holds(getattr(config, name)):
                continue  # the job's own value: whatever the stance, it stays
            if ours:
                setattr(config, name, limit.ours)
            else:  # one lent object for the session: a patch that began while it was lent puts it back
                if limit.lent is None:
                    limit.lent = _held(limit.job)
                setattr(config, name, limit.lent)
        self._on_change(ours)
