"""Steady-state step time with everything on against no recompprof, interleaved in one run.

"everything on": monitor mode, event log, the Prometheus pull endpoint (scraped every 0.2 s by a
thread of this benchmark, as a Prometheus server would) and the OpenTelemetry exporter sending to a
local OTLP receiver (another process that accepts and discards). Both variants are the same process:
after warm-up (compiles and recompiles done), blocks of ``--block`` steps alternate between detached
and attached (ABAB..., order flipped every round), so machine noise hits both alike. A step is a small
CPU training step (MLP forward, backward, AdamW). Prints the median step time per variant and the
ratio attached / detached per block pair (median and spread), of the block medians and of the
block minima (the fastest step is the least disturbed by other load on the machine).

    .venv/bin/python benchmarks/bench_everything_on.py --rounds 30 --block 200

Target (issue 8): ratio <= 1.01.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_soak import RECEIVER


def _url(session) -> str:  # type: ignore[no-untyped-def]
    return next(e for e in session.exporters if e.name == "prometheus").url  # port 0: a new port per attach


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=200, help="steps per timed block")
    args = parser.parse_args()

    import torch

    import recompprof

    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{int(receiver.stdout.readline())}"  # type: ignore[union-attr]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, backend="eager")
    batches = {n: torch.randn(n, 128) for n in (16, 24, 32)}

    def step(batch: int) -> None:
        loss = compiled(batches[batch]).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tmp = tempfile.mkdtemp()
    scrapes = {"n": 0, "failed": 0}
    stop = threading.Event()
    session = None

    def scraper() -> None:
        while not stop.wait(0.2):
            current = session
            if current is not None and current.attached:
                try:
                    urllib.request.urlopen(_url(current), timeout=5).read()
                    scrapes["n"] += 1
                except OSError:
                    scrapes["failed"] += 1

    # Warm-up, attached so the compiles (and a recompile) go through recompprof once.
    session = recompprof.attach(run_dir=tmp, exporters=["prometheus", "otel"], prometheus_port=0)
    for batch in (16, 24, 32, 32, 32):
        step(batch)
    session.detach()
    for _ in range(100):
        step(32)
    threading.Thread(target=scraper, daemon=True).start()

    def block(on: bool) -> tuple[float, float]:
        nonlocal session
        if on:
            session = recompprof.attach(run_dir=tmp, exporters=["prometheus", "otel"], prometheus_port=0)
        times = []
        for _ in range(args.block):
            t0 = time.perf_counter()
            step(32)
            times.append(time.perf_counter() - t0)
        if on:
            session.detach()
        return statistics.median(times), min(times)

    off, on, ratios, min_ratios = [], [], [], []
    for r in range(args.rounds):
        pair = {}
        for attached in ((False, True) if r % 2 == 0 else (True, False)):
            pair[attached] = block(attached)
        off.append(pair[False][0])
        on.append(pair[True][0])
        ratios.append(pair[True][0] / pair[False][0])
        min_ratios.append(pair[True][1] / pair[False][1])
    stop.set()
    receiver.terminate()
    compiles = sum(1 for p in Path(tmp).rglob("*.jsonl") for line in p.open() if '"kind":"compile"' in line)
    print(f"steps per block {args.block}, rounds {args.rounds}, scrapes {scrapes['n']} (failed {scrapes['failed']}), "
          f"compiles recorded {compiles}")
    print(f"no recompprof : median step {statistics.median(off) * 1e6:8.1f} us [{min(off) * 1e6:.1f}-{max(off) * 1e6:.1f}]")
    print(f"everything on : median step {statistics.median(on) * 1e6:8.1f} us [{min(on) * 1e6:.1f}-{max(on) * 1e6:.1f}]")
    q = statistics.quantiles(ratios, n=4)
    print(f"ratio on/off  : median {statistics.median(ratios):.4f}, quartiles {q[0]:.4f}-{q[2]:.4f}, "
          f"range {min(ratios):.4f}-{max(ratios):.4f} (target <= 1.01: {'met' if statistics.median(ratios) <= 1.01 else 'NOT met'})")
    q = statistics.quantiles(min_ratios, n=4)
    print(f"ratio of fastest steps (less sensitive to other load): median {statistics.median(min_ratios):.4f}, "
          f"quartiles {q[0]:.4f}-{q[2]:.4f}")


if __name__ == "__main__":
    main()
