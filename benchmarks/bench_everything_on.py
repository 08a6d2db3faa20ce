"""Steady-state step time with everything on against no recompprof, interleaved in one run.

"everything on": monitor mode, event log, the Prometheus pull endpoint (scraped every ``--scrape``
seconds by a client in another process, as a Prometheus server would) and the OpenTelemetry exporter
sending to a local OTLP receiver (another process that accepts and discards). Both variants are the same
process: after warm-up (compiles and recompiles done), blocks of ``--block`` steps alternate between
detached and attached (order flipped every round), so machine noise hits both alike. A step is a small
CPU training step (MLP forward, backward, AdamW; one torch thread).

Wall time on a shared 2-core machine swings +-20-30 % from block to block, which buries a 1 % effect.
So every block also records where the training thread's wall time went, from the kernel's per-thread
accounting (``/proc/self/task/<tid>/schedstat``):

- ``cpu``: the training thread's own CPU time (what recompprof's per-step hook would add to);
- ``runq``: time it was runnable but waiting for a core (other processes' load: not recompprof);
- ``blocked``: the rest (wall - cpu - runq): time it slept, which in this loop is waiting for the GIL
  held by another thread of the process (a scrape rendering) or torch waits;

and the CPU time of the process's other threads (the exporters' threads when attached). The overhead
recompprof adds per step is ``d(cpu) + d(blocked)`` attached minus detached (plus, on a machine with no
spare core, the other threads' CPU); ``runq`` is the machine's load and is reported separately.

Printed: pooled medians and the paired ratio of wall time per step (the old figures), and the same
for each component. ``--inprocess-scraper`` scrapes from a thread of this process instead (the
configuration of the first version of this benchmark) to show its GIL cost.

    .venv/bin/python benchmarks/bench_everything_on.py                      # ~1.5 minutes
    .venv/bin/python benchmarks/bench_everything_on.py --rounds 120 --block 100

Target: ratio <= 1.01.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import PROMETHEUS_ACCEPT, free_port, mlp_job, otel_to_receiver, process_cpu, schedstat

# Scrapes a fixed URL every interval until killed; connection refused (detached blocks) costs this process nothing.
SCRAPER = """
import sys, time, urllib.request
url, interval = sys.argv[1], float(sys.argv[2])
accept = sys.argv[3]
next_at = time.monotonic()
while True:
    time.sleep(max(0.0, next_at - time.monotonic()))
    next_at += interval
    try:
        req = urllib.request.Request(url, headers={"Accept": accept, "Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()
    except OSError:
        pass
"""


def summary(name: str, off: list[float], on: list[float], unit: float = 1e6) -> None:
    ratios = [b / a for a, b in zip(off, on) if a > 0]
    diffs = [(b - a) * unit for a, b in zip(off, on)]
    q = statistics.quantiles(diffs, n=4)
    med_off, med_on = statistics.median(off) * unit, statistics.median(on) * unit
    ratio_text = f"paired ratio {statistics.median(ratios):.4f}, " if ratios else ""
    print(
        f"  {name:9s} off {med_off:8.1f}  on {med_on:8.1f}  pooled ratio {med_on / med_off if med_off else float('nan'):.4f}; "
        f"{ratio_text}paired diff {statistics.median(diffs):+7.1f} us (quartiles {q[0]:+.1f} to {q[2]:+.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--block", type=int, default=200, help="steps per timed block")
    parser.add_argument("--scrape", type=float, default=0.2, help="scrape interval, seconds")
    parser.add_argument(
        "--inprocess-scraper",
        action="store_true",
        help="scrape from a thread of this process (the benchmark's first version) instead",
    )
    args = parser.parse_args()

    import torch

    import recompprof

    receiver = otel_to_receiver()
    compiled, opt = mlp_job()
    batches = {n: torch.randn(n, 128) for n in (16, 24, 32)}

    def step(batch: int) -> None:
        loss = compiled(batches[batch]).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tmp = tempfile.mkdtemp()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"

    def attach():  # type: ignore[no-untyped-def]
        # linger 0: detach does not wait for a last scrape (it would sit between blocks, untimed, anyway).
        return recompprof.attach(
            run_dir=tmp,
            exporters=["prometheus", "otel"],
            prometheus_port=port,
            prometheus_linger_seconds=0,
        )

    # Warm-up, attached so the compiles (and a recompile) go through recompprof once.
    session = attach()
    for batch in (16, 24, 32, 32, 32):
        step(batch)
    session.detach()
    for _ in range(100):
        step(32)

    stop = threading.Event()
    scrapes = {"n": 0}
    scraper = None
    if args.inprocess_scraper:

        def scrape_loop() -> None:
            while not stop.wait(args.scrape):
                try:
                    urllib.request.urlopen(url, timeout=5).read()
                    scrapes["n"] += 1
                except OSError:
                    pass

        threading.Thread(target=scrape_loop, daemon=True).start()
    else:
        scraper = subprocess.Popen(
            [sys.executable, "-c", SCRAPER, url, str(args.scrape), PROMETHEUS_ACCEPT]
        )
    tid = threading.get_native_id()

    def block(on: bool) -> dict[str, float]:
        session = attach() if on else None
        times = []
        w0, p0 = time.perf_counter(), process_cpu()
        (c0, q0) = schedstat(tid)
        for _ in range(args.block):
            t0 = time.perf_counter()
            step(32)
            times.append(time.perf_counter() - t0)
        wall = time.perf_counter() - w0
        c1, q1 = schedstat(tid)
        other = (process_cpu() - p0) - (c1 - c0)
        served = (
            next(e for e in session.exporters if e.name == "prometheus").server.scrapes.count
            if session
            else 0
        )
        if session is not None:
            session.detach()
        n = args.block
        cpu, runq = (c1 - c0) / n, (q1 - q0) / n
        return {
            "median": statistics.median(times),
            "min": min(times),
            "mean": wall / n,
            "cpu": cpu,
            "runq": runq,
            "blocked": wall / n - cpu - runq,
            "other": other / n,
            "scrapes": served,
        }

    rows: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for r in range(args.rounds):
        for attached in (False, True) if r % 2 == 0 else (True, False):
            rows[attached].append(block(attached))
    stop.set()
    if scraper is not None:
        scraper.terminate()
    receiver.terminate()

    def col(on: bool, key: str) -> list[float]:
        return [row[key] for row in rows[on]]

    compiles = sum(
        1 for p in Path(tmp).rglob("*.jsonl") for line in p.open() if '"kind":"compile"' in line
    )
    served = sum(col(True, "scrapes"))
    print(
        f"steps per block {args.block}, rounds {args.rounds}, scrape every {args.scrape} s from "
        f"{'a thread of this process' if args.inprocess_scraper else 'another process'}; "
        f"{served:.0f} scrapes served in attached blocks; compiles recorded {compiles}; "
        f"perf_counter resolution {time.get_clock_info('perf_counter').resolution * 1e9:.0f} ns"
    )
    print(
        "per step, us (medians over blocks; 'paired' = attached block vs the detached block next to it):"
    )
    summary("wall med", col(False, "median"), col(True, "median"))
    summary("wall min", col(False, "min"), col(True, "min"))
    summary("wall mean", col(False, "mean"), col(True, "mean"))
    summary("cpu", col(False, "cpu"), col(True, "cpu"))
    summary("runq", col(False, "runq"), col(True, "runq"))
    summary("blocked", col(False, "blocked"), col(True, "blocked"))
    summary("other", col(False, "other"), col(True, "other"))
    d_cpu = statistics.median([b - a for a, b in zip(col(False, "cpu"), col(True, "cpu"))])
    d_blk = statistics.median([b - a for a, b in zip(col(False, "blocked"), col(True, "blocked"))])
    base = statistics.median(col(False, "cpu")) + statistics.median(col(False, "blocked"))
    print(
        f"added by recompprof per step (training thread cpu + blocked, load excluded): {(d_cpu + d_blk) * 1e6:+.1f} us "
        f"= ratio {1 + (d_cpu + d_blk) / base:.4f} (target <= 1.01)"
    )
    walls = [b / a for a, b in zip(col(False, "mean"), col(True, "mean"))]
    q = statistics.quantiles(walls, n=4)
    print(
        f"wall-time ratio (block means, paired): median {statistics.median(walls):.4f}, quartiles {q[0]:.4f}-{q[2]:.4f}"
    )


if __name__ == "__main__":
    main()
