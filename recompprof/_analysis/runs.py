"""Open a run for the offline commands: a run directory of event logs, one log, or a TORCH_TRACE directory.

Whatever could not be read is described, never raised: a torn last line (a crash or a live writer) is
a *warning*; corrupt lines (a non-finite number among them), lines of an unknown schema version, files
that hold no recompprof events at all and files named like a log that cannot be read (a FIFO, a
dangling symlink, a directory, no permission: that rank's figures are missing) are *problems* (the
figures may be incomplete), which the CI commands turn into a non-zero exit. A path with no readable
event at all is a :class:`RunError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path

from recompprof._analysis.trace.ingest import IngestError, is_trace_dir, read_trace
from recompprof._errors import RecompprofError
from recompprof._eventlog.format import SUFFIX
from recompprof._eventlog.reader import (
    EventLogError,
    ReadStats,
    UnreadableLog,
    first_event,
    run_files,
    scan_file,
)
from recompprof._eventlog.writer import log_rank
from recompprof._model.events import Event, SessionStart
from recompprof._model.ranks import missing, rank_list


class RunError(RecompprofError):
    """The path cannot be read as a run; the message is one line naming the path and why. Where a reader's
    error (an ``EventLogError``, an ``IngestError``, an ``OSError``) is why, it is kept as ``__cause__``."""


class EventStream:
    """The events of a run's event logs, read from disk as they are iterated, never held.

    A million events held as models would take gigabytes; the commands fold them in one streaming pass.
    What each file's first complete read skipped is recorded on the way (``finish`` reads only files
    no pass has read whole), so counting problems costs no second pass. A file's rank comes from its
    name (``rank00003-<pid>.jsonl``), so one rank can be folded reading only its files.
    """

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        self.stats = ReadStats()
        self.found = 0
        self.foreign: list[str] = []
        self.unreadable: list[
            str
        ] = []  # "name (why)" of files named like logs that could not be read
        self._read_whole: set[Path] = set()

    def _read(self, file: Path) -> Iterator[Event]:
        stats = ReadStats()
        try:
            yield from scan_file(file, stats)  # views: the commands only fold them
        except (
            UnreadableLog
        ) as exc:  # raised before any event: the rank's figures are missing, the others stand
            if file not in self._read_whole:
                self._read_whole.add(file)
                self.unreadable.append(f"{file.name} ({exc.why})")
            return
        if file not in self._read_whole:  # reached only when the file was read to its end
            self._read_whole.add(file)
            self.stats.add(stats)
            in_file = stats.lines - stats.skipped
            self.found += in_file
            if stats.lines and not in_file:
                self.foreign.append(file.name)

    def __iter__(self) -> Iterator[Event]:
        for file in self.files:
            yield from self._read(file)

    def finish(self) -> None:
        """Read whatever no pass has read to its end, so the skipped-line counts are complete."""
        for file in self.files:
            if file not in self._read_whole:
                for _ in self._read(file):
                    pass

    def missing_ranks(self) -> tuple[int, list[int]]:
        """The largest world size the logs' ``session_start`` lines announce, and the ranks below it that
        no log here is of (by its name or its ``session_start``). Reads each log's first line only."""
        world, ranks = 0, set()
        for file in self.files:
            if (rank := log_rank(file)) is not None:
                ranks.add(rank)
            try:
                first = first_event(file)
            except EventLogError:  # unreadable: finish says so, as that rank's missing figures
                continue
            if isinstance(first, SessionStart):
                world = max(world, first.world_size)
                ranks.add(first.rank)
        return world, missing(world, ranks)

    def ranks(self) -> list[int] | None:
        """The ranks named by the files, or None if a file's name does not say."""
        ranks = [rank for file in self.files if (rank := log_rank(file)) is not None]
        return sorted(set(ranks)) if len(ranks) == len(self.files) else None

    def take_progress(self) -> tuple[ReadStats, int, list[str], list[str], set[Path]]:
        """What the reads so far recorded, handed over and forgotten (a worker process's part; see ``absorb``)."""
        progress = (self.stats, self.found, self.foreign, self.unreadable, self._read_whole)
        self.stats, self.found, self.foreign, self.unreadable, self._read_whole = (
            ReadStats(),
            0,
            [],
            [],
            set(),
        )
        return progress

    def absorb(self, progress: tuple[ReadStats, int, list[str], list[str], set[Path]]) -> None:
        """Record what another process's copy of this stream read (``take_progress``), as if read here."""
        stats, found, foreign, unreadable, read_whole = progress
        self.stats.add(stats)
        self.found += found
        self.foreign.extend(foreign)
        self.unreadable.extend(unreadable)
        self._read_whole |= read_whole

    def of_file(self, file: Path) -> Iterator[Event]:
        """The events of one of the run's files, read (and recorded) as iterating the stream reads it."""
        return self._read(file)

    def of_rank(self, rank: int) -> Iterator[Event]:
        """The events of one rank, reading only the files named for it."""
        for file in self.files:
            if log_rank(file) == rank:
                yield from (e for e in self._read(file) if e.rank == rank)


# Where a run's events came from (Run.source, and the lake's runs.source column).
EVENT_LOG = "event_log"  # recompprof's own event logs
TORCH_TRACE = "torch_trace"  # an ingested TORCH_TRACE


@dataclasses.dataclass
class Run:
    """The events of one run and what reading it skipped (complete once :meth:`finish` has run)."""

    path: Path
    events: Iterable[
        Event
    ]  # a list (TORCH_TRACE) or an EventStream (event logs): iterate, don't index
    source: str  # EVENT_LOG or TORCH_TRACE
    warnings: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def finish(self) -> None:
        """Describe what reading skipped; raise :class:`RunError` if the run held no event at all.

        Call it after the pass that computes the figures: it reads nothing that pass already read.
        """
        stream = self.events
        if not isinstance(stream, EventStream):
            return
        stream.finish()
        total, path = stream.stats, self.path
        self.warnings.clear()
        self.problems.clear()
        if stream.unreadable:
            names = sorted(stream.unreadable)  # file order, whichever process read them
            self.problems.append(
                f"{len(names)} event log(s) could not be read, so their ranks' figures are missing: "
                + ", ".join(names[:5])
                + (" ..." if len(names) > 5 else "")
            )
        if stream.foreign:
            self.problems.append(
                f"{len(stream.foreign)} file(s) hold no recompprof events (foreign or from a newer "
                "version): "
                + ", ".join(stream.foreign[:5])
                + (" ..." if len(stream.foreign) > 5 else "")
            )
        world, absent = stream.missing_ranks() if path.is_dir() else (0, [])
        if absent:
            self.problems.append(
                f"{path}: the run's world size is {world} and {rank_list(absent)} wrote no event "
                "log here (a rank that did not attach, or a log not collected from its node), so "
                "their figures are missing"
            )
        if total.corrupt or total.unknown_schema:
            skipped = dataclasses.replace(total, torn_tail=0, unknown_kind=0)
            self.problems.append(f"{path}: {skipped.describe()} of {total.lines}")
        if total.torn_tail:
            self.warnings.append(
                f"{path}: skipped {total.torn_tail} torn last line(s) (a process still writing, or one that crashed)"
            )
        if total.unknown_kind:
            self.warnings.append(
                f"{path}: skipped {total.unknown_kind} line(s) of an event kind this version does not know"
            )
        if not stream.found:
            detail = "; ".join(self.problems + self.warnings) or f"{path}: the event logs are empty"
            raise RunError(f"{path}: no readable recompprof events ({detail})")


def load(path: Path) -> Run:
    """Open ``path`` (event-log run directory, single ``*.jsonl``, or TORCH_TRACE logs).

    Event logs are read lazily: iterate ``run.events`` to compute, then call ``run.finish()``.
    """
    try:
        if is_trace_dir(path) and not _has_event_logs(path):
            return _load_trace(path)
        return Run(path, EventStream(run_files(path)), EVENT_LOG)
    except (EventLogError, IngestError) as exc:
        raise RunError(str(exc)) from exc  # the reader's own error stays reachable
    except OSError as exc:  # e.g. a directory that vanishes or turns unreadable while we walk it
        raise RunError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _has_event_logs(path: Path) -> bool:
    return path.is_dir() and any(path.rglob(f"*{SUFFIX}"))


def _load_trace(path: Path) -> Run:
    trace = read_trace(path)
    events = [e for per_file in trace.events for e in per_file]
    run = Run(path, events, TORCH_TRACE)
    if trace.stats.stray_lines or trace.stats.bad_payloads or trace.stats.bad_records:
        run.problems.append(f"{path}: {trace.stats.describe()}")
    if not trace.stats.records:
        raise RunError(
            f"{path}: no readable TORCH_TRACE records ({trace.stats.describe() or 'the logs are empty'})"
        )
    return run
