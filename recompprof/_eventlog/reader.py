"""The durable event log's reader: the events of a run directory's logs, and what it skipped.

The reader skips a torn last line (the writer's crash loses at most the line being written) and any
corrupt or foreign line, and says how many it skipped (:class:`ReadStats`).

The reader never trusts a number it cannot compare: ``NaN`` and infinities (``Infinity``, ``1e999``)
make their line a corrupt line, in every numeric field of every event.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from recompprof._errors import RecompprofError
from recompprof._eventlog.format import SUFFIX
from recompprof._eventlog.lines import BLOCK, LineSplitter
from recompprof._model.events import (
    EVENT_ADAPTER,
    KINDS,
    SUPPORTED_SCHEMA_VERSIONS,
    Event,
    Frame,
    Reason,
)


@dataclasses.dataclass
class ReadStats:
    """What a read skipped and why; ``files`` counts the event logs read."""

    files: int = 0
    lines: int = 0
    torn_tail: int = 0
    corrupt: int = 0
    unknown_schema: int = 0
    unknown_kind: int = 0

    @property
    def skipped(self) -> int:
        return self.torn_tail + self.corrupt + self.unknown_schema + self.unknown_kind

    def add(self, other: ReadStats) -> None:
        """Count ``other``'s lines and files here too."""
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def describe(self) -> str:
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.torn_tail, "torn last line(s)"),
                (self.corrupt, "corrupt line(s)"),
                (self.unknown_schema, "line(s) with an unknown schema_version"),
                (self.unknown_kind, "line(s) of an unknown kind"),
            )
            if n
        ]
        return "skipped " + ", ".join(parts) if parts else ""


class EventLogError(RecompprofError):
    """A path cannot be read as a run directory or event log; the message says which and why."""


class UnreadableLog(EventLogError):
    """A file named like an event log cannot be read as one: ``why`` says what it is, or the OS error."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"cannot read {path}: {why}")
        self.path = path
        self.why = why


_NOT_REGULAR = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def open_log(path: Path) -> int:
    """A read-only descriptor of the regular file at ``path``; :class:`UnreadableLog` for anything else.

    Opened non-blocking, so a FIFO named like a log is refused at once instead of waiting for a writer.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if path.is_symlink() and not path.exists():
            raise UnreadableLog(path, "a dangling symlink, not a regular file") from None
        try:
            kind = _NOT_REGULAR.get(stat.S_IFMT(path.stat().st_mode))
        except OSError:
            kind = None
        raise UnreadableLog(
            path, f"{kind}, not a regular file" if kind else str(exc.strerror or exc)
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnreadableLog(
            path, f"{_NOT_REGULAR.get(stat.S_IFMT(mode), 'a special file')}, not a regular file"
        )
    return fd


def read_file(path: Path, stats: ReadStats | None = None) -> Iterator[Event]:
    """Yield the events of one log file, skipping bad lines (counted in ``stats``)."""
    stats = stats if stats is not None else ReadStats()
    interner = Interner()
    for lines, torn in _blocks(path, stats):
        stats.lines += len(lines)
        for raw in lines:
            yield from parse_line(raw, stats, interner, torn=torn)


def scan_file(path: Path, stats: ReadStats | None = None) -> Iterator[Event]:
    """Like :func:`read_file`, for a fold that only reads fields: events come as read-only views.

    A line msgspec decodes becomes a view (see :mod:`recompprof._eventlog.fastread`) with the values the model
    would hold; any other line takes :func:`read_file`'s path, so what is kept, skipped and counted
    is the same. Without msgspec this is :func:`read_file`.
    """
    from recompprof._eventlog.fastread import DECODER  # here: the live writer never needs msgspec

    if DECODER is None:
        yield from read_file(path, stats)
        return
    stats = stats if stats is not None else ReadStats()
    interner = Interner()
    decode = DECODER.decode
    for lines, torn in _blocks(path, stats):
        stats.lines += len(lines)
        for raw in lines:
            try:
                if not raw.isascii():
                    raw.decode()  # msgspec does not check the UTF-8 of what it skips (unknown fields)
                event = decode(raw)  # a view only of a supported schema_version (fastread)
            except Exception:  # noqa: BLE001 - whatever msgspec refuses, however it says so, gets the verdict below
                yield from parse_line(
                    raw, stats, interner, torn=torn
                )  # the validated reader's verdict, and its count
                continue
            yield event


def first_event(path: Path, limit: int = 1 << 16) -> Event | None:
    """The event on a log's first line, read alone (at most ``limit`` bytes: a ``session_start`` is
    a few hundred); None when that line is not one whole, readable event. Raises
    :class:`UnreadableLog` as reading the whole log would."""
    fd = open_log(path)
    try:
        head = os.read(fd, limit)
    finally:
        os.close(fd)
    line, newline, _ = head.partition(b"\n")
    if not newline:
        return None
    return next(parse_line(line, ReadStats(), Interner(), torn=False), None)


def _blocks(path: Path, stats: ReadStats) -> Iterator[tuple[list[bytes], bool]]:
    """The lines of ``path`` (:class:`~recompprof._eventlog.lines.LineSplitter`), a block at a time, and
    whether the block is the file's last line, which had no newline (torn, if it does not parse)."""
    stats.files += 1
    handle = open(open_log(path), "rb")  # noqa: SIM115 - closed below; binary so bad UTF-8 is a corrupt line, not a crash
    splitter = LineSplitter()
    with handle:
        while chunk := handle.read(BLOCK):
            if lines := splitter.feed(chunk):
                yield lines, False
        last = splitter.end()
        if last is not None:
            yield [last[0]], last[1]


class Interner:
    """Validated frames and reasons by value, so each distinct one is validated once per read.

    A compile line repeats its frame and (per cache entry) the same reason texts again and again;
    validating those nested models dominated reading. Models are frozen, so events share them safely.
    Only values of exactly the types the model holds are looked up, so a cached model is what
    validating that dict would have produced; anything else is left to the full validation.
    """

    MAX = 16_384

    def __init__(self) -> None:
        self._frames: dict[tuple[object, ...], Frame] = {}
        self._reasons: dict[tuple[object, ...], Reason] = {}

    def event(self, data: dict[str, Any]) -> dict[str, Any]:
        frame = data.get("frame")
        if type(frame) is dict:
            data["frame"] = self._frame(frame)
        reasons = data.get("reasons")
        if type(reasons) is list:
            data["reasons"] = [self._reason(r) if type(r) is dict else r for r in reasons]
        last = data.get("last_reason")
        if type(last) is dict:
            data["last_reason"] = self._reason(last)
        return data

    def _frame(self, raw: dict[str, Any]) -> Frame | dict[str, Any]:
        name, file, line = raw.get("name"), raw.get("file"), raw.get("line")
        code_file, code_line, owner = raw.get("code_file"), raw.get("code_line"), raw.get("owner")
        if (
            type(name) is not str
            or type(file) is not str
            or type(line) is not int
            or (code_file is not None and type(code_file) is not str)
            or (code_line is not None and type(code_line) is not int)
            or (owner is not None and type(owner) is not str)
        ):
            return raw
        key = (name, file, line, code_file, code_line, owner)
        found = self._frames.get(key)
        if found is None:
            found = self._remember(self._frames, key, Frame, raw)
        return raw if found is None else found

    def _reason(self, raw: dict[str, Any]) -> Reason | dict[str, Any]:
        text, category, subject, explains, entry, parameter = (
            raw.get(k)
            for k in ("text", "category", "subject", "explains_change", "entry", "parameter")
        )
        if (
            type(text) is not str
            or type(category) is not str
            or type(subject) is not str
            or type(explains) is not bool
            or (entry is not None and type(entry) is not str)
            or (parameter is not None and type(parameter) is not str)
        ):
            return raw
        # every field is in the key: two reasons that differ in any one are two models
        key = (text, category, subject, explains, entry, "entry" in raw, parameter)
        found = self._reasons.get(key)
        if found is None:
            found = self._remember(self._reasons, key, Reason, raw)
        return raw if found is None else found

    def _remember(
        self, cache: dict[Any, Any], key: object, model: type[Frame | Reason], raw: dict[str, Any]
    ) -> Any:
        try:
            value = model.model_validate(raw)
        except ValidationError:
            return None  # the event's own validation reports it
        if len(cache) >= self.MAX:
            cache.clear()
        cache[key] = value
        return value


def _loads(raw: bytes) -> Any:
    try:
        return from_json(raw)  # several times faster than json.loads on these lines
    except (
        ValueError
    ):  # what it refuses (lone surrogates, a BOM, bad JSON) gets the standard parser's verdict
        return json.loads(raw)


def parse_line(raw: bytes, stats: ReadStats, interner: Interner, *, torn: bool) -> Iterator[Event]:
    """The event of one line, or nothing, and why in ``stats`` (``torn``: a last line without newline).

    Lines are counted by the caller, a block at a time.
    """
    try:
        data = _loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: deeply nested JSON
        if torn:
            stats.torn_tail += 1
        else:
            stats.corrupt += 1
        return
    try:
        supported = data.get("schema_version") in SUPPORTED_SCHEMA_VERSIONS
    except TypeError:  # an unhashable value (a list, an object) is no version we know
        supported = False
    if not supported:
        stats.unknown_schema += 1
        return
    try:
        event = EVENT_ADAPTER.validate_python(interner.event(data))
    except ValidationError:
        if data.get("kind") not in KINDS:
            stats.unknown_kind += 1
        else:
            stats.corrupt += 1
        return
    if _finite(event):
        yield event
    else:
        stats.corrupt += 1


_FloatFields = tuple[
    tuple[str, Any], ...
]  # (name, False: a float, True: a mapping to floats, or a nested model's)


def _float_fields(model: type[BaseModel]) -> _FloatFields:
    """The fields of ``model`` that hold floats, each with how: a float (False), a mapping to floats (True),
    or an optional nested model's own float fields.

    Derived from the model, so a float field added later is checked too; a float in a shape this
    does not read (a list, a mapping to models) fails the import instead of going unchecked.
    """
    fields: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        annotation, args = info.annotation, get_args(info.annotation)
        if annotation is float or (
            get_origin(annotation) in (Union, types.UnionType)
            and float in args
            and not any(_holds_float(a) for a in args if a is not float)
        ):
            fields.append((name, False))
        elif get_origin(annotation) is dict and args[1] is float and not _holds_float(args[0]):
            fields.append((name, True))
        elif (nested := _nested_model(annotation)) is not None and _holds_float(nested):
            fields.append((name, _float_fields(nested)))
        elif _holds_float(annotation):
            raise TypeError(
                f"{model.__name__}.{name}: the reader cannot check this field's floats are finite; extend it"
            )
    return tuple(fields)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a nested-model field, optional or not (``Running | None``)."""
    args = (
        [a for a in get_args(annotation) if a is not type(None)]
        if get_origin(annotation) in (Union, types.UnionType)
        else [annotation]
    )
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return None


def _holds_float(annotation: Any) -> bool:
    if annotation is float:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return any(_holds_float(info.annotation) for info in annotation.model_fields.values())
    return any(_holds_float(arg) for arg in get_args(annotation))


_FLOAT_FIELDS = {
    model.model_fields["kind"].default: _float_fields(model)
    for model in get_args(get_args(Event)[0])
}


def _finite(event: Event) -> bool:
    """Every number of ``event`` is finite: no NaN or infinity can pass, or fail, a threshold."""
    return _all_finite(event, _FLOAT_FIELDS[event.kind])


def _all_finite(value: Any, fields: _FloatFields) -> bool:
    isfinite = math.isfinite
    for name, how in fields:
        field = getattr(value, name)
        if how is True:
            if field and not all(map(isfinite, field.values())):
                return False
        elif how is False:
            if field is not None and not isfinite(field):
                return False
        elif field is not None and not _all_finite(field, how):
            return False
    return True


def find_files(
    path: Path | str,
    pattern: str,
    what: str,
    error: type[Exception],
    *,
    recursive: bool = True,
    irregular: bool = False,
) -> list[Path]:
    """The files matching ``pattern`` under ``path`` (or ``path`` itself); raises ``error`` if there are none.

    ``irregular``: also whatever else matches (a FIFO, a dangling symlink, a directory), for the
    reader to report as unreadable instead of leaving it out without a word.
    """
    path = Path(path)  # callers of the public readers pass strings too
    if not path.exists() and not (irregular and path.is_symlink()):
        raise error(f"{path}: no such file or directory")
    if path.is_file() or (irregular and not path.is_dir()):
        return [path]
    if not os.access(path, os.R_OK | os.X_OK):
        raise error(f"{path}: directory is not readable")
    found = path.rglob(pattern) if recursive else path.glob(pattern)
    files = sorted(p for p in found if irregular or p.is_file())
    if not files:
        raise error(f"{path}: no {what} ({pattern}) found")
    return files


def run_files(path: Path | str) -> list[Path]:
    """The event logs of a run directory (or the file itself); raises EventLogError if there are none.

    Everything named like a log is listed, file or not: reading it says why it cannot be read.
    """
    return find_files(path, f"*{SUFFIX}", "recompprof event logs", EventLogError, irregular=True)


def read_run(path: Path | str, stats: ReadStats | None = None) -> Iterator[Event]:
    """Yield every event of every rank's log under ``path``, file by file."""
    stats = stats if stats is not None else ReadStats()
    for file in run_files(path):
        yield from read_file(file, stats)
