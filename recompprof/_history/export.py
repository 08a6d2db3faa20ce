"""``recompprof export``: runs -> the lake's Parquet files (docs/history.md, "Export").

A run is read once, log by log (``recompprof._analysis.runs``: event logs or a ``TORCH_TRACE``), its
events turned into rows by :class:`recompprof._history.rows.SessionRows`, and the rows written in
bounded batches (one row group each) to one file per table, UTC day, run and writer. Every file is
written whole and then made visible (:class:`recompprof._history.layout.PendingFile`), and its name is a
pure function of what was exported, so exporting the same input again writes the same bytes to the
same names. Each file holds the rows of a known set of rank sessions (its footer names them), and a
session is in the lake once, whichever way it arrived: the files an export commits take its sessions
from every other file of the run (:mod:`recompprof._history.sessions`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import json
import random
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recompprof._analysis.runs import EventStream, Run, load
from recompprof._eventlog.writer import log_rank
from recompprof._history import sessions
from recompprof._history.columns import TABLES
from recompprof._history.layout import ALL_RANKS, Lake, PendingFile, writer_of
from recompprof._history.names import LakeError
from recompprof._history.rows import (
    Buffer,
    Nested,
    Repeated,
    SessionRows,
    TextPolicy,
    buffer,
    nested_type,
)
from recompprof._history.sessions import Session
from recompprof._history.tables import SCHEMAS, TIMESTAMP, writer_options

BATCH_ROWS = 8192  # rows one table's buffer holds at most, made into Arrow columns at once
# Rows per row group, as compaction writes them (``compact.ROW_GROUP``): a question pays per row group
# (its statistics, its pages' set-up), so a file of 8,192-row groups cost a digest a quarter more
# CPU than the same rows compacted. Batches are held as Arrow columns (far smaller than their Python
# rows) until a group is full.
ROW_GROUP = 16 * BATCH_ROWS


@dataclasses.dataclass
class ExportResult:
    """What an export wrote: files by table, rows by table, sessions, and files it replaced."""

    files: dict[str, list[str]] = dataclasses.field(
        default_factory=lambda: {table: [] for table in TABLES}
    )
    rows: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    sessions: int = 0
    replaced: list[str] = dataclasses.field(
        default_factory=list
    )  # other files that gave sessions up
    runs: list[Run] = dataclasses.field(default_factory=list)
    # By run id: labels its sessions got from the lake (given to an earlier export), not --labels.
    remembered: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)


class _Output:
    """One file being written: its buffered rows and its Parquet writer (opened at the first batch)."""

    def __init__(self, lake: Lake, table: str, path: str, text: TextPolicy) -> None:
        self.lake, self.table, self.path = lake, table, path  # path: until its sessions name it
        self.schema = SCHEMAS[table]
        self.rows = buffer(table, text, self.flush, BATCH_ROWS)
        self.count = 0
        self.held: list[pa.Table] = []  # batches not written yet: less than a row group
        self.held_rows = 0
        self.pending: PendingFile | None = None
        self.writer: pq.ParquetWriter | None = None

    @property
    def has_rows(self) -> bool:
        return bool(self.count or self.rows.size)

    def flush(self) -> None:
        if not self.rows.size:
            return
        self.count += self.rows.size
        self.held.append(batch(self.schema, self.rows.columns()))
        self.held_rows += self.held[-1].num_rows
        if self.held_rows >= ROW_GROUP:
            self._write()

    def _write(self) -> None:
        """The batches held, as one row group (or several of ``ROW_GROUP`` rows)."""
        if not self.held:
            return
        if self.writer is None:
            self.pending = self.lake.create(self.path)
            self.writer = pq.ParquetWriter(
                self.pending.stream, self.schema, **writer_options(self.schema)
            )
        rows = pa.concat_tables(self.held)
        self.held, self.held_rows = [], 0
        self.writer.write_table(rows, row_group_size=ROW_GROUP)

    def close(self, footer: dict[bytes, bytes]) -> None:
        """Write what is buffered and finish the file, ``footer`` in its metadata (not visible yet:
        :meth:`commit`)."""
        self.flush()
        self._write()
        if self.writer is not None:
            self.writer.add_key_value_metadata(footer)
            self.writer.close()

    def commit(self, path: str) -> None:
        """Make the file appear at ``path``."""
        self.path = path
        if self.pending is not None:
            self.pending.path = path
            self.pending.commit()

    def abort(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(OSError):
                self.writer.close()
        if self.pending is not None:
            self.pending.abort()


def batch(schema: pa.Schema, columns: list[Any]) -> pa.Table:
    """Columns (``schema``'s, in order, times in seconds) as one Arrow table of ``schema``, each
    converted by Arrow: a :class:`Repeated` one each value once, then taken; a :class:`Nested` one as
    one nested column, split into the columns it stands for (None in ``columns``); times to
    microseconds there too."""
    arrays: list[pa.Array] = []
    taken: dict[int, pa.Array] = {}  # the indices of Repeated columns, converted once
    for field, column in zip(schema, columns, strict=True):
        if column is None:  # a column of the Nested before it
            continue
        if isinstance(column, Repeated):
            indices = taken.get(id(column.indices))
            if indices is None:
                indices = taken[id(column.indices)] = _indices(column.indices)
            arrays.append(_array(field.type, column.values).take(indices))
        elif isinstance(column, Nested):
            arrays.extend(_split(schema, len(arrays), column))
        else:
            arrays.append(_array(field.type, column))
    return pa.Table.from_arrays(arrays, schema=schema)


def _split(schema: pa.Schema, at: int, column: Nested) -> list[pa.Array]:
    """The columns from ``at`` on that ``column``'s paths of keys make, a missing key null."""
    kinds = [schema.field(at + i).type for i in range(len(column.paths))]
    nested = nested_type(column.paths, kinds)
    found = column.rows if isinstance(column.rows, pa.Array) else pa.array(column.rows, nested)
    present = pc.is_valid(found) if column.missing is not None else None
    arrays: list[pa.Array] = []
    for path, kind in zip(column.paths, kinds, strict=True):
        part = found
        for key in path:
            part = pc.struct_field(part, [part.type.get_field_index(key)])
        if present is not None:  # a key missing from a row's dict: ``missing``, not null
            filled = pc.fill_null(part, pa.scalar(column.missing, kind))
            part = pc.if_else(present, filled, pa.scalar(None, kind))
        arrays.append(part)
    return arrays


def _indices(indices: list[int] | pa.Array) -> pa.Array:
    """A :class:`Repeated` column's indices as Arrow's (made once per batch, shared by its columns)."""
    return indices if isinstance(indices, pa.Array) else pa.array(indices, pa.int32())


def _array(kind: pa.DataType, column: Sequence[Any] | pa.Array) -> pa.Array:
    """``column`` as an Arrow array of ``kind`` (times given in seconds)."""
    found = (
        column
        if isinstance(column, pa.Array)  # made by Arrow already (rows.py)
        else pa.array(column, pa.float64() if kind == TIMESTAMP else kind)
    )
    if kind == TIMESTAMP and found.type != TIMESTAMP:  # seconds
        micros = pc.cast(pc.round(pc.multiply(found, 1e6)), pa.int64())
        return micros.cast(TIMESTAMP)
    return found if found.type == kind else found.cast(kind)


class _Discard(Buffer):
    """Where the rows of a day outside the export's window go: nowhere."""

    def __init__(self) -> None:
        super().__init__(TextPolicy(), lambda: None, 1)

    def add(self, *_: Any, **__: Any) -> None:
        pass

    def add_one(self, *_: Any) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class Window:
    """The days of fact rows an export writes (``runs`` rows always): all, or only those after
    ``after`` (what a session's daily exports have not written yet) and up to ``through`` (the days
    closed while it runs)."""

    after: datetime.date | None = None
    through: datetime.date | None = None

    def holds(self, table: str, day: datetime.date) -> bool:
        if table == "runs":
            return True
        return (self.after is None or day > self.after) and (
            self.through is None or day <= self.through
        )


class _Writers:
    """The files an export writes, by (table, day, run, writer); rows go to them as they come."""

    def __init__(self, lake: Lake, per_rank: bool, text: TextPolicy, window: Window) -> None:
        self.lake, self.per_rank, self.text, self.window = lake, per_rank, text, window
        self.outputs: dict[tuple[str, datetime.date, str, str], _Output] = {}
        self.result = ExportResult()
        # The sessions each (run, writer) holds, and the days each run has rows on.
        self.sessions: dict[tuple[str, str], set[Session]] = {}
        self.days: dict[str, set[datetime.date]] = {}
        self.written: dict[str, set[str]] = {}  # by run: the files committed
        # By run, and by the table and day of a file committed: the sessions its footer names.
        self.placed: dict[str, dict[tuple[str, datetime.date], set[Session]]] = {}
        self.discard = _Discard()

    def sink(
        self, table: str, run_id: str, rank: int, pid: int, start: float, day: datetime.date
    ) -> Buffer:
        """What takes one session's rows of ``table`` for ``day``: its file's buffer."""
        writer = writer_of(rank, pid) if self.per_rank else ALL_RANKS
        self.sessions.setdefault((run_id, writer), set()).add((rank, pid, sessions.start_of(start)))
        if not self.window.holds(table, day):
            return self.discard
        key = (table, day, run_id, writer)
        output = self.outputs.get(key)
        if output is None:
            self.days.setdefault(run_id, set()).add(day)
            output = self.outputs[key] = _Output(
                self.lake, table, self.lake.path_of(table, day, run_id, writer), self.text
            )
        return output.rows

    def finish(self, keys: Iterable[tuple[str, datetime.date, str, str]] | None = None) -> None:
        """Finish and commit the files of ``keys`` (all when None): each appears whole, or not at all;
        none when one would replace a file of other sessions (:func:`sessions.check_target`)."""
        chosen = list(self.outputs) if keys is None else list(keys)
        outputs = [(key, self.outputs.pop(key)) for key in chosen]
        try:
            named = []
            for (table, day, run_id, writer), output in outputs:
                held = self.sessions[(run_id, writer)]
                path = self.lake.path_of(table, day, run_id, sessions.writer_name(writer, held))
                if output.has_rows:
                    sessions.check_target(self.lake, path, run_id, held)
                named.append((run_id, (table, day), path, output, held))
            for run_id, _, _, output, held in named:
                output.close(sessions.metadata(run_id, held))
            for run_id, place, path, output, held in named:
                if output.pending is None:
                    continue
                output.commit(path)
                self.written.setdefault(run_id, set()).add(path)
                self.placed.setdefault(run_id, {}).setdefault(place, set()).update(held)
                self.result.files[output.table].append(output.path)
                self.result.rows[output.table] += output.count
        except BaseException:
            for _, output in outputs:
                output.abort()
            raise

    def settle(self) -> None:
        """Each session exported is in the lake once: in the files just committed."""
        for run_id, written in sorted(self.written.items()):
            held = set().union(*(s for (run, _), s in self.sessions.items() if run == run_id))
            scope = [
                (table, day)
                for day in self.days.get(run_id, ())
                for table in TABLES
                if self.window.holds(table, day)
            ]
            self.result.replaced += sessions.settle(self.lake, run_id, held, scope, written)

    def abort(self) -> None:
        for output in self.outputs.values():
            output.abort()
        self.outputs.clear()


def export(
    paths: Sequence[Path],
    uri: str,
    *,
    per_rank: bool = False,
    labels: dict[str, str] | None = None,
    text: TextPolicy | None = None,
    window: Window | None = None,
) -> ExportResult:
    """Export the runs at ``paths`` (run directories, event logs or TORCH_TRACE directories) to the
    lake at ``uri``, the fact rows of ``window``'s days; raises ``RunError`` for a path that is no run
    and ``LakeError`` for a lake it cannot write (files already in the lake stay as they were)."""
    runs = [load(path) for path in paths]
    lake = Lake(uri)
    lake.reachable()
    lake.refuse_a_root()
    text = text or TextPolicy()
    for attempt in range(1, ATTEMPTS + 1):
        result, lost = _export_once(runs, lake, per_rank, labels, text, window or Window())
        if not lost:
            return result
        if attempt < ATTEMPTS:  # another export of these sessions settled at the same moment
            time.sleep(random.uniform(0.05, 0.5))
            runs = [load(path) for path in paths]
    named = ", ".join(f"rank {r} (pid {p})" for r, p, _ in sorted(lost))
    raise LakeError(
        f"{lake.uri}: {named} of this export are in no file of the lake after {ATTEMPTS} attempts: "
        "other exports of the same sessions kept taking them at the same moment; export it again"
    )


# Exports of the same sessions that settle at the same moment can each take them from the other's
# file; the one that finds them in no file exports again, up to this many times in all.
ATTEMPTS = 3


def _export_once(
    runs: list[Run],
    lake: Lake,
    per_rank: bool,
    labels: dict[str, str] | None,
    text: TextPolicy,
    window: Window,
) -> tuple[ExportResult, set[Session]]:
    """One export of ``runs``: the result, and the sessions it wrote that no file holds once it
    settled (:func:`sessions.unheld`)."""
    writers = _Writers(lake, per_rank, text, window)
    remembered = _Labels(lake, labels)
    try:
        with _collector_paused(), _system_allocator():
            for run in runs:
                _export_run(run, writers, remembered, text)
        writers.finish()
    except BaseException:
        writers.abort()
        # The files committed before it failed (per-rank: earlier logs') still take their sessions
        # from older files; the failure is what the caller hears.
        with contextlib.suppress(Exception):
            writers.settle()
        raise
    writers.settle()
    lost = set().union(
        *(sessions.unheld(lake, run_id, placed) for run_id, placed in writers.placed.items())
    )
    remembered.remember()
    result = writers.result
    result.runs = runs
    result.remembered = remembered.remembered()
    return result, lost


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while the events are read: the rows, events and frames of a pass
    are many short-lived containers without cycles (reference counting frees them), and the
    collector's passes over them were a sixth of an export's CPU. It is as it was afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _SystemAllocator:
    """Arrow's buffers from the C library's allocator while rows are converted and written.

    Arrow's default (mimalloc) gives a batch's freed buffers back to the system and takes fresh huge
    pages for the next, which the kernel zeroes: 8 % of an export's CPU went to that. The default is
    put back when the last export of the process ends (exports in two threads share the switch), and
    buffers made meanwhile go back to the allocator they came from."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exports = 0
        self.before: pa.MemoryPool | None = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self.lock:
            if not self.exports:
                self.before = pa.default_memory_pool()
                pa.set_memory_pool(pa.system_memory_pool())
            self.exports += 1
        try:
            yield
        finally:
            with self.lock:
                self.exports -= 1
                if not self.exports and self.before is not None:
                    pa.set_memory_pool(self.before)
                    self.before = None


_system_allocator = _SystemAllocator()


class _Labels:
    """The labels each run's sessions get over their own: those given to this export (``--labels``),
    remembered in the lake for the run; without them, those remembered. So exporting a run again
    without ``--labels`` (a straggler's export at its end, a re-export) keeps its ``team`` and
    ``model``."""

    def __init__(self, lake: Lake, given: dict[str, str] | None) -> None:
        """``given``: None where ``--labels`` was not given; empty, given to forget the run's."""
        self.lake, self.given = lake, given
        self.found: dict[str, dict[str, str]] = {}

    def __call__(self, run_id: str) -> dict[str, str]:
        if self.given is not None:
            self.found[run_id] = self.given
        elif run_id not in self.found:
            self.found[run_id] = self._read(run_id)
        return self.found[run_id]

    def _read(self, run_id: str) -> dict[str, str]:
        try:
            with self.lake.fs.open_input_stream(self.lake.labels_path(run_id)) as stream:
                found = json.loads(bytes(stream.read()))["labels"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}  # none remembered (or unreadable: the export goes on without)
        if not isinstance(found, dict):
            return {}
        return {str(k): str(v) for k, v in found.items()}

    def remembered(self) -> dict[str, dict[str, str]]:
        """The labels read from the lake, by run id (none when ``--labels`` was given)."""
        if self.given is not None:
            return {}
        return {run: found for run, found in self.found.items() if found}

    def remember(self) -> None:
        if self.given is None:
            return
        text = json.dumps({"labels": dict(sorted(self.given.items()))}) + "\n"
        for run_id in sorted(self.found):
            self.lake.write(
                self.lake.labels_path(run_id), lambda stream: stream.write(text.encode())
            )


def _export_run(run: Run, writers: _Writers, labels: _Labels, text: TextPolicy) -> None:
    rows = SessionRows(writers.sink, text, run_id=run.path.name, labels=labels)
    stream = run.events
    if isinstance(stream, EventStream):
        for file in stream.files:
            before = stream.stats.skipped
            rows.default_pid = _pid_of(file)
            rows.default_run = run.path.name
            for event in stream.of_file(file):
                rows.add(event)
            rows.end_of_log(stream.stats.skipped - before)
            if writers.per_rank:  # this log's files are whole: write them now, few files stay open
                writers.finish()
    else:
        for event in stream:
            rows.add(event)
        rows.end_of_log()
    writers.result.sessions += rows.sessions


def _pid_of(file: Path) -> int:
    """The pid in a log's name (``rank00003-12345.jsonl``), 0 where the name has none."""
    if log_rank(file) is None:
        return 0
    digits = file.stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else 0
