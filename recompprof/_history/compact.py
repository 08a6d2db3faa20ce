"""``recompprof history compact``: one file per table and day, because query time follows the number of
files, not their bytes (docs/history.md, "Compaction").

Each raw day up to ``--through`` becomes ``v1-daily/<table>/dt=D/part-0.parquet``, its rows sorted by
what queries filter on (job, then frame, then time), beside a ``_sources`` list of the raw files it
covered; then the ``_through`` marker moves, and readers take the compacted day instead of its raw
files. Raw files are never deleted (the compacted root can always be rebuilt from them). A raw file that
arrives after its day was compacted (a long job's day, a straggler; or one rewritten or deleted by a
session exported again) is not read until the next compaction finds it (the day's listing differs
from ``_sources``) and compacts the day again; until then every query names it in a warning.
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from recompprof._history import daily, health, scratch
from recompprof._history.columns import RENAMED, TABLES
from recompprof._history.health import Skipped
from recompprof._history.layout import Lake, LakeFile
from recompprof._history.names import LakeError
from recompprof._history.tables import SCHEMAS, legacy_fields, writer_options

# Sorted by what queries filter and group on: the ClickHouse lesson, a sort key led by the most
# filtered column, so row-group statistics prune.
SORT_KEYS = {
    "runs": ("job", "start_time", "run_id", "rank", "pid"),
    "compiles": ("job", "frame_key", "time", "run_id", "rank"),
    "guard_failures": ("job", "frame_key", "time", "run_id", "rank"),
    "graph_breaks": ("job", "frame_key", "time", "run_id", "rank"),
}
ROW_GROUP = 128 * 1024
# DuckDB's memory while it sorts a day: past it, the sort spills to a temporary directory.
MEMORY_LIMIT = "1GB"
# Snappy: decoded in about 60% of zstd's CPU, so a question over a compacted month costs ~15% less
# CPU for ~10% more bytes; every engine the printed views target reads it (docs/history.md).
COMPRESSION = "snappy"
GRACE_DAYS = 3  # --through's default: days older than this are taken as closed
# A hidden temporary file older than this was left by an exporter killed mid-write: an export
# writes each file within minutes.
TEMPORARY_AGE = datetime.timedelta(days=1)


@dataclass
class Compaction:
    """What one compaction did."""

    through: datetime.date | None
    days: list[tuple[str, datetime.date, int, int]] = field(
        default_factory=list
    )  # table, day, files, rows
    redone: list[tuple[str, datetime.date]] = field(
        default_factory=list
    )  # days whose raw files changed after they were compacted
    skipped: list[Skipped] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # temporary files killed exporters left


def _sources(files: list[LakeFile]) -> set[daily.Source]:
    return {(f.path.rpartition("/")[2], f.size) for f in files}


def compact(lake: Lake, through: datetime.date | None, *, check: bool = False) -> Compaction:
    """Compact every raw day up to ``through`` not compacted yet, and every compacted day whose raw
    files changed since (``check``, kept for callers, changes nothing: that is always done)."""
    del check
    old = daily.through(lake)
    target = max(d for d in (old, through) if d is not None) if (old or through) else None
    done = Compaction(target)
    now = datetime.datetime.now(datetime.timezone.utc)
    for path in lake.temporaries(now - TEMPORARY_AGE):
        lake.delete(path)
        done.removed.append(path)
    if target is None:
        return done
    for table in TABLES:
        by_day: dict[datetime.date, list[LakeFile]] = defaultdict(list)
        for f in lake.files(table):
            if f.day <= target:
                by_day[f.day].append(f)
        for day, files in sorted(by_day.items()):
            if old is not None and day <= old:
                # Late files (a long job's day, a straggler, a session re-exported) are taken in by
                # every compaction: a day whose raw listing changed is compacted again.
                if daily.read_sources(lake, table, day) == _sources(files):
                    continue
                done.redone.append((table, day))
            rows = _compact_day(lake, table, day, files, done)
            done.days.append((table, day, len(files), rows))
    if target != old:
        daily.set_through(lake, target)
    return done


def _compact_day(
    lake: Lake, table: str, day: datetime.date, files: list[LakeFile], done: Compaction
) -> int:
    checked = health.check(lake, table, [f.path for f in files])
    path = daily.part_path(lake, table, day)
    failed = 0  # reads of the day that failed while each of its files decoded alone
    while True:
        try:
            rows = _copy_sorted(lake, table, path, checked)
            break
        except (duckdb.Error, OSError, pa.ArrowException, ValueError) as error:
            bad = _undecodable(lake, table, checked.good)
            if not bad:
                # An object a running export replaced while the day was read: read the day again.
                failed += 1
                if failed < health.reads(lake):
                    continue
                raise LakeError(f"{lake.uri}: cannot compact {table} {day}: {error}") from error
            checked.good = [p for p in checked.good if p not in {s.path for s in bad}]
            checked.skipped.extend(bad)
    done.skipped.extend(checked.skipped)
    # Every raw file is recorded, the unreadable ones too: a later compaction looks for new files,
    # and readers say the unreadable ones from the compacted file's footer.
    daily.write_sources(lake, table, day, _sources(files))
    return rows


def _copy_sorted(lake: Lake, table: str, path: str, checked: health.Checked) -> int:
    """Write the day's readable files as one sorted file at ``path``: DuckDB streams them and sorts in
    bounded memory (spilling to a temporary directory), and pyarrow writes its sorted output one row
    group at a time, so no day is held in memory whole. pyarrow writes, not DuckDB's COPY, because
    COPY writes no page checksums (DuckDB 2.0 has no option for them), and without them a byte
    flipped behind a good footer decodes to a wrong value that ``history verify`` cannot see. The
    known schema's columns come first, in its types (null where an older exporter's files lack one),
    then any a newer exporter added."""
    read = _day_schema(table, checked)
    source = ds.dataset(checked.good, schema=read, filesystem=lake.fs, format=_VERIFIED)
    # Written under the current names: an older exporter's renamed column is taken as its new one.
    schema, columns = _written(table, read)
    keys = ", ".join(f'"{k}"' for k in SORT_KEYS[table] if k in schema.names)
    footer = {}
    if checked.skipped:
        lost = json.dumps([s.path.rpartition("/")[2] for s in checked.skipped])
        footer[health.UNREADABLE_KEY] = lost.encode()
    options = {**writer_options(schema), "compression": COMPRESSION}
    rows = 0
    with scratch.directory("compact") as work:
        con = duckdb.connect(config={"temp_directory": work, "memory_limit": MEMORY_LIMIT})
        try:
            con.register("day_rows", source)
            order = f" ORDER BY {keys}" if keys else ""
            query = f"SELECT {columns} FROM day_rows{order}"
            reader = con.sql(query).to_arrow_reader(ROW_GROUP)

            def write(stream: Any) -> None:
                nonlocal rows
                with pq.ParquetWriter(stream, schema, **options) as writer:
                    for group in _row_groups(reader):
                        writer.write_table(group.cast(schema), row_group_size=ROW_GROUP)
                        rows += group.num_rows
                    if footer:
                        writer.add_key_value_metadata(footer)

            lake.write(path, write)
        finally:
            con.close()
    return rows


def _row_groups(reader: pa.RecordBatchReader) -> Iterator[pa.Table]:
    """The reader's batches gathered into tables of ROW_GROUP rows (the last one fewer)."""
    held: list[pa.RecordBatch] = []
    count = 0
    for piece in reader:
        held.append(piece)
        count += piece.num_rows
        if count >= ROW_GROUP:
            table = pa.Table.from_batches(held)
            yield table.slice(0, ROW_GROUP)
            rest = table.slice(ROW_GROUP)
            held, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(held, schema=reader.schema)


def _day_schema(table: str, checked: health.Checked) -> pa.Schema:
    """The known schema of ``table``, then the old names of renamed columns some files hold, then the
    columns a newer exporter added (as first seen)."""
    known = SCHEMAS[table]
    legacy = [f for f in legacy_fields(table) if f.name in checked.present]
    seen = {*known.names, *(f.name for f in legacy)}
    extra: dict[str, pa.DataType] = {}
    for columns in sorted(checked.schemas, key=str):
        for name, kind in columns:
            if name not in seen and name not in extra:
                extra[name] = kind
    return pa.schema([*known, *legacy, *(pa.field(n, k) for n, k in extra.items())])


def _written(table: str, read: pa.Schema) -> tuple[pa.Schema, str]:
    """The schema a compacted day is written in (``read`` without the old names) and the select list
    that gives it: each renamed column from its new name, else its old one."""
    renamed = RENAMED.get(table, {})
    old_of = {new: old for old, new in renamed.items() if old in read.names}
    out = []
    for name in read.names:
        if name in renamed:
            continue
        quoted = f'"{name}"'
        out.append(
            f'COALESCE({quoted}, "{old_of[name]}") AS {quoted}' if name in old_of else quoted
        )
    return pa.schema([f for f in read if f.name not in renamed]), ", ".join(out)


# Raw files are read with each page's checksum verified: a page damaged behind a good footer stops the
# compaction of its day, which then leaves that file out, instead of writing its wrong values into
# the compacted file under a checksum of their own (where `history verify` could no longer see them).
_VERIFIED = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
)


def _undecodable(lake: Lake, table: str, paths: list[str]) -> list[Skipped]:
    """The files whose footer reads but whose pages do not decode, or whose checksums do not match
    (``history verify``'s reading: an object replaced by a running export while it was read is read
    again, not called unreadable)."""
    bad = []
    for path in paths:
        why = health.undecodable(lake, path)
        if why is not None:
            bad.append(Skipped(table, path, "unreadable", why))
    return bad


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
