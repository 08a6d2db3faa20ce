"""Scrape cost of the Prometheus exporter with the frame cap reached.

50 frames, each with every guard-failure category and both limits, every phase and error type in
use: the largest exposition one rank can produce with default settings. Prints median and p90 of
building the exposition in process and of a full HTTP scrape (text 0.0.4 and OpenMetrics), and
the exposition size. Target: under 20 ms per scrape. The session is built and filled directly (recompprof's
private ``Session``, settings and running totals, no torch), so what is timed is the exporter alone.

    .venv/bin/python benchmarks/bench_prometheus_scrape.py [--iterations 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from _common import PROMETHEUS_ACCEPT, free_port
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS

from recompprof import CATEGORIES, PHASES, Compile, Frame, Reason, RecompileLimitHit
from recompprof._capture import settings as settings_module
from recompprof._capture.identity import Identity
from recompprof._capture.session import Session
from recompprof._model.aggregates import ERROR_TYPES
from recompprof._model.vocabulary import LIMITS
from recompprof_prometheus import PrometheusExporter
from recompprof_prometheus.render import Renderer

TARGET_MS = 20.0
CLIENT = """
import json, statistics, sys, time, urllib.request
url, accept, encoding, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def get():
    req = urllib.request.Request(url, headers={"Accept": accept, "Accept-Encoding": encoding})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read()
for _ in range(5):
    get()
times = []
for _ in range(n):
    start = time.perf_counter()
    size = len(get())
    times.append((time.perf_counter() - start) * 1000)
times.sort()
print(json.dumps({"median": statistics.median(times), "p90": times[int(0.9 * (n - 1))], "bytes": size}))
"""


def full_session(frames: int) -> Session:
    ident = Identity(0, 0, 1, 1, "bench", "host", 1, "single")
    session = Session(
        settings_module.load(max_frames=frames, prometheus_port=free_port()), identity=ident
    )
    agg = session.aggregates
    agg.limits.update({"recompile_limit": 8, "accumulated_recompile_limit": 256})
    for i in range(frames):
        frame = Frame(
            name=f"forward_{i}", file=f"/workspace/project/models/block_{i}.py", line=100 + i
        )
        phases = {p: 0.01 * (j + 1) for j, p in enumerate(PHASES)}
        agg.add_compile(
            Compile(
                time=time.time(),
                frame=frame,
                compile_id=f"{i}/0",
                is_recompile=False,
                duration=sum(phases.values()),
                phases=phases,
                cache_entries=0,
            )
        )  # type: ignore[arg-type]
        reasons = [Reason(text=f"{c} changed", category=c) for c in CATEGORIES]  # type: ignore[arg-type]
        agg.add_compile(
            Compile(
                time=time.time(),
                frame=frame,
                compile_id=f"{i}/1",
                is_recompile=True,
                duration=2.0,
                reasons=reasons,
                outcome="failed",
                fail_type=ERROR_TYPES[i % len(ERROR_TYPES)],
            )
        )
        for limit in LIMITS:
            agg.add_limit_hit(
                RecompileLimitHit(time=time.time(), frame=frame, limit=limit, value=8)
            )  # type: ignore[arg-type]
    session.add_exemplar(2.0, "4bf92f3577b34da6a3ce929d0e0e4736")
    return session


def timed(fn: Callable[[], bytes], iterations: int) -> tuple[float, float, int]:
    """Median and p90 in ms, and the size of the last result."""
    for _ in range(5):
        fn()
    times, size = [], 0
    for _ in range(iterations):
        start = time.perf_counter()
        size = len(fn())
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))], size


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--frames", type=int, default=50)
    args = parser.parse_args()
    session = full_session(args.frames)
    exporter = PrometheusExporter(session.settings)
    exporter.start(session)
    assert exporter.registry is not None and exporter.url is not None
    registry, url = exporter.registry, exporter.url

    def http(accept: str, encoding: str = "identity") -> tuple[float, float, int]:
        # The scraper runs in its own process, as Prometheus does: a client thread in this process
        # would compete with the server thread for the GIL and measure the switch interval instead.
        out = subprocess.run(
            [sys.executable, "-c", CLIENT, url, accept, encoding, str(args.iterations)],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
        result = json.loads(out)
        return result["median"], result["p90"], result["bytes"]

    renderer = Renderer()
    counter = iter(range(10**9))

    def steady() -> bytes:
        session.step()
        return renderer.text(list(registry.collect()))

    def recompile() -> None:
        i = next(counter) % args.frames
        frame = Frame(
            name=f"forward_{i}", file=f"/workspace/project/models/block_{i}.py", line=100 + i
        )
        session.aggregates.add_compile(
            Compile(
                time=time.time(),
                frame=frame,
                compile_id=f"{i}/9",
                is_recompile=True,
                duration=0.5,
                reasons=[Reason(text="s", category="size")],
            )
        )

    def after_compile() -> bytes:
        recompile()
        return renderer.text(list(registry.collect()))

    def after_compile_generic() -> bytes:
        recompile()
        return generate_latest(registry)

    try:
        series = sum(
            1
            for line in generate_latest(registry).decode().splitlines()
            if not line.startswith("#")
        )
        print(
            f"frames={args.frames} categories={len(CATEGORIES)} phases={len(PHASES)} series={series} "
            f"iterations={args.iterations}"
        )
        results = [
            ("in process, steady state (step moved)", timed(steady, args.iterations)),
            ("in process, right after a compile", timed(after_compile, args.iterations)),
            (
                "  same with prometheus_client's writer",
                timed(after_compile_generic, args.iterations),
            ),
            ("HTTP scrape, text/plain 0.0.4", http("text/plain;version=0.0.4")),
            ("HTTP scrape, OpenMetrics 1.0", http(OPENMETRICS)),
            # What Prometheus 2.42 sends: OpenMetrics preferred, gzip accepted.
            ("HTTP scrape, OpenMetrics 1.0 + gzip", http(PROMETHEUS_ACCEPT, "gzip")),
        ]
        worst = 0.0
        for name, (median, p90, size) in results:
            if name.startswith("HTTP"):
                worst = max(worst, p90)
            print(f"{name:38s} median {median:6.2f} ms  p90 {p90:6.2f} ms  {size:7d} bytes")
        verdict = "OK" if worst < TARGET_MS else "OVER TARGET"
        print(f"target: HTTP scrape p90 < {TARGET_MS:.0f} ms: {verdict} (worst p90 {worst:.2f} ms)")
        return 0
    finally:
        exporter.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
