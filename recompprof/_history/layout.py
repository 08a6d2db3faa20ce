"""Where the history lake keeps its files: one rule for the exporter that writes them and the queries
that read them (docs/history.md, "Layout").

::

    URI/v1/<table>/dt=YYYY-MM-DD/<run_id>__<writer>.parquet       # one writer per file
    URI/v1/<table>/dt=YYYY-MM-DD/.<run_id>__<writer>.parquet.tmp  # being written (hidden), then renamed
                                                                   # (or a question's hard link, _history.pins)

``<writer>`` is ``all-s<digest>`` when one exporter had the run's logs (a run directory), or
``rank00003-12345-s<digest>`` (rank and pid) when a rank session exported its own log; the digest is
of the sessions the file holds (:mod:`recompprof._history.sessions`). A file's name is a pure function
of what was exported, so exporting again overwrites the same file instead of adding a second one. ``URI`` is a
local or shared path or an object-store URI that pyarrow's filesystems open (``s3://bucket/prefix``,
``gs://…``; ``?endpoint_override=…`` for an S3-compatible server). On a local or shared filesystem a
file is written under its hidden temporary name and renamed into place; an object store has no
rename, and an object appears only when its upload completes, so it is written once, to its name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from recompprof._capture.lake_uri import names_no_place
from recompprof._history import scratch
from recompprof._history.names import (
    DAILY_ROOT,
    ROOT,
    SUFFIX,
    LakeError,
    is_data_name,
    partition_day,
    refuse_a_root,
    temp_name,
)
from recompprof._model.naming import shortened

__all__ = ["DAILY_ROOT", "ROOT", "SUFFIX", "Lake", "LakeError", "LakeFile", "PendingFile"]

ALL_RANKS = "all"
_SEPARATOR = "__"
_CHUNK = 8 << 20  # bytes per write of an upload
# A file name's run part at most: with the writer, its digest and a temporary name's prefix and
# suffix, a name stays well under the 255 bytes a filesystem allows.
_MAX_RUN_PART = 128
_SAFE = "-_.=+"  # kept as is in a run part; every other character is percent-quoted


def writer_of(rank: int, pid: int) -> str:
    """The writer name of one rank session exporting its own log."""
    return f"rank{rank:05d}-{pid}"


def file_name(run_id: str, writer: str) -> str:
    """The file of one run (and writer) in a partition (:func:`run_part`, the writer)."""
    return f"{run_part(run_id)}{_SEPARATOR}{writer}{SUFFIX}"


def run_part(run_id: str) -> str:
    """A file name's run part: the run id quoted so it is one safe name part, never hidden and never a
    path, and :func:`shortened` where quoted it is over ``_MAX_RUN_PART`` bytes (a long launcher id,
    60 non-ASCII characters at 6 or more bytes each), so a name stays under a filesystem's 255 bytes
    and two long ids still name two files."""
    return _quoted(shortened(run_id, _MAX_RUN_PART, size=lambda text: len(_quoted(text))))


def _quoted(text: str) -> str:
    quoted = urllib.parse.quote(text, safe=_SAFE)
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def partition(day: datetime.date) -> str:
    """The Hive partition directory of a UTC day."""
    return f"dt={day.isoformat()}"


@dataclasses.dataclass(frozen=True)
class LakeFile:
    """One data file of a table: where it is, and what its path says."""

    path: str  # in the lake's filesystem
    day: datetime.date
    run_part: str  # the run id as its name holds it (run_part: quoted, a long one shortened)
    writer: str
    size: int


def parse_path(path: str) -> LakeFile | None:
    """What a data file's path says, or None for anything that is not one (hidden, temporary, foreign)."""
    parent, _, name = path.rpartition("/")
    day = partition_day(parent)
    if day is None or not is_data_name(name):
        return None
    stem = name[: -len(SUFFIX)]
    run, sep, writer = stem.rpartition(_SEPARATOR)
    if not sep or not run or not writer:
        return None
    return LakeFile(path, day, run, writer, -1)


class PendingFile:
    """One file being written: ``stream`` takes its bytes; :meth:`commit` makes it appear at its path
    whole, :meth:`abort` leaves nothing behind.

    On a local or shared filesystem it is written under a hidden temporary name beside its path and
    renamed; for an object store it is written to a local temporary file and uploaded as one object at
    commit (an object store has no rename; the upload is its one write), so a failed export leaves no
    object and holds no more than a row group in memory.
    """

    def __init__(self, lake: Lake, path: str) -> None:
        self.lake, self.path = lake, path
        parent, _, name = path.rpartition("/")
        try:
            if lake.local:
                lake.fs.create_dir(parent, recursive=True)
                self._temp = f"{parent}/{temp_name(name)}"
                self.stream = lake.fs.open_output_stream(self._temp)
            else:
                self._temp = scratch.file("upload", SUFFIX)
                self.stream = pa.OSFile(self._temp, "wb")
        except OSError as error:
            raise LakeError(f"{lake.uri}: cannot write {path}: {_one_line(error)}") from error

    def commit(self) -> None:
        lake = self.lake
        try:
            self.stream.close()
            if lake.local:
                lake.fs.move(self._temp, self.path)
                return
            lake.fs.create_dir(self.path.rpartition("/")[0], recursive=True)
            with (
                pa.OSFile(self._temp, "rb") as source,
                lake.fs.open_output_stream(self.path) as target,
            ):
                while chunk := source.read(_CHUNK):
                    target.write(chunk)
        except OSError as error:
            self.abort()
            raise LakeError(f"{lake.uri}: cannot write {self.path}: {_one_line(error)}") from error
        if not lake.local:
            self.abort()  # the local copy

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.close()
        if self.lake.local:
            _remove_quietly(self.lake.fs, self._temp)
        else:
            with contextlib.suppress(OSError):
                os.unlink(self._temp)


class Lake:
    """A lake root, opened through pyarrow's filesystems: where each table and file is, how a file is
    written (hidden name and rename, or one upload) and which files a table holds."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.fs, base = _open(uri)
        self.base = base.rstrip("/")
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    def refuse_a_root(self) -> None:
        """LakeError when the URI names a lake's ``v1/`` or ``v1-daily/`` folder, not a lake."""

        def entries() -> list[str]:
            selector = pafs.FileSelector(self.base, allow_not_found=True)
            try:
                return [info.base_name for info in self.fs.get_file_info(selector)]
            except OSError:
                return []  # listing fails later with its own line

        refuse_a_root(self.uri, self.base, entries)

    def reachable(self) -> None:
        """LakeError (one line) when an object store does not answer one request for the lake's root.

        pyarrow's client tries each request 3 times, backing off: about 6 s against a refused
        connection. An export makes a dozen requests, so an unreachable store held it 80 s before its
        first failure, past a session end's deadline (``history_timeout``, 30 s) and SIGTERM's grace,
        and the job's warning said only that the deadline passed. A local lake needs no probe."""
        if self.local:
            return
        try:
            self.fs.get_file_info(self.base)
        except OSError as error:
            raise LakeError(f"{self.uri}: cannot reach the lake: {_one_line(error)}") from error

    def table_dir(self, table: str) -> str:
        return f"{self.base}/{ROOT}/{table}"

    def path_of(self, table: str, day: datetime.date, run_id: str, writer: str) -> str:
        """The path of one run's (and writer's) file of ``table`` for UTC day ``day``."""
        return f"{self.table_dir(table)}/{partition(day)}/{file_name(run_id, writer)}"

    def files(self, table: str, under: str | None = None) -> list[LakeFile]:
        """The data files of ``table`` (or of its folder ``under``: one day's), sorted by path (none,
        where the table has no files yet); temporary and hidden files are left out."""
        found = []
        for info in self.listed(under or self.table_dir(table), table):
            if info.type != pafs.FileType.File:
                continue
            parsed = parse_path(info.path)
            if parsed is not None:
                found.append(dataclasses.replace(parsed, size=info.size or 0))
        return sorted(found, key=lambda f: f.path)

    def listed(self, folder: str, what: str) -> list[Any]:
        """Every entry under ``folder``, recursively (none where it does not exist), as pyarrow's
        ``FileInfo``; a listing that fails raises one line naming ``what``."""
        selector = pafs.FileSelector(folder, recursive=True, allow_not_found=True)
        try:
            return self.fs.get_file_info(selector)
        except OSError as error:
            raise LakeError(f"{self.uri}: cannot list {what}: {_one_line(error)}") from error

    def labels_path(self, run_id: str) -> str:
        """Where the labels given to a run's export are remembered (``v1/_labels/``: no table's
        folder, and hidden from every engine by its leading ``_``)."""
        return f"{self.base}/{ROOT}/_labels/{file_name(run_id, 'labels')[: -len(SUFFIX)]}.json"

    def temporaries(self, before: datetime.datetime) -> list[str]:
        """Hidden temporary files (``.<name>.<n>.tmp``) under the lake's roots untouched since before
        ``before``: what exporters killed mid-write left (a live one rewrites its own within minutes),
        and the links of questions that were killed (:mod:`recompprof._history.pins`).

        On a local lake, touched means the file's inode changed (its ``st_ctime``): a write, and also
        a hard link made to it. A question's link to a file written a week ago shares that file's
        modification time, but is as young as the link, so no compaction takes it from a live reader.
        """
        found = []
        for root in (ROOT, DAILY_ROOT):
            for info in self.listed(f"{self.base}/{root}", root):
                name = info.path.rpartition("/")[2]
                if (
                    info.type == pafs.FileType.File
                    and name.startswith(".")
                    and name.endswith(".tmp")
                    and info.mtime is not None
                    and info.mtime < before
                    and self._unchanged_since(info.path, before)
                ):
                    found.append(info.path)
        return sorted(found)

    def _unchanged_since(self, path: str, before: datetime.datetime) -> bool:
        """Whether ``path``'s inode last changed before ``before`` (always, where there are no inodes:
        an object store's objects are never linked; a file gone meanwhile is not listed)."""
        if not self.local:
            return True
        try:
            changed = os.stat(path).st_ctime
        except FileNotFoundError:
            return False
        return changed < before.timestamp()

    def uri_of(self, path: str) -> str:
        """A path of this lake's filesystem as a URI another engine opens (a local path stays a path)."""
        if self.local:
            return path
        scheme = urllib.parse.urlsplit(self.uri).scheme
        return f"{scheme}://{path}"

    def create(self, path: str) -> PendingFile:
        """A file to write at ``path``, invisible to readers until :meth:`PendingFile.commit`."""
        return PendingFile(self, path)

    def write(self, path: str, write: Callable[[Any], None]) -> None:
        """Write one whole file with ``write(stream)`` and commit it (nothing is left on failure)."""
        pending = self.create(path)
        try:
            write(pending.stream)
            pending.commit()
        except BaseException:
            pending.abort()
            raise

    def delete(self, path: str) -> None:
        """Remove a data file another export superseded (gone already is fine)."""
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError as error:
            raise LakeError(f"{self.uri}: cannot delete {path}: {_one_line(error)}") from error


def _open(uri: str) -> tuple[pafs.FileSystem, str]:
    if not uri:
        raise LakeError("the lake URI is empty")
    if names_no_place(uri):
        raise LakeError(f"{uri}: names no bucket or folder for the lake")
    if "://" not in uri:  # a local or shared path
        return pafs.LocalFileSystem(), str(Path(uri).expanduser().absolute())
    if uri.startswith("file://"):
        return pafs.LocalFileSystem(), urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    try:
        fs, base = pafs.FileSystem.from_uri(uri)
    except (OSError, ValueError, TypeError) as error:
        raise LakeError(f"{uri}: cannot open the lake: {_one_line(error)}") from error
    if "//" in base.rstrip("/"):  # pyarrow's object stores refuse every path under it
        raise LakeError(f"{uri}: cannot open the lake: an empty folder name ('//') in {base}")
    return fs, base


def _remove_quietly(fs: pafs.FileSystem, path: str) -> None:
    with contextlib.suppress(OSError):
        fs.delete_file(path)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
