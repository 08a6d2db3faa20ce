"""Training steps counted by a global optimizer step hook, so events carry the step with no user code."""

from __future__ import annotations

import weakref
from typing import Any


class StepCounter:
    """Counts ``step()`` calls of the first optimizer seen (a second optimizer would double-count)."""

    def __init__(self) -> None:
        self.step = 0
        self.manual = False
        self._owner: weakref.ref[Any] | None = None
        self._handle: Any = None
        self.live = False
        self.reason_off = ""

    def install(self) -> None:
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError as exc:
            self.reason_off = f"torch.optim.optimizer.register_optimizer_step_post_hook missing ({exc})"
            return
        self._handle = register_optimizer_step_post_hook(self._on_step)
        self.live = True

    def uninstall(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self.live = False

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # Per-step hot path: an identity check and an increment, nothing else (benchmarks/bench_step_hook.py).
        owner_ref = self._owner
        if owner_ref is not None and owner_ref() is optimizer and not self.manual:
            self.step += 1
            return
        self._adopt_or_skip(optimizer)

    def _adopt_or_skip(self, optimizer: Any) -> None:
        """A step of an optimizer that is not (yet) the counted one, or any step in manual mode."""
        if self.manual:
            return
        owner = self._owner() if self._owner is not None else None
        if owner is None:
            self._owner = weakref.ref(optimizer)
        elif owner is not optimizer:
            return
        self.step += 1

    def advance(self, to: int | None = None) -> int:
        """A manual step (``session.step()``), or an absolute one (``to``); from then on optimizer steps are ignored."""
        if to is not None and (isinstance(to, bool) or not isinstance(to, int) or to < 0):
            raise ValueError(f"session.step(to=...) takes a training step, a non-negative int; got {to!r}")
        self.manual = True
        self.step = self.step + 1 if to is None else to
        return self.step
