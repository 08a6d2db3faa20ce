"""How long a learning-rate scheduler warms up, read from torch's scheduler objects (for a trainer's default warm-up)."""

from __future__ import annotations

from typing import Any


def scheduler_warmup(scheduler: Any) -> int | None:
    """The warm-up length of a learning-rate scheduler, when it says (a ``warmup_steps`` attribute, a
    warming ``LinearLR``, or the first scheduler of a ``SequentialLR``); else None."""
    steps = getattr(scheduler, "warmup_steps", None)
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps
    kind = type(scheduler).__name__
    if kind == "LinearLR" and getattr(scheduler, "start_factor", 1.0) < getattr(
        scheduler, "end_factor", 1.0
    ):
        return int(scheduler.total_iters)
    # SequentialLR keeps its parts in private attributes; if torch renames them only this default is lost.
    if kind == "SequentialLR" and getattr(scheduler, "_schedulers", None):
        first = scheduler_warmup(scheduler._schedulers[0])
        milestones = list(getattr(scheduler, "_milestones", []) or [])
        return min(first, milestones[0]) if first is not None and milestones else first
    return None
