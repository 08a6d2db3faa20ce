"""One report from parts of a run folded apart: how ``report`` and ``diff`` fold large runs in worker
processes.

``build_run_report`` folds each event-log file of a large run in a forked worker
(:mod:`recompprof._analysis.report.workers`) and merges the partial reports in file order, which is the order the
single-process fold reads them in. Each figure family of the report merges itself
(:meth:`recompprof._analysis.report.model.Report.merge`; the rules sit beside the family's fold), and the merge
gives the report that one fold over the files gives:

- sums and counters add; "first seen" values (a first step, an example) come from the earliest
  part; lists kept to a bound (steps, runs, failure messages) are the earlier part's followed by the
  later one's, cut at the bound, which is what one fold appends;
- dicts come out in the order one fold inserts into them (the earlier part's keys, then the later
  part's new ones), so ties in every ranking break the same way;
- compile seconds are sums of the parts' sums: the same seconds, added in another order, so they
  can differ in the last bits of a float (the reports print them rounded).

Where one fold's result depends on more than the parts hold, the merge gives up and the caller folds
the run in one process: a part that reached a bound on distinct keys (frames, reason groups of a
frame, causes, graph-break reasons, cudagraph skips, traced functions, guard sets), a union of parts
past such a bound, or a backward compile whose forward one fold would have found in an earlier part
(the same rank in two files), or a part whose first event of a rank is not its ``session_start``
while an earlier part left that rank's session open (the later events belong to that session). Real
runs reach none of these: the bounds are there against runaway input, and each log starts a session.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from recompprof._analysis.report import workers as parallel
from recompprof._analysis.report.bounded import Unmergeable
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.model import Report
from recompprof._model.events import Event


def build_run_report(events: Iterable[Event], *, workers: int | None = None) -> Report:
    """:func:`recompprof._analysis.report.fold.build_report` over a run; a large run of event-log files (an
    ``EventStream``) is folded file by file in up to ``workers`` forked processes (default: one per
    CPU above ``workers.PARALLEL_MIN_BYTES``) and merged, with the same result."""
    return build_run_reports([events], workers=workers)[0]


def build_run_reports(
    runs: list[Iterable[Event]], *, detail: bool = True, workers: int | None = None
) -> list[Report]:
    """:func:`build_run_report` of each run, the files of all of them shared out among the workers
    (``diff``: one run with more recompiles no longer keeps one worker busy after the other is done)."""
    tasks = [
        (which, index)
        for which, run in enumerate(runs)
        for index in range(len(getattr(run, "files", ())))
    ]
    if workers is None:
        workers = parallel.default_workers(runs, len(tasks)) if tasks else 1
    if workers <= 1 or len(tasks) < 2 or not parallel.can_fork(runs):
        return [build_report(run, detail=detail) for run in runs]
    streams: list[Any] = list(runs)
    parts = parallel.map_forked(
        lambda task: _fold_file(streams[task[0]], task[1], detail), streams, tasks, workers
    )
    reports = []
    for which, run in enumerate(runs):
        merged = merge([part for (of, _), part in zip(tasks, parts, strict=True) if of == which])
        # What the workers read is recorded on the stream, so this second pass counts nothing twice.
        reports.append(merged if merged is not None else build_report(run, detail=detail))
    return reports


def _fold_file(stream: Any, index: int, detail: bool) -> Report:
    return build_report(
        stream.of_file(stream.files[index]), detail=detail
    )  # figures only: it pickles


def merge(parts: list[Report]) -> Report | None:
    """The report one fold over the parts' events, in order, gives; None where the parts cannot say."""
    total = Report()
    try:
        for part in parts:
            total.merge(part)
    except Unmergeable:
        return None
    return total
