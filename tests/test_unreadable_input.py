"""Offline input that must not pass silently: files named like logs that cannot be read as one, and
non-finite numbers.

A FIFO, a dangling symlink or a directory named ``rank*.jsonl`` is an unreadable rank (a problem:
``check`` exits 2), read without ever blocking. ``NaN``, ``Infinity`` or an overflowing literal
(``1e999``) in any numeric field is a corrupt line in both readers (the validated pydantic one and the
msgspec views), so no threshold can pass on it. The commands are the real ``recompprof`` command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recompprof._analysis.check import Rules, check
from recompprof._analysis.runs import load
from recompprof._eventlog.reader import ReadStats, read_file, scan_file
from recompprof._eventlog.writer import write_events
from recompprof._model.events import Compile, Frame, Running, SessionEnd, SessionStart, to_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from needs import starts
from recorded_runs import clean_env, cli

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "train_until_told.py"
FRAME = Frame(name="fwd", file="/job/m.py", line=3)
START = SessionStart(
    time=1.0,
    rank=0,
    step=0,
    run_id="r",
    host="h",
    pid=1,
    versions={},
    mode="monitor",
    recompile_limit=8,
)
COMPILE = Compile(
    time=2.0,
    rank=0,
    step=1,
    frame=FRAME,
    compile_id="0/0",
    is_recompile=False,
    start_time=1.5,
    duration=0.25,
    phases={"dynamo_trace": 0.25},
    cache_seconds_saved=0.5,
    triton_compile_s=0.25,
    trace_seconds_by_function={"f": 0.125},
    guard_latency_s=0.0625,
)
END = SessionEnd(time=3.0, rank=0, step=2, totals={"compiles": 1.0, "compile_seconds": 0.25})
END_COMPILING = SessionEnd(
    time=3.0,
    rank=0,
    step=2,
    totals={"compiles": 1.0},
    compiling=Running(frame=FRAME, compile_id="0/1", started=2.5, seconds=0.5),
)

# Each numeric field holding a float, as (event, a JSON path to it).
FIELDS: list[tuple[Any, tuple[str, ...]]] = [
    (COMPILE, ("time",)),
    (COMPILE, ("start_time",)),
    (COMPILE, ("duration",)),
    (COMPILE, ("phases", "dynamo_trace")),
    (COMPILE, ("cache_seconds_saved",)),
    (COMPILE, ("triton_compile_s",)),
    (COMPILE, ("guard_latency_s",)),
    (COMPILE, ("trace_seconds_by_function", "f")),
    (START, ("time",)),
    (END, ("totals", "compile_seconds")),
    (END, ("time",)),
    (END_COMPILING, ("compiling", "started")),
    (END_COMPILING, ("compiling", "seconds")),
]
LITERALS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]


def _with(event: Any, path: tuple[str, ...], literal: str) -> bytes:
    """The event's JSON line with the number at ``path`` replaced by ``literal``, written as-is."""
    data = json.loads(to_json(event))
    where = data
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = "@@"
    return json.dumps(data).replace('"@@"', literal).encode()


@pytest.mark.parametrize("reader", [read_file, scan_file], ids=["pydantic", "msgspec"])
@pytest.mark.parametrize("literal", LITERALS)
@pytest.mark.parametrize(
    ("event", "path"), FIELDS, ids=[f"{e.kind}.{'.'.join(p)}" for e, p in FIELDS]
)
def test_non_finite_numbers_are_corrupt_lines_in_both_readers(
    reader: Any, literal: str, event: Any, path: tuple[str, ...], tmp_path: Path
) -> None:
    """A non-finite number in any numeric field makes its line a corrupt line (counted), in both
    readers; the lines around it are read as usual."""
    log = tmp_path / "rank00000-1.jsonl"
    good = to_json(COMPILE).encode()
    log.write_bytes(good + b"\n" + _with(event, path, literal) + b"\n" + good + b"\n")
    stats = ReadStats()
    events = list(reader(log, stats))
    assert (
        [e.kind for e in events] == ["compile", "compile"]
        and stats.corrupt == 1
        and stats.lines == 3
    )


def test_the_fields_tried_are_every_float_field_of_those_events() -> None:
    """The fields above are every float field the reader finds in the models of those three kinds
    (the rest hold only ``time``), so no float field goes untried."""
    from recompprof._eventlog.reader import _FLOAT_FIELDS

    tried = {(e.kind, p[0]) for e, p in FIELDS}
    for kind in ("compile", "session_start", "session_end"):
        assert {(kind, name) for name, _ in _FLOAT_FIELDS[kind]} <= tried
    assert all(
        [name for name, _ in _FLOAT_FIELDS[kind]] == ["time"]
        for kind in ("graph_break", "recompile_limit_hit", "signal")
    )


@pytest.fixture(scope="module")
@starts("workload")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete run of the real workload (aot_eager, 6 steps)."""
    where = tmp_path_factory.mktemp("real") / "run"
    proc = subprocess.run(
        [sys.executable, str(WORKLOAD), "--steps", "6", "--recompile-steps", "4"],
        capture_output=True,
        text=True,
        timeout=180,
        env=clean_env(RECOMPPROF_RUN_DIR=str(where)),
    )
    assert proc.returncode == 0, proc.stderr
    return where


def test_a_nan_duration_cannot_pass_a_threshold(real_run: Path, tmp_path: Path) -> None:
    """A real run with one compile's duration changed to NaN: ``report`` shows no "nan" and
    ``check --max-compile-seconds 1`` exits 2 (the line is corrupt), not 0."""
    [log] = real_run.glob("*.jsonl")
    lines = log.read_text().splitlines()
    index = next(
        i for i, line in enumerate(lines) if '"kind":"compile"' in line and '"duration":' in line
    )
    data = json.loads(lines[index])
    data["duration"] = "@@"
    lines[index] = json.dumps(data).replace('"@@"', "NaN")
    run = tmp_path / "run"
    run.mkdir()
    (run / log.name).write_text("\n".join(lines) + "\n")

    report = cli("report", str(run))
    assert "nan" not in report.stdout.lower() and "1 corrupt line(s)" in report.stderr
    checked = cli("check", str(run), "--max-compile-seconds", "1")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "1 corrupt line(s)" in checked.stderr


def _run_with_irregular_files(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_events(run / "rank00000-1.jsonl", [START, COMPILE, END])
    os.mkfifo(run / "rank00001-2.jsonl")
    (run / "rank00002-3.jsonl").symlink_to(run / "gone.jsonl")
    (run / "rank00003-4.jsonl").mkdir()
    return run


def test_files_named_like_logs_that_are_not_files_are_unreadable_ranks(tmp_path: Path) -> None:
    """A FIFO, a dangling symlink and a directory named like rank logs: ``report`` warns naming each
    (and never blocks on the FIFO: the commands end within their timeout), ``check`` exits 2."""
    run = _run_with_irregular_files(tmp_path)
    report = cli("report", str(run), timeout=60)
    assert report.returncode == 0, report.stderr
    for name, why in (
        ("rank00001-2.jsonl", "a FIFO"),
        ("rank00002-3.jsonl", "a dangling symlink"),
        ("rank00003-4.jsonl", "a directory"),
    ):
        assert f"{name} ({why}, not a regular file)" in report.stderr
    assert "3 event log(s) could not be read" in report.stderr
    checked = cli("check", str(run), "--max-recompiles", "10", timeout=60)
    assert checked.returncode == 2 and "3 event log(s) could not be read" in checked.stderr
    fifo_only = cli("report", str(run / "rank00001-2.jsonl"), timeout=60)
    assert fifo_only.returncode == 2 and "a FIFO" in fifo_only.stderr


def test_unreadable_ranks_are_problems_in_worker_processes_too(tmp_path: Path) -> None:
    """``check`` folding ranks in forked workers records the unreadable files as one fold does."""
    run = _run_with_irregular_files(tmp_path)
    problems = []
    for workers in (1, 2):
        loaded = load(run)
        assert check(loaded.events, Rules(max_recompiles=10), workers=workers).findings() == []
        loaded.finish()
        problems.append(loaded.problems)
    assert problems[0] == problems[1] and "3 event log(s) could not be read" in problems[0][0]
