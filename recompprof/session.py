"""A recompprof session: attach and detach, the compile-path recorder, and the fan-out to sinks.

Data flows one way: torch adapters (``recompprof._torch``) call the session on the compile path; the
session turns each signal into events, updates bounded aggregates, appends to the event log and
hands the event to each exporter. Nothing runs per training step except the step counter.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING, Any

from recompprof import _internal, exporting, settings as settings_module
from recompprof._torch import versions as torch_versions
from recompprof._torch import frames as torch_frames
from recompprof._torch.compile_metrics import CompileMetricsTap
from recompprof._torch.graph_breaks import GraphBreakCounter, GraphBreakTap
from recompprof._torch.guard_failures import GuardFailureReader, guard_set
from recompprof._torch.sources import type_name
from recompprof._torch.steps import StepCounter
from recompprof.aggregates import Aggregates, Snapshot
from recompprof.compiles import ReasonExplainer, compile_events, graph_break_event, reason_texts
from recompprof.cudagraphs import runtime_work
from recompprof.eventlog import EventLogWriter, log_path
from recompprof.events import (
    Compile,
    Event,
    Frame,
    GraphBreak,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
    SignalChange,
)
from recompprof.identity import Identity, detect
from recompprof.reasons import clean_text, graph_break_text

if TYPE_CHECKING:
    from recompprof.reporting import Report
    from recompprof.settings import Settings

log = logging.getLogger("recompprof")

_attach_lock = threading.RLock()
_current: Session | None = None
_last: Session | None = None

_MAX_REMEMBERED_COMPILES = 4096  # compile id -> frame, to attribute lazily compiled backwards


def current() -> Session | None:
    """The attached session, if any."""
    return _current


def attach(*, tracer_provider: Any = None, identity: Identity | None = None, **settings: Any) -> Session:
    """Attach recompprof to this process and return the session (also a context manager).

    Settings are keyword arguments named as in :class:`recompprof.settings.Settings` (``mode``,
    ``run_dir``, ``exporters``, ``recompile_limit``, ``warmup_steps``, ``redact``, ...); each falls back
    to its ``RECOMPPROF_*`` variable, then its default. A second attach warns and returns the live
    session. ``tracer_provider`` is handed to the OpenTelemetry exporter instead of building one;
    ``identity`` replaces the detected rank identity (a framework that launched the ranks itself knows it).
    """
    global _current, _last
    with _attach_lock:
        if _current is not None:
            warnings.warn("recompprof is already attached; returning the live session", RuntimeWarning, stacklevel=2)
            return _current
        resolved = settings_module.load(**settings)
        session = Session(resolved, tracer_provider=tracer_provider, identity=identity)
        session._start()
        _current = _last = session
        return session


def report() -> Report:
    """The report of the attached session, or of the last one that detached."""
    session = _current or _last
    if session is None:
        raise RuntimeError("recompprof has not been attached in this process; call recompprof.attach() first")
    return session.report()


class Session:
    """One attachment of recompprof to the process. Create it with :func:`attach`."""

    def __init__(self, settings: Settings, tracer_provider: Any = None, identity: Identity | None = None) -> None:
        self.settings = settings
        self.tracer_provider = tracer_provider
        self.identity = identity or detect()
        self.versions = torch_versions.versions()
        self.run_dir = Path(settings.run_dir) if settings.run_dir else Path.cwd() / "recompprof-runs" / self.identity.run_id
        self.event_log_path: Path | None = None
        self.signals: dict[str, bool] = {}
        self.signals_off: dict[str, str] = {}
        self.aggregates = Aggregates(settings.max_frames)
        self._lock = threading.RLock()
        self._recent: collections.deque[Event] = collections.deque(maxlen=settings.recent_events)
        self._writer: EventLogWriter | None = None
        self._exporters: list[exporting.Exporter] = []
        self._listeners: list[Callable[[Event], None]] = []
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._steps = StepCounter()
        self._guards = GuardFailureReader()
        self._breaks = GraphBreakTap(self._on_graph_break)
        self._break_counter: GraphBreakCounter | None = None  # fallback where torch traces no breaks
        self._pending_breaks: collections.OrderedDict[str, list[GraphBreak]] = collections.OrderedDict()
        self._metrics = CompileMetricsTap(self._on_compile_metrics, on_late=self._on_metrics_late,
                                          on_lost=self._on_metrics_lost)
        self._profile: Any = None
        self._dynamo_profiler: Any = None
        self._frame_of_compile: collections.OrderedDict[str, Frame] = collections.OrderedDict()
        # Dynamo frame id ("3" of "3/1") -> (code name, file, line, frame): limit-hit records carry no code names.
        self._code_of_frame_id: collections.OrderedDict[str, tuple[tuple[str, str, int], Frame]] = collections.OrderedDict()
        self._explainer = ReasonExplainer(settings.redact)
        self._pending_reasons: dict[CodeType, list[tuple[str | None, list[str]]]] = {}
        self._closed = False
        self._started = time.time()

    # -- lifecycle --------------------------------------------------------------------------
    def _start(self) -> None:
        for name in settings_module.unknown_environment():
            log.warning("recompprof: ignoring environment variable %s: no such setting", name)
        exporters = [exporting.load(name, self.settings) for name in dict.fromkeys(self.settings.exporters)]
        self._open_event_log()
        self._install_adapters()
        for exporter in exporters:
            with _internal.guard(f"exporter.{exporter.name}", "exporter failed to start; the job goes on without it"):
                exporter.start(self)
                self._exporters.append(exporter)
        self._emit(self._session_start())
        atexit.register(self.detach)
        self._undo.append(("atexit", lambda: atexit.unregister(self.detach)))
        self._install_sigterm()
        live = ", ".join(name for name, on in self.signals.items() if on)
        off = "; ".join(f"{name} ({why})" for name, why in self.signals_off.items())
        log.info("recompprof attached (%s mode, rank %d/%d): signals live: %s%s", self.settings.mode,
                 self.identity.rank, self.identity.world_size, live or "none", f"; off: {off}" if off else "")

    def _open_event_log(self) -> None:
        if not self.settings.event_log:
            return
        path = log_path(self.run_dir, self.identity.rank, self.identity.pid)
        try:
            self._writer = EventLogWriter(path)
            self.event_log_path = path
        except OSError as exc:
            _internal.record("eventlog", exc, f"cannot write the event log at {path} (setting run_dir / "
                             "RECOMPPROF_RUN_DIR); events stay in memory and in the exporters")

    def _install_adapters(self) -> None:
        adapters: list[tuple[str, Any]] = [
            ("guard_failures", self._guards),
            ("graph_breaks", self._breaks),
            ("optimizer_steps", self._steps),
            ("compile_metrics", self._metrics),
        ]
        if self.settings.step_source == "manual":
            adapters.remove(("optimizer_steps", self._steps))
            self._steps.manual = True
            self.signals["optimizer_steps"], self.signals_off["optimizer_steps"] = False, "step_source=manual"
        if self.settings.mode == "profile":
            from recompprof._torch.profile import ProfileMode

            self._profile = ProfileMode(self.settings.recompile_limit, self._on_profile_guard_failure)
            self._profile.on_stance_change = self._on_stance_change
            self._profile.on_reuse = self._on_profile_reuse
            adapters.insert(0, ("profile_backend", self._profile))
            if self.settings.dynamo_profiler:
                from recompprof._torch.dynamo_profiler import DynamoProfilerTap

                self._dynamo_profiler = DynamoProfilerTap()
                adapters.append(("dynamo_profiler", self._dynamo_profiler))
        for name, adapter in adapters:
            try:
                adapter.install()
            except Exception as exc:  # noqa: BLE001 - a missing or changed torch internal turns the signal off
                _internal.record(f"torch.{name}", exc, "signal turned off")
                self.signals[name], self.signals_off[name] = False, f"install failed: {exc}"
                if _internal._raise:
                    raise
                continue
            live, why = getattr(adapter, "live", True), getattr(adapter, "why_off", "")
            if name == "profile_backend" and not adapter.forced_backend:
                live, why = False, adapter.why_not_forced  # adapter.why_off stays the mechanism's own reason
            self.signals[name] = bool(live)
            if not live:
                self.signals_off[name] = why or "unavailable"
            self._undo.append((name, adapter.uninstall))
        if not self._breaks.live and self.signals.get("graph_breaks") is False:
            counter = GraphBreakCounter()
            counter.install()
            if counter.live:
                self._break_counter = counter
                self._undo.append(("graph_breaks_counter", counter.uninstall))
                self.signals["graph_breaks"] = True
                log.info("recompprof: graph breaks are read from counters['graph_break'] (%s); breaks torch cannot "
                         "resume from are not counted there", self.signals_off.pop("graph_breaks", ""))
        info = torch_versions.torch_info()
        for gated in ("phase_times", "recompile_limit_hits", "backward_compiles"):  # parts of CompilationMetrics
            self.signals[gated] = info.has(gated) and self.signals.get("compile_metrics", False)
            if not self.signals[gated]:
                self.signals_off[gated] = info.why_off(gated) if not info.has(gated) else "compile_metrics is off"

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        prior = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: Any) -> None:
            self.detach()
            if callable(prior):
                prior(signum, frame)
            elif prior == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.raise_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)

        def restore() -> None:
            if signal.getsignal(signal.SIGTERM) is on_sigterm and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, prior)

        self._undo.append(("sigterm", restore))

    def detach(self) -> None:
        """Remove every hook in reverse order of installation, flush and close every sink."""
        global _current
        with _attach_lock:
            if self._closed:
                return
            if os.getpid() != self.identity.pid:
                # A forked child (its atexit hooks, an inherited SIGTERM handler): the server, threads and
                # files belong to the parent; shutting them down here would block on a thread that never forked.
                self._closed = True
                return
            for name, undo in reversed(self._undo):
                with _internal.guard(f"detach.{name}"):
                    undo()
            self._undo.clear()
            with self._lock:
                self._flush_breaks()
                self._emit(self._session_end())
                self._closed = True
            for exporter in reversed(self._exporters):
                with _internal.guard(f"exporter.{exporter.name}"):
                    exporter.shutdown(5.0)
            if self._writer is not None:
                with _internal.guard("eventlog", "the event log could not be flushed at detach; check free space"):
                    self._writer.close()
            if _current is self:
                _current = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    @property
    def attached(self) -> bool:
        return not self._closed

    # -- public API ---------------------------------------------------------------------------
    @property
    def exporters(self) -> tuple[exporting.Exporter, ...]:
        """The exporters that started."""
        return tuple(self._exporters)

    @property
    def current_step(self) -> int:
        return self._steps.step

    def step(self, to: int | None = None) -> int:
        """Count one training step by hand (for loops without an optimizer), or set it ``to`` a trainer's
        global step; returns the new step."""
        return self._steps.advance(to)

    def snapshot(self) -> Snapshot:
        """A consistent copy of the running totals (what exporters read at scrape time)."""
        with self._lock:
            snap = self.aggregates.snapshot()
        dropped = dict(snap.events_dropped)
        for exporter in self._exporters:  # an exporter may drop what it could not deliver (e.g. spans)
            counts = getattr(exporter, "dropped", None)
            if callable(counts):
                with _internal.guard(f"exporter.{exporter.name}"):
                    for reason, n in counts().items():
                        dropped[f"{exporter.name}_{reason}"] = n
        return dataclasses.replace(snap, step=self._steps.step, internal_errors=_internal.counts(), events_dropped=dropped)

    def add_exemplar(self, seconds: float, trace_id: str) -> None:
        """Attach a trace id to the duration histogram bucket ``seconds`` falls in."""
        with self._lock:
            self.aggregates.add_exemplar(seconds, trace_id)

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener(event)`` for every event from now on (on the compile path: keep it cheap)."""
        with self._lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: Callable[[Event], None]) -> None:
        with self._lock:
            self._listeners = [x for x in self._listeners if x is not listener]

    def recent_events(self) -> list[Event]:
        with self._lock:
            return list(self._recent)

    def report(self) -> Report:
        """The report of this session, from its event log (or its recent events if it has none)."""
        from recompprof.eventlog import read_file
        from recompprof.reporting import build_report

        events: Iterable[Event]
        if self.event_log_path is not None and self.event_log_path.exists():
            events = list(read_file(self.event_log_path))
        else:
            events = self.recent_events()
        return build_report(events)

    # -- the compile path ------------------------------------------------------------------------
    def _emit(self, event: Event) -> None:
        with self._lock:
            # A forked child (DataLoader worker, compile pool) inherits the session: it must stay silent.
            if self._closed or os.getpid() != self.identity.pid:
                return
            self._recent.append(event)
            with _internal.guard("aggregates"):
                self._aggregate(event)
            if self._writer is not None:
                with _internal.guard("eventlog", f"the event log {self._writer.path} could not be written; check that "
                                     "its directory exists, is writable and has free space"):
                    if self._writer.reopen_if_deleted():
                        _internal.record("eventlog.deleted", FileNotFoundError(f"{self._writer.path} was deleted"),
                                         "the event log was deleted while the job ran; recompprof started a new one at "
                                         "the same path (events before that are lost): do not clean up a live run directory")
                    self._writer.write(event)
            for exporter in self._exporters:
                with _internal.guard(f"exporter.{exporter.name}"):
                    exporter.on_event(event)
            for listener in self._listeners:
                with _internal.guard("listener"):
                    listener(event)

    def _aggregate(self, event: Event) -> None:
        if isinstance(event, Compile):
            self.aggregates.add_compile(event)
        elif isinstance(event, RecompileLimitHit):
            self.aggregates.add_limit_hit(event)
        elif isinstance(event, GraphBreak):
            self.aggregates.add_graph_break(event)

    def _on_profile_guard_failure(self, code: CodeType, compile_id: str | None, texts: list[str]) -> None:
        with self._lock:
            pending = self._pending_reasons.setdefault(code, [])
            if len(pending) < 64:
                pending.append((compile_id, texts))
            if len(self._pending_reasons) > _MAX_REMEMBERED_COMPILES:  # frames whose compile never reported
                del self._pending_reasons[next(iter(self._pending_reasons))]

    def _on_profile_reuse(self, code: CodeType, compile_id: str, texts: list[str]) -> None:
        """Profile mode ran a parked variant again: the recompile a job at the session limit meets here,
        recorded with its reasons; no trace ran, so it takes no compile time."""
        with self._lock:
            if self._closed or self._profile is None:
                return
            frame = self._frame((code.co_name, code.co_filename, code.co_firstlineno), None)
            reasons, omitted = self._explainer.explain(frame, [t for t in texts if not self._profile.is_own_reason(t)])
            step = self._steps.step
            self._emit(Compile(time=time.time(), rank=self.identity.rank, step=step, frame=frame, compile_id=compile_id,
                               is_recompile=True, reasons=reasons, reasons_omitted=omitted,
                               steady_state=step >= self.settings.warmup_steps))

    def _take_pending(self, code_key: tuple[str, str, int]) -> list[str]:
        for code in list(self._pending_reasons):
            if (code.co_name, code.co_filename, code.co_firstlineno) == code_key:
                return [t for _, texts in self._pending_reasons.pop(code) for t in texts]
        return []

    def _on_stance_change(self, ours: bool) -> None:
        """Profile mode's forced backend was dropped (or put back) by the job's own set_stance calls."""
        if not ours:
            log.warning("recompprof: the job changed the torch.compile stance during profile mode; its own backend "
                        "compiles now and recompprof gave it back its own recompile limits")
            self._signal_lost("profile_backend", "the job changed the torch.compile stance (set_stance): compiles use "
                              "the job's backend, with the job's own recompile limits")
            return
        with self._lock:
            self.signals["profile_backend"] = True
            self.signals_off.pop("profile_backend", None)
            self._emit(SignalChange(time=time.time(), rank=self.identity.rank, step=self._steps.step,
                                    signal="profile_backend", live=True, reason="the stance is recompprof's again"))

    def _on_compile_metrics(self, metrics: Any) -> None:
        with self._lock:
            if self._closed or runtime_work(metrics) is not None:  # GPU runtime work (CUDA-graph recording,
                return  # first-launch autotune) arrives as an is_runtime record: not a compile
            self._record_compile(metrics)

    def _on_metrics_late(self, count: int, why: str) -> None:
        _internal.record("torch.compile_metrics.late", RuntimeError(why),
                         f"{count} compile record(s) were recovered late from torch's record buffer")

    def _on_metrics_lost(self, why: str) -> None:
        self._signal_lost("compile_metrics", why)

    def _signal_lost(self, name: str, why: str) -> None:
        """A signal went dark mid-run: say so in the log, the events and the internal-error counter."""
        with self._lock:
            if not self.signals.get(name, False):
                return
            self.signals[name], self.signals_off[name] = False, why
            _internal.record(f"signal.{name}", RuntimeError(why), "signal went dark")
            self._emit(SignalChange(time=time.time(), rank=self.identity.rank, step=self._steps.step, signal=name,
                                    live=False, reason=clean_text(why)))

    def _on_graph_break(self, payload: str, compile_id: str | None) -> None:
        with self._lock:
            if self._closed:
                return
            frame = self._frame_of_compile.get(compile_id) if compile_id else None
            if frame is None:
                ctx = torch_frames.compiling()
                if ctx is not None:
                    code = ctx.code
                    frame = self._frame((code.co_name, code.co_filename, code.co_firstlineno), ctx)
            event = graph_break_event(payload, time=time.time(), rank=self.identity.rank, step=self._steps.step,
                                      frame=frame, compile_id=compile_id, redact=self.settings.redact)
            if compile_id is not None and compile_id not in self._frame_of_compile:
                # Its compile's record comes later: emit the break after it, as ingest does from a trace.
                pending = self._pending_breaks.setdefault(compile_id, [])
                pending.append(event)
                if len(self._pending_breaks) > _MAX_REMEMBERED_COMPILES:
                    for orphan in self._pending_breaks.pop(next(iter(self._pending_breaks))):
                        self._emit(orphan)
            else:  # a break torch cannot resume from is reported after its compile's record
                self._emit(event)

    def _flush_breaks(self) -> None:
        while self._pending_breaks:
            for event in self._pending_breaks.popitem(last=False)[1]:
                self._emit(event)

    @staticmethod
    def _frame(code_key: tuple[str, str, int], ctx: torch_frames.Compiling | None) -> Frame:
        name, file, line = torch_frames.resolve(*code_key, ctx)
        # A file name from a non-UTF-8 path carries lone surrogates, which the event model rejects.
        return Frame(name=clean_text(name, 1000), file=clean_text(file, 1000), line=line)

    def _record_compile(self, m: Any) -> None:
        now, step = time.time(), self._steps.step
        compile_id = str(m.compile_id) if m.compile_id is not None else "?"
        forward = getattr(m, "is_forward", None) is not False  # no is_forward before 2.6: forward records only
        texts: list[str] = []
        call_site: list[str] = []
        ctx: torch_frames.Compiling | None = None
        fingerprint: str | None = None
        breaks: list[GraphBreak] = []
        if forward:
            ctx = torch_frames.compiling()
            frame_id = compile_id.split("/")[0]
            if m.co_name is None and ctx is not None:  # limit-hit records name no function; torch's frame does
                code_key = (ctx.code.co_name, ctx.code.co_filename, ctx.code.co_firstlineno)
                frame = self._frame(code_key, ctx)
            elif m.co_name is None and frame_id in self._code_of_frame_id:
                code_key, frame = self._code_of_frame_id[frame_id]
            else:
                code_key = (m.co_name or "<unknown>", m.co_filename or "<unknown>", m.co_firstlineno or 0)
                frame = self._frame(code_key, ctx)
                self._code_of_frame_id[frame_id] = (code_key, frame)
            call_site = torch_frames.call_site(ctx, self.settings.redact)
            if ctx is not None:
                with _internal.guard("torch.guard_set"):
                    fingerprint = guard_set(ctx.guarded_code)
            # A changed torch internal loses this compile's reasons, never the compile itself.
            with _internal.guard("torch.guard_failures", "guard-failure reasons are missing from compile events"):
                texts = self._guards.take(*code_key)[1]
            texts += self._take_pending(code_key)
            if self._profile is not None:
                texts = [t for t in texts if not self._profile.is_own_reason(t)]
            texts = reason_texts(m, texts)
            self._frame_of_compile[compile_id] = frame
            for remembered in (self._frame_of_compile, self._code_of_frame_id):
                if len(remembered) > _MAX_REMEMBERED_COMPILES:
                    remembered.popitem(last=False)
            breaks = [b if b.frame else b.model_copy(update={"frame": frame}) for b in self._pending_breaks.pop(compile_id, [])]
            if self._break_counter is not None:
                with _internal.guard("torch.graph_breaks", "graph breaks are not recorded"):
                    breaks += [GraphBreak(time=now, rank=self.identity.rank, step=step, frame=frame, compile_id=compile_id,
                                          reason=graph_break_text(text, self.settings.redact), count=count)
                               for text, count in self._break_counter.take()]
        else:
            frame = self._frame_of_compile.get(compile_id) or Frame(name="<backward>", file="<unknown>", line=0)
        limits = {name: _limit_value(name) for name in ("recompile_limit", "accumulated_recompile_limit")}
        event, hit = compile_events(
            m, time=now, rank=self.identity.rank, step=step, frame=frame,
            explained=self._explainer.explain(frame, texts, _resolver(ctx)),
            graph_breaks=sum(b.count for b in breaks), redact=self.settings.redact,
            steady_state=step >= self.settings.warmup_steps, limits=limits, call_site=call_site, guard_set=fingerprint,
        )
        if forward and self._dynamo_profiler is not None and self._dynamo_profiler.live:
            event = event.model_copy(update={"trace_seconds_by_function": self._dynamo_profiler.take()})
        self._emit(event)
        for graph_break in breaks:
            self._emit(graph_break)
        if hit is not None:
            self._emit(hit)

    # -- bookends ---------------------------------------------------------------------------------
    def _session_start(self) -> SessionStart:
        ident = self.identity
        limit = self.settings.recompile_limit if self.settings.mode == "profile" else _limit_value("recompile_limit")
        for name in ("recompile_limit", "accumulated_recompile_limit"):
            self.aggregates.limits[name] = _limit_value(name)
        return SessionStart(
            time=time.time(), rank=ident.rank, step=self._steps.step, run_id=ident.run_id, local_rank=ident.local_rank,
            world_size=ident.world_size, host=ident.host, pid=ident.pid, versions=self.versions,
            mode=self.settings.mode, recompile_limit=limit, warmup_steps=self.settings.warmup_steps,
            signals=dict(self.signals), profile_mechanism=getattr(self._profile, "mechanism", None),
            launcher=ident.launcher, restart_count=ident.restart_count,
        )

    def _session_end(self) -> SessionEnd:
        snap = self.snapshot()
        totals = {
            "compiles": snap.compiles_total,
            "recompiles": snap.recompiles_total,
            "graph_breaks": snap.graph_breaks,
            "compile_seconds": snap.duration_sum,
            "compile_failures": sum(snap.compile_failures.values()),
            "recompile_limit_hits": sum(sum(f.limit_hits.values()) for f in snap.frames.values()),
            "steps": snap.step,
            "wall_seconds": time.time() - self._started,
        }
        if self._profile is not None:
            stats = self._profile.stats
            totals.update({f"profile_{k}": float(stats[k]) for k in ("traces", "evictions", "reenabled") if k in stats})
        return SessionEnd(time=time.time(), rank=self.identity.rank, step=snap.step, totals=totals,
                          events_dropped=snap.events_dropped, internal_errors=snap.internal_errors,
                          signals_off=dict(self.signals_off))


def _resolver(ctx: torch_frames.Compiling | None) -> Any:
    """Looks a guard's subject up in the locals and globals of the call that is being compiled."""
    if ctx is None:
        return None
    return lambda subject: type_name(subject, ctx.f_locals, ctx.f_globals)


def _limit_value(name: str) -> int | None:
    try:
        import torch._dynamo.config as config

        info = torch_versions.torch_info()
        attr = info.limit_config_name if name == "recompile_limit" else info.accumulated_limit_config_name
        value = getattr(config, attr)
        return int(value) if value is not None else None
    except Exception:  # noqa: BLE001 - a renamed config only loses this figure
        return None
