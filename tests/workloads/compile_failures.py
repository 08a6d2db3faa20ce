"""A job whose compiles fail, and then carries on to a normal end, under ``recompprof.attach()``.

``python compile_failures.py raised``: the backend raises on the recompile, Dynamo raises it into the job,
which catches it and goes on calling the model (each new size fails again); ``python compile_failures.py
suppressed``: the same with ``torch._dynamo.config.suppress_errors``, so torch runs the frame eagerly
itself. Either way the last compile succeeds and the job ends between compiles; prints ``DONE``.
"""

from __future__ import annotations

import sys

import torch

import recompprof


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


def main() -> None:
    suppressed = sys.argv[1] == "suppressed"
    torch._dynamo.config.suppress_errors = suppressed
    failing = {6, 8}

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        if example_inputs and example_inputs[0].shape[0] in failing:
            raise RuntimeError("this backend refuses the size")
        return gm.forward

    recompprof.attach()
    model = torch.compile(Model(), backend=backend, dynamic=False)
    for n in (4, 6, 8, 10):
        try:
            model(torch.ones(n))
        except Exception as exc:  # noqa: BLE001 - the job carries on, as a training loop with a fallback would
            print(f"FAILED {n}: {type(exc).__name__}", flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
