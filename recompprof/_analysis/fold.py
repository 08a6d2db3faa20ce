"""Folding events into a :class:`~recompprof._analysis.report.Report`.

``build_report`` folds a stream of events into a bounded report (streaming, so a million events need no
more memory than a few hundred frames).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from recompprof._analysis.completeness import SessionFold
from recompprof._analysis.report import (
    CAPTURE_SIGNALS,
    MAX_BREAK_GROUPS,
    MAX_BREAK_HINTS,
    MAX_CAUSES,
    MAX_FRAMES,
    MAX_FUNCTIONS,
    MAX_GROUPS_PER_FRAME,
    MAX_GUARD_SETS,
    MAX_LISTED,
    MAX_STEPS_LISTED,
    OTHER_BREAKS,
    BreakGroup,
    CauseReport,
    FrameReport,
    ReasonGroup,
    Report,
    _RankFold,
)
from recompprof._model.causes import Cause, explaining_reason
from recompprof._model.compiles import changed_subject
from recompprof._model.counting import COSTS, COUNTED, RECOMPILE, fold_compile, fold_limit_hit, verdict
from recompprof._model.events import (
    PHASES,
    Category,
    Compile,
    Event,
    GraphBreak,
)


def build_report(events: Iterable[Event], *, detail: bool = True, sessions: SessionFold | None = None) -> Report:
    """Fold ``events`` (any order of ranks, one pass) into a :class:`Report`.

    ``detail=False`` leaves out what only the rendered report shows (per-rank figures, recompile steps,
    automatic-dynamic dims, compile seconds by phase): every count, reason group and cause is the same,
    at about four fifths of the cost. ``diff`` folds its two runs so. ``sessions`` is the fold of the
    runs' sessions to count in, when the caller counts events the figures leave out there too.
    """
    report = Report(detail=detail)
    if sessions is not None:
        report.session_fold = sessions
    fold = report.session_fold
    open_sessions = fold.open
    folded, last_step = 0, 0
    for event in events:  # by kind, not class: the offline commands fold msgspec views (recompprof._eventlog.fastread)
        folded += 1
        step = event.step
        if step is not None and step > last_step:
            last_step = step
        if event.kind == "compile":  # nearly every event: tested first (event.kind each time: mypy narrows on it)
            counted = _add_compile(report, event)
            session = open_sessions.get(event.rank) or fold.unstarted(event)
            session.last = event
            session.verdicts[counted] += 1  # what it counts as (recompprof._analysis.completeness)
        elif event.kind == "session_start":
            fold.start(event)
            report.ranks.add(event.rank)
            if event.signals.get("torch_trace"):  # ingested: the event's mode is a placeholder
                report.from_torch_trace = True
                report.steps_from_trace = report.steps_from_trace or bool(event.signals.get("step_in_trace"))
            else:
                report.modes.add(event.mode)
            if event.profile_mechanism:
                report.profile_mechanisms.add(event.profile_mechanism)
            report.recompile_limit = event.recompile_limit
            report.warmup_steps = event.warmup_steps
            if event.run_id not in report.runs and len(report.runs) < MAX_LISTED:
                report.runs.append(event.run_id)
            for name in CAPTURE_SIGNALS:
                if event.signals.get(name) is False:
                    report.signals_dark.setdefault(name, "off from the start")
        elif event.kind == "signal":
            (open_sessions.get(event.rank) or fold.unstarted(event)).last = event
            if not event.live:
                report.signals_dark.setdefault(event.signal, event.reason or "went dark")
        elif event.kind == "recompile_limit_hit":
            session = open_sessions.get(event.rank) or fold.unstarted(event)
            session.last = event
            session.limit_hits += 1
            frame = _frame(report, event.frame)
            if frame is not None:
                fold_limit_hit(frame, event)
                frame.limit_hits_by_rank[event.rank] += 1
                frame.first_limit_hit_step_by_rank.setdefault(event.rank, event.step or 0)
        elif event.kind == "graph_break":
            session = open_sessions.get(event.rank) or fold.unstarted(event)
            session.last = event
            session.graph_breaks += event.count
            frame = _frame(report, event.frame) if event.frame is not None else None
            if frame is not None:
                frame.graph_breaks += event.count
            _add_break(report, event, frame.label if frame is not None else "")
        elif event.kind == "session_end":
            fold.end(event)
            for name in report.signals_dark.keys() & event.signals_off.keys():  # the why, as the session saw it
                report.signals_dark[name] = event.signals_off[name]
            report.signals_off_last.update(event.signals_off)
            report.wall_seconds = max(report.wall_seconds, event.totals.get("wall_seconds", 0.0))
            report.internal_errors.update(event.internal_errors)
    report.events, report.last_step = folded, last_step
    _finish(report)
    return report


def _finish(report: Report) -> None:
    """The figures the fold kept in its own form: per-rank dicts (ranks in order), phase totals, and
    the verdicts on sessions still open."""
    sessions = report.session_fold
    report.sessions_open = sessions.finish()
    report.sessions_unopened = set(sessions.unopened)
    report.incomplete = dict(sorted(sessions.incomplete.items()))
    report.log_gaps = dict(sorted(sessions.gaps.items()))
    for frame in report.frames.values():
        for rank in sorted(frame.rank_folds):
            fold = frame.rank_folds[rank]
            frame.compiles_by_rank[rank] += fold.compiles
            if fold.guard_sets is not None:
                frame.guard_sets_by_rank[rank] = fold.guard_sets
            if fold.recompiles:
                frame.recompiles_by_rank[rank] += fold.recompiles
                frame.first_recompile_step_by_rank[rank] = fold.first_recompile_step or 0
                frame.recompile_steps_by_rank[rank] = fold.steps
            if fold.categories:
                frame.categories_by_rank[rank] = Counter(fold.categories)
                frame.category_first_step_by_rank[rank] = fold.category_first_step
        frame.rank_folds = {}
        sort_ranks(frame)
    sum_phases(report)


def sort_ranks(frame: FrameReport) -> None:
    """Each per-rank dict of ``frame`` in rank order (so a report does not depend on which rank came first)."""
    for field in ("compiles_by_rank", "guard_sets_by_rank", "recompiles_by_rank", "first_recompile_step_by_rank",
                  "recompile_steps_by_rank", "categories_by_rank", "category_first_step_by_rank", "limit_hits_by_rank",
                  "first_limit_hit_step_by_rank"):
        by_rank = getattr(frame, field)
        if len(by_rank) > 1:
            setattr(frame, field, type(by_rank)(dict(sorted(by_rank.items()))))  # a Counter takes a mapping


def sum_phases(report: Report) -> None:
    """The report's compile seconds by phase: its frames' (events of dropped frames count in neither)."""
    phases = report.phases = dict.fromkeys(PHASES, 0.0)
    for frame in report.frames.values():
        for phase, seconds in frame.phases.items():
            phases[phase] += seconds


def _add_omitted(frame: FrameReport, omitted: dict[Category, int]) -> None:
    """Guard failures an event counted but did not list (past its per-event cap)."""
    for category, count in omitted.items():
        _group(frame, category, "(more cache entries)", "").failures += count


def _frame(report: Report, frame: object) -> FrameReport | None:
    """The report's entry for ``frame`` (an event's Frame or its view), or None once MAX_FRAMES are kept."""
    found = report.frame_cache.get(frame)  # hashed by value: one lookup for every event of a known frame
    if found is not None:
        return found
    key = frame.key  # type: ignore[attr-defined]
    found = report.frames.get(key)
    if found is None:
        if len(report.frames) >= MAX_FRAMES:
            report.frames_dropped += 1
            return None
        found = report.frames[key] = FrameReport(frame.label, frame.name, frame.file, frame.line, key)  # type: ignore[attr-defined]
    if len(report.frame_cache) < 2 * MAX_FRAMES:  # one Frame and one view per frame, as a rule
        report.frame_cache[frame] = found
    return found


def _add_break(report: Report, event: GraphBreak, label: str) -> None:
    """Count a graph break in its group (reason, place, eager), new groups past MAX_BREAK_GROUPS in one for the rest."""
    reason = event.reason.strip().splitlines()[0][:200] if event.reason.strip() else "graph break"
    key = (reason, event.user_location or "", event.skipped_frame)
    groups = report.graph_break_groups
    group = groups.get(key)
    if group is None:
        if len(groups) >= MAX_BREAK_GROUPS:
            group = groups.setdefault(OTHER_BREAKS, BreakGroup(*OTHER_BREAKS))
        else:
            group = groups[key] = BreakGroup(*key, frame=label, hints=[h[:300] for h in event.hints[:MAX_BREAK_HINTS]])
    group.count += event.count


def ranked_breaks(report: Report) -> list[BreakGroup]:
    """Graph-break groups, most breaks first (frames that ran eagerly first among equals)."""
    return sorted(report.graph_break_groups.values(), key=lambda g: (-g.count, not g.skipped_frame, g.reason, g.location))


def _group(frame: FrameReport, category: str, subject: str, text: str) -> ReasonGroup:
    key = (category, subject)
    group = frame.reasons.get(key)
    if group is None:
        if len(frame.reasons) >= MAX_GROUPS_PER_FRAME:
            key = (category, "(other subjects)")
            group = frame.reasons.setdefault(key, ReasonGroup(*key))
        else:
            group = frame.reasons[key] = ReasonGroup(category, subject, example=text[:300])
    return group


def _add_compile(report: Report, event: Compile) -> int:
    """Fold one compile event; returns its :func:`recompprof._model.counting.verdict`."""
    # The hottest code of the offline commands (a million events): locals over attribute lookups, dict.get
    # over Counter's slower item access; the counting rules stay recompprof._model.counting's (one place).
    # tests/test_report.py and test_one_rule.py pin the result.
    frame = report.frame_cache.get(event.frame) or _frame(report, event.frame)  # _frame's own first lookup, inline
    if frame is None:
        return verdict(event)
    if event.cudagraph_skip is not None:
        key = (frame.label, event.cudagraph_skip)
        if key in report.cudagraph_skips or len(report.cudagraph_skips) < MAX_LISTED:
            report.cudagraph_skips[key] += 1
    recompiled = None  # the rank's fold, for a recompile
    counted = fold_compile(frame, event)
    if counted & COUNTED and report.detail:
        rank = event.rank
        fold = frame.rank_folds.get(rank)
        if fold is None:
            fold = frame.rank_folds[rank] = _RankFold()
        fold.compiles += 1
        if event.guard_set is not None:
            if fold.guard_sets is None:
                fold.guard_sets = set()
            if len(fold.guard_sets) < MAX_GUARD_SETS:
                fold.guard_sets.add(event.guard_set)
        if event.is_recompile:
            recompiled = fold
            step = event.step or 0
            fold.recompiles += 1
            if fold.first_recompile_step is None:
                fold.first_recompile_step = step
            if len(fold.steps) < MAX_STEPS_LISTED:
                fold.steps.append(step)
            if event.automatic_dynamic is not None:
                frame.automatic_dynamic_recompiles += 1
                if len(frame.automatic_dynamic) < MAX_STEPS_LISTED:
                    frame.automatic_dynamic.append(event.automatic_dynamic)
            elif len(frame.changed_again) < MAX_STEPS_LISTED and (reason := explaining_reason(event.reasons)) is not None:
                changed = changed_subject(reason)
                if changed is not None:
                    frame.changed_again.setdefault(changed, reason.text[:300])
            frame.recompile_steps_total += 1
            if len(frame.recompile_steps) < MAX_STEPS_LISTED:
                frame.recompile_steps.append(step)
    reasons = event.reasons
    if reasons:
        groups = frame.reasons
        for reason in reasons:
            category = reason.category
            group = groups.get((category, reason.subject))  # the common case, without a call
            if group is None:
                group = _group(frame, category, reason.subject, reason.text)
            group.failures += 1
            if reason.explains_change and counted & RECOMPILE:  # a refused compile (limit hit) changed nothing
                group.changes += 1
                categories: dict[str, int] = report.categories
                categories[category] = categories.get(category, 0) + 1
                if recompiled is not None:  # what a rank's recompiles were explained by, and from which step
                    by_category = recompiled.categories
                    by_category[category] = by_category.get(category, 0) + 1
                    if category not in recompiled.category_first_step:
                        recompiled.category_first_step[category] = step
    if event.reasons_omitted:
        _add_omitted(frame, event.reasons_omitted)
    if event.outcome == "failed":
        frame.failures[event.fail_type or "unknown"] += 1
        if len(report.failure_messages) < MAX_LISTED:
            message = (event.fail_reason or "").strip().splitlines()
            report.failure_messages.append((frame.label, event.fail_type or "unknown", message[0][:200] if message else ""))
    if counted & COSTS:
        phases = event.phases
        if phases and report.detail:  # the report's own phases are the frames' summed once, at the end (sum_phases)
            frame_phases = frame.phases
            for phase, seconds in phases.items():
                frame_phases[phase] += seconds  # every Phase is a key from the start (validated input)
        found = report.tracker.cause_of(event, counted)
        if found is not None:
            _add_cause(report, event, frame, found)
        elif event.backward and not report.tracker.remembers(event):  # its forward is in no event folded here
            report.orphan_backward_ranks.add(event.rank)
    if event.cache_lookups:
        for cache, results in event.cache_lookups.items():
            for result, count in results.items():
                report.cache_lookups[(cache, result)] += count
    report.cache_seconds_saved += event.cache_seconds_saved or 0.0
    if event.trace_seconds_by_function:
        for function, seconds in event.trace_seconds_by_function.items():
            if function in report.trace_seconds_by_function or len(report.trace_seconds_by_function) < MAX_FUNCTIONS:
                report.trace_seconds_by_function[function] += seconds  # type: ignore[assignment]  # float seconds in a Counter
    return counted


def _add_cause(report: Report, event: Compile, frame: FrameReport, found: Cause) -> None:
    """Charge ``event`` (of ``frame``) to ``found``, the cause the tracker gave it."""
    cause_frame, category, subject = found
    backward = event.backward
    label, frame_key = frame.label, frame.key
    if backward:  # its forward's frame: the same one, as a rule, but the forward's cause decides
        known = report.frame_cache.get(cause_frame)
        label, frame_key = (known.label, known.key) if known is not None else (cause_frame.label, cause_frame.key)
    key = (frame_key, category, subject)
    cause = report.causes.get(key)
    if cause is None:
        if len(report.causes) >= MAX_CAUSES:
            key = (frame_key, category, "(other subjects)")
            cause = report.causes.setdefault(key, CauseReport(label, category, key[2], frame_key=frame_key))
        else:
            cause = report.causes[key] = CauseReport(label, category, subject, frame_key=frame_key)
    cause.seconds += event.duration
    if backward:
        return
    cause.recompiles += 1
    cause.steps_total += 1
    if event.steady_state:
        cause.steady_state += 1
    if event.automatic_dynamic is not None:
        cause.warmup += 1
        cause.made_dynamic = cause.made_dynamic or event.automatic_dynamic
    step = event.step
    if step is not None:
        steps = cause.steps
        if len(steps) < MAX_STEPS_LISTED:
            steps.append(step)
    if not cause.example:
        reason = explaining_reason(event.reasons)
        cause.example = reason.text[:300] if reason is not None else ""
    if not cause.call_site and event.call_site:
        cause.call_site = list(event.call_site[-5:])
