"""Rules that were written several times and disagreed, now written once: each test pins where they disagreed."""

from __future__ import annotations

import logging

from recompprof._model import counting
from recompprof._model.events import Compile, Frame, Reason
from recompprof.integrations._common import Tracker

FRAME = Frame(name="forward", file="/job/model.py", line=10)
FIRST = Reason(text="___check_obj_id(L['self'].mode, 1)", category="object_identity", subject="L['self'].mode")
EXPLAINING = Reason(text="tensor 'x' size mismatch at index 0. expected 2, actual 3", category="size",
                    subject="L['x']", explains_change=True)


def _steady(outcome: str) -> Compile:
    return Compile(time=1.0, step=5, frame=FRAME, compile_id="0/3", is_recompile=True, outcome=outcome,
                   steady_state=True, reasons=[FIRST, EXPLAINING])


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
