"""Many runs of one small CPU job with random input shapes, for measuring the CI gate (history compare).

Each run is a session of its own (``attach()`` .. ``detach()`` with its own run id and run directory,
``torch._dynamo.reset()`` between runs), all in this one process so that thirty runs cost one torch
start-up. Every run draws its input shapes (two inputs, three sizes) from one distribution with its
own seed: the size guard failures vary from run to run (automatic dynamic shapes, and a size of 1
specialised), which is the noise a gate must stay quiet on. A head module's ``variant`` attribute cycles through ``VARIANTS`` values
(module attribute recompiles, the same count every run). The regressions a gate must find:

- ``new-cause``: a global text changes in the last four steps (a steady cause the job never had);
- ``more``: the head cycles through half as many values again (that cause's recompiles x1.5).

    python tests/workloads/gate_noise.py OUT normal:25 new-cause:3 more:3

writes ``OUT/<kind>-<n>/`` (an event log each) with run ids ``gate-<kind>-<n>`` of job ``gate-noise``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch

import recompprof
from recompprof._capture.identity import detect

STEPS = 16
VARIANTS = 9  # the head's values in a normal run: 8 recompiles of the head
MORE = 13  # in a "more" run: 12 recompiles (x1.5)
LENGTHS = (1, 2, 4, 8)
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16)
MODE = "train"  # a global text the body reads: each new value is a recompile


class Body(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)).mean(dim=(0, 1)) + self.fc(y).mean(dim=0)


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.variant = 0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * (self.variant + 1)


def penalty(y: torch.Tensor) -> torch.Tensor:
    """The loss: a fixed shape, and the global ``MODE`` read (stable in a normal run)."""
    return y.pow(2).mean() * len(MODE)


def one_run(out: Path, kind: str, n: int) -> None:
    global MODE
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = 32  # the head's values, and the shapes' recompiles
    MODE = "train"
    rng = random.Random(f"{kind}-{n}")
    torch.manual_seed(rng.randrange(2**31))
    body, head = Body(), Head()
    compiled_body = torch.compile(body, backend="eager")
    compiled_head = torch.compile(head, backend="eager")
    compiled_penalty = torch.compile(penalty, backend="eager")
    opt = torch.optim.SGD(body.parameters(), lr=1e-3)
    variants = MORE if kind == "more" else VARIANTS
    run_id = f"gate-{kind}-{n:02d}"
    identity = detect({"RECOMPPROF_RUN_ID": run_id})
    with recompprof.attach(run_dir=out / f"{kind}-{n:02d}", identity=identity, job="gate-noise"):
        for step in range(STEPS):
            if kind == "new-cause" and step >= STEPS - 4:
                MODE = f"train-{step}"  # a new value each step: one recompile each
            head.variant = step % variants
            x = torch.randn(rng.choice(BATCHES), rng.choice(LENGTHS), 8)
            y = torch.randn(rng.choice(BATCHES), 8)
            loss = compiled_penalty(compiled_head(compiled_body(x, y)))  # a fixed shape
            loss.backward()
            opt.step()
            opt.zero_grad()


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    for spec in argv[1:]:
        kind, _, count = spec.partition(":")
        for n in range(int(count)):
            one_run(out, kind, n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
