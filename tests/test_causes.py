"""What a compile counts as (``counting.verdict``) and which cause its seconds are charged to."""

from __future__ import annotations

import itertools

import pytest

from recompprof._model import counting
from recompprof._model.causes import CauseTracker, forward_cause
from recompprof._model.events import Compile, Frame, Reason

FRAME = Frame(name="forward", file="/job/model.py", line=10)
SIZE = Reason(
    text="tensor 'x' size mismatch at index 0. expected 2, actual 3",
    category="size",
    subject="L['x']",
    explains_change=True,
)


def _compile(
    compile_id: str, *, recompile: bool = True, backward: bool = False, outcome: str = "ok"
) -> Compile:
    return Compile(
        time=1.0,
        frame=FRAME,
        compile_id=compile_id,
        is_recompile=recompile,
        backward=backward,
        outcome=outcome,
        duration=0.5,
        reasons=[SIZE] if recompile and not backward else [],
    )


@pytest.mark.parametrize(
    ("outcome", "backward", "recompile"),
    list(itertools.product(("ok", "failed", "limit_hit"), (False, True), (False, True))),
)
def test_verdict_bits_are_the_predicates(outcome: str, backward: bool, recompile: bool) -> None:
    """Each bit of the verdict is the predicate of the same name, for every kind of compile."""
    event = _compile("0/1", recompile=recompile, backward=backward, outcome=outcome)
    found = counting.verdict(event)
    limit_hit = outcome == "limit_hit"
    assert counting.is_limit_hit(event) is limit_hit is bool(found & counting.LIMIT_HIT)
    assert (
        counting.counts_as_compile(event)
        is (not backward and not limit_hit)
        is bool(found & counting.COUNTED)
    )
    assert counting.counts_as_recompile(event) is (not backward and not limit_hit and recompile)
    assert counting.counts_as_recompile(event) is bool(found & counting.RECOMPILE)
    assert counting.costs_seconds(event) is (not limit_hit) is bool(found & counting.COSTS)
    assert counting.recompile_attempt(event) is (not backward and (recompile or limit_hit))


def test_cause_of_with_or_without_the_callers_verdict_agree() -> None:
    """A caller that passes the verdict it has gets the cause the tracker would find alone."""
    alone, told = CauseTracker(), CauseTracker()
    events = [
        _compile("0/0", recompile=False),
        _compile("0/1"),
        _compile("0/1", backward=True),
        _compile("0/2", outcome="limit_hit"),
        _compile("0/0", recompile=False, backward=True),
    ]
    for event in events:
        assert alone.cause_of(event) == told.cause_of(event, counting.verdict(event))
    assert alone.cause_of(events[2]) == forward_cause(events[1]) == (FRAME, "size", "L['x']")


def test_tracker_forgets_the_oldest_forwards_in_bulk_and_stays_bounded() -> None:
    """Past its bound the tracker forgets the oldest quarter at once: a backward of a forgotten forward
    is charged to nothing, the newest three quarters are always remembered, and it never holds more."""
    tracker = CauseTracker(max_remembered=8)
    for i in range(8):
        tracker.cause_of(_compile(f"0/{i}"))
    assert all(tracker.remembers(_compile(f"0/{i}", backward=True)) for i in range(8))
    tracker.cause_of(_compile("0/8"))  # the ninth: 0/0 and 0/1 go
    remembered = [i for i in range(9) if tracker.remembers(_compile(f"0/{i}", backward=True))]
    assert remembered == list(range(2, 9))
    assert tracker.cause_of(_compile("0/0", backward=True)) is None
    assert tracker.cause_of(_compile("0/5", backward=True)) == (FRAME, "size", "L['x']")
    for i in range(9, 200):
        tracker.cause_of(_compile(f"0/{i}"))
        held = [k for k in range(i + 1) if tracker.remembers(_compile(f"0/{k}", backward=True))]
        assert 6 <= len(held) <= 8 and held == list(range(i + 1 - len(held), i + 1))


def test_a_forward_seen_again_becomes_the_newest() -> None:
    """Re-recording a compile id (a restarted process reusing it) moves it to the newest end."""
    tracker = CauseTracker(max_remembered=4)
    for i in range(4):
        tracker.cause_of(_compile(f"0/{i}"))
    tracker.cause_of(_compile("0/0"))  # known: nothing is forgotten, and 0/0 is now the newest
    tracker.cause_of(_compile("0/4"))  # full: the oldest (0/1) goes
    assert [i for i in range(5) if tracker.remembers(_compile(f"0/{i}", backward=True))] == [
        0,
        2,
        3,
        4,
    ]


def test_a_tracker_that_could_remember_nothing_is_refused() -> None:
    """A bound below one forward is a clear error naming the setting, not a tracker that ignores it."""
    with pytest.raises(ValueError, match="max_remembered must be at least 1"):
        CauseTracker(max_remembered=0)
