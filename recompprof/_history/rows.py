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
import re
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from recompprof._analysis.report.bounded import CAPTURE_SIGNALS
from recompprof._analysis.report.frames import OMITTED_SUBJECT
from recompprof._analysis.report.sessions import SessionFold
from recompprof._analysis.runs import EVENT_LOG, TORCH_TRACE
from recompprof._eventlog.fastread import by_type
from recompprof._history.columns import (
    CACHE_COLUMNS,
    EXPORT_VERSION,
    FACT_KEY,
    PHASE_COLUMNS,
    REMOTE_CACHE_COLUMNS,
    REMOTE_RESULTS,
)
from recompprof._history.tables import DIMENSIONS, SCHEMAS, SESSION_KEY, TIMESTAMP
from recompprof._model.causes import CauseTracker
from recompprof._model.counting import COSTS, COUNTED, LIMIT_HIT, RECOMPILE, verdict
from recompprof._model.events import (
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
from recompprof._model.vocabulary import CACHE_RESULTS, CACHES, PHASES
from recompprof._version import __version__

# Where a session's rows go: ``sink(table, run_id, rank, pid, start, day)`` is the buffer
# (:func:`buffer`) that holds the rows of that table, session (its start: its first event's time) and
# UTC day until its writer takes them as columns.
Sink = Callable[[str, str, int, int, float, datetime.date], "Buffer"]
PROMOTED = ("team", "model")  # labels that are columns of every table
DIMENSION_NAMES = tuple(field.name for field in DIMENSIONS)
_RUNS = tuple(SCHEMAS["runs"].names)


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


_RELEASES: dict[str | None, str | None] = {None: None}
_RELEASE = re.compile(r"\d+(?:\.\d+)*")


def torch_release(version: str | None) -> str | None:
    """torch's release without its build or pre-release parts (``2.13.0`` for ``2.13.0+cpu`` or
    ``2.13.0a0+git1234``): what two sessions' versions are compared by (cached: a run has one)."""
    found = _RELEASES.get(version, _RELEASES)
    if found is _RELEASES:
        match = _RELEASE.match(version or "")
        found = _RELEASES[version] = match.group(0) if match else version
    return found  # type: ignore[return-value]


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


# -- the buffers: a batch of one table's rows, held as the parts they are made of ----------------------
# Rows whose fields are converted to Arrow as they come, this many at a time: the values of the events
# just read are still in the CPU's caches; read again when the whole batch is written, a batch later,
# they are not, and converting them then cost more (one rank: 2.43 s in all against 2.23 s).
HOT_ROWS = 512


class Buffer:
    """Rows of one table (one session, or every session of a run, and one UTC day) until they are
    written: at most ``limit`` of them; the row that finds the buffer full first has ``flush`` (the
    writer's) take them (:meth:`columns`). The columns are built once per
    batch, each in one pass over the batch, rather than row by row; the values of the many rows
    (a compile's fields, a reason's) are converted to Arrow :data:`HOT_ROWS` rows at a time as they
    come, and joined when the batch is taken."""

    def __init__(self, text: TextPolicy, flush: Callable[[], None], limit: int) -> None:
        self.text, self.flush, self.limit = text, flush, limit
        self.size = 0

    def _room(self) -> None:
        """Before one more row: a full buffer is written first."""
        if self.size >= self.limit:
            self.flush()

    def columns(self) -> list[Any]:
        """The buffered rows as their table's columns in the schema's order (times in seconds), and
        the buffer emptied."""
        found = self._columns()
        self._clear()
        self.size = 0
        return found

    def _columns(self) -> list[Any]:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError


class RowBuffer(Buffer):
    """Whole rows, each its table's columns in order: the tables with few rows (runs, graph_breaks)."""

    def __init__(self, text: TextPolicy, flush: Callable[[], None], limit: int) -> None:
        super().__init__(text, flush, limit)
        self.rows: list[Sequence[Any]] = []

    def add(self, row: Sequence[Any]) -> None:
        self._room()
        self.rows.append(row)
        self.size += 1

    def _columns(self) -> list[Any]:
        return list(zip(*self.rows, strict=True))

    def _clear(self) -> None:
        self.rows = []


# The compile columns read straight off the event (or its frame, or its session), by schema column.
_COMPILE_KEY = (*(field.name for field in SESSION_KEY), *DIMENSION_NAMES)
_FRAME_COLUMNS = (
    "frame_key",
    "frame_name",
    "frame_file",
    "frame_line",
    "frame_owner",
    "frame_label",
)
_VERDICT_COLUMNS = (
    "counts_as_compile",
    "counts_as_recompile",
    "steady_state_recompile",
    "compile_s",
    "cause_category",
    "cause_subject",
    "reasons_omitted",
)
_COMPILE_NAMES = tuple(SCHEMAS["compiles"].names)
# Columns that are an event field of another name.
_RENAMED = {"duration_s": "duration", "cache_saved_s": "cache_seconds_saved"}
_DERIVED = {
    *_COMPILE_KEY,
    *_FRAME_COLUMNS,
    *_VERDICT_COLUMNS,
    *PHASE_COLUMNS,
    *CACHE_COLUMNS,
    *REMOTE_CACHE_COLUMNS,
    "limit_name",
    "limit_value",
    "reason_count",
    "call_site",
    "torch_release",
}
_OWN_COLUMNS = tuple(name for name in _COMPILE_NAMES if name not in _DERIVED)
_OWN_FIELDS = (
    *(_RENAMED.get(name, name) for name in _OWN_COLUMNS),
    # the fields other columns are made from
    "phases",
    "cache_lookups",
    "remote_cache_lookups",
    "call_site",
)
# An event's own fields in one call (one visit of the event, not one per column).
_OWN = attrgetter(*_OWN_FIELDS)


class Nested(NamedTuple):
    """Columns that are the fields of one dict per row (a compile's phases, its cache lookups by
    cache and result): converted as one nested column, then split
    (:func:`recompprof._history.export.batch`); ``paths`` are the columns, by path of keys. A row
    without its dict (None) is null in every column; a key missing from a dict is null, or ``missing``."""

    rows: Sequence[Any]
    paths: tuple[tuple[str, ...], ...]
    missing: Any = None


class Repeated(NamedTuple):
    """A column of ``values[i] for i in indices``: each value converted once, then repeated (the
    columns many rows of a batch share: a session's key, a frame, a compile's head)."""

    values: Sequence[Any]
    indices: list[int] | pa.Array  # an Arrow array: converted already


def interned(items: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """``items`` as their distinct objects (first seen first) and each item's place among them, told
    apart by identity: a session's key and a frame's columns are one object each (the items stay
    referenced while the batch is built, so no identity is reused meanwhile)."""
    first: dict[int, int] = {}
    found = list(map(first.setdefault, map(id, items), range(len(items))))
    dense = dict(zip(first.values(), range(len(first)), strict=True))
    return [items[i] for i in first.values()], list(map(dense.__getitem__, found))


def columns_of(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Repeated]:
    """Columns ``names`` of tuples many rows share, each distinct tuple converted once."""
    values, indices = interned(rows)
    return {
        name: Repeated(column, indices)
        for name, column in zip(
            names, zip(*values, strict=True) if values else [()] * len(names), strict=True
        )
    }


class CompileBuffer(Buffer):
    """``compiles`` rows: each its event's own fields (read in one call; the event itself is not kept,
    so its memory is reused at once; converted to Arrow :data:`HOT_ROWS` rows at a time, as one
    struct of :data:`_OWN_TYPE`), its session's key, its frame's columns and its verdicts (the event
    model's rules, applied as the event was read: :meth:`SessionRows._on_compile`; the columns they
    give are made a batch at a time)."""

    def __init__(self, text: TextPolicy, flush: Callable[[], None], limit: int) -> None:
        super().__init__(text, flush, limit)
        self._clear()

    def _clear(self) -> None:
        self.own: list[tuple[Any, ...]] = []  # the rows' own fields not converted yet
        self.converted: list[pa.Array] = []  # the others', converted (:data:`_OWN_TYPE`)
        self.sites: list[list[str]] = []  # under redact: the converted rows' call sites
        self.keys: list[tuple[Any, ...]] = []
        self.frames: list[tuple[Any, ...]] = []
        self.verdicts: list[tuple[Any, ...]] = []  # _VERDICT_PARTS
        self.limits: dict[int, tuple[str, int | None]] = {}

    def add(
        self,
        event: Compile,
        key: tuple[Any, ...],
        frame: tuple[Any, ...],
        found: tuple[Any, ...],
        limit: tuple[str, int | None] | None = None,
    ) -> None:
        """Buffer a compile's row (``found``: its :data:`_VERDICT_PARTS`; ``limit``: the limit it hit,
        its name and value, from the ``recompile_limit_hit`` that followed it)."""
        self._room()
        if limit is not None:
            self.limits[self.size] = limit
        own = self.own
        own.append(_OWN(event))
        if len(own) >= HOT_ROWS:
            self._convert()
        self.keys.append(key)
        self.frames.append(frame)
        self.verdicts.append(found)
        self.size += 1

    def _convert(self) -> None:
        """The rows' own fields read since the last call, converted while they are fresh."""
        if self.own:
            if self.text.redact:
                self.sites.extend(row[-1] for row in self.own)
            self.converted.append(pa.array(self.own, _OWN_TYPE))
            self.own = []

    def _columns(self) -> list[Any]:
        n, text = self.size, self.text
        self._convert()
        own = _joined(self.converted).flatten()
        parts: dict[str, Any] = dict(zip(_OWN_COLUMNS, own, strict=False))
        phases, lookups, remote, sites = own[len(_OWN_COLUMNS) :]
        if text.redact:
            sites = [_call_site(lines, text) for lines in self.sites]
        parts.update(columns_of((*_COMPILE_KEY, "torch_release"), _with_release(self.keys)))
        parts.update(columns_of(_FRAME_COLUMNS, self.frames))
        found, causes, parts["reasons_omitted"], parts["reason_count"], unknown = zip(
            *self.verdicts, strict=True
        )
        parts.update(_verdict_columns(found, causes, unknown, parts))
        if not text.texts:
            parts["fail_reason"] = [None] * n
        names: list[str | None] = [None] * n
        values: list[int | None] = [None] * n
        for index, (name, value) in self.limits.items():
            names[index], values[index] = name, value
        parts["limit_name"], parts["limit_value"] = names, values
        parts[PHASE_COLUMNS[0]] = Nested(phases, _PHASE_PATHS)
        parts[CACHE_COLUMNS[0]] = Nested(lookups, _CACHE_PATHS)
        # Where torch splits them, a lookup the remote cache did not answer is 0 of it, not unknown.
        parts[REMOTE_CACHE_COLUMNS[0]] = Nested(remote, _REMOTE_PATHS, missing=0)
        parts["call_site"] = sites
        # a Nested stands for the columns after it (None here)
        return [parts.get(name) for name in _COMPILE_NAMES]


# What a compile's row holds of its verdicts: counting.verdict's bits, its cause (or None), the
# reasons past its cap, the reasons listed, whether its steady-state verdict is unknown.
_VERDICT_PARTS = ("found", "cause", "reasons_omitted", "reason_count", "unknown")


def _verdict_columns(
    found: Sequence[int],
    causes: Sequence[tuple[Any, str, str] | None],
    unknown: Sequence[bool],
    own: dict[str, Any],
) -> dict[str, Any]:
    """The columns of a batch's verdicts (``found``, by :func:`recompprof._model.counting.verdict`)
    and causes, made from them and the event's own columns a column at a time."""
    bits = pa.array(found, pa.int8())

    def has(bit: int) -> pa.Array:
        return pc.not_equal(pc.bit_wise_and(bits, pa.scalar(bit, pa.int8())), 0)

    recompile = has(RECOMPILE)
    # NULL where the verdict is unknown (docs/steady-state.md), in both columns
    steady = pc.if_else(pa.array(unknown, pa.bool_()), _NO_BOOL, own["steady_state"])
    duration = own["duration_s"]
    return {
        "counts_as_compile": has(COUNTED),
        "counts_as_recompile": recompile,
        "steady_state": steady,
        "steady_state_recompile": pc.and_(recompile, steady),
        "compile_s": pc.if_else(has(COSTS), duration, 0.0),
        "cause_category": [cause[1] if cause is not None else None for cause in causes],
        "cause_subject": [cause[2] if cause is not None else None for cause in causes],
    }


_NO_BOOL = pa.scalar(None, pa.bool_())


def _joined(arrays: list[pa.Array]) -> pa.Array:
    """The chunks a batch's rows were converted in, as one array."""
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


_CACHE_PATHS = tuple((cache, result) for cache in CACHES for result in CACHE_RESULTS)
_REMOTE_PATHS = tuple((cache, result) for cache in CACHES for result in REMOTE_RESULTS)
_PHASE_PATHS = tuple((phase,) for phase in PHASES)


def nested_type(paths: Sequence[tuple[str, ...]], kinds: Sequence[pa.DataType]) -> pa.DataType:
    """The struct type of dicts holding a value at each of ``paths`` (of type ``kinds``)."""
    tree: dict[str, Any] = {}
    for path, kind in zip(paths, kinds, strict=True):
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = kind

    def build(node: dict[str, Any]) -> pa.DataType:
        return pa.struct([(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return build(tree)


def _own_type() -> pa.DataType:
    """The struct type of a compile's own fields (:data:`_OWN`): its columns' types (times as
    seconds), then its phases', cache lookups' and call site's."""
    schema = SCHEMAS["compiles"]

    def kinds(first: str, count: int) -> list[pa.DataType]:
        at = schema.get_field_index(first)
        return [schema.field(at + i).type for i in range(count)]

    own = [(name, schema.field(name).type) for name in _OWN_COLUMNS]
    return pa.struct(
        [
            *((name, pa.float64() if kind == TIMESTAMP else kind) for name, kind in own),
            ("phases", nested_type(_PHASE_PATHS, kinds(PHASE_COLUMNS[0], len(_PHASE_PATHS)))),
            (
                "cache_lookups",
                nested_type(_CACHE_PATHS, kinds(CACHE_COLUMNS[0], len(_CACHE_PATHS))),
            ),
            (
                "remote_cache_lookups",
                nested_type(_REMOTE_PATHS, kinds(REMOTE_CACHE_COLUMNS[0], len(_REMOTE_PATHS))),
            ),
            ("call_site", schema.field("call_site").type),
        ]
    )


_OWN_TYPE = _own_type()


def _with_release(keys: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Each distinct session key with its torch release after it (keys are one object per session)."""
    done: dict[int, tuple[Any, ...]] = {}
    for key in keys:
        if id(key) not in done:
            done[id(key)] = (*key, torch_release(key[_TORCH_VERSION]))
    return list(map(done.__getitem__, map(id, keys)))


_TORCH_VERSION = _COMPILE_KEY.index("torch_version")


@dataclasses.dataclass(frozen=True)
class _Omitted:
    """The reasons of one category an event left out past its cap, as the reason its row stands for."""

    category: str
    entry: None = None
    subject: str = OMITTED_SUBJECT
    explains_change: bool = False
    text: str = ""


_HEAD_COLUMNS = (*FACT_KEY, "frame_key", "frame_name", "recompile", "steady_state")
_REASON_COLUMNS = ("entry", "category", "subject", "explains_change", "text")
_REASON_FIELDS = attrgetter(*_REASON_COLUMNS)
_REASON_TYPE = pa.struct([SCHEMAS["guard_failures"].field(name) for name in _REASON_COLUMNS])


class GuardFailureBuffer(Buffer):
    """``guard_failures`` rows: each its reason (its fields converted to Arrow :data:`HOT_ROWS` rows
    at a time), its place, and its compile's head (key and frame columns, whether the compile is a
    recompile, its steady_state), held once for its compile's rows."""

    def __init__(self, text: TextPolicy, flush: Callable[[], None], limit: int) -> None:
        super().__init__(text, flush, limit)
        self._clear()

    def _clear(self) -> None:
        self.heads: list[tuple[Any, ...]] = []  # one per compile in the batch
        self.which: list[int] = []  # each row's head
        self.reasons: list[Any] = []  # the rows' reasons not converted yet
        self.converted: list[pa.Array] = []  # the others' fields, converted (:data:`_REASON_TYPE`)
        self.positions: list[int | None] = []
        self.counts: dict[int, int] = {}  # a row that stands for more than one reason: how many

    def add(self, head: tuple[Any, ...], reasons: Sequence[Any]) -> None:
        """A compile's reasons, in order (positions 0, 1, ...)."""
        n = len(reasons)
        if self.size + n <= self.limit:  # all in this batch (the usual case)
            self.which.extend([len(self.heads)] * n)
            self.heads.append(head)
            self.reasons.extend(reasons)
            self.positions.extend(range(n))
            self.size += n
            if len(self.reasons) >= HOT_ROWS:
                self._convert()
            return
        for position, reason in enumerate(reasons):
            self.add_one(head, reason, position, 1)

    def add_one(self, head: tuple[Any, ...], reason: Any, position: int | None, count: int) -> None:
        self._room()
        if not self.heads or self.heads[-1] is not head:
            self.heads.append(head)
        self.which.append(len(self.heads) - 1)
        self.reasons.append(reason)
        self.positions.append(position)
        if count != 1:
            self.counts[self.size] = count
        self.size += 1

    def _convert(self) -> None:
        """The fields of the reasons added since the last call, converted while they are fresh."""
        if self.reasons:
            found = list(map(_REASON_FIELDS, self.reasons))
            self.converted.append(pa.array(found, _REASON_TYPE))
            self.reasons = []

    def _columns(self) -> list[Any]:
        self._convert()
        which = pa.array(self.which, pa.int32())  # each row's head, converted once for every column
        parts: dict[str, Any] = {
            name: Repeated(values, which)
            for name, values in zip(_HEAD_COLUMNS, zip(*self.heads, strict=True), strict=True)
        }
        parts.update(zip(_REASON_COLUMNS, _joined(self.converted).flatten(), strict=True))
        # a row counts as a change where its compile is a recompile and its reason explains it
        recompile = pa.array(parts["recompile"].values, pa.bool_()).take(which)
        parts["counts_as_change"] = pc.and_(recompile, parts["explains_change"])
        if not self.text.texts:
            parts["text"] = [""] * self.size
        counts = [1] * self.size
        for index, count in self.counts.items():
            counts[index] = count
        parts["position"], parts["count"] = self.positions, counts
        versions = parts["torch_version"].values
        parts["torch_release"] = Repeated(list(map(torch_release, versions)), which)
        return [parts[name] for name in _GUARD_FAILURE_NAMES]


_GUARD_FAILURE_NAMES = tuple(SCHEMAS["guard_failures"].names)
_BUFFERS: dict[str, type[Buffer]] = {
    "runs": RowBuffer,
    "compiles": CompileBuffer,
    "guard_failures": GuardFailureBuffer,
    "graph_breaks": RowBuffer,
}


def buffer(table: str, text: TextPolicy, flush: Callable[[], None], limit: int) -> Buffer:
    """An empty buffer of ``table``'s rows, written by ``flush`` when full."""
    return _BUFFERS[table](text, flush, limit)


# A compile's row as CompileBuffer.add takes it: the event, its session's key, its frame's columns,
# its _VERDICT_PARTS.
_CompileRow = tuple[Compile, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]


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
        self.key: tuple[
            Any, ...
        ] = ()  # run_id, rank, pid and dims: what every fact row starts with
        self.labels: dict[str, str] = {}
        self.buffers: dict[tuple[str, datetime.date], Any] = {}
        # the row of a compile that hit the limit, held for the recompile_limit_hit that names the
        # limit (next in the rank's events, though other ranks' rows may come between in one log):
        # its buffer, its row (CompileBuffer.add's arguments) and its compile id
        self.held: tuple[CompileBuffer, _CompileRow, str] | None = None

    def set_dims(self, dims: tuple[Any, ...]) -> None:
        self.dims = dims
        self.key = (self.run_id, self.rank, self.pid, *dims)

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
        labels: dict[str, str] | Callable[[str], dict[str, str]] | None = None,
    ) -> None:
        self.sink = sink
        # added to (and over) each session's own: the same for every run, or by run id
        given = labels or {}
        self.labels_of = given if callable(given) else (lambda _run: given)
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
            labels = session.labels = dict(self.labels_of(self.default_run))
            session.set_dims((None, self.default_run, labels.get("team"), labels.get("model")))
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
        labels = {**event.labels, **self.labels_of(event.run_id)}
        session.labels = labels
        session.set_dims(
            (
                event.versions.get("torch") or None,
                event.job or event.run_id,
                labels.get("team"),
                labels.get("model"),
            )
        )
        session.first_time = session.last_time = event.time
        for name in CAPTURE_SIGNALS:
            if event.signals.get(name) is False:
                session.signals_off.add(name)
        session.fold.start(event)
        self.tracker.start(event.rank, event.pid)
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

    def _buffer(self, session: _Session, table: str, day: datetime.date) -> Any:
        """The buffer of the session's rows of ``table`` for ``day`` (asked of the sink once)."""
        found = session.buffers.get((table, day))
        if found is None:
            start = session.first_time if session.first_time is not None else 0.0
            found = session.buffers[(table, day)] = self.sink(
                table, session.run_id, session.rank, session.pid, start, day
            )
        return found

    def _on_compile(self, event: Compile) -> None:
        session = self._session(event)
        session.fold.tally(event)
        self._counted(session, event)
        found = verdict(event)
        cause = self.tracker.cause_of(event, found)
        recompile = bool(found & RECOMPILE)
        omitted = sum(event.reasons_omitted.values()) if event.reasons_omitted else 0
        cost = event.duration if found & COSTS else 0.0
        session.add_compile(event, found, cost, cause is not None, omitted)
        frame = self._frame(event.frame)
        day = day_of(event.time)
        compiles: CompileBuffer = self._buffer(session, "compiles", day)
        found_parts = (
            found,
            cause,
            omitted,
            len(event.reasons),
            event.steady_state_unknown is not None,
        )
        self._release(session)  # a limit hit whose recompile_limit_hit never came
        row: _CompileRow = (event, session.key, frame, found_parts)
        if found == LIMIT_HIT:
            session.held = (compiles, row, event.compile_id)
        else:
            compiles.add(*row)
        if event.reasons or omitted:
            head = (
                *session.key,
                event.time,
                event.step,
                event.compile_id,
                event.generation,
                frame[0],
                frame[1],
                recompile,
                None if event.steady_state_unknown is not None else event.steady_state,
            )
            failures: GuardFailureBuffer = self._buffer(session, "guard_failures", day)
            failures.add(head, event.reasons)
            if event.reasons_omitted:  # rare: past the per-event cap
                for category, count in sorted(event.reasons_omitted.items()):
                    failures.add_one(head, _Omitted(category), None, count)

    def _on_limit_hit(self, event: RecompileLimitHit) -> None:
        session = self._session(event)
        session.fold.tally(event)
        self._counted(session, event)
        session.limit_hits += 1
        held = session.held
        if held is not None and held[2] == event.compile_id:
            session.held = None
            held[0].add(*held[1], limit=(event.limit, event.value))
        else:
            self._release(session)

    @staticmethod
    def _release(session: _Session) -> None:
        """The held row of a limit hit goes into its buffer as it is (no limit named)."""
        held = session.held
        if held is not None:
            session.held = None
            held[0].add(*held[1])

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
            *session.key,
            event.time,
            event.step,
            event.compile_id,
            event.generation,
            key,
            name,
            event.reason,
            event.explanation if texts else None,
            list(event.hints) if texts else [],
            self.text.location(event.user_location) if event.user_location else None,
            event.skipped_frame,
            event.count,
            torch_release(session.dims[0]),
        )
        self._buffer(session, "graph_breaks", day_of(event.time)).add(row)

    # -- the session's row ----------------------------------------------------------------------
    def _close(self, session: _Session, skipped_lines: int) -> None:
        self._release(session)
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
            "steps": session.steps or None,  # no step counted: unknown, not 0
            "compile_s": session.compile_seconds,
            "recompile_s": session.recompile_seconds,
            "wall_s": end.totals.get("wall_seconds") if end is not None else None,
            "export_version": EXPORT_VERSION,
            "exporter_version": __version__,
            "torch_release": torch_release(session.dims[0]),
        }
        self._buffer(session, "runs", day_of(first)).add([row[n] for n in _RUNS])


def _call_site(lines: list[str], text: TextPolicy) -> list[str]:
    if not lines:
        return []
    return [text.location(line) for line in lines] if text.redact else list(lines)


def _identity(start: Any) -> dict[str, Any]:
    """The columns of a ``runs`` row its ``session_start`` gives (all null for a session without one)."""
    if start is None:
        return dict.fromkeys(_IDENTITY) | {"source": EVENT_LOG}
    found = {name: getattr(start, name) for name in _IDENTITY if name != "source"}
    found["source"] = TORCH_TRACE if start.signals.get(TORCH_TRACE) else EVENT_LOG
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
