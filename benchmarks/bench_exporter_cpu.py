"""CPU the exporters' background threads take per second of training, and the GIL a scrape holds.

The training thread (this process's main thread) runs small CPU training steps (MLP forward, backward,
AdamW; one torch thread) while recompprof is attached with the Prometheus pull endpoint and the OTel
exporter (to a local OTLP receiver in another process). Every other thread's CPU is
``getrusage(RUSAGE_SELF) - thread_time()`` of the main thread: with recompprof detached that is the
baseline (torch's own threads, ~0), attached it adds the exporters' threads (HTTP server, its
per-request threads, OTel batch and metric readers). Phases, each a fresh ``attach()``:

- ``detached``: no recompprof (baseline);
- ``idle``: attached, nobody scrapes (the threads' wake-ups only);
- ``scrape 15 s / 1 s / 0.2 s``: a real HTTP client in another process (urllib, Prometheus' Accept and
  gzip headers) scrapes ``/metrics`` at that interval;
- ``otel metrics 1 s``: ``otel_metrics`` on with ``OTEL_METRIC_EXPORT_INTERVAL=1000`` (default is 60 s).

The session carries ``--frames`` frames of synthetic compile totals (default 50, the frame cap: the
largest exposition), added straight into its running totals (``session.aggregates``, private). Printed per phase: other-thread CPU per second of wall time (as % of one core, and
the difference from ``detached``), per scrape/export, and the training thread's step time.

GIL: a pure-Python loop runs in the main thread, alternately with no scrapes and with scrapes every
0.2 s; its GIL wait (wall - CPU - run-queue wait, from the kernel's per-thread schedstat, so other
processes' load is excluded), with minus without, divided by the scrapes, is the time one scrape holds
the GIL away from a busy Python thread.

Targets: exporter threads <= 0.1 % of one core at a 15 s scrape interval.

    .venv/bin/python benchmarks/bench_exporter_cpu.py                 # ~2 minutes
    .venv/bin/python benchmarks/bench_exporter_cpu.py --scale 0.5      # every phase half as long
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import PROMETHEUS_ACCEPT, mlp_job, otel_to_receiver, process_cpu, schedstat

SCRAPER = """
import sys, time, urllib.request
url, interval, duration = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
accept = sys.argv[4]
n, end, next_at = 0, time.monotonic() + duration, time.monotonic()
while next_at < end:
    time.sleep(max(0.0, next_at - time.monotonic()))
    req = urllib.request.Request(url, headers={"Accept": accept, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()
    n += 1
    next_at += interval
print(n, flush=True)
"""


def fill_frames(session: Any, frames: int) -> None:
    """Synthetic compile totals for ``frames`` frames, every reason category and both limits in use."""
    from recompprof import CATEGORIES, Compile, Frame, Reason, RecompileLimitHit
    from recompprof._model.vocabulary import LIMITS

    for i in range(frames):
        frame = Frame(
            name=f"forward_{i}", file=f"/workspace/project/models/block_{i}.py", line=100 + i
        )
        session.aggregates.add_compile(
            Compile(
                time=time.time(),
                frame=frame,
                compile_id=f"{900 + i}/0",
                is_recompile=False,
                duration=0.5,
            )
        )
        reasons = [Reason(text=f"{c} changed", category=c) for c in CATEGORIES]
        session.aggregates.add_compile(
            Compile(
                time=time.time(),
                frame=frame,
                compile_id=f"{900 + i}/1",
                is_recompile=True,
                duration=0.5,
                reasons=reasons,
            )
        )
        for limit in LIMITS:
            session.aggregates.add_limit_hit(
                RecompileLimitHit(time=time.time(), frame=frame, limit=limit, value=8)
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every phase's duration")
    parser.add_argument("--frames", type=int, default=50)
    args = parser.parse_args()

    receiver = otel_to_receiver()

    import torch

    import recompprof

    compiled, opt = mlp_job()
    batch = torch.randn(32, 128)

    def step() -> None:
        compiled(batch).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tmp = tempfile.mkdtemp()

    def attach(**extra: Any) -> Any:
        session = recompprof.attach(
            run_dir=tmp,
            exporters=["prometheus", "otel"],
            prometheus_port=0,
            prometheus_linger_seconds=0,
            **extra,
        )
        fill_frames(session, args.frames)
        return session

    os.environ["OTEL_METRIC_EXPORT_INTERVAL"] = "1000"
    session = attach(
        otel_metrics=True
    )  # the first metric export imports its encoder: done here, not in a phase
    for _ in range(50):
        step()  # compiles once, through recompprof
    session.detach()

    def url(session: Any) -> str:
        return next(e for e in session.exporters if e.name == "prometheus").url

    def phase(
        name: str, seconds: float, interval: float | None = None, **extra: Any
    ) -> dict[str, float]:
        session = attach(**extra) if name != "detached" else None
        scraper = None
        if interval is not None:
            scraper = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    SCRAPER,
                    url(session),
                    str(interval),
                    str(seconds),
                    PROMETHEUS_ACCEPT,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(0.3)  # the client's interpreter start is not part of the phase
        for _ in range(20):
            step()
        steps, w0, p0, t0 = 0, time.monotonic(), process_cpu(), time.thread_time()
        end = w0 + seconds
        while time.monotonic() < end:
            step()
            steps += 1
        wall, other = time.monotonic() - w0, (process_cpu() - p0) - (time.thread_time() - t0)
        scrapes = int(scraper.communicate(timeout=60)[0]) if scraper is not None else 0
        exports = 0
        if session is not None:
            otel = next((e for e in session.exporters if e.name == "otel"), None)
            if otel is not None and otel.metrics is not None:
                exports = int(wall)  # one export per second at OTEL_METRIC_EXPORT_INTERVAL=1000
            session.detach()
        return {
            "wall": wall,
            "other": other,
            "steps": steps,
            "scrapes": scrapes,
            "exports": exports,
        }

    s = args.scale
    results: list[tuple[str, dict[str, float]]] = []
    results.append(("detached", phase("detached", 10 * s)))
    results.append(("idle (attached, no scrapes)", phase("idle", 10 * s)))
    results.append(("scrape every 15 s", phase("scrape15", 45 * s, 15.0)))
    results.append(("scrape every 1 s", phase("scrape1", 10 * s, 1.0)))
    results.append(("scrape every 0.2 s", phase("scrape0.2", 6 * s, 0.2)))
    results.append(("otel metrics every 1 s", phase("otelmetrics", 6 * s, otel_metrics=True)))
    base = results[0][1]["other"] / results[0][1]["wall"]
    base_step = results[0][1]["wall"] / results[0][1]["steps"]

    print(
        f"frames {args.frames}; other threads' CPU (process CPU - training thread CPU) per second of wall time"
    )
    print(
        f"{'phase':30s} {'wall s':>7s} {'% core':>8s} {'vs detached':>12s} {'per scrape/export':>18s} "
        f"{'step us':>8s} {'step ratio':>10s}"
    )
    for name, r in results:
        share = r["other"] / r["wall"]
        added = share - base
        events = r["scrapes"] or r["exports"]
        idle = results[1][1]["other"] / results[1][1]["wall"]
        per = f"{(share - idle) * r['wall'] / events * 1e3:.2f} ms" if events else "-"
        step_us = r["wall"] / r["steps"] * 1e6
        print(
            f"{name:30s} {r['wall']:7.1f} {share * 100:7.3f}% {added * 100:+11.3f}% {per:>18s} "
            f"{step_us:8.0f} {step_us / (base_step * 1e6):10.3f}"
        )
        if r["scrapes"]:
            print(f"{'':30s} ({r['scrapes']} scrapes)")
    at15 = results[2][1]["other"] / results[2][1]["wall"] - base
    print(
        f"exporter threads at a 15 s scrape interval: {at15 * 100:.4f} % of one core "
        f"(target <= 0.1 %: {'met' if at15 <= 0.001 else 'NOT met'})"
    )
    gil(attach, url, 3 * s)
    receiver.terminate()


def gil(attach: Any, url: Any, seconds: float) -> None:
    """How long a busy pure-Python thread waits for the GIL with and without scrapes every 0.2 s.

    The thread never sleeps, so its wall time is CPU + run-queue wait (other processes' load) + GIL wait:
    GIL wait = wall - CPU - run-queue wait, from ``/proc/self/task/<tid>/schedstat``; alternating windows.
    """
    import threading

    session = attach()
    tid = threading.get_native_id()

    def spin(duration: float) -> tuple[float, int]:
        c0, q0 = schedstat(tid)
        w0 = time.perf_counter()
        iterations, end = 0, w0 + duration
        while time.perf_counter() < end:
            iterations += 1
        c1, q1 = schedstat(tid)
        return (time.perf_counter() - w0) - (c1 - c0) - (q1 - q0), iterations

    rows: dict[bool, list[tuple[float, int, int]]] = {False: [], True: []}
    for r in range(4):
        for scraping in (False, True) if r % 2 == 0 else (True, False):
            scraper = None
            if scraping:
                scraper = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        SCRAPER,
                        url(session),
                        "0.2",
                        str(seconds),
                        PROMETHEUS_ACCEPT,
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                time.sleep(0.3)
            waited, iterations = spin(seconds)
            scrapes = int(scraper.communicate(timeout=60)[0]) if scraper is not None else 0
            rows[scraping].append((waited, iterations, scrapes))
    session.detach()
    off = sum(r[0] for r in rows[False]) / (len(rows[False]) * seconds)
    on = sum(r[0] for r in rows[True]) / (len(rows[True]) * seconds)
    scrapes = sum(r[2] for r in rows[True])
    per_scrape = (on - off) * len(rows[True]) * seconds / max(scrapes, 1)
    print(
        f"GIL: a busy Python thread waited {off * 1e3:.2f} ms/s for the GIL without scrapes, {on * 1e3:.2f} ms/s with "
        f"scrapes every 0.2 s ({scrapes} scrapes): {per_scrape * 1e3:.2f} ms per scrape, i.e. "
        f"{per_scrape / 15 * 100:.4f} % of that thread's time at a 15 s interval, {per_scrape / 0.2 * 100:.2f} % at 0.2 s"
    )


if __name__ == "__main__":
    main()
