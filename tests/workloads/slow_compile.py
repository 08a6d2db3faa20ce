"""A job whose recompile is deliberately slow: its backend sleeps while Dynamo's compile is open.

``python slow_compile.py SECONDS``: attaches, compiles ``Model.forward`` for a batch of 4 (fast), then
calls it with a batch of 6, whose recompile sleeps SECONDS in the backend; prints ``DONE`` after.
"""

from __future__ import annotations

import sys
import time

import torch

import recompprof


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


def main() -> None:
    seconds = float(sys.argv[1])
    calls = 0

    def slow_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls > 1:
            time.sleep(seconds)
        return gm.forward

    recompprof.attach()
    model = torch.compile(Model(), backend=slow_backend, dynamic=False)
    model(torch.ones(4))
    print("FIRST", flush=True)
    model(torch.ones(6))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
