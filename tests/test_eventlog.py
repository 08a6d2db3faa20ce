"""The event log: one flushed JSONL line per event, and a reader that survives torn and foreign lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from recompprof._eventlog import writer as eventlog
from recompprof._eventlog.reader import EventLogError, ReadStats, read_file, read_run, run_files
from recompprof._eventlog.writer import EventLogWriter, write_events
from recompprof._model.events import SCHEMA_VERSION, Compile, Frame, SessionStart


def _start(rank: int = 0) -> SessionStart:
    return SessionStart(
        time=1.0,
        rank=rank,
        run_id="r1",
        host="h",
        pid=1,
        versions={"torch": "2.13"},
        mode="monitor",
        recompile_limit=8,
    )


def _compile(i: int) -> Compile:
    return Compile(
        time=2.0 + i,
        step=i,
        frame=Frame(name="f", file="/x/f.py", line=3),
        compile_id=f"0/{i}",
        is_recompile=i > 0,
        duration=0.1,
    )


def test_every_line_has_schema_version_and_kind(tmp_path: Path) -> None:
    """Each written line is one JSON object carrying schema_version and kind."""
    path = tmp_path / "rank00000-1.jsonl"
    write_events(path, [_start(), _compile(0), _compile(1)])
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    for line in lines:
        data = json.loads(line)
        assert data["schema_version"] == SCHEMA_VERSION and data["kind"] in {
            "session_start",
            "compile",
        }


def test_reader_skips_torn_last_line_and_says_so(tmp_path: Path) -> None:
    """A half-written last line is skipped and counted as torn; every complete event is read."""
    path = tmp_path / "rank00000-1.jsonl"
    write_events(path, [_start(), _compile(0), _compile(1)])
    full = path.read_bytes()
    path.write_bytes(full + full.splitlines()[-1][:25])
    stats = ReadStats()
    events = list(read_file(path, stats))
    assert len(events) == 3 and stats.torn_tail == 1 and stats.corrupt == 0
    assert "1 torn last line" in stats.describe()


def test_reader_skips_corrupt_unknown_schema_and_foreign_lines(tmp_path: Path) -> None:
    """Corrupt JSON, non-UTF-8 bytes, unknown schema versions and unknown kinds are skipped and counted, not fatal."""
    path = tmp_path / "rank00000-1.jsonl"
    write_events(path, [_start(), _compile(0)])
    with open(path, "ab") as f:
        f.write(b"{not json\n")
        f.write(b"\xff\xfe\x00garbage\n")
        f.write(json.dumps({"schema_version": 99, "kind": "compile"}).encode() + b"\n")
        f.write(json.dumps({"schema_version": 1, "kind": "mystery"}).encode() + b"\n")
        f.write(b"[1, 2]\n")
    write_events(tmp_path / "rank00000-1.jsonl.tmp", [])
    stats = ReadStats()
    events = list(read_file(path, stats))
    assert [e.kind for e in events] == ["session_start", "compile"]
    assert (stats.corrupt, stats.unknown_schema, stats.unknown_kind) == (3, 1, 1)


def test_run_directory_reads_every_rank_and_ignores_foreign_files(tmp_path: Path) -> None:
    """A run directory yields the events of every rank's log; other files are not read."""
    write_events(tmp_path / "rank00000-1.jsonl", [_start(0), _compile(0)])
    write_events(tmp_path / "rank00001-2.jsonl", [_start(1), _compile(0)])
    (tmp_path / "notes.txt").write_text("not an event log")
    assert {e.rank for e in read_run(tmp_path)} == {0, 1}
    assert len(run_files(tmp_path)) == 2


@pytest.mark.parametrize("kind", ["missing", "empty", "unreadable"])
def test_bad_paths_raise_a_clear_error(kind: str, tmp_path: Path) -> None:
    """A missing path, an empty directory or an unreadable directory raise EventLogError naming the path."""
    target = tmp_path / "run"
    if kind != "missing":
        target.mkdir()
    if kind == "unreadable":
        write_events(target / "rank00000-1.jsonl", [_start()])
        target.chmod(0)
        if os.access(target, os.R_OK):  # root ignores permissions
            target.chmod(0o755)
            pytest.skip("running as root: directory permissions are not enforced")
    try:
        with pytest.raises(EventLogError, match=str(target)):
            list(read_run(target))
    finally:
        target.chmod(0o755) if target.exists() else None


@pytest.mark.workload
def test_sigkill_loses_at_most_the_event_being_written(tmp_path: Path) -> None:
    """A process killed with SIGKILL mid-run leaves a log whose complete lines all read back."""
    script = textwrap.dedent(
        f"""
        import sys, torch, recompprof
        session = recompprof.attach(run_dir={str(tmp_path)!r})
        f = torch.compile(lambda x, n: x * n, backend="eager")
        for n in range(1, 6):
            f(torch.ones(n), 1.5 * n)
        print(session.event_log_path, flush=True)
        sys.stdin.readline()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    stats = ReadStats()
    events = list(read_file(path, stats))
    compiles = [e for e in events if isinstance(e, Compile)]
    assert events[0].kind == "session_start" and len(compiles) >= 2
    assert stats.corrupt == 0


def test_writer_notices_a_deleted_log_at_most_once_per_check_interval(tmp_path: Path) -> None:
    """A deleted log is noticed by the first check after the interval, not per event: one fstat per interval at most."""
    path = tmp_path / "rank00000-1.jsonl"
    writer = EventLogWriter(path)
    try:
        assert writer.reopen_if_deleted(max_age=0.3) is False  # the first check: the file is there
        path.unlink()
        writer.write(_compile(0))  # within the interval: not checked, lands in the deleted file
        assert writer.reopen_if_deleted(max_age=0.3) is False and not path.exists()
        time.sleep(0.35)
        assert writer.reopen_if_deleted(max_age=0.3) is True and path.exists()
        writer.write(_compile(1))
        assert writer.reopen_if_deleted(max_age=0.3) is False  # the new file is not deleted again
    finally:
        writer.close()
    assert [e.step for e in read_file(path)] == [1]


def test_writer_checks_once_a_second_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's call (no argument) checks at most every REOPEN_CHECK_SECONDS: 1,000 events cost one fstat."""
    calls = []
    real_fstat = os.fstat
    monkeypatch.setattr(eventlog.os, "fstat", lambda fd: calls.append(fd) or real_fstat(fd))
    writer = EventLogWriter(tmp_path / "rank00000-1.jsonl")
    start = time.monotonic()
    try:
        for i in range(1000):
            writer.reopen_if_deleted()
            writer.write(_compile(i))
    finally:
        writer.close()
    elapsed = time.monotonic() - start
    assert eventlog.REOPEN_CHECK_SECONDS == 1.0
    assert (
        1 <= len(calls) <= 1 + int(elapsed)
    )  # the first event checks, then one more per second the loop ran


def test_reasons_that_differ_only_by_their_parameter_read_as_written(tmp_path: Path) -> None:
    """The reader's interning of reasons keys on every field: a reason with a ``parameter`` and the same
    reason without one (or with another) each read back as written, in either order."""
    from recompprof._model.events import Reason

    plain = Reason(text="tensor 'x' size mismatch", category="size", subject="L['x']")
    named = plain.model_copy(update={"parameter": "L['input_ids']"})
    other = plain.model_copy(update={"parameter": "L['labels']"})
    compiles = [
        _compile(i).model_copy(update={"reasons": [reason]})
        for i, reason in enumerate([plain, named, other, plain])
    ]
    path = tmp_path / "rank00000-1.jsonl"
    write_events(path, compiles)
    read = [e.reasons[0].parameter for e in read_file(path) if isinstance(e, Compile)]
    assert read == [None, "L['input_ids']", "L['labels']", None]
