"""Read the structured logs ``TORCH_TRACE`` writes into recompprof events.

A trace file (``dedicated_log_torch_trace[_rank_<r>]_<random>.log``, one per process) is a sequence
of records: a glog-prefixed line ending in a JSON object (the metadata, keyed by the record's kind),
then, when the metadata has ``has_payload`` (the payload's MD5), the payload as tab-indented lines.
We read four kinds: ``compilation_metrics`` (one per forward compile, ``bwd_...`` for a lazily
compiled backward) becomes a ``compile`` event with its exclusive phases; the ``recompile_reasons``
artifact gives that compile's guard-failure reasons; ``dynamo_graph_break_reason`` becomes a
``graph_break``; a metrics record failing with "recompile limit exceeded" also yields a
``recompile_limit_hit``. ``dynamo_start`` and ``str`` records name the frame of a compile id, which
torch leaves out of the metrics of a limit hit. A trace carries training steps only where recompprof
was attached (it hands torch the step for each compile record, see ``recompprof._torch.steps``): those
forward compiles, their graph breaks and limit hits get their step; backward compiles have none.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from recompprof._analysis import trace_frames
from recompprof._analysis.fold import build_report
from recompprof._analysis.report import Report
from recompprof._eventlog.reader import LOG_GLOB, find_files, log_path, write_events
from recompprof._model.aggregates import Aggregates
from recompprof._model.compiles import (
    CompileContext,
    Correlation,
    ReasonExplainer,
    compile_events,
    graph_break_event,
    in_order,
    reason_texts,
)
from recompprof._model.errors import RecompprofError
from recompprof._model.events import (
    Event,
    Frame,
    SessionEnd,
    SessionStart,
)
from recompprof._torch.records import read_record
from recompprof._torch.steps import step_of

TRACE_PREFIX = "dedicated_log_torch_trace"
# "V1121 06:14:19.540000 9596 torch/_dynamo/utils.py:2350] {...}": level, month+day, clock, pid, source.
_GLOG = re.compile(r"^[A-Z](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +(\d+) [^\]]*\] (\{.*)$")
_RANK_IN_NAME = re.compile(r"_rank_(\d+)_")
# Bounds on what one record may hold in memory; longer lines or payloads are skipped and counted.
MAX_LINE = 16 * 1024 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024
MAX_PENDING_GUARDS = 4096  # guard trees held for a compile's metrics record


class IngestError(RecompprofError):
    """The path holds no readable TORCH_TRACE logs; the message says which path and why."""


@dataclasses.dataclass
class IngestStats:
    """What reading traces skipped: lines that are not records, and payloads torn or altered."""

    files: int = 0
    records: int = 0
    stray_lines: int = 0
    bad_payloads: int = 0
    bad_records: int = 0
    # The events read, folded by the report's rules (recompprof._analysis.text.counts_line states its counts).
    report: Report = dataclasses.field(default_factory=Report)

    def describe(self) -> str:
        parts = [f"{n} {what}" for n, what in (
            (self.stray_lines, "line(s) that are not TORCH_TRACE records"),
            (self.bad_payloads, "record(s) with a torn, altered or oversized payload"),
            (self.bad_records, "record(s) with fields of unexpected types"),
        ) if n]
        return "skipped " + ", ".join(parts) if parts else ""


@dataclasses.dataclass
class _Record:
    kind: str
    meta: dict[str, Any]
    payload: str | None
    pid: int
    time: float


def is_trace_dir(path: Path) -> bool:
    """Whether ``path`` is a TORCH_TRACE log or a directory holding some."""
    if path.is_file():
        return path.name.startswith(TRACE_PREFIX)
    return path.is_dir() and any(path.glob(f"{TRACE_PREFIX}*.log"))


def trace_files(path: Path) -> list[Path]:
    """The trace logs under ``path`` (or ``path`` itself); raises IngestError if there are none."""
    return find_files(path, f"{TRACE_PREFIX}*.log", "TORCH_TRACE logs", IngestError, recursive=False)


def read_records(path: Path, stats: IngestStats) -> Iterator[_Record]:
    """Yield the records of one trace file; a line that fits no record is counted, not raised."""
    try:
        handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
        year = time.localtime(path.stat().st_mtime).tm_year
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from None
    stats.files += 1
    current: tuple[re.Match[str], dict[str, Any]] | None = None
    payload: list[str] = []
    size = 0  # characters of the current payload; past MAX_PAYLOAD the record is dropped

    def finish() -> _Record | None:
        if current is None:
            return None
        if size > MAX_PAYLOAD:
            stats.bad_payloads += 1
            return None
        return _finish(current, payload, year, stats)

    with handle:
        while line := handle.readline(MAX_LINE):
            if len(line) == MAX_LINE and not line.endswith("\n"):
                # Too long for any record we read: skip it without holding it, and the record it belongs to.
                while (rest := handle.readline(MAX_LINE)) and not rest.endswith("\n"):
                    pass
                if current is not None and line.startswith("\t"):
                    size = MAX_PAYLOAD + 1
                    continue
                line = "\x00"  # a stray line
            line = line.rstrip("\n")
            if line.startswith("\t") and current is not None:
                size += len(line)
                if size <= MAX_PAYLOAD:
                    payload.append(line[1:])
                continue
            record = finish()
            if record is not None:
                yield record
            current, payload, size = None, [], 0
            match = _GLOG.match(line)
            meta = _json_object(match.group(8)) if match else None
            if match is None or meta is None or not meta:
                stats.stray_lines += 1
                continue
            current = (match, meta)
        record = finish()
        if record is not None:
            yield record


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: deeply nested JSON
        return None
    return value if isinstance(value, dict) else None


def _finish(current: tuple[re.Match[str], dict[str, Any]], lines: list[str], year: int, stats: IngestStats) -> _Record | None:
    match, meta = current
    payload = "\n".join(lines) if lines else None
    digest = meta.get("has_payload")
    # The MD5 torch wrote tells a complete payload from one cut short by a crash.
    if digest is not None and (payload is None or hashlib.md5(payload.encode("utf-8"), usedforsecurity=False).hexdigest() != digest):
        stats.bad_payloads += 1
        return None
    stats.records += 1
    month, day, hour, minute, second, fraction, pid = (int(g) for g in match.groups()[:7])
    try:
        stamp = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (OverflowError, ValueError):
        stamp = 0.0
    return _Record(next(iter(meta)), meta, payload, pid, stamp + fraction / 10 ** len(match.group(6)))


class _Converter:
    """Turns one process's trace records into events, in the order the session would emit them."""

    def __init__(self, path: Path, run_id: str, redact: bool) -> None:
        match = _RANK_IN_NAME.search(path.name)
        self.rank = int(match.group(1)) if match else 0
        self.run_id = run_id
        self.redact = redact
        self.pid = 0
        self.torch_version = ""
        self.recompile_limit: int | None = None
        self.strings: dict[int, str] = {}
        self.scripts: set[str] = set()  # files run as __main__ (the outermost frame of a compile's stack)
        self.reasons: dict[tuple[int, int], list[str]] = {}
        self.correlation = Correlation()  # frames of frame ids, breaks held for their compile (as live)
        self.first_args: dict[tuple[int, int], trace_frames.GuardedArgs] = {}  # compile -> what its guards say of its arguments
        self.accumulated_limit: int | None = None
        self.events: list[Event] = []
        self.first_time: float | None = None
        self.last_time = 0.0
        self.explainer = ReasonExplainer(redact)
        self.steps_read = False  # some recompile carried the step recompprof handed torch

    def feed(self, record: _Record) -> None:
        self.pid = self.pid or record.pid
        if isinstance(record.meta.get("rank"), int):
            self.rank = record.meta["rank"]
        self.first_time = record.time if self.first_time is None else self.first_time
        self.last_time = max(self.last_time, record.time)
        handler = getattr(self, "_on_" + record.kind, None)
        if handler is not None:
            handler(record)

    def _key(self, record: _Record) -> tuple[int, int] | None:
        frame_id, compile_id = record.meta.get("frame_id"), record.meta.get("frame_compile_id")
        return (frame_id, compile_id) if isinstance(frame_id, int) and isinstance(compile_id, int) else None

    def _on_str(self, record: _Record) -> None:
        value = record.meta["str"]
        if isinstance(value, list) and len(value) == 2 and isinstance(value[1], int):
            self.strings[value[1]] = str(value[0])

    def _on_dynamo_start(self, record: _Record) -> None:
        stack = (record.meta.get("dynamo_start") or {}).get("stack") or []
        key = self._key(record)
        if stack and key is not None and isinstance(stack[-1], dict):
            top = stack[-1]
            file = self.strings.get(top.get("filename", -1), str(top.get("filename", "<unknown>")))
            outer = stack[0] if isinstance(stack[0], dict) else {}
            if outer.get("name") == "<module>" and len(self.scripts) < 64:
                self.scripts.add(self.strings.get(outer.get("filename", -1), str(outer.get("filename"))))
            if self.correlation.frame_of_frame_id(str(key[0])) is None:
                line = int(top.get("line") or 0)
                self.correlation.name_frame_id(str(key[0]), Frame(name=str(top.get("name", "<unknown>")), file=file,
                                                                  line=line, code_file=file, code_line=line))

    def _on_artifact(self, record: _Record) -> None:
        name = (record.meta.get("artifact") or {}).get("name")
        key = self._key(record)
        if name == "torch_version" and record.payload:
            version = _json_object(record.payload) or {}
            self.torch_version = str(version.get("pytorch_version", ""))
        elif name == "recompile_reasons" and key is not None and record.payload is not None:
            self.reasons[key] = _reason_texts(record.payload)
        elif name == "dynamo_graph_break_reason" and record.payload is not None:
            event = graph_break_event(record.payload, time=record.time, rank=self.rank, step=None,
                                      frame=self._known_frame(key), compile_id=f"{key[0]}/{key[1]}" if key else None,
                                      redact=self.redact)
            self.events.extend(self.correlation.add_break(event))

    def _on_compilation_metrics(self, record: _Record) -> None:
        self._compile(record, record.meta["compilation_metrics"], backward=False)

    def _on_bwd_compilation_metrics(self, record: _Record) -> None:
        self._compile(record, record.meta["bwd_compilation_metrics"], backward=True)

    def _compile(self, record: _Record, fields: Any, *, backward: bool) -> None:
        if not isinstance(fields, dict):
            return
        raw = SimpleNamespace(**fields)
        key = self._key(record) or _split_compile_id(fields.get("compile_id"))
        if not fields.get("compile_id") and key:
            raw.compile_id = f"{key[0]}/{key[1]}"
        m = read_record(raw)
        frame = self._frame(fields, key)
        if self.recompile_limit is None:
            self.recompile_limit = _config_limit(fields.get("dynamo_config"))
            self.accumulated_limit = _config_limit(fields.get("dynamo_config"), accumulated=True)
        texts = reason_texts(m, [] if key is None else self.reasons.pop(key, [])) if not backward else []
        start, end = fields.get("start_time_us"), fields.get("end_time_us")
        stamp = end * 1e-6 if isinstance(end, (int, float)) else (start * 1e-6 + m.duration if isinstance(start, (int, float)) else record.time)
        breaks = [] if backward or key is None else self.correlation.compiled(f"{key[0]}/{key[1]}", frame)
        step = step_of(fields.get("recompile_user_contexts"))
        if step is not None:
            self.steps_read = True
            breaks = [b.model_copy(update={"step": step}) for b in breaks]
        event, hit = compile_events(m, CompileContext(
            time=stamp, rank=self.rank, step=step, frame=frame, explained=self.explainer.explain(frame, texts),
            graph_breaks=sum(b.count for b in breaks), redact=self.redact, steady_state=False,
            limits={"recompile_limit": self.recompile_limit, "accumulated_recompile_limit": self.accumulated_limit},
        ))
        self.events.extend(in_order(event, breaks, hit))

    def _on_dynamo_cpp_guards_str(self, record: _Record) -> None:
        key = self._key(record)
        if key is not None and record.payload:
            self.first_args[key] = trace_frames.guarded_args(record.payload)
            if len(self.first_args) > MAX_PENDING_GUARDS:  # compiles whose metrics never came
                del self.first_args[next(iter(self.first_args))]

    def _frame(self, fields: dict[str, Any], key: tuple[int, int] | None) -> Frame:
        if fields.get("co_name"):
            file, line = str(fields.get("co_filename") or "<unknown>"), int(fields.get("co_firstlineno") or 0)
            guarded = self.first_args.pop(key, None) if key is not None else None
            frame = trace_frames.name_frame(str(fields["co_name"]), file, line, guarded,
                                            itertools.chain((file,), self.strings.values()), self.scripts)
            if key is not None:
                self.correlation.name_frame_id(str(key[0]), frame)
            return frame
        # A limit hit's metrics name no function; its frame id still does.
        return self._known_frame(key) or Frame(name="<backward>" if fields.get("is_forward") is False else "<unknown>", file="<unknown>", line=0)

    def _known_frame(self, key: tuple[int, int] | None) -> Frame | None:
        known = self.correlation.frame_of_frame_id(str(key[0])) if key is not None else None
        return known[0] if known is not None else None

    def finish(self, host: str) -> list[Event]:
        self.events.extend(self.correlation.flush())  # breaks of compiles whose record never came (a crash mid-compile)
        start = SessionStart(
            time=self.first_time or 0.0, rank=self.rank, run_id=self.run_id, host=host, pid=self.pid,
            versions={"torch": self.torch_version}, mode="monitor", recompile_limit=self.recompile_limit,
            signals={"torch_trace": True, **({"step_in_trace": True} if self.steps_read else {})},
        )
        totals = Aggregates()  # the live session's totals, by the same fold
        for event in self.events:
            totals.add(event)
        end = SessionEnd(time=self.last_time, rank=self.rank, totals=totals.snapshot().totals())
        return [start, *self.events, end]


def _reason_texts(payload: str) -> list[str]:
    # torch writes one reason as a bare string and several as a JSON list, one item per line.
    if payload.startswith("["):
        try:
            value = json.loads(payload)
        except ValueError:
            value = None
        if isinstance(value, list):
            return [str(v) for v in value]
    return [payload]


def _split_compile_id(value: Any) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)/(\d+)", str(value or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def _config_limit(dynamo_config: Any, accumulated: bool = False) -> int | None:
    config = _json_object(dynamo_config) if isinstance(dynamo_config, str) else None
    names = ("accumulated_recompile_limit", "accumulated_cache_size_limit") if accumulated else ("recompile_limit", "cache_size_limit")
    value = (config or {}).get(names[0], (config or {}).get(names[1]))
    return value if isinstance(value, int) else None


@dataclasses.dataclass
class TraceRun:
    """The events read from one TORCH_TRACE directory: one list per trace file (process)."""

    files: list[Path]
    events: list[list[Event]]
    stats: IngestStats


def read_trace(path: Path, *, redact: bool = False, host: str = "unknown") -> TraceRun:
    """Read every trace log under ``path`` into events (one shared run id, one list per file)."""
    files = trace_files(path)
    stats = IngestStats()
    run_id = "torch-trace-" + (path.name if path.is_dir() else path.stem)
    per_file: list[list[Event]] = []
    for file in files:
        converter = _Converter(file, run_id, redact)
        for record in read_records(file, stats):
            try:
                converter.feed(record)
            except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
                stats.bad_records += 1  # valid JSON, but not the shapes torch writes (e.g. a hand-edited trace)
        per_file.append(converter.finish(host))
    stats.report = build_report(itertools.chain.from_iterable(per_file), detail=False)
    return TraceRun(files, per_file, stats)


def ingest(path: Path, out_dir: Path, *, redact: bool = False, overwrite: bool = False) -> tuple[list[Path], IngestStats]:
    """Convert the trace logs under ``path`` into event logs in ``out_dir``; returns the files written."""
    run = read_trace(path, redact=redact)
    if not run.stats.records:
        raise IngestError(f"{path}: no TORCH_TRACE records could be read ({run.stats.describe() or 'the logs are empty'})")
    existing = sorted(out_dir.glob(LOG_GLOB)) if out_dir.is_dir() else []
    if existing and not overwrite:
        raise IngestError(f"{out_dir} already holds event logs ({existing[0].name}...); pass --overwrite or choose another -o")
    for old in existing:
        old.unlink()
    written: list[Path] = []
    for index, events in enumerate(run.events):
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
    return written, run.stats
