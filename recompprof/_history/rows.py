"""Events -> the lake's rows: one rank session at a time, by the event model's own rules.

Every verdict in a row comes from the rule that owns it: what a compile counts as from
``recompprof._model.counting.verdict``, the cause its seconds are charged to from
``recompprof._model.causes.CauseTracker`` (one per run, as the report's fold keeps one), and whether
a session ended, had a gap or left a compile running from the report's session fold
(``recompprof._analysis.report.sessions.SessionFold``). The totals of a ``runs`` row are the same
figures the report shows (``Report.compiles`` ... ``recompile_seconds``), summed over the run's sessions;
tests/test_history_export.py holds the two equal.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from recompprof._analysis.report.bounded import CAPTURE_SIGNALS
from recompprof._analysis.report.sessions import SessionFold
from recompprof._eventlog.fastread import by_type
from recompprof._history.tables import EXPORT_VERSION
from recompprof._model.causes import CauseTracker
from recompprof._model.counting import COSTS, COUNTED, LIMIT_HIT, RECOMPILE, verdict
from recompprof._model.events import (
    PHASES,
    Compile,
    CompileRunning,
    CompileStart,
    GraphBreak,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
    SignalChange,
    short_path,
)
from recompprof._version import __version__

# A session's rows go to a sink: ``sink(table, run_id, rank, pid, day, row)``.
Sink = Callable[[str, str, int, int, datetime.date, dict[str, Any]], None]
PROMOTED = ("team", "model")  # labels that are columns of every table
_CACHE_KEYS = tuple(
    (f"{cache}_{result}", cache, result)
    for cache in ("fx_graph", "aot_autograd")
    for result in ("hit", "miss", "bypass")
)
_OMITTED = "(more cache entries)"  # the report's subject for reasons past an event's cap


@dataclasses.dataclass(frozen=True)
class TextPolicy:
    """What free text the lake may hold: ``redact`` (the setting: no reason or failure texts, no
    source, short paths) or ``no_text`` (no reason, failure or graph-break texts; paths kept)."""

    redact: bool = False
    no_text: bool = False

    @property
    def texts(self) -> bool:
        return not (self.redact or self.no_text)

    def path(self, path: str | None) -> str | None:
        return short_path(path) if self.redact and path else path

    def location(self, line: str) -> str:
        """A ``file:line in function`` line, its file shortened under redact."""
        if not self.redact:
            return line
        where, sep, rest = line.partition(" in ")
        file, colon, number = where.rpartition(":")
        return f"{short_path(file)}{colon}{number}{sep}{rest}" if colon else line


_DAYS: dict[int, datetime.date] = {}
_EPOCH = datetime.date(1970, 1, 1)


def day_of(seconds: float) -> datetime.date:
    """The UTC date of a time in seconds since the epoch (cached per day: a million rows share a few)."""
    index = int(seconds // 86400)
    day = _DAYS.get(index)
    if day is None:
        if len(_DAYS) > 4096:
            _DAYS.clear()
        day = _DAYS[index] = _EPOCH + datetime.timedelta(days=index)
    return day


def micros(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


class _Session:
    """One rank session being read: its identity, its completeness fold and its running totals."""

    def __init__(self, start: Any, rank: int, run_id: str, pid: int) -> None:
        self.start = start  # its session_start (None: events before any)
        self.rank, self.run_id, self.pid = rank, run_id, pid
        self.fold = SessionFold()
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.end: Any = None
        self.signals_off: set[str] = set()
        self.events = self.steps = 0
        self.verdicts = [0] * (LIMIT_HIT << 1)
        self.steady = self.backward = self.limit_hits = self.failures = 0
        self.guard_failures = self.graph_breaks = 0
        self.compile_seconds = self.recompile_seconds = 0.0
        self.dims: dict[str, Any] = {}
        self.labels: dict[str, str] = {}
        self.last_compile: dict[str, Any] | None = None  # for the limit hit that follows it

    def count(self, bit: int) -> int:
        return sum(n for bits, n in enumerate(self.verdicts) if bits & bit)


class SessionRows:
    """Turns the events of one run's logs into rows, session by session, handing each to ``sink``.

    Feed it events in log order (:meth:`add`), one log after another (:meth:`end_of_log` after each);
    a ``runs`` row goes out when its session closes (its ``session_end``, the rank's next
    ``session_start``, or the end of its log).
    """

    def __init__(
        self,
        sink: Sink,
        text: TextPolicy,
        *,
        run_id: str,
        pid: int = 0,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.sink = sink
        self.labels = labels or {}  # added to (and over) each session's own
        self.text = text
        self.tracker = CauseTracker()
        self.default_run, self.default_pid = run_id, pid
        self.open: dict[int, _Session] = {}
        self._frames: dict[Any, tuple[str, str, str | None, int, str | None, str]] = {}
        self.sessions = 0

    # -- the sessions -------------------------------------------------------------------------
    def add(self, event: Any) -> None:
        _HANDLERS[type(event)](self, event)

    def end_of_log(self, skipped_lines: int = 0) -> None:
        """The log ends: every session still open closes without ``session_end``; ``skipped_lines``
        (what the reader could not read of the log) goes on the last session closed."""
        for rank in sorted(self.open):
            self._close(self.open.pop(rank), skipped_lines)
            skipped_lines = 0

    def _session(self, event: Any) -> _Session:
        session = self.open.get(event.rank)
        if session is None:
            session = self.open[event.rank] = _Session(
                None, event.rank, self.default_run, self.default_pid
            )
            session.labels = dict(self.labels)
            session.dims = {
                "torch_version": None,
                "job": self.default_run,
                "team": self.labels.get("team"),
                "model": self.labels.get("model"),
            }
        time = event.time
        if session.first_time is None:
            session.first_time = time
        if session.last_time is None or time > session.last_time:
            session.last_time = time
        return session

    def _counted(self, session: _Session, event: Any) -> None:
        """An event the report's ``events`` and last step count (all but compile starts and beats)."""
        session.events += 1
        step = event.step
        if step is not None and step > session.steps:
            session.steps = step

    def _on_start(self, event: SessionStart) -> None:
        known = self.open.pop(event.rank, None)
        if known is not None:
            self._close(known, 0)
        session = self.open[event.rank] = _Session(event, event.rank, event.run_id, event.pid)
        labels = {**event.labels, **self.labels}
        session.labels = labels
        session.dims = {
            "torch_version": event.versions.get("torch") or None,
            "job": event.job or event.run_id,
            "team": labels.get("team"),
            "model": labels.get("model"),
        }
        session.first_time = session.last_time = event.time
        for name in CAPTURE_SIGNALS:
            if event.signals.get(name) is False:
                session.signals_off.add(name)
        session.fold.start(event)
        self._counted(session, event)

    def _on_end(self, event: SessionEnd) -> None:
        session = self._session(event)
        session.fold.end(event)
        session.end = event
        session.signals_off.update(event.signals_off)
        self._counted(session, event)
        self._close(self.open.pop(event.rank), 0)

    def _on_signal(self, event: SignalChange) -> None:
        session = self._session(event)
        session.fold.tally(event)
        if not event.live:
            session.signals_off.add(event.signal)
        self._counted(session, event)

    def _on_compile_start(self, event: CompileStart) -> None:
        self._session(event).fold.tally(event)

    def _on_compile_running(self, event: CompileRunning) -> None:
        self._session(event).fold.tally(event)

    # -- the facts ------------------------------------------------------------------------------
    def _frame(self, frame: Any) -> tuple[str, str, str | None, int, str | None, str]:
        found = self._frames.get(frame)
        if found is None:
            if len(self._frames) > 65_536:
                self._frames.clear()
            found = self._frames[frame] = (
                frame.key,
                frame.name,
                self.text.path(frame.file),
                frame.line,
                frame.owner,
                frame.label,
            )
        return found

    def _key(self, session: _Session, event: Any) -> dict[str, Any]:
        return {
            "run_id": session.run_id,
            "rank": session.rank,
            "pid": session.pid,
            **session.dims,
            "time": micros(event.time),
            "step": event.step,
            "compile_id": event.compile_id,
            "generation": event.generation,
        }

    def _on_compile(self, event: Compile) -> None:
        session = self._session(event)
        session.fold.tally(event)
        self._counted(session, event)
        found = verdict(event)
        session.verdicts[found] += 1
        cause = self.tracker.cause_of(event, found)
        if found & COUNTED and found & RECOMPILE and event.steady_state:
            session.steady += 1
        if event.backward:
            session.backward += 1
        if event.outcome == "failed":
            session.failures += 1
        omitted = sum(event.reasons_omitted.values()) if event.reasons_omitted else 0
        session.guard_failures += len(event.reasons) + omitted
        cost = event.duration if found & COSTS else 0.0
        session.compile_seconds += cost
        if cause is not None:
            session.recompile_seconds += event.duration
        key, name, file, line, owner, label = self._frame(event.frame)
        text = self.text
        row = self._key(session, event)
        lookups: Any = event.cache_lookups  # keyed by the closed CacheName set
        row.update(
            start_time=micros(event.start_time),
            backward=event.backward,
            frame_key=key,
            frame_name=name,
            frame_file=file,
            frame_line=line,
            frame_owner=owner,
            frame_label=label,
            is_recompile=event.is_recompile,
            cache_entries=event.cache_entries,
            outcome=event.outcome,
            fail_type=event.fail_type,
            fail_reason=event.fail_reason if text.texts else None,
            installed_code=event.installed_code,
            limit_name=None,
            limit_value=None,
            counts_as_compile=bool(found & COUNTED),
            counts_as_recompile=bool(found & RECOMPILE),
            steady_state_recompile=bool(found & RECOMPILE) and event.steady_state,
            compile_seconds=cost,
            duration_s=event.duration,
            guard_count=event.guard_count,
            graph_op_count=event.graph_op_count,
            graph_breaks=event.graph_breaks,
            cause_category=cause[1] if cause is not None else None,
            cause_subject=cause[2] if cause is not None else None,
            reason_count=len(event.reasons),
            reasons_omitted=omitted,
            steady_state=event.steady_state,
            automatic_dynamic=event.automatic_dynamic,
            cache=event.cache,
            cache_seconds_saved=event.cache_seconds_saved,
            guard_set=event.guard_set,
            trace_id=event.trace_id,
            call_site=[text.location(line) for line in event.call_site],
            cudagraph_skip=event.cudagraph_skip,
            graph_node_count=event.graph_node_count,
            graph_input_count=event.graph_input_count,
            shape_env_guard_count=event.shape_env_guard_count,
            accumulated_cache_size=event.accumulated_cache_size,
            param_numel=event.param_numel,
            param_bytes=event.param_bytes,
            triton_compile_s=event.triton_compile_s,
            restart_count=event.restart_count,
            dynamo_config_sha=event.dynamo_config_sha,
            inductor_config_sha=event.inductor_config_sha,
        )
        phases: Any = event.phases  # keyed by Phase
        for phase in PHASES:
            row[f"{phase}_s"] = phases.get(phase)
        for column, cache, result in _CACHE_KEYS:
            row[column] = lookups.get(cache, {}).get(result)
        day = day_of(event.time)
        session.last_compile = row if found == LIMIT_HIT else None
        self.sink("compiles", session.run_id, session.rank, session.pid, day, row)
        if event.reasons or omitted:
            self._reasons(session, event, found, key, name, day)

    def _reasons(
        self, session: _Session, event: Compile, found: int, key: str, name: str, day: datetime.date
    ) -> None:
        changed = bool(found & RECOMPILE)
        texts = self.text.texts
        for position, reason in enumerate(event.reasons):
            row = self._key(session, event)
            row.update(
                frame_key=key,
                frame_name=name,
                position=position,
                entry=reason.entry,
                category=reason.category,
                subject=reason.subject,
                explains_change=reason.explains_change,
                counts_as_change=changed and reason.explains_change,
                steady_state=event.steady_state,
                text=reason.text if texts else "",
                count=1,
            )
            self.sink("guard_failures", session.run_id, session.rank, session.pid, day, row)
        for category, count in sorted(event.reasons_omitted.items()):
            row = self._key(session, event)
            row.update(
                frame_key=key,
                frame_name=name,
                position=None,
                entry=None,
                category=category,
                subject=_OMITTED,
                explains_change=False,
                counts_as_change=False,
                steady_state=event.steady_state,
                text="",
                count=count,
            )
            self.sink("guard_failures", session.run_id, session.rank, session.pid, day, row)

    def _on_limit_hit(self, event: RecompileLimitHit) -> None:
        session = self._session(event)
        session.fold.tally(event)
        self._counted(session, event)
        session.limit_hits += 1
        row = session.last_compile
        if row is not None and row["compile_id"] == event.compile_id:
            row["limit_name"], row["limit_value"] = event.limit, event.value
        session.last_compile = None

    def _on_graph_break(self, event: GraphBreak) -> None:
        session = self._session(event)
        session.fold.tally(event)
        self._counted(session, event)
        frame = event.frame
        if frame is not None:  # the report counts the breaks of a frame (Report.graph_breaks)
            session.graph_breaks += event.count
        key, name = self._frame(frame)[:2] if frame is not None else (None, None)
        texts = self.text.texts
        row = self._key(session, event)
        row.update(
            frame_key=key,
            frame_name=name,
            reason=event.reason,
            explanation=event.explanation if texts else None,
            hints=list(event.hints) if texts else [],
            user_location=self.text.location(event.user_location) if event.user_location else None,
            skipped_frame=event.skipped_frame,
            count=event.count,
        )
        self.sink(
            "graph_breaks", session.run_id, session.rank, session.pid, day_of(event.time), row
        )

    # -- the session's row ----------------------------------------------------------------------
    def _close(self, session: _Session, skipped_lines: int) -> None:
        self.sessions += 1
        fold = session.fold
        fold.finish()
        rank = session.rank
        start, end = session.start, session.end
        versions = start.versions if start is not None else {}
        at_end = fold.ends.get(rank)
        dropped = sum(end.events_dropped.values()) if end is not None else 0
        first = session.first_time if session.first_time is not None else 0.0
        row: dict[str, Any] = {
            "run_id": session.run_id,
            "rank": rank,
            "pid": session.pid,
            **session.dims,
            **_identity(start),
            "python_version": versions.get("python") or None,
            "recompprof_version": versions.get("recompprof") or None,
            "triton_version": versions.get("triton") or None,
            "cuda_version": versions.get("cuda") or None,
            "labels": sorted(session.labels.items()),
            "start_time": micros(first),
            "end_time": micros(session.last_time),
            "ended": end is not None,
            "signals_off": sorted(session.signals_off),
            "events_dropped": dropped,
            "log_gap": rank in fold.gaps,
            "skipped_lines": skipped_lines,
            "compiling_at_end": at_end.running.frame.label if at_end is not None else None,
            "internal_errors": sum(end.internal_errors.values()) if end is not None else 0,
            "events": session.events,
            "compiles": session.count(COUNTED),
            "recompiles": session.count(RECOMPILE),
            "steady_state_recompiles": session.steady,
            "backward_compiles": session.backward,
            "limit_hits": session.limit_hits,
            "failures": session.failures,
            "guard_failures": session.guard_failures,
            "graph_breaks": session.graph_breaks,
            "steps": session.steps,
            "compile_seconds": session.compile_seconds,
            "recompile_seconds": session.recompile_seconds,
            "wall_seconds": end.totals.get("wall_seconds") if end is not None else None,
            "export_version": EXPORT_VERSION,
            "exporter_version": __version__,
        }
        self.sink("runs", session.run_id, rank, session.pid, day_of(first), row)


def _identity(start: Any) -> dict[str, Any]:
    """The columns of a ``runs`` row its ``session_start`` gives (all null for a session without one)."""
    if start is None:
        return dict.fromkeys(_IDENTITY) | {"source": "event_log"}
    found = {name: getattr(start, name) for name in _IDENTITY if name != "source"}
    found["source"] = "torch_trace" if start.signals.get("torch_trace") else "event_log"
    return found


_IDENTITY = (
    "local_rank",
    "world_size",
    "host",
    "launcher",
    "restart_count",
    "mode",
    "source",
    "profile_mechanism",
    "recompile_limit",
    "warmup_steps",
)

_HANDLERS: dict[type, Callable[[SessionRows, Any], None]] = by_type(
    {
        SessionStart: SessionRows._on_start,
        SessionEnd: SessionRows._on_end,
        SignalChange: SessionRows._on_signal,
        CompileStart: SessionRows._on_compile_start,
        CompileRunning: SessionRows._on_compile_running,
        Compile: SessionRows._on_compile,
        RecompileLimitHit: SessionRows._on_limit_hit,
        GraphBreak: SessionRows._on_graph_break,
    }
)
