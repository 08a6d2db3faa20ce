"""The torch settings profile mode changes for its session, each with its undo: the recompile limits and
the stance that forces the observer backend; and the job's own stance changes, followed while it runs.

Without the forced observer the job's backend compiles its frames, and profile mode's low limit would
make fullgraph code raise: while the stance is not profile mode's, the job gets its own limits back;
when it is profile mode's again, the limit is re-applied (docs/profile-mode.md, "The job changing the stance").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from recompprof._internal import contain
from recompprof._torch.patching import replace

log = logging.getLogger("recompprof")


class SessionSettings:
    """Changes torch's settings and appends each change's undo to ``undo`` (run last to first by the owner).

    ``on_change(ours)`` is called when the job moves the stance away from profile mode's (False) or back (True).
    """

    def __init__(self, undo: list[Callable[[], None]], on_change: Callable[[bool], None]) -> None:
        self._undo = undo
        self._on_change = on_change
        self._stance: Any = None
        self._ours = True  # the stance in force is profile mode's
        self._limits: dict[str, tuple[Any, Any]] = {}  # config name -> (the job's value, ours)

    def set_limit(self, config: Any, name: str, value: Any) -> None:
        """Set ``torch._dynamo.config.<name>`` for the session; undone unless someone changed it meanwhile."""
        old = getattr(config, name)
        setattr(config, name, value)
        self._limits[name] = (old, value)

        def restore() -> None:
            if not self._ours and getattr(config, name) == old:  # the job's value is back already
                return
            if getattr(config, name) == value:
                setattr(config, name, old)
            else:
                log.warning(
                    "recompprof: torch._dynamo.config.%s was changed during the profile session; "
                    "leaving the new value %r",
                    name,
                    getattr(config, name),
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
            else:
                log.warning(
                    "recompprof: the torch.compile stance was changed during the profile session; "
                    "leaving it as it is now"
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

    def _changed(self, ours: bool) -> None:
        import torch._dynamo.config as config

        if ours == self._ours:
            return
        self._ours = ours
        for name, (job_value, our_value) in self._limits.items():
            if getattr(config, name) == (job_value if ours else our_value):
                setattr(config, name, our_value if ours else job_value)
        self._on_change(ours)
