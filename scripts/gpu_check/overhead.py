"""What recompprof costs a compiled job: compile time with and without it, then step time with
everything on against off, interleaved in one process (the method of benchmarks/bench_everything_on.py,
on the check's tiny Llama and the device the check runs on).

Compile time: after one uncounted compile (the first of a process also starts Inductor and its compile
workers), ``--reps`` fresh compiles of the model each way (``torch._dynamo.reset()`` between, Inductor's
caches off through ``TORCHINDUCTOR_FORCE_DISABLE_CACHES``), alternating which goes first; each is the
wall time of the first step (compile and run). Step time: after warm-up, blocks of ``--block`` steps
alternate between detached and attached with the event log, the Prometheus endpoint (scraped by
another process every ``--scrape`` s) and the OpenTelemetry exporter (to a discarding receiver in
another process). Each step ends with a device synchronise, so its wall time is the step's real time.
Prints one JSON object (the check's figures) as its last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from llama import batch, loss_of, tiny_llama

import recompprof

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from _common import PROMETHEUS_ACCEPT, free_port, otel_to_receiver  # noqa: E402
from bench_everything_on import SCRAPER  # noqa: E402


def _first_scrape(session: Any, most: float) -> None:
    """Wait (untimed) until the session's endpoint served its first scrape, at most ``most`` seconds: a
    block of short steps (the CPU rehearsal's: 10 steps of a few ms) can end before the scraper's next
    visit, and the check is that scraping runs beside the timed steps."""
    server = next(e for e in session.exporters if e.name == "prometheus").server
    deadline = time.monotonic() + most
    while server.scrapes.count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)


def spread(values: list[float]) -> dict[str, float]:
    """Median and quartiles (the quartiles are the median itself for fewer than two values)."""
    if len(values) < 2:
        m = values[0] if values else float("nan")
        return {"median": m, "q1": m, "q3": m, "n": len(values)}
    q = statistics.quantiles(values, n=4)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--llama", default="auto", choices=["auto", "hf", "plain"])
    parser.add_argument(
        "--backend", default="inductor", help="the compile backend (the rehearsal uses eager)"
    )
    parser.add_argument(
        "--train", action="store_true", help="training steps (default: forward only)"
    )
    parser.add_argument("--reps", type=int, default=2, help="compiles each way")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--scrape", type=float, default=0.2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    device = args.device
    receiver = otel_to_receiver()
    port = free_port()
    tmp = tempfile.mkdtemp()
    data = batch((16, 16, 16, 16), device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def build() -> tuple[Callable[[], None], str]:
        torch.manual_seed(0)
        model, made = tiny_llama(args.layers, args.llama)
        model.to(device).train(args.train)
        model.compile(backend=args.backend)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step() -> None:
            if args.train:
                loss_of(model(**data)).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            else:
                with torch.no_grad():
                    model(input_ids=data["input_ids"], attention_mask=data["attention_mask"])
            sync()

        return step, made

    def attach() -> Any:
        return recompprof.attach(
            run_dir=tmp,
            exporters=["prometheus", "otel"],
            prometheus_port=port,
            prometheus_linger_seconds=0,
        )

    compile_s: dict[bool, list[float]] = {False: [], True: []}
    step, made = build()
    if args.reps:
        step()  # uncounted: the first compile of a process also starts Inductor and its workers
    for rep in range(args.reps):
        for on in (True, False) if rep % 2 == 0 else (False, True):
            torch._dynamo.reset()
            step, made = build()
            session = attach() if on else None
            t0 = time.perf_counter()
            step()
            compile_s[on].append(time.perf_counter() - t0)
            if session is not None:
                session.detach()

    for _ in range(20):  # warm: the last compile's variant is installed; the device's clocks rise
        step()
    scraper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SCRAPER,
            f"http://127.0.0.1:{port}/metrics",
            str(args.scrape),
            PROMETHEUS_ACCEPT,
        ]
    )
    blocks: dict[bool, list[float]] = {False: [], True: []}
    medians: dict[bool, list[float]] = {False: [], True: []}
    scrapes = 0
    try:
        for r in range(args.rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                session = attach() if on else None
                if session is not None:
                    _first_scrape(session, 10 * args.scrape)
                times = []
                for _ in range(args.block):
                    t0 = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - t0)
                if session is not None:
                    prom = next(e for e in session.exporters if e.name == "prometheus")
                    scrapes += prom.server.scrapes.count
                    session.detach()
                blocks[on].append(sum(times) / len(times))
                medians[on].append(statistics.median(times))
    finally:
        scraper.terminate()
        receiver.terminate()
    ratios = [b / a for a, b in zip(blocks[False], blocks[True]) if a > 0]
    diffs_us = [(b - a) * 1e6 for a, b in zip(blocks[False], blocks[True])]
    figures = {
        "model": made,
        "device": device,
        "backend": args.backend,
        "step": "training (forward, backward, AdamW)" if args.train else "forward (no_grad)",
        "compile_s": {"off": spread(compile_s[False]), "on": spread(compile_s[True])},
        "compile_ratio": (
            statistics.median(compile_s[True]) / statistics.median(compile_s[False])
            if compile_s[False] and compile_s[True]
            else None
        ),
        "rounds": args.rounds,
        "block": args.block,
        "scrapes_served": scrapes,
        "step_us": {
            "off": spread([t * 1e6 for t in blocks[False]]),
            "on": spread([t * 1e6 for t in blocks[True]]),
        },
        "step_median_us": {
            "off": spread([t * 1e6 for t in medians[False]]),
            "on": spread([t * 1e6 for t in medians[True]]),
        },
        "step_ratio": spread(ratios),
        "step_diff_us": spread(diffs_us),
    }
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
