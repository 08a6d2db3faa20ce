"""Dynamo tracing time per user function, from torch's Dynamo profiler (``TORCH_COMPILE_DYNAMO_PROFILER``).

With ``torch._dynamo.config.dynamo_profiler`` on, Dynamo times every user function it traces (the root
frame and each inlined call, cProfile style) and, at the end of each trace, calls
``DynamoProfilerState.dump_stats``, which prints a pstats table to stdout. We turn the profiler on and
replace that one method for the session: the timings are summed per function (exclusive time) and
handed to the next compile event instead of being printed. Profile mode only (``dynamo_profiler``
setting): the profiler adds a timer per traced call, which is tracing-time work, never per step.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from recompprof._internal import contain

MAX_FUNCTIONS_PER_COMPILE = 20


def function_label(name: str, file: str, line: int) -> str:
    """``name (dir/file:line)``, the shape of ``events.Frame.label``."""
    short = "/".join(str(file).replace("\\", "/").split("/")[-2:])
    return f"{name} ({short}:{line})"


class DynamoProfilerTap:
    """Collects Dynamo's per-function trace timings; :meth:`take` returns and clears them."""

    def __init__(self) -> None:
        self.live = False
        self.reason_off = ""
        self._lock = threading.Lock()
        self._pending: Counter[str] = Counter()
        self._prior_config: Any = None
        self._prior_dump: Any = None
        self._state_cls: Any = None

    def install(self) -> None:
        import torch._dynamo.config as config

        try:
            from torch._dynamo.dynamo_profiler import DynamoProfilerState
        except ImportError:
            self.reason_off = (
                "torch._dynamo.dynamo_profiler missing (this torch has no Dynamo profiler)"
            )
            return
        if not hasattr(config, "dynamo_profiler") or "dump_stats" not in vars(DynamoProfilerState):
            self.reason_off = (
                "torch._dynamo.config.dynamo_profiler or DynamoProfilerState.dump_stats missing"
            )
            return
        tap = self

        def dump_stats(
            state: Any, output_file: str | None = None, generate_svg: bool = True
        ) -> None:
            with contain("torch.dynamo_profiler", "Dynamo trace times per function are missing"):
                tap._collect(state.get_timings())

        self._state_cls, self._prior_dump = (
            DynamoProfilerState,
            vars(DynamoProfilerState)["dump_stats"],
        )
        self._prior_config = config.dynamo_profiler
        DynamoProfilerState.dump_stats = dump_stats
        config.dynamo_profiler = True
        self.live = True

    def uninstall(self) -> None:
        if not self.live:
            return
        import torch._dynamo.config as config

        self._state_cls.dump_stats = self._prior_dump
        config.dynamo_profiler = self._prior_config
        self.live = False

    def _collect(self, timings: list[Any]) -> None:
        with self._lock:
            for t in timings:
                self._pending[function_label(t.func_name, t.filename, t.firstlineno)] += (
                    max(t.tottime_ns, 0) * 1e-9
                )

    def take(self) -> dict[str, float]:
        """The timings since the last call (the compile being recorded), its costliest functions only."""
        with self._lock:
            top: dict[str, float] = dict(self._pending.most_common(MAX_FUNCTIONS_PER_COMPILE))
            self._pending.clear()
        return top
