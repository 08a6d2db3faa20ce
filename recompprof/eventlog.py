"""The durable event log: one JSONL file per rank in a run directory, and its reader.

Each event is written and flushed as one line, so a crash loses at most the line being written; the
reader skips a torn last line (and any corrupt or foreign line), and says how many it skipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from recompprof.events import EVENT_ADAPTER, SUPPORTED_SCHEMA_VERSIONS, Event, to_json

SUFFIX = ".jsonl"


def log_path(run_dir: Path, rank: int, pid: int) -> Path:
    """``<run_dir>/rank<rank>-<pid>.jsonl``: one file per rank and process (restarts don't clobber)."""
    return run_dir / f"rank{rank:05d}-{pid}{SUFFIX}"


class EventLogWriter:
    """Appends events to one file; every write is flushed to the OS before returning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the session
        self.bytes_written = 0

    def write(self, event: Event) -> None:
        if self._file is None:
            return
        line = to_json(event) + "\n"
        self._file.write(line)
        self._file.flush()
        self.bytes_written += len(line)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclasses.dataclass
class ReadStats:
    """What a read skipped and why; ``files`` counts the event logs read."""

    files: int = 0
    lines: int = 0
    torn_tail: int = 0
    corrupt: int = 0
    unknown_schema: int = 0
    unknown_kind: int = 0
    foreign_files: list[str] = dataclasses.field(default_factory=list)

    @property
    def skipped(self) -> int:
        return self.torn_tail + self.corrupt + self.unknown_schema + self.unknown_kind

    def describe(self) -> str:
        parts = [f"{n} {what}" for n, what in (
            (self.torn_tail, "torn last line(s)"),
            (self.corrupt, "corrupt line(s)"),
            (self.unknown_schema, "line(s) with an unknown schema_version"),
            (self.unknown_kind, "line(s) of an unknown kind"),
        ) if n]
        return "skipped " + ", ".join(parts) if parts else ""


class EventLogError(Exception):
    """A path cannot be read as a run directory or event log; the message says which and why."""


def read_file(path: Path, stats: ReadStats | None = None) -> Iterator[Event]:
    """Yield the events of one log file, skipping bad lines (counted in ``stats``)."""
    stats = stats if stats is not None else ReadStats()
    stats.files += 1
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; binary so bad UTF-8 is a corrupt line, not a crash
    except OSError as exc:
        raise EventLogError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        pending: bytes | None = None
        for raw in handle:
            if pending is not None:
                yield from _parse(pending, stats, last=False)
            pending = raw
        if pending is not None:
            yield from _parse(pending, stats, last=True)


def _parse(raw: bytes, stats: ReadStats, *, last: bool) -> Iterator[Event]:
    stats.lines += 1
    torn = last and not raw.endswith(b"\n")
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError):
        if torn:
            stats.torn_tail += 1
        else:
            stats.corrupt += 1
        return
    if data.get("schema_version") not in SUPPORTED_SCHEMA_VERSIONS:
        stats.unknown_schema += 1
        return
    try:
        yield EVENT_ADAPTER.validate_python(data)
    except ValidationError:
        if data.get("kind") not in {"session_start", "compile", "guard_failure", "graph_break", "recompile_limit_hit", "session_end"}:
            stats.unknown_kind += 1
        else:
            stats.corrupt += 1


def run_files(path: Path) -> list[Path]:
    """The event logs of a run directory (or the file itself); raises EventLogError if there are none."""
    if not path.exists():
        raise EventLogError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    if not os.access(path, os.R_OK | os.X_OK):
        raise EventLogError(f"{path}: directory is not readable")
    files = sorted(p for p in path.rglob(f"*{SUFFIX}") if p.is_file())
    if not files:
        raise EventLogError(f"{path}: no recompprof event logs (*{SUFFIX}) found")
    return files


def read_run(path: Path, stats: ReadStats | None = None) -> Iterator[Event]:
    """Yield every event of every rank's log under ``path``, file by file."""
    stats = stats if stats is not None else ReadStats()
    for file in run_files(path):
        yield from read_file(file, stats)


def write_events(path: Path, events: Iterable[Event]) -> None:
    """Write ``events`` as a complete log (used by ingest and tests)."""
    writer = EventLogWriter(path)
    try:
        for event in events:
            writer.write(event)
    finally:
        writer.close()
