"""A real CPU training job under ``recompprof.attach()`` that recompiles for known reasons.

Settings come from ``RECOMPPROF_*`` variables. Steps: batch sizes vary (size), a Python float LR
factor changes (python_constant), train/eval switches (module attribute / grad mode), and a global
flag flips (global). ``--hold SECONDS`` keeps the process (and its metrics endpoint) alive after
training and prints ``TRAINING DONE`` first, so a test can scrape the final totals.

    python tests/workloads/train_recompiles.py --steps 12 --hold 30 --backend eager
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import torch

import recompprof

SCALE = 1.0


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 1)
        self.use_dropout = False

    def forward(self, x: torch.Tensor, factor: float) -> torch.Tensor:
        h = torch.relu(self.fc1(x)) * SCALE * factor
        if self.use_dropout:
            h = torch.nn.functional.dropout(h, 0.1, self.training)
        return self.fc2(h)


def slowed(name: str, seconds: float):  # type: ignore[no-untyped-def]
    """Backend ``name`` whose second call (the first recompile) first sleeps ``seconds``, inside the compile."""
    inner = torch._dynamo.lookup_backend(name)
    calls = 0

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 2:
            time.sleep(seconds)
        return inner(gm, example_inputs)

    return backend


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument(
        "--hold", type=float, default=0.0, help="seconds to stay alive after training"
    )
    parser.add_argument("--backend", default="eager")
    parser.add_argument(
        "--changes", type=int, default=4, help="how many kinds of change to apply (0-4)"
    )
    parser.add_argument(
        "--recompile-limit", type=int, default=None, help="torch's recompile_limit for this job"
    )
    parser.add_argument("--summary", default=None, help="write the session's totals as JSON here")
    parser.add_argument(
        "--slow-compile",
        type=float,
        default=0.0,
        help="seconds the backend sleeps in the first recompile (a compile seen running)",
    )
    args = parser.parse_args()
    global SCALE

    torch.manual_seed(0)
    if args.recompile_limit is not None:
        torch._dynamo.config.recompile_limit = args.recompile_limit
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    backend = slowed(args.backend, args.slow_compile) if args.slow_compile else args.backend
    compiled = torch.compile(model, backend=backend)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with recompprof.attach() as session:
        for step in range(args.steps):
            batch = 8 if args.changes < 1 else 8 + 4 * (step % 3)  # size changes
            factor = 1.0 if args.changes < 2 or step < args.steps // 2 else 0.5  # python constant
            if args.changes >= 3 and step == args.steps - 2:
                SCALE = 2.0  # global
            if args.changes >= 4 and step == args.steps - 1:
                model.use_dropout = True  # module attribute
            x = torch.randn(batch, 16)
            loss = compiled(x, factor).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        snap = session.snapshot()
        if args.summary:  # written before the marker line, so a reader that saw the marker finds it
            with open(args.summary + ".tmp", "w") as f:
                json.dump(
                    {
                        "compiles": snap.compiles_total,
                        "recompiles": snap.recompiles_total,
                        "event_log": str(session.event_log_path),
                        "pid": os.getpid(),
                    },
                    f,
                )
            os.replace(args.summary + ".tmp", args.summary)
        print(
            f"TRAINING DONE compiles={snap.compiles_total} recompiles={snap.recompiles_total}",
            flush=True,
        )
        time.sleep(args.hold)
    print("DETACHED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
