"""The compile root spans that are open while their compile runs.

A compile's root span starts at its ``compile_start`` and ends at its ``compile`` (the same trace id), or
with an ERROR status when the session ends first. Held here in between, bounded: compiles run one at a
time on a thread (torch runs its compile-start callbacks for the outermost compile only), so a new start on
a thread that still has an open span means that span's end was lost (its compile record never came): the
span is handed back to be ended then. Past ``MAX_OPEN_SPANS`` (compiles on that many threads at once) the
oldest is handed back too. Nothing here is touched per training step.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from recompprof.exporter import CompileStart

MAX_OPEN_SPANS = 8


@dataclasses.dataclass(slots=True)
class OpenSpan:
    """A root span started at ``start`` (its start time in ns) on thread ``thread``."""

    span: Span
    start: CompileStart
    start_ns: int
    thread: int


class OpenSpans:
    """The open root spans by trace id, oldest first."""

    def __init__(self, limit: int = MAX_OPEN_SPANS) -> None:
        self._limit = limit
        self._open: collections.OrderedDict[str, OpenSpan] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def add(self, trace_id: str, opened: OpenSpan) -> list[OpenSpan]:
        """Hold ``opened``; returns the spans it replaces (its thread's earlier one, the oldest past the limit)."""
        stale = [
            self._open.pop(key)
            for key in [k for k, o in self._open.items() if o.thread == opened.thread]
        ]
        self._open[trace_id] = opened
        while len(self._open) > self._limit:
            stale.append(self._open.popitem(last=False)[1])
        return stale

    def take(self, trace_id: str | None) -> OpenSpan | None:
        """The open span of ``trace_id`` (no longer held), or None."""
        return self._open.pop(trace_id, None) if trace_id is not None else None

    def drain(self) -> list[OpenSpan]:
        """Every open span (none held afterwards)."""
        spans = list(self._open.values())
        self._open.clear()
        return spans
