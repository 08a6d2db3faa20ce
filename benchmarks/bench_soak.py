"""Soak: memory stays flat and metrics stay fresh however long a job runs.

``synthetic`` (default 1,000,000 compile events): real ``CompilationMetrics``-shaped records go through
the session's own entry point (``session._recorder.on_torch_record``, private: this benchmark measures the
recorder and the sinks behind it, and reads their internal maps' sizes) with the event log, the Prometheus pull
endpoint and the OpenTelemetry exporter on (a discarding OTLP receiver in another process, or
``--otel down``: nothing listening). 60 frames (past the 50-frame cap), one to eight guard-failure
reasons per recompile appended to torch's own ``guard_failures`` record (the real reader and parser),
limit hits, failures and backwards. Every ``--sample`` events it prints RSS, the rate, the sizes of the
session's and exporters' internal maps, and the event-to-metric latency: the time from handing a
compile to the session until a scrape of the real ``/metrics`` endpoint shows it (the aggregates are
updated synchronously, so that is also their staleness bound).

``real``: one real frame recompiling ``--compiles`` times (a Python int argument changing every call,
``dynamic=False``, ``backend="eager"``, recompile limit lifted) in a fresh process with recompprof
attached, and the same program without it, interleaved; RSS is sampled as it goes, and torch's own
``guard_failures`` growth (O(N^2) strings) is printed apart from ours.

    .venv/bin/python benchmarks/bench_soak.py synthetic --events 1000000
    .venv/bin/python benchmarks/bench_soak.py real --compiles 3000 --rounds 2

Targets: RSS growth after warm-up under 20 MB, every internal structure bounded, event-to-
metric latency under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from _common import REASON_FIXTURE, free_port, start_receiver


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def structure_sizes(session) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Sizes of every map the session and its exporters keep, to show none grows without bound."""
    sizes = {
        **session._recorder.assembler.correlation.sizes(),
        "pending_reasons": len(session._recorder.pending_reasons),
        "explainer_frames": len(session._recorder.assembler.explainer._seen),
        "explainer_seen_max": max(
            (len(s) for s in session._recorder.assembler.explainer._seen.values()), default=0
        ),
        "agg_frames": len(session.aggregates._frames),
        "agg_frame_keys": len(session.aggregates._frame_keys),
        "recent": len(session._recent),
        "guard_reader": len(session._adapters.guards._read),
    }
    for exporter in session.exporters:
        if exporter.name == "otel" and exporter._builder is not None:
            sizes["otel_last_span"] = len(exporter._builder._last)
            sizes["otel_limit_hits"] = len(exporter._builder._limit_hits)
            if exporter.processor is not None:
                sizes["otel_queue"] = len(exporter.processor._queue)
        if exporter.name == "prometheus" and exporter.collector is not None:
            memo = exporter.collector._frame_memo
            sizes["prom_frame_memo"] = len(memo[0]) if memo else 0
    return sizes


def _codes(n: int) -> list:  # type: ignore[type-arg]
    codes = []
    for i in range(n):
        namespace: dict[str, object] = {}
        exec(
            compile(  # distinct real code objects, one per simulated frame
                "\n" * (10 + 7 * i) + f"def layer{i}_forward(x):\n    return x\n",
                f"/srv/job/model/layer_{i % 9}.py",
                "exec",
            ),
            namespace,
        )
        codes.append(namespace[f"layer{i}_forward"].__code__)  # type: ignore[attr-defined]
    return codes


def _record(
    code,
    frame_id: int,
    entry: int,
    rng,
    *,
    backward: bool = False,
    limit: bool = False,
    failed: bool = False,
):  # type: ignore[no-untyped-def]
    total = int(rng.uniform(50_000, 3_000_000))
    return SimpleNamespace(
        compile_id=f"{frame_id}/{entry}",
        co_name=code.co_name,
        co_filename=code.co_filename,
        co_firstlineno=code.co_firstlineno,
        is_forward=not backward,
        cache_size=entry,
        accumulated_cache_size=entry,
        guard_count=40 + entry,
        graph_op_count=30,
        fail_type="BackendCompilerFailed" if failed else None,
        fail_reason=(
            "Dynamo recompile limit exceeded. Limit type: recompile_limit. This may be caused by ... "
            "currently set to 8"
            if limit
            else ("backend raised LoweringException" if failed else None)
        ),
        recompile_reason=None,
        start_time_us=int(time.time() * 1e6) - total,
        duration_us=total,
        dynamo_cumulative_compile_time_us=total,
        aot_autograd_cumulative_compile_time_us=total * 2 // 3,
        inductor_cumulative_compile_time_us=total // 2,
        inductor_code_gen_cumulative_compile_time_us=total // 5,
        triton_compile_time_us=0,
        backward_cumulative_compile_time_us=total if backward else None,
        inductor_fx_local_cache_miss_count=1,
        inductor_fx_local_cache_hit_count=0,
        aotautograd_local_cache_miss_count=None,
        aotautograd_local_cache_hit_count=None,
    )


def synthetic(args: argparse.Namespace) -> None:
    import random

    import torch._dynamo.utils as dynamo_utils

    import recompprof

    texts = [
        t
        for s in json.loads(REASON_FIXTURE.read_text())["scenarios"].values()
        for t in s["guard_failures"]
    ]
    codes = _codes(60)
    receiver = None
    if args.otel == "receiver":
        receiver, port = start_receiver()
    else:
        port = free_port()  # closed again: nothing listens there
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "200")
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        session = recompprof.attach(
            run_dir=tmp, exporters=["prometheus", "otel"], prometheus_port=0, step_source="manual"
        )
        try:
            prom = next(e for e in session.exporters if e.name == "prometheus")
            url = prom.url
            entries = [0] * len(codes)
            failures = dynamo_utils.guard_failures
            t_start = time.perf_counter()
            window = time.perf_counter()
            latencies: list[float] = []
            samples: list[tuple[int, float]] = []
            print(
                f"{'events':>9} {'RSS MB':>8} {'us/event':>9} {'scrape->visible ms':>18}  sizes",
                flush=True,
            )
            for i in range(1, args.events + 1):
                if i % 20 == 0:
                    session.step()
                k = rng.randrange(len(codes)) if rng.random() < 0.3 else rng.randrange(6)
                code, n = codes[k], entries[k]
                roll = rng.random()
                if roll < 0.15:
                    session._recorder.on_torch_record(
                        _record(code, k, max(n - 1, 0), rng, backward=True)
                    )
                    continue
                limit = n >= 8
                reasons = failures[code]
                for j in range(min(n, 8)):
                    reasons.append(f"{k}/{j}: " + texts[(i + j) % len(texts)].split(": ", 1)[-1])
                if (
                    len(reasons) > 1000
                ):  # bound the simulated torch record (the reader restarts on a shrink)
                    del reasons[:]
                session._recorder.on_torch_record(
                    _record(code, k, n, rng, limit=limit, failed=not limit and roll > 0.99)
                )
                entries[k] = 0 if limit else n + 1
                if i % args.sample == 0:
                    elapsed = time.perf_counter() - window
                    before = session.snapshot().compiles_total
                    t0 = time.perf_counter()
                    session._recorder.on_torch_record(
                        _record(codes[0], 0, 0, rng)
                    )  # a fresh compile of frame 0
                    body = urllib.request.urlopen(url, timeout=10).read().decode()
                    latency = time.perf_counter() - t0
                    total = sum(
                        float(line.rsplit(" ", 1)[1])
                        for line in body.splitlines()
                        if line.startswith("torch_compile_compiles_total{")
                    )
                    visible = total >= before + 1
                    latencies.append(latency if visible else float("inf"))
                    rss = rss_mb()
                    samples.append((i, rss))
                    sizes = structure_sizes(session)
                    print(
                        f"{i:9d} {rss:8.1f} {elapsed / args.sample * 1e6:9.1f} {latency * 1e3:18.1f}  "
                        + " ".join(f"{k}={v}" for k, v in sizes.items()),
                        flush=True,
                    )
                    window = time.perf_counter()
            wall = time.perf_counter() - t_start
        finally:
            session.detach()
            if receiver is not None:
                receiver.terminate()
        warm = [rss for i, rss in samples if i >= args.warmup]
        growth = max(warm) - warm[0] if warm else float("nan")
        dropped = session.snapshot().events_dropped
        log_mb = (
            sum(p.stat().st_size for p in Path(tmp).rglob("*.jsonl")) / 2**20
            if Path(tmp).exists()
            else 0.0
        )
    print(
        f"\nsynthetic: {args.events} events in {wall:.0f} s ({args.events / wall:.0f} events/s, {wall / args.events * 1e6:.0f} us/event), "
        f"otel {args.otel}, event log {log_mb:.0f} MB"
    )
    print(
        f"RSS after warm-up ({args.warmup} events): first {warm[0]:.1f} MB, max {max(warm):.1f} MB, last {warm[-1]:.1f} MB "
        f"-> growth {growth:.1f} MB (target < 20 MB: {'met' if growth < 20 else 'NOT met'})"
    )
    finite = [x for x in latencies if x != float("inf")]
    print(
        f"event-to-scrape latency over {len(latencies)} samples: median {statistics.median(finite) * 1e3:.1f} ms, "
        f"max {max(latencies) * 1e3:.1f} ms, not visible {len(latencies) - len(finite)} "
        f"(target < 1 s: {'met' if max(latencies) < 1 else 'NOT met'})"
    )
    print(f"dropped: {dropped}")


# -- a real frame recompiling thousands of times -------------------------------------------------------


def real_child(compiles: int, attach: bool, sample: int) -> None:
    import torch
    import torch._dynamo.utils as dynamo_utils

    torch._dynamo.config.recompile_limit = 10**6
    torch._dynamo.config.accumulated_recompile_limit = 10**6
    session = None
    tmp = tempfile.mkdtemp()
    if attach:
        import recompprof

        session = recompprof.attach(run_dir=tmp, exporters=["prometheus"], prometheus_port=0)

    def f(x: torch.Tensor, k: int) -> torch.Tensor:
        return (x * k).relu() + k

    g = torch.compile(f, backend="eager", dynamic=False)
    x = torch.randn(4)
    rows = []
    t0 = time.perf_counter()
    for k in range(compiles):
        g(x, k)
        if (k + 1) % sample == 0:
            torch_reasons = sum(len(v) for v in dynamo_utils.guard_failures.values())
            torch_chars = sum(len(r) for v in dynamo_utils.guard_failures.values() for r in v)
            rows.append(
                {
                    "compiles": k + 1,
                    "rss_mb": rss_mb(),
                    "seconds": time.perf_counter() - t0,
                    "torch_guard_failures": torch_reasons,
                    "torch_guard_failure_mb": torch_chars / 2**20,
                    "ours": structure_sizes(session) if session is not None else {},
                }
            )
    if session is not None:
        session.detach()
    print(json.dumps(rows))


def real(args: argparse.Namespace) -> None:
    results: dict[str, list[list[dict]]] = {"baseline": [], "recompprof": []}  # type: ignore[type-arg]
    for r in range(args.rounds):
        for variant in ("baseline", "recompprof") if r % 2 == 0 else ("recompprof", "baseline"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "real-child",
                    "--compiles",
                    str(args.compiles),
                    "--sample",
                    str(args.sample),
                    *(["--attach"] if variant == "recompprof" else []),
                ],
                capture_output=True,
                text=True,
                check=True,
                env={
                    k: v
                    for k, v in os.environ.items()
                    if not k.startswith(("RECOMPPROF_", "TORCH_TRACE"))
                },
            )
            results[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(
        f"{'compiles':>8} {'base RSS':>9} {'ours RSS':>9} {'ours-base':>9} {'base s':>7} {'ours s':>7} {'ratio':>6} "
        f"{'torch gf':>9} {'torch gf MB':>11}  our structures (last round)"
    )
    for i, row in enumerate(results["recompprof"][-1]):
        base = [rows[i] for rows in results["baseline"]]
        ours = [rows[i] for rows in results["recompprof"]]
        b_rss, o_rss = (
            statistics.median(x["rss_mb"] for x in base),
            statistics.median(x["rss_mb"] for x in ours),
        )
        b_s, o_s = (
            statistics.median(x["seconds"] for x in base),
            statistics.median(x["seconds"] for x in ours),
        )
        print(
            f"{row['compiles']:8d} {b_rss:9.1f} {o_rss:9.1f} {o_rss - b_rss:9.1f} {b_s:7.1f} {o_s:7.1f} {o_s / b_s:6.3f} "
            f"{row['torch_guard_failures']:9d} {row['torch_guard_failure_mb']:11.2f}  "
            + " ".join(f"{k}={v}" for k, v in row["ours"].items())
        )
    diffs = [
        [o["rss_mb"] - b["rss_mb"] for o, b in zip(ro, rb)]
        for ro, rb in zip(results["recompprof"], results["baseline"])
    ]
    growth = [d[-1] - d[0] for d in diffs]
    print(
        f"\nour RSS on top of the baseline grew by {statistics.median(growth):.1f} MB from {results['recompprof'][0][0]['compiles']} "
        f"to {args.compiles} compiles (per round: {', '.join(f'{g:.1f}' for g in growth)}; target < 20 MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("synthetic")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--sample", type=int, default=50_000)
    p.add_argument(
        "--warmup", type=int, default=100_000, help="RSS growth is measured from this event on"
    )
    p.add_argument("--otel", choices=("receiver", "down"), default="receiver")
    p = sub.add_parser("real")
    p.add_argument("--compiles", type=int, default=3000)
    p.add_argument("--sample", type=int, default=250)
    p.add_argument("--rounds", type=int, default=2)
    p = sub.add_parser("real-child")
    p.add_argument("--compiles", type=int)
    p.add_argument("--sample", type=int)
    p.add_argument("--attach", action="store_true")
    args = parser.parse_args()
    if args.what == "synthetic":
        synthetic(args)
    elif args.what == "real":
        real(args)
    else:
        real_child(args.compiles, args.attach, args.sample)


if __name__ == "__main__":
    main()
