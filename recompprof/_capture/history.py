"""Export a session's event log to the history lake when the session ends (``history_uri``).

The export runs as ``recompprof export LOG --to URI --per-rank`` in a child process, so the job's
memory and threads are untouched, and the child is killed at the deadline (``history_timeout``): a
slow or unreachable lake costs the job's exit at most that long. Whatever goes wrong is counted as
an internal error (``history``) and logged once; the event log stays the source of truth, and
``recompprof export`` exports it later (docs/history.md, "Export at session end").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from recompprof import _internal


class HistoryExportFailed(RuntimeError):
    """The export at session end did not finish (its last line of output says why)."""


def export_at_end(log: Path, uri: str, timeout: float, redact: bool) -> None:
    """Export ``log`` to the lake at ``uri`` within ``timeout`` seconds; never raises."""
    hint = (
        f"the event log {log} was not exported to the history lake {uri} (setting history_uri / "
        f"RECOMPPROF_HISTORY_URI); it stays on disk: export it with `recompprof export`"
    )
    command = [sys.executable, "-m", "recompprof._cli.main", "export", str(log)]
    command += ["--to", uri, "--per-rank", *(["--redact"] if redact else [])]
    # The child must not attach itself (the start-up hook) nor pose as this rank.
    env = {key: value for key, value in os.environ.items() if key != "RECOMPPROF_ATTACH"}
    try:
        done = subprocess.run(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        _internal.record("history", exc, f"{hint} within {timeout:g} s (history_timeout)")
        return
    except (OSError, ValueError) as exc:
        _internal.record("history", exc, hint)
        return
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = lines[-1] if lines else f"exit status {done.returncode}"
        _internal.record("history", HistoryExportFailed(why), hint)
