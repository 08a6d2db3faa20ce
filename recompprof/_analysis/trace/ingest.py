"""Read the structured logs ``TORCH_TRACE`` writes into recompprof events.

A trace file holds one process's records (:mod:`recompprof._analysis.trace.records` reads them). One
handler per record kind reads what recompprof uses: ``compilation_metrics`` (one per forward compile,
``bwd_...`` for a lazily compiled backward), read into a plain record by ``recompprof._torch.records``,
becomes a ``compile`` event with its exclusive phases, by the compile assembler that live capture
uses (``recompprof._model.assembler``); the ``recompile_reasons`` artifact gives that compile's
guard-failure reasons; ``dynamo_graph_break_reason`` becomes a ``graph_break``; a metrics record failing with "recompile limit exceeded" also yields a
``recompile_limit_hit``. ``dynamo_start`` and ``str`` records name the frame of a compile id, which
torch leaves out of the metrics of a limit hit. A trace carries training steps only where recompprof
was attached (it hands torch the step for each compile record, see ``recompprof._torch.steps``): those
forward compiles, their graph breaks and limit hits get their step; backward compiles have none.
A record of a known kind but not the shape torch writes is skipped and counted by its handler.

A trace has no record of ``torch._dynamo.reset()``, but a reset restarts compile ids: a
``dynamo_start`` of a compile id already started since the last restart begins the next reset
generation, as live capture counts it (what was joined by compile id is let go there, as live). A
reset with no compile since the one before it (or before the first compile) leaves no mark, so there
ingest's ``generation`` is lower than the live one.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.model import Report
from recompprof._analysis.trace import frames
from recompprof._analysis.trace.records import (
    TRACE_PREFIX,
    RecordCounts,
    TraceMetrics,
    TraceRecord,
    config_limit,
    file_rank,
    installed_guards,
    read_records,
    recompile_reasons,
    torch_version,
)
from recompprof._errors import RecompprofError
from recompprof._eventlog.format import LOG_GLOB
from recompprof._eventlog.reader import find_files
from recompprof._eventlog.writer import log_path, write_events
from recompprof._model.aggregates import Aggregates
from recompprof._model.assembler import CompileAssembler, Seen
from recompprof._model.compile_id import CompileId
from recompprof._model.compile_record import CompileRecord
from recompprof._model.events import (
    Compile,
    Event,
    Frame,
    GraphBreak,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
)
from recompprof._model.naming import as_text
from recompprof._torch.records import read_record
from recompprof._torch.steps import step_of

MAX_PENDING_GUARDS = 4096  # guard trees held for a compile's metrics record
MAX_SCRIPTS = 64  # files run as __main__ remembered per process
MAX_REASON_CHARS = 32 * 1024 * 1024  # characters of recompile_reasons payloads kept (_ReasonLists)
# What a record of the right kind but not the shape torch writes raises (valid JSON, e.g. a hand-edited trace).
SHAPE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


class IngestError(RecompprofError):
    """The path holds no readable TORCH_TRACE logs; the message says which path and why."""


@dataclasses.dataclass
class IngestStats(RecordCounts):
    """What reading traces skipped: lines that are not records, payloads torn or altered, and records
    of unexpected shapes (``bad_records``, by kind in ``bad_record_kinds``)."""

    bad_records: int = 0
    # The events read, folded by the report's rules (recompprof._analysis.render.wording.counts_line states its counts).
    report: Report = dataclasses.field(default_factory=Report)
    bad_record_kinds: dict[str, int] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.stray_lines, "line(s) that are not TORCH_TRACE records"),
                (self.bad_payloads, "record(s) with a torn, altered or oversized payload"),
                (self.bad_records, "record(s) with fields of unexpected types"),
            )
            if n
        ]
        return "skipped " + ", ".join(parts) if parts else ""


def is_trace_dir(path: Path) -> bool:
    """Whether ``path`` is a TORCH_TRACE log or a directory holding some."""
    if path.is_file():
        return path.name.startswith(TRACE_PREFIX)
    return path.is_dir() and any(path.glob(f"{TRACE_PREFIX}*.log"))


def trace_files(path: Path) -> list[Path]:
    """The trace logs under ``path`` (or ``path`` itself); raises IngestError if there are none."""
    return find_files(
        path, f"{TRACE_PREFIX}*.log", "TORCH_TRACE logs", IngestError, recursive=False
    )


def _records(path: Path, stats: IngestStats) -> Iterator[TraceRecord]:
    """The records of one trace file; raises IngestError if it cannot be read."""
    try:
        handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
        year = time.localtime(path.stat().st_mtime).tm_year
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        yield from read_records(handle, year, stats)


class _Process:
    """One process's trace turned into events, in the order the session would emit them."""

    def __init__(self, rank: int, run_id: str, redact: bool) -> None:
        self.rank = rank
        self.run_id = run_id
        self.pid = 0
        self.torch_version = ""
        self.recompile_limit: int | None = None
        self.accumulated_limit: int | None = None
        self.strings: dict[int, str] = {}
        # files run as __main__ (the outermost frame of a compile's stack)
        self.scripts: set[str] = set()
        self.reasons: dict[CompileId, list[str]] = {}
        self.lists = _ReasonLists()
        # frames of frame ids, breaks held for their compile, reasons seen per frame (as live)
        self.assembler = CompileAssembler(redact)
        self.first_args: dict[
            CompileId, frames.GuardedArgs
        ] = {}  # compile -> what its guards say of its arguments
        # compile -> the guards it installed (traces whose compiles carry their guard tree)
        self.installed: dict[CompileId, list[str]] = {}
        self.events: list[Event] = []
        self.first_time: float | None = None
        self.last_time = 0.0
        self.steps_read = False  # some recompile carried the step recompprof handed torch
        self.generation: int | None = None  # restarts of compile ids seen (None: none yet)
        self.started: set[CompileId] = set()  # compiles started in this generation

    def note(self, record: TraceRecord) -> None:
        """Take what every record says of its process: pid, rank and time."""
        self.pid = self.pid or record.pid
        if isinstance(record.meta.get("rank"), int):
            self.rank = record.meta["rank"]
        self.first_time = record.time if self.first_time is None else self.first_time
        self.last_time = max(self.last_time, record.time)

    def start(self, key: CompileId) -> None:
        """A compile ``key`` starts: one already started means torch restarted compile ids (a reset)."""
        if key in self.started:
            self.add(self.assembler.flush())  # breaks held for compiles of the last generation
            self.assembler.forget_compiles()
            self.reasons = {k: v for k, v in self.reasons.items() if k == key}
            self.first_args = {k: v for k, v in self.first_args.items() if k == key}
            self.installed = {k: v for k, v in self.installed.items() if k == key}
            self.started.clear()
            self.generation = (self.generation or 0) + 1
        self.started.add(key)

    def add(self, events: Iterable[Event]) -> None:
        """Take events of the assembler, in the generation they belong to (as the live recorder does)."""
        for event in events:
            if self.generation is not None and isinstance(
                event, (Compile, GraphBreak, RecompileLimitHit)
            ):
                event = event.model_copy(update={"generation": self.generation})
            self.events.append(event)

    def name_frame_id(self, key: CompileId, top: dict[str, Any], file: str) -> None:
        """Name the frame id of compile ``key`` by the innermost entry ``top`` of the stack its compile started in."""
        line = int(top.get("line") or 0)
        self.assembler.name(
            key,
            Frame(
                name=str(top.get("name", "<unknown>")),
                file=file,
                line=line,
                code_file=file,
                code_line=line,
            ),
        )

    def graph_break(self, record: TraceRecord, reason: str) -> None:
        """A graph break (its reason artifact), held until its compile's metrics come, as live capture holds it."""
        key = record.key
        self.add(
            self.assembler.graph_break(
                reason,
                time=record.time,
                rank=self.rank,
                step=None,
                frame=self.known_frame(key),
                compile_id=str(key) if key else None,
            )
        )

    def interned(self, entry: dict[str, Any], missing: str | None) -> str:
        """The file a stack entry names, by the index of its ``str`` record or as written."""
        return self.strings.get(entry.get("filename", -1), str(entry.get("filename", missing)))

    def compile(self, record: TraceRecord, fields: Any, *, backward: bool) -> None:
        """The events of one compilation metrics record (``fields``), and the breaks held for it."""
        if not isinstance(fields, dict):
            return
        key = record.key or _compile_of(fields.get("compile_id"))
        m = read_record(
            TraceMetrics(
                fields
                if fields.get("compile_id") or not key
                else {**fields, "compile_id": str(key)}
            )
        )
        frame = self._frame(fields, key, m.backward)
        installed = self.installed.pop(key, None) if key is not None and not backward else None
        self._read_limits(fields)
        step = step_of(fields.get("recompile_user_contexts"))
        self.steps_read = self.steps_read or step is not None
        seen = Seen(
            time=_end_time(fields, m, record.time),
            rank=self.rank,
            step=step,
            frame=frame,
            texts=None if backward else ([] if key is None else self.reasons.pop(key, [])),
            held=None if backward or key is None else str(key),
            # The verdict needs no steps (recompprof._model.steady); a trace records no warm-up setting, so
            # torch's and recompprof's default of none is assumed.
            steady_state=True,
            limits={
                "recompile_limit": self.recompile_limit,
                "accumulated_recompile_limit": self.accumulated_limit,
            },
            # None where the trace holds no guard tree for the compile: not known, as before
            installed=None if installed is None else (lambda: installed),
        )
        self.add(self.assembler.compile(m, seen))

    def _read_limits(self, fields: dict[str, Any]) -> None:
        if self.recompile_limit is None:
            self.recompile_limit = config_limit(fields.get("dynamo_config"))
            self.accumulated_limit = config_limit(fields.get("dynamo_config"), accumulated=True)

    def _frame(self, fields: dict[str, Any], key: CompileId | None, backward: bool) -> Frame:
        if fields.get("co_name"):
            file, line = (
                str(fields.get("co_filename") or "<unknown>"),
                int(fields.get("co_firstlineno") or 0),
            )
            guarded = self.first_args.pop(key, None) if key is not None else None
            frame = frames.name_frame(
                str(fields["co_name"]),
                file,
                line,
                guarded,
                itertools.chain((file,), self.strings.values()),
                self.scripts,
            )
            if key is not None:
                self.assembler.name(key, frame)
            return frame
        # A limit hit's metrics name no function; its frame id still does.
        return self.known_frame(key) or Frame(
            name="<backward>" if backward else "<unknown>",
            file="<unknown>",
            line=0,
        )

    def known_frame(self, key: CompileId | None) -> Frame | None:
        """The frame a frame id was named with, if it was."""
        known = self.assembler.known(key) if key is not None else None
        return known[0] if known is not None else None

    def finish(self, host: str) -> list[Event]:
        """The process's events between its ``session_start`` and ``session_end``."""
        # breaks of compiles whose record never came (a crash mid-compile)
        self.add(self.assembler.flush())
        start = SessionStart(
            time=self.first_time or 0.0,
            rank=self.rank,
            run_id=self.run_id,
            host=host,
            pid=self.pid,
            versions={"torch": self.torch_version},
            mode="monitor",
            recompile_limit=self.recompile_limit,
            signals={"torch_trace": True, **({"step_in_trace": True} if self.steps_read else {})},
        )
        totals = Aggregates()  # the live session's totals, by the same fold
        for event in self.events:
            totals.add(event)
        end = SessionEnd(time=self.last_time, rank=self.rank, totals=totals.snapshot().totals())
        return [start, *self.events, end]


class _ReasonLists:
    """Reads ``recompile_reasons`` payloads, keeping each frame's last one and its texts: the N-th recompile
    of a frame repeats the N - 1 texts of the one before after its new one, so a trace holds O(N^2)
    texts, and each is parsed once (``recompile_reasons``). Bounded in characters kept, oldest frame
    dropped."""

    def __init__(self) -> None:
        self._last: dict[int | None, tuple[str, list[str]]] = {}
        self._held = 0  # characters of the payloads kept

    def read(self, frame_id: int | None, payload: str) -> list[str]:
        before = self._last.pop(frame_id, None)
        if before is not None:
            self._held -= len(before[0])
        texts = recompile_reasons(payload, before)
        if payload.startswith("[") and len(texts) > 1 and len(payload) <= MAX_REASON_CHARS:
            self._last[frame_id] = (payload, texts)
            self._held += len(payload)
            while self._held > MAX_REASON_CHARS:
                oldest = self._last.pop(next(iter(self._last)))
                self._held -= len(oldest[0])
        return texts


def _compile_of(value: Any) -> CompileId | None:
    """The compile (whatever its attempt) a metrics record's ``compile_id`` names, if it names a frame's."""
    parsed = CompileId.parse(value)
    return (
        dataclasses.replace(parsed, attempt=0)
        if parsed is not None and parsed.frame_id is not None
        else None
    )


def _end_time(fields: dict[str, Any], m: CompileRecord, fallback: float) -> float:
    """When the compile ended: its record's end, else its start plus its duration, else the record's time."""
    start, end = fields.get("start_time_us"), fields.get("end_time_us")
    if isinstance(end, (int, float)):
        return end * 1e-6
    return start * 1e-6 + m.duration if isinstance(start, (int, float)) else fallback


class RecordHandler(abc.ABC):
    """Reads one kind of torch trace record into its process's events, and counts the records of
    that kind it could not read (not the shape torch writes: skipped, reported as ``bad_records``)."""

    kind: ClassVar[str]  # the record kind: the first key of the record's metadata

    def __init__(self) -> None:
        self.failures = 0

    def feed(self, record: TraceRecord, process: _Process) -> None:
        try:
            self.read(record, process)
        except SHAPE_ERRORS:
            self.failures += 1

    @abc.abstractmethod
    def read(self, record: TraceRecord, process: _Process) -> None:
        """Take ``record`` into ``process``; raises one of SHAPE_ERRORS if it is not torch's shape."""


class _Strings(RecordHandler):
    """Interned file names: other records name a file by the index a ``str`` record gave it."""

    kind = "str"

    def read(self, record: TraceRecord, process: _Process) -> None:
        value = record.meta["str"]
        if isinstance(value, list) and len(value) == 2 and isinstance(value[1], int):
            process.strings[value[1]] = str(value[0])


class _DynamoStart(RecordHandler):
    """The stack a compile starts in: its innermost entry names the frame of the compile's frame id."""

    kind = "dynamo_start"

    def read(self, record: TraceRecord, process: _Process) -> None:
        stack = (record.meta.get("dynamo_start") or {}).get("stack") or []
        key = record.key
        if key is not None:
            process.start(key)
        if not stack or key is None or not isinstance(stack[-1], dict):
            return
        top = stack[-1]
        file = process.interned(top, "<unknown>")
        outer = stack[0] if isinstance(stack[0], dict) else {}
        if outer.get("name") == "<module>" and len(process.scripts) < MAX_SCRIPTS:
            process.scripts.add(process.interned(outer, None))
        if process.assembler.known(key) is None:
            process.name_frame_id(key, top, file)


class _Artifact(RecordHandler):
    """Named payloads: torch's version, a compile's recompile reasons, a graph break's reason."""

    kind = "artifact"

    def read(self, record: TraceRecord, process: _Process) -> None:
        name = (record.meta.get("artifact") or {}).get("name")
        payload, key = record.payload, record.key
        if payload is None:
            return
        if name == "torch_version" and payload:
            process.torch_version = torch_version(payload)
        elif name == "recompile_reasons" and key is not None:
            process.reasons[key] = process.lists.read(key.frame_id, payload)
        elif name == "dynamo_graph_break_reason":
            process.graph_break(record, payload)


class _GuardTree(RecordHandler):
    """A compile's guard tree: what its guards say of the frame's arguments (the class of ``self``), and
    the guards it installed (read by the explainer as live capture reads them from torch)."""

    kind = "dynamo_cpp_guards_str"

    def read(self, record: TraceRecord, process: _Process) -> None:
        key = record.key
        if key is not None and record.payload:
            process.first_args[key] = frames.guarded_args(record.payload)
            process.installed[key] = installed_guards(record.payload)
            for pending in (process.first_args, process.installed):
                if len(pending) > MAX_PENDING_GUARDS:  # compiles whose metrics never came
                    del pending[next(iter(pending))]


class _CompilationMetrics(RecordHandler):
    """A forward compile's metrics: its ``compile`` event (and limit hit), with the breaks held for it."""

    kind = "compilation_metrics"
    backward = False

    def read(self, record: TraceRecord, process: _Process) -> None:
        process.compile(record, record.meta[self.kind], backward=self.backward)


class _BackwardCompilationMetrics(_CompilationMetrics):
    """A lazily compiled backward's metrics: a backward ``compile`` event."""

    kind = "bwd_compilation_metrics"
    backward = True


def record_handlers() -> dict[str, RecordHandler]:
    """A new handler, with its own failure count, for each record kind ingest reads, by kind."""
    handlers: list[RecordHandler] = [
        _Strings(),
        _DynamoStart(),
        _Artifact(),
        _GuardTree(),
        _CompilationMetrics(),
        _BackwardCompilationMetrics(),
    ]
    return {handler.kind: handler for handler in handlers}


@dataclasses.dataclass
class TraceRun:
    """The events read from one TORCH_TRACE directory: one list per trace file (process)."""

    files: list[Path]
    events: list[list[Event]]
    stats: IngestStats


def trace_run_id(path: Path) -> str:
    """The run id of a trace folder or file: ``torch-trace-<name>``, the name as text (a folder named
    in bytes that are not UTF-8 gives ``\\xff``), from the absolute path (``.`` is named; a link keeps
    its own name)."""
    path = Path(os.path.abspath(path))
    return "torch-trace-" + as_text(path.name if path.is_dir() else path.stem)


def read_trace(path: Path, *, redact: bool = False, host: str = "unknown") -> TraceRun:
    """Read every trace log under ``path`` into events (one shared run id, one list per file)."""
    files = trace_files(path)
    stats = IngestStats()
    run_id = trace_run_id(path)
    handlers = record_handlers()
    per_file: list[list[Event]] = []
    for file in files:
        process = _Process(file_rank(file), run_id, redact)
        for record in _records(file, stats):
            process.note(record)
            handler = handlers.get(record.kind)
            if handler is not None:
                handler.feed(record, process)
        per_file.append(process.finish(host))
    stats.bad_record_kinds = {
        kind: handler.failures for kind, handler in handlers.items() if handler.failures
    }
    stats.bad_records = sum(stats.bad_record_kinds.values())
    stats.report = build_report(itertools.chain.from_iterable(per_file), detail=False)
    return TraceRun(files, per_file, stats)


def ingest(
    path: Path, out_dir: Path, *, redact: bool = False, overwrite: bool = False
) -> tuple[list[Path], IngestStats]:
    """Convert the trace logs under ``path`` into event logs in ``out_dir``; returns the files written."""
    run = read_trace(path, redact=redact)
    if not run.stats.records:
        raise IngestError(
            f"{path}: no TORCH_TRACE records could be read ({run.stats.describe() or 'the logs are empty'})"
        )
    existing = sorted(out_dir.glob(LOG_GLOB)) if out_dir.is_dir() else []
    if existing and not overwrite:
        raise IngestError(
            f"{out_dir} already holds event logs ({existing[0].name}...); pass --overwrite or choose another -o"
        )
    for old in existing:
        old.unlink()
    return _write_logs(run.events, out_dir), run.stats


def _write_logs(per_process: list[list[Event]], out_dir: Path) -> list[Path]:
    """One event log per process, named by its rank and pid; returns the files written."""
    written: list[Path] = []
    for index, events in enumerate(per_process):
        start = events[0]
        assert isinstance(start, SessionStart)
        target = log_path(out_dir, start.rank, start.pid or index)
        if target in written:  # two processes of one rank with unknown pids
            target = target.with_name(f"{target.stem}-{index}{target.suffix}")
        try:
            write_events(target, events)
        except OSError as exc:
            raise IngestError(f"cannot write {target}: {exc.strerror or exc}") from None
        written.append(target)
    return written
