"""Runs the log cannot vouch for: a rank that died (or is still running) and a log with a gap.

Real training processes (``tests/workloads/train_until_told.py``, eager/aot_eager on CPU) under
``recompprof.attach()``: killed with a real SIGKILL mid-run, read while still running, starved of disk
by a real full tmpfs (as root) or the process's own ``RLIMIT_FSIZE``, and run to the end in monitor
and profile mode to show that a complete run gets no such warning. The offline commands are the real
``recompprof`` command in a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recompprof._analysis.check import Rules, check
from recompprof._analysis.render import text as text_module
from recompprof._analysis.render.wording import gap_detail
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.merging import build_run_report, merge
from recompprof._analysis.runs import load
from recompprof._eventlog.writer import write_events
from recompprof._model.events import Compile, Frame, GraphBreak, SessionEnd, SessionStart

sys.path.insert(0, str(Path(__file__).resolve().parent))
from folds import assert_same, figures
from recorded_runs import clean_env, cli

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "train_until_told.py"
DIED = "ended without session_end: killed, crashed or still running"


def _start(run_dir: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKLOAD), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(RECOMPPROF_RUN_DIR=str(run_dir), **env),
    )


def _wait_for(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdout is not None
    for got in proc.stdout:
        if got.strip() == line:
            return
    raise AssertionError(f"the workload ended (exit {proc.wait()}) before printing {line!r}")


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(run_dir.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def _last_event(run_dir: Path, rank: int) -> dict[str, Any]:
    return [e for e in _events(run_dir) if e["rank"] == rank][-1]


def _when(event: dict[str, Any]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(event["time"]))


@pytest.mark.workload
def test_a_rank_killed_with_sigkill_is_reported_and_fails_check(tmp_path: Path) -> None:
    """A training process killed by SIGKILL at step 39 leaves a readable log without ``session_end``:
    ``report`` says the rank ended without it (with the time and step of its last event) and shows
    the steps as a lower bound; ``check`` says so and exits 2, and exits 0 with
    ``--accept-incomplete-runs`` when the rules hold."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir, "--steps", "100000")
    try:
        _wait_for(proc, "STEP 39")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    last = _last_event(run_dir, 0)
    assert (
        last["kind"] != "session_end" and last["step"] < 39
    )  # compiles stopped long before the kill

    report = cli("report", str(run_dir))
    assert report.returncode == 0, report.stderr
    assert (
        f"WARNING: rank 0 {DIED} (last event at {_when(last)}, step {last['step']})"
        in report.stdout
    )
    assert f"steps >= {last['step']} (last seen)" in report.stdout

    checked = cli("check", str(run_dir), "--max-recompiles", "100")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert f"rank 0 {DIED}" in checked.stderr and "--accept-incomplete-runs" in checked.stderr
    accepted = cli("check", str(run_dir), "--max-recompiles", "100", "--accept-incomplete-runs")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert f"rank 0 {DIED}" in accepted.stderr  # accepted, still said


@pytest.mark.workload
def test_one_dead_rank_of_a_multi_rank_run_is_named(tmp_path: Path) -> None:
    """Two ranks in one run directory, rank 1 killed mid-run, rank 0 ending normally: the text and
    HTML reports and ``check`` name rank 1, and only rank 1."""
    run_dir = tmp_path / "run"
    world = {"WORLD_SIZE": "2", "RECOMPPROF_RUN_ID": "two-ranks"}
    done = _start(run_dir, "--steps", "12", RANK="0", **world)
    dying = _start(run_dir, "--steps", "100000", RANK="1", **world)
    try:
        _wait_for(dying, "STEP 20")
    finally:
        dying.send_signal(signal.SIGKILL)
        dying.wait(30)
    assert done.wait(120) == 0
    last = _last_event(run_dir, 1)

    html = tmp_path / "report.html"
    report = cli("report", str(run_dir), "--html", str(html))
    assert report.returncode == 0, report.stderr
    assert (
        f"WARNING: rank 1 {DIED} (last event at {_when(last)}, step {last['step']})"
        in report.stdout
    )
    assert "rank 0 ended" not in report.stdout
    assert f"rank 1 {DIED}" in html.read_text()

    checked = cli("check", str(run_dir), "--max-recompiles", "100")
    assert checked.returncode == 2
    assert f"rank 1 {DIED}" in checked.stderr and "rank 0 ended" not in checked.stderr


NO_LOG = "the run's world size is 3 and rank 1 wrote no event log here"


@pytest.mark.workload
def test_a_rank_with_no_log_in_the_run_folder_is_named_and_fails_check(tmp_path: Path) -> None:
    """Three ranks of one run, and a copy of its folder without rank 1's log (a rank that did not
    attach, or a node whose log was not collected): over the copy ``check`` and ``diff`` name rank 1
    and exit 2 (they passed, on two thirds of the run), ``--allow-skipped`` accepts it and still
    says it, ``report`` says it and exits 0. The whole folder, and one rank's log given alone, are
    not held to the world size."""
    run_dir, partial = tmp_path / "run", tmp_path / "partial"
    world = {"WORLD_SIZE": "3", "RECOMPPROF_RUN_ID": "three-ranks"}
    ranks = [_start(run_dir, "--steps", "6", RANK=str(rank), **world) for rank in range(3)]
    assert [proc.wait(180) for proc in ranks] == [0, 0, 0]
    partial.mkdir()
    for log in sorted(run_dir.glob("*.jsonl")):
        if not log.name.startswith("rank00001-"):
            (partial / log.name).write_bytes(log.read_bytes())

    whole = cli("check", str(run_dir), "--max-recompiles", "100")
    assert whole.returncode == 0 and "wrote no event log" not in whole.stderr, whole.stderr
    checked = cli("check", str(partial), "--max-recompiles", "100")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert NO_LOG in checked.stderr and "--allow-skipped" in checked.stderr
    accepted = cli("check", str(partial), "--max-recompiles", "100", "--allow-skipped")
    assert accepted.returncode == 0 and NO_LOG in accepted.stderr, accepted.stderr
    diffed = cli("diff", str(run_dir), str(partial))
    assert diffed.returncode == 2 and NO_LOG in diffed.stderr, diffed.stdout + diffed.stderr
    report = cli("report", str(partial))
    assert report.returncode == 0 and NO_LOG in report.stderr, report.stderr
    [rank0] = partial.glob("rank00000-*.jsonl")
    alone = cli("check", str(rank0), "--max-recompiles", "100")
    assert alone.returncode == 0 and "wrote no event log" not in alone.stderr, alone.stderr


@pytest.mark.workload
def test_a_run_still_being_written_gets_the_same_verdict_and_passes_once_it_ends(
    tmp_path: Path,
) -> None:
    """Read while the process is still training, a run is reported as "killed, crashed or still
    running" and ``check`` exits 2; once the process has ended normally the same commands report no
    such thing and ``check`` exits 0."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir, "--steps", "14", "--wait-at", "10")
    try:
        _wait_for(proc, "WAITING")
        report = cli("report", str(run_dir))
        checked = cli("check", str(run_dir), "--max-recompiles", "100")
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(120) == 0
    finally:
        proc.kill()
    assert f"rank 0 {DIED}" in report.stdout
    assert checked.returncode == 2 and f"rank 0 {DIED}" in checked.stderr

    report = cli("report", str(run_dir))
    checked = cli("check", str(run_dir), "--max-recompiles", "100")
    assert "WARNING" not in report.stdout and "steps 14 |" in report.stdout
    assert checked.returncode == 0, checked.stdout + checked.stderr


@contextlib.contextmanager
def _small_tmpfs(where: Path) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(
            "cannot mount a tmpfs here (needs root); the RLIMIT_FSIZE case covers a full disk"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.mark.workload
@pytest.mark.parametrize("full", ["tmpfs", "rlimit_fsize"])
def test_a_log_with_a_gap_from_a_full_disk_fails_check(full: str, tmp_path: Path) -> None:
    """A real training run whose log's disk is full for four steps, then freed: its ``session_end``
    counts more compiles than the log holds, and the writer's own count of the events it could not
    write. The report warns at the top, ``check --max-recompiles`` exits 2 (not 0 on the partial
    counts), and the log has no torn or corrupt line where a write was cut."""
    with contextlib.ExitStack() as stack:
        if full == "tmpfs":
            run_dir = stack.enter_context(_small_tmpfs(tmp_path / "disk")) / "run"
            starve = ["--fill", str(run_dir.parent / "filler")]
        else:
            run_dir, starve = tmp_path / "run", []
        proc = _start(
            run_dir,
            "--steps",
            "12",
            "--recompile-steps",
            "10",
            "--starve-after",
            "2",
            "--free-after",
            "6",
            *starve,
        )
        assert proc.wait(180) == 0
        events = _events(run_dir)
        end = events[-1]
        assert end["kind"] == "session_end"
        logged = sum(
            1
            for e in events
            if e["kind"] == "compile"
            and not e.get("backward")
            and e.get("outcome", "ok") != "limit_hit"
        )
        assert end["events_dropped"]["event_log"] > 0 and end["totals"]["compiles"] > logged

        report = cli("report", str(run_dir))
        checked = cli("check", str(run_dir), "--max-recompiles", "100")
        accepted = cli("check", str(run_dir), "--max-recompiles", "100", "--accept-log-gaps")
    header = report.stdout.split("\n\n")[0].splitlines()  # the title, the run's line, its warnings
    gap = f"rank 0: the event log has a gap: session_end counts {int(end['totals']['compiles'])} compile(s), the log holds {logged}"
    assert any(line.startswith("WARNING: " + gap) for line in header), report.stdout
    assert (
        f"the writer could not write {end['events_dropped']['event_log']} event(s)" in report.stdout
    )
    assert "torn" not in report.stderr and "corrupt" not in report.stderr
    assert (
        checked.returncode == 2 and gap in checked.stderr and "--accept-log-gaps" in checked.stderr
    )
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


@pytest.mark.workload
@pytest.mark.parametrize("mode", ["monitor", "profile"])
def test_complete_real_runs_get_no_gap_or_death_warning(mode: str, tmp_path: Path) -> None:
    """Totals that legitimately differ from a count of lines (backward compiles, limit hits, graph
    breaks counted by their ``count``, profile mode's re-runs of parked variants, which take no compile
    time) reconcile by the live totals' own rule: a complete run gets no warning and ``check`` exits 0."""
    run_dir = tmp_path / "run"
    args = ["--steps", "16", "--recompile-steps", "12"] + (
        ["--recompile-limit", "4"] if mode == "monitor" else ["--sizes", "2,3"]
    )
    proc = _start(run_dir, *args, RECOMPPROF_MODE=mode)
    assert proc.wait(180) == 0
    events = _events(run_dir)
    totals = events[-1]["totals"]
    assert (
        events[-1]["kind"] == "session_end"
        and totals["compiles"] > 0
        and totals["graph_breaks"] > 0
    )
    compiles = [e for e in events if e["kind"] == "compile"]
    if mode == "monitor":
        assert totals["recompile_limit_hits"] > 0 and any(e.get("backward") for e in compiles)
    else:  # parked variants run again: recompiles that took no compile time
        assert totals["profile_reenabled"] > 0 and any(
            e["is_recompile"] and e.get("duration", 0) == 0 for e in compiles
        )
    report = cli("report", str(run_dir))
    checked = cli("check", str(run_dir), "--max-recompiles", "100")
    assert report.returncode == 0 and "WARNING" not in report.stdout, report.stdout
    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- the same verdicts folded in worker processes --------------------------------------------------------

FRAME = Frame(name="fwd", file="/job/m.py", line=3)


def _session(
    rank: int, pid: int, start: float, compiles: int, *, ended: bool, claimed: int | None = None
) -> list[Any]:
    events: list[Any] = [
        SessionStart(
            time=start,
            rank=rank,
            step=0,
            run_id="r",
            host="h",
            pid=pid,
            versions={},
            mode="monitor",
            recompile_limit=8,
        )
    ]
    for i in range(compiles):
        events.append(
            Compile(
                time=start + 1 + i,
                rank=rank,
                step=i,
                frame=FRAME,
                compile_id=f"0/{i}",
                is_recompile=i > 0,
                duration=0.5,
            )
        )
        events.append(
            GraphBreak(time=start + 1 + i, rank=rank, step=i, frame=FRAME, reason="x", count=2)
        )
    if ended:
        n = compiles if claimed is None else claimed
        events.append(
            SessionEnd(
                time=start + 100,
                rank=rank,
                step=compiles,
                totals={
                    "compiles": n,
                    "recompiles": max(0, n - 1),
                    "graph_breaks": 2 * n,
                    "compile_seconds": 0.5 * n,
                },
            )
        )
    return events


def _mixed_run(tmp_path: Path) -> Path:
    """Rank 0 restarted after a crash (two files), rank 1 with a gap, rank 2 complete, rank 3 still running."""
    run = tmp_path / "run"
    run.mkdir()
    write_events(run / "rank00000-10.jsonl", _session(0, 10, 1000, 3, ended=False))
    write_events(run / "rank00000-11.jsonl", _session(0, 11, 2000, 2, ended=True))
    write_events(run / "rank00001-20.jsonl", _session(1, 20, 1000, 4, ended=True, claimed=6))
    write_events(run / "rank00002-30.jsonl", _session(2, 30, 1000, 5, ended=True))
    write_events(run / "rank00003-40.jsonl", _session(3, 40, 1000, 2, ended=False))
    return run


def test_workers_give_the_same_dead_ranks_and_gaps(tmp_path: Path) -> None:
    """``report`` and ``check`` folded in forked workers (a file or a rank each, then merged) give the
    same dead ranks and gaps as one fold, and the merge of any cut of the events gives them too."""
    run = _mixed_run(tmp_path)
    whole = build_report(load(run).events)
    assert (
        sorted(whole.sessions.incomplete) == [0, 3]
        and whole.sessions.incomplete[0].sessions == 1
        and sorted(whole.sessions.log_gaps) == [1]
    )
    assert_same(figures(build_run_report(load(run).events, workers=2)), figures(whole))
    rules = Rules(max_recompiles=100)
    assert [str(v) for v in check(load(run).events, rules, workers=2).findings()] == [
        str(v) for v in check(load(run).events, rules, workers=1).findings()
    ]
    assert {(v.rule, v.rank) for v in check(load(run).events, rules, workers=1).findings()} == {
        ("incomplete", 0),
        ("incomplete", 3),
        ("log_gap", 1),
    }
    events = list(load(run).events)
    rng = random.Random(1)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(events)), 3))
        parts = []
        for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True):
            parts.append(build_report(events[a:b]))
        merged = merge(parts)
        if merged is not None:
            assert_same(figures(merged), figures(whole))
            assert text_module.render_text(merged) == text_module.render_text(whole)


def test_after_step_does_not_make_a_gap(tmp_path: Path) -> None:
    """``check --after-step`` leaves the events before that step out of the figures, not out of the
    reconciliation with ``session_end``: a complete run has no gap, whatever step it starts from."""
    run = tmp_path / "run"
    run.mkdir()
    write_events(run / "rank00000-1.jsonl", _session(0, 1, 1000, 6, ended=True))
    assert check(load(run).events, Rules(max_recompiles=100, after_step=4)).findings() == []
    assert [
        v.rule for v in check(load(run).events, Rules(max_recompiles=0, after_step=4)).findings()
    ] == ["max_recompiles"]


def test_a_log_holding_more_than_its_totals_is_not_called_a_gap() -> None:
    """Only a total higher than the log's count is a gap: a log with more events than its session_end
    counted (the live totals missed one through an internal error) gets no verdict either way."""
    more = build_report(_session(0, 1, 1000, 5, ended=True, claimed=4))
    fewer = build_report(_session(0, 1, 1000, 4, ended=True, claimed=5))
    assert more.sessions.log_gaps == {} and more.sessions.incomplete == {}
    assert list(fewer.sessions.log_gaps) == [
        0
    ] and "session_end counts 5 compile(s), the log holds 4" in gap_detail(
        fewer.sessions.log_gaps[0]
    )
