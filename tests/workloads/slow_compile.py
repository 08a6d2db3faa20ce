"""A job whose recompile is deliberately slow: its backend sleeps while Dynamo's compile is open.

``python slow_compile.py SECONDS [HOLD]``: attaches, compiles ``Model.forward`` for a batch of 4 (fast), then calls it
with a batch of 6, whose recompile sleeps SECONDS in the backend; prints ``DONE``, then waits for the file HOLD (<= 2 min).
"""

from __future__ import annotations

import sys
import time

import torch

import recompprof


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


def slow_after_first(seconds: float):  # type: ignore[no-untyped-def]
    """A backend that compiles its first graph at once and sleeps ``seconds`` in every later one."""
    calls = 0

    def slow_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls > 1:
            time.sleep(seconds)
        return gm.forward

    return slow_backend


def main() -> None:
    recompprof.attach()
    model = torch.compile(Model(), backend=slow_after_first(float(sys.argv[1])), dynamic=False)
    model(torch.ones(4))
    print("FIRST", flush=True)
    model(torch.ones(6))
    print("DONE", flush=True)
    # with HOLD: stay attached, between compiles, until that file exists
    deadline = time.monotonic() + 120
    while len(sys.argv) > 2 and time.monotonic() < deadline:
        try:
            open(sys.argv[2]).close()
            break
        except FileNotFoundError:
            time.sleep(0.1)


if __name__ == "__main__":
    main()
