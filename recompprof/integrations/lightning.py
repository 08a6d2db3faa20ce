"""PyTorch Lightning: ``Trainer(callbacks=[RecompprofCallback()])`` profiles ``fit`` on every rank.

Needs the ``lightning`` package (extra ``lightning``). See docs/integrations.md.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from recompprof import _internal
from recompprof._capture.identity import detect
from recompprof._capture.session import Session
from recompprof._torch.lr_schedulers import scheduler_warmup
from recompprof.integrations._common import (
    SteadyStateRecompileError,
    Tracker,
    identity,
    steps_for_batches,
)

__all__ = ["RecompprofCallback", "SteadyStateRecompileError"]

log = logging.getLogger("lightning.pytorch")
# optimizer steps between the ranks' fail-on decisions when log_every_n_steps is 0
_DECIDE_EVERY = 50


class RecompprofCallback(Callback):
    """Attach recompprof for ``Trainer.fit`` on every rank and detach at its end (also on an exception).

    Settings are those of :func:`recompprof.attach` (``mode``, ``exporters``, ``warmup_steps``, ...).
    Events carry ``trainer.global_step``; ``recompprof/*`` scalars go to the trainer's loggers every
    ``log_every_n_steps`` optimizer steps and at the end of training; the report goes to the
    ``lightning.pytorch`` logger. ``fail_on_steady_state_recompiles=True`` raises
    :class:`SteadyStateRecompileError` from the next training batch after a recompile past the warm-up
    (multi-rank: at the next logging interval, on every rank together).
    """

    def __init__(self, *, fail_on_steady_state_recompiles: bool = False, **settings: Any) -> None:
        self._tracker = Tracker(settings, fail_on_steady_state_recompiles, log)
        self._world_size = 1

    @property
    def session(self) -> Session | None:
        """The session of the current ``fit`` (None outside it)."""
        return self._tracker.session

    # -- start and end --------------------------------------------------------------------------
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._world_size = trainer.world_size
        # Every rank writes under rank 0's run id, whoever launched the processes (a collective: all ranks are here).
        run_id = (
            trainer.strategy.broadcast(detect().run_id, src=0) if trainer.world_size > 1 else None
        )
        ident = identity(
            trainer.global_rank,
            trainer.local_rank,
            trainer.world_size,
            trainer.num_devices,
            "lightning",
            run_id,
        )
        self._tracker.start(ident, lambda: _default_warmup(trainer))
        self._tracker.set_step(trainer.global_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._tracker.active:
            return
        scalars = self._tracker.scalars()
        for logger in trainer.loggers:  # Lightning's loggers write on rank 0 only
            with _internal.contain(
                "integrations.lightning",
                f"final recompprof scalars not logged to {type(logger).__name__}",
            ):
                logger.log_metrics(scalars, step=trainer.global_step)
        self._tracker.stop()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._tracker.stop()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._tracker.stop()  # also KeyboardInterrupt: Lightning calls this hook before its graceful shutdown

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._tracker.stop()

    # -- per batch: the step, and at the logging interval the scalars --------------------------------
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._tracker.set_step(trainer.global_step)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        tracker = self._tracker
        # An optimizer step happened in this batch (not an accumulating one): Lightning logs now when
        # global_step is a multiple of log_every_n_steps, so the scalars are logged exactly then.
        every, step = trainer.log_every_n_steps, trainer.global_step
        moved = tracker.set_step(step)
        if moved and every and step % every == 0:
            pl_module.log_dict(tracker.scalars(), on_step=True, on_epoch=False, batch_size=1)
        if self._world_size == 1:
            tracker.check()
        elif (
            moved
            and tracker.fail_on_steady_state_recompiles
            and step % (every or _DECIDE_EVERY) == 0
            # Ranks decide together (all are at this step), so none is left waiting in a collective.
            and trainer.strategy.reduce_boolean_decision(tracker.failure is not None, all=False)
        ):
            tracker.check()
            raise SteadyStateRecompileError(
                "recompprof: another rank recorded a steady-state recompile "
                "(fail_on_steady_state_recompiles=True); see that rank's log"
            )

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._world_size == 1:
            self._tracker.check()


def _default_warmup(trainer: pl.Trainer) -> int | None:
    """Steps until steady state: past the LR scheduler's warm-up and the first validation loop, when known."""
    candidates = []
    for config in trainer.lr_scheduler_configs:
        if config.interval == "step" and (steps := scheduler_warmup(config.scheduler)) is not None:
            candidates.append(steps)
    if trainer.enable_validation:
        trainer.estimated_stepping_batches  # noqa: B018 - public API; loads the train data and sets val_check_batch
        first = _first_validation_step(trainer)
        if first is not None:
            candidates.append(first + 1)  # compiles during that validation carry its step
    return max(candidates) if candidates else None


def _first_validation_step(trainer: pl.Trainer) -> int | None:
    """The global step at which the first validation loop of training runs."""
    every_batches = getattr(trainer, "val_check_batch", None)
    epoch_batches = trainer.num_training_batches
    accumulate = trainer.accumulate_grad_batches
    if not isinstance(every_batches, int) or epoch_batches in (0, float("inf")):
        return None
    epochs = trainer.check_val_every_n_epoch
    if epochs is None:  # every val_check_interval batches, counted across epochs
        return every_batches // accumulate
    # Mid-epoch the accumulated steps so far; at the epoch's last batch Lightning steps a partial accumulation.
    in_epoch = (
        every_batches // accumulate
        if every_batches < epoch_batches
        else steps_for_batches(epoch_batches, accumulate)
    )
    return (epochs - 1) * steps_for_batches(epoch_batches, accumulate) + in_epoch
