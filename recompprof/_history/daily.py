"""The compacted root of a lake: one file per table and day, and the marker readers obey (docs/history.md,
"Compaction").

::

    URI/v1-daily/<table>/dt=YYYY-MM-DD/part-0.parquet   # every raw file of that day, merged and sorted
    URI/v1-daily/<table>/dt=YYYY-MM-DD/_sources          # the raw files it covered: name and size, one a line
    URI/v1-daily/_through                                # the last compacted day

The one consistency rule, for every reader (the CLI and the view texts it prints): a table is its
compacted days up to ``_through`` and its raw days after it, so no row is read twice. The marker moves
only after the days before it are written, so a compaction that stops half way leaves readers on the
raw files. Names starting with ``_`` or ``.`` are skipped by every engine's Parquet reader.
"""

from __future__ import annotations

import datetime
import re

import pyarrow.fs as pafs

from recompprof._history.layout import Lake, partition
from recompprof._history.names import (
    DAILY_ROOT,
    PART,
    SOURCES,
    THROUGH,
    LakeError,
    parse_sources,
    parse_through,
)

DAILY = DAILY_ROOT
_DAY = re.compile(r"/dt=(\d{4}-\d{2}-\d{2})/" + re.escape(PART) + "$")


def daily_dir(lake: Lake, table: str) -> str:
    return f"{lake.base}/{DAILY}/{table}"


def part_path(lake: Lake, table: str, day: datetime.date) -> str:
    return f"{daily_dir(lake, table)}/{partition(day)}/{PART}"


def sources_path(lake: Lake, table: str, day: datetime.date) -> str:
    return f"{daily_dir(lake, table)}/{partition(day)}/{SOURCES}"


def through(lake: Lake) -> datetime.date | None:
    """The last compacted day, or None before the first compaction."""
    text = _read_text(lake, f"{lake.base}/{DAILY}/{THROUGH}")
    if text is None:
        return None
    return parse_through(lake.uri, text)


def set_through(lake: Lake, day: datetime.date) -> None:
    _write_text(lake, f"{lake.base}/{DAILY}/{THROUGH}", day.isoformat() + "\n")


def compacted(lake: Lake, table: str) -> dict[datetime.date, tuple[str, int]]:
    """The compacted file of each day of ``table``: its path and size."""
    selector = pafs.FileSelector(daily_dir(lake, table), recursive=True, allow_not_found=True)
    try:
        infos = lake.fs.get_file_info(selector)
    except OSError as error:
        raise LakeError(f"{lake.uri}: cannot list {DAILY}/{table}: {error}") from error
    found = {}
    for info in infos:
        match = _DAY.search(info.path)
        if info.type == pafs.FileType.File and match:
            found[datetime.date.fromisoformat(match[1])] = (info.path, info.size or 0)
    return found


Source = tuple[str, int]  # a raw file's name (in its day's folder) and size


def read_sources(lake: Lake, table: str, day: datetime.date) -> set[Source] | None:
    """The raw files a day's compacted file covered (None: the day has no record)."""
    text = _read_text(lake, sources_path(lake, table, day))
    if text is None:
        return None
    return parse_sources(text)


def write_sources(lake: Lake, table: str, day: datetime.date, sources: set[Source]) -> None:
    text = "".join(f"{name} {size}\n" for name, size in sorted(sources))
    _write_text(lake, sources_path(lake, table, day), text)


def _read_text(lake: Lake, path: str) -> str | None:
    try:
        with lake.fs.open_input_stream(path) as stream:
            return bytes(stream.read()).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except OSError as error:
        if "not found" in str(error).lower() or "does not exist" in str(error).lower():
            return None
        raise LakeError(f"{lake.uri}: cannot read {path}: {error}") from error


def _write_text(lake: Lake, path: str, text: str) -> None:
    lake.write(path, lambda stream: stream.write(text.encode("utf-8")))
