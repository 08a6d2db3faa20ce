"""``check`` folding ranks, and ``diff`` folding its two runs, in worker processes gives what folding them in this process gives: the same
violations in the same order, the same read statistics (nothing read twice by ``finish``), and the same
errors, on a generated multi-rank run (real models, real reason parser; ``generated_runs.generate``)."""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from generated_runs import generate

from recompprof._analysis import check as check_module
from recompprof._analysis.check import CheckInputError, Rules, check
from recompprof._analysis.diff import compare, render
from recompprof._analysis.report import workers as workers_module
from recompprof._analysis.runs import load

RULES = Rules(
    max_recompiles=3,
    max_total_recompiles=10,
    forbid=("dtype",),
    max_limit_hits=0,
    max_failures=0,
    max_recompile_seconds=0.01,
    max_graph_breaks=0,
)


def _checked(generated_run, workers, rules=RULES):
    run = load(generated_run)
    violations = check(run.events, rules, workers=workers).findings()
    stream = run.events
    stats = (stream.stats, stream.found, list(stream.foreign), set(stream._read_whole))
    run.finish()
    return violations, stats, run.problems, run.warnings


def test_workers_give_the_same_verdicts_and_read_stats(generated_run, monkeypatch):
    """Two worker processes over three ranks: violations (several rules, every rank) equal the
    in-process ones in order, and what reading skipped is counted once, the same, before and after finish."""
    in_process = _checked(generated_run, workers=1)
    calls = []
    monkeypatch.setattr(
        check_module, "_check_in_workers", _spy(check_module._check_in_workers, calls)
    )
    in_workers = _checked(generated_run, workers=2)
    assert calls == [2]  # the worker path ran
    assert in_workers == in_process
    violations, (stats, found, _, read_whole), problems, warnings = in_process
    assert {v.rank for v in violations} == {0, 1, 2} and len({v.rule for v in violations}) >= 4
    assert stats.corrupt == 1 and stats.torn_tail == 1 and found == 9000 and len(read_whole) == 3
    assert problems and warnings


def test_workers_raise_the_same_input_error(generated_run):
    """An --after-step past what ranks recorded is refused (every rule would pass on nothing), and so are
    events without steps: the error a worker raises reaches the caller as the same CheckInputError."""
    for workers in (1, 2):
        with pytest.raises(CheckInputError, match="never reached step 1000000000"):
            check(
                load(generated_run).events,
                Rules(max_recompiles=0, after_step=10**9),
                workers=workers,
            )
    stepless = generated_run.parent / "stepless"
    stepless.mkdir(exist_ok=True)
    for path in generated_run.glob("*.jsonl"):
        (stepless / path.name).write_bytes(
            re.sub(rb'"step":\d+', b'"step":null', path.read_bytes())
        )
    for workers in (1, 2):
        with pytest.raises(CheckInputError, match="--after-step needs training steps"):
            check(load(stepless).events, Rules(max_recompiles=0, after_step=1), workers=workers)


def _spy(function, calls):
    def spy(stream, ranks, rules, workers):
        calls.append(workers)
        return function(stream, ranks, rules, workers)

    return spy


def test_diff_in_workers_renders_the_same(generated_run, tmp_path, monkeypatch):
    """``diff`` folding the files of its two runs in two forked processes (six files, shared out) renders
    byte for byte what folding them here renders (regressions found), and records the same read
    statistics for both runs."""
    other = tmp_path / "b"
    generate(other, ranks=3, per_rank=3000, seed=6, worse=True)
    forked = []
    real = workers_module.map_forked
    monkeypatch.setattr(
        workers_module,
        "map_forked",
        lambda f, streams, tasks, n: forked.append(len(tasks)) or real(f, streams, tasks, n),
    )
    outputs = []
    for workers in (1, 2):
        a, b = load(generated_run), load(other)
        diff = compare(a.events, b.events, workers=workers)
        read = [(r.events.stats, r.events.found, set(r.events._read_whole)) for r in (a, b)]
        a.finish()
        b.finish()
        outputs.append((render(diff), read, a.problems, b.problems, a.warnings))
    assert forked == [6]
    assert outputs[0] == outputs[1]
    assert diff.regressions and "regression(s)" in outputs[0][0]
    assert outputs[0][1][0][0].corrupt == 1 and outputs[0][1][1][1] == 9000


def test_diff_folds_only_the_figures_it_compares(generated_run):
    """``diff`` folds its runs with ``detail=False``: every figure it compares (counts, compile seconds,
    reason groups, causes, modes) equals the full report's; per-rank figures, steps and phases are left
    out, and such a report refuses to be rendered as if it were whole."""
    from recompprof._analysis.render.html import render_html
    from recompprof._analysis.render.text import render_text
    from recompprof._analysis.report.fold import build_report

    full, lean = (
        build_report(load(generated_run).events),
        build_report(load(generated_run).events, detail=False),
    )
    assert (
        list(full.frames) == list(lean.frames)
        and full.run.modes == lean.run.modes
        and full.recompiles > 0
    )
    for label, frame in full.frames.items():
        other = lean.frames[label]
        for name in (
            "compiles",
            "recompiles",
            "backward_compiles",
            "compile_seconds",
            "guard_failures",
            "limit_hits",
            "failures",
            "graph_breaks",
            "reasons",
        ):
            assert getattr(other, name) == getattr(frame, name), (label, name)
        assert (
            not other.ranks.compiles_by_rank
            and not other.recompile_steps
            and not any(other.phases.values())
        )
    assert lean.causes == full.causes
    for render_whole in (render_text, render_html):
        with pytest.raises(ValueError, match="detail=False"):
            render_whole(lean)


def _double_or_fail(task: int) -> int:
    if task == 3:
        raise ValueError("task 3 fails")
    if task == 1:
        time.sleep(3)  # still running when task 3 has failed: the pool is terminated under it
    return 2 * task


@pytest.mark.parametrize("failing", [False, True])
def test_workers_end_without_a_signal_under_a_handler_that_returns(
    generated_run, tmp_path, failing
):
    """A parent with a SIGTERM handler that returns (an attached session's chain, a job's own) gets its
    results or its error and leaves no worker behind, and no worker runs that handler: workers that
    finish leave once the queue is drained (no signal), and one still busy when another task failed is
    ended by Pool.terminate's SIGTERM, not handed to the inherited handler. (The race of a SIGTERM
    before a worker's initializer is made certain in the test after this one.)"""
    parent, marker = os.getpid(), tmp_path / "sigterm-in-a-worker"

    def note_and_return(signum, frame):
        if os.getpid() != parent:
            marker.touch()

    stream = load(generated_run).events
    tasks = [1, 3] if failing else [1, 2, 4, 5]
    previous = signal.signal(signal.SIGTERM, note_and_return)
    faulthandler.dump_traceback_later(
        120, exit=True
    )  # a hang fails the run loudly instead of stalling it
    try:
        if failing:
            with pytest.raises(ValueError, match="task 3 fails"):
                workers_module.map_forked(_double_or_fail, [stream], tasks, 2)
        else:
            assert workers_module.map_forked(_double_or_fail, [stream], tasks, 2) == [2, 4, 8, 10]
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGTERM, previous)
    assert multiprocessing.active_children() == []
    assert not marker.exists()  # no worker ran the inherited handler


_TERMINATED_BEFORE_ITS_INITIALIZER = """
import os, signal, sys, time
from recompprof._analysis.report import workers

marker, first, parent = sys.argv[1], sys.argv[2], os.getpid()


def note_and_return(signum, frame):  # the parent's own handler: a worker must never run it
    if os.getpid() != parent:
        open(marker, "w").close()


signal.signal(signal.SIGTERM, note_and_return)
initializer = workers._worker_signals


def slow_but_the_first():
    try:  # the first worker starts at once and takes every task; the other is slow to start
        os.close(os.open(first, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        time.sleep(3)  # Pool.terminate's SIGTERM comes now, before the initializer
    initializer()


workers._worker_signals = slow_but_the_first


def fail(task):
    raise ValueError("task fails")


try:
    workers.map_forked(fail, [], [0, 1], 2)
except ValueError:
    print("raised", flush=True)
"""


def test_a_worker_terminated_before_its_initializer_ends_and_never_runs_the_parents_handler(
    tmp_path,
):
    """The race CI hung on, made certain: one worker slow to start (a loaded machine), the tasks failing
    at once on the other, so Pool.terminate's SIGTERM reaches the slow one before its initializer. It
    ends (SIGTERM is held back from the fork until the initializer has set the default), the error
    reaches the caller, and the parent's handler, which returns, never runs in a worker. (Before: the
    worker ran that handler, lived on, waited on the task queue for good, and the parent joined it
    forever.)"""
    marker, first = tmp_path / "handler-ran-in-a-worker", tmp_path / "first-worker"
    child = subprocess.Popen(
        [sys.executable, "-c", _TERMINATED_BEFORE_ITS_INITIALIZER, str(marker), str(first)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a hang is ended whole: the parent and its stuck worker
    )
    try:
        out, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail("the parent still joined its workers after 60 s")
    assert child.returncode == 0 and out.strip() == "raised", err[-2000:]
    assert not marker.exists()
