"""The offline commands at scale: ``report``, ``check`` and ``diff`` over a large multi-rank run, and
``ingest`` against tlparse on the same large TORCH_TRACE.

The run is the test suite's synthetic run (``tests/generated_runs.py``, loaded by
``_common.load_test_helper``; default 8 ranks x 125,000 events = 1,000,000 events), written with the
real event models and the real reason parser (private: ``recompprof._model.reasons``) over reason
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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, load_test_helper

TLPARSE = Path(sys.executable).parent / "tlparse"
REPORT_VS_FLOOR = 0.75  # target: report's wall time at most this share of the json.loads-only floor


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
from recompprof._analysis.render.text import render_text
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
    byte_compile(base)
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


def byte_compile(tree: Path) -> None:
    """Write the bytecode of ``tree``'s ``recompprof`` (and ``exporters``, if there), so that no timed
    command compiles its sources: with ``PYTHONDONTWRITEBYTECODE`` set, a tree without ``__pycache__``
    (a fresh ``git archive``) pays it in every run, about 0.3 s of CPU a command."""
    packages = [str(tree / name) for name in ("recompprof", "exporters") if (tree / name).is_dir()]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *packages], check=True, stdout=subprocess.DEVNULL
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
    parser.add_argument(
        "--trace",
        type=Path,
        metavar="DIR",
        help="ingest this TORCH_TRACE directory instead of recording one (--trace-compiles is then ignored)",
    )
    parser.add_argument(
        "--ingest-ab",
        metavar="GIT_REF",
        help="also time `recompprof ingest` of this git ref's tree (as ingest@GIT_REF), interleaved",
    )
    parser.add_argument("--floor-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        _floor(args.floor_child)
        return
    tmp = Path(tempfile.mkdtemp(prefix="recompprof-scale-")) if args.keep is None else args.keep
    byte_compile(REPO)
    try:
        if args.commands or args.fold_ab:
            offline(args, tmp)
        if args.trace_compiles or args.trace is not None:
            ingest_vs_tlparse(args, tmp)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def offline(args: argparse.Namespace, tmp: Path) -> None:
    """``report``, ``check`` and ``diff`` over the generated runs, against the floor and the validated reader."""
    run_a, run_b = tmp / "run-a", tmp / "run-b"
    events = args.ranks * args.per_rank
    if not (run_a.exists() and run_b.exists()):
        t0 = time.perf_counter()
        generate = load_test_helper("generated_runs").generate
        size = generate(run_a, args.ranks, args.per_rank, seed=1) + generate(
            run_b, args.ranks, args.per_rank, seed=2, worse=True
        )
        print(
            f"generated 2 runs of {args.ranks} ranks x {args.per_rank} events ({size / 2**20:.0f} MB) in "
            f"{time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
    size_mb = sum(p.stat().st_size for p in run_a.glob("*.jsonl")) / 2**20
    print(f"run: {args.ranks} ranks x {args.per_rank} = {events} events, {size_mb:.0f} MB per run")
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
        assert imported.startswith(str(tmp / "fold-baseline")), f"the baseline imports {imported}"
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
                # diff reads both runs: compared per million events
                per = 2 if name.startswith("diff") else 1
                print(
                    f"{name:26} / {base} ({what}): wall {med(name, 0) / per / med(base, 0):.2f}x  "
                    f"cpu {med(name, 3) / per / med(base, 3):.2f}x"
                    + ("  (per run read)" if per == 2 else "")
                )
    if "floor" in results and "report" in results:
        ratio = med("report", 0) / med("floor", 0)
        print(
            f"report / json.loads floor: wall {ratio:.2f}x; target <= {REPORT_VS_FLOOR}x: "
            f"{'met' if ratio <= REPORT_VS_FLOOR else 'NOT met'}"
        )


def ingest_vs_tlparse(args: argparse.Namespace, tmp: Path) -> None:
    """``recompprof ingest`` against ``tlparse --no-browser`` on one TORCH_TRACE, interleaved, with the targets:
    ingest's wall time <= 1.0x tlparse's and its peak RSS <= 1/5 of tlparse's."""
    cli = [sys.executable, "-m", "recompprof._cli.main"]
    trace_dir = tmp / "trace" if args.trace is None else args.trace
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
    envs: dict[str, dict[str, str]] = {}
    if args.ingest_ab:
        base = tmp / "ingest-baseline"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", args.ingest_ab, "recompprof"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        byte_compile(base)
        name = f"ingest@{args.ingest_ab}"
        variants[name] = [*variants["recompprof ingest"][:-2], str(tmp / "ingested-ab")]
        variants[name] += ["--overwrite"]
        envs[name] = {**os.environ, "PYTHONPATH": str(base)}
    timings: dict[str, list[tuple[float, float, int, float]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        order = list(variants)[r % len(variants) :] + list(variants)[: r % len(variants)]
        for name in order:
            # from a folder without a recompprof: see the note in offline()
            where = tmp / "ingest-baseline" if name in envs else tmp
            timings[name].append(measure(variants[name], cwd=where, env=envs.get(name)))
    records = sum(1 for line in trace.open(errors="replace") if "compilation_metrics" in line)
    print(f"\ntrace: {trace_mb:.1f} MB, {records} compilation_metrics records")
    for name, samples in timings.items():
        print(summary(name, samples, trace_mb, records))
    ours, theirs = timings["recompprof ingest"], timings["tlparse --no-browser"]
    # per round: the two ran back to back, so the ratio holds when the machine's speed drifts
    wall = [a[0] / b[0] for a, b in zip(ours, theirs)]
    cpu = [a[3] / b[3] for a, b in zip(ours, theirs)]
    rss = statistics.median(a[1] for a in ours) / statistics.median(b[1] for b in theirs)
    print(
        f"ingest time / tlparse time: {statistics.median(wall):.2f}x wall "
        f"[{min(wall):.2f}-{max(wall):.2f}], {statistics.median(cpu):.2f}x CPU "
        f"[{min(cpu):.2f}-{max(cpu):.2f}] (median of {len(wall)} rounds); target wall <= 1.0x: "
        f"{'met' if statistics.median(wall) <= 1.0 else 'NOT met'}"
    )
    print(
        f"ingest peak RSS / tlparse peak RSS: {rss:.3f} (1/{1 / rss:.1f}); target <= 1/5: "
        f"{'met' if rss <= 0.2 else 'NOT met'}"
    )
    for name in envs:
        ref = [a[0] / b[0] for a, b in zip(ours, timings[name])]
        print(
            f"recompprof ingest / {name}: wall {statistics.median(ref):.2f}x "
            f"[{min(ref):.2f}-{max(ref):.2f}], CPU "
            f"{statistics.median(a[3] / b[3] for a, b in zip(ours, timings[name])):.2f}x"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
