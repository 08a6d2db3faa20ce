"""Training steps counted by a global optimizer step hook, so events carry the step with no user code;
and the step handed to torch for its own compile records, so a TORCH_TRACE of an attached run has it too."""

from __future__ import annotations

import weakref
from typing import Any

from recompprof._torch.versions import torch_info


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
            self.reason_off = (
                f"torch.optim.optimizer.register_optimizer_step_post_hook missing ({exc})"
            )
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
            raise ValueError(
                f"session.step(to=...) takes a training step, a non-negative int; got {to!r}"
            )
        self.manual = True
        self.step = self.step + 1 if to is None else to
        return self.step


STEP_CONTEXT = "recompprof step "  # + the step: the string torch writes into each compile's record


class StepInTrace:
    """Has torch write the training step into each forward compile's record (``recompile_user_contexts``,
    which TORCH_TRACE keeps), so ``recompprof ingest`` of an attached run's trace has steps.

    torch calls the hook once per compile (the first of a frame too, despite its name): nothing runs per
    training step. This is the one thing monitor mode writes into torch's own records: without it the
    field is None. ``torch._dynamo.reset_recompile_user_contexts()`` drops every hook, ours included, and
    torch says nothing; :meth:`gone` notices at the next compile start, and the signal goes dark.
    """

    def __init__(self, steps: StepCounter) -> None:
        self._steps = steps
        self._hook: Any = None
        # torch._dynamo.utils: imported at install, read at each compile start
        self._utils: Any = None
        self.live = False
        self.reason_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("recompile_user_context"):
            self.reason_off = info.why_off("recompile_user_context")
            return
        from torch._dynamo import utils

        self._utils = utils

        steps = self._steps

        def hook() -> str:
            return f"{STEP_CONTEXT}{steps.step}"

        utils.register_hook_for_recompile_user_context(hook)
        self._hook = hook
        self.live = True

    def gone(self) -> str | None:
        """Why our hook no longer runs (torch's list lost it since the last call), else None (read at each
        compile start: one list lookup)."""
        hook = self._hook
        if hook is None:
            return None
        hooks = self._utils.get_hook_for_recompile_user_context()
        if hooks is not None and hook in hooks:
            return None
        self._hook, self.live = None, False
        return (
            "recompprof's step hook was removed from torch's recompile user contexts "
            "(torch._dynamo.reset_recompile_user_contexts() or another tool): compile records, "
            "and a TORCH_TRACE of this run, carry no step from here on"
        )

    def uninstall(self) -> None:
        """Take our hook out of torch's list (torch has no unregister; its reset would drop the job's own hooks)."""
        hook, self._hook = self._hook, None
        if hook is not None:
            from torch._dynamo import utils

            hooks = utils.get_hook_for_recompile_user_context()
            if hooks is not None and hook in hooks:
                hooks.remove(hook)
        self.live = False


def step_of(contexts: object) -> int | None:
    """The step a compile record's ``recompile_user_contexts`` carry from :class:`StepInTrace`, or None."""
    if not isinstance(contexts, (list, tuple, set, frozenset)):
        return None
    for context in contexts:
        if isinstance(context, str) and context.startswith(STEP_CONTEXT):
            digits = context[len(STEP_CONTEXT) :]
            if digits.isdigit() and len(digits) <= 18:
                return int(digits)
    return None
