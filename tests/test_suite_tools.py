"""The suite's own tools hold what docs/testing.md promises: a real run is recorded once per session and
keyed by everything that decides it, the markers say what a test starts (and a test that lies fails),
the quick tier leaves out what the markers name, and the time per file is reported.

The workloads here are tiny Python scripts without torch (a recording is any process), so these are
unit tests of the tools, not real runs; pytest itself runs in a subprocess where a test needs a session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import needs
import pytest
import recordings
from recordings import Workload

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recordings directory of its own for this test (the session's is restored afterwards)."""
    monkeypatch.setattr(recordings, "_root", None)
    monkeypatch.setattr(recordings, "_requests", None)
    root = tmp_path / "recordings"
    recordings.configure(root, keep=False, requests=tmp_path / "requests.log")
    return root


def _counting_script(tmp_path: Path, body: str = "") -> Path:
    """A script that appends a line to ``runs.txt`` beside it each time it runs, then does ``body``."""
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent("""
            import os, sys
            from pathlib import Path
            with open(Path(__file__).parent / "runs.txt", "a") as f:
                f.write(os.getcwd() + "\\n")
            Path("out.txt").write_text(os.environ.get("WHAT", "") + " " + " ".join(sys.argv[1:]))
        """)
        + textwrap.dedent(body)
    )
    return script


def _runs(script: Path) -> int:
    runs = script.parent / "runs.txt"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_a_workload_is_recorded_once_and_each_asker_gets_its_own_copy(
    cache: Path, tmp_path: Path
) -> None:
    """Asked for three times (once in a batch with another), a workload runs once; each copy holds its
    output, changing one copy leaves the recording and the other copies as they were, and the session's
    summary counts the runs recorded and the requests."""
    script = _counting_script(tmp_path)
    one = Workload(script, ("a",), (("WHAT", "x"),))
    other = Workload(script, ("b",))
    first = recordings.copy_into(recordings.record_one(one), tmp_path / "first")
    second, third = (
        recordings.copy_into(r, tmp_path / name)
        for r, name in zip(recordings.recorded([one, other]), ("second", "third"))
    )
    assert _runs(script) == 2  # one and other, each once
    assert (first.where / "out.txt").read_text() == "x a" == (second.where / "out.txt").read_text()
    assert (third.where / "out.txt").read_text() == " b"
    (first.where / "out.txt").write_text("changed")
    again = recordings.copy_into(recordings.record_one(one), tmp_path / "again")
    assert (again.where / "out.txt").read_text() == "x a" and _runs(script) == 2
    line = recordings.summary(tmp_path / "requests.log", cache)
    assert line is not None and line.startswith("recordings: 2 real run(s) recorded (")
    assert line.endswith("for 4 request(s) from tests; 2 distinct"), line


def test_the_key_changes_with_what_decides_the_run(tmp_path: Path) -> None:
    """Arguments, extra environment, time limit and the script's content each give another key; the same
    workload always gives the same key."""
    script = _counting_script(tmp_path)
    base = Workload(script, ("a",), (("WHAT", "x"),))
    variants = [
        Workload(script, ("b",), (("WHAT", "x"),)),
        Workload(script, ("a",), (("WHAT", "y"),)),
        Workload(script, ("a",), (("WHAT", "x"),), timeout=1),
    ]
    keys = {recordings.key(w) for w in variants}
    assert recordings.key(base) == recordings.key(Workload(script, ("a",), (("WHAT", "x"),)))
    assert len(keys) == 3 and recordings.key(base) not in keys
    before = recordings.key(base)
    script.write_text(script.read_text() + "\n# edited\n")
    assert recordings.key(base) != before


def test_a_failed_recording_is_made_once_and_every_asker_gets_its_output(
    cache: Path, tmp_path: Path
) -> None:
    """A workload that fails runs once in a session; each asker gets the failure, with the exit status and
    the end of its stderr."""
    script = _counting_script(tmp_path, 'sys.stderr.write("boom: no such model\\n"); sys.exit(3)\n')
    workload = Workload(script)
    failed = [recordings.record_one(workload) for _ in range(2)]
    assert _runs(script) == 1
    assert [r.returncode for r in failed] == [3, 3]
    assert "exited 3" in failed[1].failure(workload)
    assert "boom: no such model" in failed[1].failure(workload)


def test_a_kept_directory_is_reused_and_loses_recordings_of_other_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a kept directory, a second session reuses a recording whose key matches; a recording made by
    other code (another fingerprint) is removed when the directory is opened."""
    monkeypatch.setattr(recordings, "_root", None)
    monkeypatch.setattr(recordings, "_requests", None)
    kept = tmp_path / "kept"
    stale = kept / "0000000000-0123456789abcdef"
    stale.mkdir(parents=True)
    recordings.configure(kept, keep=True)
    assert not stale.exists()
    script = _counting_script(tmp_path)
    recordings.record_one(Workload(script))
    monkeypatch.setattr(recordings, "_SESSION", "a later session")
    recordings.configure(kept, keep=True)
    recordings.record_one(Workload(script))
    assert _runs(script) == 1


def test_clean_env_hands_a_job_none_of_the_test_process_recorders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's environment has no RECOMPPROF_*, TORCH_TRACE, TORCH_LOGS or terminal size of the test
    process, has no linger at detach, and takes what the test adds over all of it."""
    for name, value in (
        ("RECOMPPROF_MODE", "profile"),
        ("TORCH_LOGS", "+dynamo"),
        ("COLUMNS", "80"),
    ):
        monkeypatch.setenv(name, value)
    env = recordings.clean_env(TORCH_TRACE="/tmp/trace")
    assert not {"RECOMPPROF_MODE", "TORCH_LOGS", "COLUMNS", "LINES"} & env.keys()
    assert env["TORCH_TRACE"] == "/tmp/trace"
    assert env["RECOMPPROF_PROMETHEUS_LINGER_SECONDS"] == "0"
    assert (
        recordings.clean_env(RECOMPPROF_PROMETHEUS_LINGER_SECONDS="5")[
            "RECOMPPROF_PROMETHEUS_LINGER_SECONDS"
        ]
        == "5"
    )


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["/usr/bin/prometheus", "--config.file=x"], "servers"),
        (["prometheus-alertmanager"], "servers"),
        (["/usr/bin/chromium", "--headless"], "servers"),
        (["java", "-cp", "spark"], "servers"),
        ([sys.executable, "-m", "moto.server", "-p", "5000"], "servers"),
        (["torchrun", "--standalone", "job.py"], "workload"),
        ([sys.executable, "-c", "import torch\nprint(1)"], "workload"),
        ([sys.executable, "-c", "import json, torch, recompprof"], "workload"),
        ([sys.executable, "-c", "import os; from torch import nn"], "workload"),
        ([sys.executable, "-m", "recompprof._cli.main", "run", "--", "python", "x.py"], "workload"),
        (["recompprof", "demo"], "workload"),
        ([sys.executable, str(TESTS / "workloads" / "train_recompiles.py")], "workload"),
        ([sys.executable, "-c", "import recompprof, sys; print('torch' in sys.modules)"], None),
        ([sys.executable, "-m", "recompprof._cli.main", "report", "run"], None),
        (["recompprof", "ingest", "trace"], None),
        ([sys.executable, str(TESTS.parent / "scripts" / "compat_table.py")], None),
        (
            [
                sys.executable,
                "/v/lib/python3.11/site-packages/torch/_inductor/compile_worker/__main__.py",
            ],
            None,
        ),
        (["tmux", "-S", "sock", "new-session"], None),
        (["openssl", "req"], None),
        ("rsync -a src/ dst/", None),
    ],
)
def test_what_a_command_line_starts(argv: list[str] | str, kind: str | None) -> None:
    """Server binaries are servers; torchrun, recompprof run/demo and Python that imports torch are
    workloads; recompprof's offline commands, import probes, torch's own compile-worker pool and other
    tools are neither."""
    assert needs.kind_of(argv) == kind


_SUITE = """
import subprocess, sys
import pytest
from needs import starts

@pytest.fixture(scope="module")
@starts("workload")
def job():
    subprocess.run([sys.executable, "-c", "import torch"], check=True)

def test_unmarked_job():
    subprocess.run([sys.executable, "-c", "import torch"], check=True)

@pytest.mark.workload
def test_marked_job():
    subprocess.run([sys.executable, "-c", "import torch"], check=True)

def test_through_a_declared_fixture(job):
    pass

def test_cheap_probe():
    subprocess.run([sys.executable, "-c", "import json"], check=True)
"""


def _pytest(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on ``where``'s test files with this suite's conftest (its checks and options): the
    generated suite, and a module of one cheap test whose name sorts first."""
    (where / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (where / "test_generated.py").write_text(_SUITE)
    (where / "test_a_light.py").write_text("def test_light():\n    pass\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args, str(where)],
        capture_output=True,
        text=True,
        cwd=where,
        env=env,
        timeout=300,
    )


@pytest.mark.workload  # the generated tests start Python processes that import torch
def test_a_test_that_starts_a_job_without_its_marker_fails(tmp_path: Path) -> None:
    """Starting a job without the workload marker fails the test with a line naming the command; the
    marker, or a fixture declared with ``starts``, makes the same test pass; a cheap probe needs none."""
    done = _pytest(tmp_path)
    results = {
        line.split()[1].split("::")[1]: line.split()[0]
        for line in done.stdout.splitlines()
        if line.startswith(("PASSED", "FAILED"))
    }
    assert results == {
        "test_light": "PASSED",
        "test_unmarked_job": "FAILED",
        "test_marked_job": "PASSED",
        "test_through_a_declared_fixture": "PASSED",
        "test_cheap_probe": "PASSED",
    }, done.stdout + done.stderr
    assert "this test starts a workload (python -c import torch) but is not marked" in done.stdout


def test_the_quick_tier_leaves_out_what_the_markers_name(tmp_path: Path) -> None:
    """With --quick, the tests marked (or given by a fixture) workload are deselected; the others run."""
    done = _pytest(tmp_path, "--quick", "--collect-only")
    collected = {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}
    assert collected == {"test_light", "test_unmarked_job", "test_cheap_probe"}, done.stdout
    assert "2 deselected" in done.stdout


def test_modules_with_heavy_tests_run_first_each_in_one_piece(tmp_path: Path) -> None:
    """The module holding workload tests is collected before the one of cheap tests that sorts first,
    its own tests together and in the order written."""
    done = _pytest(tmp_path, "--collect-only")
    order = [line.strip() for line in done.stdout.splitlines() if "::" in line]
    assert order == [
        "test_generated.py::test_unmarked_job",
        "test_generated.py::test_marked_job",
        "test_generated.py::test_through_a_declared_fixture",
        "test_generated.py::test_cheap_probe",
        "test_a_light.py::test_light",
    ], done.stdout + done.stderr


@pytest.mark.workload  # the generated test starts a Python process that imports torch
def test_the_time_of_each_file_is_reported_wall_and_cpu(tmp_path: Path) -> None:
    """--timing-files prints each test file's wall and CPU seconds and its number of tests; the CPU
    counts the processes the test started (importing torch takes a good half second of it)."""
    done = _pytest(tmp_path, "--timing-files=5", "-k", "test_marked_job")
    lines = done.stdout.splitlines()
    header = lines.index(next(line for line in lines if "time per test file" in line))
    assert lines[header + 1].split() == ["wall", "s", "cpu", "s", "tests", "file"]
    wall, cpu, count, name = lines[header + 2].split()
    assert name == "test_generated.py" and count == "1", done.stdout
    assert float(wall) >= float(cpu) * 0.5 and float(cpu) >= 0.5, done.stdout
    assert lines[header + 3].endswith("all files (summed over workers)")


def test_the_quick_tier_runs_again_over_its_kept_recordings() -> None:
    """``scripts/test.sh --quick`` collects the suite when its recordings folder is already there (every
    run after the first): the folder is passed as the option's value, never taken for a test path."""
    (TESTS.parent / ".test-recordings").mkdir(exist_ok=True)
    done = subprocess.run(
        [str(TESTS.parent / "scripts" / "test.sh"), "--quick", "--collect-only", "-q"],
        capture_output=True,
        text=True,
        cwd=TESTS.parent,
        env={**os.environ, "RECOMPPROF_TEST_WORKERS": "0"},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "deselected" in done.stdout, done.stdout[-2000:]
