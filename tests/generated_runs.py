"""Synthetic runs for the offline commands: event logs of many ranks built with the real event models
and the real reason parser over the guard-failure texts recorded from torch 2.13.

``generate`` writes hot frames recompiling with 1-8 guard failures per compile (one explains the
change), lazily compiled backwards, graph breaks, recompile-limit hits and failures; ``worse=True``
gives the same shape with more hot frames, so ``diff`` finds regressions. The tests fold these runs,
and ``benchmarks/bench_scale.py`` times ``report``, ``check`` and ``diff`` over them (it loads this
file with ``_common.load_test_helper``). recompprof is imported inside the functions, so loading the
file costs nothing until a run is generated.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

# Guard-failure texts recorded from torch 2.13 (the reason tests' fixture): real input for the parser.
REASON_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "reasons" / "torch-2.13.json"
# The compile phases a generated compile splits its time over.
PHASES = (
    "dynamo_trace",
    "aot_autograd",
    "inductor_lowering",
    "code_gen",
    "kernel_compile",
    "other",
)


def reason_pool() -> list[list[object]]:
    """Parsed reasons of every recorded torch 2.13 scenario (real texts, real parser)."""
    from recompprof._model.reasons import parse_guard_failure

    scenarios = json.loads(REASON_FIXTURE.read_text())["scenarios"]
    pool = [parse_guard_failure(text) for s in scenarios.values() for text in s["guard_failures"]]
    return [p for p in pool if p]


def generate(run_dir: Path, ranks: int, per_rank: int, seed: int, worse: bool = False) -> int:
    """Write ``ranks`` event logs of ``per_rank`` events each; returns the bytes written."""
    from recompprof._model.events import (
        Compile,
        Frame,
        GraphBreak,
        RecompileLimitHit,
        SessionEnd,
        SessionStart,
        to_json,
    )

    pool = reason_pool()
    frames = [
        Frame(name=f"block{i}_forward", file=f"/srv/job/model/layers_{i % 7}.py", line=10 + 17 * i)
        for i in range(40)
    ]
    hot = frames[:6] if not worse else frames[:9]
    run_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    for rank in range(ranks):
        rng = random.Random(seed * 1000 + rank)
        entries = {f.label: 0 for f in frames}
        ids = {f.label: i for i, f in enumerate(frames)}
        step, now = 0, 1.7e9
        lines = [
            to_json(
                SessionStart(
                    time=now,
                    rank=rank,
                    step=0,
                    run_id=f"scale-{seed}",
                    world_size=ranks,
                    host=f"node{rank // 8}",
                    pid=1000 + rank,
                    versions={"torch": "2.13.0"},
                    mode="monitor",
                    recompile_limit=8,
                )
            )
        ]
        for _ in range(per_rank - 2):
            if rng.random() < 0.3:
                step += 1
            now += 0.05
            frame = rng.choice(hot) if rng.random() < 0.8 else rng.choice(frames)
            n = entries[frame.label]
            cid = f"{ids[frame.label]}/{n}"
            roll = rng.random()
            if roll < 0.07:
                lines.append(
                    to_json(
                        GraphBreak(
                            time=now,
                            rank=rank,
                            step=step,
                            frame=frame,
                            compile_id=cid,
                            reason="Unsupported: call_function BuiltinVariable(print) [ConstantVariable(str)] {}",
                        )
                    )
                )
                continue
            if roll < 0.29:  # the lazily compiled backward of a recent compile
                duration = rng.uniform(0.05, 2.0)
                lines.append(
                    to_json(
                        Compile(
                            time=now,
                            rank=rank,
                            step=step,
                            frame=frame,
                            compile_id=cid,
                            is_recompile=False,
                            duration=duration,
                            phases={
                                "aot_autograd": duration * 0.3,
                                "inductor_lowering": duration * 0.7,
                            },
                            backward=True,
                            steady_state=True,
                        )
                    )
                )
                continue
            reasons = [
                r.model_copy(update={"entry": f"{ids[frame.label]}/{k}", "explains_change": k == 0})
                for k in range(min(n, 8))
                for r in rng.choice(pool)[:1]
            ]
            limit_hit = n >= 8
            failed = not limit_hit and rng.random() < 0.01
            duration = 0.0 if limit_hit else rng.uniform(0.05, 5.0)
            split = [rng.random() for _ in PHASES]
            phases = (
                {p: duration * s / sum(split) for p, s in zip(PHASES, split)} if duration else {}
            )
            event = Compile(
                time=now,
                rank=rank,
                step=step,
                frame=frame,
                compile_id=cid,
                is_recompile=n > 0,
                cache_entries=n,
                outcome="limit_hit" if limit_hit else ("failed" if failed else "ok"),
                fail_type="BackendCompilerFailed" if failed else None,
                fail_reason="backend='inductor' raised: LoweringException: ..." if failed else None,
                reasons=reasons,
                start_time=now - duration,
                duration=duration,
                phases=phases,
                guard_count=40 + n,
                graph_op_count=25,
                cache=rng.choice(("hit", "miss")),
                steady_state=step > 10,
            )
            lines.append(to_json(event))
            if limit_hit:
                lines.append(
                    to_json(
                        RecompileLimitHit(
                            time=now,
                            rank=rank,
                            step=step,
                            frame=frame,
                            compile_id=cid,
                            limit="recompile_limit",
                            value=8,
                            last_reason=reasons[0],
                        )
                    )
                )
                # as after a restart or torch._dynamo.reset(): the frame compiles afresh
                entries[frame.label] = 0
            else:
                entries[frame.label] = n + 1
        lines = lines[: per_rank - 1]
        lines.append(
            to_json(
                SessionEnd(time=now, rank=rank, step=step, totals={"wall_seconds": now - 1.7e9})
            )
        )
        body = "\n".join(lines) + "\n"
        (run_dir / f"rank{rank:05d}-{1000 + rank}.jsonl").write_text(body)
        written += len(body)
    return written
