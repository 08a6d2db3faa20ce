"""The report's fold (``reporting._add_compile``, ``counting.fold_compile``, ``causes.CauseTracker``), which
is written inline for speed, against a plain reference fold spelled with the counting and cause rules
one call at a time: the same :class:`Report`, field for field, on generated runs (real models, real
reason parser; ``benchmarks/bench_scale.generate``) read both as msgspec views and as models."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter, OrderedDict
from pathlib import Path

import pytest

from recompprof import reporting
from recompprof.causes import NO_REASON, Cause
from recompprof.eventlog import ReadStats, read_file, run_files, scan_file
from recompprof.events import Compile, Frame, Reason

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_scale import generate


def _limit_hit(e):
    return e.outcome == "limit_hit"


def _counts_as_compile(e):
    return not e.backward and not _limit_hit(e)


class _PlainTracker:
    def __init__(self, max_remembered=4096):
        self._max, self._of = max_remembered, OrderedDict()

    def cause_of(self, e):
        if _limit_hit(e):
            return None
        key = (e.rank, e.compile_id)
        if e.backward:
            return self._of.get(key)
        cause = None
        if _counts_as_compile(e) and e.is_recompile:
            reason = next((r for r in e.reasons if r.explains_change), e.reasons[0] if e.reasons else None)
            cause = Cause(e.frame, "other", NO_REASON) if reason is None else Cause(e.frame, reason.category, reason.subject)
        self._of[key] = cause
        self._of.move_to_end(key)
        if len(self._of) > self._max:
            self._of.popitem(last=False)
        return cause


def _plain_fold_compile(counts, e):
    if e.backward:
        counts.backward_compiles += 1
    elif _counts_as_compile(e):
        counts.compiles += 1
        if e.is_recompile:
            counts.recompiles += 1
            counts.steady_state_recompiles += int(e.steady_state)
    for reason in e.reasons:
        counts.guard_failures[reason.category] += 1
    counts.guard_failures.update(e.reasons_omitted)
    if not _limit_hit(e):
        counts.compile_seconds += e.duration


def _plain_add_compile(report, e):
    """The fold as it was written before it was inlined (commit 636b706)."""
    frame = reporting._frame(report, e.frame)
    if frame is None:
        return
    if e.cudagraph_skip is not None:
        key = (frame.label, e.cudagraph_skip)
        if key in report.cudagraph_skips or len(report.cudagraph_skips) < reporting.MAX_LISTED:
            report.cudagraph_skips[key] += 1
    step = e.step or 0
    _plain_fold_compile(frame, e)
    if _counts_as_compile(e):
        frame.compiles_by_rank[e.rank] += 1
        if e.guard_set is not None:
            seen = frame.guard_sets_by_rank.setdefault(e.rank, set())
            if len(seen) < reporting.MAX_GUARD_SETS:
                seen.add(e.guard_set)
        if e.is_recompile:
            frame.recompiles_by_rank[e.rank] += 1
            frame.first_recompile_step_by_rank.setdefault(e.rank, step)
            steps = frame.recompile_steps_by_rank.setdefault(e.rank, [])
            if len(steps) < reporting.MAX_STEPS_LISTED:
                steps.append(step)
            for reason in e.reasons:
                if reason.explains_change:
                    frame.categories_by_rank.setdefault(e.rank, Counter())[reason.category] += 1
                    frame.category_first_step_by_rank.setdefault(e.rank, {}).setdefault(reason.category, step)
            if e.automatic_dynamic is not None:
                frame.automatic_dynamic_recompiles += 1
                if len(frame.automatic_dynamic) < reporting.MAX_STEPS_LISTED:
                    frame.automatic_dynamic.append(e.automatic_dynamic)
            frame.recompile_steps_total += 1
            if len(frame.recompile_steps) < reporting.MAX_STEPS_LISTED:
                frame.recompile_steps.append(step)
    for reason in e.reasons:
        group = reporting._group(frame, reason.category, reason.subject, reason.text)
        group.failures += 1
        if reason.explains_change:
            group.changes += 1
            report.categories[reason.category] += 1
    if e.reasons_omitted:
        reporting._add_omitted(frame, e.reasons_omitted)
    if e.outcome == "failed":
        frame.failures[e.fail_type or "unknown"] += 1
        if len(report.failure_messages) < reporting.MAX_LISTED:
            message = (e.fail_reason or "").strip().splitlines()
            report.failure_messages.append((frame.label, e.fail_type or "unknown", message[0][:200] if message else ""))
    if not _limit_hit(e):
        for phase, seconds in e.phases.items():
            frame.phases[phase] += seconds
            report.phases[phase] += seconds
    tracker = report.__dict__.setdefault("plain_tracker", _PlainTracker())
    found = tracker.cause_of(e)
    if found is not None:
        label = report.labels.get((found.frame.name, found.frame.file, found.frame.line)) or found.frame.label
        key = (label, found.category, found.subject)
        cause = report.causes.get(key)
        if cause is None:
            if len(report.causes) >= reporting.MAX_CAUSES:
                key = (label, found.category, "(other subjects)")
                cause = report.causes.setdefault(key, reporting.CauseReport(*key))
            else:
                cause = report.causes[key] = reporting.CauseReport(*key)
        cause.seconds += e.duration
        if not e.backward:
            cause.recompiles += 1
            cause.steps_total += 1
            if e.step is not None and len(cause.steps) < reporting.MAX_STEPS_LISTED:
                cause.steps.append(e.step)
            if not cause.example:
                reason = next((r for r in e.reasons if r.explains_change), e.reasons[0] if e.reasons else None)
                cause.example = reason.text[:300] if reason is not None else ""
            if not cause.call_site and e.call_site:
                cause.call_site = list(e.call_site[-5:])
    for cache, results in e.cache_lookups.items():
        for result, count in results.items():
            report.cache_lookups[(cache, result)] += count
    report.cache_seconds_saved += e.cache_seconds_saved or 0.0
    for function, seconds in e.trace_seconds_by_function.items():
        if function in report.trace_seconds_by_function or len(report.trace_seconds_by_function) < reporting.MAX_FUNCTIONS:
            report.trace_seconds_by_function[function] += seconds


def _reference(events, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(reporting, "_add_compile", _plain_add_compile)
        return reporting.build_report(events)


def _rare(rank: int) -> list:
    """Compiles the generator never writes: omitted reasons, a recompile without any reason, CUDA graph
    skips, cache lookups, per-function trace seconds, automatic dynamic, a backward whose forward is forgotten."""
    frame = Frame(name="rare", file="/srv/job/rare.py", line=3)
    common = {"time": 1.0, "run_id": "r", "rank": rank, "pid": 1, "frame": frame}
    why = Reason(text="tensor 'x' size mismatch at index 0", category="size", subject="L['x']", explains_change=True)
    return [
        Compile(**common, step=7, compile_id="0/0", is_recompile=False, duration=0.5, phases={"dynamo_trace": 0.25},
                cache_lookups={"fx_graph": {"miss": 1}}, trace_seconds_by_function={"f": 0.125}, guard_set="g0"),
        Compile(**common, step=8, compile_id="0/1", is_recompile=True, duration=0.75, reasons=[why],
                reasons_omitted={"dtype": 1, "size": 3}, automatic_dynamic="dim 0 of L['x']", cudagraph_skip="mutation",
                call_site=["a.py:1 in f", "b.py:2 in g"], cache_seconds_saved=0.25, guard_set="g1"),
        Compile(**common, step=9, compile_id="0/2", is_recompile=True, duration=0.5),
        Compile(**common, step=9, compile_id="0/2", is_recompile=False, backward=True, duration=0.125),
        Compile(**common, step=9, compile_id="9/9", is_recompile=False, backward=True, duration=0.125),
        Compile(**common, step=10, compile_id="0/3", is_recompile=True, outcome="limit_hit", reasons=[why]),
        Compile(**common, step=11, compile_id="0/4", is_recompile=True, outcome="failed", fail_type="E",
                fail_reason="boom\nmore", reasons=[why.model_copy(update={"explains_change": False})], duration=0.5),
    ]


def _fields(report):
    """The report's fields, dicts and sets as ordered lists: insertion order shows in the output."""
    return {f.name: _ordered(getattr(report, f.name)) for f in dataclasses.fields(report) if f.name != "tracker"}


def _ordered(value):
    if isinstance(value, dict):
        return [(type(value).__name__, _ordered(k), _ordered(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [_ordered(v) for v in value]
    if isinstance(value, set):
        return sorted(value)
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, {f.name: _ordered(getattr(value, f.name)) for f in dataclasses.fields(value)})
    return (type(value).__name__, value)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    where = tmp_path_factory.mktemp("fold")
    generate(where / "a", ranks=2, per_rank=6000, seed=3)
    generate(where / "b", ranks=2, per_rank=6000, seed=4, worse=True)
    return where / "a", where / "b"


@pytest.mark.parametrize("which", [0, 1])
def test_inline_fold_matches_plain_fold(runs, which, monkeypatch):
    """On a generated run (backwards, limit hits, failures, omitted reasons, many ranks), the fold gives
    the Report the plain reference fold gives, whether it folds msgspec views or pydantic models, and
    both the text and the JSON-able fields of the two are equal."""
    files = run_files(runs[which])
    views = [e for f in files for e in scan_file(f, ReadStats())] + _rare(0) + _rare(1)
    models = [e for f in files for e in read_file(f, ReadStats())] + _rare(0) + _rare(1)
    assert len(views) == len(models) == 12014
    assert any(e.kind == "compile" and e.backward for e in views)
    assert any(e.kind == "compile" and e.outcome == "limit_hit" for e in views)
    assert any(e.kind == "compile" and e.reasons_omitted for e in views)
    expected = _reference(models, monkeypatch)
    assert isinstance(expected.__dict__["plain_tracker"], _PlainTracker)
    for events in (views, models):
        got = reporting.build_report(events)
        assert _fields(got) == _fields(expected)
        assert reporting.render_text(got) == reporting.render_text(expected)
    assert expected.recompiles > 0 and expected.causes and expected.cudagraph_skips and expected.cache_lookups
