"""``recompprof export``: runs -> the lake's Parquet files (docs/history.md, "Export").

A run is read once, log by log (``recompprof._analysis.runs``: event logs or a ``TORCH_TRACE``), its
events turned into rows by :class:`recompprof._history.rows.SessionRows`, and the rows written in
bounded batches (one row group each) to one file per table, UTC day, run and writer. Every file is
written whole and then made visible (:class:`recompprof._history.layout.PendingFile`), and its name is a
pure function of what was exported, so exporting the same input again writes the same bytes to the
same names. A run exported whole (writer ``all``) replaces the per-rank files its sessions wrote at
their end: they hold a subset of the same logs' rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recompprof._analysis.runs import EventStream, Run, load
from recompprof._eventlog.writer import log_rank
from recompprof._history.layout import ALL_RANKS, Lake, PendingFile, writer_of
from recompprof._history.rows import Buffer, Repeated, SessionRows, TextPolicy, buffer
from recompprof._history.tables import SCHEMAS, TABLES, TIMESTAMP

BATCH_ROWS = 8192  # rows per row group: what one table's buffer holds at most
COMPRESSION = "zstd"


@dataclasses.dataclass
class ExportResult:
    """What an export wrote: files by table, rows by table, sessions, and files it replaced."""

    files: dict[str, list[str]] = dataclasses.field(
        default_factory=lambda: {table: [] for table in TABLES}
    )
    rows: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    sessions: int = 0
    replaced: list[str] = dataclasses.field(default_factory=list)
    runs: list[Run] = dataclasses.field(default_factory=list)


class _Output:
    """One file being written: its buffered rows and its Parquet writer (opened at the first batch)."""

    def __init__(self, lake: Lake, table: str, path: str, text: TextPolicy) -> None:
        self.lake, self.table, self.path = lake, table, path
        self.schema = SCHEMAS[table]
        # A full buffer is written at the next row, not at its last: a limit hit still fills in the
        # compile row just before it.
        self.rows = buffer(table, text, self.flush, BATCH_ROWS)
        self.count = 0
        self.pending: PendingFile | None = None
        self.writer: pq.ParquetWriter | None = None

    def flush(self) -> None:
        if not self.rows.size:
            return
        if self.writer is None:
            self.pending = self.lake.create(self.path)
            self.writer = pq.ParquetWriter(
                self.pending.stream,
                self.schema,
                compression=COMPRESSION,
                write_statistics=True,
                write_page_checksum=True,  # history verify tells a damaged page from a good one
            )
        self.count += self.rows.size
        self.writer.write_table(batch(self.schema, self.rows.columns()))

    def close(self) -> None:
        """Write what is buffered and finish the file (not visible yet: :meth:`commit`)."""
        self.flush()
        if self.writer is not None:
            self.writer.close()

    def commit(self) -> None:
        if self.pending is not None:
            self.pending.commit()

    def abort(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(OSError):
                self.writer.close()
        if self.pending is not None:
            self.pending.abort()


def batch(schema: pa.Schema, columns: list[Sequence[Any]]) -> pa.Table:
    """Columns (``schema``'s, in order, times in seconds) as one Arrow table of ``schema``: each
    column converted by Arrow (a :class:`Repeated` one: each value once, then taken), times to
    microseconds there too."""
    arrays = []
    taken: dict[int, pa.Array] = {}  # the indices of Repeated columns, converted once
    for field, column in zip(schema, columns, strict=True):
        if isinstance(column, Repeated):
            indices = taken.get(id(column.indices))
            if indices is None:
                indices = taken[id(column.indices)] = pa.array(column.indices, pa.int32())
            arrays.append(_array(field.type, column.values).take(indices))
        else:
            arrays.append(_array(field.type, column))
    return pa.Table.from_arrays(arrays, schema=schema)


def _array(kind: pa.DataType, column: Sequence[Any]) -> pa.Array:
    if kind == TIMESTAMP:
        seconds = pa.array(column, pa.float64())
        micros = pc.cast(pc.round(pc.multiply(seconds, 1e6)), pa.int64())
        return micros.cast(TIMESTAMP)
    return pa.array(column, kind)


class _Writers:
    """The files an export writes, by (table, day, run, writer); rows go to them as they come."""

    def __init__(self, lake: Lake, per_rank: bool, text: TextPolicy) -> None:
        self.lake, self.per_rank, self.text = lake, per_rank, text
        self.outputs: dict[tuple[str, datetime.date, str, str], _Output] = {}
        self.result = ExportResult()
        self.run_ids: set[str] = set()

    def sink(self, table: str, run_id: str, rank: int, pid: int, day: datetime.date) -> Buffer:
        """What takes one session's rows of ``table`` for ``day``: its file's buffer."""
        writer = writer_of(rank, pid) if self.per_rank else ALL_RANKS
        key = (table, day, run_id, writer)
        output = self.outputs.get(key)
        if output is None:
            self.run_ids.add(run_id)
            output = self.outputs[key] = _Output(
                self.lake, table, self.lake.path_of(table, day, run_id, writer), self.text
            )
        return output.rows

    def finish(self, keys: Iterable[tuple[str, datetime.date, str, str]] | None = None) -> None:
        """Finish and commit the files of ``keys`` (all when None): each appears whole, or not at all."""
        chosen = list(self.outputs) if keys is None else list(keys)
        outputs = [self.outputs.pop(key) for key in chosen]
        try:
            for output in outputs:
                output.close()
            for output in outputs:
                output.commit()
                self.result.files[output.table].append(output.path)
                self.result.rows[output.table] += output.count
        except BaseException:
            for output in outputs:
                output.abort()
            raise

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
) -> ExportResult:
    """Export the runs at ``paths`` (run directories, event logs or TORCH_TRACE directories) to the
    lake at ``uri``; raises ``RunError`` for a path that is no run and ``LakeError`` for a lake it
    cannot write (files already in the lake stay as they were)."""
    runs = [load(path) for path in paths]
    lake = Lake(uri)
    text = text or TextPolicy()
    writers = _Writers(lake, per_rank, text)
    try:
        with _collector_paused():
            for run in runs:
                _export_run(run, writers, labels or {}, text)
        writers.finish()
    except BaseException:
        writers.abort()
        raise
    result = writers.result
    result.runs = runs
    if not per_rank:
        result.replaced = _replace_per_rank(lake, writers.run_ids)
    return result


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


def _export_run(run: Run, writers: _Writers, labels: dict[str, str], text: TextPolicy) -> None:
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


def _replace_per_rank(lake: Lake, run_ids: set[str]) -> list[str]:
    """Delete the per-rank files of runs just exported whole: their rows are in the ``all`` files."""
    removed = []
    for table in TABLES:
        for found in lake.files(table):
            if found.run_id in run_ids and found.writer != ALL_RANKS:
                lake.delete(found.path)
                removed.append(found.path)
    return removed
