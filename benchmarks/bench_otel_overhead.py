"""Step-time overhead of the OpenTelemetry exporter when the collector is down or hanging.

Runs the same CPU training loop in fresh processes, interleaved round by round in shuffled order:
``baseline`` (no recompprof), ``session`` (recompprof attached, no exporter), ``down`` (otel exporter, nothing listening), ``hanging`` (otel
exporter, a collector that accepts and never answers) and ``receiver`` (a working OTLP receiver).
The loop recompiles every ``--recompile-every`` steps (a new batch size, ``dynamic=False``), so spans are produced (and exports attempted,
``OTEL_BSP_SCHEDULE_DELAY=100``) while steps are timed. Prints, per configuration, the median step
time and the ratio to the baseline of the same round (median and min-max over rounds), plus the time
``detach()`` took. No assertion: read the figures.

    .venv/bin/python benchmarks/bench_otel_overhead.py --rounds 5 --steps 300
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import load_test_helper

CONFIGS = ("baseline", "session", "down", "hanging", "receiver")


def child(config: str, steps: int, recompile_every: int) -> None:
    import torch

    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 10_000
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    compiled = torch.compile(model, backend="eager", dynamic=False)
    x = torch.randn(64 + steps // recompile_every + 1, 256)
    session = None
    if config != "baseline":
        import recompprof

        session = recompprof.attach(exporters=[] if config == "session" else ["otel"])
    times: list[float] = []
    compile_steps: list[int] = []
    for step in range(steps):
        batch = x[: 64 + step // recompile_every]  # a new static shape: a recompile
        begin = time.perf_counter()
        loss = compiled(batch).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - begin)
        if step % recompile_every == 0:
            compile_steps.append(step)
    detach = 0.0
    dropped: dict[str, int] = {}
    if session is not None:
        exporter = next((e for e in session.exporters if e.name == "otel"), None)
        begin = time.perf_counter()
        session.detach()
        detach = time.perf_counter() - begin
        dropped = exporter.dropped() if exporter is not None else {}
    steady = [t for i, t in enumerate(times) if i not in set(compile_steps) and i >= 5]
    print(
        json.dumps(
            {
                "median_step": statistics.median(steady),
                "compile_step_total": sum(times[i] for i in compile_steps),
                "detach": detach,
                "dropped": dropped,
            }
        )
    )


def run(config: str, steps: int, recompile_every: int, endpoint: str | None, run_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RECOMPPROF_"))}
    env.update(
        {
            "RECOMPPROF_RUN_DIR": str(run_dir),
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "10",
        }
    )
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            config,
            "--steps",
            str(steps),
            "--recompile-every",
            str(recompile_every),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--recompile-every", type=int, default=25)
    parser.add_argument("--child", choices=CONFIGS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.recompile_every)
        return 0
    import tempfile

    otlp = load_test_helper(
        "otlp_receiver"
    )  # the test suite's OTLP receiver: it counts the spans it gets
    OtlpReceiver, hanging_endpoint, refused_endpoint = (
        otlp.OtlpReceiver,
        otlp.hanging_endpoint,
        otlp.refused_endpoint,
    )

    results: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    ratios: dict[str, list[float]] = {c: [] for c in CONFIGS}
    with OtlpReceiver() as rx, hanging_endpoint() as hanging, tempfile.TemporaryDirectory() as tmp:
        endpoints = {
            "baseline": None,
            "session": None,
            "down": refused_endpoint(),
            "hanging": hanging,
            "receiver": rx.endpoint,
        }
        for r in range(args.rounds):
            order = list(CONFIGS)
            random.shuffle(order)
            round_results = {
                c: run(c, args.steps, args.recompile_every, endpoints[c], Path(tmp) / f"{c}-{r}")
                for c in order
            }
            for c in CONFIGS:
                results[c].append(round_results[c])
                ratios[c].append(
                    round_results[c]["median_step"] / round_results["baseline"]["median_step"]
                )
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(f"{c} {round_results[c]['median_step'] * 1e3:.3f} ms" for c in CONFIGS),
                flush=True,
            )
        spans = len(rx.spans)
    print(
        f"\n{args.rounds} rounds x {args.steps} steps, a recompile every {args.recompile_every} steps, "
        f"interleaved in shuffled order; receiver got {spans} spans"
    )
    print(
        f"{'config':<10} {'median step ms':>15} {'ratio median':>13} {'ratio min-max':>15} "
        f"{'compile steps s':>16} {'detach s (max)':>15}  dropped (last round)"
    )
    for c in CONFIGS:
        med = statistics.median(r["median_step"] for r in results[c]) * 1e3
        rs = ratios[c]
        comp = statistics.median(r["compile_step_total"] for r in results[c])
        det = max(r["detach"] for r in results[c])
        print(
            f"{c:<10} {med:>15.3f} {statistics.median(rs):>13.3f} {min(rs):>7.3f}-{max(rs):<7.3f} "
            f"{comp:>16.2f} {det:>15.2f}  {results[c][-1]['dropped']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
