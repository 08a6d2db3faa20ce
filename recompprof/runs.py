"""Open a run for the offline commands: a run directory of event logs, one log, or a TORCH_TRACE directory.

Whatever could not be read is described, never raised: a torn last line (a crash or a live writer) is
a *warning*; corrupt lines, lines of an unknown schema version and files that hold no recompprof
events at all are *problems* (the figures may be incomplete), which the CI commands turn into a
non-zero exit. A path with no readable event at all is a :class:`RunError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path

from recompprof.eventlog import EventLogError, ReadStats, read_file, run_files
from recompprof.events import Event, SessionStart
from recompprof.ingest import IngestError, is_trace_dir, read_trace


class RunError(Exception):
    """The path cannot be read as a run; the message is one line naming the path and why."""


class EventStream:
    """The events of a run's event logs, read afresh from disk on each iteration.

    A million events held as models would take gigabytes; the commands fold them in one streaming pass
    instead. ``ranks_of`` (each file's ranks, from the first read) lets a per-rank fold read only the
    files that hold that rank.
    """

    def __init__(self, files: list[Path], ranks_of: dict[Path, frozenset[int]]) -> None:
        self.files = files
        self.ranks_of = ranks_of

    def __iter__(self) -> Iterator[Event]:
        for file in self.files:
            yield from read_file(file)

    def ranks(self) -> list[int]:
        return sorted({rank for ranks in self.ranks_of.values() for rank in ranks})

    def of_rank(self, rank: int) -> Iterator[Event]:
        """The events of one rank, reading only the files that hold it."""
        for file in self.files:
            if rank in self.ranks_of.get(file, ()):
                yield from (e for e in read_file(file) if e.rank == rank)


@dataclasses.dataclass
class Run:
    """The events of one run and what reading it skipped."""

    path: Path
    events: Iterable[Event]  # a list (TORCH_TRACE) or an EventStream (event logs): iterate, don't index
    source: str  # "event_log" | "torch_trace"
    warnings: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def has_steps(self) -> bool:
        """Whether events carry training steps (TORCH_TRACE traces do not)."""
        return any(e.step is not None for e in self.events if not isinstance(e, SessionStart))


def load(path: Path) -> Run:
    """Read ``path`` (event-log run directory, single ``*.jsonl``, or TORCH_TRACE logs)."""
    try:
        if is_trace_dir(path) and not _has_event_logs(path):
            return _load_trace(path)
        return _load_event_logs(path)
    except (EventLogError, IngestError) as exc:
        raise RunError(str(exc)) from None
    except OSError as exc:  # e.g. a directory that vanishes or turns unreadable while we walk it
        raise RunError(f"cannot read {path}: {exc.strerror or exc}") from None


def _has_event_logs(path: Path) -> bool:
    return path.is_dir() and any(path.rglob("*.jsonl"))


def _load_event_logs(path: Path) -> Run:
    total = ReadStats()
    files = run_files(path)
    ranks_of: dict[Path, frozenset[int]] = {}
    foreign: list[str] = []
    found = 0
    for file in files:  # a first pass for what the lines hold and what was skipped, keeping no event
        stats = ReadStats()
        ranks = {event.rank for event in read_file(file, stats)}
        ranks_of[file] = frozenset(ranks)
        in_file = stats.lines - stats.skipped
        if not in_file and stats.lines:
            foreign.append(file.name)
        found += in_file
        for field in ("files", "lines", "torn_tail", "corrupt", "unknown_schema", "unknown_kind"):
            setattr(total, field, getattr(total, field) + getattr(stats, field))
    run = Run(path, EventStream(files, ranks_of), "event_log")
    if foreign:
        run.problems.append(f"{len(foreign)} file(s) hold no recompprof events (foreign or from a newer version): "
                            + ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else ""))
    if total.corrupt or total.unknown_schema:
        skipped = dataclasses.replace(total, torn_tail=0, unknown_kind=0)
        run.problems.append(f"{path}: {skipped.describe()} of {total.lines}")
    if total.torn_tail:
        run.warnings.append(f"{path}: skipped {total.torn_tail} torn last line(s) (a process still writing, or one that crashed)")
    if total.unknown_kind:
        run.warnings.append(f"{path}: skipped {total.unknown_kind} line(s) of an event kind this version does not know")
    if not found:
        detail = "; ".join(run.problems + run.warnings) or f"{path}: the event logs are empty"
        raise RunError(f"{path}: no readable recompprof events ({detail})")
    return run


def _load_trace(path: Path) -> Run:
    trace = read_trace(path)
    events = [e for per_file in trace.events for e in per_file]
    run = Run(path, events, "torch_trace")
    if trace.stats.stray_lines or trace.stats.bad_payloads or trace.stats.bad_records:
        run.problems.append(f"{path}: {trace.stats.describe()}")
    if not trace.stats.records:
        raise RunError(f"{path}: no readable TORCH_TRACE records ({trace.stats.describe() or 'the logs are empty'})")
    return run
