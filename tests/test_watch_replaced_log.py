"""``recompprof watch`` over a log that is copied in rsync-style (written to a temporary file, then renamed
over the log): a copy holding what was read continues where reading was, anything else is read again from
its start and said, and the counts are always those ``watch --once`` and ``report`` give."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from needs import starts
from report_counts import report_counts

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"
PYTHONPATH = os.pathsep.join([str(REPO), str(REPO / "exporters")])
WATCH = [sys.executable, "-m", "recompprof._cli.main", "watch"]
ENV = {**os.environ, "PYTHONPATH": PYTHONPATH}
RSYNC = shutil.which("rsync")


@pytest.fixture(scope="module")
@starts("workload")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The event log of a real job that compiles, recompiles and hits its recompile limit, then ends."""
    run = tmp_path_factory.mktemp("source") / "run"
    done = subprocess.run(
        [
            sys.executable,
            str(WORKLOADS / "train_until_told.py"),
            "--steps",
            "10",
            "--backend",
            "eager",
            "--recompile-steps",
            "8",
            "--recompile-limit",
            "6",
        ],
        env={**ENV, "RECOMPPROF_RUN_DIR": str(run), "RECOMPPROF_RUN_ID": "synced"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [log] = run.glob("rank*.jsonl")
    return log.read_bytes()


def _prefixes(data: bytes, parts: int) -> list[bytes]:
    """``parts`` growing prefixes of ``data``, each ending after a different ``compile`` line (the last is all of it)."""
    ends = [match.end() for match in re.finditer(rb'[^\n]*"kind":\s*"compile"[^\n]*\n', data)]
    assert len(ends) >= parts, "the job compiled too little"
    step = len(ends) // parts
    return [data[: ends[step * (i + 1) - 1]] for i in range(parts - 1)] + [data]


def _rename_over(log: Path, data: bytes) -> None:
    """What ``cp`` to a temporary file and ``mv`` do: the log's path gets a new file (a new inode)."""
    temporary = log.with_name(f".{log.name}.tmp")
    temporary.write_bytes(data)
    os.rename(temporary, log)


def _rsync(source: Path, log: Path, data: bytes) -> None:
    """A real ``rsync`` of the job's log (its default: a temporary file renamed over the destination)."""
    source.write_bytes(data)
    subprocess.run([RSYNC, "-t", str(source), str(log)], check=True, timeout=60)  # type: ignore[list-item]


def _rows(block: str) -> dict[int, list[int]]:
    """Each rank's compiles, recompiles, steady-state recompiles and limit hits, as a watch block shows them."""
    return {
        int(line.split()[0]): [int(n) for n in line.split()[2:6]]
        for line in block.splitlines()
        if re.match(r"^\s+\d+\s+\d+\s+\d+\s", line)
    }


def _once(tmp: Path, name: str, data: bytes) -> dict[int, list[int]]:
    """What ``watch --once`` counts in a run directory holding ``data`` as its one log."""
    run = tmp / f"once-{len(data)}"
    run.mkdir()
    (run / name).write_bytes(data)
    done = subprocess.run(
        [*WATCH, str(run), "--once"], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return _rows(done.stdout)


def _report_compiles(tmp: Path, name: str, data: bytes) -> tuple[int, int, int]:
    """What ``recompprof report`` counts in a run directory holding ``data`` as its log ``name``."""
    run = tmp / "report"
    run.mkdir()
    (run / name).write_bytes(data)
    return report_counts(run)


def _next_block(stream: Any) -> str:
    """The next block a piped watch prints, up to the line after its table's rows."""
    seen, table = "", False
    while line := stream.readline():
        seen += line
        if table and not _rows(line):
            return seen
        table = table or line.lstrip().startswith("─")
    raise AssertionError(f"watch stopped printing:\n{seen}")


def _first_counts(stream: Any) -> str:
    """The first block a piped watch prints with a rank's counts."""
    while not _rows(block := _next_block(stream)):
        pass
    return block


def _watched(run: Path, *options: str) -> subprocess.Popen[str]:
    """A piped watch of ``run``, killed after 180 s (its output then ends: no read waits forever)."""
    proc = subprocess.Popen(
        [*WATCH, str(run), "--interval", "0.1", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    deadline = threading.Timer(180, proc.kill)
    deadline.daemon = True
    deadline.start()
    return proc


def _rest(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    assert proc.stdout is not None and proc.stderr is not None
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        rest, err = proc.stdout.read(), proc.stderr.read()
        proc.wait()
    finally:
        timer.cancel()
    return rest, err


def _sync_and_see(
    proc: subprocess.Popen[str], sync: Any, data: bytes, previous: dict[int, list[int]]
) -> str:
    """Sync ``data`` over the watched log, then read blocks until watch shows other counts than before."""
    assert proc.stdout is not None
    sync(data)
    while True:
        block = _next_block(proc.stdout)
        if _rows(block) != previous:
            return block


@pytest.mark.skipif(RSYNC is None, reason="rsync is not installed")
def test_three_rsync_style_syncs_are_counted_once(real_log: bytes, tmp_path: Path) -> None:
    """A log synced four times as the job goes on (a first copy, then a rename over it and two real ``rsync``
    runs, each a new inode) is read on from where watch was: after every sync its counts equal
    ``watch --once`` of the log as it then is, at the end ``report``'s, and nothing is said to be re-read."""
    name = "rank00000-4242.jsonl"
    run, source = tmp_path / "run", tmp_path / "job"
    run.mkdir()
    source.mkdir()
    log = run / name
    parts = _prefixes(real_log, 4)
    _rename_over(log, parts[0])
    watch = _watched(run)
    try:
        assert watch.stdout is not None
        seen = [_first_counts(watch.stdout)]
        syncs = [
            lambda data: _rename_over(log, data),
            lambda data: _rsync(source / name, log, data),
            lambda data: _rsync(source / name, log, data),
        ]
        for sync, data in zip(syncs[:2], parts[1:3], strict=True):
            seen.append(_sync_and_see(watch, sync, data, _rows(seen[-1])))
        syncs[2](parts[3])  # the whole log: watch ends by itself at its session_end
        rest, err = _rest(watch, 60)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    shown = [_rows(block) for block in seen] + [_rows(rest)]
    expected = [_once(tmp_path, name, data) for data in parts]
    print("watch after each sync:", shown, "watch --once:", expected)
    assert shown == expected
    compiles, recompiles, limit_hits = _report_compiles(tmp_path, name, real_log)
    final = shown[-1][0]
    assert (final[0], final[1], final[3]) == (compiles, recompiles, limit_hits)
    assert compiles >= 6 and limit_hits > 0
    assert "read again" not in "".join(seen) + rest and err == ""


def test_another_log_renamed_over_is_read_again_and_said(real_log: bytes, tmp_path: Path) -> None:
    """A log replaced by a different one (another job's session start) or by a shorter one (truncated) is read
    again from its start, the view says so, and the counts are those of the log now there, not a sum."""
    name = "rank00000-4242.jsonl"
    run = tmp_path / "run"
    run.mkdir()
    log = run / name
    parts = _prefixes(real_log, 2)
    other = real_log.replace(b'"synced"', b'"another"')  # same events, another run: a new log
    assert other != real_log
    _rename_over(log, parts[0])
    watch = _watched(run, "--follow")
    try:
        assert watch.stdout is not None
        first = _first_counts(watch.stdout)
        second = _sync_and_see(watch, lambda data: _rename_over(log, data), other, _rows(first))
        assert "read again" not in first
        assert f"{name} replaced by a different file; read again from its start" in second
        truncated = _sync_and_see(
            watch, lambda data: _rename_over(log, data), parts[0], _rows(second)
        )
    finally:
        watch.kill()
        watch.communicate()
    assert _rows(second) == _once(tmp_path, name, other)
    assert _rows(truncated) == _once(tmp_path, name, parts[0]) == _rows(first)


def test_a_log_truncated_in_place_is_read_again_and_said(real_log: bytes, tmp_path: Path) -> None:
    """The run tail reads a log cut in place (same file, fewer bytes) again from its start and names it;
    a copy of what it read, renamed over it with a line still unfinished, goes on with that line."""
    from recompprof._eventlog.tail import TRUNCATED, RunTail

    name = "rank00000-4242.jsonl"
    log = tmp_path / name
    half = _prefixes(real_log, 2)[0]
    log.write_bytes(half + real_log[len(half) : len(half) + 7])  # a line begun, not ended
    tail = RunTail(tmp_path)
    first = [e.kind for _, e in tail.poll()]
    _rename_over(log, real_log)
    rest = [e.kind for _, e in tail.poll()]
    assert first + rest == [e.kind for _, e in RunTail(tmp_path).poll()]
    assert tail.restarted == {} and tail.stats.corrupt == 0
    with open(log, "r+b") as handle:
        handle.truncate(len(half))
    again = [e.kind for _, e in tail.poll()]
    assert again == first and tail.restarted == {log: TRUNCATED} and tail.restarts == 1
