"""Which files of a table a query can trust: each file's footer and columns, read before a query runs.

A lake can hold a file an exporter left half written (killed before its rename, or a store that lost
its tail), a file another schema version wrote, or a file of a newer exporter with more columns. A
question must then answer from the rest and say what it left out, by name and count: never a
traceback, never a figure silently short. Reading a footer costs well under a millisecond, so every
file is looked at; a file whose pages are broken behind a good footer is caught when the engine reads
it (:mod:`recompprof._history.engine`).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from recompprof._history.columns import RENAMED
from recompprof._history.dialects.base import literal
from recompprof._history.local import LocalLake

if TYPE_CHECKING:
    import pyarrow as pa

    from recompprof._history.layout import Lake

# A lake's files are checked two ways: a local lake's footers by DuckDB (:func:`check_footers`: the
# query path imports no pyarrow), an object store's and compaction's by pyarrow (:func:`check`).

# Written into each compacted file's footer: the raw files its day held that could not be read.
UNREADABLE_KEY = b"recompprof.unreadable"
# At the lake's root: the files `history verify` found bad (path under the lake, size, why). Every
# question leaves out a file listed there while its size is the same (a re-export writes it anew).
VERIFIED = "_verified.json"


@dataclass(frozen=True)
class Skipped:
    """A file left out, and why."""

    table: str
    path: str
    # "unreadable" (corrupt or truncated), "schema" (another schema version), "verify" (found bad by
    # `history verify`: a page that does not decode or whose checksum does not match)
    why: str
    detail: str


@dataclass
class Checked:
    """A table's files, sorted into those a query reads and those it leaves out."""

    table: str
    good: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    # Known columns some readable files lack (an older exporter): null there. Column -> files.
    missing: Counter[str] = field(default_factory=Counter)
    present: set[str] = field(default_factory=set)
    # Raw files that were unreadable when a compacted day was written (from its footer).
    lost_at_compaction: list[str] = field(default_factory=list)
    # Raw files that arrived after their day was compacted: not read until `compact --check`.
    late: list[str] = field(default_factory=list)
    # The distinct column lists (names and types) of the readable files: one means a reader need not
    # reconcile columns across files (DuckDB's union_by_name reads every footer again on each query).
    # Types are Arrow's (check) or DuckDB's names of them (check_footers).
    schemas: set[tuple[tuple[str, Any], ...]] = field(default_factory=set)
    # The columns of the readable files in the order first seen (a view names them in it).
    order: list[str] = field(default_factory=list)

    @property
    def uniform(self) -> bool:
        return len(self.schemas) <= 1


def _compatible(found: pa.DataType, known: pa.DataType) -> bool:
    import pyarrow as pa

    if found == known:
        return True
    if pa.types.is_integer(found) and pa.types.is_integer(known):
        return True
    if pa.types.is_floating(found) and pa.types.is_floating(known):
        return True
    if pa.types.is_string(known) and (pa.types.is_large_string(found) or pa.types.is_string(found)):
        return True
    return pa.types.is_timestamp(found) and pa.types.is_timestamp(known)


def _schema_problem(table: str, schema: pa.Schema) -> str | None:
    from recompprof._history.tables import SCHEMAS, SESSION_KEY

    known = SCHEMAS[table]
    names = set(schema.names)
    lacking = [f.name for f in SESSION_KEY if f.name not in names]
    if lacking:
        return f"no {', '.join(lacking)} column"
    renamed = RENAMED.get(table, {})
    for name in names:
        new = renamed.get(name, name)
        if new not in known.names:
            continue
        found, expected = schema.field(name).type, known.field(new).type
        if not _compatible(found, expected):
            return f"column {name} is {found}, not {expected}"
    return None


def _as_now(table: str, names: Any) -> set[str]:
    """A file's column names as the current exporter names them (an older one's renamed columns by
    their new names: :data:`~recompprof._history.columns.RENAMED`)."""
    renamed = RENAMED.get(table, {})
    return {renamed.get(name, name) for name in names}


def check(lake: Lake, table: str, paths: list[str], bad: dict[str, Bad] | None = None) -> Checked:
    """Read the footer of each of ``paths`` (files of ``table``); leave out those ``history verify``
    found bad (``bad``, from :func:`read_verified`)."""
    import pyarrow as pa

    from recompprof._history.tables import SCHEMAS

    checked = Checked(table)
    known = SCHEMAS[table].names
    for path in paths:
        found = (bad or {}).get(path)
        if found is not None:
            checked.skipped.append(Skipped(table, path, "verify", found.why))
            continue
        try:
            meta = _footer(lake, path)
            schema = meta.schema.to_arrow_schema()
        except (OSError, pa.ArrowException, ValueError) as error:
            checked.skipped.append(Skipped(table, path, "unreadable", _one_line(error)))
            continue
        problem = _schema_problem(table, schema)
        if problem is not None:
            checked.skipped.append(Skipped(table, path, "schema", problem))
            continue
        checked.good.append(path)
        checked.schemas.add(tuple(zip(schema.names, schema.types)))
        names = set(schema.names)
        checked.present.update(names)
        checked.order.extend(n for n in schema.names if n not in checked.order)
        now = _as_now(table, names)
        checked.missing.update(name for name in known if name not in now)
        lost = (meta.metadata or {}).get(UNREADABLE_KEY)
        if lost:
            checked.lost_at_compaction.extend(_names(lost))
    return checked


# How many times an object store's file is read before a failure is called the file's (see reads()).
READS = 3


def reads(lake: Lake) -> int:
    """How many times a file is read before its failure is called the file's own.

    An object store's file is read in several requests: its size, then its tail, then its pages. A
    running job's periodic export that replaces the object in between leaves one object's bytes read
    at the other's offsets (``magic bytes not found``, ``Invalid data``); the next read meets the new
    object whole, as an upload appears only when complete. A damaged file fails every read. A local
    file is read through one open descriptor, so its first failure is already the file's own.
    """
    return 1 if lake.local else READS


def _footer(lake: Lake, path: str) -> Any:
    """The Parquet footer of ``path``, read again after a failure where one may not be the file's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def read() -> Any:
        with lake.fs.open_input_file(path) as handle:
            return pq.read_metadata(handle)

    for _ in range(reads(lake) - 1):
        try:
            return read()
        except (OSError, pa.ArrowException, ValueError):
            continue
    return read()  # the last read's error is the file's


# The session key every file must have (the rows of a file without it cannot be counted once).
_KEY = ("run_id", "rank", "pid")


def check_footers(
    con: Any,
    table: str,
    paths: list[str],
    expected: Mapping[str, str],
    bad: dict[str, Bad] | None = None,
    footers: Footers | None = None,
) -> Checked:
    """:func:`check` for a local lake, by DuckDB (``con``): each file's footer read, its top-level
    columns and their DuckDB types; a file that does not read, lacks the session key or types a column
    of ``expected`` (the columns the questions read: name -> DuckDB type) as another kind is left out.
    ``footers``: the files' footers already read (:func:`read_footers`, every table's in one read)."""
    checked = Checked(table)
    todo = []
    for path in paths:
        found = (bad or {}).get(path)
        if found is not None:
            checked.skipped.append(Skipped(table, path, "verify", found.why))
        else:
            todo.append(path)
    columns, lost, unreadable = footers if footers is not None else read_footers(con, todo)
    for path in todo:
        if path in unreadable:
            checked.skipped.append(Skipped(table, path, "unreadable", unreadable[path]))
            continue
        found_columns = columns.get(path, [])
        problem = _duck_problem(found_columns, expected, RENAMED.get(table, {}))
        if problem is not None:
            checked.skipped.append(Skipped(table, path, "schema", problem))
            continue
        checked.good.append(path)
        checked.schemas.add(tuple(found_columns))
        names = [n for n, _ in found_columns]
        checked.present.update(names)
        checked.order.extend(n for n in names if n not in checked.order)
        if path in lost:
            checked.lost_at_compaction.extend(_names(lost[path]))
    # Known columns some readable files lack: those others have, and those the questions read (an
    # older exporter's renamed column is the new one, not one lacking).
    present = _as_now(table, checked.present)
    known = [*_as_now(table, checked.order), *(n for n in expected if n not in present)]
    for path in checked.good:
        have = _as_now(table, (n for n, _ in columns[path]))
        checked.missing.update(n for n in known if n not in have)
    return checked


# Each file's top-level columns (name, DuckDB type), its UNREADABLE_KEY value, and the files whose
# footer does not read (why).
Footers = tuple[dict[str, list[tuple[str, str]]], dict[str, bytes], dict[str, str]]


def read_footers(con: Any, paths: list[str]) -> Footers:
    """The footers of ``paths`` (any tables' files): all files in one read, file by file only when one
    fails. The paths are written into the text as literals: a list bound as a parameter makes DuckDB's
    Python client import datetime, decimal, uuid and platform to convert it (a question's start-up)."""
    columns: dict[str, list[tuple[str, str]]] = {}
    lost: dict[str, bytes] = {}
    unreadable: dict[str, str] = {}
    if not paths:
        return columns, lost, unreadable
    from recompprof._history import duck

    duckdb = duck.load()
    try:
        schema_rows = con.execute(_SCHEMA_SQL.format(files=_files(paths))).fetchall()
        kv_rows = con.execute(_KV_SQL.format(files=_files(paths))).fetchall()
    except duckdb.Error:  # one bad footer fails the whole read: find which, one at a time
        schema_rows, kv_rows = [], []
        for path in paths:
            try:
                schema_rows += con.execute(_SCHEMA_SQL.format(files=_files([path]))).fetchall()
                kv_rows += con.execute(_KV_SQL.format(files=_files([path]))).fetchall()
            except duckdb.Error as error:
                unreadable[path] = _one_line(error)
    by_file: dict[str, list[tuple[str, str, int]]] = {}
    for file_name, name, duck_type, children in schema_rows:
        by_file.setdefault(file_name, []).append((name, duck_type, children or 0))
    for file_name, rows in by_file.items():
        columns[file_name] = _top_level(rows)
    for file_name, value in kv_rows:
        lost[file_name] = bytes(value)
    return columns, lost, unreadable


_SCHEMA_SQL = (
    "SELECT file_name, name, duckdb_type, num_children FROM parquet_schema({files}) "
    "ORDER BY file_name, column_id"
)
_KV_SQL = (
    "SELECT file_name, value FROM parquet_kv_metadata({files}) "
    f"WHERE key = '{UNREADABLE_KEY.decode()}'::BLOB"
)


def _files(paths: list[str]) -> str:
    """``paths`` as a DuckDB list of string literals."""
    return "[" + ", ".join(literal(p) for p in paths) + "]"


def _top_level(rows: list[tuple[str, str, int]]) -> list[tuple[str, str]]:
    """The root's children of a flattened Parquet schema (a list's or map's inner nodes dropped)."""
    out = []
    remaining = [rows[0][2]] if rows else []  # children left to see at each open level
    for name, duck_type, children in rows[1:]:
        if len(remaining) == 1:
            out.append((name, duck_type))
        remaining[-1] -= 1
        if children:
            remaining.append(children)
        while len(remaining) > 1 and remaining[-1] == 0:
            remaining.pop()
    return out


def _duck_kind(duck_type: str) -> str:
    """The kind of a DuckDB type name: what a column may be typed as by another exporter version."""
    t = duck_type.upper()
    if t.endswith("]"):
        return "list"
    if t.startswith("MAP"):
        return "map"
    if t.startswith("TIMESTAMP"):
        return "timestamp"
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT") or t.startswith("U"):
        return "integer"
    if t in ("FLOAT", "DOUBLE", "REAL") or t.startswith("DECIMAL"):
        return "float"
    return {"VARCHAR": "string", "BOOLEAN": "bool", "DATE": "date"}.get(t, t)


def _duck_problem(
    columns: list[tuple[str, str]], expected: Mapping[str, str], renamed: Mapping[str, str]
) -> str | None:
    names = {renamed.get(name, name): kind for name, kind in columns}
    lacking = [k for k in _KEY if k not in names]
    if lacking:
        return f"no {', '.join(lacking)} column"
    for name, want in expected.items():
        found = names.get(name)
        if found is not None and _duck_kind(found) != _duck_kind(want):
            return f"column {name} is {found}, not {want}"
    return None


def decode(lake: Lake, path: str) -> str | None:
    """Every page of one file decoded, column by column, each page's checksum verified where the
    writer wrote one: None when it reads, else which column does not and why (one line). A footer can
    be good while a page behind it is not, and without a checksum a flipped byte can decode to a wrong
    value without an error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with lake.fs.open_input_file(path) as handle:
            # An object store's file is fetched whole, in one request, and decoded from memory: read a
            # column at a time, it would take one request per column, and an upload meanwhile (a
            # running job's periodic export) would show its bytes at the old file's offsets.
            source = handle if lake.local else pa.BufferReader(handle.read())
            parquet = pq.ParquetFile(source, page_checksum_verification=True)
            for name in parquet.schema_arrow.names:
                try:
                    parquet.read(columns=[name])
                except (OSError, pa.ArrowException, ValueError) as error:
                    return f"column {name}: {_one_line(error)}"
    except (OSError, pa.ArrowException, ValueError) as error:
        return _one_line(error)
    return None


@dataclass(frozen=True)
class Bad:
    """A file ``history verify`` could not decode: its table, its path under the lake, why, and the
    size and modification time it had (a file written anew since is not the file found bad)."""

    table: str
    name: str
    why: str
    size: int
    mtime_ns: int


def _stamp(lake: Lake, paths: list[str]) -> dict[str, tuple[int, int]]:
    """Each file's size and modification time (ns)."""
    import pyarrow.fs as pafs

    try:
        infos = lake.fs.get_file_info(paths)
    except OSError:
        return {}
    return {i.path: (i.size or 0, i.mtime_ns or 0) for i in infos if i.type == pafs.FileType.File}


def undecodable(lake: Lake, path: str) -> str | None:
    """:func:`decode`, read again where a failure may not be the file's (:func:`reads`): a file
    replaced while it was read reads whole the next time. None when it decodes, else why not."""
    why = decode(lake, path)
    for _ in range(reads(lake) - 1):
        if why is None:
            break
        why = decode(lake, path)
    return why


def verify(lake: Lake, files: dict[str, list[str]]) -> list[Bad]:
    """Decode every one of ``files`` (table -> paths): the bad ones, each with its reason."""
    bad = []
    for table, paths in files.items():
        stamps = _stamp(lake, paths)
        for path in paths:
            why = undecodable(lake, path)
            if why is not None:
                size, mtime = stamps.get(path, (0, 0))
                bad.append(Bad(table, path.removeprefix(lake.base + "/"), why, size, mtime))
    return bad


def write_verified(lake: Lake, bad: list[Bad], decoded: int) -> None:
    """Record what ``history verify`` found (an empty list clears an earlier record)."""
    document = {"decoded": decoded, "bad": [dataclasses.asdict(b) for b in bad]}
    text = json.dumps(document, indent=1).encode()
    lake.write(f"{lake.base}/{VERIFIED}", lambda stream: stream.write(text))


def read_verified(lake: Lake | LocalLake) -> dict[str, Bad]:
    """The files the last ``history verify`` found bad and that are still the files it found, by path
    in the lake's filesystem (none if never run; a record that cannot be read is none too: the queries
    then find broken pages as they read them)."""
    try:
        if isinstance(lake, LocalLake):
            with open(f"{lake.base}/{VERIFIED}", "rb") as handle:
                document = json.loads(handle.read())
        else:
            with lake.fs.open_input_stream(f"{lake.base}/{VERIFIED}") as stream:
                document = json.loads(stream.read())
        recorded = [Bad(**b) for b in document["bad"]]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    paths = {f"{lake.base}/{b.name}": b for b in recorded}
    if not paths:
        return {}
    stamps = lake.stamps(list(paths)) if isinstance(lake, LocalLake) else _stamp(lake, list(paths))
    return {p: b for p, b in paths.items() if stamps.get(p) == (b.size, b.mtime_ns)}


def _names(raw: bytes) -> list[str]:
    try:
        value = json.loads(raw)
    except ValueError:
        return ["?"]
    return [str(v) for v in value] if isinstance(value, list) else ["?"]


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:200] or type(error).__name__
