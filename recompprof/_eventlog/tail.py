"""Following the event logs of a run directory while a job writes them: only the bytes appended since the
last look are read, a line without its newline yet waits for it, and logs that appear later are picked up.

What a line becomes (an event, or a skipped line counted in :class:`~recompprof._eventlog.reader.ReadStats`)
is the validated reader's verdict, and its lines are the reader's (one
:class:`~recompprof._eventlog.lines.LineSplitter`), so a followed log yields what ``read_file`` would. Memory
stays bounded: per log only its offset, an unfinished line and two short fingerprints are kept, and an
unfinished line is dropped once it passes ``MAX_LINE`` (its line is then counted as corrupt).

A log is known by its content, not its inode: a copy renamed over it (rsync, ``cp`` to a temporary file then
``mv``) is the same log when it starts with the bytes read so far (its first :data:`FINGERPRINT` bytes and
the last ones before where reading stopped), and reading goes on where it was. Any other file at its path (a
new log, a truncated one) is read again from its start, and :attr:`RunTail.restarted` says so: what was
folded from the old content is then no longer the log's (docs/reliability.md, "A watched log replaced").
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from recompprof._eventlog.format import LOG_GLOB
from recompprof._eventlog.lines import BLOCK, LineSplitter
from recompprof._eventlog.reader import Interner, ReadStats, UnreadableLog, open_log, parse_line
from recompprof._model.events import Event

FINGERPRINT = (
    4096  # bytes kept of a log's start, and of what comes just before where reading stopped
)
RESTARTED = "replaced by a different file; read again from its start"
TRUNCATED = "truncated; read again from its start"


@dataclasses.dataclass
class _Followed:
    """One log: where reading stopped, the file it was (a log deleted and started again is a new file)."""

    offset: int = 0
    identity: tuple[int, int] | None = None  # (device, inode)
    lines: LineSplitter = dataclasses.field(
        default_factory=LineSplitter
    )  # holds a line still waiting for its newline
    interner: Interner = dataclasses.field(default_factory=Interner)
    head: bytes = b""  # its first FINGERPRINT bytes (fewer while it is shorter)
    seam: bytes = b""  # the FINGERPRINT bytes before ``offset``

    def note(self, chunk: bytes) -> None:
        """Keep the fingerprints up to date with ``chunk``, the bytes just read."""
        if len(self.head) < FINGERPRINT:
            self.head += chunk[: FINGERPRINT - len(self.head)]
        self.seam = (self.seam + chunk[-FINGERPRINT:])[-FINGERPRINT:]

    def continues(self, handle: BinaryIO, size: int) -> bool:
        """Whether the file open as ``handle`` (``size`` bytes) holds what was read so far, as far as the
        fingerprints tell: then it is this log, copied."""
        if size < self.offset:
            return False
        handle.seek(0)
        if handle.read(len(self.head)) != self.head:
            return False
        handle.seek(self.offset - len(self.seam))
        return handle.read(len(self.seam)) == self.seam


class RunTail:
    """The logs (``rank*.jsonl``) directly in ``run_dir``, read a little more at each :meth:`poll`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.stats = ReadStats()  # what was skipped, over every poll
        self.unreadable: dict[Path, str] = {}  # files named like a log that cannot be read, and why
        # logs found replaced by other content or truncated, and which; each was read again from its start
        self.restarted: dict[Path, str] = {}
        self.restarts = 0  # how many times that happened, over every poll
        self._logs: dict[Path, _Followed] = {}

    @property
    def logs(self) -> int:
        """How many logs are followed."""
        return len(self._logs)

    def poll(self) -> Iterator[tuple[Path, Event]]:
        """The events of the lines completed since the last poll, log by log, each log's in order.

        Raises ``OSError`` when the directory itself cannot be listed (it may not exist yet).
        """
        with os.scandir(self.run_dir) as entries:
            paths = sorted(
                self.run_dir / entry.name
                for entry in entries
                if fnmatch.fnmatchcase(entry.name, LOG_GLOB)
            )
        for path in paths:
            followed = self._logs.get(path)
            if followed is None:
                followed = self._logs[path] = _Followed()
                self.stats.files += 1
            try:
                yield from ((path, event) for event in self._read(path, followed))
            except UnreadableLog as exc:
                if os.path.lexists(path):  # else it was removed since it was listed: nothing to say
                    self.unreadable[path] = exc.why
            else:
                self.unreadable.pop(path, None)

    def finish(self) -> Iterator[tuple[Path, Event]]:
        """The last lines that never got their newline, read as the reader reads a file's last line:
        an event if it parses, else a torn last line (a corrupt one, if oversized). Call once, when no more is to come."""
        for path, followed in self._logs.items():
            last = followed.lines.end()
            if last is not None:
                self.stats.lines += 1
                yield from (
                    (path, event)
                    for event in parse_line(last[0], self.stats, followed.interner, torn=last[1])
                )

    def _read(self, path: Path, followed: _Followed) -> Iterator[Event]:
        fd = open_log(path)
        with open(fd, "rb") as handle:
            info = os.fstat(fd)
            identity = (info.st_dev, info.st_ino)
            moved = identity != followed.identity or info.st_size < followed.offset
            # another file at this path, or this one cut: is it still the log read so far?
            if followed.offset and moved and not followed.continues(handle, info.st_size):
                self._restart(path, followed, same=identity == followed.identity)
            followed.identity = identity
            handle.seek(followed.offset)
            while chunk := handle.read(BLOCK):
                followed.offset += len(chunk)
                followed.note(chunk)
                yield from self._lines(chunk, followed)

    def _restart(self, path: Path, followed: _Followed, *, same: bool) -> None:
        followed.offset, followed.head, followed.seam = 0, b"", b""
        followed.lines.reset()
        self.restarted[path] = TRUNCATED if same else RESTARTED
        self.restarts += 1

    def _lines(self, chunk: bytes, followed: _Followed) -> Iterator[Event]:
        lines = followed.lines.feed(chunk)
        self.stats.lines += len(lines)
        for line in lines:
            yield from parse_line(line, self.stats, followed.interner, torn=False)
