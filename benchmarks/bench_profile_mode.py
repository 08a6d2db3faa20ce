"""Profile mode: guard failures seen and compile time, parked/evict mechanism vs the unlimited observer vs aot_eager.

Variants, interleaved round-robin in one process (``torch._dynamo.reset()`` between runs; round 0 is
a discarded warm-up):

- ``aot_eager``   the job's own backend, limits lifted so it compiles every specialisation (baseline)
- ``unlimited``   ProfileMode(recompile_limit=None): observer backend, limits lifted (old CompileProfiler)
- ``park``        ProfileMode(recompile_limit=1) with on_reuse: limit 1, evicted variants parked and re-enabled
- ``evict``       ProfileMode(recompile_limit=1) without on_reuse: limit 1, evicting (one retrace per switch)
- ``plain_limit1`` observer backend at limit 1 with nothing else: what torch alone sees

Scenarios: (a) a string argument taking 10 values, (b) inputs alternating A,B x4, (c) a module with a
graph break whose tag changes after the break, (d) forward+backward+SGD steps with a flag flipping
each step. "made" is the number of guard failures a limit-1 run meets (every change of input);
"seen" counts compiles whose reasons reached recompprof (torch's or ours) plus re-enabled switches.
Times are the scenario's wall time and this process's CPU time (``time.process_time``: less disturbed
by other processes on a shared machine), which compiling dominates. Prints figures only; asserts nothing.
It drives recompprof's private profile mode (``recompprof._torch.profile.mode``) directly, without a session.

    .venv/bin/python benchmarks/bench_profile_mode.py --rounds 5
    .venv/bin/python benchmarks/bench_profile_mode.py --rounds 9 --scenarios b_alternating d_training
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from recompprof._torch.profile.mode import ProfileMode, RecompprofObserver


def scenario_strings(backend: str) -> int:
    @torch.compile(backend=backend)
    def scale(x: Any, tag: str) -> Any:
        return torch.sin(x) * len(tag) + torch.cos(x)

    x = torch.randn(8)
    for i in range(10):
        scale(x, "a" * (i + 1))
    return 9


def scenario_alternating(backend: str) -> int:
    @torch.compile(backend=backend)
    def pick(x: Any, tag: str) -> Any:
        return torch.tanh(x) + (1 if tag == "A" else 2)

    x = torch.randn(8)
    tags = ["A", "B"] * 4
    for tag in tags:
        pick(x, tag)
    return len(tags) - 1


class Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = torch.nn.Linear(16, 16)
        self.lin2 = torch.nn.Linear(16, 16)
        self.tag = "t"

    def forward(self, x: Any) -> Any:
        h = torch.relu(self.lin1(x))
        torch._dynamo.graph_break()
        return self.lin2(h) * len(self.tag)


def scenario_graph_breaks(backend: str) -> int:
    model = Branchy()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(4, 16)
    for i in range(6):
        model.tag = "t" * (i + 1)
        compiled(x)
    return 5


class Trainable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 1)
        self.use_relu = False

    def forward(self, x: Any) -> Any:
        h = self.fc1(x)
        h = torch.relu(h) if self.use_relu else torch.tanh(h)
        return self.fc2(h)


def scenario_training(backend: str) -> int:
    torch.manual_seed(0)
    model = Trainable()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    compiled = torch.compile(model, backend=backend)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    for step in range(6):
        model.use_relu = step % 2 == 1
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return 5


SCENARIOS: dict[str, Callable[[str], int]] = {
    "a_strings": scenario_strings,
    "b_alternating": scenario_alternating,
    "c_graph_breaks": scenario_graph_breaks,
    "d_training": scenario_training,
}
VARIANTS = ("aot_eager", "unlimited", "park", "evict", "plain_limit1")


def run_once(scenario: Callable[[str], int], variant: str) -> dict[str, float]:
    torch._dynamo.reset()
    torch._dynamo.utils.clear_compilation_metrics()
    config = torch._dynamo.config
    saved = (config.recompile_limit, config.accumulated_recompile_limit)
    ours: list[int] = []
    mode: ProfileMode | None = None
    stance = None
    try:
        if variant == "aot_eager":
            config.recompile_limit = config.accumulated_recompile_limit = sys.maxsize
        elif variant == "plain_limit1":
            config.recompile_limit = 1
            stance = torch._dynamo.set_stance("default", force_backend=RecompprofObserver())
        else:
            mode = ProfileMode(
                None if variant == "unlimited" else 1, lambda code, cid, reasons: ours.append(1)
            )
            if variant == "park":
                mode.on_reuse = lambda code, cid, reasons: ours.append(1)
            mode.install()
        start, start_cpu = time.perf_counter(), time.process_time()
        made = scenario("aot_eager")
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    finally:
        if mode is not None:
            mode.uninstall()
        if stance is not None:
            torch._dynamo.eval_frame._set_stance(stance.prev)
        config.recompile_limit, config.accumulated_recompile_limit = saved
    metrics = torch._dynamo.utils.get_compilation_metrics()
    seen = sum(1 for m in metrics if m.recompile_reason) + len(ours)
    traces = sum(1 for m in metrics if m.fail_type is None)
    return {"seconds": seconds, "cpu": cpu, "made": made, "seen": seen, "traces": traces}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--rounds", type=int, default=5, help="measured rounds after one warm-up round"
    )
    parser.add_argument(
        "--scenarios", nargs="+", choices=sorted(SCENARIOS), default=sorted(SCENARIOS)
    )
    args = parser.parse_args()
    scenarios = {name: SCENARIOS[name] for name in args.scenarios}
    torch.set_num_threads(1)
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # plain_limit1's limit-hit warnings
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for round_no in range(args.rounds + 1):
        for name, scenario in scenarios.items():
            for variant in VARIANTS:
                outcome = run_once(scenario, variant)
                if round_no:
                    results.setdefault((name, variant), []).append(outcome)
    print(
        f"torch {torch.__version__}, {args.rounds} rounds (+1 warm-up), interleaved; "
        "time ratio = median(variant)/median(baseline), spread = min..max of per-round ratios"
    )
    header = (
        f"{'scenario':<16}{'variant':<14}{'seen/made':>10}{'traces':>8}{'wall s':>8}{'cpu s':>8}"
        f"{'wall vs aot_eager':>20}{'wall vs unlimited':>20}{'cpu vs unlimited':>20}"
    )
    print(header)
    print("-" * len(header))
    for name in scenarios:
        base = [r["seconds"] for r in results[(name, "aot_eager")]]
        unl = [r["seconds"] for r in results[(name, "unlimited")]]
        unl_cpu = [r["cpu"] for r in results[(name, "unlimited")]]
        for variant in VARIANTS:
            runs = results[(name, variant)]
            secs, cpus = [r["seconds"] for r in runs], [r["cpu"] for r in runs]
            print(
                f"{name:<16}{variant:<14}{int(runs[0]['seen']):>5}/{int(runs[0]['made']):<4}"
                f"{int(runs[0]['traces']):>8}{statistics.median(secs):>8.3f}{statistics.median(cpus):>8.3f}"
                f"{_ratio(secs, base):>20}{_ratio(secs, unl):>20}{_ratio(cpus, unl_cpu):>20}"
            )
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    return 0


def _ratio(secs: list[float], base: list[float]) -> str:
    per_round = [s / b for s, b in zip(secs, base)]
    return f"{statistics.median(secs) / statistics.median(base):.2f} ({min(per_round):.2f}..{max(per_round):.2f})"


if __name__ == "__main__":
    sys.exit(main())
