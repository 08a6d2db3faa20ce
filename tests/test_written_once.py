"""Rules that were written several times and disagreed, now written once: each test pins where they disagreed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from recompprof._eventlog.lines import MAX_LINE
from recompprof._eventlog.reader import ReadStats, read_file
from recompprof._eventlog.tail import RunTail
from recompprof._model import counting
from recompprof._model.events import Compile, Frame, Reason
from recompprof.integrations._common import Tracker

FRAME = Frame(name="forward", file="/job/model.py", line=10)
FIRST = Reason(
    text="___check_obj_id(L['self'].mode, 1)", category="object_identity", subject="L['self'].mode"
)
EXPLAINING = Reason(
    text="tensor 'x' size mismatch at index 0. expected 2, actual 3",
    category="size",
    subject="L['x']",
    explains_change=True,
)


def _steady(outcome: str) -> Compile:
    return Compile(
        time=1.0,
        step=5,
        frame=FRAME,
        compile_id="0/3",
        is_recompile=True,
        outcome=outcome,
        steady_state=True,
        reasons=[FIRST, EXPLAINING],
    )


def test_integrations_flag_steady_state_recompiles_by_the_counting_rule() -> None:
    """A limit hit in steady state is no steady-state recompile for the integrations (as for counting), and a
    steady-state recompile is quoted by its explaining reason."""
    tracker = Tracker({}, True, logging.getLogger("recompprof.test"))
    hit, recompile = _steady("limit_hit"), _steady("ok")
    tracker._on_event(hit)
    assert tracker.failure is None
    assert not counting.steady_state_recompile(hit)
    tracker._on_event(recompile)
    assert counting.steady_state_recompile(recompile)
    assert tracker.failure is not None
    assert EXPLAINING.text in tracker.failure and FIRST.text not in tracker.failure


@pytest.mark.parametrize(
    "content",
    [
        b"x" * MAX_LINE,  # an oversized last line, never ended
        b'{"a": 1}\n' + b"x" * (MAX_LINE + 5),
        b"x" * MAX_LINE + b"\n" + b"y" * 10,  # an oversized line, then a short torn one
        b"x" * (MAX_LINE - 1) + b"\n",  # just under the limit: an ordinary corrupt line
    ],
    ids=["oversized-tail", "after-a-line", "oversized-then-torn", "under-the-limit"],
)
def test_reader_and_tail_split_lines_alike(tmp_path: Path, content: bytes) -> None:
    """The file reader and the run tail split a log into the same lines, and give an oversized line the same verdict."""
    log = tmp_path / "rank00000-1.jsonl"
    log.write_bytes(content)
    read = ReadStats()
    assert list(read_file(log, read)) == []
    tail = RunTail(tmp_path)
    assert [*tail.poll(), *tail.finish()] == []
    assert (tail.stats.lines, tail.stats.corrupt, tail.stats.torn_tail) == (
        read.lines,
        read.corrupt,
        read.torn_tail,
    )
