"""A job whose backward compile is deliberately slow: its backward compiler sleeps while torch compiles it.

``python slow_backward.py SECONDS``: attaches, compiles ``Model.forward`` with an aot_autograd backend (the
forward at once), prints ``FORWARD``, then calls ``.backward()``, whose lazy backward compile sleeps SECONDS
in the backward compiler; prints ``DONE``.
"""

from __future__ import annotations

import sys
import time

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import recompprof


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * 2).sum()


def slow_backward(seconds: float):  # type: ignore[no-untyped-def]
    """An aot_eager-like backend whose backward compiler sleeps ``seconds``."""

    def forward_compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        return make_boxed_func(gm.forward)

    def backward_compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        time.sleep(seconds)
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)


def main() -> None:
    recompprof.attach()
    model = torch.compile(Model(), backend=slow_backward(float(sys.argv[1])))
    loss = model(torch.ones(4, requires_grad=True))
    print("FORWARD", flush=True)
    loss.backward()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
