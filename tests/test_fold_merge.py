"""Folding a run whole gives what merging the folds of its parts gives, for every figure of the report.

The figures are read off the report model (every dataclass field of the report and of the records it
holds, less what only the fold needs), so a figure added to the model is covered here without a word
changed: the property test compares it, and ``test_the_runs_exercise_every_figure`` fails until the
generated runs give it a value other than its default, so a family that folds a figure but forgets to
merge it (the merge would leave the default) fails the property test.

The runs: one session per rank, each an event-log file of real event models (reasons from the real
parser over texts recorded from torch 2.13), cut at file boundaries anywhere, as ``report`` folds a
large run in workers. Cuts inside a file are ``test_merging``'s (there the merge may decline).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from folds import FRAMES, POOL, assert_same, figures, random_events
from hypothesis import given, settings, strategies as st

from recompprof._analysis.render.text import render_text
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.report.merging import merge
from recompprof._analysis.report.model import Report
from recompprof._model.events import (
    Compile,
    CompileStart,
    Event,
    GraphBreak,
    Running,
    SessionEnd,
    SessionStart,
)

# Figures a mergeable part never holds: a part that dropped a frame past MAX_FRAMES makes the merge
# decline (test_merging's bound tests hold that).
NEVER_MERGED = {"Frames.dropped"}


def session_file(rng: random.Random, rank: int, n: int) -> list[Event]:
    """One rank's log: a session start (none on rank 5: a log started again after it was deleted), ``n``
    random events of every kind, and a session end (none on rank 1: the session was killed, during a
    compile; none on rank 4 either: killed with no compile known running, on a torch that marks no
    backward compile's start) whose totals count more compiles than the log holds on rank 2 (a gap), and which names the
    compile still running on rank 3."""
    start = SessionStart(
        time=0.5,
        rank=rank,
        run_id=f"run{rank % 2}",
        host="h",
        pid=rank,
        versions={"torch": "2.13.0"},
        mode="profile" if rank % 2 else "monitor",
        recompile_limit=8,
        warmup_steps=1 + rank % 3,
        profile_mechanism="evict" if rank % 2 else None,
        restart_count=rank % 2,  # some ranks on their second attempt
        signals=(
            {"torch_trace": True, "step_in_trace": True, "backward_compile_start": False}
            if rank == 4
            else {}
        ),
    )
    events: list[Event] = [start] if rank != 5 else []
    events += [
        e.model_copy(update={"rank": rank})
        for e in random_events(rng, n)
        if not isinstance(e, (SessionStart, SessionEnd))
    ]
    events.append(
        GraphBreak(
            time=1e5,
            rank=rank,
            step=1,
            frame=FRAMES[rank % 4],
            reason="Unsupported: print",
            user_location=f"/job/m.py:{rank}",
            hints=["use torch._dynamo.graph_break()"],
        )
    )
    trigger = POOL[0].model_copy(update={"explains_change": True})
    events.append(
        CompileStart(
            time=1e5 - 1,
            rank=rank,
            step=2,
            frame=FRAMES[rank % 4],
            compile_id="0/7",
            is_recompile=True,
            reason=trigger,
        )
    )
    events.append(
        Compile(
            time=1e5,
            rank=rank,
            step=2,
            frame=FRAMES[rank % 4],
            compile_id="0/7",
            is_recompile=True,
            reasons=[POOL[0].model_copy(update={"explains_change": True})],
            duration=0.5,
            automatic_dynamic="dim 0 of L['x']",
            call_site=["train.py:3 in step"],
            steady_state=True,
            cudagraph_skip="cpu_device",
            guard_set="g9",
        )
    )
    if rank in (1, 3):  # a compile that never finished
        events.append(
            CompileStart(
                time=2e5,
                rank=rank,
                step=2,
                frame=FRAMES[rank % 4],
                compile_id="0/8",
                is_recompile=True,
                reason=trigger,
            )
        )
    if rank not in (1, 4):
        totals = {"wall_seconds": 10.0 + rank, "compiles": 1e6 if rank == 2 else 0}
        compiling = (
            Running(
                frame=FRAMES[rank % 4], compile_id="0/8", started=2e5, seconds=8e5, reason=trigger
            )
            if rank == 3
            else None
        )
        events.append(
            SessionEnd(
                time=1e6,
                rank=rank,
                totals=totals,
                internal_errors={"e": 1},
                compiling=compiling,
                signals_off={"graph_breaks": f"gone on {rank}"} if rank % 2 == 0 else {},
            )
        )
    return events


def run_of(seed: int, files: int, per_file: int) -> list[list[Event]]:
    rng = random.Random(seed)
    return [session_file(rng, rank, per_file) for rank in range(files)]


def cut(run: list[list[Event]], cuts: list[int]) -> list[list[Event]]:
    """The run's files joined into consecutive parts, cut before the files at ``cuts``."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(run)}), len(run)]
    return [
        [e for events in run[a:b] for e in events] for a, b in zip(bounds, bounds[1:], strict=False)
    ]


def folded(events: list[Event]) -> Report:
    return build_report(events)  # figures only, as a worker hands it back


@given(
    seed=st.integers(0, 10**6),
    files=st.integers(1, 6),
    per_file=st.integers(0, 120),
    cuts=st.lists(st.integers(0, 6), max_size=5),
)
@settings(max_examples=80, deadline=None)
def test_merging_the_folds_of_any_split_gives_the_whole_fold(seed, files, per_file, cuts):
    """A run cut into parts at any file boundaries: the merge of the parts' reports never declines and
    has every figure of the report of the whole run (same values, same order, same text)."""
    run = run_of(seed, files, per_file)
    merged = merge([folded(part) for part in cut(run, cuts)])
    whole = build_report([e for events in run for e in events])
    assert merged is not None
    assert_same(figures(merged), figures(whole))
    assert render_text(merged) == render_text(whole)


def default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()  # type: ignore[misc]


def unexercised(report: Report) -> set[str]:
    """``Class.field`` of every figure (the report's, and those of the records it holds) that no
    instance in ``report`` holds a value other than its default of; fields without a default (a
    record's identity, given when it is made) are the merge's keys, not figures."""
    seen: dict[str, bool] = {}

    def walk(value: Any) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                if field.metadata.get("fold_state") or field.metadata.get("figure") is False:
                    continue
                item = getattr(value, field.name)
                if (
                    field.default is not dataclasses.MISSING
                    or field.default_factory is not dataclasses.MISSING
                ):
                    name = f"{type(value).__name__}.{field.name}"
                    seen[name] = seen.get(name, False) or item != default_of(field)
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(report)
    return {name for name, exercised in seen.items() if not exercised}


def test_the_runs_exercise_every_figure():
    """The generated runs give every figure of the report model a value other than its default, so a
    figure a merge leaves out (it stays at its default) makes the property test fail; a new figure
    fails here until the runs exercise it."""
    run = run_of(1, 6, 120)
    assert unexercised(build_report([e for events in run for e in events])) == NEVER_MERGED
