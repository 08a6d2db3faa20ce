"""What remembering forwards for their backwards costs per compile (``CauseTracker.cause_of``), once
the tracker is full and while it is not.

The tracker keeps the newest ``MAX_REMEMBERED`` (4096) forward compile ids so a lazily compiled
backward is charged to its forward's cause. A run reaches that bound past 4096 distinct compile ids
per fold (a model of more than 512 frames at 8 attempts each, or a long profile-mode run). An earlier
full tracker forgot one id per compile by deleting a plain dict's first key:
CPython leaves a hole there, and finding the next first key walks every hole left since the dict was
last rebuilt, so each compile paid for thousands of them. The tracker now forgets the oldest quarter
in one rebuild.

Both are timed in the same run, interleaved, in CPU time of this thread: ``current`` (the tracker as
shipped) against ``baseline`` (the same tracker deleting one first key per compile, kept here as it
was). Two loads: ``full`` (every compile id distinct, so the tracker is full after 4096) and
``repeating`` (360 ids again and again, as a run of 45 frames x 8 attempts; it never fills).

It measures a private part: recompprof's cause tracker (``recompprof._model.causes``), imported as such.

    .venv/bin/python benchmarks/bench_cause_tracker.py            # ~20 s
    .venv/bin/python benchmarks/bench_cause_tracker.py --compiles 400000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from recompprof import Compile, Frame, Reason
from recompprof._model import counting
from recompprof._model.causes import _ABSENT, Cause, CauseTracker, _forward_cause


class FrontDeleting(CauseTracker):
    """The baseline: forgets one id per compile by deleting the plain dict's first key."""

    def cause_of(self, event: Compile, found: int | None = None) -> Cause | None:
        found = counting.verdict(event) if found is None else found
        if not found & counting.COSTS:
            return None
        key = (event.rank, event.compile_id)
        remembered = self._of_compile
        if event.backward:
            return remembered.get(key)
        cause = _forward_cause(event) if found & counting.RECOMPILE else None
        if remembered.pop(key, _ABSENT) is _ABSENT and len(remembered) >= self._max:
            del remembered[next(iter(remembered))]
        remembered[key] = cause
        return cause


def compiles(count: int, distinct: int | None) -> list[Compile]:
    """Forward recompiles of one frame; ids cycle through ``distinct`` values (None: all distinct)."""
    frame = Frame(name="forward", file="/job/model.py", line=10)
    reason = Reason(
        text="tensor 'x' size mismatch at index 0. expected 2, actual 3",
        category="size",
        subject="L['x']",
        explains_change=True,
    )
    return [
        Compile(
            time=1.0,
            frame=frame,
            compile_id=f"{i % distinct if distinct else i}/1",
            is_recompile=True,
            duration=0.1,
            reasons=[reason],
        )
        for i in range(count)
    ]


def per_compile_ns(tracker: CauseTracker, events: list[Compile]) -> float:
    cause_of = tracker.cause_of
    start = time.thread_time_ns()
    for event in events:
        cause_of(event)
    return (time.thread_time_ns() - start) / len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{args.compiles} forward compiles per round, {args.rounds} rounds, interleaved; ns per compile (thread CPU)"
    )
    for load, distinct in (("full", None), ("repeating", 360)):
        events = compiles(args.compiles, distinct)
        times: dict[str, list[float]] = {"current": [], "baseline": []}
        for r in range(args.rounds):
            order = (("current", CauseTracker), ("baseline", FrontDeleting))
            for name, tracker in order if r % 2 == 0 else order[::-1]:
                times[name].append(per_compile_ns(tracker(), events))
        current, baseline = (
            statistics.median(times["current"]),
            statistics.median(times["baseline"]),
        )
        print(
            f"{load:10} current {current:7.0f} ns  baseline {baseline:7.0f} ns  current/baseline {current / baseline:.2f}x"
            f"  (rounds: current {[round(t) for t in times['current']]}, baseline {[round(t) for t in times['baseline']]})"
        )


if __name__ == "__main__":
    main()
