"""Real runs recorded for the CLI tests: the CPU workload under ``attach()`` and ``TORCH_TRACE`` at once.

RECOMPPROF_RUN_DIR=<dir>/run TORCH_TRACE=<dir>/trace python tests/workloads/train_recompiles.py --steps 12
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
WORKLOAD = TESTS / "workloads" / "train_recompiles.py"


@dataclasses.dataclass(frozen=True)
class RecordedRun:
    run_dir: Path  # recompprof event logs
    trace_dir: Path  # TORCH_TRACE logs of the same process


def clean_env(**extra: str) -> dict[str, str]:
    """The environment with no RECOMPPROF_* or TORCH_TRACE leaking in, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RECOMPPROF_") and k not in ("TORCH_TRACE", "TORCH_LOGS")
    }
    env.update(extra)
    return env


def record(where: Path, *args: str, trace: bool = True) -> RecordedRun:
    """Run the workload once with both recorders on; raise with its output if it fails."""
    run_dir, trace_dir = where / "run", where / "trace"
    env = clean_env(
        RECOMPPROF_RUN_DIR=str(run_dir), **({"TORCH_TRACE": str(trace_dir)} if trace else {})
    )
    proc = subprocess.run(
        [sys.executable, str(WORKLOAD), "--backend", "eager", *args],
        env=env,
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return RecordedRun(run_dir, trace_dir)


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
