"""``recompprof demo``: a real CPU training job that recompiles, serves metrics while it runs and ends with the report."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from recorded_runs import clean_env

from recompprof._eventlog.reader import read_run
from recompprof._model.events import Compile, SessionStart


def _demo(tmp_path: Path, *args: str, columns: str | None = "200") -> subprocess.Popen[str]:
    """The demo as a subprocess writing to a pipe, ``columns`` wide (None: no $COLUMNS, as in a CI log)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "recompprof._cli.main",
            "demo",
            "--steps",
            "12",
            "--port",
            "0",
            "--run-dir",
            str(tmp_path / "run"),
            *args,
        ],
        cwd=tmp_path,
        env=clean_env(**({"COLUMNS": columns} if columns else {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.workload
def test_demo_trains_serves_metrics_and_reports(tmp_path: Path) -> None:
    """The demo hits size, Python-float, train/eval and module-flag recompiles, serves them as metrics, and reports them."""
    pytest.importorskip("prometheus_client")
    began = time.monotonic()
    proc = _demo(tmp_path, "--hold", "30")
    assert proc.stdout is not None
    lines: list[str] = []
    scraped = ""
    for line in proc.stdout:
        lines.append(line)
        if "serving metrics on" in line:
            url = re.search(r"(http://127\.0\.0\.1:\d+/metrics)", line)
            assert url
            with urllib.request.urlopen(url.group(1), timeout=10) as response:
                scraped = response.read().decode()
            proc.terminate()  # the session's SIGTERM handler detaches and the job ends
    proc.wait(timeout=120)
    output = "".join(lines)
    assert time.monotonic() - began < 120
    assert re.search(
        r'torch_compile_recompiles_total\{[^}]*frame="TinyLM\.forward \(_cli/demo\.py:\d+\)"[^}]*\} [4-9]',
        scraped,
    ), scraped
    assert "torch_compile_guard_failures_total" in scraped
    events = list(read_run(tmp_path / "run"))
    explained = {
        r.category for e in events if isinstance(e, Compile) for r in e.reasons if r.explains_change
    }
    assert {"size", "python_constant", "grad_mode", "module_attribute"} <= explained, output
    assert "training" in output and "12/12" in output


@pytest.mark.workload
def test_demo_profile_mode_finishes_with_report_and_next_steps(tmp_path: Path) -> None:
    """--profile runs the same job in profile mode and ends with the report and the commands to run next,
    each on one line as it is to be pasted, though the output is a pipe (80 columns to rich)."""
    proc = _demo(tmp_path, "--profile", columns=None)
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, output
    (start,) = [e for e in read_run(tmp_path / "run") if isinstance(e, SessionStart)]
    assert start.mode == "profile"
    for text in (
        "recompprof report",
        "Why they recompiled",
        "grad_mode",
        "recompprof check",
        "--html",
        str(tmp_path / "run"),
    ):
        assert text in output, output
    assert re.search(r"demo finished in \d+\.\d s", output)
    run = tmp_path / "run"
    lines = output.splitlines()
    for command in (
        f"recompprof report {run}",
        f"recompprof report {run} --html recompprof-report.html",
        f"recompprof check {run} --max-recompiles 0 --after-step",
    ):
        assert any(command in line for line in lines), output


def test_demo_progress_line_names_the_compile_running_now() -> None:
    """The demo's progress line has a column naming the compile running now (rank, frame, what triggered
    the recompile, its age) while a recompile is held open, and is empty once the compile ends."""
    from held_compiles import held_compile
    from rich.console import Console
    from rich.progress import Progress

    from recompprof._cli.demo import _compiling_column

    with held_compile() as (session, backend, worker):
        assert backend.entered.wait(60)
        buffer = io.StringIO()
        with Progress(
            _compiling_column(session),
            console=Console(file=buffer, width=200, force_terminal=False),
        ) as bar:
            bar.add_task("training", total=10)
            bar.refresh()
            time.sleep(1.1)
            bar.refresh()
        drawn = buffer.getvalue()
        assert re.search(
            r"rank 0 compiling `Model\.forward` \(recompile: size of `L\['x'\]` dim 0 changed\), [1-9]\d* s",
            drawn,
        ), drawn
        backend.release.set()
        worker.join(60)
        assert not session.status().compiling
        assert _compiling_column(session).render(None).plain == ""
    session.detach()
