"""Scratch a killed command left in the temporary folder is removed by the next command
(``recompprof._history.scratch``): real processes, killed with SIGKILL, in a temporary folder of the
test's own (``TMPDIR``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("duckdb")  # the lake's reader

# Makes one scratch of each kind, writes into it, says where, and waits to be killed.
MAKES_SCRATCH = textwrap.dedent(
    """
    import sys, time
    from recompprof._history import scratch

    made = [scratch.folder(kind) for kind in ("spill", "compact", "held")]
    made.append(scratch.file("upload", ".parquet"))
    for path in made[:3]:
        open(path + "/part", "w").write("x" * 1000)
    print("\\n".join(made), flush=True)
    time.sleep(600)
    """
)


def _killed_with_scratch(env: dict[str, str]) -> list[Path]:
    """The scratch of a process made and then SIGKILLed (as a CI gate's timeout kills a command)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", MAKES_SCRATCH], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    made = [Path(proc.stdout.readline().strip()) for _ in range(4)]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return made


def _age(paths: list[Path], days: float) -> None:
    then = time.time() - days * 86400
    for path in paths:
        os.utime(path, (then, then))


def test_scratch_of_a_killed_command_is_removed_by_the_next_and_nothing_else_is(
    tmp_path: Path,
) -> None:
    """A command killed outright leaves its spill, compaction, upload and link scratch; the next
    command to make scratch removes it once it is a day untouched, and leaves alone: a killed one's
    scratch touched within the day, a live process's however old, and anything not recompprof's."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    old, young = _killed_with_scratch(env), _killed_with_scratch(env)
    assert all(p.exists() for p in old + young) and (old[0] / "part").exists()
    _age(old, 2)
    alive = subprocess.Popen(
        [sys.executable, "-c", MAKES_SCRATCH], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert alive.stdout is not None
        live = [Path(alive.stdout.readline().strip()) for _ in range(4)]
        _age(live, 2)
        foreign = tmp_path / "recompprof-notes-1-x"
        foreign.mkdir()
        _age([foreign], 2)
        sweeper = "from recompprof._history import scratch; print(scratch.folder('spill'))"
        done = subprocess.run(
            [sys.executable, "-c", sweeper], env=env, capture_output=True, text=True, check=True
        )
        assert not any(p.exists() for p in old)
        assert all(p.exists() for p in young + live) and foreign.exists()
        assert Path(done.stdout.strip()).parent == tmp_path
    finally:
        alive.kill()
        alive.wait()
