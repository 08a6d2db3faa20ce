"""One report from parts of a run folded apart: how ``report`` and ``diff`` fold large runs in worker
processes.

``build_run_report`` folds each event-log file of a large run in a forked worker
(:mod:`recompprof._analysis.workers`) and merges the partial reports in file order, which is the order the
single-process fold reads them in. The merge gives the report that one fold over the files gives:

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

import dataclasses
from collections.abc import Iterable
from typing import Any

from recompprof._analysis import report as report_module, workers as parallel
from recompprof._analysis.completeness import merge_verdicts
from recompprof._analysis.fold import build_report, sort_ranks, sum_phases
from recompprof._analysis.report import FrameReport, Report
from recompprof._model.events import Event


class _Unmergeable(Exception):
    """The parts do not determine what one fold over them would give."""


def build_run_report(events: Iterable[Event], *, workers: int | None = None) -> Report:
    """:func:`recompprof._analysis.fold.build_report` over a run; a large run of event-log files (an
    ``EventStream``) is folded file by file in up to ``workers`` forked processes (default: one per
    CPU above ``workers.PARALLEL_MIN_BYTES``) and merged, with the same result."""
    return build_run_reports([events], workers=workers)[0]


def build_run_reports(runs: list[Iterable[Event]], *, detail: bool = True, workers: int | None = None) -> list[Report]:
    """:func:`build_run_report` of each run, the files of all of them shared out among the workers
    (``diff``: one run with more recompiles no longer keeps one worker busy after the other is done)."""
    tasks = [(which, index) for which, run in enumerate(runs) for index in range(len(getattr(run, "files", ())))]
    if workers is None:
        workers = parallel.default_workers(runs, len(tasks)) if tasks else 1
    if workers <= 1 or len(tasks) < 2 or not parallel.can_fork(runs):
        return [build_report(run, detail=detail) for run in runs]
    streams: list[Any] = list(runs)
    parts = parallel.map_forked(lambda task: _fold_file(streams[task[0]], task[1], detail), streams, tasks, workers)
    reports = []
    for which, run in enumerate(runs):
        merged = merge([part for (of, _), part in zip(tasks, parts, strict=True) if of == which])
        # What the workers read is recorded on the stream, so this second pass counts nothing twice.
        reports.append(merged if merged is not None else build_report(run, detail=detail))
    return reports


def _fold_file(stream: Any, index: int, detail: bool) -> Report:
    report = build_report(stream.of_file(stream.files[index]), detail=detail)
    report.drop_fold_state()  # it would not pickle
    return report


def merge(parts: list[Report]) -> Report | None:
    """The report one fold over the parts' events, in order, gives; None where the parts cannot say."""
    if not parts:
        return Report()
    total = Report(detail=all(part.detail for part in parts))
    try:
        for part in parts:
            _absorb(total, part)
    except _Unmergeable:
        return None
    for frame in total.frames.values():
        sort_ranks(frame)
    sum_phases(total)
    total.incomplete = dict(sorted(total.incomplete.items()))
    total.log_gaps = dict(sorted(total.log_gaps.items()))
    return total


def _check(ok: bool) -> None:
    if not ok:
        raise _Unmergeable


def _keyed(into: dict[Any, Any], part: dict[Any, Any], bound: int) -> list[Any]:
    """The keys of ``part`` new to ``into``, after checking that one fold would have kept them all.

    A part holding ``bound`` keys may have dropped some; a union past ``bound`` would.
    """
    _check(len(part) < bound)
    new = [key for key in part if key not in into]
    _check(len(into) + len(new) <= bound)
    return new


def _prefix(into: list[Any], part: list[Any], bound: int) -> None:
    into.extend(part[: max(0, bound - len(into))])


def _absorb(total: Report, part: Report) -> None:
    """Add ``part`` (folded from the events right after those already in ``total``) to ``total``."""
    earlier_ranks = {rank for frame in total.frames.values() for rank in frame.compiles_by_rank}
    _check(not part.frames_dropped and not part.orphan_backward_ranks & earlier_ranks)
    _check(not part.sessions_unopened & total.sessions_open)
    merge_verdicts(total.incomplete, part.incomplete)
    merge_verdicts(total.log_gaps, part.log_gaps)
    touched = part.ranks | part.sessions_unopened  # every rank with an event in part
    total.sessions_unopened |= part.sessions_unopened - total.ranks - total.sessions_unopened
    total.sessions_open = (total.sessions_open - touched) | part.sessions_open
    for run in part.runs:
        if run not in total.runs and len(total.runs) < report_module.MAX_LISTED:
            total.runs.append(run)
    if part.ranks:  # it read a session start: the last one's settings stand
        total.recompile_limit, total.warmup_steps = part.recompile_limit, part.warmup_steps
    total.ranks |= part.ranks
    total.modes |= part.modes
    total.profile_mechanisms |= part.profile_mechanisms
    total.from_torch_trace = total.from_torch_trace or part.from_torch_trace
    total.steps_from_trace = total.steps_from_trace or part.steps_from_trace
    # A signal dark in both: every later session end that names it has the last word; new ones as the part saw them.
    for name in total.signals_dark:
        if name in part.signals_off_last:
            total.signals_dark[name] = part.signals_off_last[name]
    for name, why in part.signals_dark.items():
        total.signals_dark.setdefault(name, why)
    total.signals_off_last.update(part.signals_off_last)
    total.orphan_backward_ranks |= part.orphan_backward_ranks
    total.events += part.events
    total.last_step = max(total.last_step, part.last_step)
    total.wall_seconds = max(total.wall_seconds, part.wall_seconds)
    total.internal_errors.update(part.internal_errors)
    total.categories.update(part.categories)
    for key in _keyed(total.graph_break_groups, part.graph_break_groups, report_module.MAX_BREAK_GROUPS):
        total.graph_break_groups[key] = dataclasses.replace(part.graph_break_groups[key], count=0)
    for key, group in part.graph_break_groups.items():
        total.graph_break_groups[key].count += group.count
    for key in _keyed(total.cudagraph_skips, part.cudagraph_skips, report_module.MAX_LISTED):
        total.cudagraph_skips[key] = 0
    total.cudagraph_skips.update(part.cudagraph_skips)
    _prefix(total.failure_messages, part.failure_messages, report_module.MAX_LISTED)
    total.cache_lookups.update(part.cache_lookups)
    total.cache_seconds_saved += part.cache_seconds_saved
    for key in _keyed(total.trace_seconds_by_function, part.trace_seconds_by_function, report_module.MAX_FUNCTIONS):
        total.trace_seconds_by_function[key] = 0.0  # type: ignore[assignment]  # float seconds in a Counter
    total.trace_seconds_by_function.update(part.trace_seconds_by_function)
    for key in _keyed(total.frames, part.frames, report_module.MAX_FRAMES):
        frame = part.frames[key]
        total.frames[key] = FrameReport(frame.label, frame.name, frame.file, frame.line, frame.key)
    for key, frame in part.frames.items():
        _absorb_frame(total.frames[key], frame)
    for key in _keyed(total.causes, part.causes, report_module.MAX_CAUSES):
        cause = part.causes[key]
        total.causes[key] = dataclasses.replace(cause, recompiles=0, seconds=0.0, steps=[], steps_total=0, example="",
                                                call_site=[], steady_state=0, warmup=0, made_dynamic="")
    for key, cause in part.causes.items():
        into = total.causes[key]
        into.recompiles += cause.recompiles
        into.seconds += cause.seconds
        _prefix(into.steps, cause.steps, report_module.MAX_STEPS_LISTED)
        into.steps_total += cause.steps_total
        into.example = into.example or cause.example
        into.call_site = into.call_site or cause.call_site
        into.steady_state += cause.steady_state
        into.warmup += cause.warmup
        into.made_dynamic = into.made_dynamic or cause.made_dynamic


def _absorb_frame(into: FrameReport, part: FrameReport) -> None:
    into.compiles += part.compiles
    into.recompiles += part.recompiles
    into.steady_state_recompiles += part.steady_state_recompiles
    into.backward_compiles += part.backward_compiles
    into.compile_seconds += part.compile_seconds
    into.guard_failures.update(part.guard_failures)
    into.limit_hits.update(part.limit_hits)
    _prefix(into.automatic_dynamic, part.automatic_dynamic, report_module.MAX_STEPS_LISTED)
    into.automatic_dynamic_recompiles += part.automatic_dynamic_recompiles
    for changed, text in part.changed_again.items():
        if len(into.changed_again) < report_module.MAX_STEPS_LISTED:
            into.changed_again.setdefault(changed, text)
    _prefix(into.recompile_steps, part.recompile_steps, report_module.MAX_STEPS_LISTED)
    into.recompile_steps_total += part.recompile_steps_total
    for key in _keyed(into.reasons, part.reasons, report_module.MAX_GROUPS_PER_FRAME):
        group = part.reasons[key]
        into.reasons[key] = dataclasses.replace(group, changes=0, failures=0)  # the earliest example stays
    for key, group in part.reasons.items():
        into.reasons[key].changes += group.changes
        into.reasons[key].failures += group.failures
    into.graph_breaks += part.graph_breaks
    into.failures.update(part.failures)
    for phase, seconds in part.phases.items():
        into.phases[phase] = into.phases.get(phase, 0.0) + seconds
    into.compiles_by_rank.update(part.compiles_by_rank)
    for rank, sets in part.guard_sets_by_rank.items():
        seen = into.guard_sets_by_rank.setdefault(rank, set())
        _check(len(sets) < report_module.MAX_GUARD_SETS and len(seen | sets) <= report_module.MAX_GUARD_SETS)
        seen |= sets
    into.recompiles_by_rank.update(part.recompiles_by_rank)
    for rank, step in part.first_recompile_step_by_rank.items():
        into.first_recompile_step_by_rank.setdefault(rank, step)
    for rank, steps in part.recompile_steps_by_rank.items():
        _prefix(into.recompile_steps_by_rank.setdefault(rank, []), steps, report_module.MAX_STEPS_LISTED)
    for rank, categories in part.categories_by_rank.items():
        into.categories_by_rank.setdefault(rank, type(categories)()).update(categories)
    for rank, firsts in part.category_first_step_by_rank.items():
        known = into.category_first_step_by_rank.setdefault(rank, {})
        for category, step in firsts.items():
            known.setdefault(category, step)
    into.limit_hits_by_rank.update(part.limit_hits_by_rank)
    for rank, step in part.first_limit_hit_step_by_rank.items():
        into.first_limit_hit_step_by_rank.setdefault(rank, step)
