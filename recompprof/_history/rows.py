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
from collections.abc import Callable, Sequence
from typing import Any

from recompprof._analysis.report.bounded import CAPTURE_SIGNALS
from recompprof._analysis.report.sessions import SessionFold
from recompprof._eventlog.fastread import by_type
from recompprof._history.tables import DIMENSIONS, EXPORT_VERSION, FACT_KEY, SCHEMAS
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

# Where a session's rows go: ``sink(table, run_id, rank, pid, day)`` is the function that takes the
# rows of that table, session and UTC day, each row its table's columns in the schema's order (times
# in seconds: the writer converts them).
Append = Callable[[Sequence[Any]], None]
Sink = Callable[[str, str, int, int, datetime.date], Append]
PROMOTED = ("team", "model")  # labels that are columns of every table
_OMITTED = "(more cache entries)"  # the report's subject for reasons past an event's cap
_NONE: dict[str, int] = {}
DIMENSION_NAMES = tuple(field.name for field in DIMENSIONS)
_RUNS = tuple(SCHEMAS["runs"].names)
_COMPILE_ID = FACT_KEY.index("compile_id")
_LIMIT_NAME = SCHEMAS["compiles"].names.index("limit_name")


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
        self.dims: tuple[Any, ...] = (None, None, None, None)  # tables.DIMENSIONS
        self.labels: dict[str, str] = {}
        self.appenders: dict[tuple[str, datetime.date], Append] = {}
        self.last_compile: list[Any] | None = None  # for the limit hit that follows it

    def add_compile(
        self, event: Compile, found: int, cost: float, charged: bool, omitted: int
    ) -> None:
        """Count one compile event with verdict ``found`` into the session's totals."""
        self.verdicts[found] += 1
        if found & RECOMPILE and event.steady_state:
            self.steady += 1
        if event.backward:
            self.backward += 1
        if event.outcome == "failed":
            self.failures += 1
        self.guard_failures += len(event.reasons) + omitted
        self.compile_seconds += cost
        if charged:
            self.recompile_seconds += event.duration

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
            session.dims = (
                None,
                self.default_run,
                self.labels.get("team"),
                self.labels.get("model"),
            )
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
        session.dims = (
            event.versions.get("torch") or None,
            event.job or event.run_id,
            labels.get("team"),
            labels.get("model"),
        )
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

    def _append(self, session: _Session, table: str, day: datetime.date) -> Append:
        """What takes the session's rows of ``table`` for ``day`` (asked of the sink once)."""
        found = session.appenders.get((table, day))
        if found is None:
            found = session.appenders[(table, day)] = self.sink(
                table, session.run_id, session.rank, session.pid, day
            )
        return found

    def _key(self, session: _Session, event: Any) -> tuple[Any, ...]:
        """The columns every fact row starts with (tables.FACT_KEY), in order; times stay seconds
        until a batch is written (``tables.TIMESTAMP`` columns are converted there, in Arrow)."""
        return (
            session.run_id,
            session.rank,
            session.pid,
            *session.dims,
            event.time,
            event.step,
            event.compile_id,
            event.generation,
        )

    def _on_compile(self, event: Compile) -> None:
        session = self._session(event)
        session.fold.tally(event)
        self._counted(session, event)
        found = verdict(event)
        cause = self.tracker.cause_of(event, found)
        recompile = bool(found & RECOMPILE)
        reasons = event.reasons
        omitted = sum(event.reasons_omitted.values()) if event.reasons_omitted else 0
        duration = event.duration
        cost = duration if found & COSTS else 0.0
        session.add_compile(event, found, cost, cause is not None, omitted)
        frame_key, name, file, line, owner, label = self._frame(event.frame)
        text = self.text
        key = self._key(session, event)
        lookups: Any = event.cache_lookups  # keyed by the closed CacheName set
        phases: Any = event.phases  # keyed by Phase
        fx, aot = lookups.get("fx_graph") or _NONE, lookups.get("aot_autograd") or _NONE
        # In the order of tables.COMPILES (checked at import: COMPILE_COLUMNS).
        row = [
            *key,
            event.start_time,
            event.backward,
            frame_key,
            name,
            file,
            line,
            owner,
            label,
            event.is_recompile,
            event.cache_entries,
            event.outcome,
            event.fail_type,
            event.fail_reason if text.texts else None,
            event.installed_code,
            None,  # limit_name: the recompile_limit_hit that follows fills it in
            None,  # limit_value
            bool(found & COUNTED),
            recompile,
            recompile and event.steady_state,
            cost,
            duration,
            *[phases.get(phase) for phase in PHASES],
            event.guard_count,
            event.graph_op_count,
            event.graph_breaks,
            cause[1] if cause is not None else None,
            cause[2] if cause is not None else None,
            len(reasons),
            omitted,
            event.steady_state,
            event.automatic_dynamic,
            event.cache,
            event.cache_seconds_saved,
            fx.get("hit"),
            fx.get("miss"),
            fx.get("bypass"),
            aot.get("hit"),
            aot.get("miss"),
            aot.get("bypass"),
            event.guard_set,
            event.trace_id,
            _call_site(event.call_site, text),
            event.cudagraph_skip,
            event.graph_node_count,
            event.graph_input_count,
            event.shape_env_guard_count,
            event.accumulated_cache_size,
            event.param_numel,
            event.param_bytes,
            event.triton_compile_s,
            event.restart_count,
            event.dynamo_config_sha,
            event.inductor_config_sha,
        ]
        day = day_of(event.time)
        session.last_compile = row if found == LIMIT_HIT else None
        self._append(session, "compiles", day)(row)
        if reasons or omitted:
            self._reasons(session, event, recompile, (*key, frame_key, name), day)

    def _reasons(
        self,
        session: _Session,
        event: Compile,
        recompile: bool,
        head: tuple[Any, ...],
        day: datetime.date,
    ) -> None:
        """The ``guard_failures`` rows of a compile (``head``: its key and frame columns)."""
        steady = event.steady_state
        texts = self.text.texts
        append = self._append(session, "guard_failures", day)
        for position, reason in enumerate(event.reasons):
            explains = reason.explains_change
            append(
                (
                    *head,
                    position,
                    reason.entry,
                    reason.category,
                    reason.subject,
                    explains,
                    recompile and explains,
                    steady,
                    reason.text if texts else "",
                    1,
                ),
            )
        if event.reasons_omitted:  # rare: past the per-event cap
            for category, count in sorted(event.reasons_omitted.items()):
                append((*head, None, None, category, _OMITTED, False, False, steady, "", count))

    def _on_limit_hit(self, event: RecompileLimitHit) -> None:
        session = self._session(event)
        session.fold.tally(event)
        self._counted(session, event)
        session.limit_hits += 1
        row = session.last_compile
        if row is not None and row[_COMPILE_ID] == event.compile_id:
            row[_LIMIT_NAME], row[_LIMIT_NAME + 1] = event.limit, event.value
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
        row = (
            *self._key(session, event),
            key,
            name,
            event.reason,
            event.explanation if texts else None,
            list(event.hints) if texts else [],
            self.text.location(event.user_location) if event.user_location else None,
            event.skipped_frame,
            event.count,
        )
        self._append(session, "graph_breaks", day_of(event.time))(row)

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
            **dict(zip(DIMENSION_NAMES, session.dims, strict=True)),
            **_identity(start),
            "python_version": versions.get("python") or None,
            "recompprof_version": versions.get("recompprof") or None,
            "triton_version": versions.get("triton") or None,
            "cuda_version": versions.get("cuda") or None,
            "labels": sorted(session.labels.items()),
            "start_time": first,
            "end_time": session.last_time,
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
        self._append(session, "runs", day_of(first))([row[n] for n in _RUNS])


def _call_site(lines: list[str], text: TextPolicy) -> list[str]:
    if not lines:
        return []
    return [text.location(line) for line in lines] if text.redact else list(lines)


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
