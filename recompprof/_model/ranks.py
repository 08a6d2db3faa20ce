"""A job's ranks: which of them a run lacks (:func:`missing`), and a set of them named in ranges
(:func:`rank_list`). The standard library alone: the lake's answers use it without loading the event
model or OpenSSL."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["MAX_LISTED_RANKS", "missing", "rank_list"]

MAX_LISTED_RANKS = 16


def missing(world_size: int, present: Iterable[int]) -> list[int]:
    """The ranks below ``world_size`` (the largest a run's sessions announce) not among ``present``:
    a rank that did not attach, a log not collected, an export that has not arrived."""
    seen = set(present)
    return [rank for rank in range(world_size) if rank not in seen]


def rank_list(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``ranks 0-2, 5`` (ranges, the first 16 of them)."""
    runs: list[tuple[int, int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    shown = ", ".join(parts[:MAX_LISTED_RANKS]) + (
        f" (+{len(parts) - MAX_LISTED_RANKS} more)" if len(parts) > MAX_LISTED_RANKS else ""
    )
    return ("rank " if len(ranks) == 1 else "ranks ") + shown
