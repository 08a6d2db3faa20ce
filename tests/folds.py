"""Comparing folds: report figures as plain data, compared to the last bits, and random events of every
kind to fold (real event models, reasons from the real parser over the texts recorded from torch 2.13).

The merge tests cut these events into parts and check that the merge of the parts' reports is the
report of all of them; the tests of runs cut short compare a report with the one its whole run gives.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

from generated_runs import reason_pool

from recompprof._model.events import (
    Compile,
    Frame,
    GraphBreak,
    Reason,
    RecompileLimitHit,
    SessionEnd,
    SessionStart,
    SignalChange,
)
from recompprof._model.reasons import parse_guard_failure
from recompprof._model.subjects import argument_root

POOL = [
    reason for parsed in reason_pool() for reason in parsed
]  # every recorded torch 2.13 reason, parsed


def _as_live(reason: Reason) -> Reason:
    """A reason as live capture records it when a pass-through wrapper's ``**kwargs`` holds its subject: also
    named by the wrapped function's parameter (``Reason.parameter``; ingest has none)."""
    root = argument_root(reason.subject)
    if root is None or root[1] != "kwargs" or not isinstance(root[2], str):
        return reason
    return reason.model_copy(update={"parameter": f"{root[0]}L['{root[2]}']{root[3]}"})


POOL = [_as_live(reason) for reason in POOL]
# Two torch 2.13 texts that name torch's own remedy (tests/workloads/steady_cases.py records both): the
# 0/1 specialisation guard and a module int attribute's hint. A report keeps that remedy (CauseReport).
POOL += [
    reason
    for text in (
        "0/1: 2 <= L['x'].size()[0]  # return x * 2 + 1  # case_zero_one.py:6 in zero_one_fn (user code "
        "shown is first use of this value--the guard itself is not due user code but due to 0/1 "
        "specialization in the framework; to avoid specialization try "
        "torch._dynamo.decorators.mark_unbacked(tensor, dim))",
        "0/1: L['self'].layer_idx == 1  # if self.layer_idx % 2 == 1:  # case_instances_3.py:18 in forward "
        "(HINT: torch.compile considers integer attributes of the nn.Module to be static. If you are "
        "observing recompilation, you might want to make this integer dynamic using "
        "torch._dynamo.config.allow_unspec_int_on_nn_module = True, or convert this integer into a tensor.)",
    )
    for reason in parse_guard_failure(text)
]
FRAMES = [Frame(name=f"fn{i}", file=f"/job/m{i % 2}.py", line=10 * i) for i in range(4)]


def figures(value: Any) -> Any:
    """A report (or part of one) as plain data without what only the fold needs; floats as themselves."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: figures(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.metadata.get("fold_state")
        }
    if isinstance(value, dict):
        return {repr(k): figures(v) for k, v in value.items()}  # repr: keys of any type, order kept
    if isinstance(value, (list, tuple)):
        return [figures(v) for v in value]
    if isinstance(value, set):
        return sorted(map(repr, value))
    return value


def assert_same(a: Any, b: Any, where: str = "report") -> None:
    """Equal figures, dict order included; floats to the last bits a different order of adding may change."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key}]")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def random_events(rng: random.Random, n: int) -> list[Any]:
    """``n`` events of every kind over 3 ranks and 4 frames; seconds in eighths, so every sum is exact."""
    events: list[Any] = []
    step = 0
    for i in range(n):
        rank, frame, roll = rng.randrange(3), rng.choice(FRAMES), rng.random()
        step += rng.random() < 0.3
        common = {"time": 1.0 + i, "rank": rank, "step": step}
        if roll < 0.04:
            events.append(
                SessionStart(
                    **common,
                    run_id=f"run{rng.randrange(2)}",
                    host="h",
                    pid=rank,
                    versions={"torch": "2.13.0"},
                    mode=rng.choice(("monitor", "profile")),
                    recompile_limit=rng.choice((8, 4)),
                    warmup_steps=rng.randrange(3),
                    signals={"guard_failures": rng.random() < 0.5},
                )
            )
        elif roll < 0.07:
            events.append(
                SessionEnd(
                    **common,
                    totals={"wall_seconds": rng.randrange(100) / 8},
                    internal_errors={"e": 1},
                    signals_off=rng.choice(
                        ({}, {"guard_failures": f"off {i}"}, {"graph_breaks": "gone"})
                    ),
                )
            )
        elif roll < 0.09:
            events.append(
                SignalChange(
                    **common,
                    signal=rng.choice(("guard_failures", "graph_breaks")),
                    live=False,
                    reason=f"dark {i}",
                )
            )
        elif roll < 0.16:
            events.append(
                GraphBreak(
                    **common,
                    frame=frame if roll < 0.13 else None,
                    reason=rng.choice(("Unsupported: print", "x\ny", "")),
                    count=rng.randint(0, 3),
                )
            )
        elif roll < 0.2:
            events.append(
                RecompileLimitHit(
                    **common,
                    frame=frame,
                    limit="recompile_limit",
                    value=8,
                    last_reason=rng.choice(POOL),
                )
            )
        else:
            backward = rng.random() < 0.25
            reasons = (
                []
                if backward
                else [
                    r.model_copy(update={"explains_change": k == 0, "entry": f"0/{k}"})
                    for k, r in enumerate(rng.sample(POOL, rng.randint(0, 3)))
                ]
            )
            outcome = rng.choice(("ok", "ok", "ok", "failed", "limit_hit"))
            duration = rng.randrange(40) / 8
            events.append(
                Compile(
                    **common,
                    frame=frame,
                    compile_id=f"{FRAMES.index(frame)}/{rng.randrange(4)}",
                    is_recompile=bool(reasons),
                    reasons=reasons,
                    reasons_omitted={"size": 2} if rng.random() < 0.1 else {},
                    outcome=outcome,
                    fail_type="BackendCompilerFailed" if outcome == "failed" else None,
                    fail_reason="boom\nmore" if outcome == "failed" else None,
                    duration=duration,
                    phases={"dynamo_trace": duration / 2, "other": duration / 2},
                    backward=backward,
                    guard_set=rng.choice((None, "g1", "g2")),
                    steady_state=(verdict := rng.random()) < 0.5,
                    # one draw for both, so the rest of the stream is as before
                    steady_state_unknown="instance of L['self'].k" if verdict > 0.9 else None,
                    automatic_dynamic="dim 0 of L['x']" if reasons and rng.random() < 0.2 else None,
                    specialised="value of L['ls']" if reasons and rng.random() < 0.1 else None,
                    call_site=["train.py:3 in step"] if rng.random() < 0.5 else [],
                    cache_lookups={"fx_graph": {"hit": 1}} if rng.random() < 0.2 else {},
                    cache_seconds_saved=0.5 if rng.random() < 0.2 else None,
                    trace_seconds_by_function={f"f{rng.randrange(3)}": 0.125}
                    if rng.random() < 0.2
                    else {},
                    cudagraph_skip="cpu_device" if rng.random() < 0.05 else None,
                    cache_entries=rng.choice((None, 0, 1, 4)),
                )
            )
    return events
