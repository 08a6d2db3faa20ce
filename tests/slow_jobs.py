"""Jobs stopped in the middle of a slow recompile (``workloads/slow_compile.py``): the run a stalled rank leaves."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from recompprof._model.events import CompileStart


def recompile_start(run: Path, logs: str = "*.jsonl") -> CompileStart | None:
    """The ``compile_start`` of the slow recompile (compile id 0/1) once a log in ``run`` has it, else None."""
    for path in run.glob(logs):
        for line in path.read_text().splitlines():
            if '"compile_start"' in line and '"0/1"' in line:
                return CompileStart.model_validate_json(line)
    return None


def stop_during_recompile(
    proc: subprocess.Popen[str],
    run: Path,
    *,
    held: float,
    how: signal.Signals = signal.SIGTERM,
    logs: str = "*.jsonl",
    timeout: float = 120,
) -> CompileStart:
    """Send ``how`` to ``proc`` once its recompile has run ``held`` seconds, wait for it to end (killing it if it
    outlives that by a minute) and return the recompile's ``compile_start``. ``proc``'s output is left unread."""
    try:
        deadline = time.monotonic() + timeout
        while (start := recompile_start(run, logs)) is None:
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the recompile did not start"
            )
            time.sleep(0.05)
        time.sleep(held)
        proc.send_signal(how)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return start
