"""A local lake's files held still for the rest of one command: a hard link to each file a question reads.

DuckDB opens a Parquet file once to plan a query and again to scan it. A file replaced in between (a
running job's periodic export, a straggler's re-export, compaction) is scanned with the old file's
layout, and the query fails (``Invalid data``, ``Could not read enough bytes``). Reading the lake again
helps only if no file is replaced during that read as well, which a busy lake cannot promise: where
thousands of rank sessions export every hour, a read of every file meets a replacement every few
seconds, and a loaded machine makes each read longer. A hard link names the bytes a file held when it
was taken; the writer's rename replaces the name, not those bytes. So once a read has failed, the
engine reads the links: the second read cannot meet a replaced file.

Each link is hidden beside its file (one filesystem, so a link can be made; no listing reads it) under
the name a writer's temporary file has, so compaction removes the links a killed command left behind. A
link shares its file's modification time, however old; compaction ages a local temporary file by its
inode's change time, which making the link sets, so it never takes a live command's link.
"""

from __future__ import annotations

import contextlib
import os

from recompprof._history.names import temp_name


class Pins:
    """Hard links to files, each under a hidden name beside its file."""

    def __init__(self) -> None:
        self.links: dict[str, str] = {}  # a file's path -> its link's

    def take(self, paths: list[str]) -> None:
        """Link every one of ``paths``; nothing is held where the filesystem refuses (a lake the reader
        may not write, a filesystem without hard links). Raises FileNotFoundError, holding nothing, when
        a file is gone since it was listed: the caller lists the lake again."""
        for path in paths:
            folder, _, name = path.rpartition("/")
            link = f"{folder}/{temp_name(name)}"
            try:
                os.link(path, link)
            except FileNotFoundError:
                self.release()
                raise
            except OSError:
                self.release()
                return
            self.links[path] = link

    def release(self) -> None:
        """Remove the links (the files themselves are untouched)."""
        for link in self.links.values():
            # already gone (compaction took it): nothing is held
            with contextlib.suppress(OSError):
                os.unlink(link)
        self.links.clear()
