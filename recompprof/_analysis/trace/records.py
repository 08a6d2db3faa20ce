"""The records of one ``TORCH_TRACE`` log, and the small JSON shapes torch writes inside them.

A trace file (``dedicated_log_torch_trace[_rank_<r>]_<random>.log``, one per process) is a sequence
of records: a glog-prefixed line ending in a JSON object (the metadata, keyed by the record's kind),
then, when the metadata has ``has_payload`` (the payload's MD5), the payload as tab-indented lines.
What fits no record (a stray line, a torn or altered payload) is counted, never raised.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from recompprof._model.compile_id import CompileId

TRACE_PREFIX = "dedicated_log_torch_trace"
_RANK_IN_NAME = re.compile(r"_rank_(\d+)_")
# "V1121 06:14:19.540000 9596 torch/_dynamo/utils.py:2350] {...}": level, month+day, clock, pid, source.
_GLOG = re.compile(r"^[A-Z](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +(\d+) [^\]]*\] (\{.*)$")
# Bounds on what one record may hold in memory; longer lines or payloads are skipped and counted.
MAX_LINE = 16 * 1024 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024


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


class TraceRecord(NamedTuple):
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

    __slots__ = ("match", "meta", "payload", "size")

    def __init__(self, match: re.Match[str], meta: dict[str, Any]) -> None:
        self.match = match
        self.meta = meta
        self.payload: str | None = None
        self.size = 0  # characters of the payload; past MAX_PAYLOAD the record is dropped

    def take(self, run: str | int) -> None:
        """Take the record's payload lines: a run as :func:`_blocks` gives it (one that could not be
        held, an int, drops the record). A line's characters count with its tab, not its newline."""
        if isinstance(run, int):
            self.size = MAX_PAYLOAD + 1
        else:  # each newline is followed by a line's tab: the payload is a character shorter than that
            self.payload = "\n".join(run[1:].split("\n\t"))  # faster than str.replace here
            self.size = len(self.payload) + 1

    def finish(self, year: int, counts: RecordCounts) -> TraceRecord | None:
        """The record, or None when its payload is oversized, torn or altered (counted)."""
        payload = self.payload
        digest = self.meta.get("has_payload")
        # The MD5 torch wrote tells a complete payload from one cut short by a crash.
        if self.size > MAX_PAYLOAD or (
            digest is not None and (payload is None or _md5(payload) != digest)
        ):
            counts.bad_payloads += 1
            return None
        counts.records += 1
        groups = self.match.groups()
        return TraceRecord(
            next(iter(self.meta)),
            self.meta,
            payload,
            int(groups[6]),
            _second(year, groups[:5]) + int(groups[5]) / 10 ** len(groups[5]),
        )


# records come in order: most share their second with the one before
@functools.lru_cache(maxsize=64)
def _second(year: int, clock: tuple[str, ...]) -> float:
    """The local time of a glog line's month, day, hours, minutes and seconds in ``year``."""
    month, day, hour, minute, second = map(int, clock)
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (OverflowError, ValueError):
        return 0.0


def _md5(payload: str) -> str:
    return hashlib.md5(payload.encode("utf-8"), usedforsecurity=False).hexdigest()


def read_records(handle: TextIO, year: int, counts: RecordCounts) -> Iterator[TraceRecord]:
    """Yield the records of one open trace file (written in ``year``); a line that fits no record is counted."""
    counts.files += 1
    pending: _Pending | None = None
    for block in _blocks(handle):
        if isinstance(block, int) or block.startswith("\t"):  # payload lines
            if pending is not None:
                pending.take(block)
            else:  # each line of a payload no metadata line began is a stray line
                counts.stray_lines += block if isinstance(block, int) else block.count("\n") + 1
            continue
        record = pending.finish(year, counts) if pending is not None else None
        if record is not None:
            yield record
        pending = _start(block, counts)
    record = pending.finish(year, counts) if pending is not None else None
    if record is not None:
        yield record


# Where a run of payload lines ends: a newline not followed by the next payload line's tab.
_RUN_END = re.compile(r"\n(?!\t)")
CHUNK = 256 * 1024  # characters read at a time (a larger buffer costs memory, no less CPU)


def _blocks(handle: TextIO) -> Iterator[str | int]:
    """The lines of ``handle`` without their newlines, but each run of payload lines (lines starting with
    a tab) as one string, its lines joined by newlines: a trace is mostly payload lines (the N-th
    recompile of a frame lists N reasons, one a line), and a run is found and cut at C speed.

    A line too long for any record (:data:`MAX_LINE` characters or more) is never held whole: outside a
    run it comes as a stray line (``"\\x00"``); a run holding one, or too large for any payload
    (:data:`MAX_PAYLOAD`), comes as its count of lines (an int), unheld."""
    buf, pos = "", 0
    while True:
        if pos >= len(buf):
            buf, pos = handle.read(CHUNK), 0
            if not buf:
                return
        if buf[pos] == "\t":
            run, buf, pos = _run(handle, buf, pos)
            yield run
            continue
        end = buf.find("\n", pos)
        if end >= 0:
            line, pos = buf[pos:end], end + 1
            yield line if len(line) < MAX_LINE else "\x00"
            continue
        line, buf, pos = _long_line(handle, buf[pos:])
        yield line


def _long_line(handle: TextIO, head: str) -> tuple[str, str, int]:
    """A line that goes past the buffer (``head``, its start), the buffer after it and its position there;
    one of MAX_LINE characters or more comes as ``"\\x00"``."""
    pieces, held = [head], len(head)
    while buf := handle.read(CHUNK):
        end = buf.find("\n")
        piece = buf if end < 0 else buf[:end]
        held += len(piece)
        if held < MAX_LINE:
            pieces.append(piece)
        else:  # not held
            pieces.clear()
        if end >= 0:
            return ("".join(pieces) if held < MAX_LINE else "\x00"), buf, end + 1
    return ("".join(pieces) if held < MAX_LINE else "\x00"), "", 0


def _run(handle: TextIO, buf: str, pos: int) -> tuple[str | int, str, int]:
    """The run of payload lines at ``buf[pos]``, the buffer after it and its position there."""
    held = _Held()
    while True:
        match = _RUN_END.search(buf, pos)
        if match is not None and match.end() < len(buf):  # a newline, then a line of another kind
            piece, pos = buf[pos : match.start()], match.end()
        else:  # the run goes on past the buffer, or ends with it
            piece, pos = buf[pos:], len(buf)
        held.add(piece)
        if pos < len(buf):
            break
        buf, pos = handle.read(CHUNK), 0
        if not buf or (buf[0] != "\t" and piece.endswith("\n")):
            break
    return held.run(piece), buf, pos


class _Held:
    """A run of payload lines as its pieces are read, each piece up to a buffer's end: held until the
    run is too large for any payload, then only its lines counted."""

    __slots__ = ("pieces", "size", "newlines", "over")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.size = 0  # characters read of the run
        self.newlines: int | None = None  # of the run, counted once it may be too large to hold
        self.over = False  # too large: no longer held

    def add(self, piece: str) -> None:
        self.size += len(piece)
        if self.newlines is None and self.size > MAX_PAYLOAD:  # the size is characters but newlines
            self.newlines = sum(p.count("\n") for p in self.pieces)
        if self.newlines is not None:
            self.newlines += piece.count("\n")
        if not self.over:
            self.pieces.append(piece)
            if self.newlines is not None and self.size - self.newlines > MAX_PAYLOAD:
                self.over = True  # past any payload's size
                self.pieces.clear()

    def run(self, last: str) -> str | int:
        """The run as one string; its count of lines where it is too large or holds a line too long."""
        if self.over and self.newlines is not None:
            return self.newlines + (0 if last.endswith("\n") else 1)
        if last.endswith("\n"):  # the run ended at its buffer's last newline (or the file's)
            self.pieces[-1] = last[:-1]
        run = "".join(self.pieces)
        if len(run) >= MAX_LINE and max(map(len, run.split("\n"))) >= MAX_LINE:
            return run.count("\n") + 1
        return run


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


def recompile_reasons(payload: str, before: tuple[str, list[str]] | None = None) -> list[str]:
    """The texts of a ``recompile_reasons`` artifact: torch writes one reason as a bare string and
    several as a JSON list, one item per line.

    ``before``: the payload of the frame's compile before and its texts. The N-th recompile of a frame
    lists the N entries before it, most recently used first, so its payload is most often that one's
    with new items in front: then only those are parsed, and the texts after them are ``before``'s own
    (the same objects, which the explainer compares by identity)."""
    if payload.startswith("["):
        if before is not None:
            texts = _listed_before(payload, *before)
            if texts is not None:
                return texts
        try:
            value = json.loads(payload)
        except ValueError:
            value = None
        if isinstance(value, list):
            return [str(v) for v in value]
    return [payload]


def _listed_before(payload: str, before: str, texts: list[str]) -> list[str] | None:
    """The texts of list ``payload`` where it is new items, a comma, then the items of list ``before``
    (whose texts are ``texts``) as written there; else None. After ``before``'s ``[`` a JSON parser
    expects a value, as it does after a comma in an array, and the part after it starts on a new line
    (outside any string: a JSON string holds no newline), so the whole parses as the head's items then
    ``before``'s."""
    rest = len(before) - 1
    if (
        rest <= 0
        or not before.startswith("[")
        or len(payload) <= rest + 2
        or payload[-rest - 1] != ","
        or before[1] != "\n"
        or not payload.endswith(before[1:])
    ):
        return None
    try:
        head = json.loads(payload[: -rest - 1] + "]")
    except ValueError:
        return None
    if not isinstance(head, list) or not head:
        return None
    return [str(v) for v in head] + texts


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
