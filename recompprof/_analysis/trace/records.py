"""The records of one ``TORCH_TRACE`` log, and the small JSON shapes torch writes inside them.

A trace file (``dedicated_log_torch_trace[_rank_<r>]_<random>.log``, one per process) is a sequence
of records: a glog-prefixed line ending in a JSON object (the metadata, keyed by the record's kind),
then, when the metadata has ``has_payload`` (the payload's MD5), the payload as tab-indented lines.
What fits no record (a stray line, a torn or altered payload) is counted, never raised.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from recompprof._model.compile_id import CompileId

TRACE_PREFIX = "dedicated_log_torch_trace"
_RANK_IN_NAME = re.compile(r"_rank_(\d+)_")
# "V1121 06:14:19.540000 9596 torch/_dynamo/utils.py:2350] {...}": level, month+day, clock, pid, source.
_GLOG = re.compile(r"^[A-Z](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +(\d+) [^\]]*\] (\{.*)$")
# Bounds on what one record may hold in memory; longer lines or payloads are skipped and counted.
MAX_LINE = 16 * 1024 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024
# Stands in for a payload line of MAX_LINE characters or more, which is never held whole.
_LONG_PAYLOAD_LINE = "\t\x00"


def file_rank(path: Path) -> int:
    """The rank in a trace file's name (``..._rank_3_...``); 0 when it names none (one process)."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else 0


@dataclasses.dataclass
class RecordCounts:
    """What reading trace files saw: files, records, and what fit no record."""

    files: int = 0
    records: int = 0
    stray_lines: int = 0
    bad_payloads: int = 0


@dataclasses.dataclass(frozen=True)
class TraceRecord:
    """One record: its kind (the metadata's first key), metadata, payload, and the pid and time of its line."""

    kind: str
    meta: dict[str, Any]
    payload: str | None
    pid: int
    time: float

    @property
    def key(self) -> CompileId | None:
        """The compile the record belongs to, if it names one."""
        return CompileId.of_record(self.meta)


class TraceMetrics:
    """A trace's compilation metrics, read as torch's live ``CompilationMetrics``: its fields as attributes.

    ``recompprof._torch.records.read_record`` reads a live record's attributes; a trace holds the same
    fields as a JSON object. A field the trace leaves out is missing, as on an older torch's record.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None


class _Pending:
    """A record whose metadata line was read, while its payload lines come."""

    def __init__(self, match: re.Match[str], meta: dict[str, Any]) -> None:
        self.match = match
        self.meta = meta
        self.lines: list[str] = []
        self.size = 0  # characters of the payload; past MAX_PAYLOAD the record is dropped

    def add(self, line: str) -> None:
        self.size = MAX_PAYLOAD + 1 if line is _LONG_PAYLOAD_LINE else self.size + len(line)
        if self.size <= MAX_PAYLOAD:
            self.lines.append(line[1:])

    def finish(self, year: int, counts: RecordCounts) -> TraceRecord | None:
        """The record, or None when its payload is oversized, torn or altered (counted)."""
        payload = "\n".join(self.lines) if self.lines else None
        digest = self.meta.get("has_payload")
        # The MD5 torch wrote tells a complete payload from one cut short by a crash.
        if self.size > MAX_PAYLOAD or (
            digest is not None and (payload is None or _md5(payload) != digest)
        ):
            counts.bad_payloads += 1
            return None
        counts.records += 1
        month, day, hour, minute, second, fraction, pid = (int(g) for g in self.match.groups()[:7])
        try:
            stamp = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
        except (OverflowError, ValueError):
            stamp = 0.0
        return TraceRecord(
            next(iter(self.meta)),
            self.meta,
            payload,
            pid,
            stamp + fraction / 10 ** len(self.match.group(6)),
        )


def _md5(payload: str) -> str:
    return hashlib.md5(payload.encode("utf-8"), usedforsecurity=False).hexdigest()


def read_records(handle: TextIO, year: int, counts: RecordCounts) -> Iterator[TraceRecord]:
    """Yield the records of one open trace file (written in ``year``); a line that fits no record is counted."""
    counts.files += 1
    pending: _Pending | None = None
    for line in _lines(handle):
        if pending is not None and line.startswith("\t"):
            pending.add(line)
            continue
        record = pending.finish(year, counts) if pending is not None else None
        if record is not None:
            yield record
        pending = _start(line, counts)
    record = pending.finish(year, counts) if pending is not None else None
    if record is not None:
        yield record


def _lines(handle: TextIO) -> Iterator[str]:
    """The lines of ``handle`` without their newlines; one too long for any record is never held whole:
    it comes as :data:`_LONG_PAYLOAD_LINE` if it is a payload line, else as a stray line."""
    while line := handle.readline(MAX_LINE):
        if len(line) == MAX_LINE and not line.endswith("\n"):
            while (rest := handle.readline(MAX_LINE)) and not rest.endswith("\n"):
                pass
            yield _LONG_PAYLOAD_LINE if line.startswith("\t") else "\x00"
            continue
        yield line.rstrip("\n")


def _start(line: str, counts: RecordCounts) -> _Pending | None:
    """The record that metadata ``line`` starts; None (counted as stray) if it is no record's first line."""
    match = _GLOG.match(line)
    meta = json_object(match.group(8)) if match else None
    if match is None or not meta:
        counts.stray_lines += 1
        return None
    return _Pending(match, meta)


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object; None if it is anything else."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: deeply nested JSON
        return None
    return value if isinstance(value, dict) else None


def recompile_reasons(payload: str) -> list[str]:
    """The texts of a ``recompile_reasons`` artifact: torch writes one reason as a bare string and
    several as a JSON list, one item per line."""
    if payload.startswith("["):
        try:
            value = json.loads(payload)
        except ValueError:
            value = None
        if isinstance(value, list):
            return [str(v) for v in value]
    return [payload]


# A guard of a ``dynamo_cpp_guards_str`` guard tree: "| | +- EQUALS_MATCH: G['cfg'].ls == 0.1  # source comment",
# and the shape-env guards torch prints after the tree, "+- LAMBDA_GUARD: G['cfg'].ls == 0.2  # ...".
_TREE_GUARD = re.compile(r"^[| ]*\+- [A-Z][A-Z_]{0,60}: (.+)$")
# Guards read from one compile's tree; a larger tree keeps its first ones.
MAX_INSTALLED_GUARDS = 65536


def installed_guards(payload: str) -> list[str]:
    """The guards a compile installed, from its ``dynamo_cpp_guards_str`` guard tree, as live capture reads
    them from torch (``recompprof._torch.guard_failures.installed_guards``): each guard's code without its
    source comment (``G['cfg'].ls == 0.2``); the tree's accessor lines (``GuardManager: source=...``) are none."""
    out: list[str] = []
    for line in payload.splitlines():
        match = _TREE_GUARD.match(line)
        if match is not None:
            out.append(match.group(1).split("#")[0].rstrip())
            if len(out) >= MAX_INSTALLED_GUARDS:
                break
    return out


def torch_version(payload: str) -> str:
    """The version a ``torch_version`` artifact names; empty if it names none."""
    return str((json_object(payload) or {}).get("pytorch_version", ""))


def config_limit(dynamo_config: Any, accumulated: bool = False) -> int | None:
    """The recompile limit (or, ``accumulated``, the accumulated one) a metrics record's ``dynamo_config`` sets."""
    config = json_object(dynamo_config) if isinstance(dynamo_config, str) else None
    names = (
        ("accumulated_recompile_limit", "accumulated_cache_size_limit")
        if accumulated
        else ("recompile_limit", "cache_size_limit")
    )
    value = (config or {}).get(names[0], (config or {}).get(names[1]))
    return value if isinstance(value, int) else None
