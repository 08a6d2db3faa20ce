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

A lake the reader may not write (a dashboard's read-only mount) refuses links. There an open descriptor
holds each file's bytes instead, as a link would: Linux names an open descriptor ``/proc/<pid>/fd/<n>``,
and opening that name opens the file the descriptor holds, whatever has been renamed over its path since.
DuckDB is given a symbolic link to that name in a private folder, at the file's own path under the lake
(``<table>/dt=<day>/<name>``), so the day is read from the folder as before.
"""

from __future__ import annotations

import contextlib
import os

from recompprof._history.names import temp_name

# Descriptors left to the rest of the process when files are held open (DuckDB's own, the job's).
_SPARE_DESCRIPTORS = 256


class Pins:
    """Hard links to files, each under a hidden name beside its file; or, where the filesystem refuses
    them, open descriptors to the files, each reached through a symbolic link in a private folder."""

    def __init__(self) -> None:
        self.links: dict[str, str] = {}  # a file's path -> its link's
        # The folder of symbolic links, where the files are held open (None: hard links or nothing).
        self.folder: str | None = None
        self._held: list[int] = []

    def take(self, paths: list[str], base: str) -> None:
        """Hold every one of ``paths`` (files under the lake's folder ``base``): hard links, else open
        descriptors; nothing where neither can be had (no ``/proc``, too many files for the process's
        descriptors). Raises FileNotFoundError, holding nothing, when a file is gone since it was listed:
        the caller lists the lake again."""
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
                self._open(paths, base)
                return
            self.links[path] = link

    def _open(self, paths: list[str], base: str) -> None:
        """Hold ``paths`` open, each reached through a symbolic link at its path under ``base`` in a
        private folder."""
        from recompprof._history import scratch  # only after a read failed on a lake refusing links

        proc = f"/proc/{os.getpid()}/fd"
        if not os.path.isdir(proc) or not _descriptors_for(len(paths)):
            return
        self.folder = scratch.folder("held")
        try:
            for path in paths:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                self._held.append(fd)
                link = os.path.join(self.folder, os.path.relpath(path, base))
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(f"{proc}/{fd}", link)
                self.links[path] = link
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Remove the links and close the descriptors (the files themselves are untouched)."""
        if self.folder is None:
            for link in self.links.values():
                # already gone (compaction took it): nothing is held
                with contextlib.suppress(OSError):
                    os.unlink(link)
        else:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        for fd in self._held:
            os.close(fd)
        self._held.clear()
        self.links.clear()


def _descriptors_for(files: int) -> bool:
    """Whether the process may open ``files`` more descriptors and keep :data:`_SPARE_DESCRIPTORS`;
    its soft limit is raised toward the hard one where that makes room."""
    import resource  # POSIX only: reached only where /proc names descriptors

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        used = len(os.listdir(f"/proc/{os.getpid()}/fd"))
    except OSError:
        return False
    needed = used + files + _SPARE_DESCRIPTORS
    if needed <= soft:
        return True
    if hard != resource.RLIM_INFINITY and needed > hard:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    except (ValueError, OSError):
        return False
    return True
