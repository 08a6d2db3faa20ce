"""The four views a question reads, and which files each is made of (the readers' one rule).

A table is its compacted days up to the ``_through`` marker and its raw days after it
(:mod:`recompprof._history.daily`); each view names every known column, so a file of an older exporter
reads its missing columns as null and a newer one's extra columns are ignored. :func:`select` applies
that rule to a lake's listing for the embedded engine; :func:`printed` writes the same rule as view
definitions for a fleet's own engine (Spark, Trino, ClickHouse or DuckDB; each spelled by its module of
:mod:`recompprof._history.dialects`), with the marker of the moment baked in: run them again after
each compaction.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from recompprof._history import health
from recompprof._history.columns import COLUMNS, RENAMED, TABLES
from recompprof._history.dialects.base import Dialect, Where, literal
from recompprof._history.local import File, LocalLake
from recompprof._history.names import DAILY_ROOT, ROOT
from recompprof._history.questions import READS

if TYPE_CHECKING:
    from recompprof._history.layout import Lake, LakeFile

# What the questions read: a local lake (os and DuckDB) or an object store (pyarrow's filesystem).
Readable = Union[LocalLake, "Lake"]


@dataclass
class Selection:
    """What a lake holds for a query: the marker, and each table's checked files."""

    through: datetime.date | None
    tables: dict[str, health.Checked] = field(default_factory=dict)
    # The DuckDB connection that read a local lake's footers: the engine queries through it, as its
    # metadata cache holds them (each footer is parsed once per command).
    connection: Any = None
    # An object store's files as listed just before the selection was made (path -> size and
    # modification time, :func:`stamps`): what an answer is checked against (``Engine.settled``).
    # None for a local lake, whose files are read again through links instead.
    stamps: dict[str, tuple[int, int]] | None = None

    @property
    def skipped(self) -> list[health.Skipped]:
        return [s for checked in self.tables.values() for s in checked.skipped]


# Hadoop's names for S3 (Spark's own docs give s3a://): the same bucket to pyarrow's filesystem.
_S3_ALIASES = ("s3a://", "s3n://")


def reader(uri: str) -> Readable:
    """The lake at ``uri`` for the questions: a local path read with ``os`` and DuckDB alone, an
    object store through pyarrow (:func:`open_lake`); raises one line when it is not a lake."""
    if "://" not in uri or uri.startswith("file://"):
        return LocalLake.at(uri)
    return open_lake(uri)


def open_lake(uri: str) -> Lake:
    """The lake at ``uri`` (pyarrow's filesystems: for writing, and object stores); raises LakeError
    (one line) when the path does not exist."""
    import pyarrow.fs as pafs

    from recompprof._history.layout import Lake
    from recompprof._history.names import LakeError

    lake = Lake("s3://" + uri.partition("://")[2] if uri.startswith(_S3_ALIASES) else uri)
    lake.uri = uri  # said as given
    try:
        info = lake.fs.get_file_info(lake.base)
    except OSError as error:
        raise LakeError(f"{uri}: cannot open the lake: {' '.join(str(error).split())}") from error
    if info.type == pafs.FileType.NotFound:
        raise LakeError(f"{uri}: no such lake (the path does not exist)")
    if info.type == pafs.FileType.File:
        raise LakeError(f"{uri}: is a file; give the lake's root folder")
    lake.refuse_a_root()
    return lake


def marker(lake: Readable) -> datetime.date | None:
    """The lake's compaction marker (None before the first compaction)."""
    if isinstance(lake, LocalLake):
        return lake.through()
    from recompprof._history import daily

    return daily.through(lake)


# Listings of the lake a question makes before it takes one that moved under it (see select()).
LISTINGS = 3


def select(lake: Readable, tables: tuple[str, ...] = TABLES) -> Selection:
    """Each table's files by the reader rule, their footers read.

    The rule is read in steps (the marker, then each table's files, then their footers), and the lake
    may change between them: a compaction moves the marker, a rebuild deletes the compacted days
    (``_through`` first), a whole-run export deletes the run's per-rank files. A listing whose marker
    is not the lake's any more, or whose file is gone by the time its footer is read, is not the lake
    at any one moment; it is listed again (up to :data:`LISTINGS` times), so that a day is never
    left out, nor a file called unreadable, for having been moved.
    """
    for _ in range(LISTINGS - 1):
        selection = _select_once(lake, tables)
        if not _moved(lake, selection):
            return selection
        if selection.connection is not None:
            selection.connection.close()
    return _select_once(lake, tables)


def _moved(lake: Readable, selection: Selection) -> bool:
    """Whether the lake changed under ``selection``: its marker moved, or a file left out as
    unreadable is gone."""
    if marker(lake) != selection.through:
        return True
    unreadable = [s.path for s in selection.skipped if s.why == "unreadable"]
    if not unreadable:
        return False
    if isinstance(lake, LocalLake) or lake.local:
        return not all(os.path.exists(p) for p in unreadable)
    import pyarrow.fs as pafs

    try:
        infos = lake.fs.get_file_info(unreadable)
    except OSError:
        return False
    return any(info.type == pafs.FileType.NotFound for info in infos)


def _select_once(lake: Readable, tables: tuple[str, ...]) -> Selection:
    if isinstance(lake, LocalLake):
        return _select_local(lake, tables)
    if lake.local:
        return _select_local(LocalLake(lake.uri, lake.base), tables)
    from recompprof._history import daily

    marker = daily.through(lake)
    selection = Selection(marker, stamps=stamps(lake, tables))
    bad = health.read_verified(lake)
    for table in tables:
        compacted = []
        if marker is not None:
            compacted = [p for d, (p, _) in daily.compacted(lake, table).items() if d <= marker]
        listing = lake.files(table)
        raw = [f.path for f in listing if marker is None or f.day > marker]
        checked = health.check(lake, table, sorted(compacted) + raw, bad)
        if marker is not None:
            checked.late = _late(
                [f for f in listing if f.day <= marker],
                functools.partial(daily.read_sources, lake, table),
            )
        selection.tables[table] = checked
    return selection


def stamps(lake: Lake, tables: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Each file under ``tables``' folders of both roots, with its size and modification time (ns):
    one recursive listing per folder (an object store lists a thousand objects per request)."""
    import pyarrow.fs as pafs

    found: dict[str, tuple[int, int]] = {}
    for table in tables:
        for root in (ROOT, DAILY_ROOT):
            for info in lake.listed(f"{lake.base}/{root}/{table}", f"{root}/{table}"):
                if info.type == pafs.FileType.File:
                    found[info.path] = (info.size or 0, info.mtime_ns or 0)
    return found


def _select_local(lake: LocalLake, tables: tuple[str, ...]) -> Selection:
    """:func:`select` for a local lake: listed with ``os``, footers read by DuckDB in one query."""
    marker = lake.through()
    selection = Selection(marker)
    bad = health.read_verified(lake)
    con = selection.connection = connect()
    try:
        listed: dict[str, tuple[list[str], list[File]]] = {}
        for table in tables:
            compacted = []
            if marker is not None:
                compacted = [p for d, p in lake.compacted(table).items() if d <= marker]
            listing = lake.files(table)
            raw = [f.path for f in listing if marker is None or f.day > marker]
            listed[table] = (sorted(compacted) + raw, listing)
        # Every table's footers in one read (each read is a query DuckDB plans: a few ms apiece)
        footers = health.read_footers(
            con, [p for paths, _ in listed.values() for p in paths if p not in bad]
        )
        for table, (paths, listing) in listed.items():
            checked = health.check_footers(con, table, paths, READS[table], bad, footers)
            if marker is not None:
                checked.late = _late(
                    [f for f in listing if f.day <= marker],
                    functools.partial(lake.sources, table),
                )
            selection.tables[table] = checked
    except BaseException:
        con.close()
        raise
    return selection


def connect() -> Any:
    """An in-memory DuckDB set up for the questions; raises one line when DuckDB is not installed."""
    from recompprof._history import duck

    try:
        duckdb = duck.load()
    except ImportError:
        from recompprof._errors import CommandError

        raise CommandError(
            "recompprof history needs DuckDB: pip install 'recompprof[history]'"
        ) from None
    con = duckdb.connect(":memory:")
    # Every query binds the views again; without the cache each bind re-reads the footers.
    con.execute("SET parquet_metadata_cache = true")
    # DuckDB draws its progress bar on stdout, where the answer (json, csv) goes: never drawn
    # (printing off too, as SET progress_bar_time turns the bar itself back on).
    con.execute("SET enable_progress_bar = false")
    con.execute("SET enable_progress_bar_print = false")
    return con


def every_file(lake: Lake, table: str) -> list[str]:
    """Every data file of ``table``, read by the queries or not (compacted days, raw files): what
    ``history verify`` decodes."""
    from recompprof._history import daily

    compacted = sorted(p for p, _ in daily.compacted(lake, table).values())
    return compacted + [f.path for f in lake.files(table)]


def _late(
    files: list[LakeFile] | list[File],
    sources: Callable[[datetime.date], set[tuple[str, int]] | None],
) -> list[str]:
    """Raw files of compacted days (``files``) that their day's ``_sources`` does not list (by name
    and size: a file exported anew since is late too)."""
    by_day: dict[datetime.date, list[tuple[str, int]]] = {}
    for f in files:
        by_day.setdefault(f.day, []).append((f.path, f.size))
    late: list[str] = []
    for day, day_files in sorted(by_day.items()):
        covered = sources(day) or set()
        late.extend(
            path for path, size in day_files if (path.rpartition("/")[2], size) not in covered
        )
    return late


def _columns(table: str, present: set[str] | None, dialect: Dialect) -> str:
    """The view's column list: every known column, null where no file has it, a renamed one from its
    old name too where a file has that (``present`` None: the source gives both names, as a printed
    view's does)."""
    old_of = {new: old for old, new in RENAMED.get(table, {}).items()}
    out = []
    for column in COLUMNS[table]:
        name, old = column.name, old_of.get(column.name)
        has_new = present is None or name in present
        has_old = old is not None and (present is None or old in present)
        if has_new and has_old:
            out.append(f"COALESCE({name}, {old}) AS {name}")
        elif has_new:
            out.append(name)
        elif has_old:
            out.append(f"{old} AS {name}")
        else:
            out.append(f"CAST(NULL AS {dialect.types[column.kind]}) AS {name}")
    return ", ".join(out)


def _local_columns(table: str, checked: health.Checked, questions_only: bool = False) -> str:
    """A local view's column list: the files' columns in the order first seen (an older exporter's
    renamed column as its new name, from either where files have both), then each column the
    questions read that no file has yet, as a typed null (the full vocabulary is not imported).
    ``questions_only``: the columns the questions read (:data:`READS`) and no other."""
    renamed = RENAMED.get(table, {})
    old_of = {new: old for old, new in renamed.items()}
    out = []
    for name in checked.order:
        if questions_only and renamed.get(name, name) not in READS[table]:
            continue
        if name in renamed:  # an old name
            if renamed[name] not in checked.present:
                out.append(f"{_quoted_name(name)} AS {_quoted_name(renamed[name])}")
        elif old_of.get(name) in checked.present:
            old = _quoted_name(old_of[name])
            out.append(f"COALESCE({_quoted_name(name)}, {old}) AS {_quoted_name(name)}")
        else:
            out.append(_quoted_name(name))
    for name, duck_type in READS[table].items():
        if name not in checked.present and old_of.get(name) not in checked.present:
            out.append(f"CAST(NULL AS {duck_type}) AS {_quoted_name(name)}")
    return ", ".join(out)


def _quoted_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def duckdb_views(
    lake: Readable,
    selection: Selection,
    questions_only: bool = False,
    links: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, object]]:
    """The statements that create the embedded engine's views, and the Arrow datasets they read
    (for an object store, which DuckDB reaches through pyarrow's filesystem). ``questions_only``: a
    local lake's views give only the columns the canonical questions read: DuckDB binds a view's
    every column on each query that names it (half a millisecond for a table's 80 columns, on each of
    a digest's twenty reads of a view), and ``history sql`` alone reads the others. ``links``: a local
    file's path -> the hard link read instead (:mod:`recompprof._history.pins`)."""
    statements: list[str] = []
    datasets: dict[str, object] = {}
    links = links or {}
    for table, checked in selection.tables.items():
        if lake.local:
            columns = _local_columns(table, checked, questions_only)
        else:
            from recompprof._history.dialects import DUCKDB

            columns = _columns(table, checked.present if checked.good else set(), DUCKDB)
        if not checked.good:
            statements.append(
                f"CREATE OR REPLACE VIEW {table} AS SELECT {columns}, CAST(NULL AS DATE) AS dt WHERE false"
            )
            continue
        if lake.local:
            files = ", ".join(literal(links.get(p, p)) for p in checked.good)
            union = "false" if checked.uniform else "true"
            source = (
                f"read_parquet([{files}], hive_partitioning = true, union_by_name = {union}, "
                "hive_types = {'dt': 'DATE'})"
            )
        else:
            source = f"_files_{table}"
            datasets[source] = _dataset(lake, table, checked.good)  # type: ignore[arg-type]
        statements.append(f"CREATE OR REPLACE VIEW {table} AS SELECT {columns}, dt FROM {source}")
    return statements, datasets


def _dataset(lake: Lake, table: str, paths: list[str]) -> object:
    """An object store's files as one Arrow dataset, ``dt`` read from each file's folder."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from recompprof._history.tables import SCHEMAS, legacy_fields

    schema = pa.schema([*SCHEMAS[table], *legacy_fields(table), pa.field("dt", pa.date32())])
    parts = []
    for base in (f"{lake.base}/{DAILY_ROOT}/{table}", f"{lake.base}/{ROOT}/{table}"):
        mine = [p for p in paths if p.startswith(base + "/")]
        if mine:
            parts.append(
                ds.dataset(
                    mine,
                    schema=schema,
                    filesystem=lake.fs,
                    format="parquet",
                    partitioning=ds.partitioning(pa.schema([("dt", pa.date32())]), flavor="hive"),
                    partition_base_dir=base,
                )
            )
    return parts[0] if len(parts) == 1 else ds.dataset(parts)


# ---- the same views, printed for a fleet's engine ------------------------------------------------


def printed(where: Where, dialect: str, through: datetime.date | None) -> str:
    """View definitions of the four tables for ``dialect``, obeying the marker ``through``: a table is
    its compacted days up to it and its raw days after it (before any compaction, its raw days). Only
    the lake's URI is needed (``where``): nothing is opened."""
    from recompprof._history.dialects import DIALECTS
    from recompprof._history.names import LakeError

    spelling = DIALECTS.get(dialect)
    if spelling is None:
        raise LakeError(f"no view definitions for {dialect!r}")
    out = [_marker_comment(through), spelling.preamble(where)]
    for table in TABLES:
        cols = _columns(table, None, spelling) + ", dt"
        parts = []
        for suffix, under, cut in _roots(table, through, spelling.date):
            setup, source = spelling.source(where, table, suffix, under, sourced(table))
            out.append(setup)
            parts.append(f"SELECT {cols} FROM {source}{cut}")
        out.append(spelling.view.format(table=table, body="\nUNION ALL\n".join(parts)))
    return "".join(out)


def sourced(table: str) -> list[tuple[str, str]]:
    """The columns a printed view's source gives, name and kind: every known column, then each old
    name an older exporter's files may hold (:data:`~recompprof._history.columns.RENAMED`), so
    that a view over files of both versions reads either (an engine reads a declared column no file
    has as null)."""
    kinds = {c.name: c.kind for c in COLUMNS[table]}
    legacy = [(old, kinds[new]) for old, new in RENAMED.get(table, {}).items()]
    return [*((c.name, c.kind) for c in COLUMNS[table]), *legacy]


def _roots(table: str, through: datetime.date | None, date: str) -> list[tuple[str, str, str]]:
    """The roots a table's view reads, each with its suffix, path under the lake and its days' filter."""
    raw = f"{ROOT}/{table}"
    if through is None:
        return [("raw", raw, "")]
    d = date.format(d=through.isoformat())
    return [
        ("daily", f"{DAILY_ROOT}/{table}", f" WHERE dt <= {d}"),
        ("raw", raw, f" WHERE dt > {d}"),
    ]


def _marker_comment(through: datetime.date | None) -> str:
    if through is None:
        return "-- not compacted yet: every view reads the raw files (re-create them after `compact`)\n"
    return (
        f"-- compacted through {through}: days up to it from {DAILY_ROOT}/, later days raw "
        "(re-create these views after each `compact`)\n"
    )
