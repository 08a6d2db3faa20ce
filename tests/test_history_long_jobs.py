"""Long jobs in the lake on time: a session's log exported while it runs (``history_every``), closed
days first and at the end only what remains, each row once (docs/history.md, "Export while it runs")."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pytest

duckdb = pytest.importorskip("duckdb")
pq = pytest.importorskip("pyarrow.parquet")

from generated_runs import generate  # noqa: E402
from lake_sql import sql  # noqa: E402
from recorded_runs import clean_env, cli  # noqa: E402

from recompprof._analysis.report.fold import build_report  # noqa: E402
from recompprof._analysis.runs import load  # noqa: E402
from recompprof._history.rows import day_of  # noqa: E402
from recompprof._history.tables import TABLES  # noqa: E402

WORKLOAD = Path(__file__).parent / "workloads" / "train_until_told.py"


def _in_lake(lake: Path) -> tuple[Any, ...] | None:
    """The one runs row's (ended, compiles) and the compile rows counted, once a runs file is there."""
    if not (lake / "v1" / "runs").exists() or not (lake / "v1" / "compiles").exists():
        return None
    [(sessions, ended, compiles)] = sql(
        lake, "SELECT COUNT(*), BOOL_OR(ended), SUM(compiles) FROM runs"
    )
    [(rows,)] = sql(lake, "SELECT COUNT(*) FROM compiles WHERE counts_as_compile")
    return sessions, ended, compiles, rows


def _polled(lake: Path) -> tuple[Any, ...] | None:
    """:func:`_in_lake` while the job may be replacing a file under the read: a read that meets a file
    mid-replacement fails (plain DuckDB, docs/history.md "Asking while jobs export") and is tried again
    at the next poll."""
    import duckdb

    try:
        return _in_lake(lake)
    except duckdb.Error:
        return None


def _exporting(run: Path, lake: Path, every: int) -> dict[str, str]:
    """A job's environment: its log in ``run``, exported to ``lake`` every ``every`` seconds (and
    120 s for each export, however loaded the machine)."""
    return clean_env(
        RECOMPPROF_RUN_DIR=str(run),
        RECOMPPROF_HISTORY_URI=str(lake),
        RECOMPPROF_HISTORY_EVERY=str(every),
        RECOMPPROF_HISTORY_TIMEOUT="120",
    )


@pytest.mark.workload
def test_a_running_session_is_in_the_lake_before_it_ends(tmp_path: Path) -> None:
    """With ``history_uri`` and ``history_every`` set, a job still running (blocked after step 6) is in
    the lake within that period: its session not ended and its compiles so far; once it ends, the lake
    holds it once, ended, with the compiles ``report`` counts."""
    run, lake = tmp_path / "run", tmp_path / "lake"
    env = _exporting(run, lake, every=1)
    command = [
        sys.executable,
        str(WORKLOAD),
        "--steps",
        "10",
        "--wait-at",
        "6",
        "--backend",
        "eager",
    ]
    proc = subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for line in proc.stdout:
            if line.startswith("WAITING"):
                break
        so_far = build_report(load(run).events).compiles
        assert so_far > 0
        deadline = time.monotonic() + 120
        found = _polled(lake)
        while time.monotonic() < deadline and (found is None or found[2] != so_far):
            time.sleep(0.2)
            found = _polled(lake)
        assert proc.poll() is None  # still running
        assert found == (1, False, so_far, so_far)
        proc.stdin.write("go\n")
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
        proc.wait()
    total = build_report(load(run).events).compiles
    assert _in_lake(lake) == (1, True, total, total) and total >= so_far


def _across_midnight(where: Path) -> Path:
    """A generated rank log (real event models) moved in time so it spans a UTC midnight."""
    generate(where, ranks=1, per_rank=2000, seed=4)
    [log] = where.glob("*.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    shift = (86400 - lines[0]["time"] % 86400) - 50  # starts 50 s before midnight
    for event in lines:
        event["time"] += shift
    log.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return log


def _counts(lake: Path) -> dict[str, list[tuple[Any, ...]]]:
    return {
        table: sql(lake, f"SELECT dt, COUNT(*) FROM {table} GROUP BY dt ORDER BY dt")
        for table in TABLES
    }


def test_closed_days_then_the_rest_hold_each_row_once(tmp_path: Path) -> None:
    """A session's log exported as its closed day (``--through-day``) and then, at its end, only the
    later days (``--after-day``), as ``history_uri`` does: the lake holds every row of both days once,
    as one export of the log does, with its ``runs`` row from the end."""
    log = _across_midnight(tmp_path / "run")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    first = day_of(events[0]["time"])
    assert day_of(events[-1]["time"]) > first
    lake, whole = tmp_path / "lake", tmp_path / "whole"
    done = cli("export", str(log), "--to", str(lake), "--per-rank", "--through-day", str(first))
    assert done.returncode == 0, done.stderr
    assert {d for t in TABLES for d, _ in _counts(lake)[t]} == {first}
    done = cli("export", str(log), "--to", str(lake), "--per-rank", "--after-day", str(first))
    assert done.returncode == 0, done.stderr
    assert cli("export", str(log), "--to", str(whole), "--per-rank").returncode == 0
    assert _counts(lake) == _counts(whole) and len(_counts(lake)["compiles"]) == 2
    [(ended, compiles)] = sql(lake, "SELECT ended, compiles FROM runs")
    assert ended and compiles == build_report(load(log).events).compiles


def _limit_hit_at_midnight(where: Path) -> tuple[Path, Path, float, str]:
    """A generated rank log moved in time so that a compile that hits the recompile limit is logged
    10 ms before a UTC midnight and its ``recompile_limit_hit`` 10 ms after; the log, a copy cut
    between the two (as a periodic export just after midnight reads it), the midnight and the
    compile's id."""
    generate(where / "run", ranks=1, per_rank=2000, seed=4)
    [log] = (where / "run").glob("*.jsonl")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    at = next(
        i
        for i, e in enumerate(events)
        if e["kind"] == "compile" and e.get("outcome") == "limit_hit"
        if events[i + 1]["kind"] == "recompile_limit_hit"
    )
    midnight = (events[at]["time"] // 86400 + 1) * 86400
    for index, event in enumerate(events):
        shift = midnight - 0.01 - events[at]["time"] + (0.02 if index > at else 0.0)
        event["time"] += shift
        if event.get("start_time") is not None:
            event["start_time"] += shift
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    cut = where / "live" / log.name
    cut.parent.mkdir()
    cut.write_text("".join(json.dumps(e) + "\n" for e in events[: at + 1]))
    return log, cut, midnight, events[at]["compile_id"]


def test_a_day_closed_just_after_midnight_is_exported_again_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A periodic export that starts half a second after a UTC midnight, its log cut between a
    compile that hit the recompile limit before midnight and the ``recompile_limit_hit`` naming the
    limit after it, does not close that day: the end-of-session export writes it again, and the
    compile's row names its limit. (The wall clock is set for the live path's thread only: a
    midnight cannot be waited for.)"""
    from recompprof._capture import history

    log, cut, midnight, compile_id = _limit_hit_at_midnight(tmp_path)
    started = datetime.datetime.fromtimestamp(midnight + 0.5, datetime.timezone.utc)

    class _Clock(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> _Clock:  # type: ignore[override]
            return cls.fromtimestamp(started.timestamp(), tz)

    clock = types.SimpleNamespace(
        datetime=_Clock, timezone=datetime.timezone, timedelta=datetime.timedelta
    )
    monkeypatch.setattr(history, "datetime", clock)
    lake = tmp_path / "lake"
    periodic = history.PeriodicExport(cut, str(lake), every=0.05, timeout=120, redact=False)
    periodic.start()
    deadline = time.monotonic() + 120
    while periodic.closed is None and time.monotonic() < deadline:
        time.sleep(0.05)
    periodic.stop()
    assert periodic.closed is not None
    history.export_at_end(log, str(lake), 120, False, after=periodic.closed)
    [(name, value)] = sql(
        lake,
        f"SELECT limit_name, limit_value FROM compiles WHERE compile_id = '{compile_id}' "
        f"AND outcome = 'limit_hit' AND time BETWEEN to_timestamp({midnight - 0.02}) "
        f"AND to_timestamp({midnight})",
    )
    assert (name, value) == ("recompile_limit", 8)


JOB_THAT_MOVES = """
import os, sys, torch, recompprof
session = recompprof.attach(run_dir="run", history_uri="lake")  # relative: the directory of now
os.makedirs("elsewhere", exist_ok=True)
os.chdir("elsewhere")  # as Hydra's job.chdir does after the job started
compiled = torch.compile(torch.nn.Linear(4, 4), backend="eager", dynamic=False)
for batch in range(1, 4):
    compiled(torch.randn(batch, 4))
    session.step()
session.detach()
"""


@pytest.mark.workload
def test_relative_paths_are_where_the_job_attached_even_after_it_moves(tmp_path: Path) -> None:
    """A real job attaches with a relative ``run_dir`` and ``history_uri``, then changes its working
    directory: its log and its lake stay where they were when it attached, and the export at its end
    holds its compiles (before, the end export looked for the log under the new directory and failed,
    and a relative lake was written under the new directory)."""
    done = subprocess.run(
        [sys.executable, "-c", JOB_THAT_MOVES], cwd=tmp_path, env=clean_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and "recompprof: warning" not in done.stderr, done.stderr
    assert not (tmp_path / "elsewhere" / "run").exists()
    assert not (tmp_path / "elsewhere" / "lake").exists()
    total = build_report(load(tmp_path / "run").events).compiles
    assert _in_lake(tmp_path / "lake") == (1, True, total, total) and total >= 3


@pytest.mark.parametrize("uri", ["s3://", "file://", "file:///", "gs://?region=x"])
def test_a_lake_uri_that_names_no_bucket_or_folder_is_refused_in_one_line(
    tmp_path: Path, uri: str
) -> None:
    """``s3://`` or ``file://`` with nothing after it, as ``history_uri`` or ``export --to``: refused at
    attach (the setting named) and by the command (one line, exit 2), nothing written (before, ``s3://``
    was "this is a recompprof bug" and ``file://`` wrote the lake at the filesystem's root)."""
    import recompprof
    from recompprof._capture.settings import ConfigError

    at_root = Path("/v1").exists()  # a lake written at the filesystem's root would add it
    with pytest.raises(ConfigError, match="'history_uri'.*names no bucket or folder"):
        recompprof.attach(run_dir=tmp_path / "run", history_uri=uri)
    generate(tmp_path / "gen", ranks=1, per_rank=20, seed=2)
    done = cli("export", str(tmp_path / "gen"), "--to", uri)
    assert done.returncode == 2 and done.stderr == (
        f"recompprof: error: {uri}: names no bucket or folder for the lake\n"
    )
    assert Path("/v1").exists() == at_root


# A job told to stop by SIGTERM that goes on for a while: it compiles twice, says READY, and once it
# has seen SIGTERM (its own handler's flag, or, as PID 1 with no handler, its stdin) compiles once
# more before it ends normally. ``flag``: install a handler that only sets a flag, as a training loop
# that finishes its step and saves a checkpoint does.
GOES_ON_AFTER_SIGTERM = textwrap.dedent(
    """
    import signal, sys, time, torch, recompprof

    stopped = []
    if sys.argv[1] == "flag":
        signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    recompprof.attach(mode="profile")
    f = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    f(torch.ones(2)); f(torch.ones(3))
    print("READY", flush=True)
    sys.stdin.readline()  # the test's go-ahead, once it has read the lake after SIGTERM
    assert stopped or sys.argv[1] != "flag"
    f(torch.ones(5))
    print("DONE", flush=True)
    """
)


@pytest.mark.workload
@pytest.mark.parametrize("how", ["flag", "pid1"])
def test_a_job_that_goes_on_after_sigterm_keeps_its_session_and_is_in_the_lake_at_once(
    tmp_path: Path, how: str
) -> None:
    """SIGTERM to a job that does not end on it (its handler sets a flag its loop reads; or it runs
    as PID 1 in a container, where the kernel ignores SIGTERM's default): its session goes on and
    records the compile made after the signal, the lake gets the log so far at once (not at the next
    ``history_every``, an hour off) as a session not ended, and when the job ends, the lake holds it
    ended, with every compile. (The session ended at the signal: the compile after it was recorded
    nowhere and the lake said ``ended`` with one compile fewer than the job made.)"""
    run, lake = tmp_path / "run", tmp_path / "lake"
    env = _exporting(run, lake, every=3600)
    command = [sys.executable, "-c", GOES_ON_AFTER_SIGTERM, how]
    if how == "pid1":
        if shutil.which("unshare") is None:
            pytest.skip("needs util-linux's unshare to run the job as PID 1")
        command = ["unshare", "--pid", "--fork", "--mount-proc", *command]
    proc = subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "READY"
        os.kill(_job_pid(proc.pid, how), signal.SIGTERM)
        deadline = time.monotonic() + 120
        found = _polled(lake)
        while time.monotonic() < deadline and found is None:
            time.sleep(0.2)
            found = _polled(lake)
        assert found == (1, False, 2, 2)
        assert proc.poll() is None  # the job goes on
        proc.stdin.write("go\n")
        proc.stdin.close()
        assert proc.stdout.readline().strip() == "DONE"
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
        proc.wait()
    assert build_report(load(run).events).compiles == 3
    assert _in_lake(lake) == (1, True, 3, 3)


def _job_pid(launched: int, how: str) -> int:
    """The job's pid as this test sees it: ``unshare --fork``'s one child, PID 1 in its namespace."""
    if how != "pid1":
        return launched
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = Path(f"/proc/{launched}/task/{launched}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("unshare started no job")
