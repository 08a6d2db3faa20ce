"""Open a run for the offline commands: a run directory of event logs, one log, or a TORCH_TRACE directory.

Whatever could not be read is described, never raised: a torn last line (a crash or a live writer) is
a *warning*; corrupt lines, lines of an unknown schema version and files that hold no recompprof
events at all are *problems* (the figures may be incomplete), which the CI commands turn into a
non-zero exit. A path with no readable event at all is a :class:`RunError`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from recompprof.eventlog import EventLogError, ReadStats, read_file, run_files
from recompprof.events import Event, SessionStart
from recompprof.ingest import IngestError, is_trace_dir, read_trace


class RunError(Exception):
    """The path cannot be read as a run; the message is one line naming the path and why."""


@dataclasses.dataclass
class Run:
    """The events of one run and what reading it skipped."""

    path: Path
    events: list[Event]
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
    events: list[Event] = []
    foreign: list[str] = []
    for file in run_files(path):
        stats = ReadStats()
        found = list(read_file(file, stats))
        if not found and stats.lines:
            foreign.append(file.name)
        events.extend(found)
        for field in ("files", "lines", "torn_tail", "corrupt", "unknown_schema", "unknown_kind"):
            setattr(total, field, getattr(total, field) + getattr(stats, field))
    run = Run(path, events, "event_log")
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
    if not events:
        detail = "; ".join(run.problems + run.warnings) or f"{path}: the event logs are empty"
        raise RunError(f"{path}: no readable recompprof events ({detail})")
    return run


def _load_trace(path: Path) -> Run:
    trace = read_trace(path)
    events = [e for per_file in trace.events for e in per_file]
    run = Run(path, events, "torch_trace")
    if trace.stats.stray_lines or trace.stats.bad_payloads:
        run.problems.append(f"{path}: {trace.stats.describe()}")
    if not trace.stats.records:
        raise RunError(f"{path}: no readable TORCH_TRACE records ({trace.stats.describe() or 'the logs are empty'})")
    return run
