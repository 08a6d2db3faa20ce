"""``recompprof history`` at scale: the canonical question set against ``report`` on one large run, and
on a synthetic fleet month compacted daily.

Two parts, each measured as real subprocesses (``/usr/bin/time``: wall, CPU = user + system, peak
RSS), so Python's start and every import count:

- ``run``: the test suite's synthetic run (``tests/generated_runs.py``; default 8 ranks x 125,000
  events = 1,000,000 events) exported with ``recompprof export``; then ``recompprof report RUN``
  against one process that opens the lake and asks every canonical question (the seven commands and
  the completeness count, as the CLI asks them). Target: the question set >= 50x faster than report.
- ``fleet``: a fleet month written straight as Parquet by ``tests/history_fleet.py`` (default 30 days
  x 60 runs x 8 ranks = 14,400 rank sessions, 300 compiles each = 4.32 M compiles, about 11 M guard
  failures), one raw file per table, run and day, then ``recompprof history compact`` through the last
  day; then one process asks every question, timing each. Targets: every question <= 2 s, the whole
  set (lake opened, views made, all asked) <= 5 s wall.

    .venv/bin/python benchmarks/bench_history.py run --rounds 3
    .venv/bin/python benchmarks/bench_history.py fleet --keep /tmp/fleet    # generated once, reused
    .venv/bin/python benchmarks/bench_history.py fleet --days 3             # quick
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

from _common import load_test_helper
from bench_scale import measure

# One process: open the lake, make the views, ask every canonical question; prints per-question wall.
ASK = """
import json, sys, time
start = time.perf_counter()
import datetime
from recompprof._history import engine, questions, views
import duckdb, pyarrow.parquet
imported = time.perf_counter() - start
lake = views.open_lake(sys.argv[1])
selection = views.select(lake)
duck = engine.Engine(lake, selection)
opened = time.perf_counter() - start
runs = duck.query("SELECT run_id, job FROM runs ORDER BY start_time DESC, run_id LIMIT 1").rows
run, job = runs[0]
params = questions.Params(since=datetime.date(1970, 1, 1), baseline=sys.argv[2],
                          candidate=sys.argv[3], run=run, job=job, last=50)
timings = {}
for name in questions.COMMANDS:
    t = time.perf_counter()
    answer = engine.ask(duck, name, params)
    timings[name] = [time.perf_counter() - t, sum(len(r.rows) for r in answer.results)]
print(json.dumps({"import_s": imported, "open_s": opened - imported, "total_s": time.perf_counter() - start,
                  "cpu_s": time.process_time(), "questions": timings,
                  "files": {t: len(c.good) for t, c in selection.tables.items()}}))
"""


def _ask(lake: Path, baseline: str, candidate: str) -> tuple[tuple[float, float, int, float], dict]:
    """One asking process, measured; and what it printed."""
    cmd = [sys.executable, "-c", ASK, str(lake), baseline, candidate]
    sample = measure(cmd)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return sample, json.loads(out.strip().splitlines()[-1])


def _load() -> str:
    """The machine's load average: on a shared machine wall times stretch with it (CPU does not)."""
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def _bytes(root: Path, suffix: str) -> int:
    return sum(p.stat().st_size for p in root.rglob(f"*{suffix}") if p.is_file())


def bench_run(args: argparse.Namespace) -> None:
    where = Path(tempfile.mkdtemp(prefix="bench-history-"))
    run = args.keep or where / "run"
    lake = args.lake or where / "lake"
    try:
        if not run.exists():
            generated = load_test_helper("generated_runs")
            generated.generate(run, ranks=args.ranks, per_rank=args.per_rank, seed=args.seed)
        if not lake.exists():
            exported = measure(
                [
                    sys.executable,
                    "-m",
                    "recompprof._cli.main",
                    "export",
                    str(run),
                    "--to",
                    str(lake),
                ]
            )
            print(
                f"run: {args.ranks} ranks x {args.per_rank:,} events; export wall {exported[0]:.1f} s, exit {exported[2]}"
            )
        report, asked, inside = [], [], []
        for _ in range(args.rounds):
            report.append(
                measure([sys.executable, "-m", "recompprof._cli.main", "report", str(run)])
            )
            sample, printed = _ask(lake, "2.13.0", "2.14.0")
            asked.append(sample)
            inside.append(printed)
        r_wall = statistics.median(s[0] for s in report)
        q_wall = statistics.median(s[0] for s in asked)
        print(
            f"report:        wall {r_wall:7.2f} s  cpu {statistics.median(s[3] for s in report):7.2f} s  peak RSS {max(s[1] for s in report):.0f} MB"
        )
        print(
            f"question set:  wall {q_wall:7.2f} s  cpu {statistics.median(s[3] for s in asked):7.2f} s  peak RSS {max(s[1] for s in asked):.0f} MB  (process start and imports included)"
        )
        total_inside = statistics.median(p["total_s"] for p in inside)
        print(
            f"question set inside its process (lake opened, views, every question): {total_inside:.3f} s"
        )
        for name in inside[0]["questions"]:
            each = statistics.median(p["questions"][name][0] for p in inside)
            print(f"  {name:12} {each:7.3f} s  rows {inside[0]['questions'][name][1]}")
        print(
            f"report / question set wall: {r_wall / q_wall:.1f}x (whole processes); {r_wall / total_inside:.1f}x (the set inside its process); target >= 50x"
        )
        r_cpu = statistics.median(s[3] for s in report)
        q_cpu = statistics.median(s[3] for s in asked)
        print(f"report / question set CPU: {r_cpu / q_cpu:.1f}x (whole processes); {_load()}")
    finally:
        shutil.rmtree(where, ignore_errors=True)


def bench_fleet(args: argparse.Namespace) -> None:
    fleet_mod = load_test_helper("history_fleet")
    where = Path(tempfile.mkdtemp(prefix="bench-history-fleet-"))
    lake = args.keep or where / "lake"
    try:
        if not lake.exists():
            fleet = fleet_mod.Fleet(
                days=args.days,
                runs_per_day=args.runs_per_day,
                ranks=args.ranks,
                compiles_per_session=args.compiles,
                reasons_per_recompile=5,
                recompile_share=0.7,
                jobs=40,
                upgrade_day=args.days // 2,
            )
            t = time.perf_counter()
            rows = fleet_mod.write_fleet(lake, fleet)
            print(f"generated in {time.perf_counter() - t:.0f} s: {json.dumps(rows)}")
            last = fleet.start.toordinal() + fleet.days - 1
            through = type(fleet.start).fromordinal(last).isoformat()
            t = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "recompprof._cli.main",
                    "history",
                    "compact",
                    "--lake",
                    str(lake),
                    "--through",
                    through,
                ],
                capture_output=True,
                text=True,
            )
            print(
                f"compacted in {time.perf_counter() - t:.0f} s: {done.stdout.strip()} {done.stderr.strip()}"
            )
        sessions = subprocess.run(
            [
                sys.executable,
                "-m",
                "recompprof._cli.main",
                "history",
                "sql",
                "--lake",
                str(lake),
                "--format",
                "json",
                "SELECT (SELECT COUNT(*) FROM runs) AS sessions, (SELECT COUNT(*) FROM compiles) AS compiles, "
                "(SELECT COUNT(*) FROM guard_failures) AS guard_failures",
            ],
            capture_output=True,
            text=True,
        )
        counts = json.loads(sessions.stdout)["results"][0]["rows"][0]
        print(
            f"fleet: {counts}; raw files {len(list((lake / 'v1').rglob('*.parquet')))} ({_bytes(lake / 'v1', '.parquet') / 1e6:.0f} MB), "
            f"daily files {len(list((lake / 'v1-daily').rglob('*.parquet')))} ({_bytes(lake / 'v1-daily', '.parquet') / 1e6:.0f} MB)"
        )
        samples, inside = [], []
        for _ in range(args.rounds):
            sample, printed = _ask(lake, "2.14.1", "2.15.0")
            samples.append(sample)
            inside.append(printed)
        print(
            f"question set process: wall {statistics.median(s[0] for s in samples):.2f} s  cpu {statistics.median(s[3] for s in samples):.2f} s  peak RSS {max(s[1] for s in samples):.0f} MB; {_load()}"
        )
        print(
            f"inside it: imports {statistics.median(p['import_s'] for p in inside):.3f} s; lake listed, "
            f"footers read, views made {statistics.median(p['open_s'] for p in inside):.3f} s; whole set "
            f"{statistics.median(p['total_s'] for p in inside):.3f} s with imports, "
            f"{statistics.median(p['total_s'] - p['import_s'] for p in inside):.3f} s without (target <= 5 s)"
        )
        worst = 0.0
        for name in inside[0]["questions"]:
            each = statistics.median(p["questions"][name][0] for p in inside)
            worst = max(worst, each)
            print(f"  {name:12} {each:7.3f} s  rows {inside[0]['questions'][name][1]}")
        print(f"slowest question {worst:.3f} s (target <= 2 s); {_load()}")
    finally:
        if args.keep is None:
            shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    p = sub.add_parser("run")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--per-rank", type=int, default=125_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", type=Path, help="generate the run here (reused when present)")
    p.add_argument("--lake", type=Path, help="export the run into this lake (kept)")
    p = sub.add_parser("fleet")
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--runs-per-day", type=int, default=60)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--compiles", type=int, default=300, help="compiles per rank session")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", type=Path, help="write the lake here (reused when present)")
    args = parser.parse_args()
    bench_run(args) if args.part == "run" else bench_fleet(args)


if __name__ == "__main__":
    main()
