"""A recompprof session's lifecycle: attach and detach (an undo stack), and the fan-out to sinks.

Data flows one way: torch adapters (``recompprof._capture.adapters``) call the compile-path recorder
(``recompprof._capture.recorder``), which turns each signal into events; the session appends each event to
the event log, hands it to each exporter and listener, and folds it into bounded aggregates when they are
read (a scrape, ``snapshot()``, the session's end) or every ``FOLD_EVERY`` events. Nothing flows back
from a sink. Nothing runs per training step except the step counter.
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
from typing import TYPE_CHECKING, Any

from recompprof import _internal
from recompprof._bootstrap import lineage
from recompprof._capture import exporting, forks, history, settings as settings_module
from recompprof._capture.adapters import Adapters, Readings
from recompprof._capture.identity import Identity, detect, run_folder
from recompprof._capture.recorder import CompileRecorder
from recompprof._capture.ticker import CompileTicker
from recompprof._eventlog.writer import DROPPED, EventLogWriter, log_path
from recompprof._model.aggregates import Aggregates, Snapshot
from recompprof._model.events import (
    MAX_SUBJECT,
    CompileRunning,
    Event,
    Running,
    SessionEnd,
    SessionStart,
)
from recompprof._model.naming import shortened
from recompprof._model.status import Status, running, unseen_backward
from recompprof._torch import versions as torch_versions
from recompprof._torch.job import torch_job_id
from recompprof._torch.limits import configured_limits

if TYPE_CHECKING:
    from recompprof._capture.settings import Settings
    from recompprof._torch.profile.mode import ProfileMode

log = logging.getLogger("recompprof")

_attach_lock = threading.RLock()
# Events held unfolded at most: the aggregates are folded when read, or once this many are waiting. A compile
# event's fold costs tens of microseconds cold inside a compile and a few in a batch; no reader misses one,
# since every read of the aggregates folds what waits first.
FOLD_EVERY = 64
_current: Session | None = None
_last: Session | None = None


def current() -> Session | None:
    """The attached session, if any."""
    return _current


def attach(
    *, tracer_provider: Any = None, identity: Identity | None = None, **settings: Any
) -> Session:
    """Attach recompprof to this process and return the session (also a context manager).

    Settings are keyword arguments named as in :class:`recompprof._capture.settings.Settings` (``mode``,
    ``run_dir``, ``exporters``, ``recompile_limit``, ``warmup_steps``, ``redact``, ...); each falls back
    to its ``RECOMPPROF_*`` variable, then its default. A second attach warns and returns the live
    session. ``tracer_provider`` is handed to the OpenTelemetry exporter instead of building one;
    ``identity`` replaces the detected rank identity (a framework that launched the ranks itself knows it).

    In a helper of an attached process (a worker it started that has no rank variables of its own; see
    docs/multi-rank.md) nothing attaches without ``identity``: it warns and returns a session that is not
    attached, which records nothing, since attaching would pose as the parent's rank.
    """
    global _current, _last
    with _attach_lock:
        if _current is not None:
            warnings.warn(
                "recompprof is already attached; returning the live session",
                RuntimeWarning,
                stacklevel=2,
            )
            return _current
        resolved = settings_module.load(**settings)
        if identity is not None and identity.pid != os.getpid():
            # Every hook takes a process other than the session's for a fork of it, and does
            # nothing there: the session would record nothing, and say nothing.
            raise settings_module.ConfigError(
                f"attach(identity=...): pid {identity.pid} is not this process ({os.getpid()}); "
                "an identity names the process that attaches: pass pid=os.getpid()"
            )
        parent = lineage.helper_of() if identity is None else None
        if parent is not None:
            warnings.warn(
                f"recompprof: not attached in process {os.getpid()}: it is a helper of process {parent} "
                "(started by it, with the same rank variables), and attaching would pose as that process's "
                "rank; pass identity= to attach it as a rank of its own",
                RuntimeWarning,
                stacklevel=2,
            )
            helper = Session(resolved, tracer_provider=tracer_provider)
            helper._closed = True
            return helper
        session = Session(resolved, tracer_provider=tracer_provider, identity=identity)
        session._start()
        _current = _last = session
        return session


def reported() -> Session:
    """The attached session, or the last one that detached: the one ``recompprof.report()`` reports."""
    session = _current or _last
    if session is None:
        raise RuntimeError(
            "recompprof has not been attached in this process; call recompprof.attach() first"
        )
    return session


class Session:
    """One attachment of recompprof to the process. Create it with :func:`attach`."""

    def __init__(
        self, settings: Settings, tracer_provider: Any = None, identity: Identity | None = None
    ) -> None:
        self.settings = settings
        self.tracer_provider = tracer_provider
        self.identity = identity or detect()
        self.versions = torch_versions.versions()
        self.run_dir = (
            Path(settings.run_dir)
            if settings.run_dir
            else Path.cwd() / "recompprof-runs" / run_folder(self.identity.run_id)
        )
        self.event_log_path: Path | None = None
        self._aggregates = Aggregates(settings.max_frames)
        self._unfolded: list[Event] = []  # emitted, in order, not yet folded into the aggregates
        self._lock = threading.RLock()
        self._recent: collections.deque[Event] = collections.deque(maxlen=settings.recent_events)
        self._writer: EventLogWriter | None = None
        self._write_hint = ""  # the event log's line when a write fails (set with the writer)
        self._periodic: history.PeriodicExport | None = None  # exports while the session runs
        self._exporters: list[exporting.Exporter] = []
        # (exporter, the component its errors are counted under): the fan-out's list, named once
        self._sinks: list[tuple[exporting.Exporter, str]] = []
        self._listeners: list[Callable[[Event], None]] = []
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._closed = False
        self._started = time.time()
        # The recorder reads the adapters that never call it (readings); the others call it.
        readings = Readings(settings)
        self._recorder = CompileRecorder(
            settings, self.identity.rank, self._emit, self._lock, lambda: self._closed, readings
        )
        self._adapters = Adapters(
            settings, readings, self._recorder, self.identity.rank, self._emit, self._lock
        )

    # -- lifecycle --------------------------------------------------------------------------
    def _start(self) -> None:
        for name in settings_module.unknown_environment():
            log.warning("recompprof: ignoring environment variable %s: no such setting", name)
        if self.settings.history_uri and not self.settings.event_log:
            log.warning(
                "recompprof: history_uri is set but event_log is off: this session exports nothing "
                "to the history lake (its exports read the event log); turn event_log on"
            )
        exporters = [
            exporting.load(name, self.settings) for name in dict.fromkeys(self.settings.exporters)
        ]
        self._open_event_log()
        self._undo.extend(self._adapters.install())
        view = exporting.View(self.identity, self.versions, self.snapshot, self.tracer_provider)
        for exporter in exporters:
            with _internal.contain(
                f"exporter.{exporter.name}", "exporter failed to start; the job goes on without it"
            ):
                exporter.start(view)
                self._exporters.append(exporter)
                self._sinks.append((exporter, f"exporter.{exporter.name}"))
        # Compiles carry a trace id when an exporter sends them as traces under it (the duration exemplar).
        self._recorder.trace_ids = any(exporting.sends_traces(e) for e in self._exporters)
        self._emit(self._session_start())
        atexit.register(self.detach)
        self._undo.append(("atexit", lambda: atexit.unregister(self.detach)))
        # Children started from now on that share this process's rank variables are its helpers, not ranks.
        previous, value = lineage.mark(lineage.ATTACHED)
        self._undo.append(("lineage", lambda: lineage.restore(previous, value)))
        self._install_sigterm()
        self._start_periodic_export()
        ticker = CompileTicker(self.status, self.settings, still_running=self._still_running)
        ticker.start()
        self._recorder.ended = ticker.compile_ended
        self._undo.append(("ticker", ticker.stop))
        live = ", ".join(name for name, on in self.signals.items() if on)
        off = "; ".join(f"{name} ({why})" for name, why in self.signals_off.items())
        log.info(
            "recompprof attached (%s mode, rank %d/%d): signals live: %s%s",
            self.settings.mode,
            self.identity.rank,
            self.identity.world_size,
            live or "none",
            f"; off: {off}" if off else "",
        )

    def _open_event_log(self) -> None:
        if not self.settings.event_log:
            return
        path = log_path(self.run_dir, self.identity.rank, self.identity.pid)
        try:
            self._writer = EventLogWriter(path)
            self.event_log_path = path
            # made once: a text built per event would cost every event on the compile path
            self._write_hint = (
                f"the event log {path} could not be written; check that "
                "its directory exists, is writable and has free space"
            )
        except OSError as exc:
            _internal.record(
                "eventlog",
                exc,
                f"cannot write the event log at {path} (setting run_dir / "
                "RECOMPPROF_RUN_DIR); events stay in memory and in the exporters",
            )

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        prior = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: Any) -> None:
            ours = signal.getsignal(signal.SIGTERM) is on_sigterm
            if ours and prior == signal.SIG_DFL and os.getpid() != 1:
                # The default ends the process now, with no atexit: the session ends first.
                self.detach()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.raise_signal(signal.SIGTERM)
                return
            # Whether the process ends is another handler's to say: the earlier one (one that sets
            # a flag the loop reads, SIG_IGN, or none: PID 1 in a container, whose default the
            # kernel ignores), or a later one that calls this one among its own (Lightning's: it
            # stops the fit at the next step, its callbacks told). So the session goes on, and ends
            # at exit; the lake gets the log so far now, which a SIGKILL at the grace's end would
            # otherwise take with it.
            if self._periodic is not None:
                self._periodic.now()
            if callable(prior):
                prior(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)

        def restore() -> None:
            if (
                signal.getsignal(signal.SIGTERM) is on_sigterm
                and threading.current_thread() is threading.main_thread()
            ):
                signal.signal(signal.SIGTERM, prior)

        self._undo.append(("sigterm", restore))

    def detach(self) -> None:
        """Remove every hook in reverse order of installation, flush and close every sink."""
        global _current
        with _attach_lock:
            if self._closed:
                return
            if forks.forked_from(self.identity.pid):
                # A forked child (its atexit hooks, an inherited SIGTERM handler): the server, threads and
                # files belong to the parent; shutting them down here would block on a thread that never forked.
                self._closed = True
                return
            for name, undo in reversed(self._undo):
                with _internal.contain(f"detach.{name}"):
                    undo()
            self._undo.clear()
            with self._lock:
                self._recorder.flush()
                self._emit(self._session_end())
                self._closed = True
            for exporter in reversed(self._exporters):
                with _internal.contain(f"exporter.{exporter.name}"):
                    exporter.shutdown(5.0)
            if self._writer is not None:
                with _internal.contain(
                    "eventlog", "the event log could not be flushed at detach; check free space"
                ):
                    self._writer.close()
            self._export_history()
            if _current is self:
                _current = None

    def _start_periodic_export(self) -> None:
        """While the session runs, its log goes to the history lake every ``history_every`` seconds."""
        uri, log = self.settings.history_uri, self.event_log_path
        if not uri or log is None or self._writer is None:
            return
        settings = self.settings
        periodic = history.PeriodicExport(
            log, uri, settings.history_every, settings.history_timeout, settings.redact
        )
        periodic.start()
        self._periodic = periodic
        self._undo.append(("history", periodic.stop))

    def _export_history(self) -> None:
        """The log, into the history lake when a setting names one (bounded; never raises): only the
        days the periodic exports have not closed, and the session's runs row."""
        uri, log = self.settings.history_uri, self.event_log_path
        if uri and log is not None and self._writer is not None:
            closed = self._periodic.closed if self._periodic is not None else None
            with _internal.contain("history", "the event log was not exported to the lake"):
                history.export_at_end(
                    log, uri, self.settings.history_timeout, self.settings.redact, closed
                )

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    @property
    def attached(self) -> bool:
        return not self._closed

    # -- public API ---------------------------------------------------------------------------
    @property
    def signals(self) -> dict[str, bool]:
        """Whether each capture signal is live (see docs/reliability.md)."""
        return self._adapters.signals

    @property
    def signals_off(self) -> dict[str, str]:
        """Why each signal that is off is off."""
        return self._adapters.signals_off

    @property
    def exporters(self) -> tuple[exporting.Exporter, ...]:
        """The exporters that started."""
        return tuple(self._exporters)

    @property
    def current_step(self) -> int:
        return self._adapters.steps.step

    def step(self, to: int | None = None) -> int:
        """Count one training step by hand (for loops without an optimizer), or set it ``to`` a trainer's
        global step; returns the new step."""
        return self._adapters.steps.advance(to)

    def status(self) -> Status:
        """This rank now: its step and the compile running on it (``compiling``: frame, compile id, start,
        seconds so far, the guard failure that triggered it), or ``compiling=None``."""
        return Status(
            rank=self.identity.rank,
            step=self._adapters.steps.step,
            compiling=running(self._recorder.running, time.time()),
            backward_unknown=unseen_backward(self.signals),
        )

    def snapshot(self) -> Snapshot:
        """A consistent copy of the running totals (what exporters read at scrape time)."""
        with self._lock:
            snap = self.aggregates.snapshot(
                step=self._adapters.steps.step, internal_errors=_internal.counts()
            )
            running = self._recorder.running
            if running is not None:
                snap = dataclasses.replace(
                    snap, compiling=(self.aggregates.frame_label(running.frame), running.time)
                )
        dropped = dict(snap.events_dropped)
        if (
            self._writer is not None and self._writer.dropped
        ):  # events the log lacks: readers reconcile with it
            dropped[DROPPED] = self._writer.dropped
        for (
            exporter
        ) in self._exporters:  # an exporter may drop what it could not deliver (e.g. spans)
            with _internal.contain(f"exporter.{exporter.name}"):
                for reason, n in exporting.dropped_by(exporter).items():
                    dropped[f"{exporter.name}_{reason}"] = n
        return dataclasses.replace(snap, events_dropped=dropped)

    def add_exemplar(self, seconds: float, trace_id: str) -> None:
        """Attach a trace id to the duration histogram bucket ``seconds`` falls in (compiles that carry a
        ``trace_id`` add theirs by themselves)."""
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

    def events(self) -> Iterable[Event]:
        """This session's events, streamed from its event log (or its recent events if it has none):
        what ``recompprof.report(session)`` folds."""
        from recompprof._eventlog.reader import read_file

        if self.event_log_path is not None and self.event_log_path.exists():
            return read_file(self.event_log_path)
        return self.recent_events()

    def _still_running(self, compiling: Running) -> None:
        """The status thread's heartbeat while a compile runs long (see ``CompileRunning``). It is for the event
        log alone: a multi-hour compile's beats must not push real events out of ``recent_events()``, and
        sinks and listeners have the running compile already (``status()``, the gauges)."""
        with self._lock:
            if not self._closed and not forks.forked_from(self.identity.pid):
                self._write(
                    CompileRunning(
                        time=time.time(),
                        rank=self.identity.rank,
                        step=self._adapters.steps.step,
                        compile_id=compiling.compile_id,
                        generation=compiling.generation,
                        seconds=compiling.seconds,
                        backward=compiling.backward,
                    )
                )

    # -- the fan-out ---------------------------------------------------------------------------
    def _emit(self, event: Event) -> None:
        with self._lock:
            # A forked child (DataLoader worker, compile pool) inherits the session: it must stay silent.
            if self._closed or forks.forked_from(self.identity.pid):
                return
            self._recent.append(event)
            unfolded = self._unfolded
            unfolded.append(event)
            if len(unfolded) >= FOLD_EVERY:
                self._fold()
            if self._writer is not None:
                self._write(event)
            # Contained by handlers: a handler costs nothing until it catches, while a context manager
            # per sink is three calls and a name formatted per event, cold in a compile.
            for exporter, component in self._sinks:
                try:
                    exporter.on_event(event)
                except Exception as exc:  # noqa: BLE001 - counted; raised again under the tests
                    _internal.caught(component, exc)
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception as exc:  # noqa: BLE001 - as above
                    _internal.caught("listener", exc)

    @property
    def aggregates(self) -> Aggregates:
        """The running totals, with every event emitted so far folded in."""
        with self._lock:
            self._fold()
            return self._aggregates

    def _fold(self) -> None:
        """Fold the events emitted since the last fold, in order (the caller holds the lock)."""
        unfolded, self._unfolded = self._unfolded, []
        for event in unfolded:
            with _internal.contain("aggregates"):
                self._aggregates.add(event)

    def _write(self, event: Event) -> None:
        """Append ``event`` to the event log, if there is one (the caller holds the lock)."""
        writer = self._writer
        if writer is None:
            return
        try:  # contained as ``_emit``'s sinks are (a handler, not a context manager, per event)
            if writer.reopen_if_deleted():
                _internal.record(
                    "eventlog.deleted",
                    FileNotFoundError(f"{writer.path} was deleted"),
                    "the event log was deleted while the job ran; recompprof started a new one at "
                    "the same path (events before that are lost): do not clean up a live run directory",
                )
            writer.write(event)
        except Exception as exc:  # noqa: BLE001 - counted; raised again under the tests
            _internal.caught("eventlog", exc, self._write_hint)

    # -- bookends ---------------------------------------------------------------------------------
    @property
    def _profile(self) -> ProfileMode | None:
        """Profile mode's adapter (None in monitor mode)."""
        return self._adapters.profile

    def _session_start(self) -> SessionStart:
        ident = self.identity
        limits = configured_limits()
        self.aggregates.limits.update(limits)
        limit = (
            self.settings.recompile_limit
            if self.settings.mode == "profile"
            else limits["recompile_limit"]
        )
        return SessionStart(
            time=time.time(),
            rank=ident.rank,
            step=self.current_step,
            run_id=ident.run_id,
            local_rank=ident.local_rank,
            world_size=ident.world_size,
            host=ident.host,
            pid=ident.pid,
            versions=self.versions,
            mode=self.settings.mode,
            recompile_limit=limit,
            warmup_steps=self.settings.warmup_steps,
            signals=dict(self.signals),
            profile_mechanism=self._profile.mechanism if self._profile is not None else None,
            launcher=ident.launcher,
            restart_count=ident.restart_count,
            job=shortened(self.settings.job or torch_job_id() or ident.run_id, MAX_SUBJECT),
            labels=dict(self.settings.labels),
        )

    def _session_end(self) -> SessionEnd:
        snap = self.snapshot()
        totals = {**snap.totals(), "steps": snap.step, "wall_seconds": time.time() - self._started}
        if self._profile is not None:
            stats = self._profile.stats
            totals.update(
                {
                    f"profile_{k}": float(stats[k])
                    for k in ("traces", "evictions", "reenabled")
                    if k in stats
                }
            )
        return SessionEnd(
            time=time.time(),
            rank=self.identity.rank,
            step=snap.step,
            totals=totals,
            events_dropped=snap.events_dropped,
            internal_errors=snap.internal_errors,
            signals_off=dict(self.signals_off),
            compiling=running(self._recorder.running, time.time()),
        )
