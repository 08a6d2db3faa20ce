"""``recompprof check`` (the CI gate), ``recompprof diff``, and the pytest helpers, on real recorded runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from needs import starts
from recorded_runs import ROOT, RecordedRun, clean_env, cli, record

from recompprof._analysis.check import CheckInputError, Rules, check
from recompprof._analysis.diff import compare, render
from recompprof._analysis.report.fold import build_report
from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile
from recompprof.testing import RecompiledError, assert_no_recompiles, capture_events


@pytest.fixture(scope="module")
@starts("workload")
def full(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    """Recompiles for size (step 1), a Python float (step 6), a global (step 10), a module flag (step 11)."""
    return record(tmp_path_factory.mktemp("full"), "--steps", "12", trace=False)


@pytest.fixture(scope="module")
@starts("workload")
def sizes_only(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(tmp_path_factory.mktemp("sizes"), "--steps", "12", "--changes", "1", trace=False)


def test_check_passes_and_fails_with_one_line_per_violation(full: RecordedRun) -> None:
    """A rule that holds exits 0; a broken one exits 1 with one FAIL line per frame naming the causes."""
    ok = cli("check", str(full.run_dir), "--max-recompiles", "4")
    assert ok.returncode == 0 and "ok" in ok.stdout
    bad = cli("check", str(full.run_dir), "--max-recompiles", "0")
    assert bad.returncode == 1
    fails = [line for line in bad.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1
    assert "Net.forward (workloads/train_recompiles.py:34): 4 recompile(s) > max 0" in fails[0]
    assert "size" in fails[0] and "python_constant" in fails[0]


def test_after_step_ignores_warm_up(full: RecordedRun) -> None:
    """--after-step drops earlier recompiles: only the late global and module-flag changes remain."""
    late = cli("check", str(full.run_dir), "--max-recompiles", "0", "--after-step", "7")
    assert late.returncode == 1
    assert "2 recompile(s) after step 7" in late.stdout and "size" not in late.stdout
    assert (
        cli("check", str(full.run_dir), "--max-recompiles", "0", "--after-step", "12").returncode
        == 0
    )
    assert cli("check", str(full.run_dir), "--forbid", "size", "--after-step", "2").returncode == 0


def test_forbid_time_and_other_rules(full: RecordedRun) -> None:
    """--forbid names the category and subject; compile time, limit hits, breaks and failures have their own rules."""
    forbid = cli("check", str(full.run_dir), "--forbid", "size", "--forbid", "global")
    assert forbid.returncode == 1
    lines = [line for line in forbid.stdout.splitlines() if line.startswith("FAIL forbid")]
    assert (
        len(lines) == 2
        and any("L['x']" in line for line in lines)
        and any("SCALE" in line for line in lines)
    )
    assert cli("check", str(full.run_dir), "--forbid", "dtype").returncode == 0
    slow = cli("check", str(full.run_dir), "--max-compile-seconds", "0.001")
    assert slow.returncode == 1 and "s compiling > max 0.001 s" in slow.stdout
    assert cli("check", str(full.run_dir), "--max-compile-seconds", "1000").returncode == 0
    clean = cli(
        "check",
        str(full.run_dir),
        "--max-limit-hits",
        "0",
        "--max-graph-breaks",
        "0",
        "--max-failures",
        "0",
    )
    assert clean.returncode == 0


def test_max_recompile_seconds_names_the_causes_to_fix_first(full: RecordedRun) -> None:
    """--max-recompile-seconds fails when recompiles cost more than the budget, naming the costliest cause first;
    a budget above the run's lost seconds passes."""
    report = build_report(read_run(full.run_dir))
    top = report.ranked_causes()[0]
    bad = cli("check", str(full.run_dir), "--max-recompile-seconds", "0")
    assert bad.returncode == 1
    (line,) = [ln for ln in bad.stdout.splitlines() if ln.startswith("FAIL")]
    assert f"{report.recompile_seconds:.2f} s lost to recompiles > max 0 s" in line
    assert f"(fix first: {top.frame} {top.category} {top.subject}: {top.seconds:.2f} s" in line
    assert (
        cli(
            "check",
            str(full.run_dir),
            "--max-recompile-seconds",
            f"{report.recompile_seconds + 1:.2f}",
        ).returncode
        == 0
    )
    assert cli("check", str(full.run_dir), "--max-recompile-seconds", "-1").returncode == 2


def test_check_rules_per_rank(full: RecordedRun) -> None:
    """Rules apply per rank: a second rank's recompiles are reported under its own rank."""
    events = list(read_run(full.run_dir))
    rank1 = [e.model_copy(update={"rank": 1}) for e in events]
    violations = check(events + rank1, Rules(max_recompiles=3)).findings()
    assert [v.rank for v in violations] == [0, 1]
    with pytest.raises(CheckInputError):
        Rules(forbid=("not-a-category",))


def test_diff_reports_regressions_and_improvements(
    full: RecordedRun, sizes_only: RecordedRun
) -> None:
    """diff exits 1 when a run gains recompiles or categories, and 0 (with improvements) the other way round."""
    worse = cli("diff", str(sizes_only.run_dir), str(full.run_dir))
    assert worse.returncode == 1, worse.stdout + worse.stderr
    assert "recompiles 1 -> 4" in worse.stdout
    for what in ("category python_constant", "category global", "category module_attribute"):
        assert what in worse.stdout
    assert "regression(s)" in worse.stdout
    better = cli("diff", str(full.run_dir), str(sizes_only.run_dir))
    assert (
        better.returncode == 0 and "no regressions" in better.stdout and "better" in better.stdout
    )
    same = cli("diff", str(full.run_dir), str(full.run_dir))
    assert same.returncode == 0 and "no regressions (0 improvement(s))" in same.stdout


def test_diff_time_threshold(full: RecordedRun, tmp_path: Path) -> None:
    """Compile time only regresses past --max-time-increase, and never by less than the noise floor."""
    slower = tmp_path / "slower"
    slower.mkdir()
    events = [
        e.model_copy(update={"duration": e.duration * 3 + 1}) if isinstance(e, Compile) else e
        for e in read_run(full.run_dir)
    ]
    from recompprof._eventlog.writer import write_events

    write_events(slower / "rank00000-1.jsonl", events)
    assert cli("diff", str(full.run_dir), str(slower)).returncode == 0
    flagged = cli("diff", str(full.run_dir), str(slower), "--max-time-increase", "50")
    assert flagged.returncode == 1 and "compile seconds" in flagged.stdout


def test_diff_compares_seconds_lost_per_cause(full: RecordedRun, sizes_only: RecordedRun) -> None:
    """diff lists the seconds lost to each cause in both runs; a cause gone from the fixed run reads 'better'."""
    before, after = build_report(read_run(full.run_dir)), build_report(read_run(sizes_only.run_dir))
    result = compare(read_run(full.run_dir), read_run(sizes_only.run_dir))
    lost = {(c.frame, c.what): c for c in result.changes if c.what.startswith("seconds lost to")}
    for cause in before.causes.values():
        if cause.key not in after.causes:
            change = lost[(cause.frame, f"seconds lost to {cause.category} {cause.subject or '-'}")]
            assert change.before == pytest.approx(cause.seconds, abs=1e-3) and change.after == 0
            assert not change.regression
    assert any(c.category == "global" for c in before.causes.values())
    text = render(result)
    assert (
        f"lost to recompiles {before.recompile_seconds:.2f} s -> {after.recompile_seconds:.2f} s"
        in text
    )
    assert "seconds lost to global" in text


def test_assert_no_recompiles_passes_and_explains() -> None:
    """assert_no_recompiles passes a stable block and fails a recompiling one with frame, category and fix."""
    fn = torch.compile(lambda x, k: x * k, backend="eager")
    fn(torch.ones(3), 1.0)
    with assert_no_recompiles():
        fn(torch.ones(3), 1.0)
    with pytest.raises(RecompiledError) as caught, assert_no_recompiles():
        fn(torch.ones(3), 2.0)
    message = str(caught.value)
    assert "1 recompile(s) where at most 0 were allowed" in message
    assert "python_constant L['k']" in message and "fix:" in message
    assert caught.value.recompiles[0].is_recompile


def test_capture_events_collects_compiles() -> None:
    """capture_events yields the compile events of the block, reasons included."""
    fn = torch.compile(lambda x: x + 1, backend="eager")
    with capture_events() as events:
        fn(torch.ones(2))
        fn(torch.ones(2, 2))
    compiles = [e for e in events if isinstance(e, Compile)]
    assert [e.is_recompile for e in compiles] == [False, True]
    assert compiles[1].reasons[0].category in ("size", "ndim")


@pytest.mark.workload
def test_pytest_plugin_fails_a_recompiling_test(tmp_path: Path) -> None:
    """The no_recompiles fixture fails only the test whose body recompiles, as a test failure with the reason."""
    (tmp_path / "test_model.py").write_text(
        textwrap.dedent("""
        import torch

        def test_stable(no_recompiles):
            f = torch.compile(lambda x: x * 2, backend="eager")
            for _ in range(3):
                f(torch.ones(3))

        def test_unstable(no_recompiles):
            f = torch.compile(lambda x, k: x * k, backend="eager")
            f(torch.ones(3), 1.0)
            f(torch.ones(3), 2.0)

        def test_warm_up_then_reset(no_recompiles):
            f = torch.compile(lambda x: x.sum(), backend="eager")
            f(torch.ones(3)); f(torch.ones(3, 3))
            no_recompiles.reset()
            f(torch.ones(3, 3))
    """)
    )
    # The plugin is found through the installed pytest11 entry point, as in a user's project.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:logging",
            "test_model.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 2 passed" in proc.stdout
    assert "FAILED test_model.py::test_unstable" in proc.stdout
    assert "RecompiledError" in proc.stdout and "python_constant" in proc.stdout
    assert "ERROR" not in proc.stdout


def test_check_names_a_grad_mode_cause_once(tmp_path: Path) -> None:
    """A grad-mode recompile reads "grad_mode x1" in check's message, not "grad_mode grad_mode x1"."""
    compiled = torch.compile(lambda x: x * 2, backend="eager")
    with capture_events() as events:
        compiled(torch.ones(2, requires_grad=True))
        with torch.no_grad():
            compiled(torch.ones(2, requires_grad=True))
    (violation,) = check(events, Rules(max_recompiles=0)).findings()
    assert "(grad_mode x1)" in violation.message and "grad_mode grad_mode" not in violation.message
    (forbidden,) = check(events, Rules(forbid=("grad_mode",))).findings()
    assert forbidden.message.endswith("forbidden category grad_mode: 1 recompile(s)"), (
        forbidden.message
    )


@pytest.mark.workload
def test_diff_warns_when_modes_differ(full: RecordedRun, tmp_path: Path) -> None:
    """diff of a monitor run against a profile run says so, and why the figures then differ; same modes: no warning."""
    where = record(
        tmp_path / "profile", "--steps", "12", trace=False, RECOMPPROF_MODE="profile"
    ).run_dir
    done = cli("diff", str(full.run_dir), str(where))
    flat = " ".join(done.stdout.split())
    assert "WARNING: comparing a monitor run with a profile run" in flat, done.stdout
    assert "observer backend" in flat and "compare runs of the same mode" in flat
    same = cli("diff", str(full.run_dir), str(full.run_dir))
    assert "WARNING" not in same.stdout


def _as_ingest_would_see_it(events: list, *, keep_owner: bool = False) -> list:
    """The run as a trace without live objects shows it: frames with no class, object-decided categories unknown."""
    by_object = {"python_constant", "module_attribute", "global", "object_identity", "type"}
    out = []
    for event in events:
        frame = getattr(event, "frame", None)
        update: dict = {}
        if frame is not None and not keep_owner:
            update["frame"] = frame.model_copy(update={"owner": None})
        if isinstance(event, Compile) and event.reasons:
            update["reasons"] = [
                r.model_copy(update={"category": "other"}) if r.category in by_object else r
                for r in event.reasons
            ]
        out.append(event.model_copy(update=update) if update else event)
    return out


def test_diff_matches_unknown_classes_and_categories_to_what_the_other_run_knows(
    full: RecordedRun,
) -> None:
    """A run that could not tell a frame's class, nor the categories only live objects decide (as an ingested trace),
    compared with the run that could, either way round: the same frames and recompiles, so no regression; the
    categories move between ``other`` and the known ones and are listed as changed."""
    known = list(read_run(full.run_dir))
    unknown = _as_ingest_would_see_it(known)
    assert {e.frame.owner for e in unknown if isinstance(e, Compile)} == {None}
    for before, after in ((known, unknown), (unknown, known)):
        diff = compare(before, after)
        assert diff.regressions == [], render(diff)
        moved = {
            c.what.removeprefix("seconds lost to ").removeprefix("category ").split(" ")[0]
            for c in diff.changes
        }
        assert "other" in moved and moved <= {
            "other",
            "python_constant",
            "global",
            "module_attribute",
        }, moved


def test_diff_still_flags_unknown_recompiles_beyond_what_was_known(
    full: RecordedRun, sizes_only: RecordedRun
) -> None:
    """More recompiles of unknown cause than the known categories lost is a regression; so is a known category
    growing with no unknown ones to account for it."""
    grown = compare(
        _as_ingest_would_see_it(list(read_run(sizes_only.run_dir))),
        _as_ingest_would_see_it(list(read_run(full.run_dir))),
    )
    assert any(c.what == "category other" and c.regression for c in grown.regressions), render(
        grown
    )
    known = compare(read_run(sizes_only.run_dir), read_run(full.run_dir))
    assert any(c.what == "category python_constant" and c.regression for c in known.regressions), (
        render(known)
    )


def test_check_reads_an_event_log_run_rank_by_rank(generated_run: Path) -> None:
    """A run's event logs are check's RankedEvents: each rank is read from its own files alone, and the
    violations, rank by rank, are those of the same events held in one list."""
    from recompprof._analysis.check import RankedEvents
    from recompprof._analysis.runs import load

    stream = load(generated_run).events
    assert isinstance(stream, RankedEvents) and not isinstance(list(stream), RankedEvents)
    assert stream.ranks() == [0, 1, 2] and {e.rank for e in stream.of_rank(1)} == {1}
    rules = Rules(max_recompiles=3, forbid=("dtype",), max_graph_breaks=0)
    by_rank = check(load(generated_run).events, rules, workers=1).findings()
    assert by_rank == check(list(load(generated_run).events), rules, workers=1).findings()
    assert {v.rank for v in by_rank} == {0, 1, 2}
