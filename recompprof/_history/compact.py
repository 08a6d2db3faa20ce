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
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recompprof._history import daily, health
from recompprof._history.health import Skipped
from recompprof._history.layout import Lake, LakeFile
from recompprof._history.tables import SCHEMAS, TABLES

# Sorted by what queries filter and group on: the ClickHouse lesson, a sort key led by the most
# filtered column, so row-group statistics prune.
SORT_KEYS = {
    "runs": ("job", "start_time", "run_id", "rank", "pid"),
    "compiles": ("job", "frame_key", "time", "run_id", "rank"),
    "guard_failures": ("job", "frame_key", "time", "run_id", "rank"),
    "graph_breaks": ("job", "frame_key", "time", "run_id", "rank"),
}
ROW_GROUP = 128 * 1024
# Snappy: decoded in about 60% of zstd's CPU, so a question over a compacted month costs ~15% less
# CPU for ~10% more bytes; every engine the printed views target reads it (docs/history.md).
COMPRESSION = "snappy"
GRACE_DAYS = 3  # --through's default: days older than this are taken as closed


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


def _sources(files: list[LakeFile]) -> set[daily.Source]:
    return {(f.path.rpartition("/")[2], f.size) for f in files}


def compact(lake: Lake, through: datetime.date | None, *, check: bool = False) -> Compaction:
    """Compact every raw day up to ``through`` not compacted yet, and every compacted day whose raw
    files changed since (``check``, kept for callers, changes nothing: that is always done)."""
    del check
    old = daily.through(lake)
    target = max(d for d in (old, through) if d is not None) if (old or through) else None
    done = Compaction(target)
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
    parts = []
    for path in checked.good:
        try:
            with lake.fs.open_input_file(path) as handle:
                parts.append(pq.ParquetFile(handle).read())
        except (OSError, pa.ArrowException, ValueError) as error:
            checked.skipped.append(Skipped(table, path, "unreadable", str(error)[:200]))
    done.skipped.extend(checked.skipped)
    merged = _merged(table, parts)
    if checked.skipped:
        lost = json.dumps([s.path.rpartition("/")[2] for s in checked.skipped]).encode()
        merged = merged.replace_schema_metadata({health.UNREADABLE_KEY: lost})
    lake.write(
        daily.part_path(lake, table, day),
        lambda stream: pq.write_table(
            merged, stream, compression=COMPRESSION, row_group_size=ROW_GROUP
        ),
    )
    # Every raw file is recorded, the unreadable ones too: --check looks for new files, and readers
    # say the unreadable ones from the compacted file's footer.
    daily.write_sources(lake, table, day, _sources(files))
    return merged.num_rows


def _merged(table: str, parts: list[pa.Table]) -> pa.Table:
    """The day's rows in the known schema (extra columns of a newer exporter kept after it), sorted."""
    known = SCHEMAS[table]
    if not parts:
        return known.empty_table()
    merged = pa.concat_tables(parts, promote_options="permissive")
    columns, fields = [], []
    for f in known:
        if f.name in merged.column_names:
            columns.append(pc.cast(merged[f.name], f.type))
        else:
            columns.append(pa.nulls(merged.num_rows, f.type))
        fields.append(f)
    for name in merged.column_names:
        if name not in known.names:
            columns.append(merged[name])
            fields.append(merged.schema.field(name))
    out = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    keys = [(k, "ascending") for k in SORT_KEYS[table] if k in out.column_names]
    return out.sort_by(keys) if keys else out
