"""The adapter registry: which torch adapters a session installs, and which of its signals are live.

Every adapter in ``recompprof._torch`` conforms to :class:`Adapter`; the registry installs them in
order, records each signal as live or off (with why), and hands back the undo steps the session runs
at detach. A signal that goes dark mid-run is reported here too (``lost``), as a ``SignalChange``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import types
from collections.abc import Callable
from types import CodeType
from typing import TYPE_CHECKING, Any, Protocol

from recompprof import _internal
from recompprof._model.events import Event, SignalChange
from recompprof._model.texts import clean_text
from recompprof._torch import versions as torch_versions
from recompprof._torch.backward_starts import BackwardStarts
from recompprof._torch.compile_metrics import CompileMetricsTap
from recompprof._torch.graph_breaks import GraphBreakCounter, GraphBreakTap
from recompprof._torch.guard_failures import GuardFailureReader
from recompprof._torch.steps import StepCounter, StepInTrace

if TYPE_CHECKING:
    from recompprof._capture.settings import Settings
    from recompprof._torch.dynamo_profiler import DynamoProfilerTap
    from recompprof._torch.profile.mode import ProfileMode

log = logging.getLogger("recompprof")

# Parts of CompilationMetrics: live only where this torch records them and compile_metrics is live.
GATED_BY_COMPILE_METRICS = ("phase_times", "recompile_limit_hits", "backward_compiles")
# How far up the stack the frame profile mode settles is looked for (it calls the reuse callback itself).
_SCOPE_DEPTH = 4


class Adapter(Protocol):
    """One torch signal. ``install`` may raise (a changed torch internal: the signal is then off);
    after it, ``live`` says whether the signal works and ``reason_off`` why not. ``uninstall``
    leaves torch as it was found."""

    def install(self) -> None: ...

    def uninstall(self) -> None: ...

    @property
    def live(self) -> bool: ...

    @property
    def reason_off(self) -> str: ...


class CompileSink(Protocol):
    """Where the adapters hand what torch reports on the compile path (the session's recorder)."""

    def on_torch_record(self, metrics: Any) -> None: ...

    def on_graph_break(self, payload: str, compile_id: str | None) -> None: ...

    def on_compile_start(self, compile_id: str | None, backward: bool = False) -> None: ...

    def on_compile_end(self) -> None: ...

    def on_reset(self) -> None: ...

    def on_profile_guard_failure(
        self, code: CodeType, compile_id: str | None, texts: list[str]
    ) -> None: ...

    def on_profile_reuse(
        self,
        code: CodeType,
        compile_id: str | None,
        texts: list[str],
        scope: tuple[dict[str, Any], dict[str, Any]] | None = None,
    ) -> None: ...


def _with_scope(
    on_reuse: Callable[
        [CodeType, str | None, list[str], tuple[dict[str, Any], dict[str, Any]] | None], None
    ],
) -> Callable[[CodeType, str | None, list[str]], None]:
    """Profile mode's reuse callback, handed the locals and globals of the call that runs the re-enabled
    variant too: a compile's are read from torch's compile frame, but a reuse runs no compile, so they are
    read from the frame profile mode settles (``ProfileMode._before_compile``'s ``frame``, the frame Dynamo
    evaluates), which calls this on its own thread. Without it, the reuse is explained without them."""

    def reuse(code: CodeType, compile_id: str | None, texts: list[str]) -> None:
        on_reuse(code, compile_id, texts, _settled_scope(code))

    return reuse


def _settled_scope(code: CodeType) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The locals and globals of the frame of ``code`` that profile mode settles on this thread, or None."""
    from recompprof._torch.profile.mode import ProfileMode

    settling = ProfileMode._before_compile.__code__
    caller: types.FrameType | None = sys._getframe(2)
    for _ in range(_SCOPE_DEPTH):
        if caller is None:
            return None
        if caller.f_code is settling:
            frame = caller.f_locals.get("frame")
            f_locals = getattr(frame, "f_locals", None)
            f_globals = getattr(frame, "f_globals", None)
            if getattr(frame, "f_code", None) is not code:
                return None
            if isinstance(f_locals, dict) and isinstance(f_globals, dict):
                return f_locals, f_globals
            return None
        caller = caller.f_back
    return None


class Readings:
    """The adapters the recorder reads on the compile path, none of which calls it: the training step, the
    guard failures torch computed, the fallback graph-break counter, the Dynamo profiler's totals and
    profile mode's own reasons. Built before the recorder and the other adapters, which are given it."""

    def __init__(self, settings: Settings) -> None:
        self.steps = StepCounter()
        self.guards = GuardFailureReader()
        # installed where torch traces no breaks
        self.break_counter: GraphBreakCounter | None = None
        self.dynamo_profiler: DynamoProfilerTap | None = None
        # profile mode's reasons are not the job's
        self.own_reason: Callable[[str], bool] | None = None
        if settings.mode == "profile":
            from recompprof._torch.profile.mode import ProfileMode

            self.own_reason = ProfileMode.is_own_reason
            if settings.dynamo_profiler:
                from recompprof._torch.dynamo_profiler import DynamoProfilerTap

                self.dynamo_profiler = DynamoProfilerTap()

    @property
    def step(self) -> int:
        return self.steps.step

    def guard_reasons(
        self, name: str, file: str, line: int, compile_id: str | None = None
    ) -> list[str]:
        """The guard-failure texts torch computed for the code ``(name, file, line)`` since the last call:
        of the frame its compile's ``compile_id`` names, where given (an equal code object in another file
        shares torch's list)."""
        return self.guards.take(name, file, line, compile_id)[1]

    def pending_reasons(self, code: CodeType, compile_id: str | None = None) -> list[str]:
        """The guard-failure texts of ``code`` not yet taken (a compile start reads them; its record takes
        them), of the frame ``compile_id`` names where given."""
        return self.guards.peek(code, compile_id)

    def counted_breaks(self) -> list[tuple[str, int]]:
        """``(reason, count)`` of the graph breaks counted since the last call (only with the fallback counter)."""
        return self.break_counter.take() if self.break_counter is not None else []

    def trace_seconds(self) -> dict[str, float] | None:
        """Dynamo tracing seconds by function since the last call, or None without the Dynamo profiler."""
        profiler = self.dynamo_profiler
        return profiler.take() if profiler is not None and profiler.live else None


class Adapters:
    """The adapters of one session, handing what torch reports to ``sink``, and the state of each signal."""

    def __init__(
        self,
        settings: Settings,
        readings: Readings,
        sink: CompileSink,
        rank: int,
        emit: Callable[[Event], None],
        lock: threading.RLock,
    ) -> None:
        self.settings = settings
        self.readings = readings
        self.signals: dict[str, bool] = {}
        self.signals_off: dict[str, str] = {}
        self._rank, self._emit, self._lock, self._sink = rank, emit, lock, sink
        self.steps, self.guards, self.dynamo_profiler = (
            readings.steps,
            readings.guards,
            readings.dynamo_profiler,
        )
        self.step_in_trace = StepInTrace(self.steps)
        self.breaks = GraphBreakTap(sink.on_graph_break)
        self.metrics = CompileMetricsTap(
            sink.on_torch_record,
            on_late=self._on_metrics_late,
            on_lost=lambda why: self.lost("compile_metrics", why),
            on_start=self._on_compile_start,
            on_end=sink.on_compile_end,
            on_reset=self._on_reset,
        )
        self.backward_starts = BackwardStarts(self.metrics)
        self.profile: ProfileMode | None = None
        if settings.mode == "profile":
            from recompprof._torch.profile.mode import ProfileMode

            self.profile = ProfileMode(settings.recompile_limit, sink.on_profile_guard_failure)
            self.profile.on_stance_change = self._on_stance_change
            self.profile.on_reuse = _with_scope(sink.on_profile_reuse)

    @property
    def break_counter(self) -> GraphBreakCounter | None:
        """The fallback graph-break counter, where torch traces no breaks (None elsewhere)."""
        return self.readings.break_counter

    def _ordered(self) -> list[tuple[str, Adapter]]:
        adapters: list[tuple[str, Adapter]] = []
        if self.profile is not None:
            adapters.append(("profile_backend", self.profile))
        adapters += [("guard_failures", self.guards), ("graph_breaks", self.breaks)]
        if self.settings.step_source == "manual":
            self.steps.manual = True
            self.signals["optimizer_steps"], self.signals_off["optimizer_steps"] = (
                False,
                "step_source=manual",
            )
        else:
            adapters.append(("optimizer_steps", self.steps))
        adapters.append(("step_in_trace", self.step_in_trace))
        adapters.append(("compile_metrics", self.metrics))
        adapters.append(("backward_compile_start", self.backward_starts))
        if self.dynamo_profiler is not None:
            adapters.append(("dynamo_profiler", self.dynamo_profiler))
        return adapters

    def install(self) -> list[tuple[str, Callable[[], None]]]:
        """Install every adapter; returns ``(name, undo)`` in installation order."""
        undo: list[tuple[str, Callable[[], None]]] = []
        for name, adapter in self._ordered():
            if self._install_one(name, adapter):
                undo.append((name, adapter.uninstall))
        if not self.breaks.live and self.signals.get("graph_breaks") is False:
            undo += self._install_break_counter()
        info = torch_versions.torch_info()
        for gated in GATED_BY_COMPILE_METRICS:
            self.signals[gated] = info.has(gated) and self.signals.get("compile_metrics", False)
            if not self.signals[gated]:
                self.signals_off[gated] = (
                    info.why_off(gated) if not info.has(gated) else "compile_metrics is off"
                )
        return undo

    def _install_one(self, name: str, adapter: Adapter) -> bool:
        """Install ``adapter`` and record its signal as live or off; False if its install failed."""
        try:
            adapter.install()
        except Exception as exc:  # a missing or changed torch internal turns the signal off
            _internal.record(f"torch.{name}", exc, "signal turned off")
            self.signals[name], self.signals_off[name] = False, f"install failed: {exc}"
            if _internal.raising():
                raise
            return False
        self.signals[name] = bool(adapter.live)
        if not adapter.live:
            self.signals_off[name] = adapter.reason_off or "unavailable"
        return True

    def _install_break_counter(self) -> list[tuple[str, Callable[[], None]]]:
        """Graph breaks from torch's counters, where torch traces none (breaks it cannot resume from are not there)."""
        counter = GraphBreakCounter()
        counter.install()
        if not counter.live:
            return []
        self.readings.break_counter = counter
        self.signals["graph_breaks"] = True
        log.info(
            "recompprof: graph breaks are read from counters['graph_break'] (%s); breaks torch cannot "
            "resume from are not counted there",
            self.signals_off.pop("graph_breaks", ""),
        )
        return [("graph_breaks_counter", counter.uninstall)]

    # -- signals that change mid-run -----------------------------------------------------------
    def lost(self, name: str, why: str, *, by_job: bool = False) -> None:
        """A signal went dark mid-run: say so in the log, the events and (unless ``by_job``: the job's own
        legitimate call turned it off, no fault of recompprof's) the internal-error counter."""
        with self._lock:
            if not self.signals.get(name, False):
                return
            self.signals[name], self.signals_off[name] = False, why
            if by_job:
                log.warning("recompprof: signal %s went dark: %s", name, why)
            else:
                _internal.record(f"signal.{name}", RuntimeError(why), "signal went dark")
            self._emit(
                SignalChange(
                    time=time.time(),
                    rank=self._rank,
                    step=self.steps.step,
                    signal=name,
                    live=False,
                    reason=clean_text(why),
                )
            )

    def _on_compile_start(self, compile_id: str | None, backward: bool) -> None:
        """A compile began: the step hook it will call must still be torch's, then the recorder's start."""
        why = self.step_in_trace.gone()
        if why is not None:
            self.lost("step_in_trace", why, by_job=True)
        self._sink.on_compile_start(compile_id, backward)

    def _on_reset(self) -> None:
        """torch._dynamo.reset() ran: the guard-failure lists it cleared are read afresh, then the sink's."""
        self.guards.reset()
        self._sink.on_reset()

    def _on_metrics_late(self, count: int, why: str) -> None:
        _internal.record(
            "torch.compile_metrics.late",
            RuntimeError(why),
            f"{count} compile record(s) were recovered late from torch's record buffer",
        )

    def _on_stance_change(self, ours: bool) -> None:
        """Profile mode's forced backend was dropped (or put back) by the job's own set_stance calls."""
        if not ours:  # lost() warns once, naming what changed
            unfollowed = self.profile.why_limits_unfollowed if self.profile is not None else ""
            self.lost(
                "profile_backend",
                "the job changed the torch.compile stance (set_stance): compiles use "
                "the job's backend, with the job's own recompile limits"
                + (
                    f"; but recompprof cannot follow writes of the limits ({unfollowed}), so a "
                    "config.patch ending now may put profile mode's limit back"
                    if unfollowed
                    else ""
                ),
                by_job=True,
            )
            return
        with self._lock:
            self.signals["profile_backend"] = True
            self.signals_off.pop("profile_backend", None)
            self._emit(
                SignalChange(
                    time=time.time(),
                    rank=self._rank,
                    step=self.steps.step,
                    signal="profile_backend",
                    live=True,
                    reason="the stance is recompprof's again",
                )
            )
