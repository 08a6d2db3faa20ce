"""A lake on a local or shared filesystem as the questions read it: listed with ``os``, its files read
by DuckDB, so answering one question imports neither pyarrow nor numpy (docs/history.md, "Speed").

Writing (export, compaction) and object stores go through pyarrow's filesystems
(:class:`recompprof._history.layout.Lake`); both follow the names of :mod:`recompprof._history.names`.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from recompprof._history.names import (
    DAILY_ROOT,
    PART,
    ROOT,
    SOURCES,
    THROUGH,
    LakeError,
    is_data_name,
    parse_sources,
    parse_through,
    partition_day,
    refuse_a_root,
)


@dataclass(frozen=True)
class File:
    """A data file: its path, the day its partition names, its size."""

    path: str
    day: datetime.date
    size: int


@dataclass
class LocalLake:
    """A local lake root, for reading. ``local`` and ``base`` as :class:`~recompprof._history.layout.Lake`
    has them, so the engine treats both alike."""

    uri: str
    base: str
    local: bool = True

    @classmethod
    def at(cls, uri: str) -> LocalLake:
        """The lake at a local path or ``file://`` URI; LakeError when it is not a folder."""
        if uri.startswith("file://"):
            import urllib.parse

            base = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
        else:
            base = str(Path(uri).expanduser().absolute())
        if not os.path.exists(base):
            raise LakeError(f"{uri}: no such lake (the path does not exist)")
        if not os.path.isdir(base):
            raise LakeError(f"{uri}: is a file; give the lake's root folder")
        refuse_a_root(uri, base, lambda: os.listdir(base))
        return cls(uri, base.rstrip("/") or "/")

    def _days(self, folder: str) -> list[tuple[datetime.date, os.DirEntry[str]]]:
        """The partition folders under ``folder``, by day."""
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return []
        except OSError as error:
            raise LakeError(f"{self.uri}: cannot list {folder}: {error.strerror}") from None
        days = []
        for entry in entries:
            day = partition_day(entry.name)
            if day is not None and entry.is_dir():
                days.append((day, entry))
        return sorted(days, key=lambda d: d[0])

    def files(self, table: str) -> list[File]:
        """The raw data files of ``table`` (hidden, temporary and record files left out), by path."""
        found = []
        for day, folder in self._days(f"{self.base}/{ROOT}/{table}"):
            for entry in os.scandir(folder.path):
                if is_data_name(entry.name) and entry.is_file():
                    found.append(File(entry.path, day, entry.stat().st_size))
        return sorted(found, key=lambda f: f.path)

    def compacted(self, table: str) -> dict[datetime.date, str]:
        """The compacted file of each day of ``table``."""
        found = {}
        for day, folder in self._days(f"{self.base}/{DAILY_ROOT}/{table}"):
            path = f"{folder.path}/{PART}"
            if os.path.isfile(path):
                found[day] = path
        return found

    def through(self) -> datetime.date | None:
        """The compaction marker (None before the first compaction)."""
        text = self.read_text(f"{self.base}/{DAILY_ROOT}/{THROUGH}")
        if text is None:
            return None
        return parse_through(self.uri, text)

    def sources(self, table: str, day: datetime.date) -> set[tuple[str, int]] | None:
        """The raw files a compacted day covered (None: the day has no record)."""
        text = self.read_text(f"{self.base}/{DAILY_ROOT}/{table}/dt={day.isoformat()}/{SOURCES}")
        return None if text is None else parse_sources(text)

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except OSError as error:
            raise LakeError(f"{self.uri}: cannot read {path}: {error.strerror}") from None

    def stamps(self, paths: list[str]) -> dict[str, tuple[int, int]]:
        """Each existing file's size and modification time (ns)."""
        out = {}
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            out[path] = (st.st_size, st.st_mtime_ns)
        return out
