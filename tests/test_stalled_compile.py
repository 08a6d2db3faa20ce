"""A run that ended while compiling: ``report``, ``check`` and the per-rank section name the rank, the frame,
the cause and how long it had compiled (real torch.compile in real processes, stopped mid-compile); and a run
that ended between compiles never says so."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from folds import assert_same, figures
from needs import starts
from recorded_runs import clean_env, cli
from slow_jobs import stop_during_recompile

from recompprof._analysis.check import Rules, check
from recompprof._analysis.render.wording import running_at_end
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.merging import build_run_report
from recompprof._analysis.runs import load
from recompprof._model.events import HEARTBEAT_SECONDS

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"
CAUSE = "(recompile: size of `L['x']` dim 0 changed)"
HELD = 2.5  # seconds the slow recompile has run when the job is stopped
HELD_KILLED = HEARTBEAT_SECONDS + 2.5  # a killed rank: past its first compile_running


def _env(run: Path, rank: int, world: int) -> dict[str, str]:
    return clean_env(
        RECOMPPROF_RUN_DIR=str(run),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "exporters")]),
    )


def _finished_rank(run: Path, rank: int, world: int) -> None:
    """A rank that compiles, recompiles (quickly) and ends normally."""
    done = subprocess.run(
        [sys.executable, str(WORKLOADS / "slow_compile.py"), "0"],
        env=_env(run, rank, world),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr


def _stopped_rank(
    run: Path, rank: int, world: int, how: signal.Signals, held: float = HELD
) -> None:
    """A rank stopped by ``how`` while its recompile has run ``held`` seconds (of 300)."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOADS / "slow_compile.py"), "300"],
        env=_env(run, rank, world),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with proc:
        stop_during_recompile(proc, run, held=held, how=how, logs=f"rank{rank:05d}-*.jsonl")


@pytest.fixture(scope="module")
@starts("workload")
def terminated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks of one run: rank 0 finished; rank 1 got SIGTERM during its slow recompile (session_end says so)."""
    run = tmp_path_factory.mktemp("terminated") / "run"
    _finished_rank(run, 0, 2)
    _stopped_rank(run, 1, 2, signal.SIGTERM)
    return run


@pytest.fixture(scope="module")
@starts("workload")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks of one run: rank 0 finished; rank 1 got SIGKILL during its slow recompile (no session_end),
    after the recompile had run long enough to write a ``compile_running``."""
    run = tmp_path_factory.mktemp("killed") / "run"
    _finished_rank(run, 0, 2)
    _stopped_rank(run, 1, 2, signal.SIGKILL, HELD_KILLED)
    return run


def _line(text: str, *, at_least: bool) -> re.Match[str]:
    pattern = (
        r"rank 1 was compiling `Model\.forward` "
        + re.escape(CAUSE)
        + r" for "
        + ("at least " if at_least else "")
        + r"(\d+) s when the run ended"
    )
    found = re.search(pattern, text)
    assert found is not None, text
    return found


def test_report_names_the_compile_a_sigterm_interrupted(terminated: Path) -> None:
    """A rank stopped by SIGTERM mid-recompile: ``report`` says which rank was compiling which frame, why, and
    for how long (from its ``session_end``: no lower bound), and that the other rank was not compiling."""
    done = cli("report", str(terminated), "--width", "200")
    assert done.returncode == 0, done.stderr
    found = _line(done.stdout, at_least=False)
    assert HELD - 1 <= int(found.group(1)) <= 120
    line = done.stdout[found.start() :].splitlines()[0]
    assert line == found.group(0) + "; rank 0 was not compiling", line
    assert "at least" not in done.stdout
    assert (
        "At the end: " + found.group(0) in done.stdout
    )  # the per-rank (divergence) section names it too


def test_a_one_rank_report_names_no_other_ranks(terminated: Path) -> None:
    """Read alone, the stopped rank's report names its compile and says nothing about ranks it does not hold."""
    done = cli("report", str(terminated), "--rank", "1", "--width", "200")
    assert done.returncode == 0, done.stderr
    _line(done.stdout, at_least=False)
    assert "not compiling" not in done.stdout and "At the end" not in done.stdout


def test_check_fails_on_the_compile_a_sigterm_interrupted_only_when_asked(terminated: Path) -> None:
    """``check --fail-on-running-compile`` exits 1 with one FAIL line for the rank that was compiling; without
    the flag the same run passes, with a warning line naming the compile."""
    failed = cli("check", str(terminated), "--fail-on-running-compile")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    fails = [line for line in failed.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1, failed.stdout
    assert fails[0] == "FAIL compile_running_at_end: " + _line(fails[0], at_least=False).group(0)
    passed = cli("check", str(terminated), "--max-recompiles", "5")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "FAIL" not in passed.stdout  # said, not failed: one warning line names it
    warned = [
        line
        for line in passed.stderr.splitlines()
        if line.startswith("recompprof: warning: rank 1 was compiling")
    ]
    assert warned == [
        f"recompprof: warning: {_line(passed.stderr, at_least=False).group(0)} "
        "(pass --fail-on-running-compile to fail on it)"
    ], passed.stderr


def test_report_gives_a_lower_bound_for_a_rank_killed_outright(killed: Path) -> None:
    """A rank killed with SIGKILL mid-recompile has no ``session_end``: its last ``compile_start`` without its
    ``compile`` names the compile, run "for at least" as long as its own log shows it alive: up to its last
    ``compile_running`` (the heartbeat a long compile writes), not to another rank's events."""
    done = cli("report", str(killed), "--width", "200")
    assert done.returncode == 0, done.stderr
    found = _line(done.stdout, at_least=True)
    assert (
        done.stdout[found.start() :].splitlines()[0]
        == found.group(0) + "; rank 0 was not compiling"
    )
    start = [
        json.loads(line)
        for path in killed.glob("rank00001-*.jsonl")
        for line in path.read_text().splitlines()
        if '"compile_start"' in line
    ][-1]
    last = max(
        json.loads(line)["time"]
        for path in killed.glob("rank00001-*.jsonl")
        for line in path.read_text().splitlines()
    )
    assert int(found.group(1)) == round(
        last - start["time"]
    )  # up to its log's last event, not another rank's
    beats = [
        json.loads(line)
        for path in killed.glob("rank00001-*.jsonl")
        for line in path.read_text().splitlines()
        if '"compile_running"' in line
    ]
    assert beats and beats[-1]["compile_id"] == start["compile_id"] and beats[-1]["time"] == last, (
        beats
    )
    assert HEARTBEAT_SECONDS <= int(found.group(1)) <= HELD_KILLED + 1


def test_check_refuses_a_killed_rank_and_its_refusal_names_the_compile(killed: Path) -> None:
    """``check`` refuses the killed rank as incomplete (exit 2) and the refusal names its compile; accepted with
    ``--accept-incomplete-runs``, ``--fail-on-running-compile`` fails it (exit 1)."""
    refused = cli("check", str(killed), "--fail-on-running-compile")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    errors = [
        line
        for line in refused.stderr.splitlines()
        if line.startswith("recompprof: error: rank 1 ended without")
    ]
    assert len(errors) == 1, refused.stderr
    assert re.search(
        r"; rank 1 was compiling `Model\.forward` "
        + re.escape(CAUSE)
        + r" for at least \d+ s when its log ended$",
        errors[0],
    ), errors[0]
    failed = cli("check", str(killed), "--fail-on-running-compile", "--accept-incomplete-runs")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    fails = [line for line in failed.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0] == "FAIL compile_running_at_end: " + _line(
        fails[0], at_least=True
    ).group(0)


@pytest.mark.workload  # the recorded runs, by name (request.getfixturevalue)
@pytest.mark.parametrize("which", ["terminated", "killed"])
def test_merging_worker_folds_gives_the_same_verdict(
    which: str, request: pytest.FixtureRequest
) -> None:
    """Folded file by file in worker processes and merged, the run says the same as one fold: the same ranks
    compiling and not, the same lines; ``check`` in workers gives the same violations."""
    run = request.getfixturevalue(which)
    whole = build_report(load(run).events)
    merged = build_run_report(load(run).events, workers=2)
    assert_same(figures(merged), figures(whole))
    assert (
        running_at_end(merged.sessions) == running_at_end(whole.sessions)
        and len(running_at_end(whole.sessions)) == 1
    )
    rules = Rules(fail_on_running_compile=True)
    assert [str(v) for v in check(load(run).events, rules, workers=2).findings()] == [
        str(v) for v in check(load(run).events, rules, workers=1).findings()
    ]


def test_html_report_shows_the_compile_first(terminated: Path, tmp_path: Path) -> None:
    """The HTML report opens with the compile the run ended with, before the figures."""
    out = tmp_path / "report.html"
    done = cli("report", str(terminated), "--html", str(out))
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    section = re.search(
        r'<section class="stalled" id="compiling-at-end">(.*?)</section>', page, re.S
    )
    assert section is not None, page[:2000]
    text = html.unescape(re.sub(r"<[^>]+>", " ", section.group(1)))
    _line(text, at_least=False)
    assert "rank 0 was not compiling" in text
    assert page.index('id="compiling-at-end"') < page.index('id="kpi-compiles"')


@pytest.mark.workload
def test_a_rank_killed_between_compiles_was_not_compiling(tmp_path: Path) -> None:
    """A job killed with SIGKILL between steps (every compile_start has its compile) reports no running compile,
    and ``check --fail-on-running-compile`` (accepting the killed rank) passes, also when ``--after-step``
    leaves every compile out of the figures (a step the rank reached: one it never reached is refused)."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOADS / "train_until_told.py"), "--steps", "12", "--wait-at", "6"],
        env=_env(run, 0, 1),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("WAITING"):
                break
        proc.kill()
    finally:
        proc.kill()
        proc.wait()
    report = build_report(load(run).events)
    assert (
        report.sessions.incomplete
        and report.sessions.compiling_at_end == {}
        and report.sessions.not_compiling_at_end == [0]
    )
    for after in ([], ["--after-step", "6"]):
        done = cli(
            "check", str(run), "--fail-on-running-compile", "--accept-incomplete-runs", *after
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "compiling" not in done.stdout + done.stderr


FINISHED = {
    "failed compiles, raised into the job": ["compile_failures.py", "raised"],
    "failed compiles, suppressed by torch": ["compile_failures.py", "suppressed"],
    "aot_eager backward, graph break, recompile-limit hits": [
        "train_until_told.py",
        "--steps",
        "12",
        "--recompile-limit",
        "3",
    ],
    "eager, four kinds of recompile": [
        "train_recompiles.py",
        "--steps",
        "12",
        "--recompile-limit",
        "2",
    ],
}


@pytest.mark.workload
@pytest.mark.parametrize("job", list(FINISHED))
def test_a_finished_run_never_reports_a_running_compile(job: str, tmp_path: Path) -> None:
    """A job that ends normally, whatever its compiles did (failed, hit the recompile limit, broke the graph,
    compiled a backward), ended with no compile running; ``check --fail-on-running-compile`` passes."""
    run = tmp_path / "run"
    script, *args = FINISHED[job]
    done = subprocess.run(
        [sys.executable, str(WORKLOADS / script), *args],
        env=_env(run, 0, 1),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _assert_not_compiling(run)


@pytest.mark.workload
@pytest.mark.parametrize("mode", ["monitor", "profile"])
def test_a_finished_demo_never_reports_a_running_compile(mode: str, tmp_path: Path) -> None:
    """``recompprof demo`` in monitor and profile mode (profile mode's parked variants re-enabled without a
    compile) ends with no compile running."""
    run = tmp_path / "run"
    done = cli(
        "demo",
        "--steps",
        "20",
        "--run-dir",
        str(run),
        *(["--profile"] if mode == "profile" else []),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _assert_not_compiling(run)


def _assert_not_compiling(run: Path) -> None:
    assert any(
        '"compile_start"' in path.read_text() for path in run.glob("*.jsonl")
    )  # the log records them
    report = build_report(load(run).events)
    assert (
        report.sessions.compiling_at_end == {}
        and report.sessions.not_compiling_at_end == [0]
        and not report.sessions.incomplete
    )
    text = cli("report", str(run), "--width", "200")
    assert text.returncode == 0 and "was compiling" not in text.stdout, text.stdout + text.stderr
    checked = cli("check", str(run), "--fail-on-running-compile")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _as_older_writer(src: Path, dst: Path) -> None:
    """The run as a recompprof without compile starts would have written it: no ``compile_start`` lines and
    no ``session_end.compiling``."""
    dst.mkdir()
    for path in src.glob("*.jsonl"):
        lines = []
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["kind"] == "compile_start":
                continue
            event.pop("compiling", None)
            lines.append(json.dumps(event) + "\n")
        (dst / path.name).write_text("".join(lines))


@pytest.mark.workload  # the recorded runs, by name (request.getfixturevalue)
@pytest.mark.parametrize("which", ["terminated", "killed"])
def test_an_older_log_says_nothing_about_running_compiles(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A log without compile starts (an older recompprof) cannot say what was compiling: no rank is named as
    compiling, and none as not compiling; ``check --fail-on-running-compile`` passes it."""
    older = tmp_path / "older"
    _as_older_writer(request.getfixturevalue(which), older)
    report = build_report(load(older).events)
    assert report.sessions.compiling_at_end == {} and report.sessions.not_compiling_at_end == []
    text = cli("report", str(older), "--width", "200")
    assert text.returncode == 0 and "compiling" not in text.stdout, text.stdout
    checked = cli("check", str(older), "--fail-on-running-compile", "--accept-incomplete-runs")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_recompile_without_its_guard_failure_still_reads_as_a_recompile() -> None:
    """torch before 2.6 names no guard failure when a compile starts: a recompile running then says
    "(recompile)", a first compile nothing, live and at the run's end alike."""
    from recompprof._model.events import CompileStart, Frame
    from recompprof._model.status import describe, describe_at_end, running

    frame = Frame(name="Model.forward", file="m.py", line=3)
    later = running(
        CompileStart(time=100.0, frame=frame, compile_id="0/1", is_recompile=True), 142.0
    )
    first = running(
        CompileStart(time=100.0, frame=frame, compile_id="0/0", is_recompile=False), 142.0
    )
    assert later is not None and first is not None
    assert describe(1, later) == "rank 1 compiling `Model.forward` (recompile), 42 s"
    assert (
        describe_at_end(1, later)
        == "rank 1 was compiling `Model.forward` (recompile) for 42 s when the run ended"
    )
    assert (
        describe_at_end(1, first, lower_bound=True)
        == "rank 1 was compiling `Model.forward` for at least 42 s when the run ended"
    )


@pytest.mark.workload
def test_recompprof_run_stopped_mid_compile_names_the_compile_in_its_summary(
    tmp_path: Path,
) -> None:
    """``recompprof run`` passes a SIGTERM on to its program; when that stops it during a recompile, the summary
    ``run`` prints at the end names the compile the run ended with."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "recompprof._cli.main",
            "run",
            "--run-dir",
            str(run),
            "--",
            sys.executable,
            str(WORKLOADS / "slow_compile.py"),
            "300",
        ],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stop_during_recompile(proc, run, held=HELD)
    _, err = proc.communicate(timeout=60)
    summary = [line for line in err.splitlines() if line.startswith("rank 0 was compiling")]
    assert len(summary) == 1, err
    assert re.fullmatch(
        r"rank 0 was compiling `Model\.forward` "
        + re.escape(CAUSE)
        + r" for \d+ s when the run ended",
        summary[0],
    ), summary[0]
