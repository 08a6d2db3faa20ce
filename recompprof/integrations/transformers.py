"""Hugging Face transformers: ``Trainer(callbacks=[RecompprofCallback()])`` profiles ``train`` on every rank.

Needs ``transformers`` and ``accelerate`` (extra ``transformers``). See docs/integrations.md.
"""

from __future__ import annotations

import functools
import math
import sys
from types import FrameType
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.utils import logging as hf_logging

from recompprof._capture.session import Session
from recompprof.integrations._common import SteadyStateRecompileError, Tracker, identity

__all__ = ["RecompprofCallback", "SteadyStateRecompileError"]

log = hf_logging.get_logger("transformers.trainer")
_FRAMES_UP = 8  # how far above a hook the Trainer's own frame may be


class RecompprofCallback(TrainerCallback):
    """Attach recompprof for ``Trainer.train`` on every rank and detach at its end.

    Settings are those of :func:`recompprof.attach` (``mode``, ``exporters``, ``warmup_steps``, ...).
    Events carry ``state.global_step``; ``recompprof/*`` scalars join every ``Trainer.log`` call (the
    ``logging_steps`` interval and the final training summary), so they reach ``state.log_history`` and
    the reporting integrations (TensorBoard, W&B, ...); the report goes to the ``transformers.trainer``
    logger. ``fail_on_steady_state_recompiles=True`` raises :class:`SteadyStateRecompileError` from
    the next step or evaluation after a recompile past the warm-up.
    """

    def __init__(self, *, fail_on_steady_state_recompiles: bool = False, **settings: Any) -> None:
        self._tracker = Tracker(settings, fail_on_steady_state_recompiles, log)
        self._trainer_bound = False

    @property
    def session(self) -> Session | None:
        """The session of the current ``train`` (None outside it)."""
        return self._tracker.session

    # -- start and end --------------------------------------------------------------------------
    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._bind_trainer()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._bind_trainer()  # a callback added with add_callback after the Trainer was built
        ident = identity(
            args.process_index, args.local_process_index, args.world_size, None, "accelerate"
        )
        self._tracker.start(ident, lambda: _default_warmup(args, state))
        self._tracker.set_step(state.global_step)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._tracker.stop()

    # -- per step: the step; at each Trainer.log the scalars ------------------------------------------
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._tracker.set_step(state.global_step)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._tracker.set_step(
            state.global_step
        )  # before the evaluation that may follow at this step
        self._tracker.check()

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._tracker.check()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if not self._tracker.active or logs is None:
            return
        scalars = self._tracker.scalars()
        # Trainer.log stored a copy of these logs in log_history just before calling us: add ours there too.
        entry = state.log_history[-1] if state.log_history else None
        if (
            entry is not None
            and entry.get("step") == state.global_step
            and all(entry.get(k) is v for k, v in logs.items())
        ):
            entry.update(scalars)
        logs.update(
            scalars
        )  # for the callbacks after this one (this one moves itself first, see _bind_trainer)

    # -- the Trainer itself (its hooks do not pass it) ------------------------------------------------
    def _bind_trainer(self) -> None:
        """Find the Trainer calling this hook; run first among its callbacks (so reporting callbacks see the
        scalars this one adds to each log) and detach if ``train`` raises (transformers has no exception hook)."""
        if self._trainer_bound:
            return
        trainer = _calling_trainer(self)
        if trainer is None:
            return
        self._trainer_bound = True
        callbacks = trainer.callback_handler.callbacks
        callbacks.remove(self)
        callbacks.insert(0, self)
        train = trainer.train
        tracker = self._tracker

        @functools.wraps(train)
        def train_then_detach(*args: Any, **kwargs: Any) -> Any:
            try:
                return train(*args, **kwargs)
            except BaseException:  # also KeyboardInterrupt: detach, then let it propagate unchanged
                tracker.stop()
                raise

        trainer.train = train_then_detach


def _calling_trainer(callback: TrainerCallback) -> Trainer | None:
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_FRAMES_UP):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer) and callback in candidate.callback_handler.callbacks:
            return candidate
        frame = frame.f_back
    return None


def _default_warmup(args: TrainingArguments, state: TrainerState) -> int | None:
    """Steps until steady state: past the LR warm-up and the first evaluation, when known."""
    candidates = [args.get_warmup_steps(state.max_steps)] if state.max_steps > 0 else []
    strategy = str(getattr(args.eval_strategy, "value", args.eval_strategy))
    first_eval = None
    if strategy == "steps" and state.eval_steps:
        first_eval = int(state.eval_steps)
    elif strategy == "epoch" and state.max_steps > 0 and state.num_train_epochs:
        first_eval = math.ceil(state.max_steps / state.num_train_epochs)
    if first_eval is not None:
        candidates.append(first_eval + 1)  # compiles during that evaluation carry its step
    candidates = [c for c in candidates if c > 0]
    return max(candidates) if candidates else None
