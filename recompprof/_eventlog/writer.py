"""The durable event log's writer: one JSONL file per rank and process in a run directory.

Each event is written as one line by one ``write`` call, so a crash loses at most the line being
written (the reader skips a torn last line). A line the writer cannot write whole (a full disk) is
cut back out of the file and counted (:attr:`EventLogWriter.dropped`, the session's
``events_dropped["event_log"]``), so the log has no partial line and its ``session_end`` says how
many events it lacks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from recompprof._eventlog.format import LOG_NAME, SUFFIX
from recompprof._model.events import Event, to_json_bytes

# How often (seconds, at most) the writer checks that its file was not deleted under it.
REOPEN_CHECK_SECONDS = 1.0
# The writer's count of events it could not write, as the session's events_dropped names it.
DROPPED = "event_log"


def json_line(event: Event) -> bytes:
    """An event's line in the log: :func:`to_json_bytes` and a newline."""
    return to_json_bytes(event) + b"\n"


def log_path(run_dir: Path, rank: int, pid: int) -> Path:
    """``<run_dir>/rank<rank>-<pid>.jsonl``: one file per rank and process (restarts don't clobber)."""
    return run_dir / f"rank{rank:05d}-{pid}{SUFFIX}"


def log_rank(path: Path) -> int | None:
    """The rank in a file name that :func:`log_path` made; ``None`` for any other name."""
    match = LOG_NAME.fullmatch(path.name)
    return int(match.group(1)) if match else None


class EventLogWriter:
    """Appends events to one file; each is in the OS (one ``write``, unbuffered) before returning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = self._open()
        self._checked = 0.0
        self.dropped = 0  # events that could not be written (a full disk): none of their bytes stay in the file

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def write(self, event: Event) -> None:
        """Append ``event`` as one line; on an error (raised) none of it stays, and it is counted in ``dropped``."""
        if self._fd is None:
            return
        line = json_line(event)
        written = 0
        try:
            while written < len(
                line
            ):  # a short write (the disk filled mid-line) is followed by the error
                written += os.write(self._fd, line[written:])
        except OSError:
            self.dropped += 1
            if written:  # cut the partial line back out: this process is the file's only writer
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            raise

    def reopen_if_deleted(self, max_age: float | None = None) -> bool:
        """Start a new file at ``path`` if the open one was deleted (e.g. a cleanup job); True if so.

        Checks at most once per ``max_age`` seconds (default :data:`REOPEN_CHECK_SECONDS`): the check
        is a syscall (``fstat``), and every event on the compile path should not pay for something that
        happens once in a job's life, if ever. Events written between a deletion and the check are lost
        with the deleted file.
        """
        max_age = REOPEN_CHECK_SECONDS if max_age is None else max_age
        now = time.monotonic()
        if self._fd is None or now - self._checked < max_age:
            return False
        self._checked = now
        if os.fstat(self._fd).st_nlink > 0:
            return False
        fd, self._fd = self._fd, None
        os.close(fd)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = self._open()
        return True

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def write_events(path: Path, events: Iterable[Event]) -> None:
    """Write ``events`` as a complete log (used by ingest and tests)."""
    writer = EventLogWriter(path)
    try:
        for event in events:
            writer.write(event)
    finally:
        writer.close()
