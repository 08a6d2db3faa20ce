"""``recompprof report`` and the bad-input behaviour shared by report, check and diff."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from needs import starts
from recorded_runs import RecordedRun, cli, record


@pytest.fixture(scope="module")
@starts("workload")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return record(tmp_path_factory.mktemp("recorded"), "--steps", "12", trace=False)


def _copy(run: RecordedRun, tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "run"
    shutil.copytree(run.run_dir, target)
    (log,) = target.glob("*.jsonl")
    return target, log


def test_report_prints_frames_reasons_and_hints(recorded: RecordedRun) -> None:
    """The terminal report names the frame, its recompiles, the categories that explain them and a fix hint."""
    done = cli("report", str(recorded.run_dir), "--width", "400")
    assert done.returncode == 0, done.stderr
    assert "compiles 5 | recompiles 4" in done.stdout
    for text in (
        "Net.forward (workloads/train_recompiles.py",
        "size",
        "python_constant",
        "mark_dynamic",
        "dynamo_trace",
    ):
        assert text in done.stdout
    assert done.stderr == ""


def test_report_of_one_log_file_and_rank_filter(recorded: RecordedRun) -> None:
    """A single event-log file is a run too, and --rank selects ranks (an absent rank is a usage error)."""
    (log,) = recorded.run_dir.glob("*.jsonl")
    assert cli("report", str(log), "--rank", "0").returncode == 0
    absent = cli("report", str(log), "--rank", "3")
    assert absent.returncode == 2 and "rank(s) 3" in absent.stderr


# Each case: how to damage a copy of a real run; then the exit codes of report / check / diff.
CASES = {
    "missing": (lambda d, log: shutil.rmtree(d), 2, 2, 2, "no such file"),
    "empty_dir": (lambda d, log: log.unlink(), 2, 2, 2, "no recompprof event logs"),
    "only_foreign_files": (
        lambda d, log: (log.unlink(), (d / "notes.txt").write_text("x")),
        2,
        2,
        2,
        "no recompprof event logs",
    ),
    "foreign_jsonl": (
        lambda d, log: log.write_text('{"a": 1}\n{"b": 2}\n'),
        2,
        2,
        2,
        "no readable recompprof events",
    ),
    "unknown_schema": (
        lambda d, log: log.write_text(
            "".join(
                json.dumps({**json.loads(line), "schema_version": 99}) + "\n"
                for line in log.read_text().splitlines()
            )
        ),
        2,
        2,
        2,
        "unknown schema_version",
    ),
    "empty_file": (lambda d, log: log.write_text(""), 2, 2, 2, "empty"),
    "binary_file": (lambda d, log: log.write_bytes(bytes(range(256)) * 8), 2, 2, 2, "corrupt"),
    "torn_tail": (
        lambda d, log: log.write_text(log.read_text() + '{"schema_version": 1, "kind": "comp'),
        0,
        0,
        0,
        "torn",
    ),
    "corrupt_line": (
        lambda d, log: log.write_text("not json at all\n" + log.read_text()),
        0,
        2,
        2,
        "corrupt",
    ),
    "foreign_file_beside": (
        lambda d, log: (d / "other.jsonl").write_text('{"hello": "world"}\n'),
        0,
        2,
        2,
        "hold no recompprof events",
    ),
    "newer_kind": (
        lambda d, log: log.write_text(
            log.read_text() + '{"schema_version": 1, "kind": "future", "time": 1}\n'
        ),
        0,
        0,
        0,
        "kind",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(case: str, recorded: RecordedRun, tmp_path: Path) -> None:
    """Damaged runs give a one-line error (exit 2) or a warning with counts, never a traceback, for every command."""
    damage, want_report, want_check, want_diff, phrase = CASES[case]
    target, log = _copy(recorded, tmp_path)
    damage(target, log)
    results = {
        "report": (cli("report", str(target)), want_report),
        "check": (cli("check", str(target), "--max-recompiles", "10"), want_check),
        "diff": (cli("diff", str(recorded.run_dir), str(target)), want_diff),
    }
    for command, (done, want) in results.items():
        assert done.returncode == want, f"{command}: {done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        assert phrase in done.stderr, f"{command}: {done.stderr}"
        for line in done.stderr.splitlines():
            assert line.startswith("recompprof: "), line
        if want == 2:
            assert any(line.startswith("recompprof: error: ") for line in done.stderr.splitlines())


def test_allow_skipped_accepts_a_partial_run(recorded: RecordedRun, tmp_path: Path) -> None:
    """check --allow-skipped evaluates a run with corrupt lines instead of refusing it."""
    target, log = _copy(recorded, tmp_path)
    log.write_text("garbage\n" + log.read_text())
    done = cli("check", str(target), "--max-recompiles", "10", "--allow-skipped")
    assert done.returncode == 0 and "warning" in done.stderr and "1 corrupt line(s)" in done.stderr


def test_usage_errors_exit_2(recorded: RecordedRun) -> None:
    """Missing arguments, unknown options, unknown categories and rule-less checks exit 2."""
    assert cli("report").returncode == 2
    assert cli("report", str(recorded.run_dir), "--bogus").returncode == 2
    assert cli("check", str(recorded.run_dir)).returncode == 2
    unknown = cli("check", str(recorded.run_dir), "--forbid", "sizes")
    assert unknown.returncode == 2 and "unknown category sizes" in unknown.stderr
    assert cli("check", str(recorded.run_dir), "--max-recompiles", "-1").returncode == 2
    assert cli("diff", str(recorded.run_dir)).returncode == 2


def test_html_write_failure_is_one_line(recorded: RecordedRun, tmp_path: Path) -> None:
    """An HTML path that cannot be written is a one-line error with exit 2."""
    done = cli(
        "report", str(recorded.run_dir), "--html", str(tmp_path / "no" / "such" / "dir" / "r.html")
    )
    assert done.returncode == 2 and "cannot write" in done.stderr and "Traceback" not in done.stderr


def test_piped_report_follows_columns_and_never_splits_header_words(recorded: RecordedRun) -> None:
    """Piped (not a terminal), the report is 120 wide, or $COLUMNS wide when set (never under 100), and its table
    headers wrap only between words."""
    for columns, width in ((None, 120), ("150", 150), ("60", 100)):
        done = cli("report", str(recorded.run_dir), **({"COLUMNS": columns} if columns else {}))
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert max(len(line) for line in lines) == width, (columns, done.stdout)
        words = {w for line in lines for w in line.split()}
        for header in (
            "Compiles",
            "Recompiles",
            "Steady-state",
            "Recompile",
            "steps",
            "Failures",
            "Category",
            "Subject",
            "Changes",
            "Example",
        ):
            assert header in words, (columns, header, done.stdout)
