"""A command's scratch space in the system's temporary folder, named so the next command can remove
what a killed one left.

A ``history`` command spills query state there (``spill``), compaction sorts a day there
(``compact``), an export to an object store stages each file there before its upload (``upload``),
and a reader of a read-only lake keeps its links there (``held``). Each is removed when its command
ends, but a command killed outright (a CI gate's timeout, an OOM kill) leaves it, a day of Parquet or
a spill of gigabytes, for good. So every name holds the command's pid
(``recompprof-<kind>-<pid>-<random>``), and the first scratch a process makes removes those of
processes that are gone and that nothing has touched for :data:`UNTOUCHED`: a process this one cannot
see (another container's, sharing the folder) is never taken for gone while it works.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator

__all__ = ["directory", "file", "folder", "sweep"]

# Scratch another process left is removed once untouched this long and that process is gone.
UNTOUCHED = datetime.timedelta(days=1)

_NAME = re.compile(r"recompprof-(?:spill|compact|upload|held)-(\d+)-")
_swept = False


def folder(kind: str) -> str:
    """A new private folder for ``kind`` of scratch (its caller removes it)."""
    sweep()
    return tempfile.mkdtemp(prefix=f"recompprof-{kind}-{os.getpid()}-")


@contextlib.contextmanager
def directory(kind: str) -> Iterator[str]:
    """A new private folder for ``kind`` of scratch, removed when the block ends."""
    path = folder(kind)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def file(kind: str, suffix: str) -> str:
    """A new private empty file for ``kind`` of scratch (its caller removes it)."""
    sweep()
    handle, path = tempfile.mkstemp(prefix=f"recompprof-{kind}-{os.getpid()}-", suffix=suffix)
    os.close(handle)
    return path


def sweep() -> None:
    """Remove, once per process, the scratch in the temporary folder of processes that are gone,
    untouched for :data:`UNTOUCHED`. Never raises."""
    global _swept
    if _swept:
        return
    _swept = True
    before = time.time() - UNTOUCHED.total_seconds()
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return
    for entry in entries:
        found = _NAME.match(entry.name)
        if found is None or int(found.group(1)) == os.getpid():
            continue
        try:
            stat = entry.stat(follow_symlinks=False)
            if stat.st_uid != os.getuid() or stat.st_mtime > before:
                continue
            if _alive(int(found.group(1))):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process this one can see (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
