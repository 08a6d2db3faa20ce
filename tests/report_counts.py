"""The counts ``recompprof report`` prints in its header, read back by tests that hold other views to them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "exporters")])}
HEADER = re.compile(r"compiles (\d+)(?: \(\+\d+ bwd\))? \| recompiles (\d+) \| limit hits (\d+)")


def report_counts(run: Path, *options: str) -> tuple[int, int, int]:
    """Compiles, recompiles and limit hits of ``recompprof report RUN OPTIONS``, as its header says them."""
    done = subprocess.run(
        [sys.executable, "-m", "recompprof._cli.main", "report", str(run), *options],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    header = " ".join(done.stdout.split())  # the header line wraps at the terminal's width
    found = HEADER.search(header)
    assert found, done.stdout
    return int(found.group(1)), int(found.group(2)), int(found.group(3))
