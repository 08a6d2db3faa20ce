"""Real runs recorded for the CLI tests: the CPU workload under ``attach()`` and ``TORCH_TRACE`` at once.

RECOMPPROF_RUN_DIR=<dir>/run TORCH_TRACE=<dir>/trace python tests/workloads/train_recompiles.py --steps 12

Each distinct run is recorded once per test session and copied to the test that asks (``recordings.py``).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from recordings import Workload, clean_env, copy_into, record_one

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
WORKLOAD = TESTS / "workloads" / "train_recompiles.py"


@dataclasses.dataclass(frozen=True)
class RecordedRun:
    run_dir: Path  # recompprof event logs
    trace_dir: Path  # TORCH_TRACE logs of the same process


def record(where: Path, *args: str, trace: bool = True, **env: str) -> RecordedRun:
    """The workload run once with both recorders on (``trace=False``: no ``TORCH_TRACE``) and ``env``
    added, recorded once per test session; a copy in ``where``. Fails with its output if it failed."""
    recorders = [("RECOMPPROF_RUN_DIR", "{here}/run")]
    if trace:
        recorders.append(("TORCH_TRACE", "{here}/trace"))
    workload = Workload(
        WORKLOAD, ("--backend", "eager", *args), (*recorders, *sorted(env.items())), timeout=300
    )
    run = record_one(workload)
    assert run.returncode == 0, run.failure(workload)
    copy = copy_into(run, where)
    return RecordedRun(copy.run_dir, copy.trace_dir)


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the real ``recompprof`` command (as ``python -m recompprof._cli.main``)."""
    return subprocess.run(
        [sys.executable, "-m", "recompprof._cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(**env),
        timeout=timeout,
    )
