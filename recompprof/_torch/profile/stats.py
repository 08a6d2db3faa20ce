"""Profile mode's counts: Dynamo traces, evictions, re-enabled parked variants, reported failures, per frame too."""

from __future__ import annotations

import threading
from types import CodeType
from typing import Any


class _FrameStats:
    __slots__ = ("label", "traces", "evictions", "reenabled", "failures_reported", "peak_live")

    def __init__(self, label: str) -> None:
        self.label = label
        self.traces = 0
        self.evictions = 0
        self.reenabled = 0
        self.failures_reported = 0
        self.peak_live = 0


class ProfileCounts:
    """Totals and per-frame counts, updated from any compiling thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frames: dict[int, _FrameStats] = {}
        self.traces = 0
        self.evictions = 0
        self.reenabled = 0
        self.reported = 0
        self.compile_seconds = 0.0
        self.torch_errors = 0  # exceptions raised inside torch's own reason helper

    def settled(self, code: CodeType, evicted: int, reported: int, reenabled: bool) -> None:
        """A miss was settled: ``evicted`` entries went, ``reported`` failures were computed."""
        stats = self._frame(code)
        with self._lock:
            self.evictions += evicted
            stats.evictions += evicted
            self.reported += reported
            stats.failures_reported += reported
            if reenabled:
                self.reenabled += 1
                stats.reenabled += 1

    def traced(self, code: CodeType, seconds: float, live: int) -> None:
        """Dynamo traced the frame (``seconds`` with profile mode's own work); it now holds ``live`` entries."""
        stats = self._frame(code)
        with self._lock:
            self.traces += 1
            self.compile_seconds += seconds
            stats.traces += 1
            stats.peak_live = max(stats.peak_live, live)

    def torch_error(self) -> bool:
        """Count an exception raised inside torch's reason helper; True the first time."""
        with self._lock:
            self.torch_errors += 1
            return self.torch_errors == 1

    def totals(self) -> dict[str, Any]:
        """The counts as ``ProfileMode.stats`` reports them (mechanism and observer figures aside)."""
        with self._lock:
            return {
                "traces": self.traces,
                "evictions": self.evictions,
                "reenabled": self.reenabled,
                "failures_reported": self.reported,
                "compile_seconds": self.compile_seconds,
                "frames": {
                    stats.label: {
                        "traces": stats.traces,
                        "evictions": stats.evictions,
                        "reenabled": stats.reenabled,
                        "failures_reported": stats.failures_reported,
                        "peak_live": stats.peak_live,
                    }
                    for stats in self._frames.values()
                },
            }

    def _frame(self, code: CodeType) -> _FrameStats:
        stats = self._frames.get(id(code))
        if stats is None:
            label = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
            stats = self._frames.setdefault(id(code), _FrameStats(label))
        return stats
