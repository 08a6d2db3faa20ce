"""What the framework callbacks share: attach/detach ownership, the trainer's step, the logged scalars.

Framework-free: the Lightning and transformers callbacks translate their trainer's hooks into calls
on a :class:`Tracker`. Per training step a callback does one integer comparison (the step); the
scalars are read (one snapshot of the bounded totals) only at the trainer's logging interval.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable
from typing import Any

import recompprof
from recompprof import _internal
from recompprof._capture import session as session_module, settings as settings_module
from recompprof._capture.identity import Identity, detect
from recompprof._capture.session import Session
from recompprof._errors import RuleBroken
from recompprof._model.causes import explaining_reason
from recompprof._model.counting import steady_state_recompile
from recompprof._model.events import Compile, Event

PREFIX = "recompprof/"
_WARMUP_ENV = settings_module.ENV_PREFIX + "WARMUP_STEPS"


class SteadyStateRecompileError(RuleBroken, RuntimeError):
    """Raised by a callback with ``fail_on_steady_state_recompiles=True`` after a steady-state recompile: past
    the warm-up and past what a bounded set of variants explains (docs/steady-state.md)."""


def identity(
    rank: int,
    local_rank: int,
    world_size: int,
    local_world_size: int | None,
    launcher: str,
    run_id: str | None = None,
) -> Identity:
    """The detected identity with the framework's ranks (it may have launched the processes itself)."""
    base = detect()
    if base.launcher == "single" and world_size > 1:
        base = dataclasses.replace(base, launcher=launcher)
    if local_world_size is None:
        local_world_size = base.local_world_size if base.launcher != launcher else world_size
    return dataclasses.replace(
        base,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=max(1, local_world_size),
        run_id=run_id or base.run_id,
    )


def steps_for_batches(batches: float, accumulate: int) -> int:
    """Optimizer steps after ``batches`` micro-batches with gradient accumulation (a partial one steps at epoch end)."""
    return math.ceil(batches / max(1, accumulate))


class Tracker:
    """One callback's hold on a session for one trainer run."""

    def __init__(
        self, settings: dict[str, Any], fail_on_steady_state_recompiles: bool, log: logging.Logger
    ) -> None:
        settings_module.load(
            **settings
        )  # a bad setting fails when the callback is built, naming the setting
        self.settings = dict(settings)
        self.fail_on_steady_state_recompiles = fail_on_steady_state_recompiles
        self.log = log
        self.session: Session | None = None
        self.owned = False
        self.failure: str | None = None
        self._step = -1

    @property
    def active(self) -> bool:
        return self.session is not None

    def start(self, ident: Identity | None, warmup: Callable[[], int | None]) -> Session:
        """Attach (or adopt the session the user attached) and take the step from the trainer from now on.

        ``warmup`` reads the default warm-up from the trainer; it is called only when no ``warmup_steps``
        was given (argument or environment)."""
        if (
            self.session is not None
        ):  # a run that ended without an end hook (an exception the framework kept)
            self.stop()
        live = session_module.current()
        if live is not None:
            self.session, self.owned = live, False
            self.log.info(
                "recompprof: already attached; the callback uses that session and leaves it attached"
            )
        else:
            settings = {"step_source": "manual", **self.settings}
            if "warmup_steps" not in settings and _WARMUP_ENV not in os.environ:
                with _internal.contain(
                    "integrations.warmup", "no default warm-up from the trainer; set warmup_steps"
                ):
                    if (steps := warmup()) is not None:
                        settings["warmup_steps"] = steps
            self.session, self.owned = session_module.attach(identity=ident, **settings), True
        self.failure, self._step = None, -1
        if self.fail_on_steady_state_recompiles:
            self.session.add_listener(self._on_event)
        return self.session

    def set_step(self, step: int) -> bool:
        """The trainer's global step (per-batch hot path: one comparison unless the step moved); True if it moved."""
        if step == self._step or self.session is None:
            return False
        self._step = step
        self.session.step(to=step)
        return True

    def scalars(self) -> dict[str, float]:
        """The few figures logged to the trainer's loggers at each logging interval."""
        if self.session is None:
            return {}
        snap = self.session.snapshot()
        frames = snap.frames.values()
        return {
            PREFIX + "recompiles": float(snap.recompiles_total),
            PREFIX + "steady_state_recompiles": float(
                sum(f.steady_state_recompiles for f in frames)
            ),
            PREFIX + "compile_seconds": float(snap.duration_sum),
            PREFIX + "recompile_limit_hits": float(sum(sum(f.limit_hits.values()) for f in frames)),
        }

    def check(self) -> None:
        """Detach and raise the recorded steady-state recompile (from a trainer hook, never from torch's compile path)."""
        if self.failure is not None:
            failure = self.failure
            self.stop()
            raise SteadyStateRecompileError(failure)

    def stop(self) -> None:
        """Log the summary to the framework's logger and detach (only a session this callback attached)."""
        session, self.session = self.session, None
        if session is None:
            return
        session.remove_listener(self._on_event)
        if self.owned:
            session.detach()
        with _internal.contain(
            "integrations.report",
            "the report was not logged; run `recompprof report` on the run directory",
        ):
            report = recompprof.report(session)
            where = f"; event log {session.event_log_path}" if session.event_log_path else ""
            self.log.info(
                "recompprof (rank %d): %d compiles, %d recompiles, %.2f s compiling, %d limit hits%s\n%s",
                session.identity.rank,
                report.compiles,
                report.recompiles,
                report.compile_seconds,
                report.limit_hits,
                where,
                report,
            )

    def _on_event(self, event: Event) -> None:
        # On torch's compile path: never raise here; the trainer hook raises at the next step.
        if self.failure is None and isinstance(event, Compile) and steady_state_recompile(event):
            explaining = explaining_reason(event.reasons)
            reason = explaining.text if explaining is not None else "no reason recorded"
            self.failure = (
                f"recompprof: steady-state recompile of {event.frame.name} ({event.frame.file}:"
                f"{event.frame.line}) at step {event.step}, after the warm-up of "
                f"{self.session.settings.warmup_steps if self.session else '?'} steps: {reason} "
                "(fail_on_steady_state_recompiles=True stops training)"
            )
