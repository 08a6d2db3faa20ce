"""``recompprof history`` at scale: one question and the whole question set as users run them (real
CLI processes), against ``report`` on one large run, and on a synthetic fleet month compacted daily.

Every figure is a real subprocess (``/usr/bin/time``: wall, CPU = user + system, peak RSS), so
Python's start and every import count; each ratio is of two commands measured side by side, round by
round, in one run of this script (docs/history.md, "Speed"). Targets:

- ``run``: the test suite's synthetic run (``tests/generated_runs.py``; default 8 ranks x 125,000
  events = 1,000,000 events) exported with ``recompprof export``. One question as users run it
  (``recompprof history top-causes --lake L``) <= 0.5 s wall; its start-up (the interpreter and every
  import the question needs, no data read) <= 0.25 s; ``recompprof history digest`` (every question,
  one process, one document) >= 30x less CPU than ``recompprof report RUN`` on the same run, on the
  lake as exported and on a copy compacted (``history compact``).
- ``fleet``: a fleet month written straight as Parquet by ``tests/history_fleet.py`` (default 30 days
  x 60 runs x 8 ranks = 14,400 rank sessions, 300 compiles each = 4.32 M compiles, about 11 M guard
  failures), one raw file per table, run and day, then ``recompprof history compact`` through the last
  day. ``history digest`` (the whole set) <= 2 s wall, and its regressions find the regression the
  generator injected (job1 recompiles far more often on torch 2.15.0).

Each part also prints the time of each question inside one process (lake opened, views made).

    .venv/bin/python benchmarks/bench_history.py run --rounds 3
    .venv/bin/python benchmarks/bench_history.py run --against ../main   # that checkout's digest too
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

CLI = [sys.executable, "-m", "recompprof._cli.main"]
# What a question pays before it reads any data: the interpreter, the CLI and every module the
# question imports (DuckDB, the history modules), nothing else.
START_UP = (
    "import recompprof._cli.main, recompprof._cli.history, recompprof._history.duck, "
    "recompprof._history.engine, recompprof._history.render; recompprof._history.duck.load()"
)

# One process: open the lake, make the views, ask every canonical question; prints per-question wall.
ASK = """
import json, sys, time
start = time.perf_counter()
import datetime
from recompprof._history import engine, questions, views
imported = time.perf_counter() - start
lake = views.reader(sys.argv[1])
selection = views.select(lake)
duck = engine.Engine(lake, selection, questions_only=True)
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


def _met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def _median(samples: list[tuple[float, float, int, float]], i: int) -> float:
    return statistics.median(s[i] for s in samples)


def _inside(inside: list[dict]) -> None:
    """Each question's time inside one process (lake opened, views made), the median of the rounds."""
    print(
        f"inside one process: imports {statistics.median(p['import_s'] for p in inside):.3f} s; "
        f"lake listed, footers read, views made {statistics.median(p['open_s'] for p in inside):.3f} s; "
        f"every question {statistics.median(p['total_s'] - p['import_s'] - p['open_s'] for p in inside):.3f} s"
    )
    for name in inside[0]["questions"]:
        each = statistics.median(p["questions"][name][0] for p in inside)
        print(f"  {name:12} {each:7.3f} s  rows {inside[0]['questions'][name][1]}")


def _tree_env(tree: Path) -> dict[str, str]:
    """The environment that runs ``tree``'s recompprof (another checkout: the code before a change).
    ``python -m`` puts the working directory first on the path, ahead of ``PYTHONPATH``: run from a
    checkout, the other tree's command would run this checkout's code (``PYTHONSAFEPATH`` keeps it
    off)."""
    return {**os.environ, "PYTHONPATH": f"{tree}:{tree}/exporters", "PYTHONSAFEPATH": "1"}


def bench_run(args: argparse.Namespace) -> None:
    where = Path(tempfile.mkdtemp(prefix="bench-history-"))
    run = args.keep or where / "run"
    lake = args.lake or where / "lake"
    against = args.against_lake or where / "against"
    try:
        if not run.exists():
            generated = load_test_helper("generated_runs")
            generated.generate(run, ranks=args.ranks, per_rank=args.per_rank, seed=args.seed)
        if not lake.exists():
            exported = measure([*CLI, "export", str(run), "--to", str(lake)])
            print(
                f"run: {args.ranks} ranks x {args.per_rank:,} events; export wall {exported[0]:.1f} s, exit {exported[2]}"
            )
        if args.against and not against.exists():
            exported = measure(
                [*CLI, "export", str(run), "--to", str(against)], env=_tree_env(args.against)
            )
            print(f"{args.against}: export CPU {exported[3]:.1f} s, exit {exported[2]}")
        # The same lake compacted (one file per table and day, large row groups), as `compact`
        # leaves a day three days after it closes.
        compacted = where / "compacted"
        shutil.copytree(lake, compacted)
        subprocess.run(
            [*CLI, "history", "compact", "--lake", str(compacted), "--through", "2100-01-01"],
            check=True,
            capture_output=True,
        )
        run_id = f"scale-{args.seed}"
        asked = [
            "--since", "1970-01-01", "--run", run_id,
            "--baseline", "torch=2.13.0", "--candidate", "torch=2.14.0",
        ]  # fmt: skip
        digest = [*CLI, "history", "digest", "--lake", str(lake), *asked]
        digest_compacted = [*CLI, "history", "digest", "--lake", str(compacted), *asked]
        question = [*CLI, "history", "top-causes", "--lake", str(lake), "--since", "1970-01-01"]
        digest_against = [*CLI, "history", "digest", "--lake", str(against), *asked]
        report, digested, on_compacted, one, started, inside = [], [], [], [], [], []
        before: list[tuple[float, float, int, float]] = []
        for n in range(args.rounds):  # side by side, round by round
            report.append(measure([*CLI, "report", str(run)]))
            # A digest run just after `report` (a second of forked workers over 1.2 GB) pays about
            # 15 % more CPU than the same digest run next (measured: one tree and lake against
            # itself, paired 1.15-1.18): the small commands go first, and with --against the two
            # digests take turns at the first place.
            started.append(measure([sys.executable, "-c", START_UP]))
            one.append(measure(question))
            if args.against and n % 2:
                before.append(measure(digest_against, env=_tree_env(args.against)))
            digested.append(measure(digest))
            if args.against and not n % 2:  # the code before a change, on the lake it exported
                before.append(measure(digest_against, env=_tree_env(args.against)))
            on_compacted.append(measure(digest_compacted))
            inside.append(_ask(lake, "2.13.0", "2.14.0")[1])
        print(f"{args.rounds} round(s); {_load()}")
        for name, samples in (
            ("report RUN", report),
            ("history digest", digested),
            ("digest, compacted", on_compacted),
            ("history top-causes", one),
            ("start-up", started),
            *([(f"digest, {args.against.name}", before)] if before else []),
        ):
            print(
                f"  {name:20} wall {_median(samples, 0):6.2f} s (least {min(s[0] for s in samples):5.2f})"
                f"  cpu {_median(samples, 3):6.2f} s  peak RSS {max(s[1] for s in samples):4.0f} MB"
            )
        _inside(inside)
        q_wall, s_wall = _median(one, 0), _median(started, 0)
        ratio = _median(report, 3) / _median(digested, 3)
        print(
            f"one question, one CLI call: {q_wall:.2f} s wall, {_median(one, 3):.2f} s CPU "
            f"(target <= 0.5 s wall): {_met(q_wall <= 0.5)}"
        )
        print(
            f"its start-up: {s_wall:.2f} s wall, {_median(started, 3):.2f} s CPU "
            f"(target <= 0.25 s wall): {_met(s_wall <= 0.25)}"
        )
        print(
            f"report / digest CPU: {ratio:.1f}x (target >= 30x): {_met(ratio >= 30)}; "
            f"wall {_median(report, 0) / _median(digested, 0):.1f}x"
        )
        ratio = _median(report, 3) / _median(on_compacted, 3)
        print(
            f"report / digest CPU, the lake compacted: {ratio:.1f}x (target >= 30x): "
            f"{_met(ratio >= 30)}; wall {_median(report, 0) / _median(on_compacted, 0):.1f}x"
        )
        if before:
            print(
                f"report / digest CPU with {args.against} (its code, its export): "
                f"{_median(report, 3) / _median(before, 3):.1f}x"
            )
            # The figure load disturbs least: both digests' CPU, side by side, round by round.
            paired = statistics.median(d[3] / b[3] for d, b in zip(digested, before))
            print(f"digest CPU / {args.against.name}'s digest CPU, paired by round: {paired:.3f}")
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
                [*CLI, "history", "compact", "--lake", str(lake), "--through", through],
                capture_output=True,
                text=True,
            )
            print(
                f"compacted in {time.perf_counter() - t:.0f} s: {done.stdout.strip()} {done.stderr.strip()}"
            )
        counts_sql = (
            "SELECT (SELECT COUNT(*) FROM runs) AS sessions, (SELECT COUNT(*) FROM compiles) AS "
            "compiles, (SELECT COUNT(*) FROM guard_failures) AS guard_failures, (SELECT run_id FROM "
            "runs ORDER BY start_time DESC, run_id DESC LIMIT 1) AS newest_run"
        )
        asked = subprocess.run(
            [*CLI, "history", "sql", "--lake", str(lake), "--format", "json", counts_sql],
            capture_output=True,
            text=True,
        )
        counts = json.loads(asked.stdout)["results"][0]["rows"][0]
        print(
            f"fleet: {counts}; raw files {len(list((lake / 'v1').rglob('*.parquet')))} ({_bytes(lake / 'v1', '.parquet') / 1e6:.0f} MB), "
            f"daily files {len(list((lake / 'v1-daily').rglob('*.parquet')))} ({_bytes(lake / 'v1-daily', '.parquet') / 1e6:.0f} MB)"
        )
        # The whole set: every question, the two newest releases compared, the newest run gated.
        digest = [
            *CLI, "history", "digest", "--lake", str(lake), "--since", "1970-01-01",
            "--run", counts["newest_run"], "--format", "json",
        ]  # fmt: skip
        samples, inside = [], []
        for _ in range(args.rounds):
            samples.append(measure(digest))
            inside.append(_ask(lake, fleet_mod.BASE, fleet_mod.NEW)[1])
        document = json.loads(subprocess.run(digest, capture_output=True, text=True).stdout)
        print(
            f"history digest: wall {_median(samples, 0):.2f} s (least {min(s[0] for s in samples):.2f})  "
            f"cpu {_median(samples, 3):.2f} s  peak RSS {max(s[1] for s in samples):.0f} MB; "
            f"{args.rounds} round(s); {_load()}"
        )
        _inside(inside)
        regressions = document["questions"].get("regressions", {"results": [{"rows": []}]})
        jobs = sorted({r["job"] for r in regressions["results"][0]["rows"]})
        wall = _median(samples, 0)
        print(f"the whole set (digest): {wall:.2f} s wall (target <= 2 s): {_met(wall <= 2)}")
        print(
            f"the injected regression (job1 on {fleet_mod.NEW}): regressions found jobs {jobs}: "
            f"{_met('job1' in jobs)}"
        )
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
    p.add_argument(
        "--against", type=Path, help="another checkout (the code before a change): its digest too"
    )
    p.add_argument(
        "--against-lake", type=Path, help="the run as --against exported it (reused when present)"
    )
    p = sub.add_parser("fleet")
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--runs-per-day", type=int, default=60)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--compiles", type=int, default=300, help="compiles per rank session")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", type=Path, help="write the lake here (reused when present)")
    args = parser.parse_args()
    _cached_bytecode()
    bench_run(args) if args.part == "run" else bench_fleet(args)


def _cached_bytecode() -> None:
    """Children run from compiled modules, as an installed recompprof does: with
    ``PYTHONDONTWRITEBYTECODE`` set (a development environment), each process would compile every
    module of a checkout again, about 0.07 s of CPU no user pays. Cached outside the checkout."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        os.environ.setdefault("PYTHONPYCACHEPREFIX", tempfile.mkdtemp(prefix="bench-pyc-"))


if __name__ == "__main__":
    main()
