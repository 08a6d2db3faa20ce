"""A rank session is in the lake once, whichever ways and in whichever order it arrived: generated
multi-rank runs spanning UTC days, reaching one lake by random plans of whole, per-rank, partial-folder
and closed-day exports, re-exports with and without labels, and compactions, each plan's lake held to
one plain whole export of the same runs (docs/history.md, "Identity")."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pq = pytest.importorskip("pyarrow.parquet")

from arrival_plans import (  # noqa: E402
    Baseline,
    CommandFailed,
    GeneratedRun,
    Plan,
    Step,
    check,
    draw_plan,
    labels_option,
    make_runs,
    raw_tables,
    run_cli,
)

PLANS = 30


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[GeneratedRun]:
    """The generated runs every plan reaches the lake with (:func:`arrival_plans.make_runs`)."""
    return make_runs(tmp_path_factory.mktemp("arrivals"))


@pytest.fixture(scope="module")
def baseline(runs: list[GeneratedRun], tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    return Baseline(runs, tmp_path_factory.mktemp("baseline"))


def _carried_out(runs: list[GeneratedRun], where: Path, steps: list[Step]) -> Plan:
    plan = Plan(runs, where / "lake", where / "scratch")
    for step in steps:
        plan.do(step)
    return plan


def test_a_restarted_ranks_session_has_the_same_rows_alone_or_with_its_run(
    runs: list[GeneratedRun], baseline: Baseline, tmp_path: Path
) -> None:
    """A rank restarted in a new process, its log exported on its own (its end-of-session export)
    after its run was exported whole: its compiles keep the causes the whole export gave them (a
    backward never takes the cause of the earlier process's forward of the same compile id), so the
    lake equals one whole export."""
    restarted = runs[0].logs.index(runs[0].folder / "rank00001-1701.jsonl")
    plan = _carried_out(
        runs, tmp_path, [Step("whole", 0, (0, 1, 2, 3)), Step("rank", 0, (restarted,))]
    )
    assert check(baseline, plan) == []


def test_a_file_left_with_no_rows_is_deleted_not_written_empty(
    runs: list[GeneratedRun], baseline: Baseline, tmp_path: Path
) -> None:
    """A run exported whole, then two of its rank logs on their own: the run's file of a day that held
    only the first one's rows is deleted (not rewritten with none), so the second export, which
    takes its own session from that file, succeeds and the lake equals one whole export."""
    plan = _carried_out(
        runs,
        tmp_path,
        [Step("whole", 0, (0, 1, 2, 3)), Step("rank", 0, (2,)), Step("rank", 0, (0,))],
    )
    assert check(baseline, plan) == []
    empty = [
        p for p in (plan.files() / "v1").rglob("*.parquet") if not pq.read_metadata(p).num_rows
    ]
    assert empty == []


def test_labels_remembered_for_a_run_id_are_said_when_applied(
    runs: list[GeneratedRun], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Labels given to one job's export are applied to the next export of the same run id without
    ``--labels`` (here another job logged under ``none``), and that export says so in one line."""
    lake = tmp_path / "lake"
    run_cli("export", str(runs[0].folder), "--to", str(lake), "--labels", labels_option())
    assert "remembered for run" not in capsys.readouterr().out
    run_cli("export", str(runs[1].folder), "--to", str(lake))
    [line] = [x for x in capsys.readouterr().out.splitlines() if "remembered for run" in x]
    assert "model=tiny,team=vision" in line and "'none'" in line and "--labels" in line
    con = raw_tables(lake)
    assert con.execute("SELECT DISTINCT team FROM runs WHERE job = 'job-b'").fetchall() == [
        ("vision",)
    ]


def test_every_arrival_plan_holds_each_session_once(
    runs: list[GeneratedRun], baseline: Baseline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Over seeded random plans of 2-6 arrivals (whole, per-rank, partial-folder, closed-day and
    end-of-session exports, with and without labels, compactions) of up to three runs, two of them
    sharing run id ``none``, every table's rows equal one whole export's (the labels each session's
    last export gave it), read raw and as the questions read them, and ``runs`` lists each session once."""
    rng = random.Random(46)
    failures = []
    for number in range(PLANS):
        steps = draw_plan(rng, runs)
        plan = Plan(runs, tmp_path / f"lake-{number}", tmp_path / f"scratch-{number}")
        try:
            for step in steps:
                plan.do(step)
        except CommandFailed as failed:
            problems = [f"{failed}: {capsys.readouterr().err.strip().splitlines()[-1]}"]
        else:
            capsys.readouterr()
            problems = check(baseline, plan)
        if problems:
            failures.append(
                f"plan {number}: {' '.join(map(str, steps))}\n  " + "\n  ".join(problems)
            )
    assert not failures, "\n".join(failures)


def test_ranks_exported_at_once_after_their_run_was_exported_whole_are_each_counted_once(
    tmp_path: Path,
) -> None:
    """A run exported whole while it ran, then both ranks' end-of-session exports at the same moment
    (two real export processes started together, as ranks that end together): each session is in the
    lake once, in its own file, in every one of 6 trials. Each export gave up its own session from the
    whole-run file by writing it again without it; two at once each wrote a file that kept the other's
    session, so both sessions were in the lake twice (5 of 6 trials, before)."""
    import subprocess
    import sys

    from generated_runs import generate

    from recompprof._history import engine, views
    from recompprof._history.layout import Lake
    from recompprof._history.sessions import base_of

    run = tmp_path / "run"
    generate(run, ranks=2, per_rank=400, seed=4)
    logs = sorted(run.glob("*.jsonl"))
    export = [sys.executable, "-m", "recompprof._cli.main", "export"]
    doubled = []
    for trial in range(6):
        lake = tmp_path / f"lake{trial}"
        subprocess.run([*export, str(run), "--to", str(lake)], check=True, capture_output=True)
        ends = [
            subprocess.Popen([*export, str(log), "--to", str(lake), "--per-rank"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for log in logs
        ]  # fmt: skip
        for end in ends:
            _, err = end.communicate(timeout=300)
            assert end.returncode == 0, err.decode()
        runner = engine.Engine(views.reader(str(lake)), views.select(views.reader(str(lake))))
        [(sessions, distinct)] = runner.query(
            "SELECT COUNT(*), COUNT(DISTINCT (rank, pid)) FROM runs"
        ).rows
        writers = sorted(base_of(f.writer) for f in Lake(str(lake)).files("runs"))
        if (sessions, distinct) != (2, 2) or "all" in writers:
            doubled.append((trial, sessions, writers))
    assert not doubled, doubled
