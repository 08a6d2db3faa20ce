"""``report`` folding a large run file by file in worker processes and merging the parts
(``recompprof._analysis.report.merging``) gives the report one fold over the run gives.

Inputs: random event sequences of every kind (real event models, reasons from the real parser over
the texts recorded from torch 2.13) cut into consecutive parts at random; a generated multi-rank run
(``generated_runs.generate``) read through real forked workers; and the cases where the parts
cannot say what one fold would give (a bound on distinct keys reached, a backward compile whose forward
is in an earlier file), where the merge declines and the run is folded in one process.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from folds import FRAMES, POOL, assert_same, figures, random_events
from hypothesis import given, settings, strategies as st

from recompprof._analysis.render.text import render_text
from recompprof._analysis.report import (
    bounded,
    divergence,
    figures as figures_module,
    frames as frame_figures,
    workers,
)
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.merging import build_run_report, merge
from recompprof._analysis.report.model import Report
from recompprof._analysis.runs import load
from recompprof._eventlog.writer import write_events
from recompprof._model.events import (
    Compile,
    SessionEnd,
    SignalChange,
)


def parts_of(events: list[Any], cuts: list[int]) -> list[Report]:
    bounds = [0, *sorted(set(cuts)), len(events)]
    parts = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        parts.append(build_report(events[start:end]))
    return parts


@given(
    seed=st.integers(0, 10**6),
    n=st.integers(0, 300),
    cuts=st.lists(st.integers(0, 300), max_size=5),
)
@settings(max_examples=150, deadline=None)
def test_merged_parts_give_the_one_fold(seed, n, cuts):
    """Any events, cut anywhere into consecutive parts: the merge of the parts' reports is the report of
    all of them (every figure, in the same order, and the same text), or the merge declines."""
    events = random_events(random.Random(seed), n)
    merged = merge(parts_of(events, [c for c in cuts if c <= n]))
    whole = build_report(events)
    if merged is not None:
        assert_same(figures(merged), figures(whole))
        assert render_text(merged) == render_text(whole)


def test_parts_with_their_own_ranks_always_merge():
    """A part per rank (one event-log file each, as ``report`` cuts a run): the merge never declines,
    including signals that go dark in one rank and are explained by a later rank's session end."""
    rng = random.Random(7)
    everything = random_events(rng, 400)
    per_rank = [[e for e in everything if e.rank == rank] for rank in range(3)]
    per_rank[0].append(
        SignalChange(
            time=1e5, rank=0, signal="profile_backend", live=False, reason="stance changed"
        )
    )
    per_rank[2].append(
        SessionEnd(
            time=1e5, rank=2, totals={}, signals_off={"profile_backend": "the job's set_stance"}
        )
    )
    parts = []
    for events in per_rank:
        parts.append(build_report(events))
    merged = merge(parts)
    assert merged is not None
    whole = build_report([e for events in per_rank for e in events])
    assert_same(figures(merged), figures(whole))
    assert merged.run.signals_dark["profile_backend"] == "the job's set_stance"
    assert whole.recompiles > 0 and len(whole.run.ranks) == 3


@pytest.mark.parametrize(
    "bound", ["MAX_FRAMES", "MAX_GROUPS_PER_FRAME", "MAX_CAUSES", "MAX_LISTED", "MAX_FUNCTIONS"]
)
def test_a_bound_reached_declines_and_the_run_folds_in_one_process(bound, monkeypatch, tmp_path):
    """With a bound on distinct keys small enough that the parts reach it, the merge declines (the
    parts cannot say which keys one fold would have kept) and ``build_run_report`` folds the run in
    one process: the report is still exactly one fold's."""
    for module in (
        bounded,
        figures_module,
        frame_figures,
        divergence,
    ):  # the bound as the fold and the merge read it
        if hasattr(module, bound):
            monkeypatch.setattr(module, bound, 2)
    rng = random.Random(3)
    events = random_events(rng, 600)
    events += [
        Compile(
            time=1e4 + i,
            rank=0,
            step=1,
            frame=FRAMES[0],
            compile_id="0/9",
            is_recompile=False,
            cudagraph_skip=skip,
            trace_seconds_by_function={f"g{i}": 0.5},
        )
        for i, skip in enumerate(("cpu_device", "mutated_inputs", "non_cuda_op"))
    ]
    assert merge(parts_of(events, [200, 400])) is None
    run = _write_run(tmp_path, events)
    assert_same(
        figures(build_run_report(load(run).events, workers=2)),
        figures(build_report(load(run).events)),
    )


def test_a_backward_whose_forward_is_in_an_earlier_file_declines(tmp_path):
    """One rank in two files (a restarted process): a backward compile in the second file charges the
    cause of a forward in the first, which the second part alone cannot know, so the merge declines
    and the run is folded in one process, with those seconds charged."""
    forward = Compile(
        time=1,
        rank=0,
        step=1,
        frame=FRAMES[0],
        compile_id="0/1",
        is_recompile=True,
        duration=2.0,
        reasons=[POOL[0].model_copy(update={"explains_change": True})],
    )
    backward = Compile(
        time=2,
        rank=0,
        step=1,
        frame=FRAMES[0],
        compile_id="0/1",
        is_recompile=False,
        backward=True,
        duration=1.0,
    )
    assert merge(parts_of([forward, backward], [1])) is None
    run = tmp_path / "run"
    run.mkdir()
    write_events(run / "rank00000-1.jsonl", [forward])
    write_events(run / "rank00000-2.jsonl", [backward])
    report = build_run_report(load(run).events, workers=2)
    assert report.recompile_seconds == 3.0


def _write_run(tmp_path: Path, events: list[Any]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for rank in range(3):
        write_events(run / f"rank{rank:05d}-{rank}.jsonl", [e for e in events if e.rank == rank])
    return run


def test_report_in_workers_is_the_one_fold_and_reads_each_line_once(generated_run, monkeypatch):
    """``build_run_report`` over a generated three-rank run in two forked workers: the worker path ran,
    the report equals the one-process fold (every figure, and the rendered text byte for byte), and the
    read statistics (a corrupt line, a torn tail) are counted once, before and after ``finish``."""
    calls = []
    real = workers.map_forked
    monkeypatch.setattr(workers, "map_forked", lambda *a: calls.append(a[3]) or real(*a))
    results = []
    for count in (1, 2):
        run = load(generated_run)
        report = build_run_report(run.events, workers=count)
        stream = run.events
        read = (dataclasses.asdict(stream.stats), stream.found, sorted(stream._read_whole))
        run.finish()
        results.append((report, read, run.problems, run.warnings))
    assert calls == [2]
    (one, read_one, *said_one), (forked, read_forked, *said_forked) = results
    assert_same(figures(forked), figures(one))
    assert render_text(forked) == render_text(one)
    assert read_forked == read_one and said_forked == said_one
    assert read_one[0]["corrupt"] == 1 and read_one[0]["torn_tail"] == 1 and read_one[1] == 9000
    assert one.recompiles > 0 and len(one.run.ranks) == 3


def test_large_runs_default_to_workers(generated_run, monkeypatch):
    """Without ``workers``, a run past ``PARALLEL_MIN_BYTES`` on more than one CPU is folded in workers
    (one per CPU, at most one per file), a smaller one in this process."""
    monkeypatch.setattr(workers, "cpus", lambda: 4)
    stream = load(generated_run).events
    assert workers.default_workers([stream], len(stream.files)) == 1
    monkeypatch.setattr(workers, "PARALLEL_MIN_BYTES", 1)
    assert workers.default_workers([stream], len(stream.files)) == 3
    monkeypatch.setattr(
        workers, "map_forked", lambda *a: (_ for _ in ()).throw(AssertionError("forked"))
    )
    with pytest.raises(AssertionError, match="forked"):
        build_run_report(stream)
