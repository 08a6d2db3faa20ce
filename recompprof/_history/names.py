"""The lake's folder and file names, its two small text records and its error, in the standard
library alone.

:mod:`~recompprof._history.layout` (the raw root) and :mod:`~recompprof._history.daily` (the compacted
root) write by these rules through pyarrow's filesystems; the query path reads a local lake by them
with ``os`` and DuckDB, so one question never imports pyarrow (docs/history.md, "Speed").
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
from collections.abc import Callable, Iterable

from recompprof._errors import RecompprofError

ROOT = "v1"  # the schema's root: a column removed or changed in meaning needs a new one
DAILY_ROOT = "v1-daily"  # the compacted root (recompprof._history.daily)
SUFFIX = ".parquet"
PART = "part-0.parquet"  # a compacted day's one file per table
SOURCES = "_sources"  # beside it: the raw files it covered
THROUGH = "_through"  # in the compacted root: the last compacted day
PARTITION = re.compile(r"dt=(\d{4}-\d{2}-\d{2})$")  # a Hive partition folder's name
_TEMPS = itertools.count()


class LakeError(RecompprofError):
    """The lake cannot be opened, read or written; the message is one line naming the URI and why
    (the CLI shows a secret in it as ``***``: ``_capture.lake_uri.shown``)."""


def refuse_a_root(uri: str, base: str, entries: Callable[[], Iterable[str]]) -> None:
    """LakeError (one line) when ``base`` is a lake's ``v1/`` or ``v1-daily/`` folder rather than the
    lake: named so, and holding a table's folder (``entries()``: the names in it, asked only then).
    Read there, every table would have no files; exported there, a second lake inside the first."""
    from recompprof._history.columns import TABLES

    folder, _, name = base.rstrip("/").rpartition("/")
    if name in (ROOT, DAILY_ROOT) and set(entries()) & set(TABLES):
        raise LakeError(
            f"{uri}: is a lake's {name}/ folder, not a lake; give its parent ({folder or '/'})"
        )


def temp_name(name: str) -> str:
    """The hidden name a file is written under before it is renamed to ``name`` (readers skip it): one
    per writer, so two exporters of the same run never write into one temporary file (the last rename
    wins, and both wrote the same rows)."""
    return f".{name}.{os.getpid()}-{next(_TEMPS)}.tmp"


def is_data_name(name: str) -> bool:
    """A data file's own name: not hidden, not a record (``_...``), a Parquet file; every engine's
    reader skips the others."""
    return not name.startswith((".", "_")) and name.endswith(SUFFIX)


def partition_day(folder: str) -> datetime.date | None:
    """The UTC day of a partition folder (``.../dt=2026-11-20``), or None."""
    found = PARTITION.search(folder)
    if found is None:
        return None
    try:
        return datetime.date.fromisoformat(found.group(1))
    except ValueError:
        return None


def parse_through(uri: str, text: str) -> datetime.date:
    """The day lake ``uri``'s ``_through`` marker holds; a LakeError saying how to mend it when it
    holds no date (every reader of the marker, local or through pyarrow, says the same)."""
    try:
        return datetime.date.fromisoformat(text.strip())
    except ValueError:
        raise LakeError(
            f"{uri}: {DAILY_ROOT}/{THROUGH} holds {text.strip()[:40]!r}, not a date; "
            "run `recompprof history compact --check` after fixing it"
        ) from None


def parse_sources(text: str) -> set[tuple[str, int]]:
    """A ``_sources`` record: the raw files (name in the day's folder, size) a compacted day covered."""
    found = set()
    for line in text.splitlines():
        name, _, size = line.rpartition(" ")
        if name and size.isdigit():
            found.add((name, int(size)))
    return found
