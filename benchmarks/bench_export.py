"""``recompprof export`` at scale: CPU per million events against the JSONL parse floor, and the
lake's bytes against the event logs' bytes.

The run is the test suite's synthetic run (``tests/generated_runs.py``, as ``bench_scale.py`` uses;
default 8 ranks x 125,000 events = 1,000,000 events, real event models and real reason texts from
torch 2.13). Each round runs, interleaved, as real subprocesses measured by ``/usr/bin/time`` (wall,
CPU = user + system, peak RSS):

- ``floor``: a child that reads every log of the run with the offline commands' fast reader
  (``recompprof._eventlog.reader.scan_file``, msgspec views: ``recompprof/_eventlog/fastread.py``)
  and does nothing with the events: what any reader of the JSONL pays;
- ``export``: ``python -m recompprof._cli.main export RUN --to LAKE`` (the lake emptied first).

    .venv/bin/python benchmarks/bench_export.py --rounds 3                  # 1M events
    .venv/bin/python benchmarks/bench_export.py --ranks 2 --per-rank 20000  # quick

Targets: export CPU <= 3x the floor's, per million events; the lake's Parquet <= 1/10 of
the JSONL's bytes. Each is printed as met or not met, with the machine's load average beside the
figures (the two are measured side by side, so load weighs on both, but not always alike).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _common import load_test_helper
from bench_scale import measure

from recompprof._history.names import ROOT

FLOOR = """
import sys
from recompprof._eventlog.reader import ReadStats, run_files, scan_file
n = 0
for path in run_files(sys.argv[1]):
    for _ in scan_file(path, ReadStats()):
        n += 1
print(n)
"""


CPU_TARGET = 3.0  # export CPU / floor CPU
BYTES_TARGET = 10  # JSONL bytes / Parquet bytes, at least


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _bytes(root: Path, suffix: str) -> int:
    return sum(p.stat().st_size for p in root.rglob(f"*{suffix}") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--per-rank", type=int, default=125_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="generate the run here (reused when present)")
    parser.add_argument(
        "--against", type=Path, help="another checkout (the code before a change): its export too"
    )
    args = parser.parse_args()
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:  # as an installed package runs
        os.environ.setdefault("PYTHONPYCACHEPREFIX", tempfile.mkdtemp(prefix="bench-pyc-"))
    where = Path(tempfile.mkdtemp(prefix="bench-export-"))
    run = args.keep or where / "run"
    try:
        if not run.exists():
            generated = load_test_helper("generated_runs")
            generated.generate(run, ranks=args.ranks, per_rank=args.per_rank, seed=args.seed)
        events = args.ranks * args.per_rank
        lake = where / "lake"
        samples: dict[str, list[tuple[float, float, int, float]]] = {"floor": [], "export": []}
        if args.against:
            samples[args.against.name] = []
        start_load = os.getloadavg()
        cmd = [sys.executable, "-m", "recompprof._cli.main", "export", str(run)]
        for _ in range(args.rounds):
            samples["floor"].append(measure([sys.executable, "-c", FLOOR, str(run)]))
            shutil.rmtree(lake, ignore_errors=True)
            samples["export"].append(measure([*cmd, "--to", str(lake)]))
            if args.against:  # the same run, exported by the other checkout's code
                other = where / "against"
                shutil.rmtree(other, ignore_errors=True)
                tree = args.against
                env = {**os.environ, "PYTHONPATH": f"{tree}:{tree}/exporters"}
                samples[tree.name].append(measure([*cmd, "--to", str(other)], env=env))
        per_million = 1_000_000 / events
        cpu = {name: statistics.median(s[3] for s in got) for name, got in samples.items()}
        print("load average (1, 5, 15 min) at the start: {:.2f} {:.2f} {:.2f}".format(*start_load))
        print(f"run: {args.ranks} ranks x {args.per_rank} events = {events:,} events")
        for name, got in samples.items():
            wall = statistics.median(s[0] for s in got)
            rss = max(s[1] for s in got)
            print(
                f"{name:7} wall {wall:7.2f} s  cpu {cpu[name]:7.2f} s "
                f"({cpu[name] * per_million:.2f} s per 1M events)  peak RSS {rss:.0f} MB  "
                f"exit {got[-1][2]}"
            )
        ratio = cpu["export"] / cpu["floor"]
        print(
            f"export / floor CPU: {ratio:.2f}x (target <= {CPU_TARGET:g}x: {_met(ratio <= CPU_TARGET)})"
        )
        if args.against:
            print(f"{args.against.name} / floor CPU: {cpu[args.against.name] / cpu['floor']:.2f}x")
        jsonl, parquet = _bytes(run, ".jsonl"), _bytes(lake, ".parquet")
        share = jsonl / max(parquet, 1)
        print(
            f"bytes: JSONL {jsonl:,}  Parquet {parquet:,}  = 1/{share:.1f} "
            f"(target <= 1/{BYTES_TARGET}: {_met(share >= BYTES_TARGET)})"
        )
        print(
            "load average (1, 5, 15 min) at the end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
        )
        for table in ("runs", "compiles", "guard_failures", "graph_breaks"):
            print(f"  {table:15} {_bytes(lake / ROOT / table, '.parquet'):>13,} bytes")
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
