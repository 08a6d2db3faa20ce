"""Names and texts from an event log never reach the terminal as control characters.

A real compiled job records frame names, file paths, a guarded global, a graph-break message, a compile
failure and a run id that all carry a marker; the marker is then replaced in the log by text full of
terminal escape sequences, carriage returns, newlines, C1 controls and bidirectional overrides (what a
hostile or corrupted log could hold). ``report``, ``check`` and ``diff`` run as real subprocesses, piped
and on a pseudo-terminal with colour forced: their output holds no control byte but the newlines ending
their own lines, and shows the hostile characters as escapes.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import tty
from pathlib import Path

import pytest
from needs import starts
from recorded_runs import ROOT, clean_env

from recompprof._analysis.render.plaintext import console
from recompprof._model.escaping import escape

EVIL = "\x1b[2J\x1b]0;pwned\x07\x1b[31m\rFAKE\nFAKE LINE\u202eevil\u2066\x9b1m\x7f\x08\x00\t\u2028\x85end"
# What no output may hold: every C0 control but the newline, DEL, C1, bidirectional controls, line separators.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")

WORKLOAD = """
import torch

import recompprof

G_MARK = 1


def step(x):
    return x + G_MARK


def breaks(x):
    x = x + 1
    torch._dynamo.graph_break(msg="break_MARK")
    return x * 2


def fails(x):
    return x * 3


def failing_backend(gm, example_inputs):
    raise RuntimeError("fail_MARK")


# Real functions whose code carries the marker in its name and file: torch records them as it would any frame.
for fn in (step, breaks, fails):
    fn.__code__ = fn.__code__.replace(co_name=f"{fn.__name__}_MARK", co_filename=f"/tmp/file_MARK/{fn.__name__}.py")

torch._dynamo.config.suppress_errors = True
with recompprof.attach() as session:
    compiled = torch.compile(step, backend="eager")
    for value in (1, 2, 3):
        G_MARK = value
        compiled(torch.ones(3))
        session.step()
    torch.compile(breaks, backend="eager")(torch.ones(3))
    torch.compile(fails, backend=failing_backend)(torch.ones(3))
"""


@pytest.fixture(scope="module")
@starts("workload")
def hostile_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """Two run directories (rank 0 alone; ranks 0 and 1, rank 1 missing a recompile) whose logs hold EVIL in
    every name and text, under a directory whose own name holds control characters; and the clean log's text."""
    where = tmp_path_factory.mktemp("hostile")
    recorded = where / "recorded"
    script = where / "workload.py"
    script.write_text(WORKLOAD)
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=clean_env(RECOMPPROF_RUN_DIR=str(recorded), RECOMPPROF_RUN_ID="run_MARK"),
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [log] = recorded.glob("rank00000-*.jsonl")
    clean = log.read_text()
    for field in (
        "explanation",
        "fail_reason",
        "file",
        "name",
        "run_id",
        "subject",
        "text",
        "user_location",
    ):
        assert re.search(f'"{field}":"[^"]*MARK', clean), (
            f"the recorded log has no marker in {field}"
        )
    hostile = clean.replace("MARK", json.dumps(EVIL)[1:-1]).replace(
        '"host":"', '"host":"' + json.dumps(EVIL)[1:-1]
    )
    base = where / "runs \x1b[31m\rFAKE\nFAKE LINE"
    one, two = base / "one", base / "two"
    one.mkdir(parents=True)
    two.mkdir()
    (one / log.name).write_text(hostile)
    (two / log.name).write_text(hostile)
    lines = hostile.splitlines(keepends=True)
    last_recompile = max(i for i, line in enumerate(lines) if '"is_recompile":true' in line)
    rank1 = "".join(
        line.replace('"rank":0', '"rank":1') for i, line in enumerate(lines) if i != last_recompile
    )
    (two / log.name.replace("rank00000", "rank00001")).write_text(rank1)
    return one, two, clean


COMMANDS = {
    "report": lambda one, two: ["report", str(two), "--width", "160"],
    "report-one-rank": lambda one, two: ["report", str(one), "--width", "160"],
    "check": lambda one, two: [
        "check",
        str(two),
        "--max-recompiles",
        "0",
        "--max-graph-breaks",
        "0",
        "--max-failures",
        "0",
        "--forbid",
        "global",
        "--max-compile-seconds",
        "0",
        "--max-recompile-seconds",
        "0",
        "--accept-log-gaps",
    ],  # rank 1 lacks a recompile: a real gap
    "check-ok": lambda one, two: ["check", str(one), "--max-recompiles", "100"],
    "diff": lambda one, two: ["diff", str(one), str(two), "--width", "160"],
    "watch-once": lambda one, two: ["watch", str(two), "--once"],
    "watch-piped": lambda one, two: [
        "watch",
        str(two),
        "--interval",
        "0.1",
    ],  # stops: every rank has ended
}


def _raw(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in RAW.findall(text)})


def _forged(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("FAKE")]


@pytest.mark.parametrize("command", COMMANDS)
def test_piped_output_holds_no_control_characters(
    hostile_runs: tuple[Path, Path, str], command: str
) -> None:
    """Piped (no terminal, NO_COLOR), every command's stdout and stderr hold no control character but line-ending
    newlines, no line starts with text that followed a newline in the log, and the hostile text shows escaped."""
    one, two, _ = hostile_runs
    proc = subprocess.run(
        [sys.executable, "-m", "recompprof._cli.main", *COMMANDS[command](one, two)],
        env=clean_env(NO_COLOR="1"),
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    out, err = proc.stdout.decode(errors="strict"), proc.stderr.decode(errors="strict")
    assert proc.returncode in (0, 1), out + err
    assert not _raw(out), f"raw control characters on stdout: {_raw(out)}\n{out}"
    assert not _raw(err), f"raw control characters on stderr: {_raw(err)}\n{err}"
    assert not _forged(out + err)
    assert "\\x1b[31m\\rFAKE\\nFAKE" in out + err, out + err  # in EVIL and in the directory name


def test_output_on_a_forced_colour_terminal_holds_no_escape(
    hostile_runs: tuple[Path, Path, str],
) -> None:
    """On a real pseudo-terminal with FORCE_COLOR set, ``report`` writes no ESC byte at all (the reports use no
    colour, so any ESC would be the log's) and no other control character but newlines."""
    _, two, _ = hostile_runs
    master, slave = pty.openpty()
    tty.setraw(slave)  # no newline translation: the bytes seen are the bytes written
    proc = subprocess.Popen(
        [sys.executable, "-m", "recompprof._cli.main", "report", str(two)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=clean_env(FORCE_COLOR="1", TERM="xterm-256color", COLUMNS="160"),
    )
    chunks = _read_until_closed(master, slave)
    assert proc.wait(300) == 0
    text = b"".join(chunks).decode()
    assert "Frames" in text and "\\x1b[2J" in text, text
    assert b"\x1b" not in b"".join(chunks)
    assert not _raw(text), _raw(text)
    assert not _forged(text)


def test_a_clean_run_shows_no_escapes(hostile_runs: tuple[Path, Path, str], tmp_path: Path) -> None:
    """The report of the same run without hostile text shows no escape at all: line breaks come from the layout,
    never from a newline inside a printed text (which would show as ``\\n``)."""
    _, two, clean = hostile_runs
    run = tmp_path / "clean"
    run.mkdir()
    for log in two.glob("*.jsonl"):
        name = log.name
        text = (
            clean
            if name.startswith("rank00000")
            else log.read_text().replace(json.dumps(EVIL)[1:-1], "MARK")
        )
        (run / name).write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "recompprof._cli.main", "report", str(run), "--width", "160"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Fix these first" in proc.stdout and "DIVERGING" in proc.stdout, proc.stdout
    assert not re.search(r"\\[nrtx]|\\u[0-9a-f]{4}", proc.stdout), proc.stdout


def test_escape_shows_every_dangerous_character_and_keeps_the_rest() -> None:
    """``escape`` turns each C0/C1 control, DEL, lone surrogate, bidirectional and invisible formatting character
    into its Python escape and leaves printable text (accents, CJK, emoji, backslashes) alone; the console applies
    it to table cells too, so a hostile cell cannot break the table's lines."""
    dangerous = (
        [chr(c) for c in range(0x20)]
        + [chr(c) for c in range(0x7F, 0xA0)]
        + ["\ud800", "\udfff", "\u061c"]
        + [chr(c) for c in range(0x200B, 0x2010)]
        + [chr(c) for c in range(0x2028, 0x202F)]
        + [chr(c) for c in range(0x2060, 0x206A)]
        + ["\ufeff"]
    )
    for char in dangerous:
        shown = escape(f"a{char}b")
        assert (
            shown.isascii()
            and shown.isprintable()
            and shown.startswith("a\\")
            and shown.endswith("b")
        ), repr(char)
    assert escape("\x1b[2J\n\r\t") == "\\x1b[2J\\n\\r\\t"
    assert escape("\u202e") == "\\u202e"
    kept = "café 東京 🚀 C:\\path\\x.py [bold] :warning:"
    assert escape(kept) == kept

    from rich.table import Table

    con, out = console(80)
    table = Table("Frame")
    table.add_row("f\nFAKE ROW\x1b[2J")
    con.print(table)
    assert not _forged(out.getvalue()) and "\\nFAKE ROW\\x1b[2J" in out.getvalue()


HOSTILE_JOB = ROOT / "tests" / "workloads" / "hostile_names.py"
CLEAR = "\r\x1b[K"  # the status line's own redraw: carriage return, erase to the end of the line


@pytest.mark.workload
def test_the_long_compile_log_line_shows_a_hostile_name_escaped(tmp_path: Path) -> None:
    """Piped, the WARNING line a long compile logs from inside the job shows a function name and file full of
    terminal controls escaped as the offline commands show them, and stderr holds no control but newlines."""
    from workloads.hostile_names import EVIL as NAME

    proc = subprocess.run(
        [sys.executable, str(HOSTILE_JOB), "2.5"],
        capture_output=True,
        timeout=300,
        cwd=ROOT,
        env=clean_env(
            RECOMPPROF_RUN_DIR=str(tmp_path / "run"),
            RECOMPPROF_COMPILE_STATUS_AFTER="0.5",
            RECOMPPROF_COMPILE_STATUS_EVERY="1",
        ),
    )
    err = proc.stderr.decode(errors="strict")
    assert proc.returncode == 0, err
    lines = [line for line in err.split("\n") if "compiling `" in line]
    assert lines and all(
        line.startswith(f"recompprof: rank 0 compiling `{escape(NAME)}` (recompile: ")
        for line in lines
    ), err
    assert not _raw(err), f"raw control characters on stderr: {_raw(err)}\n{err!r}"


@pytest.mark.workload
def test_the_status_line_shows_a_hostile_name_escaped(tmp_path: Path) -> None:
    """On a real pseudo-terminal the status line a long compile draws shows the hostile name escaped: the only
    controls written are the line's own carriage return and erase-line, and newlines."""
    from workloads.hostile_names import EVIL as NAME

    master, slave = pty.openpty()
    tty.setraw(slave)  # no newline translation: the bytes seen are the bytes written
    proc = subprocess.Popen(
        [sys.executable, str(HOSTILE_JOB), "3"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=clean_env(RECOMPPROF_RUN_DIR=str(tmp_path / "run"), RECOMPPROF_STATUS_LINE="1"),
    )
    chunks = _read_until_closed(master, slave)
    text = b"".join(chunks).decode(errors="strict")
    assert proc.wait(300) == 0, text
    assert any(
        part.startswith(f"rank 0 compiling `{escape(NAME)}` (recompile: ")
        for part in text.split(CLEAR)
    ), repr(text)
    assert not _raw(text.replace(CLEAR, "")), (
        f"raw control characters on the terminal: {_raw(text)}\n{text!r}"
    )


def _read_until_closed(master: int, slave: int) -> list[bytes]:
    """Everything written to the pseudo-terminal until every writer has closed it; closes both ends."""
    os.close(slave)  # the child holds its own copy: EIO on the master then means the child is done
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return chunks
