"""The offline commands at scale: ``report``, ``check`` and ``diff`` over a large multi-rank run, and
``ingest`` against tlparse on the same large TORCH_TRACE.

``generate`` writes a synthetic run directory (default 8 ranks x 125,000 events = 1,000,000 events)
with the real event models and the real reason parser (private: ``recompprof._model.reasons``) over reason
texts recorded from torch 2.13: hot
frames recompiling with 1-8 guard failures per compile (one explains the change), lazily compiled
backwards, guard failures without a compile, graph breaks, recompile-limit hits and failures. A second
run ("B") has the same shape with more recompiles, so ``diff`` finds regressions.

Every command runs as a real subprocess (``python -m recompprof._cli.main``, the recompprof this environment
imports, from a scratch directory); wall time, CPU time (user +
system) and that child's peak RSS (``ru_maxrss`` from ``wait4``) come from ``/usr/bin/time``. Two
baselines run interleaved with them in the same rounds: ``floor``, a child that only reads and
``json.loads`` every line of the same run (what a plain-Python reader costs before doing anything),
and ``report_validated``, ``build_report(read_run(...))``: the same fold over the pydantic-validated
reader, which is what ``report`` read through before the offline speed work (the CLI now folds msgspec
views: the fast reader in recompprof/_eventlog/). Ratios are printed against both, on wall and on CPU time.

The trace for ``ingest`` comes from a real program under ``TORCH_TRACE`` (``--trace-compiles``
recompiles of one frame, ``backend="eager"``); ``recompprof ingest`` and ``tlparse --no-browser`` run
on it interleaved, ``--rounds`` times.

    .venv/bin/python benchmarks/bench_scale.py --rounds 3            # 1M events, 2,000-compile trace
    .venv/bin/python benchmarks/bench_scale.py --rounds 3 --trace-compiles 0   # report/check/diff only
    .venv/bin/python benchmarks/bench_scale.py --ranks 2 --per-rank 50000 --trace-compiles 300   # quick

Targets: report and check <= 10 s, diff of two such runs <= 20 s, peak RSS <= 100 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REASON_FIXTURE, REPO

TLPARSE = Path(sys.executable).parent / "tlparse"
PHASES = (
    "dynamo_trace",
    "aot_autograd",
    "inductor_lowering",
    "code_gen",
    "kernel_compile",
    "other",
)


# -- the synthetic run ------------------------------------------------------------------------------


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
                entries[frame.label] = (
                    0  # as after a restart or torch._dynamo.reset(): the frame compiles afresh
                )
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


# -- measuring children ------------------------------------------------------------------------------


def measure(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float, int, float]:
    """``(wall seconds, peak RSS MB, exit code, CPU seconds)`` of one child, as ``/usr/bin/time`` reports them.

    (``wait4`` on a child forked from this process would count the pages it shared with us before exec.)
    """
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M %x %U %S", *cmd],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
        text=True,
        cwd=cwd,
        env=env,
    )
    lines = proc.stderr.strip().splitlines()
    wall, rss_kb, code, user, system = lines[-1].split()[-5:]
    if int(code) not in (0, 1):
        print(
            f"  ! {' '.join(cmd[:6])} exited {code}: {' '.join(lines[-5:-1])[-400:]}",
            file=sys.stderr,
        )
    return float(wall), int(rss_kb) / 1024, int(code), float(user) + float(system)


VALIDATED = """
import sys
from pathlib import Path
from recompprof._eventlog.reader import ReadStats, read_run
from recompprof._analysis.report.fold import build_report
from recompprof._analysis.text import render_text
stats = ReadStats()
print(render_text(build_report(read_run(Path(sys.argv[1]), stats))))
print(stats.describe(), file=sys.stderr)
"""


FOLD_CHILD = """
import sys, time
from pathlib import Path
from recompprof._eventlog.reader import ReadStats, scan_file
from recompprof._analysis.report.fold import build_report
path = sorted(Path(sys.argv[1]).glob("*.jsonl"))[0]
t = time.thread_time(); events = list(scan_file(path, ReadStats())); scan = time.thread_time() - t
t = time.thread_time(); build_report(events); fold = time.thread_time() - t
print(scan, fold)
"""


def fold_ab(run_dir: Path, ref: str, rounds: int, where: Path) -> None:
    """In-process CPU time (``thread_time``) of reading and of folding one rank's events, this checkout
    against the ``recompprof`` package of git ``ref``, in alternating child processes."""
    base = where / "fold-baseline"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", ref, "recompprof"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    trees = {"current": REPO, ref: base}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for r in range(rounds):
        for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:
            env = {**os.environ, "PYTHONPATH": str(trees[name])}
            out = subprocess.run(
                [sys.executable, "-c", FOLD_CHILD, str(run_dir)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=where,
            ).stdout.split()
            times[name].append((float(out[0]), float(out[1])))
    print(
        f"\nin process, one rank ({run_dir.name}, first log), CPU seconds (thread_time), {rounds} interleaved rounds:"
    )
    for name, samples in times.items():
        scan, fold = (
            statistics.median(s[0] for s in samples),
            statistics.median(s[1] for s in samples),
        )
        print(
            f"  {name:12} read {scan:.3f} s  fold {fold:.3f} s  (fold {[round(s[1], 3) for s in samples]})"
        )
    ratios = [c[1] / b[1] for c, b in zip(times["current"], times[ref], strict=True)]
    print(
        f"  fold current / {ref}: median {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] per round"
    )


def _floor(run_dir: str) -> None:
    for path in sorted(Path(run_dir).glob("*.jsonl")):
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)


def summary(
    name: str,
    samples: list[tuple[float, float, int, float]],
    size_mb: float | None = None,
    events: int | None = None,
) -> str:
    walls, rss, cpu = [s[0] for s in samples], [s[1] for s in samples], [s[3] for s in samples]
    wall = statistics.median(walls)
    extra = ""
    if size_mb:
        extra += f"  {size_mb / wall:8.1f} MB/s"
    if events:
        extra += f"  {events / wall:10.0f} events/s"
    return (
        f"{name:26} wall {wall:7.2f} s [{min(walls):.2f}-{max(walls):.2f}]  cpu {statistics.median(cpu):7.2f} s  "
        f"peak RSS {statistics.median(rss):7.1f} MB "
        f"[{min(rss):.0f}-{max(rss):.0f}]  exit {sorted({s[2] for s in samples})}{extra}"
    )


# -- the trace -----------------------------------------------------------------------------------

TRACE_PROGRAM = """
import sys, torch
torch._dynamo.config.recompile_limit = 10**6
torch._dynamo.config.accumulated_recompile_limit = 10**6
def f(x, k):
    return (x * k).relu() + k
g = torch.compile(f, backend="eager", dynamic=False)
x = torch.randn(4)
for k in range(int(sys.argv[1])):
    g(x, k)
"""


def make_trace(where: Path, compiles: int) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOMPPROF_")}
    env["TORCH_TRACE"] = str(where)
    subprocess.run(
        [sys.executable, "-c", TRACE_PROGRAM, str(compiles)],
        env=env,
        check=True,
        capture_output=True,
    )
    (trace,) = where.glob("dedicated_log_torch_trace*.log")
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--per-rank", type=int, default=125_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--trace-compiles", type=int, default=2000, help="0 skips the ingest comparison"
    )
    parser.add_argument(
        "--commands",
        default="floor,report_validated,report,check,diff",
        help="comma list of what to time",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="generate into (or reuse) this directory instead of a temporary one",
    )
    parser.add_argument(
        "--fold-ab",
        metavar="GIT_REF",
        help="also time the fold in process, and report/check/diff "
        "(as NAME@GIT_REF, interleaved), against this git ref's recompprof",
    )
    parser.add_argument("--floor-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        _floor(args.floor_child)
        return
    tmp = Path(tempfile.mkdtemp(prefix="recompprof-scale-")) if args.keep is None else args.keep
    try:
        run_a, run_b = tmp / "run-a", tmp / "run-b"
        events = args.ranks * args.per_rank
        if not (run_a.exists() and run_b.exists()):
            t0 = time.perf_counter()
            size = generate(run_a, args.ranks, args.per_rank, seed=1) + generate(
                run_b, args.ranks, args.per_rank, seed=2, worse=True
            )
            print(
                f"generated 2 runs of {args.ranks} ranks x {args.per_rank} events ({size / 2**20:.0f} MB) in "
                f"{time.perf_counter() - t0:.0f} s",
                file=sys.stderr,
            )
        size_mb = sum(p.stat().st_size for p in run_a.glob("*.jsonl")) / 2**20
        print(
            f"run: {args.ranks} ranks x {args.per_rank} = {events} events, {size_mb:.0f} MB per run"
        )
        cli = [sys.executable, "-m", "recompprof._cli.main"]
        commands = {
            "floor": [sys.executable, __file__, "--floor-child", str(run_a)],
            "report": [*cli, "report", str(run_a)],
            "check": [
                *cli,
                "check",
                str(run_a),
                "--max-recompiles",
                "100",
                "--forbid",
                "dtype",
                "--max-limit-hits",
                "10",
            ],
            "diff": [*cli, "diff", str(run_a), str(run_b)],  # reads both runs: twice the events
            # The same fold over the validated reader (pydantic models): the read path before the speed work.
            "report_validated": [sys.executable, "-c", VALIDATED, str(run_a)],
        }
        if args.fold_ab:
            fold_ab(run_a, args.fold_ab, max(args.rounds, 2), tmp)
        chosen = [c for c in args.commands.split(",") if c]
        envs: dict[str, dict[str, str]] = {}
        if args.fold_ab:
            base_env = {**os.environ, "PYTHONPATH": str(tmp / "fold-baseline")}
            imported = subprocess.run(
                [sys.executable, "-c", "import recompprof; print(recompprof.__file__)"],
                env=base_env,
                cwd=tmp / "fold-baseline",
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            assert imported.startswith(str(tmp / "fold-baseline")), (
                f"the baseline imports {imported}"
            )
            for name in [c for c in chosen if c in ("report", "check", "diff")]:
                commands[f"{name}@{args.fold_ab}"] = commands[name]
                envs[f"{name}@{args.fold_ab}"] = {
                    **os.environ,
                    "PYTHONPATH": str(tmp / "fold-baseline"),
                }
                chosen.insert(chosen.index(name) + 1, f"{name}@{args.fold_ab}")
        results: dict[str, list[tuple[float, float, int, float]]] = {c: [] for c in chosen}
        for r in range(args.rounds):
            order = chosen[r % len(chosen) :] + chosen[: r % len(chosen)]
            for name in order:
                # Each command runs where no recompprof lies: ``python -m`` puts the working directory before
                # PYTHONPATH on sys.path, so from a checkout it would import that checkout's recompprof.
                where = tmp / "fold-baseline" if name in envs else tmp
                results[name].append(measure(commands[name], cwd=where, env=envs.get(name)))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        for name in chosen:
            per = 2 if name.startswith("diff") else 1
            print(summary(name, results[name], size_mb * per, events * per))

        def med(name: str, i: int) -> float:
            return statistics.median(s[i] for s in results[name])

        if args.fold_ab:
            for name in ("report", "check", "diff"):
                if name in results:
                    ref = f"{name}@{args.fold_ab}"
                    print(
                        f"{name:26} / {ref}: wall {med(name, 0) / med(ref, 0):.2f}x  cpu {med(name, 3) / med(ref, 3):.2f}x  "
                        f"peak RSS {med(name, 1):.1f} / {med(ref, 1):.1f} MB"
                    )
        for base, what in (("floor", "json.loads only"), ("report_validated", "validated reader")):
            if base not in results:
                continue
            for name in chosen:
                if name not in ("floor", base):
                    per = (
                        2 if name.startswith("diff") else 1
                    )  # diff reads both runs: compared per million events
                    print(
                        f"{name:26} / {base} ({what}): wall {med(name, 0) / per / med(base, 0):.2f}x  "
                        f"cpu {med(name, 3) / per / med(base, 3):.2f}x"
                        + ("  (per run read)" if per == 2 else "")
                    )
        if args.trace_compiles:
            trace_dir = tmp / "trace"
            if not trace_dir.exists():
                t0 = time.perf_counter()
                make_trace(trace_dir, args.trace_compiles)
                print(
                    f"recorded a TORCH_TRACE of {args.trace_compiles} compiles in {time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                )
            (trace,) = trace_dir.glob("dedicated_log_torch_trace*.log")
            trace_mb = trace.stat().st_size / 2**20
            variants = {
                "recompprof ingest": [
                    *cli,
                    "ingest",
                    str(trace_dir),
                    "-o",
                    str(tmp / "ingested"),
                    "--overwrite",
                ],
                "tlparse --no-browser": [
                    str(TLPARSE),
                    "--no-browser",
                    "--overwrite",
                    "-o",
                    str(tmp / "tlparse"),
                    str(trace),
                ],
            }
            timings: dict[str, list[tuple[float, float, int, float]]] = {v: [] for v in variants}
            for r in range(args.rounds):
                for name in list(variants) if r % 2 == 0 else list(variants)[::-1]:
                    timings[name].append(measure(variants[name], cwd=tmp))
            records = sum(
                1 for line in trace.open(errors="replace") if "compilation_metrics" in line
            )
            print(f"\ntrace: {trace_mb:.1f} MB, {records} compilation_metrics records")
            for name, samples in timings.items():
                print(summary(name, samples, trace_mb, records))
            ours = statistics.median(s[0] for s in timings["recompprof ingest"])
            theirs = statistics.median(s[0] for s in timings["tlparse --no-browser"])
            print(f"ingest time / tlparse time: {ours / theirs:.2f}x")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
