"""One frame recompiled for each of 12 ints, so each recompile lists every earlier entry's reason again.

The N-th recompile's guard failures are the N texts of the entries before it, each the same text it was
on the recompile before (``k == 3`` for the entry compiled at 3): tests/test_repeated_reasons.py reads
the trace and the live event log. Run under ``recompprof.attach()`` with its settings from
``RECOMPPROF_*`` and ``TORCH_TRACE`` set, so the live event log and the trace record the same compiles.

    TORCH_TRACE=<dir> RECOMPPROF_RUN_DIR=<dir> python tests/workloads/repeated_reasons.py
"""

from __future__ import annotations

import torch
import torch._dynamo

import recompprof

COMPILES = 12


def scaled(x: torch.Tensor, k: int) -> torch.Tensor:
    return (x * k).relu() + k


def main() -> None:
    torch._dynamo.config.recompile_limit = 64
    compiled = torch.compile(scaled, backend="eager", dynamic=False)
    x = torch.randn(4)
    with recompprof.attach():
        for k in range(COMPILES):
            compiled(x, k)
    print("WORKLOAD DONE", flush=True)


if __name__ == "__main__":
    main()
