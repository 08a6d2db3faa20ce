"""Overhead of recompprof (monitor mode, event log on) against the same job without it, and TORCH_TRACE.

Each run is a fresh child process (clean compile caches in memory, honest peak RSS); runs of the three
variants are interleaved round-robin so machine noise hits them alike. Prints medians, spread and
ratios against the baseline of the same round:

    .venv/bin/python benchmarks/bench_overhead.py --rounds 5

Targets: steady-state step time <= 1.01x, compile time <= 1.03x, peak RSS <= 1.05x, and
bytes written per compile under 1 % of TORCH_TRACE's and not above 2,501 B.

``--against TREE`` also runs the recompprof child with another checkout's recompprof (the code before
a change) in the same rounds, and prints the bytes per compile of the two side by side:

    .venv/bin/python benchmarks/bench_overhead.py --rounds 3 --against /path/to/old/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("baseline", "recompprof", "torch_trace")


# The line for the event log's bytes per compile, given as its size on 2026-11-28. This child
# measures 3,003 B with the tree that set it (c302c6f, 2026-11-29) on the 2-core VM: compare trees with
# --against rather than with this figure alone.
MAX_BYTES_PER_COMPILE = 2501


def child(variant: str, steps: int, out_dir: Path) -> dict[str, float]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend="aot_eager")
    session = None
    if variant == "recompprof":
        import recompprof

        session = recompprof.attach(run_dir=out_dir)

    def step(batch: int) -> None:
        loss = compiled(torch.randn(batch, 256)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    compile_start = time.perf_counter()
    for batch in (32, 48, 64, 96):  # recompiles: new size, then dynamic shapes
        step(batch)
    compile_seconds = time.perf_counter() - compile_start
    for _ in range(20):
        step(64)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step(64)
        times.append(time.perf_counter() - t0)
    if session is not None:
        session.detach()
    written = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    import torch._dynamo.utils as utils

    compiles = utils.counters["frames"]["ok"] or 1
    return {
        "step_median_s": statistics.median(times),
        "compile_s": compile_seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bytes_per_compile": written / compiles,
    }


def run_child(variant: str, steps: int, tree: Path | None = None) -> dict[str, float]:
    """One child run; ``tree``: a checkout whose recompprof the child imports (the ``against`` run)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("RECOMPPROF_", "TORCH_TRACE"))
        }
        if variant == "torch_trace":
            env["TORCH_TRACE"] = tmp
        if tree is not None:
            env["PYTHONPATH"] = f"{tree}:{tree}/exporters"
        out = subprocess.run(
            [sys.executable, __file__, "--child", variant, "--steps", str(steps), "--out", tmp],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout: its recompprof child too, bytes side by side",
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.out)))
        return
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    against: list[dict[str, float]] = []
    for r in range(args.rounds):
        order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]  # rotate who goes first
        for variant in order:
            results[variant].append(run_child(variant, args.steps))
            if variant == "recompprof" and args.against:
                against.append(run_child(variant, args.steps, args.against))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(
        f"{'metric':22} {'variant':12} {'median':>12} {'min':>12} {'max':>12} {'ratio vs baseline (median of per-round ratios)':>10}"
    )
    for metric in ("step_median_s", "compile_s", "peak_rss_mb", "bytes_per_compile"):
        for variant in VARIANTS:
            values = [run[metric] for run in results[variant]]
            base = [run[metric] for run in results["baseline"]]
            ratios = [v / b for v, b in zip(values, base) if b]
            ratio = (
                f"{statistics.median(ratios):.4f} [{min(ratios):.3f}-{max(ratios):.3f}]"
                if ratios
                else "-"
            )
            print(
                f"{metric:22} {variant:12} {statistics.median(values):12.6g} {min(values):12.6g} {max(values):12.6g}  {ratio}"
            )
    ours = statistics.median(run["bytes_per_compile"] for run in results["recompprof"])
    trace = statistics.median(run["bytes_per_compile"] for run in results["torch_trace"])
    print(
        f"\nbytes per compile: recompprof {ours:.0f} B, TORCH_TRACE {trace:.0f} B -> {100 * ours / trace:.2f} % of TORCH_TRACE"
    )
    print(
        f"bytes per compile in the event log: {ours:.0f} B; target <= {MAX_BYTES_PER_COMPILE:,} B "
        f"(the issue's line): {'met' if ours <= MAX_BYTES_PER_COMPILE else 'NOT met'}"
    )
    if against:
        theirs = statistics.median(run["bytes_per_compile"] for run in against)
        print(
            f"bytes per compile, side by side: this tree {ours:.1f} B, {args.against} {theirs:.1f} B "
            f"-> {ours / theirs:.4f}x ({ours - theirs:+.1f} B)"
        )


if __name__ == "__main__":
    main()
